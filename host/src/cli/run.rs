//! `hpcgate run`: the gateway as an MCP server over stdio (the default), streamable HTTP on a
//! loopback port, or the same HTTP app on a Unix socket (`crate::http`).

use std::io::Write as _;
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use rmcp::ServiceExt;

use crate::config::{Environment, load_settings};
use crate::gateway::{Caller, Gateway};
use crate::http::{Identity, Listen, shutdown_signal};
use crate::mcp::McpServer;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// A config file layered over the defaults and `~/.config/hpcgate/config.toml`.
    #[arg(long, env = "HPCGATE_CONFIG")]
    config: Option<PathBuf>,
    /// `stdio` (default), `streamable-http` (implied by `--uds`), or `sse`: the legacy
    /// HTTP+SSE transport (`GET /sse`, `POST /messages`) for older clients.
    #[arg(long, value_enum)]
    transport: Option<Transport>,
    /// Address to listen on for streamable HTTP; loopback only unless tenants are configured.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port for streamable HTTP; 0 picks a free one (the address is printed on stderr).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Where MCP is mounted on the HTTP app (`/healthz` is beside it).
    #[arg(long, default_value = "/mcp")]
    path: String,
    /// Serve the HTTP app on this Unix socket (mode 0600) instead of a TCP port.
    #[arg(long, value_name = "PATH")]
    uds: Option<PathBuf>,
    /// Also serve `GET /metrics` on this address (e.g. `127.0.0.1:9464`), for any transport;
    /// beyond loopback it needs `[metrics] token_sha256`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    Stdio,
    StreamableHttp,
    Sse,
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let transport = match (args.transport, &args.uds) {
        (Some(Transport::Stdio), Some(_)) => {
            bail!("`--uds` serves streamable HTTP: drop `--transport stdio` or `--uds`")
        }
        (None, Some(_)) => Transport::StreamableHttp,
        (transport, None) => transport.unwrap_or(Transport::Stdio),
        (Some(transport), Some(_)) => transport,
    };
    let env = Environment::from_process(args.config);
    let settings = load_settings(&env)?;
    let identity = Identity::from_settings(&settings);
    let listen = match args.uds {
        Some(path) => Listen::Unix(path),
        None => Listen::Tcp {
            host: args.host,
            port: args.port,
        },
    };
    match transport {
        Transport::StreamableHttp => crate::http::check(&listen, &identity, &args.path)?,
        Transport::Sse => crate::http::check(&listen, &identity, crate::sse::SSE_PATH)?,
        Transport::Stdio => {}
    }
    // Before anything starts a process: the descriptor must not leak into one.
    let inherited = match &listen {
        Listen::Unix(path) => crate::activation::inherited_unix(path)?,
        Listen::Tcp { .. } => None,
    };
    let metrics_listener = match &args.metrics_listen {
        Some(address) => {
            match crate::metrics::bind(address, settings.metrics.token_sha256.is_some()) {
                Ok(listener) => Some(listener),
                // Taken (any local user can bind a loopback port first): the gateway serves
                // its tenants all the same, without this port; `/metrics` stays on its socket.
                Err(e)
                    if (e.root_cause().downcast_ref::<std::io::Error>())
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse) =>
                {
                    crate::proxy::log(&format!(
                        "{e:#}: serving without a metrics port (/metrics is still on the gateway's own listener); free the port or choose another"
                    ));
                    None
                }
                Err(e) => return Err(e),
            }
        }
        None => None,
    };
    let gateway = Gateway::open(settings)?.shared();
    // Over stdio one client's messages arrive one at a time: one thread runs the transport and
    // every call goes to a blocking thread, without the wake-ups of idle workers looking for
    // work that a multi-threaded scheduler makes on every message.
    let mut builder = match transport {
        Transport::Stdio => tokio::runtime::Builder::new_current_thread(),
        Transport::StreamableHttp | Transport::Sse => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let name = match (transport, &listen) {
        (Transport::Stdio, _) => "stdio",
        (_, Listen::Unix(_)) => "unix-socket",
        (Transport::Sse, _) => "sse",
        _ => "streamable-http",
    };
    gateway.started(name)?;
    let serving = gateway.clone();
    let served = runtime.block_on(async {
        let gateway = serving;
        // SIGINT and SIGTERM are handled from here on (a signal before would kill the
        // process without its `gateway.stopped` record): before anything is announced.
        let signal = shutdown_signal()?;
        reload_on_sighup(gateway.clone(), env)?;
        if let Some(listener) = metrics_listener {
            let address = listener.local_addr()?;
            let _ = writeln!(
                std::io::stderr().lock(),
                "hpcgate: metrics at http://{address}/metrics"
            );
            let gateway = gateway.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::metrics::serve(gateway, listener).await {
                    let _ = writeln!(std::io::stderr().lock(), "hpcgate: {e:#}");
                }
            });
        }
        match transport {
            Transport::Stdio => {
                let caller = gateway.local_caller();
                serve_stdio(gateway, caller, signal).await
            }
            Transport::StreamableHttp => {
                let flavor = crate::http::Flavor::Streamable(&args.path);
                crate::http::serve(gateway, identity, listen, inherited, flavor, signal).await
            }
            Transport::Sse => {
                let flavor = crate::http::Flavor::Sse;
                crate::http::serve(gateway, identity, listen, inherited, flavor, signal).await
            }
        }
    });
    // What must end (a WebDAV overwrite whose client left) is waited for; then in-flight calls
    // get a moment; a stdin that is not a pipe is read by a blocking thread that returns only
    // at EOF, which must not be waited for.
    runtime.block_on(gateway.let_finish(std::time::Duration::from_secs(60)));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    gateway.stopped(name)?;
    served?;
    Ok(ExitCode::SUCCESS)
}

/// On each SIGHUP: the configuration is read again and the policies, tenants, quotas and
/// host commands are replaced if all of it checks out (see [`Gateway::reload`]); either way the
/// outcome is audited and said on stderr.
fn reload_on_sighup(gateway: Arc<Gateway>, env: Environment) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let (gateway, env) = (gateway.clone(), env.clone());
            let outcome = tokio::task::spawn_blocking(move || {
                let settings = load_settings(&env)?;
                gateway.reload(settings)
            })
            .await;
            let line = match outcome {
                Ok(Ok(r)) if r.needs_restart.is_empty() => {
                    format!("hpcgate: reloaded {} policies", r.policies)
                }
                Ok(Ok(r)) => format!(
                    "hpcgate: reloaded {} policies; restart to apply: {}",
                    r.policies,
                    r.needs_restart.join(", ")
                ),
                Ok(Err(e)) => format!("hpcgate: reload refused, the running set stays: {e:#}"),
                Err(e) => format!("hpcgate: reload failed: {e}"),
            };
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    });
    Ok(())
}

/// One MCP session on stdin/stdout, until the client leaves or `signal` (SIGINT/SIGTERM,
/// handled from the start, the handshake included).
async fn serve_stdio(
    gateway: Arc<Gateway>,
    caller: Caller,
    signal: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(signal);
    let service = tokio::select! {
        served = McpServer::new(gateway, caller).serve(stdio_transport()) => {
            served.context("the MCP client did not complete the handshake on stdio")?
        }
        () = &mut signal => return Ok(()),
    };
    let cancel = service.cancellation_token();
    tokio::select! {
        ended = service.waiting() => {
            ended.context("the stdio MCP session failed")?;
        }
        () = signal => cancel.cancel(),
    }
    Ok(())
}

/// Standard input and output as the MCP transport. When they are pipes (as an MCP client starts
/// the gateway) they are read and written directly by the runtime, non-blocking; tokio's own
/// stdin and stdout hand every read and write to a blocking thread, a thread wake-up each way
/// on every message. A terminal or a file falls back to those.
fn stdio_transport() -> (
    Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
) {
    use tokio::net::unix::pipe;
    let pipe_end = |fd: std::os::fd::BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .ok()
            .map(std::fs::File::from)
            .filter(|file| file.metadata().is_ok_and(|m| m.file_type().is_fifo()))
    };
    let stdin = pipe_end(std::io::stdin().as_fd()).and_then(|f| pipe::Receiver::from_file(f).ok());
    let stdout = pipe_end(std::io::stdout().as_fd()).and_then(|f| pipe::Sender::from_file(f).ok());
    (
        match stdin {
            Some(receiver) => Box::new(receiver),
            None => Box::new(tokio::io::stdin()),
        },
        match stdout {
            Some(sender) => Box::new(sender),
            None => Box::new(tokio::io::stdout()),
        },
    )
}
