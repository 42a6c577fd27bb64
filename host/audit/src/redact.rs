//! Redaction: large or secret argument values are replaced before a record is written.
//!
//! A redacted value becomes `{"redacted": true, "hmac_sha256": "<hex>", "key": "<key id>",
//! "bytes": n}` (see [`crate::redacted`]): a digest keyed with the log's `redaction.key` (0600,
//! beside the log, created on first use), so whoever holds the key can still prove *which*
//! content was written, and whoever reads the log without it cannot try guesses of a short
//! secret against it. The rules digest every value they match, whatever it is (an object a
//! caller shapes like a digest too); the bound, cutting a record after them, leaves alone what
//! this log's key digested. Policies saw the real value; a replay sees the redacted one, so a policy that
//! inspects a redacted argument may decide differently offline.

use crate::redacted::RedactionKey;
use hpcgate_policy_sdk::glob::Glob;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::keyfile;
use super::record::Entry;

/// The redaction key's file inside the audit directory.
pub const REDACTION_KEY_FILE: &str = "redaction.key";

/// The log's redaction key in `dir` (its audit directory), made on first use.
pub(crate) fn load_or_create_key(dir: &std::path::Path) -> std::io::Result<RedactionKey> {
    keyfile::load_or_create(dir, REDACTION_KEY_FILE, "a redaction key")
        .map(RedactionKey::from_bytes)
}

/// Reads a redaction key file (`<state_dir>/audit/redaction.key`, or a copy of it); refuses one
/// others can read.
pub fn load_redaction_key(path: &std::path::Path) -> std::io::Result<RedactionKey> {
    keyfile::load(path, "a redaction key").map(RedactionKey::from_bytes)
}

/// One argument whose value is replaced by its digest, for tools matching a glob.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgumentRule {
    /// Glob over exposed tool names (`write_file`, `*__write_file`).
    pub tool: Glob,
    /// Top-level argument name.
    pub argument: String,
}

/// What to redact. `Default` redacts `content` of `write_file` (builtin and proxied) and every
/// value whose key contains `token`, `password`, `passwd`, `secret`, `api_key`, `apikey`,
/// `authorization`, `credential` or `private_key` (case-insensitive), at any depth, but for
/// the keys of counts of language-model tokens (`max_tokens`, `prompt_tokens`, …).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionRules {
    #[serde(default = "default_arguments")]
    pub arguments: Vec<ArgumentRule>,
    /// Case-insensitive substrings of object keys.
    #[serde(default = "default_secret_keys")]
    pub secret_keys: Vec<String>,
    /// Keys whose numbers (and `true`, `false`, `null`) are not secret although the key contains
    /// one of `secret_keys`: compared whole, ignoring case and the separators `_`, `-` and `.`
    /// (`max_tokens` is also `maxTokens`). Other values under them are still redacted.
    #[serde(default = "default_not_secret_keys")]
    pub not_secret_keys: Vec<String>,
}

impl Default for RedactionRules {
    fn default() -> RedactionRules {
        RedactionRules {
            arguments: default_arguments(),
            secret_keys: default_secret_keys(),
            not_secret_keys: default_not_secret_keys(),
        }
    }
}

fn default_arguments() -> Vec<ArgumentRule> {
    ["write_file", "*__write_file"]
        .into_iter()
        .map(|tool| ArgumentRule {
            tool: Glob::new(tool).expect("a valid glob"),
            argument: "content".to_owned(),
        })
        .collect()
}

fn default_secret_keys() -> Vec<String> {
    [
        "token",
        "password",
        "passwd",
        "secret",
        "api_key",
        "apikey",
        "authorization",
        "credential",
        "private_key",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Counts and limits of language-model tokens, which agents pass to proxied model servers and
/// policies cap: a replay must see the number, not a digest.
fn default_not_secret_keys() -> Vec<String> {
    [
        "max_tokens",
        "max_new_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "min_tokens",
        "num_tokens",
        "prompt_tokens",
        "completion_tokens",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "token_count",
        "token_limit",
    ]
    .map(str::to_owned)
    .to_vec()
}

impl RedactionRules {
    /// Redacts nothing.
    pub fn none() -> RedactionRules {
        RedactionRules {
            arguments: Vec::new(),
            secret_keys: Vec::new(),
            not_secret_keys: Vec::new(),
        }
    }

    /// Redacts every argument object in the entry: the call's, the final decision's and each
    /// rewriting policy's; and in an event of a call, the detail values named as the tool's
    /// arguments are (`job.submitted` holds `submit_job`'s `command`).
    pub fn apply(&self, entry: &mut Entry, key: &RedactionKey) {
        let tool = entry.tool.clone().unwrap_or_default();
        if let Some(call) = &mut entry.call {
            self.redact_arguments(&call.tool.clone(), &mut call.arguments, key);
        }
        if let Some(arguments) = entry.decision.as_mut().and_then(|d| d.arguments.as_mut()) {
            self.redact_arguments(&tool, arguments, key);
        }
        for policy in &mut entry.policies {
            if let Some(arguments) = &mut policy.arguments {
                self.redact_arguments(&tool, arguments, key);
            }
        }
        if entry.call.is_none()
            && let Some(detail) = &mut entry.detail
        {
            for rule in self.arguments.iter().filter(|r| r.tool.matches(&tool)) {
                if let Some(value) = detail.get_mut(&rule.argument) {
                    *value = key.redact(value);
                }
            }
        }
    }

    /// Redacts one tool's arguments in place.
    pub fn redact_arguments(
        &self,
        tool: &str,
        arguments: &mut Map<String, Value>,
        key: &RedactionKey,
    ) {
        for rule in self.arguments.iter().filter(|r| r.tool.matches(tool)) {
            if let Some(value) = arguments.get_mut(&rule.argument) {
                *value = key.redact(value);
            }
        }
        if !self.secret_keys.is_empty() {
            self.redact_secrets(arguments, key);
        }
    }

    fn redact_secrets(&self, object: &mut Map<String, Value>, key: &RedactionKey) {
        for (name, value) in object.iter_mut() {
            if self.is_secret(name, value) {
                *value = key.redact(value);
            } else {
                self.redact_secrets_in(value, key);
            }
        }
    }

    fn redact_secrets_in(&self, value: &mut Value, key: &RedactionKey) {
        match value {
            Value::Object(object) => self.redact_secrets(object, key),
            Value::Array(items) => (items.iter_mut()).for_each(|v| self.redact_secrets_in(v, key)),
            _ => {}
        }
    }

    /// Whether `value` under `key` is a secret. A number, `true`/`false` or `null` under one of
    /// `not_secret_keys` is not; any other value there still is (a string under `max_tokens`
    /// is not a count).
    fn is_secret(&self, key: &str, value: &Value) -> bool {
        let lower = key.to_ascii_lowercase();
        if !self
            .secret_keys
            .iter()
            .any(|s| lower.contains(&s.to_ascii_lowercase()))
        {
            return false;
        }
        if !matches!(value, Value::Number(_) | Value::Bool(_) | Value::Null) {
            return true;
        }
        let bare = without_separators(key);
        !self
            .not_secret_keys
            .iter()
            .any(|k| without_separators(k) == bare)
    }
}

/// `key` in lower case without `_`, `-` and `.`.
fn without_separators(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Replaces a value by its digest form, unless it already is one made with `key`: for the
/// bound, which cuts a record after the rules redacted it. (The rules digest every value they
/// match, whatever it looks like: a caller may send an object shaped like one of this log's
/// digests, which would otherwise carry its own text past them.)
pub(crate) fn redact(value: &mut Value, key: &RedactionKey) {
    if matches!(value, Value::Object(o) if key.redacted_here(o)) {
        return;
    }
    *value = key.redact(value);
}

/// Replaces a whole argument object by its digest form (the object becomes the redacted form
/// of its compact JSON text), unless it already is one made with `key`.
pub(crate) fn redact_whole(arguments: &mut Map<String, Value>, key: &RedactionKey) {
    if key.redacted_here(arguments) {
        return;
    }
    let mut value = Value::Object(std::mem::take(arguments));
    redact(&mut value, key);
    if let Value::Object(digest) = value {
        *arguments = digest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> RedactionKey {
        RedactionKey::from_bytes([3; 32])
    }

    #[test]
    fn content_and_secrets_become_digests_whatever_they_look_like() {
        let rules = RedactionRules::default();
        let mut args = json!({
            "instance_id": "run1", "path": "a.txt", "content": "hello",
            "env": {"API_TOKEN": "t0p", "list": [{"password": 5}], "plain": "ok"}
        })
        .as_object()
        .unwrap()
        .clone();
        rules.redact_arguments("write_file", &mut args, &key());
        let hello = key().digest(b"hello");
        assert_eq!(
            args["content"],
            json!({"redacted": true, "hmac_sha256": hello, "key": key().id(), "bytes": 5})
        );
        assert_eq!(args["env"]["API_TOKEN"]["bytes"], 3);
        assert_eq!(args["env"]["list"][0]["password"]["bytes"], 1);
        assert_eq!(args["env"]["plain"], "ok");
        assert_eq!(args["path"], "a.txt");
        // A caller's object shaped like a digest (a plain one, another key's, or exactly one of
        // this log's, with its key id and 64 hex digits of the caller's choosing) is no digest
        // of the rules': it is digested like any value, so it carries no text past them.
        let chosen = "0123456789abcdef".repeat(4);
        for shaped in [
            json!({"redacted": true, "sha256": chosen, "bytes": 5}),
            json!({"redacted": true, "hmac_sha256": chosen, "key": "0000000000000000", "bytes": 5}),
            json!({"redacted": true, "hmac_sha256": chosen, "key": key().id(), "bytes": 5}),
        ] {
            assert_eq!(
                key().redacted_here(shaped.as_object().unwrap()),
                shaped["key"] == key().id()
            );
            let mut sent = json!({"content": shaped, "env": {"token": shaped}});
            rules.redact_arguments("write_file", sent.as_object_mut().unwrap(), &key());
            assert!(!sent.to_string().contains(&chosen), "{sent}");
            assert_eq!(sent["content"], key().redact(&shaped));
            assert_eq!(sent["env"]["token"], key().redact(&shaped));
        }
        // The bound, after the rules, leaves what they digested as it is.
        let mut value = args["content"].clone();
        redact(&mut value, &key());
        assert_eq!(value, args["content"]);

        let mut read = json!({"content": "keep"}).as_object().unwrap().clone();
        rules.redact_arguments("read_file", &mut read, &key());
        assert_eq!(read["content"], "keep", "only the configured tools");
        rules.redact_arguments("fs__write_file", &mut read, &key());
        assert_eq!(read["content"]["bytes"], 4, "proxied write_file too");
    }

    #[test]
    fn rules_read_from_config_and_none_redacts_nothing() {
        let rules: RedactionRules = serde_json::from_value(
            json!({"arguments": [{"tool": "submit_job", "argument": "command"}]}),
        )
        .unwrap();
        assert_eq!(rules.secret_keys, default_secret_keys());
        let mut args = json!({"command": "make", "token": "x"})
            .as_object()
            .unwrap()
            .clone();
        rules.redact_arguments("submit_job", &mut args, &key());
        assert_eq!(args["command"]["bytes"], 4);
        assert_eq!(args["token"]["bytes"], 1);
        let mut args = json!({"token": "x"}).as_object().unwrap().clone();
        RedactionRules::none().redact_arguments("t", &mut args, &key());
        assert_eq!(args["token"], "x");
        assert!(
            serde_json::from_value::<RedactionRules>(json!({"argumnts": []})).is_err(),
            "unknown keys are errors"
        );
    }

    /// A job's command, when `submit_job`'s `command` is redacted, is redacted in the
    /// `job.submitted` event too, which repeated it in plain text; another tool's event and
    /// another detail are kept.
    #[test]
    fn a_calls_events_redact_the_details_that_are_its_arguments() {
        let rules: RedactionRules = serde_json::from_value(
            json!({"arguments": [{"tool": "submit_job", "argument": "command"}]}),
        )
        .unwrap();
        let secret = "HF_TOKEN=hf_secret python train.py";
        let event = || {
            Entry::new(crate::Event::JobSubmitted)
                .detail("command", secret)
                .detail("mode", "local")
        };
        let mut submitted = event().tool("submit_job");
        rules.apply(&mut submitted, &key());
        let detail = submitted.detail.as_ref().unwrap();
        assert_eq!(detail["command"]["bytes"], secret.len());
        assert_eq!(detail["mode"], "local");
        assert!(
            !serde_json::to_string(&submitted)
                .unwrap()
                .contains("hf_secret")
        );
        let mut other = event().tool("run_python");
        rules.apply(&mut other, &key());
        assert_eq!(other.detail.unwrap()["command"], secret);
    }

    #[test]
    fn counts_of_model_tokens_are_not_secrets() {
        let rules = RedactionRules::default();
        let mut args = json!({
            "max_tokens": 4096, "maxTokens": 10, "Prompt-Tokens": 7,
            "usage": {"total_tokens": 3, "access_token": "a"},
            "tokens": ["t"], "API_TOKEN": "s", "max_tokens_secret": "k"
        })
        .as_object()
        .unwrap()
        .clone();
        rules.redact_arguments("call_model", &mut args, &key());
        assert_eq!(args["max_tokens"], 4096);
        assert_eq!(args["maxTokens"], 10);
        assert_eq!(args["Prompt-Tokens"], 7);
        assert_eq!(args["usage"]["total_tokens"], 3);
        for redacted in [
            &args["usage"]["access_token"],
            &args["tokens"],
            &args["API_TOKEN"],
        ] {
            assert_eq!(redacted["redacted"], true, "{args:?}");
        }
        assert_eq!(
            args["max_tokens_secret"]["redacted"], true,
            "an exception is a whole key, not a prefix"
        );
        let mut text = json!({"max_tokens": "sk-not-a-count", "token_count": null})
            .as_object()
            .unwrap()
            .clone();
        rules.redact_arguments("call_model", &mut text, &key());
        assert_eq!(
            text["max_tokens"]["redacted"], true,
            "only numbers (and true, false, null) are let through"
        );
        assert_eq!(text["token_count"], Value::Null);

        let rules: RedactionRules =
            serde_json::from_value(json!({"not_secret_keys": ["token_budget"]})).unwrap();
        let mut args = json!({"token_budget": 5, "max_tokens": 6})
            .as_object()
            .unwrap()
            .clone();
        rules.redact_arguments("t", &mut args, &key());
        assert_eq!(args["token_budget"], 5);
        assert_eq!(
            args["max_tokens"]["redacted"], true,
            "a configured list replaces the default one"
        );
    }
}
