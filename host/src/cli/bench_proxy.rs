//! `hpcgate bench proxy`: what hpcgate adds to a proxied call.
//!
//! Two runs of the same `echo` call against the same MCP server (`mcp-test-server` by
//! default, found next to this binary):
//! - **direct**: an rmcp client talks to the server over its stdio, no sandbox, no gateway;
//! - **through hpcgate**: the same client talks to `hpcgate run` (this binary) over stdio,
//!   which judges the call with the default policy chain, writes both fsync'd audit records,
//!   and forwards it to the server running in the instance's bwrap sandbox.
//!
//! A third run calls the builtin `stat_path` through the same `hpcgate run`: the gateway's own
//! cost (stdio hop, policy chain, two fsync'd audit records), so that what remains of the
//! proxied call's cost is the proxy hop itself (bridge to the proxy runtime, the rmcp client,
//! the sandboxed server).
//!
//! Calls are sequential (latency, not throughput), after warm-up calls that also start the
//! instance's server. Reports p50 and p99 of each run and the differences.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value, json};

use super::out;

#[derive(Debug, Args)]
pub(crate) struct BenchProxyArgs {
    /// The MCP server to call (must offer `echo` with a `message` argument); default:
    /// `mcp-test-server` next to this binary.
    #[arg(long)]
    server: Option<PathBuf>,
    /// Measured calls per run.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Unmeasured calls first.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: BenchProxyArgs) -> anyhow::Result<ExitCode> {
    let server = match args.server {
        Some(path) => path,
        None => std::env::current_exe()
            .context("cannot find this binary")?
            .with_file_name("mcp-test-server"),
    };
    if !server.is_file() {
        bail!(
            "`{}` not found: build it with `cargo build -p mcp-test-server` or pass --server",
            server.display()
        );
    }
    let server = server
        .canonicalize()
        .context("cannot resolve the server's path")?;
    let scratch = Scratch::create()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (direct, gateway, builtin) = runtime.block_on(async {
        let mut command = tokio::process::Command::new(&server);
        let client = connect(&mut command)
            .await
            .context("the server did not start")?;
        let echo = object(json!({"message": "ping"}));
        let direct = measure(&client, "echo", &echo, args.warmup, args.calls).await?;
        let _ = client.cancel().await;

        let config = gateway_config(scratch.path(), &server)?;
        let exe = std::env::current_exe().context("cannot find this binary")?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("HOME", scratch.path().join("home"))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("HPCGATE_CONFIG");
        let client = connect(&mut command)
            .await
            .context("`hpcgate run` did not start")?;
        let created = client
            .call_tool(
                CallToolRequestParams::new("create_instance")
                    .with_arguments(object(json!({"instance_id": "bench"}))),
            )
            .await?;
        if created.is_error == Some(true) {
            bail!("create_instance failed: {:?}", created.content);
        }
        wait_for_tool(&client, "bench__echo").await?;
        let mut proxied = echo.clone();
        proxied.insert("instance_id".to_owned(), json!("bench"));
        let gateway = measure(&client, "bench__echo", &proxied, args.warmup, args.calls).await?;
        let stat = object(json!({"instance_id": "bench", "path": "."}));
        let builtin = measure(&client, "stat_path", &stat, args.warmup, args.calls).await?;
        let _ = client.cancel().await;
        anyhow::Ok((direct, gateway, builtin))
    })?;
    let report = json!({
        "calls": args.calls,
        "direct": {"p50_us": direct.p50, "p99_us": direct.p99},
        "hpcgate": {"p50_us": gateway.p50, "p99_us": gateway.p99},
        "added": {"p50_us": gateway.p50 - direct.p50, "p99_us": gateway.p99 - direct.p99},
        "builtin_stat_path": {"p50_us": builtin.p50, "p99_us": builtin.p99},
    });
    if args.json {
        out(report);
    } else {
        out(format!(
            "proxied echo, {} sequential calls per run",
            args.calls
        ));
        out(format!("{:<16} {:>10} {:>10}", "", "p50 µs", "p99 µs"));
        out(format!(
            "{:<16} {:>10.1} {:>10.1}",
            "direct (stdio)", direct.p50, direct.p99
        ));
        out(format!(
            "{:<16} {:>10.1} {:>10.1}",
            "through hpcgate", gateway.p50, gateway.p99
        ));
        out(format!(
            "{:<16} {:>10.1} {:>10.1}",
            "added",
            gateway.p50 - direct.p50,
            gateway.p99 - direct.p99
        ));
        out(format!(
            "{:<16} {:>10.1} {:>10.1}",
            "stat_path", builtin.p50, builtin.p99
        ));
    }
    Ok(ExitCode::SUCCESS)
}

struct Percentiles {
    p50: f64,
    p99: f64,
}

async fn connect(
    command: &mut tokio::process::Command,
) -> anyhow::Result<RunningService<RoleClient, ()>> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        bail!("no pipes to the child");
    };
    // The child lives as long as the runtime: it is killed on drop with the runtime's tasks.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(().serve((stdout, stdin)).await?)
}

async fn measure(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: &Map<String, Value>,
    warmup: usize,
    calls: usize,
) -> anyhow::Result<Percentiles> {
    let mut samples = Vec::with_capacity(calls);
    for i in 0..warmup + calls {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
        let started = Instant::now();
        let result = client.call_tool(params).await?;
        let took = started.elapsed();
        if result.is_error == Some(true) {
            bail!("`{tool}` failed: {:?}", result.content);
        }
        if i >= warmup {
            samples.push(took.as_secs_f64() * 1e6);
        }
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Ok(Percentiles {
        p50: at(0.50),
        p99: at(0.99),
    })
}

/// Waits (≤ 30 s) until background discovery offers `tool`.
async fn wait_for_tool(client: &RunningService<RoleClient, ()>, tool: &str) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let tools = client.list_all_tools().await?;
        if tools.iter().any(|t| t.name == tool) {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("`{tool}` was not discovered within 30 s; check `hpcgate doctor`");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn gateway_config(dir: &Path, server: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("bench.toml");
    let server = server.display().to_string();
    let text = format!(
        "state_dir = {:?}\n\n[policy_engine]\ncache_dir = {:?}\n\n[proxied_mcps.bench]\ncommand = {server:?}\nbinds = [{server:?}]\n",
        dir.join("state").display().to_string(),
        dir.join("cache").display().to_string(),
    );
    std::fs::write(&path, text).context("cannot write the bench config")?;
    Ok(path)
}

/// A private directory for the benchmark's state (a fresh name, 0700: the gateway it starts
/// reads its config and its user layer from there), removed at the end.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn create() -> anyhow::Result<Scratch> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("hpcgate-bench-proxy-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .context("cannot create a scratch directory")?;
        std::fs::create_dir(dir.path().join("home"))
            .context("cannot create a scratch directory")?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A directory another user made in advance under the old, guessable name is not used: the
    /// gateway the bench starts reads its config and user layer from the scratch directory.
    #[test]
    fn the_scratch_directory_is_fresh_and_private() {
        let planted =
            std::env::temp_dir().join(format!("hpcgate-bench-proxy-{}", std::process::id()));
        std::fs::create_dir_all(planted.join("home")).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
        let scratch = Scratch::create().unwrap();
        assert_ne!(scratch.path(), planted);
        let md = std::fs::metadata(scratch.path()).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o700);
        assert_eq!(md.uid(), rustix::process::geteuid().as_raw());
        std::fs::remove_dir_all(planted).unwrap();
    }
}
