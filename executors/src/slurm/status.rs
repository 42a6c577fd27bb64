//! `status`: `squeue` while the job is queued or running, then `scontrol show job`, then
//! `sacct` (when accounting is enabled); found nowhere → [`JobPhase::Lost`].
//!
//! `squeue` answers for live jobs; once a job has left the queue, `scontrol` remembers it for
//! `MinJobAge` seconds and `sacct` for as long as the accounting database keeps it. Absence is
//! never read as success.
//!
//! [`JobPhase::Lost`]: super::JobPhase::Lost

use std::collections::HashMap;

use super::{JobStatus, SlurmError, SlurmRunner, parse};

/// What Slurm's clients print for a job id they do not know (`… specified`) or that is beyond
/// Slurm's id range (`…: <id>`).
const UNKNOWN_JOB: &str = "Invalid job id";

impl SlurmRunner {
    /// The current status of a job.
    pub fn status(&self, job_id: u64) -> Result<JobStatus, SlurmError> {
        let mut statuses = self.statuses(&[job_id])?;
        Ok(statuses.pop().unwrap_or_else(|| JobStatus::lost(job_id)))
    }

    /// The current status of several jobs, in the order asked: one `squeue` call for all of
    /// them, then `scontrol` (and `sacct`) for each job no longer in the queue.
    pub fn statuses(&self, job_ids: &[u64]) -> Result<Vec<JobStatus>, SlurmError> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = job_ids.iter().map(u64::to_string).collect();
        let queue = self.query_or_unknown(
            "squeue",
            &["-h", "-j", &list.join(","), "-o", parse::SQUEUE_FORMAT],
        )?;
        let mut live = HashMap::new();
        for line in queue.lines().filter(|l| !l.trim().is_empty()) {
            let status = parse::squeue_line(line)?;
            live.insert(status.job_id, status);
        }
        job_ids
            .iter()
            .map(|&id| match live.remove(&id) {
                Some(status) => Ok(status),
                None => self.status_after_queue(id),
            })
            .collect()
    }

    /// A job `squeue` no longer lists: `scontrol`, then `sacct`, then lost.
    fn status_after_queue(&self, job_id: u64) -> Result<JobStatus, SlurmError> {
        let id = job_id.to_string();
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

    /// Whether the cluster keeps job history in a database (`AccountingStorageType` other than
    /// `accounting_storage/none`), i.e. whether [`SlurmRunner::accounting`] can be enabled.
    pub fn accounting_available(&self) -> Result<bool, SlurmError> {
        Ok(accounting_in_config(
            &self.query("scontrol", &["show", "config"])?,
        ))
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

/// Reads `AccountingStorageType = …` from `scontrol show config` output.
fn accounting_in_config(config: &str) -> bool {
    config
        .lines()
        .filter_map(|line| line.split_once('='))
        .find(|(key, _)| key.trim() == "AccountingStorageType")
        .is_some_and(|(_, value)| {
            let value = value.trim();
            !value.is_empty() && value != "accounting_storage/none"
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_from_config() {
        let local = "AccountingStorageHost   = localhost\nAccountingStorageType   = accounting_storage/none\n";
        assert!(!accounting_in_config(local));
        assert!(accounting_in_config(
            "AccountingStorageType = accounting_storage/slurmdbd\n"
        ));
        assert!(!accounting_in_config("ClusterName = x\n"));
    }
}
