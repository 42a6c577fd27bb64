//! `cancel`: `scancel <id>`; cancelling a job that already ended is not an error.

use std::ffi::OsString;

use serde::{Deserialize, Serialize};

use super::{SlurmError, SlurmRunner};

/// What `scancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// Slurm accepted the request; the job ends as `CANCELLED` (poll [`SlurmRunner::status`]).
    Requested,
    /// The job had already ended (or was ending); nothing changed.
    AlreadyFinished,
}

impl SlurmRunner {
    /// Cancels a job.
    pub fn cancel(&self, job_id: u64) -> Result<CancelOutcome, SlurmError> {
        // Without `-v` scancel says nothing (and exits 0) for finished or unknown jobs; with it,
        // it names the problem on stderr (22.05 still exits 0).
        let output = self.client.run(
            "scancel",
            &[OsString::from("-v"), OsString::from(job_id.to_string())],
        )?;
        if output.stderr.contains("already completing or completed") {
            return Ok(CancelOutcome::AlreadyFinished);
        }
        if output.stderr.contains("Invalid job id") {
            return Err(SlurmError::JobNotFound { job_id });
        }
        if output.success && !output.stderr.contains("error:") {
            return Ok(CancelOutcome::Requested);
        }
        Err(SlurmError::ScancelRejected {
            job_id: job_id.to_string(),
            stderr: output.stderr,
        })
    }
}
