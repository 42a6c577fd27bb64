//! `stat_path`: facts about one path, without following a final symlink.
//!
//! No symlink on the way is followed ([`super::roots`]); a final symlink is reported as a
//! `symlink` with its target text (escaped), not resolved: how an agent told that a path goes
//! through a link learns where it points.

use std::path::Path;

use super::entry::EntryFacts;
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
    let io_err = |e| FileError::from_io("stat", &path, e);
    // The final name is described, not followed: a link is reported with what it holds.
    let (md, link_target) = match path.split_last() {
        None => (
            roots.dir(path.root())?.dir_metadata().map_err(io_err)?,
            None,
        ),
        // Links followed inside the root, the final one too: what the name leads to.
        Some(_) if roots.follows_links() => {
            let (root, rel) = (roots.dir(path.root())?, path.relative());
            (root.metadata(&rel).map_err(io_err)?, None)
        }
        Some(_) => {
            let (dir, name) = roots.open_parent(&path, "stat")?;
            let md = dir.symlink_metadata(name).map_err(io_err)?;
            let target = if md.file_type().is_symlink() {
                Some(dir.read_link_contents(name).map_err(io_err)?)
            } else {
                None
            };
            (md, target)
        }
    };
    let facts = EntryFacts::from_metadata(&md);
    let link_target = link_target.map(|target| escape_os(Path::new(&target).as_os_str()).0);
    Ok(StatResult {
        path: path.to_string(),
        facts,
        link_target,
    })
}
