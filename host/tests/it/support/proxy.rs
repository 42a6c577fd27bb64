//! Helpers shared by the proxy test modules: the test MCP server binary (built on first
//! use), a gateway from a TOML string in a temp dir, callers, arguments, instances, and waiting
//! for discovery.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hpcgate::config::{Environment, load};
use hpcgate::gateway::{CallResult, Caller, Gateway};
use hpcgate::proxy::Discovery;
use hpcgate::state::TenantName;
use serde_json::{Map, Value, json};

/// The target directory these tests were built in.
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .to_path_buf()
}

/// `mcp-test-server`, brought up to date once per test process. It is built as the workspace's
/// tests build it (its own test `serves` needs the binary), so after `cargo test --workspace`
/// this finds it fresh; `cargo build -p mcp-test-server` would resolve the features of its
/// dependencies for it alone and compile them all a second time.
pub fn test_server() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let status = std::process::Command::new(env!("CARGO"))
                .args([
                    "test",
                    "--workspace",
                    "--no-run",
                    "--quiet",
                    "--test",
                    "serves",
                ])
                .env("CARGO_TARGET_DIR", target_dir())
                .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building mcp-test-server failed");
            target_dir().join("debug").join("mcp-test-server")
        })
        .clone()
}

/// `[proxied_mcps.<name>]` running the test server (bound read-only into the sandbox).
pub fn test_proxy(name: &str, extra: &str) -> String {
    let server = test_server().display().to_string();
    format!("[proxied_mcps.{name}]\ncommand = {server:?}\nbinds = [{server:?}]\n{extra}\n")
}

/// A gateway with its state in `dir` and `config` layered over the defaults.
pub fn gateway(dir: &Path, config: &str) -> Gateway {
    let path = dir.join("gateway.toml");
    let toml = format!(
        "state_dir = {:?}\n{config}",
        dir.join("state").display().to_string()
    );
    std::fs::write(&path, toml).unwrap();
    let env = Environment {
        home: Some(dir.join("home")),
        config_home: None,
        data_home: None,
        explicit: Some(path),
    };
    let mut settings = load(&env).unwrap().settings().unwrap();
    settings.fixed.engine.cache_dir = Some(super::shared::policy_cache());
    Gateway::open(settings).unwrap()
}

/// Waits until no proxy's discovery is pending; panics after 30 s.
pub fn discovered(gw: &Gateway) {
    let until = Instant::now() + Duration::from_secs(30);
    while gw
        .proxies()
        .status()
        .values()
        .any(|d| matches!(d, Discovery::Pending))
    {
        assert!(Instant::now() < until, "discovery did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn caller(tenant: &str) -> Caller {
    Caller {
        tenant: TenantName::parse(tenant).unwrap(),
        principal: format!("{tenant}-user"),
    }
}

/// Creates instance `id` for `tenant`.
pub fn create(gw: &Gateway, tenant: &str, id: &str) {
    ok(gw.call(
        &caller(tenant),
        "create_instance",
        args(json!({ "instance_id": id })),
    ));
}

pub fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("arguments are objects"),
    }
}

pub fn ok(result: CallResult) -> CallResult {
    assert!(!result.is_error, "{}", result.text);
    result
}

pub fn err(result: CallResult) -> String {
    assert!(result.is_error, "expected an error: {result:?}");
    result.text
}

/// The raw proxied result.
pub fn raw(result: &CallResult) -> Value {
    serde_json::to_value(result.proxied.as_ref().expect("a proxied result")).unwrap()
}

/// The names of the proxied tools `tenant` may list.
pub fn names(gw: &Gateway, tenant: &str) -> Vec<String> {
    gw.proxied_tools(&caller(tenant))
        .iter()
        .map(|t| t.exposed_name.clone())
        .collect()
}
