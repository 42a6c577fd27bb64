//! The Slurm executor against a real cluster: `scripts/slurm-local.sh start` brings up a
//! private one-machine Slurm (installing slurm-wlm and munge if needed). If it cannot, every
//! test here fails with the script's message; nothing is skipped.
//!
//! Lifecycle tests are below; the attack table is in `slurm/attacks.rs`, the latency bench
//! (ignored by default) in `slurm/bench.rs`.

mod attacks;
mod bench;
mod harness;

use std::time::Duration;

use hpcgate_executors::sandbox::{
    EndReason, ExitInfo, JobPhase as SupervisedPhase, LimitMechanism,
};
use hpcgate_executors::slurm::{CancelOutcome, JobPhase, SlurmJobId};

use harness::{
    JobDirs, NAME, memory_enforced_by_cgroup, scontrol_record, wait_final, wait_running,
};

#[test]
fn true_in_bwrap_completes() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let job = runner.submit(&dirs.spec(&["/bin/true"])).unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(
        status.phase,
        JobPhase::Completed,
        "{status:?} {}",
        dirs.stderr()
    );
    assert_eq!((status.exit_code, status.signal), (Some(0), None));
    assert!(
        std::fs::read_dir(dirs.path("scripts"))
            .unwrap()
            .next()
            .is_none(),
        "the batch script is removed after sbatch"
    );
}

#[test]
fn exit_3_fails_with_code_3() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let job = runner
        .submit(&dirs.spec(&["/bin/sh", "-c", "exit 3"]))
        .unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    assert_eq!(status.exit_code, Some(3));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
}

#[test]
fn the_body_runs_inside_bwrap() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let job = runner
        .submit(&dirs.spec(&["/bin/sh", "-c", "id -u; pwd; ls /"]))
        .unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(
        status.phase,
        JobPhase::Completed,
        "{status:?} {}",
        dirs.stderr()
    );
    let out = String::from_utf8_lossy(&dirs.stdout()).into_owned();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1000"), "{out}");
    assert_eq!(lines.next(), Some("/workspace"), "{out}");
    assert!(
        !out.contains("root\n") && !out.contains("home\n"),
        "host dirs visible: {out}"
    );
}

#[test]
fn exceeding_the_time_limit_is_timeout() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let mut spec = dirs.spec(&["/bin/sleep", "600"]);
    spec.time_limit = Duration::from_secs(1); // rounded up to Slurm's one minute
    let job = runner.submit(&spec).unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(150));
    assert_eq!(status.phase, JobPhase::Timeout, "{status:?}");
    assert_eq!(status.reason.as_deref(), Some("TimeLimit"));
    assert_eq!(status.slurm_state.as_deref(), Some("TIMEOUT"));
}

/// With cgroup v1 (what `slurm-local.sh` picks when the controllers are mounted) the kernel
/// OOM-kills the hog and Slurm says OUT_OF_MEMORY → `oom`. Without cgroups Slurm enforces
/// `--mem` by polling and records FAILED with signal 9: then the hog must still end, never
/// "still running" (OUT_OF_MEMORY → oom is also covered by the recorded-output parser tests).
#[test]
fn a_memory_hog_is_killed_as_oom() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let mut spec = dirs.spec(&[
        "/bin/sh",
        "-c",
        // The shell holds 300 MiB in a variable, then sleeps: over the limit for a minute.
        "x=$(head -c 300M /dev/zero | tr '\\0' a); sleep 60",
    ]);
    spec.memory_mb = 100;
    let job = runner.submit(&spec).unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(90));
    if memory_enforced_by_cgroup() {
        assert_eq!(status.phase, JobPhase::Oom, "{status:?}");
        assert_eq!(status.reason.as_deref(), Some("OutOfMemory"));
    } else {
        assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
        assert_eq!(status.signal, Some(9), "{status:?}");
        assert!(
            dirs.slurm_log().contains("memory limit"),
            "{}",
            dirs.slurm_log()
        );
    }
}

/// Slurm writes a job's output wherever `--output` says, without a limit: a `yes` could fill
/// the disk the gateway keeps its state and audit log on. The supervisor on the node copies
/// the sandbox's output, and ends it at its cap.
#[test]
fn output_past_the_cap_ends_the_job() {
    const CAP: u64 = 64 * 1024;
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let mut spec = dirs.spec(&["/usr/bin/yes", "flood"]);
    JobDirs::sandbox(&mut spec).limits.output_bytes = CAP;
    let job = runner.submit(&spec).unwrap();
    // Well inside the two-minute time limit: the cap ends it, not Slurm.
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    let written = dirs.stdout().len() as u64;
    assert!(
        written > 0 && written <= CAP,
        "{written} bytes of output kept"
    );
    let ended = hpcgate_executors::sandbox::batch_state(&dirs.path("logs")).unwrap();
    assert_eq!(ended.reason, Some(EndReason::OutputCap), "{ended:?}");
    assert!(ended.output_truncated);
    // The record names what held the memory: the job's cgroup where Slurm constrains it;
    // else nothing of hpcgate's (a local sandbox's rlimits and watchdog would hurt jobs that
    // share the node's one Slurm user), and the record says so.
    let limits = ended.limits.unwrap();
    let expected = if memory_enforced_by_cgroup() {
        LimitMechanism::Scheduler
    } else {
        LimitMechanism::NotEnforced
    };
    assert_eq!(limits.memory.mechanism, expected, "{limits:?}");
    if expected == LimitMechanism::Scheduler {
        assert!(
            limits
                .memory
                .detail
                .contains(&format!("{}", 200 * 1024 * 1024)),
            "the job's own 200 MiB: {limits:?}"
        );
    }
}

/// A job's trap that saves its work when asked to stop, and exits 0.
const SAVING: &str = "trap 'echo saving; sleep 0.3; echo saved; exit 0' TERM";

/// At its wall time the supervisor on the node asks the sandbox to end (`SIGTERM`) and gives
/// it its grace, as on the login node: a job that saves its work and exits 0 completes, and
/// the record says it was stopped at its wall time.
#[test]
fn a_slurm_job_gets_its_grace_at_its_wall_time() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let mut spec = dirs.spec(&[
        "/bin/sh",
        "-c",
        &format!("{SAVING}; while :; do sleep 0.1; done"),
    ]);
    let limits = &mut JobDirs::sandbox(&mut spec).limits;
    limits.wall_time = Duration::from_secs(2);
    limits.stop_grace = Duration::from_secs(10);
    let job = runner.submit(&spec).unwrap();
    saved_its_work(&dirs, job.id, "saving\nsaved\n", EndReason::Timeout);
}

/// Job `id` saved its work in its grace: Slurm saw it complete (exit 0) within 90 s, it
/// printed `stdout`, and its supervisor recorded why it was stopped.
fn saved_its_work(dirs: &JobDirs, id: u64, stdout: &str, why: EndReason) {
    let status = wait_final(&dirs.runner(), id, Duration::from_secs(90));
    assert_eq!(
        (&status.phase, status.exit_code),
        (&JobPhase::Completed, Some(0)),
        "{status:?} {}",
        dirs.slurm_log()
    );
    assert_eq!(String::from_utf8_lossy(&dirs.stdout()), stdout);
    let ended = hpcgate_executors::sandbox::batch_state(&dirs.path("logs")).unwrap();
    assert_eq!(ended.reason, Some(why), "{ended:?}");
}

/// Asked to stop (`ask_to_stop`, what `cancel_job` does to a running Slurm job), the
/// supervisor sends the sandbox's processes `SIGTERM` and gives them their grace (a plain
/// `scancel` sends its own `SIGTERM`: see below).
#[test]
fn a_slurm_job_asked_to_stop_gets_its_grace() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let saving = format!("{SAVING}; echo ready; while :; do sleep 0.1; done");
    let job = submit_ready(&dirs, &saving, Duration::from_secs(30));
    assert_eq!(
        runner.ask_to_stop(job.id, NAME).unwrap(),
        CancelOutcome::Requested,
        "{}",
        dirs.slurm_log()
    );
    saved_its_work(
        &dirs,
        job.id,
        "ready\nsaving\nsaved\n",
        EndReason::Cancelled,
    );
}

/// Submits `sh -c script` with a grace of `grace`, and waits until its stdout starts with
/// `ready`.
fn submit_ready(dirs: &JobDirs, script: &str, grace: Duration) -> SlurmJobId {
    let mut spec = dirs.spec(&["/bin/sh", "-c", script]);
    JobDirs::sandbox(&mut spec).limits.stop_grace = grace;
    let job = dirs.runner().submit(&spec).unwrap();
    for _ in 0..600 {
        if dirs.stdout().starts_with(b"ready") {
            return job;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the job never said it was ready: {}", dirs.slurm_log());
}

/// The job's command starts with no standard signal (1–31) blocked or ignored, whatever the
/// supervisor does with them for itself. Checked with bash, which keeps the mask and ignores
/// it is given (dash, `/bin/sh` here, clears the mask, so it would hide a leak). Real-time
/// signals are left out: Slurm's step daemon may hand down an ignored one (32 was, on a fresh
/// machine), which no graceful stop uses.
#[test]
fn the_command_starts_with_no_signal_blocked_or_ignored() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    // bash replaces itself with grep, which reads its own status: what it was given.
    let probe = "exec grep -E '^Sig(Blk|Ign)' /proc/self/status";
    let job = runner
        .submit(&dirs.spec(&["/usr/bin/bash", "-c", probe]))
        .unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Completed, "{}", dirs.slurm_log());
    let stdout = String::from_utf8_lossy(&dirs.stdout()).into_owned();
    let masks: Vec<(&str, u64)> = (stdout.lines())
        .filter_map(|line| line.split_once(":\t"))
        .map(|(name, hex)| (name, u64::from_str_radix(hex, 16).unwrap()))
        .collect();
    assert_eq!(masks.len(), 2, "{stdout}");
    for (name, mask) in masks {
        assert_eq!(mask & 0x7fff_ffff, 0, "{name}: {mask:#x} (signals 1–31)");
    }
}

/// A plain `scancel` (an admin's, or what a preemption or Slurm's own time limit sends):
/// Slurm's `SIGTERM` reaches the supervisor (under `proctrack/cgroup`, as here), which does
/// not end at it: the sandbox is stopped as for a cancel, so its command saves its work and
/// exits, and the supervisor records that end. (Before: the supervisor ended at the
/// `SIGTERM`, and bwrap and the sandbox with it, before the job's trap could save anything.)
#[test]
fn a_plain_scancel_gives_the_sandbox_its_grace() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let saving = format!("{SAVING}; echo ready; while :; do sleep 0.1; done");
    let job = submit_ready(&dirs, &saving, Duration::from_secs(30));
    assert_eq!(
        runner.cancel(job.id, NAME).unwrap(),
        CancelOutcome::Requested
    );
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Cancelled, "{status:?}");
    assert_eq!(
        String::from_utf8_lossy(&dirs.stdout()),
        "ready\nsaving\nsaved\n",
        "{}",
        dirs.slurm_log()
    );
    let ended = hpcgate_executors::sandbox::batch_state(&dirs.path("logs")).unwrap();
    assert_eq!(
        (ended.reason, ended.exit),
        (Some(EndReason::Exited), Some(ExitInfo::Code(0))),
        "{ended:?}"
    );
}

/// A job stopping for a cancel that ignores it: a second cancel (a plain `scancel`) kills it
/// at once, and the supervisor, which outlives the kill, records it as cancelled. (Slurm's
/// own kill after its `KillWait` would have killed the supervisor too, leaving no record.)
#[test]
fn a_scancel_during_a_cancels_grace_kills_at_once() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let stubborn = "trap 'echo ignored' TERM; echo ready; while :; do sleep 0.1; done";
    let job = submit_ready(&dirs, stubborn, Duration::from_secs(300));
    assert_eq!(
        runner.ask_to_stop(job.id, NAME).unwrap(),
        CancelOutcome::Requested
    );
    for _ in 0..600 {
        if String::from_utf8_lossy(&dirs.stdout()).contains("ignored") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        runner.cancel(job.id, NAME).unwrap(),
        CancelOutcome::Requested
    );
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Cancelled, "{status:?}");
    let ended = hpcgate_executors::sandbox::batch_state(&dirs.path("logs")).unwrap();
    assert_eq!(
        (ended.phase, ended.reason),
        (SupervisedPhase::Finished, Some(EndReason::Cancelled)),
        "{ended:?} {}",
        dirs.slurm_log()
    );
}

/// The seccomp filter of local sandboxes holds in a Slurm job too (the body used to be a
/// bare `bwrap` without it): kernel keyrings, which are not namespaced, stay out of reach.
#[test]
fn a_slurm_sandbox_has_the_seccomp_filter() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let probe = format!(
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         r = libc.syscall({keyctl}, 0, -3, 0)\n\
         print('keyctl', r, os.strerror(ctypes.get_errno()) if r < 0 else 'ok')\n\
         print(open('/proc/self/status').read())",
        keyctl = libc::SYS_keyctl,
    );
    let job = runner
        .submit(&dirs.spec(&["/usr/bin/python3", "-c", &probe]))
        .unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(
        status.phase,
        JobPhase::Completed,
        "{status:?} {} {}",
        dirs.stderr(),
        dirs.slurm_log()
    );
    let out = String::from_utf8_lossy(&dirs.stdout()).into_owned();
    assert!(out.contains("keyctl -1 Function not implemented"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
}

#[test]
fn cancel_ends_as_cancelled() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let job = runner.submit(&dirs.spec(&["/bin/sleep", "600"])).unwrap();
    wait_running(&runner, job.id);
    let name = NAME;
    // Another name: not this job, which runs on.
    assert_eq!(
        runner.cancel(job.id, "someone-else").unwrap(),
        CancelOutcome::AlreadyFinished
    );
    wait_running(&runner, job.id);
    assert_eq!(
        runner.cancel(job.id, name).unwrap(),
        CancelOutcome::Requested
    );
    let status = wait_final(&runner, job.id, Duration::from_secs(30));
    assert_eq!(status.phase, JobPhase::Cancelled, "{status:?}");
    let both = runner
        .statuses(&[(60_000_000, NAME), (job.id, NAME)])
        .unwrap();
    let phases: Vec<&JobPhase> = both.iter().map(|s| &s.phase).collect();
    assert_eq!(phases, [&JobPhase::Lost, &JobPhase::Cancelled]);
    assert_eq!(
        runner.cancel(job.id, name).unwrap(),
        CancelOutcome::AlreadyFinished
    );
}

/// A job's id under another name is another job's (Slurm's ids wrap, and a reset controller
/// starts again): its state is not this job's, in the queue or after it.
#[test]
fn an_id_under_another_name_is_not_this_job() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let job = runner.submit(&dirs.spec(&["/bin/sleep", "600"])).unwrap();
    wait_running(&runner, job.id);
    let other = "hpcgate-another-job";
    let queued = runner.statuses(&[(job.id, other), (job.id, NAME)]).unwrap();
    let phases: Vec<&JobPhase> = queued.iter().map(|s| &s.phase).collect();
    assert_eq!(phases, [&JobPhase::Lost, &JobPhase::Running], "{queued:?}");
    assert!(
        queued[0].reason.as_deref().unwrap().contains("another job"),
        "{queued:?}"
    );
    assert_eq!(
        runner.cancel(job.id, NAME).unwrap(),
        CancelOutcome::Requested
    );
    assert_eq!(
        wait_final(&runner, job.id, Duration::from_secs(30)).phase,
        JobPhase::Cancelled
    );
    // Out of the queue, `scontrol` still remembers it: under its own name only.
    let ended = runner.status(job.id, other).unwrap();
    assert_eq!(ended.phase, JobPhase::Lost, "{ended:?}");
    assert!(ended.reason.unwrap().contains("another job"));
}

#[test]
fn a_job_slurm_never_heard_of_is_lost_not_completed() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    for id in [60_000_000, 4_000_000_000] {
        let status = runner.status(id, NAME).unwrap();
        assert_eq!(status.phase, JobPhase::Lost, "{id}");
        assert!(!status.phase.is_final());
    }
    assert_eq!(
        runner.cancel(60_000_000, "run1").unwrap(),
        CancelOutcome::AlreadyFinished,
        "nothing of that id and name is active"
    );
}

#[test]
fn cluster_status_lists_partitions_cpus_and_gpus() {
    let dirs = JobDirs::new();
    let cluster = dirs.runner().cluster_status().unwrap();
    let names: Vec<&str> = cluster.partitions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["batch", "debug"]);
    let debug = &cluster.partitions[1];
    assert!(debug.default && debug.available);
    assert!(debug.cpus.total >= 1);
    assert_eq!(
        debug.cpus.total,
        debug.cpus.allocated + debug.cpus.idle + debug.cpus.other
    );
    assert_eq!(debug.gpus_total, 2);
    assert_eq!(debug.nodes.len(), 1);
    // The local cluster has no accounting database: status falls back to scontrol.
    assert!(!dirs.runner().accounting_available().unwrap());
}

#[test]
fn gpus_and_partition_reach_slurm() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let mut spec = dirs.spec(&["/bin/true"]);
    spec.gpus = 1;
    spec.partition = Some("batch".to_owned());
    let job = runner.submit(&spec).unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let record = scontrol_record(job.id);
    assert!(record.contains("Partition=batch "), "{record}");
    assert!(
        record.contains("gres/gpu=1") || record.contains("gpu:1"),
        "{record}"
    );
}
