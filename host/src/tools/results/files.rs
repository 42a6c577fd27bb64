//! The results of the file tools.

use schemars::JsonSchema;
use serde::Serialize;

use hpcgate_executors::files as exec;

// read_file.
/// Bytes of a file, from an offset.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadResult {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    /// The bytes read, as UTF-8 text or base64 (the `encoding` asked for).
    pub content: String,
    /// Where the read started.
    pub offset: u64,
    /// How many bytes were read.
    pub bytes: u64,
    /// The file's size.
    pub total_size: u64,
    /// Whether the read reached the end of the file.
    pub eof: bool,
}

/// `read_file` for a door that streams the bytes itself (a WebDAV GET): what was opened. Never
/// an MCP result (MCP lends no streaming body), so no schema advertises it.
#[derive(Debug, Serialize)]
pub struct Opened {
    pub path: String,
    pub total_size: u64,
    pub offset: u64,
    pub bytes: u64,
}

// write_file.
/// A file written.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Written {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    pub bytes_written: u64,
    /// The file's size after the write.
    pub size: u64,
    /// Whether the file did not exist before.
    pub created: bool,
}

impl From<exec::WriteResult> for Written {
    fn from(written: exec::WriteResult) -> Written {
        let exec::WriteResult {
            path,
            bytes_written,
            size,
            created,
        } = written;
        Written {
            path,
            bytes_written,
            size,
            created,
        }
    }
}

// list_directory.
/// A directory's entries.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Listing {
    /// The canonical sandbox-view path of the listed directory.
    pub path: String,
    pub entries: Vec<Entry>,
    /// Whether the cap was reached and entries were left out.
    pub truncated: bool,
}

impl From<exec::ListResult> for Listing {
    fn from(listed: exec::ListResult) -> Listing {
        let exec::ListResult {
            path,
            entries,
            truncated,
        } = listed;
        Listing {
            path,
            entries: entries.into_iter().map(Entry::from).collect(),
            truncated,
        }
    }
}

// search_files.
/// The paths that match a glob.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Found {
    /// The canonical sandbox-view path of the searched directory.
    pub path: String,
    pub matches: Vec<Entry>,
    /// Whether a cap was reached before the whole tree was searched.
    pub truncated: bool,
}

impl From<exec::SearchResult> for Found {
    fn from(found: exec::SearchResult) -> Found {
        let exec::SearchResult {
            path,
            matches,
            truncated,
        } = found;
        Found {
            path,
            matches: matches.into_iter().map(Entry::from).collect(),
            truncated,
        }
    }
}

/// One entry of a listing or a search.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Entry {
    /// The sandbox-view path, escaped.
    pub path: String,
    /// The final name, escaped.
    pub name: String,
    /// Whether `path` contains escapes (and cannot be passed back verbatim).
    pub escaped: bool,
    #[serde(flatten)]
    pub facts: Facts,
}

impl From<exec::ListEntry> for Entry {
    fn from(entry: exec::ListEntry) -> Entry {
        let exec::ListEntry {
            path,
            name,
            escaped,
            facts,
        } = entry;
        Entry {
            path,
            name,
            escaped,
            facts: facts.into(),
        }
    }
}

/// What a path is, without following a final symlink.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Facts {
    pub kind: Kind,
    /// Size in bytes (for a symlink: the length of its target).
    pub size: u64,
    /// Last modification, seconds since the Unix epoch.
    pub modified_unix: i64,
    /// The nanoseconds of the last modification within its second.
    pub modified_nsec: u32,
    /// Permission bits (`0o7777` mask), as a number.
    pub mode: u32,
    pub hard_links: u64,
}

impl From<exec::EntryFacts> for Facts {
    fn from(facts: exec::EntryFacts) -> Facts {
        let exec::EntryFacts {
            kind,
            size,
            modified_unix,
            modified_nsec,
            mode,
            hard_links,
        } = facts;
        Facts {
            kind: kind.into(),
            size,
            modified_unix,
            modified_nsec,
            mode,
            hard_links,
        }
    }
}

/// The kind of a file-system entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharDevice,
    Other,
}

impl From<exec::EntryKind> for Kind {
    fn from(kind: exec::EntryKind) -> Kind {
        match kind {
            exec::EntryKind::File => Kind::File,
            exec::EntryKind::Directory => Kind::Directory,
            exec::EntryKind::Symlink => Kind::Symlink,
            exec::EntryKind::Fifo => Kind::Fifo,
            exec::EntryKind::Socket => Kind::Socket,
            exec::EntryKind::BlockDevice => Kind::BlockDevice,
            exec::EntryKind::CharDevice => Kind::CharDevice,
            exec::EntryKind::Other => Kind::Other,
        }
    }
}

// stat_path.
/// What a path is, without following a final symlink.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathStat {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    #[serde(flatten)]
    pub facts: Facts,
    /// For a symlink: the text it contains, escaped (not followed; it may point anywhere).
    pub link_target: Option<String>,
}

impl From<exec::StatResult> for PathStat {
    fn from(stat: exec::StatResult) -> PathStat {
        let exec::StatResult {
            path,
            facts,
            link_target,
        } = stat;
        PathStat {
            path,
            facts: facts.into(),
            link_target,
        }
    }
}

// make_directory.
/// A directory made (or found there).
#[derive(Debug, Serialize, JsonSchema)]
pub struct MadeDirectory {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    /// False if it existed already (only with `parents`).
    pub created: bool,
}

impl From<exec::MakeDirectoryResult> for MadeDirectory {
    fn from(made: exec::MakeDirectoryResult) -> MadeDirectory {
        let exec::MakeDirectoryResult { path, created } = made;
        MadeDirectory { path, created }
    }
}

// move_path.
/// A file or directory moved.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Moved {
    /// The canonical sandbox-view source, escaped.
    pub from: String,
    /// The canonical sandbox-view destination, escaped.
    pub to: String,
    pub kind: Kind,
}

impl From<exec::MoveResult> for Moved {
    fn from(moved: exec::MoveResult) -> Moved {
        let exec::MoveResult { from, to, kind } = moved;
        Moved {
            from,
            to,
            kind: kind.into(),
        }
    }
}

// copy_path.
/// A file or directory tree copied.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Copied {
    /// The canonical sandbox-view source, escaped.
    pub from: String,
    /// The canonical sandbox-view destination, escaped.
    pub to: String,
    pub kind: Kind,
    /// Regular files copied.
    pub files: u64,
    /// Directories created (the top one included).
    pub directories: u64,
    /// Bytes copied.
    pub bytes: u64,
}

impl From<exec::CopyResult> for Copied {
    fn from(copied: exec::CopyResult) -> Copied {
        let exec::CopyResult {
            from,
            to,
            kind,
            files,
            directories,
            bytes,
        } = copied;
        Copied {
            from,
            to,
            kind: kind.into(),
            files,
            directories,
            bytes,
        }
    }
}

// delete_path.
/// A path deleted.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Deleted {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    /// What the path was.
    pub kind: Kind,
}

impl From<exec::DeleteResult> for Deleted {
    fn from(deleted: exec::DeleteResult) -> Deleted {
        let exec::DeleteResult { path, kind } = deleted;
        Deleted {
            path,
            kind: kind.into(),
        }
    }
}
