//! Results a model can use, through the real binary over stdio and the rmcp client: the text
//! block of a builtin tool carries what its structured content carries (a job's output, a
//! file's content, a listing) after the one-line summary; `tools/list` is the same on every
//! call; and a `tools/list` sent while a proxied server is still being discovered waits for it.

use std::path::Path;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::support::proxy::test_server;

fn gateway(dir: &Path, extra: &str) -> tokio::process::Command {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\n{extra}",
            dir.join("state").display().to_string()
        ),
    )
    .unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .arg("run")
        .arg("--config")
        .arg(&config)
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG");
    command
}

fn call(tool: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!("arguments are objects")
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// The one text block of a result.
fn text(result: &CallToolResult) -> String {
    assert_eq!(result.content.len(), 1, "{result:?}");
    result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("a text block")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_block_carries_job_output_file_content_and_listings() {
    let dir = tempfile::tempdir().unwrap();
    let client = ().serve(TokioChildProcess::new(gateway(dir.path(), "")).unwrap()).await.unwrap();
    client
        .call_tool(call("create_instance", json!({"instance_id": "run1"})))
        .await
        .unwrap();

    // The model must see what the job printed (`hi`), not only "completed (exit 0)".
    let submitted = client
        .call_tool(call(
            "submit_job",
            json!({"instance_id": "run1", "command": "echo hi; echo oops >&2; exit 3", "timeout": 30}),
        ))
        .await
        .unwrap();
    let shown = text(&submitted);
    let mut lines = shown.lines();
    let summary = lines.next().unwrap();
    assert!(
        summary.starts_with("submitted: job `") && summary.contains("failed (exit 3)"),
        "the one-line summary comes first: {shown}"
    );
    assert!(!summary.contains("stdout"), "{shown}");
    assert!(
        shown.contains("stdout_tail: hi") && shown.contains("stderr_tail: oops"),
        "{shown}"
    );
    assert!(shown.contains("exit_code: 3"), "{shown}");
    let structured = submitted.structured_content.unwrap();
    assert_eq!(structured["job"]["stdout_tail"], "hi");

    // A file's content, verbatim (not indented, not JSON-escaped).
    let content = "first line\n  indented \"quoted\" line\n```\n";
    client
        .call_tool(call(
            "write_file",
            json!({"instance_id": "run1", "path": "notes.md", "content": content}),
        ))
        .await
        .unwrap();
    let read = text(
        &client
            .call_tool(call(
                "read_file",
                json!({"instance_id": "run1", "path": "notes.md"}),
            ))
            .await
            .unwrap(),
    );
    assert!(
        read.contains(&format!("content:\n````\n{content}````")),
        "{read}"
    );

    // A listing: one line per entry.
    let listed = text(
        &client
            .call_tool(call(
                "list_directory",
                json!({"instance_id": "run1", "path": "."}),
            ))
            .await
            .unwrap(),
    );
    let entry = listed
        .lines()
        .find(|l| l.starts_with("- ") && l.contains("name=notes.md"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        entry.contains(&format!("size={}", content.len())),
        "{listed}"
    );

    // An error is its message alone.
    let refused = client
        .call_tool(call(
            "read_file",
            json!({"instance_id": "run1", "path": "none.md"}),
        ))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert!(!text(&refused).contains('\n'), "{}", text(&refused));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_tools_list_waits_for_discovery_and_every_list_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let server = test_server().display().to_string();
    // The server takes a second to start, so discovery is still under way when the client
    // lists right after the handshake.
    let extra = format!(
        "[proxied_mcps.t]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"sleep 1; exec {server}\"]\n\
         binds = [{server:?}]\n"
    );
    let client =
        ().serve(TokioChildProcess::new(gateway(dir.path(), &extra)).unwrap())
            .await
            .unwrap();
    let started = std::time::Instant::now();
    let first = client.list_all_tools().await.unwrap();
    let waited = started.elapsed();
    let names: Vec<String> = first.iter().map(|t| t.name.to_string()).collect();
    assert!(
        names.iter().any(|n| n == "t__echo"),
        "the proxied tools are listed (after {waited:?}): {names:?}"
    );
    assert!(waited < std::time::Duration::from_secs(4), "{waited:?}");
    // Proxied tools by name, after the builtin ones in their fixed order.
    let proxied: Vec<&String> = names.iter().filter(|n| n.contains("__")).collect();
    let mut sorted = proxied.clone();
    sorted.sort();
    assert_eq!(proxied, sorted);
    let as_json = |tools: &[rmcp::model::Tool]| serde_json::to_string(tools).unwrap();
    for _ in 0..3 {
        let again = client.list_all_tools().await.unwrap();
        assert_eq!(
            as_json(&again),
            as_json(&first),
            "tools/list is deterministic"
        );
    }
    client.cancel().await.unwrap();
}
