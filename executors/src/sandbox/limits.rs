//! Which mechanism enforces which limit, and the rlimits applied when no cgroup is usable.
//!
//! With a delegated cgroup v2 the kernel enforces memory, pids and CPUs for the whole
//! sandbox. Without one, each limit whose cgroup v1 controller is usable is enforced by it
//! ([`super::cgroup_v1`]: `pids.max`, `memory.limit_in_bytes`, `cpu.cfs_quota_us`). Any
//! limit left falls back to what a single process can inherit:
//!
//! - memory: a resident-set watchdog in the monitor (sums the sandbox tree, kills it and
//!   reports `oom`), backed by `RLIMIT_AS` at memory + 1 GiB per process against spikes;
//! - pids: `RLIMIT_NPROC`, which counts every process of the host user that runs bwrap —
//!   meaningful with a dedicated [`super::HostUser`] (`run_as`), and ignored by the kernel
//!   for root, which the record then says;
//! - cpus: only CPU seconds (`RLIMIT_CPU` at cpus × wall time), parallelism is not limited.
//!
//! Wall time and output bytes are always enforced by the monitor. Every run records the
//! resulting [`EnforcedLimits`] so an operator can see what really held.

use serde::{Deserialize, Serialize};

use super::cgroup::CgroupLimits;
use super::spec::Limits;

/// How one limit was enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitMechanism {
    /// A cgroup v2 controller (`memory.max`, `pids.max`, `cpu.max`).
    CgroupV2,
    /// A cgroup v1 controller (`memory.limit_in_bytes`, `pids.max`, `cpu.cfs_quota_us`).
    CgroupV1,
    /// A resource limit inherited by every process of the sandbox.
    Rlimit,
    /// The monitor's resident-memory watchdog plus `RLIMIT_AS`.
    WatchdogAndRlimit,
    /// The monitor (supervisor or `run_sync`): wall time and output bytes.
    Monitor,
    /// The batch scheduler that started the sandbox: a limit of the job's cgroup (the sandbox
    /// stays in it) or its CPU affinity; `detail` names the file and value.
    Scheduler,
    /// Not enforced on this host; `detail` says why.
    NotEnforced,
}

/// One limit, its mechanism and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnforcedLimit {
    pub mechanism: LimitMechanism,
    pub detail: String,
}

/// What enforced each limit of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnforcedLimits {
    pub wall_time: EnforcedLimit,
    pub output_bytes: EnforcedLimit,
    pub cpus: EnforcedLimit,
    pub memory: EnforcedLimit,
    pub pids: EnforcedLimit,
}

/// Rlimits to apply in the child before bwrap starts: `(resource, soft, hard)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct RlimitPlan(pub Vec<(libc::__rlimit_resource_t, u64, u64)>);

/// The plan for one run: rlimits, the record, and the watchdog threshold in bytes.
#[derive(Debug, Clone)]
pub(crate) struct LimitPlan {
    pub rlimits: RlimitPlan,
    pub enforced: EnforcedLimits,
    pub watch_memory_bytes: Option<u64>,
}

fn lim(mechanism: LimitMechanism, detail: String) -> EnforcedLimit {
    EnforcedLimit { mechanism, detail }
}

/// Plans the limits; `cgroup` says which limits the sandbox's cgroup enforces (if any),
/// `host_uid` the uid bwrap will run as, `dedicated` whether that uid runs nothing but this
/// sandbox. Each limit the cgroup does not enforce gets its rlimit fallback.
/// How the wall time is kept, for the record: the `SIGTERM`, the grace, the kill.
pub(crate) fn wall_time_detail(limits: &Limits) -> String {
    let wall_s = limits.wall_time.as_secs().max(1);
    match limits.stop_grace.as_secs() {
        0 => format!("killed after {wall_s} s"),
        grace => format!("SIGTERM after {wall_s} s, killed {grace} s later"),
    }
}

pub(crate) fn plan(
    limits: &Limits,
    cgroup: Option<&CgroupLimits>,
    host_uid: u32,
    dedicated: bool,
) -> LimitPlan {
    use LimitMechanism::*;
    let mem_bytes = limits.memory_mb.saturating_mul(1024 * 1024);
    let wall_s = limits.wall_time.as_secs().max(1);
    let mut rl = vec![(libc::RLIMIT_CORE, 0, 0)];
    let wall_time = lim(Monitor, wall_time_detail(limits));
    let output_bytes = lim(
        Monitor,
        format!("killed after {} bytes", limits.output_bytes),
    );
    let by_cgroup =
        |pick: fn(&CgroupLimits) -> &Option<EnforcedLimit>| cgroup.and_then(|c| pick(c).clone());
    let cpus = by_cgroup(|c| &c.cpus).unwrap_or_else(|| {
        // The grace too: a process busy all its wall time must still get to clean up.
        let cpu_s = (wall_s.saturating_add(limits.stop_grace.as_secs()))
            .saturating_mul(u64::from(limits.cpus));
        rl.push((libc::RLIMIT_CPU, cpu_s, cpu_s + 5));
        lim(
            Rlimit,
            format!("RLIMIT_CPU {cpu_s} s per process; parallelism not limited"),
        )
    });
    let mut watch_memory_bytes = None;
    let memory = by_cgroup(|c| &c.memory).unwrap_or_else(|| {
        let as_bytes = mem_bytes.saturating_add(1 << 30);
        rl.push((libc::RLIMIT_AS, as_bytes, as_bytes));
        watch_memory_bytes = Some(mem_bytes);
        lim(
            WatchdogAndRlimit,
            format!(
                "resident set of the sandbox killed above {mem_bytes} bytes; RLIMIT_AS {as_bytes}"
            ),
        )
    });
    let pids = by_cgroup(|c| &c.pids).unwrap_or_else(|| {
        if host_uid == 0 {
            lim(
                NotEnforced,
                "RLIMIT_NPROC does not bind root: set run_as or delegate a cgroup (v2, or v1 pids)"
                    .to_owned(),
            )
        } else if dedicated {
            let n = u64::from(limits.pids);
            rl.push((libc::RLIMIT_NPROC, n, n));
            lim(Rlimit, format!("RLIMIT_NPROC {n} for host uid {host_uid}"))
        } else {
            // The uid is shared with the gateway and other sandboxes: the limit counts all of
            // their tasks, so grant the sandbox `pids` on top of what already runs.
            let running = tasks_of_uid(host_uid);
            let n = u64::from(limits.pids) + running;
            rl.push((libc::RLIMIT_NPROC, n, n));
            lim(
                Rlimit,
                format!(
                    "RLIMIT_NPROC {n} ({running} tasks already running + {}) shared by host uid {host_uid}",
                    limits.pids
                ),
            )
        }
    });
    LimitPlan {
        rlimits: RlimitPlan(rl),
        enforced: EnforcedLimits {
            wall_time,
            output_bytes,
            cpus,
            memory,
            pids,
        },
        watch_memory_bytes,
    }
}

/// Tasks (threads included, as `RLIMIT_NPROC` counts them) of processes owned by `uid`.
fn tasks_of_uid(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter_map(|e| std::fs::read_dir(e.path().join("task")).ok())
        .map(|tasks| tasks.count() as u64)
        .sum()
}

impl RlimitPlan {
    /// Applies the rlimits to the calling process. Async-signal-safe: only `setrlimit`.
    #[allow(unsafe_code)]
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        for &(resource, soft, hard) in &self.0 {
            let rl = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: setrlimit reads the struct we pass by pointer; it lives on our stack.
            if unsafe { libc::setrlimit(resource, &rl) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{EnforcedLimit, LimitMechanism, plan};
    use crate::sandbox::cgroup::CgroupLimits;
    use crate::sandbox::spec::Limits;

    #[test]
    fn each_limit_falls_back_on_its_own() {
        // pids held by a cgroup v1 controller, memory and CPUs not: their fallbacks apply,
        // and no RLIMIT_NPROC is set for the limit the cgroup holds.
        let v1 = EnforcedLimit {
            mechanism: LimitMechanism::CgroupV1,
            detail: "pids.max 10 in /sys/fs/cgroup/pids/x".to_owned(),
        };
        let partial = CgroupLimits {
            cpus: None,
            memory: None,
            pids: Some(v1.clone()),
        };
        let limits = Limits {
            pids: 10,
            memory_mb: 64,
            ..Limits::default()
        };
        let p = plan(&limits, Some(&partial), 1234, true);
        assert_eq!(p.enforced.pids, v1);
        assert_eq!(p.enforced.cpus.mechanism, LimitMechanism::Rlimit);
        assert_eq!(
            p.enforced.memory.mechanism,
            LimitMechanism::WatchdogAndRlimit
        );
        assert_eq!(p.watch_memory_bytes, Some(64 << 20));
        let resources: Vec<_> = p.rlimits.0.iter().map(|r| r.0).collect();
        assert!(!resources.contains(&libc::RLIMIT_NPROC), "{resources:?}");
        assert!(resources.contains(&libc::RLIMIT_CPU) && resources.contains(&libc::RLIMIT_AS));

        // Without a cgroup, the same uid gets RLIMIT_NPROC; root is told it is not enforced.
        let p = plan(&limits, None, 1234, true);
        assert_eq!(p.enforced.pids.mechanism, LimitMechanism::Rlimit);
        let p = plan(&limits, None, 0, false);
        assert_eq!(p.enforced.pids.mechanism, LimitMechanism::NotEnforced);

        // Memory held by the cgroup: no watchdog and no RLIMIT_AS.
        let memory = CgroupLimits {
            cpus: None,
            memory: Some(v1.clone()),
            pids: None,
        };
        let p = plan(&limits, Some(&memory), 1234, true);
        assert_eq!(p.watch_memory_bytes, None);
        assert!(!p.rlimits.0.iter().any(|r| r.0 == libc::RLIMIT_AS));
    }

    #[test]
    fn the_mechanism_serializes_as_cgroup_v1() {
        let json = serde_json::to_string(&LimitMechanism::CgroupV1).expect("json");
        assert_eq!(json, "\"cgroup_v1\"");
    }
}
