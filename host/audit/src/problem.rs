//! What `verify` can find wrong with a log: [`Problem`], each said in words that name what to
//! do where something can be done.

use std::fmt;

use serde::Serialize;

use super::index::SegmentIndex;
use crate::time::Timestamp;

/// What is wrong.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    Unparsable {
        message: String,
    },
    BadHash {
        recorded: String,
        computed: String,
    },
    BrokenLink {
        prev: String,
        expected: String,
    },
    SeqGap {
        expected: u64,
        found: u64,
    },
    Reordered {
        expected: u64,
        found: u64,
    },
    TornLine {
        bytes: u64,
    },
    MissingFile {
        name: String,
    },
    Truncated {
        checkpoint_seq: u64,
        last_seq: u64,
    },
    CheckpointMismatch {
        seq: u64,
        checkpoint_hash: String,
        hash: String,
    },
    /// A record's `ts` is earlier than the one before it (the writer never does that).
    TimeWentBack {
        previous: Timestamp,
        ts: Timestamp,
    },
    /// The segment's index does not describe it (`actual` is what it holds).
    IndexMismatch {
        index: Box<SegmentIndex>,
        actual: Option<Box<SegmentIndex>>,
    },
    /// A compressed segment does not decompress (edited or truncated) after the lines before.
    Compression {
        message: String,
    },
    /// The log starts at an anchor (`audit-anchor.json`) that no `audit.pruned` record in the
    /// chain names: the anchor was written by hand, or a prune stopped before recording itself.
    UnrecordedAnchor {
        first_segment: u64,
        next_seq: u64,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unparsable { message } => write!(f, "not an audit record: {message}"),
            Problem::BadHash { recorded, computed } => write!(
                f,
                "edited: the record says hash {recorded} but its bytes hash to {computed}"
            ),
            Problem::BrokenLink { prev, expected } => write!(
                f,
                "broken link: `prev` is {prev} but the previous record's hash is {expected}"
            ),
            Problem::SeqGap { expected, found } => write!(
                f,
                "records deleted: expected seq {expected}, found {found} ({} missing)",
                found - expected
            ),
            Problem::Reordered { expected, found } => write!(
                f,
                "records out of order: expected seq {expected}, found {found}"
            ),
            Problem::TornLine { bytes } => write!(
                f,
                "torn last line ({bytes} bytes without a newline); opening the log repairs it"
            ),
            Problem::MissingFile { name } => write!(f, "file `{name}` is missing"),
            Problem::Truncated {
                checkpoint_seq,
                last_seq,
            } => write!(
                f,
                "truncated: the log ends at seq {last_seq} but the checkpoint is at seq {checkpoint_seq}"
            ),
            Problem::CheckpointMismatch {
                seq,
                checkpoint_hash,
                hash,
            } => write!(
                f,
                "rewritten: record {seq} has hash {hash} but the checkpoint says {checkpoint_hash}"
            ),
            Problem::TimeWentBack { previous, ts } => write!(
                f,
                "time went backwards: `ts` {ts} is before the previous record's {previous} (the writer never does that)"
            ),
            Problem::UnrecordedAnchor {
                first_segment,
                next_seq,
            } => write!(
                f,
                "the log starts at segment {first_segment}, seq {next_seq}, but no `audit.pruned` record says so: the records before it were removed without a record (if a prune was cut short, run `hpcgate audit prune` again to record it)"
            ),
            Problem::Compression { message } => write!(
                f,
                "the compressed segment does not decompress after this point ({message}): it was edited or truncated"
            ),
            Problem::IndexMismatch { index, actual } => write!(
                f,
                "the segment's index ({}) does not describe it ({}); delete the `.idx` file if the segment itself is trusted",
                serde_json::to_string(index).unwrap_or_default(),
                actual
                    .as_ref()
                    .map_or("no records".to_owned(), |a| serde_json::to_string(a)
                        .unwrap_or_default())
            ),
        }
    }
}
