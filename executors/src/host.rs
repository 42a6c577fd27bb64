//! Admin-defined host commands (`host_exec`): a fixed argv from the gateway's configuration,
//! run on the host itself — outside every instance and sandbox, so this executor's authority is
//! ambient, and its entry point says so ([`run_ambient`]). Never a command line from input: the
//! argv comes whole from the admin's configuration.
//!
//! The command gets an empty environment (plus a fixed `PATH`), no stdin, `/` as its directory,
//! its own process group (killed whole when the command ends or at the timeout: its children
//! cannot outlive it), and its output is capped (the rest is counted, not kept). A descendant
//! that left the group (`setsid`) and holds the output pipes open does not hold the call: the
//! output is read until the timeout at the latest.

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    /// `argv[0]` is an absolute path.
    pub argv: Vec<String>,
    /// Wall time after which the whole process group is killed.
    pub timeout: Duration,
    /// Most bytes of stdout and of stderr kept.
    pub max_output: usize,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRun {
    /// `None` when killed by a signal (the timeout included).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
    /// The first [`HostCommand::max_output`] bytes, lossily decoded.
    pub stdout: String,
    pub stderr: String,
    /// All the bytes the command wrote to stdout.
    pub stdout_bytes: u64,
}

/// Runs `command` on the host (see the module doc). `Err` only when it could not be started
/// or waited for.
pub fn run_ambient(command: &HostCommand) -> io::Result<HostRun> {
    let Some((program, arguments)) = command.argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty argv"));
    };
    let started = Instant::now();
    #[allow(clippy::disallowed_methods)] // the host-command executor's one spawn
    let mut child = Command::new(program)
        .args(arguments)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stdout = drain_capped(child.stdout.take(), command.max_output, stop.clone());
    let stderr = drain_capped(child.stderr.take(), command.max_output, stop.clone());
    let deadline = started + command.timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            // The whole group: a command's own children must not outlive it.
            let _ = rustix::process::kill_process_group(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::KILL,
            );
            break child.wait()?;
        }
        thread::sleep(Duration::from_millis(5));
    };
    // What the command started in its group ends with it.
    let _ = rustix::process::kill_process_group(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::KILL,
    );
    // The pipes close then, unless something that left the group holds them: read what is
    // in them for a second more at most, and never past the timeout.
    let until = deadline.min(Instant::now() + Duration::from_secs(1));
    while !(stdout.is_finished() && stderr.is_finished()) {
        if Instant::now() >= until {
            stop.store(true, Ordering::SeqCst);
        }
        thread::sleep(Duration::from_millis(5));
    }
    let (stdout, stdout_bytes) = stdout.join().unwrap_or_default();
    let (stderr, _) = stderr.join().unwrap_or_default();
    Ok(HostRun {
        exit_code: status.code(),
        timed_out,
        elapsed: started.elapsed(),
        stdout,
        stderr,
        stdout_bytes,
    })
}

/// Reads a pipe to its end, or until `stop` is set while it has nothing to read, keeping the
/// first `max` bytes.
fn drain_capped(
    pipe: Option<impl Read + AsFd + Send + 'static>,
    max: usize,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(String, u64)> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let mut total = 0u64;
        if let Some(mut pipe) = pipe {
            let mut buf = [0u8; 8192];
            loop {
                if !readable(&pipe, Duration::from_millis(20)) {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    continue;
                }
                let Ok(n) = pipe.read(&mut buf) else { break };
                if n == 0 {
                    break;
                }
                total += n as u64;
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        (String::from_utf8_lossy(&kept).into_owned(), total)
    })
}

/// Whether `fd` has something to read (or its end: EOF, an error) within `wait`.
#[allow(unsafe_code)]
fn readable(fd: &impl AsFd, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd, owned here, for an fd that stays open for the call.
    unsafe { libc::poll(&mut poll, 1, ms) > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_s: u64) -> HostCommand {
        HostCommand {
            argv: ["/bin/sh", "-c", script].map(str::to_owned).to_vec(),
            timeout: Duration::from_secs(timeout_s),
            max_output: 1024,
        }
    }

    /// Whether a process whose command line holds `needle` is still alive.
    fn running(needle: &str) -> bool {
        let procs = std::fs::read_dir("/proc").unwrap().flatten();
        procs
            .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
            .any(|cmdline| {
                String::from_utf8_lossy(&cmdline)
                    .replace('\0', " ")
                    .contains(needle)
            })
    }

    /// A child left in the background holds the output pipes open: the call ends with the
    /// command all the same, and the child with it.
    #[test]
    fn a_background_child_neither_outlives_the_command_nor_holds_the_call() {
        let started = Instant::now();
        let ran = run_ambient(&sh("sleep 47.25 & echo started", 20)).unwrap();
        assert_eq!((ran.exit_code, ran.timed_out), (Some(0), false));
        assert_eq!(ran.stdout, "started\n");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(!running("sleep 47.25"), "the background child was killed");
    }

    /// One that left the group (`setsid`) cannot be killed with it, but does not hold the call.
    #[test]
    fn a_child_that_left_the_group_does_not_hold_the_call() {
        let started = Instant::now();
        let ran = run_ambient(&sh("setsid sleep 10 & echo started", 20)).unwrap();
        assert_eq!(ran.stdout, "started\n");
        // A second of grace after the command's end; the child would hold it 10.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
