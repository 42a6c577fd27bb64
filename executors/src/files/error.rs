//! The one error type of the file executor, and the mapping from `io::Error` onto it.
//!
//! Messages name only sandbox-view paths (`/workspace/…`, `/output/…`), never a host path, and
//! say what to do next. `io::Error`s from cap-std carry no path, so keeping them as `#[source]`
//! leaks nothing; the message shows only their kind.

use std::io;

/// Why a file operation was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The path is malformed (empty, NUL byte, too long, a name that may not be created).
    #[error("invalid path `{path}`: {reason}; use a path under `/workspace` or `/output`")]
    InvalidPath { path: String, reason: String },

    /// The path, or a symlink met while resolving it, leads outside `/workspace` and `/output`.
    #[error(
        "`{path}` leads outside the instance; use paths under `/workspace` or `/output` without `..` or symlinks that point outside"
    )]
    EscapeAttempt { path: String },

    /// Nothing exists at the path (a dangling symlink counts as nothing).
    #[error("`{path}` does not exist; check the name with list_directory")]
    NotFound { path: String },

    /// The destination exists and the request did not ask to overwrite it.
    #[error("`{path}` already exists; choose another name or ask to overwrite")]
    AlreadyExists { path: String },

    /// Data or a file is above a configured cap.
    #[error("`{path}` is too large: {size} bytes exceeds the limit of {limit} bytes; {hint}")]
    TooLarge {
        path: String,
        size: u64,
        limit: u64,
        hint: &'static str,
    },

    /// A regular file was expected and a directory was found.
    #[error("`{path}` is a directory, not a file; use list_directory or a file path")]
    NotAFile { path: String },

    /// A directory was expected.
    #[error("`{path}` is not a directory; give a directory path")]
    NotADirectory { path: String },

    /// A FIFO, socket or device node: opening one could block or have side effects.
    #[error(
        "`{path}` is a {kind}, which file tools do not open; only regular files can be read or written"
    )]
    SpecialFile { path: String, kind: &'static str },

    /// A regular file with more than one hard link: its content may be shared with a file
    /// outside the instance.
    #[error(
        "`{path}` has {links} hard links and may be shared with a file outside the instance; copy it inside the sandbox (`cp`) and use the copy"
    )]
    MultipleHardLinks { path: String, links: u64 },

    /// The final component is a symlink and this operation does not follow it (or a loop).
    #[error(
        "`{path}` is a symbolic link (or a loop of them) that this operation does not follow; use the path it points to"
    )]
    SymlinkNotFollowed { path: String },

    /// The operation cannot apply to `/workspace` or `/output` itself.
    #[error("`{path}` is an instance root and cannot be {action}; name a path inside it")]
    IsRoot { path: String, action: &'static str },

    /// A directory is not empty and recursion was not requested.
    #[error("directory `{path}` is not empty; pass recursive to delete it with its contents")]
    DirectoryNotEmpty { path: String },

    /// A move between directories that live on different filesystems.
    #[error(
        "cannot move `{from}` to `{to}`: they are on different filesystems; copy and delete instead"
    )]
    CrossFilesystem { from: String, to: String },

    /// The request itself is inconsistent (e.g. moving a directory into itself).
    #[error("invalid request on `{path}`: {reason}")]
    InvalidRequest { path: String, reason: String },

    /// A tree with more entries or levels than a copy, move or delete handles whole (the
    /// file limits): retrying will not help, doing it in parts will.
    #[error("invalid request on `{path}`: {reason}")]
    TreeTooLarge { path: String, reason: String },

    /// A search pattern that is not a valid glob.
    #[error("invalid glob pattern `{pattern}`: {reason}; use `*`, `?`, `[..]`, `{{a,b}}` and `**`")]
    InvalidPattern { pattern: String, reason: String },

    /// Content requested as text is not UTF-8.
    #[error(
        "`{path}` is not valid utf-8 text (or the range splits a character); read it with encoding base64"
    )]
    NotUtf8 { path: String },

    /// One of the instance's roots could not be opened (an admin problem, not the agent's).
    #[error("the instance directory `{root}` could not be opened ({kind}); ask an administrator")]
    RootUnavailable {
        root: &'static str,
        kind: io::ErrorKind,
        #[source]
        source: io::Error,
    },

    /// Any other operating-system failure.
    #[error("could not {op} `{path}` ({kind}); retry or check the path")]
    Io {
        op: &'static str,
        path: String,
        kind: io::ErrorKind,
        #[source]
        source: io::Error,
    },
}

impl FileError {
    /// Maps an `io::Error` from operation `op` on sandbox-view `path` onto a variant.
    pub(crate) fn from_io(op: &'static str, path: &impl std::fmt::Display, err: io::Error) -> Self {
        use rustix::io::Errno;
        let path = path.to_string();
        // cap-std reports a resolution that would leave its `Dir` as a synthetic
        // PermissionDenied without an errno; a real EACCES always carries one.
        if err.kind() == io::ErrorKind::PermissionDenied && err.raw_os_error().is_none() {
            return Self::EscapeAttempt { path };
        }
        match err.raw_os_error().map(Errno::from_raw_os_error) {
            Some(Errno::NOENT) => Self::NotFound { path },
            Some(Errno::EXIST) => Self::AlreadyExists { path },
            Some(Errno::LOOP) => Self::SymlinkNotFollowed { path },
            Some(Errno::NOTDIR) => Self::NotADirectory { path },
            Some(Errno::ISDIR) => Self::NotAFile { path },
            Some(Errno::NOTEMPTY) => Self::DirectoryNotEmpty { path },
            Some(Errno::NXIO) => Self::SpecialFile {
                path,
                kind: "fifo or device without a peer",
            },
            Some(Errno::NAMETOOLONG) => Self::InvalidPath {
                path,
                reason: "a name is too long for the filesystem".into(),
            },
            _ => Self::Io {
                op,
                path,
                kind: err.kind(),
                source: err,
            },
        }
    }
}
