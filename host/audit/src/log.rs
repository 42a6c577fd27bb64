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
//!
//! An async caller must not park the thread it runs on (an async runtime's worker serves many
//! connections): [`AuditLog::submit`] queues its records the same way and returns a
//! [`Pending`] future instead. The commit thread, started by the first such call, leads a
//! batch whenever records wait and nobody leads, so sync and async callers share batches; it
//! wakes each async caller's task once that caller's batch is durable.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};

use serde_json::{Map, Value};

use super::bound::bounded_body;
use super::canonical::LINE_OVERHEAD;
use super::checkpoint::Checkpoint;
use super::compress::Compressor;
use super::error::{AuditError, arc};
use super::query::{Filter, Records, Scope};
use super::record::{Entry, Receipt, Record};
use super::redact::{REDACTION_KEY_FILE, RedactionRules, load_or_create_key};
use super::signed::{self, CheckpointKey, CheckpointOptions};
use super::writer::Writer;
use crate::redacted::RedactionKey;
use std::thread::JoinHandle;

#[cfg(test)]
#[path = "submit_tests.rs"]
mod submit_tests;
/// Batches in a row that must each answer one caller before calls count as arriving alone
/// again ([`AuditLog::calls_arrive_together`]): one stray batch of one under load is not enough.
const LONE_BATCHES: u64 = 8;

/// Most records, and bytes of their lines as written, in one batch (it holds at least its
/// first caller's records: a call's few, each at most `MAX_RECORD_BYTES`). A crash's repair
/// looks this far back from a segment's end for a batch whose pages did not all arrive.
const MAX_BATCH_RECORDS: usize = 4096;
pub(crate) const MAX_BATCH_BYTES: usize = 8 << 20;

/// How to open the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    /// A file is rotated once it reaches this size (default 64 MiB).
    pub max_file_bytes: u64,
    /// Extend the live file this much at a time ahead of its records, so that a durable record
    /// writes no new file size (0, the default: every record grows the file). The live file
    /// then ends in zeros, which `tail -f` and log shippers that follow a file by its size do
    /// not read past: for sites that read the log with this crate's readers only.
    pub preallocate_bytes: u64,
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
            preallocate_bytes: 0,
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
    /// Batches in a row that answered one caller each.
    lone_batches: AtomicU64,
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
    /// The tasks of async callers waiting for their answer, by ticket.
    wakers: HashMap<u64, Waker>,
    /// Tickets whose [`Pending`] was dropped unanswered: their records are written all the
    /// same, their answer is not kept.
    abandoned: HashSet<u64>,
    next_ticket: u64,
    /// A caller, or the commit thread, is writing a batch.
    leading: bool,
    /// Threads waiting in [`AuditLog::append_all`] for a batch to end.
    sync_waiters: usize,
    /// The commit thread waits for work.
    committer_idle: bool,
    /// The log is closing: the commit thread writes what waits, then ends.
    closing: bool,
}

/// The checkpoint exporter's shared state and its thread.
type Exporter = (Arc<signed::Shared>, Mutex<Option<JoinHandle<()>>>);

/// The open audit log. `Sync`: share it (e.g. in an `Arc`) between all request handlers.
pub struct AuditLog {
    dir: PathBuf,
    redaction: RedactionRules,
    /// Digests the redacted values (`redaction.key` beside the log).
    redaction_key: RedactionKey,
    core: Arc<Core>,
    repaired: Vec<Map<String, Value>>,
    /// The checkpoint exporter, when `checkpoints` are configured.
    exporter: Option<Exporter>,
    /// The commit thread, started by the first [`AuditLog::submit`], or why it could not be.
    committer: OnceLock<Result<JoinHandle<()>, AuditError>>,
}

/// What leading a batch needs, shared with the commit thread.
struct Core {
    queue: Mutex<Queue>,
    /// Signalled when a batch is done: its sync callers collect their answers, and one of
    /// those who queued meanwhile leads the next batch.
    batch_done: Condvar,
    /// Signalled when records wait, nobody leads and the commit thread is idle.
    needs_leader: Condvar,
    /// Taken by whoever leads a batch (and by `checkpoint`), never while holding `queue`.
    writer: Mutex<Writer>,
    counters: Counters,
    observer: OnceLock<Arc<dyn BatchObserver>>,
    /// Told of each durable batch's last record, when checkpoints are exported.
    exported: Option<Arc<signed::Shared>>,
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
        let (mut writer, repaired) =
            Writer::open(&dir, options.max_file_bytes, options.preallocate_bytes)?;
        let redaction_key =
            load_or_create_key(&dir).map_err(|source| AuditError::RedactionKey {
                path: dir.join(REDACTION_KEY_FILE),
                source: super::error::arc(source),
            })?;
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
        let core = Core {
            queue: Mutex::new(Queue::default()),
            batch_done: Condvar::new(),
            needs_leader: Condvar::new(),
            writer: Mutex::new(writer),
            counters: Counters::default(),
            observer: OnceLock::new(),
            exported: exporter.as_ref().map(|(shared, _)| shared.clone()),
            compressor,
        };
        Ok(AuditLog {
            dir,
            redaction: options.redaction,
            redaction_key,
            core: Arc::new(core),
            repaired,
            exporter,
            committer: OnceLock::new(),
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
        let core = &*self.core;
        let (mut queue, ticket) = self.enqueue(entries);
        loop {
            if let Some(answer) = queue.answered.remove(&ticket) {
                return answer;
            }
            if queue.leading {
                queue.sync_waiters += 1;
                queue = (core.batch_done)
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                queue.sync_waiters -= 1;
            } else {
                queue = core.lead(queue);
            }
        }
    }

    /// [`AuditLog::append_all`] for a caller that must not park its thread (an async task):
    /// the records are queued now, in order with every other caller's, and the commit thread
    /// writes them. The future resolves once they are durable, with the answer `append_all`
    /// would give. Dropping it early does not take the records back.
    pub fn submit(&self, entries: Vec<Entry>) -> Pending<'_> {
        if entries.is_empty() {
            return Pending::answered(&self.core, Ok(Vec::new()));
        }
        let committer = self.committer.get_or_init(|| {
            let core = self.core.clone();
            let started = std::thread::Builder::new()
                .name("hpcgate-audit".into())
                .spawn(move || core.commit_loop());
            started.map_err(|e| AuditError::Unavailable(Box::new(AuditError::Write(arc(e)))))
        });
        if let Err(e) = committer {
            return Pending::answered(&self.core, Err(e.clone()));
        }
        let (queue, ticket) = self.enqueue(entries);
        let wake = !queue.leading && queue.committer_idle;
        drop(queue);
        if wake {
            self.core.needs_leader.notify_one();
        }
        Pending {
            core: &self.core,
            ticket: Some(ticket),
            answer: None,
        }
    }

    /// Redacts and encodes the records and queues them under a new ticket.
    fn enqueue(&self, entries: Vec<Entry>) -> (MutexGuard<'_, Queue>, u64) {
        let bodies = entries
            .into_iter()
            .map(|mut entry| {
                self.redaction.apply(&mut entry, &self.redaction_key);
                bounded_body(&mut entry, &self.redaction_key)
            })
            .collect();
        let mut queue = self.core.lock_queue();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push((ticket, bodies));
        (queue, ticket)
    }

    /// The last durable record of the log (written by any process) as a checkpoint to export.
    pub fn checkpoint(&self) -> Result<Checkpoint, AuditError> {
        self.core.lock_writer().head().map(Checkpoint::from)
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
        let _ = self.core.observer.set(observer);
    }

    pub fn stats(&self) -> AuditStats {
        AuditStats {
            batches: self.core.counters.batches.load(Ordering::Relaxed),
            records: self.core.counters.records.load(Ordering::Relaxed),
        }
    }

    /// Whether calls arrive together: one of the last 8 batches (`LONE_BATCHES`) answered more
    /// than one caller. A caller that leads its own batch then would keep the next arrivals
    /// waiting for its `fdatasync` instead of sharing one with them.
    pub fn calls_arrive_together(&self) -> bool {
        self.core.counters.lone_batches.load(Ordering::Relaxed) < LONE_BATCHES
    }

    #[cfg(test)]
    pub(crate) fn inject(&self, fault: super::writer::Inject) {
        self.core.lock_writer().inject = Some(fault);
    }
}

impl Core {
    /// Writes the queued records as one batch (up to the batch limits) and answers their
    /// callers; `queue` is released while the batch is written.
    fn lead<'a>(&'a self, mut queue: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        // At least the first caller's records, then whole callers while the batch has room.
        let (mut taken, mut records, mut bytes) = (0, 0, 0);
        for (_, mine) in &queue.waiting {
            // As written: each body becomes a line up to `LINE_OVERHEAD` longer.
            let size: usize = mine.iter().map(|body| body.len() + LINE_OVERHEAD).sum();
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
            core: self,
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
            if let (Some(exporter), Some(last)) = (&self.exported, receipts.last()) {
                exporter.committed(last);
            }
            self.counters.batches.fetch_add(1, Ordering::Relaxed);
            let lone = &self.counters.lone_batches;
            match batch.tickets.len() {
                1 => lone.fetch_add(1, Ordering::Relaxed),
                _ => lone.swap(0, Ordering::Relaxed),
            };
            (self.counters.records).fetch_add(receipts.len() as u64, Ordering::Relaxed);
            if let Some(observer) = self.observer.get() {
                observer.committed(receipts.len(), started.elapsed());
            }
        }
        drop(batch);
        self.lock_queue()
    }

    /// The commit thread: leads a batch whenever records wait and nobody leads; once the log
    /// closes, writes what still waits and ends.
    fn commit_loop(&self) {
        let mut queue = self.lock_queue();
        loop {
            if !queue.leading && !queue.waiting.is_empty() {
                queue = self.lead(queue);
            } else if queue.closing {
                return;
            } else {
                queue.committer_idle = true;
                queue = (self.needs_leader)
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                queue.committer_idle = false;
            }
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for AuditLog {
    /// Lets the commit thread write what waits, then stops the checkpoint exporter after it
    /// exported the last record.
    fn drop(&mut self) {
        if let Some(Ok(committer)) = self.committer.take() {
            self.core.lock_queue().closing = true;
            self.core.needs_leader.notify_one();
            let _ = committer.join();
        }
        if let Some((exporter, thread)) = &self.exporter {
            exporter.stop();
            let thread = thread.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

/// A batch being written: on drop its callers get their answers (async callers' tasks are
/// woken) and the lead is free again.
struct Batch<'a> {
    core: &'a Core,
    /// Each caller's ticket and how many of the batch's records are theirs, in order.
    tickets: Vec<(u64, usize)>,
    answer: Result<Vec<Receipt>, AuditError>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        let answer = std::mem::replace(&mut self.answer, Err(AuditError::Closed));
        let mut answers: Vec<Result<Vec<Receipt>, AuditError>> = match answer {
            Ok(receipts) => {
                let mut receipts = receipts.into_iter();
                let mine = |&(_, count): &(u64, usize)| Ok(receipts.by_ref().take(count).collect());
                self.tickets.iter().map(mine).collect()
            }
            Err(error) => self.tickets.iter().map(|_| Err(error.clone())).collect(),
        };
        let mut queue = self.core.lock_queue();
        let mut woken = Vec::new();
        for (&(ticket, _), answer) in self.tickets.iter().zip(answers.drain(..)) {
            if queue.abandoned.remove(&ticket) {
                continue;
            }
            queue.answered.insert(ticket, answer);
            woken.extend(queue.wakers.remove(&ticket));
        }
        queue.leading = false;
        let sync_waiters = queue.sync_waiters > 0;
        let committer = queue.committer_idle && !queue.waiting.is_empty();
        drop(queue);
        if sync_waiters {
            self.core.batch_done.notify_all();
        }
        if committer {
            self.core.needs_leader.notify_one();
        }
        woken.into_iter().for_each(Waker::wake);
    }
}

/// Records given to [`AuditLog::submit`], as a future: resolves once they are durable (to
/// their receipts), or to the error that kept them out of the log.
#[must_use = "the records are not known to be durable until this resolves"]
pub struct Pending<'a> {
    core: &'a Core,
    /// `None` once the answer is known.
    ticket: Option<u64>,
    /// The answer known without a batch.
    answer: Option<Result<Vec<Receipt>, AuditError>>,
}

impl<'a> Pending<'a> {
    fn answered(core: &'a Core, answer: Result<Vec<Receipt>, AuditError>) -> Pending<'a> {
        Pending {
            core,
            ticket: None,
            answer: Some(answer),
        }
    }
}

impl std::fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl Future for Pending<'_> {
    type Output = Result<Vec<Receipt>, AuditError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(ticket) = self.ticket else {
            return Poll::Ready(self.answer.take().unwrap_or(Err(AuditError::Closed)));
        };
        let mut queue = self.core.lock_queue();
        if let Some(answer) = queue.answered.remove(&ticket) {
            drop(queue);
            self.ticket = None;
            return Poll::Ready(answer);
        }
        match queue.wakers.get_mut(&ticket) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                queue.wakers.insert(ticket, cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Pending<'_> {
    /// Forgets the answer of records still being written (they are written all the same).
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            let mut queue = self.core.lock_queue();
            queue.wakers.remove(&ticket);
            if queue.answered.remove(&ticket).is_none() {
                queue.abandoned.insert(ticket);
            }
        }
    }
}
