//! Compressed closed segments: every reader gives the same answers before and after
//! compression, a crash at any step of it leaves a log that reads and verifies, the background
//! compressor never takes the open segment, and a writer, `prune` and `verify` cope with any
//! mix of plain and compressed segments.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bench::{generate, sample_call_entry};
use super::*;

/// 3000 records one second apart ending at `end()`, in segments of about 64 KiB.
fn fixture(dir: &Path) -> bench::Generated {
    let entries = [
        sample_call_entry(),
        Entry::new(Event::JobState).who("bio", "bob").detail("n", 1),
    ];
    generate(dir, 3000, end(), Duration::from_secs(1), &entries, 64 << 10).unwrap()
}

fn end() -> Timestamp {
    "2026-11-20T12:00:00Z".parse().unwrap()
}

fn plain(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("audit-{number:06}.jsonl"))
}

fn zst(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("audit-{number:06}.jsonl.zst"))
}

/// Everything the readers say about the log: all records, time-bounded queries (raw lines and
/// parsed), tails with and without filters, the replayed bytes, and `verify`'s report.
fn readings(dir: &Path) -> Vec<String> {
    let at = |secs: u64| Some(end().minus(Duration::from_secs(secs)));
    let mut out = Vec::new();
    for (since, until) in [
        (None, None),
        (at(10), None),
        (at(2500), at(1500)),
        (at(70), at(60)),
    ] {
        let filter = Filter {
            since,
            until,
            ..Filter::default()
        };
        let seqs: Vec<u64> = records(dir, Scope::AllTenants, filter.clone())
            .unwrap()
            .map(|r| r.unwrap().seq)
            .collect();
        out.push(format!("records {since:?}..{until:?}: {seqs:?}"));
        let mut raw = records(dir, Scope::AllTenants, filter.clone()).unwrap();
        let mut lines = 0;
        while let Some(line) = raw.next_line() {
            line.unwrap();
            lines += 1;
        }
        out.push(format!("lines {since:?}..{until:?}: {lines}"));
        for scope in [Scope::AllTenants, Scope::Tenant("bio".into())] {
            let newest: Vec<u64> = tail(dir, &scope, &filter, 7)
                .unwrap()
                .iter()
                .map(|r| r.seq)
                .collect();
            out.push(format!("tail {scope:?} {since:?}..{until:?}: {newest:?}"));
        }
    }
    let mut replayed = Vec::new();
    replay_reader(dir)
        .unwrap()
        .read_to_end(&mut replayed)
        .unwrap();
    out.push(format!("replayed {} bytes", replayed.len()));
    let report = verify(dir, None).unwrap();
    out.push(format!(
        "verify intact={} files={} records={} last={:?}",
        report.intact, report.files, report.records, report.last
    ));
    out
}

#[test]
fn compressed_segments_read_and_verify_like_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    assert!(made.segments >= 5, "{made:?}");
    let before = readings(dir.path());
    let verified = before.last().unwrap();
    assert!(
        verified.contains("intact=true") && verified.contains("records=3000"),
        "{verified}"
    );
    let report = compress_closed(dir.path()).unwrap();
    assert_eq!(report.segments, made.segments - 1, "{report:?}");
    assert!(
        report.compressed_bytes * 4 < report.plain_bytes,
        "{report:?}"
    );
    assert!(report.skipped.is_empty(), "{report:?}");
    for number in 1..made.segments {
        assert!(zst(dir.path(), number).exists() && !plain(dir.path(), number).exists());
    }
    assert!(
        plain(dir.path(), made.segments).exists(),
        "the open segment stays plain"
    );
    assert!(!zst(dir.path(), made.segments).exists());
    assert_eq!(readings(dir.path()), before);
    assert!(verify(dir.path(), None).unwrap().intact);
    // Nothing left to do the second time.
    assert_eq!(
        compress_closed(dir.path()).unwrap(),
        CompressReport::default()
    );
}

#[test]
fn a_compression_interrupted_at_any_step_leaves_a_log_that_reads_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    let before = readings(dir.path());
    let d = dir.path();
    // A temporary file half-written when the process died.
    std::fs::write(
        d.join("audit-000001.jsonl.zst.tmp"),
        b"\x28\xb5\x2f\xfd partial",
    )
    .unwrap();
    // Renamed in, not yet removed: both forms of segment 2.
    let mut both = zstd::stream::encode_all(std::fs::File::open(plain(d, 2)).unwrap(), 3).unwrap();
    std::fs::write(zst(d, 2), &both).unwrap();
    // Both forms, the compressed one not what the plain one holds: the plain one counts.
    both.truncate(both.len() / 2);
    std::fs::write(zst(d, 3), &both).unwrap();
    assert_eq!(readings(d), before, "readers take the plain form");
    let report = compress_closed(d).unwrap();
    assert_eq!(report.segments, made.segments - 1, "{report:?}");
    assert!(!d.join("audit-000001.jsonl.zst.tmp").exists());
    for number in 1..made.segments {
        assert!(zst(d, number).exists() && !plain(d, number).exists());
    }
    assert_eq!(readings(d), before);
}

#[test]
fn a_damaged_closed_segment_is_left_plain_for_verify_to_report() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let d = dir.path();
    // Segment 2 loses its last newline: a torn end no rotation leaves.
    let mut bytes = std::fs::read(plain(d, 2)).unwrap();
    bytes.pop();
    std::fs::write(plain(d, 2), bytes).unwrap();
    let report = compress_closed(d).unwrap();
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert!(
        report.skipped[0].contains("audit-000002.jsonl"),
        "{report:?}"
    );
    assert!(plain(d, 2).exists() && !zst(d, 2).exists());
    assert!(zst(d, 1).exists() && zst(d, 3).exists());
    let broken = verify(d, None).unwrap().first_broken.unwrap();
    assert_eq!(broken.file, "audit-000002.jsonl");
}

#[test]
fn the_background_compressor_takes_closed_segments_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let options = AuditOptions {
        max_file_bytes: 4_000,
        compress: true,
        ..AuditOptions::default()
    };
    let entry = |n: u64| {
        Entry::new(Event::JobState)
            .who("chem", "alice")
            .detail("n", n)
            .detail("note", "x".repeat(200))
    };
    {
        let log = AuditLog::open(d, options.clone()).unwrap();
        for n in 0..100 {
            log.append(entry(n)).unwrap();
        }
        // The compressor runs on its own thread: wait for it (generously, not a figure).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !zst(d, 3).exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(zst(d, 3).exists(), "closed segments were compressed");
        let newest = (1..)
            .take_while(|&n| plain(d, n).exists() || zst(d, n).exists())
            .last();
        let newest = newest.unwrap();
        assert!(plain(d, newest).exists(), "the open segment stays plain");
        assert!(!zst(d, newest).exists());
    }
    // Reopened over compressed segments; and again with the open segment gone, so that the
    // newest is a compressed one: the writer starts a new segment after it.
    let log = AuditLog::open(d, options.clone()).unwrap();
    log.append(entry(100)).unwrap();
    drop(log);
    compress_closed(d).unwrap();
    let newest = (1..)
        .take_while(|&n| plain(d, n).exists() || zst(d, n).exists())
        .last();
    let newest = newest.unwrap();
    std::fs::remove_file(plain(d, newest)).unwrap();
    let log = AuditLog::open(
        d,
        AuditOptions {
            compress: false,
            ..options
        },
    )
    .unwrap();
    log.append(entry(101)).unwrap();
    let report = verify(d, None).unwrap();
    assert!(report.intact, "{report:#?}");
    let newest_records = tail(d, &Scope::AllTenants, &Filter::default(), 3).unwrap();
    assert_eq!(newest_records[0].entry.detail.as_ref().unwrap()["n"], 101);
    assert!(
        plain(d, newest).exists(),
        "a new open segment after the compressed one"
    );
}

#[test]
fn prune_removes_compressed_segments_and_what_remains_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let made = fixture(d);
    compress_closed(d).unwrap();
    // Segment 2 caught between rename and removal: both forms go.
    let mut plain_bytes = Vec::new();
    zstd::stream::read::Decoder::new(std::fs::File::open(zst(d, 2)).unwrap())
        .unwrap()
        .read_to_end(&mut plain_bytes)
        .unwrap();
    std::fs::write(plain(d, 2), plain_bytes).unwrap();
    // Lose segment 1's index: prune reads its end from the compressed file.
    std::fs::remove_file(d.join("audit-000001.idx")).unwrap();
    let report = prune(d, end().minus(Duration::from_secs(1500))).unwrap();
    assert!(report.removed_segments >= 2, "{report:?}");
    for number in 1..=report.removed_segments {
        assert!(!zst(d, number).exists() && !plain(d, number).exists());
    }
    let verified = verify(d, None).unwrap();
    assert!(verified.intact, "{verified:#?}");
    assert!(made.records > verified.records);
}

#[test]
fn a_query_enters_a_compressed_segment_at_the_frame_where_since_falls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fixture(d);
    compress_closed(d).unwrap();
    // Segment 3's records, and a time past the middle of them.
    let index: SegmentIndex =
        serde_json::from_slice(&std::fs::read(d.join("audit-000003.idx")).unwrap()).unwrap();
    let offset = (index.last_seq - index.first_seq) * 3 / 4;
    // One second apart.
    let since =
        Timestamp::from_unix_micros(index.first_ts.unix_micros() + offset as i64 * 1_000_000);
    let filter = Filter {
        since: Some(since),
        ..Filter::default()
    };
    let want: Vec<u64> = records(d, Scope::AllTenants, filter.clone())
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(want[0], index.first_seq + offset);
    // Damage segment 3's first frame: a query from `since` does not read it, a full one does.
    let path = zst(d, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 4096, "several frames");
    for b in &mut bytes[20..200] {
        *b = b'#';
    }
    std::fs::write(&path, bytes).unwrap();
    let got: Vec<u64> = records(d, Scope::AllTenants, filter)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(got, want);
    let error = records(d, Scope::AllTenants, Filter::default())
        .unwrap()
        .find_map(Result::err)
        .unwrap();
    assert!(
        error.to_string().contains("audit-000003.jsonl.zst"),
        "{error}"
    );
    let broken = verify(d, None).unwrap().first_broken.unwrap();
    assert_eq!(broken.file, "audit-000003.jsonl.zst");
}
