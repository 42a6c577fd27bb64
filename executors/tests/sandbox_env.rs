//! Attack row: a secret in the gateway's environment never reaches a sandbox.
//!
//! Its own test binary because it sets a process environment variable, which is only sound
//! while no other thread reads the environment: this file has exactly one test.

#[path = "sandbox_harness.rs"]
mod harness;

use std::time::Duration;

use harness::{Instance, sh, supervisor};
use hpcgate_executors::sandbox::{OutputStream, run_sync, spawn_job, tail, wait_job};

#[test]
#[allow(unsafe_code)]
fn gateway_secret_env_var_is_invisible_allow_listed_ones_pass() {
    // SAFETY: the only test of this binary sets the variables before it starts any thread
    // of its own; nothing else reads the environment concurrently.
    unsafe {
        std::env::set_var("HPCGATE_TEST_SECRET", "TOP-SECRET-ENV");
        std::env::set_var("LANG", "C.UTF-8");
    }
    let mut inst = Instance::create();
    let r = run_sync(&inst.spec, &sh("env"), None).expect("runs");
    let env = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(!env.contains("TOP-SECRET"), "{env}");
    assert!(
        env.contains("LANG=C.UTF-8"),
        "allow-listed LANG passes: {env}"
    );
    assert!(env.contains("HOME=/tmp"), "{env}");
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, _)| n)
        .collect();
    for name in &names {
        assert!(
            ["PATH", "HOME", "LANG", "PWD", "SHLVL", "_"].contains(name),
            "unexpected variable `{name}` in {env}"
        );
    }

    let dir = inst.job_dir("env");
    spawn_job(&dir, &inst.spec, &sh("env"), &supervisor()).expect("spawn");
    wait_job(&dir, Duration::from_secs(10)).expect("wait");
    let out = tail(&dir, OutputStream::Stdout, 1 << 16)
        .expect("tail")
        .data;
    let out = String::from_utf8_lossy(&out);
    assert!(
        !out.contains("TOP-SECRET") && out.contains("LANG=C.UTF-8"),
        "{out}"
    );

    // Control: allow-listing the variable makes it visible, so the rows above can fail.
    inst.spec.env.allow.push("HPCGATE_TEST_SECRET".to_owned());
    let r = run_sync(&inst.spec, &sh("env"), None).expect("runs");
    assert!(String::from_utf8_lossy(&r.stdout).contains("TOP-SECRET-ENV"));
}
