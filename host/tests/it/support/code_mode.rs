//! Helpers shared by the code-mode Slurm test modules: the real `hpcgate run` over streamable
//! HTTP on a port chosen before it starts (`[code_mode] url` names it), the rmcp client with a
//! bearer token, tool calls, a raw MCP `initialize`, and a config for tenant `chem` on the local
//! Slurm cluster.

use std::path::{Path, PathBuf};

use hpcgate::auth::bearer::hash_token;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use super::served::{self, INITIALIZE, Served, exchange};
use super::slurm;

/// A free loopback port for the gateway (the URL in its config names it before it starts).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The real `hpcgate run` with its state in `dir`, over streamable HTTP on `port` (0: any).
pub async fn serve(dir: &Path, config: &Path, port: u16) -> Served {
    let port = port.to_string();
    Served::start(
        dir,
        config,
        &["--transport", "streamable-http", "--port", &port],
    )
    .await
}

/// An rmcp client of `served` with `token` as its bearer token.
pub async fn client(served: &Served, token: &str) -> RunningService<RoleClient, ()> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.address.as_str())
            .auth_header(token.to_owned()),
    );
    ().serve(transport).await.unwrap()
}

/// The result of one call: (is_error, structured or text).
pub async fn call(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> (bool, Value) {
    let result = peer
        .call_tool(
            CallToolRequestParams::new(tool).with_arguments(arguments.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let text: String = (result.content.iter())
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    let is_error = result.is_error == Some(true);
    (
        is_error,
        match result.structured_content {
            Some(s) if !is_error => s,
            _ => Value::String(text),
        },
    )
}

/// A call that must succeed: its structured result (or its text).
pub async fn ok(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> Value {
    let (is_error, value) = call(peer, tool, arguments).await;
    assert!(!is_error, "{tool}: {value}");
    value
}

/// An MCP `initialize` POST with `authorization`: the status and body.
pub async fn initialize(served: &Served, path: &str, authorization: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(served.authority())
        .await
        .unwrap();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", authorization),
    ];
    exchange(stream, "POST", path, &headers, INITIALIZE).await
}

/// A gateway config: tenant `chem` with `agent_token`, the local Slurm cluster, then `extra`.
pub fn slurm_config(dir: &Path, agent_token: &str, extra: &str) -> PathBuf {
    served::config(
        dir,
        &format!(
            "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n\
             [slurm]\nenabled = true\nslurm_conf = {:?}\n{extra}",
            hex::encode(hash_token(agent_token)),
            slurm::slurm_conf().display().to_string(),
        ),
    )
}

/// `[code_mode] url`: the gateway's own listener on `port`, as compute nodes reach it.
pub fn code_mode_url(port: u16) -> String {
    format!("[code_mode]\nurl = \"http://127.0.0.1:{port}/mcp\"\n")
}
