//! `open_file`: an opened regular file for a caller that streams it (a WebDAV GET), with the
//! same checks as `read_file`.
//!
//! The file is resolved beneath its root following no symlink ([`super::roots`]), its type
//! checked before opening (a FIFO or device is never opened) and again on the
//! opened descriptor; a hard-linked file is refused unless reads of those are allowed. The
//! caller then reads from the descriptor: whatever the name points to later, the bytes are
//! those of the inode checked here.

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{File, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};

use super::entry::{EntryKind, nonblocking_flags, require_regular};
use super::error::FileError;
use super::limits::FileLimits;
use super::path::SandboxPath;
use super::roots::InstanceRoots;

/// A regular file opened for reading.
#[derive(Debug)]
pub struct OpenedFile {
    /// Canonical sandbox-view path, escaped.
    pub path: String,
    pub file: std::fs::File,
    /// Size when it was opened.
    pub size: u64,
    /// Last modification, seconds since the Unix epoch.
    pub modified_unix: i64,
    /// The nanoseconds of the last modification within its second.
    pub modified_nsec: u32,
}

/// Opens a regular file beneath the instance roots for reading.
pub fn open_file(
    roots: &InstanceRoots,
    limits: &FileLimits,
    path: &str,
) -> Result<OpenedFile, FileError> {
    let path = SandboxPath::parse(path)?;
    let (file, md) = open_regular(roots, limits, &path)?;
    Ok(OpenedFile {
        path: path.to_string(),
        file: file.into_std(),
        size: md.len(),
        modified_unix: md.mtime(),
        modified_nsec: super::entry::nsec(&md),
    })
}

/// Opens `path` for reading, checked to be a regular file before and after the open.
pub(crate) fn open_regular(
    roots: &InstanceRoots,
    limits: &FileLimits,
    path: &SandboxPath,
) -> Result<(File, Metadata), FileError> {
    if path.is_root() {
        return Err(FileError::NotAFile {
            path: path.to_string(),
        });
    }
    let io_err = |e| FileError::from_io("read", path, e);
    if roots.follows_links() {
        // Resolved from the root, links inside it followed (cap-std keeps it beneath).
        let (root, rel) = (roots.dir(path.root())?, path.relative());
        let kind = EntryKind::of(root.metadata(&rel).map_err(io_err)?.file_type());
        if kind.is_special() {
            return Err(FileError::SpecialFile {
                path: path.to_string(),
                kind: kind.describe(),
            });
        }
        let mut opts = OpenOptions::new();
        opts.read(true).custom_flags(nonblocking_flags());
        let file = root.open_with(&rel, &opts).map_err(io_err)?;
        let md = file.metadata().map_err(io_err)?;
        require_regular(path, &md, limits.allow_read_hard_linked)?;
        return Ok((file, md));
    }
    let (dir, name) = roots.open_parent(path, "read")?;
    let pre = dir.symlink_metadata(name).map_err(io_err)?;
    let kind = EntryKind::of(pre.file_type());
    if kind == EntryKind::Symlink {
        return Err(FileError::SymlinkNotFollowed {
            path: path.to_string(),
        });
    }
    if kind.is_special() {
        return Err(FileError::SpecialFile {
            path: path.to_string(),
            kind: kind.describe(),
        });
    }
    let mut opts = OpenOptions::new();
    opts.read(true)
        .custom_flags(nonblocking_flags())
        .follow(FollowSymlinks::No);
    let file = dir.open_with(name, &opts).map_err(io_err)?;
    let md = file.metadata().map_err(io_err)?;
    require_regular(path, &md, limits.allow_read_hard_linked)?;
    Ok((file, md))
}
