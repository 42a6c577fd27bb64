//! The raw model: serde structs mirroring the TOML file, every table `deny_unknown_fields`.
//!
//! Values stay as written (optional where a layer may leave them out); defaults live in the
//! embedded `default-config.toml` and, for safety, in [`super::Settings::resolve`], which turns
//! this model into typed, validated settings.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::auth::{AuthConfig, HttpConfig};
use super::code_mode::CodeModeConfig;
use super::sections::{
    AuditConfig, DavConfig, FilesConfig, HostCommandConfig, JobsConfig, McpConfig, SandboxConfig,
    SlurmConfig,
};
use super::tenants::TenantConfig;
use crate::policy::Mode;

/// The whole configuration (one file, or the merge of all layers).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Tenant for stdio and local CLI use (default `default`).
    pub stdio_tenant: Option<String>,
    /// Instances, job records and the audit log (default `$XDG_DATA_HOME/hpcgate`, that is
    /// `~/.local/share/hpcgate`).
    pub state_dir: Option<PathBuf>,
    /// `[mcp]`: how results are shaped.
    #[serde(default)]
    pub mcp: McpConfig,
    /// `[policy_engine]`: engine-wide settings and per-policy defaults.
    #[serde(default)]
    pub policy_engine: EngineConfig,
    /// `[[policies]]`: the chain, in order. A list: a higher layer replaces it whole.
    #[serde(default)]
    pub policies: Vec<PolicyConfig>,
    /// `[proxied_mcps.<name>]`: child MCP servers; `<name> = false` in a higher layer removes one.
    #[serde(default)]
    pub proxied_mcps: BTreeMap<String, ProxyConfig>,
    /// `[sandbox]`: the local bubblewrap executor.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// `[slurm]`: the batch executor (off by default).
    #[serde(default)]
    pub slurm: SlurmConfig,
    /// `[files]`: caps of the file tools.
    #[serde(default)]
    pub files: FilesConfig,
    /// `[jobs]`: job record retention.
    #[serde(default)]
    pub jobs: JobsConfig,
    /// `[audit]`: redaction and rotation.
    #[serde(default)]
    pub audit: AuditConfig,
    /// `[host_commands.<key>]`: what `host_exec` may run.
    #[serde(default)]
    pub host_commands: BTreeMap<String, HostCommandConfig>,
    /// `[tenants.<name>]`: none means single-tenant (every caller is `stdio_tenant`).
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantConfig>,
    /// `[auth]`: how bearer tokens other than the configured hashes are accepted (JWT).
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[http]`: the HTTP transport (browser origins allowed).
    #[serde(default)]
    pub http: HttpConfig,
    /// `[metrics]`: `GET /metrics`.
    #[serde(default)]
    pub metrics: super::metrics::MetricsConfig,
    /// `[telemetry]`: OpenTelemetry traces over OTLP.
    #[serde(default)]
    pub telemetry: super::telemetry::TelemetryConfig,
    /// `[dav]`: WebDAV at `/dav` on the HTTP transports.
    #[serde(default)]
    pub dav: DavConfig,
    /// `[code_mode]`: limits on the tool calls a job's code makes.
    #[serde(default)]
    pub code_mode: CodeModeConfig,
}

/// `[policy_engine]`: defaults for every policy and engine-wide settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Compiled-module cache; default `~/.cache/hpcgate/policies`.
    pub cache_dir: Option<PathBuf>,
    /// Per-evaluation deadline in ms (default 100).
    pub deadline_ms: Option<u64>,
    /// Per-instance memory cap in MiB (default 32).
    pub memory_limit_mb: Option<usize>,
    /// Fresh instances prepared ahead of the call per policy (default 8).
    pub prepared: Option<usize>,
    /// Whether a policy whose `configure` is slow (over 250 µs of CPU) starts its fresh
    /// instances from a configured snapshot (default true).
    pub configured_snapshots: Option<bool>,
}

/// One `[[policies]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub name: String,
    /// `stock:<name>` or a path to a `.wasm` component, relative to the config file.
    pub module: String,
    #[serde(default)]
    pub mode: Mode,
    /// Globs over tenant names; default all.
    #[serde(default = "all_tenants")]
    pub tenants: Vec<String>,
    /// Globs over exposed tool names the policy judges; default all. A call of any other tool
    /// does not run it (nor does listing that tool).
    #[serde(default = "all_tools")]
    pub tools: Vec<String>,
    pub deadline_ms: Option<u64>,
    pub memory_limit_mb: Option<usize>,
    /// Reuse configured instances across one tenant's evaluations instead of a fresh one per
    /// evaluation (state may survive between that tenant's calls, never across tenants). Off
    /// unless set; the embedded default chain sets it for the stock policies.
    #[serde(default)]
    pub reuse_instance: bool,
    /// Passed to the policy's `configure` as JSON.
    #[serde(default)]
    pub config: toml::Table,
}

/// `[proxied_mcps.<name>]`: a child MCP server run inside each instance's sandbox (resolved by
/// [`super::proxies`]). `include`/`exclude` feed an implicit `stock:proxy-filter` policy named
/// `proxied_mcps`, so configs written with per-server `include`/`exclude` keep working.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The server's program, as seen inside the sandbox (looked up in the sandbox's `PATH`
    /// when not absolute).
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Added to the sandbox's allow-listed environment (never the gateway's whole environment).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Remote tool globs; when non-empty a tool must match one.
    #[serde(default)]
    pub include: Vec<String>,
    /// Remote tool globs that are never exposed.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Seconds without calls before the server is stopped (0 = never).
    pub idle_timeout: Option<f64>,
    /// Longest wait for one call, seconds.
    pub call_timeout: Option<f64>,
    /// `none` or `host` (default: `[sandbox] network`).
    pub network: Option<String>,
    /// Absolute host paths bound read-only at the same place in the server's sandbox (e.g.
    /// where the server is installed).
    #[serde(default)]
    pub binds: Vec<String>,
    /// Largest result passed back to the agent, bytes of JSON (default
    /// `[sandbox.limits] output_bytes`).
    pub max_result_bytes: Option<u64>,
    /// Longest wait for the server to start and list its tools, seconds (default 30).
    pub start_timeout: Option<f64>,
}

pub(crate) fn all_tenants() -> Vec<String> {
    vec!["*".to_owned()]
}

pub(crate) fn all_tools() -> Vec<String> {
    vec!["*".to_owned()]
}
