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
    /// The current status of the job `job_id` submitted as `name` (its `--job-name`).
    pub fn status(&self, job_id: u64, name: &str) -> Result<JobStatus, SlurmError> {
        let mut statuses = self.statuses(&[(job_id, name)])?;
        Ok(statuses.pop().unwrap_or_else(|| JobStatus::lost(job_id)))
    }

    /// The current status of several jobs, each an id and the name it was submitted as, in the
    /// order asked: one `squeue` call for all of them, then `scontrol` (and `sacct`) for each
    /// job no longer in the queue.
    ///
    /// A line is a job's only when its name matches too. Every tenant's jobs run as the
    /// gateway's user, and an id Slurm has given to another job since (its ids wrap, a reset
    /// controller starts again) would otherwise report that job's state as this one's: a job
    /// under its id but another name is [`JobPhase::Lost`](super::JobPhase::Lost), saying so.
    pub fn statuses(&self, jobs: &[(u64, &str)]) -> Result<Vec<JobStatus>, SlurmError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = jobs.iter().map(|(id, _)| id.to_string()).collect();
        let queue = self.query_or_unknown(
            "squeue",
            &["-h", "-j", &list.join(","), "-o", parse::SQUEUE_FORMAT],
        )?;
        let mut live = HashMap::new();
        for line in queue.lines().filter(|l| !l.trim().is_empty()) {
            let listed = parse::squeue_line(line)?;
            live.insert(listed.status.job_id, listed);
        }
        jobs.iter()
            .map(|&(id, name)| {
                let mut seen = Seen::default();
                if let Some(status) = live.remove(&id).and_then(|l| seen.take(l, id, name)) {
                    return Ok(status);
                }
                self.status_after_queue(id, name, seen)
            })
            .collect()
    }

    /// A job `squeue` no longer lists under its name: `scontrol`, then `sacct`, then lost.
    fn status_after_queue(
        &self,
        job_id: u64,
        name: &str,
        mut seen: Seen,
    ) -> Result<JobStatus, SlurmError> {
        let id = job_id.to_string();
        let record = self.query_or_unknown("scontrol", &["-o", "show", "job", &id])?;
        if let Some(status) = seen.find(&record, job_id, name, parse::scontrol_line)? {
            return Ok(status);
        }
        if self.accounting {
            let history = self.query_or_unknown(
                "sacct",
                &["-n", "-P", "-X", "-j", &id, "-o", parse::SACCT_FIELDS],
            )?;
            if let Some(status) = seen.find(&history, job_id, name, parse::sacct_line)? {
                return Ok(status);
            }
        }
        Ok(if seen.other {
            JobStatus::lost_to_another(job_id)
        } else {
            JobStatus::lost(job_id)
        })
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

/// Whether a query listed the id under another name: the id is another job's now.
#[derive(Debug, Default)]
struct Seen {
    other: bool,
}

impl Seen {
    /// `listed`'s status if it is the job `job_id` named `name`.
    fn take(&mut self, listed: parse::Listed, job_id: u64, name: &str) -> Option<JobStatus> {
        if listed.status.job_id != job_id {
            return None;
        }
        if listed.name != name {
            self.other = true;
            return None;
        }
        Some(listed.status)
    }

    /// The last line describing the job `job_id` named `name` (sacct may list a job once per
    /// requeue, and keeps an earlier job that had the id).
    fn find(
        &mut self,
        text: &str,
        job_id: u64,
        name: &str,
        parse_line: fn(&str) -> Result<parse::Listed, SlurmError>,
    ) -> Result<Option<JobStatus>, SlurmError> {
        let mut found = None;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(status) = self.take(parse_line(line)?, job_id, name) {
                found = Some(status);
            }
        }
        Ok(found)
    }
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

    /// `sacct` keeps every job that had an id: the one with this job's name is this job's.
    #[test]
    fn history_is_matched_by_name_too() {
        let history = "41|COMPLETED|0:0|None|hpcgate-a\n41|RUNNING|0:0|None|someone\n";
        let mut seen = Seen::default();
        let found = seen
            .find(history, 41, "hpcgate-a", parse::sacct_line)
            .unwrap();
        assert_eq!(found.unwrap().phase, super::super::JobPhase::Completed);
        let mut seen = Seen::default();
        let found = seen
            .find(history, 41, "hpcgate-b", parse::sacct_line)
            .unwrap();
        assert!(found.is_none() && seen.other);
    }

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
