//! A proxied tool over the wire: the real `hpcgate run` over stdio, proxying the real
//! `mcp-test-server` in bwrap, driven by the rmcp client and by the official Python SDK (which
//! insists on `resultType`). Every content block, `structuredContent` and `isError` arrive whole.

use crate::support::proxy as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::CallToolRequestParams;
use rmcp::service::NotificationContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use support::{args, target_dir, test_proxy};

fn config(dir: &Path) -> PathBuf {
    let path = dir.join("gateway.toml");
    let text = format!(
        "state_dir = {:?}\n{}",
        dir.join("state").display().to_string(),
        test_proxy("t", "")
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Counts `notifications/tools/list_changed` from hpcgate.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

impl ClientHandler for Counter {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn call(name: &'static str, arguments: serde_json::Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name).with_arguments(args(arguments))
}

/// `hpcgate run` over stdio with the test proxy, state in `dir`.
fn gateway(dir: &Path) -> TokioChildProcess {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .arg("run")
        .arg("--config")
        .arg(config(dir))
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG");
    TokioChildProcess::new(command).unwrap()
}

#[tokio::test]
async fn the_rmcp_client_gets_proxied_results_whole() {
    let dir = tempfile::tempdir().unwrap();
    let changes = Counter::default();
    let client = changes.clone().serve(gateway(dir.path())).await.unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let tools = loop {
        let tools = client.list_all_tools().await.unwrap();
        if tools.iter().any(|t| t.name == "t__nested") {
            break tools;
        }
        assert!(Instant::now() < until, "proxied tools never listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let nested = tools.iter().find(|t| t.name == "t__nested").unwrap();
    assert_eq!(
        nested.input_schema["$defs"]["point"]["required"],
        json!(["x", "y"])
    );
    client
        .call_tool(call("create_instance", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    let image = client
        .call_tool(call("t__image", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    let image = serde_json::to_value(&image).unwrap();
    assert_eq!(image["content"].as_array().unwrap().len(), 6, "{image}");
    assert_eq!(image["content"][1]["type"], "image");
    assert_eq!(image["content"][3]["type"], "resource_link");
    assert_eq!(image["structuredContent"]["kinds"], 6);
    let failing = client
        .call_tool(call("t__failing", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    assert_eq!(failing.is_error, Some(true));

    // A server's list_changed reaches the client as hpcgate's own list_changed.
    let before = changes.0.load(Ordering::SeqCst);
    client
        .call_tool(call("t__enable_extra", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while changes.0.load(Ordering::SeqCst) == before {
        assert!(Instant::now() < until, "no tools/list_changed from hpcgate");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "t__extra"));
    client.cancel().await.unwrap();
}

#[test]
fn the_python_sdk_gets_proxied_results_whole() {
    let python = target_dir().join("python-mcp/bin/python");
    assert!(
        python.exists(),
        "the Python MCP SDK is missing at `{}`: run scripts/setup.sh",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/proxy_client.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_hpcgate"))
        .arg(config(dir.path()))
        .arg(dir.path().join("home"))
        .output()
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "t__image"),
        "{seen}"
    );
    assert_eq!(
        seen["image_types"],
        json!([
            "text",
            "image",
            "audio",
            "resource_link",
            "resource",
            "resource"
        ])
    );
    assert_eq!(seen["image_error"], false);
    assert_eq!(seen["image_structured"]["nested"]["ok"], true);
    assert_eq!(seen["failing_error"], true);
    assert_eq!(seen["failing_text"], "this tool always fails");
    assert_eq!(seen["add_structured"], json!({"sum": 3}));
}

/// A server announcing a change every 5 ms for a second is listed about once a second, not
/// after each, and the client hears of it about as often: one tenant's server cannot keep the
/// gateway listing it back to back, nor its sessions listing again. (Before: a listing and a
/// notification for every few announcements.)
#[tokio::test]
async fn a_server_announcing_without_pause_is_listed_about_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let changes = Counter::default();
    let client = changes.clone().serve(gateway(dir.path())).await.unwrap();
    client
        .call_tool(call("create_instance", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let lists = || async {
        let whoami = client
            .call_tool(call("t__whoami", json!({"instance_id": "run1"})))
            .await
            .unwrap();
        let whoami = whoami.structured_content.expect("whoami's counts");
        whoami["lists"].as_u64().expect("a count")
    };
    while !client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .any(|t| t.name == "t__whoami")
    {
        assert!(Instant::now() < until, "proxied tools never listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = lists().await;
    let heard = changes.0.load(Ordering::SeqCst);

    let storm = json!({"instance_id": "run1", "count": 200, "every_ms": 5, "endless": false});
    let started = Instant::now();
    client
        .call_tool(call("t__list_storm", storm))
        .await
        .unwrap();
    let lasted = started.elapsed();
    assert!(
        lasted >= Duration::from_secs(1),
        "the storm lasted {lasted:?}"
    );
    // Settled once nothing was listed for longer than the pause between listings.
    let until = Instant::now() + Duration::from_secs(30);
    let mut seen = lists().await;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let now = lists().await;
        if now == seen {
            break;
        }
        assert!(Instant::now() < until, "the listings never stop: {now}");
        seen = now;
    }
    let listed = seen - before;
    let told = changes.0.load(Ordering::SeqCst) - heard;
    // The storm lasted 1–2 s: a listing at its start and at most one a second after it.
    let bound = lasted.as_secs() + 2;
    assert!(
        (1..=bound).contains(&listed),
        "{listed} listings for 200 announcements over {lasted:?}"
    );
    assert!(
        (1..=bound as usize).contains(&told),
        "the client was told {told} times of 200 announcements over {lasted:?}"
    );
    client.cancel().await.unwrap();
}
