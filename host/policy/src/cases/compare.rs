//! How a replayed decision compares with the one expected: the decision, its policy, its
//! reason, and a rewrite's arguments, where the audit log kept redacted values as digests.

use hpcgate_audit::redacted::{Recorded, RedactionKey};
use hpcgate_policy_sdk::outcome::{DecisionKind, FinalDecision};
use serde_json::{Map, Value};

use super::Expect;

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

pub(super) fn compare(
    expect: &Expect,
    actual: &FinalDecision,
    key: Option<&RedactionKey>,
) -> Option<String> {
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
