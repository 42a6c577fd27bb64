//! [`AuditLog`]: the handle the gateway appends through.
//!
//! Group commit without a writer thread: callers serialise and redact their entries on their own
//! thread and queue the bytes. A caller that finds no commit under way leads one: it takes
//! everything queued, writes it as one batch with one `fdatasync`, and hands each waiting
//! caller its receipt — or the same error for every caller in a failed batch. Callers that
//! arrive while a batch is syncing wait, and one of them leads the next batch with all of them.
//! A lone caller thus writes and syncs on its own thread, with no hand-off to another thread
//! and back. `append` returns only once the record is durable, so the gateway can refuse the
//! call on `Err` (fail closed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use serde_json::{Map, Value};

use super::canonical::encode_body;
use super::checkpoint::Checkpoint;
use super::compress::Compressor;
use super::error::AuditError;
use super::query::{Filter, Records, Scope};
use super::record::{Entry, Receipt, Record};
use super::redact::RedactionRules;
use super::signed::{self, CheckpointKey, CheckpointOptions};
use super::writer::Writer;
use std::thread::JoinHandle;

/// Most records and bytes in one batch.
const MAX_BATCH_RECORDS: usize = 4096;
const MAX_BATCH_BYTES: usize = 8 << 20;

/// How to open the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    /// A file is rotated once it reaches this size (default 64 MiB).
    pub max_file_bytes: u64,
    pub redaction: RedactionRules,
    /// Export signed checkpoints automatically (see [`CheckpointOptions`]).
    pub checkpoints: Option<CheckpointOptions>,
    /// Compress closed segments (zstd) in a background thread, woken at each rotation.
    pub compress: bool,
}

impl Default for AuditOptions {
    fn default() -> AuditOptions {
        AuditOptions {
            max_file_bytes: 64 << 20,
            redaction: RedactionRules::default(),
            checkpoints: None,
            compress: false,
        }
    }
}

/// Batches and records written since open (for benchmarks and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditStats {
    pub batches: u64,
    pub records: u64,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    records: AtomicU64,
}

/// Told of every batch the log commits (metrics): how many records, and how long the write
/// and `fdatasync` took. Called by the caller that led the batch, after it is durable; it must
/// be cheap and must not append to the log.
pub trait BatchObserver: Send + Sync {
    fn committed(&self, records: usize, took: std::time::Duration);
}

/// The commit queue: what waits for the next batch, and what finished batches answered.
#[derive(Default)]
struct Queue {
    /// Each caller's records, by ticket, in arrival order.
    waiting: Vec<(u64, Vec<Vec<u8>>)>,
    /// Answers not yet collected, by ticket.
    answered: HashMap<u64, Result<Vec<Receipt>, AuditError>>,
    next_ticket: u64,
    /// A caller is writing a batch.
    leading: bool,
}

/// The checkpoint exporter's shared state and its thread.
type Exporter = (Arc<signed::Shared>, Mutex<Option<JoinHandle<()>>>);

/// The open audit log. `Sync`: share it (e.g. in an `Arc`) between all request handlers.
pub struct AuditLog {
    dir: PathBuf,
    redaction: RedactionRules,
    queue: Mutex<Queue>,
    /// Signalled when a batch is done: its callers collect their answers, and one of those
    /// who queued meanwhile leads the next batch.
    batch_done: Condvar,
    /// Taken by the caller leading a batch (and by `checkpoint`), never while holding `queue`.
    writer: Mutex<Writer>,
    repaired: Vec<Map<String, Value>>,
    counters: Counters,
    observer: OnceLock<Arc<dyn BatchObserver>>,
    /// The checkpoint exporter, when `checkpoints` are configured.
    exporter: Option<Exporter>,
    /// The background compressor of closed segments, when `compress` is set.
    compressor: Option<Compressor>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("dir", &self.dir).finish()
    }
}

impl AuditLog {
    /// Opens (creating) the log in `dir`: a private directory, the newest file's torn last
    /// line truncated and recorded as `audit.repaired`.
    pub fn open(dir: impl AsRef<Path>, options: AuditOptions) -> Result<AuditLog, AuditError> {
        let dir = dir.as_ref().to_owned();
        let (mut writer, repaired) = Writer::open(&dir, options.max_file_bytes)?;
        let exporter = match options.checkpoints {
            None => None,
            Some(checkpoints) => {
                let fail = |source| AuditError::CheckpointKey {
                    path: dir.join(signed::KEY_FILE),
                    source: super::error::arc(source),
                };
                let key = CheckpointKey::load_or_create(&dir).map_err(fail)?;
                let shared = Arc::new(signed::Shared::default());
                shared.committed(&writer.head()?);
                let thread = signed::start(shared.clone(), key, checkpoints).map_err(fail)?;
                Some((shared, Mutex::new(Some(thread))))
            }
        };
        let compressor = if options.compress {
            let started = Compressor::start(&dir).map_err(|source| AuditError::Open {
                path: dir.clone(),
                source: super::error::arc(source),
            })?;
            Some(started)
        } else {
            None
        };
        Ok(AuditLog {
            compressor,
            dir,
            redaction: options.redaction,
            queue: Mutex::new(Queue::default()),
            batch_done: Condvar::new(),
            writer: Mutex::new(writer),
            repaired,
            counters: Counters::default(),
            observer: OnceLock::new(),
            exporter,
        })
    }

    /// Redacts and appends one record; returns once it is durable. On `Err` the record is not
    /// in the log and the call it describes must be refused.
    pub fn append(&self, entry: Entry) -> Result<Receipt, AuditError> {
        let mut receipts = self.append_all(vec![entry])?;
        receipts.pop().ok_or(AuditError::Closed)
    }

    /// Redacts and appends the records next to each other, in order, in one batch (one
    /// `fdatasync`); returns once all are durable. On `Err` none of them is in the log.
    pub fn append_all(&self, entries: Vec<Entry>) -> Result<Vec<Receipt>, AuditError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let bodies = entries
            .into_iter()
            .map(|mut entry| {
                self.redaction.apply(&mut entry);
                encode_body(&entry)
            })
            .collect();
        let mut queue = self.lock_queue();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push((ticket, bodies));
        loop {
            if let Some(answer) = queue.answered.remove(&ticket) {
                return answer;
            }
            if queue.leading {
                queue = self
                    .batch_done
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            } else {
                queue = self.lead(queue);
            }
        }
    }

    /// Writes the queued records as one batch (up to the batch limits) and answers their
    /// callers; `queue` is released while the batch is written.
    fn lead<'a>(&'a self, mut queue: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        // At least the first caller's records, then whole callers while the batch has room.
        let (mut taken, mut records, mut bytes) = (0, 0, 0);
        for (_, mine) in &queue.waiting {
            let size: usize = mine.iter().map(Vec::len).sum();
            if taken > 0
                && (records + mine.len() > MAX_BATCH_RECORDS || bytes + size > MAX_BATCH_BYTES)
            {
                break;
            }
            (taken, records, bytes) = (taken + 1, records + mine.len(), bytes + size);
        }
        let (mut tickets, mut bodies) = (Vec::with_capacity(taken), Vec::with_capacity(records));
        for (ticket, mine) in queue.waiting.drain(..taken) {
            tickets.push((ticket, mine.len()));
            bodies.extend(mine);
        }
        queue.leading = true;
        drop(queue);
        // Answers every caller of the batch even if the commit panics, and hands on the lead.
        let mut batch = Batch {
            log: self,
            tickets,
            answer: Err(AuditError::Closed),
        };
        let slices: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        let started = std::time::Instant::now();
        let mut writer = self.lock_writer();
        let segment = writer.segment_number();
        batch.answer = writer.commit(&slices);
        let rotated = writer.segment_number() != segment;
        drop(writer);
        if let (true, Some(compressor)) = (rotated, &self.compressor) {
            compressor.rotated();
        }
        if let Ok(receipts) = &batch.answer {
            if let (Some((exporter, _)), Some(last)) = (&self.exporter, receipts.last()) {
                exporter.committed(last);
            }
            self.counters.batches.fetch_add(1, Ordering::Relaxed);
            (self.counters.records).fetch_add(receipts.len() as u64, Ordering::Relaxed);
            if let Some(observer) = self.observer.get() {
                observer.committed(receipts.len(), started.elapsed());
            }
        }
        drop(batch);
        self.lock_queue()
    }

    /// The last durable record of the log (written by any process) as a checkpoint to export.
    pub fn checkpoint(&self) -> Result<Checkpoint, AuditError> {
        self.lock_writer().head().map(Checkpoint::from)
    }
    /// The `limit` newest records matching `filter` within `scope`, newest first. The gateway
    /// passes `Scope::Tenant(<the caller's tenant>)`.
    pub fn tail(
        &self,
        scope: &Scope,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Record>, AuditError> {
        super::query::tail(&self.dir, scope, filter, limit)
    }

    /// The records matching `filter` within `scope`, oldest first.
    pub fn records(&self, scope: Scope, filter: Filter) -> Result<Records, AuditError> {
        super::query::records(&self.dir, scope, filter)
    }

    /// What `open` truncated away (one `audit.repaired` detail per repair).
    pub fn repaired(&self) -> &[Map<String, Value>] {
        &self.repaired
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets who is told of each committed batch; only the first call takes effect.
    pub fn observe(&self, observer: Arc<dyn BatchObserver>) {
        let _ = self.observer.set(observer);
    }

    pub fn stats(&self) -> AuditStats {
        AuditStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            records: self.counters.records.load(Ordering::Relaxed),
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    pub(crate) fn inject(&self, fault: super::writer::Inject) {
        self.lock_writer().inject = Some(fault);
    }
}

impl Drop for AuditLog {
    /// Stops the checkpoint exporter after it exported the last record.
    fn drop(&mut self) {
        if let Some((exporter, thread)) = &self.exporter {
            exporter.stop();
            let thread = thread.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

/// A batch being written: on drop its callers get their answers and the lead is free again.
struct Batch<'a> {
    log: &'a AuditLog,
    /// Each caller's ticket and how many of the batch's records are theirs, in order.
    tickets: Vec<(u64, usize)>,
    answer: Result<Vec<Receipt>, AuditError>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        let answer = std::mem::replace(&mut self.answer, Err(AuditError::Closed));
        let mut queue = self.log.lock_queue();
        match answer {
            Ok(receipts) => {
                let mut receipts = receipts.into_iter();
                for &(ticket, count) in &self.tickets {
                    let mine = receipts.by_ref().take(count).collect();
                    queue.answered.insert(ticket, Ok(mine));
                }
            }
            Err(error) => {
                for &(ticket, _) in &self.tickets {
                    queue.answered.insert(ticket, Err(error.clone()));
                }
            }
        }
        queue.leading = false;
        drop(queue);
        self.log.batch_done.notify_all();
    }
}
