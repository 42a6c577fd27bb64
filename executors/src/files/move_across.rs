//! `move_path` between filesystems (e.g. `/workspace` on scratch, `/output` on project storage),
//! where `rename` fails with `EXDEV`: a regular file is copied atomically, then its source name
//! is unlinked.
//!
//! The source is opened with `O_NOFOLLOW | O_NONBLOCK` relative to its pinned parent and checked
//! on the descriptor: it must be a regular file with a single hard link (copying a hard-linked
//! file could duplicate an inode shared with a file outside the instance into it). Directories,
//! symlinks and special files are refused with [`FileError::CrossFilesystem`].

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};

use super::atomic::place_atomically;
use super::copy::copy_capped;
use super::entry::{nonblocking_flags, require_regular};
use super::error::FileError;
use super::path::SandboxPath;

/// One end of a move: the pinned parent directory, the final name and the sandbox-view path.
pub(crate) struct End<'a> {
    pub dir: &'a Dir,
    pub name: &'a str,
    pub path: &'a SandboxPath,
}

/// Copies the regular file `from` to `to` atomically, then removes `from`. `max_bytes` (the
/// room under the destination's quota) is checked on the opened file, whose bytes are the ones
/// copied: a file swapped in or grown since the caller measured the name cannot pass it.
pub(crate) fn move_file_across(
    from: End<'_>,
    to: End<'_>,
    overwrite: bool,
    max_bytes: Option<u64>,
) -> Result<(), FileError> {
    let src_err = |e| FileError::from_io("move", from.path, e);
    let mut opts = OpenOptions::new();
    opts.read(true)
        .custom_flags(nonblocking_flags())
        .follow(FollowSymlinks::No);
    let mut src = from.dir.open_with(from.name, &opts).map_err(src_err)?;
    let md = src.metadata().map_err(src_err)?;
    require_regular(from.path, &md, false)?;
    if let Some(limit) = max_bytes.filter(|&limit| md.len() > limit) {
        return Err(FileError::TooLarge {
            path: from.path.to_string(),
            size: md.len(),
            limit,
            hint: "that is more than the room left under the destination's quota; delete files there first",
        });
    }
    place_atomically(to.dir, to.name, !overwrite, |tmp| {
        copy_capped(&mut src, tmp, md.len())?;
        tmp.set_permissions(Permissions::from_mode(md.permissions().mode() & 0o777))
    })
    .map_err(|e| FileError::from_io("move to", to.path, e))?;
    // The name is unlinked only if it still names the file copied: one a job put there during
    // the copy is not what was moved, and stays.
    match from.dir.symlink_metadata(from.name) {
        Ok(now) if (now.dev(), now.ino()) == (md.dev(), md.ino()) => from
            .dir
            .remove_file(from.name)
            .map_err(|e| FileError::from_io("remove the moved source", from.path, e)),
        _ => Ok(()),
    }
}
