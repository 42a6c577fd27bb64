//! A `stock:resource-caps` cap that would not hold. The policy gives a key its `default` when a
//! job leaves it out; a key with a `max` but no `default` stays out, and the executor then uses
//! its own default, which the policy never sees. When that default is above the cap, a job
//! passes the cap by saying nothing: the configuration is refused, saying what to add.

use hpcgate_executors::sandbox::Limits;

use super::error::ConfigError;
use super::raw::PolicyConfig;
use super::settings::Bad;
use crate::policy::Mode;

/// The module whose caps are checked.
const CAPS: &str = "stock:resource-caps";

/// Refuses an enforced `stock:resource-caps` key with a `max` below what a job gets without
/// asking (`limits`: the sandbox's; a Slurm job gets the same, and 1 cpu, and no gpus).
pub(super) fn check_caps(
    policies: &[PolicyConfig],
    limits: &Limits,
    bad: &Bad,
) -> Result<(), ConfigError> {
    let unasked = [
        ("cpus", u64::from(limits.cpus), "[sandbox.limits] cpus"),
        ("memory_mb", limits.memory_mb, "[sandbox.limits] memory_mb"),
        (
            "time_limit_s",
            limits.wall_time.as_secs(),
            "[sandbox.limits] wall_time_s",
        ),
    ];
    let caps = policies.iter().enumerate();
    let caps = caps.filter(|(_, p)| p.module == CAPS && p.mode == Mode::Enforce);
    for (i, policy) in caps {
        for (key, given, setting) in unasked {
            let Some(toml::Value::Table(limit)) = policy.config.get(key) else {
                continue;
            };
            let max = limit.get("max").and_then(toml::Value::as_integer);
            let Some(max) = max.and_then(|m| u64::try_from(m).ok()) else {
                continue;
            };
            if limit.contains_key("default") || given <= max {
                continue;
            }
            return Err(bad(
                &format!("policies[{i}].config.{key}"),
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
