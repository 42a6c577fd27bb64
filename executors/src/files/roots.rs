//! An instance's two capability directories, and the one place that opens them from host paths.
//!
//! Everything after [`InstanceRoots::ambient`] works relative to these `Dir`s: cap-std
//! resolves every path beneath them (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`,
//! or component-by-component `O_NOFOLLOW` walking where `openat2` is unavailable), so `..`,
//! absolute symlinks, `/proc/self/…` magic links and symlinks that climb out are refused by the
//! kernel at the moment of use, not checked beforehand. There is no window for a swap.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::error::FileError;
use super::path::{Root, SandboxPath};

/// The `/workspace` and `/output` directories of one instance, as capabilities, each opened
/// when a path first names it: a call that touches one root opens only that one.
#[derive(Debug)]
pub struct InstanceRoots {
    workspace: LazyRoot,
    output: LazyRoot,
}

/// One root: its host path, and the capability once opened.
#[derive(Debug)]
struct LazyRoot {
    host: PathBuf,
    dir: OnceLock<Dir>,
}

impl InstanceRoots {
    /// The two roots at these host paths, not yet opened. This is the only function in the
    /// files executor that takes ambient authority; the paths come from the gateway's own
    /// instance records, never from an agent. A root that cannot be opened is an error of the
    /// first operation that needs it ([`FileError::RootUnavailable`], naming `/workspace` or
    /// `/output`, never the host path).
    pub fn ambient(workspace: &Path, output: &Path) -> Self {
        let root = |host: &Path| LazyRoot {
            host: host.to_owned(),
            dir: OnceLock::new(),
        };
        Self {
            workspace: root(workspace),
            output: root(output),
        }
    }

    /// The capability directory for `root`, opened on first use.
    pub fn dir(&self, root: Root) -> Result<&Dir, FileError> {
        let lazy = match root {
            Root::Workspace => &self.workspace,
            Root::Output => &self.output,
        };
        if let Some(dir) = lazy.dir.get() {
            return Ok(dir);
        }
        let dir = Dir::open_ambient_dir(&lazy.host, ambient_authority()).map_err(|source| {
            FileError::RootUnavailable {
                root: root.prefix(),
                kind: source.kind(),
                source,
            }
        })?;
        // Two threads may open it at once: one handle is kept, the other closed.
        Ok(lazy.dir.get_or_init(|| dir))
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
            .dir(path.root())?
            .open_dir(&parent)
            .map_err(|e| FileError::from_io("open the parent of", path, e))?;
        Ok((dir, name))
    }
}
