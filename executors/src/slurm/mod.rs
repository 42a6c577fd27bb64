//! The Slurm executor: batch jobs on the cluster, with a lossless state model.
//!
//! - [`SlurmJobSpec`] → [`SlurmRunner::submit`]: a generated batch script (one quoted
//!   `exec bwrap … -- command…` line, see [`script`]) given to `sbatch` by path, with every
//!   limit on the command line and `--export=NONE`; `sbatch` itself runs from an argv with a
//!   cleared environment ([`SlurmClientConfig::run`]), so `SBATCH_*` and the gateway's
//!   secrets have no effect.
//! - [`SlurmRunner::status`]: `squeue` while the job is queued or running, then
//!   `scontrol show job`, then `sacct` when accounting is enabled; a job found nowhere is
//!   [`JobPhase::Lost`], never completed.
//! - [`SlurmRunner::cancel`] (`scancel`) and [`SlurmRunner::cluster_status`] (`sinfo`,
//!   `squeue`).
//!
//! Every call is blocking (it starts a Slurm client and waits at most
//! [`SlurmClientConfig::timeout`]): call it from the gateway's blocking bridge.
//! `scripts/slurm-local.sh` starts a private one-machine cluster for the tests.

mod cancel;
mod cluster;
mod command;
mod error;
pub mod parse;
pub mod script;
mod spec;
mod state;
mod status;
mod submit;
pub mod validate;

use std::ffi::OsString;
use std::path::PathBuf;

pub use cancel::CancelOutcome;
pub use cluster::{
    ClusterStatus, CpuCounts, NodeStatus, PartitionStatus, SINFO_FORMAT, sinfo_nodes,
};
pub use command::{DEFAULT_PATH, Output, SlurmClientConfig};
pub use error::SlurmError;
pub use spec::{JobSandbox, MAX_TIME_LIMIT, SlurmJobSpec};
pub use state::{JobPhase, JobStatus, SlurmJobId, StatusSource, base_state, parse_exit};
pub use submit::parse_sbatch_output;

/// Submits, observes and cancels batch jobs on one cluster.
#[derive(Debug, Clone)]
pub struct SlurmRunner {
    /// How the Slurm clients are run.
    pub client: SlurmClientConfig,
    /// Where batch scripts are written before `sbatch` copies them (gateway-private: the
    /// sandbox must not see it). Each script is removed once `sbatch` returns.
    pub script_dir: PathBuf,
    /// Whether `sacct` can be asked about jobs that `scontrol` has forgotten (needs slurmdbd).
    pub accounting: bool,
}

impl SlurmRunner {
    /// A runner with default clients, no accounting, and scripts written to `script_dir`.
    pub fn new(script_dir: impl Into<PathBuf>) -> Self {
        SlurmRunner {
            client: SlurmClientConfig::default(),
            script_dir: script_dir.into(),
            accounting: false,
        }
    }

    /// Runs a query program; a non-zero exit is [`SlurmError::QueryFailed`].
    fn query(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let output = self.client.run(program, &args)?;
        if output.success {
            Ok(output.stdout)
        } else {
            Err(SlurmError::QueryFailed {
                program: program.to_owned(),
                stderr: output.stderr,
            })
        }
    }
}
