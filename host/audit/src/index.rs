//! The per-segment index: a small JSON file `audit-NNNNNN.idx` beside each closed segment,
//! written by the writer when it rotates, holding the segment's (plain, uncompressed) length, its first and last
//! record (`seq`, `ts`) and its last hash. Queries use it to skip whole segments by time;
//! `verify` checks it against the segment, so an index that hides records is reported.
//!
//! The index is a cache, never trusted for the chain: a segment without one (the open segment,
//! a log written before indexes, a failed write) has its range read from its first and last
//! lines instead, which is as cheap. The range is `[first.ts, last.ts]` because the writer
//! never lets `ts` go backwards (see `writer`), and `verify` reports a record that does.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::canonical::peek_seq_ts;
use super::segment::Segment;
use crate::time::Timestamp;

/// What a closed segment holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentIndex {
    /// The segment's length in bytes; an index whose length differs is ignored by readers.
    pub bytes: u64,
    pub first_seq: u64,
    pub first_ts: Timestamp,
    pub last_seq: u64,
    pub last_ts: Timestamp,
    pub last_hash: String,
}

/// Where `segment`'s index lives (the same for its plain and compressed forms).
pub(crate) fn path(segment: &Segment) -> PathBuf {
    segment
        .dir()
        .join(format!("audit-{:06}.idx", segment.number))
}

/// Reads `segment`'s index; `None` when there is none or it is not an index.
pub(crate) fn read(segment: &Segment) -> Option<SegmentIndex> {
    let file = super::segment::open_read(&path(segment)).ok()?;
    let mut bytes = Vec::with_capacity(512);
    io::Read::read_to_end(&mut io::Read::take(file, 4096), &mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `segment`'s index if it describes `segment[..len]`; a compressed segment (closed, read to
/// its end) takes its index as it is, which `compress` checked when it compressed it and
/// `verify` checks against what it holds.
pub(crate) fn read_for(segment: &Segment, len: u64) -> Option<SegmentIndex> {
    read(segment).filter(|i| segment.compressed || i.bytes == len)
}

/// Writes `segment`'s index (temp file, then rename; 0600). Not synced: it can be rebuilt.
pub(crate) fn write(segment: &Segment, index: &SegmentIndex) -> io::Result<()> {
    let target = path(segment);
    let temp = target.with_extension("idx.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)?;
    file.write_all(&serde_json::to_vec(index).expect("an index serialises"))?;
    drop(file);
    std::fs::rename(&temp, &target)
}

/// A segment's first and last `(seq, ts)`.
pub(crate) type Ends = ((u64, Timestamp), (u64, Timestamp));

/// The first and last `(seq, ts)` of the complete lines in `file[..len]`, read from its two
/// ends; `None` for an empty segment or lines that do not start like records.
pub(crate) fn range_of(file: &File, len: u64) -> io::Result<Option<Ends>> {
    if len == 0 {
        return Ok(None);
    }
    let first = peek_at(file, 0, len)?;
    let last_start = match rfind_newline(file, len - 1)? {
        Some(p) => p + 1,
        None => 0,
    };
    let last = peek_at(file, last_start, len)?;
    Ok(first.zip(last))
}

/// `(seq, ts)` of the line starting at `offset`.
pub(crate) fn peek_at(file: &File, offset: u64, len: u64) -> io::Result<Option<(u64, Timestamp)>> {
    let mut buf = [0u8; 96];
    let n = (len.saturating_sub(offset)).min(buf.len() as u64) as usize;
    file.read_exact_at(&mut buf[..n], offset)?;
    Ok(peek_seq_ts(&buf[..n]))
}

/// The position of the last `\n` before `end`.
pub(crate) fn rfind_newline(file: &File, end: u64) -> io::Result<Option<u64>> {
    const CHUNK: u64 = 16 * 1024;
    let mut end = end;
    let mut buf = vec![0; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + i as u64));
        }
        end = start;
    }
    Ok(None)
}

/// The position of the first `\n` at or after `from`, before `end`.
fn find_newline(file: &File, from: u64, end: u64) -> io::Result<Option<u64>> {
    const CHUNK: u64 = 16 * 1024;
    let mut at = from;
    let mut buf = vec![0; CHUNK as usize];
    while at < end {
        let n = CHUNK.min(end - at) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        if let Some(i) = buf[..n].iter().position(|&b| b == b'\n') {
            return Ok(Some(at + i as u64));
        }
        at += n as u64;
    }
    Ok(None)
}

/// The offset of the first complete line in `file[..len]` whose `ts` is at or after `since`
/// (`len` if none), by binary search over byte offsets: `ts` never decreases along the chain.
/// A line that does not start like a record stops the search at 0, so the caller reads (and
/// reports) everything.
pub(crate) fn seek_since(file: &File, len: u64, since: Timestamp) -> io::Result<u64> {
    let (mut lo, mut hi) = (0u64, len);
    let next_start =
        |at: u64| -> io::Result<u64> { Ok(find_newline(file, at, len)?.map_or(len, |p| p + 1)) };
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let probe = if mid == lo { lo } else { next_start(mid - 1)? };
        let probe = if probe >= hi { lo } else { probe };
        let Some((_, ts)) = peek_at(file, probe, len)? else {
            return Ok(0);
        };
        if ts < since {
            lo = next_start(probe)?;
        } else {
            hi = probe;
        }
    }
    Ok(lo)
}
