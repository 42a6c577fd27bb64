//! `stock:tool-filter`: which exposed tools an agent may see and call.
//!
//! A tool is allowed iff its exposed name (e.g. `submit_job`, `fs__read_text_file`) matches some
//! `allow` glob (default `["*"]`) and no `deny` glob (default `[]`); deny wins. The same rule
//! runs in the list phase, so a denied tool is also hidden from `tools/list`.
//!
//! ```toml
//! [policies.config]
//! allow = ["*"]
//! deny = ["host_exec"]
//! ```

use hpcgate_policy_sdk::glob::GlobSet;
use hpcgate_policy_sdk::{Call, Decision, Policy, args};
use serde::Deserialize;

/// The `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    /// Globs over exposed tool names; a tool must match one of them.
    #[serde(default = "everything")]
    allow: GlobSet,
    /// Globs over exposed tool names; a tool matching one is denied even if allowed.
    #[serde(default)]
    deny: GlobSet,
}

fn everything() -> GlobSet {
    GlobSet::new(["*"]).expect("`*` is a valid glob")
}

impl Policy for ToolFilter {
    fn configure(settings: &str) -> Result<Self, String> {
        args::parse_settings(settings)
    }

    fn needs_arguments(&self, _call: &Call) -> bool {
        false
    }

    fn evaluate(&self, call: &Call) -> Decision {
        let tool = &call.tool;
        if let Some(glob) = self.deny.first_match(tool) {
            return Decision::deny(format!(
                "tool `{tool}` is not allowed: it matches the deny glob `{glob}`"
            ));
        }
        if !self.allow.is_match(tool) {
            return Decision::deny(format!(
                "tool `{tool}` is not allowed: it matches none of the allow globs {}",
                self.allow.describe()
            ));
        }
        Decision::allow()
    }
}

hpcgate_policy_sdk::export_policy!(ToolFilter);

#[cfg(test)]
mod tests {
    use hpcgate_policy_sdk::{Phase, Value};
    use serde_json::json;

    use super::*;

    fn decide(settings: Value, tool: &str) -> Decision {
        let policy = ToolFilter::configure(&settings.to_string()).expect("valid settings");
        policy.evaluate(&Call::new(tool, json!({})))
    }

    fn reason(decision: Decision) -> String {
        match decision {
            Decision::Deny { reason } => reason,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn defaults_allow_everything() {
        assert!(decide(json!({}), "host_exec").is_allow());
        let policy = ToolFilter::configure("").unwrap();
        assert!(
            policy
                .evaluate(&Call::new("anything", json!({})))
                .is_allow()
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        let settings = json!({"allow": ["*"], "deny": ["host_exec", "*_instance"]});
        assert!(decide(settings.clone(), "submit_job").is_allow());
        let why = reason(decide(settings.clone(), "host_exec"));
        assert_eq!(
            why,
            "tool `host_exec` is not allowed: it matches the deny glob `host_exec`"
        );
        let why = reason(decide(settings, "archive_instance"));
        assert!(
            why.contains("`archive_instance`") && why.contains("`*_instance`"),
            "{why}"
        );
    }

    #[test]
    fn tool_must_match_an_allow_glob() {
        let settings = json!({"allow": ["read_*", "list_?obs"]});
        assert!(decide(settings.clone(), "read_file").is_allow());
        assert!(decide(settings.clone(), "list_jobs").is_allow());
        let why = reason(decide(settings.clone(), "write_file"));
        assert!(
            why.contains("`write_file`") && why.contains("`read_*`, `list_?obs`"),
            "{why}"
        );
        assert!(
            decide(settings.clone(), "Read_file").is_deny(),
            "matching is case-sensitive"
        );
        let why = reason(decide(json!({"allow": []}), "read_file"));
        assert!(why.contains("(none)"), "{why}");
    }

    #[test]
    fn list_phase_is_filtered_too() {
        let policy = ToolFilter::configure(r#"{"deny": ["host_exec"]}"#).unwrap();
        let mut call = Call::new("host_exec", json!({}));
        call.phase = Phase::List;
        assert!(policy.evaluate(&call).is_deny());
    }

    #[test]
    fn bad_settings_are_explained() {
        let err = ToolFilter::configure(r#"{"alow": ["*"]}"#).unwrap_err();
        assert!(
            err.contains("unknown field `alow`") && err.contains("`allow`"),
            "{err}"
        );
        let err = ToolFilter::configure(r#"{"deny": "host_exec"}"#).unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
        let err = ToolFilter::configure(r#"{"deny": [""]}"#).unwrap_err();
        assert!(err.contains("glob is empty"), "{err}");
    }
}
