//! The cross-tenant matrix, independent of the transport: tenant `chem` sets up a secret
//! instance, file and job; tenant `bio` aims every builtin tool at chem's instance ids, job ids
//! and paths; chem then checks that nothing of its was touched, and the audit query scoped to
//! bio shows none of chem's records. A test supplies how one tenant makes one call (in process
//! through `Gateway::call`, or as an MCP client over a transport), so the table is written once.

use std::path::Path;

use hpcgate::audit::{Filter, Scope, tail};
use hpcgate::tools::Tool;
use serde_json::{Value, json};

/// chem's secrets; none may appear in any reply to bio.
pub const SECRET_INSTANCE: &str = "chem-private";
pub const SECRET_TEXT: &str = "chem-only-content-7f3a";
/// Ids that exist nowhere, to compare refusals with.
const MADE_UP_INSTANCE: &str = "nobody-has-this";
const MADE_UP_JOB: &str = "j-aaaaaaaaaaaaaaaa";

/// What a test needs of one tool result, whatever the transport.
#[derive(Debug, Clone)]
pub struct Reply {
    pub text: String,
    pub structured: Value,
    pub is_error: bool,
}

/// One call by one tenant: tool name and arguments (an object).
pub type Call<'a> = dyn FnMut(&str, Value) -> Reply + 'a;

/// One MCP `tools/call` over a blocking bridge; a JSON-RPC error counts as a refusal with its
/// message.
pub fn mcp_call(
    runtime: &tokio::runtime::Runtime,
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> Reply {
    let Value::Object(arguments) = arguments else {
        unreachable!("arguments are objects")
    };
    let params = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    match runtime.block_on(client.call_tool(params)) {
        Ok(result) => Reply {
            text: serde_json::to_string(&result.content).unwrap(),
            structured: result.structured_content.unwrap_or(json!(null)),
            is_error: result.is_error == Some(true),
        },
        Err(error) => Reply {
            text: error.to_string(),
            structured: json!(null),
            is_error: true,
        },
    }
}

fn ok(call: &mut Call<'_>, tool: &str, arguments: Value) -> Value {
    let reply = call(tool, arguments);
    assert!(!reply.is_error, "{tool}: {}", reply.text);
    reply.structured
}

/// chem's side before the attack: its secret instance, file and a running job; the job id.
pub fn chem_setup(chem: &mut Call<'_>) -> String {
    ok(
        chem,
        "create_instance",
        json!({"instance_id": SECRET_INSTANCE, "description": SECRET_TEXT}),
    );
    ok(
        chem,
        "write_file",
        json!({"instance_id": SECRET_INSTANCE, "path": "data/secret.txt", "content": SECRET_TEXT, "create_dirs": true}),
    );
    let submitted = ok(
        chem,
        "submit_job",
        json!({"instance_id": SECRET_INSTANCE, "command": "sleep 60", "timeout": 0}),
    );
    submitted["job"]["job_id"].as_str().unwrap().to_owned()
}

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
        "run_python" => vec![json!({
            "instance_id": instance,
            "code": "print(open('data/secret.txt').read())",
            "timeout": 5,
        })],
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
        "copy_path" => vec![
            json!({"instance_id": instance, "source": path, "destination": "stolen.txt"}),
            json!({"instance_id": instance, "source": format!("../../../{SECRET_INSTANCE}/workspace/{path}"), "destination": "stolen.txt"}),
        ],
        "delete_path" => vec![json!({"instance_id": instance, "path": path})],
        "search_files" => vec![json!({"instance_id": instance, "pattern": "**"})],
        "cluster_status" => vec![json!({})],
        "host_exec" => vec![json!({})],
        other => panic!("the matrix has no row for tool `{other}`: add one"),
    }
}

/// bio's side: every builtin tool at chem's ids (`job` is chem's job). Every attempt is refused
/// or sees only bio's own objects; no reply contains anything of chem's; a refusal for chem's
/// id reads exactly like one for an id that exists nowhere.
pub fn bio_attack(bio: &mut Call<'_>, job: &str) {
    // bio has an instance of its own, so "no such instance" is not the only answer.
    ok(bio, "create_instance", json!({"instance_id": "bio-own"}));
    // create_instance last: once bio has its own `chem-private` (ids are per tenant), the
    // other rows would aim at bio's instance instead of chem's.
    let mut tools: Vec<&str> = Tool::all().map(Tool::name).collect();
    tools.sort_by_key(|name| *name == "create_instance");
    for name in tools {
        let aimed = attack_arguments(name, SECRET_INSTANCE, job);
        let made_up = attack_arguments(name, MADE_UP_INSTANCE, MADE_UP_JOB);
        for (real, fake) in aimed.iter().zip(&made_up) {
            let reply = bio(name, real.clone());
            let text = format!("{} {}", reply.text, reply.structured);
            // An id bio sent may be echoed back; anything else of chem's may not appear.
            let sent_job = real.to_string().contains(job);
            assert!(
                !text.contains(SECRET_TEXT) && (sent_job || !text.contains(job)),
                "{name} {real}: chem's data leaked: {text}"
            );
            if name == "create_instance" {
                assert!(!reply.is_error, "{name}: {}", reply.text);
                continue;
            }
            let other = bio(name, fake.clone());
            assert_eq!(
                reply.is_error, other.is_error,
                "{name}: chem's ids and made-up ids must get the same kind of answer"
            );
            let normalise = |t: &str| {
                t.replace(SECRET_INSTANCE, "<instance>")
                    .replace(MADE_UP_INSTANCE, "<instance>")
                    .replace(job, "<job>")
                    .replace(MADE_UP_JOB, "<job>")
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
}

/// chem's side after the attack: its objects are intact, then its job is cancelled.
pub fn chem_check(chem: &mut Call<'_>, job: &str) {
    let read = ok(
        chem,
        "read_file",
        json!({"instance_id": SECRET_INSTANCE, "path": "data/secret.txt"}),
    );
    assert_eq!(read["content"], SECRET_TEXT);
    let described = ok(
        chem,
        "describe_instance",
        json!({"instance_id": SECRET_INSTANCE}),
    );
    assert_eq!(described["instance"]["description"], SECRET_TEXT);
    let polled = ok(
        chem,
        "poll_job",
        json!({"instance_id": SECRET_INSTANCE, "job_id": job}),
    );
    assert_eq!(
        polled["job"]["status"], "running",
        "bio's cancel did not reach chem's job"
    );
    let listed = ok(chem, "list_instances", json!({}));
    assert_eq!(listed["total"], 1, "bio's create made no instance for chem");
    ok(
        chem,
        "cancel_job",
        json!({"instance_id": SECRET_INSTANCE, "job_id": job}),
    );
}

/// Audit queries are tenant-scoped: bio's query over `audit_dir` shows only bio's records,
/// none of which holds chem's secret.
pub fn assert_bio_audit_scoped(audit_dir: &Path) {
    let scope = Scope::Tenant("bio".to_owned());
    let bio_records = tail(audit_dir, &scope, &Filter::default(), usize::MAX).unwrap();
    assert!(!bio_records.is_empty());
    for record in &bio_records {
        let text = serde_json::to_string(record).unwrap();
        assert_eq!(record.entry.tenant.as_deref(), Some("bio"), "{text}");
        assert!(!text.contains(SECRET_TEXT), "{text}");
    }
}
