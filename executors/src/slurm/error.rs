//! Errors of the Slurm executor: each variant names the failure and says what to do.
//!
//! A job that ends badly (failed, timeout, oom, …) is *not* an error: it is a [`JobState`]
//! value. These errors are for calls that could not be made or answered.
//!
//! [`JobState`]: super::JobState

use std::path::PathBuf;
use std::time::Duration;

/// Why a Slurm operation could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// A user-supplied value would change the meaning of the command line or batch script.
    #[error("invalid `{field}` {value:?}: {problem}; use letters, digits, `.`, `_`, `-` or `+`")]
    InvalidValue {
        field: &'static str,
        value: String,
        problem: &'static str,
    },
    /// A limit is outside what this executor can express or what Slurm accepts.
    #[error("invalid `{field}`: {problem}")]
    InvalidLimit {
        field: &'static str,
        problem: String,
    },
    /// A path given for the script, output or working directory cannot be used.
    #[error("invalid path `{}` for `{field}`: {problem}", path.display())]
    InvalidPath {
        field: &'static str,
        path: PathBuf,
        problem: &'static str,
    },
    /// The job's command is empty or cannot be written into a batch script.
    #[error("invalid job command: {problem}")]
    InvalidCommand { problem: &'static str },
    /// The sandbox spec for the job body is refused by the sandbox executor.
    #[error("invalid sandbox for the job body: fix the instance's sandbox settings")]
    InvalidSandbox {
        #[source]
        source: crate::sandbox::SandboxError,
    },
    /// The sandbox asks to switch host user, which a Slurm job cannot do.
    #[error("`run_as` is not supported for Slurm jobs: they run as the submitting user; unset it")]
    RunAsUnsupported,
    /// The batch script could not be written to the script directory.
    #[error("cannot write the batch script `{}`: check the Slurm script directory", path.display())]
    ScriptWrite {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The supervised job's request could not be written to its output directory.
    #[error("cannot write the job's request into `{}`: check that the job directory exists and is writable", path.display())]
    RequestWrite {
        path: PathBuf,
        #[source]
        source: crate::sandbox::SandboxError,
    },
    /// A Slurm client program could not be started.
    #[error("cannot run `{program}`: install slurm-wlm or set the Slurm bin dir")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// A Slurm client program did not answer in time; it was killed.
    #[error("`{program}` did not answer within {timeout:?}: check that slurmctld is up")]
    CommandTimedOut { program: String, timeout: Duration },
    /// `sbatch` refused the job; `stderr` is Slurm's own explanation.
    #[error("sbatch rejected the job: {stderr}")]
    SbatchRejected { stderr: String },
    /// `sbatch --parsable` printed something that is not `id` or `id;cluster`.
    #[error("cannot parse sbatch output {output:?}: expected `id` or `id;cluster`")]
    SbatchOutput { output: String },
    /// A status query (`squeue`, `scontrol`, `sacct`, `sinfo`) failed.
    #[error("`{program}` failed: {stderr}")]
    QueryFailed { program: String, stderr: String },
    /// A status query printed something this parser does not understand.
    #[error("cannot parse `{program}` output line {line:?}: {problem}")]
    UnparsableOutput {
        program: &'static str,
        line: String,
        problem: &'static str,
    },
    /// Slurm does not know the job (never submitted here, or purged after `MinJobAge`).
    #[error("slurm does not know job `{job_id}`: check the job id")]
    JobNotFound { job_id: u64 },
    /// `scancel` refused to cancel the job.
    #[error("scancel refused job `{job_id}`: {stderr}")]
    ScancelRejected { job_id: String, stderr: String },
}
