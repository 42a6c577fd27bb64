//! Smoke tests: a sandbox runs a command, a job runs under its supervisor.

use crate::sandbox_harness as harness;

use std::time::Duration;

use harness::{Instance, gone_within, sh, supervisor};
use hpcgate_executors::sandbox::{
    EndReason, ExitInfo, JobPhase, OutputStream, run_attached, run_sync, spawn_job, spawn_service,
    tail, wait_job,
};

#[test]
fn run_sync_echoes_and_reports_exit_code() {
    let inst = Instance::create();
    let r = run_sync(&inst.spec, &sh("echo hello; echo err >&2; exit 3"), None).expect("runs");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "hello\n", "{r:?}");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "err\n");
    assert_eq!(r.exit, ExitInfo::Code(3));
    assert_eq!(r.reason, EndReason::Exited);
}

#[test]
fn run_sync_feeds_stdin() {
    let inst = Instance::create();
    let r = run_sync(&inst.spec, &["/bin/cat".to_owned()], Some(b"abc")).expect("runs");
    assert_eq!(r.stdout, b"abc");
}

#[test]
fn run_attached_reports_the_exit_code_and_enforces_the_wall_time() {
    let mut inst = Instance::create();
    let r = run_attached(&inst.spec, &sh("exit 3")).expect("runs");
    assert_eq!(r.exit, ExitInfo::Code(3));
    assert_eq!(r.reason, EndReason::Exited);
    inst.spec.limits.wall_time = Duration::from_secs(1);
    let r = run_attached(&inst.spec, &sh("sleep 30")).expect("runs");
    assert_eq!(r.reason, EndReason::Timeout, "{r:?}");
}

#[test]
fn job_runs_to_completion_and_output_is_kept_host_side() {
    let inst = Instance::create();
    let dir = inst.job_dir("j1");
    let h = spawn_job(
        &dir,
        &inst.spec,
        &sh("echo out; echo err >&2"),
        &supervisor(),
    )
    .expect("spawn");
    // A job this short can end before `spawn_job` reads its state back.
    assert!(
        matches!(h.state.phase, JobPhase::Running | JobPhase::Finished),
        "{:?}",
        h.state
    );
    let s = wait_job(&dir, Duration::from_secs(10)).expect("wait");
    assert_eq!(s.phase, JobPhase::Finished, "{s:?}");
    assert_eq!(s.reason, Some(EndReason::Exited));
    assert_eq!(s.exit, Some(ExitInfo::Code(0)));
    assert_eq!(
        tail(&dir, OutputStream::Stdout, 100).expect("tail").data,
        b"out\n"
    );
    assert_eq!(
        tail(&dir, OutputStream::Stderr, 100).expect("tail").data,
        b"err\n"
    );
}

#[test]
fn jobs_that_exit_at_once_are_recorded_as_exited() {
    // Regression: bwrap may exit (and be reaped) before the monitor starts.
    let inst = Instance::create();
    for i in 0..5 {
        let dir = inst.job_dir(&format!("fast{i}"));
        spawn_job(&dir, &inst.spec, &["/bin/true".to_owned()], &supervisor()).expect("spawn");
        let s = wait_job(&dir, Duration::from_secs(10)).expect("wait");
        assert_eq!(
            (s.reason, s.exit),
            (Some(EndReason::Exited), Some(ExitInfo::Code(0))),
            "{s:?}"
        );
    }
}

#[test]
fn the_result_says_which_mechanism_enforced_each_limit() {
    use hpcgate_executors::sandbox::LimitMechanism;
    let mut inst = Instance::create();
    let r = run_sync(&inst.spec, &["/bin/true".to_owned()], None).expect("runs");
    assert_eq!(r.limits.wall_time.mechanism, LimitMechanism::Monitor);
    assert_eq!(r.limits.output_bytes.mechanism, LimitMechanism::Monitor);
    // Without any usable cgroup (v2 delegated or v1 controllers) the fallbacks are named as
    // such; the cgroup v1 rows are in `sandbox_cgroup_v1`.
    let cgroup = [LimitMechanism::CgroupV2, LimitMechanism::CgroupV1];
    if !cgroup.contains(&r.limits.memory.mechanism) {
        assert_eq!(r.limits.memory.mechanism, LimitMechanism::WatchdogAndRlimit);
        let expected = if inst.host_uid.is_some() {
            LimitMechanism::Rlimit
        } else {
            r.limits.pids.mechanism
        };
        assert_eq!(r.limits.pids.mechanism, expected);
        if harness::is_root() {
            // Root without a dedicated uid: RLIMIT_NPROC would not bind, and we say so.
            inst.spec.run_as = None;
            let r = run_sync(&inst.spec, &["/bin/true".to_owned()], None).expect("runs");
            assert_eq!(r.limits.pids.mechanism, LimitMechanism::NotEnforced);
        }
    }
}

#[test]
fn a_missing_bwrap_is_an_error_that_says_what_to_install() {
    use hpcgate_executors::sandbox::SandboxError;
    let mut inst = Instance::create();
    inst.spec.bwrap = "/nonexistent/bwrap".into();
    let err = run_sync(&inst.spec, &sh("true"), None).expect_err("no bwrap");
    assert!(matches!(err, SandboxError::BwrapMissing { .. }), "{err}");
    assert!(
        err.to_string().contains("apt-get install bubblewrap"),
        "{err}"
    );
    let err = spawn_job(
        &inst.job_dir("nobwrap"),
        &inst.spec,
        &sh("true"),
        &supervisor(),
    )
    .expect_err("no bwrap");
    assert!(matches!(err, SandboxError::BwrapMissing { .. }), "{err}");
}

/// A start that does not answer within its time is reported failed, and what it started so
/// far is killed with it: nothing goes on to run the job untracked. Here a supervisor that
/// never answers: its child is gone once `spawn_job` has returned (after 10 s).
#[test]
fn a_start_that_never_answers_leaves_nothing_running() {
    use hpcgate_executors::sandbox::{SandboxError, SupervisorCommand};
    let inst = Instance::create();
    // Like the real one, the first process leaves a child behind and exits; this child keeps
    // the answer pipe open and says nothing. Its `sleep` argument is the marker to find it by.
    let marker = format!("600.{}", std::process::id());
    let silent = SupervisorCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            format!("sleep {marker} & exit 0").into(),
            "sh".into(),
        ],
    };
    let err = spawn_job(&inst.job_dir("silent"), &inst.spec, &sh("true"), &silent)
        .expect_err("no answer");
    assert!(matches!(err, SandboxError::SupervisorStart { .. }), "{err}");
    assert!(err.to_string().contains("no answer"), "{err}");
    assert!(
        gone_within(&marker, Duration::from_secs(2)),
        "a silent start's processes still run"
    );
}

#[test]
fn a_job_dir_cannot_be_reused() {
    use hpcgate_executors::sandbox::SandboxError;
    let inst = Instance::create();
    let dir = inst.job_dir("once");
    spawn_job(&dir, &inst.spec, &sh("true"), &supervisor()).expect("spawn");
    wait_job(&dir, Duration::from_secs(10)).expect("wait");
    let err = spawn_job(&dir, &inst.spec, &sh("true"), &supervisor()).expect_err("reused");
    assert!(matches!(err, SandboxError::JobDirExists { .. }), "{err}");
}

#[test]
fn a_service_talks_over_its_pipes_and_dies_whole_when_killed() {
    use std::io::{BufRead, BufReader, Write};
    let inst = Instance::create();
    // A line-echo service with a grandchild that would outlive a naive kill.
    let marker = "hpcgate-service-smoke-sleeper";
    let script =
        format!("(exec -a {marker} sleep 300) & while read -r l; do echo \"got $l\"; done");
    let bash = vec!["/usr/bin/bash".to_owned(), "-c".to_owned(), script];
    let (mut service, mut pipes) =
        spawn_service(&inst.spec, &bash, "hpcgate-test-service").expect("starts");
    writeln!(pipes.stdin, "ping").unwrap();
    let mut line = String::new();
    BufReader::new(&mut pipes.stdout)
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "got ping\n");
    assert_eq!(service.try_exit(), None, "still running");
    // The grandchild is started in the background: it may exec a moment after the echo.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while harness::running("sleep", marker).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the grandchild runs");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(service.kill().is_some());
    assert!(
        gone_within(marker, Duration::from_secs(5)),
        "the sandbox's processes are gone"
    );
    assert!(service.kill().is_some(), "idempotent");
}

/// `--batch`, a Slurm job's body: the supervisor runs the job in the foreground, exits with
/// the command's code, keeps its output in the job directory up to the cap, and records its
/// end. A request it cannot read (another hpcgate version wrote it) is a recorded start
/// failure, not a command that exited 1.
#[test]
fn batch_mode_runs_in_the_foreground_and_records_its_end() {
    use hpcgate_executors::sandbox::{batch_state, write_batch_request};
    let mut inst = Instance::create();
    inst.spec.limits.output_bytes = 1000;
    let batch = |dir: &std::path::Path| {
        std::process::Command::new(supervisor().program)
            .arg("--batch")
            .arg(dir)
            .env_clear()
            .output()
            .expect("the supervisor runs")
    };

    let dir = inst.job_dir("exits");
    std::fs::create_dir(&dir).unwrap();
    write_batch_request(&dir, &inst.spec, &sh("echo out; echo err >&2; exit 3")).unwrap();
    let out = batch(&dir);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(std::fs::read(dir.join("stdout")).unwrap(), b"out\n");
    assert_eq!(std::fs::read(dir.join("stderr")).unwrap(), b"err\n");
    let ended = batch_state(&dir).unwrap();
    assert_eq!(
        (ended.phase, ended.reason, ended.exit),
        (
            JobPhase::Finished,
            Some(EndReason::Exited),
            Some(ExitInfo::Code(3))
        )
    );

    let dir = inst.job_dir("floods");
    std::fs::create_dir(&dir).unwrap();
    write_batch_request(&dir, &inst.spec, &sh("yes")).unwrap();
    let out = batch(&dir);
    assert_eq!(out.status.code(), Some(128 + 9), "{out:?}");
    assert!(std::fs::metadata(dir.join("stdout")).unwrap().len() <= 1000);
    assert_eq!(
        batch_state(&dir).unwrap().reason,
        Some(EndReason::OutputCap)
    );

    let dir = inst.job_dir("newer");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("request.json"),
        br#"{"spec": {}, "command": [], "v": 2}"#,
    )
    .unwrap();
    let out = batch(&dir);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let ended = batch_state(&dir).unwrap();
    assert_eq!(ended.reason, Some(EndReason::StartFailed), "{ended:?}");
    let message = ended.message.unwrap();
    assert!(message.contains("same hpcgate version"), "{message}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&message));
    assert!(!dir.join("stdout").exists(), "nothing ran");
}
