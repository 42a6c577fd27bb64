//! A third-party client: the official Python MCP SDK (`mcp` from PyPI, installed by
//! `scripts/setup.sh` into `target/python-mcp`) drives the real binary over stdio and over
//! streamable HTTP.

use std::path::PathBuf;
use std::process::Command;

use crate::support::served as support;

fn python() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let python = target
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target dir")
        .join("python-mcp/bin/python");
    assert!(
        python.exists(),
        "the Python MCP SDK is missing at `{}`: run scripts/setup.sh (it installs `mcp` from PyPI there)",
        python.display()
    );
    python
}

/// What `tests/python/*_client.py` saw: the handshake, the tools, a file round trip, a denial.
fn assert_seen(seen: &serde_json::Value, instance_content: &str) {
    assert_eq!(seen["server"], "hpcgate");
    let tools = seen["tools"].as_array().unwrap();
    assert!(
        tools.iter().any(|t| t == "create_instance") && tools.iter().any(|t| t == "search_files")
    );
    assert_eq!(
        (
            seen["created_error"].as_bool(),
            seen["written_error"].as_bool()
        ),
        (Some(false), Some(false)),
        "{seen}"
    );
    assert_eq!(seen["read_content"], instance_content);
    // The embedded default policies refuse writes into .git.
    assert_eq!(seen["denied_error"], true);
    assert!(
        seen["denied_text"]
            .as_str()
            .unwrap()
            .starts_with("denied by policy `paths`"),
        "{seen}"
    );
}

#[tokio::test]
async fn the_python_sdk_lists_calls_and_is_refused_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::config(dir.path(), "");
    let served = support::Served::http(dir.path(), &config).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/http_client.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .arg(&served.address)
        .output()
        .await
        .expect("run the Python client");
    let (status, stderr) = served.stop().await;
    assert!(
        output.status.success(),
        "{}\ngateway: {stderr}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(status.success(), "{status:?}: {stderr}");
    let seen: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the client prints JSON");
    assert_seen(&seen, "over http");
}

#[test]
fn the_python_sdk_lists_calls_and_is_refused_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\n",
            dir.path().join("state").display().to_string()
        ),
    )
    .unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/stdio_client.py");
    let output = Command::new(python())
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_hpcgate"))
        .arg(&config)
        .arg(dir.path().join("home"))
        .output()
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the client prints JSON");
    assert_seen(&seen, "from python");
}
