//! Offline policy testing: recorded calls with expected decisions, and audit logs replayed
//! against a chain.
//!
//! A cases file has one JSON object per line: `{"name"?, "call", "expect"?}`. A line with
//! `expect` is checked against it; a line without one must be an audit decision record, which
//! carries the recorded `decision` beside the `call`; lines without a `call` (other audit
//! records) are skipped.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::chain::Chain;
use super::normalize::normalize_call;
use hpcgate_audit::redacted::{Recorded, RedactionKey};
use hpcgate_policy_sdk::Call;
use hpcgate_policy_sdk::outcome::{DecisionKind, FinalDecision};

/// What a case expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub decision: DecisionKind,
    /// The deciding policy (deny: the one that denied; rewrite: the last that rewrote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// For rewrite: the final arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_contains: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseLine {
    #[serde(default)]
    name: Option<String>,
    call: Call,
    expect: Expect,
}

/// An audit record, as far as replaying it needs.
#[derive(Debug, Deserialize)]
struct AuditRecordLine {
    #[serde(default)]
    call: Option<Call>,
    #[serde(default)]
    decision: Option<FinalDecision>,
}

#[derive(Debug, Deserialize)]
struct AuditLine {
    call: Call,
    decision: FinalDecision,
}

/// One runnable case.
#[derive(Debug, Clone)]
pub struct Case {
    /// `name`, or `line N` when the case has none.
    pub label: String,
    pub line: usize,
    pub call: Call,
    pub expect: Expect,
}

/// A line that could not be understood.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct CaseError {
    pub line: usize,
    pub message: String,
}

/// Parses a cases file or audit log. Returns the cases and how many lines were skipped.
pub fn parse_cases(text: &str) -> Result<(Vec<Case>, usize), CaseError> {
    let mut cases = Vec::new();
    let mut skipped = 0;
    for (index, raw) in text.lines().enumerate() {
        match parse_case(raw, index + 1)? {
            Parsed::Case(case) => cases.push(*case),
            Parsed::Skipped => skipped += 1,
            Parsed::Blank => {}
        }
    }
    Ok((cases, skipped))
}

/// What one line of a cases file or audit log holds.
#[derive(Debug)]
pub enum Parsed {
    Case(Box<Case>),
    /// An audit record without a `call`.
    Skipped,
    Blank,
}

/// Parses line number `line` of a cases file or audit log.
pub fn parse_case(raw: &str, line: usize) -> Result<Parsed, CaseError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(Parsed::Blank);
    }
    let err = |message: String| CaseError { line, message };
    if raw.starts_with(r#"{"seq":"#) {
        // An audit record (written by the gateway): read `call` and `decision` straight into
        // their types, skipping the rest, instead of building the whole line as a `Value`.
        let record: AuditRecordLine =
            serde_json::from_str(raw).map_err(|e| err(format!("invalid audit record: {e}")))?;
        let Some(call) = record.call else {
            return Ok(Parsed::Skipped);
        };
        let decision = record
            .decision
            .ok_or_else(|| err("an audit record with a `call` but no `decision`".into()))?;
        return Ok(Parsed::Case(Box::new(Case {
            label: format!("line {line}"),
            line,
            call,
            expect: Expect {
                decision: decision.decision,
                policy: decision.policy,
                arguments: decision.arguments,
                reason_contains: None,
            },
        })));
    }
    let value: Value = serde_json::from_str(raw).map_err(|e| err(format!("not JSON: {e}")))?;
    let Some(object) = value.as_object() else {
        return Err(err("not a JSON object; each line holds one case".into()));
    };
    if !object.contains_key("call") {
        return Ok(Parsed::Skipped);
    }
    let (name, call, expect) = if object.contains_key("expect") {
        let case: CaseLine =
            serde_json::from_value(value).map_err(|e| err(format!("invalid case: {e}")))?;
        (case.name, case.call, case.expect)
    } else if object.contains_key("decision") {
        let record: AuditLine = serde_json::from_value(value)
            .map_err(|e| err(format!("invalid audit decision record: {e}")))?;
        let expect = Expect {
            decision: record.decision.decision,
            policy: record.decision.policy,
            arguments: record.decision.arguments,
            reason_contains: None,
        };
        (None, record.call, expect)
    } else {
        return Err(err(
            "has a `call` but no `expect`; add `\"expect\": {\"decision\": \"allow\"}` or similar"
                .into(),
        ));
    };
    let label = name.unwrap_or_else(|| format!("line {line}"));
    Ok(Parsed::Case(Box::new(Case {
        label,
        line,
        call,
        expect,
    })))
}

/// A case whose decision differed from the expectation.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    pub name: String,
    pub line: usize,
    /// What differed, in one sentence.
    pub problem: String,
    pub expected: Expect,
    pub actual: FinalDecision,
}

/// Evaluates every case; returns the mismatches. `key` is the audit log's redaction key, to
/// compare a replayed rewrite with the keyed digests of the values it recorded redacted.
pub fn run_cases(chain: &Chain, cases: &[Case], key: Option<&RedactionKey>) -> Vec<Mismatch> {
    cases
        .iter()
        .filter_map(|case| run_case(chain, case, key))
        .collect()
}

/// Evaluates one case; its mismatch, if any.
pub fn run_case(chain: &Chain, case: &Case, key: Option<&RedactionKey>) -> Option<Mismatch> {
    let mut call = case.call.clone();
    normalize_call(&mut call);
    let actual = chain.evaluate(&call).decision;
    compare(&case.expect, &actual, key).map(|problem| Mismatch {
        name: case.label.clone(),
        line: case.line,
        problem,
        expected: case.expect.clone(),
        actual,
    })
}

/// How a replayed rewrite's arguments compare with those recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Likeness {
    Same,
    Differs,
    /// Nothing differs but values the log redacted with the key named here, which was not
    /// given: they cannot be compared.
    NeedsKey(String),
}

impl Likeness {
    /// Both parts together: any difference wins over a value that could not be compared.
    fn and(self, other: impl FnOnce() -> Likeness) -> Likeness {
        match self {
            Likeness::Differs => Likeness::Differs,
            Likeness::Same => other(),
            Likeness::NeedsKey(id) => match other() {
                Likeness::Differs => Likeness::Differs,
                _ => Likeness::NeedsKey(id),
            },
        }
    }
}

/// Whether `actual` (a replayed rewrite's arguments) is what `recorded` holds, where the audit
/// log kept a redacted value as its digest (see [`hpcgate_audit::redacted`]): the replayed
/// value matches it if its digest is the same. A keyed digest is checked only with its key.
fn same_as_recorded(
    recorded: &Map<String, Value>,
    actual: &Map<String, Value>,
    key: Option<&RedactionKey>,
) -> Likeness {
    if recorded == actual {
        return Likeness::Same;
    }
    if let Some(digest) = Recorded::parse(recorded) {
        return against_digest(digest, &Value::Object(actual.clone()), key);
    }
    if recorded.len() != actual.len() {
        return Likeness::Differs;
    }
    (recorded.iter()).fold(Likeness::Same, |likeness, (name, r)| {
        likeness.and(|| match actual.get(name) {
            Some(a) => same_value(r, a, key),
            None => Likeness::Differs,
        })
    })
}

fn same_value(recorded: &Value, actual: &Value, key: Option<&RedactionKey>) -> Likeness {
    match (recorded, actual) {
        (Value::Object(r), Value::Object(a)) => same_as_recorded(r, a, key),
        (Value::Object(r), a) => match Recorded::parse(r) {
            Some(digest) => against_digest(digest, a, key),
            None => Likeness::Differs,
        },
        (Value::Array(r), Value::Array(a)) if r.len() == a.len() => (r.iter().zip(a))
            .fold(Likeness::Same, |likeness, (r, a)| {
                likeness.and(|| same_value(r, a, key))
            }),
        (r, a) if r == a => Likeness::Same,
        _ => Likeness::Differs,
    }
}

fn against_digest(digest: Recorded<'_>, actual: &Value, key: Option<&RedactionKey>) -> Likeness {
    match (digest.matches(actual, key), digest) {
        (Some(true), _) => Likeness::Same,
        (None, Recorded::Keyed { key: id, .. }) => Likeness::NeedsKey(id.to_owned()),
        _ => Likeness::Differs,
    }
}

fn compare(expect: &Expect, actual: &FinalDecision, key: Option<&RedactionKey>) -> Option<String> {
    let show = |kind: DecisionKind, policy: Option<&String>| match policy {
        Some(p) => format!("{} by `{p}`", kind_name(kind)),
        None => kind_name(kind).to_owned(),
    };
    if expect.decision != actual.decision {
        let mut problem = format!(
            "expected {}, got {}",
            show(expect.decision, expect.policy.as_ref()),
            show(actual.decision, actual.policy.as_ref())
        );
        if let Some(reason) = &actual.reason {
            problem.push_str(&format!(": {reason}"));
        }
        return Some(problem);
    }
    if let Some(policy) = &expect.policy
        && actual.policy.as_ref() != Some(policy)
    {
        return Some(format!(
            "expected {}, got {} (another deciding policy)",
            show(expect.decision, Some(policy)),
            show(actual.decision, actual.policy.as_ref())
        ));
    }
    if let Some(arguments) = &expect.arguments {
        let likeness = match &actual.arguments {
            Some(a) => same_as_recorded(arguments, a, key),
            None => Likeness::Differs,
        };
        let why = match likeness {
            Likeness::Same => None,
            Likeness::Differs => Some("another rewrite".to_owned()),
            Likeness::NeedsKey(id) => Some(format!(
                "the rest is the same, but the record holds values redacted with key `{id}`, which were not compared: give `--redaction-key` the log's `redaction.key` (in its audit directory) whose id that is"
            )),
        };
        if let Some(why) = why {
            return Some(format!(
                "expected rewrite to {}, got {} ({why})",
                Value::Object(arguments.clone()),
                (actual.arguments.clone().map(Value::Object)).unwrap_or(Value::Null)
            ));
        }
    }
    if let Some(needle) = &expect.reason_contains {
        let reason = actual.reason.as_deref().unwrap_or("");
        if !reason.contains(needle.as_str()) {
            return Some(format!(
                "expected a reason containing {needle:?}, got {reason:?}"
            ));
        }
    }
    None
}

fn kind_name(kind: DecisionKind) -> &'static str {
    match kind {
        DecisionKind::Allow => "allow",
        DecisionKind::Deny => "deny",
        DecisionKind::Rewrite => "rewrite",
    }
}

/// Totals of [`run_stream`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamSummary {
    /// Cases evaluated.
    pub total: usize,
    /// Audit records without a `call`.
    pub skipped: usize,
    pub mismatched: usize,
}

/// Why [`run_stream`] stopped early.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("cannot read the calls: {0}")]
    Read(#[source] std::io::Error),
    #[error(transparent)]
    Case(#[from] CaseError),
}

/// Lines per unit of work handed to a worker.
const CHUNK_LINES: usize = 512;

/// Evaluates every case of a cases file or audit log as it is read, on `workers` threads, and
/// hands each mismatch to `report` in input order. Memory is bounded (a few chunks of lines per
/// worker), whatever the input's size: decisions are pure, so chunks are judged in any order
/// and a reorder buffer, which the reader never runs ahead of by more than a window, puts them
/// back in order. A line that is not a case stops the run with its error after the mismatches
/// of the lines before it were reported.
pub fn run_stream<R: std::io::BufRead + Send>(
    chain: &Chain,
    mut input: R,
    workers: usize,
    key: Option<&RedactionKey>,
    mut report: impl FnMut(Mismatch),
) -> Result<StreamSummary, StreamError> {
    use std::collections::BTreeMap;
    use std::sync::{Condvar, Mutex, PoisonError, mpsc};

    /// What a worker or the reader tells the collector.
    enum Message {
        Done(usize, Chunk),
        ReadFailed(usize, std::io::Error),
        End(usize),
    }
    #[derive(Default)]
    struct Chunk {
        total: usize,
        skipped: usize,
        mismatches: Vec<Mismatch>,
        error: Option<CaseError>,
    }
    /// Chunks the collector has emitted, and whether to stop reading.
    struct Window {
        emitted: usize,
        stop: bool,
    }

    let workers = workers.max(1);
    let window_chunks = workers * 4;
    let window = Mutex::new(Window {
        emitted: 0,
        stop: false,
    });
    let moved = Condvar::new();
    let (job_tx, job_rx) = mpsc::sync_channel::<(usize, usize, Vec<Vec<u8>>)>(workers * 2);
    let job_rx = Mutex::new(job_rx);
    let (result_tx, result_rx) = mpsc::channel::<Message>();
    let mut summary = StreamSummary::default();
    let mut failure: Option<StreamError> = None;
    std::thread::scope(|scope| {
        let reader_tx = result_tx.clone();
        let (window, moved) = (&window, &moved);
        scope.spawn(move || {
            let (mut number, mut line) = (0usize, 0usize);
            loop {
                {
                    let mut w = window.lock().unwrap_or_else(PoisonError::into_inner);
                    while number >= w.emitted + window_chunks && !w.stop {
                        w = moved.wait(w).unwrap_or_else(PoisonError::into_inner);
                    }
                    if w.stop {
                        break;
                    }
                }
                let start = line + 1;
                let mut lines = Vec::with_capacity(CHUNK_LINES);
                let mut failed = None;
                while lines.len() < CHUNK_LINES {
                    let mut buf = Vec::new();
                    match input.read_until(b'\n', &mut buf) {
                        Ok(0) => break,
                        Ok(_) => {
                            line += 1;
                            lines.push(buf);
                        }
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                let last = lines.len() < CHUNK_LINES || failed.is_some();
                if !lines.is_empty() {
                    if job_tx.send((number, start, lines)).is_err() {
                        break;
                    }
                    number += 1;
                }
                if let Some(e) = failed {
                    let _ = reader_tx.send(Message::ReadFailed(number, e));
                    number += 1;
                }
                if last {
                    break;
                }
            }
            drop(job_tx);
            let _ = reader_tx.send(Message::End(number));
        });
        for _ in 0..workers {
            let (job_rx, result_tx) = (&job_rx, result_tx.clone());
            scope.spawn(move || {
                loop {
                    let job = job_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok((number, start, lines)) = job else {
                        break;
                    };
                    if window.lock().unwrap_or_else(PoisonError::into_inner).stop {
                        // Keep draining so the reader is never stuck sending.
                        continue;
                    }
                    let mut chunk = Chunk::default();
                    for (i, raw) in lines.iter().enumerate() {
                        let line = start + i;
                        let parsed = std::str::from_utf8(raw)
                            .map_err(|_| CaseError {
                                line,
                                message: "not UTF-8 text".to_owned(),
                            })
                            .and_then(|text| parse_case(text, line));
                        match parsed {
                            Ok(Parsed::Case(case)) => {
                                chunk.total += 1;
                                chunk.mismatches.extend(run_case(chain, &case, key));
                            }
                            Ok(Parsed::Skipped) => chunk.skipped += 1,
                            Ok(Parsed::Blank) => {}
                            Err(e) => {
                                chunk.error = Some(e);
                                break;
                            }
                        }
                    }
                    let _ = result_tx.send(Message::Done(number, chunk));
                }
            });
        }
        drop(result_tx);
        let mut pending: BTreeMap<usize, Result<Chunk, std::io::Error>> = BTreeMap::new();
        let (mut next, mut end) = (0usize, None);
        while end != Some(next) && failure.is_none() {
            let Ok(message) = result_rx.recv() else {
                break;
            };
            match message {
                Message::Done(n, chunk) => {
                    pending.insert(n, Ok(chunk));
                }
                Message::ReadFailed(n, e) => {
                    pending.insert(n, Err(e));
                }
                Message::End(n) => end = Some(n),
            }
            while let Some(chunk) = pending.remove(&next) {
                next += 1;
                match chunk {
                    Ok(chunk) => {
                        summary.total += chunk.total;
                        summary.skipped += chunk.skipped;
                        summary.mismatched += chunk.mismatches.len();
                        chunk.mismatches.into_iter().for_each(&mut report);
                        if let Some(e) = chunk.error {
                            failure = Some(e.into());
                            break;
                        }
                    }
                    Err(e) => {
                        failure = Some(StreamError::Read(e));
                        break;
                    }
                }
            }
            let mut w = window.lock().unwrap_or_else(PoisonError::into_inner);
            w.emitted = next;
            w.stop = failure.is_some();
            drop(w);
            moved.notify_all();
        }
        // Unblock the reader whatever happened, then let the workers drain.
        window.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        moved.notify_all();
        drop(result_rx);
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    /// A value as the audit log redacts it (`None`: as logs before keyed digests did).
    fn redacted_form(value: &Value, key: Option<&RedactionKey>) -> Value {
        use sha2::{Digest, Sha256};
        let bytes = hpcgate_audit::redacted::bytes_of(value);
        match key {
            Some(key) => key.redact(value),
            None => json!({
                "redacted": true,
                "sha256": hex::encode(Sha256::digest(&bytes)),
                "bytes": bytes.len()
            }),
        }
    }

    #[test]
    fn a_replayed_rewrite_matches_its_redacted_record() {
        let key = RedactionKey::from_bytes([5; 32]);
        for key in [None, Some(&key)] {
            let replayed =
                map(json!({"command": "make", "env": {"API_TOKEN": "s3cret", "n": [1, 2]}}));
            let mut recorded = replayed.clone();
            recorded["env"]["API_TOKEN"] = redacted_form(&json!("s3cret"), key);
            let same = |recorded: &Map<String, Value>, actual: &Map<String, Value>, key| {
                same_as_recorded(recorded, actual, key) == Likeness::Same
            };
            assert!(same(&recorded, &replayed, key));
            assert!(
                same(&recorded, &recorded.clone(), None),
                "passed through as recorded"
            );
            let mut other = replayed.clone();
            other["env"]["API_TOKEN"] = json!("other");
            assert!(!same(&recorded, &other, key), "another secret");
            other["env"]["API_TOKEN"] = json!("s3cret");
            other["env"]["n"] = json!([1]);
            assert!(!same(&recorded, &other, key), "a plain value differs");
            // Arguments kept whole as their digest (a record that was too large).
            let whole = map(redacted_form(&Value::Object(replayed.clone()), key));
            assert!(same(&whole, &replayed, key));
            assert!(!same(&whole, &other, key));
        }
    }

    /// A keyed digest is compared only with its own key; without it the mismatch says which
    /// key it needs, and the key itself is nowhere in the report.
    #[test]
    fn a_keyed_digest_needs_its_key_to_be_compared() {
        let key = RedactionKey::from_bytes([5; 32]);
        let other = RedactionKey::from_bytes([6; 32]);
        let replayed = map(json!({"env": {"API_TOKEN": "s3cret"}}));
        let mut recorded = replayed.clone();
        recorded["env"]["API_TOKEN"] = key.redact(&json!("s3cret"));
        let needs = Likeness::NeedsKey(key.id().to_owned());
        assert_eq!(
            same_as_recorded(&recorded, &replayed, Some(&key)),
            Likeness::Same
        );
        assert_eq!(same_as_recorded(&recorded, &replayed, None), needs);
        assert_eq!(same_as_recorded(&recorded, &replayed, Some(&other)), needs);
        // A plain difference beside it is a difference, whatever the key.
        let mut elsewhere = replayed.clone();
        elsewhere["env"]["n"] = json!(1);
        let mut recorded_too = recorded.clone();
        recorded_too["env"]["n"] = json!(2);
        assert_eq!(
            same_as_recorded(&recorded_too, &elsewhere, None),
            Likeness::Differs
        );
        let expect = Expect {
            decision: DecisionKind::Rewrite,
            policy: None,
            arguments: Some(recorded),
            reason_contains: None,
        };
        let actual = FinalDecision {
            decision: DecisionKind::Rewrite,
            policy: None,
            reason: None,
            arguments: Some(replayed),
        };
        assert_eq!(compare(&expect, &actual, Some(&key)), None);
        for wrong in [None, Some(&other)] {
            let problem = compare(&expect, &actual, wrong).expect("not comparable");
            assert!(
                problem.contains(&format!("redacted with key `{}`", key.id()))
                    && problem.contains("--redaction-key"),
                "{problem}"
            );
        }
    }
}
