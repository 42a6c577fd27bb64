//! The caps check through the whole resolution of a layered configuration.

use crate::config::tests::settings;

/// A resource cap with a `max` but no `default` leaves an omitted value to the executor's
/// default: refused when that is above the cap, naming the key and what to add.
#[test]
fn a_cap_that_an_omitted_value_would_pass_is_refused() {
    let caps = |limit: &str, mode: &str, sandbox: &str| {
        let text = format!(
            "{sandbox}\n[[policies]]\nname = \"caps\"\nmodule = \"stock:resource-caps\"\n\
             mode = \"{mode}\"\n[policies.config]\nmemory_mb = {limit}\n"
        );
        settings(&[("x.toml", text.as_str())])
    };
    let err = caps("{ max = 2048 }", "enforce", "")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("policies[0].config.memory_mb")
            && err.contains("gets 4096 (`[sandbox.limits] memory_mb`)")
            && err.contains("add `default = N` (at most 2048)"),
        "{err}"
    );
    assert!(caps("{ max = 2048, default = 1024 }", "enforce", "").is_ok());
    assert!(caps("{ max = 4096 }", "enforce", "").is_ok());
    assert!(caps("{ max = 2048 }", "monitor", "").is_ok());
    let lowered = "[sandbox.limits]\nmemory_mb = 2048";
    assert!(caps("{ max = 2048 }", "enforce", lowered).is_ok());
}

/// The chain is walked in order: an earlier caps policy's default for every tenant and job
/// tool fills the key before a later cap judges it; a cap scoped away from the job tools is
/// not checked; one scoped to some tenants fills nothing for the others.
#[test]
fn caps_are_checked_along_the_chain_and_its_scopes() {
    let chain = |first: &str, second: &str| {
        let policy = |name: &str, rest: &str| {
            format!("[[policies]]\nname = \"{name}\"\nmodule = \"stock:resource-caps\"\n{rest}\n")
        };
        let text = policy("a", first) + &policy("b", second);
        settings(&[("x.toml", text.as_str())])
    };
    let filled = "[policies.config]\nmemory_mb = { default = 1024 }";
    let capped = "[policies.config]\nmemory_mb = { max = 2048 }";
    assert!(chain(filled, capped).is_ok());
    let err = chain(capped, filled).unwrap_err().to_string();
    assert!(err.contains("policies[0].config.memory_mb"), "{err}");
    let other_tools = "tools = [\"host_exec\"]\n[policies.config]\nmemory_mb = { max = 2048 }";
    assert!(chain(filled, other_tools).is_ok());
    assert!(chain(other_tools, "").is_ok());
    let some_tenants = "tenants = [\"chem\"]\n[policies.config]\nmemory_mb = { default = 1024 }";
    let err = chain(some_tenants, capped).unwrap_err().to_string();
    assert!(err.contains("policies[1].config.memory_mb"), "{err}");
    // A later default above an earlier cap would pass it: the earlier one never sees it.
    let low_cap = "[policies.config]\nmemory_mb = { max = 4096 }";
    let high_default = "[policies.config]\nmemory_mb = { default = 8192 }";
    let err = chain(low_cap, high_default).unwrap_err().to_string();
    assert!(
        err.contains("policies[1].config.memory_mb") && err.contains("above the max 4096"),
        "{err}"
    );
    assert!(chain(low_cap, filled).is_ok());
}
