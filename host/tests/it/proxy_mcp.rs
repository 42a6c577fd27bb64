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

#[tokio::test]
async fn the_rmcp_client_gets_proxied_results_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .arg("run")
        .arg("--config")
        .arg(config(dir.path()))
        .env("HOME", dir.path().join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG");
    let changes = Counter::default();
    let client = changes
        .clone()
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap();
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
    let call = |name: &'static str, arguments| {
        CallToolRequestParams::new(name).with_arguments(args(arguments))
    };
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
