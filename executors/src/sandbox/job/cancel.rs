//! `cancel_job`: stop a job's whole sandbox and wait (≤ 2 s) for the supervisor's record.
//!
//! The cancel marker tells the supervisor to stop the sandbox and record `cancelled` (it
//! checks every 50 ms): `SIGTERM` to its processes, the kill after the job's grace. A job still
//! in its grace after 1.5 s is returned running; the supervisor ends it. Only if the
//! supervisor is gone do we kill the sandbox ourselves, through pidfds opened and then
//! identity-checked, so a recycled pid is never signalled.

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
    let marker = job_dir.join(CANCEL);
    match create_new(&marker) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(SandboxError::Io {
                path: marker,
                source: e,
            });
        }
    }
    let state = wait_job(job_dir, Duration::from_millis(1500))?;
    if state.phase == JobPhase::Finished || state.supervisor.is_alive() {
        return Ok(state);
    }
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
