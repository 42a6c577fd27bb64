//! The raw `[mcp]`, `[sandbox]`, `[slurm]`, `[files]`, `[audit]` and `[host_commands.<key>]`
//! tables. Every field is optional here; the defaults are in `default-config.toml` and in
//! [`super::Settings::resolve`].

use std::path::PathBuf;

use hpcgate_executors::sandbox::Network;
use serde::{Deserialize, Serialize};

use crate::audit::RedactionRules;

/// `[mcp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// What tool results carry (default `both`).
    pub result_type: Option<ResultType>,
    /// Directories whose matching files are offered as MCP resources (site docs for agents).
    pub context_dirs: Option<Vec<PathBuf>>,
    /// File name globs of those resources (default `["*.md"]`).
    pub resource_patterns: Option<Vec<String>>,
}

/// `[jobs]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsConfig {
    /// Finished job records (and their output) older than this many days are removed when the
    /// gateway starts; 0 keeps them forever (default 30).
    pub retention_days: Option<u64>,
}

/// The shape of a tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultType {
    /// `structuredContent` plus a one-line text summary.
    #[default]
    Both,
    /// `structuredContent` only.
    Structured,
    /// Text only (the JSON rendered as text).
    Text,
}

/// `[sandbox]`: the bubblewrap executor on the login node.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// The bwrap binary, absolute (default `/usr/bin/bwrap`; never looked up in `PATH`).
    pub bwrap: Option<PathBuf>,
    /// `none` (default: a private network namespace) or `host`.
    pub network: Option<Network>,
    /// Extra host paths bound read-only (default none).
    pub extra_ro_binds: Option<Vec<BindConfig>>,
    /// Names copied from the gateway's environment (default `LANG`, `LC_ALL`, `TZ`).
    pub env_allow: Option<Vec<String>>,
    /// Size of the private `/tmp`, MiB (default 64).
    pub tmp_size_mb: Option<u64>,
    /// Per-run limits.
    #[serde(default)]
    pub limits: LimitsConfig,
}

/// One `extra_ro_binds` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindConfig {
    /// Absolute host path (`~` expanded, relative to the config file otherwise).
    pub source: PathBuf,
    /// Absolute path inside the sandbox (default: the same as `source`).
    pub target: Option<PathBuf>,
}

/// `[sandbox.limits]`: defaults for one sandbox run; all must be positive.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Wall time after which the sandbox is stopped, seconds (default 3600).
    pub wall_time_s: Option<u64>,
    /// Seconds a sandbox stopped at its wall time or by a cancel has between `SIGTERM` to its
    /// processes and the kill (default 10; 0 kills at once; at most 600).
    pub stop_grace_s: Option<u64>,
    /// stdout plus stderr kept before the sandbox is killed, bytes (default 16 MiB).
    pub output_bytes: Option<u64>,
    /// CPUs (default 1).
    pub cpus: Option<u32>,
    /// Memory, MiB (default 4096).
    pub memory_mb: Option<u64>,
    /// Processes and threads (default 256).
    pub pids: Option<u32>,
}

/// `[slurm]`: the batch executor.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// Whether jobs may go to Slurm (default false).
    pub enabled: Option<bool>,
    /// Default partition (`--partition`); unset lets Slurm choose.
    pub partition: Option<String>,
    /// Account to charge (`--account`).
    pub account: Option<String>,
    /// Quality of service (`--qos`).
    pub qos: Option<String>,
    /// Directory holding `sbatch`, `squeue`, …; unset searches `/usr/local/bin:/usr/bin:/bin`.
    pub bin_dir: Option<PathBuf>,
    /// `SLURM_CONF` for the clients; unset uses the system's.
    pub slurm_conf: Option<PathBuf>,
    /// Longest wait for one Slurm client call, seconds (default 30).
    pub command_timeout_s: Option<u64>,
}

/// `[files]`: caps of the file tools; all must be positive.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesConfig {
    /// Most bytes one `read_file` returns (default 1 MiB).
    pub max_read_bytes: Option<u64>,
    /// Most bytes one `write_file` accepts (default 8 MiB).
    pub max_write_bytes: Option<u64>,
    /// Most entries `list_directory` returns (default 1000).
    pub max_list_entries: Option<usize>,
    /// Most matches `search_files` returns (default 1000).
    pub max_search_results: Option<usize>,
}

/// `[audit]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// What to redact (default: `write_file` content and secret-looking keys).
    pub redaction: Option<RedactionRules>,
    /// A log file is rotated once it reaches this size, bytes (default 64 MiB).
    pub max_file_bytes: Option<u64>,
    /// Extend the live log file this much at a time ahead of its records, bytes (default 0:
    /// off). Faster durable records, but the live file ends in zeros that `tail -f` and log
    /// shippers following the file do not read past.
    pub preallocate_bytes: Option<u64>,
    /// Export a signed checkpoint this often (`30s`, `10m`, `1h`, `1d`); off when absent.
    pub checkpoint_every: Option<String>,
    /// Where checkpoints go: an absolute file path outside the state directory, or `syslog`.
    pub checkpoint_sink: Option<String>,
    /// `"zstd"`: compress closed segments in the background; `"none"` (the default): keep them.
    pub compress: Option<String>,
    /// Calls that did not run recorded one by one per tenant and minute (default 600); the
    /// rest are summarised. Applies at a reload.
    pub refusals_per_minute: Option<u32>,
}

/// `[host_commands.<key>]`: one command `host_exec` may run, by key.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCommandConfig {
    /// The argv, never a shell string; `argv[0]` must be an absolute path.
    pub argv: Option<Vec<String>>,
    /// Shown to agents in the tool description (default empty).
    pub description: Option<String>,
    /// Killed after this many seconds (default 30).
    pub timeout_s: Option<u64>,
}

/// `[dav]`: WebDAV at `/dav` on the HTTP transports.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DavConfig {
    /// Serve `/dav` (default false).
    pub enabled: Option<bool>,
    /// Most bytes one PUT may bring (default 64 GiB); quotas can lower it.
    pub max_upload_bytes: Option<u64>,
    /// `[dav.extras.<name>]`: host directories served read-only at `/dav/<name>/`.
    #[serde(default)]
    pub extras: std::collections::BTreeMap<String, DavExtraConfig>,
}

/// `[dav.extras.<name>]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DavExtraConfig {
    /// The host directory (absolute).
    pub path: Option<std::path::PathBuf>,
    /// Read-only (default true; `false` is not supported yet).
    pub ro: Option<bool>,
    /// Globs over tenant names that see it (default all).
    pub tenants: Option<Vec<String>>,
}
