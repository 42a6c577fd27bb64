//! Bounded records: what a caller sends can make a record no larger than [`MAX_RECORD_BYTES`]
//! (with a chain of up to 64 policies).
//!
//! A call's arguments, a tool name that is not a tool, an error that quotes what was sent: each
//! is the caller's to size, up to the transport's request limit (4 MiB over HTTP, more on a
//! job's door). Written whole, a refused call would cost the shared audit disk many times its
//! own bytes with one `fdatasync`, whatever the caller's rate limit (refusals are recorded
//! before the limit is counted). A record whose encoding passes the bound is cut down before it
//! is written: in argument objects over [`MAX_ARGUMENTS_BYTES`], values over [`MAX_TEXT_BYTES`]
//! become their digest, in the redaction's form (`{"redacted": true, "hmac_sha256", "key",
//! "bytes"}`, so a replay treats them as redacted; the whole object if that is not enough), and texts over
//! [`MAX_TEXT_BYTES`] keep their start and say how much was cut. A record still too large is
//! cut again, harder, from what it was (see [`LAST`]).
//! Records within the bound, every ordinary one, are written as they are.

use crate::redacted::RedactionKey;
use serde_json::{Map, Value};

use super::canonical::encode_body;
use super::record::Entry;
use super::redact::{redact, redact_whole};

/// The largest record body written as it is.
pub const MAX_RECORD_BYTES: usize = 64 << 10;
/// The largest argument object kept whole in a record that was too large.
pub const MAX_ARGUMENTS_BYTES: usize = 4 << 10;
/// The longest text (a name, a reason, an error) kept whole in a record that was too large.
pub const MAX_TEXT_BYTES: usize = 1 << 10;
/// How many of a policy's log lines a record that was too large keeps.
const MAX_LOG_LINES: usize = 8;

/// How much of each part a caller can size a cut-down record keeps.
struct Cut {
    /// Bytes of a text, as encoded.
    text: usize,
    /// Lines of each policy's log.
    log_lines: usize,
    /// Bytes of an argument object (or of `detail`), as encoded, beyond which its values over
    /// `text` bytes become their digest, then, if that is not enough, the whole object.
    object: usize,
}

/// The first cut, of a record over the bound.
const FIRST: Cut = Cut {
    text: MAX_TEXT_BYTES,
    log_lines: MAX_LOG_LINES,
    object: MAX_ARGUMENTS_BYTES,
};

/// The last cut, of the record as it came if the first was not enough (a long chain whose
/// every policy quotes the call in its reason and logs): short texts, no log lines, small
/// objects, and each rewriting policy's arguments as one digest.
const LAST: Cut = Cut {
    text: 128,
    log_lines: 0,
    object: 1 << 10,
};

/// `entry`'s body, cut down first if its encoding passes [`MAX_RECORD_BYTES`] (see
/// [`FIRST`] and [`LAST`]; each cut starts from the record as it came, so what a text says
/// was cut is what the caller sent). What is left beyond the caller's reach is the chain's own
/// (a policy's name, module and time, some 200 bytes each), so with up to 64 policies the
/// record stays within the bound.
pub(crate) fn bounded_body(entry: &mut Entry, key: &RedactionKey) -> Vec<u8> {
    let body = encode_body(entry);
    if body.len() <= MAX_RECORD_BYTES {
        return body;
    }
    let whole = entry.clone();
    cut_down(entry, &FIRST, key);
    let body = encode_body(entry);
    if body.len() <= MAX_RECORD_BYTES {
        return body;
    }
    *entry = whole;
    cut_down(entry, &LAST, key);
    for arguments in entry
        .policies
        .iter_mut()
        .filter_map(|p| p.arguments.as_mut())
    {
        redact_whole(arguments, key);
    }
    encode_body(entry)
}

/// Cuts every part of `entry` a caller can size as `cut` says.
fn cut_down(entry: &mut Entry, cut: &Cut, key: &RedactionKey) {
    let clip = |s: &mut String| clip(s, cut.text);
    let clip_some = |s: &mut Option<String>| {
        if let Some(s) = s {
            clip(s);
        }
    };
    let digest_if_large = |arguments: &mut Map<String, Value>| digest_if_large(arguments, cut, key);
    for text in [
        &mut entry.tenant,
        &mut entry.principal,
        &mut entry.instance,
        &mut entry.tool,
    ] {
        clip_some(text);
    }
    if let Some(call) = &mut entry.call {
        for text in [
            &mut call.tenant,
            &mut call.principal,
            &mut call.tool,
            &mut call.server,
        ] {
            clip(text);
        }
        for text in [&mut call.instance, &mut call.job, &mut call.remote_tool] {
            clip_some(text);
        }
        digest_if_large(&mut call.arguments);
    }
    if let Some(decision) = &mut entry.decision {
        clip_some(&mut decision.policy);
        clip_some(&mut decision.reason);
        if let Some(arguments) = &mut decision.arguments {
            digest_if_large(arguments);
        }
    }
    for policy in &mut entry.policies {
        for text in [&mut policy.reason, &mut policy.note, &mut policy.fault] {
            clip_some(text);
        }
        if let Some(arguments) = &mut policy.arguments {
            digest_if_large(arguments);
        }
        policy.logs.truncate(cut.log_lines);
        policy.logs.iter_mut().for_each(clip);
    }
    if let Some(outcome) = &mut entry.outcome {
        for text in [&mut outcome.error, &mut outcome.job_id, &mut outcome.state] {
            clip_some(text);
        }
    }
    if let Some(detail) = &mut entry.detail {
        // As arguments are: the small facts (`decision_seq`, a job's id) stay.
        digest_if_large(detail);
    }
}

/// Cuts an argument object larger than `cut.object`: each of its values larger than
/// `cut.text` becomes its digest, so that a replay still sees the small ones a policy judges
/// (a `path`, a job's `resources`) beside the digest of a script or a file; the whole object
/// becomes its digest only if that was not enough (many keys, or long ones).
fn digest_if_large(arguments: &mut Map<String, Value>, cut: &Cut, key: &RedactionKey) {
    let size = |value: &Map<String, Value>| serde_json::to_vec(value).map_or(0, |b| b.len());
    if size(arguments) <= cut.object {
        return;
    }
    for value in arguments.values_mut() {
        if serde_json::to_vec(value).is_ok_and(|b| b.len() > cut.text) {
            redact(value, key);
        }
    }
    if size(arguments) > cut.object {
        redact_whole(arguments, key);
    }
}

/// Keeps the start of `text` that encodes (as a JSON string's content) in at most `limit`
/// bytes, at a character boundary, and says how many bytes were cut. Measured as encoded, not
/// as text: a control character is 1 byte of text and 6 of JSON (`\u0001`).
fn clip(text: &mut String, limit: usize) {
    let mut width = 0;
    let end = text.char_indices().find_map(|(at, c)| {
        width += json_width(c);
        (width > limit).then_some(at)
    });
    let Some(end) = end else {
        return;
    };
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({cut} bytes cut)"));
}

/// How many bytes `c` takes inside a JSON string as serde_json writes it.
fn json_width(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if c < ' ' => 6,
        c => c.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Event, Outcome};
    use hpcgate_policy_sdk::Call;
    use serde_json::json;

    /// A refused call as the gateway records it, with `arguments` and a tool name it was sent.
    fn refused(tool: &str, arguments: Value) -> Entry {
        let mut call = Call::new(tool, arguments);
        call.tenant = "chem".to_owned();
        let mut entry = Entry::new(Event::Call).tool(tool);
        entry.call = Some(call);
        entry.outcome(Outcome {
            error: Some(format!("unknown tool `{tool}`")),
            ..Outcome::default()
        })
    }

    #[test]
    fn an_ordinary_record_is_written_as_it_is() {
        let mut entry = refused("stat_path", json!({"path": "a".repeat(2000)}));
        let whole = encode_body(&entry);
        assert_eq!(
            bounded_body(&mut entry, &RedactionKey::from_bytes([1; 32])),
            whole
        );
    }

    #[test]
    fn what_a_caller_sizes_cannot_make_a_record_large() {
        let huge = "x".repeat(4 << 20);
        let mut entry = refused(&huge, json!({"path": huge, "pad": vec![0; 100_000]}));
        let body = bounded_body(&mut entry, &RedactionKey::from_bytes([1; 32]));
        assert!(body.len() < 16 << 10, "{} bytes", body.len());
        let record: Value = serde_json::from_slice(&body).unwrap();
        let arguments = &record["call"]["arguments"];
        assert_eq!(arguments["path"]["redacted"], true, "{arguments}");
        assert_eq!(arguments["path"]["bytes"], 4 << 20, "{arguments}");
        assert_eq!(arguments["pad"]["redacted"], true, "{arguments}");
        let tool = record["tool"].as_str().unwrap();
        assert!(
            tool.starts_with("xxx")
                && tool.ends_with(&format!("({} bytes cut)", (4 << 20) - MAX_TEXT_BYTES))
        );
        assert!(
            record["outcome"]["error"]
                .as_str()
                .unwrap()
                .ends_with("bytes cut)")
        );
        // Many small keys: the whole object becomes its digest.
        let keys: Map<String, Value> = (0..20_000).map(|i| (format!("k{i}"), json!(i))).collect();
        let mut entry = refused("stat_path", Value::Object(keys));
        let body = bounded_body(&mut entry, &RedactionKey::from_bytes([1; 32]));
        assert!(body.len() < 16 << 10, "{} bytes", body.len());
        let record: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(record["call"]["arguments"]["redacted"], true);
    }

    /// A large script is cut to its digest; what a policy judges beside it stays, so a replay
    /// of the record decides as the live call did.
    #[test]
    fn the_small_arguments_of_a_large_call_are_kept() {
        let code = "print(1)\n".repeat(10_000);
        let arguments = json!({"instance_id": "run1", "code": code, "resources": {"cpus": 64}});
        let mut entry = refused("run_python", arguments);
        let body = bounded_body(&mut entry, &RedactionKey::from_bytes([1; 32]));
        let record: Value = serde_json::from_slice(&body).unwrap();
        let arguments = &record["call"]["arguments"];
        assert_eq!(arguments["resources"], json!({"cpus": 64}), "{arguments}");
        assert_eq!(arguments["instance_id"], "run1");
        assert_eq!(arguments["code"]["bytes"], 90_000);
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let mut text = "é".repeat(MAX_TEXT_BYTES);
        clip(&mut text, MAX_TEXT_BYTES);
        let kept = text.split('…').next().unwrap();
        assert_eq!(kept.len(), MAX_TEXT_BYTES);
        let mut odd = format!("x{}", "é".repeat(MAX_TEXT_BYTES));
        clip(&mut odd, MAX_TEXT_BYTES);
        assert_eq!(odd.split('…').next().unwrap().len(), MAX_TEXT_BYTES - 1);
    }

    #[test]
    fn text_is_cut_to_its_width_as_json() {
        for c in ['\u{1}', '"', '\n', 'é', 'x', '\u{10348}'] {
            let mut text = c.to_string().repeat(4 * MAX_TEXT_BYTES);
            clip(&mut text, MAX_TEXT_BYTES);
            let kept = text.split('…').next().unwrap();
            let encoded = serde_json::to_string(kept).unwrap().len() - 2;
            assert!(
                encoded <= MAX_TEXT_BYTES && encoded + 6 > MAX_TEXT_BYTES,
                "{c:?}: {encoded} bytes as JSON"
            );
        }
    }

    /// Control characters take six bytes each as JSON: cut by their length as text, a call
    /// whose tool name and instance are 64 KiB of them, judged by a chain of policies that each
    /// quote it in their reason and log lines, made a record of hundreds of KiB. With 64 such
    /// policies, each rewriting the arguments into many small ones, it stays in the bound.
    #[test]
    fn text_that_grows_when_encoded_cannot_make_a_record_large() {
        use crate::record::PolicyRecord;
        use hpcgate_policy_sdk::outcome::DecisionKind;
        let control = "\u{1}".repeat(64 << 10);
        // Just under the first cut's bound for objects, in values it keeps.
        let small: Map<String, Value> = (0..4)
            .map(|i| (format!("v{i}"), json!("\u{1}".repeat(150))))
            .collect();
        let mut arguments = small.clone();
        arguments.insert("instance_id".to_owned(), json!(control));
        let mut entry = refused(&control, Value::Object(arguments));
        entry.instance = Some(control.clone());
        entry.decision = Some(hpcgate_policy_sdk::outcome::FinalDecision {
            decision: DecisionKind::Deny,
            policy: Some(control.clone()),
            reason: Some(control.clone()),
            arguments: Some(small.clone()),
        });
        entry.detail = Some(small.clone());
        let rewritten: Map<String, Value> = (0..300).map(|i| (format!("k{i}"), json!(i))).collect();
        entry.policies = (0..64)
            .map(|i| PolicyRecord {
                policy: format!("p{i}"),
                module: format!("sha256:{}", "0".repeat(64)),
                decision: DecisionKind::Deny,
                reason: Some(control.clone()),
                arguments: Some(rewritten.clone()),
                note: Some(control.clone()),
                enforced: true,
                fault: Some(control.clone()),
                duration_us: 1.0,
                logs: vec![control.clone(); 10],
            })
            .collect();
        let body = bounded_body(&mut entry, &RedactionKey::from_bytes([1; 32]));
        // 12 KiB to spare (190 bytes a policy) for what the chain itself adds: longer policy
        // names and module paths than these.
        assert!(
            body.len() <= MAX_RECORD_BYTES - (12 << 10),
            "{} bytes",
            body.len()
        );
        let record: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(record["policies"].as_array().unwrap().len(), 64);
        // Cut from what was sent: 21 characters of 6 bytes each kept.
        let cut = format!("({} bytes cut)", (64 << 10) - 21);
        for text in [
            &record["tool"],
            &record["call"]["tool"],
            &record["instance"],
        ] {
            assert!(text.as_str().unwrap().ends_with(&cut), "{text}");
        }
        // Values the first cut kept are digests now; the keys stay, for a replay.
        for arguments in [
            &record["call"]["arguments"],
            &record["decision"]["arguments"],
        ] {
            assert_eq!(arguments["v0"]["redacted"], true, "{arguments}");
        }
        assert_eq!(record["detail"]["v0"]["redacted"], true);
    }
}
