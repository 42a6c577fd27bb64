//! `spawn_job`: start a job under a detached supervisor and return once it runs.
//!
//! Design: the supervisor is a separate process, started from an argv
//! ([`SupervisorCommand`]): either the `hpcgate-supervisor` helper binary of this crate or
//! the gateway binary re-executing itself into [`super::supervisor_main`]. It starts in a new
//! session with an empty environment and no inherited fds, forks once so that it is
//! reparented to init (the gateway's death or restart does not touch it, and the gateway
//! has no child to reap), writes the job state and reports `ready` on a pipe. Only then does
//! `spawn_job` return, so a returned job always has a recorded supervisor identity.

use std::ffi::OsString;
use std::fs::DirBuilder;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::state::{JobRequest, REQUEST, read_state, write_json};
use super::status::JobHandle;
use crate::sandbox::argv::resolved_env;
use crate::sandbox::error::SandboxError;
use crate::sandbox::monitor::poll_readable;
use crate::sandbox::spawn::cloexec_from_3;
use crate::sandbox::spec::SandboxSpec;
use crate::sandbox::validate::validate;

/// How to start a supervisor: `program args… <job_dir>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl SupervisorCommand {
    /// The `hpcgate-supervisor` helper binary at `path`.
    pub fn helper(path: impl Into<PathBuf>) -> Self {
        SupervisorCommand {
            program: path.into(),
            args: Vec::new(),
        }
    }

    /// A binary that re-executes itself into [`super::supervisor_main`] when called as
    /// `program <subcommand> <job_dir>`; e.g. the gateway with `std::env::current_exe()` and
    /// a hidden `__supervise` subcommand dispatched first thing in `main`, before any thread.
    pub fn reexec(program: impl Into<PathBuf>, subcommand: impl Into<OsString>) -> Self {
        SupervisorCommand {
            program: program.into(),
            args: vec![subcommand.into()],
        }
    }

    /// The argv that runs the job in `job_dir` as a batch job's body ([`super::batch_main`]):
    /// `program args… --batch <job_dir>`.
    pub fn batch_argv(&self, job_dir: &Path) -> Vec<OsString> {
        let mut argv = vec![self.program.clone().into_os_string()];
        argv.extend(self.args.iter().cloned());
        argv.push(super::supervisor::BATCH_FLAG.into());
        argv.push(job_dir.as_os_str().to_owned());
        argv
    }
}

/// Writes the request a batch job's supervisor runs ([`SupervisorCommand::batch_argv`]) into
/// `job_dir`, which must exist, be private to the gateway's user and lie outside every mount
/// of the sandbox. The spec is validated and its environment resolved here, on the host that
/// submits: the batch job runs with the scheduler's environment, not the gateway's.
pub fn write_batch_request(
    job_dir: &Path,
    spec: &SandboxSpec,
    command: &[String],
) -> Result<(), SandboxError> {
    validate(spec, command)?;
    write_json(job_dir, REQUEST, &job_request(spec, command)).map_err(SandboxError::io(job_dir))
}

/// The request for `spec` and `command`, with the environment allow-list resolved now (the
/// supervisor starts with an empty environment, or a batch job's).
fn job_request(spec: &SandboxSpec, command: &[String]) -> JobRequest {
    let mut spec = spec.clone();
    spec.env.set = resolved_env(&spec)
        .into_iter()
        .map(|(k, v)| (k, v.to_string_lossy().into_owned()))
        .collect();
    spec.env.allow.clear();
    JobRequest {
        spec,
        command: command.to_vec(),
    }
}

const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates `job_dir` (its parent must exist; it must not) and starts the job in it.
pub fn spawn_job(
    job_dir: &Path,
    spec: &SandboxSpec,
    command: &[String],
    supervisor: &SupervisorCommand,
) -> Result<JobHandle, SandboxError> {
    validate(spec, command)?;
    if !spec.bwrap.is_file() {
        return Err(SandboxError::BwrapMissing {
            path: spec.bwrap.clone(),
        });
    }
    let job_dir = absolute_job_dir(job_dir)?;
    for source in spec.host_sources() {
        if let Ok(source) = source.canonicalize()
            && job_dir.starts_with(&source)
        {
            return Err(SandboxError::JobDirInsideSandbox { path: job_dir });
        }
    }
    match DirBuilder::new().mode(0o700).create(&job_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(SandboxError::JobDirExists { path: job_dir });
        }
        Err(e) => {
            return Err(SandboxError::Io {
                path: job_dir,
                source: e,
            });
        }
    }

    write_json(&job_dir, REQUEST, &job_request(spec, command))
        .map_err(SandboxError::io(&job_dir))?;

    #[allow(clippy::disallowed_methods)] // the job executor's spawn: the supervisor
    let mut cmd = Command::new(&supervisor.program);
    cmd.args(&supervisor.args)
        .arg(&job_dir)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec we only call close_range and setsid, both
    // async-signal-safe, and allocate nothing.
    unsafe {
        cmd.pre_exec(|| {
            cloexec_from_3()?;
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start_err = |message: String| SandboxError::SupervisorStart { message };
    let mut child = cmd.spawn().map_err(|e| {
        start_err(format!(
            "cannot run `{}`: {e}",
            supervisor.program.display()
        ))
    })?;
    let mut pipe = child
        .stdout
        .take()
        .ok_or_else(|| start_err("no pipe".into()))?;
    let mut reply = Vec::new();
    if poll_readable(pipe.as_raw_fd(), START_TIMEOUT) {
        // The supervisor writes one line and closes its end.
        let _ = (&mut pipe).take(4096).read_to_end(&mut reply);
    }
    if reply.is_empty() {
        // No answer: the start is reported failed, so nothing of it may go on to run the job
        // untracked. The supervisor is in the process group `setsid` made, whose id is the
        // first process's: not yet reaped, so no other group has it. A `bwrap` it started has
        // a group of its own, and dies with the supervisor (`--die-with-parent`).
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::KILL,
        );
    }
    // The first process only forks and exits; reap it.
    let _ = child.wait();
    let reply = String::from_utf8_lossy(&reply);
    match reply.trim_end() {
        "ready" => Ok(JobHandle {
            state: read_state(&job_dir)?,
            job_dir,
        }),
        "" => Err(start_err(format!(
            "no answer within {} s: check that `{}` is the supervisor",
            START_TIMEOUT.as_secs(),
            supervisor.program.display()
        ))),
        other => Err(start_err(other.trim_start_matches("error: ").to_owned())),
    }
}

fn absolute_job_dir(job_dir: &Path) -> Result<PathBuf, SandboxError> {
    let name = job_dir
        .file_name()
        .ok_or_else(|| SandboxError::RelativePath {
            path: job_dir.to_owned(),
        })?;
    let parent = match job_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = parent.canonicalize().map_err(SandboxError::io(parent))?;
    Ok(parent.join(name))
}
