//! The lifecycle of proxied MCP servers through the gateway's dispatch function, in process,
//! with the real `mcp-test-server` inside real bwrap sandboxes: a call timeout that cancels the
//! remote request, a call the client gives up on cancelled at its server (and one given up on before it
//! was sent never sent, even while it waits for its proxy's discovery), a crash and the
//! restart, idle shutdown, single-flight start, a server per
//! tenant and instance (stopped by archiving), a bounded number of servers per tenant, and
//! servers that stop reading their stdin stopped all the same.

use crate::support::proxy as support;

use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use hpcgate::gateway::Gateway;
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

/// Waits (≤ 5 s) until `tenant`'s server of `run1` has seen one `notifications/cancelled`.
fn saw_one_cancel(gw: &Gateway, tenant: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let who = ok(gw.call(
            &caller(tenant),
            "t__whoami",
            args(json!({"instance_id": "run1"})),
        ));
        if who.structured["cancelled"] == 1 {
            return;
        }
        assert!(
            Instant::now() < until,
            "the server never saw notifications/cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    saw_one_cancel(&gw, "chem");
    assert_eq!(
        gw.proxies().starts(),
        1,
        "the server survives a timed-out call"
    );
}

/// A call the client gives up on (MCP `notifications/cancelled`, or the connection gone) is
/// cancelled at its server at once, not when its `call_timeout` ends: the gateway's call
/// returns, the server sees `notifications/cancelled`, and the server lives on. (Before: the
/// call and the server's work ran on for the whole `call_timeout`, 120 s by default.)
#[test]
fn a_call_the_client_gives_up_on_is_cancelled_at_its_server() {
    use hpcgate::gateway::Request;
    use hpcgate::policy::Via;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let chem = caller("chem");
    nonce(&gw, "chem", "run1");
    let cancel = tokio_util::sync::CancellationToken::new();
    let giving_up = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            cancel.cancel();
        })
    };
    let slow = args(json!({"instance_id": "run1", "ms": 60_000}));
    let request = Request::new(chem.clone(), Via::Mcp, "t__slow", slow).cancelled_by(cancel);
    let started = Instant::now();
    let given_up = err(gw.dispatch(&gw.snapshot(), request));
    giving_up.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the call ran on for {:?}",
        started.elapsed()
    );
    assert!(
        given_up.contains("the client cancelled `t__slow`"),
        "{given_up}"
    );
    saw_one_cancel(&gw, "chem");
    assert_eq!(gw.proxies().starts(), 1, "the server survives a cancel");
}

/// A call the client gave up on before it was sent is not sent: it starts no server, and a
/// running server sees neither it nor a `notifications/cancelled`; the error says nothing ran.
#[test]
fn a_call_given_up_before_it_is_sent_reaches_no_server() {
    use hpcgate::gateway::Request;
    use hpcgate::policy::Via;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let chem = caller("chem");
    let given_up = tokio_util::sync::CancellationToken::new();
    given_up.cancel();
    let unsent = || {
        let echo = args(json!({"instance_id": "run1", "message": "hi"}));
        let request = Request::new(chem.clone(), Via::Mcp, "t__echo", echo);
        err(gw.dispatch(&gw.snapshot(), request.cancelled_by(given_up.clone())))
    };
    let before_start = unsent();
    assert!(
        before_start.contains("the client cancelled `t__echo` before it was sent")
            && before_start.contains("nothing ran"),
        "{before_start}"
    );
    assert_eq!(gw.proxies().starts(), 0, "a given-up call starts no server");
    nonce(&gw, "chem", "run1");
    let while_running = unsent();
    assert!(
        while_running.contains("before it was sent"),
        "{while_running}"
    );
    let who = ok(gw.call(&chem, "t__whoami", args(json!({"instance_id": "run1"}))));
    assert_eq!(who.structured["cancelled"], 0, "{}", who.structured);
    assert_eq!(gw.proxies().starts(), 1);
}

/// A call that arrives while its proxy's discovery is still pending waits for it (at most
/// twice its `start_timeout`: here 20 minutes), unless the client gives the call up: then it
/// ends at once, saying nothing ran, and starts no server.
#[test]
fn a_call_waiting_for_discovery_ends_when_the_client_gives_it_up() {
    use hpcgate::gateway::Request;
    use hpcgate::policy::Via;
    let dir = tempfile::tempdir().unwrap();
    let stalls = "[proxied_mcps.stalls]\ncommand = \"/usr/bin/sleep\"\nargs = [\"600\"]\nstart_timeout = 600\n";
    let gw = Arc::new(gateway(dir.path(), stalls));
    create(&gw, "chem", "run1");
    let given_up = tokio_util::sync::CancellationToken::new();
    let (done, answer) = mpsc::channel();
    let waiting = {
        let (gw, given_up) = (gw.clone(), given_up.clone());
        std::thread::spawn(move || {
            let request = Request::new(
                caller("chem"),
                Via::Mcp,
                "stalls__anything",
                args(json!({"instance_id": "run1"})),
            );
            let result = gw.dispatch(&gw.snapshot(), request.cancelled_by(given_up));
            done.send(err(result)).unwrap();
        })
    };
    assert!(
        answer.recv_timeout(Duration::from_millis(300)).is_err(),
        "the call did not wait for the pending discovery"
    );
    let cancelled = Instant::now();
    given_up.cancel();
    let message = answer
        .recv_timeout(Duration::from_secs(30))
        .expect("the given-up call still waits for discovery");
    assert!(cancelled.elapsed() < Duration::from_secs(5));
    assert!(
        message.contains("the client cancelled `stalls__anything`")
            && message.contains("nothing ran"),
        "{message}"
    );
    waiting.join().unwrap();
    assert_eq!(gw.proxies().starts(), 0, "a given-up call starts no server");
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
    // And forgotten: the instance no longer counts as running a server here.
    let chem = caller("chem").tenant;
    while gw.proxies().runs_in(&chem, "run1") {
        assert!(Instant::now() < until, "the stopped server's slot is kept");
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

/// How long one step of a test below may take, on a slow, loaded machine.
const STEP: Duration = Duration::from_secs(60);

/// Runs `work` on a thread of its own, which names each step it is done with; each of
/// `steps` must come within [`STEP`]. A stop that hangs would hang the test (and the
/// gateway's drop) for ever: it is left behind on that thread, and the test fails.
fn in_steps(steps: &[&str], work: impl FnOnce(mpsc::Sender<&'static str>) + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || work(tx));
    for step in steps {
        match rx.recv_timeout(STEP) {
            Ok(done) => assert_eq!(done, *step),
            Err(e) => panic!("not done within {STEP:?}: {step} ({e})"),
        }
    }
}

/// Has `tool` flood the gateway with pings, answer `ms` later (the replies fill the pipe to the
/// server meanwhile), and never read its stdin again.
fn ping_flood(gw: &Gateway, tool: &str, instance: &str, ms: u64) {
    let flooding = ok(gw.call(
        &caller("chem"),
        tool,
        args(json!({"instance_id": instance, "count": 5000, "ms": ms})),
    ));
    assert_eq!(flooding.text, "flooding");
}

fn running_none(gw: &Gateway) {
    while gw.proxies().running() > 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every record of a call server's end (`proxy.stopped`, `proxy.crashed`), in log order.
fn ends(dir: &std::path::Path) -> Vec<Value> {
    let log = std::fs::read_to_string(dir.join("state/audit/audit-000001.jsonl")).unwrap();
    (log.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "proxy.stopped" || r["event"] == "proxy.crashed")
        .collect()
}

/// A server that floods the gateway with requests and never reads its stdin again (the
/// replies fill the pipe to it, so a write to it never ends) is still stopped when idle, by
/// archiving its instance and by the gateway's stop, each as usual.
#[test]
fn a_server_that_stops_reading_its_stdin_is_stopped_all_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_proxy("t", "idle_timeout = 0.2") + &test_proxy("u", "");
    let gw = gateway(dir.path(), &config);
    discovered(&gw);
    create(&gw, "chem", "run1");
    create(&gw, "chem", "run2");
    let steps = ["stopped when idle", "archived", "gateway stopped"];
    in_steps(&steps, move |done| {
        ping_flood(&gw, "t__ping_flood", "run1", 1000);
        running_none(&gw);
        done.send("stopped when idle").unwrap();
        ping_flood(&gw, "u__ping_flood", "run1", 1000);
        ok(gw.call(
            &caller("chem"),
            "archive_instance",
            args(json!({"instance_id": "run1"})),
        ));
        done.send("archived").unwrap();
        ping_flood(&gw, "u__ping_flood", "run2", 1000);
        gw.stopped("test").unwrap();
        drop(gw);
        done.send("gateway stopped").unwrap();
    });
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let ends: Vec<_> = (ends(dir.path()).iter())
        .map(|r| {
            [
                &r["event"],
                &r["detail"]["proxy"],
                &r["instance"],
                &r["detail"]["reason"],
            ]
            .map(text)
        })
        .collect();
    let s = |e: &str, p: &str, i: &str, r: &str| [e, p, i, r].map(str::to_owned);
    assert_eq!(
        ends,
        [
            s("proxy.stopped", "t", "run1", "idle"),
            s("proxy.stopped", "u", "run1", "archive"),
            s("proxy.stopped", "u", "run2", "shutdown"),
        ]
    );
}

/// A server that leaves a write to it unread for its `call_timeout` counts as dead, so a flood
/// of its requests cannot grow the gateway's memory for longer: it is stopped (audited as a
/// crash, saying why), and the next call starts a fresh one.
#[test]
fn a_server_that_reads_nothing_for_a_call_timeout_counts_as_dead() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough for the flooding call itself to be answered on a loaded machine.
    let gw = gateway(dir.path(), &test_proxy("t", "call_timeout = 5"));
    discovered(&gw);
    create(&gw, "chem", "run1");
    in_steps(&["stopped", "restarted", "gateway stopped"], move |done| {
        ping_flood(&gw, "t__ping_flood", "run1", 0);
        running_none(&gw);
        done.send("stopped").unwrap();
        nonce(&gw, "chem", "run1");
        assert_eq!(gw.proxies().starts(), 2);
        done.send("restarted").unwrap();
        gw.stopped("test").unwrap();
        drop(gw);
        done.send("gateway stopped").unwrap();
    });
    let ends = ends(dir.path());
    assert_eq!(ends.len(), 2, "{ends:#?}");
    assert_eq!(ends[0]["event"], "proxy.crashed");
    let error = ends[0]["outcome"]["error"].as_str().unwrap();
    assert_eq!(error, "the server did not read its stdin for 5s while idle");
    assert_eq!(ends[1]["event"], "proxy.stopped", "the second server");
    assert_eq!(ends[1]["detail"]["reason"], "shutdown");
}
