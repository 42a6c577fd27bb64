//! `hpcgate config check|show`: validate every configuration layer (and load the policy chain)
//! without starting the gateway, or print the merged configuration.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::out;
use crate::config::{Environment, Layer, Settings, load};
use crate::policy::PolicyEngine;

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Validate every layer, the resolved settings and the policy chain; exit 1 with the
    /// reason (file and dotted key) otherwise.
    Check {
        /// The top layer (default `$HPCGATE_CONFIG`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print `{"ok", "files": [{"path", "read"}], "summary" | "error"}`.
        #[arg(long)]
        json: bool,
    },
    /// Turn an ns-hpc `config.toml` into an hpcgate configuration, with a comment for each
    /// setting that could not be carried over and why. Prints it, or writes `--out`.
    ImportNsHpc {
        /// The ns-hpc configuration file.
        file: PathBuf,
        /// Write the result here (refused if the file exists) instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the merged effective configuration as TOML.
    Show {
        /// The top layer (default `$HPCGATE_CONFIG`).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

pub(crate) fn run(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Check { config, json } => check(&Environment::from_process(config), json),
        ConfigCommand::ImportNsHpc { file, out: target } => import_ns_hpc(&file, target.as_deref()),
        ConfigCommand::Show { config } => {
            let loaded = load(&Environment::from_process(config))?;
            let settings = loaded.settings()?;
            for layer in loaded.layers.iter().filter(|l| l.read) {
                out(format!("# layer: {}", layer.label()));
            }
            if !loaded.merged.contains_key("state_dir") {
                out(format!(
                    "# state_dir unset: `{}`",
                    settings.fixed.state_dir.display()
                ));
            }
            out(toml::to_string(&loaded.merged)?.trim_end());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn import_ns_hpc(file: &Path, target: Option<&Path>) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the ns-hpc configuration `{}`", file.display()))?;
    let imported = crate::config::ns_hpc::import_ns_hpc(&text, file)?;
    match target {
        None => out(imported.text.trim_end()),
        Some(target) => {
            // Written beside the target, then linked into place: the target appears whole or
            // not at all, and an existing file is never replaced (`link` refuses).
            let dir = target.parent().filter(|d| !d.as_os_str().is_empty());
            let mut temp = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))
                .with_context(|| format!("cannot write beside `{}`", target.display()))?;
            temp.write_all(imported.text.as_bytes())
                .and_then(|()| temp.as_file().sync_all())
                .with_context(|| format!("cannot write `{}`", target.display()))?;
            std::fs::hard_link(temp.path(), target).with_context(|| {
                format!(
                    "cannot create `{}`: choose a path that does not exist yet",
                    target.display()
                )
            })?;
            let _ = writeln!(
                std::io::stderr().lock(),
                "wrote `{}`: {} setting(s) not carried over or changed, each explained in a comment; check it with `hpcgate config check --config {}`",
                target.display(),
                imported.notes.len(),
                target.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check(env: &Environment, json: bool) -> anyhow::Result<ExitCode> {
    let result = load(env).map_err(anyhow::Error::from).and_then(|loaded| {
        let settings = loaded.settings()?;
        let engine = PolicyEngine::new(settings.fixed.engine.clone())?;
        let chain = settings.build_chain(&engine)?;
        // Reads the `[auth.jwt]` key files, so a bad key fails here and not at startup.
        crate::auth::Authenticator::from_settings(&settings)?;
        let names: Vec<String> = chain.names().map(str::to_owned).collect();
        Ok((loaded.layers, settings, names))
    });
    let (layers, outcome) = match result {
        Ok((layers, settings, names)) => (layers, Ok((settings, names))),
        Err(e) => (env.layers(), Err(e)),
    };
    let files: Vec<_> = layers
        .iter()
        .map(|l| json!({ "path": l.label(), "read": l.read }))
        .collect();
    match outcome {
        Ok((settings, names)) => {
            if json {
                out(
                    json!({ "ok": true, "files": files, "summary": summary_json(&settings, &names) }),
                );
            } else {
                print_layers(&layers);
                out(format!("ok: {}", summary(&settings, &names)));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let error = format!("{e:#}");
            if json {
                out(json!({ "ok": false, "files": files, "error": error }));
            } else {
                print_layers(&layers);
                out(format!("invalid: {error}"));
            }
            Ok(ExitCode::from(1))
        }
    }
}

fn print_layers(layers: &[Layer]) {
    for layer in layers {
        if layer.read {
            out(format!("read {}", layer.label()));
        } else {
            out(format!("skipped {} (not found)", layer.label()));
        }
    }
}

fn summary(s: &Settings, policies: &[String]) -> String {
    let tenancy = if s.single_tenant() {
        format!("single-tenant (`{}`)", s.stdio_tenant)
    } else {
        format!("{} tenants", s.tenants.len())
    };
    format!(
        "{} policies ({}), state dir `{}`, {tenancy}, sandbox network {}, slurm {}",
        policies.len(),
        policies.join(", "),
        s.fixed.state_dir.display(),
        match s.fixed.sandbox.network {
            hpcgate_executors::sandbox::Network::None => "none",
            hpcgate_executors::sandbox::Network::Host => "host",
        },
        if s.fixed.slurm.is_some() { "on" } else { "off" },
    )
}

fn summary_json(s: &Settings, policies: &[String]) -> serde_json::Value {
    json!({
        "policies": policies,
        "state_dir": s.fixed.state_dir,
        "stdio_tenant": s.stdio_tenant.as_str(),
        "tenants": s.tenants.keys().map(|t| t.as_str()).collect::<Vec<_>>(),
        "result_type": s.result_type,
        "sandbox_network": s.fixed.sandbox.network,
        "slurm": s.fixed.slurm.is_some(),
        "host_commands": s.host_commands.keys().collect::<Vec<_>>(),
        "proxied_mcps": s.fixed.proxied_mcps.keys().collect::<Vec<_>>(),
    })
}
