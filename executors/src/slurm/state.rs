//! The lossless job state model: Slurm's own words are kept, and mapped onto a small set of
//! phases the gateway reasons about.
//!
//! OUT_OF_MEMORY, TIMEOUT, PREEMPTED, NODE_FAIL, BOOT_FAIL and DEADLINE are final phases with
//! a reason, never "still running". A state string this code does not know is kept as
//! [`JobPhase::Unknown`] instead of failing. A job found nowhere is [`JobPhase::Lost`], never
//! "completed by absence".

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A Slurm job id as printed by `sbatch --parsable` (`id` or `id;cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlurmJobId {
    /// The numeric id: a number, so it can never carry shell or option syntax.
    pub id: u64,
    /// The cluster name when Slurm is federated or multi-cluster.
    pub cluster: Option<String>,
}

impl fmt::Display for SlurmJobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.id)
    }
}

/// What the gateway needs to know about a job: is it waiting, running, or how did it end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    Oom,
    Preempted,
    NodeFail,
    /// Found in no source (`squeue`, `scontrol`, `sacct`): unknown until reconciled.
    Lost,
    /// A Slurm state this code does not know, kept verbatim.
    Unknown(String),
}

impl JobPhase {
    /// Maps a Slurm job state (long form, e.g. `OUT_OF_MEMORY`, or `CANCELLED by 0`).
    pub fn from_slurm(state: &str) -> JobPhase {
        match base_state(state) {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD"
            | "POWER_UP_NODE" => JobPhase::Pending,
            "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING"
            | "STAGE_OUT" | "RESIZING" | "UPDATE_DB" => JobPhase::Running,
            "COMPLETED" => JobPhase::Completed,
            "FAILED" | "SPECIAL_EXIT" | "LAUNCH_FAILED" | "RECONFIG_FAIL" => JobPhase::Failed,
            "CANCELLED" | "REVOKED" => JobPhase::Cancelled,
            // A deadline is a time limit the scheduler could not meet.
            "TIMEOUT" | "DEADLINE" => JobPhase::Timeout,
            "OUT_OF_MEMORY" => JobPhase::Oom,
            "PREEMPTED" => JobPhase::Preempted,
            "NODE_FAIL" | "BOOT_FAIL" => JobPhase::NodeFail,
            other => JobPhase::Unknown(other.to_owned()),
        }
    }

    /// Whether the job has ended; `Lost` and `Unknown` are not final: poll or reconcile again.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            JobPhase::Pending | JobPhase::Running | JobPhase::Lost | JobPhase::Unknown(_)
        )
    }
}

/// `CANCELLED by 0` → `CANCELLED`; `PENDING+` style suffixes are not used by long forms.
pub fn base_state(state: &str) -> &str {
    state.split_whitespace().next().unwrap_or("")
}

/// Where a [`JobStatus`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusSource {
    Squeue,
    Scontrol,
    Sacct,
    /// No source knew the job.
    Nowhere,
}

/// One observation of a job, with Slurm's own words kept beside the mapped phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    pub job_id: u64,
    pub phase: JobPhase,
    /// Slurm's state string as printed (e.g. `CANCELLED by 0`); `None` when lost.
    pub slurm_state: Option<String>,
    /// Slurm's reason (`Resources`, `TimeLimit`, `NonZeroExitCode`, …) when one is given.
    pub reason: Option<String>,
    /// The batch script's exit code, once known.
    pub exit_code: Option<i32>,
    /// The signal that ended the batch script, if any.
    pub signal: Option<i32>,
    pub source: StatusSource,
}

impl JobStatus {
    /// A status from a state string, reason and `exit:signal` pair as Slurm prints them.
    pub fn from_slurm(
        job_id: u64,
        state: &str,
        reason: Option<&str>,
        exit: Option<&str>,
        source: StatusSource,
    ) -> JobStatus {
        let (exit_code, signal) = exit.map(parse_exit).unwrap_or((None, None));
        let reason = reason
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != "None" && *r != "(null)")
            .map(str::to_owned);
        JobStatus {
            job_id,
            phase: JobPhase::from_slurm(state),
            slurm_state: Some(state.trim().to_owned()),
            reason,
            exit_code,
            signal,
            source,
        }
    }

    /// The job was not found in any source.
    pub fn lost(job_id: u64) -> JobStatus {
        JobStatus {
            job_id,
            phase: JobPhase::Lost,
            slurm_state: None,
            reason: Some("not found in squeue, scontrol or sacct".to_owned()),
            exit_code: None,
            signal: None,
            source: StatusSource::Nowhere,
        }
    }

    /// Slurm lists the id only under another job's name: it has given the id to another job.
    pub fn lost_to_another(job_id: u64) -> JobStatus {
        JobStatus {
            reason: Some(
                "Slurm has given this job's id to another job, and keeps no record of this one"
                    .to_owned(),
            ),
            ..JobStatus::lost(job_id)
        }
    }
}

/// `3:0` → (Some(3), None); `0:9` → (Some(0), Some(9)); garbage → (None, None).
pub fn parse_exit(text: &str) -> (Option<i32>, Option<i32>) {
    let mut parts = text.trim().splitn(2, ':');
    let code = parts.next().and_then(|c| i32::from_str(c).ok());
    let signal = parts
        .next()
        .and_then(|s| i32::from_str(s).ok())
        .filter(|&s| s != 0);
    (code, signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_documented_state() {
        let table = [
            ("PENDING", JobPhase::Pending),
            ("REQUEUED", JobPhase::Pending),
            ("RUNNING", JobPhase::Running),
            ("COMPLETING", JobPhase::Running),
            ("SUSPENDED", JobPhase::Running),
            ("COMPLETED", JobPhase::Completed),
            ("FAILED", JobPhase::Failed),
            ("CANCELLED by 0", JobPhase::Cancelled),
            ("TIMEOUT", JobPhase::Timeout),
            ("DEADLINE", JobPhase::Timeout),
            ("OUT_OF_MEMORY", JobPhase::Oom),
            ("PREEMPTED", JobPhase::Preempted),
            ("NODE_FAIL", JobPhase::NodeFail),
            ("BOOT_FAIL", JobPhase::NodeFail),
            ("", JobPhase::Unknown(String::new())),
            ("WIBBLE", JobPhase::Unknown("WIBBLE".to_owned())),
        ];
        for (state, phase) in table {
            assert_eq!(JobPhase::from_slurm(state), phase, "{state:?}");
        }
    }

    #[test]
    fn abnormal_ends_are_final() {
        for state in [
            "OUT_OF_MEMORY",
            "TIMEOUT",
            "PREEMPTED",
            "NODE_FAIL",
            "BOOT_FAIL",
            "DEADLINE",
        ] {
            assert!(JobPhase::from_slurm(state).is_final(), "{state}");
        }
        assert!(!JobPhase::Lost.is_final());
        assert!(!JobPhase::Unknown("X".into()).is_final());
    }

    #[test]
    fn exit_codes_keep_the_signal() {
        assert_eq!(parse_exit("3:0"), (Some(3), None));
        assert_eq!(parse_exit("0:15"), (Some(0), Some(15)));
        assert_eq!(parse_exit("x"), (None, None));
    }
}
