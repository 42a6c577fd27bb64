//! The end of a segment: its last complete record, and a torn last line left by a crash in the
//! middle of a write (bytes after the last `\n`, up to the zeros allocated ahead if any), which
//! [`repair`] truncates away with those zeros.
//!
//! Only a line without its `\n` is torn, but for what a machine crash (power lost, a kernel
//! panic) leaves. The pages of a batch whose `fdatasync` had not returned reach the disk in
//! any order, so a later page may be there and an earlier one read as zeros (inside space
//! allocated ahead, or on a file system that does not order data before the file's size).
//! Nobody was answered for that batch: opening the log, the writer treats everything from
//! the line holding the first zero byte within a batch's reach of the end as torn
//! ([`read_tail_after_crash`]). A complete last line that is not a valid record is damage, not a
//! crash, and the log refuses to open on it rather than hide it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::canonical::check_line;
use super::error::{AuditError, arc};
use super::log::MAX_BATCH_BYTES;
use super::record::Record;
use super::segment::{self, Segment};

const CHUNK: u64 = 64 * 1024;

/// What a segment ends with.
#[derive(Debug)]
pub(crate) struct Tail {
    /// The last complete, valid record, if any.
    pub last: Option<Record>,
    /// Length of the complete lines (where the next record goes).
    pub complete_len: u64,
    /// `(offset, bytes)` of a torn last line, if any.
    pub torn: Option<(u64, Vec<u8>)>,
}

/// Reads the end of `file` (backwards, in chunks) without changing it.
pub(crate) fn read_tail(segment: &Segment, file: &File) -> Result<Tail, AuditError> {
    tail_from(segment, file, false)
}

/// [`read_tail`] for a writer opening the log, which may follow a machine crash: a zero byte
/// within a batch's reach of the end starts the torn part at its line.
pub(crate) fn read_tail_after_crash(segment: &Segment, file: &File) -> Result<Tail, AuditError> {
    tail_from(segment, file, true)
}

fn tail_from(segment: &Segment, file: &File, after_crash: bool) -> Result<Tail, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let len = segment::data_len(file).map_err(read)?;
    let mut complete_len = rfind_newline(file, len).map_err(read)?.map_or(0, |p| p + 1);
    let reach = len.saturating_sub(MAX_BATCH_BYTES as u64 + CHUNK);
    if after_crash && let Some(zero) = find_zero(file, reach, complete_len).map_err(read)? {
        complete_len = rfind_newline(file, zero)
            .map_err(read)?
            .map_or(0, |p| p + 1);
    }
    let torn = if complete_len < len {
        let mut bytes = vec![0; (len - complete_len) as usize];
        file.read_exact_at(&mut bytes, complete_len).map_err(read)?;
        Some((complete_len, bytes))
    } else {
        None
    };
    if complete_len == 0 {
        return Ok(Tail {
            last: None,
            complete_len,
            torn,
        });
    }
    let start = rfind_newline(file, complete_len - 1)
        .map_err(read)?
        .map_or(0, |p| p + 1);
    let mut line = vec![0; (complete_len - 1 - start) as usize];
    file.read_exact_at(&mut line, start).map_err(read)?;
    let record = check_line(&line).map_err(|problem| AuditError::DamagedTail {
        path: segment.path.clone(),
        line: count_lines(file, start).unwrap_or(0) + 1,
        problem: problem.to_string(),
    })?;
    Ok(Tail {
        last: Some(record),
        complete_len,
        torn,
    })
}

/// Truncates a torn last line away (durably) and describes what was removed, for the
/// `audit.repaired` record's `detail`.
pub(crate) fn repair(
    segment: &Segment,
    file: &File,
    offset: u64,
    removed: &[u8],
) -> Result<Map<String, Value>, AuditError> {
    let fail = |source| AuditError::Repair {
        path: segment.path.clone(),
        source: arc(source),
    };
    file.set_len(offset).map_err(fail)?;
    file.sync_data().map_err(fail)?;
    let detail = json!({
        "file": segment.name(),
        "offset": offset,
        "removed_bytes": removed.len(),
        "removed_sha256": hex::encode(Sha256::digest(removed)),
        "reason": if removed.contains(&0) {
            "torn batch (zeros where some of its pages did not reach the disk), left by a machine \
             crash in the middle of a write"
        } else {
            "torn last line (no newline), left by a crash in the middle of a write"
        },
    });
    Ok(detail.as_object().expect("an object").clone())
}

/// The position of the first zero byte in `[start, end)`.
fn find_zero(file: &File, start: u64, end: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0; CHUNK as usize];
    let mut at = start;
    while at < end {
        let chunk = &mut buf[..CHUNK.min(end - at) as usize];
        file.read_exact_at(chunk, at)?;
        if let Some(i) = chunk.iter().position(|&b| b == 0) {
            return Ok(Some(at + i as u64));
        }
        at += chunk.len() as u64;
    }
    Ok(None)
}

/// The position of the last `\n` before `end`.
fn rfind_newline(file: &File, end: u64) -> io::Result<Option<u64>> {
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

fn count_lines(file: &File, end: u64) -> io::Result<u64> {
    let mut count = 0;
    let mut offset = 0;
    let mut buf = vec![0; CHUNK as usize];
    while offset < end {
        let n = CHUNK.min(end - offset) as usize;
        file.read_exact_at(&mut buf[..n], offset)?;
        count += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        offset += n as u64;
    }
    Ok(count)
}
