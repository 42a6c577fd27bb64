//! `stat_path`: facts about one path, without following a final symlink.
//!
//! Intermediate in-root symlinks are followed (beneath the root); a final symlink is reported as
//! a `symlink` with its target text (escaped), not resolved.

use std::path::Path;

use cap_std::fs::Dir;

use super::entry::{EntryFacts, EntryKind};
use super::error::FileError;
use super::names::escape_os;
use super::path::SandboxPath;
use super::roots::InstanceRoots;

/// A request for facts about `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatRequest {
    /// Sandbox-view path.
    pub path: String,
}

/// Facts about one path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatResult {
    /// Canonical sandbox-view path, escaped.
    pub path: String,
    #[serde(flatten)]
    pub facts: EntryFacts,
    /// For a symlink: the text it contains, escaped (it may point outside; it is not followed).
    pub link_target: Option<String>,
}

/// Reports facts about a path beneath the instance roots.
pub fn stat_path(roots: &InstanceRoots, req: &StatRequest) -> Result<StatResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    let dir: &Dir = roots.dir(path.root())?;
    let io_err = |e| FileError::from_io("stat", &path, e);
    let md = if path.is_root() {
        dir.dir_metadata()
    } else {
        dir.symlink_metadata(path.relative())
    }
    .map_err(io_err)?;
    let facts = EntryFacts::from_metadata(&md);
    let link_target = if facts.kind == EntryKind::Symlink {
        let target = dir.read_link_contents(path.relative()).map_err(io_err)?;
        Some(escape_os(Path::new(&target).as_os_str()).0)
    } else {
        None
    };
    Ok(StatResult {
        path: path.to_string(),
        facts,
        link_target,
    })
}
