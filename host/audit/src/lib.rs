//! The audit log: hash-chained JSON lines under `<state_dir>/audit/`, one chain per directory.
//!
//! - [`AuditLog::open`] creates the private directory (0700; files 0600, `O_APPEND`,
//!   `O_NOFOLLOW`), truncates a torn last line left by a crash and records that as an
//!   `audit.repaired` record; [`AuditLog::append`] redacts an [`Entry`] ([`RedactionRules`]) and
//!   returns a [`Receipt`] only once the record is durable (group commit: one write and one
//!   `fdatasync` per batch). Any `Err` means the record is not in the log: refuse the call.
//! - Files `audit-000001.jsonl`, `audit-000002.jsonl`, ... rotate at a size limit; the chain
//!   runs across them (`seq` continues, `prev` links to the previous file's last record).
//!   Closed files may be compressed (`audit-000001.jsonl.zst`, [`compress_closed`], or a
//!   background thread with [`AuditOptions::compress`]): the same bytes, so every reader and
//!   `verify` treat them alike.
//! - Several processes may append to one directory: each batch is written under an exclusive
//!   `flock` on `audit.lock`, after catching up with what the others wrote, so they share one
//!   gap-free chain and never interleave records. (`flock` must work on the file system; on a
//!   network file system check that it is honoured across hosts.)
//! - [`verify`] walks the chain and reports the first broken record; a [`Checkpoint`] exported
//!   earlier also exposes truncation and whole-chain rewrites.
//! - [`records`] and [`tail`] read back with a [`Filter`], always within a [`Scope`] (the
//!   caller's tenant, or all tenants for admins).
//!
//! Record format and canonical bytes: see [`canonical`] and [`Record`]. A `call` record holds
//! `call` (the recorded-call object, redacted) and `decision` (the chain's final decision) at
//! top level, so an audit file replays with `hpcgate policy test --calls <file>`; other records
//! have no `call` and are skipped there. One line (wrapped here):
//!
//! ```text
//! {"seq":42,"ts":"2026-11-21T12:24:07.064887Z","prev":"9f2c…","event":"call",
//!  "tenant":"chem","principal":"alice","instance":"run1","tool":"write_file",
//!  "call":{"phase":"call","via":"mcp","tenant":"chem","principal":"alice","tool":"write_file",
//!          "server":"builtin","remote_tool":null,"instance":"run1",
//!          "arguments":{"content":{"bytes":11,"hmac_sha256":"5c1e…","key":"8a04…","redacted":true},
//!                       "instance_id":"run1","path":"a.txt"},"read_only":false,"usage":{}},
//!  "decision":{"decision":"allow"},
//!  "policies":[{"policy":"tools","module":"sha256:ab…","decision":"allow","enforced":true,
//!               "duration_us":3.1}],
//!  "outcome":{"bytes":11},"duration_ms":0.42,"hash":"1574…"}
//! ```
//!
//! This crate needs nothing of the gateway but the recorded-call and decision types, which live
//! beside the policy SDK's `Call` ([`hpcgate_policy_sdk::outcome`]), and [`time`], the one
//! timestamp type everything stores.
//!
//! What the chain cannot show on its own: records deleted at the end, or a whole chain
//! rewritten consistently by someone with write access (there is no secret key). Export
//! checkpoints to a place the gateway cannot write and verify against them.

#[cfg(test)]
mod ahead_tests;
pub mod bench;
mod bound;
pub mod canonical;
mod checkpoint;
mod compress;
#[cfg(test)]
mod compress_tests;
mod error;
#[cfg(test)]
mod fault_tests;
mod index;
mod keyfile;
mod log;
mod problem;
mod prune;
mod query;
mod record;
mod redact;
pub mod redacted;
mod reverse;
#[cfg(test)]
mod scale_tests;
mod segment;
mod signed;
mod tail;
pub mod time;
mod verify;
mod writer;

pub use canonical::GENESIS;
pub use checkpoint::{Checkpoint, CheckpointError};
pub use compress::{CompressReport, compress_closed};
pub use error::AuditError;
pub use index::SegmentIndex;
pub use keyfile::is_exposed_key;
pub use log::{AuditLog, AuditOptions, AuditStats, BatchObserver, Pending};
pub use prune::{Anchor, PruneReport, prune};
pub use query::{Filter, Records, Scope, records, replay_reader, tail};
pub use record::{Entry, Event, Outcome, PolicyRecord, Receipt, Record, UnknownEvent};
pub use redact::{ArgumentRule, REDACTION_KEY_FILE, RedactionRules, load_redaction_key};
pub use redacted::RedactionKey;
pub use segment::data_len;
pub use signed::{
    CheckpointKey, CheckpointOptions, CheckpointSet, CheckpointSetError, CheckpointSink, KEY_FILE,
    SignedCheckpoint, parse_public_key, read_checkpoints,
};
pub use time::{TimeError, Timestamp};
pub use verify::{Broken, Problem, VerifyReport, verify, verify_against};
