//! Compressed closed segments: `audit-NNNNNN.jsonl.zst` holds exactly the bytes of the plain
//! segment as a sequence of zstd frames of about 1 MiB of whole lines each (each with its
//! plain size in its header and a content checksum at its end). Hashes, the chain,
//! checkpoints and the `.idx` index (whose `bytes` is the plain length) are therefore the same
//! whether a segment is compressed or not: readers decompress as they stream, and an edited or
//! truncated compressed file fails to decompress or to hash. The frames let a query enter a
//! compressed segment near `since` ([`seek_since`]: binary search over the frames' first
//! records) instead of decompressing it from its start.
//!
//! Only closed segments are compressed (never the newest, which writers append to), by a
//! background thread that rotation wakes (`[audit] compress = "zstd"`; the call that rotated
//! does not wait for it) or by `hpcgate audit compress`. One compressor at a time per
//! directory (`flock` on `audit-compress.lock`, which `prune` takes too). Each segment is
//! compressed crash-safely: into `<name>.zst.tmp`, `fsync`ed, read back and compared with the
//! plain bytes, renamed to `<name>.zst`, the directory `fsync`ed, and only then the plain file
//! removed. A crash therefore leaves the plain segment, or both (readers take the plain one
//! and the next run compresses it again), or the compressed one — never neither; a leftover
//! temporary file is removed by the next run.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::canonical::{check_line, peek_seq_ts};
use super::error::{AuditError, arc};
use super::index::{self, SegmentIndex};
use super::record::Record;
use super::segment::{self, Segment};
use super::tail::read_tail;
use crate::time::Timestamp;
use zstd::zstd_safe::CParameter;

/// Serialises compressors (and `prune`) on one directory.
pub(crate) const LOCK_FILE: &str = "audit-compress.lock";

/// zstd's default level: about 8× smaller audit segments here at a few hundred MB/s per core.
const LEVEL: i32 = 3;

/// Plain bytes per frame, in whole lines (a longer line is a frame of its own). Small in tests,
/// so that they cross frames.
const FRAME_BYTES: usize = if cfg!(test) { 8 << 10 } else { 1 << 20 };

const CHUNK: usize = 256 * 1024;

/// What [`compress_closed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompressReport {
    /// Segments compressed by this run.
    pub segments: u64,
    /// Their plain and compressed sizes.
    pub plain_bytes: u64,
    pub compressed_bytes: u64,
    /// Closed segments left plain, and why (a damaged end is left for `verify` to report).
    pub skipped: Vec<String>,
}

/// The plain bytes of a compressed segment, streamed (across its frames).
pub(crate) fn decoder(file: File) -> io::Result<impl Read + Send + use<>> {
    zstd::stream::read::Decoder::new(file)
}

/// Where to start reading `file` (a compressed segment) for the records at or after `since`:
/// `(compressed offset, plain offset)` of the last frame whose first record is before `since`
/// (every later record is in it or after it). `None` when the frames cannot be walked (a file
/// not written by this compressor, or damaged): then read it from the start, which reports
/// any damage. Costs one read of the compressed file and a few frame starts decompressed.
pub(crate) fn seek_since(file: &File, since: Timestamp) -> Option<(u64, u64)> {
    let mut data = Vec::new();
    (&*file).read_to_end(&mut data).ok()?;
    let mut frames = Vec::new();
    let (mut at, mut plain) = (0usize, 0u64);
    while at < data.len() {
        let rest = &data[at..];
        let size = zstd::zstd_safe::find_frame_compressed_size(rest).ok()?;
        let content = zstd::zstd_safe::get_frame_content_size(rest).ok()??;
        frames.push((at, plain));
        (at, plain) = (at + size, plain + content);
    }
    let first_ts = |&(at, _): &(usize, u64)| -> Option<Timestamp> {
        let mut head = [0u8; 96];
        let mut decoder = zstd::stream::read::Decoder::with_buffer(&data[at..]).ok()?;
        let mut n = 0;
        while n < head.len() {
            match decoder.read(&mut head[n..]).ok()? {
                0 => break,
                read => n += read,
            }
        }
        peek_seq_ts(&head[..n]).map(|(_, ts)| ts)
    };
    let (mut lo, mut hi) = (0, frames.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if first_ts(&frames[mid])? < since {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let (at, plain) = frames[lo.saturating_sub(1).min(frames.len().checked_sub(1)?)];
    Some((at as u64, plain))
}

/// Compresses every closed segment of the log in `dir` that is still plain (all but the
/// newest, and none before a prune's anchor), waiting for a compressor already at work.
pub fn compress_closed(dir: &Path) -> Result<CompressReport, AuditError> {
    compress_with(dir, &AtomicBool::new(false), true).map(Option::unwrap_or_default)
}

/// [`compress_closed`] that stops early when `stop` is set; `None` (without waiting) when
/// another compressor holds the directory and `wait` is false.
fn compress_with(
    dir: &Path,
    stop: &AtomicBool,
    wait: bool,
) -> Result<Option<CompressReport>, AuditError> {
    let Some(lock) = lock(dir, wait)? else {
        return Ok(None);
    };
    let result = compress_locked(dir, stop);
    let _ = lock.unlock();
    result.map(Some)
}

/// Takes the compressor lock of `dir`: waiting, or `None` if `wait` is false and it is held.
pub(crate) fn lock(dir: &Path, wait: bool) -> Result<Option<File>, AuditError> {
    let path = dir.join(LOCK_FILE);
    let file = segment::open_append(&path, false)?;
    let fail = |source| AuditError::Lock {
        path: path.clone(),
        source: arc(source),
    };
    if wait {
        file.lock().map_err(fail)?;
        return Ok(Some(file));
    }
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(fail(e)),
    }
}

fn compress_locked(dir: &Path, stop: &AtomicBool) -> Result<CompressReport, AuditError> {
    remove_leftovers(dir)?;
    let first = super::prune::read_anchor(dir)?.map_or(1, |a| a.first_segment);
    let segments = segment::list(dir)?;
    let mut report = CompressReport::default();
    let Some(newest) = segments.last().map(|s| s.number) else {
        return Ok(report);
    };
    for segment in &segments {
        if segment.compressed || segment.number < first || segment.number >= newest {
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match compress_segment(segment, stop)? {
            Compressed::Done { plain, compressed } => {
                report.segments += 1;
                report.plain_bytes += plain;
                report.compressed_bytes += compressed;
            }
            Compressed::Skipped(why) => report.skipped.push(format!("`{}`: {why}", segment.name())),
            Compressed::Stopped => break,
        }
    }
    Ok(report)
}

/// Removes `*.zst.tmp` files an interrupted compression left (under the compressor lock).
fn remove_leftovers(dir: &Path) -> Result<(), AuditError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(AuditError::Read {
                path: dir.to_owned(),
                source: arc(source),
            });
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("audit-") && name.ends_with(".jsonl.zst.tmp") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

enum Compressed {
    Done { plain: u64, compressed: u64 },
    Skipped(String),
    Stopped,
}

/// Where an interrupted compression of `segment` leaves its temporary file.
fn temp_path(segment: &Segment) -> PathBuf {
    let target = Segment::compressed(segment.dir(), segment.number).path;
    let mut name = target.into_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

fn compress_segment(segment: &Segment, stop: &AtomicBool) -> Result<Compressed, AuditError> {
    let dir = segment.dir().to_owned();
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let plain = segment::open_read(&segment.path)?;
    let len = segment::data_len(&plain).map_err(read)?;
    // A closed segment ends with a complete record; one that does not is left as it is.
    let tail = match read_tail(segment, &plain) {
        Ok(tail) if tail.torn.is_none() => tail,
        Ok(_) => return Ok(Compressed::Skipped("it ends in a torn line".to_owned())),
        Err(e) => return Ok(Compressed::Skipped(e.to_string())),
    };
    ensure_index(segment, &plain, len, &tail);
    let target = Segment::compressed(&dir, segment.number).path;
    let temp = temp_path(segment);
    // Removes the temporary file on every early return.
    let mut guard = TempFile(Some(temp.clone()));
    let Some((written, compressed)) = encode(segment, &plain, len, &temp, stop)? else {
        return Ok(Compressed::Stopped);
    };
    // Read it back before the plain file goes.
    let (back_len, back_hash) = hash_plain(&temp).map_err(|source| AuditError::Read {
        path: temp.clone(),
        source: arc(source),
    })?;
    if back_len != len || back_hash[..] != written[..] {
        return Err(AuditError::Write(arc(io::Error::other(format!(
            "`{}` does not read back as `{}`; the plain segment is kept",
            temp.display(),
            segment.name()
        )))));
    }
    let write = |source| AuditError::Write(arc(source));
    std::fs::rename(&temp, &target).map_err(write)?;
    guard.0 = None;
    segment::sync_dir(&dir).map_err(write)?;
    std::fs::remove_file(&segment.path).map_err(write)?;
    segment::sync_dir(&dir).map_err(write)?;
    Ok(Compressed::Done {
        plain: len,
        compressed,
    })
}

/// Compresses `plain[..len]` into `temp` (created here) and syncs it; returns the SHA-256 of
/// the bytes compressed and the compressed size, or `None` when `stop` was set.
fn encode(
    segment: &Segment,
    plain: &File,
    len: u64,
    temp: &Path,
    stop: &AtomicBool,
) -> Result<Option<(Digest32, u64)>, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let write = |source| AuditError::Write(arc(source));
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(temp)
        .map_err(write)?;
    let mut compressor = zstd::bulk::Compressor::new(LEVEL)
        .and_then(|mut c| {
            c.set_parameter(CParameter::ChecksumFlag(true))?;
            c.set_parameter(CParameter::ContentSizeFlag(true))?;
            Ok(c)
        })
        .map_err(write)?;
    let mut source = BufReader::with_capacity(CHUNK, plain.take(len));
    let mut sink = io::BufWriter::with_capacity(CHUNK, out);
    let mut hasher = Sha256::new();
    let mut frame = Vec::with_capacity(FRAME_BYTES + 4096);
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        frame.clear();
        while frame.len() < FRAME_BYTES {
            if source.read_until(b'\n', &mut frame).map_err(read)? == 0 {
                break;
            }
        }
        if frame.is_empty() {
            break;
        }
        hasher.update(&frame);
        let compressed = compressor.compress(&frame).map_err(write)?;
        sink.write_all(&compressed).map_err(write)?;
    }
    let out = sink
        .into_inner()
        .map_err(io::IntoInnerError::into_error)
        .map_err(write)?;
    out.sync_all().map_err(write)?;
    let compressed = out.metadata().map_err(write)?.len();
    Ok(Some((hasher.finalize(), compressed)))
}

type Digest32 = sha2::digest::Output<Sha256>;

/// The length and SHA-256 of a compressed file's plain bytes.
fn hash_plain(path: &Path) -> io::Result<(u64, Digest32)> {
    let mut decoder = decoder(segment::open_read(path).map_err(io::Error::other)?)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; CHUNK];
    let mut len = 0;
    loop {
        let n = decoder.read(&mut buf)?;
        if n == 0 {
            return Ok((len, hasher.finalize()));
        }
        len += n as u64;
        hasher.update(&buf[..n]);
    }
}

/// Writes the segment's index if it has none for this length (a log from before indexes):
/// queries on a compressed segment skip it by its index, not by reading its ends.
fn ensure_index(segment: &Segment, plain: &File, len: u64, tail: &super::tail::Tail) {
    if index::read(segment).is_some_and(|i| i.bytes == len) {
        return;
    }
    let first = index::peek_at(plain, 0, len).ok().flatten();
    if let (Some((first_seq, first_ts)), Some(last)) = (first, &tail.last) {
        // A cache, checked by `verify`: failing to write it costs only speed.
        let _ = index::write(
            segment,
            &SegmentIndex {
                bytes: len,
                first_seq,
                first_ts,
                last_seq: last.seq,
                last_ts: last.ts,
                last_hash: last.hash.clone(),
            },
        );
    }
}

struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The background compressor of an open log: woken at each rotation, it compresses the closed
/// segments off the call path.
pub(crate) struct Compressor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    /// A rotation happened since the last run.
    pending: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Compressor {
    /// Starts the thread; it compresses what is already closed at once.
    pub(crate) fn start(dir: &Path) -> io::Result<Compressor> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(true),
            ..Shared::default()
        });
        let dir = dir.to_owned();
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("audit-compress".to_owned())
            .spawn(move || run(&dir, &state))?;
        Ok(Compressor {
            shared,
            thread: Some(thread),
        })
    }

    /// A segment was closed: compress it soon.
    pub(crate) fn rotated(&self) {
        *self
            .shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_one();
    }
}

impl Drop for Compressor {
    /// Stops the thread, abandoning a segment half-compressed (its temporary file is removed;
    /// the plain segment stays).
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        drop(self.shared.pending.lock());
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How long the compressor waits for another one (a second gateway on the directory, `hpcgate
/// audit compress`) before it looks again: that one may have listed the segments before the
/// rotation that woke this one.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

fn run(dir: &Path, shared: &Shared) {
    let mut busy = false;
    loop {
        {
            let mut pending = shared
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if busy && !*pending && !shared.stop.load(Ordering::Relaxed) {
                pending = shared
                    .wake
                    .wait_timeout(pending, BUSY_RETRY)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                *pending = true;
            }
            while !*pending && !shared.stop.load(Ordering::Relaxed) {
                pending = shared
                    .wake
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            *pending = false;
        }
        busy = false;
        match compress_with(dir, &shared.stop, false) {
            Ok(Some(report)) => {
                for skipped in report.skipped {
                    let _ = writeln!(
                        io::stderr().lock(),
                        "hpcgate: audit segment left uncompressed: {skipped}"
                    );
                }
            }
            Ok(None) => busy = true,
            Err(e) => {
                let _ = writeln!(
                    io::stderr().lock(),
                    "hpcgate: cannot compress closed audit segments in `{}`: {e}; retrying at the next rotation",
                    dir.display()
                );
            }
        }
    }
}

/// The last record of a compressed segment (streamed through: it cannot be read backwards);
/// `None` when it holds none.
pub(crate) fn last_record(segment: &Segment) -> Result<Option<Record>, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let stream = segment::open_stream(segment, 0, u64::MAX)?;
    let mut reader = BufReader::with_capacity(CHUNK, stream);
    let (mut line, mut last, mut number) = (Vec::new(), Vec::new(), 0u64);
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(read)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        number += 1;
        std::mem::swap(&mut line, &mut last);
    }
    if number == 0 {
        return Ok(None);
    }
    last.pop();
    check_line(&last)
        .map(Some)
        .map_err(|problem| AuditError::DamagedTail {
            path: segment.path.clone(),
            line: number,
            problem: problem.to_string(),
        })
}
