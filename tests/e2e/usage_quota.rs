//! `usage.workspace_bytes` / `usage.output_bytes` through the real gateway: a policy that caps
//! space by itself sees what the instance holds before each call that can add bytes, and is
//! not consulted about sizes for calls that cannot (which are never measured).

use std::path::Path;

use hpcgate::config::{Environment, load};
use hpcgate::gateway::{Caller, Gateway};
use hpcgate::state::TenantName;
use serde_json::{Map, Value, json};

fn gateway(dir: &Path) -> Gateway {
    let hostile = Path::new(env!("OUT_DIR")).join("hostile.wasm");
    let file = dir.join("gateway.toml");
    let toml = format!(
        r#"state_dir = {state:?}

[tenants.chem]

[[policies]]
name = "space"
module = {hostile:?}
[policies.config]
behaviour = "usage-cap"
counter = "workspace_bytes"
max = 100
"#,
        state = dir.join("state").display().to_string(),
        hostile = hostile.display().to_string(),
    );
    std::fs::write(&file, toml).unwrap();
    let env = Environment {
        home: Some(dir.join("home")),
        config_home: None,
        data_home: None,
        explicit: Some(file),
    };
    let mut settings = load(&env).unwrap().settings().unwrap();
    settings.fixed.engine.cache_dir = Some(crate::harness::shared::policy_cache());
    Gateway::open(settings).unwrap()
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[test]
fn a_policy_caps_workspace_bytes_from_usage() {
    // Opening a gateway compiles policies on every core: not beside the timing tests.
    let _exclusive = crate::harness::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let chem = Caller {
        tenant: TenantName::parse("chem").unwrap(),
        principal: "alice".into(),
    };
    let call = |tool: &str, arguments: Value| gw.call(&chem, tool, args(arguments));
    let write = |path: &str, len: usize| {
        call(
            "write_file",
            json!({"instance_id": "run1", "path": path, "content": "x".repeat(len)}),
        )
    };
    assert!(!call("create_instance", json!({"instance_id": "run1"})).is_error);
    // The policy sees the bytes already there: 0, then 60 — both within its cap of 100.
    assert!(!write("a.txt", 60).is_error);
    assert!(!write("b.txt", 60).is_error);
    let over = write("c.txt", 1);
    assert!(over.is_error, "{}", over.structured);
    assert!(
        over.text.contains(r#""workspace_bytes":120"#) && over.text.contains(r#""output_bytes":0"#),
        "{}",
        over.text
    );
    assert!(over.text.contains(r#""instances":1"#), "{}", over.text);
    // Reads are not measured (and so never refused by a space cap); a delete frees space.
    let stat = call("stat_path", json!({"instance_id": "run1", "path": "a.txt"}));
    assert!(!stat.is_error, "{}", stat.text);
    assert!(
        !call(
            "delete_path",
            json!({"instance_id": "run1", "path": "a.txt"})
        )
        .is_error
    );
    assert!(!write("c.txt", 1).is_error);

    // The recorded call carries the same usage, so replaying the audit log is exact.
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let usage_of = |tool: &str| -> Vec<Value> {
        log.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["call"]["tool"] == tool)
            .map(|r| r["call"]["usage"].clone())
            .collect()
    };
    let writes: Vec<Value> = usage_of("write_file")
        .iter()
        .map(|u| u["workspace_bytes"].clone())
        .collect();
    assert_eq!(writes, [json!(0), json!(60), json!(120), json!(60)]);
    for tool in ["stat_path", "delete_path"] {
        let usage = usage_of(tool);
        assert_eq!(usage.len(), 1, "{tool}");
        assert!(
            usage[0].get("workspace_bytes").is_none(),
            "{tool}: {usage:?}"
        );
    }
}
