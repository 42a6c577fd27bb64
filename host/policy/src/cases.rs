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
        let line = index + 1;
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let err = |message: String| CaseError { line, message };
        let value: Value = serde_json::from_str(raw).map_err(|e| err(format!("not JSON: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(err("not a JSON object; each line holds one case".into()));
        };
        if !object.contains_key("call") {
            skipped += 1;
            continue;
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
            return Err(err("has a `call` but no `expect`; add `\"expect\": {\"decision\": \"allow\"}` or similar".into()));
        };
        let label = name.unwrap_or_else(|| format!("line {line}"));
        cases.push(Case {
            label,
            line,
            call,
            expect,
        });
    }
    Ok((cases, skipped))
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

/// Evaluates every case; returns the mismatches.
pub fn run_cases(chain: &Chain, cases: &[Case]) -> Vec<Mismatch> {
    cases
        .iter()
        .filter_map(|case| {
            let mut call = case.call.clone();
            normalize_call(&mut call);
            let actual = chain.evaluate(&call).decision;
            compare(&case.expect, &actual).map(|problem| Mismatch {
                name: case.label.clone(),
                line: case.line,
                problem,
                expected: case.expect.clone(),
                actual,
            })
        })
        .collect()
}

fn compare(expect: &Expect, actual: &FinalDecision) -> Option<String> {
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
    if let Some(arguments) = &expect.arguments
        && actual.arguments.as_ref() != Some(arguments)
    {
        return Some(format!(
            "expected rewrite to {}, got {} (another rewrite)",
            Value::Object(arguments.clone()),
            actual
                .arguments
                .clone()
                .map(Value::Object)
                .unwrap_or(Value::Null)
        ));
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
