//! cgroup v2 limits for one sandbox, when the gateway has a delegated cgroup.
//!
//! Detection is strict: the unified hierarchy must be mounted (found in
//! `/proc/self/mountinfo`, wherever it is — `/sys/fs/cgroup` or a hybrid
//! `/sys/fs/cgroup/unified`), our own cgroup (`0::<path>` in `/proc/self/cgroup`) must offer
//! `cpu`, `memory` and `pids` in `cgroup.subtree_control`, and we must be able to create a
//! child there. On a hybrid host where v1 owns the controllers this fails and the runners fall
//! back to cgroup v1 ([`super::cgroup_v1`]), then to rlimits. Each sandbox gets its own child cgroup; the child process joins it in
//! `pre_exec` (writing `0` to `cgroup.procs`) before bwrap starts, so every sandbox process is
//! inside from the first instruction, and `cgroup.kill` ends all of them at once.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cgroup_v1::{self, V1Group};
use super::limits::{EnforcedLimit, LimitMechanism};
use super::spec::Limits;

/// The cgroup(s) created for one sandbox.
#[derive(Debug)]
pub(crate) enum JobCgroup {
    V2(V2Group),
    V1(V1Group),
}

/// What a job cgroup enforces, per limit; `None` falls back to rlimits.
#[derive(Debug, Clone)]
pub(crate) struct CgroupLimits {
    pub cpus: Option<EnforcedLimit>,
    pub memory: Option<EnforcedLimit>,
    pub pids: Option<EnforcedLimit>,
}

impl JobCgroup {
    /// Creates the sandbox's cgroup(s) named `name`: v2 when delegated, v1 when usable.
    /// A per-process count is appended, so two sandboxes of one process never share a
    /// directory whatever their callers name them (one process may hold several gateways, as
    /// the tests do, each numbering its own proxied servers): a shared one would be removed
    /// under the other's feet.
    pub(crate) fn create_for(name: &str, limits: &Limits) -> Option<JobCgroup> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = &format!("{name}-{n}");
        if let Some(parent) = delegated_parent() {
            return V2Group::create(parent, name, limits)
                .ok()
                .map(JobCgroup::V2);
        }
        let v1 = cgroup_v1::parents();
        if !v1.any_limit() {
            return None;
        }
        V1Group::create(v1, name, limits).map(JobCgroup::V1)
    }

    /// Which limits the cgroup enforces, with the file and value for the record.
    pub(crate) fn enforced(&self, limits: &Limits) -> CgroupLimits {
        match self {
            JobCgroup::V2(g) => {
                let cg = g.dir.display();
                let v2 = |detail: String| {
                    Some(EnforcedLimit {
                        mechanism: LimitMechanism::CgroupV2,
                        detail,
                    })
                };
                let mem = limits.memory_mb.saturating_mul(1024 * 1024);
                CgroupLimits {
                    cpus: v2(format!("cpu.max {}00000 100000 in {cg}", limits.cpus)),
                    memory: v2(format!("memory.max {mem} in {cg}")),
                    pids: v2(format!("pids.max {} in {cg}", limits.pids)),
                }
            }
            JobCgroup::V1(g) => CgroupLimits {
                cpus: g.cpus.clone(),
                memory: g.memory.clone(),
                pids: g.pids.clone(),
            },
        }
    }

    /// The part needed after fork: the `cgroup.procs` files to join, prepared now.
    pub(crate) fn joiner(&self) -> io::Result<Joiner> {
        let files: Vec<PathBuf> = match self {
            JobCgroup::V2(g) => vec![g.dir.join("cgroup.procs")],
            JobCgroup::V1(g) => g.procs_files().collect(),
        };
        let procs = files
            .iter()
            .map(|f| {
                CString::new(f.as_os_str().as_bytes())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in cgroup path"))
            })
            .collect::<io::Result<_>>()?;
        Ok(Joiner { procs })
    }

    /// Kills every process of the sandbox's cgroup.
    pub(crate) fn kill(&self) {
        match self {
            JobCgroup::V2(g) => g.kill(),
            JobCgroup::V1(g) => g.kill(),
        }
    }

    /// True if the kernel's OOM killer fired inside the sandbox's memory cgroup.
    pub(crate) fn oom_killed(&self) -> bool {
        match self {
            JobCgroup::V2(g) => g.oom_killed(),
            JobCgroup::V1(g) => g.oom_killed(),
        }
    }

    /// Kills what is left and removes the (then empty) cgroup directories; best effort.
    pub(crate) fn remove(&self) {
        match self {
            JobCgroup::V2(g) => g.remove(),
            JobCgroup::V1(g) => {
                g.kill();
                g.remove();
            }
        }
    }
}

/// A cgroup v2 group created for one sandbox.
#[derive(Debug)]
pub(crate) struct V2Group {
    pub dir: PathBuf,
}

/// The `cgroup.procs` files one sandbox joins between fork and exec.
#[derive(Debug, Clone)]
pub(crate) struct Joiner {
    procs: Vec<CString>,
}

/// The delegated parent cgroup, detected once per process.
pub(crate) fn delegated_parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT.get_or_init(detect).as_deref()
}

fn detect() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let dir = v2_dir(&mountinfo, &own)?;
    let control = fs::read_to_string(dir.join("cgroup.subtree_control")).ok()?;
    let has = |c: &str| control.split_whitespace().any(|x| x == c);
    if !(has("cpu") && has("memory") && has("pids")) {
        return None;
    }
    let probe = dir.join(format!("hpcgate-probe-{}", std::process::id()));
    fs::create_dir(&probe).ok()?;
    let ok = probe.join("memory.max").exists() && probe.join("pids.max").exists();
    let _ = fs::remove_dir(&probe);
    ok.then_some(dir)
}

/// Our group in the cgroup v2 hierarchy, when it is mounted (and beneath the mount's root: a
/// container may see only a subtree of the hierarchy, mounted as its own).
pub(crate) fn v2_dir(mountinfo: &str, own: &str) -> Option<PathBuf> {
    let (root, mount) = mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        if post.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut pre = pre.split(' ');
        Some((pre.nth(3)?, pre.next()?))
    })?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    cgroup_v1::through_mount(root, mount, path)
}

impl V2Group {
    /// Creates `<parent>/<name>` and writes the limits into it.
    pub(crate) fn create(parent: &Path, name: &str, limits: &Limits) -> io::Result<V2Group> {
        let dir = parent.join(name);
        fs::create_dir(&dir)?;
        let mem = limits.memory_mb.saturating_mul(1024 * 1024);
        fs::write(dir.join("memory.max"), mem.to_string())?;
        let _ = fs::write(dir.join("memory.swap.max"), "0");
        fs::write(dir.join("pids.max"), limits.pids.to_string())?;
        fs::write(dir.join("cpu.max"), format!("{}00000 100000", limits.cpus))?;
        Ok(V2Group { dir })
    }

    /// Kills every process in the cgroup at once (`cgroup.kill`, Linux ≥ 5.14).
    pub(crate) fn kill(&self) {
        let _ = fs::write(self.dir.join("cgroup.kill"), "1");
    }

    /// True if the kernel's OOM killer fired inside this cgroup.
    pub(crate) fn oom_killed(&self) -> bool {
        fs::read_to_string(self.dir.join("memory.events"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
            })
            .is_some_and(|n| n > 0)
    }

    /// Removes the (empty) cgroup; best effort.
    pub(crate) fn remove(&self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

impl Joiner {
    /// Moves the calling process into every cgroup (`0` is "myself" in v1 and v2).
    /// Async-signal-safe: open, write, close per file, no allocation.
    #[allow(unsafe_code)]
    pub(crate) fn join_self(&self) -> io::Result<()> {
        for procs in &self.procs {
            // SAFETY: `procs` is a valid NUL-terminated path prepared before fork; the buffer
            // is a static byte string; the fd is closed on every path.
            unsafe {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::v2_dir;

    #[test]
    fn detection_does_not_panic_and_agrees_with_the_host() {
        // On a hybrid host (v1 controllers) this must be None; where v2 is delegated, Some.
        let found = super::delegated_parent();
        if let Some(dir) = found {
            assert!(dir.join("cgroup.subtree_control").exists());
        }
    }

    #[test]
    fn the_v2_group_is_found_through_the_mounts_root() {
        let mount = |root: &str| {
            format!("31 23 0:28 {root} /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
        };
        let own = "0::/system.slice/slurmstepd.scope/job_7/step_batch\n";
        let at = |p: &str| Some(PathBuf::from(p));
        assert_eq!(
            v2_dir(&mount("/"), own),
            at("/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_batch")
        );
        // A container's view: the hierarchy from slurmstepd.scope down, mounted as its own.
        assert_eq!(
            v2_dir(&mount("/system.slice/slurmstepd.scope"), own),
            at("/sys/fs/cgroup/job_7/step_batch")
        );
        // A group outside the mount's root, or beside it with a longer name, is not there.
        assert_eq!(v2_dir(&mount("/user.slice"), own), None);
        assert_eq!(v2_dir(&mount("/system.slice/slurmstepd"), own), None);
        // No v2 line in /proc/self/cgroup, or no cgroup2 mount.
        assert_eq!(v2_dir(&mount("/"), "4:memory:/x\n"), None);
        assert_eq!(v2_dir("", own), None);
    }
}

#[cfg(test)]
mod file_tests {
    use super::V2Group;
    use crate::sandbox::spec::Limits;

    #[test]
    fn limits_are_written_in_cgroup_v2_syntax() {
        // A plain directory stands in for the cgroup parent: this checks the files and
        // values, not the kernel (no delegated cgroup v2 on the development host).
        let parent = tempfile::tempdir().expect("tmp");
        let limits = Limits {
            cpus: 2,
            memory_mb: 64,
            pids: 10,
            ..Limits::default()
        };
        let cg = V2Group::create(parent.path(), "job", &limits).expect("create");
        let read = |f: &str| std::fs::read_to_string(cg.dir.join(f)).expect(f);
        assert_eq!(read("memory.max"), "67108864");
        assert_eq!(read("pids.max"), "10");
        assert_eq!(read("cpu.max"), "200000 100000");
        assert!(!cg.oom_killed());
        std::fs::write(cg.dir.join("memory.events"), "low 0\noom 1\noom_kill 1\n").expect("w");
        assert!(cg.oom_killed());
    }
}
