//! `hpcgate run`: the gateway over stdio (the default transport).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use rmcp::ServiceExt;

use crate::config::{Environment, load_settings};
use crate::gateway::{Caller, Gateway};
use crate::mcp::McpServer;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// A config file layered over the defaults and `~/.config/hpcgate/config.toml`.
    #[arg(long, env = "HPCGATE_CONFIG")]
    config: Option<PathBuf>,
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&Environment::from_process(args.config))?;
    let caller = Caller {
        tenant: settings.stdio_tenant.clone(),
        principal: local_user(),
    };
    let gateway = Arc::new(Gateway::open(settings)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let service = McpServer::new(gateway, caller)
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not complete the handshake on stdio")?;
        service
            .waiting()
            .await
            .context("the stdio MCP session failed")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The local user, as the principal of stdio calls (and of the local CLI commands).
pub(crate) fn local_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid:{}", rustix::process::geteuid().as_raw()))
}
