//! Attack row: a secret in the gateway's environment never reaches a sandbox.
//!
//! The "gateway" is a process of its own: this test binary re-executed, with the secret in its
//! environment from the start, for the `#[ignore]`d role test. (Setting a variable in this
//! process would be unsound while other tests' threads read the environment.)

use crate::sandbox_harness as harness;

use std::io::Write as _;
use std::time::Duration;

use harness::{Instance, sh, supervisor};
use hpcgate_executors::sandbox::{OutputStream, run_sync, spawn_job, tail, wait_job};

use crate::reexec;

/// Set in the role's environment by the test; its presence tells the role it was started so.
const SECRET: &str = "HPCGATE_TEST_SECRET";

#[test]
fn gateway_secret_env_var_is_invisible_allow_listed_ones_pass() {
    let output = reexec("sandbox_env::gateway_with_a_secret_in_its_environment")
        .env(SECRET, "TOP-SECRET-ENV")
        .env("LANG", "C.UTF-8")
        .output()
        .expect("the role runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{}:\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[ignore = "the gateway's role, run in a process of its own by gateway_secret_env_var_is_invisible_allow_listed_ones_pass"]
fn gateway_with_a_secret_in_its_environment() {
    if std::env::var_os(SECRET).is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the role of gateway_secret_env_var_is_invisible_allow_listed_ones_pass, which sets {SECRET}"
        );
        return;
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
    inst.spec.env.allow.push(SECRET.to_owned());
    let r = run_sync(&inst.spec, &sh("env"), None).expect("runs");
    assert!(String::from_utf8_lossy(&r.stdout).contains("TOP-SECRET-ENV"));
}
