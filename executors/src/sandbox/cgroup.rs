//! cgroup v2 limits for one sandbox, when the gateway has a delegated cgroup.
//!
//! Detection is strict: the unified hierarchy must be mounted (found in
//! `/proc/self/mountinfo`, wherever it is — `/sys/fs/cgroup` or a hybrid
//! `/sys/fs/cgroup/unified`), our own cgroup (`0::<path>` in `/proc/self/cgroup`) must offer
//! `cpu`, `memory` and `pids` in `cgroup.subtree_control`, and we must be able to create a
//! child there. On a hybrid host where v1 owns the controllers this fails and the runners fall
//! back to rlimits. Each sandbox gets its own child cgroup; the child process joins it in
//! `pre_exec` (writing `0` to `cgroup.procs`) before bwrap starts, so every sandbox process is
//! inside from the first instruction, and `cgroup.kill` ends all of them at once.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::spec::Limits;

/// A cgroup created for one sandbox.
#[derive(Debug)]
pub(crate) struct JobCgroup {
    pub dir: PathBuf,
    /// `<dir>/cgroup.procs`, prepared for use after fork.
    pub procs: CString,
}

/// The delegated parent cgroup, detected once per process.
pub(crate) fn delegated_parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT.get_or_init(detect).as_deref()
}

fn detect() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2").then(|| pre.split(' ').nth(4))?
    })?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = Path::new(mount).join(rel.trim_start_matches('/'));
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

impl JobCgroup {
    /// Creates `<parent>/<name>` and writes the limits into it.
    pub(crate) fn create(parent: &Path, name: &str, limits: &Limits) -> io::Result<JobCgroup> {
        let dir = parent.join(name);
        fs::create_dir(&dir)?;
        let mem = limits.memory_mb.saturating_mul(1024 * 1024);
        fs::write(dir.join("memory.max"), mem.to_string())?;
        let _ = fs::write(dir.join("memory.swap.max"), "0");
        fs::write(dir.join("pids.max"), limits.pids.to_string())?;
        fs::write(dir.join("cpu.max"), format!("{}00000 100000", limits.cpus))?;
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in cgroup path"))?;
        Ok(JobCgroup { dir, procs })
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

    /// Moves the calling process into the cgroup. Async-signal-safe: open, write, close.
    #[allow(unsafe_code)]
    pub(crate) fn join_self(&self) -> io::Result<()> {
        // SAFETY: `procs` is a valid NUL-terminated path prepared before fork; the buffer is a
        // static byte string; the fd is closed on every path.
        unsafe {
            let fd = libc::open(self.procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn detection_does_not_panic_and_agrees_with_the_host() {
        // On a hybrid host (v1 controllers) this must be None; where v2 is delegated, Some.
        let found = super::delegated_parent();
        if let Some(dir) = found {
            assert!(dir.join("cgroup.subtree_control").exists());
        }
    }
}

#[cfg(test)]
mod file_tests {
    use super::JobCgroup;
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
        let cg = JobCgroup::create(parent.path(), "job", &limits).expect("create");
        let read = |f: &str| std::fs::read_to_string(cg.dir.join(f)).expect(f);
        assert_eq!(read("memory.max"), "67108864");
        assert_eq!(read("pids.max"), "10");
        assert_eq!(read("cpu.max"), "200000 100000");
        assert!(!cg.oom_killed());
        std::fs::write(cg.dir.join("memory.events"), "low 0\noom 1\noom_kill 1\n").expect("w");
        assert!(cg.oom_killed());
    }
}
