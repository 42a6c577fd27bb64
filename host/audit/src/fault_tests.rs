//! Fail-closed behaviour under injected write and sync faults: every caller in the failed
//! batch gets `Err`, the failed batch leaves no valid line behind, and the chain continues.

use std::sync::Barrier;

use super::writer::Inject;
use super::*;

fn entry(n: usize) -> Entry {
    Entry::new(Event::JobState)
        .who("chem", "alice")
        .detail("n", n)
}

fn lines(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("audit-000001.jsonl"))
        .unwrap()
        .lines()
        .count()
}

#[test]
fn a_failed_write_or_sync_refuses_the_batch_and_rolls_back() {
    for fault in [Inject::WriteHalf, Inject::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
        for n in 0..3 {
            log.append(entry(n)).unwrap();
        }
        log.inject(fault);
        let error = log.append(entry(3)).unwrap_err();
        assert!(
            matches!(
                (&error, fault),
                (AuditError::Write(_), Inject::WriteHalf) | (AuditError::Sync(_), Inject::Sync)
            ),
            "{error:?}"
        );
        assert!(!error.to_string().contains('/'), "no host path: {error}");
        assert_eq!(lines(dir.path()), 3, "the failed record is not in the log");
        let receipt = log.append(entry(4)).unwrap();
        assert_eq!(receipt.seq, 4, "seq continues without a gap");
        let report = verify(dir.path(), None).unwrap();
        assert!(report.intact, "{report:?}");
        assert_eq!(report.records, 4);
    }
}

#[test]
fn every_caller_in_a_failed_batch_gets_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    log.inject(Inject::Sync);
    let callers = 16;
    let barrier = Barrier::new(callers);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|n| {
                let (log, barrier) = (&log, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    log.append(entry(n)).map(|r| (n, r))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert!(failed >= 1, "the injected batch failed");
    let written: Vec<Record> = records(dir.path(), Scope::AllTenants, Filter::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        written.len(),
        callers - failed,
        "exactly the acknowledged records"
    );
    for (n, receipt) in results.iter().flatten() {
        let record = &written[receipt.seq as usize - 1];
        assert_eq!(record.hash, receipt.hash);
        assert_eq!(record.entry.detail.as_ref().unwrap()["n"], *n);
    }
    assert!(verify(dir.path(), None).unwrap().intact);
}

#[test]
fn a_failed_rollback_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    log.append(entry(0)).unwrap();
    log.inject(Inject::SyncAndRollback);
    assert!(matches!(log.append(entry(1)), Err(AuditError::Sync(_))));
    assert!(matches!(log.append(entry(2)), Err(AuditError::Poisoned)));
    assert!(matches!(log.checkpoint(), Err(AuditError::Poisoned)));
}

/// A rotation that fails (here: the next segment is there already, as a crash between creating
/// and using it leaves it) is noticed at the next batch, which goes to the newest segment:
/// one chain, no segment written past.
#[test]
fn a_failed_rotation_moves_on_at_the_next_batch() {
    let dir = tempfile::tempdir().unwrap();
    let options = AuditOptions {
        max_file_bytes: 1,
        ..AuditOptions::default()
    };
    let log = AuditLog::open(dir.path(), options).unwrap();
    std::fs::write(dir.path().join("audit-000002.jsonl"), b"").unwrap();
    assert_eq!(log.append(entry(0)).unwrap().seq, 1);
    assert_eq!(
        lines(dir.path()),
        1,
        "the first batch went to the first segment"
    );
    assert_eq!(log.append(entry(1)).unwrap().seq, 2);
    assert_eq!(lines(dir.path()), 1, "the second did not");
    let second = std::fs::read_to_string(dir.path().join("audit-000002.jsonl")).unwrap();
    assert_eq!(second.lines().count(), 1, "{second}");
    assert_eq!(log.append(entry(2)).unwrap().seq, 3);
    drop(log);
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    // Segments 1, 2 and 3 with a record each, and 4 rotated to, still empty.
    assert_eq!((report.records, report.files), (3, 4));
}

/// A rotation that fails after creating the next segment (its directory entry could not be made
/// durable) leaves one chain: the batch that rotated was the old segment's last write, so every
/// other writer finds it there, looks again and goes on in the new segment, as does the writer
/// whose rotation failed (it looks for the segment it made).
#[test]
fn a_failed_rotation_leaves_no_second_branch_of_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let small = AuditOptions {
        max_file_bytes: 1_500,
        ..AuditOptions::default()
    };
    let a = AuditLog::open(dir.path(), small).unwrap();
    let b = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    let first = dir.path().join("audit-000001.jsonl");
    let next = dir.path().join("audit-000002.jsonl");
    a.inject(Inject::RotationSync);
    let mut n = 0;
    while std::fs::metadata(&first).unwrap().len() < 1_500 {
        n += 1;
        assert_eq!(a.append(entry(n)).unwrap().seq, n as u64);
    }
    for _ in 0..10 {
        for log in [&b, &a, &b] {
            n += 1;
            assert_eq!(log.append(entry(n)).unwrap().seq, n as u64, "one chain");
        }
    }
    assert!(next.exists(), "the chain went on in the new segment");
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:?}");
    assert_eq!(report.records, n as u64);
}
