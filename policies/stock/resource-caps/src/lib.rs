//! `stock:resource-caps`: defaults and ceilings for the resources a job asks for.
//!
//! Only the builtin tools that start jobs, `submit_job` and `run_python`, are judged (every
//! other tool, and the list phase, is allowed), and only their `resources` object (the same
//! shape in both). For each configured key (`cpus`, `memory_mb`, `time_limit_s`, `gpus`):
//! a missing key gets its `default`; a value above `max` becomes `max` with `action = "clamp"` or
//! is denied with `action = "deny"`; a value that is not a non-negative integer is denied. When
//! anything changed the decision is `rewrite` with the full new arguments and a note listing each
//! change; otherwise `allow`. Keys of `resources` that are not configured pass unchanged.
//!
//! Decisions the contract leaves open:
//! - `null` counts as missing (for `resources` itself and for each key): it gets the default;
//! - a whole number written as a float (`8.0`) is denied like `8.5`: the executor's typed request
//!   would refuse it too;
//! - a call that still carries `slurm_resources` is denied: the gateway renames that alias
//!   to `resources` before policies run, so seeing it means limits could be bypassed;
//! - a configured `default` above its `max` is a configuration error.
//!
//! ```toml
//! [policies.config]
//! action = "clamp"
//! cpus = { default = 1, max = 8 }
//! memory_mb = { default = 4096, max = 32768 }
//! ```

use hpcgate_policy_sdk::{Call, Decision, Map, Phase, Policy, Value, args};
use serde::Deserialize;

/// The `config` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default)]
    action: Action,
    #[serde(default)]
    cpus: Limit,
    #[serde(default)]
    memory_mb: Limit,
    #[serde(default)]
    time_limit_s: Limit,
    #[serde(default)]
    gpus: Limit,
}

/// What to do with a value above its `max`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    #[default]
    Clamp,
    Deny,
}

/// One resource's `{ default, max }`; both optional.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    default: Option<u64>,
    max: Option<u64>,
}

/// The configured policy: the action and each resource key with its limit, in a fixed order.
#[derive(Debug)]
pub struct ResourceCaps {
    action: Action,
    limits: [(&'static str, Limit); 4],
}

/// The builtin tools that start jobs, both with a `resources` object.
const TOOLS: [&str; 2] = ["submit_job", "run_python"];

impl Policy for ResourceCaps {
    fn configure(settings: &str) -> Result<Self, String> {
        let s: Settings = args::parse_settings(settings)?;
        let limits = [
            ("cpus", s.cpus),
            ("memory_mb", s.memory_mb),
            ("time_limit_s", s.time_limit_s),
            ("gpus", s.gpus),
        ];
        for (key, limit) in limits {
            if let (Some(default), Some(max)) = (limit.default, limit.max)
                && default > max
            {
                return Err(format!(
                    "invalid config: `{key}.default` {default} is above `{key}.max` {max}"
                ));
            }
        }
        Ok(ResourceCaps {
            action: s.action,
            limits,
        })
    }

    fn needs_arguments(&self, call: &Call) -> bool {
        TOOLS.contains(&call.tool.as_str()) && call.phase != Phase::List
    }

    fn evaluate(&self, call: &Call) -> Decision {
        if !TOOLS.contains(&call.tool.as_str()) || call.phase == Phase::List {
            return Decision::allow();
        }
        if call.arguments.contains_key("slurm_resources") {
            return Decision::deny(
                "`slurm_resources` reached the policy un-renamed; pass `resources` instead",
            );
        }
        let mut resources = match call.arguments.get("resources") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Decision::deny(format!(
                    "`resources` must be an object like {{\"cpus\": 4}}, got {}",
                    args::describe_kind(other)
                ));
            }
        };
        let mut changes = Vec::new();
        for &(key, limit) in &self.limits {
            match args::get_u64(&resources, key) {
                Err(value) => {
                    return Decision::deny(format!(
                        "`{key}` must be a non-negative integer, got {value} ({})",
                        args::describe_kind(value)
                    ));
                }
                Ok(None) => {
                    if let Some(default) = limit.default {
                        resources.insert(key.to_owned(), default.into());
                        changes.push(format!("{key} set to default {default}"));
                    }
                }
                Ok(Some(value)) => match limit.max {
                    Some(max) if value > max && self.action == Action::Deny => {
                        return Decision::deny(format!(
                            "`{key}` {value} exceeds the maximum {max}; request at most {max}"
                        ));
                    }
                    Some(max) if value > max => {
                        resources.insert(key.to_owned(), max.into());
                        changes.push(format!("{key} {value} → {max} (max)"));
                    }
                    _ => {}
                },
            }
        }
        if changes.is_empty() {
            return Decision::allow();
        }
        let mut arguments = call.arguments.clone();
        arguments.insert("resources".to_owned(), Value::Object(resources));
        Decision::rewrite(arguments, changes.join("; "))
    }
}

hpcgate_policy_sdk::export_policy!(ResourceCaps);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(action: &str) -> ResourceCaps {
        let settings = json!({
            "action": action,
            "cpus": {"default": 1, "max": 8},
            "memory_mb": {"default": 4096, "max": 32768},
            "time_limit_s": {"default": 3600, "max": 86400},
            "gpus": {"default": 0, "max": 0}
        });
        ResourceCaps::configure(&settings.to_string()).expect("valid settings")
    }

    fn submit(resources: Value) -> Call {
        Call::new(
            "submit_job",
            json!({"instance_id": "run1", "command": "make", "resources": resources}),
        )
    }

    fn reason(decision: Decision) -> String {
        match decision {
            Decision::Deny { reason } => reason,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    fn rewritten(decision: Decision) -> (Value, String) {
        match decision {
            Decision::Rewrite { arguments, note } => (Value::Object(arguments), note),
            other => panic!("expected a rewrite, got {other:?}"),
        }
    }

    /// Resources with every configured key present and within limits.
    fn full() -> Value {
        json!({"cpus": 4, "memory_mb": 8192, "time_limit_s": 600, "gpus": 0})
    }

    #[test]
    fn clamps_and_fills_defaults() {
        let (arguments, note) = rewritten(policy("clamp").evaluate(&submit(json!({"cpus": 64}))));
        assert_eq!(
            arguments,
            json!({"instance_id": "run1", "command": "make",
                   "resources": {"cpus": 8, "memory_mb": 4096, "time_limit_s": 3600, "gpus": 0}})
        );
        assert_eq!(
            note,
            "cpus 64 → 8 (max); memory_mb set to default 4096; \
             time_limit_s set to default 3600; gpus set to default 0"
        );
    }

    #[test]
    fn within_limits_is_allowed_and_unknown_keys_pass() {
        assert!(policy("clamp").evaluate(&submit(full())).is_allow());
        let mut resources = full();
        resources["partition"] = json!("gpu");
        resources["cpus"] = json!(8);
        assert!(policy("deny").evaluate(&submit(resources)).is_allow());
    }

    #[test]
    fn missing_resources_get_defaults() {
        for call in [
            Call::new("submit_job", json!({"command": "make"})),
            submit(Value::Null),
        ] {
            let (arguments, _) = rewritten(policy("deny").evaluate(&call));
            assert_eq!(
                arguments["resources"],
                json!({"cpus": 1, "memory_mb": 4096, "time_limit_s": 3600, "gpus": 0})
            );
        }
        let mut resources = full();
        resources["cpus"] = Value::Null;
        let (arguments, note) = rewritten(policy("clamp").evaluate(&submit(resources)));
        assert_eq!(arguments["resources"]["cpus"], json!(1));
        assert_eq!(note, "cpus set to default 1");
    }

    #[test]
    fn deny_action_refuses_values_above_max() {
        let mut resources = full();
        resources["memory_mb"] = json!(65536);
        let why = reason(policy("deny").evaluate(&submit(resources.clone())));
        assert_eq!(
            why,
            "`memory_mb` 65536 exceeds the maximum 32768; request at most 32768"
        );
        let (arguments, note) = rewritten(policy("clamp").evaluate(&submit(resources)));
        assert_eq!(arguments["resources"]["memory_mb"], json!(32768));
        assert_eq!(note, "memory_mb 65536 → 32768 (max)");
    }

    #[test]
    fn bad_values_are_denied() {
        for (bad, kind) in [
            (json!(8.5), "a decimal number"),
            (json!(8.0), "a decimal number"),
            (json!(-1), "a negative number"),
            (json!("8"), "a string"),
            (json!(true), "a boolean"),
            (json!([8]), "a list"),
        ] {
            let mut resources = full();
            resources["cpus"] = bad.clone();
            for action in ["clamp", "deny"] {
                let why = reason(policy(action).evaluate(&submit(resources.clone())));
                assert!(
                    why.starts_with("`cpus` must be a non-negative integer"),
                    "{why}"
                );
                assert!(why.contains(kind), "{bad}: {why}");
            }
        }
        let why = reason(policy("clamp").evaluate(&submit(json!("cpus=4"))));
        assert!(
            why.contains("`resources` must be an object") && why.contains("a string"),
            "{why}"
        );
    }

    #[test]
    fn other_tools_list_phase_and_alias() {
        let p = policy("deny");
        assert!(
            p.evaluate(&Call::new("poll_job", json!({"resources": {"cpus": 999}})))
                .is_allow()
        );
        let mut call = submit(json!({"cpus": 999}));
        call.phase = Phase::List;
        call.arguments = Map::new();
        assert!(p.evaluate(&call).is_allow());
        let call = Call::new("submit_job", json!({"slurm_resources": {"cpus": 999}}));
        assert!(reason(p.evaluate(&call)).contains("`slurm_resources`"));
    }

    #[test]
    fn unconfigured_limits_change_nothing() {
        let p = ResourceCaps::configure("{}").unwrap();
        assert!(p.evaluate(&submit(json!({"cpus": 100000}))).is_allow());
        assert!(p.evaluate(&Call::new("submit_job", json!({}))).is_allow());
        let p = ResourceCaps::configure(r#"{"cpus": {"max": 2}}"#).unwrap();
        let (arguments, _) = rewritten(p.evaluate(&submit(json!({"cpus": 3, "gpus": 7}))));
        assert_eq!(arguments["resources"], json!({"cpus": 2, "gpus": 7}));
    }

    #[test]
    fn bad_settings_are_explained() {
        let err = ResourceCaps::configure(r#"{"nodes": {"max": 1}}"#).unwrap_err();
        assert!(
            err.contains("unknown field `nodes`") && err.contains("`cpus`"),
            "{err}"
        );
        let err = ResourceCaps::configure(r#"{"cpus": {"maximum": 1}}"#).unwrap_err();
        assert!(
            err.contains("unknown field `maximum`") && err.contains("`max`"),
            "{err}"
        );
        let err = ResourceCaps::configure(r#"{"action": "warn"}"#).unwrap_err();
        assert!(err.contains("`clamp`") && err.contains("`deny`"), "{err}");
        let err = ResourceCaps::configure(r#"{"cpus": {"default": 16, "max": 8}}"#).unwrap_err();
        assert!(
            err.contains("`cpus.default` 16 is above `cpus.max` 8"),
            "{err}"
        );
        let err = ResourceCaps::configure(r#"{"cpus": {"max": -1}}"#).unwrap_err();
        assert!(err.contains("invalid value"), "{err}");
    }

    #[test]
    fn run_python_is_capped_like_submit_job() {
        let call = Call::new(
            "run_python",
            json!({"instance_id": "run1", "code": "print(1)", "resources": {"cpus": 64}}),
        );
        assert!(policy("deny").evaluate(&call).is_deny());
        let (arguments, _) = rewritten(policy("clamp").evaluate(&call));
        assert_eq!(arguments["resources"]["cpus"], json!(8));
        assert!(policy("deny").needs_arguments(&call));
        let other = Call::new("poll_job", json!({"resources": {"cpus": 64}}));
        assert!(policy("deny").evaluate(&other).is_allow());
    }
}
