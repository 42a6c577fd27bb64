//! Helpers shared by the transport test modules: the real `hpcgate run` serving HTTP (TCP or a
//! Unix socket) as a child process, found by the `hpcgate: listening on …` line it prints, and
//! one raw HTTP/1.1 exchange for what an MCP client does not do (`/healthz`, a foreign Origin).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// A config file in `dir` with its state under `dir/state` and `extra` TOML appended.
pub fn config(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("gateway.toml");
    let text = format!(
        "state_dir = {:?}\n{extra}",
        dir.join("state").display().to_string()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `hpcgate run` as a child, once it listens.
pub struct Served {
    pub child: Child,
    /// What follows `hpcgate: listening on `: `http://127.0.0.1:PORT/mcp` or `unix:PATH (…)`.
    pub address: String,
    stderr: tokio::task::JoinHandle<String>,
}

impl Served {
    /// Runs `hpcgate run --config CONFIG ARGS…` with a private HOME and waits for its listening
    /// line; panics with its stderr if it exits first.
    pub async fn start(dir: &Path, config: &Path, args: &[&str]) -> Served {
        let mut child = command(dir, config, args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let address = loop {
            match lines.next_line().await.unwrap() {
                Some(line) => match line.strip_prefix("hpcgate: listening on ") {
                    Some(address) => break address.to_owned(),
                    None => seen.push_str(&format!("{line}\n")),
                },
                None => panic!(
                    "hpcgate exited before listening ({:?}): {seen}",
                    child.wait().await
                ),
            }
        };
        // Keep draining stderr so the gateway never blocks on a full pipe.
        let stderr = tokio::spawn(async move {
            let mut rest = seen;
            while let Ok(Some(line)) = lines.next_line().await {
                rest.push_str(&line);
                rest.push('\n');
            }
            rest
        });
        Served {
            child,
            address,
            stderr,
        }
    }

    /// `hpcgate run` over streamable HTTP on a free loopback port.
    pub async fn http(dir: &Path, config: &Path) -> Served {
        Served::start(
            dir,
            config,
            &["--transport", "streamable-http", "--port", "0"],
        )
        .await
    }

    /// `HOST:PORT` of an HTTP gateway (its address is `http://HOST:PORT/mcp`).
    pub fn authority(&self) -> String {
        self.address
            .strip_prefix("http://")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("unexpected listening line: {}", self.address))
            .to_owned()
    }

    /// SIGTERM, then the exit status and everything the gateway wrote on stderr.
    pub async fn stop(self) -> (ExitStatus, String) {
        self.signal(rustix::process::Signal::TERM).await
    }

    /// `signal`, then the exit status and everything the gateway wrote on stderr.
    pub async fn signal(mut self, signal: rustix::process::Signal) -> (ExitStatus, String) {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let status = self.child.wait().await.unwrap();
        (status, self.stderr.await.unwrap())
    }
}

/// `hpcgate run --config CONFIG ARGS…` with a private HOME and the shared policy cache.
pub fn command(dir: &Path, config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(args)
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

/// One HTTP/1.1 request over `stream` (`Connection: close`; `Host: localhost` unless `headers`
/// name another): the status code and the body.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str("Host: localhost\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A JSON-RPC `initialize` request body, as an MCP client's first POST.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// Headers an MCP POST carries.
pub const MCP_POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// A client that keeps every progress notification.
#[derive(Clone, Default)]
pub struct ProgressLog(pub std::sync::Arc<std::sync::Mutex<Vec<ProgressNotificationParam>>>);

impl rmcp::ClientHandler for ProgressLog {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }
}

/// Every audit file under `dir` (`state/audit`), concatenated.
pub fn audit_text(dir: &Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jsonl"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect()
}

/// An rmcp client of the gateway's MCP endpoint on the Unix socket `socket`.
pub async fn unix_client(socket: &Path) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_unix_socket(
        socket.to_str().expect("a UTF-8 socket path"),
        "http://localhost/mcp",
    );
    ().serve(transport)
        .await
        .expect("an MCP session over the socket")
}
