//! Running Slurm's client programs: argv only, a cleared environment, a bounded wait.
//!
//! This is the one place the Slurm executor starts processes. The environment is emptied and
//! only `PATH` and `SLURM_CONF` are set, so `SBATCH_*`, `SLURM_*` and the gateway's own
//! secrets never reach `sbatch` or the job.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::SlurmError;

/// `PATH` given to Slurm's clients unless configured otherwise.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How to reach the cluster: where the clients are and which `slurm.conf` they read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmClientConfig {
    /// Directory holding `sbatch`, `squeue`, …; `None` looks them up in [`Self::path`].
    pub bin_dir: Option<PathBuf>,
    /// `SLURM_CONF` for the clients; `None` lets them use the system's configuration. The
    /// gateway's own `SLURM_CONF` variable is never passed on: only this setting counts.
    pub slurm_conf: Option<PathBuf>,
    /// `PATH` of the clients (and of the job's batch shell, which `--export=NONE` rebuilds).
    pub path: OsString,
    /// Longest wait for one client call; the client is killed after it.
    pub timeout: Duration,
}

impl Default for SlurmClientConfig {
    fn default() -> Self {
        SlurmClientConfig {
            bin_dir: None,
            slurm_conf: None,
            path: OsString::from(DEFAULT_PATH),
            timeout: Duration::from_secs(30),
        }
    }
}

/// What a finished client call printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl SlurmClientConfig {
    /// Runs `program args…` with the cleared environment and waits at most [`Self::timeout`].
    pub fn run(&self, program: &str, args: &[OsString]) -> Result<Output, SlurmError> {
        let exe = match &self.bin_dir {
            Some(dir) => dir.join(program),
            None => PathBuf::from(program),
        };
        #[allow(clippy::disallowed_methods)] // the Slurm executor's spawn: its client commands
        let mut command = Command::new(exe);
        command
            .args(args)
            .env_clear()
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(conf) = &self.slurm_conf {
            command.env("SLURM_CONF", conf);
        }
        let mut child = command.spawn().map_err(|source| SlurmError::Spawn {
            program: program.to_owned(),
            source,
        })?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let success =
            wait_bounded(&mut child, self.timeout).ok_or_else(|| SlurmError::CommandTimedOut {
                program: program.to_owned(),
                timeout: self.timeout,
            })?;
        Ok(Output {
            success,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default().trim().to_owned(),
        })
    }
}

/// Reads a pipe to its end on a thread, so a chatty client cannot fill it and stall.
fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            // A read error leaves what was read so far; the exit status tells the rest.
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits for the child up to `timeout`; kills and reaps it after that (`None`).
fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<bool> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.success()),
            Ok(None) if Instant::now() < deadline => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
