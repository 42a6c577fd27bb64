//! `cancel`: `scancel --name=<name> <id>`; cancelling a job that already ended is not an error.
//!
//! The name is the job's own (`--job-name` at submission): Slurm cancels the id only if the job
//! under it has that name, atomically. Every tenant's jobs run as the gateway's user, so a bare
//! id that Slurm had given to another job since (its ids wrap, or a reset controller starts
//! again) would otherwise cancel that job.

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
    /// Cancels job `job_id` if it is the one named `name` (see the module doc).
    pub fn cancel(&self, job_id: u64, name: &str) -> Result<CancelOutcome, SlurmError> {
        self.scancel(job_id, name, &[])
    }

    /// Asks the supervisor of running job `job_id` (if it is the one named `name`) to stop its
    /// sandbox with the sandbox's grace, as a local job's cancel does: `scancel --batch
    /// --signal=USR1`, which reaches the batch step's own process (the supervisor) alone. The
    /// job then ends by itself, its record saying `cancelled`; a pending job is not running
    /// one, so cancel that with [`SlurmRunner::cancel`].
    pub fn ask_to_stop(&self, job_id: u64, name: &str) -> Result<CancelOutcome, SlurmError> {
        let signal = format!("--signal={}", crate::sandbox::CANCEL_SIGNAL_NAME);
        self.scancel(
            job_id,
            name,
            &[OsString::from("--batch"), OsString::from(signal)],
        )
    }

    fn scancel(
        &self,
        job_id: u64,
        name: &str,
        options: &[OsString],
    ) -> Result<CancelOutcome, SlurmError> {
        super::validate::name("job_name", name)?;
        // Without `-v` scancel says nothing (and exits 0) for finished or unknown jobs; with it,
        // it names the problem on stderr (22.05 still exits 0).
        let mut args = vec![OsString::from("-v")];
        args.extend_from_slice(options);
        args.extend([
            OsString::from(format!("--name={name}")),
            OsString::from(job_id.to_string()),
        ]);
        let output = self.client.run("scancel", &args)?;
        // No active job has this id and name: ours ended (or Slurm never had it, or the id is
        // another job's now).
        if output.stderr.contains("already completing or completed")
            || output.stderr.contains("No active jobs match")
        {
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
