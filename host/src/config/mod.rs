//! The TOML configuration, in two layers (STYLE practice 9): the raw model that mirrors the
//! files ([`Config`], every table `deny_unknown_fields`), and the resolved [`Settings`] built
//! once from it (absolute paths, durations, enums, validated values).
//!
//! Layers ([`load`]): built-in defaults (`default-config.toml`, embedded) →
//! `$XDG_CONFIG_HOME/hpcgate/config.toml` (default `~/.config/hpcgate/config.toml`) →
//! `--config FILE` / `HPCGATE_CONFIG`. Tables merge; lists and values replace. A higher layer
//! removes an entry of `[proxied_mcps]`, `[host_commands]` or `[tenants]` with
//! `<name> = false`; `[[policies]]` is a list, so setting it replaces the default chain whole
//! (`policies = []` removes every policy). Unknown keys and invalid values are errors naming the
//! file the key came from and its dotted path.
//!
//! - [`raw`], [`sections`], [`tenants`], [`auth`] — the raw model (`auth` also resolves JWT,
//!   origin and rate-limit settings)
//! - [`layers`] — finding, reading and merging the layers ([`Environment`] says where home is)
//! - [`parse`] — TOML → [`Config`] with dotted-key errors ([`origins`] remembers each key's file)
//! - [`chain`] — `[[policies]]` (and `proxied_mcps` filters) → the policy chain; `policy_text`
//!   reads the `policy_file` / `schema_file` of `stock:rego` and `stock:cedar`
//! - [`settings`], [`executors`] and [`proxies`] — the resolved [`Settings`]

pub mod auth;
pub(crate) mod caps;
pub mod chain;
pub mod code_mode;
pub mod dav;
pub mod error;
pub mod executors;
mod hidden;
pub mod layers;
pub mod metrics;
pub mod ns_hpc;
pub mod oauth;
pub mod origins;
pub mod parse;
mod policy_text;
pub mod proxies;
pub mod raw;
pub mod sections;
pub mod settings;
pub mod telemetry;
pub mod tenants;
pub mod web_origin;

pub use auth::{
    ALL_TOOLS, AuthConfig, HttpConfig, JwtAlgorithm, JwtConfig, JwtKeySource, JwtSettings,
    RateLimit, RateLimitConfig,
};
pub use code_mode::{CodeModeConfig, CodeModeSettings};
pub use dav::{DavExtra, DavSettings};
pub use error::ConfigError;
pub use executors::{SandboxSettings, SlurmSettings};
pub use layers::{
    DEFAULT_CONFIG, DEFAULTS_LABEL, Environment, Layer, LoadedConfig, REMOVABLE_TABLES, load,
    merge_texts,
};
pub use metrics::{MetricsConfig, MetricsSettings};
pub use oauth::{OAuthConfig, OAuthSettings, WELL_KNOWN};
pub use origins::Origins;
pub use proxies::ProxySettings;
pub use raw::{Config, EngineConfig, PolicyConfig, ProxyConfig};
pub use sections::{
    AuditConfig, BindConfig, DavConfig, FilesConfig, HostCommandConfig, LimitsConfig, McpConfig,
    ResultType, SandboxConfig, SlurmConfig,
};
pub use settings::{ConnectionLimits, HostCommand, Settings, load_settings};
pub use telemetry::{TelemetryConfig, TelemetrySettings};
pub use tenants::{Quotas, QuotasConfig, Tenant, TenantConfig, Token, TokenConfig};

#[cfg(test)]
mod tests;
