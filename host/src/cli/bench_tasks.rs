//! `hpcgate bench tasks`: MCP tasks as a client sees them. The gateway runs in its own process
//! (`hpcgate run --transport streamable-http`, the embedded default configuration: stock
//! policy chain, fsync'd audit log) on a private state directory, and the real rmcp client
//! speaks the 2026-07-28 revision with the tasks extension declared.
//!
//! Measured: `tasks/get` latency p50/p99 on a task whose job runs (each one a `poll_job`
//! through the whole pipeline: policies, the job's state from its executor, an audit record);
//! and what `--tasks` open tasks cost in gateway memory: its RSS after `--tasks` real local
//! jobs were submitted as tasks and each polled once, against its RSS before (both after a
//! second of quiet). The jobs are cancelled through `tasks/cancel` at the end.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::bench::{Endpoint, Scratch, print_report, stop};
use super::bench_figures::{check_us, percentiles, round, rss_kb};
use super::bench_load::call;

/// `tasks/get` p50 target, µs.
const GET_P50_US: f64 = 1_000.0;
/// Gateway memory for 1,000 open tasks, KiB (scaled to `--tasks`).
const KB_PER_1000_TASKS: f64 = 10.0 * 1024.0;

#[derive(Debug, Args)]
pub(crate) struct TasksArgs {
    /// `tasks/get` calls in the latency run.
    #[arg(long, default_value_t = 2_000)]
    polls: usize,
    /// Open tasks for the memory figure (each a real local job sleeping in its sandbox).
    #[arg(long, default_value_t = 1_000)]
    tasks: usize,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// Keep the temporary state directory (its path goes to stderr).
    #[arg(long)]
    keep: bool,
}

type Client = RunningService<RoleClient, ClientConfig>;

pub(crate) fn run(args: TasksArgs) -> anyhow::Result<ExitCode> {
    if args.polls == 0 {
        bail!("`--polls` must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(bench(&args))?;
    print_report(&report, args.json)
}

async fn bench(args: &TasksArgs) -> anyhow::Result<Value> {
    let dir = tempfile::Builder::new()
        .prefix("hpcgate-bench-tasks-")
        .tempdir()
        .context("cannot create a temporary directory for the benchmark")?;
    let dir = Scratch(Some(dir), args.keep);
    let config = dir.path().join("gateway.toml");
    let state = toml::Value::String(dir.path().join("state").display().to_string());
    std::fs::write(&config, format!("state_dir = {state}\n"))?;
    let endpoint = Endpoint::start(dir.path(), &config, Vec::new(), None).await?;
    let client = connect(&endpoint).await?;
    let mut opened = Vec::with_capacity(args.tasks + 1);
    let measured = measure(&client, &endpoint, args, &mut opened).await;
    // Whatever happened, no job outlives the benchmark.
    for task in &opened {
        let _ = client
            .cancel_task(CancelTaskParams::new(task.as_str()))
            .await;
    }
    client.cancel().await?;
    stop(endpoint.gateway).await;
    measured
}

async fn measure(
    client: &Client,
    endpoint: &Endpoint,
    args: &TasksArgs,
    opened: &mut Vec<String>,
) -> anyhow::Result<Value> {
    call(client, "create_instance", json!({ "instance_id": "bench" })).await?;
    opened.push(submit(client).await?);
    let polled = opened[0].clone();
    for _ in 0..args.polls.min(200) {
        get(client, &polled).await?;
    }
    let mut samples = Vec::with_capacity(args.polls);
    for _ in 0..args.polls {
        let started = Instant::now();
        get(client, &polled).await?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let (p50, p99) = percentiles(&mut samples);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before_kb = rss_kb(endpoint.pid)?;
    let started = Instant::now();
    for _ in 0..args.tasks {
        opened.push(submit(client).await?);
    }
    let submit_s = started.elapsed().as_secs_f64();
    for task in opened.iter() {
        get(client, task).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_kb = rss_kb(endpoint.pid)?;
    let grown_kb = after_kb.saturating_sub(before_kb);
    let target_kb = KB_PER_1000_TASKS * args.tasks as f64 / 1000.0;
    let memory = json!({
        "name": format!("gateway memory, {} open tasks", args.tasks),
        "value": format!("{:+.1} MB", grown_kb as f64 / 1024.0),
        "target": format!("≤ {:.1} MB", target_kb / 1024.0),
        "pass": grown_kb as f64 <= target_kb,
    });
    Ok(json!({
        "tasks_get": { "p50_us": round(p50), "p99_us": round(p99), "polls": args.polls },
        "memory": {
            "tasks": args.tasks, "rss_before_kb": before_kb, "rss_after_kb": after_kb,
            "grown_kb": grown_kb, "submit_s": (submit_s * 10.0).round() / 10.0,
        },
        "checks": [check_us("tasks/get p50", p50, GET_P50_US), memory],
    }))
}

/// A 2026-07-28 session (`server/discover`) that declares the tasks extension.
async fn connect(endpoint: &Endpoint) -> anyhow::Result<Client> {
    let capabilities = ClientCapabilities::builder().enable_tasks().build();
    let info = ClientConfig::new(capabilities, Implementation::new("hpcgate-bench", "0"))
        .with_protocol_version(ProtocolVersion::V_2026_07_28);
    let config = StreamableHttpClientTransportConfig::with_uri(endpoint.url.as_str());
    let transport = StreamableHttpClientTransport::with_client(endpoint.http.clone(), config);
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    info.serve_with_lifecycle(transport, lifecycle)
        .await
        .with_context(|| format!("the MCP discovery with `{}` failed", endpoint.url))
}

/// A job that sleeps, submitted with `timeout = 0`: its task id.
async fn submit(client: &Client) -> anyhow::Result<String> {
    let arguments = json!({ "instance_id": "bench", "command": "sleep 3600", "timeout": 0 });
    let Value::Object(arguments) = arguments else {
        unreachable!("an object literal")
    };
    let request = CallToolRequestParams::new("submit_job").with_arguments(arguments);
    match client.call_tool_once(request).await? {
        CallToolResponse::Task(task) => Ok(task.task.task_id),
        other => bail!("`submit_job` did not return a task: {other:?}"),
    }
}

async fn get(client: &Client, task: &str) -> anyhow::Result<()> {
    let got = client.get_task(GetTaskParams::new(task)).await?;
    if got.task.status().is_terminal() {
        bail!("task `{task}` ended: {:?}", got.task.task.status_message);
    }
    Ok(())
}
