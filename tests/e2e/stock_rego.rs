//! `stock:rego` as the gateway runs it: the embedded component, configured and evaluated by the
//! policy engine. The convention (`deny` messages, `rewrite`), the example rules, the input
//! document, and the errors an admin sees.

use hpcgate::policy::{Call, Chain, DecisionKind, Phase, Verdict, Via};
use serde_json::{Value, json};

use crate::harness::{Spec, chain, chain_error, denial, submit};

const EXAMPLE: &str = include_str!("../../examples/policies/rules.rego");

fn settings(policy: &str, data: Value) -> Value {
    json!({"policy": policy, "policy_file": "rules.rego", "data": data})
}

/// `policy` (with `data`) as the host passes a policy file's text.
fn rego(policy: &str, data: Value) -> Chain {
    chain(vec![Spec::stock("rego", "rego", settings(policy, data))])
}

/// Why `settings` are refused at load.
fn refused(settings: Value) -> String {
    chain_error(vec![Spec::stock("rego", "rego", settings)])
}

fn example() -> Chain {
    rego(EXAMPLE, json!({"max_gpus": {"chem": 4}}))
}

fn decides(chain: &Chain, call: &Call) -> DecisionKind {
    chain.evaluate(call).decision.decision
}

#[test]
fn example_rules() {
    let policy = example();
    assert_eq!(
        decides(&policy, &submit("chem", "make", 4)),
        DecisionKind::Allow
    );
    let why = denial(&policy, &submit("chem", "rm -rf /workspace", 0));
    assert!(why.contains("rm -rf"), "{why}");
    let why = denial(&policy, &submit("chem", "make", 5));
    assert_eq!(why, "tenant `chem` may use at most 4 GPUs per job, not 5");
    assert_eq!(
        decides(&policy, &submit("bio", "make", 8)),
        DecisionKind::Allow,
        "the cap is chem's"
    );

    let write = |path: &str| Call::new("write_file", json!({"path": path}));
    let why = denial(&policy, &write("/workspace/inputs/a.csv"));
    assert!(why.contains("`/workspace/inputs/a.csv`"), "{why}");
    assert_eq!(decides(&policy, &write("inputs")), DecisionKind::Deny);
    assert_eq!(
        decides(&policy, &write("/workspace/inputsx")),
        DecisionKind::Allow
    );
    let mut read = Call::new("read_file", json!({"path": "/workspace/inputs/a.csv"}));
    read.read_only = true;
    assert_eq!(decides(&policy, &read), DecisionKind::Allow);
}

#[test]
fn several_messages_give_the_first_in_sorted_order() {
    let why = denial(&example(), &submit("chem", "rm -rf x", 9));
    assert!(why.starts_with("a job command"), "{why}");
}

#[test]
fn the_list_phase_sees_empty_arguments() {
    let policy = rego(
        "package hpcgate\ndeny contains \"hidden\" if { input.phase == \"list\"; input.tool == \"host_exec\"; input.arguments == {} }",
        json!(null),
    );
    let mut call = Call::new("host_exec", json!({}));
    assert_eq!(decides(&policy, &call), DecisionKind::Allow);
    call.phase = Phase::List;
    assert_eq!(denial(&policy, &call), "hidden");
}

#[test]
fn rewrite_replaces_the_arguments() {
    let policy = rego(
        r#"package hpcgate
rewrite := object.union(input.arguments, {"resources": {"gpus": 0}}) if input.tool == "submit_job"
"#,
        json!(null),
    );
    let outcome = policy.evaluate(&submit("chem", "make", 2));
    assert_eq!(outcome.decision.decision, DecisionKind::Rewrite);
    let arguments = Value::Object(outcome.decision.arguments.expect("the new arguments"));
    assert_eq!(
        arguments,
        json!({"instance_id": "run1", "command": "make", "resources": {"gpus": 0}})
    );
    match &outcome.policies[0].verdict {
        Verdict::Rewrite { note, .. } => assert!(note.contains("rules.rego"), "{note}"),
        other => panic!("expected a rewrite, got {other:?}"),
    }
    assert_eq!(
        decides(&policy, &submit("chem", "make", 0)),
        DecisionKind::Allow,
        "a rewrite to the same arguments is an allow"
    );
    assert_eq!(
        decides(&policy, &Call::new("list_jobs", json!({}))),
        DecisionKind::Allow
    );
}

#[test]
fn a_malformed_rule_value_denies() {
    let policy = rego("package hpcgate\nrewrite := 3", json!(null));
    let why = denial(&policy, &Call::new("x", json!({})));
    assert!(why.contains("must be an object"), "{why}");
    let policy = rego("package hpcgate\ndeny := true", json!(null));
    let why = denial(&policy, &Call::new("x", json!({})));
    assert!(why.contains("set of messages"), "{why}");
}

#[test]
fn an_evaluation_error_denies() {
    // Two values for one complete rule: an error at evaluation, never an allow.
    let text = "package hpcgate\nx := input.arguments.a\nx := input.arguments.b\ndeny contains \"no\" if x == 0";
    let policy = match std::panic::catch_unwind(|| rego(text, json!(null))) {
        Ok(policy) => policy,
        Err(_) => {
            // regorus may also reject it at load; then it names the file.
            let why = refused(settings(text, json!(null)));
            assert!(why.contains("rules.rego"), "{why}");
            return;
        }
    };
    let why = denial(&policy, &Call::new("x", json!({"a": 1, "b": 2})));
    assert!(
        why.starts_with("evaluating `deny` of `rules.rego` failed: `rules.rego` line 3"),
        "{why}"
    );
}

#[test]
fn a_parse_error_names_the_file_and_line() {
    let why = refused(settings(
        "package hpcgate\n\ndeny contains msg if {\n  input.tool ==\n",
        json!(null),
    ));
    assert!(
        why.contains(
            "cannot parse the Rego module: `rules.rego` line 5, column 1: expecting expression"
        ),
        "{why}"
    );
}

#[test]
fn bad_settings_are_refused() {
    let why = refused(json!({}));
    assert!(why.contains("policy_file"), "{why}");
    let why = refused(json!({"policy": "package hpcgate\ndeny := set()", "polcy_file": "x"}));
    assert!(why.contains("polcy_file"), "{why}");
    let why = refused(settings(
        "package other\ndeny contains 1 if false",
        json!(null),
    ));
    assert!(
        why.contains("package other") && why.contains("package hpcgate"),
        "{why}"
    );
    let why = refused(settings("package hpcgate\nallow := true", json!(null)));
    assert!(why.contains("neither `deny` nor `rewrite`"), "{why}");
    let why = refused(settings(EXAMPLE, json!([1])));
    assert!(why.contains("`data`"), "{why}");
}

/// The input document is the recorded call's JSON object, exactly: Rego's own `==` (structural,
/// never true between a number and a string) compares what the guest built from the call with
/// the same call written as JSON into `data`.
#[test]
fn the_input_is_the_recorded_call_object_exactly() {
    let mut full = Call::new(
        "fs__write_file",
        json!({
            "path": "/workspace/a", "n": -3, "big": u64::MAX, "x": 1.5, "e": 1e300,
            "none": null, "yes": true, "list": [1, "two", [3.25], {"k": null}],
            "nested": {"b": {}, "a": []}, "": "empty key", "é": "unicode",
        }),
    );
    full.via = Via::Job;
    full.job = Some("4711".to_owned());
    full.server = "fs".to_owned();
    full.remote_tool = Some("write_file".to_owned());
    full.instance = Some("run1".to_owned());
    full.read_only = true;
    full.usage = [("instances", 2), ("workspace_bytes", u64::MAX)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    // In the list phase a policy sees no arguments (the test above).
    let mut listed = Call::new("fs__write_file", json!({}));
    listed.phase = Phase::List;
    let compare = "package hpcgate\ndeny contains \"differs\" if input != data.expected";
    for call in [
        Call::new("stat_path", json!({})),
        submit("chem", "make", 4),
        full,
        listed,
    ] {
        let expected = serde_json::to_value(&call).unwrap();
        let policy = rego(compare, json!({"expected": expected}));
        assert_eq!(decides(&policy, &call), DecisionKind::Allow, "{call:?}");
        // Each difference is seen: the read-only flag flipped, and in the call phase text
        // where a number was (or one more argument).
        let mut flipped = call.clone();
        flipped.read_only = !call.read_only;
        let mut text = call.clone();
        text.arguments.insert("n".to_owned(), json!("-3"));
        let others = match call.phase {
            Phase::Call => vec![flipped, text],
            Phase::List => vec![flipped],
        };
        for other in others {
            assert_eq!(decides(&policy, &other), DecisionKind::Deny, "{other:?}");
        }
    }
}
