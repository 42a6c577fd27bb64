//! `hpcgate bench code`: code mode end to end, with the gateway as production runs it (`hpcgate
//! run` over streamable HTTP, the embedded default configuration, fsync'd audit log, real bwrap)
//! and the rmcp client as the agent.
//!
//! Measured: `run_python` of `print(1)` from the agent's side (write the script, open the door,
//! start the sandbox, wait for the end), p50/p99; and, from Python inside one job, `stat_path`
//! through `hpcgate_tools` — each call's latency (p50/p99) and sequential calls per second.
//! Each inner call is a full gateway call: policy chain, audit record, rate limit.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};

use super::bench::{Client, Endpoint, Scratch, print_report, stop};
use super::bench_figures::{check_us, percentiles, round};
use super::bench_load::call;

/// What code mode must reach: a tool call from inside a job (p50 and calls per second) and a
/// `run_python` of `print(1)` end to end (BENCHMARKS.md, "Code mode").
const INNER_P50_US: f64 = 1_000.0;
const INNER_CALLS_PER_S: f64 = 1_000.0;
const RUN_PYTHON_P50_US: f64 = 60_000.0;

#[derive(Debug, Args)]
pub(crate) struct CodeArgs {
    /// `run_python` runs of `print(1)` to time.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Inner `stat_path` calls per measurement (latency, then throughput) from one job.
    #[arg(long, default_value_t = 2_000)]
    calls: usize,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// Keep the gateway's temporary state directory (its path goes to stderr).
    #[arg(long)]
    keep: bool,
}

/// Runs in one job: warms up, times each call, then a sequential burst; prints one JSON line.
const INNER_SCRIPT: &str = r#"
import json, time
import hpcgate_tools as t
N = @CALLS@
for _ in range(50):
    t.stat_path(path=".")
samples = []
for _ in range(N):
    started = time.perf_counter()
    t.stat_path(path=".")
    samples.append((time.perf_counter() - started) * 1e6)
samples.sort()
started = time.perf_counter()
for _ in range(N):
    t.stat_path(path=".")
elapsed = time.perf_counter() - started
print(json.dumps({"p50_us": samples[len(samples) // 2], "p99_us": samples[min(len(samples) - 1, int(len(samples) * 0.99))], "calls_per_s": N / elapsed}))
"#;

pub(crate) fn run(args: CodeArgs) -> anyhow::Result<ExitCode> {
    if args.runs == 0 || args.calls == 0 {
        bail!("`--runs` and `--calls` must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(bench(&args))?;
    print_report(&report, args.json)
}

async fn bench(args: &CodeArgs) -> anyhow::Result<Value> {
    let dir = tempfile::Builder::new()
        .prefix("hpcgate-bench-")
        .tempdir()
        .context("cannot create a temporary directory for the benchmark")?;
    let dir = Scratch(Some(dir), args.keep);
    let config = dir.path().join("gateway.toml");
    // The inner runs make more calls than a job may by default.
    let max_calls = 2 * args.calls + 100;
    std::fs::write(
        &config,
        format!(
            "state_dir = {}\n[code_mode]\nmax_calls_per_job = {max_calls}\n",
            toml::Value::String(dir.path().join("state").display().to_string())
        ),
    )?;
    let endpoint = Endpoint::start(dir.path(), &config, Vec::new(), None).await?;
    let client = endpoint.connect(0).await?;
    let measured = measure(&client, args).await;
    drop(client);
    stop(endpoint.gateway).await;
    let (run_python, inner) = measured?;
    let (p50, p99) = run_python;
    let calls_per_s = inner["calls_per_s"].as_f64().unwrap_or_default();
    let inner_p50 = inner["p50_us"].as_f64().unwrap_or(f64::INFINITY);
    let checks = vec![
        check_us("inner stat_path p50 (Python)", inner_p50, INNER_P50_US),
        json!({
            "name": "inner calls/s (one job)",
            "value": format!("{calls_per_s:.0} calls/s"),
            "target": format!("≥ {INNER_CALLS_PER_S:.0} calls/s"),
            "pass": calls_per_s >= INNER_CALLS_PER_S,
        }),
        check_us("run_python print(1) p50", p50, RUN_PYTHON_P50_US),
    ];
    Ok(json!({
        "runs": args.runs,
        "calls": args.calls,
        "run_python": {"p50_us": round(p50), "p99_us": round(p99)},
        "inner": {
            "p50_us": round(inner_p50),
            "p99_us": round(inner["p99_us"].as_f64().unwrap_or_default()),
            "calls_per_s": round(calls_per_s),
        },
        "checks": checks,
    }))
}

/// `run_python` p50/p99 in µs, and the inner figures the job printed.
async fn measure(client: &Client, args: &CodeArgs) -> anyhow::Result<((f64, f64), Value)> {
    call(client, "create_instance", json!({"instance_id": "bench"})).await?;
    let print_one = json!({"instance_id": "bench", "code": "print(1)", "timeout": 60});
    for _ in 0..3 {
        finished(call(client, "run_python", print_one.clone()).await?)?;
    }
    let mut samples = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let started = Instant::now();
        let job = finished(call(client, "run_python", print_one.clone()).await?)?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
        if job["stdout_tail"] != "1" {
            bail!("`print(1)` printed {}", job["stdout_tail"]);
        }
    }
    let script = INNER_SCRIPT.replace("@CALLS@", &args.calls.to_string());
    let inner = json!({"instance_id": "bench", "code": script, "timeout": 3600});
    let job = finished(call(client, "run_python", inner).await?)?;
    let printed = job["stdout_tail"].as_str().unwrap_or_default().trim();
    let figures = serde_json::from_str(printed)
        .with_context(|| format!("the inner benchmark printed no figures: {job}"))?;
    Ok((percentiles(&mut samples), figures))
}

/// The job of a `run_python` result, if it completed.
fn finished(result: Value) -> anyhow::Result<Value> {
    let job = &result["job"];
    if job["status"] != "completed" {
        bail!("the run did not complete: {job}");
    }
    Ok(job.clone())
}
