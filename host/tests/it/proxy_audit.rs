//! A proxied server's life is in the audit log, not only on stderr: `proxy.started`,
//! `proxy.stopped` (idle, archive, shutdown), `proxy.crashed` with its exit code, and
//! `proxy.discovery_failed` with the reason — each with tenant, instance and proxy, in the
//! same hash chain as the calls.

use crate::support::proxy as support;

use std::time::{Duration, Instant};

use hpcgate::audit::verify;
use hpcgate::gateway::Gateway;
use serde_json::{Value, json};
use support::{args, caller, discovered, err, gateway, ok, test_proxy};

fn call(gw: &Gateway, tool: &str, instance: &str) -> hpcgate::gateway::CallResult {
    gw.call(
        &caller("chem"),
        tool,
        args(json!({ "instance_id": instance })),
    )
}

/// Every `proxy.*` record, in log order.
fn proxy_records(dir: &std::path::Path) -> Vec<Value> {
    let log = std::fs::read_to_string(dir.join("state/audit/audit-000001.jsonl")).unwrap();
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"].as_str().unwrap().starts_with("proxy."))
        .collect()
}

/// `(event, instance, reason)` of each record, for comparing the sequence.
fn summary(records: &[Value]) -> Vec<(String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    records
        .iter()
        .map(|r| {
            (
                text(&r["event"]),
                text(&r["instance"]),
                text(&r["detail"]["reason"]),
            )
        })
        .collect()
}

#[test]
fn server_lives_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[proxied_mcps.broken]\ncommand = \"/nonexistent/server\"\n",
        test_proxy("t", "idle_timeout = 0.5")
    );
    let gw = gateway(dir.path(), &config);
    discovered(&gw);
    for id in ["run1", "run2"] {
        ok(call(&gw, "create_instance", id));
    }

    ok(call(&gw, "t__whoami", "run1"));
    let until = Instant::now() + Duration::from_secs(5);
    while gw.proxies().running() > 0 {
        assert!(Instant::now() < until, "the idle server was not stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    err(call(&gw, "t__crash", "run1"));
    ok(call(&gw, "t__whoami", "run2"));
    ok(call(&gw, "archive_instance", "run2"));
    ok(call(&gw, "t__whoami", "run1"));
    gw.stopped("test").unwrap();

    let (failures, records): (Vec<_>, Vec<_>) = proxy_records(dir.path())
        .into_iter()
        .partition(|r| r["event"] == "proxy.discovery_failed");
    let s = |e: &str, i: &str, r: &str| (e.to_owned(), i.to_owned(), r.to_owned());
    assert_eq!(
        summary(&records),
        [
            s("proxy.started", "run1", ""),
            s("proxy.stopped", "run1", "idle"),
            s("proxy.started", "run1", ""),
            s("proxy.crashed", "run1", ""),
            s("proxy.started", "run2", ""),
            s("proxy.stopped", "run2", "archive"),
            s("proxy.started", "run1", ""),
            s("proxy.stopped", "run1", "shutdown"),
        ]
    );
    // Discovery of `broken` failed, and is retried with growing waits.
    let failed = &failures[0];
    assert_eq!(failed["detail"]["proxy"], "broken");
    assert_eq!(failed["detail"]["attempt"], 1);
    assert_eq!(failed["detail"]["retry_in_s"], 1);
    let reason = failed["outcome"]["error"].as_str().unwrap();
    assert!(reason.contains("could not start"), "{reason}");
    for r in &records {
        assert_eq!(r["tenant"], "chem", "{r}");
        assert_eq!(r["principal"], "hpcgate", "{r}");
        assert_eq!(r["detail"]["proxy"], "t", "{r}");
    }
    let crashed = &records[3];
    assert_eq!(crashed["tool"], "t__crash");
    assert_eq!(crashed["outcome"]["exit_code"], 3);
    // The servers stop before the gateway's own stop record, and the discovery of `broken`,
    // retried in the background, gives up with the stop: past its next retry, nothing follows
    // the stop record.
    let next_retry = failures.last().unwrap()["detail"]["retry_in_s"]
        .as_u64()
        .unwrap();
    std::thread::sleep(Duration::from_secs(next_retry + 1));
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let last = log.lines().last().unwrap();
    assert!(last.contains("\"gateway.stopped\""), "{last}");
    let report = verify(&dir.path().join("state/audit"), None).unwrap();
    assert!(report.intact, "{report:?}");
}

#[test]
fn failed_discovery_is_retried_until_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    // The server starts only once `ready` exists (bound read-only into the sandbox; binds
    // may not be under /tmp).
    let gate = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let gate = gate.path();
    let server = support::test_server().display().to_string();
    let script = format!("test -e {}/ready && exec {server}", gate.display());
    let config = format!(
        "[proxied_mcps.late]\ncommand = \"/usr/bin/sh\"\nargs = [\"-c\", {script:?}]\n\
         binds = [{server:?}, {:?}]\nstart_timeout = 5\n",
        gate.display().to_string()
    );
    let gw = gateway(dir.path(), &config);
    discovered(&gw);
    let status = |gw: &Gateway| gw.proxies().status()["late"].clone();
    assert!(
        matches!(status(&gw), hpcgate::proxy::Discovery::Failed(_)),
        "{:?}",
        status(&gw)
    );
    std::fs::write(gate.join("ready"), "").unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    while !matches!(status(&gw), hpcgate::proxy::Discovery::Ready(_)) {
        assert!(
            Instant::now() < until,
            "never rediscovered: {:?}",
            status(&gw)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(gw.call(
        &caller("chem"),
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    let echo = ok(gw.call(
        &caller("chem"),
        "late__echo",
        args(json!({"instance_id": "run1", "message": "finally"})),
    ));
    assert_eq!(echo.text, "finally");
}

/// A proxied tool's decision is durable before the server runs it, whatever its
/// `readOnlyHint` says (the hint is the server's claim); a built-in read-only call is one
/// record written after it ran.
#[test]
fn a_proxied_calls_decision_is_written_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    ok(call(&gw, "create_instance", "run1"));
    let echo = args(json!({"instance_id": "run1", "message": "x"}));
    ok(gw.call(&caller("chem"), "t__echo", echo));
    ok(gw.call(&caller("chem"), "list_instances", args(json!({}))));
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let records: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |tool: &str| -> Vec<&Value> { records.iter().filter(|r| r["tool"] == tool).collect() };
    let echo = of("t__echo");
    assert_eq!(
        echo.len(),
        2,
        "the decision ahead, then the outcome: {echo:#?}"
    );
    assert!(echo[0]["decision"].is_object() && echo[0]["outcome"].is_null());
    assert_eq!(echo[1]["detail"]["decision_seq"], echo[0]["seq"]);
    assert_eq!(
        of("list_instances").len(),
        1,
        "a built-in read-only call: one record"
    );
}
