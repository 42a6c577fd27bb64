//! What the host does to a call before any policy sees it.
//!
//! Older clients send `submit_job` resources as `slurm_resources` with `memory` in MB; the
//! contract's name is `resources` with `memory_mb`. The alias is folded into `resources` (keys
//! already in `resources` win) so that policies only ever look at one place.

use hpcgate_policy_sdk::Call;
use serde_json::Value;

/// Folds `slurm_resources` into `resources` for builtin `submit_job` calls. Idempotent.
pub fn normalize_call(call: &mut Call) {
    if call.tool != "submit_job" || call.server != "builtin" {
        return;
    }
    let Some(alias) = call.arguments.remove("slurm_resources") else {
        return;
    };
    let Value::Object(alias) = alias else {
        // Not an object: put it back under the real name, where resource-caps denies it.
        call.arguments.entry("resources").or_insert(alias);
        return;
    };
    let resources = call
        .arguments
        .entry("resources")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(resources) = resources {
        for (key, value) in alias {
            let key = if key == "memory" {
                "memory_mb".to_owned()
            } else {
                key
            };
            resources.entry(key).or_insert(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slurm_resources_become_resources_with_memory_mb() {
        let mut call = Call::new(
            "submit_job",
            json!({"command": "x", "slurm_resources": {"cpus": 4, "memory": 8192}}),
        );
        normalize_call(&mut call);
        assert_eq!(
            Value::Object(call.arguments.clone()),
            json!({"command": "x", "resources": {"cpus": 4, "memory_mb": 8192}})
        );
        let before = call.clone();
        normalize_call(&mut call);
        assert_eq!(call, before, "idempotent");
    }

    #[test]
    fn resources_win_over_the_alias_and_other_tools_are_untouched() {
        let mut call = Call::new(
            "submit_job",
            json!({"resources": {"cpus": 2}, "slurm_resources": {"cpus": 64, "gpus": 1}}),
        );
        normalize_call(&mut call);
        assert_eq!(
            Value::Object(call.arguments),
            json!({"resources": {"cpus": 2, "gpus": 1}})
        );
        let mut call = Call::new("write_file", json!({"slurm_resources": {"cpus": 64}}));
        normalize_call(&mut call);
        assert_eq!(
            Value::Object(call.arguments),
            json!({"slurm_resources": {"cpus": 64}})
        );
    }
}
