//! Signed checkpoints exported automatically, against a table of forgeries: each row is a
//! tampering that a bare hash chain may not show (records deleted, reordered or duplicated and
//! everything after re-chained with correct hashes, a segment replaced, the log truncated,
//! compressed segments edited, replaced or truncated), and `verify --checkpoints` must name the
//! first record that no longer matches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hpcgate::audit::{
    AuditLog, AuditOptions, CheckpointKey, CheckpointOptions, CheckpointSink, Entry, Event,
    GENESIS, Problem, VerifyReport, compress_closed, parse_public_key, read_checkpoints, verify,
    verify_against,
};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::audit::{file, lines};

fn entry(n: u64) -> Entry {
    Entry::new(Event::JobState)
        .who("chem", "alice")
        .detail("n", n)
        .detail("note", json!({"padding": "x".repeat(60)}))
}

/// 60 records in segments of about 1.2 KB, with a signed checkpoint exported after records
/// 20, 40 and 60 (each by a gateway stopping); returns the sink.
fn write_log(dir: &Path, sink: &Path) {
    for round in 0..3 {
        let log = AuditLog::open(
            dir,
            AuditOptions {
                max_file_bytes: 1_200,
                checkpoints: Some(CheckpointOptions {
                    every: Duration::from_secs(3600),
                    sink: CheckpointSink::File(sink.to_owned()),
                }),
                ..AuditOptions::default()
            },
        )
        .unwrap();
        for n in 1..=20 {
            log.append(entry(round * 20 + n)).unwrap();
        }
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    (1..)
        .map(|n| file(dir, n))
        .take_while(|p| p.exists())
        .collect()
}

/// The log's lines, by segment.
fn read_all(dir: &Path) -> Vec<Vec<String>> {
    segments(dir).iter().map(|p| lines(p)).collect()
}

/// Writes `flat` back into the segments with their old line counts (the last takes the
/// difference) and drops the segment indexes, as a forger who knows the format would.
fn write_back(dir: &Path, counts: &[usize], flat: &[String]) {
    let mut rest = flat;
    for (i, path) in segments(dir).iter().enumerate() {
        let take = if i + 1 == counts.len() {
            rest.len()
        } else {
            counts[i].min(rest.len())
        };
        let text: String = rest[..take].iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(path, text).unwrap();
        rest = &rest[take..];
        let _ = std::fs::remove_file(path.with_extension("idx"));
    }
}

/// Renumbers, re-links and re-hashes every line from `from` on: a consistent forgery.
fn rechain(flat: &mut [String], from: usize) {
    for i in from..flat.len() {
        let prev = if i == 0 {
            GENESIS.to_owned()
        } else {
            hash_of(&flat[i - 1])
        };
        let line = &flat[i];
        let after_seq = line.find(',').unwrap();
        let mut text = format!("{{\"seq\":{}{}", i + 1, &line[after_seq..]);
        let start = text.find(r#""prev":""#).unwrap() + 8;
        text = format!("{}{prev}{}", &text[..start], &text[start + 64..]);
        text.truncate(text.rfind(r#","hash":""#).unwrap());
        text.push('}');
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        text.pop();
        flat[i] = format!("{text},\"hash\":\"{hash}\"}}");
    }
}

fn ts_of(line: &str) -> String {
    let at = line.find(r#""ts":""#).unwrap() + 6;
    let end = at + line[at..].find('"').unwrap();
    format!(r#""ts":"{}""#, &line[at..end])
}

fn hash_of(line: &str) -> String {
    let at = line.rfind(r#""hash":""#).unwrap() + 8;
    line[at..at + 64].to_owned()
}

/// Applies `edit` to the flat list of lines, re-chains from `from`, writes it back.
fn forge(dir: &Path, from: usize, edit: impl FnOnce(&mut Vec<String>)) {
    let segs = read_all(dir);
    let counts: Vec<usize> = segs.iter().map(Vec::len).collect();
    let mut flat: Vec<String> = segs.into_iter().flatten().collect();
    edit(&mut flat);
    rechain(&mut flat, from);
    write_back(dir, &counts, &flat);
}

fn compressed(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("audit-{number:06}.jsonl.zst"))
}

/// Compresses the closed segments, then applies `edit` to the compressed bytes of segment 2.
fn edit_compressed(dir: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    compress_closed(dir).unwrap();
    let path = compressed(dir, 2);
    let mut bytes = std::fs::read(&path).unwrap();
    edit(&mut bytes);
    std::fs::write(&path, bytes).unwrap();
}

/// Decompresses every compressed segment back to its plain form (as a forger reads them).
fn decompress_all(dir: &Path) {
    for number in 1.. {
        let path = compressed(dir, number);
        if !path.exists() {
            if file(dir, number).exists() {
                continue;
            }
            break;
        }
        let plain = zstd::stream::decode_all(std::fs::File::open(&path).unwrap()).unwrap();
        std::fs::write(file(dir, number), plain).unwrap();
        std::fs::remove_file(path).unwrap();
    }
}

fn check(dir: &Path, sink: &Path) -> VerifyReport {
    let key = parse_public_key(&CheckpointKey::load(dir).unwrap().public_hex()).unwrap();
    let text = std::fs::read_to_string(sink).unwrap();
    let set = read_checkpoints(&text, Some(&key)).unwrap();
    assert_eq!(set.signed, set.checkpoints.len());
    verify_against(dir, &set.checkpoints).unwrap()
}

#[test]
fn verify_with_checkpoints_catches_every_forgery() {
    type Tamper = fn(&Path);
    // (name, tamper, the bare chain still verifies, first broken seq, problem kind)
    let rows: Vec<(&str, Tamper, bool, Option<u64>, &str)> = vec![
        ("untouched", |_| {}, true, None, ""),
        (
            "flip a byte",
            |d| {
                let path = file(d, 2);
                let mut bytes = std::fs::read(&path).unwrap();
                let at = bytes.iter().position(|&b| b == b'x').unwrap();
                bytes[at] = b'y';
                std::fs::write(&path, bytes).unwrap();
            },
            false,
            None,
            "bad_hash",
        ),
        (
            "delete a middle record and re-chain all after it",
            |d| forge(d, 14, |l| drop(l.remove(14))),
            true,
            Some(20),
            "checkpoint_mismatch",
        ),
        (
            "reorder two records and re-chain (their times kept in order)",
            |d| {
                forge(d, 30, |l| {
                    l.swap(30, 31);
                    let (a, b) = (ts_of(&l[30]), ts_of(&l[31]));
                    l[30] = l[30].replacen(&a, &b, 1);
                    l[31] = l[31].replacen(&b, &a, 1);
                })
            },
            true,
            Some(40),
            "checkpoint_mismatch",
        ),
        (
            "duplicate a record and re-chain",
            |d| {
                forge(d, 45, |l| {
                    let copy = l[44].clone();
                    l.insert(45, copy);
                })
            },
            true,
            Some(60),
            "checkpoint_mismatch",
        ),
        (
            "truncate after a checkpoint",
            |d| forge(d, 60, |l| l.truncate(50)),
            true,
            Some(51),
            "truncated",
        ),
        (
            "replace a whole segment (re-chained)",
            |d| {
                let counts: Vec<usize> = read_all(d).iter().map(Vec::len).collect();
                let start = counts[0] + counts[1];
                forge(d, start, |l| {
                    for line in &mut l[start..start + counts[2]] {
                        *line = line.replace(r#""principal":"alice""#, r#""principal":"eve""#);
                    }
                })
            },
            true,
            Some(20),
            "checkpoint_mismatch",
        ),
        (
            "delete the newest segment (and an empty one rotation left after it)",
            |d| loop {
                let newest = segments(d).pop().unwrap();
                let empty = std::fs::metadata(&newest).unwrap().len() == 0;
                std::fs::remove_file(newest).unwrap();
                if !empty {
                    break;
                }
            },
            true,
            None,
            "truncated",
        ),
        (
            "compress the closed segments (no tampering)",
            |d| {
                compress_closed(d).unwrap();
            },
            true,
            None,
            "",
        ),
        (
            "edit a byte inside a compressed segment",
            |d| {
                edit_compressed(d, |bytes| {
                    let middle = bytes.len() / 2;
                    bytes[middle] ^= 0x20;
                })
            },
            false,
            None,
            // The edit shows as a changed record if the edited bytes decompress, else as a
            // compressed segment that does not decompress (checksum or structure).
            "bad_hash|compression",
        ),
        (
            "truncate a compressed segment",
            |d| edit_compressed(d, |bytes| bytes.truncate(bytes.len() * 2 / 3)),
            false,
            None,
            "compression",
        ),
        (
            "replace a compressed segment with another (other level, altered, re-chained)",
            |d| {
                compress_closed(d).unwrap();
                // The forger decompresses, rewrites segment 3 and re-chains everything after
                // it, then compresses segment 3 differently and the rest as the gateway does.
                decompress_all(d);
                let counts: Vec<usize> = read_all(d).iter().map(Vec::len).collect();
                let start = counts[0] + counts[1];
                forge(d, start, |l| {
                    for line in &mut l[start..start + counts[2]] {
                        *line = line.replace(r#""principal":"alice""#, r#""principal":"eve""#);
                    }
                });
                let plain = std::fs::read(file(d, 3)).unwrap();
                let other = zstd::stream::encode_all(plain.as_slice(), 19).unwrap();
                std::fs::write(compressed(d, 3), other).unwrap();
                std::fs::remove_file(file(d, 3)).unwrap();
                compress_closed(d).unwrap();
                assert!(!file(d, 2).exists() && !file(d, 4).exists());
            },
            true,
            Some(20),
            "checkpoint_mismatch",
        ),
        (
            "hide segments 1 and 2 behind a hand-written anchor (the files kept, or deleted)",
            |d| {
                let segs = read_all(d);
                let first: serde_json::Value = serde_json::from_str(&segs[2][0]).unwrap();
                let last: serde_json::Value =
                    serde_json::from_str(segs[1].last().unwrap()).unwrap();
                let anchor = serde_json::json!({
                    "first_segment": 3,
                    "next_seq": first["seq"],
                    "prev": first["prev"],
                    "prev_ts": last["ts"],
                });
                std::fs::write(d.join("audit-anchor.json"), anchor.to_string()).unwrap();
                std::fs::remove_file(file(d, 1)).unwrap();
            },
            false,
            None,
            "unrecorded_anchor",
        ),
    ];
    for (name, tamper, chain_alone_passes, seq, kind) in rows {
        let dir = tempfile::tempdir().unwrap();
        let (audit, sink) = (
            dir.path().join("audit"),
            dir.path().join("checkpoints.jsonl"),
        );
        write_log(&audit, &sink);
        assert!(segments(&audit).len() >= 4, "{name}: the log rotated");
        assert!(check(&audit, &sink).intact, "{name}: before tampering");
        tamper(&audit);
        let alone = verify(&audit, None).unwrap();
        assert_eq!(
            alone.intact, chain_alone_passes,
            "{name}: what the chain alone says: {alone:#?}"
        );
        let report = check(&audit, &sink);
        if kind.is_empty() {
            assert!(report.intact, "{name}: {report:#?}");
            continue;
        }
        let broken = report
            .first_broken
            .clone()
            .unwrap_or_else(|| panic!("{name}: not caught: {report:#?}"));
        let problem = serde_json::to_value(&broken.problem).unwrap();
        assert!(
            kind.split('|').any(|k| problem["kind"] == k),
            "{name}: want {kind}: {broken:#?}"
        );
        if name.contains("inside a compressed") || name.starts_with("truncate a compressed") {
            assert_eq!(broken.file, "audit-000002.jsonl.zst", "{name}: {broken:#?}");
        }
        if let Some(seq) = seq {
            assert_eq!(broken.seq, Some(seq), "{name}: {broken:#?}");
        }
        if let Problem::CheckpointMismatch { seq, .. } = broken.problem {
            assert_eq!(
                report.records,
                seq - 1,
                "{name}: verified up to the record before"
            );
        }
    }
}

#[test]
fn forged_or_foreign_checkpoints_are_refused_and_a_torn_one_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (audit, sink) = (
        dir.path().join("audit"),
        dir.path().join("checkpoints.jsonl"),
    );
    write_log(&audit, &sink);
    let key_file = audit.join("checkpoint.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let key = parse_public_key(&CheckpointKey::load(&audit).unwrap().public_hex()).unwrap();
    let text = std::fs::read_to_string(&sink).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3, "{text}");
    // An edited checkpoint (its seq moved) no longer verifies.
    let edited = text.replacen(r#"{"seq":20,"#, r#"{"seq":21,"#, 1);
    let error = read_checkpoints(&edited, Some(&key)).unwrap_err();
    assert!(
        error.to_string().contains("signature does not verify"),
        "{error}"
    );
    // Another key's checkpoints are refused with --key.
    let other = tempfile::tempdir().unwrap();
    let other_key = parse_public_key(
        &CheckpointKey::load_or_create(other.path())
            .unwrap()
            .public_hex(),
    )
    .unwrap();
    let error = read_checkpoints(&text, Some(&other_key)).unwrap_err();
    assert!(error.to_string().contains("signed by key"), "{error}");
    // A line torn by a crash in the middle of writing: ignored, and the next checkpoint goes on
    // a line of its own.
    let torn = &lines[1][..lines[1].len() / 2];
    std::fs::write(&sink, format!("{}\n{torn}", lines[0])).unwrap();
    let log = AuditLog::open(
        &audit,
        AuditOptions {
            max_file_bytes: 1_200,
            checkpoints: Some(CheckpointOptions {
                every: Duration::from_secs(3600),
                sink: CheckpointSink::File(sink.clone()),
            }),
            ..AuditOptions::default()
        },
    )
    .unwrap();
    log.append(entry(61)).unwrap();
    drop(log);
    let set = read_checkpoints(&std::fs::read_to_string(&sink).unwrap(), Some(&key)).unwrap();
    assert_eq!(set.ignored.len(), 1, "{set:?}");
    assert_eq!(set.checkpoints.len(), 2, "{set:?}");
    assert_eq!(set.checkpoints[1].seq, 61);
    assert!(verify_against(&audit, &set.checkpoints).unwrap().intact);
}

#[test]
fn audit_key_and_verify_checkpoints_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (audit, sink) = (
        dir.path().join("audit"),
        dir.path().join("checkpoints.jsonl"),
    );
    write_log(&audit, &sink);
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
            .args(args)
            .output()
            .unwrap()
    };
    let d = audit.to_str().unwrap();
    let output = run(&["audit", "key", "--dir", d]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let public = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert_eq!(public, CheckpointKey::load(&audit).unwrap().public_hex());
    let s = sink.to_str().unwrap();
    let output = run(&[
        "audit",
        "verify",
        "--dir",
        d,
        "--checkpoints",
        s,
        "--key",
        &public,
    ]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("3 checkpoints") && text.contains("intact: 60 records"),
        "{text}"
    );
    forge(&audit, 14, |l| drop(l.remove(14)));
    let output = run(&[
        "audit",
        "verify",
        "--dir",
        d,
        "--checkpoints",
        s,
        "--key",
        &public,
    ]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("BROKEN") && text.contains("(seq 20): rewritten"),
        "{text}"
    );
    // A key that is not the gateway's: the checkpoints cannot be trusted at all.
    let other = tempfile::tempdir().unwrap();
    let other = CheckpointKey::load_or_create(other.path())
        .unwrap()
        .public_hex();
    let output = run(&[
        "audit",
        "verify",
        "--dir",
        d,
        "--checkpoints",
        s,
        "--key",
        &other,
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "an error, not a verdict on the log"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot be trusted") && stderr.contains("signed by key"),
        "{stderr}"
    );
}

/// The real gateway over stdio exporting a checkpoint every second, SIGKILLed while it serves
/// calls and restarted: the sink holds only whole checkpoints or a torn last line (ignored), the
/// restarted gateway goes on exporting, and the log verifies against every checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_while_exporting_checkpoints_leaves_a_sink_that_verifies() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;

    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("sink/checkpoints.jsonl");
    std::fs::create_dir_all(sink.parent().unwrap()).unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\n[audit]\ncheckpoint_every = \"1s\"\ncheckpoint_sink = {:?}\n",
            dir.path().join("state").display().to_string(),
            sink.display().to_string()
        ),
    )
    .unwrap();
    let start = || {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"));
        command
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("HOME", dir.path().join("home"))
            .env("USER", "checkpoint-tester")
            .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
            .env_remove("HPCGATE_CONFIG");
        TokioChildProcess::new(command).unwrap()
    };
    let call = || {
        let map = serde_json::Map::new();
        CallToolRequestParams::new("list_instances").with_arguments(map)
    };
    // Complete lines only: the gateway may be midway through appending one.
    let checkpoints = || {
        std::fs::read_to_string(&sink)
            .unwrap_or_default()
            .matches('\n')
            .count()
    };

    let transport = start();
    let pid = transport.id().unwrap();
    let client = ().serve(transport).await.unwrap();
    let started = std::time::Instant::now();
    // Calls until three checkpoints were exported, then SIGKILL in the middle of the load.
    while checkpoints() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoints exported"
        );
        client.peer().call_tool(call()).await.unwrap();
    }
    for _ in 0..20 {
        client.peer().call_tool(call()).await.unwrap();
    }
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    drop(client);
    let before_restart = checkpoints();

    let client = ().serve(start()).await.unwrap();
    for _ in 0..20 {
        client.peer().call_tool(call()).await.unwrap();
    }
    let waited = std::time::Instant::now();
    while checkpoints() <= before_restart {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the restarted gateway exports"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let audit = dir.path().join("state/audit");
    let key = parse_public_key(&CheckpointKey::load(&audit).unwrap().public_hex()).unwrap();
    let set = read_checkpoints(&std::fs::read_to_string(&sink).unwrap(), Some(&key)).unwrap();
    assert!(set.checkpoints.len() >= 4, "{set:?}");
    let report = verify_against(&audit, &set.checkpoints).unwrap();
    assert!(report.intact, "{report:#?}");
    drop(client);
}
