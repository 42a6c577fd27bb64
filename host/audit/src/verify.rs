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

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

use super::canonical::{GENESIS, LineProblem, check_line_head, peek_seq};
use super::checkpoint::Checkpoint;
use super::error::{AuditError, arc};
use super::index::{self, SegmentIndex};
pub use super::problem::Problem;
use super::prune::{Anchored, pruned};
use super::segment::{self, LOCK_FILE, Segment, file_name};
use crate::time::Timestamp;

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
    /// The `seq` the chain starts at: 1, or after a prune its anchor's. A checkpoint of an
    /// earlier record names what was pruned, and cannot be checked any more.
    pub first_seq: u64,
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

/// Verifies the log in `dir`, against `checkpoint` if given. `Err` only when a file cannot be
/// read; everything wrong with the content is in the report.
pub fn verify(dir: &Path, checkpoint: Option<&Checkpoint>) -> Result<VerifyReport, AuditError> {
    verify_against(
        dir,
        checkpoint
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
            .as_slice(),
    )
}

/// Verifies the log in `dir` against every checkpoint in `checkpoints` (any order).
///
/// Segments are hashed and checked on their own in parallel (one per core, each streamed, so
/// memory is a few buffers per core), then linked in order: each segment's first record must
/// follow the previous segment's last. The first problem in chain order is reported.
pub fn verify_against(dir: &Path, checkpoints: &[Checkpoint]) -> Result<VerifyReport, AuditError> {
    let files = snapshot(dir)?;
    let anchor = super::prune::read_anchor(dir)?;
    let expected: BTreeMap<u64, &str> = checkpoints
        .iter()
        .map(|c| (c.seq, c.hash.as_str()))
        .collect();
    let results = check_segments(&files, &expected)?;
    let mut walk = match &anchor {
        None => Link {
            first_seq: 1,
            expected_seq: 1,
            prev: GENESIS.to_owned(),
            prev_ts: None,
            records: 0,
            last: None,
        },
        Some(a) => Link {
            first_seq: a.next_seq,
            expected_seq: a.next_seq,
            prev: a.prev.clone(),
            prev_ts: Some(a.prev_ts),
            records: 0,
            last: None,
        },
    };
    let first_number = anchor.as_ref().map_or(1, |a| a.first_segment);
    let mut last_file = (String::new(), 0);
    // Whether the chain holds the `audit.pruned` record of the anchor it starts at.
    let mut recorded = false;
    // A checkpoint of the last pruned record must be the anchor's `prev`; older ones are gone.
    if let Some(a) = &anchor
        && let Some(hash) = expected.get(&(a.next_seq - 1))
        && *hash != a.prev
    {
        let at = Broken {
            file: super::prune::ANCHOR_FILE.to_owned(),
            line: 1,
            seq: Some(a.next_seq - 1),
            problem: Problem::CheckpointMismatch {
                seq: a.next_seq - 1,
                checkpoint_hash: (*hash).to_owned(),
                hash: a.prev.clone(),
            },
        };
        return Ok(walk.report(files.len(), at));
    }
    for (index, ((segment, len), result)) in files.iter().zip(results).enumerate() {
        let expected_number = first_number + index as u64;
        let broken = |walk: Link, broken: Broken| Ok(walk.report(files.len(), broken));
        if segment.number != expected_number {
            return broken(
                walk,
                Broken {
                    file: segment.name(),
                    line: 1,
                    seq: None,
                    problem: Problem::MissingFile {
                        name: file_name(expected_number),
                    },
                },
            );
        }
        if let Some(first) = &result.first
            && let Some(problem) = walk.link(segment, *len, first)?
        {
            let at = Broken {
                file: segment.name(),
                line: 1,
                seq: Some(first.seq),
                problem,
            };
            return broken(walk, at);
        }
        walk.records += result.records;
        recorded |= (anchor.as_ref()).is_some_and(|a| {
            let named = (a.first_segment, a.next_seq, a.prev.clone());
            result.prunes.contains(&named)
        });
        if let Some(last) = &result.last {
            walk.expected_seq = last.seq + 1;
            walk.prev = last.hash.clone();
            walk.prev_ts = Some(last.ts);
            walk.last = Some(Checkpoint {
                seq: last.seq,
                hash: last.hash.clone(),
            });
        }
        if let Some(at) = result.broken {
            return broken(walk, at);
        }
        last_file = (segment.name(), result.lines);
    }
    let last_seq = walk.expected_seq - 1;
    if let Some((&seq, _)) = expected.last_key_value()
        && seq > last_seq
    {
        let at = Broken {
            file: last_file.0.clone(),
            line: last_file.1 + 1,
            seq: Some(last_seq + 1),
            problem: Problem::Truncated {
                checkpoint_seq: seq,
                last_seq,
            },
        };
        return Ok(walk.report(files.len(), at));
    }
    if let Some(a) = &anchor
        && !recorded
    {
        let at = Broken {
            file: super::prune::ANCHOR_FILE.to_owned(),
            line: 1,
            seq: Some(a.next_seq),
            problem: Problem::UnrecordedAnchor {
                first_segment: a.first_segment,
                next_seq: a.next_seq,
            },
        };
        return Ok(walk.report(files.len(), at));
    }
    Ok(VerifyReport {
        intact: true,
        files: files.len(),
        records: walk.records,
        last: walk.last,
        first_broken: None,
        first_seq: walk.first_seq,
    })
}

/// The chain so far, while linking segments.
struct Link {
    first_seq: u64,
    expected_seq: u64,
    prev: String,
    prev_ts: Option<Timestamp>,
    records: u64,
    last: Option<Checkpoint>,
}

impl Link {
    /// What is wrong with `first` (a segment's first record) following the chain so far.
    fn link(
        &self,
        segment: &Segment,
        len: u64,
        first: &Seen,
    ) -> Result<Option<Problem>, AuditError> {
        let (expected, found) = (self.expected_seq, first.seq);
        if found != expected {
            let later = found > expected && seq_later_in(segment, len, expected)?;
            return Ok(Some(if found < expected || later {
                Problem::Reordered { expected, found }
            } else {
                Problem::SeqGap { expected, found }
            }));
        }
        if first.prev != self.prev {
            return Ok(Some(Problem::BrokenLink {
                prev: first.prev.clone(),
                expected: self.prev.clone(),
            }));
        }
        if let Some(previous) = self.prev_ts
            && first.ts < previous
        {
            return Ok(Some(Problem::TimeWentBack {
                previous,
                ts: first.ts,
            }));
        }
        Ok(None)
    }

    fn report(self, files: usize, broken: Broken) -> VerifyReport {
        VerifyReport {
            intact: false,
            files,
            records: self.records,
            last: self.last,
            first_broken: Some(broken),
            first_seq: self.first_seq,
        }
    }
}

/// A record as far as linking needs it.
#[derive(Debug, Clone)]
struct Seen {
    seq: u64,
    ts: Timestamp,
    prev: String,
    hash: String,
}

/// One segment checked on its own.
#[derive(Debug, Default)]
struct SegmentCheck {
    /// The anchors its `audit.pruned` records name.
    prunes: Vec<Anchored>,
    /// Its first record, if that line is a valid record.
    first: Option<Seen>,
    /// Its last record before any problem.
    last: Option<Seen>,
    /// Valid records before any problem.
    records: u64,
    /// Complete lines.
    lines: u64,
    broken: Option<Broken>,
}

/// Checks every segment, in parallel; the results are in the order of `files`.
fn check_segments(
    files: &[(Segment, u64)],
    checkpoints: &BTreeMap<u64, &str>,
) -> Result<Vec<SegmentCheck>, AuditError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<SegmentCheck, AuditError>>>> =
        files.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((segment, len)) = files.get(i) else {
                        break;
                    };
                    // The newest segment was live when the snapshot was taken.
                    let live = i + 1 == files.len();
                    let result = check_segment(segment, *len, live, checkpoints);
                    *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .expect("every segment was checked")
        })
        .collect()
}

/// Checks a segment's lines against their own hashes and each other (not against the segment
/// before it), streamed; then its index, if it has one. The index of a segment that was `live`
/// (the newest) when the snapshot was taken may be newer than the snapshot: a writer that
/// appended to it and rotated since wrote it. It is checked only for the records read.
fn check_segment(
    segment: &Segment,
    len: u64,
    live: bool,
    checkpoints: &BTreeMap<u64, &str>,
) -> Result<SegmentCheck, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    // A compressed segment is read to its end, whatever its header declares.
    let len = if segment.compressed { u64::MAX } else { len };
    let stream = segment::open_stream(segment, 0, len)?;
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut check = SegmentCheck::default();
    let mut buf = Vec::new();
    let mut offset = 0u64;
    loop {
        buf.clear();
        let at = |seq, problem| Broken {
            file: segment.name(),
            line: check.lines + 1,
            seq,
            problem,
        };
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(n) => n,
            Err(e) if segment.compressed => {
                let message = e.to_string();
                check.broken = Some(at(None, Problem::Compression { message }));
                break;
            }
            Err(e) => return Err(read(e)),
        };
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') {
            check.broken = Some(at(peek_seq(&buf), Problem::TornLine { bytes: n as u64 }));
            break;
        }
        offset += n as u64;
        let line = &buf[..n - 1];
        let record = match check_line_head(line) {
            Ok(record) => record,
            Err(LineProblem::Unparsable(message)) => {
                check.broken = Some(at(peek_seq(line), Problem::Unparsable { message }));
                break;
            }
            Err(LineProblem::BadHash { recorded, computed }) => {
                check.broken = Some(at(peek_seq(line), Problem::BadHash { recorded, computed }));
                break;
            }
        };
        let seen = Seen {
            seq: record.seq,
            ts: record.ts,
            prev: record.prev,
            hash: record.hash,
        };
        if let Some(last) = &check.last {
            let (expected, found) = (last.seq + 1, seen.seq);
            if found != expected {
                let later = found > expected && seq_later_from(segment, offset, len, expected)?;
                let problem = if found < expected || later {
                    Problem::Reordered { expected, found }
                } else {
                    Problem::SeqGap { expected, found }
                };
                check.broken = Some(at(Some(found), problem));
                break;
            }
            if seen.prev != last.hash {
                let problem = Problem::BrokenLink {
                    prev: seen.prev,
                    expected: last.hash.clone(),
                };
                check.broken = Some(at(Some(found), problem));
                break;
            }
            if seen.ts < last.ts {
                let problem = Problem::TimeWentBack {
                    previous: last.ts,
                    ts: seen.ts,
                };
                check.broken = Some(at(Some(found), problem));
                break;
            }
        }
        if let Some(hash) = checkpoints.get(&seen.seq)
            && *hash != seen.hash
        {
            let problem = Problem::CheckpointMismatch {
                seq: seen.seq,
                checkpoint_hash: (*hash).to_owned(),
                hash: seen.hash,
            };
            check.broken = Some(at(Some(seen.seq), problem));
            break;
        }
        if let Some(anchored) = pruned(line) {
            check.prunes.push(anchored);
        }
        check.lines += 1;
        check.records += 1;
        if check.first.is_none() {
            check.first = Some(seen.clone());
        }
        check.last = Some(seen);
    }
    if check.broken.is_none()
        && let Some(index) = index::read(segment)
        && !(live && index.bytes > offset)
    {
        let actual = match (&check.first, &check.last) {
            (Some(first), Some(last)) => Some(SegmentIndex {
                bytes: offset,
                first_seq: first.seq,
                first_ts: first.ts,
                last_seq: last.seq,
                last_ts: last.ts,
                last_hash: last.hash.clone(),
            }),
            _ => None,
        };
        if actual.as_ref() != Some(&index) {
            check.broken = Some(Broken {
                file: segment.name(),
                line: 1,
                seq: check.first.as_ref().map(|f| f.seq),
                problem: Problem::IndexMismatch {
                    index: Box::new(index),
                    actual: actual.map(Box::new),
                },
            });
        }
    }
    Ok(check)
}

/// Whether a line of `segment[..len]` has seq `wanted` (tells a reorder from a deletion).
fn seq_later_in(segment: &Segment, len: u64, wanted: u64) -> Result<bool, AuditError> {
    seq_later_from(segment, 0, len, wanted)
}

fn seq_later_from(segment: &Segment, from: u64, len: u64, wanted: u64) -> Result<bool, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let mut reader = BufReader::new(segment::open_stream(segment, from, len)?);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(read)? == 0 {
            return Ok(false);
        }
        if peek_seq(&buf) == Some(wanted) {
            return Ok(true);
        }
    }
}

/// The segments and their lengths, taken under a shared lock so no batch is half-written.
pub(crate) fn snapshot(dir: &Path) -> Result<Vec<(Segment, u64)>, AuditError> {
    let lock = File::open(dir.join(LOCK_FILE)).ok();
    if let Some(lock) = &lock {
        let _ = lock.lock_shared();
    }
    let first = super::prune::read_anchor(dir).map(|a| a.map_or(1, |a| a.first_segment));
    let listed = first
        .and_then(|first| Ok((first, segment::list(dir)?)))
        .and_then(|(first, segments)| {
            segments
                .into_iter()
                .filter(|s| s.number >= first)
                .map(|s| {
                    let len = segment::plain_len(&s)?;
                    Ok((s, len))
                })
                .collect()
        });
    if let Some(lock) = &lock {
        let _ = lock.unlock();
    }
    listed
}
