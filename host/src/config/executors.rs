//! `[sandbox]` and `[slurm]` resolved into the executors' own types: [`SandboxSettings`]
//! (bwrap path, network, binds, environment allow-list, [`Limits`]) and [`SlurmSettings`]
//! (partition, account, qos and the [`SlurmClientConfig`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hpcgate_executors::sandbox::{
    self, Bind, EnvSpec, Limits, Network, OUTPUT_MOUNT, SandboxSpec, WORKSPACE_MOUNT,
};
use hpcgate_executors::slurm::{SlurmClientConfig, validate};

use super::error::ConfigError;
use super::raw::Config;
use super::settings::{Bad, absolute, positive};

/// `[sandbox]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// Absolute path of bwrap.
    pub bwrap: PathBuf,
    pub network: Network,
    pub extra_ro_binds: Vec<Bind>,
    pub env_allow: Vec<String>,
    pub tmp_size_mb: u64,
    /// Default limits of one run.
    pub limits: Limits,
}

impl SandboxSettings {
    /// A hardened spec for one instance with these settings.
    pub fn spec(&self, workspace: impl Into<PathBuf>, output: impl Into<PathBuf>) -> SandboxSpec {
        let mut spec = SandboxSpec::new(workspace, output);
        spec.bwrap.clone_from(&self.bwrap);
        spec.network = self.network;
        spec.extra_ro_binds.clone_from(&self.extra_ro_binds);
        spec.env = EnvSpec {
            allow: self.env_allow.clone(),
            ..EnvSpec::default()
        };
        spec.tmp_size_mb = self.tmp_size_mb;
        spec.limits = self.limits;
        spec
    }
}

/// `[slurm]`, resolved (only when enabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmSettings {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Where the clients are, `SLURM_CONF`, and the per-call timeout.
    pub client: SlurmClientConfig,
}

/// Where a read-only bind may appear in a sandbox: an absolute path other than `/`, outside
/// the mounts the sandbox makes itself (the instance's directories, `/proc`, `/dev`, `/tmp`),
/// and without `..`, which bwrap would resolve (`/opt/../workspace` is `/workspace`, past a
/// check of the path as written).
pub(super) fn bind_target(key: &str, target: PathBuf, bad: &Bad) -> Result<PathBuf, ConfigError> {
    let reserved = [WORKSPACE_MOUNT, OUTPUT_MOUNT, "/proc", "/dev", "/tmp"]
        .iter()
        .any(|m| target.starts_with(m));
    let climbs = target
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    if !target.is_absolute() || target == Path::new("/") || reserved || climbs {
        return Err(bad(
            key,
            format!(
                "`{}` must be an absolute path other than `/`, without `..`, and outside /workspace, /output, /proc, /dev and /tmp",
                target.display()
            ),
        ));
    }
    Ok(target)
}

pub(super) fn resolve_sandbox(config: &Config, bad: &Bad) -> Result<SandboxSettings, ConfigError> {
    let s = &config.sandbox;
    let bwrap = match &s.bwrap {
        Some(path) => absolute("sandbox.bwrap", path, bad)?,
        None => PathBuf::from(hpcgate_executors::sandbox::DEFAULT_BWRAP),
    };
    let mut extra_ro_binds = Vec::new();
    for (i, b) in s.extra_ro_binds.iter().flatten().enumerate() {
        let key = format!("sandbox.extra_ro_binds[{i}]");
        let source = absolute(&format!("{key}.source"), &b.source, bad)?;
        let target = b.target.clone().unwrap_or_else(|| source.clone());
        let target = bind_target(&format!("{key}.target"), target, bad)?;
        extra_ro_binds.push(Bind { source, target });
    }
    let env_allow = s
        .env_allow
        .clone()
        .unwrap_or_else(|| EnvSpec::default().allow);
    if let Some(name) = env_allow.iter().find(|n| !is_env_name(n)) {
        return Err(bad(
            "sandbox.env_allow",
            format!(
                "`{name}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"
            ),
        ));
    }
    let l = &s.limits;
    let d = Limits::default();
    let limits = Limits {
        wall_time: Duration::from_secs(positive(
            "sandbox.limits.wall_time_s",
            l.wall_time_s,
            d.wall_time.as_secs(),
            bad,
        )?),
        stop_grace: Duration::from_secs(match l.stop_grace_s {
            Some(s) if s > sandbox::MAX_STOP_GRACE_S => {
                return Err(bad(
                    "sandbox.limits.stop_grace_s",
                    format!("must be at most {} (seconds)", sandbox::MAX_STOP_GRACE_S),
                ));
            }
            Some(s) => s,
            None => d.stop_grace.as_secs(),
        }),
        output_bytes: positive(
            "sandbox.limits.output_bytes",
            l.output_bytes,
            d.output_bytes,
            bad,
        )?,
        cpus: positive("sandbox.limits.cpus", l.cpus, d.cpus, bad)?,
        memory_mb: positive("sandbox.limits.memory_mb", l.memory_mb, d.memory_mb, bad)?,
        pids: positive("sandbox.limits.pids", l.pids, d.pids, bad)?,
    };
    Ok(SandboxSettings {
        bwrap,
        network: s.network.unwrap_or_default(),
        extra_ro_binds,
        env_allow,
        tmp_size_mb: positive("sandbox.tmp_size_mb", s.tmp_size_mb, 64, bad)?,
        limits,
    })
}

pub(super) fn resolve_slurm(
    config: &Config,
    bad: &Bad,
) -> Result<Option<SlurmSettings>, ConfigError> {
    let s = &config.slurm;
    if !s.enabled.unwrap_or(false) {
        return Ok(None);
    }
    for (field, value) in [
        ("partition", &s.partition),
        ("account", &s.account),
        ("qos", &s.qos),
    ] {
        if let Some(value) = value
            && let Err(e) = validate::name(field, value)
        {
            return Err(bad(&format!("slurm.{field}"), e.to_string()));
        }
    }
    let mut client = SlurmClientConfig::default();
    if let Some(dir) = &s.bin_dir {
        client.bin_dir = Some(absolute("slurm.bin_dir", dir, bad)?);
    }
    if let Some(conf) = &s.slurm_conf {
        client.slurm_conf = Some(absolute("slurm.slurm_conf", conf, bad)?);
    }
    client.timeout = Duration::from_secs(positive(
        "slurm.command_timeout_s",
        s.command_timeout_s,
        30,
        bad,
    )?);
    Ok(Some(SlurmSettings {
        partition: s.partition.clone(),
        account: s.account.clone(),
        qos: s.qos.clone(),
        client,
    }))
}

pub(super) fn is_env_name(name: &str) -> bool {
    name.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
