//! The cross-tenant matrix over the Unix socket with two real uids: the real `hpcgate run --uds`
//! (as root) maps uid 61001 to tenant `chem` and 61002 to `bio`; each tenant's MCP client is
//! this test binary re-executed as that uid (`Command::uid`/`gid`, numeric: no passwd entry is
//! needed), so the gateway learns who calls only from `SO_PEERCRED`. chem sets up, bio runs the
//! shared table of `support/matrix.rs` against chem's ids, chem checks its objects, an unmapped
//! uid (61003) is refused, and bio's audit query shows none of chem's records.
//!
//! Needs root (to run clients as other uids); elsewhere it says so and passes vacuously.

use crate::support::served;

use crate::support::matrix;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;

use serde_json::Value;
use served::{INITIALIZE, MCP_POST, Served, config, exchange};

use crate::support::reexec;

const CHEM_UID: u32 = 61001;
const BIO_UID: u32 = 61002;
const STRANGER_UID: u32 = 61003;

/// Environment of a client run: its role, the socket, chem's job id.
const ROLE: &str = "HPCGATE_TEST_UDS_ROLE";
const SOCKET: &str = "HPCGATE_TEST_UDS_SOCKET";
const JOB: &str = "HPCGATE_TEST_UDS_JOB";
/// The line prefix by which the chem setup reports its job id on stderr.
const JOB_LINE: &str = "uds-tenancy-job=";

#[tokio::test(flavor = "multi_thread")]
async fn two_uids_on_one_socket_see_nothing_of_each_other() {
    if !crate::support::root_else_skip("running clients as other uids") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The clients must reach the socket: search (not list) permission on the temp dir.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let public = dir.path().join("public");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = config(
        dir.path(),
        &format!(
            "policies = []\n[tenants.chem]\nunix_uids = [{CHEM_UID}]\n\
             [tenants.bio]\nunix_uids = [{BIO_UID}]\n"
        ),
    );
    let socket = public.join("gw.sock");
    let served = Served::start(dir.path(), &config, &["--uds", socket.to_str().unwrap()]).await;
    let mode = std::fs::symlink_metadata(&socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o666, "a socket for other uids: {mode:o}");

    let setup = client_as(CHEM_UID, "chem-setup", &socket, "").await;
    let job = setup
        .lines()
        .find_map(|line| line.strip_prefix(JOB_LINE))
        .unwrap_or_else(|| panic!("chem's setup reported no job: {setup}"))
        .to_owned();
    client_as(BIO_UID, "bio-attack", &socket, &job).await;
    client_as(STRANGER_UID, "stranger", &socket, "").await;
    matrix::assert_bio_audit_scoped(&dir.path().join("state/audit"));
    client_as(CHEM_UID, "chem-check", &socket, &job).await;

    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    let audit = served::audit_text(&dir.path().join("state/audit"));
    assert!(
        audit.contains(&format!("\"uid:{BIO_UID}\"")),
        "bio's calls name its uid"
    );
}

/// Runs this binary's [`client`] test as `uid` in `role`; panics with its output unless it
/// passed, else returns its stderr.
async fn client_as(uid: u32, role: &str, socket: &Path, job: &str) -> String {
    let mut command = reexec("uds_tenancy::client");
    command
        .args(["--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(SOCKET, socket)
        .env(JOB, job)
        .env("HOME", "/")
        .current_dir("/")
        .uid(uid)
        .gid(uid);
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "client `{role}` as uid {uid} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stderr
}

/// The client side, run by the test above as another uid (with [`ROLE`] set); when run
/// directly it says it skipped and does nothing.
#[test]
#[ignore = "a client role, run as another uid by two_uids_on_one_socket_see_nothing_of_each_other"]
fn client() {
    let Ok(role) = std::env::var(ROLE) else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: a client role of two_uids_on_one_socket_see_nothing_of_each_other, which sets {ROLE}"
        );
        return;
    };
    let socket = std::env::var(SOCKET).unwrap();
    let job = std::env::var(JOB).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // rmcp's transport spawns its worker when built: inside the runtime.
    let _inside = runtime.enter();
    if role == "stranger" {
        let (status, body) = runtime.block_on(async {
            let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
            exchange(stream, "POST", "/mcp", &MCP_POST, INITIALIZE).await
        });
        assert_eq!(status, 403, "an unmapped uid is refused: {body}");
        assert!(body.contains("may not use this gateway"), "{body}");
        return;
    }
    let client = runtime.block_on(crate::support::served::unix_client(Path::new(&socket)));
    let mut mcp =
        |tool: &str, arguments: Value| matrix::mcp_call(&runtime, &client, tool, arguments);
    match role.as_str() {
        "chem-setup" => {
            let job = matrix::chem_setup(&mut mcp);
            let _ = writeln!(std::io::stderr(), "{JOB_LINE}{job}");
        }
        "bio-attack" => matrix::bio_attack(&mut mcp, &job),
        "chem-check" => matrix::chem_check(&mut mcp, &job),
        other => panic!("unknown role `{other}`"),
    }
    runtime.block_on(client.cancel()).unwrap();
}
