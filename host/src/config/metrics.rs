//! `[metrics]`: whether the gateway records metrics, and the token a scraper that is neither on
//! loopback nor on the Unix socket presents (stored as its SHA-256, like tenants' tokens).

use serde::Deserialize;

use super::error::ConfigError;
use super::tenants::parse_sha256;

/// `[metrics]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Record and serve `GET /metrics` (default true).
    pub enabled: Option<bool>,
    /// SHA-256 (hex) of the bearer token that lets a non-local scraper read `/metrics`.
    pub token_sha256: Option<String>,
}

/// `[metrics]`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSettings {
    pub enabled: bool,
    pub token_sha256: Option<[u8; 32]>,
}

pub(crate) fn resolve_metrics(
    raw: &MetricsConfig,
    bad: &dyn Fn(&str, String) -> ConfigError,
) -> Result<MetricsSettings, ConfigError> {
    let token_sha256 = match &raw.token_sha256 {
        None => None,
        Some(text) => Some(parse_sha256(text).ok_or_else(|| {
            bad(
                "metrics.token_sha256",
                "must be 64 hex digits, the SHA-256 of the scraper's token (e.g. `printf %s \"$TOKEN\" | sha256sum`)".to_owned(),
            )
        })?),
    };
    Ok(MetricsSettings {
        enabled: raw.enabled.unwrap_or(true),
        token_sha256,
    })
}
