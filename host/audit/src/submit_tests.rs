//! [`AuditLog::submit`]: records from async callers are durable when their future resolves,
//! share one gap-free chain and batches with sync callers, every caller of a failed batch
//! hears of it, and records whose future was dropped are still written without leaking.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::{AuditLog, AuditOptions};
use crate::writer::Inject;
use crate::{AuditError, Entry, Event, Filter, Receipt, Record, Scope, records, verify};

fn entry(n: usize) -> Entry {
    Entry::new(Event::JobState)
        .who("chem", "alice")
        .detail("n", n)
}

/// Wakes the thread that polls, and says that it did.
struct Unpark {
    thread: std::thread::Thread,
    woken: AtomicBool,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// Polls `future` on this thread, polling again only when its waker was called: a future that
/// forgets to wake its task fails here instead of being rescued by a timer.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let unpark = Arc::new(Unpark {
        thread: std::thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !unpark.woken.swap(false, Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the future was never woken");
            std::thread::park_timeout(left);
        }
    }
}

/// Runs `work(t)` on `threads` threads that start it together; their results in order.
fn together<T: Send>(threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, barrier) = (&work, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    work(t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn written(dir: &std::path::Path) -> Vec<Record> {
    records(dir, Scope::AllTenants, Filter::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn assert_nothing_kept(log: &AuditLog) {
    let queue = log.core.lock_queue();
    assert!(queue.waiting.is_empty(), "nothing waits");
    assert!(queue.answered.is_empty(), "no answer left uncollected");
    assert!(queue.wakers.is_empty(), "no waker kept");
    assert!(queue.abandoned.is_empty(), "no abandoned ticket kept");
}

#[test]
fn submitted_records_are_durable_and_in_order_when_the_future_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    log.append(entry(0)).unwrap();
    let receipts = block_on(log.submit((1..4).map(entry).collect())).unwrap();
    let seqs: Vec<u64> = receipts.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [2, 3, 4]);
    let on_disk = written(dir.path());
    assert_eq!(on_disk.len(), 4, "written before the future resolved");
    for (receipt, record) in receipts.iter().zip(&on_disk[1..]) {
        assert_eq!(record.hash, receipt.hash);
    }
    assert_eq!(
        log.stats().batches,
        2,
        "the three records went in one batch"
    );
    assert!(block_on(log.submit(Vec::new())).unwrap().is_empty());
    assert_nothing_kept(&log);
    assert!(verify(dir.path(), None).unwrap().intact);
}

#[test]
fn async_and_sync_callers_share_one_gap_free_chain() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    let (threads, each) = (8, 40);
    let mut receipts: Vec<(usize, Receipt)> = together(threads, |t| {
        (0..each)
            .map(|i| {
                let n = t * each + i;
                let receipt = if (t + i) % 2 == 0 {
                    log.append(entry(n)).unwrap()
                } else {
                    block_on(log.submit(vec![entry(n)])).unwrap().remove(0)
                };
                (n, receipt)
            })
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    receipts.sort_by_key(|(_, r)| r.seq);
    let seqs: Vec<u64> = receipts.iter().map(|(_, r)| r.seq).collect();
    assert_eq!(seqs, (1..=(threads * each) as u64).collect::<Vec<_>>());
    let on_disk = written(dir.path());
    for ((n, receipt), record) in receipts.iter().zip(&on_disk) {
        assert_eq!(record.hash, receipt.hash);
        assert_eq!(record.entry.detail.as_ref().unwrap()["n"], *n);
    }
    assert_nothing_kept(&log);
    assert!(verify(dir.path(), None).unwrap().intact);
}

#[test]
fn every_async_caller_in_a_failed_batch_gets_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    // The commit thread exists before the fault is armed, so the first batch fails.
    block_on(log.submit(vec![entry(0)])).unwrap();
    log.inject(Inject::Sync);
    let callers = 16;
    let results = together(callers, |t| {
        let n = t + 1;
        block_on(log.submit(vec![entry(n)])).map(|mut r| (n, r.remove(0)))
    });
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert!(failed >= 1, "the injected batch failed");
    for error in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(error, AuditError::Sync(_)), "{error:?}");
    }
    let on_disk = written(dir.path());
    assert_eq!(
        on_disk.len(),
        1 + callers - failed,
        "exactly the acknowledged records"
    );
    for (n, receipt) in results.iter().flatten() {
        let record = &on_disk[receipt.seq as usize - 1];
        assert_eq!(record.hash, receipt.hash);
        assert_eq!(record.entry.detail.as_ref().unwrap()["n"], *n);
    }
    assert_nothing_kept(&log);
    assert!(verify(dir.path(), None).unwrap().intact);
}

#[test]
fn a_dropped_future_still_writes_its_records_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    for n in 0..20 {
        drop(log.submit(vec![entry(n)]));
    }
    let last = block_on(log.submit(vec![entry(20)])).unwrap();
    assert_eq!(last[0].seq, 21, "every dropped future's record went first");
    assert_eq!(written(dir.path()).len(), 21);
    assert_nothing_kept(&log);
}

#[test]
fn closing_the_log_writes_what_waits() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
        block_on(log.submit(vec![entry(0)])).unwrap();
        for n in 1..50 {
            drop(log.submit(vec![entry(n)]));
        }
    }
    let on_disk = written(dir.path());
    assert_eq!(
        on_disk.len(),
        50,
        "the commit thread wrote every queued record"
    );
    assert!(verify(dir.path(), None).unwrap().intact);
}

#[test]
fn calls_count_as_arriving_together_until_batches_answer_one_caller_each() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    assert!(log.calls_arrive_together(), "nothing is known yet");
    for n in 0..super::LONE_BATCHES as usize {
        assert!(log.calls_arrive_together(), "only {n} lone batches so far");
        log.append(entry(n)).unwrap();
    }
    assert!(!log.calls_arrive_together(), "one caller per batch");
    // A batch answering two callers: a sync caller leads a batch and waits for the writer,
    // two async callers queue meanwhile, and the commit thread takes both in the next batch.
    let writer = log.core.lock_writer();
    std::thread::scope(|s| {
        let first = s.spawn(|| log.append(entry(100)).unwrap());
        while !log.core.lock_queue().leading {
            std::thread::yield_now();
        }
        let (a, b) = (log.submit(vec![entry(101)]), log.submit(vec![entry(102)]));
        drop(writer);
        first.join().unwrap();
        let (a, b) = (block_on(a).unwrap(), block_on(b).unwrap());
        assert_eq!((a[0].seq, b[0].seq), (10, 11));
    });
    assert!(
        log.calls_arrive_together(),
        "the last batch answered two callers"
    );
    let batches = log.stats().batches;
    for n in 0..super::LONE_BATCHES as usize {
        assert!(log.calls_arrive_together());
        block_on(log.submit(vec![entry(200 + n)])).unwrap();
    }
    assert!(!log.calls_arrive_together(), "lone again");
    assert_eq!(log.stats().batches, batches + super::LONE_BATCHES);
}
