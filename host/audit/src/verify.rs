//! `verify`: walk the whole chain and report the first record that breaks it.
//!
//! Each line must be a record whose bytes hash to its `hash`, whose `seq` is one more than the
//! previous record's (across files, which must be numbered without gaps from 1), and whose
//! `prev` is the previous record's `hash`. That detects any edit, deletion, reorder or forged
//! insertion *inside* the log. Deleting records at the end, or rewriting the whole chain
//! consistently, leaves a valid shorter or different chain: only a checkpoint exported earlier
//! shows it (`Truncated`, `CheckpointMismatch`).
//!
//! Verification reads a snapshot: the file list and lengths are taken under a shared lock, so
//! a batch being written at that moment is neither half-read nor blocked for long.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::Serialize;

use super::canonical::{GENESIS, LineProblem, check_line, peek_seq};
use super::checkpoint::Checkpoint;
use super::error::{AuditError, arc};
use super::segment::{self, LOCK_FILE, Segment, file_name};

/// The result of [`verify`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyReport {
    /// True iff no record is broken (and the checkpoint, if any, is matched).
    pub intact: bool,
    pub files: usize,
    /// Records verified (before the first broken one).
    pub records: u64,
    /// The last verified record: the checkpoint to export next.
    pub last: Option<Checkpoint>,
    pub first_broken: Option<Broken>,
}

/// Where the chain first breaks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Broken {
    /// File name inside the audit directory.
    pub file: String,
    /// 1-based line in that file.
    pub line: u64,
    /// The record's `seq` as written (or, for `truncated`, the first missing one), when known.
    pub seq: Option<u64>,
    pub problem: Problem,
}

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
        }
    }
}

/// Verifies the log in `dir`, against `checkpoint` if given. `Err` only when a file cannot be
/// read; everything wrong with the content is in the report.
pub fn verify(dir: &Path, checkpoint: Option<&Checkpoint>) -> Result<VerifyReport, AuditError> {
    let files = snapshot(dir)?;
    let mut state = Walk {
        expected_seq: 1,
        prev: GENESIS.to_owned(),
        records: 0,
        last: None,
        checkpoint,
    };
    let mut last_file = (String::new(), 0);
    for (index, (segment, len)) in files.iter().enumerate() {
        let expected_number = index as u64 + 1;
        if segment.number != expected_number {
            return Ok(state.broken(
                files.len(),
                Broken {
                    file: segment.name(),
                    line: 1,
                    seq: None,
                    problem: Problem::MissingFile {
                        name: file_name(expected_number),
                    },
                },
            ));
        }
        let bytes = read_prefix(segment, *len)?;
        let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        let (complete, torn) = lines.split_at(lines.len() - 1);
        for (i, line) in complete.iter().enumerate() {
            let at = |seq, problem| Broken {
                file: segment.name(),
                line: i as u64 + 1,
                seq,
                problem,
            };
            if let Some(broken) = state.step(line, &complete[i + 1..], at) {
                return Ok(state.broken(files.len(), broken));
            }
        }
        if !torn[0].is_empty() {
            let broken = Broken {
                file: segment.name(),
                line: complete.len() as u64 + 1,
                seq: peek_seq(torn[0]),
                problem: Problem::TornLine {
                    bytes: torn[0].len() as u64,
                },
            };
            return Ok(state.broken(files.len(), broken));
        }
        last_file = (segment.name(), complete.len() as u64);
    }
    if let Some(cp) = checkpoint {
        let last_seq = state.expected_seq - 1;
        if cp.seq > last_seq {
            let broken = Broken {
                file: last_file.0,
                line: last_file.1 + 1,
                seq: Some(last_seq + 1),
                problem: Problem::Truncated {
                    checkpoint_seq: cp.seq,
                    last_seq,
                },
            };
            return Ok(state.broken(files.len(), broken));
        }
    }
    Ok(VerifyReport {
        intact: true,
        files: files.len(),
        records: state.records,
        last: state.last,
        first_broken: None,
    })
}

struct Walk<'a> {
    expected_seq: u64,
    prev: String,
    records: u64,
    last: Option<Checkpoint>,
    checkpoint: Option<&'a Checkpoint>,
}

impl Walk<'_> {
    /// Checks one line; `rest` are the lines after it in the same file.
    fn step(
        &mut self,
        line: &[u8],
        rest: &[&[u8]],
        at: impl Fn(Option<u64>, Problem) -> Broken,
    ) -> Option<Broken> {
        let record = match check_line(line) {
            Ok(record) => record,
            Err(LineProblem::Unparsable(message)) => {
                return Some(at(peek_seq(line), Problem::Unparsable { message }));
            }
            Err(LineProblem::BadHash { recorded, computed }) => {
                return Some(at(peek_seq(line), Problem::BadHash { recorded, computed }));
            }
        };
        let (expected, found) = (self.expected_seq, record.seq);
        if found != expected {
            let later = rest.iter().any(|l| peek_seq(l) == Some(expected));
            let problem = if found < expected || later {
                Problem::Reordered { expected, found }
            } else {
                Problem::SeqGap { expected, found }
            };
            return Some(at(Some(found), problem));
        }
        if record.prev != self.prev {
            let problem = Problem::BrokenLink {
                prev: record.prev,
                expected: self.prev.clone(),
            };
            return Some(at(Some(found), problem));
        }
        if let Some(cp) = self.checkpoint
            && cp.seq == found
            && cp.hash != record.hash
        {
            let problem = Problem::CheckpointMismatch {
                seq: found,
                checkpoint_hash: cp.hash.clone(),
                hash: record.hash,
            };
            return Some(at(Some(found), problem));
        }
        self.expected_seq += 1;
        self.records += 1;
        self.prev = record.hash.clone();
        self.last = Some(Checkpoint {
            seq: found,
            hash: record.hash,
        });
        None
    }

    fn broken(self, files: usize, broken: Broken) -> VerifyReport {
        VerifyReport {
            intact: false,
            files,
            records: self.records,
            last: self.last,
            first_broken: Some(broken),
        }
    }
}

/// The segments and their lengths, taken under a shared lock so no batch is half-written.
pub(crate) fn snapshot(dir: &Path) -> Result<Vec<(Segment, u64)>, AuditError> {
    let lock = File::open(dir.join(LOCK_FILE)).ok();
    if let Some(lock) = &lock {
        let _ = lock.lock_shared();
    }
    let listed = segment::list(dir).and_then(|segments| {
        segments
            .into_iter()
            .map(|s| {
                let len = std::fs::symlink_metadata(&s.path)
                    .map_err(|source| AuditError::Read {
                        path: s.path.clone(),
                        source: arc(source),
                    })?
                    .len();
                Ok((s, len))
            })
            .collect()
    });
    if let Some(lock) = &lock {
        let _ = lock.unlock();
    }
    listed
}

pub(crate) fn read_prefix(segment: &Segment, len: u64) -> Result<Vec<u8>, AuditError> {
    let mut bytes = Vec::with_capacity(len as usize);
    segment::open_read(&segment.path)?
        .take(len)
        .read_to_end(&mut bytes)
        .map_err(|source| AuditError::Read {
            path: segment.path.clone(),
            source: arc(source),
        })?;
    Ok(bytes)
}
