//! Stopping a sandbox at its wall time or by a cancel: its processes get `SIGTERM` and the
//! job's grace (`Limits::stop_grace`) before the kill, as Slurm gives a job `KillWait`. One
//! that ignores it is killed when the grace is over; one that floods its output meanwhile is
//! killed at once; a grace of zero kills at once.

use crate::sandbox_harness as harness;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::sandbox_attacks::token;
use harness::{Instance, gone_within, sh, supervisor};
use hpcgate_executors::sandbox::{
    EndReason, ExitInfo, JobPhase, JobState, OutputStream, cancel_job, run_sync, spawn_job, tail,
    wait_job,
};

/// Prints `ready` once its trap is set, then waits in short `sleep`s (each gets the `SIGTERM`
/// too, so the trap runs at once).
fn trapping(trap: &str) -> Vec<String> {
    sh(&format!(
        "trap '{trap}' TERM; echo ready; while :; do sleep 0.1; done"
    ))
}

/// A sandbox instance whose stopped jobs get `grace_s` seconds.
fn with_grace(grace_s: u64) -> Instance {
    let mut inst = Instance::create();
    inst.spec.limits.stop_grace = Duration::from_secs(grace_s);
    inst
}

fn stdout(dir: &std::path::Path) -> String {
    String::from_utf8_lossy(&tail(dir, OutputStream::Stdout, 1 << 16).unwrap().data).into_owned()
}

/// Starts `command` as a job and waits until it printed `ready`.
fn started(inst: &Instance, name: &str, command: &[String]) -> std::path::PathBuf {
    let dir = inst.job_dir(name);
    spawn_job(&dir, &inst.spec, command, &supervisor()).expect("spawn");
    for _ in 0..200 {
        if stdout(&dir).starts_with("ready") {
            return dir;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "the job never said ready: {:?}",
        wait_job(&dir, Duration::ZERO)
    );
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn finished(dir: &std::path::Path) -> JobState {
    let s = wait_job(dir, Duration::from_secs(20)).expect("wait");
    assert_eq!(s.phase, JobPhase::Finished, "{s:?}");
    s
}

#[test]
fn a_cancelled_job_cleans_up_in_its_grace() {
    let inst = with_grace(10);
    let dir = started(
        &inst,
        "graceful",
        &trapping("echo stopping; sleep 0.3; echo saved; exit 0"),
    );
    cancel_job(&dir).expect("cancel");
    let s = finished(&dir);
    assert_eq!(
        (s.reason, s.exit),
        (Some(EndReason::Cancelled), Some(ExitInfo::Code(0))),
        "{s:?}"
    );
    assert_eq!(stdout(&dir), "ready\nstopping\nsaved\n");
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_when_its_grace_is_over() {
    let inst = with_grace(3);
    let dir = started(&inst, "stubborn", &trapping(""));
    let asked = now_ms();
    let s = cancel_job(&dir).expect("cancel");
    assert_eq!(
        s.phase,
        JobPhase::Running,
        "still in its grace when cancel_job returns: {s:?}"
    );
    let s = finished(&dir);
    assert_eq!(s.reason, Some(EndReason::Cancelled), "{s:?}");
    assert!(
        matches!(
            s.exit,
            Some(ExitInfo::Signal(libc::SIGKILL) | ExitInfo::Code(137))
        ),
        "{s:?}"
    );
    let ended = s.finished_at_ms.unwrap();
    assert!(
        ended >= asked + 2_900,
        "killed {} ms after the cancel, before its grace was over",
        ended - asked
    );
}

/// In its grace the supervisor waits on the sandbox, it does not spin: it used to poll with a
/// zero timeout once the wall time had passed, a whole CPU for the whole grace.
#[test]
fn the_supervisor_is_idle_through_the_grace() {
    let mut inst = with_grace(6);
    inst.spec.limits.wall_time = Duration::from_secs(1);
    let dir = started(&inst, "idle", &trapping(""));
    std::thread::sleep(Duration::from_millis(2500));
    let supervisor = wait_job(&dir, Duration::ZERO).unwrap().supervisor.pid;
    let cpu_ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{supervisor}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let before = cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks() - before;
    // Clock ticks are hundredths of a second here; spinning used about a hundred.
    assert!(
        used < 20,
        "the supervisor used {used} ticks of CPU in one second"
    );
    assert_eq!(finished(&dir).reason, Some(EndReason::Timeout));
}

#[test]
fn a_second_cancel_kills_at_once() {
    let inst = with_grace(120);
    let dir = started(&inst, "twice", &trapping(""));
    let asked = now_ms();
    assert_eq!(cancel_job(&dir).expect("cancel").phase, JobPhase::Running);
    cancel_job(&dir).expect("cancel again");
    let s = finished(&dir);
    assert_eq!(s.reason, Some(EndReason::Cancelled), "{s:?}");
    assert!(
        s.finished_at_ms.unwrap() < asked + 60_000,
        "the second cancel did not wait for the two minutes' grace: {s:?}"
    );
}

#[test]
fn a_job_flooding_its_output_in_its_grace_is_killed_at_once() {
    let mut inst = with_grace(120);
    inst.spec.limits.output_bytes = 64 * 1024;
    let dir = started(&inst, "flood", &trapping("while :; do echo flood; done"));
    cancel_job(&dir).expect("cancel");
    // Well before its two minutes: `finished` waits 20 s at most.
    let s = finished(&dir);
    assert_eq!(s.reason, Some(EndReason::Cancelled), "{s:?}");
    assert!(s.output_truncated, "{s:?}");
}

#[test]
fn the_wall_time_asks_first_and_a_zero_grace_does_not() {
    let mut inst = with_grace(10);
    inst.spec.limits.wall_time = Duration::from_secs(1);
    let script = "trap 'echo term; exit 0' TERM; while :; do sleep 0.1; done";
    let r = run_sync(&inst.spec, &sh(script), None).expect("runs");
    assert_eq!((r.reason, r.exit), (EndReason::Timeout, ExitInfo::Code(0)));
    assert_eq!(String::from_utf8_lossy(&r.stdout), "term\n");

    inst.spec.limits.stop_grace = Duration::ZERO;
    let r = run_sync(&inst.spec, &sh(script), None).expect("runs");
    assert_eq!(r.reason, EndReason::Timeout);
    assert_ne!(r.exit, ExitInfo::Code(0), "{r:?}");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "",
        "no SIGTERM came first"
    );
}

#[test]
fn cancel_kills_the_sandbox_within_two_seconds() {
    let inst = Instance::create();
    let t = token("cancel");
    let dir = inst.job_dir("cancel");
    spawn_job(
        &dir,
        &inst.spec,
        &sh(&format!("sleep 1005.{t}")),
        &supervisor(),
    )
    .expect("spawn");
    let start = Instant::now();
    let s = cancel_job(&dir).expect("cancel");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        (s.phase, s.reason),
        (JobPhase::Finished, Some(EndReason::Cancelled)),
        "{s:?}"
    );
    assert!(gone_within(
        &format!("1005.{t}"),
        Duration::from_millis(500)
    ));
}
