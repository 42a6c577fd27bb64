//! `[tenants.<name>]`: who may connect as which tenant, their quotas and rate limits; raw and
//! resolved.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::auth::{RateLimit, RateLimitConfig, resolve_rate_limits};
use crate::state::TenantName;

/// One raw `[tenants.<name>]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Bearer tokens, stored as hashes.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Unix-socket peers with these uids are this tenant.
    #[serde(default)]
    pub unix_uids: Vec<u32>,
    /// Limits on this tenant (unset: none).
    #[serde(default)]
    pub quotas: QuotasConfig,
    /// Token buckets by tool name, `"*"` for all calls together (unset: no limit).
    #[serde(default)]
    pub rate_limits: BTreeMap<String, RateLimitConfig>,
}

/// One `tokens` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Names the token in the audit log (the token itself is never logged).
    pub label: String,
    /// Hex SHA-256 of the bearer token (64 hex digits).
    pub sha256: String,
}

/// `quotas = { … }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotasConfig {
    /// Most live instances.
    pub max_instances: Option<usize>,
    /// Most jobs queued or running at once.
    pub max_running_jobs: Option<usize>,
    /// Most bytes of regular files in one instance's workspace.
    pub max_workspace_bytes: Option<u64>,
    /// Most bytes of one instance's output directory.
    pub max_output_bytes: Option<u64>,
}

/// A resolved tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub tokens: Vec<Token>,
    pub unix_uids: Vec<u32>,
    pub quotas: Quotas,
    /// By tool name; [`super::auth::ALL_TOOLS`] (`"*"`) limits all calls together.
    pub rate_limits: BTreeMap<String, RateLimit>,
}

/// A bearer token by its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub label: String,
    pub sha256: [u8; 32],
}

/// A tenant's quotas; `None` is unlimited. Same types as the state layer takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quotas {
    pub max_instances: Option<usize>,
    pub max_running_jobs: Option<usize>,
    /// Per instance, regular-file bytes under `workspace/` (see [`crate::usage`]).
    pub max_workspace_bytes: Option<u64>,
    /// Per instance, regular-file bytes under `output/`.
    pub max_output_bytes: Option<u64>,
}

/// A tenant problem: the dotted key below `tenants` and what is wrong.
pub(crate) type Problem = (String, String);

/// Validates and resolves every tenant; a uid or token hash may belong to one tenant only.
pub(crate) fn resolve(
    raw: &BTreeMap<String, TenantConfig>,
) -> Result<BTreeMap<TenantName, Tenant>, Problem> {
    let mut tenants = BTreeMap::new();
    let mut uid_owner: BTreeMap<u32, &str> = BTreeMap::new();
    let mut token_owner: BTreeMap<[u8; 32], String> = BTreeMap::new();
    for (name, t) in raw {
        let key = |rest: &str| format!("tenants.{name}{rest}");
        let tenant = TenantName::parse(name).map_err(|e| (key(""), e.to_string()))?;
        let mut tokens = Vec::with_capacity(t.tokens.len());
        for (i, token) in t.tokens.iter().enumerate() {
            if token.label.trim().is_empty() {
                return Err((
                    key(&format!(".tokens[{i}].label")),
                    "must not be empty; name the token (e.g. who holds it)".to_owned(),
                ));
            }
            let sha256 = parse_sha256(&token.sha256).ok_or_else(|| {
                (
                    key(&format!(".tokens[{i}].sha256")),
                    "must be 64 hex digits, the SHA-256 of the token (e.g. `printf %s \"$TOKEN\" | sha256sum`)".to_owned(),
                )
            })?;
            let place = format!("{name}.tokens[{i}]");
            if let Some(other) = token_owner.insert(sha256, place) {
                return Err((
                    key(&format!(".tokens[{i}].sha256")),
                    format!(
                        "the same token hash is already given at `tenants.{other}`; a token identifies one tenant"
                    ),
                ));
            }
            tokens.push(Token {
                label: token.label.clone(),
                sha256,
            });
        }
        for uid in &t.unix_uids {
            if let Some(other) = uid_owner.insert(*uid, name) {
                return Err((
                    key(".unix_uids"),
                    format!(
                        "uid {uid} is already given to tenant `{other}`; a uid identifies one tenant"
                    ),
                ));
            }
        }
        for (field, value) in [
            ("max_instances", t.quotas.max_instances.map(|v| v as u64)),
            (
                "max_running_jobs",
                t.quotas.max_running_jobs.map(|v| v as u64),
            ),
            ("max_workspace_bytes", t.quotas.max_workspace_bytes),
            ("max_output_bytes", t.quotas.max_output_bytes),
        ] {
            if value == Some(0) {
                return Err((
                    key(&format!(".quotas.{field}")),
                    "must be positive; leave it out for no limit".to_owned(),
                ));
            }
        }
        tenants.insert(
            tenant,
            Tenant {
                tokens,
                unix_uids: t.unix_uids.clone(),
                quotas: Quotas {
                    max_instances: t.quotas.max_instances,
                    max_running_jobs: t.quotas.max_running_jobs,
                    max_workspace_bytes: t.quotas.max_workspace_bytes,
                    max_output_bytes: t.quotas.max_output_bytes,
                },
                rate_limits: resolve_rate_limits(&t.rate_limits, &key)?,
            },
        );
    }
    Ok(tenants)
}

pub(crate) fn parse_sha256(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(text.to_ascii_lowercase(), &mut out).ok()?;
    Some(out)
}
