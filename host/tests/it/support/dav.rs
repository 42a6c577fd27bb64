//! The WebDAV tests' shared set-up: a gateway configuration with tenants, extras and a path
//! rule, instances made in process, `curl` run without a shell, and where an instance's
//! workspace is on the host.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::gateway as in_process;

use hpcgate::auth::bearer::{generate_token, hash_token};
use serde_json::json;

/// chem (tokens alice and carol) may write at most 1 MiB in a workspace; writes under
/// `/workspace/inputs/` are denied. `dir/refdata` is an extra for every tenant, `dir/chemdata`
/// one for chem only.
fn config(dir: &Path, chem: &str, carol: &str, bio: &str) -> String {
    format!(
        r#"
[dav]
enabled = true
[dav.extras.refdata]
path = "{}"
[dav.extras.chemdata]
path = "{}"
tenants = ["chem"]

[tenants.chem]
tokens = [{{ label = "alice", sha256 = "{}" }}, {{ label = "carol", sha256 = "{}" }}]
quotas = {{ max_workspace_bytes = 1048576 }}

[tenants.bio]
tokens = [{{ label = "bob", sha256 = "{}" }}]

[[policies]]
name = "paths"
module = "stock:path-rules"
[policies.config]
deny_write = ["/workspace/inputs/**"]
"#,
        dir.join("refdata").display(),
        dir.join("chemdata").display(),
        hex::encode(hash_token(chem)),
        hex::encode(hash_token(carol)),
        hex::encode(hash_token(bio)),
    )
}

/// One curl run: status, body, response headers (lowercased names).
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: String,
}

/// Runs `curl` with `args` (never through a shell), bounded to 20 s.
pub fn curl(scratch: &Path, args: &[&str]) -> Reply {
    let (body, headers) = (scratch.join("body"), scratch.join("headers"));
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-o"])
        .arg(&body)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs (Debian package curl)");
    let status = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    Reply {
        status,
        body: std::fs::read_to_string(&body).unwrap_or_default(),
        headers: std::fs::read_to_string(&headers)
            .unwrap_or_default()
            .to_lowercase(),
    }
}

pub struct Setup {
    pub dir: tempfile::TempDir,
    pub chem: String,
    /// A second token of chem's, another principal of the same tenant.
    pub carol: String,
    pub bio: String,
    /// chem's run1 workspace on the host, where a job could plant things.
    pub workspace: PathBuf,
}

/// Instances made in process (chem: run1, secret1, old (archived); bio: run1), then the
/// gateway process started on the same state directory.
pub fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let [chem, carol, bio] = [(); 3].map(|()| generate_token().unwrap());
    for extra in ["refdata", "chemdata"] {
        std::fs::create_dir(dir.path().join(extra)).unwrap();
        std::fs::write(dir.path().join(extra).join("ref.txt"), extra).unwrap();
    }
    {
        let gw = in_process::open(dir.path(), &config(dir.path(), &chem, &carol, &bio));
        let make = |tenant: &str, id: &str| {
            in_process::ok(gw.call(
                &in_process::caller(tenant),
                "create_instance",
                in_process::args(json!({ "instance_id": id })),
            ))
        };
        make("chem", "run1");
        make("chem", "secret1");
        make("chem", "old");
        make("bio", "run1");
        in_process::ok(gw.call(
            &in_process::caller("chem"),
            "archive_instance",
            in_process::args(json!({ "instance_id": "old" })),
        ));
    }
    let workspace = find_workspace(&dir.path().join("state"), "chem", "run1");
    Setup {
        dir,
        chem,
        carol,
        bio,
        workspace,
    }
}

/// The host directory that is `/workspace` of `tenant`'s `id` (found by its marker file).
pub fn find_workspace(state: &Path, tenant: &str, id: &str) -> PathBuf {
    let mut stack = vec![state.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                let s = path.to_string_lossy();
                if s.ends_with(&format!("{id}/workspace")) && s.contains(tenant) {
                    return path;
                }
                stack.push(path);
            }
        }
    }
    panic!("no workspace for {tenant}/{id} under {}", state.display());
}
