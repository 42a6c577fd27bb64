//! `contrib/systemd`: the units pass `systemd-analyze verify` without a warning, and the
//! gateway serves on the socket systemd passes (socket activation, driven here by systemd's own
//! `systemd-socket-activate`, which passes descriptors exactly as systemd does).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncBufReadExt as _;

use crate::support::served::config;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/systemd")
}

fn tool(name: &str) -> &'static str {
    for dir in ["/usr/bin", "/bin"] {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return Box::leak(path.display().to_string().into_boxed_str());
        }
    }
    panic!("`{name}` is missing: apt-get install systemd")
}

#[test]
fn the_units_verify_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    for unit in ["hpcgate.service", "hpcgate.socket"] {
        let text = std::fs::read_to_string(contrib().join(unit)).unwrap();
        // verify wants the ExecStart binary to exist: the one built here stands in for
        // /usr/bin/hpcgate.
        let text = text.replace("/usr/bin/hpcgate", env!("CARGO_BIN_EXE_hpcgate"));
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let verified = std::process::Command::new(tool("systemd-analyze"))
        .args([
            "verify",
            "--man=no",
            "./hpcgate.socket",
            "./hpcgate.service",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(verified.status.success(), "{said}");
    // Unknown keys and bad values are warnings with exit 0: none is allowed.
    assert!(said.trim().is_empty(), "{said}");
}

/// `systemd-socket-activate` binds the socket and starts `hpcgate run --uds` on the first
/// connection with the socket as descriptor 3: the gateway serves MCP on it, and the socket
/// belongs to the activator (left in place when the gateway stops).
#[tokio::test]
async fn the_gateway_serves_on_the_socket_systemd_passes() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "");
    let socket = dir.path().join("hpcgate.sock");
    let mut activator = activate(dir.path(), &config, &socket, &socket);
    wait_for_socket(&socket).await;
    let client = crate::support::served::unix_client(&socket).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "create_instance"));
    client.cancel().await.unwrap();
    let pid = rustix::process::Pid::from_raw(activator.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = activator.wait().await.unwrap();
    assert!(status.success(), "{status:?}");
    let audit = crate::support::served::audit_text(&dir.path().join("state/audit"));
    assert!(audit.contains("\"gateway.started\""), "{audit}");
}

/// A unit whose `ListenStream=` is not the `--uds` path: refused, naming both.
#[tokio::test]
async fn a_socket_at_another_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "");
    let socket = dir.path().join("systemd.sock");
    let mut activator = activate(dir.path(), &config, &socket, &dir.path().join("other.sock"));
    // The first connection (made while waiting) starts the gateway, which refuses the socket
    // and exits.
    wait_for_socket(&socket).await;
    let mut lines = tokio::io::BufReader::new(activator.stderr.take().unwrap()).lines();
    let mut said = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        said.push_str(&line);
        said.push('\n');
        if line.contains("make `ListenStream=` and `--uds` the same path") {
            break;
        }
    }
    assert!(
        said.contains("other.sock") && said.contains("systemd.sock"),
        "{said}"
    );
    activator.kill().await.unwrap();
}

/// `systemd-socket-activate -l LISTEN hpcgate run --uds UDS`.
fn activate(dir: &Path, config: &Path, listen: &Path, uds: &Path) -> tokio::process::Child {
    tokio::process::Command::new(tool("systemd-socket-activate"))
        .arg("-l")
        .arg(listen)
        .arg(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["run", "--config"])
        .arg(config)
        .arg("--uds")
        .arg(uds)
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until the activator listens on `socket`. The file appears at `bind`, before `listen`,
/// and a connection in between is refused: so this connects, and its connection (closed at
/// once) is the first one, which starts the gateway.
async fn wait_for_socket(socket: &Path) {
    for _ in 0..500 {
        match tokio::net::UnixStream::connect(socket).await {
            Ok(_) => return,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("connecting to {}: {e}", socket.display()),
        }
    }
    panic!(
        "systemd-socket-activate did not listen on {}",
        socket.display()
    );
}
