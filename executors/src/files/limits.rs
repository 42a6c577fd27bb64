//! Size and count caps for file operations, set by the gateway's configuration.

/// Caps applied by every file operation. Requests may ask for less, never for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// Most bytes one `read_file` returns; longer reads are cut and report `eof: false`.
    pub max_read_bytes: u64,
    /// Most bytes one `write_file` accepts.
    pub max_write_bytes: u64,
    /// Most entries `list_directory` returns.
    pub max_list_entries: usize,
    /// Most matches `search_files` returns.
    pub max_search_results: usize,
    /// Most directory entries a listing or search examines before stopping (bounds the time a
    /// call can take on a huge tree).
    pub max_walk_entries: usize,
    /// Deepest directory level a recursive walk descends to.
    pub max_depth: usize,
    /// Deepest tree a recursive `delete_path` removes (bounds the handles held open; deeper
    /// trees are refused so a hostile tree cannot exhaust the gateway's stack or descriptors).
    pub max_delete_depth: usize,
    /// Whether reads may open a regular file with more than one hard link. Off by default: a
    /// hard link can share an inode with a file outside the instance. Writes to such files are
    /// always refused.
    pub allow_read_hard_linked: bool,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self {
            max_read_bytes: 1 << 20,
            max_write_bytes: 8 << 20,
            max_list_entries: 1_000,
            max_search_results: 1_000,
            max_walk_entries: 100_000,
            max_depth: 32,
            max_delete_depth: 256,
            allow_read_hard_linked: false,
        }
    }
}
