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
use compare::compare;
use hpcgate_audit::redacted::RedactionKey;
use hpcgate_policy_sdk::Call;
use hpcgate_policy_sdk::outcome::{DecisionKind, FinalDecision};

mod compare;

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
