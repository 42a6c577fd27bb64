//! The typed description of one bubblewrap sandbox: what it sees, who it runs as, its limits.
//!
//! A [`SandboxSpec`] is pure data. [`super::bwrap_argv`] turns it into bwrap's argv (the same
//! argv runs on the login node and, through Slurm, on a compute node); the runners in this
//! module add what argv cannot express (rlimits, cgroups, the host user, closed fds).
//!
//! The sandbox view is fixed: the instance workspace read-write at `/workspace`, the instance
//! output read-write at `/output`, optional read-only extras, read-only system directories, a
//! fresh `/proc`, `/dev` and a size-capped `/tmp`. Nothing else of the host is visible.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where the workspace is mounted inside every sandbox.
pub const WORKSPACE_MOUNT: &str = "/workspace";
/// Where the instance output directory is mounted inside every sandbox.
pub const OUTPUT_MOUNT: &str = "/output";
/// Debian's bubblewrap.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";

/// Everything needed to build one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// The bwrap binary (absolute path; never looked up in `PATH`).
    pub bwrap: PathBuf,
    /// Host directory bound read-write at [`WORKSPACE_MOUNT`].
    pub workspace: PathBuf,
    /// Host directory bound read-write at [`OUTPUT_MOUNT`].
    pub output: PathBuf,
    /// Additional host paths bound read-only (e.g. shared datasets).
    pub extra_ro_binds: Vec<Bind>,
    /// Read-only system mounts (from config; [`SystemMount::debian_defaults`] otherwise).
    pub system: Vec<SystemMount>,
    /// Network access: none (a private namespace with only loopback) or the host's.
    pub network: Network,
    /// Environment: nothing of the caller's environment passes unless allow-listed.
    pub env: EnvSpec,
    /// User and group ids as seen inside the sandbox.
    pub identity: SandboxIdentity,
    /// Host user to become before starting bwrap; only possible when the caller is root.
    /// `None` runs bwrap as the caller. A dedicated uid per tenant or job is what makes
    /// `RLIMIT_NPROC` meaningful when no cgroup is available.
    pub run_as: Option<HostUser>,
    /// Size of each of the private `/tmp` and `/dev/shm` tmpfs, in MiB. Their pages are
    /// memory too: without a cgroup the memory watchdog does not count them.
    pub tmp_size_mb: u64,
    /// Hostname inside the sandbox.
    pub hostname: String,
    /// Resource limits enforced by the runners.
    pub limits: Limits,
}

impl SandboxSpec {
    /// A spec with the hardened defaults: no network, no environment beyond `PATH`/`LANG`,
    /// uid/gid 1000 inside, Debian system mounts, 64 MiB `/tmp` and [`Limits::default`].
    pub fn new(workspace: impl Into<PathBuf>, output: impl Into<PathBuf>) -> Self {
        SandboxSpec {
            bwrap: PathBuf::from(DEFAULT_BWRAP),
            workspace: workspace.into(),
            output: output.into(),
            extra_ro_binds: Vec::new(),
            system: SystemMount::debian_defaults(),
            network: Network::None,
            env: EnvSpec::default(),
            identity: SandboxIdentity::default(),
            run_as: None,
            tmp_size_mb: 64,
            hostname: "sandbox".to_owned(),
            limits: Limits::default(),
        }
    }

    /// Host paths the sandbox can write to or read: job directories must live outside them.
    pub fn host_sources(&self) -> impl Iterator<Item = &Path> {
        [self.workspace.as_path(), self.output.as_path()]
            .into_iter()
            .chain(self.extra_ro_binds.iter().map(|b| b.source.as_path()))
    }
}

/// A host path made visible inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    /// Absolute host path.
    pub source: PathBuf,
    /// Absolute path inside the sandbox.
    pub target: PathBuf,
}

/// One read-only system mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SystemMount {
    /// `--ro-bind` (or `--ro-bind-try` when `optional`) of a host path at the same place.
    RoBind { path: PathBuf, optional: bool },
    /// `--symlink target link` (e.g. `/bin` → `usr/bin` on merged-/usr Debian).
    Symlink { target: PathBuf, link: PathBuf },
}

impl SystemMount {
    /// Debian defaults: `/usr` read-only, `/bin`, `/sbin`, `/lib`, `/lib64` as on the host
    /// (symlinks into `/usr` on merged-/usr systems, read-only binds otherwise), and only the
    /// `/etc` files programs need to start. `/etc` as a whole is never bound: `shadow`,
    /// `ssh/` and tokens stay invisible.
    pub fn debian_defaults() -> Vec<SystemMount> {
        let mut mounts = vec![SystemMount::RoBind {
            path: PathBuf::from("/usr"),
            optional: false,
        }];
        for dir in ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"] {
            let path = Path::new(dir);
            match std::fs::read_link(path) {
                Ok(target) => mounts.push(SystemMount::Symlink {
                    target,
                    link: path.to_owned(),
                }),
                Err(_) => mounts.push(SystemMount::RoBind {
                    path: path.to_owned(),
                    optional: true,
                }),
            }
        }
        for etc in ETC_ESSENTIALS {
            mounts.push(SystemMount::RoBind {
                path: PathBuf::from(etc),
                optional: true,
            });
        }
        mounts
    }
}

/// `/etc` entries a typical program needs (dynamic loader, users, locale, time zone,
/// alternatives, TLS roots). `resolv.conf` is added only with host networking.
pub const ETC_ESSENTIALS: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/localtime",
    "/etc/locale.alias",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/perl",
];

/// Network access of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// A private network namespace: only a loopback that reaches nothing of the host.
    #[default]
    None,
    /// The host's network namespace (`--share-net`), including the host's loopback.
    Host,
}

/// The sandbox environment: starts empty (`--clearenv`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    /// Names copied from the caller's environment when present (e.g. `LANG`).
    pub allow: Vec<String>,
    /// Variables set explicitly; they win over allow-listed ones. Values appear in bwrap's
    /// argv on the host, so never put secrets here.
    pub set: Vec<(String, String)>,
}

impl Default for EnvSpec {
    fn default() -> Self {
        EnvSpec {
            allow: vec!["LANG".to_owned(), "LC_ALL".to_owned(), "TZ".to_owned()],
            set: vec![(
                "PATH".to_owned(),
                "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".to_owned(),
            )],
        }
    }
}

/// User and group ids inside the sandbox (mapped onto the host user that runs bwrap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxIdentity {
    pub uid: u32,
    pub gid: u32,
}

impl Default for SandboxIdentity {
    fn default() -> Self {
        SandboxIdentity {
            uid: 1000,
            gid: 1000,
        }
    }
}

/// A host user and group (numeric, never looked up by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostUser {
    pub uid: u32,
    pub gid: u32,
}

/// Resource limits of one sandbox run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock time after which the sandbox is stopped.
    pub wall_time: Duration,
    /// How long a sandbox stopped at its wall time or by a cancel has between `SIGTERM` to
    /// its processes and the kill of all of it; zero kills at once.
    #[serde(default)]
    pub stop_grace: Duration,
    /// Bytes of stdout plus stderr kept; more kills the sandbox (reason `output_cap`).
    pub output_bytes: u64,
    /// CPUs (cgroup `cpu.max`; with rlimits only CPU seconds are capped).
    pub cpus: u32,
    /// Memory in MiB (cgroup `memory.max`, or a resident-set watchdog plus `RLIMIT_AS`).
    pub memory_mb: u64,
    /// Processes and threads (cgroup `pids.max`, or `RLIMIT_NPROC` of the host user).
    pub pids: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            wall_time: Duration::from_secs(3600),
            stop_grace: Duration::from_secs(10),
            output_bytes: 16 * 1024 * 1024,
            cpus: 1,
            memory_mb: 4096,
            pids: 256,
        }
    }
}
