//! Starts bwrap for a spec: argv, environment, fds, host user, rlimits and cgroup.
//!
//! This is the only place that creates sandbox processes. Between fork and exec the child
//! (in `pre_exec`, async-signal-safe calls only):
//!
//! 1. marks every fd above 2 close-on-exec (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`), so an
//!    fd the gateway forgot to mark — an audit log, a socket, a secret file — never reaches
//!    bwrap; std's own exec-error pipe keeps working because it is only marked, not closed;
//! 2. joins the sandbox's cgroup when there is one;
//! 3. applies the rlimits;
//! 4. becomes `run_as` (groups, gid, then uid) when set.
//!
//! bwrap itself gets an empty environment and its own process group.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use super::argv::bwrap_argv;
use super::cgroup::{self, JobCgroup};
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
}

/// Validates and prepares one sandbox; `name` labels its cgroup.
pub(crate) fn prepare(
    spec: &SandboxSpec,
    command: &[String],
    stdin: Stdio,
    name: &str,
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
    let cgroup = cgroup::delegated_parent()
        .and_then(|parent| JobCgroup::create(parent, name, &spec.limits).ok());
    let plan = limits::plan(
        &spec.limits,
        cgroup.as_ref().map(|c| c.dir.to_string_lossy()).as_deref(),
        host_uid,
    );

    let argv = bwrap_argv(spec, command);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);

    let rlimits = plan.rlimits.clone();
    let join = cgroup.as_ref().map(|c| JobCgroup {
        dir: c.dir.clone(),
        procs: c.procs.clone(),
    });
    let run_as = spec.run_as;
    #[allow(unsafe_code)]
    // SAFETY: the closure runs between fork and exec; it only calls async-signal-safe
    // syscalls (close_range, open/write/close, setrlimit, setgroups, setgid, setuid) on data
    // prepared before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            cloexec_from_3()?;
            if let Some(cg) = &join {
                cg.join_self()?;
            }
            rlimits.apply()?;
            if let Some(user) = run_as {
                become_user(user)?;
            }
            Ok(())
        });
    }
    Ok(Prepared {
        command: cmd,
        plan,
        cgroup,
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
