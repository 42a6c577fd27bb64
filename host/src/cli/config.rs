//! `hpcgate config check|show`: validate every configuration layer (and load the policy chain)
//! without starting the gateway, or print the merged configuration.

use std::path::PathBuf;
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
