//! `StateError`: every way a state operation fails, named by what went wrong.
//!
//! Messages are what a tenant's agent may read: lowercase, no trailing period, they say what
//! to do, and they never contain a host path. The `Io` variant keeps its `std::io::Error` as a
//! `#[source]` for logs, but its message names only the operation (the io error's own text
//! can carry a path, so it is not repeated). An id that failed validation is echoed escaped
//! and shortened, so a hostile id cannot inject lines or control characters into a message.

use std::fmt;

/// What kind of identifier or object an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Tenant,
    Instance,
    Job,
}

impl fmt::Display for IdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdKind::Tenant => "tenant",
            IdKind::Instance => "instance",
            IdKind::Job => "job",
        })
    }
}

/// A state operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An identifier does not match the rules (see [`super::id`]).
    #[error("invalid {kind} id `{shown}`: {rule}")]
    InvalidId {
        kind: IdKind,
        /// The offending input, escaped and shortened for display.
        shown: String,
        rule: &'static str,
    },
    /// The object does not exist for this tenant. Deliberately identical whether another
    /// tenant has an object of that name or not.
    #[error("{kind} `{id}` not found; list them to see the valid ids")]
    NotFound { kind: IdKind, id: String },
    /// An instance of that name already exists, live or archived.
    #[error("instance `{id}` already exists{where_}; choose another id")]
    AlreadyExists { id: String, where_: &'static str },
    /// The instance is archived; the operation needs a live one.
    #[error("instance `{id}` is archived; unarchive it first")]
    Archived { id: String },
    /// Archive refused because jobs of the instance have not finished.
    #[error(
        "cannot archive instance `{id}`: {count} job(s) still running ({first}); cancel them or wait for them to finish"
    )]
    HasRunningJobs {
        id: String,
        count: usize,
        /// The first unfinished job's id, to point the caller somewhere.
        first: String,
    },
    /// Archive refused because something runs in the instance under a lease (`in_use.rs`).
    #[error(
        "cannot archive instance `{id}`: it is in use (an `hpcgate instance enter` shell, an `hpcgate bwrap` command or another gateway's proxied MCP server runs in it, or another archive of it is under way); end that first, then archive"
    )]
    InUse { id: String },
    /// The tenant already has the maximum number of live instances.
    #[error("tenant `{tenant}` already has {count} instances (maximum {max}); archive one first")]
    QuotaExceeded {
        tenant: String,
        count: usize,
        max: usize,
    },
    /// The tenant already has the maximum number of unfinished jobs.
    #[error(
        "tenant `{tenant}` already has {count} unfinished jobs (maximum {max}); wait for one to finish or cancel one"
    )]
    JobQuotaExceeded {
        tenant: String,
        count: usize,
        max: usize,
    },
    /// A job command is empty.
    #[error("command must not be empty; give the program and its arguments")]
    InvalidCommand,
    /// A description is too long or contains control characters.
    #[error("invalid description: {rule}")]
    InvalidDescription { rule: &'static str },
    /// `limit` or `offset` out of range.
    #[error("invalid page: {rule}")]
    InvalidPage { rule: &'static str },
    /// A stored file could not be parsed or disagrees with where it is stored.
    #[error(
        "stored {what} of {kind} `{id}` is corrupt; an administrator should inspect the state directory"
    )]
    Corrupt {
        kind: IdKind,
        id: String,
        what: &'static str,
    },
    /// A record a newer hpcgate wrote: read with this one's meaning, and rewritten without the
    /// fields this one does not know, it would be wrong.
    #[error(
        "stored {what} of {kind} `{id}` has format {version}, newer than this hpcgate knows ({known}); use the hpcgate that wrote it"
    )]
    NewerFormat {
        kind: IdKind,
        id: String,
        what: &'static str,
        version: u32,
        known: u32,
    },
    /// The job already has an executor handle, or has ended: it cannot be given one now.
    #[error(
        "job `{id}` was already started, or ended, while this start was made; this start was stopped"
    )]
    HandleAlreadySet { id: String },
    /// The state directory is not this gateway's alone (found when it is opened).
    #[error("the state directory `{path}` {why}")]
    NotPrivate { path: String, why: String },
    /// A filesystem operation failed.
    #[error("state directory error while trying to {op}; check the gateway's state directory")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl StateError {
    /// `NewerFormat` if `version` is above `known`, the version this build writes.
    pub(crate) fn check_format(
        kind: IdKind,
        id: &str,
        what: &'static str,
        version: u32,
        known: u32,
    ) -> Result<(), StateError> {
        if version <= known {
            return Ok(());
        }
        Err(StateError::NewerFormat {
            kind,
            id: id.to_owned(),
            what,
            version,
            known,
        })
    }

    pub(crate) fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> StateError {
        move |source| StateError::Io { op, source }
    }

    pub(crate) fn not_found(kind: IdKind, id: &str) -> StateError {
        StateError::NotFound {
            kind,
            id: id.to_owned(),
        }
    }
}

/// Escapes `raw` for an error message and keeps at most 64 characters of it.
pub(crate) fn shown(raw: &str) -> String {
    let mut out: String = raw.chars().take(64).flat_map(char::escape_debug).collect();
    if raw.chars().count() > 64 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_and_shortens() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown("a\0b"), "a\\0b");
        let long = "x".repeat(100);
        assert_eq!(shown(&long).chars().count(), 65);
    }

    #[test]
    fn messages_are_lowercase_without_trailing_period() {
        let errors = [
            StateError::not_found(IdKind::Instance, "run1"),
            StateError::Archived { id: "a".into() },
            StateError::HasRunningJobs {
                id: "a".into(),
                count: 1,
                first: "j-x".into(),
            },
            StateError::io("read")(std::io::Error::other("/secret/path")),
        ];
        for e in errors {
            let m = e.to_string();
            assert!(m.chars().next().is_some_and(char::is_lowercase), "{m}");
            assert!(!m.ends_with('.'), "{m}");
            assert!(!m.contains("/secret"), "{m}");
        }
    }
}
