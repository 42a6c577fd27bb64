//! `tail`: the last bytes of a job's stdout or stderr, read without following symlinks.
//!
//! Output files live in the host-side job directory that no sandbox mounts, so a job cannot
//! plant a link there; the open is `O_NOFOLLOW` and the result must be a regular file anyway,
//! so a tampered directory makes `tail` refuse, never read another file.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::state::{STDERR, STDOUT, open_nofollow};
use crate::sandbox::error::SandboxError;

/// One of a job's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// The end of an output stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tail {
    pub data: Vec<u8>,
    /// Size of the whole stream so far.
    pub total_bytes: u64,
    /// True if `data` starts after the beginning of the stream.
    pub truncated: bool,
}

/// Reads at most the last `max_bytes` of `stream`.
pub fn tail(job_dir: &Path, stream: OutputStream, max_bytes: u64) -> Result<Tail, SandboxError> {
    let path = job_dir.join(match stream {
        OutputStream::Stdout => STDOUT,
        OutputStream::Stderr => STDERR,
    });
    let mut file = match open_nofollow(&path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(SandboxError::OutputNotRegular { path });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SandboxError::NotAJob {
                path: job_dir.to_owned(),
            });
        }
        Err(e) => return Err(SandboxError::Io { path, source: e }),
    };
    let meta = file.metadata().map_err(SandboxError::io(&path))?;
    if !meta.is_file() {
        return Err(SandboxError::OutputNotRegular { path });
    }
    let total = meta.len();
    let start = total.saturating_sub(max_bytes);
    file.seek(SeekFrom::Start(start))
        .map_err(SandboxError::io(&path))?;
    let mut data = Vec::new();
    file.take(max_bytes)
        .read_to_end(&mut data)
        .map_err(SandboxError::io(&path))?;
    Ok(Tail {
        data,
        total_bytes: total,
        truncated: start > 0,
    })
}
