//! `search_files`: entries whose path (relative to a start directory) matches a glob.
//!
//! Same walk as a recursive listing (nothing followed, breadth-first, bounded). `*` and `?` do
//! not cross `/`; `**` does. Patterns match the escaped display form of paths.

use std::ops::ControlFlow;

use globset::GlobBuilder;

use super::error::FileError;
use super::limits::FileLimits;
use super::list::{ListEntry, open_start_dir};
use super::path::SandboxPath;
use super::roots::InstanceRoots;
use super::walk::{WalkBounds, walk};

/// Longest glob pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// A request to find entries under `path` matching `pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    /// Sandbox-view path of the directory to search (e.g. `/workspace`).
    pub path: String,
    /// Glob over paths relative to `path`, e.g. `**/*.csv` or `runs/*/log.txt`.
    pub pattern: String,
    /// Most matches wanted; capped by [`FileLimits::max_search_results`].
    pub max_results: Option<usize>,
}

/// The matches found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SearchResult {
    /// Canonical sandbox-view path of the searched directory.
    pub path: String,
    pub matches: Vec<ListEntry>,
    /// True if a cap was reached before the whole tree was searched.
    pub truncated: bool,
}

/// Searches a directory tree beneath the instance roots.
pub fn search_files(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &SearchRequest,
) -> Result<SearchResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    let pattern_err = |reason: String| FileError::InvalidPattern {
        pattern: super::names::escape_str(&req.pattern.chars().take(120).collect::<String>()),
        reason,
    };
    if req.pattern.len() > MAX_PATTERN_BYTES {
        return Err(pattern_err(format!(
            "longer than {MAX_PATTERN_BYTES} bytes"
        )));
    }
    let matcher = GlobBuilder::new(&req.pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| pattern_err(e.kind().to_string()))?
        .compile_matcher();
    let start = open_start_dir(roots, &path)?;
    let cap = req
        .max_results
        .unwrap_or(limits.max_search_results)
        .min(limits.max_search_results);
    let bounds = WalkBounds {
        max_depth: limits.max_depth,
        max_visits: limits.max_walk_entries,
        follow_links: false,
    };
    let base = path.to_string();
    // Shown escaped, the listed directory's part makes every entry's path one to escape back
    // (an escape always brings a `\`, and a `\` of the name is doubled).
    let base_escaped = base.contains('\\');
    let mut matches = Vec::new();
    let stopped = walk(&start, &bounds, |v| {
        if v.is_temporary() || !matcher.is_match(&v.rel) {
            return ControlFlow::Continue(());
        }
        if matches.len() >= cap {
            return ControlFlow::Break(());
        }
        matches.push(ListEntry {
            path: format!("{base}/{}", v.rel),
            name: v.name,
            escaped: v.escaped || base_escaped,
            facts: v.facts,
        });
        ControlFlow::Continue(())
    })
    .map_err(|e| FileError::from_io("search", &path, e))?;
    Ok(SearchResult {
        path: base,
        matches,
        truncated: stopped,
    })
}
