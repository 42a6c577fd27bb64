//! The dispatch function end to end, in process: real policies (the embedded defaults plus a
//! test config), the real state directory, cap-std files and the fsync'd audit log — every
//! call decided, run or refused, and recorded.

use std::path::Path;

use crate::support::gateway as support;

use hpcgate::audit::{Scope, verify};
use hpcgate::gateway::Gateway;
use hpcgate::policy::cases::{parse_cases, run_cases};
use hpcgate::policy::{EngineSettings, PolicyEngine};
use serde_json::{Map, Value, json};
use support::{args, caller, ok};

const CONFIG: &str = r#"
[[policies]]
name = "tools"
module = "stock:tool-filter"
[policies.config]
deny = ["host_exec", "list_archived_instances"]

[[policies]]
name = "paths"
module = "stock:path-rules"
[policies.config]
deny_read = ["**/.ssh/**", "**/secret?.txt", "/workspace/vault"]
deny_write = ["**/.git/**"]
"#;

fn gateway(dir: &Path) -> Gateway {
    support::open(dir, CONFIG)
}

#[test]
fn create_write_read_round_trip_is_audited_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    ok(gw.call(&alice, "write_file", args(json!({"instance_id": "run1", "path": "notes/a.txt", "content": "hello", "create_dirs": true}))));
    let read = ok(gw.call(
        &alice,
        "read_file",
        args(json!({"instance_id": "run1", "path": "/workspace/notes/a.txt"})),
    ));
    assert_eq!(read["content"], "hello");
    assert_eq!(read["eof"], true);

    let audit_dir = dir.path().join("state/audit");
    let report = verify(&audit_dir, None).unwrap();
    assert!(report.intact, "{report:?}");
    // Create and write: a decision written ahead and an outcome each; the read: one record
    // holding both (one fsync); and the instance's creation.
    assert_eq!(report.records, 6);
    let log = std::fs::read_to_string(audit_dir.join("audit-000001.jsonl")).unwrap();
    let records: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let read = records.last().unwrap();
    assert_eq!(
        (
            &read["tool"],
            &read["decision"]["decision"],
            &read["outcome"]["bytes"]
        ),
        (&json!("read_file"), &json!("allow"), &json!(5)),
        "{read}"
    );
    assert!(
        read["call"].is_object() && read["duration_ms"].is_number(),
        "{read}"
    );
    let write_outcome = &records[records.len() - 2];
    assert_eq!(
        write_outcome["detail"]["decision_seq"],
        records[records.len() - 3]["seq"],
        "a write's outcome points at the decision written before it ran: {log}"
    );
    let created: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "instance.created")
        .collect();
    assert_eq!(created.len(), 1, "{log}");
    assert_eq!(
        (
            &created[0]["tenant"],
            &created[0]["principal"],
            &created[0]["instance"]
        ),
        (&json!("chem"), &json!("chem-user"), &json!("run1"))
    );
    assert!(
        !log.contains("hello"),
        "write_file content is redacted in the audit log"
    );
    let (cases, skipped) = parse_cases(&log).unwrap();
    assert_eq!((cases.len(), skipped), (3, 3));
    let engine = PolicyEngine::new(EngineSettings {
        cache_dir: None,
        ..EngineSettings::default()
    })
    .unwrap();
    let (config, base) = hpcgate::config::Config::load(&dir.path().join("gateway.toml")).unwrap();
    let chain = config.build_chain(&engine, &base).unwrap();
    assert!(
        run_cases(&chain, &cases, None).is_empty(),
        "the audit log replays to the same decisions"
    );
}

#[test]
fn a_denied_call_does_nothing_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    let denied = gw.call(&alice, "write_file", args(json!({"instance_id": "run1", "path": ".git/config", "content": "x", "create_dirs": true})));
    assert!(denied.is_error);
    assert!(
        denied.text.starts_with("denied by policy `paths`: "),
        "{}",
        denied.text
    );
    assert!(
        denied.text.contains("/workspace/.git/config"),
        "{}",
        denied.text
    );
    let stat = gw.call(
        &alice,
        "stat_path",
        args(json!({"instance_id": "run1", "path": ".git"})),
    );
    assert!(stat.is_error, "nothing was written: {}", stat.text);

    let log =
        hpcgate::audit::AuditLog::open(dir.path().join("state/audit"), Default::default()).unwrap();
    let records: Vec<_> = log
        .tail(&Scope::AllTenants, &Default::default(), 100)
        .unwrap();
    let denial = records
        .iter()
        .find(|r| r.entry.tool.as_deref() == Some("write_file") && r.entry.decision.is_some())
        .expect("the denial is recorded");
    assert_eq!(
        serde_json::to_value(&denial.entry.decision).unwrap()["decision"],
        "deny"
    );
}

#[test]
fn tools_list_hides_what_policy_forbids() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let names: Vec<_> = gw.tools(&caller("chem")).iter().map(|t| t.name).collect();
    assert!(names.contains(&"create_instance") && names.contains(&"read_file"));
    assert!(!names.contains(&"list_archived_instances"), "{names:?}");
    let write = gw
        .tools(&caller("chem"))
        .into_iter()
        .find(|t| t.name == "write_file")
        .unwrap();
    assert_eq!(
        write.input_schema["properties"]["content"]["type"],
        "string"
    );
    assert!(!write.read_only && write.destructive);
}

#[test]
fn tenants_are_isolated_and_escapes_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let (chem, bio) = (caller("chem"), caller("bio"));
    ok(gw.call(
        &chem,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    ok(gw.call(
        &chem,
        "write_file",
        args(json!({"instance_id": "run1", "path": "secret.txt", "content": "chem data"})),
    ));
    let guessed = gw.call(
        &bio,
        "read_file",
        args(json!({"instance_id": "run1", "path": "secret.txt"})),
    );
    assert!(
        guessed.is_error && !guessed.text.contains("chem"),
        "{}",
        guessed.text
    );
    ok(gw.call(
        &bio,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    let own = gw.call(
        &bio,
        "read_file",
        args(json!({"instance_id": "run1", "path": "secret.txt"})),
    );
    assert!(
        own.is_error,
        "bio's run1 is a different instance: {}",
        own.text
    );

    let state = dir.path().join("state").display().to_string();
    for path in [
        "../../../../etc/passwd",
        "/etc/passwd",
        "/workspace/../output/../../x",
    ] {
        let escape = gw.call(
            &chem,
            "read_file",
            args(json!({"instance_id": "run1", "path": path})),
        );
        assert!(escape.is_error, "{path}");
        assert!(
            !escape.text.contains(&state),
            "no host path in errors: {}",
            escape.text
        );
    }
    for id in ["../run1", "run1/../../x", "RUN1", "run1\n"] {
        let bad = gw.call(&chem, "describe_instance", args(json!({"instance_id": id})));
        assert!(bad.is_error, "{id:?}");
    }
}

#[test]
fn bad_arguments_and_unknown_tools_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    let unknown = gw.call(&alice, "rm_rf", Map::new());
    assert_eq!(
        unknown.text,
        "unknown tool `rm_rf`; call tools/list for the tools you may use"
    );
    let extra = gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "a", "colour": "red"})),
    );
    assert!(
        extra
            .text
            .starts_with("invalid arguments for `create_instance`: unknown field `colour`"),
        "{}",
        extra.text
    );
    let report = verify(&dir.path().join("state/audit"), None).unwrap();
    assert!(report.intact && report.records == 3, "{report:?}");
}

#[test]
fn directory_move_delete_and_search_go_through_policy() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    let on = |tool: &str, arguments: Value| {
        let mut arguments = args(arguments);
        arguments.insert("instance_id".into(), json!("run1"));
        gw.call(&alice, tool, arguments)
    };
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    ok(on(
        "make_directory",
        json!({"path": "src/deep", "parents": true}),
    ));
    ok(on(
        "write_file",
        json!({"path": "src/deep/a.rs", "content": "fn main() {}"}),
    ));
    let found = ok(on("search_files", json!({"pattern": "**/*.rs"})));
    assert_eq!(
        found["matches"][0]["path"], "/workspace/src/deep/a.rs",
        "{found}"
    );

    let into_git = on(
        "move_path",
        json!({"source": "src/deep/a.rs", "destination": ".git/hooks/pre-commit"}),
    );
    assert!(
        into_git
            .text
            .starts_with("denied by policy `paths`: argument `destination`"),
        "{}",
        into_git.text
    );
    ok(on(
        "move_path",
        json!({"source": "src/deep/a.rs", "destination": "/output/a.rs"}),
    ));
    assert!(on("stat_path", json!({"path": "src/deep/a.rs"})).is_error);
    ok(on("stat_path", json!({"path": "/output/a.rs"})));

    let not_empty = on("delete_path", json!({"path": "src"}));
    assert!(
        not_empty.is_error,
        "a non-empty directory needs recursive: {}",
        not_empty.text
    );
    ok(on("delete_path", json!({"path": "src", "recursive": true})));
    assert!(on("stat_path", json!({"path": "src"})).is_error);
}

#[test]
fn copy_path_goes_through_policy_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    let on = |tool: &str, arguments: Value| {
        let mut arguments = args(arguments);
        arguments.insert("instance_id".into(), json!("run1"));
        gw.call(&alice, tool, arguments)
    };
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    ok(on(
        "write_file",
        json!({"path": "src/a.rs", "content": "fn main() {}", "create_dirs": true}),
    ));
    let into_git = on(
        "copy_path",
        json!({"source": "src", "destination": ".git/src"}),
    );
    assert!(
        into_git
            .text
            .starts_with("denied by policy `paths`: argument `destination`"),
        "{}",
        into_git.text
    );
    let copied = ok(on(
        "copy_path",
        json!({"source": "src", "destination": "/output/src"}),
    ));
    assert_eq!(
        (copied["files"].as_u64(), copied["bytes"].as_u64()),
        (Some(1), Some(12)),
        "{copied}"
    );
    let read = ok(on("read_file", json!({"path": "/output/src/a.rs"})));
    assert_eq!(read["content"], "fn main() {}");
    let again = on(
        "copy_path",
        json!({"source": "src", "destination": "/output/src"}),
    );
    assert!(
        again.is_error && again.text.contains("already exists"),
        "{}",
        again.text
    );
    let escape = on(
        "copy_path",
        json!({"source": "src/a.rs", "destination": "../x"}),
    );
    assert!(
        escape.is_error && escape.text.contains("outside the instance"),
        "{}",
        escape.text
    );

    let audit_dir = dir.path().join("state/audit");
    assert!(verify(&audit_dir, None).unwrap().intact);
    let log = std::fs::read_to_string(audit_dir.join("audit-000001.jsonl")).unwrap();
    let decided: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["tool"] == "copy_path" && r["decision"].is_object())
        .collect();
    let kinds: Vec<_> = decided
        .iter()
        .map(|r| r["decision"]["decision"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            json!("deny"),
            json!("allow"),
            json!("allow"),
            json!("allow")
        ],
        "{log}"
    );
}

#[test]
fn a_reload_swaps_the_policies_and_a_bad_one_keeps_the_old_set() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    let denied = gw.call(&alice, "host_exec", Map::new());
    assert!(
        denied.text.contains("denied by policy `tools`"),
        "{}",
        denied.text
    );

    // Allow host_exec; also change the sandbox, which only a restart applies.
    let allowing = "[sandbox]\ntmp_size_mb = 32\n[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n[policies.config]\ndeny = []\n";
    let reloaded = gw
        .reload(support::settings(dir.path(), allowing).unwrap())
        .unwrap();
    assert_eq!(reloaded.policies, 1);
    assert_eq!(reloaded.needs_restart, ["sandbox"]);
    ok(gw.call(&alice, "host_exec", Map::new()));

    // A policy that cannot load: refused, the running set stays, and the attempt is audited.
    let broken = "[[policies]]\nname = \"tools\"\nmodule = \"/nonexistent/policy.wasm\"\n";
    let error = gw
        .reload(support::settings(dir.path(), broken).unwrap())
        .unwrap_err();
    assert!(format!("{error:#}").contains("policy.wasm"), "{error:#}");
    ok(gw.call(&alice, "host_exec", Map::new()));

    // A cap checked against sandbox limits that only a restart would apply: the ones that
    // stay (4096 MB) are above it, so a job leaving `memory_mb` out would pass it. Refused.
    let capped = "[sandbox.limits]\nmemory_mb = 2048\n[[policies]]\nname = \"caps\"\n\
                  module = \"stock:resource-caps\"\n[policies.config]\n\
                  memory_mb = { max = 2048 }\n";
    let settings = support::settings(dir.path(), capped).unwrap();
    let error = gw.reload(settings).unwrap_err();
    assert!(format!("{error:#}").contains("gets 4096"), "{error:#}");
    ok(gw.call(&alice, "host_exec", Map::new()));

    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let reloads: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "policies.reloaded")
        .collect();
    assert_eq!(reloads.len(), 3);
    assert_eq!(reloads[0]["detail"]["policies"], json!(["tools"]));
    assert!(reloads[1]["outcome"]["error"].is_string());
}

#[test]
fn the_default_chain_runs_resource_caps_only_for_submit_job() {
    let dir = tempfile::tempdir().unwrap();
    let gw = support::open(dir.path(), "");
    let alice = caller("chem");
    ok(gw.call(&alice, "create_instance", args(json!({"instance_id": "r"}))));
    ok(gw.call(
        &alice,
        "write_file",
        args(json!({"instance_id": "r", "path": "a", "content": "x"})),
    ));
    ok(gw.call(
        &alice,
        "stat_path",
        args(json!({"instance_id": "r", "path": "a"})),
    ));
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let stat: Value = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["tool"] == "stat_path")
        .unwrap();
    let ran: Vec<_> = (stat["policies"].as_array().unwrap().iter())
        .map(|p| p["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        ran,
        ["tools", "paths"],
        "caps is scoped to submit_job: {stat}"
    );

    let engine = PolicyEngine::new(EngineSettings {
        cache_dir: None,
        ..EngineSettings::default()
    })
    .unwrap();
    let settings = support::settings(dir.path(), "").unwrap();
    let chain = settings.build_chain(&engine).unwrap();
    let mut call: hpcgate::policy::Call = serde_json::from_value(stat["call"].clone()).unwrap();
    call.tool = "submit_job".into();
    call.read_only = false;
    call.arguments =
        args(json!({"instance_id": "r", "command": "make", "resources": {"cpus": 99}}));
    let outcome = chain.evaluate(&call);
    let ran: Vec<_> = outcome.policies.iter().map(|p| p.policy.as_str()).collect();
    assert_eq!(ran, ["tools", "paths", "caps"]);
    assert_eq!(outcome.decision.policy.as_deref(), Some("caps"));
    assert_eq!(
        outcome.decision.arguments.unwrap()["resources"]["cpus"],
        json!(8),
        "the default caps clamp cpus to 8"
    );
}

/// A listing leaves out what the policies keep from the caller: with `**/.ssh/**` denied for
/// reading, neither a recursive listing nor a search from above shows `.ssh` or the names in
/// it (asked of the chain entry by entry, as the same tool), and says how many it left out;
/// everything else shows. Before, the names under a denied tree were listed.
#[test]
fn listings_leave_out_what_the_caller_may_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let alice = caller("chem");
    let run1 = |tool: &str, arguments: Value| {
        let mut arguments = args(arguments);
        arguments.insert("instance_id".into(), json!("run1"));
        gw.call(&alice, tool, arguments)
    };
    ok(run1("create_instance", json!({})));
    let write = json!({"path": "notes/a.txt", "content": "x", "create_dirs": true});
    ok(run1("write_file", write));
    // Planted as a job would: the policies refuse writing there.
    let workspace = crate::support::dav::find_workspace(&dir.path().join("state"), "chem", "run1");
    std::fs::create_dir_all(workspace.join("deep/.ssh")).unwrap();
    std::fs::write(workspace.join("deep/.ssh/id_secret_project"), "key").unwrap();
    // Shown escaped (`secret\\n.txt`), which the glob does not match; the name itself does.
    std::fs::write(workspace.join("notes/secret\n.txt"), "x").unwrap();

    let paths = |result: &Value, key: &str| -> Vec<String> {
        let entries = result[key].as_array().unwrap();
        entries
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = run1(
        "list_directory",
        json!({"path": "/workspace", "recursive": true}),
    );
    assert!(
        listed.text.contains("3 left out by policy"),
        "{}",
        listed.text
    );
    let shown = paths(&ok(listed), "entries");
    assert!(
        shown.contains(&"/workspace/notes/a.txt".to_owned()),
        "{shown:?}"
    );
    assert!(shown.contains(&"/workspace/deep".to_owned()), "{shown:?}");
    assert!(!shown.iter().any(|p| p.contains("secret")), "{shown:?}");
    assert!(!shown.iter().any(|p| p.contains(".ssh")), "{shown:?}");
    let found = run1(
        "search_files",
        json!({"path": "/workspace", "pattern": "**"}),
    );
    assert!(found.text.contains("left out by policy"), "{}", found.text);
    let shown = paths(&ok(found), "matches");
    assert!(
        shown.contains(&"/workspace/notes/a.txt".to_owned()),
        "{shown:?}"
    );
    assert!(!shown.iter().any(|p| p.contains(".ssh")), "{shown:?}");
    // A search returns only what matches: a match under a directory the policies keep from
    // the caller (`/workspace/vault`, the directory alone) is left out all the same.
    std::fs::create_dir(workspace.join("vault")).unwrap();
    std::fs::write(workspace.join("vault/key.pem"), "k").unwrap();
    let pem = run1(
        "search_files",
        json!({"path": "/workspace", "pattern": "**/*.pem"}),
    );
    assert!(pem.text.contains("1 left out by policy"), "{}", pem.text);
    assert_eq!(paths(&ok(pem), "matches"), Vec::<String>::new());
    // The denied tree itself is still refused whole, as before.
    let inside = run1("list_directory", json!({"path": "/workspace/deep/.ssh"}));
    assert!(
        inside.is_error && inside.text.contains("deny_read"),
        "{}",
        inside.text
    );
}
