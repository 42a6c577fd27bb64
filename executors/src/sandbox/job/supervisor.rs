//! The job supervisor: the detached process that owns one job's sandbox.
//!
//! [`supervisor_main`] is the whole program of `hpcgate-supervisor`; the gateway binary can
//! also re-execute itself into it. It must be called before any thread is started (it
//! forks). It detaches (fork; the first process exits so the supervisor is reparented to
//! init), opens the output files host-side with `O_CREAT|O_EXCL|O_NOFOLLOW`, starts bwrap,
//! records the state, answers `ready`, and then monitors the sandbox until it ends — wall
//! time, output cap, memory, cancel marker — and records the final state atomically.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use super::state::{
    CANCEL, JobPhase, JobRequest, JobState, REQUEST, STDERR, STDOUT, create_new, now_ms, read_json,
    write_state,
};
use crate::sandbox::monitor::{EndReason, Watch, monitor};
use crate::sandbox::proc::ProcessIdentity;
use crate::sandbox::spawn::{prepare, sandbox_init, wait_until_running};

/// Runs the supervisor for `job_dir`; returns the process exit code. Call it first thing in
/// `main`, before any thread exists.
#[allow(unsafe_code)]
pub fn supervisor_main(job_dir: &Path) -> i32 {
    // SAFETY: called before any thread is started (documented contract), so the child of
    // fork is a complete copy of a single-threaded process and may continue normally.
    match unsafe { libc::fork() } {
        -1 => {
            reply(&format!(
                "error: fork failed: {}",
                std::io::Error::last_os_error()
            ));
            return 1;
        }
        0 => {}
        _ => return 0,
    }
    match supervise(job_dir) {
        Ok(()) => 0,
        Err(message) => {
            reply(&format!("error: {message}"));
            1
        }
    }
}

fn supervise(job_dir: &Path) -> Result<(), String> {
    let started = Instant::now();
    let me = ProcessIdentity::of(std::process::id() as i32)
        .map_err(|e| format!("cannot read own identity: {e}"))?;
    let request: JobRequest = read_json(job_dir, REQUEST).map_err(|e| e.to_string())?;
    let mut state = JobState {
        phase: JobPhase::Running,
        started_at_ms: now_ms(),
        finished_at_ms: None,
        supervisor: me,
        sandbox: None,
        sandbox_init: None,
        exit: None,
        reason: None,
        stdout_bytes: 0,
        stderr_bytes: 0,
        output_truncated: false,
        limits: None,
        message: None,
    };
    let record = |state: &JobState| {
        write_state(job_dir, state).map_err(|e| format!("cannot write the job state: {e}"))
    };
    let fail = |mut state: JobState, message: String| {
        state.phase = JobPhase::Finished;
        state.finished_at_ms = Some(now_ms());
        state.reason = Some(EndReason::StartFailed);
        state.message = Some(message.clone());
        let _ = write_state(job_dir, &state);
        Err(message)
    };

    let files =
        create_new(&job_dir.join(STDOUT)).and_then(|o| Ok((o, create_new(&job_dir.join(STDERR))?)));
    let (mut out, mut err) = match files {
        Ok(f) => f,
        Err(e) => return fail(state, format!("cannot create the output files: {e}")),
    };
    let name = format!("hpcgate-job-{}", std::process::id());
    let mut prepared = match prepare(&request.spec, &request.command, Stdio::null(), &name) {
        Ok(p) => p,
        Err(e) => return fail(state, e.to_string()),
    };
    let mut child = match prepared.spawn() {
        Ok(c) => c,
        Err(e) => return fail(state, format!("could not start the sandbox: {e}")),
    };
    state.sandbox = ProcessIdentity::of(child.id() as i32).ok();
    // Ready only once the sandbox exists: from here on its init is known and killable.
    let init = sandbox_init(&mut prepared.info, child.id() as i32);
    state.sandbox_init = init.as_ref().map(|(_, id)| id.clone());
    if let Some((_, id)) = &init {
        wait_until_running(&mut child, id.pid);
    }
    state.limits = Some(prepared.plan.enforced.clone());
    record(&state)?;
    reply("ready");
    detach_stdout();

    let cancel_marker = job_dir.join(CANCEL);
    let cancel_requested = || cancel_marker.exists();
    let watch = Watch {
        wall_time: request.spec.limits.wall_time,
        output_bytes: request.spec.limits.output_bytes,
        watch_memory_bytes: prepared.plan.watch_memory_bytes,
        cgroup: prepared.cgroup.as_ref(),
        init: init.as_ref().map(|(fd, _)| fd),
        cancel_requested: &cancel_requested,
        started,
    };
    let outcome = monitor(&mut child, [&mut out, &mut err], &watch);
    if let Some(cg) = prepared.cgroup.take() {
        cg.remove();
    }
    let _ = (out.sync_all(), err.sync_all());
    state.phase = JobPhase::Finished;
    state.finished_at_ms = Some(now_ms());
    match outcome {
        Ok(o) => {
            state.exit = Some(o.exit);
            state.reason = Some(o.reason);
            state.stdout_bytes = o.bytes[0];
            state.stderr_bytes = o.bytes[1];
            state.output_truncated = o.truncated.iter().any(|t| *t);
        }
        Err(e) => {
            // The monitor already killed and reaped the sandbox.
            state.reason = Some(EndReason::Lost);
            state.message = Some(format!("monitoring failed: {e}"));
        }
    }
    record(&state)
}

/// Writes the one-line answer to `spawn_job` on stdout (the handshake pipe).
fn reply(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(format!("{line}\n").as_bytes());
    let _ = stdout.flush();
}

/// Points stdout at /dev/null so `spawn_job` sees end-of-file and returns.
#[allow(unsafe_code)]
fn detach_stdout() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 between two fds we hold; fd 1 is replaced atomically.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
}
