//! The results of the cluster tools.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use hpcgate_executors::slurm;

// cluster_status.
/// The cluster's load and your unfinished jobs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClusterStatus {
    /// The Slurm cluster (null when Slurm is not enabled: local jobs only).
    pub slurm: Option<SlurmStatus>,
    pub yours: YourJobs,
}

/// The caller's unfinished jobs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct YourJobs {
    pub unfinished_jobs: usize,
    pub unfinished_local_jobs: usize,
}

/// The Slurm cluster: partitions and the queue (all users).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SlurmStatus {
    pub partitions: Vec<Partition>,
    /// Jobs waiting in the queue (all users).
    pub pending_jobs: u32,
    /// Jobs running or completing (all users).
    pub running_jobs: u32,
}

impl From<slurm::ClusterStatus> for SlurmStatus {
    fn from(status: slurm::ClusterStatus) -> SlurmStatus {
        let slurm::ClusterStatus {
            partitions,
            pending_jobs,
            running_jobs,
        } = status;
        SlurmStatus {
            partitions: partitions.into_iter().map(Partition::from).collect(),
            pending_jobs,
            running_jobs,
        }
    }
}

/// One partition, summed over its nodes.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Partition {
    pub name: String,
    /// The partition jobs go to when none is named.
    pub default: bool,
    /// Whether the partition accepts jobs.
    pub available: bool,
    pub cpus: Cpus,
    pub gpus_total: u32,
    pub gpus_used: u32,
    pub nodes: Vec<Node>,
}

impl From<slurm::PartitionStatus> for Partition {
    fn from(partition: slurm::PartitionStatus) -> Partition {
        let slurm::PartitionStatus {
            name,
            default,
            available,
            cpus,
            gpus_total,
            gpus_used,
            nodes,
        } = partition;
        let slurm::CpuCounts {
            allocated,
            idle,
            other,
            total,
        } = cpus;
        Partition {
            name,
            default,
            available,
            cpus: Cpus {
                allocated,
                idle,
                other,
                total,
            },
            gpus_total,
            gpus_used,
            nodes: nodes
                .into_iter()
                .map(|slurm::NodeStatus { name, state }| Node { name, state })
                .collect(),
        }
    }
}

/// CPUs as Slurm counts them.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Cpus {
    pub allocated: u32,
    pub idle: u32,
    /// Down, drained or otherwise unusable.
    pub other: u32,
    pub total: u32,
}

/// One node of a partition.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Node {
    pub name: String,
    /// Slurm's long state (`idle`, `mixed`, `allocated`, `drained`, `down*`, …), verbatim.
    pub state: String,
}

// host_exec.
/// The host commands (when called without `command`), or how one ran.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum HostExecResult {
    Commands(HostCommands),
    Ran(HostRan),
}

/// The admin-defined host commands, by key.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HostCommands {
    pub commands: BTreeMap<String, HostCommandInfo>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct HostCommandInfo {
    pub description: String,
}

/// How a host command ran.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HostRan {
    /// The key it was run by.
    pub command: String,
    /// Null when a signal ended it (the timeout included).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub elapsed_s: f64,
    /// The first 64 KiB of stdout.
    pub stdout: String,
    /// The first 64 KiB of stderr.
    pub stderr: String,
    /// Whether stdout was longer than what is returned.
    pub stdout_truncated: bool,
}
