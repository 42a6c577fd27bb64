//! `spawn_service`: a long-lived sandboxed process that talks over its stdin and stdout (e.g. an
//! MCP server), with the same hardened profile, cgroup or rlimits as every other sandbox.
//!
//! What differs from [`super::run_sync`]: nobody waits for the process to end, so the caller
//! owns the pipes and the [`Service`] handle, and ends it with [`Service::kill`] (also on drop).
//! The wall time does not apply (a service lives until its owner stops it); memory, pids and
//! CPUs do (cgroup v2, cgroup v1 per controller, or the rlimits of [`super::limits`] — without
//! a memory cgroup there is no resident-memory watchdog, only `RLIMIT_AS`). Everything the service writes to stderr is the
//! caller's to drain: an undrained stderr pipe blocks the service once full.
//!
//! Like every sandbox, the process gets `PR_SET_PDEATHSIG` for the *thread* that spawns it:
//! call this from a thread that lives as long as the service, never from a pooled thread that
//! may exit while the service runs (the service would be killed with it).

use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Stdio};

use super::cgroup::JobCgroup;
use super::error::SandboxError;
use super::limits::EnforcedLimits;
use super::monitor::ExitInfo;
use super::proc::PidFd;
use super::spawn::{Containment, prepare, sandbox_init};
use super::spec::SandboxSpec;

/// A running sandboxed service. Dropping it kills the whole sandbox.
#[derive(Debug)]
pub struct Service {
    child: Child,
    init: Option<PidFd>,
    cgroup: Option<JobCgroup>,
    /// What enforced each limit.
    pub limits: EnforcedLimits,
}

/// The pipes of a service: write requests to `stdin`, read replies from `stdout`, drain `stderr`.
#[derive(Debug)]
pub struct ServicePipes {
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Starts `command` in a sandbox built from `spec` with piped stdin, stdout and stderr.
/// `name` labels its cgroup (unique per gateway process).
pub fn spawn_service(
    spec: &SandboxSpec,
    command: &[String],
    name: &str,
) -> Result<(Service, ServicePipes), SandboxError> {
    let mut prepared = prepare(spec, command, Stdio::piped(), name, Containment::Own)?;
    let mut child = prepared.spawn().map_err(SandboxError::Spawn)?;
    let init = sandbox_init(&mut prepared.info, child.id() as i32).map(|(fd, _)| fd);
    let pipes = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(stdin), Some(stdout), Some(stderr)) => ServicePipes {
            stdin,
            stdout,
            stderr,
        },
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SandboxError::Spawn(std::io::Error::other(
                "the sandbox's pipes were not created",
            )));
        }
    };
    let service = Service {
        child,
        init,
        cgroup: prepared.cgroup.take(),
        limits: prepared.plan.enforced.clone(),
    };
    Ok((service, pipes))
}

impl Service {
    /// bwrap's pid (the process group leader of the sandbox).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// How the service ended, if it has.
    pub fn try_exit(&mut self) -> Option<ExitInfo> {
        self.child.try_wait().ok().flatten().map(ExitInfo::from)
    }

    /// Kills the whole sandbox (cgroup, namespace init, bwrap), reaps bwrap and removes the
    /// cgroup. Returns how it ended; idempotent.
    pub fn kill(&mut self) -> Option<ExitInfo> {
        if let Some(exit) = self.try_exit() {
            self.cleanup();
            return Some(exit);
        }
        if let Some(cg) = &self.cgroup {
            cg.kill();
        }
        if let Some(init) = &self.init {
            let _ = init.signal(libc::SIGKILL);
        }
        let _ = self.child.kill();
        let exit = self.child.wait().ok().map(ExitInfo::from);
        self.cleanup();
        exit
    }

    fn cleanup(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            cg.kill();
            cg.remove();
        }
        self.init = None;
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}
