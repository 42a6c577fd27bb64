//! Admin-defined host commands (`host_exec`): a fixed argv from the gateway's configuration,
//! run on the host itself — outside every instance and sandbox, so this executor's authority is
//! ambient, and its entry point says so ([`run_ambient`]). Never a command line from input: the
//! argv comes whole from the admin's configuration.
//!
//! The command gets an empty environment (plus a fixed `PATH`), no stdin, `/` as its directory,
//! its own process group (killed whole at the timeout: its children cannot outlive it), and its
//! output is capped (the rest is counted, not kept).

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
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
    let stdout = drain_capped(child.stdout.take(), command.max_output);
    let stderr = drain_capped(child.stderr.take(), command.max_output);
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

/// Reads a pipe to its end, keeping the first `max` bytes.
fn drain_capped(
    pipe: Option<impl Read + Send + 'static>,
    max: usize,
) -> thread::JoinHandle<(String, u64)> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let mut total = 0u64;
        if let Some(mut pipe) = pipe {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
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
