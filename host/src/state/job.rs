//! The job record (`jobs/<job-id>/record.json`) and its parts.
//!
//! A record is created before the executor is asked to start the job (phase `submitting`),
//! so a job can never run untracked: a crash between the two leaves a record the gateway
//! reconciles (no handle → the start never happened or cannot be found). Once a record
//! reaches a final phase it never changes again, and it always has `finished_at` then —
//! cancelled jobs included.

use serde::{Deserialize, Serialize};

use super::id::{InstanceId, JobId, TenantName};
use crate::time::Timestamp;

/// Format version of `record.json`.
pub(crate) const RECORD_VERSION: u32 = 1;

/// Where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobMode {
    /// A supervised bwrap sandbox on this machine.
    Local,
    /// A Slurm batch job.
    Slurm,
}

/// Requested resources, as the policies left them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    pub time_limit_s: Option<u64>,
    pub gpus: Option<u32>,
}

/// How to reach the job in its executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecutorHandle {
    /// The sandbox job directory, at [`super::State::job_dir_ambient`] (not stored: it is
    /// derived from the tenant and job id, so a record cannot point elsewhere).
    Local,
    /// A Slurm job. The Slurm id is internal: tools should not show it.
    Slurm {
        slurm_job_id: u64,
        cluster: Option<String>,
    },
}

/// The lifecycle of a job as the state layer records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    /// Recorded; the executor has not yet confirmed the start.
    Submitting,
    Pending,
    Running,
    /// Exit code 0.
    Completed,
    /// Non-zero exit code, or killed by a signal.
    Failed,
    Cancelled,
    /// Wall time (or a Slurm deadline) ran out.
    Timeout,
    Oom,
    /// Wrote more output than allowed.
    OutputCap,
    Preempted,
    NodeFail,
    /// The executor could not start it.
    StartFailed,
    /// Ended without a recorded outcome (e.g. its supervisor vanished).
    Lost,
    /// The executor cannot find it right now (not final: reconcile again).
    Missing,
    /// A state the executor reported that we do not know (`reason` keeps its words).
    Unknown,
}

impl JobPhase {
    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            JobPhase::Submitting
                | JobPhase::Pending
                | JobPhase::Running
                | JobPhase::Missing
                | JobPhase::Unknown
        )
    }
}

/// The last known state of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    pub phase: JobPhase,
    /// The executor's words: a Slurm reason or state, or why a local job ended.
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// A human-readable note (start failure, lost supervisor).
    pub message: Option<String>,
}

impl JobStatus {
    pub fn new(phase: JobPhase) -> JobStatus {
        JobStatus {
            phase,
            reason: None,
            exit_code: None,
            signal: None,
            message: None,
        }
    }
}

/// One job. Contains no host path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub version: u32,
    pub job_id: JobId,
    pub tenant: TenantName,
    pub instance: InstanceId,
    pub mode: JobMode,
    /// The command as an argv (never a shell string).
    pub command: Vec<String>,
    pub resources: Resources,
    pub submitted_at: Timestamp,
    /// `None` until the executor confirmed the start.
    pub handle: Option<ExecutorHandle>,
    pub status: JobStatus,
    pub started_at: Option<Timestamp>,
    /// Set exactly when the phase is final.
    pub finished_at: Option<Timestamp>,
    /// When the state was last written.
    pub updated_at: Timestamp,
}

impl JobRecord {
    pub fn is_final(&self) -> bool {
        self.status.phase.is_final()
    }
}
