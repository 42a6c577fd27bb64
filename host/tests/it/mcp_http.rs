//! The real binary over streamable HTTP and a Unix socket with the rmcp client: tools after
//! policy, a file round trip, a denial as a tool error, `/healthz`, the Origin check, refusals
//! at start, graceful shutdown. (Who may reach the gateway, by `Host`, `Origin`, socket peer
//! and TCP peer: `http_access`.)

use std::path::Path;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::support::served as support;
use support::{INITIALIZE, MCP_POST, Served, config, exchange};

pub const POLICIES: &str = "\n[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n\
     [policies.config]\ndeny = [\"list_archived_instances\"]\n\n[[policies]]\nname = \"paths\"\n\
     module = \"stock:path-rules\"\n[policies.config]\ndeny_write = [\"**/.git/**\"]\n";

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

/// What every transport must do for an MCP client: 3 allowed calls and one denial.
pub async fn exercise(client: &RunningService<RoleClient, ()>) {
    let info = client.peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("hpcgate")
    );
    let names: Vec<_> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.iter().any(|n| n == "write_file"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "list_archived_instances"),
        "hidden by policy: {names:?}"
    );

    let created = client
        .call_tool(call("create_instance", json!({"instance_id": "web1"})))
        .await
        .unwrap();
    assert_eq!(created.is_error, Some(false), "{created:?}");
    let written = client
        .call_tool(call(
            "write_file",
            json!({"instance_id": "web1", "path": "a.txt", "content": "over http"}),
        ))
        .await
        .unwrap();
    assert_eq!(written.is_error, Some(false), "{written:?}");
    let read = client
        .call_tool(call(
            "read_file",
            json!({"instance_id": "web1", "path": "a.txt"}),
        ))
        .await
        .unwrap();
    assert_eq!(read.structured_content.unwrap()["content"], "over http");

    let denied = client
        .call_tool(call(
            "write_file",
            json!({"instance_id": "web1", "path": ".git/x", "content": "no"}),
        ))
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true));
    let text = serde_json::to_string(&denied.content).unwrap();
    assert!(text.contains("denied by policy `paths`"), "{text}");
}

/// The audit log holds the 7 records of [`exercise`] (decision and outcome of the create and
/// the write, one record each for the read and the denial, one for the instance's creation),
/// every one naming `who`, between the gateway's start and stop records.
pub fn assert_audited(dir: &Path, who: &str) {
    let audit = dir.join("state/audit");
    let report = hpcgate::audit::verify(&audit, None).unwrap();
    assert!(report.intact && report.records == 9, "{report:?}");
    let mut events = Vec::new();
    for file in std::fs::read_dir(&audit).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in std::fs::read_to_string(path).unwrap().lines() {
                let record: serde_json::Value = serde_json::from_str(line).unwrap();
                let event = record["event"].as_str().unwrap().to_owned();
                if !event.starts_with("gateway.") {
                    assert!(line.contains(who), "{who} missing in {line}");
                }
                events.push(event);
            }
        }
    }
    assert_eq!(events.len(), 9);
    assert_eq!(events.first().map(String::as_str), Some("gateway.started"));
    assert_eq!(events.last().map(String::as_str), Some("gateway.stopped"));
}

#[tokio::test]
async fn an_mcp_client_works_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), POLICIES);
    let served = Served::http(dir.path(), &config).await;
    let url = served.address.clone();
    let authority = served.authority();

    let client = ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await.unwrap();
    exercise(&client).await;
    client.cancel().await.unwrap();

    let tcp = || TcpStream::connect(authority.as_str());
    let (status, body) = exchange(tcp().await.unwrap(), "GET", "/healthz", &[], "").await;
    assert_eq!(status, 200, "{body}");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (health["status"].as_str(), health["version"].as_str()),
        (Some("ok"), Some(env!("CARGO_PKG_VERSION")))
    );

    let foreign = [MCP_POST[0], MCP_POST[1], ("Origin", "http://evil.example")];
    let (status, body) = exchange(tcp().await.unwrap(), "POST", "/mcp", &foreign, INITIALIZE).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("not a loopback origin"), "{body}");
    let local_origin = format!("http://{authority}");
    let local = [MCP_POST[0], MCP_POST[1], ("Origin", local_origin.as_str())];
    let (status, body) = exchange(tcp().await.unwrap(), "POST", "/mcp", &local, INITIALIZE).await;
    assert_eq!(status, 200, "{body}");

    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    assert_audited(dir.path(), "\"anonymous\"");
}

/// A body of many small values would parse into many times its size before any limit of the
/// gateway's applies: it is refused unparsed, while a file's content of the same size, one
/// string full of brackets and commas, is written.
#[tokio::test]
async fn a_body_of_many_small_values_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), POLICIES);
    let served = Served::http(dir.path(), &config).await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(
            served.address.as_str(),
        ))
        .await
        .unwrap();
    let content = "[0,{".repeat(700_000);
    for (tool, arguments) in [
        ("create_instance", json!({ "instance_id": "run1" })),
        (
            "write_file",
            json!({ "instance_id": "run1", "path": "data.txt", "content": content }),
        ),
    ] {
        let result = client.call_tool(call(tool, arguments)).await.unwrap();
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    }
    let stat = json!({ "instance_id": "run1", "path": "data.txt" });
    let stat = client.call_tool(call("stat_path", stat)).await.unwrap();
    let facts = stat.structured_content.unwrap();
    assert_eq!(facts["size"], 2_800_000, "{facts}");
    client.cancel().await.unwrap();

    let zeros = vec!["0"; 300_000].join(",");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"write_file","arguments":{{"instance_id":"run1","path":"zeros.txt","content":[{zeros}]}}}}}}"#
    );
    let tcp = TcpStream::connect(served.authority().as_str())
        .await
        .unwrap();
    let (status, answer) = exchange(tcp, "POST", "/mcp", &MCP_POST, &body).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("JSON values"), "{answer}");
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// `hpcgate run ARGS…` exits 2 before listening, saying `expected` on stderr.
async fn refuses(dir: &Path, config: &Path, args: &[&str], expected: &str) {
    let output = support::command(dir, config, args)
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
}

#[tokio::test]
async fn unsafe_listening_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let single = config(dir.path(), "");
    let http = ["--transport", "streamable-http", "--port", "0"];
    refuses(
        dir.path(),
        &single,
        &[&http[..], &["--host", "0.0.0.0"]].concat(),
        "is not a loopback address",
    )
    .await;
    let not_a_socket = dir.path().join("file");
    std::fs::write(&not_a_socket, "keep me").unwrap();
    refuses(
        dir.path(),
        &single,
        &["--uds", not_a_socket.to_str().unwrap()],
        "exists and is not a socket",
    )
    .await;
    assert_eq!(std::fs::read_to_string(&not_a_socket).unwrap(), "keep me");
}

/// With `[tenants]`, TCP serves only callers with a configured bearer token: none, a wrong one
/// or a revoked one gets 401 before any MCP handling; a good one acts as its tenant, and the
/// token's label (never the token) is the principal in the audit log.
#[tokio::test]
async fn multi_tenant_http_needs_a_bearer_token() {
    use hpcgate::auth::bearer::{generate_token, hash_token};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let dir = tempfile::tempdir().unwrap();
    let (alice, bob) = (generate_token().unwrap(), generate_token().unwrap());
    let tenants = format!(
        "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n[tenants.bio]\ntokens = [{{ label = \"bob\", sha256 = \"{}\" }}]\n",
        hex::encode(hash_token(&alice)),
        hex::encode(hash_token(&bob))
    );
    let config = config(dir.path(), &format!("{tenants}{POLICIES}"));
    let served = Served::http(dir.path(), &config).await;
    let url = served.address.clone();
    let authority = served.authority();
    let post = |auth: Option<String>| {
        let authority = authority.clone();
        async move {
            let mut headers = MCP_POST.to_vec();
            let value = auth.unwrap_or_default();
            if !value.is_empty() {
                headers.push(("Authorization", value.as_str()));
            }
            let stream = TcpStream::connect(authority.as_str()).await.unwrap();
            exchange(stream, "POST", "/mcp", &headers, INITIALIZE).await
        }
    };
    let (status, body) = post(None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("authentication required"), "{body}");
    let forged = format!("Bearer {}", generate_token().unwrap());
    let (status, body) = post(Some(forged)).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = post(Some(format!("Bearer {alice}"))).await;
    assert_eq!(status, 200);

    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(alice.clone()),
        ))
        .await
        .unwrap();
    exercise(&client).await;
    client.cancel().await.unwrap();
    // bob is another tenant: alice's instance does not exist for him.
    let bobs = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(bob.clone()),
        ))
        .await
        .unwrap();
    let read = bobs
        .call_tool(
            CallToolRequestParams::new("read_file").with_arguments(
                json!({"instance_id": "web1", "path": "a.txt"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(read.is_error, Some(true));
    assert!(!serde_json::to_string(&read).unwrap().contains("over http"));
    bobs.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    assert!(log.contains("\"token:alice\"") && log.contains("\"token:bob\""));
    assert!(
        !log.contains(&alice) && !log.contains(&bob),
        "tokens are never logged"
    );
}

#[tokio::test]
async fn sigterm_stops_the_stdio_gateway_cleanly_with_stdin_open() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "");
    let mut child = support::command(dir.path(), &config, &[])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{INITIALIZE}\n").as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut answer).await.unwrap();
    assert!(answer.contains("\"hpcgate\""), "{answer}");
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status:?}");
    drop(stdin);
}

/// SIGHUP re-reads the configuration: a policy change applies to the next call without a
/// restart, a broken file is refused while the running set stays, and both are audited.
#[tokio::test]
async fn sighup_reloads_the_policies_and_refuses_a_broken_set() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), POLICIES);
    let served = Served::http(dir.path(), &config).await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(
            served.address.as_str(),
        ))
        .await
        .unwrap();
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    assert!(
        !names(client.list_all_tools().await.unwrap())
            .contains(&"list_archived_instances".to_owned())
    );

    let audit = dir.path().join("state/audit/audit-000001.jsonl");
    // Complete lines only: the gateway may be midway through appending a record.
    let reloads = || {
        std::fs::read_to_string(&audit)
            .unwrap()
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n') && l.contains("\"policies.reloaded\""))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let hangup = |count: usize| {
        let pid = rustix::process::Pid::from_raw(served.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while reloads().len() < count {
            assert!(std::time::Instant::now() < deadline, "no reload record");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };

    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("deny = [\"list_archived_instances\"]", "deny = []"),
    )
    .unwrap();
    hangup(1);
    assert!(
        names(client.list_all_tools().await.unwrap())
            .contains(&"list_archived_instances".to_owned())
    );

    std::fs::write(
        &config,
        format!("{text}\n[[policies]]\nname = \"broken\"\nmodule = \"missing.wasm\"\n"),
    )
    .unwrap();
    hangup(2);
    assert!(reloads()[1].contains("missing.wasm"), "{:?}", reloads());
    assert!(
        names(client.list_all_tools().await.unwrap())
            .contains(&"list_archived_instances".to_owned()),
        "the running set stays after a refused reload"
    );
    client.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(stderr.contains("reload refused"), "{stderr}");
}

/// Brief reads from many HTTP clients at once run on the runtime's workers and await their
/// records from the audit log's commit thread: each answer, allowed, failed or denied, comes
/// only once its record is in the log, the calls share `fdatasync`ed batches, and the chain
/// stays whole.
#[tokio::test]
async fn brief_reads_sent_together_over_http_are_each_recorded_before_their_answer() {
    let dir = tempfile::tempdir().unwrap();
    let policies = format!("{POLICIES}deny_read = [\"**/secret/**\"]\n");
    let config = config(dir.path(), &policies);
    let served = Served::http(dir.path(), &config).await;
    let url = served.address.clone();
    let connect =
        || async { ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await.unwrap() };
    let first = connect().await;
    let created = first
        .call_tool(call("create_instance", json!({"instance_id": "burst"})))
        .await
        .unwrap();
    assert_eq!(created.is_error, Some(false), "{created:?}");
    // 72 calls: within what one tenant may have in flight and waiting at once on a listener
    // (16 places, 64 waiting), however slowly the machine runs them.
    let (clients, each) = (8, 9);
    let mut sessions = vec![first];
    for _ in 1..clients {
        sessions.push(connect().await);
    }
    let audit = dir.path().join("state/audit");
    let mut calls = tokio::task::JoinSet::new();
    for (c, session) in sessions.iter().enumerate() {
        for i in 0..each {
            let (peer, audit) = (session.peer().clone(), audit.clone());
            // Every call names its own path, so its record can be found.
            let (tool, path) = match i % 3 {
                0 => ("stat_path", format!("c{c}-{i}.txt")),
                1 => ("read_file", format!("c{c}-{i}.txt")),
                _ => ("stat_path", format!("secret/c{c}-{i}")),
            };
            calls.spawn(async move {
                let arguments = json!({"instance_id": "burst", "path": path});
                let result = peer.call_tool(call(tool, arguments)).await.unwrap();
                let recorded =
                    (support::audit_text(&audit)).contains(&format!("\"path\":\"{path}\""));
                (path, result, recorded)
            });
        }
    }
    let mut answered = 0;
    while let Some(joined) = calls.join_next().await {
        let (path, result, recorded) = joined.unwrap();
        assert_eq!(
            result.is_error,
            Some(true),
            "no such file, or denied: {result:?}"
        );
        let text = serde_json::to_string(&result.content).unwrap();
        if path.starts_with("secret/") {
            assert!(text.contains("denied by policy `paths`"), "{text}");
        } else {
            assert!(text.contains("does not exist"), "{text}");
        }
        assert!(
            recorded,
            "`{path}` was answered before its record was in the log"
        );
        answered += 1;
    }
    assert_eq!(answered, clients * each);
    for session in sessions {
        session.cancel().await.unwrap();
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");

    let report = hpcgate::audit::verify(&audit, None).unwrap();
    assert!(report.intact, "{report:?}");
    let text = support::audit_text(&audit);
    let stopped: Value = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|record| record["event"] == "gateway.stopped")
        .unwrap();
    let (records, batches) = (
        stopped["detail"]["audit_records"].as_u64().unwrap(),
        stopped["detail"]["audit_batches"].as_u64().unwrap(),
    );
    assert!(
        records > (clients * each) as u64 && batches < records,
        "calls sent together share batches: {records} records in {batches} batches"
    );
}
