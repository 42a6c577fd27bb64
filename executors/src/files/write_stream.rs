//! `write_stream`: an atomic replace whose content comes from a reader (a WebDAV PUT body),
//! never held whole in memory.
//!
//! As `write_file`'s replace: the bytes go to a fresh temporary file beside the target, which is
//! fsynced and renamed over the name only once the source has ended within the cap; a symlink,
//! directory, special or hard-linked file at the target is refused before anything is read. The
//! cap is checked while streaming: the reader is cut one byte past `max_bytes`, so an endless or
//! oversized body fails with [`FileError::TooLarge`] after at most `max_bytes + 1` bytes, and the
//! temporary file is removed — nothing is left behind.

use std::io::{self, Read};

use super::atomic::place_atomically;
use super::error::FileError;
use super::path::SandboxPath;
use super::roots::InstanceRoots;
use super::write::{WriteResult, existing_file};

/// A request to replace `path` with what a reader yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamWriteRequest {
    /// Sandbox-view path.
    pub path: String,
    /// Most bytes accepted; more fails the write.
    pub max_bytes: u64,
    /// Create missing parent directories.
    pub create_dirs: bool,
    /// Only create the file: refuse with `AlreadyExists` if the name is taken, also when it is
    /// taken while the body arrives (the file is put in place with no replacing).
    pub create_new: bool,
}

/// Writes a regular file from `source` beneath the instance roots, atomically.
pub fn write_stream(
    roots: &InstanceRoots,
    req: &StreamWriteRequest,
    source: &mut dyn Read,
) -> Result<WriteResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    path.check_creatable()?;
    if req.create_dirs {
        super::write::make_parents(roots, &path)?;
    }
    let (dir, name) = roots.open_parent(&path, "written")?;
    let existing = existing_file(&dir, name, &path)?;
    if req.create_new && existing.is_some() {
        return Err(FileError::AlreadyExists {
            path: path.to_string(),
        });
    }
    let mut written = 0u64;
    let mut too_large = false;
    let placed = place_atomically(&dir, name, req.create_new, |tmp| {
        written = io::copy(&mut source.take(req.max_bytes.saturating_add(1)), tmp)?;
        if written > req.max_bytes {
            too_large = true;
            return Err(io::Error::other("over the cap"));
        }
        match &existing {
            Some(perm) => tmp.set_permissions(perm.clone()),
            None => Ok(()),
        }
    });
    if too_large {
        return Err(FileError::TooLarge {
            path: path.to_string(),
            size: written,
            limit: req.max_bytes,
            hint: "nothing was written; send a smaller file or ask the admin for more room",
        });
    }
    placed.map_err(|e| FileError::from_io("write", &path, e))?;
    Ok(WriteResult {
        path: path.to_string(),
        bytes_written: written,
        size: written,
        created: existing.is_none(),
    })
}
