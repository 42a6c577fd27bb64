//! Space allocated ahead of the live segment's records: readers see the records and nothing
//! else, the zeros go at rotation, open and close, a crash's zeros are not a torn line, two
//! writers sharing a directory never write over each other's records, and zeros where records
//! were are damage or truncation as before.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::*;

fn entry(n: usize) -> Entry {
    Entry::new(Event::JobState)
        .who("chem", "alice")
        .detail("n", n)
}

/// Space allocated ahead, 1 MiB at a time.
fn ahead() -> AuditOptions {
    AuditOptions {
        preallocate_bytes: 1 << 20,
        ..AuditOptions::default()
    }
}

fn segment(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("audit-{number:06}.jsonl"))
}

/// A segment's records (its bytes up to the trailing zeros) and how many zeros follow them.
fn split(path: &Path) -> (Vec<u8>, usize) {
    let bytes = fs::read(path).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    assert!(
        end == 0 || bytes[end - 1] == b'\n',
        "records end with a line"
    );
    (bytes[..end].to_vec(), bytes.len() - end)
}

fn seqs(dir: &Path) -> Vec<u64> {
    records(dir, Scope::AllTenants, Filter::default())
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect()
}

fn intact(dir: &Path, records: u64) {
    let report = verify(dir, None).unwrap();
    assert!(report.intact, "{report:?}");
    assert_eq!(report.records, records);
}

#[test]
fn readers_see_the_records_and_the_zeros_go_when_the_writer_closes() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), ahead()).unwrap();
    for n in 0..5 {
        log.append(entry(n)).unwrap();
    }
    let path = segment(dir.path(), 1);
    let (written, zeros) = split(&path);
    assert!(zeros > 0, "space allocated ahead of the records");
    assert!(fs::metadata(&path).unwrap().len() >= 1 << 20);
    assert_eq!(written.iter().filter(|&&b| b == b'\n').count(), 5);

    // Every reader, while the writer is open.
    assert_eq!(seqs(dir.path()), [1, 2, 3, 4, 5]);
    let newest = tail(dir.path(), &Scope::AllTenants, &Filter::default(), 2).unwrap();
    assert_eq!(newest.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 4]);
    intact(dir.path(), 5);
    let mut replayed = Vec::new();
    replay_reader(dir.path())
        .unwrap()
        .read_to_end(&mut replayed)
        .unwrap();
    assert_eq!(
        replayed, written,
        "the replay stream is the records, no zeros"
    );

    drop(log);
    assert_eq!(split(&path), (written, 0), "cut off when the writer closed");
    intact(dir.path(), 5);
}

#[test]
fn a_one_shot_writer_and_the_default_leave_no_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), ahead()).unwrap();
    log.append(entry(0)).unwrap();
    assert_eq!(split(&segment(dir.path(), 1)).1, 0, "one batch: appended");
    drop(log);

    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    for n in 0..20 {
        log.append(entry(n)).unwrap();
        assert_eq!(
            split(&segment(dir.path(), 1)).1,
            0,
            "off by default: appended"
        );
    }
}

#[test]
fn after_a_crash_the_zeros_are_no_torn_line_and_a_torn_line_before_them_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let path = segment(dir.path(), 1);
    drop({
        let log = AuditLog::open(dir.path(), ahead()).unwrap();
        for n in 0..3 {
            log.append(entry(n)).unwrap();
        }
        log
    });
    let (clean, _) = split(&path);

    // A writer killed with space allocated ahead: its zeros stay.
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(clean.len() as u64 + (1 << 20)).unwrap();
    intact(dir.path(), 3);
    assert_eq!(seqs(dir.path()), [1, 2, 3]);
    let log = AuditLog::open(dir.path(), ahead()).unwrap();
    assert!(log.repaired().is_empty(), "{:?}", log.repaired());
    assert_eq!(
        split(&path),
        (clean.clone(), 0),
        "cut off when the next writer opened"
    );
    assert_eq!(log.append(entry(3)).unwrap().seq, 4);
    drop(log);

    // Killed in the middle of a write into that space: a torn line, then zeros.
    let (clean, _) = split(&path);
    let torn = b"{\"seq\":5,\"ts\":\"2026-11-27T";
    let mut crashed = clean.clone();
    crashed.extend_from_slice(torn);
    crashed.resize(crashed.len() + (1 << 20), 0);
    fs::write(&path, &crashed).unwrap();
    assert_eq!(seqs(dir.path()), [1, 2, 3, 4], "readers skip the torn line");
    let log = AuditLog::open(dir.path(), ahead()).unwrap();
    let repaired = log.repaired();
    assert_eq!(repaired.len(), 1);
    assert_eq!(repaired[0]["offset"], clean.len());
    assert_eq!(
        repaired[0]["removed_bytes"],
        torn.len(),
        "the line, not the zeros"
    );
    assert_eq!(
        log.append(entry(5)).unwrap().seq,
        6,
        "after `audit.repaired`"
    );
    drop(log);
    assert_eq!(split(&path).1, 0);
    intact(dir.path(), 6);
}

#[test]
fn two_writers_in_turn_never_write_over_each_others_records() {
    let dir = tempfile::tempdir().unwrap();
    let a = AuditLog::open(dir.path(), ahead()).unwrap();
    let b = AuditLog::open(dir.path(), ahead()).unwrap();
    let mut n = 0;
    for _ in 0..20 {
        for log in [&a, &a, &b, &b, &a, &b] {
            n += 1;
            assert_eq!(log.append(entry(n)).unwrap().seq, n as u64);
        }
    }
    intact(dir.path(), n as u64);
    drop(a);
    assert_eq!(
        seqs(dir.path()),
        (1..=n as u64).collect::<Vec<_>>(),
        "a closed, b open"
    );
    assert_eq!(b.append(entry(n + 1)).unwrap().seq, n as u64 + 1);
    drop(b);
    assert_eq!(split(&segment(dir.path(), 1)).1, 0);
    intact(dir.path(), n as u64 + 1);
}

#[test]
fn closed_segments_have_no_zeros_and_the_live_one_stays_near_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let options = AuditOptions {
        max_file_bytes: 4_000,
        ..ahead()
    };
    let log = AuditLog::open(dir.path(), options.clone()).unwrap();
    for n in 0..40 {
        log.append(entry(n)).unwrap();
    }
    let mut plain: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    plain.sort();
    assert!(plain.len() >= 3, "{plain:?}");
    let (live, closed) = plain.split_last().unwrap();
    for path in closed {
        let (written, zeros) = split(path);
        assert_eq!(zeros, 0, "{}", path.display());
        assert!(
            written.len() >= 4_000,
            "rotated at its size: {}",
            path.display()
        );
    }
    let len = fs::metadata(live).unwrap().len();
    assert!(
        len <= 4_000 + 1_024,
        "allocated up to the rotation size only: {len}"
    );
    intact(dir.path(), 40);
    drop(log);
    assert_eq!(split(live).1, 0);

    // A writer that rotates sooner than another allocates: it cuts that one's zeros off.
    let dir = tempfile::tempdir().unwrap();
    let small = AuditLog::open(dir.path(), options).unwrap();
    let big = AuditLog::open(dir.path(), ahead()).unwrap();
    for n in 0..30 {
        for log in [&big, &big, &small] {
            log.append(entry(n)).unwrap();
        }
    }
    let mut segments = 0;
    for number in 1.. {
        let path = segment(dir.path(), number);
        if !path.exists() {
            break;
        }
        segments += 1;
        if segment(dir.path(), number + 1).exists() {
            assert_eq!(split(&path).1, 0, "closed: {}", path.display());
        }
    }
    assert!(segments >= 3, "{segments}");
    intact(dir.path(), 90);
}

#[test]
fn zeros_where_records_were_are_damage_or_a_truncation_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), ahead()).unwrap();
    let mut head = None;
    for n in 0..5 {
        head = Some(log.append(entry(n)).unwrap());
    }
    drop(log);
    let path = segment(dir.path(), 1);
    let clean = fs::read(&path).unwrap();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            clean
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();

    // Record 3 zeroed in place: the records after it still follow, so it is no tail.
    let mut zeroed = clean.clone();
    zeroed[starts[2]..starts[3] - 1].fill(0);
    fs::write(&path, &zeroed).unwrap();
    let report = verify(dir.path(), None).unwrap();
    assert!(!report.intact);
    assert_eq!(report.first_broken.unwrap().line, 3);

    // The last two records zeroed, the length kept: the log ends at record 3, which only a
    // checkpoint of a later record can tell, as when they are cut off.
    let mut zeroed = clean.clone();
    zeroed[starts[3]..].fill(0);
    fs::write(&path, &zeroed).unwrap();
    intact(dir.path(), 3);
    let head = head.unwrap();
    let checkpoint = Checkpoint {
        seq: head.seq,
        hash: head.hash,
    };
    let report = verify(dir.path(), Some(&checkpoint)).unwrap();
    assert!(!report.intact, "{report:?}");
}

/// A record of about 3 KB, so that a batch spans pages.
fn big(n: usize) -> Entry {
    entry(n).detail("pad", "x".repeat(3000))
}

/// The image a machine crash can leave in the middle of a batch written into space allocated
/// ahead: a later page of the batch reached the disk, its first page did not (it reads as
/// zeros). Returns the records before the batch.
fn crash_image(dir: &Path, batch: usize) -> Vec<u8> {
    let path = segment(dir, 1);
    let log = AuditLog::open(dir, ahead()).unwrap();
    log.append(big(0)).unwrap();
    let clean = split(&path).0;
    log.append_all((1..=batch).map(big).collect()).unwrap();
    assert!(split(&path).1 > 0, "written into space allocated ahead");
    std::mem::forget(log); // the machine stopped: nothing was cut off
    let mut image = fs::read(&path).unwrap();
    let page_end = (clean.len() / 4096 + 1) * 4096;
    image[clean.len()..page_end].fill(0);
    fs::write(&path, &image).unwrap();
    clean
}

#[test]
fn a_batch_torn_by_a_machine_crash_is_cut_off_when_the_log_opens() {
    for batch in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let clean = crash_image(dir.path(), batch);
        let log = AuditLog::open(dir.path(), ahead()).unwrap();
        let repaired = log.repaired();
        assert_eq!(repaired.len(), 1, "batch of {batch}: {repaired:?}");
        assert_eq!(
            repaired[0]["offset"],
            clean.len(),
            "from the batch's first line"
        );
        let reason = repaired[0]["reason"].as_str().unwrap();
        assert!(reason.contains("machine crash"), "{reason}");
        let seq = log.append(entry(9)).unwrap().seq;
        assert_eq!(
            seq, 3,
            "after the record before the batch and `audit.repaired`"
        );
        drop(log);
        intact(dir.path(), 3);
    }
}

/// `verify` while other processes append and rotate: the newest segment of its snapshot may
/// get its index (written at rotation) before `verify` reads it, describing more records than
/// the snapshot holds. That is no break.
#[test]
fn verify_while_writers_rotate_reports_no_break() {
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let dir = dir.path();
            s.spawn(move || {
                for round in 0..6u64 {
                    let options = AuditOptions {
                        max_file_bytes: 600 + 900 * ((t + round) % 4),
                        preallocate_bytes: if (t + round) % 2 == 0 { 2_000 } else { 0 },
                        ..AuditOptions::default()
                    };
                    let log = AuditLog::open(dir, options).unwrap();
                    for n in 0..15 {
                        log.append(entry(n)).unwrap();
                    }
                }
            });
        }
        s.spawn(|| {
            for _ in 0..30 {
                let report = verify(dir.path(), None).unwrap();
                assert!(report.intact, "while writing: {report:?}");
                let seen = seqs(dir.path());
                assert_eq!(seen, (1..=seen.len() as u64).collect::<Vec<_>>());
            }
        });
    });
    intact(dir.path(), 3 * 6 * 15);
}
