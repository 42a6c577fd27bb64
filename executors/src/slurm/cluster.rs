//! `cluster_status`: partitions with their CPUs, GPUs and node states from `sinfo`, and the
//! number of pending and running jobs from `squeue`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{SlurmError, SlurmRunner};

/// The `sinfo -N -O` format [`sinfo_nodes`] reads: one line per node and partition.
pub const SINFO_FORMAT: &str =
    "NodeList:|,Partition:|,CPUsState:|,Gres:|,GresUsed:|,StateLong:|,Available:";

/// The cluster as the gateway shows it to an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub partitions: Vec<PartitionStatus>,
    /// Jobs waiting in the queue (all users).
    pub pending_jobs: u32,
    /// Jobs running or completing (all users).
    pub running_jobs: u32,
}

/// One partition, summed over its nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStatus {
    pub name: String,
    /// The partition jobs go to when none is named (`*` in sinfo).
    pub default: bool,
    /// Whether the partition accepts jobs (`up`).
    pub available: bool,
    pub cpus: CpuCounts,
    pub gpus_total: u32,
    pub gpus_used: u32,
    pub nodes: Vec<NodeStatus>,
}

/// CPUs as sinfo counts them (`allocated/idle/other/total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuCounts {
    pub allocated: u32,
    pub idle: u32,
    /// Down, drained or otherwise unusable.
    pub other: u32,
    pub total: u32,
}

/// One node in one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    /// sinfo's long state (`idle`, `mixed`, `allocated`, `drained`, `down*`, …), verbatim.
    pub state: String,
}

impl SlurmRunner {
    /// Partitions, CPUs, GPUs, node states, and queue counts.
    pub fn cluster_status(&self) -> Result<ClusterStatus, SlurmError> {
        let nodes = self.query("sinfo", &["-h", "-N", "-O", SINFO_FORMAT])?;
        let queue = self.query("squeue", &["-h", "-o", "%T"])?;
        let mut status = sinfo_nodes(&nodes)?;
        for state in queue.lines().map(str::trim) {
            match super::JobPhase::from_slurm(state) {
                super::JobPhase::Pending => status.pending_jobs += 1,
                super::JobPhase::Running => status.running_jobs += 1,
                _ => {}
            }
        }
        Ok(status)
    }
}

/// Parses `sinfo -h -N -O` output in [`SINFO_FORMAT`] (queue counts left at 0).
pub fn sinfo_nodes(text: &str) -> Result<ClusterStatus, SlurmError> {
    let mut partitions: BTreeMap<String, PartitionStatus> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        let [node, partition, cpus, gres, gres_used, state, available] = fields[..] else {
            return Err(unparsable(line, "expected 7 `|`-separated fields"));
        };
        let cpus = cpu_counts(cpus).ok_or_else(|| unparsable(line, "bad CPUsState"))?;
        let default = partition.ends_with('*');
        let name = partition.trim_end_matches('*').to_owned();
        let entry = partitions
            .entry(name.clone())
            .or_insert_with(|| PartitionStatus {
                name,
                default,
                available: available == "up",
                cpus: CpuCounts::default(),
                gpus_total: 0,
                gpus_used: 0,
                nodes: Vec::new(),
            });
        entry.cpus.allocated += cpus.allocated;
        entry.cpus.idle += cpus.idle;
        entry.cpus.other += cpus.other;
        entry.cpus.total += cpus.total;
        entry.gpus_total += gpu_count(gres);
        entry.gpus_used += gpu_count(gres_used);
        entry.nodes.push(NodeStatus {
            name: node.to_owned(),
            state: state.to_owned(),
        });
    }
    Ok(ClusterStatus {
        partitions: partitions.into_values().collect(),
        pending_jobs: 0,
        running_jobs: 0,
    })
}

/// `2/0/0/2` → allocated 2, idle 0, other 0, total 2.
fn cpu_counts(text: &str) -> Option<CpuCounts> {
    let numbers: Vec<u32> = text
        .split('/')
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    let [allocated, idle, other, total] = numbers[..] else {
        return None;
    };
    Some(CpuCounts {
        allocated,
        idle,
        other,
        total,
    })
}

/// GPUs in a GRES list: `gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:1(IDX:0),shard:0` → 2, 4, 1; `(null)` → 0.
fn gpu_count(gres: &str) -> u32 {
    gres.split(',')
        .filter(|entry| entry.starts_with("gpu:") || *entry == "gpu")
        .map(|entry| {
            let entry = entry.split('(').next().unwrap_or("");
            entry
                .rsplit(':')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn unparsable(line: &str, problem: &'static str) -> SlurmError {
    SlurmError::UnparsableOutput {
        program: "sinfo",
        line: line.chars().take(200).collect(),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinfo_fixture_busy_node() {
        let status = sinfo_nodes(include_str!("fixtures/sinfo_nodes_mixed.txt")).unwrap();
        let names: Vec<&str> = status.partitions.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["batch", "debug"]);
        let debug = &status.partitions[1];
        assert!(debug.default && debug.available);
        assert_eq!(
            debug.cpus,
            CpuCounts {
                allocated: 2,
                idle: 0,
                other: 0,
                total: 2
            }
        );
        assert_eq!((debug.gpus_total, debug.gpus_used), (2, 1));
        assert_eq!(debug.nodes[0].state, "allocated");
        assert!(!status.partitions[0].default);
    }

    #[test]
    fn sinfo_fixture_idle_node() {
        let status = sinfo_nodes(include_str!("fixtures/sinfo_nodes_idle.txt")).unwrap();
        let debug = &status.partitions[1];
        assert_eq!(debug.cpus.idle, 2);
        assert_eq!((debug.gpus_total, debug.gpus_used), (2, 0));
        assert_eq!(debug.nodes[0].state, "idle");
    }

    #[test]
    fn gres_forms() {
        assert_eq!(gpu_count("gpu:a100:4(S:0-1)"), 4);
        assert_eq!(gpu_count("gpu:1(IDX:0),shard:0"), 1);
        assert_eq!(gpu_count("(null)"), 0);
        assert!(sinfo_nodes("vm|debug|x|gpu:1|gpu:0|idle|up").is_err());
    }
}
