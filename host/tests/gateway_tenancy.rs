//! The cross-tenant matrix, in process (the dispatch function is where isolation lives; the
//! transports only establish the caller): for every builtin tool, tenant `bio` aims at tenant
//! `chem`'s instance ids, job ids and paths, with a policy set that allows everything. Every
//! attempt is refused or sees only bio's own objects; no reply contains anything of chem's; a
//! refusal for chem's id reads exactly like one for an id that exists nowhere; chem's objects
//! are untouched; bio's audit query shows none of chem's records.

#[path = "support/gateway.rs"]
mod support;

use hpcgate::audit::{Filter, Scope, tail};
use hpcgate::state::TenantName;
use hpcgate::tools::Tool;
use serde_json::{Value, json};
use support::{args, caller, ok};

/// Everything allowed: isolation must not depend on policy.
const PERMISSIVE: &str = r#"
policies = []
"#;

/// chem's secrets; none may appear in any reply to bio.
const SECRET_INSTANCE: &str = "chem-private";
const SECRET_TEXT: &str = "chem-only-content-7f3a";

/// Arguments for `tool` aimed at `instance` and `job` (or at made-up ids).
fn attack_arguments(tool: &str, instance: &str, job: &str) -> Vec<Value> {
    let path = "data/secret.txt";
    match tool {
        "create_instance" => vec![json!({"instance_id": instance})],
        "list_instances" | "list_archived_instances" => vec![json!({})],
        "describe_instance" | "archive_instance" => vec![json!({"instance_id": instance})],
        "update_instance" => vec![json!({"instance_id": instance, "description": "pwned"})],
        "submit_job" => {
            vec![json!({"instance_id": instance, "command": "cat data/secret.txt", "timeout": 5})]
        }
        "poll_job" | "cancel_job" => vec![json!({"instance_id": instance, "job_id": job})],
        "list_jobs" => vec![json!({"instance_id": instance}), json!({})],
        "read_file" | "stat_path" => vec![
            json!({"instance_id": instance, "path": path}),
            json!({"instance_id": instance, "path": format!("../../../{SECRET_INSTANCE}/workspace/{path}")}),
        ],
        "write_file" => vec![json!({"instance_id": instance, "path": path, "content": "pwned"})],
        "list_directory" => {
            vec![json!({"instance_id": instance, "path": "/workspace", "recursive": true})]
        }
        "make_directory" => vec![json!({"instance_id": instance, "path": "data/x"})],
        "move_path" => {
            vec![json!({"instance_id": instance, "source": path, "destination": "stolen.txt"})]
        }
        "delete_path" => vec![json!({"instance_id": instance, "path": path})],
        "search_files" => vec![json!({"instance_id": instance, "pattern": "**"})],
        "cluster_status" => vec![json!({})],
        "host_exec" => vec![json!({})],
        other => panic!("the matrix has no row for tool `{other}`: add one"),
    }
}

#[test]
fn no_tool_lets_one_tenant_see_or_touch_anothers_objects() {
    let dir = tempfile::tempdir().unwrap();
    let gw = support::open(dir.path(), PERMISSIVE);
    let (chem, bio) = (caller("chem"), caller("bio"));
    ok(gw.call(
        &chem,
        "create_instance",
        args(json!({"instance_id": SECRET_INSTANCE, "description": SECRET_TEXT})),
    ));
    ok(gw.call(&chem, "write_file", args(json!({"instance_id": SECRET_INSTANCE, "path": "data/secret.txt", "content": SECRET_TEXT, "create_dirs": true}))));
    let job = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": SECRET_INSTANCE, "command": "sleep 60", "timeout": 0})),
    ))["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let fake_job = "j-aaaaaaaaaaaaaaaa";
    // bio has an instance of its own, so "no such instance" is not the only answer.
    ok(gw.call(
        &bio,
        "create_instance",
        args(json!({"instance_id": "bio-own"})),
    ));

    // create_instance last: once bio has its own `chem-private` (ids are per tenant), the
    // other rows would aim at bio's instance instead of chem's.
    let mut tools: Vec<&str> = Tool::all().map(Tool::name).collect();
    tools.sort_by_key(|name| *name == "create_instance");
    for name in tools {
        let aimed = attack_arguments(name, SECRET_INSTANCE, &job);
        let made_up = attack_arguments(name, "nobody-has-this", fake_job);
        for (real, fake) in aimed.iter().zip(&made_up) {
            let reply = gw.call(&bio, name, args(real.clone()));
            let text = format!("{} {}", reply.text, reply.structured);
            // An id bio sent may be echoed back; anything else of chem's may not appear.
            let sent_job = real.to_string().contains(&job);
            assert!(
                !text.contains(SECRET_TEXT) && (sent_job || !text.contains(&job)),
                "{name} {real}: chem's data leaked: {text}"
            );
            if name == "create_instance" {
                assert!(!reply.is_error, "{name}: {}", reply.text);
                continue;
            }
            let other = gw.call(&bio, name, args(fake.clone()));
            assert_eq!(
                reply.is_error, other.is_error,
                "{name}: chem's ids and made-up ids must get the same kind of answer"
            );
            let normalise = |t: &str| {
                t.replace(SECRET_INSTANCE, "<instance>")
                    .replace("nobody-has-this", "<instance>")
                    .replace(&job, "<job>")
                    .replace(fake_job, "<job>")
            };
            if reply.is_error {
                assert_eq!(
                    normalise(&reply.text),
                    normalise(&other.text),
                    "{name}: a refusal must not tell chem's ids from ids that exist nowhere"
                );
            }
        }
    }

    // chem's objects are intact.
    let read = ok(gw.call(
        &chem,
        "read_file",
        args(json!({"instance_id": SECRET_INSTANCE, "path": "data/secret.txt"})),
    ));
    assert_eq!(read["content"], SECRET_TEXT);
    let described = ok(gw.call(
        &chem,
        "describe_instance",
        args(json!({"instance_id": SECRET_INSTANCE})),
    ));
    assert_eq!(described["instance"]["description"], SECRET_TEXT);
    let polled = ok(gw.call(
        &chem,
        "poll_job",
        args(json!({"instance_id": SECRET_INSTANCE, "job_id": job})),
    ));
    assert_eq!(
        polled["job"]["status"], "running",
        "bio's cancel did not reach chem's job"
    );
    let listed = ok(gw.call(&chem, "list_instances", args(json!({}))));
    assert_eq!(listed["total"], 1, "bio's create made no instance for chem");

    // Audit queries are tenant-scoped: bio sees none of chem's records.
    let audit = dir.path().join("state/audit");
    let scope = Scope::Tenant(TenantName::parse("bio").unwrap().to_string());
    let bio_records = tail(&audit, &scope, &Filter::default(), usize::MAX).unwrap();
    assert!(!bio_records.is_empty());
    for record in &bio_records {
        let text = serde_json::to_string(record).unwrap();
        assert_eq!(record.entry.tenant.as_deref(), Some("bio"), "{text}");
        assert!(!text.contains(SECRET_TEXT), "{text}");
    }
    ok(gw.call(
        &chem,
        "cancel_job",
        args(json!({"instance_id": SECRET_INSTANCE, "job_id": job})),
    ));
}
