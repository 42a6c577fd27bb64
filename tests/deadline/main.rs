//! The deadline of an endless loop, measured in a test binary of its own.
//!
//! The contract is "denied within its deadline + 5 ms". The deadline is CPU time, which is the
//! wall time measured here only on a quiet machine, and cargo runs test binaries one after another, so this binary holds the
//! only tests that measure time: no other test of the suite runs while they do, and they take
//! turns (`exclusive`), so none runs while another measures, nor builds its policy then (the
//! JavaScript and Python componentizers take seconds of CPU on a fresh checkout). Beside them,
//! `stall.rs` holds threads off their cores to show that a stall is not counted.

// The measured times are printed for the record (`-- --nocapture`).
#![allow(clippy::print_stderr)]

#[allow(dead_code)]
#[path = "../e2e/harness.rs"]
mod harness;
mod stall;

use std::time::{Duration, Instant};

use serde_json::json;

use harness::{Spec, call, chain, componentized, engine, exclusive};

#[test]
fn an_endless_loop_is_denied_within_its_deadline() {
    let _alone = exclusive();
    let chain = chain(vec![
        Spec::hostile("spin", json!({"behaviour": "spin"})).deadline_ms(20),
    ]);
    let mut elapsed = Vec::new();
    for _ in 0..11 {
        let started = Instant::now();
        let outcome = chain.evaluate(&call("submit_job", json!({})));
        elapsed.push(started.elapsed());
        assert_eq!(
            outcome.decision.reason.as_deref(),
            Some("policy `spin` timed out after 20 ms; the call is refused (policies fail closed)")
        );
    }
    elapsed.sort();
    eprintln!("time to deny an endless loop with a 20 ms deadline: {elapsed:?}");
    // The contract: deadline + 5 ms. The median is held to it; single runs get slack for a
    // descheduled epoch thread on a loaded 2-core CI machine.
    assert!(
        elapsed[5] <= Duration::from_millis(25),
        "median {:?} over deadline + 5 ms: {elapsed:?}",
        elapsed[5]
    );
    assert!(
        elapsed[10] <= Duration::from_millis(150),
        "worst {:?}: {elapsed:?}",
        elapsed[10]
    );
}

#[test]
fn an_endless_loop_is_denied_within_its_deadline_after_the_epoch_ticker_rested() {
    let _alone = exclusive();
    let chain = chain(vec![
        Spec::hostile("spin", json!({"behaviour": "spin"})).deadline_ms(20),
    ]);
    let mut elapsed = Vec::new();
    for _ in 0..5 {
        // Idle until the ticker rests (it does after 100 ms without guest code).
        let idle = Instant::now();
        while !engine().epoch_resting() {
            assert!(
                idle.elapsed() < Duration::from_secs(10),
                "the epoch ticker never rested"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = Instant::now();
        let outcome = chain.evaluate(&call("submit_job", json!({})));
        elapsed.push(started.elapsed());
        assert_eq!(
            outcome.decision.reason.as_deref(),
            Some("policy `spin` timed out after 20 ms; the call is refused (policies fail closed)")
        );
    }
    elapsed.sort();
    eprintln!("time to deny an endless loop from a resting ticker: {elapsed:?}");
    assert!(
        elapsed[2] <= Duration::from_millis(25),
        "median {:?} over deadline + 5 ms: {elapsed:?}",
        elapsed[2]
    );
}

#[test]
fn a_rego_loop_is_denied_within_its_deadline() {
    let _alone = exclusive();
    // Billions of iterations in the embedded interpreter (`stock:rego`); the load's own
    // evaluation sees `{}` and passes, so only the call runs the loop.
    let policy = r#"package hpcgate
deny contains "never" if {
    input.tool == "submit_job"
    r := numbers.range(1, 3000)
    count({a | some a in r; some b in r; some c in r; a + b + c < 0}) > 0
}"#;
    let chain = chain(vec![
        Spec::stock("spin", "rego", json!({"policy": policy})).deadline_ms(20),
    ]);
    let mut elapsed = Vec::new();
    for _ in 0..11 {
        let started = Instant::now();
        let outcome = chain.evaluate(&call("submit_job", json!({"command": "make"})));
        elapsed.push(started.elapsed());
        assert_eq!(
            outcome.decision.reason.as_deref(),
            Some("policy `spin` timed out after 20 ms; the call is refused (policies fail closed)")
        );
    }
    elapsed.sort();
    eprintln!("time to deny a Rego loop with a 20 ms deadline: {elapsed:?}");
    assert!(
        elapsed[5] <= Duration::from_millis(25),
        "median {:?} over deadline + 5 ms: {elapsed:?}",
        elapsed[5]
    );
}

/// Eleven `submit_job` calls through a chain of `spec` alone, each denied with one of `reasons`;
/// returns the sorted times.
fn time_denials(spec: Spec, reasons: &[&str]) -> Vec<Duration> {
    let chain = chain(vec![spec]);
    let mut elapsed = Vec::new();
    for _ in 0..11 {
        let started = Instant::now();
        let outcome = chain.evaluate(&call("submit_job", json!({"command": "make"})));
        elapsed.push(started.elapsed());
        let reason = outcome.decision.reason.unwrap_or_default();
        assert!(reasons.contains(&reason.as_str()), "{reason}");
        // The engine keeps serving between the faults.
        let next = chain.evaluate(&call("list_jobs", json!({})));
        assert_eq!(next.decision.reason, None, "{next:?}");
    }
    elapsed.sort();
    elapsed
}

#[test]
fn a_javascript_while_true_is_denied_within_its_deadline() {
    // Alone from here: the componentizer (Node) must not run while another test measures.
    let _alone = exclusive();
    let module = componentized("js", "policies/hostile/js/hostile.js", false);
    let spec = Spec::new("spin", module, json!({"behaviour": "spin"})).deadline_ms(20);
    let elapsed = time_denials(
        spec,
        &["policy `spin` timed out after 20 ms; the call is refused (policies fail closed)"],
    );
    eprintln!("time to deny a JavaScript while (true) with a 20 ms deadline: {elapsed:?}");
    assert!(
        elapsed[5] <= Duration::from_millis(25),
        "median {:?} over deadline + 5 ms: {elapsed:?}",
        elapsed[5]
    );
}

#[test]
fn a_python_memory_hog_is_denied_within_its_deadline() {
    // Alone from here: the componentizer (CPython) must not run while another test measures.
    let _alone = exclusive();
    let module = componentized("python", "policies/hostile/python/hostile.py", false);
    // The deadline bounds preparing a fresh instance too (about 15 ms for CPython in a
    // debug build, more under load): 200 ms.
    let mut spec = Spec::new("hog", module, json!({"behaviour": "hog"})).deadline_ms(200);
    spec.memory_mb = 64;
    // Whichever comes first, the memory cap or the deadline, denies it.
    let elapsed = time_denials(
        spec,
        &[
            "policy `hog` exceeded its memory limit of 64 MiB; the call is refused (policies fail closed)",
            "policy `hog` timed out after 200 ms; the call is refused (policies fail closed)",
        ],
    );
    eprintln!("time to deny a Python memory hog (64 MiB cap, 200 ms deadline): {elapsed:?}");
    assert!(
        elapsed[5] <= Duration::from_millis(205),
        "median {:?} over deadline + 5 ms: {elapsed:?}",
        elapsed[5]
    );
}
