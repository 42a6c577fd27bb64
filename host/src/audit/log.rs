//! [`AuditLog`]: the handle the gateway appends through.
//!
//! Group commit: callers serialise and redact their entries on their own thread, hand the bytes
//! to one writer thread and block; the writer takes everything queued (while it was busy
//! syncing the previous batch, more callers arrived), writes it as one batch with one
//! `fdatasync`, and wakes each caller with its receipt — or with the same error for every
//! caller in a failed batch. `append` returns only once the record is durable, so the gateway
//! can refuse the call on `Err` (fail closed).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use serde_json::{Map, Value};

use super::canonical::encode_body;
use super::checkpoint::Checkpoint;
use super::error::AuditError;
use super::query::{Filter, Records, Scope};
use super::record::{Entry, Receipt, Record};
use super::redact::RedactionRules;
use super::writer::Writer;

/// Most records and bytes in one batch.
const MAX_BATCH_RECORDS: usize = 4096;
const MAX_BATCH_BYTES: usize = 8 << 20;

/// How to open the log.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// A file is rotated once it reaches this size (default 64 MiB).
    pub max_file_bytes: u64,
    pub redaction: RedactionRules,
}

impl Default for AuditOptions {
    fn default() -> AuditOptions {
        AuditOptions {
            max_file_bytes: 64 << 20,
            redaction: RedactionRules::default(),
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

type Reply<T> = Sender<Result<T, AuditError>>;

enum Request {
    /// Records that go into one batch, next to each other and in this order.
    Append {
        bodies: Vec<Vec<u8>>,
        reply: Reply<Vec<Receipt>>,
    },
    Head {
        reply: Reply<Receipt>,
    },
    #[cfg(test)]
    Inject(super::writer::Inject),
}

/// The open audit log. `Sync`: share it (e.g. in an `Arc`) between all request handlers.
pub struct AuditLog {
    dir: PathBuf,
    redaction: RedactionRules,
    requests: Option<Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    repaired: Vec<Map<String, Value>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("dir", &self.dir).finish()
    }
}

impl AuditLog {
    /// Opens (creating) the log in `dir`: a private directory, the newest file's torn last
    /// line truncated and recorded as `audit.repaired`, the writer thread started.
    pub fn open(dir: impl AsRef<Path>, options: AuditOptions) -> Result<AuditLog, AuditError> {
        let dir = dir.as_ref().to_owned();
        let (writer, repaired) = Writer::open(&dir, options.max_file_bytes)?;
        let (requests, queue) = unbounded();
        let counters = Arc::new(Counters::default());
        let thread_counters = Arc::clone(&counters);
        let writer = std::thread::Builder::new()
            .name("hpcgate-audit".to_owned())
            .spawn(move || run(writer, &queue, &thread_counters))
            .map_err(|e| AuditError::Write(super::error::arc(e)))?;
        Ok(AuditLog {
            dir,
            redaction: options.redaction,
            requests: Some(requests),
            writer: Some(writer),
            repaired,
            counters,
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
        self.ask(|reply| Request::Append { bodies, reply })
    }

    /// The last durable record of the log (written by any process) as a checkpoint to export.
    pub fn checkpoint(&self) -> Result<Checkpoint, AuditError> {
        self.ask(|reply| Request::Head { reply })
            .map(Checkpoint::from)
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

    pub fn stats(&self) -> AuditStats {
        AuditStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            records: self.counters.records.load(Ordering::Relaxed),
        }
    }

    fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, AuditError> {
        let (reply, answer) = bounded(1);
        let requests = self.requests.as_ref().ok_or(AuditError::Closed)?;
        requests
            .send(request(reply))
            .map_err(|_| AuditError::Closed)?;
        answer.recv().map_err(|_| AuditError::Closed)?
    }

    #[cfg(test)]
    pub(crate) fn inject(&self, fault: super::writer::Inject) {
        let _ = self.requests.as_ref().unwrap().send(Request::Inject(fault));
    }
}

impl Drop for AuditLog {
    /// Lets the writer finish what is queued, then joins it.
    fn drop(&mut self) {
        self.requests.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn run(mut writer: Writer, queue: &Receiver<Request>, counters: &Counters) {
    while let Ok(first) = queue.recv() {
        // Each caller's records, and how many they are, in batch order.
        let (mut bodies, mut replies, mut heads) = (Vec::new(), Vec::new(), Vec::new());
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(request) = next.take() {
            match request {
                Request::Append {
                    bodies: mine,
                    reply,
                } => {
                    bytes += mine.iter().map(Vec::len).sum::<usize>();
                    replies.push((reply, mine.len()));
                    bodies.extend(mine);
                }
                Request::Head { reply } => heads.push(reply),
                #[cfg(test)]
                Request::Inject(fault) => writer.inject = Some(fault),
            }
            if bodies.len() < MAX_BATCH_RECORDS && bytes < MAX_BATCH_BYTES {
                next = queue.try_recv().ok();
            }
        }
        if !bodies.is_empty() {
            let slices: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
            match writer.commit(&slices) {
                Ok(receipts) => {
                    counters.batches.fetch_add(1, Ordering::Relaxed);
                    counters
                        .records
                        .fetch_add(receipts.len() as u64, Ordering::Relaxed);
                    let mut receipts = receipts.into_iter();
                    for (reply, count) in replies {
                        let _ = reply.send(Ok(receipts.by_ref().take(count).collect()));
                    }
                }
                Err(error) => {
                    for (reply, _) in replies {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
        }
        for reply in heads {
            let _ = reply.send(writer.head());
        }
    }
}
