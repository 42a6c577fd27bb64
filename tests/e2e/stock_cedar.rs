//! `stock:cedar` as the gateway runs it: the embedded component, configured and evaluated by the
//! policy engine. The request mapping, the example rules, faults and the errors an admin sees.

use hpcgate::policy::{Call, Chain, DecisionKind, Phase, Via};
use serde_json::{Value, json};

use crate::harness::{Spec, chain, chain_error, denial, submit};

const EXAMPLE: &str = include_str!("../../examples/policies/rules.cedar");

/// `policy` as the host passes a policy file's text.
fn cedar(policy: &str) -> Chain {
    chain(vec![Spec::stock(
        "cedar",
        "cedar",
        json!({"policy": policy, "policy_file": "rules.cedar"}),
    )])
}

/// Why `settings` are refused at load.
fn refused(settings: Value) -> String {
    chain_error(vec![Spec::stock("cedar", "cedar", settings)])
}

fn allows(chain: &Chain, call: &Call) -> bool {
    let outcome = chain.evaluate(call);
    match outcome.decision.decision {
        DecisionKind::Allow => true,
        DecisionKind::Deny => false,
        other => panic!("a Cedar policy allows or denies, got {other:?}"),
    }
}

#[test]
fn example_rules() {
    let policy = cedar(EXAMPLE);
    assert!(allows(&policy, &submit("chem", "make", 4)));
    let why = denial(&policy, &submit("chem", "rm -rf /workspace", 0));
    assert_eq!(why, "a job command may not contain `rm -rf`");
    let why = denial(&policy, &submit("chem", "make", 5));
    assert_eq!(why, "tenant `chem` may use at most 4 GPUs per job");
    assert!(allows(&policy, &submit("bio", "make", 8)));

    let mut write = Call::new("write_file", json!({"path": "/workspace/inputs/a.csv"}));
    assert!(denial(&policy, &write).contains("read-only `/workspace/inputs`"));
    write.read_only = true;
    assert!(allows(&policy, &write));
}

#[test]
fn the_request_maps_tenant_principal_tool_instance_and_context() {
    let policy = cedar(
        r#"permit (principal == Tenant::"chem", action == Action::"submit_job", resource == Instance::"run1")
           when { principal.principal == "alice" && context.via == "cli" && context.phase == "call"
                  && context.server == "builtin" && context.usage.running_jobs == 2
                  && context.arguments.resources.gpus == 1 && context.arguments.tags.contains("x")
                  && !(context.arguments has note) && context.arguments.ratio == "0.5" };
           permit (principal, action, resource == Instance::"(none)") when { context.phase == "list" };
           permit (principal, action, resource) when { context has remote_tool && context.remote_tool == "read" };"#,
    );
    let mut call = submit("chem", "make", 1);
    call.principal = "alice".to_owned();
    call.via = Via::Cli;
    call.usage.insert("running_jobs".to_owned(), 2);
    call.arguments
        .insert("tags".to_owned(), json!(["x", "y", null]));
    call.arguments.insert("note".to_owned(), json!(null));
    call.arguments.insert("ratio".to_owned(), json!(0.5));
    assert!(allows(&policy, &call), "{:?}", policy.evaluate(&call));
    call.principal = "bob".to_owned();
    assert_eq!(
        denial(&policy, &call),
        "no Cedar policy permits `submit_job` for tenant `chem`"
    );

    let mut list = Call::new("submit_job", json!({}));
    list.phase = Phase::List;
    assert!(allows(&policy, &list));
    let mut proxied = Call::new("fs__read", json!({}));
    proxied.server = "fs".to_owned();
    proxied.remote_tool = Some("read".to_owned());
    assert!(allows(&policy, &proxied));
}

/// The request's context and tenant entity are built as Cedar values directly: Cedar's own
/// `==` (structural on records and sets, never true between a long and a string) says they
/// are exactly the values written here as Cedar expressions, and nothing more.
#[test]
fn the_context_and_tenant_are_what_cedar_makes_of_the_same_expressions() {
    let policy = cedar(
        r#"permit (principal == Tenant::"chem", action == Action::"fs__write_file", resource)
           when { principal.principal == "alice" && context == {
               "arguments": {
                   "path": "/a", "n": -3, "big": "18446744073709551615", "x": "1.5", "yes": true,
                   "list": [1, "two", [3]], "nested": {"b": {}}
               },
               "via": "job", "read_only": true,
               "usage": {"instances": 2, "workspace_bytes": "18446744073709551615"},
               "phase": "call", "server": "fs", "remote_tool": "write_file"
           } };"#,
    );
    let mut call = Call::new(
        "fs__write_file",
        json!({
            "path": "/a", "n": -3, "big": u64::MAX, "x": 1.5, "none": null, "yes": true,
            "list": [1, "two", null, [3], 1], "nested": {"b": {}, "c": null},
        }),
    );
    call.tenant = "chem".to_owned();
    call.principal = "alice".to_owned();
    call.via = Via::Job;
    call.server = "fs".to_owned();
    call.remote_tool = Some("write_file".to_owned());
    call.read_only = true;
    call.usage = [("instances", 2), ("workspace_bytes", u64::MAX)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert!(allows(&policy, &call), "{:?}", policy.evaluate(&call));

    // Each difference is seen: another principal, text where a long was, one more argument,
    // and no remote tool (then the context has no `remote_tool` at all).
    let mut bob = call.clone();
    bob.principal = "bob".to_owned();
    assert!(!allows(&policy, &bob));
    let mut text = call.clone();
    text.arguments.insert("n".to_owned(), json!("-3"));
    assert!(!allows(&policy, &text));
    let mut more = call.clone();
    more.arguments.insert("extra".to_owned(), json!("e"));
    assert!(!allows(&policy, &more));
    call.remote_tool = None;
    assert!(!allows(&policy, &call));
    let absent =
        cedar(r#"permit (principal, action, resource) when { !(context has remote_tool) };"#);
    assert!(allows(&absent, &call));
}

#[test]
fn an_argument_cannot_smuggle_an_entity_reference() {
    let policy =
        cedar(r#"permit (principal, action, resource) when { context.arguments.x == "a" };"#);
    let call = Call::new(
        "t",
        json!({"x": {"__entity": {"type": "Tenant", "id": "root"}}}),
    );
    // A record with an `__entity` key, not an entity: the comparison is false, not an error.
    let why = denial(&policy, &call);
    assert!(why.starts_with("no Cedar policy permits"), "{why}");
}

#[test]
fn forbid_wins_and_names_the_policies_without_a_reason() {
    let policy = cedar(
        r#"permit (principal, action, resource);
           @id("no-host-exec") forbid (principal, action == Action::"host_exec", resource);
           forbid (principal, action == Action::"host_exec", resource);"#,
    );
    assert!(allows(&policy, &Call::new("list_jobs", json!({}))));
    let why = denial(&policy, &Call::new("host_exec", json!({})));
    assert_eq!(why, "forbidden by Cedar policy `no-host-exec`, `policy2`");
}

#[test]
fn an_evaluation_error_denies_naming_the_policy() {
    let policy = cedar(
        r#"permit (principal, action, resource);
           @id("sloppy") forbid (principal, action, resource) when { context.arguments.path like "/etc/*" };"#,
    );
    // No `path`: the forbid errors instead of applying; Cedar would allow, we deny.
    let why = denial(&policy, &Call::new("write_file", json!({})));
    assert!(
        why.starts_with("Cedar policy `sloppy` could not be evaluated:"),
        "{why}"
    );
}

#[test]
fn parse_errors_name_the_file_and_line() {
    let why = refused(json!({
        "policy": "permit (principal, action, resource);\n\nforbid (principal, action resource);",
        "policy_file": "rules.cedar",
    }));
    assert!(
        why.contains("cannot parse the Cedar policies: `rules.cedar` line 3:"),
        "{why}"
    );
    assert!(!why.contains('\n'), "{why}");
}

#[test]
fn a_schema_validates_the_policies_at_load() {
    let schema = r#"entity Tenant = { principal: String };
                    entity Instance;
                    action "submit_job" appliesTo { principal: Tenant, resource: Instance, context: { arguments: { command: String } } };"#;
    let settings = |policy: &str, schema: &str| json!({"policy": policy, "policy_file": "p.cedar", "schema": schema, "schema_file": "s.cedarschema"});
    let good = r#"forbid (principal, action == Action::"submit_job", resource) when { context.arguments.command like "*rm -rf*" };"#;
    let checked = chain(vec![Spec::stock("cedar", "cedar", settings(good, schema))]);
    assert!(!allows(&checked, &submit("chem", "rm -rf /", 0)));
    let bad = "\npermit (principal, action == Action::\"submit_job\", resource) when { context.arguments.gpus > 1 };";
    let why = refused(settings(bad, schema));
    assert!(
        why.contains(
            "the Cedar policies do not match the schema `s.cedarschema`: `p.cedar` line 2"
        ),
        "{why}"
    );
    let why = refused(settings(good, "entity Tenant = {"));
    assert!(
        why.contains("cannot parse the Cedar schema: `s.cedarschema` line 1"),
        "{why}"
    );
}

#[test]
fn bad_settings_are_refused() {
    let why = refused(json!({}));
    assert!(why.contains("policy_file"), "{why}");
    let why = refused(json!({"policy": "", "schema_fil": "x"}));
    assert!(why.contains("schema_fil"), "{why}");
}
