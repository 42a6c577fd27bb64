//! Unit tests of `stock:rego`, natively: the convention, the example rules, and the errors an
//! admin sees.

use hpcgate_policy_sdk::{Call, Decision, Phase, Policy, Value};
use serde_json::json;

use super::Rego;

const EXAMPLE: &str = include_str!("../../../../examples/policies/rules.rego");

fn configure(policy: &str, data: Value) -> Result<Rego, String> {
    Rego::configure(
        &json!({"policy": policy, "policy_file": "rules.rego", "data": data}).to_string(),
    )
}

fn example() -> Rego {
    configure(EXAMPLE, json!({"max_gpus": {"chem": 4}})).expect("the example parses")
}

fn reason(decision: Decision) -> String {
    match decision {
        Decision::Deny { reason } => reason,
        other => panic!("expected a denial, got {other:?}"),
    }
}

fn submit(tenant: &str, command: &str, gpus: u64) -> Call {
    let mut call = Call::new(
        "submit_job",
        json!({"instance_id": "run1", "command": command, "resources": {"gpus": gpus}}),
    );
    call.tenant = tenant.to_owned();
    call
}

#[test]
fn example_rules() {
    let policy = example();
    assert!(policy.evaluate(&submit("chem", "make", 4)).is_allow());
    let why = reason(policy.evaluate(&submit("chem", "rm -rf /workspace", 0)));
    assert!(why.contains("rm -rf"), "{why}");
    let why = reason(policy.evaluate(&submit("chem", "make", 5)));
    assert_eq!(why, "tenant `chem` may use at most 4 GPUs per job, not 5");
    assert!(
        policy.evaluate(&submit("bio", "make", 8)).is_allow(),
        "the cap is chem's"
    );

    let mut write = Call::new("write_file", json!({"path": "/workspace/inputs/a.csv"}));
    let why = reason(policy.evaluate(&write));
    assert!(why.contains("`/workspace/inputs/a.csv`"), "{why}");
    write.arguments = json!({"path": "inputs"}).as_object().unwrap().clone();
    assert!(policy.evaluate(&write).is_deny());
    write.arguments = json!({"path": "/workspace/inputsx"})
        .as_object()
        .unwrap()
        .clone();
    assert!(policy.evaluate(&write).is_allow());
    let mut read = Call::new("read_file", json!({"path": "/workspace/inputs/a.csv"}));
    read.read_only = true;
    assert!(policy.evaluate(&read).is_allow());
}

#[test]
fn several_messages_give_the_first_in_sorted_order() {
    let policy = example();
    let why = reason(policy.evaluate(&submit("chem", "rm -rf x", 9)));
    assert!(why.starts_with("a job command"), "{why}");
}

#[test]
fn the_list_phase_sees_empty_arguments() {
    let policy = configure(
        "package hpcgate\ndeny contains \"hidden\" if { input.phase == \"list\"; input.tool == \"host_exec\" }",
        json!(null),
    )
    .unwrap();
    let mut call = Call::new("host_exec", json!({}));
    assert!(policy.evaluate(&call).is_allow());
    call.phase = Phase::List;
    assert_eq!(reason(policy.evaluate(&call)), "hidden");
}

#[test]
fn rewrite_replaces_the_arguments() {
    let policy = configure(
        r#"package hpcgate
rewrite := object.union(input.arguments, {"resources": {"gpus": 0}}) if input.tool == "submit_job"
"#,
        json!(null),
    )
    .unwrap();
    match policy.evaluate(&submit("chem", "make", 2)) {
        Decision::Rewrite { arguments, note } => {
            assert_eq!(arguments["resources"], json!({"gpus": 0}));
            assert_eq!(arguments["command"], json!("make"));
            assert!(note.contains("rules.rego"), "{note}");
        }
        other => panic!("expected a rewrite, got {other:?}"),
    }
    assert!(
        policy.evaluate(&submit("chem", "make", 0)).is_allow(),
        "a rewrite to the same arguments is an allow"
    );
    assert!(
        policy
            .evaluate(&Call::new("list_jobs", json!({})))
            .is_allow()
    );
}

#[test]
fn a_malformed_rule_value_denies() {
    let policy = configure("package hpcgate\nrewrite := 3", json!(null)).unwrap();
    let why = reason(policy.evaluate(&Call::new("x", json!({}))));
    assert!(why.contains("must be an object"), "{why}");
    let policy = configure("package hpcgate\ndeny := true", json!(null)).unwrap();
    let why = reason(policy.evaluate(&Call::new("x", json!({}))));
    assert!(why.contains("set of messages"), "{why}");
}

#[test]
fn an_evaluation_error_denies() {
    // Two values for one complete rule: an error at evaluation, never an allow.
    let policy = configure(
        "package hpcgate\nx := input.arguments.a\nx := input.arguments.b\ndeny contains \"no\" if x == 0",
        json!(null),
    );
    let policy = match policy {
        Ok(policy) => policy,
        Err(why) => {
            // regorus may also reject it at load; then it names the file.
            assert!(why.contains("rules.rego"), "{why}");
            return;
        }
    };
    let why = reason(policy.evaluate(&Call::new("x", json!({"a": 1, "b": 2}))));
    assert!(
        why.starts_with("evaluating `deny` of `rules.rego` failed: `rules.rego` line 3"),
        "{why}"
    );
}

#[test]
fn a_parse_error_names_the_file_and_line() {
    let why = configure(
        "package hpcgate\n\ndeny contains msg if {\n  input.tool ==\n",
        json!(null),
    )
    .err()
    .expect("a parse error");
    assert_eq!(
        why,
        "cannot parse the Rego module: `rules.rego` line 5, column 1: expecting expression"
    );
}

#[test]
fn bad_settings_are_refused() {
    let why = Rego::configure("{}").err().unwrap();
    assert!(why.contains("policy_file"), "{why}");
    let why = Rego::configure(r#"{"policy": "package hpcgate\ndeny := set()", "polcy_file": "x"}"#)
        .err()
        .unwrap();
    assert!(why.contains("polcy_file"), "{why}");
    let why = configure("package other\ndeny contains 1 if false", json!(null))
        .err()
        .unwrap();
    assert!(
        why.contains("package other") && why.contains("package hpcgate"),
        "{why}"
    );
    let why = configure("package hpcgate\nallow := true", json!(null))
        .err()
        .unwrap();
    assert!(why.contains("neither `deny` nor `rewrite`"), "{why}");
    let why = configure(EXAMPLE, json!([1])).err().unwrap();
    assert!(why.contains("`data`"), "{why}");
}

#[test]
fn the_input_is_the_recorded_call_object_exactly() {
    let keys = super::input::Keys::new();
    let mut calls = vec![Call::new("stat_path", json!({})), submit("chem", "make", 4)];
    let mut full = Call::new(
        "fs__write_file",
        json!({
            "path": "/workspace/a", "n": -3, "big": u64::MAX, "x": 1.5, "e": 1e300,
            "none": null, "yes": true, "list": [1, "two", [3.25], {"k": null}],
            "nested": {"b": {}, "a": []}, "": "empty key", "é": "unicode",
        }),
    );
    full.phase = Phase::List;
    full.via = hpcgate_policy_sdk::Via::Job;
    full.job = Some("4711".to_owned());
    full.server = "fs".to_owned();
    full.remote_tool = Some("write_file".to_owned());
    full.instance = Some("run1".to_owned());
    full.read_only = true;
    full.usage = [("instances", 2), ("workspace_bytes", u64::MAX)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    calls.push(full);
    for call in calls {
        let expected = regorus::Value::from(serde_json::to_value(&call).unwrap());
        assert_ne!(expected, regorus::Value::Undefined);
        assert_eq!(keys.input(&call), expected, "{call:?}");
    }
}
