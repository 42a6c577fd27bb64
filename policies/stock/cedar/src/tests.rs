//! Unit tests of `stock:cedar`, natively: the request mapping, the example rules, faults and
//! the errors an admin sees.

use hpcgate_policy_sdk::{Call, Decision, Phase, Policy};
use serde_json::json;

use super::Cedar;

const EXAMPLE: &str = include_str!("../../../../examples/policies/rules.cedar");

fn configure(policy: &str) -> Result<Cedar, String> {
    Cedar::configure(&json!({"policy": policy, "policy_file": "rules.cedar"}).to_string())
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
    call.instance = Some("run1".to_owned());
    call
}

#[test]
fn example_rules() {
    let policy = configure(EXAMPLE).expect("the example parses");
    assert!(policy.evaluate(&submit("chem", "make", 4)).is_allow());
    let why = reason(policy.evaluate(&submit("chem", "rm -rf /workspace", 0)));
    assert_eq!(why, "a job command may not contain `rm -rf`");
    let why = reason(policy.evaluate(&submit("chem", "make", 5)));
    assert_eq!(why, "tenant `chem` may use at most 4 GPUs per job");
    assert!(policy.evaluate(&submit("bio", "make", 8)).is_allow());

    let mut write = Call::new("write_file", json!({"path": "/workspace/inputs/a.csv"}));
    assert!(reason(policy.evaluate(&write)).contains("read-only `/workspace/inputs`"));
    write.read_only = true;
    assert!(policy.evaluate(&write).is_allow());
}

#[test]
fn the_request_maps_tenant_principal_tool_instance_and_context() {
    let policy = configure(
        r#"permit (principal == Tenant::"chem", action == Action::"submit_job", resource == Instance::"run1")
           when { principal.principal == "alice" && context.via == "cli" && context.phase == "call"
                  && context.server == "builtin" && context.usage.running_jobs == 2
                  && context.arguments.resources.gpus == 1 && context.arguments.tags.contains("x")
                  && !(context.arguments has note) && context.arguments.ratio == "0.5" };
           permit (principal, action, resource == Instance::"(none)") when { context.phase == "list" };
           permit (principal, action, resource) when { context has remote_tool && context.remote_tool == "read" };"#,
    )
    .unwrap();
    let mut call = submit("chem", "make", 1);
    call.principal = "alice".to_owned();
    call.via = hpcgate_policy_sdk::Via::Cli;
    call.usage.insert("running_jobs".to_owned(), 2);
    call.arguments
        .insert("tags".to_owned(), json!(["x", "y", null]));
    call.arguments.insert("note".to_owned(), json!(null));
    call.arguments.insert("ratio".to_owned(), json!(0.5));
    assert!(
        policy.evaluate(&call).is_allow(),
        "{:?}",
        policy.evaluate(&call)
    );
    call.principal = "bob".to_owned();
    let why = reason(policy.evaluate(&call));
    assert_eq!(
        why,
        "no Cedar policy permits `submit_job` for tenant `chem`"
    );

    let mut list = Call::new("submit_job", json!({}));
    list.phase = Phase::List;
    assert!(policy.evaluate(&list).is_allow());
    let mut proxied = Call::new("fs__read", json!({}));
    proxied.server = "fs".to_owned();
    proxied.remote_tool = Some("read".to_owned());
    assert!(policy.evaluate(&proxied).is_allow());
}

#[test]
fn an_argument_cannot_smuggle_an_entity_reference() {
    let policy =
        configure(r#"permit (principal, action, resource) when { context.arguments.x == "a" };"#)
            .unwrap();
    let call = Call::new(
        "t",
        json!({"x": {"__entity": {"type": "Tenant", "id": "root"}}}),
    );
    // A record with an `__entity` key, not an entity: the comparison is false, not an error.
    let why = reason(policy.evaluate(&call));
    assert!(why.starts_with("no Cedar policy permits"), "{why}");
}

#[test]
fn forbid_wins_and_names_the_policies_without_a_reason() {
    let policy = configure(
        r#"permit (principal, action, resource);
           @id("no-host-exec") forbid (principal, action == Action::"host_exec", resource);
           forbid (principal, action == Action::"host_exec", resource);"#,
    )
    .unwrap();
    assert!(
        policy
            .evaluate(&Call::new("list_jobs", json!({})))
            .is_allow()
    );
    let why = reason(policy.evaluate(&Call::new("host_exec", json!({}))));
    assert_eq!(why, "forbidden by Cedar policy `no-host-exec`, `policy2`");
}

#[test]
fn an_evaluation_error_denies_naming_the_policy() {
    let policy = configure(
        r#"permit (principal, action, resource);
           @id("sloppy") forbid (principal, action, resource) when { context.arguments.path like "/etc/*" };"#,
    )
    .unwrap();
    // No `path`: the forbid errors instead of applying; Cedar would allow, we deny.
    let why = reason(policy.evaluate(&Call::new("write_file", json!({}))));
    assert!(
        why.starts_with("Cedar policy `sloppy` could not be evaluated:"),
        "{why}"
    );
}

#[test]
fn parse_errors_name_the_file_and_line() {
    let why =
        configure("permit (principal, action, resource);\n\nforbid (principal, action resource);")
            .err()
            .expect("a parse error");
    assert!(
        why.starts_with("cannot parse the Cedar policies: `rules.cedar` line 3:"),
        "{why}"
    );
    assert!(!why.contains('\n'), "{why}");
}

#[test]
fn a_schema_validates_the_policies_at_load() {
    let schema = r#"entity Tenant = { principal: String };
                    entity Instance;
                    action "submit_job" appliesTo { principal: Tenant, resource: Instance, context: { arguments: { command: String } } };"#;
    let with = |policy: &str, schema: &str| {
        Cedar::configure(
            &json!({"policy": policy, "policy_file": "p.cedar", "schema": schema, "schema_file": "s.cedarschema"})
                .to_string(),
        )
    };
    let good = r#"forbid (principal, action == Action::"submit_job", resource) when { context.arguments.command like "*rm -rf*" };"#;
    assert!(with(good, schema).is_ok(), "{:?}", with(good, schema).err());
    let bad = "\npermit (principal, action == Action::\"submit_job\", resource) when { context.arguments.gpus > 1 };";
    let why = with(bad, schema).err().expect("invalid against the schema");
    assert!(
        why.starts_with(
            "the Cedar policies do not match the schema `s.cedarschema`: `p.cedar` line 2"
        ),
        "{why}"
    );
    let why = with(good, "entity Tenant = {").err().expect("a bad schema");
    assert!(
        why.starts_with("cannot parse the Cedar schema: `s.cedarschema` line 1"),
        "{why}"
    );
}

#[test]
fn bad_settings_are_refused() {
    let why = Cedar::configure("{}").err().unwrap();
    assert!(why.contains("policy_file"), "{why}");
    let why = Cedar::configure(r#"{"policy": "", "schema_fil": "x"}"#)
        .err()
        .unwrap();
    assert!(why.contains("schema_fil"), "{why}");
}

/// The request's context and tenant entity are built as Cedar's values directly: they must be
/// exactly what Cedar makes of the same request written with its public expressions.
#[test]
fn the_context_and_tenant_are_what_cedar_makes_of_the_same_expressions() {
    use cedar_policy::{Context, Entities, Entity, EntityUid, RestrictedExpression as R};
    use std::collections::{HashMap, HashSet};

    let mut call = Call::new(
        "fs__write_file",
        json!({
            "path": "/a", "n": -3, "big": u64::MAX, "x": 1.5, "none": null, "yes": true,
            "list": [1, "two", null, [3], 1], "nested": {"b": {}, "c": null},
        }),
    );
    call.phase = Phase::List;
    call.via = hpcgate_policy_sdk::Via::Job;
    call.server = "fs".to_owned();
    call.remote_tool = Some("write_file".to_owned());
    call.read_only = true;
    call.usage = [("instances", 2), ("workspace_bytes", u64::MAX)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let record = |fields: Vec<(&str, R)>| {
        R::new_record(fields.into_iter().map(|(k, v)| (k.to_owned(), v))).unwrap()
    };
    let text = |s: &str| R::new_string(s.to_owned());
    let expected = Context::from_pairs(
        [
            (
                "arguments",
                record(vec![
                    ("path", text("/a")),
                    ("n", R::new_long(-3)),
                    ("big", text(&u64::MAX.to_string())),
                    ("x", text("1.5")),
                    ("yes", R::new_bool(true)),
                    (
                        "list",
                        R::new_set([R::new_long(1), text("two"), R::new_set([R::new_long(3)])]),
                    ),
                    ("nested", record(vec![("b", record(vec![]))])),
                ]),
            ),
            ("via", text("job")),
            ("read_only", R::new_bool(true)),
            (
                "usage",
                record(vec![
                    ("instances", R::new_long(2)),
                    ("workspace_bytes", text(&u64::MAX.to_string())),
                ]),
            ),
            ("phase", text("list")),
            ("server", text("fs")),
            ("remote_tool", text("write_file")),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    )
    .unwrap();
    assert_eq!(super::context(&call), expected);
    call.remote_tool = None;
    assert!(super::context(&call).get("remote_tool").is_none());

    let uid: EntityUid = r#"Tenant::"chem""#.parse().unwrap();
    let alice = HashMap::from([("principal".to_owned(), text("alice"))]);
    let expected = Entity::new(uid.clone(), alice, HashSet::new()).unwrap();
    let expected = Entities::from_entities([expected], None).unwrap();
    let built = super::tenant(uid.clone(), "alice").unwrap();
    // `==` on entities compares their ids only.
    assert!(built.deep_eq(&expected), "{built:?}");
    let bob = super::tenant(uid, "bob").unwrap();
    assert!(!bob.deep_eq(&expected));
}
