//! The test server answers an MCP client over stdio: it initializes, lists its tools and calls
//! one. Besides checking the server the proxy tests rely on, this test is what makes
//! `cargo test --workspace` build the server binary with the workspace's features, so the proxy
//! tests find it built (`host/tests/it/support/proxy.rs`) instead of compiling its dependencies
//! a second time with the features of the server alone.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

#[test]
#[allow(clippy::disallowed_methods)] // the server under test, argv only
fn it_initializes_lists_its_tools_and_adds() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_mcp-test-server"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start mcp-test-server");
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    // A server that stops answering is killed after a minute, and the test fails on its
    // closed stdout instead of waiting for ever (killing a child already waited for is a no-op).
    let server = Arc::new(Mutex::new(server));
    let watched = server.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = watched.lock().unwrap().kill();
    });
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let mut receive = |id: u64| -> Value {
        loop {
            let mut line = String::new();
            assert_ne!(
                stdout.read_line(&mut line).unwrap(),
                0,
                "the server hung up"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    };

    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "serves", "version": "0"}
        }}),
    );
    let initialized = receive(1);
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "mcp-test-server",
        "{initialized}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = receive(2);
    let names: Vec<&str> = (listed["result"]["tools"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for tool in ["echo", "add", "failing", "slow", "huge", "crash", "whoami"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    assert!(!names.contains(&"extra"), "`extra` before enable_extra");

    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 40, "b": 2}}}));
    let added = receive(3);
    assert_eq!(
        added["result"]["structuredContent"],
        json!({"sum": 42}),
        "{added}"
    );

    drop(stdin);
    // Not `wait`, which would hold the lock the watchdog needs.
    let status = loop {
        if let Some(status) = server.lock().unwrap().try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        status.success(),
        "the server exits cleanly at EOF: {status}"
    );
}
