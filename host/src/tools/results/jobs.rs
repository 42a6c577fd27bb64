//! The results of the job tools.

use schemars::JsonSchema;
use serde::Serialize;

use super::DateTime;
use crate::state::{InstanceId, JobId, JobMode, JobPhase, JobRecord, Resources};
use crate::time::Timestamp;

// submit_job, run_python, poll_job, cancel_job.
/// One job, with the last lines of its output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobResult {
    pub job: Job,
}

// list_jobs.
/// One page of jobs, newest first (without their output).
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
    /// How many the whole listing has.
    pub total: usize,
    /// Where this page starts in it.
    pub offset: usize,
}

/// A job as agents see it: no host paths, no Slurm id.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Job {
    #[schemars(with = "String")]
    pub job_id: JobId,
    #[schemars(with = "String")]
    pub instance_id: InstanceId,
    pub mode: Mode,
    pub status: Status,
    /// Whether the job has ended for good: its status no longer changes.
    #[serde(rename = "final")]
    pub is_final: bool,
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The executor's words: a Slurm reason or state, or why a local job ended.
    pub reason: Option<String>,
    /// A note for people (a start failure, a lost supervisor).
    pub message: Option<String>,
    /// The command as an argv (a shell command line is `/bin/sh -c LINE`).
    pub command: Vec<String>,
    /// The resources requested, as the policies left them.
    pub resources: JobResources,
    #[schemars(with = "DateTime")]
    pub submitted_at: Timestamp,
    #[schemars(with = "Option<DateTime>")]
    pub started_at: Option<Timestamp>,
    #[schemars(with = "Option<DateTime>")]
    pub finished_at: Option<Timestamp>,
    /// Seconds from start to end (to now while it runs).
    pub duration_s: Option<f64>,
    /// The last lines of stdout (not in a listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub stdout_tail: Option<String>,
    /// The last lines of stderr (not in a listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub stderr_tail: Option<String>,
    /// Present (true) when the job still ran at the end of the wait and `detach` was false,
    /// so it was cancelled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cancelled_at_end_of_wait: bool,
}

impl Job {
    /// The job of `record`, without output tails.
    pub fn new(record: &JobRecord) -> Job {
        let duration_s = record.started_at.map(|started| {
            let end = record.finished_at.unwrap_or_else(Timestamp::now);
            (started.until(end).as_secs_f64() * 100.0).round() / 100.0
        });
        Job {
            job_id: record.job_id.clone(),
            instance_id: record.instance.clone(),
            mode: record.mode.into(),
            status: record.status.phase.into(),
            is_final: record.is_final(),
            exit_code: record.status.exit_code,
            signal: record.status.signal,
            reason: record.status.reason.clone(),
            message: record.status.message.clone(),
            command: record.command.clone(),
            resources: record.resources.clone().into(),
            submitted_at: record.submitted_at,
            started_at: record.started_at,
            finished_at: record.finished_at,
            duration_s,
            stdout_tail: None,
            stderr_tail: None,
            cancelled_at_end_of_wait: false,
        }
    }
}

/// Where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Local,
    Slurm,
}

impl From<JobMode> for Mode {
    fn from(mode: JobMode) -> Mode {
        match mode {
            JobMode::Local => Mode::Local,
            JobMode::Slurm => Mode::Slurm,
        }
    }
}

/// A job's state: `submitting`, `pending`, `running`, `missing` (not seen by its executor right
/// now) and `unknown` are not final; the others are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Submitting,
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    Oom,
    OutputCap,
    Preempted,
    NodeFail,
    StartFailed,
    Lost,
    Missing,
    Unknown,
}

impl From<JobPhase> for Status {
    fn from(phase: JobPhase) -> Status {
        match phase {
            JobPhase::Submitting => Status::Submitting,
            JobPhase::Pending => Status::Pending,
            JobPhase::Running => Status::Running,
            JobPhase::Completed => Status::Completed,
            JobPhase::Failed => Status::Failed,
            JobPhase::Cancelled => Status::Cancelled,
            JobPhase::Timeout => Status::Timeout,
            JobPhase::Oom => Status::Oom,
            JobPhase::OutputCap => Status::OutputCap,
            JobPhase::Preempted => Status::Preempted,
            JobPhase::NodeFail => Status::NodeFail,
            JobPhase::StartFailed => Status::StartFailed,
            JobPhase::Lost => Status::Lost,
            JobPhase::Missing => Status::Missing,
            JobPhase::Unknown => Status::Unknown,
        }
    }
}

/// Requested resources (null: not asked for).
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobResources {
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    /// The job is stopped after this many seconds.
    pub time_limit_s: Option<u64>,
    pub gpus: Option<u32>,
}

impl From<Resources> for JobResources {
    fn from(resources: Resources) -> JobResources {
        let Resources {
            cpus,
            memory_mb,
            time_limit_s,
            gpus,
        } = resources;
        JobResources {
            cpus,
            memory_mb,
            time_limit_s,
            gpus,
        }
    }
}
