//! The resolved [`Settings`]: built once from the raw [`Config`], with absolute paths,
//! [`Duration`]s, enums and the executors' own types, every value validated. The gateway reads
//! only this; errors name the file and the dotted key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hpcgate_executors::files::FileLimits;

use super::auth::{JwtSettings, resolve_jwt, resolve_origins};
use super::code_mode::CodeModeSettings;
use super::dav::DavSettings;
use super::error::ConfigError;
use super::executors::{SandboxSettings, SlurmSettings, resolve_sandbox, resolve_slurm};
use super::layers::{Environment, LoadedConfig};
use super::oauth::{OAuthSettings, resolve_oauth};
use super::origins::Origins;
use super::proxies::{ProxySettings, resolve_proxies};
use super::raw::{Config, EngineConfig, PolicyConfig};
use super::sections::ResultType;
use super::tenants::{self, Tenant};
use crate::audit::{AuditOptions, CheckpointOptions, CheckpointSink};
use crate::policy::{Chain, ChainPolicy, EngineSettings, PolicyEngine};
use crate::state::TenantName;

/// Everything the gateway needs, resolved and validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What only a restart changes: kept whole by a reload.
    pub fixed: FixedSettings,
    /// Tenant of stdio and local CLI callers.
    pub stdio_tenant: TenantName,
    /// `[mcp] result_type`.
    pub result_type: ResultType,
    /// `[mcp] context_dirs` (absolute) and `resource_patterns`: files offered as resources.
    pub context_dirs: Vec<PathBuf>,
    pub resource_patterns: Vec<String>,
    pub files: FileLimits,
    /// `[jobs] retention_days`; `None` keeps finished job records forever.
    pub job_retention: Option<Duration>,
    /// `[code_mode]`: limits on the tool calls a job's code makes.
    pub code_mode: CodeModeSettings,
    /// `host_exec` commands by key.
    pub host_commands: BTreeMap<String, HostCommand>,
    /// Empty: single-tenant, every caller is [`Self::stdio_tenant`].
    pub tenants: BTreeMap<TenantName, Tenant>,
    /// `[auth.jwt]`; `None`: JWTs are not accepted.
    pub jwt: Option<JwtSettings>,
    /// `[auth.oauth]`; `None`: no protected-resource metadata, plain bearer challenges.
    pub oauth: Option<OAuthSettings>,
    /// `[http] allowed_origins`, normalised (`scheme://host[:port]`, lowercase); loopback
    /// origins are allowed besides these.
    pub allowed_origins: Vec<String>,
    /// `[metrics]`.
    pub metrics: super::metrics::MetricsSettings,
    /// `[policy_engine]` defaults applied to each policy.
    pub policy_defaults: EngineConfig,
    /// The chain in order, `proxied_mcps` filters included, module paths absolute.
    pub policies: Vec<PolicyConfig>,
    /// `[dav]`.
    pub dav: DavSettings,
    /// `[audit] refusals_per_minute`: of a tenant's calls that did not run, how many a
    /// minute are recorded one by one (the rest are summarised).
    pub refusals_per_minute: u32,
}

/// The settings a running gateway is built on — where its state lives, its executors, its
/// policy engine and proxied servers — which a reload cannot change: compared whole
/// (`PartialEq`), and kept as they were when a reload brings other values.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedSettings {
    /// Absolute; instances, job records and the audit log live below it.
    pub state_dir: PathBuf,
    /// `<state_dir>/audit`.
    pub audit_dir: PathBuf,
    pub sandbox: SandboxSettings,
    /// `None` when `[slurm] enabled = false`.
    pub slurm: Option<SlurmSettings>,
    pub audit: AuditOptions,
    /// `[policy_engine]` as the engine takes it.
    pub engine: EngineSettings,
    /// `[proxied_mcps]`, resolved, by name.
    pub proxied_mcps: BTreeMap<String, ProxySettings>,
    /// `[telemetry]`; `None`: no traces.
    pub telemetry: Option<super::telemetry::TelemetrySettings>,
    /// `[code_mode] url`: where Slurm jobs with tools reach the gateway; `None`: they cannot.
    pub code_mode_url: Option<String>,
    /// `[http] max_connections`, `max_connections_per_peer` and `idle_timeout_s`.
    pub connections: ConnectionLimits,
    /// `[http] allowed_hosts` and `[auth.oauth] resource`'s host, lowercase, no brackets.
    pub allowed_hosts: Vec<String>,
}

/// How many connections a listener keeps open at once, how many of them one TCP peer may
/// hold, and how long one may be idle: no request in flight and nothing written to it (so
/// also how long a request's headers may take).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max: usize,
    /// Of `max`, for one peer: a local user (Unix socket, loopback), else an IPv4 address
    /// or an IPv6 /64.
    pub per_peer: usize,
    pub idle: Duration,
}

impl FixedSettings {
    /// The names of the settings that differ in `other`, for "restart to apply" messages.
    pub fn differences(&self, other: &FixedSettings) -> Vec<&'static str> {
        // Destructured, so that a new field cannot be left out of the comparison.
        let FixedSettings {
            state_dir,
            audit_dir,
            sandbox,
            slurm,
            audit,
            engine,
            proxied_mcps,
            telemetry,
            code_mode_url,
            connections,
            allowed_hosts,
        } = self;
        [
            ("state_dir", *state_dir != other.state_dir),
            ("audit_dir", *audit_dir != other.audit_dir),
            ("sandbox", *sandbox != other.sandbox),
            ("slurm", *slurm != other.slurm),
            ("audit", *audit != other.audit),
            ("engine", *engine != other.engine),
            ("proxied_mcps", *proxied_mcps != other.proxied_mcps),
            ("telemetry", *telemetry != other.telemetry),
            ("code_mode.url", *code_mode_url != other.code_mode_url),
            (
                "http",
                *connections != other.connections || *allowed_hosts != other.allowed_hosts,
            ),
        ]
        .into_iter()
        .filter_map(|(name, differs)| differs.then_some(name))
        .collect()
    }
}

/// One `[host_commands.<key>]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    /// `argv[0]` is absolute.
    pub argv: Vec<String>,
    pub description: String,
    pub timeout: Duration,
}

impl LoadedConfig {
    /// Resolves the merged layers.
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        Settings::resolve(&self.config, &self.env, &self.origins)
    }
}

/// Loads every layer and resolves them.
pub fn load_settings(env: &Environment) -> Result<Settings, ConfigError> {
    super::layers::load(env)?.settings()
}

impl Settings {
    /// Validates `config` and resolves it; `env` gives the default state directory and
    /// `origins` names files in errors.
    pub fn resolve(
        config: &Config,
        env: &Environment,
        origins: &Origins,
    ) -> Result<Settings, ConfigError> {
        let bad = |key: &str, message: String| ConfigError::Invalid {
            file: origins.file_of(key).to_owned(),
            key: key.to_owned(),
            message,
        };
        let stdio_tenant = TenantName::parse(config.stdio_tenant.as_deref().unwrap_or("default"))
            .map_err(|e| bad("stdio_tenant", e.to_string()))?;
        let (context_dirs, resource_patterns) = resolve_resources(config, &bad)?;
        let tenants =
            tenants::resolve(&config.tenants).map_err(|(key, message)| bad(&key, message))?;
        let jwt = match &config.auth.jwt {
            Some(raw) => Some(resolve_jwt(raw, &tenants, &bad)?),
            None => None,
        };
        let oauth = match &config.auth.oauth {
            Some(raw) => Some(resolve_oauth(raw, jwt.as_ref(), &bad)?),
            None => None,
        };
        let policies = config.policies_with_proxy_filters();
        check_policies(config, &policies, &bad)?;
        let fixed = FixedSettings::resolve(config, env, &bad)?;
        super::hidden::check_sandboxes_cannot_see(&fixed, jwt.as_ref(), &bad)?;
        (super::caps::check_caps(&policies, &fixed.sandbox.limits))
            .map_err(|(key, message)| bad(&key, message))?;
        Ok(Settings {
            fixed,
            stdio_tenant,
            result_type: config.mcp.result_type.unwrap_or_default(),
            context_dirs,
            resource_patterns,
            files: resolve_files(config, &bad)?,
            job_retention: match config.jobs.retention_days.unwrap_or(30) {
                0 => None,
                days => Some(Duration::from_secs(days * 24 * 3600)),
            },
            code_mode: super::code_mode::resolve_code_mode(&config.code_mode, &bad)?,
            host_commands: resolve_host_commands(config, &bad)?,
            tenants,
            jwt,
            oauth,
            allowed_origins: resolve_origins(&config.http, &bad)?,
            metrics: super::metrics::resolve_metrics(&config.metrics, &bad)?,
            policy_defaults: config.policy_engine.clone(),
            policies,
            dav: super::dav::resolve_dav(config, &bad)?,
            refusals_per_minute: positive(
                "audit.refusals_per_minute",
                config.audit.refusals_per_minute,
                600,
                &bad,
            )?,
        })
    }

    /// The chain's policies, loaded through `engine` but not yet configured.
    pub fn chain_policies(&self, engine: &PolicyEngine) -> anyhow::Result<Vec<ChainPolicy>> {
        super::chain::load_policies(
            &self.policy_defaults,
            self.policies.clone(),
            engine,
            Path::new("/"),
        )
    }

    /// The configured chain (each policy's settings checked by its `configure`).
    pub fn build_chain(&self, engine: &PolicyEngine) -> anyhow::Result<Chain> {
        Ok(Chain::new(self.chain_policies(engine)?)?)
    }

    /// True when no `[tenants]` are configured.
    pub fn single_tenant(&self) -> bool {
        self.tenants.is_empty()
    }
}

impl FixedSettings {
    fn resolve(
        config: &Config,
        env: &Environment,
        bad: &Bad,
    ) -> Result<FixedSettings, ConfigError> {
        let state_dir = match &config.state_dir {
            Some(dir) => absolute("state_dir", dir, bad)?,
            None => env.default_state_dir().ok_or(ConfigError::NoHome)?,
        };
        let sandbox = resolve_sandbox(config, bad)?;
        let checkpoints = resolve_checkpoints(config, &state_dir, bad)?;
        Ok(FixedSettings {
            audit_dir: state_dir.join("audit"),
            state_dir,
            slurm: resolve_slurm(config, bad)?,
            proxied_mcps: resolve_proxies(&config.proxied_mcps, &sandbox, bad)?,
            sandbox,
            audit: AuditOptions {
                max_file_bytes: positive(
                    "audit.max_file_bytes",
                    config.audit.max_file_bytes,
                    64 << 20,
                    bad,
                )?,
                preallocate_bytes: config.audit.preallocate_bytes.unwrap_or(0),
                redaction: config.audit.redaction.clone().unwrap_or_default(),
                checkpoints,
                compress: resolve_compress(config, bad)?,
            },
            engine: config.engine_settings(),
            telemetry: super::telemetry::resolve_telemetry(&config.telemetry, bad)?,
            code_mode_url: super::code_mode::resolve_url(
                &config.code_mode,
                config.tenants.is_empty(),
                bad,
            )?,
            connections: resolve_connections(&config.http, bad)?,
            allowed_hosts: super::auth::resolve_hosts(config, bad)?,
        })
    }
}

/// `[http] max_connections`, `max_connections_per_peer` (at most the former; by default 128
/// or the former if less) and `idle_timeout_s`.
fn resolve_connections(
    http: &super::auth::HttpConfig,
    bad: &Bad,
) -> Result<ConnectionLimits, ConfigError> {
    let max = positive("http.max_connections", http.max_connections, 512, bad)?;
    let per_peer = positive(
        "http.max_connections_per_peer",
        http.max_connections_per_peer,
        128.min(max),
        bad,
    )?;
    if per_peer > max {
        return Err(bad(
            "http.max_connections_per_peer",
            format!("must be at most `http.max_connections` ({max})"),
        ));
    }
    let idle = positive("http.idle_timeout_s", http.idle_timeout_s, 60, bad)?;
    Ok(ConnectionLimits {
        max,
        per_peer,
        idle: Duration::from_secs(idle),
    })
}

/// `[audit] compress`: `"zstd"` or `"none"` (the default).
fn resolve_compress(config: &Config, bad: &Bad) -> Result<bool, ConfigError> {
    match config.audit.compress.as_deref() {
        None | Some("none") => Ok(false),
        Some("zstd") => Ok(true),
        Some(other) => Err(bad(
            "audit.compress",
            format!(
                "`{other}` is not a compression; write \"zstd\" (compress closed segments) or \"none\""
            ),
        )),
    }
}

/// `[audit] checkpoint_every` and `checkpoint_sink`: both or neither; the sink outside the
/// state directory (a checkpoint the gateway's user could rewrite proves nothing).
fn resolve_checkpoints(
    config: &Config,
    state_dir: &Path,
    bad: &Bad,
) -> Result<Option<CheckpointOptions>, ConfigError> {
    let (every, sink) = match (
        &config.audit.checkpoint_every,
        &config.audit.checkpoint_sink,
    ) {
        (None, None) => return Ok(None),
        (Some(every), Some(sink)) => (every, sink),
        (Some(_), None) => {
            return Err(bad(
                "audit.checkpoint_sink",
                "`checkpoint_every` needs a `checkpoint_sink`: an absolute file path outside the state directory, or \"syslog\"".to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                "audit.checkpoint_every",
                "`checkpoint_sink` needs a `checkpoint_every`, like \"10m\"".to_owned(),
            ));
        }
    };
    let every = parse_interval(every).ok_or_else(|| {
        bad(
            "audit.checkpoint_every",
            format!("`{every}` is not an interval; write a positive number and a unit, like \"30s\", \"10m\", \"1h\" or \"1d\""),
        )
    })?;
    let sink = if sink == "syslog" {
        CheckpointSink::Syslog
    } else {
        let path = absolute("audit.checkpoint_sink", Path::new(sink), bad)?;
        let (resolved, state) = (resolve_existing(&path), resolve_existing(state_dir));
        if resolved.starts_with(&state) {
            return Err(bad(
                "audit.checkpoint_sink",
                format!(
                    "`{}` is inside the state directory `{}`, where whoever can rewrite the log can rewrite its checkpoints too; put it elsewhere (a file only an auditor can truncate, e.g. `chattr +a`), or use \"syslog\"",
                    path.display(),
                    state_dir.display()
                ),
            ));
        }
        CheckpointSink::File(path)
    };
    Ok(Some(CheckpointOptions { every, sink }))
}

/// `30s`, `10m`, `1h`, `1d`.
fn parse_interval(text: &str) -> Option<Duration> {
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(unit)
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
}

/// `path` with its longest existing ancestor resolved (symlinks, `..`), the rest appended.
fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

/// `[files]`: the file tools' limits.
fn resolve_files(config: &Config, bad: &Bad) -> Result<FileLimits, ConfigError> {
    let f = &config.files;
    let defaults = FileLimits::default();
    Ok(FileLimits {
        max_read_bytes: positive(
            "files.max_read_bytes",
            f.max_read_bytes,
            defaults.max_read_bytes,
            bad,
        )?,
        max_write_bytes: positive(
            "files.max_write_bytes",
            f.max_write_bytes,
            defaults.max_write_bytes,
            bad,
        )?,
        max_list_entries: positive(
            "files.max_list_entries",
            f.max_list_entries,
            defaults.max_list_entries,
            bad,
        )?,
        max_search_results: positive(
            "files.max_search_results",
            f.max_search_results,
            defaults.max_search_results,
            bad,
        )?,
        ..defaults
    })
}

/// `[host_commands.<key>]`: absolute argv, never looked up in `PATH`.
fn resolve_host_commands(
    config: &Config,
    bad: &Bad,
) -> Result<BTreeMap<String, HostCommand>, ConfigError> {
    let mut host_commands = BTreeMap::new();
    for (key, raw) in &config.host_commands {
        let at = |field: &str| format!("host_commands.{key}{field}");
        if !is_key(key) {
            return Err(bad(
                &at(""),
                "use 1–64 lowercase letters, digits, `-` or `_` as the key".to_owned(),
            ));
        }
        let argv = raw.argv.clone().unwrap_or_default();
        match argv.first() {
            None => {
                return Err(bad(
                    &at(".argv"),
                    "give the command as a non-empty argv list, e.g. [\"/usr/bin/quota\", \"-s\"]"
                        .to_owned(),
                ));
            }
            Some(program) if !Path::new(program).is_absolute() => {
                return Err(bad(
                    &at(".argv"),
                    format!(
                        "`{program}` must be an absolute path: host commands are never looked up in `PATH`"
                    ),
                ));
            }
            Some(_) => {}
        }
        let timeout_s = positive(&at(".timeout_s"), raw.timeout_s, 30, bad)?;
        host_commands.insert(
            key.clone(),
            HostCommand {
                argv,
                description: raw.description.clone().unwrap_or_default(),
                timeout: Duration::from_secs(timeout_s),
            },
        );
    }
    Ok(host_commands)
}

/// `[mcp] context_dirs` and `resource_patterns`: the documents offered as resources.
fn resolve_resources(
    config: &Config,
    bad: &Bad,
) -> Result<(Vec<PathBuf>, Vec<String>), ConfigError> {
    let context_dirs = config.mcp.context_dirs.clone().unwrap_or_default();
    if let Some(dir) = context_dirs.iter().find(|d| !d.is_absolute()) {
        return Err(bad(
            "mcp.context_dirs",
            format!(
                "`{}` must be an absolute path (or relative to the config file)",
                dir.display()
            ),
        ));
    }
    let resource_patterns = config
        .mcp
        .resource_patterns
        .clone()
        .unwrap_or_else(|| vec!["*.md".to_owned()]);
    if let Err(e) = hpcgate_policy_sdk::glob::GlobSet::new(&resource_patterns) {
        return Err(bad("mcp.resource_patterns", e.to_string()));
    }
    Ok((context_dirs, resource_patterns))
}

pub(super) type Bad<'a> = dyn Fn(&str, String) -> ConfigError + 'a;

fn check_policies(
    config: &Config,
    policies: &[PolicyConfig],
    bad: &Bad,
) -> Result<(), ConfigError> {
    let e = &config.policy_engine;
    positive("policy_engine.deadline_ms", e.deadline_ms, 100, bad)?;
    positive("policy_engine.memory_limit_mb", e.memory_limit_mb, 32, bad)?;
    for (i, p) in policies.iter().enumerate() {
        let key = |field: &str| format!("policies[{i}].{field}");
        if p.name.trim().is_empty() {
            return Err(bad(
                &key("name"),
                "must not be empty; it names the policy in decisions and the audit log".to_owned(),
            ));
        }
        if policies[..i].iter().any(|q| q.name == p.name) {
            return Err(bad(
                &key("name"),
                format!("two policies are named `{}`; names must be unique", p.name),
            ));
        }
        positive(&key("deadline_ms"), p.deadline_ms, 1, bad)?;
        positive(&key("memory_limit_mb"), p.memory_limit_mb, 1, bad)?;
    }
    Ok(())
}

pub(super) fn absolute(key: &str, path: &Path, bad: &Bad) -> Result<PathBuf, ConfigError> {
    if path.is_absolute() {
        Ok(path.to_owned())
    } else {
        Err(bad(
            key,
            format!(
                "`{}` must be an absolute path (or start with `~/`, or be relative to its config file)",
                path.display()
            ),
        ))
    }
}

pub(super) fn positive<T: Copy + PartialEq + Default>(
    key: &str,
    value: Option<T>,
    default: T,
    bad: &Bad,
) -> Result<T, ConfigError> {
    match value {
        Some(v) if v == T::default() => Err(bad(key, "must be positive".to_owned())),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

fn is_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
