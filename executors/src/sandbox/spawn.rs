//! Starts bwrap for a spec: argv, environment, fds, host user, rlimits and cgroup.
//!
//! This is the only place that creates sandbox processes. Between fork and exec the child
//! (in `pre_exec`, async-signal-safe calls only):
//!
//! 1. marks every fd above 2 close-on-exec (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`), so an
//!    fd the gateway forgot to mark — an audit log, a socket, a secret file — never reaches
//!    bwrap; std's own exec-error pipe keeps working because it is only marked, not closed;
//! 2. joins the sandbox's cgroup when there is one (v2: one `cgroup.procs`; v1: one per
//!    hierarchy);
//! 3. applies the rlimits;
//! 4. becomes `run_as` (groups, gid, then uid) when set;
//! 5. arms `PR_SET_PDEATHSIG` = `SIGKILL` (last: a credential change would clear it) and
//!    checks the parent is still there, so bwrap dies with its parent even before bwrap's own
//!    `--die-with-parent` is armed.
//!
//! bwrap itself gets an empty environment and its own process group, plus two extra fds: the
//! read end of a pipe holding the seccomp filter (`--seccomp`, [`super::seccomp`]) and the
//! write end of an `--info-fd` pipe (each its own number, so nothing is `dup2`ed over an fd
//! std uses). bwrap writes the host pid of the pid-namespace init there; [`read_init_pid`] gets
//! it so the sandbox can be killed through its init even in the instant before bwrap has
//! armed `--die-with-parent`.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::time::Duration;

use serde::Deserialize;
use std::process::{Command, Stdio};

use super::argv::bwrap_argv;
use super::cgroup::JobCgroup;
use super::error::SandboxError;
use super::limits::{self, LimitPlan};
use super::spec::{HostUser, SandboxSpec};
use super::validate::validate;

/// A bwrap command ready to spawn, with the limit plan and cgroup that go with it.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub command: Command,
    pub plan: LimitPlan,
    pub cgroup: Option<JobCgroup>,
    /// Read end of the `--info-fd` pipe; the write end is dropped with `command`'s spawn.
    pub info: std::fs::File,
    info_write: Option<OwnedFd>,
    /// Read end of the `--seccomp` pipe (the filter is in it already); dropped with the spawn.
    filter: Option<OwnedFd>,
}

impl Prepared {
    /// Spawns bwrap and closes our copy of the info pipe's write end.
    pub(crate) fn spawn(&mut self) -> std::io::Result<std::process::Child> {
        let child = self.command.spawn();
        self.info_write = None;
        self.filter = None;
        child
    }
}

/// Who holds a sandbox's CPUs, memory and tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Containment {
    /// This host: a cgroup of the sandbox's own where one is usable, rlimits and the memory
    /// watchdog for what it does not hold.
    Own,
    /// The batch scheduler whose job runs the supervisor: the sandbox stays in the job's
    /// cgroup, where the scheduler's limits, accounting and cancel reach it. What those hold is
    /// recorded, and nothing is added ([`super::scheduler`]).
    Scheduler,
}

/// Validates and prepares one sandbox; `name` labels its cgroup.
pub(crate) fn prepare(
    spec: &SandboxSpec,
    command: &[String],
    stdin: Stdio,
    name: &str,
    containment: Containment,
) -> Result<Prepared, SandboxError> {
    validate(spec, command)?;
    if !spec.bwrap.is_file() {
        return Err(SandboxError::BwrapMissing {
            path: spec.bwrap.clone(),
        });
    }
    let euid = effective_uid();
    if spec.run_as.is_some() && euid != 0 {
        return Err(SandboxError::RunAsNeedsRoot);
    }
    let host_uid = spec.run_as.map_or(euid, |u| u.uid);
    let cgroup = match containment {
        Containment::Own => JobCgroup::create_for(name, &spec.limits),
        Containment::Scheduler => None,
    };
    let join = match cgroup.as_ref().map(JobCgroup::joiner).transpose() {
        Ok(j) => j,
        Err(e) => {
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            return Err(SandboxError::Spawn(e));
        }
    };
    let plan = match containment {
        Containment::Own => limits::plan(
            &spec.limits,
            cgroup.as_ref().map(|c| c.enforced(&spec.limits)).as_ref(),
            host_uid,
            spec.run_as.is_some(),
        ),
        Containment::Scheduler => super::scheduler::plan_in_batch(&spec.limits),
    };

    let (info_read, info_write) = pipe().map_err(SandboxError::Spawn)?;
    let info_fd = info_write.as_raw_fd();
    let filter = seccomp_filter().map_err(SandboxError::Spawn)?;
    let filter_fd = filter.as_raw_fd();
    let argv = bwrap_argv(spec, command);
    #[allow(clippy::disallowed_methods)] // the sandbox executor's spawn: bwrap from a typed spec
    let mut cmd = Command::new(&argv[0]);
    cmd.args(["--info-fd".to_owned(), info_fd.to_string()])
        .args(["--seccomp".to_owned(), filter_fd.to_string()])
        .args(&argv[1..])
        .env_clear()
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);

    let rlimits = plan.rlimits.clone();
    let run_as = spec.run_as;
    let parent = std::process::id() as libc::pid_t;
    #[allow(unsafe_code)]
    // SAFETY: the closure runs between fork and exec; it only calls async-signal-safe
    // syscalls (close_range, open/write/close, setrlimit, setgroups, setgid, setuid) on data
    // prepared before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            cloexec_from_3()?;
            keep_open(info_fd)?;
            keep_open(filter_fd)?;
            if let Some(cg) = &join {
                cg.join_self()?;
            }
            rlimits.apply()?;
            if let Some(user) = run_as {
                become_user(user)?;
            }
            die_with_parent(parent)
        });
    }
    Ok(Prepared {
        command: cmd,
        plan,
        cgroup,
        info: std::fs::File::from(info_read),
        info_write: Some(info_write),
        filter: Some(filter),
    })
}

/// The caller's effective uid.
#[allow(unsafe_code)]
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Marks every fd from 3 up close-on-exec. Async-signal-safe (one syscall).
#[allow(unsafe_code)]
pub(crate) fn cloexec_from_3() -> std::io::Result<()> {
    // CLOSE_RANGE_CLOEXEC (Linux ≥ 5.11).
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range takes plain integers; marking fds close-on-exec frees no memory.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Drops supplementary groups, then sets gid and uid. Async-signal-safe.
#[allow(unsafe_code)]
fn become_user(user: HostUser) -> std::io::Result<()> {
    // SAFETY: setgroups with a count of 0 reads no memory; setgid/setuid take integers.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(user.gid) != 0
            || libc::setuid(user.uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits for bwrap's report and opens a pidfd on the namespace init, checking that it is
/// bwrap's child. The identity is returned for recording.
pub(crate) fn sandbox_init(
    info: &mut std::fs::File,
    bwrap_pid: i32,
) -> Option<(super::proc::PidFd, super::proc::ProcessIdentity)> {
    let pid = read_init_pid(info, Duration::from_secs(10))?;
    let pidfd = super::proc::PidFd::open(pid).ok()?;
    let stat = super::proc::read_stat(pid).ok()?;
    if stat.ppid != bwrap_pid {
        return None;
    }
    let identity = super::proc::ProcessIdentity::of(pid).ok()?;
    Some((pidfd, identity))
}

/// Asks for SIGKILL when the parent (thread) dies; fails if it already died.
/// Async-signal-safe (prctl, getppid).
#[allow(unsafe_code)]
fn die_with_parent(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid take and return integers only.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// Waits (≤ 5 s) until the sandbox would die with bwrap: its init waits for its children.
///
/// bwrap's init arms the namespace's parent-death signal (`--die-with-parent`) only after it
/// has forked the command, just before its first `wait`. A command that already runs is not
/// enough: had bwrap died in that instant, the init would have gone on, orphaned, with the
/// command. So this waits until the init is blocked in `wait4` (`/proc/<pid>/syscall`), or
/// bwrap has exited. Where that file cannot be read, it falls back to the command running.
pub(crate) fn wait_until_armed(child: &mut std::process::Child, init_pid: i32) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < until {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        let armed = match super::proc::blocked_in(init_pid) {
            Ok(syscall) => syscall == Some(libc::SYS_wait4),
            Err(_) => !super::proc::descendants(init_pid).is_empty(),
        };
        if armed {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A pipe's read end holding the sandbox's seccomp filter ([`super::seccomp`]), the write end
/// closed, for bwrap's `--seccomp`.
fn seccomp_filter() -> std::io::Result<OwnedFd> {
    use std::io::Write;
    let (read, write) = pipe()?;
    // A few hundred bytes: within the pipe's buffer, so this cannot block.
    std::fs::File::from(write).write_all(&super::seccomp::program())?;
    Ok(read)
}

/// A close-on-exec pipe: (read, write).
#[allow(unsafe_code)]
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we pass; on success we own both.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Clears close-on-exec on one fd. Async-signal-safe (one fcntl).
#[allow(unsafe_code)]
fn keep_open(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl with integer arguments on an fd that is open in this process.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[derive(Deserialize)]
struct Info {
    #[serde(rename = "child-pid")]
    child_pid: i32,
}

/// Reads bwrap's `--info-fd` document: the host pid of the sandbox's pid-namespace init.
/// `None` if bwrap exited before creating the sandbox or said nothing within `timeout`.
pub(crate) fn read_init_pid(info: &mut std::fs::File, timeout: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + timeout;
    let mut text = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !super::monitor::poll_readable(info.as_raw_fd(), left) {
            return None;
        }
        match info.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
        if let Ok(info) = serde_json::from_slice::<Info>(&text) {
            return Some(info.child_pid);
        }
    }
    serde_json::from_slice::<Info>(&text)
        .ok()
        .map(|i| i.child_pid)
}
