//! Watches one running sandbox until it ends: output, wall time, memory, cancellation.
//!
//! Shared by [`super::run_sync`] and the job supervisor, so both enforce the same limits the
//! same way. One thread, one `poll(2)` over the two output pipes and a pidfd of bwrap (so a
//! finished sandbox is noticed at once, not at the next tick); every 50 ms at most it also
//! checks the deadline, the cancel request and, without a memory cgroup, the resident memory of the
//! sandbox tree.
//!
//! Killing a sandbox means killing all of it: `SIGKILL` to bwrap, whose `--die-with-parent`
//! makes the kernel kill the pid-namespace init and with it every process in the namespace,
//! daemons and double forks included (plus the cgroup's kill when there is one: `cgroup.kill`
//! in v2, freeze-kill-thaw in v1).
//!
//! A sandbox stopped at its wall time or by a cancel is first asked to end, as Slurm does:
//! `SIGTERM` to each of its processes, then the kill once the grace ([`Watch::stop_grace`])
//! is over, or at once if it goes over its memory or output cap meanwhile. One that goes over
//! its memory or output cap is killed at once. One whose batch scheduler ends the job
//! ([`Watch::terminated`]) is stopped the same way.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::cgroup::JobCgroup;
use super::proc::{PidFd, ProcessIdentity, descendants, page_size, read_stat};

/// Why a sandbox run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The command exited on its own (any exit code).
    Exited,
    /// The wall time ran out; the whole sandbox was killed.
    Timeout,
    /// Cancelled by request; the whole sandbox was killed.
    Cancelled,
    /// Over its memory limit; the whole sandbox was killed.
    Oom,
    /// Wrote more than its output cap; the whole sandbox was killed.
    OutputCap,
    /// The supervisor vanished without recording an end (e.g. killed, machine rebooted).
    Lost,
    /// The sandbox could not be started; the job state's message says why.
    StartFailed,
}

/// How the sandbox process ended. bwrap passes the command's exit code through; a command
/// killed by a signal inside the sandbox shows as code 128 + signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitInfo {
    Code(i32),
    Signal(i32),
}

impl From<ExitStatus> for ExitInfo {
    fn from(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitInfo::Code(code),
            (None, Some(sig)) => ExitInfo::Signal(sig),
            (None, None) => ExitInfo::Code(-1),
        }
    }
}

/// Where one output stream goes.
pub(crate) trait Sink {
    fn put(&mut self, data: &[u8]) -> io::Result<()>;
}

impl Sink for Vec<u8> {
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        self.extend_from_slice(data);
        Ok(())
    }
}

impl Sink for std::fs::File {
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        self.write_all(data)
    }
}

/// What the monitor watches besides the process.
pub(crate) struct Watch<'a> {
    pub wall_time: Duration,
    /// Between `SIGTERM` and the kill, when stopped at the wall time or by a cancel.
    pub stop_grace: Duration,
    pub output_bytes: u64,
    pub watch_memory_bytes: Option<u64>,
    pub cgroup: Option<&'a JobCgroup>,
    /// The sandbox's pid-namespace init: killing it ends every process of the sandbox.
    pub init: Option<&'a (PidFd, ProcessIdentity)>,
    pub cancel_requested: &'a dyn Fn() -> bool,
    /// Whether the batch scheduler asked the job to end (its `SIGTERM` to the supervisor):
    /// the sandbox is stopped as for a cancel, and at once if a cancel was stopping it.
    pub terminated: &'a dyn Fn() -> bool,
    pub started: Instant,
}

/// How a monitored run ended.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub exit: ExitInfo,
    pub reason: EndReason,
    pub bytes: [u64; 2],
    pub truncated: [bool; 2],
    pub duration: Duration,
}

const TICK: Duration = Duration::from_millis(50);
const DRAIN: Duration = Duration::from_secs(2);

/// Runs the watch loop until bwrap has exited and its output is drained. If watching fails
/// (e.g. the output disk is full) the sandbox is killed and reaped before the error returns:
/// nothing runs unwatched.
pub(crate) fn monitor(
    child: &mut Child,
    sinks: [&mut dyn Sink; 2],
    w: &Watch<'_>,
) -> io::Result<Outcome> {
    let outcome = watch(child, sinks, w);
    if outcome.is_err() {
        kill(child, w);
        let _ = child.wait();
    }
    outcome
}

fn watch(child: &mut Child, sinks: [&mut dyn Sink; 2], w: &Watch<'_>) -> io::Result<Outcome> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut pipes: [Option<Box<dyn ReadFd>>; 2] = [
        stdout.map(|p| Box::new(p) as Box<dyn ReadFd>),
        stderr.map(|p| Box::new(p) as Box<dyn ReadFd>),
    ];
    for p in pipes.iter().flatten() {
        set_nonblocking(p.raw())?;
    }
    // No pidfd if bwrap already exited and was reaped (e.g. by the start-up wait): its
    // status is cached in `child` and the first `try_wait` below returns it.
    let pidfd = match PidFd::open(child.id() as i32) {
        Ok(fd) => Some(fd),
        Err(_) if child.try_wait()?.is_some() => None,
        Err(e) => return Err(e),
    };
    let deadline = w.started + w.wall_time;
    let mut written = 0u64;
    let mut bytes = [0u64; 2];
    let mut truncated = [false; 2];
    // Why the sandbox is being stopped; whether it was killed (else it is in its grace,
    // which ends at `grace_ends`).
    let mut killed: Option<EndReason> = None;
    let mut hard_killed = false;
    let mut grace_ends: Option<Instant> = None;
    let mut status: Option<ExitStatus> = None;
    let mut exited_at: Option<Instant> = None;
    // The first memory check comes one tick in: a short run never pays for a /proc scan.
    let mut last_mem = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];

    loop {
        let now = Instant::now();
        // Past the deadline (stopping, or stopped) a tick, not a busy loop.
        let timeout = if status.is_some() || killed.is_some() {
            TICK
        } else {
            deadline.saturating_duration_since(now).min(TICK)
        };
        let mut fds: Vec<libc::pollfd> = pipes.iter().flatten().map(|p| pollfd(p.raw())).collect();
        if status.is_none()
            && let Some(pidfd) = &pidfd
        {
            fds.push(pollfd(pidfd.as_raw()));
        }
        poll(&mut fds, timeout)?;

        for (i, slot) in pipes.iter_mut().enumerate() {
            let Some(pipe) = slot else { continue };
            // Bounded per round so one flooding stream cannot starve the checks below.
            for _ in 0..16 {
                match pipe.read(&mut buf) {
                    Ok(0) => {
                        *slot = None;
                        break;
                    }
                    Ok(n) => {
                        let room = w.output_bytes.saturating_sub(written);
                        let keep = (n as u64).min(room) as usize;
                        if keep > 0 {
                            sinks[i].put(&buf[..keep])?;
                            written += keep as u64;
                            bytes[i] += keep as u64;
                        }
                        if keep < n {
                            truncated[i] = true;
                            if !hard_killed && status.is_none() {
                                killed.get_or_insert(EndReason::OutputCap);
                                hard_killed = true;
                                kill(child, w);
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        }

        if status.is_none()
            && let Some(st) = child.try_wait()?
        {
            status = Some(st);
            exited_at = Some(Instant::now());
        }
        if let Some(at) = exited_at {
            if pipes.iter().all(Option::is_none) {
                break;
            }
            if at.elapsed() >= DRAIN {
                // A process outlived the sandbox's end (one in uninterruptible sleep when the
                // namespace was killed) and holds a stream: what it writes is not read.
                for (cut, pipe) in truncated.iter_mut().zip(&pipes) {
                    *cut |= pipe.is_some();
                }
                break;
            }
            continue;
        }
        if hard_killed {
            continue;
        }
        let now = Instant::now();
        let over_memory = w.watch_memory_bytes.is_some_and(|limit| {
            now.duration_since(last_mem) >= TICK && {
                last_mem = now;
                let rss: u64 = descendants(child.id() as i32)
                    .iter()
                    .map(|(_, s)| s.rss_pages)
                    .sum::<u64>()
                    * page_size();
                rss > limit
            }
        });
        if let Some(ends) = grace_ends {
            // Asked to end: killed when its grace is over, or at once over its memory, or
            // when the scheduler ends a job a cancel was already stopping (a second cancel).
            let again = killed == Some(EndReason::Cancelled) && (w.terminated)();
            if now >= ends || over_memory || again {
                hard_killed = true;
                kill(child, w);
            }
            continue;
        }
        let stop = if now >= deadline {
            Some(EndReason::Timeout)
        } else if (w.cancel_requested)() {
            Some(EndReason::Cancelled)
        } else if over_memory {
            Some(EndReason::Oom)
        } else {
            None
        };
        if stop.is_none() && (w.terminated)() {
            // The scheduler's end of the job (`scancel`, a preemption): asked to end with its
            // grace as for a cancel, with no reason of the sandbox's own: the scheduler's
            // word says why.
            grace_ends = Some(now + w.stop_grace);
            terminate(child, w);
            continue;
        }
        if let Some(reason) = stop {
            killed = Some(reason);
            if reason == EndReason::Oom || w.stop_grace.is_zero() {
                hard_killed = true;
                kill(child, w);
            } else {
                grace_ends = Some(now + w.stop_grace);
                terminate(child, w);
            }
        }
    }

    let status = status.unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL));
    let exit = ExitInfo::from(status);
    let reason = match killed {
        Some(r) => r,
        None if w.cgroup.is_some_and(JobCgroup::oom_killed) => EndReason::Oom,
        // Killed from outside after a cancel request (bwrap itself, or its init: then bwrap
        // reports 128 + SIGKILL).
        None if (exit == ExitInfo::Signal(libc::SIGKILL)
            || exit == ExitInfo::Code(128 + libc::SIGKILL))
            && (w.cancel_requested)() =>
        {
            EndReason::Cancelled
        }
        None => EndReason::Exited,
    };
    if let Some(cg) = w.cgroup {
        cg.kill();
    }
    Ok(Outcome {
        exit,
        reason,
        bytes,
        truncated,
        duration: w.started.elapsed(),
    })
}

/// Asks every process of the sandbox to end: `SIGTERM` to each one below its pid-namespace
/// init (below bwrap when the init is not known; the init itself ignores it), each through a
/// pidfd opened before its start time is checked again, so a recycled pid is never signalled.
fn terminate(child: &Child, w: &Watch<'_>) {
    let root = w.init.map_or(child.id() as i32, |(_, id)| id.pid);
    for (pid, stat) in descendants(root) {
        if let Ok(fd) = PidFd::open(pid)
            && read_stat(pid).is_ok_and(|now| now.start_time == stat.start_time)
        {
            // And SIGCONT, as Slurm sends: a stopped process would not act on it.
            let _ = fd.signal(libc::SIGTERM);
            let _ = fd.signal(libc::SIGCONT);
        }
    }
}

fn kill(child: &mut Child, w: &Watch<'_>) {
    if let Some(cg) = w.cgroup {
        cg.kill();
    }
    // Killing the pid-namespace init makes the kernel kill every process in the namespace;
    // bwrap's --die-with-parent would do the same once armed, the direct kill covers the
    // instant before.
    if let Some((init, _)) = w.init {
        let _ = init.signal(libc::SIGKILL);
    }
    let _ = child.kill();
}

trait ReadFd: Read {
    fn raw(&self) -> RawFd;
}

impl<T: Read + AsRawFd> ReadFd for T {
    fn raw(&self) -> RawFd {
        self.as_raw_fd()
    }
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[allow(unsafe_code)]
fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<()> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the call's duration.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Waits until `fd` is readable (for a pidfd: the process exited); false on timeout.
pub(crate) fn poll_readable(fd: RawFd, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let mut fds = [pollfd(fd)];
        if poll(&mut fds, deadline.saturating_duration_since(Instant::now())).is_err() {
            return false;
        }
        if fds[0].revents != 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

#[allow(unsafe_code)]
fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own, with integer arguments only.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// Output a process still holds when the drain after the run's end is over is not read,
    /// and the outcome says so (before, the output looked whole).
    #[test]
    fn a_stream_held_past_the_drain_is_marked_cut() {
        #[allow(clippy::disallowed_methods)] // a test: a child whose stream outlives it
        let spawned = std::process::Command::new("/bin/sh")
            .args(["-c", "echo before; (sleep 4; echo after) &"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = spawned.unwrap();
        let never = || false;
        let w = Watch {
            wall_time: Duration::from_secs(60),
            stop_grace: Duration::from_secs(1),
            output_bytes: 1 << 20,
            watch_memory_bytes: None,
            cgroup: None,
            init: None,
            cancel_requested: &never,
            terminated: &never,
            started: Instant::now(),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let outcome = monitor(&mut child, [&mut out, &mut err], &w).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "before\n");
        assert_eq!(outcome.reason, EndReason::Exited);
        assert_eq!(outcome.truncated, [true, true]);
    }
}
