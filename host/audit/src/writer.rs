//! The writer: where the log's file state lives and a batch becomes durable.
//!
//! One batch = one write of all its lines + one `fdatasync`, under an exclusive `flock` on
//! `audit.lock`. Holding the lock only per batch lets several gateway processes share one
//! directory and one chain: before writing, a writer checks (one read of two bytes where its
//! records end) whether another process appended or rotated since its last batch, and if so
//! re-reads the tail — repairing a line torn by that process's crash — before numbering its
//! own records. Records from different processes therefore never interleave within a line or
//! break the chain. On a failed write or sync the file is truncated back to where the batch
//! began (so no record the callers were told failed stays as a valid line); if even that fails
//! the writer is poisoned and refuses every later batch. (In that last case the failed
//! batch's lines may survive as valid records of calls that were in fact refused: the log
//! then over-reports, never under-reports.)
//!
//! Space allocated ahead ([`crate::AuditOptions::preallocate_bytes`]): from its second batch
//! a writer extends the live segment with `fallocate`, a step at a time, and writes each
//! batch into those zeros where its records end. An append that grows the file makes
//! `fdatasync` write the inode and the allocation too; a write inside the file's length, only
//! the data. Readers stop at the trailing zeros ([`segment::data_len`]); the zeros are cut off
//! when a writer opens, rotates and closes, so a segment at rest is plain JSON lines.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::canonical::{GENESIS, encode_body, encode_line};
use super::error::{AuditError, arc};
use super::index::{self, SegmentIndex};
use super::record::{Entry, Event, Receipt, Record};
use super::segment::{self, LOCK_FILE, Segment};
use super::tail::{read_tail, read_tail_after_crash, repair};
use crate::time::Timestamp;

/// A fault to inject into the next batch (tests only).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inject {
    /// Write half the batch, then fail.
    WriteHalf,
    /// Write the batch, then fail the sync.
    Sync,
    /// Fail the sync and the rollback.
    SyncAndRollback,
    /// At the next rotation, fail to make the new segment's directory entry durable.
    RotationSync,
}

/// Where the next record goes.
struct Position {
    segment: Segment,
    file: File,
    /// Where the records end (the next batch goes here).
    len: u64,
    /// The file's length as this writer last knew it: past `len`, zeros allocated ahead.
    /// Another writer may have cut them off or allocated more since; it only decides when
    /// to allocate again (cutting off looks at the file).
    end: u64,
    head: Receipt,
    /// The head's `ts`: the next record's is never earlier (queries rely on it).
    head_ts: Option<Timestamp>,
    /// The segment's first record, for its index (`None` while it is empty or unknown).
    first: Option<(u64, Timestamp)>,
}

pub(crate) struct Writer {
    dir: PathBuf,
    lock_path: PathBuf,
    lock: File,
    at: Position,
    max_file_bytes: u64,
    /// Bytes to allocate ahead at a time; 0 once `fallocate` failed (or when off).
    preallocate: u64,
    /// Batches written (space is allocated ahead only from the second: a one-shot writer,
    /// such as a CLI command's, leaves no zeros behind).
    batches: u64,
    /// Whether this writer ever allocated space ahead (and so cuts it off when dropped).
    allocated: bool,
    poisoned: bool,
    /// Our last rotation failed, perhaps after creating the next segment.
    rotation_failed: bool,
    /// Bodies of `audit.repaired` records still to be written, first in the next batch.
    pending: Vec<Vec<u8>>,
    #[cfg(test)]
    pub(crate) inject: Option<Inject>,
}

impl Writer {
    /// Opens the log in `dir`, repairing a torn last line; returns what was repaired.
    pub fn open(
        dir: &Path,
        max_file_bytes: u64,
        preallocate: u64,
    ) -> Result<(Writer, Vec<Map<String, Value>>), AuditError> {
        segment::ensure_dir(dir)?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = segment::open_append(&lock_path, false)?;
        let lock_error = |source| AuditError::Lock {
            path: lock_path.clone(),
            source: arc(source),
        };
        lock.lock().map_err(lock_error)?;
        // Zeros a writer that crashed allocated ahead go (under the lock, as a rotation's).
        let located = locate(dir, true).and_then(|(mut at, repaired)| {
            at.cut_ahead()?;
            Ok((at, repaired))
        });
        let (at, repaired) = match located {
            Ok(located) => located,
            Err(error) => {
                let _ = lock.unlock();
                return Err(error);
            }
        };
        let mut writer = Writer {
            dir: dir.to_owned(),
            lock_path,
            lock,
            at,
            max_file_bytes: max_file_bytes.max(1),
            preallocate,
            batches: 0,
            allocated: false,
            poisoned: false,
            rotation_failed: false,
            pending: repaired.iter().map(repair_body).collect(),
            #[cfg(test)]
            inject: None,
        };
        let written = writer.commit_locked(&[]);
        let _ = writer.lock.unlock();
        written?;
        Ok((writer, repaired.into_iter().collect()))
    }

    /// The number of the segment the next batch goes to.
    pub fn segment_number(&self) -> u64 {
        self.at.segment.number
    }

    /// The last durable record (after catching up with other processes).
    pub fn head(&mut self) -> Result<Receipt, AuditError> {
        self.commit(&[])?;
        Ok(self.at.head.clone())
    }

    /// Appends the bodies as one batch; on success they are durable, in order.
    pub fn commit(&mut self, bodies: &[&[u8]]) -> Result<Vec<Receipt>, AuditError> {
        if self.poisoned {
            return Err(AuditError::Poisoned);
        }
        self.lock.lock().map_err(|source| {
            AuditError::Unavailable(Box::new(AuditError::Lock {
                path: self.lock_path.clone(),
                source: arc(source),
            }))
        })?;
        let result = self.commit_locked(bodies);
        let _ = self.lock.unlock();
        result
    }

    fn commit_locked(&mut self, bodies: &[&[u8]]) -> Result<Vec<Receipt>, AuditError> {
        if self.changed() {
            let (at, repaired) =
                locate(&self.dir, false).map_err(|e| AuditError::Unavailable(Box::new(e)))?;
            self.at = at;
            self.rotation_failed = false;
            self.pending.extend(repaired.iter().map(repair_body));
        }
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() && bodies.is_empty() {
            return Ok(Vec::new());
        }
        let mut buf = Vec::new();
        let mut receipts = Vec::with_capacity(bodies.len());
        let mut seq = self.at.head.seq;
        let mut prev = self.at.head.hash.clone();
        let all = pending
            .iter()
            .map(Vec::as_slice)
            .chain(bodies.iter().copied());
        let mut ts = self.at.head_ts;
        let first = self.at.first;
        for (i, body) in all.enumerate() {
            seq += 1;
            // `ts` never goes backwards, even when the clock does: segments' time ranges are
            // then their first and last records', and queries can skip and seek by time.
            let now = Timestamp::now().max(ts.unwrap_or(Timestamp::from_unix_micros(0)));
            ts = Some(now);
            if self.at.first.is_none() && self.at.len == 0 && i == 0 {
                self.at.first = Some((seq, now));
            }
            let (line, hash) = encode_line(seq, now, &prev, body);
            buf.extend_from_slice(&line);
            if i >= pending.len() {
                receipts.push(Receipt {
                    seq,
                    hash: hash.clone(),
                });
            }
            prev = hash;
        }
        if let Err(error) = self.write_and_sync(&buf) {
            self.pending = pending;
            self.at.first = first;
            self.rollback();
            return Err(error);
        }
        self.at.len += buf.len() as u64;
        self.at.head = Receipt { seq, hash: prev };
        self.at.head_ts = ts;
        if self.at.len >= self.max_file_bytes {
            // The batch is durable whatever happens here; a failed rotation is retried after
            // the next batch (which goes to the next segment if the failure left one, see
            // `changed`), and the chain does not depend on where files begin.
            self.rotation_failed = self.rotate().is_err();
        }
        Ok(receipts)
    }

    /// Whether another process appended or rotated since our last batch. A writer creates the
    /// next segment only when it rotates, in the same locked batch as its append to this one
    /// (compression and pruning never touch the newest segment), so another process's rotation
    /// always writes where our records end. Only our own rotation, failed perhaps after
    /// creating the next segment, needs a look for it.
    ///
    /// One read of the bytes around our records' end (our last `\n`, then nothing or zeros
    /// allocated ahead), no `fstat`: since Linux 6.13 (multigrain timestamps) a stat of the
    /// file makes its next write update the timestamps, and `fdatasync` on ext4 without a
    /// journal then writes the inode too (measured here, Linux 6.18: 93 → 129–145 µs a durable
    /// record inside allocated space, as much as a growing file costs).
    fn changed(&self) -> bool {
        let mut around = [0u8; 2];
        let from = self.at.len.saturating_sub(1);
        let Ok(read) = self.at.file.read_at(&mut around, from) else {
            return true;
        };
        let after = match self.at.len {
            0 => &around[..read],
            _ if read == 0 || around[0] != b'\n' => return true,
            _ => &around[1..read],
        };
        if after.first().is_some_and(|&b| b != 0) {
            return true;
        }
        let next = self.at.segment.number + 1;
        // The next segment may be closed and compressed already.
        self.rotation_failed
            && (Segment::new(&self.dir, next).path.exists()
                || Segment::compressed(&self.dir, next).path.exists())
    }

    fn write_and_sync(&mut self, buf: &[u8]) -> Result<(), AuditError> {
        #[cfg(test)]
        if let Some(inject) = self.inject.take_if(|i| *i != Inject::RotationSync) {
            let injected = || arc(std::io::Error::other("injected fault"));
            if inject == Inject::WriteHalf {
                let _ = self
                    .at
                    .file
                    .write_all_at(&buf[..buf.len() / 2], self.at.len);
                return Err(AuditError::Write(injected()));
            }
            let _ = self.at.file.write_all_at(buf, self.at.len);
            if inject == Inject::SyncAndRollback {
                self.poisoned = true;
            }
            return Err(AuditError::Sync(injected()));
        }
        self.allocate_ahead(buf.len() as u64);
        (self.at.file)
            .write_all_at(buf, self.at.len)
            .map_err(|e| AuditError::Write(arc(e)))?;
        self.at.end = self.at.end.max(self.at.len + buf.len() as u64);
        self.batches += 1;
        self.at
            .file
            .sync_data()
            .map_err(|e| AuditError::Sync(arc(e)))
    }

    /// Makes room for `bytes` more inside the file's length, if space is allocated ahead: a
    /// step at a time, never past the size the segment rotates at. A file system that cannot
    /// (`EOPNOTSUPP`; or one out of space, where the write then says so) turns it off: the
    /// batch is appended as without it.
    fn allocate_ahead(&mut self, bytes: u64) {
        let needed = self.at.len + bytes;
        if self.preallocate == 0 || self.batches == 0 || needed <= self.at.end {
            return;
        }
        let room = self.max_file_bytes.saturating_sub(self.at.len);
        let step = self.preallocate.min(room).max(bytes);
        let flags = rustix::fs::FallocateFlags::empty();
        match rustix::fs::fallocate(&self.at.file, flags, self.at.len, step) {
            Ok(()) => {
                self.at.end = self.at.end.max(self.at.len + step);
                self.allocated = true;
            }
            Err(_) => self.preallocate = 0,
        }
    }

    /// Truncates a failed batch away; poisons the writer if that fails too.
    fn rollback(&mut self) {
        if self.poisoned {
            return;
        }
        let file = &self.at.file;
        if file
            .set_len(self.at.len)
            .and_then(|()| file.sync_data())
            .is_err()
        {
            self.poisoned = true;
        }
        self.at.end = self.at.len;
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        // A closed segment has no zeros after its records: only the newest may.
        self.at.cut_ahead()?;
        let next = Segment::new(&self.dir, self.at.segment.number + 1);
        let file = segment::open_live(&next.path, true)?;
        let synced = segment::sync_dir(&self.dir);
        #[cfg(test)]
        let synced = match self.inject.take_if(|i| *i == Inject::RotationSync) {
            Some(_) => Err(std::io::Error::other("injected fault")),
            None => synced,
        };
        synced.map_err(|e| AuditError::Write(arc(e)))?;
        if let (Some((first_seq, first_ts)), Some(last_ts)) = (self.at.first, self.at.head_ts) {
            // A cache for queries, checked by `verify`: a failure here costs only speed.
            let _ = index::write(
                &self.at.segment,
                &SegmentIndex {
                    bytes: self.at.len,
                    first_seq,
                    first_ts,
                    last_seq: self.at.head.seq,
                    last_ts,
                    last_hash: self.at.head.hash.clone(),
                },
            );
        }
        self.at.segment = next;
        self.at.file = file;
        self.at.len = 0;
        self.at.end = 0;
        self.at.first = None;
        Ok(())
    }
}

impl Position {
    /// Cuts off the zeros allocated ahead of the records (by this writer or another), durably.
    fn cut_ahead(&mut self) -> Result<(), AuditError> {
        let fail = |source| AuditError::Write(arc(source));
        if self.file.metadata().map_err(fail)?.len() > self.len {
            self.file.set_len(self.len).map_err(fail)?;
            self.file.sync_data().map_err(fail)?;
        }
        self.end = self.len;
        Ok(())
    }
}

impl Drop for Writer {
    /// Leaves the live segment as plain JSON lines: cuts off the zeros allocated ahead, under
    /// the lock and after the records as they are now (another process may have written some
    /// since our last batch).
    fn drop(&mut self) {
        if !self.allocated || self.lock.lock().is_err() {
            return;
        }
        if let Ok(len) = segment::data_len(&self.at.file) {
            self.at.len = len;
            let _ = self.at.cut_ahead();
        }
        let _ = self.lock.unlock();
    }
}

/// The chain's head after `last` (the genesis when there is none).
fn head_of(last: Option<Record>) -> (Receipt, Option<Timestamp>) {
    match last {
        Some(r) => (
            Receipt {
                seq: r.seq,
                hash: r.hash,
            },
            Some(r.ts),
        ),
        None => (
            Receipt {
                seq: 0,
                hash: GENESIS.to_owned(),
            },
            None,
        ),
    }
}

/// The chain's head at the end of `closed` (the segments before the live one, oldest first):
/// their last record, or where a prune left the chain when none of them holds one (they were
/// all pruned but an empty one, made by a rotation), or the genesis. Segments older than the
/// prune's anchor, left by a prune cut short, are not the chain's.
fn head_before(dir: &Path, closed: &[Segment]) -> Result<(Receipt, Option<Timestamp>), AuditError> {
    let anchor = super::prune::read_anchor(dir)?;
    let first = anchor.as_ref().map_or(0, |a| a.first_segment);
    for older in closed.iter().rev().take_while(|s| s.number >= first) {
        if let Some(last) = last_of(older)? {
            return Ok(head_of(Some(last)));
        }
    }
    Ok(match anchor {
        Some(anchor) => (
            Receipt {
                seq: anchor.next_seq.saturating_sub(1),
                hash: anchor.prev,
            },
            Some(anchor.prev_ts),
        ),
        None => head_of(None),
    })
}

/// The last record of a closed segment, which must not end in a torn line.
fn last_of(closed: &Segment) -> Result<Option<Record>, AuditError> {
    if closed.compressed {
        return super::compress::last_record(closed);
    }
    let tail = read_tail(closed, &segment::open_read(&closed.path)?)?;
    if tail.torn.is_some() {
        return Err(AuditError::DamagedTail {
            path: closed.path.clone(),
            line: 0,
            problem: "a rotated file ends in a torn line".to_owned(),
        });
    }
    Ok(tail.last)
}

fn repair_body(detail: &Map<String, Value>) -> Vec<u8> {
    let mut entry = Entry::new(Event::AuditRepaired);
    entry.detail = Some(detail.clone());
    encode_body(&entry)
}

/// Finds the newest segment and the chain's head, truncating a torn last line. `opening`: the
/// log may follow a machine crash, which can tear a batch in the middle (see `tail`); another
/// process's crash cannot (its writes are in the page cache, whole or not at all).
fn locate(dir: &Path, opening: bool) -> Result<(Position, Option<Map<String, Value>>), AuditError> {
    let segments = segment::list(dir)?;
    let end_of = |segment: &Segment, file: &File| {
        let read = |source| AuditError::Read {
            path: segment.path.clone(),
            source: arc(source),
        };
        file.metadata().map(|m| m.len()).map_err(read)
    };
    // Only closed segments are compressed: when the newest is (the plain one after it is
    // gone), the log goes on in a new one.
    let newest = segments.last().filter(|s| !s.compressed).cloned();
    let Some(newest) = newest else {
        let segment = Segment::new(dir, segments.last().map_or(1, |s| s.number + 1));
        let file = segment::open_live(&segment.path, false)?;
        segment::sync_dir(dir).map_err(|source| AuditError::Open {
            path: dir.to_owned(),
            source: arc(source),
        })?;
        let (head, head_ts) = head_before(dir, &segments)?;
        return Ok((
            Position {
                end: end_of(&segment, &file)?,
                segment,
                file,
                len: 0,
                head,
                head_ts,
                first: None,
            },
            None,
        ));
    };
    let file = segment::open_live(&newest.path, false)?;
    let tail = match opening {
        true => read_tail_after_crash(&newest, &file)?,
        false => read_tail(&newest, &file)?,
    };
    let repaired = match &tail.torn {
        Some((offset, bytes)) => Some(repair(&newest, &file, *offset, bytes)?),
        None => None,
    };
    let first = index::peek_at(&file, 0, tail.complete_len)
        .ok()
        .flatten()
        .filter(|_| tail.complete_len > 0);
    let (head, head_ts) = match tail.last {
        Some(last) => head_of(Some(last)),
        None => head_before(dir, &segments[..segments.len() - 1])?,
    };
    Ok((
        Position {
            end: end_of(&newest, &file)?,
            segment: newest,
            file,
            len: tail.complete_len,
            head,
            head_ts,
            first,
        },
        repaired,
    ))
}
