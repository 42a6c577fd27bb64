//! An instance's two capability directories, and the one place that opens them from host paths.
//!
//! Everything after [`InstanceRoots::open_ambient`] works relative to these `Dir`s: cap-std
//! resolves every path beneath them (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`,
//! or component-by-component `O_NOFOLLOW` walking where `openat2` is unavailable), so `..`,
//! absolute symlinks, `/proc/self/…` magic links and symlinks that climb out are refused by the
//! kernel at the moment of use, not checked beforehand. There is no window for a swap.

use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::error::FileError;
use super::path::{Root, SandboxPath};

/// The `/workspace` and `/output` directories of one instance, as capabilities.
#[derive(Debug)]
pub struct InstanceRoots {
    workspace: Dir,
    output: Dir,
}

impl InstanceRoots {
    /// Opens the two roots from host paths. This is the only function in the files executor
    /// that uses ambient authority; the paths come from the gateway's own instance records, never
    /// from an agent. Errors name the root (`/workspace`), not the host path.
    pub fn open_ambient(workspace: &Path, output: &Path) -> Result<Self, FileError> {
        let open = |root: Root, host: &Path| {
            Dir::open_ambient_dir(host, ambient_authority()).map_err(|source| {
                FileError::RootUnavailable {
                    root: root.prefix(),
                    kind: source.kind(),
                    source,
                }
            })
        };
        Ok(Self {
            workspace: open(Root::Workspace, workspace)?,
            output: open(Root::Output, output)?,
        })
    }

    /// The capability directory for `root`.
    pub fn dir(&self, root: Root) -> &Dir {
        match root {
            Root::Workspace => &self.workspace,
            Root::Output => &self.output,
        }
    }

    /// Opens the parent directory of `path` (following in-root symlinks, beneath the root) and
    /// returns it with the final name. Operations on the final name then use this pinned handle,
    /// so a later swap of any ancestor for a symlink cannot redirect them.
    pub(crate) fn open_parent<'p>(
        &self,
        path: &'p SandboxPath,
        action: &'static str,
    ) -> Result<(Dir, &'p str), FileError> {
        let (parent, name) = path.split_last().ok_or_else(|| FileError::IsRoot {
            path: path.to_string(),
            action,
        })?;
        let dir = self
            .dir(path.root())
            .open_dir(&parent)
            .map_err(|e| FileError::from_io("open the parent of", path, e))?;
        Ok((dir, name))
    }
}
