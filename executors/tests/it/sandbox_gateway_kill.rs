//! Attack row: the gateway is killed with SIGKILL while it has a supervised job and a
//! `run_sync` sandbox. The job keeps running and is re-attached by identity; the `run_sync`
//! sandbox dies with its parent (no orphans).
//!
//! The "gateway" is this test binary re-executed with `HPCGATE_SANDBOX_TEST_ROLE` set: it
//! runs only `gateway_process_role_when_reexecuted`, which is `#[ignore]`d and does nothing
//! without that variable (so it is not a test on its own).

use crate::sandbox_harness as harness;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use harness::{Instance, gone_within, processes_with, running, sh, supervisor};
use hpcgate_executors::sandbox::{
    EndReason, JobPhase, SandboxSpec, attach_job, cancel_job, run_sync, spawn_job,
};
use serde::{Deserialize, Serialize};

use crate::reexec;

const ROLE: &str = "HPCGATE_SANDBOX_TEST_ROLE";

#[derive(Serialize, Deserialize)]
struct Role {
    spec: SandboxSpec,
    job_dir: PathBuf,
    token: String,
}

#[test]
#[ignore = "the gateway's role, run in a process of its own by gateway_killed_supervised_job_survives_and_run_sync_sandbox_dies"]
fn gateway_process_role_when_reexecuted() {
    let Some(role) = std::env::var_os(ROLE) else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the role of gateway_killed_supervised_job_survives_and_run_sync_sandbox_dies, which sets {ROLE}"
        );
        return;
    };
    let role: Role = serde_json::from_str(role.to_str().expect("utf8")).expect("role");
    let t = &role.token;
    spawn_job(
        &role.job_dir,
        &role.spec,
        &sh(&format!("sleep 1007.{t}")),
        &supervisor(),
    )
    .expect("spawn job");
    let mut out = std::io::stdout();
    out.write_all(b"spawned\n").expect("stdout");
    out.flush().expect("flush");
    // Blocks until the parent kills us.
    let _ = run_sync(&role.spec, &sh(&format!("sleep 1008.{t}")), None);
}

#[test]
fn gateway_killed_supervised_job_survives_and_run_sync_sandbox_dies() {
    let inst = Instance::create();
    let token = format!("{}{}", std::process::id() % 10_000, 42);
    let job_dir = inst.job_dir("survivor");
    let role = Role {
        spec: inst.spec.clone(),
        job_dir: job_dir.clone(),
        token: token.clone(),
    };
    let mut gateway = reexec("sandbox_gateway_kill::gateway_process_role_when_reexecuted")
        .arg("--nocapture")
        .env(ROLE, serde_json::to_string(&role).expect("json"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gateway");
    let mut lines = BufReader::new(gateway.stdout.take().expect("pipe")).lines();
    let spawned = lines.find(|l| l.as_deref().is_ok_and(|l| l == "spawned"));
    assert!(spawned.is_some(), "the gateway process spawned the job");
    let until = Instant::now() + Duration::from_secs(10);
    // Wait for the sandboxed command itself: bwrap's argv mentions the token too, and during
    // bwrap's own set-up (a few ms) the namespace's parent-death signal is not yet armed.
    while running("sleep", &format!("1008.{token}")).is_empty() {
        assert!(Instant::now() < until, "run_sync sandbox never started");
        std::thread::sleep(Duration::from_millis(20));
    }

    gateway.kill().expect("SIGKILL the gateway");
    gateway.wait().expect("reap");

    assert!(
        gone_within(&format!("1008.{token}"), Duration::from_secs(2)),
        "the run_sync sandbox died with the gateway"
    );
    // A new gateway re-attaches by identity and finds the job still running.
    let handle = attach_job(&job_dir).expect("attach");
    assert_eq!(handle.state.phase, JobPhase::Running, "{:?}", handle.state);
    assert!(handle.state.supervisor.is_alive());
    assert!(
        !processes_with(&format!("1007.{token}")).is_empty(),
        "job still running"
    );

    let s = cancel_job(&job_dir).expect("cancel");
    assert_eq!(s.reason, Some(EndReason::Cancelled), "{s:?}");
    assert!(gone_within(
        &format!("1007.{token}"),
        Duration::from_secs(2)
    ));
}
