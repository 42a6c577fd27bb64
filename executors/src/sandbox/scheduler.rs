//! What a batch scheduler's job cgroup holds of a sandbox's limits, read from the cgroups
//! the supervisor runs in (the sandbox stays in them).
//!
//! Slurm constrains memory only where `task/cgroup` with `ConstrainRAMSpace` is configured,
//! tasks hardly ever, and CPUs through the affinity mask or a cpuset. So each limit is looked
//! up rather than assumed: a finite `memory.max` (v2) or `memory.limit_in_bytes` (v1), or a
//! `pids.max`, in the job's group or one above it up to the hierarchy's root, and an affinity
//! mask (or CPU quota) of at most the job's CPUs. A limit found nowhere is left to the same fallbacks as a
//! local sandbox's (the memory watchdog and `RLIMIT_AS`, `RLIMIT_NPROC`, `RLIMIT_CPU`), and
//! the job's record names the file and value of each one found.

use std::fs;
use std::path::{Path, PathBuf};

use super::cgroup::CgroupLimits;
use super::cgroup_v1::{Controller, own_dir};
use super::limits::{EnforcedLimit, LimitMechanism};
use super::spec::Limits;

/// The limits the cgroups of this process (a batch job's) enforce.
pub(crate) fn scheduler_limits(limits: &Limits) -> CgroupLimits {
    let (Ok(mountinfo), Ok(own)) = (
        fs::read_to_string("/proc/self/mountinfo"),
        fs::read_to_string("/proc/self/cgroup"),
    ) else {
        return CgroupLimits {
            cpus: cpus(limits),
            memory: None,
            pids: None,
        };
    };
    let v2 = v2_dir(&mountinfo, &own);
    let find = |v1: Controller, v1_file: &str, v2_file: &str| {
        let (dir, file) = match own_dir(&mountinfo, &own, v1) {
            Some(dir) => (dir, v1_file),
            None => (v2.clone()?, v2_file),
        };
        finite_limit(&dir, file)
    };
    CgroupLimits {
        cpus: cpus(limits),
        memory: find(Controller::Memory, "memory.limit_in_bytes", "memory.max"),
        pids: find(Controller::Pids, "pids.max", "pids.max"),
    }
}

/// The closest finite `file` in `dir` or above it, as a record.
fn finite_limit(dir: &Path, file: &str) -> Option<EnforcedLimit> {
    // v1 writes "unlimited" as the largest page-aligned value; anything that large is none.
    const UNLIMITED: u64 = 1 << 62;
    dir.ancestors()
        .take_while(|d| d.join(file).exists())
        .find_map(|d| {
            let value: u64 = fs::read_to_string(d.join(file)).ok()?.trim().parse().ok()?;
            (value < UNLIMITED).then(|| scheduler(format!("{file} {value} in {}", d.display())))
        })
}

/// Our group in the cgroup v2 hierarchy, when it is mounted.
fn v2_dir(mountinfo: &str, own: &str) -> Option<PathBuf> {
    let mount = mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2").then(|| pre.split(' ').nth(4))?
    })?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new(mount).join(rel.trim_start_matches('/')))
}

/// The CPUs this process may use (its affinity mask, or its cgroup's CPU quota, whichever is
/// less), when that is no more than the job asked for.
fn cpus(limits: &Limits) -> Option<EnforcedLimit> {
    let allowed = std::thread::available_parallelism().ok()?.get();
    (allowed <= limits.cpus as usize).then(|| {
        scheduler(format!(
            "{allowed} CPUs available to the batch job (its affinity mask or CPU quota)"
        ))
    })
}

fn scheduler(detail: String) -> EnforcedLimit {
    EnforcedLimit {
        mechanism: LimitMechanism::Scheduler,
        detail,
    }
}
