//! The lifecycle of proxied MCP servers through the gateway's dispatch function, in process,
//! with the real `mcp-test-server` inside real bwrap sandboxes: a call timeout that cancels the
//! remote request, a crash and the restart, idle shutdown, single-flight start, a server per
//! tenant and instance (stopped by archiving), and a bounded number of servers per tenant.

use crate::support::proxy as support;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{args, caller, create, discovered, err, gateway, ok, test_proxy};

fn nonce(gw: &hpcgate::gateway::Gateway, tenant: &str, id: &str) -> u64 {
    let r = ok(gw.call(
        &caller(tenant),
        "t__whoami",
        args(json!({ "instance_id": id })),
    ));
    r.structured["nonce"].as_u64().expect("a nonce")
}

#[test]
fn a_call_timeout_cancels_the_remote_request() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", "call_timeout = 0.5"));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let alice = caller("chem");
    let started = Instant::now();
    let timed_out = err(gw.call(
        &alice,
        "t__slow",
        args(json!({"instance_id": "run1", "ms": 5000})),
    ));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        timed_out.contains("did not answer within 0.5s"),
        "{timed_out}"
    );
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let who = ok(gw.call(&alice, "t__whoami", args(json!({"instance_id": "run1"}))));
        if who.structured["cancelled"] == 1 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the server never saw notifications/cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        gw.proxies().starts(),
        1,
        "the server survives a timed-out call"
    );
}

#[test]
fn a_crashed_server_fails_its_call_and_restarts_on_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let first = nonce(&gw, "chem", "run1");
    let crashed = err(gw.call(
        &caller("chem"),
        "t__crash",
        args(json!({"instance_id": "run1"})),
    ));
    assert!(
        crashed.contains("proxied server `t` stopped while running `t__crash`")
            && crashed.contains("exited with code 3")
            && crashed.contains("restarts"),
        "{crashed}"
    );
    let second = nonce(&gw, "chem", "run1");
    assert_ne!(first, second);
    assert_eq!(gw.proxies().starts(), 2);
}

#[test]
fn idle_servers_are_stopped_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", "idle_timeout = 0.3"));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let first = nonce(&gw, "chem", "run1");
    assert_eq!(gw.proxies().running(), 1);
    let until = Instant::now() + Duration::from_secs(5);
    while gw.proxies().running() > 0 {
        assert!(Instant::now() < until, "the idle server was not stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_ne!(nonce(&gw, "chem", "run1"), first);
    assert_eq!(gw.proxies().starts(), 2);
}

#[test]
fn concurrent_first_calls_start_one_server() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Arc::new(gateway(dir.path(), &test_proxy("t", "")));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (gw, barrier) = (gw.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                nonce(&gw, "chem", "run1")
            })
        })
        .collect();
    let nonces: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(nonces.iter().all(|n| *n == nonces[0]), "{nonces:?}");
    assert_eq!(gw.proxies().starts(), 1);
    assert_eq!(gw.proxies().running(), 1);
}

#[test]
fn tenants_and_instances_never_share_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    create(&gw, "chem", "run2");
    create(&gw, "bio", "run1");
    let a = nonce(&gw, "chem", "run1");
    let b = nonce(&gw, "bio", "run1");
    let c = nonce(&gw, "chem", "run2");
    assert!(a != b && a != c && b != c);
    assert_eq!(gw.proxies().starts(), 3);
    let theirs = err(gw.call(
        &caller("bio"),
        "t__whoami",
        args(json!({"instance_id": "run2"})),
    ));
    assert!(theirs.contains("run2"), "{theirs}");
    assert_eq!(
        gw.proxies().starts(),
        3,
        "no server for another tenant's instance"
    );
    // Archiving stops the instance's servers (first: their leases would refuse it).
    ok(gw.call(
        &caller("chem"),
        "archive_instance",
        args(json!({"instance_id": "run1"})),
    ));
    assert_eq!(gw.proxies().running(), 2);
    let archived = err(gw.call(
        &caller("chem"),
        "t__whoami",
        args(json!({"instance_id": "run1"})),
    ));
    assert!(archived.contains("run1"), "{archived}");
}

/// A tenant runs at most `MAX_TENANT_SERVERS` proxied servers: one more stops its least
/// recently used idle one (audited as `evicted`), and while all of them are busy a start is
/// refused. Another tenant is not affected.
#[test]
fn a_tenant_runs_a_bounded_number_of_servers() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    let max = hpcgate::proxy::MAX_TENANT_SERVERS;
    let run = |i: usize| format!("run{i}");
    let whoami = |tenant: &str, i: usize| {
        gw.call(
            &caller(tenant),
            "t__whoami",
            args(json!({"instance_id": run(i)})),
        )
    };
    for i in 0..=max {
        create(&gw, "chem", &run(i));
    }
    for i in 0..max {
        ok(whoami("chem", i));
    }
    assert_eq!(gw.proxies().running(), max);
    ok(whoami("chem", max));
    assert_eq!(gw.proxies().running(), max, "one was stopped for it");
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let evicted: Vec<Value> = (log.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "proxy.stopped" && r["detail"]["reason"] == "evicted")
        .collect();
    assert_eq!(evicted.len(), 1, "{evicted:#?}");
    assert_eq!(evicted[0]["instance"], "run0", "the least recently used");

    // run1..=run<max> all busy: run0 cannot start; bio can.
    std::thread::scope(|scope| {
        let slow: Vec<_> = (1..=max)
            .map(|i| {
                let (gw, run) = (&gw, run(i));
                scope.spawn(move || {
                    let slow = args(json!({"instance_id": run, "ms": 6000}));
                    gw.call(&caller("chem"), "t__slow", slow)
                })
            })
            .collect();
        // Time for all of them to be in flight, even on a loaded machine.
        std::thread::sleep(Duration::from_millis(2500));
        let refused = err(whoami("chem", 0));
        assert!(
            refused.contains(&format!("already runs {max} proxied servers")),
            "{refused}"
        );
        create(&gw, "bio", "run0");
        ok(whoami("bio", 0));
        for call in slow {
            ok(call.join().unwrap());
        }
    });
    ok(whoami("chem", 0));
}
