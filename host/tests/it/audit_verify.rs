//! `verify` against a table of tamperings: each is found at the right first broken record
//! (file, line, seq, kind), and the limits of a bare hash chain are stated as rows too.

use std::path::Path;

use hpcgate::audit::{AuditLog, AuditOptions, Checkpoint, Entry, Event, GENESIS, verify};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::audit as support;
use support::{file, lines};

/// Record `n`: tenant chem on odd, bio on even seqs.
fn entry(n: u64) -> Entry {
    let tenant = if n % 2 == 1 { "chem" } else { "bio" };
    Entry::new(Event::JobState)
        .who(tenant, "alice")
        .instance("run1")
        .detail("n", n)
        .detail("note", json!({"padding": "x".repeat(100)}))
}

/// Writes `n` records of the standard log; returns their receipts as checkpoints.
fn write(dir: &Path, n: u64, max_file_bytes: u64) -> Vec<Checkpoint> {
    support::write(dir, n, max_file_bytes, entry)
}

fn put(path: &Path, lines: &[String]) {
    std::fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

/// Re-links and re-hashes a line (what a forger who knows the format does).
fn rehash(line: &str, prev: &str) -> (String, String) {
    let start = line.find(r#""prev":""#).unwrap() + 8;
    let mut text = format!("{}{prev}{}", &line[..start], &line[start + 64..]);
    text.truncate(text.rfind(r#","hash":""#).unwrap());
    text.push('}');
    let hash = hex::encode(Sha256::digest(text.as_bytes()));
    text.pop();
    (format!("{text},\"hash\":\"{hash}\"}}"), hash)
}

#[test]
fn tampering_is_found_at_the_first_broken_record() {
    /// Tampers with the log; returns the checkpoint to verify against.
    type Tamper = fn(&Path, &[Checkpoint]) -> Option<Checkpoint>;
    /// The first broken record: file number, line, seq, problem kind; `None` for intact.
    type Expected = Option<(u64, u64, Option<u64>, &'static str)>;
    // (name, max_file_bytes, tamper, expected)
    let rows: Vec<(&str, u64, Tamper, Expected)> = vec![
        ("untouched", 1 << 20, |_, _| None, None),
        (
            "edit a field",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                assert!(l[4].contains(r#""tenant":"chem""#));
                l[4] = l[4].replacen(r#""tenant":"chem""#, r#""tenant":"bio""#, 1);
                put(&file(d, 1), &l);
                None
            },
            Some((1, 5, Some(5), "bad_hash")),
        ),
        (
            "delete a middle record",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                l.remove(4);
                put(&file(d, 1), &l);
                None
            },
            Some((1, 5, Some(6), "seq_gap")),
        ),
        (
            "swap two records",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                l.swap(4, 5);
                put(&file(d, 1), &l);
                None
            },
            Some((1, 5, Some(6), "reordered")),
        ),
        (
            "truncate the tail (with a checkpoint)",
            1 << 20,
            |d, cps| {
                let mut l = lines(&file(d, 1));
                l.truncate(9);
                put(&file(d, 1), &l);
                Some(cps[11].clone())
            },
            Some((1, 10, Some(10), "truncated")),
        ),
        (
            "truncate the tail (no checkpoint: a shorter chain is still a chain)",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                l.truncate(9);
                put(&file(d, 1), &l);
                None
            },
            None,
        ),
        (
            "remove a whole rotated file",
            1_000,
            |d, _| {
                assert!(file(d, 3).exists(), "the log rotated at least twice");
                std::fs::remove_file(file(d, 2)).unwrap();
                None
            },
            Some((3, 1, None, "missing_file")),
        ),
        (
            "append a forged record (stale hash)",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                let forged = l[11].replacen(r#"{"seq":12,"#, r#"{"seq":13,"#, 1);
                l.push(forged);
                put(&file(d, 1), &l);
                None
            },
            Some((1, 13, Some(13), "bad_hash")),
        ),
        (
            "append a forged record (hash recomputed, not linked)",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                let copy = l[11].replacen(r#"{"seq":12,"#, r#"{"seq":13,"#, 1);
                l.push(rehash(&copy, GENESIS).0);
                put(&file(d, 1), &l);
                None
            },
            Some((1, 13, Some(13), "broken_link")),
        ),
        (
            "rewrite history consistently (only a checkpoint shows it)",
            1 << 20,
            |d, cps| {
                let mut l = lines(&file(d, 1));
                let mut prev = cps[3].hash.clone();
                for line in l.iter_mut().skip(4) {
                    let edited = line.replace(r#""principal":"alice""#, r#""principal":"mallory""#);
                    let (new, hash) = rehash(&edited, &prev);
                    *line = new;
                    prev = hash;
                }
                put(&file(d, 1), &l);
                assert!(
                    verify(d, None).unwrap().intact,
                    "a consistent rewrite verifies alone"
                );
                Some(cps[7].clone())
            },
            Some((1, 8, Some(8), "checkpoint_mismatch")),
        ),
        (
            "a garbage line",
            1 << 20,
            |d, _| {
                let mut l = lines(&file(d, 1));
                l.insert(4, "{not json".to_owned());
                put(&file(d, 1), &l);
                None
            },
            Some((1, 5, None, "unparsable")),
        ),
        (
            "a torn last line (before open repairs it)",
            1 << 20,
            |d, _| {
                let l = lines(&file(d, 1));
                let mut text = l.iter().map(|l| format!("{l}\n")).collect::<String>();
                text.push_str(&l[11][..40]);
                std::fs::write(file(d, 1), text).unwrap();
                None
            },
            Some((1, 13, Some(12), "torn_line")),
        ),
    ];
    for (name, max_file_bytes, tamper, expected) in rows {
        let dir = tempfile::tempdir().unwrap();
        let checkpoints = write(dir.path(), 12, max_file_bytes);
        let checkpoint = tamper(dir.path(), &checkpoints);
        let report = verify(dir.path(), checkpoint.as_ref()).unwrap();
        match expected {
            None => assert!(report.intact, "{name}: {report:#?}"),
            Some((number, line, seq, kind)) => {
                assert!(!report.intact, "{name}: not detected");
                let broken = report.first_broken.clone().unwrap();
                let problem = serde_json::to_value(&broken.problem).unwrap();
                assert_eq!(
                    (
                        broken.file.as_str(),
                        broken.line,
                        broken.seq,
                        problem["kind"].as_str()
                    ),
                    (
                        format!("audit-{number:06}.jsonl").as_str(),
                        line,
                        seq,
                        Some(kind)
                    ),
                    "{name}: {broken:#?}"
                );
                if kind == "torn_line" {
                    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
                    assert_eq!(log.repaired().len(), 1, "{name}");
                    drop(log);
                    let report = verify(dir.path(), checkpoint.as_ref()).unwrap();
                    assert!(report.intact, "{name}: after open: {report:#?}");
                    assert_eq!(report.records, 13, "12 records and `audit.repaired`");
                }
            }
        }
    }
}
