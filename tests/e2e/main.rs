//! hpcgate's integration tests: one binary, one shared harness.

mod harness;
mod pipeline;
mod policy_cache;
mod policy_chain;
mod policy_hostile;
mod policy_languages;
mod policy_languages_hostile;
mod policy_languages_purity;
mod policy_reuse;
mod policy_snapshot;
mod policy_wasi;
mod stock_cedar;
mod stock_rego;
mod usage_quota;
