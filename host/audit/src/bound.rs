//! Bounded records: what a caller sends can make a record no larger than [`MAX_RECORD_BYTES`].
//!
//! A call's arguments, a tool name that is not a tool, an error that quotes what was sent: each
//! is the caller's to size, up to the transport's request limit (4 MiB over HTTP, more on a
//! job's door). Written whole, a refused call would cost the shared audit disk many times its
//! own bytes with one `fdatasync`, whatever the caller's rate limit (refusals are recorded
//! before the limit is counted). A record whose encoding passes the bound is cut down before it
//! is written: in argument objects over [`MAX_ARGUMENTS_BYTES`], values over [`MAX_TEXT_BYTES`]
//! become their digest, in the redaction's form (`{"redacted": true, "sha256", "bytes"}`, so a
//! replay treats them as redacted; the whole object if that is not enough), and texts over
//! [`MAX_TEXT_BYTES`] keep their start and say how much was cut.
//! Records within the bound, every ordinary one, are written as they are.

use serde_json::{Map, Value, json};

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

/// `entry`'s body, cut down first if its encoding passes [`MAX_RECORD_BYTES`].
pub(crate) fn bounded_body(entry: &mut Entry) -> Vec<u8> {
    let body = encode_body(entry);
    if body.len() <= MAX_RECORD_BYTES {
        return body;
    }
    cut_down(entry);
    encode_body(entry)
}

/// Cuts every part of `entry` a caller can size.
fn cut_down(entry: &mut Entry) {
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
        policy.logs.truncate(MAX_LOG_LINES);
        policy.logs.iter_mut().for_each(clip);
    }
    if let Some(outcome) = &mut entry.outcome {
        for text in [&mut outcome.error, &mut outcome.job_id, &mut outcome.state] {
            clip_some(text);
        }
    }
    if let Some(detail) = &mut entry.detail {
        let bytes = serde_json::to_vec(detail).map_or(0, |b| b.len());
        if bytes > MAX_ARGUMENTS_BYTES {
            *detail = Map::from_iter([("cut".to_owned(), json!({ "bytes": bytes }))]);
        }
    }
}

/// Cuts an argument object larger than [`MAX_ARGUMENTS_BYTES`]: each of its values larger
/// than [`MAX_TEXT_BYTES`] becomes its digest, so that a replay still sees the small ones a
/// policy judges (a `path`, a job's `resources`) beside the digest of a script or a file; the
/// whole object becomes its digest only if that was not enough (many keys, or long ones).
fn digest_if_large(arguments: &mut Map<String, Value>) {
    let size = |value: &Map<String, Value>| serde_json::to_vec(value).map_or(0, |b| b.len());
    if size(arguments) <= MAX_ARGUMENTS_BYTES {
        return;
    }
    for value in arguments.values_mut() {
        if serde_json::to_vec(value).is_ok_and(|b| b.len() > MAX_TEXT_BYTES) {
            redact(value);
        }
    }
    if size(arguments) > MAX_ARGUMENTS_BYTES {
        redact_whole(arguments);
    }
}

fn clip_some(text: &mut Option<String>) {
    if let Some(text) = text {
        clip(text);
    }
}

/// Keeps the first [`MAX_TEXT_BYTES`] of `text` (at a character boundary) and says how many
/// bytes were cut.
fn clip(text: &mut String) {
    if text.len() <= MAX_TEXT_BYTES {
        return;
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({cut} bytes cut)"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Event, Outcome};
    use hpcgate_policy_sdk::Call;

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
        assert_eq!(bounded_body(&mut entry), whole);
    }

    #[test]
    fn what_a_caller_sizes_cannot_make_a_record_large() {
        let huge = "x".repeat(4 << 20);
        let mut entry = refused(&huge, json!({"path": huge, "pad": vec![0; 100_000]}));
        let body = bounded_body(&mut entry);
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
        let body = bounded_body(&mut entry);
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
        let body = bounded_body(&mut entry);
        let record: Value = serde_json::from_slice(&body).unwrap();
        let arguments = &record["call"]["arguments"];
        assert_eq!(arguments["resources"], json!({"cpus": 64}), "{arguments}");
        assert_eq!(arguments["instance_id"], "run1");
        assert_eq!(arguments["code"]["bytes"], 90_000);
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let mut text = "é".repeat(MAX_TEXT_BYTES);
        clip(&mut text);
        let kept = text.split('…').next().unwrap();
        assert_eq!(kept.len(), MAX_TEXT_BYTES);
        let mut odd = format!("x{}", "é".repeat(MAX_TEXT_BYTES));
        clip(&mut odd);
        assert_eq!(odd.split('…').next().unwrap().len(), MAX_TEXT_BYTES - 1);
    }
}
