//! The limits of a sandbox inside a batch job, read from the cgroups the supervisor runs in
//! (the sandbox stays in them): the scheduler, not this process, holds CPUs, memory and tasks.
//!
//! Slurm constrains memory only where `task/cgroup` with `ConstrainRAMSpace` is configured,
//! tasks hardly ever, and CPUs through the affinity mask or a cpuset. So each limit is looked
//! up rather than assumed: a finite `memory.max` (v2) or `memory.limit_in_bytes` (v1), or a
//! `pids.max`, in the job's group or one above it, at most a quarter over what the job asked
//! for (a larger one is a node's or a slice's, not the job's), and an affinity mask (or CPU
//! quota) of at most the job's CPUs. The record names the file and value of each one found,
//! and says `not_enforced` for the others.
//!
//! Nothing of a local sandbox's fallbacks is applied here: every Slurm job runs as the one
//! user who submits them all, so `RLIMIT_NPROC` would count every tenant's tasks on the node;
//! `RLIMIT_AS` at the job's memory breaks CUDA and large mappings; `RLIMIT_CPU` kills a
//! multithreaded job given whole SMT cores; and the resident-memory watchdog counts shared
//! pages once per process. Slurm's own accounting still ends a job over `--mem` where it polls.

use std::fs;
use std::path::Path;

use super::cgroup::v2_dir;
use super::cgroup_v1::{Controller, own_dir};
use super::limits::{EnforcedLimit, EnforcedLimits, LimitMechanism, LimitPlan, RlimitPlan};
use super::spec::Limits;

/// The plan for a sandbox in a batch job: what its cgroups and CPU mask hold, no rlimit but
/// `RLIMIT_CORE` (a core dump is output nobody capped), no watchdog.
pub(crate) fn plan_in_batch(limits: &Limits) -> LimitPlan {
    let monitor = |detail: String| EnforcedLimit {
        mechanism: LimitMechanism::Monitor,
        detail,
    };
    let cgroups = (
        fs::read_to_string("/proc/self/mountinfo"),
        fs::read_to_string("/proc/self/cgroup"),
    );
    let find = |v1: Controller, v1_file: &str, v2_file: &str, at_most: u64| {
        let (Ok(mountinfo), Ok(own)) = &cgroups else {
            return None;
        };
        let (dir, file) = match own_dir(mountinfo, own, v1) {
            Some(dir) => (dir, v1_file),
            None => (v2_dir(mountinfo, own)?, v2_file),
        };
        held(&dir, file, at_most.saturating_add(at_most / 4))
    };
    let memory_bytes = limits.memory_mb.saturating_mul(1024 * 1024);
    let memory = find(
        Controller::Memory,
        "memory.limit_in_bytes",
        "memory.max",
        memory_bytes,
    )
    .unwrap_or_else(|| {
        not_enforced(
            "the batch job's cgroup sets no memory limit of its size (Slurm's ConstrainRAMSpace); Slurm's accounting may still end it over --mem",
        )
    });
    let pids = find(Controller::Pids, "pids.max", "pids.max", limits.pids.into())
        .unwrap_or_else(|| not_enforced("the batch job's cgroup sets no task limit of its size"));
    LimitPlan {
        rlimits: RlimitPlan(vec![(libc::RLIMIT_CORE, 0, 0)]),
        enforced: EnforcedLimits {
            wall_time: monitor(super::limits::wall_time_detail(limits)),
            output_bytes: monitor(format!("killed after {} bytes", limits.output_bytes)),
            cpus: cpus(limits),
            memory,
            pids,
        },
        watch_memory_bytes: None,
    }
}

/// The closest finite `file` in `dir` or above it, held if it is at most `at_most`.
fn held(dir: &Path, file: &str, at_most: u64) -> Option<EnforcedLimit> {
    // v1 writes "unlimited" as the largest page-aligned value; anything that large is none.
    const UNLIMITED: u64 = 1 << 62;
    let (at, value) = dir
        .ancestors()
        .take_while(|d| d.join(file).exists())
        .find_map(|d| {
            let value: u64 = fs::read_to_string(d.join(file)).ok()?.trim().parse().ok()?;
            (value < UNLIMITED).then_some((d, value))
        })?;
    (value <= at_most).then(|| EnforcedLimit {
        mechanism: LimitMechanism::Scheduler,
        detail: format!("{file} {value} in {}", at.display()),
    })
}

/// The CPUs this process may use (its affinity mask, or its cgroup's CPU quota, whichever is
/// less): held when that is no more than the job asked for.
fn cpus(limits: &Limits) -> EnforcedLimit {
    match std::thread::available_parallelism().map(usize::from) {
        Ok(allowed) if allowed <= limits.cpus as usize => EnforcedLimit {
            mechanism: LimitMechanism::Scheduler,
            detail: format!(
                "{allowed} CPUs available to the batch job (its affinity mask or CPU quota)"
            ),
        },
        Ok(allowed) => not_enforced(&format!(
            "{allowed} CPUs available to the batch job, which asked for {}: Slurm did not bind it to them",
            limits.cpus
        )),
        Err(_) => not_enforced("the CPUs available to the batch job are not known"),
    }
}

fn not_enforced(detail: &str) -> EnforcedLimit {
    EnforcedLimit {
        mechanism: LimitMechanism::NotEnforced,
        detail: detail.to_owned(),
    }
}
