//! Chain semantics: order, first enforced deny stops, rewrites pass on, monitor mode, tenant
//! globs, the list phase, and what every decision records.

use hpcgate::policy::{DecisionKind, Phase, Verdict};
use serde_json::json;

use crate::harness::{Spec, call, chain, chain_error, engine, guest};

#[test]
fn first_enforced_deny_stops_the_chain() {
    let chain = chain(vec![
        Spec::hostile("first", json!({"behaviour": "deny"})),
        Spec::hostile("second", json!({"behaviour": "count"})),
    ]);
    let outcome = chain.evaluate(&call("submit_job", json!({"command": "make"})));
    assert_eq!(outcome.decision.decision, DecisionKind::Deny);
    assert_eq!(outcome.decision.policy.as_deref(), Some("first"));
    assert_eq!(
        outcome.decision.reason.as_deref(),
        Some("hostile guest says no")
    );
    let ran: Vec<_> = outcome.policies.iter().map(|p| p.policy.as_str()).collect();
    assert_eq!(ran, ["first"], "policies after the deny must not run");
}

#[test]
fn a_rewrite_is_seen_by_the_next_policy_and_the_last_rewriter_decides() {
    let echo = chain(vec![
        Spec::hostile("r1", json!({"behaviour": "rewrite", "set": {"x": 1}})),
        Spec::hostile("echo", json!({"behaviour": "echo"})),
    ]);
    let outcome = echo.evaluate(&call("submit_job", json!({"command": "make"})));
    let seen: serde_json::Value =
        serde_json::from_str(outcome.decision.reason.as_deref().unwrap()).unwrap();
    assert_eq!(seen, json!({"command": "make", "x": 1}));

    let rewrites = chain(vec![
        Spec::hostile("r1", json!({"behaviour": "rewrite", "set": {"x": 1}})),
        Spec::hostile("r2", json!({"behaviour": "rewrite", "set": {"y": 2}})),
        Spec::hostile("ok", json!({"behaviour": "allow"})),
    ]);
    let outcome = rewrites.evaluate(&call("submit_job", json!({"command": "make"})));
    assert_eq!(outcome.decision.decision, DecisionKind::Rewrite);
    assert_eq!(outcome.decision.policy.as_deref(), Some("r2"));
    assert_eq!(
        serde_json::Value::Object(outcome.decision.arguments.unwrap()),
        json!({"command": "make", "x": 1, "y": 2})
    );
}

#[test]
fn monitor_mode_is_recorded_but_neither_stops_nor_rewrites() {
    let chain = chain(vec![
        Spec::hostile("watch-deny", json!({"behaviour": "deny"})).monitor(),
        Spec::hostile(
            "watch-rewrite",
            json!({"behaviour": "rewrite", "set": {"x": 1}}),
        )
        .monitor(),
        Spec::hostile("echo", json!({"behaviour": "echo"})),
    ]);
    let outcome = chain.evaluate(&call("read_file", json!({"path": "a"})));
    assert_eq!(
        outcome.decision.policy.as_deref(),
        Some("echo"),
        "the monitor deny must not stop the chain"
    );
    let seen: serde_json::Value =
        serde_json::from_str(outcome.decision.reason.as_deref().unwrap()).unwrap();
    assert_eq!(
        seen,
        json!({"path": "a"}),
        "a monitor rewrite must not change the arguments"
    );
    let watch = &outcome.policies[0];
    assert!(!watch.enforced);
    assert!(matches!(watch.verdict, Verdict::Deny { .. }));
    assert!(matches!(
        outcome.policies[1].verdict,
        Verdict::Rewrite { .. }
    ));
    assert!(outcome.policies[2].enforced);
}

#[test]
fn tenant_globs_select_the_policies_that_run() {
    let chain = chain(vec![
        Spec::hostile("bio-only", json!({"behaviour": "deny"})).tenants(&["bio*"]),
    ]);
    let mut c = call("read_file", json!({"path": "a"}));
    assert_eq!(chain.evaluate(&c).decision.decision, DecisionKind::Allow);
    assert!(chain.evaluate(&c).policies.is_empty());
    c.tenant = "bio-lab".into();
    assert_eq!(chain.evaluate(&c).decision.decision, DecisionKind::Deny);
}

#[test]
fn tool_globs_select_the_policies_that_run_in_both_phases() {
    let chain = chain(vec![
        Spec::hostile("jobs-only", json!({"behaviour": "deny"})).tools(&["submit_job", "*_job"]),
        Spec::hostile("fs-proxy", json!({"behaviour": "count"})).tools(&["fs__*"]),
    ]);
    for phase in [Phase::Call, Phase::List] {
        let mut c = call("stat_path", json!({"path": "a"}));
        c.phase = phase;
        let outcome = chain.evaluate(&c);
        assert_eq!(outcome.decision.decision, DecisionKind::Allow);
        assert!(
            outcome.policies.is_empty(),
            "no policy matches `stat_path`, none runs or is recorded: {:?}",
            outcome.policies
        );
        for tool in ["submit_job", "cancel_job"] {
            c.tool = tool.into();
            let outcome = chain.evaluate(&c);
            assert_eq!(outcome.decision.decision, DecisionKind::Deny, "{tool}");
            assert_eq!(outcome.decision.policy.as_deref(), Some("jobs-only"));
        }
        c.tool = "fs__read_text_file".into();
        let ran: Vec<_> = (chain.evaluate(&c).policies.into_iter())
            .map(|p| p.policy)
            .collect();
        assert_eq!(ran, ["fs-proxy"]);
    }
    let error = chain_error(vec![
        Spec::hostile("bad", json!({"behaviour": "allow"})).tools(&["submit_job", ""]),
    ]);
    assert!(
        error.starts_with("policy `bad`: invalid `tools` glob:"),
        "{error}"
    );
}

#[test]
fn list_phase_sees_empty_arguments_and_a_rewrite_counts_as_allow() {
    let rewrite = chain(vec![Spec::hostile(
        "r",
        json!({"behaviour": "rewrite", "set": {"x": 1}}),
    )]);
    let mut c = call("submit_job", json!({"command": "make"}));
    c.phase = Phase::List;
    let outcome = rewrite.evaluate(&c);
    assert_eq!(outcome.decision.decision, DecisionKind::Allow);
    assert!(outcome.decision.arguments.is_none());

    let echo = chain(vec![Spec::hostile("echo", json!({"behaviour": "echo"}))]);
    assert_eq!(echo.evaluate(&c).decision.reason.as_deref(), Some("{}"));
}

#[test]
fn every_decision_names_policy_module_digest_and_duration() {
    let module = engine().load(&guest("hostile")).unwrap();
    let chain = chain(vec![Spec::hostile("h", json!({"behaviour": "allow"}))]);
    let outcome = chain.evaluate(&call("read_file", json!({})));
    let decision = &outcome.policies[0];
    assert_eq!(decision.policy, "h");
    assert_eq!(decision.module, module.digest());
    assert!(decision.module.starts_with("sha256:") && decision.module.len() == 7 + 64);
    assert!(decision.duration_us > 0.0);
    let recorded = serde_json::to_value(&outcome).unwrap();
    assert_eq!(recorded["decision"], "allow");
    assert_eq!(recorded["policies"][0]["decision"], "allow");
    assert_eq!(recorded["policies"][0]["enforced"], true);
}

#[test]
fn settings_are_checked_at_load_and_errors_name_the_policy() {
    let error = chain_error(vec![Spec::hostile("picky", json!({"behaviour": "reject"}))]);
    assert_eq!(
        error,
        "policy `picky` rejected its config: hostile guest rejects its settings"
    );
    let error = chain_error(vec![Spec::stock(
        "tools",
        "tool-filter",
        json!({"alow": ["*"]}),
    )]);
    assert!(
        error.starts_with("policy `tools` rejected its config:") && error.contains("alow"),
        "{error}"
    );
    let error = chain_error(vec![
        Spec::hostile("twice", json!({})),
        Spec::hostile("twice", json!({})),
    ]);
    assert!(error.contains("two policies are named `twice`"), "{error}");
}

#[test]
fn stock_tool_filter_denies_and_says_why() {
    let chain = chain(vec![Spec::stock(
        "tools",
        "tool-filter",
        json!({"allow": ["*"], "deny": ["host_exec"]}),
    )]);
    let outcome = chain.evaluate(&call("host_exec", json!({"key": "x"})));
    assert_eq!(outcome.decision.decision, DecisionKind::Deny);
    assert!(outcome.decision.reason.unwrap().contains("host_exec"));
    assert_eq!(
        chain
            .evaluate(&call("read_file", json!({})))
            .decision
            .decision,
        DecisionKind::Allow
    );
}
