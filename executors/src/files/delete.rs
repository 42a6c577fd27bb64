//! `delete_path`: remove a file, symlink or directory; recursive only on request.
//!
//! The parent is opened once beneath the root; the final name is examined without following it.
//! A symlink is removed as a link (its target is untouched). Recursive removal is iterative and
//! never follows symlinks inside the tree ([`super::remove_tree`]). Roots cannot be deleted.

use cap_fs_ext::DirExt;

use super::entry::{EntryFacts, EntryKind};
use super::error::FileError;
use super::limits::FileLimits;
use super::path::SandboxPath;
use super::remove_tree::{TreeError, remove_tree};
use super::roots::InstanceRoots;

/// A request to delete `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    /// Sandbox-view path.
    pub path: String,
    /// Allow deleting a non-empty directory with its contents.
    pub recursive: bool,
}

/// What was deleted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeleteResult {
    /// Canonical sandbox-view path, escaped.
    pub path: String,
    /// What the path was.
    pub kind: EntryKind,
}

/// Deletes a path beneath the instance roots.
pub fn delete_path(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &DeleteRequest,
) -> Result<DeleteResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    let (dir, name) = roots.open_parent(&path, "deleted")?;
    let io_err = |e| FileError::from_io("delete", &path, e);
    let kind = EntryFacts::from_metadata(&dir.symlink_metadata(name).map_err(io_err)?).kind;
    match kind {
        EntryKind::Directory if req.recursive => {
            remove_tree(&dir, name, limits.max_delete_depth).map_err(|e| match e {
                TreeError::TooDeep => FileError::TreeTooLarge {
                    path: path.to_string(),
                    reason: format!(
                        "the tree is deeper than {} levels; delete its deepest parts first",
                        limits.max_delete_depth
                    ),
                },
                TreeError::Io(e) => io_err(e),
            })?;
            return Ok(DeleteResult {
                path: path.to_string(),
                kind,
            });
        }
        EntryKind::Directory => dir.remove_dir(name),
        _ => dir.remove_file_or_symlink(name),
    }
    .map_err(io_err)?;
    Ok(DeleteResult {
        path: path.to_string(),
        kind,
    })
}
