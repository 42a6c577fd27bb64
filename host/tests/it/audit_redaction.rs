//! Redacted values are keyed digests (`redaction.key` beside the log): `hpcgate policy test`
//! compares a replayed rewrite with them using the log's key — read from the audit directory
//! it replays (or beside the segment), or given with `--redaction-key` — and without the key
//! says which one it needs instead of calling the policy wrong. A key file others can read is
//! refused. `audit digest` gives an auditor with the key a file's content as it was recorded.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use hpcgate::audit::{AuditLog, AuditOptions, Entry, Event, REDACTION_KEY_FILE};
use hpcgate::policy::DecisionKind;

use crate::support::audit::hpcgate;
use hpcgate::policy::cases::parse_cases;
use hpcgate::policy::normalize::normalize_call;

/// A chain whose one policy puts a token into every job's environment: the rewrite's new
/// value is a secret the log records redacted, which only the key can compare.
fn injecting_config(dir: &Path) -> std::path::PathBuf {
    let rules = dir.join("inject.rego");
    std::fs::write(
        &rules,
        "package hpcgate\nimport rego.v1\n\
         rewrite := object.union(input.arguments, {\"env\": {\"API_TOKEN\": \"injected-secret\"}}) if {\n\
         \x20   input.tool == \"submit_job\"\n}\n",
    )
    .unwrap();
    let config = dir.join("policy.toml");
    std::fs::write(
        &config,
        format!(
            "[policy_engine]\ndeadline_ms = 10000\n\n[[policies]]\nname = \"inject\"\n\
             module = \"stock:rego\"\n[policies.config]\npolicy_file = {:?}\n",
            rules.display().to_string()
        ),
    )
    .unwrap();
    config
}

fn report(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn policy_test_compares_keyed_digests_only_with_the_logs_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = injecting_config(dir.path());
    let chain = crate::support::audit::chain_of(&config);
    let audit = dir.path().join("audit");
    let log = AuditLog::open(&audit, AuditOptions::default()).unwrap();
    let job = r#"{"call": {"phase": "call", "tenant": "chem", "principal": "alice", "tool": "submit_job", "server": "builtin", "remote_tool": null, "instance": "run1", "arguments": {"instance_id": "run1", "command": "make", "mode": "local"}, "read_only": false, "usage": {}}, "expect": {"decision": "allow"}}"#;
    let (cases, _) = parse_cases(job).unwrap();
    let mut call = cases[0].call.clone();
    normalize_call(&mut call);
    let outcome = chain.evaluate(&call);
    assert_eq!(
        outcome.decision.decision,
        DecisionKind::Rewrite,
        "{outcome:?}"
    );
    log.append(Entry::call(&call, &outcome)).unwrap();
    log.append(Entry::new(Event::GatewayStopped)).unwrap();
    drop(log);
    let segment = audit.join("audit-000001.jsonl");
    let text = std::fs::read_to_string(&segment).unwrap();
    assert!(!text.contains("injected-secret"), "{text}");
    assert!(text.contains("\"hmac_sha256\""), "{text}");

    let test = |calls: &Path, key: Option<&Path>| {
        let (config, calls) = (config.to_str().unwrap(), calls.to_str().unwrap());
        let mut args = vec![
            "policy", "test", "--config", config, "--calls", calls, "--json",
        ];
        if let Some(key) = key {
            args.extend(["--redaction-key", key.to_str().unwrap()]);
        }
        hpcgate(&args)
    };
    // The audit directory, or a segment in it: the log's own key is read from there.
    for calls in [&audit, &segment] {
        let output = test(calls, None);
        assert_eq!(report(&output)["mismatched"], 0, "{}", report(&output));
        assert_eq!(output.status.code(), Some(0));
    }

    // A copy of the segment, as a policy author is handed it: the digest is not compared, and
    // the report says which key would compare it, not that the policy rewrote otherwise.
    let handed = dir.path().join("handed.jsonl");
    std::fs::copy(&segment, &handed).unwrap();
    let key_file = audit.join(REDACTION_KEY_FILE);
    let key = hpcgate::audit::load_redaction_key(&key_file).unwrap();
    let output = test(&handed, None);
    let without = report(&output);
    assert_eq!(without["mismatched"], 1, "{without}");
    let problem = without["mismatches"][0]["problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("redacted with key `{}`", key.id()))
            && problem.contains("--redaction-key"),
        "{problem}"
    );
    assert_eq!(output.status.code(), Some(1));

    // With the key, it is compared, and matches.
    let output = test(&handed, Some(&key_file));
    assert_eq!(report(&output)["mismatched"], 0, "{}", report(&output));
    assert_eq!(output.status.code(), Some(0));

    // Another log's key cannot compare it either.
    let other = tempfile::tempdir().unwrap();
    drop(AuditLog::open(other.path(), AuditOptions::default()).unwrap());
    let output = test(&handed, Some(&other.path().join(REDACTION_KEY_FILE)));
    let with_another = report(&output);
    let problem = with_another["mismatches"][0]["problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("redacted with key `{}`", key.id())),
        "{with_another}"
    );

    // A cases file is not an audit segment: a key that happens to lie beside it is not read.
    let beside = dir.path().join("beside");
    std::fs::create_dir(&beside).unwrap();
    std::fs::copy(&segment, beside.join("calls.jsonl")).unwrap();
    std::fs::copy(&key_file, beside.join(REDACTION_KEY_FILE)).unwrap();
    let output = test(&beside.join("calls.jsonl"), None);
    assert_eq!(report(&output)["mismatched"], 1, "{}", report(&output));

    // A key file others can read is refused, saying so, and so is a missing one.
    let shared = dir.path().join("shared.key");
    std::fs::copy(&key_file, &shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (path, says) in [
        (shared, "readable by others"),
        (
            dir.path().join("absent.key"),
            "cannot read the redaction key",
        ),
    ] {
        let output = test(&handed, Some(&path));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(says),
            "{stderr}"
        );
    }
}

/// An auditor with the key finds which content a `write_file` wrote: `audit digest` prints a
/// file's content as the log recorded it redacted, equal to the record for that content only.
#[test]
fn audit_digest_prints_a_files_content_as_the_log_recorded_it() {
    use hpcgate::policy::{Call, ChainOutcome, FinalDecision};
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    let call: Call = serde_json::from_value(serde_json::json!({
        "phase": "call", "tenant": "chem", "principal": "alice", "tool": "write_file",
        "server": "builtin", "remote_tool": null, "instance": "run1",
        "arguments": {"instance_id": "run1", "path": "notes.txt", "content": "private notes\n"},
        "read_only": false, "usage": {}
    }))
    .unwrap();
    let allowed = ChainOutcome {
        decision: FinalDecision {
            decision: DecisionKind::Allow,
            policy: None,
            reason: None,
            arguments: None,
        },
        policies: Vec::new(),
    };
    // The same bytes sent base64-encoded (`encoding = "base64"`), as a binary file is.
    let mut encoded = call.clone();
    encoded
        .arguments
        .insert("content".into(), "cHJpdmF0ZSBub3Rlcwo=".into());
    encoded.arguments.insert("encoding".into(), "base64".into());
    let log = AuditLog::open(&audit, AuditOptions::default()).unwrap();
    log.append(Entry::call(&call, &allowed)).unwrap();
    log.append(Entry::call(&encoded, &allowed)).unwrap();
    drop(log);
    let text = std::fs::read_to_string(audit.join("audit-000001.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let recorded = &records[0]["call"]["arguments"]["content"];
    let recorded_base64 = &records[1]["call"]["arguments"]["content"];

    let (written, other) = (dir.path().join("notes.txt"), dir.path().join("other.txt"));
    std::fs::write(&written, "private notes\n").unwrap();
    std::fs::write(&other, "private notes").unwrap();
    let output = hpcgate(&[
        "audit",
        "digest",
        "--dir",
        audit.to_str().unwrap(),
        written.to_str().unwrap(),
        other.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(&lines[0], recorded);
    assert_ne!(lines[1]["hmac_sha256"], recorded["hmac_sha256"]);
    let output = hpcgate(&[
        "audit",
        "digest",
        "--dir",
        audit.to_str().unwrap(),
        "--base64",
        written.to_str().unwrap(),
    ]);
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(&line, recorded_base64);

    let elsewhere = tempfile::tempdir().unwrap();
    let output = hpcgate(&[
        "audit",
        "digest",
        "--dir",
        elsewhere.path().to_str().unwrap(),
        written.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("cannot read the log's redaction key"),
        "{stderr}"
    );
}
