//! JavaScript and Python policies cannot reach files, the clock, the environment, randomness or
//! the network. Two layers hold that (see `host/policy/src/wasi.rs`):
//!
//! | build                                   | what the component imports | what a probe gets        |
//! |-----------------------------------------|----------------------------|--------------------------|
//! | as `hpcgate policy new` builds (stubbed) | the hpcgate world only     | a trap: the call is denied |
//! | JS with WASI kept                       | WASI cli, io, clocks, random, filesystem | the host's WASI: no files, no environment, clocks at zero, seeded randomness |
//! | Python with WASI kept                   | those and `wasi:sockets`   | refused at load          |
//!
//! | attempt                                  | JS stubbed   | JS with WASI  | Python stubbed |
//! |------------------------------------------|--------------|---------------|----------------|
//! | read `/etc/passwd`, list `/`             | no such API  | no such API   | trap           |
//! | `Date.now()`, `time.time()`              | trap         | 0 (the epoch) | trap           |
//! | `process.env`, `os.environ`              | no such API  | no such API   | empty          |
//! | TCP to a listening host socket           | no such API  | no such API   | trap, nothing accepted |
//! | `Math.random()`, `os.urandom(8)`         | the same on every fresh instance | same | trap |
//!
//! A trap is a fault: the call is denied, naming the policy (fail closed).

use std::io::ErrorKind;
use std::net::TcpListener;

use hpcgate::policy::{ChainOutcome, DecisionKind};
use serde_json::{Value, json};

use crate::harness::{Spec, call, chain, componentized, engine};
use crate::policy_languages_hostile::{js, python};

/// Judges one `submit_job` call with a chain of `spec` alone.
fn judge(spec: Spec) -> ChainOutcome {
    chain(vec![spec]).evaluate(&call("submit_job", json!({"command": "make"})))
}

/// What a probe saw: `Ok(report)` when it ran to its end, `Err(fault)` when it trapped. Either
/// way the call was denied.
fn seen(outcome: &ChainOutcome) -> Result<Value, String> {
    assert_eq!(outcome.decision.decision, DecisionKind::Deny, "{outcome:?}");
    match &outcome.policies[0].fault {
        Some(fault) => Err(fault.clone()),
        None => Ok(serde_json::from_str(outcome.decision.reason.as_deref().unwrap()).unwrap()),
    }
}

fn js_with_wasi(name: &'static str, behaviour: &str) -> Spec {
    let module = componentized("js", "policies/hostile/js/hostile.js", true);
    Spec::new(name, module, json!({"behaviour": behaviour}))
}

#[test]
fn stubbed_javascript_and_python_import_nothing_but_the_hpcgate_world() {
    for module in [
        componentized("js", "policies/hostile/js/hostile.js", false),
        componentized("python", "policies/hostile/python/hostile.py", false),
        componentized("js", "examples/policies/rules.js", false),
        componentized("python", "examples/policies/rules.py", false),
    ] {
        assert!(!engine().load(&module).unwrap().imports_wasi(), "{module}");
    }
}

#[test]
fn javascript_has_no_file_environment_or_network_api() {
    for spec in [js("globals", "globals"), js_with_wasi("globals", "globals")] {
        let report = seen(&judge(spec)).unwrap();
        for (name, kind) in report.as_object().unwrap() {
            assert_eq!(
                kind, "undefined",
                "`{name}` exists in a JS policy: {report}"
            );
        }
    }
}

#[test]
fn javascript_reads_no_clock() {
    // Stubbed: the clock import is a trap.
    let fault = seen(&judge(js("clock", "clock"))).unwrap_err();
    assert!(fault.starts_with("trapped"), "{fault}");
    // With WASI kept: the host's clocks stand still at the epoch.
    let module = engine()
        .load(&componentized("js", "policies/hostile/js/hostile.js", true))
        .unwrap();
    assert!(module.imports_wasi());
    let report = seen(&judge(js_with_wasi("clock", "clock"))).unwrap();
    assert_eq!(report["date"], 0, "{report}");
}

#[test]
fn javascript_randomness_is_the_same_on_every_fresh_instance() {
    for spec in [
        || js("random", "random"),
        || js_with_wasi("random", "random"),
    ] {
        let chain = chain(vec![spec()]);
        let first = chain.evaluate(&call("submit_job", json!({})));
        for _ in 0..3 {
            let again = chain.evaluate(&call("submit_job", json!({})));
            assert_eq!(again.decision, first.decision);
        }
    }
}

#[test]
fn python_reads_no_file_clock_environment_or_randomness() {
    for behaviour in ["file", "list", "clock", "random"] {
        let name: &'static str = behaviour.to_owned().leak();
        let fault = seen(&judge(python(name, behaviour))).unwrap_err();
        assert!(fault.starts_with("trapped"), "{behaviour}: {fault}");
    }
    // `os.environ` is read when the interpreter starts, at build time, from an empty
    // environment: there is nothing of the host's in it.
    let report = seen(&judge(python("env", "env"))).unwrap();
    assert_eq!(report, json!({"seen": {}}));
}

#[test]
fn python_reaches_no_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let module = componentized("python", "policies/hostile/python/hostile.py", false);
    let mut spec = Spec::new(
        "network",
        module,
        json!({"behaviour": "network", "port": port}),
    );
    spec.memory_mb = 64;
    let fault = seen(&judge(spec)).unwrap_err();
    assert!(fault.starts_with("trapped"), "{fault}");
    let accepted = listener.accept().map(|(_, peer)| peer);
    assert_eq!(
        accepted.map_err(|e| e.kind()).unwrap_err(),
        ErrorKind::WouldBlock,
        "a policy connected to the host"
    );
}

#[test]
fn python_built_with_wasi_is_refused_at_load_naming_the_fix() {
    let module = componentized("python", "policies/hostile/python/hostile.py", true);
    let error = engine().load(&module).unwrap_err().to_string();
    assert!(error.contains("wasi:sockets/"), "{error}");
    assert!(error.contains("--stub-wasi"), "{error}");
}
