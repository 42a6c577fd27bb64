//! `write_file`: atomic replace, create-new, or append.
//!
//! Replace and create-new never write into an existing inode: the data goes to a fresh temporary
//! file (`O_CREAT | O_EXCL`) in the target's directory, is fsynced, and is renamed over the name
//! (create-new uses `renameat2(RENAME_NOREPLACE)`), then the directory is fsynced (see
//! [`super::atomic`]). A rename
//! replaces a directory entry and never follows it, so swapping the target for a symlink at any
//! moment cannot make us write through the link. The parent directory is opened once (beneath
//! the root) and every step uses that pinned handle.
//!
//! Refused up front: writing to a directory, a FIFO/device/socket, a symlink (write to the path
//! it points to instead: replacing the link by a file would surprise, following it is not done
//! for writes), and a regular file with more than one hard link. Append opens the file with
//! `O_NOFOLLOW | O_NONBLOCK` and re-checks type and link count on the descriptor before writing.
//! Append is not atomic: it adds bytes to the existing file in place.

use std::io::Write;

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};

use super::atomic::place_atomically;
use super::entry::{nonblocking_flags, require_regular};
use super::error::FileError;
use super::limits::FileLimits;
use super::path::SandboxPath;
use super::roots::InstanceRoots;

/// How the data meets an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Atomically replace the file (or create it).
    #[default]
    Replace,
    /// Create the file; refuse with `AlreadyExists` if the name is taken. Atomic.
    CreateNew,
    /// Append to the file (or create it). Not atomic.
    Append,
}

/// A request to write `data` to `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest {
    /// Sandbox-view path.
    pub path: String,
    pub data: Vec<u8>,
    pub mode: WriteMode,
    /// Create missing parent directories.
    pub create_dirs: bool,
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WriteResult {
    /// Canonical sandbox-view path, escaped.
    pub path: String,
    pub bytes_written: u64,
    /// Size of the file after the write.
    pub size: u64,
    /// True if the file did not exist before.
    pub created: bool,
}

/// Writes a regular file beneath the instance roots.
pub fn write_file(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &WriteRequest,
) -> Result<WriteResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    path.check_creatable()?;
    let len = req.data.len() as u64;
    if len > limits.max_write_bytes {
        return Err(FileError::TooLarge {
            path: path.to_string(),
            size: len,
            limit: limits.max_write_bytes,
            hint: "split the content and append the rest with mode append",
        });
    }
    if req.create_dirs {
        make_parents(roots, &path)?;
    }
    let (dir, name) = roots.open_parent(&path, "written")?;
    let existing = existing_file(&dir, name, &path)?;
    match req.mode {
        WriteMode::Append => append(&dir, name, &path, &req.data, existing.is_none()),
        WriteMode::CreateNew if existing.is_some() => Err(FileError::AlreadyExists {
            path: path.to_string(),
        }),
        mode => replace(&dir, name, &path, &req.data, mode, existing),
    }
}

/// Checks what is at `name` now (without following it); returns its permissions if it is a
/// writable regular file, `None` if nothing is there. Only the permission bits are kept for the
/// file that replaces it: never set-user-id, set-group-id or sticky, whoever set them.
pub(crate) fn existing_file(
    dir: &Dir,
    name: &str,
    path: &SandboxPath,
) -> Result<Option<Permissions>, FileError> {
    match dir.symlink_metadata(name) {
        Ok(md) => {
            require_regular(path, &md, false)?;
            Ok(Some(Permissions::from_mode(
                md.permissions().mode() & 0o777,
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::from_io("inspect", path, e)),
    }
}

fn append(
    dir: &Dir,
    name: &str,
    path: &SandboxPath,
    data: &[u8],
    created: bool,
) -> Result<WriteResult, FileError> {
    let io_err = |e| FileError::from_io("append to", path, e);
    let mut opts = OpenOptions::new();
    opts.append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(nonblocking_flags())
        .follow(FollowSymlinks::No);
    let mut file = dir.open_with(name, &opts).map_err(io_err)?;
    require_regular(path, &file.metadata().map_err(io_err)?, false)?;
    file.write_all(data).map_err(io_err)?;
    file.sync_data().map_err(io_err)?;
    let size = file.metadata().map_err(io_err)?.len();
    Ok(WriteResult {
        path: path.to_string(),
        bytes_written: data.len() as u64,
        size,
        created,
    })
}

fn replace(
    dir: &Dir,
    name: &str,
    path: &SandboxPath,
    data: &[u8],
    mode: WriteMode,
    existing: Option<Permissions>,
) -> Result<WriteResult, FileError> {
    place_atomically(dir, name, mode == WriteMode::CreateNew, |tmp| {
        tmp.write_all(data)?;
        match &existing {
            Some(perm) => tmp.set_permissions(perm.clone()),
            None => Ok(()),
        }
    })
    .map_err(|e| FileError::from_io("write", path, e))?;
    Ok(WriteResult {
        path: path.to_string(),
        bytes_written: data.len() as u64,
        size: data.len() as u64,
        created: existing.is_none(),
    })
}

/// Creates the directories above `path` that are missing, following no symlink.
pub(crate) fn make_parents(roots: &InstanceRoots, path: &SandboxPath) -> Result<(), FileError> {
    let depth = path.components().len().saturating_sub(1);
    roots.make_dirs(path, depth).map(drop)
}
