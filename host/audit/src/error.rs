//! Why the audit log could not be opened, written or read.
//!
//! Errors on the call path ([`AuditError::Write`], [`AuditError::Sync`],
//! [`AuditError::Unavailable`], [`AuditError::Poisoned`], [`AuditError::Closed`]) name no host
//! path in their message, because the gateway turns them into the refusal an agent reads; the
//! path, when there is one, is in the `source` chain for the admin's log. `AuditError` is
//! `Clone` (I/O errors behind `Arc`) because one failed batch answers every caller in it.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// An audit log failure. On `append`, any error means the record is not durable and the call
/// must be refused (fail closed).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    #[error(
        "cannot create the audit directory `{}`; check that its parent exists and is writable",
        dir.display()
    )]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error(
        "the audit directory `{}` is a symlink or not a directory; point the state directory at a real directory",
        dir.display()
    )]
    NotADirectory { dir: PathBuf },
    #[error("cannot open `{}`; check its owner and permissions", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot read `{}`; check its owner and permissions", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot lock `{}`; check that the file system supports `flock`", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot truncate the torn last line of `{}`; check the disk and its permissions", path.display())]
    Repair {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error(
        "the last record of `{}` (line {line}) is damaged ({problem}); run `hpcgate audit verify`, restore the file from a copy, then start again",
        path.display()
    )]
    DamagedTail {
        path: PathBuf,
        line: u64,
        problem: String,
    },
    #[error(
        "`{}` {at} is not an audit record ({problem}); run `hpcgate audit verify`",
        path.display()
    )]
    Unreadable {
        path: PathBuf,
        /// `line N`, or `the line at byte N` when read from the end or after a seek.
        at: String,
        problem: String,
    },
    #[error(
        "the audit log cannot be written, so the call is refused; an admin must fix the audit disk"
    )]
    Write(#[source] Arc<io::Error>),
    #[error(
        "the audit log cannot be made durable, so the call is refused; an admin must fix the audit disk"
    )]
    Sync(#[source] Arc<io::Error>),
    #[error(
        "the audit log cannot be brought up to date, so the call is refused; an admin should run `hpcgate audit verify`"
    )]
    Unavailable(#[source] Box<AuditError>),
    #[error(
        "the audit log failed and could not be rolled back, so every call is refused; an admin must fix the audit disk and restart the gateway"
    )]
    Poisoned,
    #[error("the audit log is closed, so the call is refused; the gateway is shutting down")]
    Closed,
    #[error(
        "cannot load or create the checkpoint signing key `{}`; check the audit directory's owner and permissions",
        path.display()
    )]
    CheckpointKey {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error(
        "cannot load or create the key that digests redacted values, `{}`: {source}; check the audit directory's owner and permissions, and restore a damaged key from a backup (a new key, made by moving the file aside, cannot check the values recorded under the old one)",
        path.display()
    )]
    RedactionKey {
        path: PathBuf,
        source: Arc<io::Error>,
    },
}

pub(crate) fn arc(error: io::Error) -> Arc<io::Error> {
    Arc::new(error)
}
