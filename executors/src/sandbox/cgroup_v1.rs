//! cgroup v1 limits for one sandbox, on hosts where no delegated cgroup v2 is available but
//! the v1 controllers are mounted (RHEL 8's default, hybrid hosts).
//!
//! Detection is strict, once per process and **per controller** (`pids`, `memory`, `cpu`,
//! and `freezer` for killing): the controller's hierarchy must be mounted (a line of fstype
//! `cgroup` in `/proc/self/mountinfo` whose super options name it — `cpu,cpuacct` co-mounts
//! count for both), our own path in it comes from `/proc/self/cgroup` (mapped through the
//! mount's root, so a container's view works), and we must be able to create a child there
//! and find the controller's file in it (a probe directory, removed at once). Children are
//! only ever created beneath our own cgroup, never above it, so other users of the same
//! hierarchies (a local Slurm, other services) are untouched.
//!
//! Partial availability is explicit: each limit uses its v1 controller when that one is
//! usable and falls back to the rlimit/watchdog of [`super::limits`] otherwise (e.g. pids by
//! `pids.max` but CPUs by `RLIMIT_CPU`), and the run's record says so limit by limit. That is
//! simpler to reason about than all-or-nothing: what a record names is exactly what held.
//!
//! Each sandbox gets one child directory per usable hierarchy; the child process joins all of
//! them in `pre_exec` before bwrap starts (see [`super::cgroup::Joiner`]). v1 has no
//! `cgroup.kill`: killing freezes the group (`freezer.state`), SIGKILLs every pid listed in
//! `cgroup.procs` (through a pidfd, checked still listed), and thaws it; without a freezer it
//! repeats the kill until the group is empty (bounded by `pids.max` when pids are limited).
//! OOM kills are read from `memory.oom_control` (`oom_kill N`, Linux ≥ 4.13), else from
//! `memory.failcnt`.
//!
//! Cleanup: the process that created a group removes it when the sandbox ends (after
//! killing what is left, waiting for exiting tasks). Groups whose creator died first — a
//! gateway SIGKILLed during `run_sync`, a job supervisor killed (the job is then `lost`,
//! e.g. seen by a restarted gateway) — are swept by the next process that detects the
//! hierarchies: empty, over a minute old, creator pid gone.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::limits::{EnforcedLimit, LimitMechanism};
use super::proc::PidFd;
use super::spec::Limits;

/// The v1 controllers we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Pids,
    Memory,
    Cpu,
    Freezer,
}

impl Controller {
    const ALL: [Controller; 4] = [
        Controller::Pids,
        Controller::Memory,
        Controller::Cpu,
        Controller::Freezer,
    ];

    fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Freezer => "freezer",
        }
    }

    /// The file a child group must offer for the controller to be usable.
    fn probe_file(self) -> &'static str {
        match self {
            Controller::Pids => "pids.max",
            Controller::Memory => "memory.limit_in_bytes",
            Controller::Cpu => "cpu.cfs_quota_us",
            Controller::Freezer => "freezer.state",
        }
    }
}

/// Our own cgroup in each usable v1 hierarchy, detected once per process.
#[derive(Debug, Default)]
pub(crate) struct V1Parents {
    pub pids: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub cpu: Option<PathBuf>,
    pub freezer: Option<PathBuf>,
    /// Swap accounting (`memory.memsw.*`) exists, so swap can be limited too.
    pub memsw: bool,
}

impl V1Parents {
    fn get(&self, c: Controller) -> Option<&Path> {
        match c {
            Controller::Pids => self.pids.as_deref(),
            Controller::Memory => self.memory.as_deref(),
            Controller::Cpu => self.cpu.as_deref(),
            Controller::Freezer => self.freezer.as_deref(),
        }
    }

    /// True if at least one limiting controller (pids, memory, cpu) is usable.
    pub(crate) fn any_limit(&self) -> bool {
        self.pids.is_some() || self.memory.is_some() || self.cpu.is_some()
    }
}

/// The usable v1 hierarchies, detected once per process.
pub(crate) fn parents() -> &'static V1Parents {
    static PARENTS: OnceLock<V1Parents> = OnceLock::new();
    PARENTS.get_or_init(|| {
        let (Ok(mountinfo), Ok(own)) = (
            fs::read_to_string("/proc/self/mountinfo"),
            fs::read_to_string("/proc/self/cgroup"),
        ) else {
            return V1Parents::default();
        };
        let find = |c| own_dir(&mountinfo, &own, c).filter(|d| probe(d, c));
        let memory = find(Controller::Memory);
        let memsw = memory.as_ref().is_some_and(|d| probe_memsw(d));
        let parents = V1Parents {
            pids: find(Controller::Pids),
            memory,
            cpu: find(Controller::Cpu),
            freezer: find(Controller::Freezer),
            memsw,
        };
        for c in Controller::ALL {
            if let Some(dir) = parents.get(c) {
                sweep_stale(dir);
            }
        }
        parents
    })
}

/// How old an empty sandbox group must be before a later process removes it.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Removes groups a previous process left behind when it died before its cleanup (a gateway
/// SIGKILLed during `run_sync`, a job whose supervisor was killed — its job is then `lost`):
/// only `hpcgate-*` children whose creator pid is gone, that hold no process and are older
/// than a minute, so a group being set up right now is never touched. Best effort.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("hpcgate-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').find_map(|part| part.parse::<u32>().ok()) else {
            continue;
        };
        let dir = entry.path();
        let empty = fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty());
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_AFTER));
        if empty && old && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir(&dir);
        }
    }
}

/// Our own directory in the v1 hierarchy of `c`: its mount point joined with our path in
/// it, relative to the mount's root. `None` if not mounted or our path lies outside the mount.
pub(crate) fn own_dir(mountinfo: &str, own_cgroup: &str, c: Controller) -> Option<PathBuf> {
    let names = |list: &str| list.split(',').any(|x| x == c.name());
    let (root, mount) = mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        let mut post = post.split_whitespace();
        if post.next()? != "cgroup" {
            return None;
        }
        let superopts = post.nth(1)?;
        if !names(superopts) {
            return None;
        }
        let mut pre = pre.split(' ');
        Some((pre.nth(3)?, pre.next()?))
    })?;
    let path = own_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        names(list).then_some(path)
    })?;
    through_mount(root, mount, path)
}

/// Where the group at `path` (as `/proc/self/cgroup` names it) is, through a cgroup file
/// system mounted at `mount` whose root in its hierarchy is `root` (mountinfo's fields 4 and
/// 5); `None` if the group is not beneath that root.
pub(crate) fn through_mount(root: &str, mount: &str, path: &str) -> Option<PathBuf> {
    // mountinfo escapes spaces and the like as octal; a cgroup path with them is not ours.
    if mount.contains('\\') || root.contains('\\') {
        return None;
    }
    let rel = if root == "/" {
        path
    } else {
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    Some(Path::new(mount).join(rel.trim_start_matches('/')))
}

/// Creates and removes a probe child; true if the controller's file appeared in it.
fn probe(dir: &Path, c: Controller) -> bool {
    let probe = dir.join(format!("hpcgate-probe-{}-{}", c.name(), std::process::id()));
    if fs::create_dir(&probe).is_err() {
        return false;
    }
    let ok = probe.join(c.probe_file()).exists();
    let _ = fs::remove_dir(&probe);
    ok
}

fn probe_memsw(dir: &Path) -> bool {
    let probe = dir.join(format!("hpcgate-probe-memsw-{}", std::process::id()));
    if fs::create_dir(&probe).is_err() {
        return false;
    }
    let ok = probe.join("memory.memsw.limit_in_bytes").exists();
    let _ = fs::remove_dir(&probe);
    ok
}

/// One sandbox's child groups in the usable v1 hierarchies.
#[derive(Debug)]
pub(crate) struct V1Group {
    /// `(controller, directory)`, in the order they were created.
    pub dirs: Vec<(Controller, PathBuf)>,
    pub cpus: Option<EnforcedLimit>,
    pub memory: Option<EnforcedLimit>,
    pub pids: Option<EnforcedLimit>,
}

fn cgroup_v1(detail: String) -> Option<EnforcedLimit> {
    Some(EnforcedLimit {
        mechanism: LimitMechanism::CgroupV1,
        detail,
    })
}

impl V1Group {
    /// Creates `<parent>/<name>` in every usable hierarchy and writes the limits. A hierarchy
    /// whose directory or limit cannot be set up is left out (and removed), so its limit
    /// falls back; `None` if no limiting controller could be set up at all.
    pub(crate) fn create(parents: &V1Parents, name: &str, limits: &Limits) -> Option<V1Group> {
        let mut group = V1Group {
            dirs: Vec::new(),
            cpus: None,
            memory: None,
            pids: None,
        };
        for c in Controller::ALL {
            let Some(parent) = parents.get(c) else {
                continue;
            };
            let dir = parent.join(name);
            if !make_group(&dir) {
                continue;
            }
            match configure(&dir, c, parents.memsw, limits) {
                Ok(record) => {
                    match c {
                        Controller::Pids => group.pids = record,
                        Controller::Memory => group.memory = record,
                        Controller::Cpu => group.cpus = record,
                        Controller::Freezer => {}
                    }
                    group.dirs.push((c, dir));
                }
                Err(_) => {
                    let _ = fs::remove_dir(&dir);
                }
            }
        }
        if group.pids.is_none() && group.memory.is_none() && group.cpus.is_none() {
            group.remove();
            return None;
        }
        Some(group)
    }

    fn dir(&self, c: Controller) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(x, _)| *x == c)
            .map(|(_, d)| d.as_path())
    }

    /// Every `cgroup.procs` to join, in creation order.
    pub(crate) fn procs_files(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.dirs.iter().map(|(_, d)| d.join("cgroup.procs"))
    }

    /// The pids in the group (read from the first hierarchy: every sandbox process is in all).
    pub(crate) fn pids_inside(&self) -> Vec<i32> {
        let Some((_, dir)) = self.dirs.first() else {
            return Vec::new();
        };
        fs::read_to_string(dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills every process in the group: frozen first when a freezer group exists, so none
    /// can fork while the pids are read and signalled; repeated until the group is empty.
    pub(crate) fn kill(&self) {
        let freezer = self
            .dir(Controller::Freezer)
            .map(|d| d.join("freezer.state"));
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(f) = &freezer {
                freeze(f, deadline);
            }
            let pids = self.pids_inside();
            // Through pidfds, opened first and kept only for pids the group still lists after:
            // a pid that exited and was reused in between is never signalled.
            let fds: Vec<(i32, PidFd)> = pids
                .iter()
                .filter_map(|&pid| Some((pid, PidFd::open(pid).ok()?)))
                .collect();
            let still = self.pids_inside();
            for (_, fd) in fds.iter().filter(|(pid, _)| still.contains(pid)) {
                let _ = fd.signal(libc::SIGKILL);
            }
            if let Some(f) = &freezer {
                // Thawed, the killed tasks run their exit; frozen they would stay.
                let _ = fs::write(f, "THAWED");
            }
            if pids.is_empty() || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// True if the kernel's OOM killer fired inside the memory group.
    pub(crate) fn oom_killed(&self) -> bool {
        let Some(dir) = self.dir(Controller::Memory) else {
            return false;
        };
        let number = |f: &str| {
            fs::read_to_string(dir.join(f))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        let control = fs::read_to_string(dir.join("memory.oom_control")).unwrap_or_default();
        match control
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
        {
            Some(n) => n > 0,
            // Kernels before 4.13 do not count kills; the limit having been hit is the sign.
            None => number("memory.failcnt").is_some_and(|n| n > 0),
        }
    }

    /// Removes the (emptied) directories; best effort, waiting up to 2 s for exiting tasks.
    pub(crate) fn remove(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for (_, dir) in self.dirs.iter().rev() {
            while let Err(e) = fs::remove_dir(dir) {
                if e.kind() == io::ErrorKind::NotFound || Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Creates one sandbox group. An empty group already there under the same name is a leftover
/// of a dead creator whose pid we now have (names carry the creator's pid): it is replaced.
fn make_group(dir: &Path) -> bool {
    match fs::create_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let empty =
                fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty());
            empty && fs::remove_dir(dir).is_ok() && fs::create_dir(dir).is_ok()
        }
        Err(_) => false,
    }
}

/// Freezes a freezer group and waits (bounded) until the kernel says `FROZEN`.
fn freeze(state: &Path, deadline: Instant) {
    if fs::write(state, "FROZEN").is_err() {
        return;
    }
    while Instant::now() < deadline {
        if fs::read_to_string(state).is_ok_and(|s| s.trim() == "FROZEN") {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes one controller's limits into `dir`; returns what the record says for it.
fn configure(
    dir: &Path,
    c: Controller,
    memsw: bool,
    limits: &Limits,
) -> io::Result<Option<EnforcedLimit>> {
    let shown = dir.display();
    Ok(match c {
        Controller::Pids => {
            fs::write(dir.join("pids.max"), limits.pids.to_string())?;
            cgroup_v1(format!("pids.max {} in {shown}", limits.pids))
        }
        Controller::Memory => {
            let bytes = limits.memory_mb.saturating_mul(1024 * 1024);
            // The memory limit first: memsw may never be below it.
            fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())?;
            let swap = if memsw {
                fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string())?;
                format!("memory.memsw.limit_in_bytes {bytes} (no swap beyond it)")
            } else {
                "no swap accounting (memory.memsw.* absent): swap not limited".to_owned()
            };
            cgroup_v1(format!("memory.limit_in_bytes {bytes}, {swap} in {shown}"))
        }
        Controller::Cpu => {
            let quota = u64::from(limits.cpus) * 100_000;
            fs::write(dir.join("cpu.cfs_period_us"), "100000")?;
            fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
            cgroup_v1(format!(
                "cpu.cfs_quota_us {quota} per cpu.cfs_period_us 100000 in {shown}"
            ))
        }
        Controller::Freezer => None,
    })
}

#[cfg(test)]
mod tests;
