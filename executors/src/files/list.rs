//! `list_directory`: entries of a directory, optionally recursive, with a cap.
//!
//! The directory named by the request is opened following no symlink (a link to a directory is
//! refused, naming it); inside it nothing is followed either: symlinks are listed as `symlink` and never descended into.

use std::ops::ControlFlow;

use super::entry::EntryFacts;
use super::error::FileError;
use super::limits::FileLimits;
use super::path::SandboxPath;
use super::roots::InstanceRoots;
use super::walk::{WalkBounds, walk};

/// A request to list `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Sandbox-view path of a directory.
    pub path: String,
    /// Descend into subdirectories (breadth-first, up to [`FileLimits::max_depth`]).
    pub recursive: bool,
    /// Most entries wanted; capped by [`FileLimits::max_list_entries`].
    pub max_entries: Option<usize>,
}

/// One entry of a listing or a search.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListEntry {
    /// Sandbox-view path, escaped (see [`super::names`]).
    pub path: String,
    /// Final name, escaped.
    pub name: String,
    /// True if `path` contains escapes and cannot be passed back verbatim.
    pub escaped: bool,
    #[serde(flatten)]
    pub facts: EntryFacts,
}

/// The entries found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListResult {
    /// Canonical sandbox-view path of the listed directory.
    pub path: String,
    pub entries: Vec<ListEntry>,
    /// True if the cap was reached and entries were left out.
    pub truncated: bool,
}

/// Lists a directory beneath the instance roots.
pub fn list_directory(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &ListRequest,
) -> Result<ListResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    let start = open_start_dir(roots, &path)?;
    let cap = req
        .max_entries
        .unwrap_or(limits.max_list_entries)
        .min(limits.max_list_entries);
    let bounds = WalkBounds {
        max_depth: if req.recursive { limits.max_depth } else { 0 },
        max_visits: limits.max_walk_entries,
        follow_links: roots.follows_links(),
    };
    let base = path.to_string();
    // Shown escaped, the listed directory's part makes every entry's path one to escape back
    // (an escape always brings a `\`, and a `\` of the name is doubled).
    let base_escaped = base.contains('\\');
    let mut entries = Vec::new();
    let mut over_cap = false;
    let stopped = walk(&start, &bounds, |v| {
        if v.is_temporary() {
            return ControlFlow::Continue(());
        }
        if entries.len() >= cap {
            over_cap = true;
            return ControlFlow::Break(());
        }
        entries.push(ListEntry {
            path: format!("{base}/{}", v.rel),
            name: v.name,
            escaped: v.escaped || base_escaped,
            facts: v.facts,
        });
        ControlFlow::Continue(())
    })
    .map_err(|e| FileError::from_io("list", &path, e))?;
    Ok(ListResult {
        path: base,
        entries,
        truncated: over_cap || stopped,
    })
}

/// Opens the directory a listing or search starts from, with a clear error for non-directories.
pub(crate) fn open_start_dir(
    roots: &InstanceRoots,
    path: &SandboxPath,
) -> Result<cap_std::fs::Dir, FileError> {
    roots.open_directory(path, "open directory")
}
