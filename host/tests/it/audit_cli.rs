//! `hpcgate audit …` and `hpcgate policy test` on a real audit directory, run as an admin runs
//! them: the real binary, real files. Also: an audit file replays as a policy test input, and a
//! gateway killed with SIGKILL mid-append leaves a log that opens (repairing) and verifies, and
//! a log compressed by `audit compress` answers every command as before.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hpcgate::audit::{AuditLog, AuditOptions, Entry, Event, Filter, Record, Scope, verify};
use hpcgate::policy::DecisionKind;
use hpcgate::policy::cases::parse_cases;
use hpcgate::policy::normalize::normalize_call;

use crate::support::audit::{chain_of, hpcgate};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `tests/cases/stock.toml` with a generous deadline, so that a loaded machine cannot turn a
/// slow evaluation into a fault-deny on one side of the replay only.
fn stock_config(dir: &Path) -> PathBuf {
    let stock = std::fs::read_to_string(repo().join("tests/cases/stock.toml")).unwrap();
    let path = dir.join("stock.toml");
    std::fs::write(
        &path,
        format!("[policy_engine]\ndeadline_ms = 10000\n\n{stock}"),
    )
    .unwrap();
    path
}

/// Judges every call of the stock acceptance cases plus a `write_file` with content and a
/// secret, and audits each decision as the gateway will.
fn audit_stock_calls(dir: &Path) -> usize {
    let scratch = tempfile::tempdir().unwrap();
    let chain = chain_of(&stock_config(scratch.path()));
    let text = std::fs::read_to_string(repo().join("tests/cases/stock.jsonl")).unwrap();
    let (cases, _) = parse_cases(&text).unwrap();
    let extra = r#"{"call": {"phase": "call", "tenant": "chem", "principal": "alice", "tool": "write_file", "server": "builtin", "remote_tool": null, "instance": "run1", "arguments": {"instance_id": "run1", "path": "notes.txt", "content": "private notes", "env": {"API_TOKEN": "s3cret"}}, "read_only": false, "usage": {}}, "expect": {"decision": "allow"}}"#;
    let (more, _) = parse_cases(extra).unwrap();
    let log = AuditLog::open(dir, AuditOptions::default()).unwrap();
    log.append(Entry::new(Event::GatewayStarted)).unwrap();
    let mut kinds = Vec::new();
    for case in cases.iter().chain(&more) {
        let mut call = case.call.clone();
        normalize_call(&mut call);
        let outcome = chain.evaluate(&call);
        assert!(
            outcome.policies.iter().all(|p| p.fault.is_none()),
            "{outcome:?}"
        );
        kinds.push(outcome.decision.decision);
        log.append(Entry::call(&call, &outcome)).unwrap();
    }
    log.append(Entry::new(Event::GatewayStopped)).unwrap();
    for kind in [
        DecisionKind::Allow,
        DecisionKind::Deny,
        DecisionKind::Rewrite,
    ] {
        assert!(kinds.contains(&kind), "the cases cover {kind:?}");
    }
    cases.len() + more.len()
}

#[test]
fn an_audit_file_replays_as_a_policy_test_input() {
    let dir = tempfile::tempdir().unwrap();
    let calls = audit_stock_calls(dir.path());
    let file = dir.path().join("audit-000001.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("private notes") && !text.contains("s3cret"));
    let (cases, skipped) = parse_cases(&text).unwrap();
    assert_eq!((cases.len(), skipped), (calls, 2));

    let config = stock_config(dir.path());
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        config.to_str().unwrap(),
        "--calls",
        file.to_str().unwrap(),
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["total"], calls, "{report:#}");
    assert_eq!(report["mismatched"], 0, "{report:#}");
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn verify_checkpoint_tail_and_query_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let calls = audit_stock_calls(dir.path());
    let d = dir.path().to_str().unwrap();

    let output = hpcgate(&["audit", "checkpoint", "--dir", d]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let checkpoint: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(checkpoint["seq"], calls + 2);
    let cp_file = dir.path().join("checkpoint.json");
    std::fs::write(&cp_file, &output.stdout).unwrap();
    let cp = cp_file.to_str().unwrap();

    let output = hpcgate(&["audit", "verify", "--dir", d, "--checkpoint", cp]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        stdout(&output).starts_with("intact: "),
        "{}",
        stdout(&output)
    );

    let output = hpcgate(&["audit", "tail", "--dir", d, "-n", "2", "--json"]);
    let seqs: Vec<u64> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str::<Record>(l).unwrap().seq)
        .collect();
    assert_eq!(seqs, [calls as u64 + 2, calls as u64 + 1]);

    let output = hpcgate(&[
        "audit",
        "query",
        "--dir",
        d,
        "--tenant",
        "chem",
        "--decision",
        "deny",
        "--tool",
        "host_*",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert!(
        !text.is_empty() && text.lines().all(|l| l.contains(" call chem/")),
        "{text}"
    );
    assert!(
        text.contains("host_exec") && text.contains("deny by `tools`"),
        "{text}"
    );

    let missing = dir.path().join("nope");
    let output = hpcgate(&["audit", "verify", "--dir", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no audit directory at"));

    let output = hpcgate(&["audit", "query", "--dir", d, "--event", "nope"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown event `nope`"));

    // Cut the last two records: the chain alone still verifies, the checkpoint does not.
    let file = dir.path().join("audit-000001.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let keep: Vec<&str> = text.lines().collect();
    std::fs::write(&file, format!("{}\n", keep[..keep.len() - 2].join("\n"))).unwrap();
    assert_eq!(
        hpcgate(&["audit", "verify", "--dir", d]).status.code(),
        Some(0)
    );
    let output = hpcgate(&["audit", "verify", "--dir", d, "--checkpoint", cp, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["first_broken"]["problem"]["kind"], "truncated",
        "{report:#}"
    );
    assert_eq!(report["first_broken"]["seq"], calls + 1);
    let output = hpcgate(&["audit", "verify", "--dir", d, "--checkpoint", cp]);
    assert!(
        stdout(&output).contains("BROKEN at "),
        "{}",
        stdout(&output)
    );
    assert!(stdout(&output).contains("truncated"), "{}", stdout(&output));
}

#[test]
fn a_writer_killed_mid_append_leaves_a_log_that_opens_and_verifies() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
            .args(["audit", "bench", "--writers", "16", "--appends", "100000"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300 + 150 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        let audit = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .expect("the bench created its log")
            .unwrap()
            .path();
        let log = AuditLog::open(&audit, AuditOptions::default()).unwrap();
        let receipt = log.append(Entry::new(Event::GatewayStarted)).unwrap();
        drop(log);
        let report = verify(&audit, None).unwrap();
        assert!(report.intact, "round {round}: {report:#?}");
        assert_eq!(report.records, receipt.seq);
        assert!(receipt.seq > 1, "the killed writer had appended");
    }
}

/// `policy test --calls <audit dir>` streams every segment in order on every core: the
/// mismatches come out in input order with their line numbers counted across segments, and a
/// line that is not a case stops the run after the mismatches before it.
#[test]
fn an_audit_directory_replays_streamed_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    let scratch = tempfile::tempdir().unwrap();
    let config = stock_config(scratch.path());
    let chain = chain_of(&config);
    let text = std::fs::read_to_string(repo().join("tests/cases/stock.jsonl")).unwrap();
    let (cases, _) = parse_cases(&text).unwrap();
    let log = AuditLog::open(
        &audit,
        AuditOptions {
            max_file_bytes: 50_000,
            ..AuditOptions::default()
        },
    )
    .unwrap();
    let mut decisions = Vec::new();
    for round in 0..15 {
        log.append(Entry::new(Event::JobState).detail("round", round))
            .unwrap();
        for case in &cases {
            let mut call = case.call.clone();
            normalize_call(&mut call);
            let outcome = chain.evaluate(&call);
            decisions.push(outcome.decision.decision);
            log.append(Entry::call(&call, &outcome)).unwrap();
        }
    }
    drop(log);
    let segments: Vec<PathBuf> = (1..)
        .map(|n| audit.join(format!("audit-{n:06}.jsonl")))
        .take_while(|p| p.exists())
        .collect();
    assert!(segments.len() >= 3, "the log rotated: {segments:?}");
    // Flip recorded allows to deny on a few lines (global numbers), in two segments.
    let mut flipped = Vec::new();
    let mut line_base = 0;
    for (i, segment) in segments.iter().enumerate() {
        let mut lines: Vec<String> = std::fs::read_to_string(segment)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        if i == 1 || i == segments.len() - 1 {
            // Two in each of the two segments.
            let upto = if i == 1 { 2 } else { 4 };
            for (n, line) in lines.iter_mut().enumerate() {
                let allow = r#""decision":{"decision":"allow"}"#;
                if line.contains(allow) && flipped.len() < upto {
                    *line = line.replacen(allow, r#""decision":{"decision":"deny"}"#, 1);
                    flipped.push(line_base + n + 1);
                }
            }
        }
        line_base += lines.len();
        std::fs::write(segment, lines.join("\n") + "\n").unwrap();
    }
    assert_eq!(flipped.len(), 4, "{flipped:?}");
    let run = || {
        hpcgate(&[
            "policy",
            "test",
            "--config",
            config.to_str().unwrap(),
            "--calls",
            audit.to_str().unwrap(),
            "--json",
        ])
    };
    let output = run();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["total"], decisions.len(), "{report:#}");
    assert_eq!(report["mismatched"], 4);
    // The decisions were changed in place: the report says the log does not verify, where.
    assert_eq!(report["log"]["intact"], false, "{report:#}");
    let problem = report["log"]["problem"].as_str().unwrap();
    assert!(
        problem.contains("audit-000002.jsonl") && problem.contains("edited: the record says hash"),
        "{problem}"
    );
    let warning = String::from_utf8_lossy(&output.stderr);
    assert!(warning.contains("does not verify"), "{warning}");
    let lines: Vec<usize> = report["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["line"].as_u64().unwrap() as usize)
        .collect();
    assert_eq!(lines, flipped, "in input order");
    // A garbage line in the last segment: the mismatches before it, then its error.
    let last = segments.last().unwrap();
    let mut text = std::fs::read_to_string(last).unwrap();
    text.push_str("{not json\n");
    std::fs::write(last, text).unwrap();
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        config.to_str().unwrap(),
        "--calls",
        audit.to_str().unwrap(),
    ]);
    assert_ne!(output.status.code(), Some(0));
    let reported = stdout(&output).matches("MISMATCH").count();
    assert_eq!(reported, 4, "{}", stdout(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("line {}", line_base + 1)) && stderr.contains("not JSON"),
        "{stderr}"
    );
}

/// `hpcgate audit compress` compresses the closed segments, and `tail`, `query` (skipping and
/// filtering by time), `verify` and `policy test --calls` answer exactly as before; the
/// compressed log still prunes and verifies.
#[test]
fn a_compressed_log_answers_every_command_as_before_and_still_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    let scratch = tempfile::tempdir().unwrap();
    let config = stock_config(scratch.path());
    let chain = chain_of(&config);
    let text = std::fs::read_to_string(repo().join("tests/cases/stock.jsonl")).unwrap();
    let (cases, _) = parse_cases(&text).unwrap();
    let log = AuditLog::open(
        &audit,
        AuditOptions {
            max_file_bytes: 33_000,
            ..AuditOptions::default()
        },
    )
    .unwrap();
    for round in 0..10 {
        log.append(Entry::new(Event::JobState).detail("round", round))
            .unwrap();
        for case in &cases {
            let mut call = case.call.clone();
            normalize_call(&mut call);
            log.append(Entry::call(&call, &chain.evaluate(&call)))
                .unwrap();
        }
    }
    drop(log);
    let all: Vec<Record> = hpcgate::audit::records(&audit, Scope::AllTenants, Filter::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let middle = all[all.len() / 2].ts.to_string();
    let (a, c) = (audit.to_str().unwrap(), config.to_str().unwrap());
    let commands: Vec<Vec<&str>> = vec![
        vec!["audit", "tail", "-n", "25", "--json", "--dir", a],
        vec!["audit", "tail", "-n", "5", "--tenant", "chem", "--dir", a],
        vec!["audit", "query", "--since", &middle, "--json", "--dir", a],
        vec![
            "audit", "query", "--until", &middle, "--tool", "s*", "--dir", a,
        ],
        vec!["audit", "verify", "--json", "--dir", a],
        vec!["policy", "test", "--json", "--config", c, "--calls", a],
    ];
    let run_all = || -> Vec<(Option<i32>, String)> {
        commands
            .iter()
            .map(|args| {
                let output = hpcgate(args);
                (output.status.code(), stdout(&output))
            })
            .collect()
    };
    let before = run_all();
    for ((code, out), args) in before.iter().zip(&commands) {
        assert_eq!(*code, Some(0), "{args:?}: {out}");
        assert!(out.trim().len() > 20, "{args:?} printed nothing: {out}");
    }
    let compressed = |n: u64| audit.join(format!("audit-{n:06}.jsonl.zst"));
    let plain = |n: u64| audit.join(format!("audit-{n:06}.jsonl"));
    let output = hpcgate(&["audit", "compress", "--dir", a]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).starts_with("compressed "), "{output:?}");
    let segments = (1..)
        .take_while(|&n| plain(n).exists() || compressed(n).exists())
        .count() as u64;
    assert!(segments >= 5, "the log rotated: {segments}");
    for n in 1..segments {
        assert!(compressed(n).exists() && !plain(n).exists(), "segment {n}");
    }
    assert!(plain(segments).exists(), "the open segment stays plain");
    assert_eq!(
        run_all(),
        before,
        "the same answers from compressed segments"
    );
    let again = hpcgate(&["audit", "compress", "--dir", a]);
    assert!(
        stdout(&again).starts_with("nothing to compress"),
        "{again:?}"
    );
    let output = hpcgate(&["audit", "prune", "--before", &middle, "--dir", a]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).starts_with("removed "), "{output:?}");
    assert!(!compressed(1).exists() && !plain(1).exists());
    let report = verify(&audit, None).unwrap();
    assert!(report.intact, "{report:#?}");
}

/// `audit tail --follow` while a writer appends (space allocated ahead, rotating every few
/// records): the `-n` newest matching records oldest first, then every new matching record
/// once, in order, across rotations, and nothing of other tenants.
#[test]
fn tail_follow_prints_each_new_matching_record_once_across_rotations() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let options = AuditOptions {
        max_file_bytes: 2_000,
        preallocate_bytes: 64 * 1024,
        ..AuditOptions::default()
    };
    let log = AuditLog::open(dir.path(), options).unwrap();
    let append = |tenant: &str, n: usize| {
        let entry = Entry::new(Event::JobState)
            .who(tenant, "alice")
            .detail("n", n);
        log.append(entry).unwrap().seq
    };
    let mut chem = Vec::new();
    for n in 0..6 {
        let seq = append(if n % 2 == 0 { "chem" } else { "bio" }, n);
        if n % 2 == 0 {
            chem.push(seq);
        }
    }
    let audit_dir = dir.path().to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args([
            "audit", "tail", "-f", "-n", "2", "--json", "--tenant", "chem",
        ])
        .args(["--dir", audit_dir])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let record: Record = serde_json::from_str(&line.unwrap()).unwrap();
            if lines.send(record).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        seen.recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    let mut printed: Vec<u64> = (0..2).map(|_| next("the newest two").seq).collect();
    assert_eq!(
        printed,
        chem[chem.len() - 2..],
        "the newest two, oldest first"
    );
    for n in 6..40 {
        let seq = append(if n % 2 == 0 { "chem" } else { "bio" }, n);
        if n % 2 == 0 {
            chem.push(seq);
        }
    }
    while printed.len() < chem.len() - 1 {
        let record = next("a new record");
        assert_eq!(record.entry.tenant.as_deref(), Some("chem"), "{record:?}");
        printed.push(record.seq);
    }
    assert_eq!(printed, chem[1..], "each once, in order");
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".jsonl")
        })
        .count();
    assert!(segments >= 3, "the records crossed rotations: {segments}");
    std::thread::sleep(Duration::from_millis(600));
    assert!(seen.try_recv().is_err(), "nothing more");
    child.kill().unwrap();
    child.wait().unwrap();

    let refused = hpcgate(&["audit", "tail", "-f", "--until", "1h", "--dir", audit_dir]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("leave out `--until`"), "{said}");
}

/// What a caller sends can hold line breaks, terminal escapes and bidirectional overrides (a
/// tool name is recorded as the client sent it): the human view of `tail` and `query` prints
/// each record on one line and such fields escaped, so no caller can forge a line the admin
/// reads as another record, or rewrite their terminal. The JSON view keeps the text as it was.
#[test]
fn a_callers_text_cannot_forge_lines_in_the_human_audit_view() {
    use crate::support::gateway as in_process;
    let dir = tempfile::tempdir().unwrap();
    let forged = "stat_path\n    41 2026-11-27T06:00:00.000000Z tool.called chem/token:alice \
                  delete_path [chem-private] allow\x1b[2K\u{202e}";
    {
        let gw = in_process::open(dir.path(), "policies = []\n");
        let refused = gw.call(
            &in_process::caller("default"),
            forged,
            in_process::args(serde_json::json!({})),
        );
        assert!(refused.is_error);
    }
    let audit = dir.path().join("state/audit");
    let dir_arg = audit.to_str().unwrap();
    let json = stdout(&hpcgate(&[
        "audit", "tail", "-n", "50", "--dir", dir_arg, "--json",
    ]));
    let records: Vec<Record> = (json.lines())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let refused = (records.iter())
        .find(|r| r.entry.tool.as_deref() == Some(forged))
        .expect("the refused call is recorded with the name it was sent");
    for command in [&["tail", "-n", "50"][..], &["query"]] {
        let output = hpcgate(&[&["audit"][..], command, &["--dir", dir_arg]].concat());
        let (human, command) = (stdout(&output), command[0]);
        assert_eq!(human.lines().count(), records.len(), "{command}:\n{human}");
        assert!(!human.contains(['\x1b', '\u{202e}']), "{command}:\n{human}");
        let line = (human.lines())
            .find(|line| line.starts_with(&format!("{:>6} ", refused.seq)))
            .unwrap();
        assert!(
            line.contains(r#" "stat_path\n    41 2026"#) && line.contains(r"\u{1b}[2K\u{202e}"),
            "{command}: {line}"
        );
    }
}
