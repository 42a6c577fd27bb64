//! `move_path`: rename within or across `/workspace` and `/output`.
//!
//! Both parents are opened beneath their roots and the rename is one `renameat2` between the two
//! pinned handles, so neither end can be redirected outside the instance by a concurrent swap.
//! The source is moved as is: a symlink moves as a link. Without `overwrite` the kernel refuses
//! an existing destination atomically (`RENAME_NOREPLACE`); on a filesystem that lacks it we fall
//! back to check-then-rename, which can only race with another writer inside the instance.
//! Between filesystems a regular file is copied and unlinked ([`super::move_across`]); other
//! kinds are refused with [`FileError::CrossFilesystem`].
//!
//! A move between areas adds the source's bytes to the destination's area: with `max_bytes`
//! (that area's room under its quota) the source is measured first — a file's size, a tree's
//! regular files walked without following links, within the walk limits — and a move that
//! would pass it is refused before anything is renamed.

use std::ops::ControlFlow;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, Metadata, MetadataExt};
use rustix::fs::{RenameFlags, renameat, renameat_with};
use rustix::io::Errno;

use super::entry::{EntryFacts, EntryKind};
use super::error::FileError;
use super::limits::FileLimits;
use super::move_across::{End, move_file_across};
use super::path::SandboxPath;
use super::roots::InstanceRoots;
use super::walk::{WalkBounds, walk};

/// A request to move `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveRequest {
    /// Sandbox-view source path.
    pub from: String,
    /// Sandbox-view destination path (the new name, not a directory to move into).
    pub to: String,
    /// Replace an existing destination (a file, or an empty directory when moving a directory).
    pub overwrite: bool,
    /// Most bytes the move may add to the destination's area (the room left under its quota,
    /// for a move between areas); `None`: no byte cap, and no measuring.
    pub max_bytes: Option<u64>,
}

/// What was moved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MoveResult {
    /// Canonical sandbox-view source, escaped.
    pub from: String,
    /// Canonical sandbox-view destination, escaped.
    pub to: String,
    pub kind: EntryKind,
}

/// Moves a path beneath the instance roots.
pub fn move_path(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &MoveRequest,
) -> Result<MoveResult, FileError> {
    let from = SandboxPath::parse(&req.from)?;
    let to = SandboxPath::parse(&req.to)?;
    to.check_creatable()?;
    let (from_dir, from_name) = roots.open_parent(&from, "moved")?;
    let (to_dir, to_name) = roots.open_parent(&to, "replaced")?;
    let md = from_dir
        .symlink_metadata(from_name)
        .map_err(|e| FileError::from_io("move", &from, e))?;
    let kind = EntryFacts::from_metadata(&md).kind;
    if let Some(limit) = req.max_bytes {
        let size = bytes_moved(&from_dir, from_name, &from, &md, limits)?;
        if size > limit {
            return Err(FileError::TooLarge {
                path: from.to_string(),
                size,
                limit,
                hint: "that is more than the room left under the destination's quota; delete files there first",
            });
        }
    }

    // Onto itself (no link is followed, so one entry has one path). Without this, the branch
    // below would take the name for another link of the file and remove it.
    if from == to {
        return Err(FileError::InvalidRequest {
            path: from.to_string(),
            reason: "it is both the source and the destination; nothing to move".into(),
        });
    }
    // Two names of one file: `rename` succeeds and does nothing, so the source would stay.
    // The move's effect is the source's name gone.
    if req.overwrite
        && kind == EntryKind::File
        && let Ok(target) = to_dir.symlink_metadata(to_name)
        && (target.dev(), target.ino()) == (md.dev(), md.ino())
    {
        from_dir
            .remove_file(from_name)
            .map_err(|e| FileError::from_io("move", &from, e))?;
        return Ok(MoveResult {
            from: from.to_string(),
            to: to.to_string(),
            kind,
        });
    }
    let plain = || renameat(&from_dir, from_name, &to_dir, to_name);
    let outcome = if req.overwrite {
        plain()
    } else {
        match renameat_with(
            &from_dir,
            from_name,
            &to_dir,
            to_name,
            RenameFlags::NOREPLACE,
        ) {
            Err(Errno::INVAL) if to_dir.symlink_metadata(to_name).is_err() => plain(),
            Err(Errno::INVAL) => Err(Errno::EXIST),
            other => other,
        }
    };
    if outcome == Err(Errno::XDEV) && kind == EntryKind::File {
        let from_end = End {
            dir: &from_dir,
            name: from_name,
            path: &from,
        };
        let to_end = End {
            dir: &to_dir,
            name: to_name,
            path: &to,
        };
        move_file_across(from_end, to_end, req.overwrite, req.max_bytes)?;
        return Ok(MoveResult {
            from: from.to_string(),
            to: to.to_string(),
            kind,
        });
    }
    outcome.map_err(|errno| match errno {
        Errno::XDEV => FileError::CrossFilesystem {
            from: from.to_string(),
            to: to.to_string(),
        },
        Errno::INVAL => FileError::InvalidRequest {
            path: from.to_string(),
            reason: "a directory cannot be moved into itself".into(),
        },
        Errno::NOTEMPTY | Errno::EXIST if req.overwrite => FileError::InvalidRequest {
            path: to.to_string(),
            reason: "the destination is a non-empty directory; delete it first".into(),
        },
        Errno::EXIST => FileError::AlreadyExists {
            path: to.to_string(),
        },
        other => FileError::from_io("move to", &to, other.into()),
    })?;
    Ok(MoveResult {
        from: from.to_string(),
        to: to.to_string(),
        kind,
    })
}

/// The regular-file bytes at `path`: a file's size, the sum beneath a directory (walked
/// without following links; refused for a tree too large or deep to walk whole), 0 for
/// anything else. What a copy or a move of it adds to where it lands, for the room to hold.
pub fn bytes_at(roots: &InstanceRoots, limits: &FileLimits, path: &str) -> Result<u64, FileError> {
    let path = SandboxPath::parse(path)?;
    let (dir, name) = roots.open_parent(&path, "measured")?;
    let md = (dir.symlink_metadata(name)).map_err(|e| FileError::from_io("measure", &path, e))?;
    bytes_moved(&dir, name, &path, &md, limits)
}

/// The regular-file bytes at `name`: its size, or the sum beneath it for a directory (walked
/// without following links; a tree too large or deep to walk whole is refused, since its bytes
/// cannot be known).
fn bytes_moved(
    dir: &Dir,
    name: &str,
    from: &SandboxPath,
    md: &Metadata,
    limits: &FileLimits,
) -> Result<u64, FileError> {
    let facts = EntryFacts::from_metadata(md);
    if facts.kind != EntryKind::Directory {
        return Ok(if facts.kind == EntryKind::File {
            facts.size
        } else {
            0
        });
    }
    let tree = dir
        .open_dir_nofollow(name)
        .map_err(|e| FileError::from_io("move", from, e))?;
    let bounds = WalkBounds {
        max_depth: limits.max_depth,
        max_visits: limits.max_walk_entries,
        follow_links: false,
    };
    let mut bytes = 0u64;
    let cut = walk(&tree, &bounds, |visit| {
        if visit.facts.kind == EntryKind::File {
            bytes = bytes.saturating_add(visit.facts.size);
        }
        ControlFlow::Continue(())
    })
    .map_err(|e| FileError::from_io("move", from, e))?;
    if cut {
        return Err(FileError::TreeTooLarge {
            path: from.to_string(),
            reason: format!(
                "the tree has more than {} entries or {} levels, too many to measure against the destination's quota; move its parts separately",
                limits.max_walk_entries, limits.max_depth
            ),
        });
    }
    Ok(bytes)
}
