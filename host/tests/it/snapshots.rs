//! Snapshots of what outsiders read: the `tools/list` an MCP client gets from the embedded
//! default configuration, and the audit records of a session that writes one of every kind a
//! single host can produce without Slurm or a proxied server: calls (allowed and written ahead,
//! read-only and recorded once, denied; from the CLI and over MCP), instance created, updated,
//! archived, unarchived and cleaned, tenant admin, gateway started and stopped, policies
//! reloaded. Job and proxy records have their own tests (`gateway_jobs`, `proxy_audit`);
//! `audit.repaired` needs a torn log (`audit_log`).
//!
//! Times, hashes, durations, process ids, the version, policy module digests and the local
//! user's uid are redacted; everything else is exact. After an intended change, review and accept with `cargo insta review` (or run with
//! `INSTA_UPDATE=always` and read the diff).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::support::served;

/// Path rules that deny reading keys, so that a denial shows.
const CONFIG: &str = r#"
[[policies]]
name = "paths"
module = "stock:path-rules"
[policies.config]
deny_read = ["**/.ssh/**"]
"#;

/// `hpcgate ARGS…` on `config` as the local user, with a private HOME.
fn cli(dir: &Path, config: &Path, args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(args)
        .env("HPCGATE_CONFIG", config)
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "hpcgate {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!("arguments are objects")
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

/// Waits (up to 10 s) until the log holds an `event` record.
async fn recorded(audit: &Path, event: &str) {
    let wanted = format!("\"event\":\"{event}\"");
    for _ in 0..1000 {
        if served::audit_text(audit).contains(&wanted) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no `{event}` record: {}", served::audit_text(audit));
}

#[tokio::test]
async fn tools_list_of_the_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), "");
    let command = served::command(dir.path(), &config, &[]);
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    client.cancel().await.unwrap();
    insta::assert_json_snapshot!(tools);
}

#[tokio::test]
async fn audit_records_of_every_kind_a_session_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CONFIG);
    for args in [
        &["instance", "create", "run1"][..],
        &["instance", "create", "old1"],
        &["instance", "update", "run1", "--description", "first run"],
        &["instance", "archive", "old1"],
        &["instance", "unarchive", "old1"],
        &["instance", "archive", "old1"],
        &["clean", "--days", "0"],
        &["tenant", "list"],
    ] {
        cli(dir.path(), &config, args);
    }

    let command = served::command(dir.path(), &config, &[]);
    let transport = TokioChildProcess::new(command).unwrap();
    let pid = transport.id().unwrap();
    let client = ().serve(transport).await.unwrap();
    let write = json!({"instance_id": "run1", "path": "notes.txt", "content": "hi"});
    let secret = json!({"instance_id": "run1", "path": ".ssh/id_rsa"});
    let stat = json!({"instance_id": "run1", "path": "notes.txt"});
    let written = client.call_tool(call("write_file", write)).await.unwrap();
    assert_ne!(written.is_error, Some(true), "{written:?}");
    let denied = client.call_tool(call("read_file", secret)).await.unwrap();
    assert_eq!(denied.is_error, Some(true), "{denied:?}");
    let stat = client.call_tool(call("stat_path", stat)).await.unwrap();
    assert_ne!(stat.is_error, Some(true), "{stat:?}");

    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    let audit = dir.path().join("state/audit");
    recorded(&audit, "policies.reloaded").await;
    client.cancel().await.unwrap();
    recorded(&audit, "gateway.stopped").await;

    let records: Vec<Value> = served::audit_text(&audit)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    insta::assert_json_snapshot!(records, {
        "[].ts" => "[ts]",
        "[].prev" => "[hash]",
        "[].hash" => "[hash]",
        "[].duration_ms" => "[ms]",
        "[].detail.pid" => "[pid]",
        "[].detail.version" => "[version]",
        "[].policies[].duration_us" => "[µs]",
        "[].policies[].module" => "[module digest]",
        // Keyed with this run's `redaction.key`.
        "[].call.arguments.content.hmac_sha256" => "[hmac]",
        "[].call.arguments.content.key" => "[key id]",
        // `uid:N` of whoever runs the tests.
        "[].principal" => "[local user]",
        "[].call.principal" => "[local user]",
    });
}
