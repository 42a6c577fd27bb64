//! What kind of failure ended a call: said by whoever failed it (a tool, the file executor,
//! the state layer, the policies, the pipeline, a door), never read back from its message,
//! which may quote a caller's path. A door that answers in status codes (WebDAV) acts on it;
//! MCP shows the message only.

use hpcgate_executors::files::FileError;

use crate::state::StateError;

/// The kind of a failed call (meaningful only when it failed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Failure {
    /// A policy denied the call, or a rule of the gateway refused it.
    Denied,
    /// The tenant's rate limit: retry after this many whole seconds.
    RateLimited { retry_after_s: u32 },
    /// The gateway cannot take the call now: the tenant's waiting calls are as many as it may
    /// have, the gateway is stopping, or its audit log cannot record.
    Busy,
    /// The call ran, but its outcome could not be recorded: what it did stands (not to be
    /// retried or undone blindly).
    Unrecorded,
    /// A byte quota has no room for what the call would add.
    NoRoom,
    /// Data over a size cap.
    TooLarge,
    /// A streamed body fell behind the door's minimum rate.
    TimedOut,
    /// A path the call names does not exist.
    NoPath,
    /// The instance (or the job, task) the call names does not exist, or is archived.
    NotFound,
    /// The destination exists and the call did not ask to replace it.
    Exists,
    /// A directory where a file was needed.
    IsDirectory,
    /// A directory has members and the call did not ask to remove them with it.
    NotEmpty,
    /// The tree's or the instance's state prevents it: not a directory, into
    /// itself, an instance root, a destination of the other kind, across filesystems; an
    /// instance with a running job or in use cannot be archived.
    Conflict,
    /// What the path names may not be used so: a link, a hard-linked or special file, an
    /// invalid name, a way out of the instance, a tree too large to handle whole.
    Forbidden,
    /// Any other failure.
    #[default]
    Other,
}

impl From<&FileError> for Failure {
    fn from(e: &FileError) -> Failure {
        match e {
            FileError::NotFound { .. } => Failure::NoPath,
            FileError::AlreadyExists { .. } => Failure::Exists,
            FileError::TooLarge { .. } => Failure::TooLarge,
            FileError::NotAFile { .. } => Failure::IsDirectory,
            FileError::DirectoryNotEmpty { .. } => Failure::NotEmpty,
            FileError::NotADirectory { .. }
            | FileError::IsRoot { .. }
            | FileError::CrossFilesystem { .. }
            | FileError::InvalidRequest { .. } => Failure::Conflict,
            FileError::InvalidPath { .. }
            | FileError::EscapeAttempt { .. }
            | FileError::SpecialFile { .. }
            | FileError::MultipleHardLinks { .. }
            | FileError::SymlinkNotFollowed { .. }
            | FileError::TreeTooLarge { .. } => Failure::Forbidden,
            FileError::Io { kind, .. } => match kind {
                std::io::ErrorKind::TimedOut => Failure::TimedOut,
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    Failure::NoRoom
                }
                std::io::ErrorKind::PermissionDenied => Failure::Forbidden,
                _ => Failure::Other,
            },
            _ => Failure::Other,
        }
    }
}

impl From<&StateError> for Failure {
    fn from(e: &StateError) -> Failure {
        match e {
            StateError::NotFound { .. } | StateError::Archived { .. } => Failure::NotFound,
            StateError::AlreadyExists { .. } => Failure::Exists,
            StateError::InUse { .. } | StateError::HasRunningJobs { .. } => Failure::Conflict,
            _ => Failure::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind};

    use super::*;

    #[test]
    fn an_operating_system_failure_says_its_kind() {
        let io = |kind: ErrorKind| FileError::Io {
            op: "write",
            path: "/workspace/f".to_owned(),
            kind,
            source: Error::from(kind),
        };
        let table = [
            (ErrorKind::StorageFull, Failure::NoRoom),
            (ErrorKind::QuotaExceeded, Failure::NoRoom),
            (ErrorKind::PermissionDenied, Failure::Forbidden),
            (ErrorKind::TimedOut, Failure::TimedOut),
            (ErrorKind::Other, Failure::Other),
        ];
        for (kind, failure) in table {
            assert_eq!(Failure::from(&io(kind)), failure, "{kind:?}");
        }
        let path = "/workspace/a\nb".to_owned();
        let tree = FileError::TreeTooLarge {
            path: path.clone(),
            reason: String::new(),
        };
        assert_eq!(Failure::from(&tree), Failure::Forbidden);
        assert_eq!(
            Failure::from(&FileError::NotFound { path }),
            Failure::NoPath
        );
    }
}
