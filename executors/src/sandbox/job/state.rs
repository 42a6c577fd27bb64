//! The job directory's files and the typed job state, written atomically.
//!
//! A job directory is host-side and never mounted into any sandbox:
//!
//! | file | written by | content |
//! |---|---|---|
//! | `request.json` | `spawn_job` | the spec (environment already resolved) and the argv |
//! | `state.json` | the supervisor | [`JobState`], replaced atomically (temp + rename) |
//! | `stdout`, `stderr` | the supervisor | the job's output, created `O_EXCL \| O_NOFOLLOW` |
//! | `cancel` | `cancel_job` | present once a cancel was requested |
//!
//! Every open here refuses symlinks, so even a job directory tampered with cannot make the
//! host read or write through a link.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::sandbox::error::SandboxError;
use crate::sandbox::limits::EnforcedLimits;
use crate::sandbox::monitor::{EndReason, ExitInfo};
use crate::sandbox::proc::ProcessIdentity;
use crate::sandbox::spec::SandboxSpec;

pub(crate) const REQUEST: &str = "request.json";
pub(crate) const STATE: &str = "state.json";
pub(crate) const STDOUT: &str = "stdout";
pub(crate) const STDERR: &str = "stderr";
/// Present once a cancel was requested (`cancel_job`, `request_cancel`).
pub const CANCEL: &str = "cancel";

/// Whether a job is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    Running,
    Finished,
}

/// The recorded state of a supervised job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobState {
    pub phase: JobPhase,
    /// Unix time in milliseconds when the supervisor started.
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    /// The supervisor process: re-attach and liveness go through this identity.
    pub supervisor: ProcessIdentity,
    /// The outer bwrap process, once started.
    pub sandbox: Option<ProcessIdentity>,
    /// The sandbox's pid-namespace init (bwrap's child): killing it ends the whole sandbox.
    pub sandbox_init: Option<ProcessIdentity>,
    pub exit: Option<ExitInfo>,
    /// Set when `phase` is `finished`.
    pub reason: Option<EndReason>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub output_truncated: bool,
    /// Which mechanism enforced each limit (absent if the sandbox never started).
    pub limits: Option<EnforcedLimits>,
    /// A human-readable note (start failure, lost supervisor).
    pub message: Option<String>,
}

/// What `spawn_job` hands to the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobRequest {
    pub spec: SandboxSpec,
    pub command: Vec<String>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Opens an existing file in the job directory for reading, never through a symlink.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Creates a new file (it must not exist, symlinks included), mode 0600.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Writes `value` as JSON to `<dir>/<name>` atomically: a fresh temp file, fsync, rename.
pub(crate) fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut file = create_new(&tmp)?;
    file.write_all(&serde_json::to_vec_pretty(value).map_err(io::Error::other)?)?;
    file.sync_all()?;
    fs::rename(&tmp, dir.join(name))
}

pub(crate) fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<T, SandboxError> {
    let path = dir.join(name);
    let mut text = Vec::new();
    match open_nofollow(&path).and_then(|mut f| f.read_to_end(&mut text)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SandboxError::NotAJob {
                path: dir.to_owned(),
            });
        }
        Err(e) => return Err(SandboxError::Io { path, source: e }),
    }
    serde_json::from_slice(&text).map_err(|source| SandboxError::StateCorrupt { path, source })
}

pub(crate) fn read_state(dir: &Path) -> Result<JobState, SandboxError> {
    read_json(dir, STATE)
}

pub(crate) fn write_state(dir: &Path, state: &JobState) -> io::Result<()> {
    write_json(dir, STATE, state)
}
