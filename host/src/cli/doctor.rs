//! `hpcgate doctor`: is this host ready to run the gateway with this configuration?
//!
//! Checks, in order: bwrap present and ≥ 0.8; a real `/bin/true` in the hardened sandbox
//! (`run_sync`, the same path jobs take); user namespaces; which mechanism enforces limits
//! (cgroup v2 when delegated, else cgroup v1 per controller, else rlimits — reported, never a
//! failure); the state directory (private, ours) and the audit directory (writable); the
//! policy chain loads; and,
//! only when `[slurm] enabled`, the Slurm clients exist and `sinfo` answers — a host without
//! Slurm is not a broken host; and each `[proxied_mcps]` server answers `tools/list` in a
//! throwaway sandbox; the `[telemetry]` collector accepts connections (a warning if not). Each
//! line says what is wrong and what to do; exit 1 when any required check fails.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;

mod proxies;
mod system;
mod telemetry;

use super::out;
use crate::config::{Environment, Settings, load};
use crate::policy::PolicyEngine;
use system::{bwrap_version, limits, sandbox_run, user_namespaces};

/// `hpcgate doctor` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// The top configuration layer (default `$HPCGATE_CONFIG`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print `{"ok", "checks": [{"name", "status", "detail", "hint"}]}`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Status {
    Pass,
    /// Works, with a caveat worth knowing; does not fail the doctor.
    Warn,
    Fail,
    /// Not applicable with this configuration.
    Skip,
}

#[derive(Debug, Serialize)]
pub(super) struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    /// What to do (for `warn` and `fail`).
    hint: Option<String>,
}

pub(super) fn pass(name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        name,
        status: Status::Pass,
        detail: detail.into(),
        hint: None,
    }
}

pub(super) fn fail(
    name: &'static str,
    detail: impl Into<String>,
    hint: impl Into<String>,
) -> Check {
    Check {
        name,
        status: Status::Fail,
        detail: detail.into(),
        hint: Some(hint.into()),
    }
}

pub(super) fn warn(
    name: &'static str,
    detail: impl Into<String>,
    hint: impl Into<String>,
) -> Check {
    Check {
        name,
        status: Status::Warn,
        detail: detail.into(),
        hint: Some(hint.into()),
    }
}

pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let env = Environment::from_process(args.config);
    let checks = match load(&env).and_then(|loaded| loaded.settings()) {
        Ok(settings) => checks(&settings),
        Err(e) => vec![fail(
            "config",
            e.to_string(),
            "fix the configuration; `hpcgate config check` lists the files it read",
        )],
    };
    let ok = !checks.iter().any(|c| c.status == Status::Fail);
    if args.json {
        out(json!({ "ok": ok, "checks": checks }));
    } else {
        for c in &checks {
            let mark = match c.status {
                Status::Pass => "✓",
                Status::Warn => "!",
                Status::Fail => "✗",
                Status::Skip => "-",
            };
            match &c.hint {
                Some(hint) => out(format!("{mark} {}: {} — {hint}", c.name, c.detail)),
                None => out(format!("{mark} {}: {}", c.name, c.detail)),
            }
        }
        let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
        out(if ok {
            "all required checks passed".to_owned()
        } else {
            format!("{failed} required check(s) failed; fix them and run `hpcgate doctor` again")
        });
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn checks(settings: &Settings) -> Vec<Check> {
    let mut checks = vec![bwrap_version(&settings.fixed.sandbox.bwrap)];
    let run = if checks[0].status == Status::Pass {
        sandbox_run(settings)
    } else {
        Err(fail(
            "sandbox",
            "not tried: bwrap is not usable",
            "fix the bwrap check first",
        ))
    };
    let result = match run {
        Ok(result) => {
            checks.push(pass(
                "sandbox",
                format!(
                    "`/bin/true` ran in the hardened sandbox in {} ms",
                    result.duration.as_millis()
                ),
            ));
            Some(result)
        }
        Err(check) => {
            checks.push(check);
            None
        }
    };
    checks.push(user_namespaces());
    checks.push(limits(result.as_ref()));
    checks.push(state_dir(&settings.fixed.state_dir));
    checks.push(audit_dir(
        &settings.fixed.audit_dir,
        &settings.fixed.state_dir,
        settings.fixed.audit.checkpoints.is_some(),
    ));
    checks.push(policies(settings));
    checks.push(slurm(settings));
    checks.push(proxies::proxied_mcps(settings));
    checks.push(telemetry::telemetry(settings));
    checks
}

fn state_dir(dir: &Path) -> Check {
    const NAME: &str = "state dir";
    let euid = rustix::process::geteuid().as_raw();
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => fail(
            NAME,
            format!("`{}` is not a directory", dir.display()),
            "remove it or set `state_dir` to a directory",
        ),
        Ok(m) if m.uid() != euid => fail(
            NAME,
            format!(
                "`{}` is owned by uid {}, not by us (uid {euid})",
                dir.display(),
                m.uid()
            ),
            format!("`chown {euid} {}` or set `state_dir`", dir.display()),
        ),
        Ok(m) if m.permissions().mode() & 0o077 != 0 => fail(
            NAME,
            format!(
                "`{}` has mode {:o}: other users can look into tenants' files",
                dir.display(),
                m.permissions().mode() & 0o777
            ),
            format!("`chmod 700 {}`", dir.display()),
        ),
        Ok(_) if !writable(dir) => fail(
            NAME,
            format!("`{}` is not writable", dir.display()),
            format!("`chmod u+rwx {}`", dir.display()),
        ),
        Ok(_) => pass(
            NAME,
            format!("`{}` exists, mode 700, owned by us", dir.display()),
        ),
        Err(_) => match dir.ancestors().skip(1).find(|a| a.exists()) {
            Some(parent) if writable(parent) => pass(
                NAME,
                format!(
                    "`{}` will be created with mode 700 (under `{}`)",
                    dir.display(),
                    parent.display()
                ),
            ),
            _ => fail(
                NAME,
                format!("`{}` does not exist and cannot be created", dir.display()),
                format!(
                    "`mkdir -p -m 700 {}` or set `state_dir` to a writable place",
                    dir.display()
                ),
            ),
        },
    }
}

fn audit_dir(dir: &Path, state: &Path, checkpoints: bool) -> Check {
    const NAME: &str = "audit dir";
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() && writable(dir) => match audit_keys(dir, checkpoints) {
            Some((problem, hint)) => fail(NAME, problem, hint),
            None => pass(NAME, format!("`{}` is writable", dir.display())),
        },
        Ok(_) => fail(
            NAME,
            format!("`{}` is not a writable directory", dir.display()),
            format!(
                "`chmod u+rwx {}` (the gateway refuses calls it cannot audit)",
                dir.display()
            ),
        ),
        Err(_) if (state.is_dir() && writable(state)) || !state.exists() => {
            pass(NAME, format!("`{}` will be created", dir.display()))
        }
        Err(_) => fail(
            NAME,
            format!("`{}` cannot be created", dir.display()),
            "fix the state dir first",
        ),
    }
}

/// What is wrong with the log's key files that exist and that the gateway would load (the
/// redaction key; the checkpoint signing key when checkpoints are exported), which it would
/// refuse to start with: the problem and what to do.
fn audit_keys(dir: &Path, checkpoints: bool) -> Option<(String, String)> {
    let redaction = dir.join(crate::audit::REDACTION_KEY_FILE);
    let signing = dir.join(crate::audit::KEY_FILE);
    let problem = if redaction.exists() {
        crate::audit::load_redaction_key(&redaction).err()
    } else {
        None
    };
    let problem = problem.or_else(|| {
        (checkpoints && signing.exists())
            .then(|| crate::audit::CheckpointKey::load(dir).err())
            .flatten()
    })?;
    let hint = if crate::audit::is_exposed_key(&problem) {
        "`chmod 600` it, and consider it leaked: a new key (the file moved aside) cannot check what the old one digested or signed"
    } else {
        "restore it from a backup of the state directory; moved aside, a new key is made, which cannot check what the old one digested or signed"
    };
    Some((problem.to_string(), hint.to_owned()))
}

fn writable(path: &Path) -> bool {
    rustix::fs::access(
        path,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

fn policies(settings: &Settings) -> Check {
    const NAME: &str = "policies";
    let chain = PolicyEngine::new(settings.fixed.engine.clone())
        .and_then(|engine| settings.build_chain(&engine));
    match chain {
        Ok(chain) => {
            let names: Vec<&str> = chain.names().collect();
            if names.is_empty() {
                return warn(
                    NAME,
                    "no policies are configured: every call is allowed",
                    "add `[[policies]]` (the built-in defaults have tools, paths and caps)",
                );
            }
            pass(
                NAME,
                format!(
                    "{} load and accept their settings: {}",
                    names.len(),
                    names.join(", ")
                ),
            )
        }
        Err(e) => fail(
            NAME,
            format!("{e:#}"),
            "fix the policy named above; `hpcgate policy check <module> --settings '<json>'` shows the details",
        ),
    }
}

/// The Slurm clients the gateway uses.
const SLURM_CLIENTS: &[&str] = &["sbatch", "squeue", "scontrol", "scancel", "sinfo"];

fn slurm(settings: &Settings) -> Check {
    const NAME: &str = "slurm";
    let Some(slurm) = &settings.fixed.slurm else {
        return Check {
            name: NAME,
            status: Status::Skip,
            detail: "not enabled (`[slurm] enabled = false`); not checked".to_owned(),
            hint: None,
        };
    };
    let client = &slurm.client;
    let dirs: Vec<PathBuf> = match &client.bin_dir {
        Some(dir) => vec![dir.clone()],
        None => std::env::split_paths(&client.path).collect(),
    };
    let missing: Vec<&str> = SLURM_CLIENTS
        .iter()
        .copied()
        .filter(|p| !dirs.iter().any(|d| executable(&d.join(p))))
        .collect();
    let place = match &client.bin_dir {
        Some(dir) => format!("`slurm.bin_dir` = `{}`", dir.display()),
        None => format!("`{}`", client.path.to_string_lossy()),
    };
    if !missing.is_empty() {
        return fail(
            NAME,
            format!("{} not found in {place}", missing.join(", ")),
            "install the Slurm client commands, or set `slurm.bin_dir` to the directory that holds them, or set `[slurm] enabled = false`",
        );
    }
    match client.run("sinfo", &["-h".into(), "-o".into(), "%P".into()]) {
        Ok(o) if o.success => {
            let partitions: Vec<&str> = o.stdout.split_whitespace().collect();
            pass(
                NAME,
                format!(
                    "clients found in {place}; `sinfo` answers: partitions {}",
                    partitions.join(", ")
                ),
            )
        }
        Ok(o) => fail(
            NAME,
            format!("`sinfo` failed: {}", o.stderr),
            "check that slurmctld is running and reachable, and `slurm.slurm_conf`",
        ),
        Err(e) => fail(
            NAME,
            format!("`sinfo`: {e}"),
            "check that slurmctld is running and reachable, and `slurm.slurm_conf`",
        ),
    }
}

fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
