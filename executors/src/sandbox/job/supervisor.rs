//! The job supervisor: the detached process that owns one job's sandbox.
//!
//! [`supervisor_main`] is the whole program of `hpcgate-supervisor`; the gateway binary can
//! also re-execute itself into it. It must be called before any thread is started (it
//! forks). It detaches (fork; the first process exits so the supervisor is reparented to
//! init), opens the output files host-side with `O_CREAT|O_EXCL|O_NOFOLLOW`, starts bwrap,
//! records the state, answers `ready`, and then monitors the sandbox until it ends — wall
//! time, output cap, memory, cancel marker — and records the final state atomically.
//!
//! [`batch_main`] is the same supervisor as the body of a batch job (`--batch`): Slurm
//! started it and waits for it, so it neither forks nor answers, and it leaves CPUs, memory
//! and tasks to the job's cgroup. It still runs the sandbox with the seccomp filter and
//! copies its output through the monitor, so a job's output stops at its cap instead of
//! filling the disk Slurm writes to.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::state::{
    CANCEL, JobPhase, JobRequest, JobState, REQUEST, STDERR, STDOUT, create_new, now_ms, read_json,
    write_state,
};
use crate::sandbox::monitor::{EndReason, ExitInfo, Watch, monitor};
use crate::sandbox::proc::ProcessIdentity;
use crate::sandbox::spawn::{Containment, prepare, sandbox_init, wait_until_armed};

/// The flag before the job directory that makes the supervisor a batch job's body.
pub const BATCH_FLAG: &str = "--batch";

/// The supervisor's command line after the program (or the gateway's subcommand):
/// `<job_dir>` runs [`supervisor_main`], `--batch <job_dir>` runs [`batch_main`]. Returns
/// the exit code; 2 for any other arguments. Call it first thing in `main`, as both require.
pub fn supervisor_cli(args: &[OsString]) -> i32 {
    match args {
        [job_dir] => supervisor_main(Path::new(job_dir)),
        [flag, job_dir] if flag == BATCH_FLAG => batch_main(Path::new(job_dir)),
        _ => {
            say(&format!(
                "usage: hpcgate-supervisor [{BATCH_FLAG}] <job-dir>"
            ));
            2
        }
    }
}

/// The signal that asks a batch job's supervisor to stop its sandbox as a cancel does (the
/// gateway sends it with `scancel --batch`, to the supervisor alone): `SIGTERM` to the
/// sandbox's processes, the kill after their grace.
///
/// A plain `scancel`, a preemption or the end of the job's time in Slurm sends `SIGTERM` to
/// the job's task, the supervisor (`proctrack/cgroup` signals no other process but with
/// `SIGKILL`). Its default action ended the supervisor, and with it bwrap and the sandbox, at
/// once. The supervisor catches it ([`TERMINATED`]) and stops the sandbox as for a cancel:
/// `SIGTERM` to its processes, their grace, the kill (Slurm's own kill after its `KillWait`
/// comes first if it is shorter). A `SIGTERM` while a cancel is already stopping the sandbox,
/// which is what a second `cancel_job` sends, kills it at once. (`proctrack/linuxproc`
/// signals bwrap too, which still ends the sandbox at once there.)
pub const CANCEL_SIGNAL_NAME: &str = "USR1";

static CANCEL_SIGNALLED: AtomicBool = AtomicBool::new(false);

/// The scheduler asked every process of the job to end (`SIGTERM`).
static TERMINATED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_cancel_signal(_: libc::c_int) {
    CANCEL_SIGNALLED.store(true, Ordering::Relaxed);
}

extern "C" fn on_terminate_signal(_: libc::c_int) {
    TERMINATED.store(true, Ordering::Relaxed);
}

/// Makes `signal` run `handler` (the sandbox, started by `exec`, has the default action
/// again).
#[allow(unsafe_code)]
fn catch(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> std::io::Result<()> {
    // SAFETY: a zeroed `sigaction` is a valid value of the plain C struct; the handlers only
    // store to an atomic, which is async-signal-safe; the pointers are to live locals.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How the supervisor was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// By `spawn_job`: detached, answering `ready` on stdout.
    Detached,
    /// As a batch job's body: in the foreground, its exit status the sandbox's.
    Batch,
}

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
    match supervise(job_dir, Mode::Detached) {
        Ok(_) => 0,
        Err(message) => {
            reply(&format!("error: {message}"));
            1
        }
    }
}

/// Runs the job in `job_dir` as the body of a batch job and returns what the scheduler
/// should record: the command's exit code, 128 + the signal that ended the sandbox, or 1
/// when it could not start (the reason is in the job state and on stderr, Slurm's log).
pub fn batch_main(job_dir: &Path) -> i32 {
    if let Err(e) = catch(libc::SIGUSR1, on_cancel_signal) {
        say(&format!(
            "hpcgate-supervisor: cannot catch {CANCEL_SIGNAL_NAME} ({e}): a cancel kills at once"
        ));
    }
    if let Err(e) = catch(libc::SIGTERM, on_terminate_signal) {
        say(&format!(
            "hpcgate-supervisor: cannot catch TERM ({e}): Slurm's scancel kills at once"
        ));
    }
    match supervise(job_dir, Mode::Batch) {
        Ok(state) => match state.exit {
            Some(ExitInfo::Code(code)) => code,
            Some(ExitInfo::Signal(signal)) => 128 + signal,
            None => 1,
        },
        Err(message) => {
            say(&format!("hpcgate-supervisor: {message}"));
            1
        }
    }
}

fn supervise(job_dir: &Path, mode: Mode) -> Result<JobState, String> {
    let started = Instant::now();
    let me = ProcessIdentity::of(std::process::id() as i32)
        .map_err(|e| format!("cannot read own identity: {e}"))?;
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

    // On a compute node, a request another hpcgate version wrote may not parse: recorded as a
    // start failure, so the job does not read as its command failing.
    let request: JobRequest = match read_json(job_dir, REQUEST) {
        Ok(request) => request,
        Err(e) => return fail(state, request_problem(&e)),
    };
    let files =
        create_new(&job_dir.join(STDOUT)).and_then(|o| Ok((o, create_new(&job_dir.join(STDERR))?)));
    let (mut out, mut err) = match files {
        Ok(f) => f,
        Err(e) => return fail(state, format!("cannot create the output files: {e}")),
    };
    let name = format!("hpcgate-job-{}", std::process::id());
    let containment = match mode {
        Mode::Detached => Containment::Own,
        Mode::Batch => Containment::Scheduler,
    };
    let prepared = prepare(
        &request.spec,
        &request.command,
        Stdio::null(),
        &name,
        containment,
    );
    let mut prepared = match prepared {
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
        wait_until_armed(&mut child, id.pid);
    }
    state.limits = Some(prepared.plan.enforced.clone());
    record(&state)?;
    if mode == Mode::Detached {
        reply("ready");
        detach_stdout();
    }

    let cancel_marker = job_dir.join(CANCEL);
    let cancel_requested = || CANCEL_SIGNALLED.load(Ordering::Relaxed) || cancel_marker.exists();
    let watch = Watch {
        wall_time: request.spec.limits.wall_time,
        stop_grace: request.spec.limits.stop_grace,
        output_bytes: request.spec.limits.output_bytes,
        watch_memory_bytes: prepared.plan.watch_memory_bytes,
        cgroup: prepared.cgroup.as_ref(),
        init: init.as_ref(),
        cancel_requested: &cancel_requested,
        terminated: &|| TERMINATED.load(Ordering::Relaxed),
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
    match (record(&state), mode) {
        // Slurm records the exit code too: the command's, not this failure's.
        (Err(e), Mode::Batch) => {
            say(&format!("hpcgate-supervisor: {e}"));
            Ok(state)
        }
        (recorded, _) => recorded.map(|()| state),
    }
}

/// Why the job's request could not be read, without host paths (the job's owner reads it).
fn request_problem(e: &crate::sandbox::SandboxError) -> String {
    use crate::sandbox::SandboxError as E;
    match e {
        E::NotAJob { .. } => "the job's request is missing from its directory".to_owned(),
        E::StateCorrupt { source, .. } => format!(
            "the job's request is not one this supervisor reads ({source}): run the same hpcgate version on the gateway and the compute nodes"
        ),
        E::Io { source, .. } => format!("cannot read the job's request ({source})"),
        other => other.to_string(),
    }
}

/// One line on stderr: in a batch job, Slurm's log of it.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
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
