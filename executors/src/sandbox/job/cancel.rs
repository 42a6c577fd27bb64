//! `cancel_job`: stop a job's whole sandbox and wait (≤ 2 s) for the supervisor's record.
//!
//! The cancel marker ([`request_cancel`]) tells the supervisor to stop the sandbox and record
//! `cancelled` (it checks every 50 ms): `SIGTERM` to its processes, the kill after the job's
//! grace. A job still in its grace after 1.5 s is returned running; the supervisor ends it.
//! A second cancel, or a supervisor that is gone, kills the sandbox here, through pidfds
//! opened and then identity-checked, so a recycled pid is never signalled.

use std::io;
use std::path::Path;
use std::time::Duration;

use super::state::{CANCEL, JobPhase, JobState, create_new};
use super::status::{job_status, wait_job};
use crate::sandbox::error::SandboxError;

/// Cancels the job in `job_dir`; a finished job is returned unchanged.
pub fn cancel_job(job_dir: &Path) -> Result<JobState, SandboxError> {
    let state = job_status(job_dir)?;
    if state.phase == JobPhase::Finished {
        return Ok(state);
    }
    let state = if request_cancel(job_dir).map_err(SandboxError::io(job_dir))? {
        let state = wait_job(job_dir, Duration::from_millis(1500))?;
        if state.phase == JobPhase::Finished || state.supervisor.is_alive() {
            return Ok(state);
        }
        state
    } else {
        state
    };
    // The namespace init first (that ends every sandbox process), then bwrap.
    for identity in [&state.sandbox_init, &state.sandbox].into_iter().flatten() {
        if let Some(pidfd) = identity.pidfd() {
            pidfd
                .signal(libc::SIGKILL)
                .map_err(SandboxError::io(job_dir))?;
        }
    }
    wait_job(job_dir, Duration::from_millis(500))
}

/// Leaves the cancel marker in `job_dir` (a local job's supervisor acts on it; a batch job's
/// checks it too). True if this is the job's first cancel, false if one came before.
pub fn request_cancel(job_dir: &Path) -> io::Result<bool> {
    match create_new(&job_dir.join(CANCEL)) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}
