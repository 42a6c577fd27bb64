//! Policies built for `wasm32-wasip2`: accepted, linked with a WASI context that gives no files,
//! environment, network, time or entropy, deterministic, and bounded like any other policy.

use std::time::{Duration, Instant};

use hpcgate::policy::{Chain, ChainOutcome, DecisionKind};
use serde_json::{Value, json};

use crate::harness::{Spec, call, chain, engine, guest};

fn wasi(name: &'static str, behaviour: &str) -> Spec {
    Spec::new(name, guest("hostile-wasi"), json!({"behaviour": behaviour}))
}

/// Runs the probe once on a fresh instance; returns its report, how long it took and its log.
fn probe(chain: &Chain) -> (Value, Duration, Vec<String>) {
    let started = Instant::now();
    let outcome = judge(chain);
    let took = started.elapsed();
    assert_eq!(outcome.decision.decision, DecisionKind::Deny, "{outcome:?}");
    assert_eq!(outcome.policies[0].fault, None, "{outcome:?}");
    let logs = outcome.policies[0].logs.clone();
    let reason = outcome.decision.reason.unwrap();
    (serde_json::from_str(&reason).unwrap(), took, logs)
}

/// One `read_file` call, judged.
fn judge(chain: &Chain) -> ChainOutcome {
    chain.evaluate(&call("read_file", json!({"path": "a"})))
}

fn fault_of(outcome: &ChainOutcome) -> String {
    assert_eq!(outcome.decision.decision, DecisionKind::Deny, "{outcome:?}");
    outcome.policies[0].fault.clone().expect("a fault")
}

#[test]
fn a_wasi_component_loads_and_gets_no_files_environment_or_time() {
    let module = engine().load(&guest("hostile-wasi")).unwrap();
    assert!(module.imports_wasi());
    assert!(!engine().load(&guest("hostile")).unwrap().imports_wasi());

    let marker = std::path::Path::new("/tmp/hpcgate-policy-probe");
    let _ = std::fs::remove_file(marker);
    let (report, took, logs) = probe(&chain(vec![wasi("probe", "wasi-probe")]));
    assert_eq!(report["env"], 0, "{report}");
    assert_eq!(report["args"], 0, "{report}");
    for key in ["read_passwd", "list_root", "list_cwd", "write_tmp"] {
        let seen = report[key].as_str().unwrap();
        assert!(seen.starts_with("error:"), "{key}: {seen}");
    }
    assert!(!marker.exists(), "a policy wrote a host file");
    assert_eq!(report["stdin"], "0", "stdin is at end of file");
    // The clocks stand still, and a sleep of a minute returns at once.
    assert_eq!(report["wall_ns"], 0, "{report}");
    assert_eq!(report["monotonic_ns"], 0, "{report}");
    assert_eq!(report["slept_ns"], 0, "{report}");
    assert!(took < Duration::from_secs(20), "the probe took {took:?}");
    // What it printed is its log.
    assert_eq!(
        logs,
        [
            "stdout: a policy writes to stdout",
            "stderr: a policy writes to stderr"
        ]
    );
}

#[test]
fn wasi_randomness_is_seeded_so_every_fresh_instance_decides_alike() {
    let first = chain(vec![wasi("probe", "wasi-probe")]);
    let (report, _, _) = probe(&first);
    let bytes = report["random_bytes"].as_array().unwrap();
    assert_eq!(bytes.len(), 8);
    assert_ne!(
        report["random_bytes"], report["insecure_bytes"],
        "two generators, two streams"
    );
    assert!(bytes.iter().any(|b| b != 0), "{report}");
    for _ in 0..5 {
        assert_eq!(
            probe(&first).0,
            report,
            "a fresh instance of the same chain"
        );
    }
    let second = chain(vec![wasi("probe", "wasi-probe")]);
    assert_eq!(probe(&second).0, report, "an instance of another chain");
}

#[test]
fn a_wasi_guest_that_sleeps_hoards_floods_prints_exits_spins_grows_or_panics_is_stopped() {
    let started = Instant::now();
    let outcome = judge(&chain(vec![wasi("sleep", "sleep")]));
    assert_eq!(
        outcome.decision.decision,
        DecisionKind::Allow,
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a minute's sleep held the evaluation for {:?}",
        started.elapsed()
    );

    let hoard = chain(vec![wasi("hoard", "hoard-pollables")]);
    let fault = fault_of(&judge(&hoard));
    assert_eq!(fault, "trapped: resource table has no free keys");

    let flood = chain(vec![wasi("flood", "random-flood")]);
    assert_eq!(
        fault_of(&judge(&flood)),
        "trapped: requested len 1048576 exceeds limit 65536"
    );

    let printer = chain(vec![wasi("printer", "print-flood")]);
    let printed = judge(&printer);
    assert_eq!(
        printed.decision.decision,
        DecisionKind::Allow,
        "{printed:?}"
    );
    let logs = &printed.policies[0].logs;
    assert!(
        (1..=16).contains(&logs.len()) && logs[0].starts_with("stderr: line 0 zzz"),
        "{logs:?}"
    );
    assert!(
        logs.iter().map(String::len).sum::<usize>() < 5_000,
        "{logs:?}"
    );

    // WASI 0.2's `exit` says only success or failure: `exit(3)` arrives as status 1.
    let exit = judge(&chain(vec![wasi("exit", "exit")]));
    assert_eq!(fault_of(&exit), "trapped: exited with status 1", "{exit:?}");

    let spin = chain(vec![wasi("spin", "spin").deadline_ms(50)]);
    assert_eq!(fault_of(&judge(&spin)), "timed out after 50 ms");
    let grow = chain(vec![wasi("grow", "grow")]);
    assert_eq!(
        fault_of(&judge(&grow)),
        "exceeded its memory limit of 16 MiB"
    );
    // A Rust guest writes its panic message to stderr before it aborts: it is in the log.
    let trap = chain(vec![wasi("trap", "trap")]);
    let trapped = judge(&trap);
    assert!(fault_of(&trapped).starts_with("trapped:"));
    let logs = &trapped.policies[0].logs;
    assert!(
        logs[0]
            .starts_with("stderr: thread '<unnamed>' (1) panicked at policies/hostile/src/lib.rs:"),
        "{logs:?}"
    );
    assert_eq!(
        logs[1], "stderr: hostile guest traps on purpose",
        "{logs:?}"
    );

    // The faults cost nothing lasting: the same chains keep answering.
    for _ in 0..3 {
        assert_eq!(fault_of(&judge(&spin)), "timed out after 50 ms");
        assert_eq!(
            fault_of(&judge(&hoard)),
            "trapped: resource table has no free keys"
        );
    }
}
