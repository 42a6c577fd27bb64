//! `status`: `squeue` while the job is queued or running, then `scontrol show job`, then
//! `sacct` (when accounting is enabled); found nowhere → [`JobPhase::Lost`].
//!
//! `squeue` answers for live jobs; once a job has left the queue, `scontrol` remembers it for
//! `MinJobAge` seconds and `sacct` for as long as the accounting database keeps it. Absence is
//! never read as success.
//!
//! [`JobPhase::Lost`]: super::JobPhase::Lost

use super::{JobStatus, SlurmError, SlurmRunner, parse};

/// What Slurm's clients print for a job id they do not know (`… specified`) or that is beyond
/// Slurm's id range (`…: <id>`).
const UNKNOWN_JOB: &str = "Invalid job id";

impl SlurmRunner {
    /// The current status of a job.
    pub fn status(&self, job_id: u64) -> Result<JobStatus, SlurmError> {
        let id = job_id.to_string();
        let queue =
            self.query_or_unknown("squeue", &["-h", "-j", &id, "-o", parse::SQUEUE_FORMAT])?;
        if let Some(status) = find(&queue, job_id, parse::squeue_line)? {
            return Ok(status);
        }
        let record = self.query_or_unknown("scontrol", &["-o", "show", "job", &id])?;
        if let Some(status) = find(&record, job_id, parse::scontrol_line)? {
            return Ok(status);
        }
        if self.accounting {
            let history = self.query_or_unknown(
                "sacct",
                &["-n", "-P", "-X", "-j", &id, "-o", parse::SACCT_FIELDS],
            )?;
            if let Some(status) = find(&history, job_id, parse::sacct_line)? {
                return Ok(status);
            }
        }
        Ok(JobStatus::lost(job_id))
    }

    /// Like `query`, but "invalid job id" is an empty answer, not an error.
    fn query_or_unknown(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        match self.query(program, args) {
            Err(SlurmError::QueryFailed { stderr, .. }) if stderr.contains(UNKNOWN_JOB) => {
                Ok(String::new())
            }
            other => other,
        }
    }
}

/// The last line describing `job_id` (sacct may list a job once per requeue).
fn find(
    text: &str,
    job_id: u64,
    parse_line: fn(&str) -> Result<JobStatus, SlurmError>,
) -> Result<Option<JobStatus>, SlurmError> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let status = parse_line(line)?;
        if status.job_id == job_id {
            found = Some(status);
        }
    }
    Ok(found)
}
