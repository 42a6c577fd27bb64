//! The one pipeline through the real gateway and a real policy component: how a call came in
//! (`via`) reaches the policy and the audit record; an invalid instance id stops at the door
//! (recorded, no policy consulted); a rewrite cannot move a call to another instance; recorded
//! calls made before `via` existed still replay.

use std::path::Path;

use hpcgate::config::{Environment, load};
use hpcgate::gateway::{Caller, Gateway, Request};
use hpcgate::policy::Via;
use hpcgate::state::TenantName;
use serde_json::{Map, Value, json};

/// A gateway whose only policy is the hostile guest with `config`, for tools matching `tools`.
fn gateway(dir: &Path, tools: &str, config: &str) -> Gateway {
    let hostile = Path::new(env!("OUT_DIR")).join("hostile.wasm");
    let file = dir.join("gateway.toml");
    let toml = format!(
        "state_dir = {state:?}\n\n[tenants.chem]\n\n[[policies]]\nname = \"probe\"\n\
         module = {hostile:?}\ntools = [{tools:?}]\n[policies.config]\n{config}\n",
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

fn chem() -> Caller {
    Caller {
        tenant: TenantName::parse("chem").unwrap(),
        principal: "alice".into(),
    }
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

/// The `call` records of the log, oldest first.
fn call_records(dir: &Path) -> Vec<Value> {
    let mut records = Vec::new();
    for file in std::fs::read_dir(dir.join("state/audit")).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in std::fs::read_to_string(path).unwrap().lines() {
                records.push(serde_json::from_str::<Value>(line).unwrap());
            }
        }
    }
    records.retain(|r| r["event"] == "call");
    records.sort_by_key(|r| r["seq"].as_u64());
    records
}

#[test]
fn via_reaches_the_policy_and_the_audit_record() {
    let _exclusive = crate::harness::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "list_instances", "behaviour = \"via\"");
    for (via, expected) in [(Via::Mcp, "via=mcp job=-"), (Via::Cli, "via=cli job=-")] {
        let request = Request::new(chem(), via, "list_instances", Map::new());
        let result = gw.dispatch(&gw.snapshot(), request);
        assert!(result.is_error, "{}", result.text);
        assert!(result.text.contains(expected), "{via:?}: {}", result.text);
    }
    let recorded: Vec<_> = call_records(dir.path())
        .iter()
        .map(|r| r["call"]["via"].clone())
        .collect();
    assert_eq!(recorded, [json!("mcp"), json!("cli")]);
}

#[test]
fn an_invalid_instance_id_stops_at_the_door_and_is_recorded() {
    let _exclusive = crate::harness::exclusive();
    let dir = tempfile::tempdir().unwrap();
    // The policy would deny every call it sees, naming how it came in: it must see none.
    let gw = gateway(dir.path(), "*", "behaviour = \"via\"");
    for bad in ["../chem", "a/b", "", "x".repeat(300).as_str(), "run1\n"] {
        let result = gw.call(
            &chem(),
            "stat_path",
            args(json!({"instance_id": bad, "path": "a"})),
        );
        assert!(result.is_error, "{bad:?}");
        assert!(
            !result.text.contains("via="),
            "a policy saw {bad:?}: {}",
            result.text
        );
        assert!(result.text.contains("instance"), "{bad:?}: {}", result.text);
    }
    let records = call_records(dir.path());
    assert_eq!(records.len(), 5, "{records:?}");
    for record in records {
        assert!(
            record["call"].is_null() && record["decision"].is_null(),
            "{record}"
        );
        assert!(record["outcome"]["error"].is_string(), "{record}");
    }
}

#[test]
fn a_rewrite_cannot_move_a_call_to_another_instance() {
    let _exclusive = crate::harness::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(
        dir.path(),
        "write_file",
        "behaviour = \"rewrite\"\nset = { instance_id = \"victim\" }",
    );
    for id in ["mine", "victim"] {
        let created = gw.call(&chem(), "create_instance", args(json!({"instance_id": id})));
        assert!(!created.is_error, "{}", created.text);
    }
    let moved = gw.call(
        &chem(),
        "write_file",
        args(json!({"instance_id": "mine", "path": "a.txt", "content": "x"})),
    );
    assert!(moved.is_error);
    assert!(
        moved.text.contains("rewrote `instance_id`"),
        "{}",
        moved.text
    );
    for id in ["mine", "victim"] {
        let stat = gw.call(
            &chem(),
            "stat_path",
            args(json!({"instance_id": id, "path": "a.txt"})),
        );
        assert!(
            stat.is_error,
            "nothing was written to `{id}`: {}",
            stat.text
        );
    }
    // The refusal is one record: the decision (the rewrite, as recorded input) and its
    // outcome; nothing was written ahead, since nothing ran.
    let records = call_records(dir.path());
    let writes: Vec<_> = records
        .iter()
        .filter(|r| r["tool"] == "write_file")
        .collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    let refused = writes[0];
    assert!(refused["outcome"]["error"].is_string(), "{refused}");
    assert_eq!(refused["decision"]["decision"], "rewrite", "{refused}");
    assert_eq!(
        refused["call"]["arguments"]["instance_id"], "mine",
        "{refused}"
    );
    assert!(refused["detail"]["decision_seq"].is_null(), "{refused}");
}

#[test]
fn recorded_calls_without_via_replay_as_mcp_and_job_calls_name_their_job() {
    let old = json!({"phase": "call", "tenant": "chem", "tool": "read_file", "arguments": {}});
    let call: hpcgate::policy::Call = serde_json::from_value(old).unwrap();
    assert_eq!((call.via, call.job.as_deref()), (Via::Mcp, None));
    let from_job = json!({"phase": "call", "via": "job", "job": "job_abc", "tenant": "chem",
                          "tool": "read_file", "arguments": {}});
    let call: hpcgate::policy::Call = serde_json::from_value(from_job.clone()).unwrap();
    assert_eq!((call.via, call.job.as_deref()), (Via::Job, Some("job_abc")));
    let again = serde_json::to_value(&call).unwrap();
    assert_eq!(
        (&again["via"], &again["job"]),
        (&from_job["via"], &from_job["job"])
    );
    let unknown = json!({"phase": "call", "via": "carrier-pigeon", "tenant": "chem", "tool": "x"});
    assert!(serde_json::from_value::<hpcgate::policy::Call>(unknown).is_err());

    // A chain sees a job's call as one.
    let chain = crate::harness::chain(vec![crate::harness::Spec::hostile(
        "probe",
        json!({"behaviour": "via"}),
    )]);
    let outcome = chain.evaluate(&call);
    assert_eq!(
        outcome.decision.reason.as_deref(),
        Some("via=job job=job_abc")
    );
}
