//! Parsers for the job queries' text output, tested against outputs recorded on a real cluster
//! (`fixtures/`).
//!
//! - `squeue -h -j <id> -o %i|%T|%r|%j`: `id|STATE|reason|name`, one line per job.
//! - `scontrol -o show job <id>`: one line of `Key=value` pairs; values may contain spaces
//!   (e.g. `JobName`), so a word without `Key=` belongs to the previous value.
//! - `sacct -n -P -X -j <id> -o JobIDRaw,State,ExitCode,Reason,JobName`: `|`-separated, one
//!   line per job.
//!
//! Each parser returns the job's name beside its status: a Slurm id names one job only until
//! Slurm gives it to another (its ids wrap, a reset controller starts again), so the caller
//! takes a line as its job's only when the name matches too. The name comes last in the two
//! `|`-separated formats: it is the one field another user's job can fill with `|`.

use std::collections::HashMap;

use super::SlurmError;
use super::state::{JobStatus, StatusSource};

/// The `squeue -o` format [`squeue_line`] reads.
pub const SQUEUE_FORMAT: &str = "%i|%T|%r|%j";

/// The `sacct -o` fields [`sacct_line`] reads.
pub const SACCT_FIELDS: &str = "JobIDRaw,State,ExitCode,Reason,JobName";

/// One job as a query listed it: its status and the name it runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub status: JobStatus,
    pub name: String,
}

/// Parses one `squeue` line in [`SQUEUE_FORMAT`].
pub fn squeue_line(line: &str) -> Result<Listed, SlurmError> {
    let fields: Vec<&str> = line.trim().splitn(4, '|').collect();
    let [id, state, reason, name] = fields[..] else {
        return Err(unparsable(
            "squeue",
            line,
            "expected `id|state|reason|name`",
        ));
    };
    let id = job_number(id).ok_or_else(|| unparsable("squeue", line, "bad job id"))?;
    Ok(Listed {
        status: JobStatus::from_slurm(id, state, Some(reason), None, StatusSource::Squeue),
        name: name.to_owned(),
    })
}

/// Parses the single line of `scontrol -o show job <id>`.
pub fn scontrol_line(line: &str) -> Result<Listed, SlurmError> {
    let pairs = key_values(line);
    let id = pairs
        .get("JobId")
        .and_then(|id| job_number(id))
        .ok_or_else(|| unparsable("scontrol", line, "no `JobId=`"))?;
    let state = pairs
        .get("JobState")
        .ok_or_else(|| unparsable("scontrol", line, "no `JobState=`"))?;
    let status = JobStatus::from_slurm(
        id,
        state,
        pairs.get("Reason").map(String::as_str),
        pairs.get("ExitCode").map(String::as_str),
        StatusSource::Scontrol,
    );
    let name = pairs.get("JobName").cloned().unwrap_or_default();
    Ok(Listed { status, name })
}

/// Parses one `sacct -P` line with [`SACCT_FIELDS`].
pub fn sacct_line(line: &str) -> Result<Listed, SlurmError> {
    let fields: Vec<&str> = line.trim().splitn(5, '|').collect();
    let [id, state, exit, reason, name] = fields[..] else {
        return Err(unparsable(
            "sacct",
            line,
            "expected `id|state|exit|reason|name`",
        ));
    };
    let id = job_number(id).ok_or_else(|| unparsable("sacct", line, "bad job id"))?;
    Ok(Listed {
        status: JobStatus::from_slurm(id, state, Some(reason), Some(exit), StatusSource::Sacct),
        name: name.to_owned(),
    })
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
        scontrol_line(fixture.lines().next().unwrap())
            .unwrap()
            .status
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
        assert_eq!(status.name, "x y");
        let status = status.status;
        assert_eq!(status.phase, JobPhase::Oom);
        assert_eq!(status.signal, Some(125));
        assert!(scontrol_line("garbage").is_err());
    }

    #[test]
    fn squeue_fixtures_from_a_real_cluster() {
        let listed: Vec<Listed> = include_str!("fixtures/squeue_running_pending.txt")
            .lines()
            .map(|l| squeue_line(l).unwrap())
            .collect();
        let summary: Vec<(u64, JobPhase, Option<&str>, &str)> = listed
            .iter()
            .map(|l| {
                let s = &l.status;
                (s.job_id, s.phase.clone(), s.reason.as_deref(), &*l.name)
            })
            .collect();
        assert_eq!(
            summary,
            [
                (7, JobPhase::Pending, Some("Resources"), "s.sh"),
                (6, JobPhase::Pending, Some("JobHeldUser"), "s.sh"),
                (5, JobPhase::Running, None, "s.sh"),
            ]
        );
        assert!(squeue_line("12|RUNNING|None").is_err(), "no name");
        assert_eq!(
            squeue_line("9|SOMETHING_NEW|x|n").unwrap().status.phase,
            JobPhase::Unknown("SOMETHING_NEW".into())
        );
        // Another user's job can put `|` in its name: it stays in the name.
        let odd = squeue_line("9|RUNNING|None|a|b").unwrap();
        assert_eq!(
            (odd.name.as_str(), odd.status.phase),
            ("a|b", JobPhase::Running)
        );
    }

    // sacct needs an accounting database, which the local cluster does not run: these lines
    // follow sacct's documented `-P` format rather than a recording.
    #[test]
    fn sacct_lines() {
        let table = [
            (
                "41|COMPLETED|0:0|None|j",
                JobPhase::Completed,
                Some(0),
                None,
            ),
            (
                "42|OUT_OF_MEMORY|0:125|OutOfMemory|j",
                JobPhase::Oom,
                Some(0),
                Some(125),
            ),
            (
                "43|CANCELLED by 1000|0:15|None|j",
                JobPhase::Cancelled,
                Some(0),
                Some(15),
            ),
            (
                "44|NODE_FAIL|1:0|NodeDown|j",
                JobPhase::NodeFail,
                Some(1),
                None,
            ),
            (
                "45|PREEMPTED|0:0|None|j",
                JobPhase::Preempted,
                Some(0),
                None,
            ),
        ];
        for (line, phase, exit, signal) in table {
            let listed = sacct_line(line).unwrap();
            assert_eq!(listed.name, "j");
            let status = listed.status;
            assert_eq!(
                (status.phase, status.exit_code, status.signal),
                (phase, exit, signal),
                "{line}"
            );
        }
        assert_eq!(
            sacct_line("43|CANCELLED by 1000|0:15|None|j")
                .unwrap()
                .status
                .slurm_state
                .as_deref(),
            Some("CANCELLED by 1000")
        );
    }
}
