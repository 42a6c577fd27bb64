//! A `stock:resource-caps` cap that would not hold. The policy gives a key its `default` when a
//! job leaves it out; a key with a `max` but no `default` stays out, and the executor then uses
//! its own default, which the policy never sees. When that default is above the cap, a job
//! passes the cap by saying nothing: the configuration is refused, saying what to add.
//!
//! The chain is walked in order: a key an earlier enforced caps policy gives a default for
//! every tenant and both job tools is never left out by the time a later one judges it. A
//! caps policy scoped away from the job tools judges no job, and is not checked.

use hpcgate_executors::sandbox::Limits;
use hpcgate_policy_sdk::glob::GlobSet;

use super::raw::PolicyConfig;
use crate::policy::Mode;

/// The module whose caps are checked.
const CAPS: &str = "stock:resource-caps";
/// The tools whose `resources` it judges.
const JOB_TOOLS: [&str; 2] = ["submit_job", "run_python"];

/// Refuses an enforced `stock:resource-caps` key with a `max` below what a job gets without
/// asking (`limits`: the sandbox's; a Slurm job gets the same, and 1 cpu, and no gpus). `Err`
/// holds the dotted key and what is wrong.
pub(crate) fn check_caps(
    policies: &[PolicyConfig],
    limits: &Limits,
) -> Result<(), (String, String)> {
    let unasked = [
        ("cpus", u64::from(limits.cpus), "[sandbox.limits] cpus"),
        ("memory_mb", limits.memory_mb, "[sandbox.limits] memory_mb"),
        (
            "time_limit_s",
            limits.wall_time.as_secs(),
            "[sandbox.limits] wall_time_s",
        ),
    ];
    let mut filled: Vec<&str> = Vec::new();
    // Caps without a default met so far (key, max, policy): a later policy's default above
    // one is never judged by it, and would pass it.
    let mut open_caps: Vec<(&str, u64, &str)> = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        if policy.module != CAPS || policy.mode != Mode::Enforce {
            continue;
        }
        let matches = |globs: &[String], name: &str| {
            GlobSet::new(globs).map_or(true, |set| set.is_match(name))
        };
        let judged = JOB_TOOLS
            .iter()
            .filter(|t| matches(&policy.tools, t))
            .count();
        if judged == 0 {
            continue;
        }
        let everywhere = judged == JOB_TOOLS.len() && policy.tenants.iter().any(|t| t == "*");
        for (key, given, setting) in unasked {
            let Some(toml::Value::Table(limit)) = policy.config.get(key) else {
                continue;
            };
            let number = |name| {
                let value = limit.get(name).and_then(toml::Value::as_integer);
                value.and_then(|v| u64::try_from(v).ok())
            };
            if let Some(default) = number("default") {
                let passed = open_caps
                    .iter()
                    .find(|(k, max, _)| *k == key && default > *max);
                if let Some((_, max, earlier)) = passed {
                    return Err((
                        format!("policies[{i}].config.{key}"),
                        format!(
                            "policy `{}` gives `{key}` a default of {default}, above the max \
                             {max} of policy `{earlier}`, which judges a call before it and so \
                             never sees that default; make the default at most {max}, or give \
                             `{earlier}` a default",
                            policy.name
                        ),
                    ));
                }
                if everywhere {
                    filled.push(key);
                }
                continue;
            }
            let Some(max) = number("max") else {
                continue;
            };
            open_caps.push((key, max, &policy.name));
            if given <= max || filled.contains(&key) {
                continue;
            }
            return Err((
                format!("policies[{i}].config.{key}"),
                format!(
                    "policy `{}` caps `{key}` at {max} but gives it no default, so a job that \
                     leaves `{key}` out gets {given} (`{setting}`); add `default = N` (at most \
                     {max}) beside the max, or set `{setting}` to at most {max}",
                    policy.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
