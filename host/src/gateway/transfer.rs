//! Bytes that travel beside a call's arguments, for a door that streams them (WebDAV).
//!
//! A tool call's arguments are JSON, which is right for what a policy judges (the path, the
//! range) and wrong for a 5 GB upload or download: base64 in memory. So a call may carry a
//! [`Transfer`], owned by the door and lent to the call: a PUT lends an [`Upload`] (a reader
//! and the door's size cap) that `write_file`'s run step drains into an atomic temp + rename,
//! with the cap and the quota checked while it streams; a GET lends an empty download slot that
//! `read_file`'s run step fills with the file it opened beneath the instance root, for the door
//! to stream (with ranges) after the call was recorded. The transfer holds std types only: no
//! HTTP, axum or DAV type reaches the core, and the policy input is the arguments alone, as for
//! any call. A run step that is given a transfer it does not use leaves it untouched; the door
//! then sees nothing was opened or read.

use std::io::Read;
use std::sync::Mutex;

use hpcgate_executors::files::OpenedFile;

/// A streamed body lent to one call.
pub enum Transfer {
    /// `write_file`'s content comes from this reader instead of `content`.
    Upload(Mutex<Option<Upload>>),
    /// `read_file` opens the file and leaves it here instead of reading it into the result.
    Download(Mutex<Option<OpenedFile>>),
}

/// What an upload streams from, and how much it may bring.
pub struct Upload {
    pub source: Box<dyn Read + Send>,
    /// The door's cap on one body (`[dav] max_upload_bytes`); the quota's room can lower it.
    pub max_bytes: u64,
    /// The size the client announced (`Content-Length`), to refuse before reading anything.
    pub announced: Option<u64>,
    /// Only create the file (`If-None-Match: *`, a LOCK of a missing path): one made by
    /// anyone while the body arrives is not replaced, and the write fails as existing.
    pub create_only: bool,
}

impl Transfer {
    /// An upload from `source`.
    pub fn upload(upload: Upload) -> Transfer {
        Transfer::Upload(Mutex::new(Some(upload)))
    }

    /// An empty download slot.
    pub fn download() -> Transfer {
        Transfer::Download(Mutex::new(None))
    }

    /// Takes the upload, once (the run step that consumes it).
    pub fn take_upload(&self) -> Option<Upload> {
        match self {
            Transfer::Upload(slot) => slot.lock().map(|mut s| s.take()).unwrap_or(None),
            Transfer::Download(_) => None,
        }
    }

    /// Whether this is a download slot.
    pub fn wants_download(&self) -> bool {
        matches!(self, Transfer::Download(_))
    }

    /// Fills the download slot (the run step that opened the file).
    pub fn deliver(&self, file: OpenedFile) {
        if let Transfer::Download(slot) = self
            && let Ok(mut slot) = slot.lock()
        {
            *slot = Some(file);
        }
    }

    /// The opened file, for the door (after the call).
    pub fn take_download(&self) -> Option<OpenedFile> {
        match self {
            Transfer::Download(slot) => slot.lock().map(|mut s| s.take()).unwrap_or(None),
            Transfer::Upload(_) => None,
        }
    }
}
