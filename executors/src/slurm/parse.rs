//! Parsers for the job queries' text output, tested against outputs recorded on a real cluster
//! (`fixtures/`).
//!
//! - `squeue -h -j <id> -o %i|%T|%r`: `id|STATE|reason`, one line per job.
//! - `scontrol -o show job <id>`: one line of `Key=value` pairs; values may contain spaces
//!   (e.g. `JobName`), so a word without `Key=` belongs to the previous value.
//! - `sacct -n -P -X -j <id> -o JobIDRaw,State,ExitCode,Reason`: `|`-separated, one line per job.

use std::collections::HashMap;

use super::SlurmError;
use super::state::{JobStatus, StatusSource};

/// The `squeue -o` format [`squeue_line`] reads.
pub const SQUEUE_FORMAT: &str = "%i|%T|%r";

/// The `sacct -o` fields [`sacct_line`] reads.
pub const SACCT_FIELDS: &str = "JobIDRaw,State,ExitCode,Reason";

/// Parses one `squeue` line in [`SQUEUE_FORMAT`].
pub fn squeue_line(line: &str) -> Result<JobStatus, SlurmError> {
    let fields: Vec<&str> = line.trim().splitn(3, '|').collect();
    let [id, state, reason] = fields[..] else {
        return Err(unparsable("squeue", line, "expected `id|state|reason`"));
    };
    let id = job_number(id).ok_or_else(|| unparsable("squeue", line, "bad job id"))?;
    Ok(JobStatus::from_slurm(
        id,
        state,
        Some(reason),
        None,
        StatusSource::Squeue,
    ))
}

/// Parses the single line of `scontrol -o show job <id>`.
pub fn scontrol_line(line: &str) -> Result<JobStatus, SlurmError> {
    let pairs = key_values(line);
    let id = pairs
        .get("JobId")
        .and_then(|id| job_number(id))
        .ok_or_else(|| unparsable("scontrol", line, "no `JobId=`"))?;
    let state = pairs
        .get("JobState")
        .ok_or_else(|| unparsable("scontrol", line, "no `JobState=`"))?;
    Ok(JobStatus::from_slurm(
        id,
        state,
        pairs.get("Reason").map(String::as_str),
        pairs.get("ExitCode").map(String::as_str),
        StatusSource::Scontrol,
    ))
}

/// Parses one `sacct -P` line with [`SACCT_FIELDS`].
pub fn sacct_line(line: &str) -> Result<JobStatus, SlurmError> {
    let fields: Vec<&str> = line.trim().splitn(4, '|').collect();
    let [id, state, exit, reason] = fields[..] else {
        return Err(unparsable("sacct", line, "expected `id|state|exit|reason`"));
    };
    let id = job_number(id).ok_or_else(|| unparsable("sacct", line, "bad job id"))?;
    Ok(JobStatus::from_slurm(
        id,
        state,
        Some(reason),
        Some(exit),
        StatusSource::Sacct,
    ))
}

/// `Key=value Key2=a b` → {Key: value, Key2: "a b"}; the first occurrence of a key wins.
pub fn key_values(line: &str) -> HashMap<&str, String> {
    let mut pairs: HashMap<&str, String> = HashMap::new();
    let mut current: Option<&str> = None;
    for word in line.split_whitespace() {
        match word.split_once('=') {
            Some((key, value)) if is_key(key) => {
                if pairs.contains_key(key) {
                    current = None;
                } else {
                    pairs.insert(key, value.to_owned());
                    current = Some(key);
                }
            }
            _ => {
                if let Some(value) = current.and_then(|key| pairs.get_mut(key)) {
                    value.push(' ');
                    value.push_str(word);
                }
            }
        }
    }
    pairs
}

fn is_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_uppercase())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | ':' | '_'))
}

/// `123` → 123; array or het-job ids (`123_4`, `123+0`) are not ours and are refused.
fn job_number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

fn unparsable(program: &'static str, line: &str, problem: &'static str) -> SlurmError {
    SlurmError::UnparsableOutput {
        program,
        line: line.chars().take(200).collect(),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::JobPhase;
    use super::*;

    fn scontrol(fixture: &str) -> JobStatus {
        scontrol_line(fixture.lines().next().unwrap()).unwrap()
    }

    #[test]
    fn scontrol_fixtures_from_a_real_cluster() {
        let table = [
            (
                include_str!("fixtures/scontrol_completed.txt"),
                JobPhase::Completed,
                None,
                Some(0),
                None,
            ),
            (
                include_str!("fixtures/scontrol_exit3.txt"),
                JobPhase::Failed,
                Some("NonZeroExitCode"),
                Some(3),
                None,
            ),
            (
                include_str!("fixtures/scontrol_timeout.txt"),
                JobPhase::Timeout,
                Some("TimeLimit"),
                Some(0),
                Some(15),
            ),
            (
                include_str!("fixtures/scontrol_cancelled.txt"),
                JobPhase::Cancelled,
                Some("Resources"),
                Some(0),
                None,
            ),
            (
                include_str!("fixtures/scontrol_running.txt"),
                JobPhase::Running,
                None,
                Some(0),
                None,
            ),
            (
                include_str!("fixtures/scontrol_pending_held.txt"),
                JobPhase::Pending,
                Some("JobHeldUser"),
                Some(0),
                None,
            ),
            // With task/cgroup: a kernel OOM kill; 125 is Slurm's SIG_OOM marker.
            (
                include_str!("fixtures/scontrol_oom.txt"),
                JobPhase::Oom,
                Some("OutOfMemory"),
                Some(0),
                Some(125),
            ),
            // Without cgroups, Slurm 22.05 ends a job killed for memory as FAILED, signal 9.
            (
                include_str!("fixtures/scontrol_memkill_failed.txt"),
                JobPhase::Failed,
                Some("JobLaunchFailure"),
                Some(0),
                Some(9),
            ),
        ];
        for (fixture, phase, reason, exit, signal) in table {
            let status = scontrol(fixture);
            assert_eq!(status.phase, phase, "{fixture}");
            assert_eq!(status.reason.as_deref(), reason, "{fixture}");
            assert_eq!(
                (status.exit_code, status.signal),
                (exit, signal),
                "{fixture}"
            );
            assert_eq!(status.source, StatusSource::Scontrol);
        }
    }

    #[test]
    fn scontrol_values_with_spaces_stay_whole() {
        let pairs = key_values(
            "JobId=7 JobName=a b c UserId=root(0) JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125",
        );
        assert_eq!(pairs["JobName"], "a b c");
        let status = scontrol_line(
            "JobId=7 JobName=x y JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125",
        )
        .unwrap();
        assert_eq!(status.phase, JobPhase::Oom);
        assert_eq!(status.signal, Some(125));
        assert!(scontrol_line("garbage").is_err());
    }

    #[test]
    fn squeue_fixtures_from_a_real_cluster() {
        let statuses: Vec<JobStatus> = include_str!("fixtures/squeue_running_pending.txt")
            .lines()
            .map(|l| squeue_line(l).unwrap())
            .collect();
        let summary: Vec<(u64, JobPhase, Option<&str>)> = statuses
            .iter()
            .map(|s| (s.job_id, s.phase.clone(), s.reason.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (7, JobPhase::Pending, Some("Resources")),
                (6, JobPhase::Pending, Some("JobHeldUser")),
                (5, JobPhase::Running, None),
            ]
        );
        assert!(squeue_line("12|RUNNING").is_err());
        assert_eq!(
            squeue_line("9|SOMETHING_NEW|x").unwrap().phase,
            JobPhase::Unknown("SOMETHING_NEW".into())
        );
    }

    // sacct needs an accounting database, which the local cluster does not run: these lines
    // follow sacct's documented `-P` format rather than a recording.
    #[test]
    fn sacct_lines() {
        let table = [
            ("41|COMPLETED|0:0|None", JobPhase::Completed, Some(0), None),
            (
                "42|OUT_OF_MEMORY|0:125|OutOfMemory",
                JobPhase::Oom,
                Some(0),
                Some(125),
            ),
            (
                "43|CANCELLED by 1000|0:15|None",
                JobPhase::Cancelled,
                Some(0),
                Some(15),
            ),
            (
                "44|NODE_FAIL|1:0|NodeDown",
                JobPhase::NodeFail,
                Some(1),
                None,
            ),
            ("45|PREEMPTED|0:0|None", JobPhase::Preempted, Some(0), None),
        ];
        for (line, phase, exit, signal) in table {
            let status = sacct_line(line).unwrap();
            assert_eq!(
                (status.phase, status.exit_code, status.signal),
                (phase, exit, signal),
                "{line}"
            );
        }
        assert_eq!(
            sacct_line("43|CANCELLED by 1000|0:15|None")
                .unwrap()
                .slurm_state
                .as_deref(),
            Some("CANCELLED by 1000")
        );
    }
}
