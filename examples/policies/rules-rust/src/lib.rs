//! The example rules in Rust, with the SDK: the same rules as `../rules.rego` and
//! `../rules.cedar`, checked by the one `../cases.jsonl`.
//!
//! - no `rm -rf` in a `submit_job` command;
//! - `/workspace/inputs` is read-only: a tool that writes may not take a `path` under it;
//! - at most `max_gpus[tenant]` GPUs per job (`resources.gpus`) for the tenants listed.
//!
//! ```toml
//! [policies.config]
//! max_gpus = { chem = 4 }
//! ```

use std::collections::BTreeMap;

use hpcgate_policy_sdk::{Call, Decision, Policy, Value, args};
use serde::Deserialize;

/// The `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// GPUs per job, per tenant; tenants not listed are not capped.
    #[serde(default)]
    max_gpus: BTreeMap<String, u64>,
}

impl Policy for Rules {
    fn configure(settings: &str) -> Result<Self, String> {
        args::parse_settings(settings)
    }

    fn evaluate(&self, call: &Call) -> Decision {
        let arg = |name: &str| call.arguments.get(name);
        if call.tool == "submit_job"
            && arg("command")
                .and_then(Value::as_str)
                .is_some_and(|c| c.contains("rm -rf"))
        {
            return Decision::deny("a job command may not contain `rm -rf`");
        }
        if !call.read_only
            && let Some(path) = arg("path").and_then(Value::as_str)
            && under_inputs(path)
        {
            return Decision::deny(format!(
                "`{path}` is under the read-only `/workspace/inputs`"
            ));
        }
        if call.tool == "submit_job"
            && let Some(max) = self.max_gpus.get(&call.tenant)
            && let Some(gpus) = arg("resources")
                .and_then(|r| r.get("gpus"))
                .and_then(Value::as_u64)
            && gpus > *max
        {
            return Decision::deny(format!(
                "tenant `{}` may use at most {max} GPUs per job, not {gpus}",
                call.tenant
            ));
        }
        Decision::allow()
    }
}

/// `/workspace/inputs` or below it, absolute or relative to `/workspace`.
fn under_inputs(path: &str) -> bool {
    ["/workspace/inputs", "inputs"]
        .iter()
        .any(|root| path == *root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
}

hpcgate_policy_sdk::export_policy!(Rules);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_three_rules() {
        let rules = Rules::configure(r#"{"max_gpus": {"chem": 4}}"#).unwrap();
        let mut job = Call::new("submit_job", json!({"command": "rm -rf x"}));
        assert!(rules.evaluate(&job).is_deny());
        job.tenant = "chem".into();
        job.arguments = json!({"command": "make", "resources": {"gpus": 5}})
            .as_object()
            .unwrap()
            .clone();
        assert!(rules.evaluate(&job).is_deny());
        job.tenant = "bio".into();
        assert!(rules.evaluate(&job).is_allow());
        let write = Call::new("write_file", json!({"path": "inputs/a"}));
        assert!(rules.evaluate(&write).is_deny());
        let write = Call::new("write_file", json!({"path": "/workspace/inputs2"}));
        assert!(rules.evaluate(&write).is_allow());
    }
}
