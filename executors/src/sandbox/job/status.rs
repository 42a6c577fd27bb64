//! `job_status`, `wait_job` and `attach_job`: read a job's state, verifying that a job
//! recorded as running really still has its supervisor.
//!
//! A job is running only while its supervisor — the process with the recorded pid, start
//! time and boot id — is alive. If it is gone and the state still says running, the job is
//! reported `lost` (the supervisor always writes a final state before it exits), and what
//! may remain of its sandbox is killed by verified identity.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::state::{JobPhase, JobState, read_state};
use crate::sandbox::error::SandboxError;
use crate::sandbox::monitor::EndReason;

/// The state of the job in `job_dir`; `lost` if its supervisor died without recording an end.
pub fn job_status(job_dir: &Path) -> Result<JobState, SandboxError> {
    let state = read_state(job_dir)?;
    if state.phase == JobPhase::Finished || state.supervisor.is_alive() {
        return Ok(state);
    }
    // The supervisor may have written its final state and exited between our two reads.
    let mut state = read_state(job_dir)?;
    if state.phase == JobPhase::Running {
        // Reconcile: a sandbox must never outlive its supervisor. Killed through pidfds whose
        // identity is checked, so a recycled pid is never signalled.
        for identity in [&state.sandbox_init, &state.sandbox].into_iter().flatten() {
            if let Some(pidfd) = identity.pidfd() {
                let _ = pidfd.signal(libc::SIGKILL);
            }
        }
        state.phase = JobPhase::Finished;
        state.reason = Some(EndReason::Lost);
        state.message = Some("the job supervisor ended without recording an end".to_owned());
    }
    Ok(state)
}

/// A pidfd of the supervisor of the job in `job_dir`, for a caller that waits on many jobs
/// with its own `poll` or `epoll` rather than a thread each: it turns readable when the
/// supervisor exits, and [`job_status`] then tells how the job ended. `None` when the job has
/// already ended.
pub fn supervisor_pidfd(job_dir: &Path) -> Result<Option<std::os::fd::OwnedFd>, SandboxError> {
    let state = job_status(job_dir)?;
    if state.phase == JobPhase::Finished {
        return Ok(None);
    }
    Ok(state.supervisor.pidfd().map(|fd| fd.into_fd()))
}

/// The state a batch job's supervisor recorded in `job_dir`, as written: the scheduler, not
/// a process identity, says whether that job still runs.
pub fn batch_state(job_dir: &Path) -> Result<JobState, SandboxError> {
    read_state(job_dir)
}

/// Waits up to `timeout` for the job to finish (no polling: waits on a pidfd of the
/// supervisor), then returns its state.
pub fn wait_job(job_dir: &Path, timeout: Duration) -> Result<JobState, SandboxError> {
    let state = job_status(job_dir)?;
    if state.phase == JobPhase::Finished {
        return Ok(state);
    }
    if let Some(pidfd) = state.supervisor.pidfd() {
        pidfd.wait_exit(timeout);
    }
    job_status(job_dir)
}

/// A job found by its directory, with its state when last read.
#[derive(Debug, Clone)]
pub struct JobHandle {
    pub job_dir: PathBuf,
    pub state: JobState,
}

/// Re-attaches to the job in `job_dir` (e.g. after a gateway restart). The supervisor is
/// recognised by pid + start time + boot id, never by process name.
pub fn attach_job(job_dir: &Path) -> Result<JobHandle, SandboxError> {
    Ok(JobHandle {
        job_dir: job_dir.to_owned(),
        state: job_status(job_dir)?,
    })
}

impl JobHandle {
    /// Re-reads the state.
    pub fn refresh(&mut self) -> Result<&JobState, SandboxError> {
        self.state = job_status(&self.job_dir)?;
        Ok(&self.state)
    }

    /// Waits up to `timeout` for the end, then re-reads the state.
    pub fn wait(&mut self, timeout: Duration) -> Result<&JobState, SandboxError> {
        self.state = wait_job(&self.job_dir, timeout)?;
        Ok(&self.state)
    }
}
