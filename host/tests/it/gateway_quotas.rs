//! Host-enforced limits through the dispatch function: per-tenant, per-tool rate limits
//! (checked after the policies, so a denied call costs nothing) and workspace/output byte
//! quotas.

use crate::support::gateway as support;

use serde_json::json;
use support::{args, caller, err, ok};

const CONFIG: &str = r#"
[tenants.chem]
quotas = { max_workspace_bytes = 100, max_output_bytes = 1000 }
[tenants.chem.rate_limits]
"stat_path" = { per_minute = 2 }

[tenants.bio]

[[policies]]
name = "paths"
module = "stock:path-rules"
[policies.config]
deny_read = ["**/.ssh/**"]
"#;

/// A gateway on [`CONFIG`] in `dir`, with chem's instance `run1`, and chem.
fn with_chems_run1(dir: &std::path::Path) -> (hpcgate::gateway::Gateway, hpcgate::gateway::Caller) {
    support::open_with_chems_run1(dir, CONFIG)
}

#[test]
fn rate_limits_apply_after_policy_per_tenant_and_say_when_to_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, chem) = with_chems_run1(dir.path());
    // Denied by policy: these must not use up the bucket.
    for _ in 0..5 {
        let denied = err(gw.call(
            &chem,
            "stat_path",
            args(json!({"instance_id": "run1", "path": ".ssh/id"})),
        ));
        assert!(denied.contains("denied by policy"), "{denied}");
    }
    let stat = || {
        gw.call(
            &chem,
            "stat_path",
            args(json!({"instance_id": "run1", "path": "/workspace"})),
        )
    };
    ok(stat());
    ok(stat());
    let limited = err(stat());
    assert!(
        limited.contains("rate limit") && limited.contains("retry in"),
        "{limited}"
    );
    // Other tools and other tenants are not limited by chem's stat_path bucket.
    ok(gw.call(&chem, "list_instances", args(json!({}))));
    let bio = caller("bio");
    ok(gw.call(
        &bio,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    for _ in 0..3 {
        ok(gw.call(
            &bio,
            "stat_path",
            args(json!({"instance_id": "run1", "path": "/workspace"})),
        ));
    }
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let refused: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["detail"]["retry_after_s"].is_u64())
        .collect();
    assert_eq!(refused.len(), 1, "the refusal is audited");
    assert!(
        refused[0]["outcome"]["error"]
            .as_str()
            .unwrap()
            .contains("rate limit")
    );
}

#[test]
fn byte_quotas_refuse_writes_and_new_jobs_once_full() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, chem) = with_chems_run1(dir.path());
    let write = |path: &str, bytes: usize| {
        gw.call(
            &chem,
            "write_file",
            args(json!({"instance_id": "run1", "path": path, "content": "x".repeat(bytes)})),
        )
    };
    ok(write("a.txt", 60));
    let refused = err(write("b.txt", 60));
    assert!(
        refused.contains("max_workspace_bytes") && refused.contains("60 bytes"),
        "{refused}"
    );
    // The output area has its own quota.
    ok(write("/output/big.txt", 900));
    err(write("/output/more.txt", 200));
    // A copy counts against the area it lands in, checked before anything is copied.
    let copy = |to: &str| {
        gw.call(
            &chem,
            "copy_path",
            args(json!({"instance_id": "run1", "source": "a.txt", "destination": to})),
        )
    };
    let refused = err(copy("a2.txt"));
    assert!(refused.contains("max_workspace_bytes"), "{refused}");
    ok(copy("/output/a.txt"));
    assert!(err(copy("/output/a2.txt")).contains("max_output_bytes"));
    // A move between areas counts against the area it lands in; one within an area adds
    // nothing, and is not counted.
    let move_path = |from: &str, to: &str| {
        gw.call(
            &chem,
            "move_path",
            args(json!({"instance_id": "run1", "source": from, "destination": to})),
        )
    };
    let refused = err(move_path("/output/big.txt", "big.txt"));
    assert!(refused.contains("max_workspace_bytes"), "{refused}");
    assert!(err(move_path("a.txt", "/output/a3.txt")).contains("max_output_bytes"));
    ok(move_path("/output/big.txt", "/output/big2.txt"));
    // No quota for bio.
    let bio = caller("bio");
    ok(gw.call(
        &bio,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    ok(gw.call(
        &bio,
        "write_file",
        args(json!({"instance_id": "run1", "path": "a.txt", "content": "x".repeat(5000)})),
    ));

    // A job may fill the workspace past its quota; the next job is refused until it is freed.
    ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "head -c 500 /dev/zero > filler", "timeout": 30})),
    ));
    let refused = err(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "true"})),
    ));
    assert!(refused.contains("max_workspace_bytes"), "{refused}");
    ok(gw.call(
        &chem,
        "delete_path",
        args(json!({"instance_id": "run1", "path": "filler"})),
    ));
    ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "true"})),
    ));
}

/// Writes, copies and moves in flight together cannot pass a quota: each holds the room it
/// may fill until it is in place, so of several that each fit alone only as many as fit
/// together succeed.
#[test]
fn writes_in_flight_together_cannot_pass_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, chem) = with_chems_run1(dir.path());
    ok(gw.call(
        &chem,
        "write_file",
        args(json!({"instance_id": "run1", "path": "/output/src.txt", "content": "x".repeat(60)})),
    ));
    for round in 0..4 {
        let calls = 8;
        let start = std::sync::Barrier::new(calls);
        let outputs =
            crate::support::dav::find_workspace(&dir.path().join("state"), "chem", "run1")
                .with_file_name("output");
        let outputs = &outputs;
        let done: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..calls)
                .map(|i| {
                    let (gw, chem, start) = (&gw, &chem, &start);
                    s.spawn(move || {
                        let path = format!("r{round}-{i}.txt");
                        let (tool, mut arguments) = match i % 3 {
                            0 => (
                                "copy_path",
                                json!({"source": "/output/src.txt", "destination": path}),
                            ),
                            1 => (
                                "write_file",
                                json!({"path": path, "content": "y".repeat(60)}),
                            ),
                            _ => {
                                let from = format!("/output/m{round}-{i}.txt");
                                std::fs::write(
                                    outputs.join(from.trim_start_matches("/output/")),
                                    "z".repeat(60),
                                )
                                .unwrap();
                                ("move_path", json!({"source": from, "destination": path}))
                            }
                        };
                        arguments["instance_id"] = json!("run1");
                        start.wait();
                        !gw.call(chem, tool, args(arguments)).is_error
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let succeeded = done.iter().filter(|&&ok| ok).count();
        assert_eq!(
            succeeded, 1,
            "round {round}: 60-byte writes under a 100-byte quota"
        );
        let workspace =
            crate::support::dav::find_workspace(&dir.path().join("state"), "chem", "run1");
        let used = hpcgate::usage::workspace_bytes(&workspace).unwrap();
        assert_eq!(used, 60, "round {round}");
        for entry in std::fs::read_dir(&workspace).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
}

/// What a gateway killed in the middle of a write leaves (a temporary no writer holds) stops
/// counting against the quota once it is a minute old: the next measure deletes it. A
/// temporary still being written (here: one too fresh to tell) counts.
#[test]
fn a_crashed_writes_leftover_does_not_hold_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, chem) = with_chems_run1(dir.path());
    let workspace = crate::support::dav::find_workspace(&dir.path().join("state"), "chem", "run1");
    let plant = |name: &str, age_s: u64| {
        let path = workspace.join(name);
        std::fs::write(&path, [0u8; 90]).unwrap();
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(age_s);
        std::fs::File::open(&path)
            .unwrap()
            .set_modified(then)
            .unwrap();
        path
    };
    let write = || {
        gw.call(
            &chem,
            "write_file",
            args(json!({"instance_id": "run1", "path": "a.txt", "content": "x".repeat(60)})),
        )
    };
    let fresh = plant(".hpcgate-tmp-4242-0-1", 0);
    assert!(err(write()).contains("max_workspace_bytes"));
    std::fs::remove_file(fresh).unwrap();
    let leftover = plant(".hpcgate-tmp-4242-0-2", 120);
    ok(write());
    assert!(!leftover.exists(), "the leftover is deleted");
}

/// What a caller sends cannot swell the audit log: a refused call (an unknown tool with a
/// 1 MiB name, a write with a 1 MiB path, both past the rate limit) is still recorded, in a
/// record of a few KiB that keeps the name's start and the arguments' digest.
#[test]
fn a_callers_bytes_cannot_swell_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, chem) = with_chems_run1(dir.path());
    let audit = dir.path().join("state/audit/audit-000001.jsonl");
    let before = std::fs::metadata(&audit).unwrap().len();
    let huge = "x".repeat(1 << 20);
    for _ in 0..10 {
        err(gw.call(&chem, &huge, args(json!({"instance_id": "run1"}))));
        let write = args(json!({"instance_id": "run1", "path": huge, "content": "x"}));
        err(gw.call(&chem, "write_file", write));
    }
    let grown = std::fs::metadata(&audit).unwrap().len() - before;
    assert!(
        grown < 128 << 10,
        "20 refused calls took {grown} bytes of audit log"
    );
    let log = std::fs::read_to_string(&audit).unwrap();
    let records: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let unknown = records
        .iter()
        .filter(|r| r["tool"].as_str().is_some_and(|t| t.starts_with("xxx")));
    assert_eq!(unknown.count(), 10, "every refusal is still recorded");
    let writes: Vec<_> = records
        .iter()
        .filter(|r| r["tool"] == "write_file" && r["call"].is_object())
        .collect();
    assert_eq!(writes.len(), 10, "each write's decision, written ahead");
    let arguments = &writes[0]["call"]["arguments"];
    assert_eq!(arguments["path"]["redacted"], true, "{}", writes[0]);
    assert_eq!(arguments["instance_id"], "run1", "small values are kept");
    assert!(
        hpcgate::audit::verify(&dir.path().join("state/audit"), None)
            .unwrap()
            .intact
    );
}

/// A tenant refused at any rate writes a bounded number of records: past `[audit]
/// refusals_per_minute`, its calls refused before they ran (denied, unknown tools, over the
/// rate limit) are answered as ever but counted into one `refusals.summarised` record, written
/// when the gateway stops (and by its chores each minute), while other tenants' refusals and
/// every call that runs are still recorded one by one.
#[test]
fn refusals_over_the_budget_are_summarised_not_recorded_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    // Two a minute: the next refills in 30 s, long after this test.
    let config = format!("[audit]\nrefusals_per_minute = 2\n{CONFIG}");
    let (gw, chem) = support::open_with_chems_run1(dir.path(), &config);
    let audit = dir.path().join("state/audit");
    let stat = |path: &str| {
        gw.call(
            &chem,
            "stat_path",
            args(json!({"instance_id": "run1", "path": path})),
        )
    };
    for _ in 0..50 {
        assert!(err(stat(".ssh/id")).contains("denied by policy `paths`"));
        let unknown = err(gw.call(&chem, "no_such_tool", args(json!({}))));
        assert!(unknown.contains("unknown tool `no_such_tool`"), "{unknown}");
    }
    ok(stat("/workspace"));
    ok(stat("/workspace"));
    for _ in 0..10 {
        assert!(err(stat("/workspace")).contains("rate limit"));
    }
    let bio = caller("bio");
    err(gw.call(&bio, "no_such_tool", args(json!({}))));

    let records = |event: &str| -> Vec<serde_json::Value> {
        let log = std::fs::read_to_string(audit.join("audit-000001.jsonl")).unwrap();
        (log.lines())
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["event"] == event)
            .collect()
    };
    let calls = records("call");
    let chems = calls.iter().filter(|r| r["tenant"] == "chem").count();
    assert_eq!(
        chems,
        2 + 2 + 2,
        "chem's calls that ran (create_instance's decision and outcome, two stat_path) and a minute's worth of its refusals"
    );
    let stats = calls.iter().filter(|r| {
        r["tool"] == "stat_path"
            && r["decision"]["decision"] == "allow"
            && r["outcome"]["error"].is_null()
    });
    assert_eq!(stats.count(), 2, "calls that ran are all recorded");
    assert!(
        calls
            .iter()
            .any(|r| r["tenant"] == "bio" && r["tool"] == "no_such_tool"),
        "another tenant's refusal is recorded"
    );
    assert!(records("refusals.summarised").is_empty());
    let metrics = gw.metrics_text();
    assert!(
        metrics.contains("\nhpcgate_audit_refusals_summarised_total 108\n"),
        "{metrics}"
    );

    gw.stopped("test").unwrap();
    let summaries = records("refusals.summarised");
    assert_eq!(summaries.len(), 1, "chem's alone");
    let summary = &summaries[0];
    assert_eq!(summary["tenant"], "chem");
    let detail = &summary["detail"];
    assert_eq!(detail["refused"], 108, "{detail}");
    assert_eq!(detail["refusals_per_minute"], 2);
    assert!(detail["first"].as_str() <= detail["last"].as_str());
    let user = &detail["principals"][0];
    assert_eq!(
        (&user["principal"], &user["count"]),
        (&json!("chem-user"), &json!(108))
    );
    let count = |tool: &str, why: &str| {
        let kinds = user["kinds"].as_array().unwrap();
        let one = kinds.iter().find(|k| k["tool"] == tool && k["why"] == why);
        let one = one.unwrap_or_else(|| panic!("no {tool} {why} in {detail}"));
        (one["count"].as_u64().unwrap(), one["policy"].clone())
    };
    assert_eq!(count("stat_path", "denied"), (49, json!("paths")));
    assert_eq!(count("no_such_tool", "refused"), (49, json!(null)));
    assert_eq!(count("stat_path", "rate_limited"), (10, json!(null)));
    let last = records("gateway.stopped");
    assert_eq!(
        last.len(),
        1,
        "the summary is written before the stop's record"
    );
    assert!(summary["seq"].as_u64() < last[0]["seq"].as_u64());
    gw.record_held_refusals().unwrap();
    assert_eq!(
        records("refusals.summarised").len(),
        1,
        "each refusal is told once"
    );
    assert!(hpcgate::audit::verify(&audit, None).unwrap().intact);
}
