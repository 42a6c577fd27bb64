//! Hostile Rego, Cedar, JavaScript and Python policies: a loop of billions of iterations, a
//! comprehension that fills memory, mutual recursion, huge `data`, a Cedar policy set of 10,000
//! rules, a JavaScript `while (true)` and allocation loop, a Python loop and memory hog. Each is
//! refused at load or denied as a fault naming the policy, and the engine keeps serving. (The
//! bound on a quiet machine, deadline + 5 ms by the wall clock, is measured in `tests/deadline`.)

use hpcgate::policy::DecisionKind;
use serde_json::{Value, json};

use crate::harness::{Spec, call, chain, chain_error, componentized};

fn rego(name: &'static str, policy: &str, data: Value) -> Spec {
    Spec::stock(
        name,
        "rego",
        json!({"policy": policy, "policy_file": format!("{name}.rego"), "data": data}),
    )
}

/// The input that sets the hostile rules off (the load's own evaluation sees `{}` and passes).
fn trigger() -> hpcgate::policy::Call {
    call(
        "submit_job",
        json!({"instance_id": "run1", "command": "make"}),
    )
}

fn fault_of(spec: Spec) -> (String, String) {
    let chain = chain(vec![spec]);
    let outcome = chain.evaluate(&trigger());
    assert_eq!(outcome.decision.decision, DecisionKind::Deny, "{outcome:?}");
    let fault = outcome.policies[0].fault.clone().expect("a fault");
    // The engine keeps serving: the same chain judges the next call.
    let next = chain.evaluate(&call("list_jobs", json!({})));
    assert_eq!(next.decision.decision, DecisionKind::Allow, "{next:?}");
    (outcome.decision.reason.unwrap(), fault)
}

#[test]
fn a_rego_loop_of_billions_of_iterations_times_out() {
    let policy = r#"package hpcgate
deny contains "never" if {
    input.tool == "submit_job"
    r := numbers.range(1, 3000)
    count({a | some a in r; some b in r; some c in r; a + b + c < 0}) > 0
}"#;
    let (reason, fault) = fault_of(rego("spin", policy, json!(null)).deadline_ms(50));
    assert_eq!(fault, "timed out after 50 ms");
    assert!(
        reason.starts_with("policy `spin` timed out after 50 ms"),
        "{reason}"
    );
}

#[test]
fn a_rego_comprehension_that_fills_memory_hits_the_cap() {
    let policy = r#"package hpcgate
deny contains "never" if {
    input.tool == "submit_job"
    count([[a, a, a] | some a in numbers.range(1, 50000000)]) < 0
}"#;
    let (reason, fault) = fault_of(rego("hog", policy, json!(null)));
    assert_eq!(fault, "exceeded its memory limit of 16 MiB");
    assert!(
        reason.starts_with("policy `hog` exceeded its memory limit"),
        "{reason}"
    );
}

#[test]
fn rego_recursion_is_refused_at_load() {
    let policy = "package hpcgate\ndeny contains \"x\" if { p }\np if { q }\nq if { p }\n";
    let error = chain_error(vec![rego("loop", policy, json!(null))]);
    assert!(
        error.starts_with("policy `loop` rejected its config:") && error.contains("loop.rego"),
        "{error}"
    );
    assert!(error.to_lowercase().contains("recursi"), "{error}");
}

#[test]
fn huge_rego_data_is_refused_at_load_at_the_memory_cap() {
    let data: serde_json::Map<String, Value> = (0..400_000)
        .map(|i| {
            (
                format!("tenant-{i}"),
                json!({"max_gpus": i, "note": "padding padding"}),
            )
        })
        .collect();
    let policy = "package hpcgate\ndeny contains \"x\" if data.t[input.tenant].max_gpus < 0\n";
    let error = chain_error(vec![rego("data", policy, json!({"t": data}))]);
    assert_eq!(error, "policy `data` exceeded its memory limit of 16 MiB");
}

#[test]
fn a_cedar_policy_set_of_ten_thousand_rules_loads_or_is_refused_and_never_allows_by_fault() {
    let mut policy = String::from("permit (principal, action, resource);\n");
    for i in 0..10_000 {
        policy.push_str(&format!(
            "forbid (principal, action == Action::\"tool_{i}\", resource) when {{ context.arguments has x }};\n"
        ));
    }
    let mut spec = Spec::stock(
        "many",
        "cedar",
        json!({"policy": policy, "policy_file": "many.cedar"}),
    );
    spec.memory_mb = 16;
    let error = chain_error(vec![spec]);
    assert!(
        error.starts_with("policy `many` exceeded its memory limit")
            || error.starts_with("policy `many` timed out"),
        "{error}"
    );
}

/// The hostile JavaScript guest (`policies/hostile/js`), doing `behaviour` when it evaluates.
pub fn js(name: &'static str, behaviour: &str) -> Spec {
    let module = componentized("js", "policies/hostile/js/hostile.js", false);
    Spec::new(name, module, json!({"behaviour": behaviour}))
}

/// The hostile Python guest (`policies/hostile/python`), with the memory a CPython needs.
pub fn python(name: &'static str, behaviour: &str) -> Spec {
    let module = componentized("python", "policies/hostile/python/hostile.py", false);
    let mut spec = Spec::new(name, module, json!({"behaviour": behaviour}));
    spec.memory_mb = 64;
    spec
}

#[test]
fn a_javascript_while_true_times_out() {
    // The deadline covers `configure` too, where the JavaScript engine starts: 50 ms of wall
    // time was sometimes not enough for it on a loaded two-core machine.
    let (reason, fault) = fault_of(js("spin", "spin").deadline_ms(500));
    assert_eq!(fault, "timed out after 500 ms");
    assert!(
        reason.starts_with("policy `spin` timed out after 500 ms"),
        "{reason}"
    );
}

#[test]
fn javascript_that_allocates_forever_is_stopped() {
    // QuickJS runs out of its own heap or hits the cap; either way a fault, never an allow.
    let (reason, fault) = fault_of(js("grow", "grow"));
    assert!(
        fault == "exceeded its memory limit of 16 MiB" || fault.starts_with("trapped"),
        "{fault}"
    );
    assert!(reason.starts_with("policy `grow` "), "{reason}");
}

#[test]
fn a_python_memory_hog_hits_the_cap() {
    let (reason, fault) = fault_of(python("hog", "hog"));
    assert_eq!(fault, "exceeded its memory limit of 64 MiB");
    assert!(
        reason.starts_with("policy `hog` exceeded its memory limit of 64 MiB"),
        "{reason}"
    );
}

#[test]
fn a_python_loop_times_out() {
    // The deadline bounds preparing a fresh instance too (about 15 ms for CPython in a debug
    // build, several times that on a loaded machine), so not as tight as for the others.
    let (reason, fault) = fault_of(python("spin", "spin").deadline_ms(500));
    assert_eq!(fault, "timed out after 500 ms");
    assert!(
        reason.starts_with("policy `spin` timed out after 500 ms"),
        "{reason}"
    );
}
