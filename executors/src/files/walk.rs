//! The directory walker behind `list_directory` and `search_files`.
//!
//! Breadth-first, so a capped listing shows the shallow entries first; entries sorted by name
//! within a directory so results are stable. It never follows symlinks: entries are examined
//! with `lstat` through the directory handle, and subdirectories are opened with
//! `open_dir_nofollow` relative to the walk's start `Dir`, so a directory swapped for a symlink
//! mid-walk is skipped, and nothing outside the start directory can be reached. Only paths (not
//! open handles) are queued, so a wide tree cannot exhaust file descriptors.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::PathBuf;

use cap_std::fs::Dir;

use super::entry::{EntryFacts, EntryKind};
use super::names::escape_os;

/// One entry met by the walk.
pub(crate) struct Visit {
    /// Path relative to the start directory, `/`-separated, escaped for display.
    pub rel: String,
    /// The entry's own name, escaped.
    pub name: String,
    /// True if the name (or an ancestor's) needed escaping.
    pub escaped: bool,
    pub facts: EntryFacts,
}

impl Visit {
    /// Whether this is (or lies in) one of the gateway's own temporary files: a write or an
    /// upload in progress, which no listing shows ([`super::SandboxPath::parse`] refuses it).
    pub(crate) fn is_temporary(&self) -> bool {
        (self.rel.split('/')).any(|name| name.starts_with(super::atomic::TEMP_PREFIX))
    }
}

/// Bounds of one walk.
pub(crate) struct WalkBounds {
    /// Deepest level to descend to (0: only the start directory's own entries).
    pub max_depth: usize,
    /// Most entries to examine in total.
    pub max_visits: usize,
    /// A link is described by what it leads to, if that is inside its directory (roots that
    /// follow links, [`super::InstanceRoots::following_links`]); the walk never descends
    /// through one.
    pub follow_links: bool,
}

/// Walks `start`; `visit` returns `Break` to stop. Returns true if the walk was incomplete: stopped
/// by `visit`, by `max_visits`, or (in a recursive walk) a directory at `max_depth` was not entered.
pub(crate) fn walk(
    start: &Dir,
    bounds: &WalkBounds,
    mut visit: impl FnMut(Visit) -> ControlFlow<()>,
) -> std::io::Result<bool> {
    let mut queue: VecDeque<(PathBuf, String, bool, usize)> = VecDeque::new();
    queue.push_back((PathBuf::from("."), String::new(), false, 0));
    let mut visits = 0usize;
    let mut depth_cut = false;
    while let Some((rel, shown, parent_escaped, depth)) = queue.pop_front() {
        let dir = if depth == 0 {
            start.try_clone()?
        } else {
            match super::roots::open_dir_beneath(start, &rel) {
                Ok(d) => d,
                // Swapped or removed since it was listed: skip it, never follow it.
                Err(_) => continue,
            }
        };
        let mut names: Vec<OsString> = Vec::new();
        for entry in dir.entries()? {
            let Ok(entry) = entry else { continue };
            names.push(entry.file_name());
            if names.len() > bounds.max_visits - visits {
                break;
            }
        }
        names.sort();
        for name in names {
            if visits >= bounds.max_visits {
                return Ok(true);
            }
            visits += 1;
            let Ok(md) = dir.symlink_metadata(&name) else {
                continue;
            };
            let followed = (bounds.follow_links && md.file_type().is_symlink())
                .then(|| dir.metadata(&name).ok())
                .flatten();
            let facts = EntryFacts::from_metadata(followed.as_ref().unwrap_or(&md));
            let (name_shown, name_escaped) = escape_os(&name);
            let child_shown = if shown.is_empty() {
                name_shown.clone()
            } else {
                format!("{shown}/{name_shown}")
            };
            let escaped = parent_escaped || name_escaped;
            if facts.kind == EntryKind::Directory && followed.is_none() {
                if depth < bounds.max_depth {
                    queue.push_back((rel.join(&name), child_shown.clone(), escaped, depth + 1));
                } else if bounds.max_depth > 0 {
                    depth_cut = true;
                }
            }
            let v = Visit {
                rel: child_shown,
                name: name_shown,
                escaped,
                facts,
            };
            if visit(v).is_break() {
                return Ok(true);
            }
        }
    }
    Ok(depth_cut)
}
