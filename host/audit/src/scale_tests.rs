//! Reading at scale: `tail` and time-bounded `records` read only the end or the time range of
//! the log (shown by damaging everything else), agree with a full scan, and `verify` checks
//! the segment indexes and the order of time.

use std::path::Path;
use std::time::Duration;

use super::bench::{generate, sample_call_entry};
use super::*;

const STEP: Duration = Duration::from_secs(1);

/// 3000 records one second apart ending at `END`, in segments of about 64 KiB.
fn fixture(dir: &Path) -> bench::Generated {
    let entries = [
        sample_call_entry(),
        Entry::new(Event::JobState).who("bio", "bob").detail("n", 1),
    ];
    generate(dir, 3000, end(), STEP, &entries, 64 << 10).unwrap()
}

fn end() -> Timestamp {
    "2026-11-20T12:00:00Z".parse().unwrap()
}

fn all(dir: &Path, filter: Filter) -> Vec<Record> {
    records(dir, Scope::AllTenants, filter)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn segment_path(dir: &Path, number: u64) -> std::path::PathBuf {
    dir.join(format!("audit-{number:06}.jsonl"))
}

#[test]
fn time_bounded_queries_agree_with_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    assert!(made.segments >= 5, "{made:?}");
    let everything = all(dir.path(), Filter::default());
    assert_eq!(everything.len(), 3000);
    let at = |secs_before_end: u64| end().minus(Duration::from_secs(secs_before_end));
    let bounds = [
        (None, None),
        (Some(at(10)), None),
        (Some(at(0)), None),
        (Some(end().minus(Duration::from_micros(1))), None),
        (Some(at(5000)), None),
        (None, Some(at(2990))),
        (Some(at(2000)), Some(at(1000))),
        (Some(at(1234)), Some(at(1233))),
        (Some(at(10)), Some(at(20))),
        (Some(end()), Some(end())),
        (Some(at(3001)), Some(at(2999))),
    ];
    for (since, until) in bounds {
        let filter = Filter {
            since,
            until,
            ..Filter::default()
        };
        let want: Vec<u64> = everything
            .iter()
            .filter(|r| filter.matches(r))
            .map(|r| r.seq)
            .collect();
        let got: Vec<u64> = all(dir.path(), filter.clone())
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(got, want, "since {since:?} until {until:?}");
        // The raw lines `--json` prints (time-only filters: checked, not parsed).
        let mut raw = records(dir.path(), Scope::AllTenants, filter.clone()).unwrap();
        let mut raw_seqs = Vec::new();
        while let Some(line) = raw.next_line() {
            let line = line.unwrap();
            let record = super::canonical::check_line(&line).unwrap();
            raw_seqs.push(record.seq);
        }
        assert_eq!(raw_seqs, want, "raw lines since {since:?} until {until:?}");
        let newest: Vec<u64> = tail(dir.path(), &Scope::AllTenants, &filter, 7)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        let want_newest: Vec<u64> = want.iter().rev().take(7).copied().collect();
        assert_eq!(newest, want_newest, "tail since {since:?} until {until:?}");
        let scoped: Vec<u64> = tail(dir.path(), &Scope::Tenant("bio".into()), &filter, 3)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        let want_scoped: Vec<u64> = everything
            .iter()
            .rev()
            .filter(|r| filter.matches(r) && r.entry.tenant.as_deref() == Some("bio"))
            .take(3)
            .map(|r| r.seq)
            .collect();
        assert_eq!(scoped, want_scoped);
    }
}

#[test]
fn tail_and_recent_queries_never_read_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    // Old segments replaced by garbage of the same length: whatever reads them fails.
    for number in 1..made.segments - 1 {
        let path = segment_path(dir.path(), number);
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        let garbage: Vec<u8> = (0..len)
            .map(|i| if i % 100 == 99 { b'\n' } else { b'#' })
            .collect();
        std::fs::write(&path, garbage).unwrap();
    }
    let newest = tail(dir.path(), &Scope::AllTenants, &Filter::default(), 20).unwrap();
    assert_eq!(newest.first().unwrap().seq, 3000);
    assert_eq!(newest.len(), 20);
    let recent = all(
        dir.path(),
        Filter {
            since: Some(end().minus(Duration::from_secs(30))),
            ..Filter::default()
        },
    );
    assert_eq!(recent.first().unwrap().seq, 2970);
    assert_eq!(recent.len(), 31);
    // A full scan does read them, and says where.
    let error = records(dir.path(), Scope::AllTenants, Filter::default())
        .unwrap()
        .find_map(Result::err)
        .unwrap();
    assert!(
        error.to_string().contains("audit-000001.jsonl` line 1"),
        "{error}"
    );
    assert!(!verify(dir.path(), None).unwrap().intact);
}

#[test]
fn the_writer_indexes_closed_segments_and_verify_checks_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(
        dir.path(),
        AuditOptions {
            max_file_bytes: 2_000,
            ..AuditOptions::default()
        },
    )
    .unwrap();
    for n in 0..40 {
        log.append(Entry::new(Event::JobState).detail("n", n))
            .unwrap();
    }
    drop(log);
    let index_path = dir.path().join("audit-000001.idx");
    let index: SegmentIndex = serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    assert_eq!(index.first_seq, 1);
    assert_eq!(
        index.bytes,
        std::fs::metadata(segment_path(dir.path(), 1))
            .unwrap()
            .len()
    );
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    assert!(report.files >= 3);
    // An index that hides the segment's later records from time queries.
    let mut forged = index.clone();
    forged.last_ts = forged.first_ts;
    std::fs::write(&index_path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let broken = verify(dir.path(), None).unwrap().first_broken.unwrap();
    assert_eq!(broken.file, "audit-000001.jsonl");
    assert!(
        matches!(broken.problem, Problem::IndexMismatch { .. }),
        "{broken:?}"
    );
    // Without an index, readers fall back to the segment's own first and last lines.
    std::fs::remove_file(&index_path).unwrap();
    assert!(verify(dir.path(), None).unwrap().intact);
    assert_eq!(all(dir.path(), Filter::default()).len(), 40);
}

#[test]
fn verify_in_parallel_reports_the_first_problem_in_chain_order() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    let intact = verify(dir.path(), None).unwrap();
    assert!(intact.intact, "{intact:#?}");
    assert_eq!((intact.records, intact.files as u64), (3000, made.segments));
    // Damage a late segment and an early one: the early one is reported.
    for number in [made.segments - 1, 2] {
        let path = segment_path(dir.path(), number);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.iter().position(|&b| b == b'\n').unwrap() + 40;
        bytes[at] ^= 1;
        std::fs::write(&path, bytes).unwrap();
    }
    let report = verify(dir.path(), None).unwrap();
    let broken = report.first_broken.unwrap();
    assert_eq!(
        (broken.file.as_str(), broken.line),
        ("audit-000002.jsonl", 2)
    );
    let first_of_2: SegmentIndex =
        serde_json::from_slice(&std::fs::read(dir.path().join("audit-000002.idx")).unwrap())
            .unwrap();
    assert_eq!(report.records, first_of_2.first_seq);
}

#[test]
fn prune_removes_old_segments_and_the_rest_still_verifies_against_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    let everything = all(dir.path(), Filter::default());
    let cp = |seq: u64| Checkpoint {
        seq,
        hash: everything[seq as usize - 1].hash.clone(),
    };
    // Segment 3's last record: everything up to it is older than `before`.
    let third: SegmentIndex =
        serde_json::from_slice(&std::fs::read(dir.path().join("audit-000003.idx")).unwrap())
            .unwrap();
    let fourth: SegmentIndex =
        serde_json::from_slice(&std::fs::read(dir.path().join("audit-000004.idx")).unwrap())
            .unwrap();
    let before = fourth.first_ts;
    let report = prune(dir.path(), before).unwrap();
    assert_eq!(
        (report.removed_segments, report.removed_records),
        (3, third.last_seq)
    );
    let anchor = report.anchor.unwrap();
    assert_eq!(
        (anchor.first_segment, anchor.next_seq, anchor.prev.as_str()),
        (4, third.last_seq + 1, third.last_hash.as_str())
    );
    assert!(!segment_path(dir.path(), 3).exists() && segment_path(dir.path(), 4).exists());
    // Checkpoints from before the prune (older ones ignored, the anchor's own checked), and after.
    let checkpoints = [cp(10), cp(third.last_seq), cp(fourth.last_seq), cp(3000)];
    let report = verify_against(dir.path(), &checkpoints).unwrap();
    assert!(report.intact, "{report:#?}");
    assert_eq!(
        report.records,
        3000 - third.last_seq + 1,
        "kept records and audit.pruned"
    );
    let kept = all(dir.path(), Filter::default());
    assert_eq!(kept.first().unwrap().seq, third.last_seq + 1);
    let last = kept.last().unwrap();
    assert_eq!(last.entry.event, Event::AuditPruned);
    assert_eq!(last.entry.detail.as_ref().unwrap()["removed_segments"], 3);
    // Nothing more to prune before the same time; a second prune moves the anchor on.
    assert_eq!(prune(dir.path(), before).unwrap().removed_segments, 0);
    let report = prune(dir.path(), fourth.last_ts).unwrap();
    assert_eq!(
        report.removed_segments, 0,
        "segment 4's last record is not older than that"
    );
    // An anchor whose `prev` disagrees with a checkpoint of that record is caught.
    let forged = Anchor {
        prev: "ab".repeat(32),
        ..anchor.clone()
    };
    let path = dir.path().join("audit-anchor.json");
    std::fs::write(&path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let broken = verify_against(dir.path(), &checkpoints)
        .unwrap()
        .first_broken
        .unwrap();
    assert!(
        matches!(broken.problem, Problem::CheckpointMismatch { .. }),
        "{broken:?}"
    );
    // ... and without that checkpoint, by the chain itself: the first kept record's `prev`.
    let broken = verify(dir.path(), None).unwrap().first_broken.unwrap();
    assert!(
        matches!(broken.problem, Problem::BrokenLink { .. }),
        "{broken:?}"
    );
    std::fs::write(&path, serde_json::to_vec(&anchor).unwrap()).unwrap();
    // A crash after the anchor was written but before the old files were removed: they are
    // ignored by verify and queries alike.
    std::fs::write(segment_path(dir.path(), 2), b"left behind\n").unwrap();
    assert!(verify_against(dir.path(), &checkpoints).unwrap().intact);
    assert_eq!(all(dir.path(), Filter::default()).len(), kept.len());
    assert_eq!(made.records, 3000);
}

/// An anchor no `audit.pruned` record names hides history: an earlier version's prune cut short
/// before it recorded itself, or an anchor written by hand. Verify says so, and the next prune
/// records the anchor in force.
#[test]
fn an_anchor_without_its_record_is_caught_and_the_next_prune_records_it() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let fourth: SegmentIndex =
        serde_json::from_slice(&std::fs::read(dir.path().join("audit-000004.idx")).unwrap())
            .unwrap();
    let cut_short = super::prune::prune_unrecorded(dir.path(), fourth.first_ts).unwrap();
    assert_eq!(cut_short.removed_segments, 3);
    let broken = verify(dir.path(), None).unwrap().first_broken.unwrap();
    assert!(
        matches!(
            broken.problem,
            Problem::UnrecordedAnchor {
                first_segment: 4,
                ..
            }
        ),
        "{broken:?}"
    );
    assert_eq!(
        prune(dir.path(), fourth.first_ts).unwrap().removed_segments,
        0
    );
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    assert_eq!(report.first_seq, fourth.first_seq);
    let last = all(dir.path(), Filter::default()).pop().unwrap();
    assert_eq!(last.entry.event, Event::AuditPruned);
    assert_eq!(last.entry.detail.unwrap()["first_seq"], fourth.first_seq);
}

/// A prune records itself before it writes its anchor: cut short between the two, it leaves
/// every segment and a log that verifies whole (its record names an anchor not written yet),
/// and the next prune writes that anchor, which a record names. So verify never has to take an
/// anchor no record names from a prune of this version.
#[test]
fn a_prune_cut_short_after_its_record_leaves_a_log_that_verifies() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let segments = segment::list(dir.path()).unwrap().len();
    let fourth: SegmentIndex =
        serde_json::from_slice(&std::fs::read(dir.path().join("audit-000004.idx")).unwrap())
            .unwrap();
    let named =
        super::prune::prune_cut_short_after_its_record(dir.path(), fourth.first_ts).unwrap();
    assert_eq!(named.first_segment, 4);
    assert!(!dir.path().join(super::prune::ANCHOR_FILE).exists());
    assert_eq!(segment::list(dir.path()).unwrap().len(), segments);
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    assert_eq!(report.first_seq, 1);

    let done = prune(dir.path(), fourth.first_ts).unwrap();
    assert_eq!(done.removed_segments, 3);
    assert_eq!(done.anchor.as_ref(), Some(&named));
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    assert_eq!(report.first_seq, fourth.first_seq);
    // Both attempts are in the chain, each naming the anchor in force.
    let records = all(dir.path(), Filter::default());
    let prunes: Vec<_> = records
        .iter()
        .filter(|r| r.entry.event == Event::AuditPruned)
        .map(|r| r.entry.detail.as_ref().unwrap()["first_seq"].clone())
        .collect();
    assert_eq!(
        prunes,
        [fourth.first_seq.into(), fourth.first_seq.into()] as [serde_json::Value; 2]
    );
}

#[test]
fn prune_refuses_a_log_that_does_not_verify() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let path = segment_path(dir.path(), 2);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[50] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let error = prune(dir.path(), end()).unwrap_err();
    assert!(
        error.to_string().contains("destroy the evidence"),
        "{error}"
    );
    assert!(segment_path(dir.path(), 1).exists());
}

/// A prune that keeps only an empty segment (a rotation made it, and no record came since) goes
/// on from its anchor: its `audit.pruned` record follows the last record removed, and the log
/// verifies. The writer used to look for the chain's head in the kept segments only, found
/// none, and began the chain again at seq 1, which verify refused from then on (and prune with
/// it).
#[test]
fn a_prune_that_keeps_only_an_empty_segment_goes_on_from_its_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let made = fixture(dir.path());
    let newest = segment::list(dir.path()).unwrap().last().unwrap().number;
    std::fs::File::create(segment_path(dir.path(), newest + 1)).unwrap();
    assert!(verify(dir.path(), None).unwrap().intact);

    let after_all: Timestamp = "2026-11-20T13:00:00Z".parse().unwrap();
    assert!(made.last_ts < after_all);
    let report = prune(dir.path(), after_all).unwrap();
    assert_eq!(report.removed_records, 3000, "{report:?}");
    let anchor = report.anchor.unwrap();
    assert_eq!(anchor.next_seq, 3001);
    let verified = verify(dir.path(), None).unwrap();
    assert!(verified.intact, "{verified:?}");
    let kept = all(dir.path(), Filter::default());
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].seq, 3001);
    assert_eq!(kept[0].prev, anchor.prev);
    assert_eq!(kept[0].entry.event, Event::AuditPruned);
}

/// An anchor that hides records newer than a prune's `before` was written by hand, not left by
/// a prune cut short: the prune refuses to record it, and verify still reports it. The prune
/// used to record any unrecorded anchor, after which verify passed, checkpoints included.
#[test]
fn a_prune_refuses_to_record_an_anchor_that_hides_what_it_would_keep() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let fourth: SegmentIndex =
        serde_json::from_slice(&std::fs::read(dir.path().join("audit-000004.idx")).unwrap())
            .unwrap();
    let by_hand = super::prune::prune_unrecorded(dir.path(), end()).unwrap();
    assert!(by_hand.removed_segments > 3, "{by_hand:?}");
    let error = prune(dir.path(), fourth.first_ts).unwrap_err();
    assert!(error.to_string().contains("removed by hand"), "{error}");
    let broken = verify(dir.path(), None).unwrap().first_broken.unwrap();
    assert!(
        matches!(broken.problem, Problem::UnrecordedAnchor { .. }),
        "{broken:?}"
    );
    // An admin who knows where it came from records it with a later --before.
    assert_eq!(prune(dir.path(), end()).unwrap().removed_segments, 0);
    assert!(verify(dir.path(), None).unwrap().intact);
}

/// An anchor naming seq 0 (no prune writes one) is refused by verify with what is wrong,
/// instead of counting back from it (a panic in a debug build, a wrap in a release one).
#[test]
fn an_anchor_of_seq_0_is_refused_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    super::prune::prune_unrecorded(dir.path(), end()).unwrap();
    let path = dir.path().join(super::prune::ANCHOR_FILE);
    let mut anchor: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    anchor["next_seq"] = 0.into();
    std::fs::write(&path, anchor.to_string()).unwrap();
    let error = verify(dir.path(), None).unwrap_err();
    assert!(error.to_string().contains("start at 1"), "{error}");
}
