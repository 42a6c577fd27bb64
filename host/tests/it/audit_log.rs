//! The audit log as the gateway uses it: append, redact, rotate, share a directory between
//! processes, repair a torn line, query within a tenant.

use std::path::Path;

use hpcgate::audit::{
    AuditLog, AuditOptions, Checkpoint, Entry, Event, Filter, Outcome, Record, Scope, Timestamp,
    records, tail, verify,
};
use hpcgate::policy::{Call, ChainOutcome, DecisionKind, FinalDecision};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::audit as support;
use support::{file, lines};

fn call(tenant: &str, tool: &str, instance: &str) -> Call {
    serde_json::from_value(json!({
        "phase": "call", "tenant": tenant, "principal": "alice", "tool": tool,
        "server": "builtin", "remote_tool": null, "instance": instance,
        "arguments": {"instance_id": instance, "path": "a.txt", "content": "secret data"},
        "read_only": false, "usage": {}
    }))
    .unwrap()
}

fn decided(kind: DecisionKind) -> ChainOutcome {
    ChainOutcome {
        decision: FinalDecision {
            decision: kind,
            policy: (kind == DecisionKind::Deny).then(|| "paths".to_owned()),
            reason: (kind == DecisionKind::Deny).then(|| "denied".to_owned()),
            arguments: None,
        },
        policies: Vec::new(),
    }
}

/// Record `n` (1-based) of the standard log: tenant chem on odd, bio on even seqs.
fn entry(n: u64) -> Entry {
    let tenant = if n % 2 == 1 { "chem" } else { "bio" };
    if n.is_multiple_of(3) {
        return Entry::new(Event::JobState)
            .who(tenant, "alice")
            .instance("run1")
            .outcome(Outcome {
                job_id: Some(format!("j{n}")),
                state: Some("COMPLETED".into()),
                ..Outcome::default()
            });
    }
    let kind = if n.is_multiple_of(4) {
        DecisionKind::Deny
    } else {
        DecisionKind::Allow
    };
    Entry::call(
        &call(tenant, "write_file", &format!("run{}", n % 2)),
        &decided(kind),
    )
}

/// Writes `n` records of the standard log; returns their receipts as checkpoints.
fn write(dir: &Path, n: u64, max_file_bytes: u64) -> Vec<Checkpoint> {
    support::write(dir, n, max_file_bytes, entry)
}

#[test]
fn open_repairs_a_torn_last_line_and_the_chain_continues() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 5, 1 << 20);
    let torn = b"{\"seq\":6,\"ts\":\"2026-";
    let mut bytes = std::fs::read(file(dir.path(), 1)).unwrap();
    bytes.extend_from_slice(torn);
    std::fs::write(file(dir.path(), 1), &bytes).unwrap();
    assert!(!verify(dir.path(), None).unwrap().intact);

    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    assert_eq!(log.repaired().len(), 1);
    assert_eq!(log.repaired()[0]["removed_bytes"], torn.len());
    assert_eq!(log.append(entry(7)).unwrap().seq, 7);
    drop(log);
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    assert_eq!(report.records, 7);
    let all: Vec<Record> = records(dir.path(), Scope::AllTenants, Filter::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let repaired = &all[5];
    assert_eq!(repaired.entry.event, Event::AuditRepaired);
    let detail = repaired.entry.detail.as_ref().unwrap();
    assert_eq!(detail["file"], "audit-000001.jsonl");
    assert_eq!(detail["offset"], bytes.len() - torn.len());
    assert_eq!(detail["removed_sha256"], hex::encode(Sha256::digest(torn)));
}

#[test]
fn rotation_keeps_the_chain_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = write(dir.path(), 30, 2_000);
    let report = verify(dir.path(), checkpoints.last()).unwrap();
    assert!(report.intact, "{report:#?}");
    assert!(report.files >= 3, "{report:#?}");
    assert_eq!(report.records, 30);
    let first_of_second = &lines(&file(dir.path(), 2))[0];
    let last_of_first = lines(&file(dir.path(), 1)).pop().unwrap();
    let (a, b): (Record, Record) = (
        serde_json::from_str(&last_of_first).unwrap(),
        serde_json::from_str(first_of_second).unwrap(),
    );
    assert_eq!((b.seq, &b.prev), (a.seq + 1, &a.hash));
    // Reopening continues in the newest file.
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    assert_eq!(log.append(entry(31)).unwrap().seq, 31);
    assert_eq!(log.checkpoint().unwrap().seq, 31);
}

#[test]
fn files_and_directory_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("state/audit");
    write(&audit, 1, 1 << 20);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&audit), 0o700);
    assert_eq!(mode(&file(&audit, 1)), 0o600);
    assert_eq!(mode(&audit.join("audit.lock")), 0o600);
    // A symlinked log file is refused, not followed.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir(other.path().join("a")).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("elsewhere.jsonl"),
        other.path().join("a/audit-000001.jsonl"),
    )
    .unwrap();
    let error = AuditLog::open(other.path().join("a"), AuditOptions::default()).unwrap_err();
    assert!(error.to_string().contains("cannot open"), "{error}");
    assert!(!dir.path().join("elsewhere.jsonl").exists());
}

#[test]
fn two_handles_on_one_directory_share_one_gap_free_chain() {
    // Two opens are two open file descriptions, so `flock` serialises them exactly as it
    // serialises two gateway processes.
    let dir = tempfile::tempdir().unwrap();
    let options = AuditOptions {
        max_file_bytes: 16 << 10,
        ..AuditOptions::default()
    };
    let a = AuditLog::open(dir.path(), options.clone()).unwrap();
    let b = AuditLog::open(dir.path(), options).unwrap();
    let mut seqs: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let log = if t % 2 == 0 { &a } else { &b };
                s.spawn(move || {
                    (0..50)
                        .map(|i| log.append(entry(i + 1)).unwrap().seq)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=400).collect::<Vec<_>>());
    // A torn line left by one "process" is repaired by the other before it writes.
    let newest = verify(dir.path(), None).unwrap().files as u64;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file(dir.path(), newest))
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":401,\"ts").unwrap();
    assert_eq!(b.append(entry(1)).unwrap().seq, 402);
    assert_eq!(a.checkpoint().unwrap().seq, 402);
    drop((a, b));
    let report = verify(dir.path(), None).unwrap();
    assert!(report.intact, "{report:#?}");
    assert_eq!(report.records, 402);
    assert!(report.files > 1);
}

#[test]
fn queries_stay_inside_the_tenant_and_apply_filters() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    log.append(Entry::new(Event::GatewayStarted)).unwrap();
    let before = Timestamp::now();
    for n in 1..=12 {
        log.append(entry(n)).unwrap();
    }
    drop(log);
    let all = |scope: Scope, filter: Filter| -> Vec<Record> {
        records(dir.path(), scope, filter)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(all(Scope::AllTenants, Filter::default()).len(), 13);
    let chem = all(Scope::Tenant("chem".into()), Filter::default());
    assert_eq!(chem.len(), 6);
    assert!(
        chem.iter()
            .all(|r| r.entry.tenant.as_deref() == Some("chem"))
    );
    assert!(all(Scope::Tenant("nobody".into()), Filter::default()).is_empty());

    let denied = Filter {
        decision: Some(DecisionKind::Deny),
        ..Filter::default()
    };
    let seqs = |rs: Vec<Record>| rs.iter().map(|r| r.seq).collect::<Vec<_>>();
    // Records 4 and 8 (seq 5 and 9) are denials, both of tenant bio.
    assert_eq!(seqs(all(Scope::AllTenants, denied.clone())), [5, 9]);
    assert!(all(Scope::Tenant("chem".into()), denied).is_empty());
    let jobs = Filter {
        event: Some(Event::JobState),
        instance: Some("run1".into()),
        ..Filter::default()
    };
    assert_eq!(seqs(all(Scope::AllTenants, jobs)), [4, 7, 10, 13]);
    let writes = Filter {
        tool: Some(hpcgate_policy_sdk::glob::Glob::new("write_*").unwrap()),
        since: Some(before),
        ..Filter::default()
    };
    assert_eq!(all(Scope::Tenant("chem".into()), writes).len(), 4);
    let future = Filter {
        since: Some(Timestamp::parse_bound("0s", Timestamp::now()).unwrap()),
        ..Filter::default()
    };
    assert!(all(Scope::AllTenants, future).is_empty());
    let until = Filter {
        until: Some(before),
        ..Filter::default()
    };
    assert_eq!(seqs(all(Scope::AllTenants, until)), [1]);

    let newest = tail(
        dir.path(),
        &Scope::Tenant("bio".into()),
        &Filter::default(),
        3,
    )
    .unwrap();
    assert_eq!(seqs(newest), [13, 11, 9]);
}

/// A redacted value is recorded as its HMAC under the log's own key (`redaction.key`, 0600,
/// made once), not as a plain SHA-256 that whoever reads the log could try guesses against:
/// neither the secret nor its plain digest is in the file; the same value digests the same
/// in one log (so an auditor with the key can prove it) and differently in another.
#[test]
fn call_records_are_redacted_before_they_are_written() {
    use std::os::unix::fs::PermissionsExt;
    let content_of = |dir: &Path| {
        let text = std::fs::read_to_string(file(dir, 1)).unwrap();
        assert!(!text.contains("secret data"), "{text}");
        let plain = hex::encode(Sha256::digest(b"secret data"));
        assert!(
            !text.contains(&plain),
            "a plain digest can be guessed at: {text}"
        );
        text.lines()
            .map(|line| serde_json::from_str::<Record>(line).unwrap())
            .map(|record| record.entry.call.unwrap().arguments["content"].clone())
            .collect::<Vec<_>>()
    };
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    log.append(entry(1)).unwrap();
    drop(log);
    let log = AuditLog::open(dir.path(), AuditOptions::default()).unwrap();
    log.append(entry(1)).unwrap();
    drop(log);
    let key_file = dir.path().join(hpcgate::audit::REDACTION_KEY_FILE);
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let key = hpcgate::audit::load_redaction_key(&key_file).unwrap();
    let contents = content_of(dir.path());
    assert_eq!(contents.len(), 2);
    assert_eq!(contents[0], contents[1], "one key across opens of the log");
    assert_eq!(
        contents[0],
        json!({"redacted": true, "hmac_sha256": key.digest(b"secret data"), "key": key.id(), "bytes": 11})
    );

    let elsewhere = tempfile::tempdir().unwrap();
    let log = AuditLog::open(elsewhere.path(), AuditOptions::default()).unwrap();
    log.append(entry(1)).unwrap();
    drop(log);
    let other = &content_of(elsewhere.path())[0];
    assert_ne!(other["hmac_sha256"], contents[0]["hmac_sha256"]);
    assert_ne!(other["key"], contents[0]["key"]);
}
