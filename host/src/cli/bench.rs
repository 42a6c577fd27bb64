//! `hpcgate bench gateway`: the whole gateway under a cheap tool, as production runs it — the
//! gateway in its own process (`hpcgate run`, this executable), the embedded default
//! configuration (stock policy chain on, fsync'd audit log) on a private temporary state dir,
//! and the real rmcp client over streamable HTTP or the child's stdio.
//!
//! Measured (the targets in `bench_figures` beside each): `stat_path` latency p50/p99 from one
//! client; throughput with `--clients` concurrent clients, each its own MCP connection; the
//! gateway process's own CPU time per call (user + system, from `/proc/<pid>/stat` before and
//! after the throughput runs, and around the stdio latency run); the gateway's idle RSS after
//! start-up, set-up and a second of quiet.
//!
//! Beside the HTTP gateway runs a second one with `--tenants` tenants, each with a bearer token,
//! the clients spread over them (within 10% of the single-tenant figures); the two
//! take turns in rounds so that they see the same machine.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use rmcp::model::{ClientRequest, PingRequest};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::bench_figures::{
    Figures, HTTP_P50_US, STDIO_OVER_FLOORS_US, check_cpu, check_rss, check_slowdown,
    check_throughput, check_us, cpu_us, fsync_p50_us, fsync_p50_us_per_cpu, percentiles,
    proc_status, round, rss_kb,
};
use super::bench_load::{latencies, set_up, stat, throughput, timed};
use super::out;

#[derive(Debug, Args)]
pub(crate) struct GatewayArgs {
    #[arg(long, value_enum, default_value = "all")]
    transport: Which,
    /// Concurrent clients of the throughput run (HTTP).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Calls per latency run, and in all for the throughput run.
    #[arg(long, default_value_t = 5_000)]
    calls: usize,
    /// Tenants of the authenticated HTTP run (1: skip it).
    #[arg(long, default_value_t = 8)]
    tenants: usize,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// Keep the gateways' temporary state directory (its path goes to stderr), e.g. to read
    /// their audit logs: each `gateway.stopped` record counts records and fsync'd batches.
    #[arg(long)]
    keep: bool,
    /// Run the gateways with `[metrics] enabled = false`, to compare against metrics on.
    #[arg(long)]
    no_metrics: bool,
    /// Run the gateways exporting a signed audit checkpoint every second (`[audit]
    /// checkpoint_every = "1s"`, a sink file in the scratch directory per gateway), to compare
    /// against checkpoints off.
    #[arg(long)]
    checkpoints: bool,
    /// Run the gateways with `[audit] preallocate_bytes = BYTES` (space allocated ahead of
    /// the audit records; 0 turns it off), to compare one setting against another.
    #[arg(long, value_name = "BYTES")]
    preallocate_bytes: Option<u64>,
    /// Start the gateways confined to these CPUs (`taskset -c LIST`, e.g. `1` or `0,2-3`), the
    /// clients left where the scheduler puts them: on a machine whose disk takes its completion
    /// interrupts on one CPU, where the gateway waits for its `fdatasync` matters (the floors
    /// line shows the append on each CPU).
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    gateway_cpus: Option<String>,
}

/// A `taskset -c` CPU list: numbers and ranges, comma-separated.
fn cpu_list(list: &str) -> Result<String, String> {
    let number = |n: &str| !n.is_empty() && n.len() <= 5 && n.bytes().all(|b| b.is_ascii_digit());
    let item = |item: &str| match item.split_once('-') {
        Some((from, to)) => number(from) && number(to),
        None => number(item),
    };
    if list.split(',').all(item) {
        Ok(list.to_owned())
    } else {
        Err(format!(
            "`{list}` is not a CPU list: write CPU numbers and ranges, e.g. `1` or `0,2-3`"
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Http,
    Stdio,
    All,
}

pub(super) type Client = RunningService<RoleClient, ()>;

pub(crate) fn run(args: GatewayArgs) -> anyhow::Result<ExitCode> {
    if args.calls == 0 || args.clients == 0 || args.tenants == 0 {
        bail!("`--calls`, `--clients` and `--tenants` must be at least 1");
    }
    // One client thread: the clients' work stays on one core, and the latency runs pay no
    // cross-thread wake-ups on the client side (the gateway runs its own runtime as in production).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(bench(&args))?;
    print_report(&report, args.json)
}

/// The checks as a table (or the whole report as JSON).
pub(super) fn print_report(report: &Value, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        out(serde_json::to_string_pretty(report)?);
        return Ok(ExitCode::SUCCESS);
    }
    for check in report["checks"].as_array().into_iter().flatten() {
        out(format!(
            "{:<34} {:>12} {:<8} (target {})",
            check["name"].as_str().unwrap_or_default(),
            check["value"].as_str().unwrap_or_default(),
            if check["pass"] == true {
                "PASS"
            } else {
                "MISS"
            },
            check["target"].as_str().unwrap_or_default(),
        ));
    }
    if let Some(exported) = report.get("checkpoints_exported") {
        out(format!("signed audit checkpoints exported: {exported}"));
    }
    if let Some(floors) = report.get("floors") {
        out(format!(
            "floors here: stdio MCP ping p50 {} µs; 1 KiB append + fdatasync p50 {} µs",
            floors["stdio_ping_p50_us"], floors["append_fdatasync_p50_us"]
        ));
        let per_cpu = (floors["append_fdatasync_p50_us_per_cpu"]
            .as_object()
            .into_iter())
        .flatten()
        .map(|(cpu, us)| format!("CPU {cpu} {us} µs"))
        .collect::<Vec<_>>();
        if !per_cpu.is_empty() {
            out(format!(
                "  the append pinned to each CPU: {}",
                per_cpu.join(", ")
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn bench(args: &GatewayArgs) -> anyhow::Result<Value> {
    let dir = tempfile::Builder::new()
        .prefix("hpcgate-bench-")
        .tempdir()
        .context("cannot create a temporary directory for the benchmark")?;
    let dir = Scratch(Some(dir), args.keep);
    let config = dir.path().join("gateway.toml");
    let sinks = [
        dir.path().join("checkpoints.jsonl"),
        dir.path().join("checkpoints-tenants.jsonl"),
    ];
    std::fs::write(
        &config,
        format!(
            "state_dir = {}\n{}",
            toml::Value::String(dir.path().join("state").display().to_string()),
            extra_tables(args, &sinks[0])
        ),
    )?;
    let mut report = Map::new();
    let mut checks = Vec::new();
    report.insert("calls".into(), json!(args.calls));
    report.insert("clients".into(), json!(args.clients));

    if args.transport != Which::Stdio {
        let mut runs = vec![(config.clone(), Vec::new())];
        if args.tenants > 1 {
            runs.push(tenants_config(
                dir.path(),
                args.tenants,
                &extra_tables(args, &sinks[1]),
            )?);
        }
        let mut figures = bench_http(dir.path(), runs, args).await?.into_iter();
        let (figures, tenants) = (figures.next().unwrap_or_default(), figures.next());
        checks.push(check_us("http p50 (1 client)", figures.p50_us, HTTP_P50_US));
        checks.push(check_throughput(
            &format!("http throughput ({} clients)", args.clients),
            figures.calls_per_s,
        ));
        checks.push(check_cpu(
            "http gateway CPU per call",
            figures.cpu_us_per_call,
        ));
        checks.push(check_rss("http idle RSS", figures.idle_rss_kb));
        if let Some(tenants) = tenants {
            checks.push(check_slowdown(
                &format!("http p50, {} tenants + auth", args.tenants),
                tenants.p50_us / figures.p50_us,
            ));
            checks.push(check_slowdown(
                &format!("http throughput, {} tenants + auth", args.tenants),
                figures.calls_per_s.unwrap_or_default()
                    / tenants.calls_per_s.unwrap_or(f64::MIN_POSITIVE),
            ));
            report.insert("http_tenants".into(), tenants.to_json());
        }
        report.insert("http".into(), figures.to_json());
    }
    if args.transport != Which::Http {
        let figures = bench_stdio(dir.path(), &config, args).await?;
        // What no gateway can go below here: the transport's round trip with no work, and one
        // durable append on the state directory's disk (each call's audit record waits for one).
        let appends = args.calls.min(2_000);
        let fsync_us = fsync_p50_us(dir.path(), appends)?;
        let floors = figures.ping_p50_us.unwrap_or_default() + fsync_us;
        // Not part of the floor: the same append pinned to each CPU in turn, to show how much
        // of a call's time is where it waited for the disk.
        let per_cpu: Map<String, Value> = (fsync_p50_us_per_cpu(dir.path(), appends)?.into_iter())
            .map(|(cpu, us)| (cpu.to_string(), json!(round(us))))
            .collect();
        checks.push(check_us(
            "stdio p50 (1 client)",
            figures.p50_us,
            floors + STDIO_OVER_FLOORS_US,
        ));
        checks.push(check_rss("stdio idle RSS", figures.idle_rss_kb));
        report.insert(
            "floors".into(),
            json!({
                "stdio_ping_p50_us": round(figures.ping_p50_us.unwrap_or_default()),
                "append_fdatasync_p50_us": round(fsync_us),
                "append_fdatasync_p50_us_per_cpu": per_cpu,
            }),
        );
        report.insert("stdio".into(), figures.to_json());
    }
    if args.checkpoints {
        // Proof that they were on: the checkpoints the gateways exported (all stopped now).
        let exported: usize = sinks
            .iter()
            .filter_map(|sink| std::fs::read_to_string(sink).ok())
            .map(|text| text.lines().count())
            .sum();
        anyhow::ensure!(
            exported > 0,
            "`--checkpoints`: the gateways exported no checkpoint"
        );
        report.insert("checkpoints_exported".into(), json!(exported));
    }
    report.insert("checks".into(), Value::Array(checks));
    Ok(Value::Object(report))
}

/// The benchmark's temporary directory, removed at the end unless kept.
pub(super) struct Scratch(pub(super) Option<tempfile::TempDir>, pub(super) bool);

impl Scratch {
    pub(super) fn path(&self) -> &Path {
        self.0.as_ref().map_or(Path::new("/"), |dir| dir.path())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let (Some(dir), true) = (self.0.take(), self.1) {
            let kept = dir.keep();
            let _ = writeln!(std::io::stderr(), "hpcgate bench: kept {}", kept.display());
        }
    }
}

/// HTTP gateways take turns in this many rounds (latency, then throughput, each gateway in
/// turn), so that drift on a shared machine (other load, CPU frequency, the page cache) falls
/// on all of them alike: the multi-tenant comparison is otherwise within run-to-run noise.
const ROUNDS: usize = 3;

/// One `hpcgate run --transport streamable-http` child and how to reach it.
pub(super) struct Endpoint {
    pub(super) gateway: tokio::process::Child,
    pub(super) pid: u32,
    pub(super) url: String,
    /// One bearer token per tenant; empty: no authentication.
    tokens: Vec<String>,
    pub(super) http: reqwest::Client,
}

impl Endpoint {
    pub(super) async fn start(
        dir: &Path,
        config: &Path,
        tokens: Vec<String>,
        cpus: Option<&str>,
    ) -> anyhow::Result<Endpoint> {
        let mut gateway = gateway_command(dir, config, cpus)
            .args(["--transport", "streamable-http", "--port", "0"])
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start `hpcgate run --transport streamable-http`")?;
        let pid = gateway.id().context("the gateway exited at once")?;
        let url = listening_address(&mut gateway).await?;
        // Keep-alive connections, as MCP clients built on fetch or a pooled HTTP client use:
        // the gateway is measured, not a TCP handshake per call. (rmcp's default client turns
        // pooling off against a stall with partly read SSE bodies; hpcgate answers with JSON.)
        let http = reqwest::Client::builder()
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Endpoint {
            gateway,
            pid,
            url,
            tokens,
            http,
        })
    }

    /// The gateway's process id.
    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// `http://HOST:PORT`, without the MCP path.
    pub(super) fn origin(&self) -> String {
        let rest = self.url.strip_prefix("http://").unwrap_or(&self.url);
        let authority = rest.split('/').next().unwrap_or(rest);
        format!("http://{authority}")
    }

    /// A new MCP session, as tenant `i % tenants` when there are tokens.
    pub(super) async fn connect(&self, i: usize) -> anyhow::Result<Client> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if !self.tokens.is_empty() {
            config = config.auth_header(self.tokens[i % self.tokens.len()].clone());
        }
        let transport = StreamableHttpClientTransport::with_client(self.http.clone(), config);
        ().serve(transport)
            .await
            .with_context(|| format!("the MCP handshake with `{}` failed", self.url))
    }
}

/// The HTTP runs, one per `(config, tokens)`: client `i` of a run with tokens authenticates as
/// tenant `i % tokens.len()`, each tenant with its own instance.
async fn bench_http(
    dir: &Path,
    runs: Vec<(PathBuf, Vec<String>)>,
    args: &GatewayArgs,
) -> anyhow::Result<Vec<Figures>> {
    let mut endpoints = Vec::with_capacity(runs.len());
    for (config, tokens) in runs {
        endpoints.push(Endpoint::start(dir, &config, tokens, args.gateway_cpus.as_deref()).await?);
    }
    let mut sessions = Vec::with_capacity(endpoints.len());
    for endpoint in &endpoints {
        for tenant in 1..endpoint.tokens.len() {
            let client = endpoint.connect(tenant).await?;
            set_up(&client, "http").await?;
            client.cancel().await?;
        }
        let client = endpoint.connect(0).await?;
        set_up(&client, "http").await?;
        sessions.push(client);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut figures = Vec::with_capacity(endpoints.len());
    for endpoint in &endpoints {
        figures.push(Figures {
            idle_rss_kb: rss_kb(endpoint.pid)?,
            cpus_allowed: proc_status(endpoint.pid, "Cpus_allowed_list")?,
            ..Figures::default()
        });
    }
    for client in &sessions {
        for _ in 0..args.calls.min(200) {
            stat(client, "http").await?;
        }
    }
    let per_round = args.calls.div_ceil(ROUNDS);
    let mut samples = vec![Vec::with_capacity(args.calls); endpoints.len()];
    let mut spent = vec![(0, Duration::ZERO, 0.0); endpoints.len()];
    for _ in 0..ROUNDS {
        for (client, samples) in sessions.iter().zip(&mut samples) {
            samples.extend(latencies(client, "http", per_round).await?);
        }
        for (endpoint, spent) in endpoints.iter().zip(&mut spent) {
            let mut clients = Vec::with_capacity(args.clients);
            for i in 0..args.clients {
                let client = endpoint.connect(i).await?;
                stat(&client, "http").await?;
                clients.push(client);
            }
            let cpu_before = cpu_us(endpoint.pid)?;
            let (calls, took) = throughput(clients, "http", per_round).await?;
            spent.0 += calls;
            spent.1 += took;
            spent.2 += cpu_us(endpoint.pid)? - cpu_before;
        }
    }
    for client in sessions {
        client.cancel().await?;
    }
    for endpoint in endpoints {
        stop(endpoint.gateway).await;
    }
    for ((figures, samples), (calls, took, cpu)) in figures.iter_mut().zip(&mut samples).zip(spent)
    {
        (figures.p50_us, figures.p99_us) = percentiles(samples);
        figures.calls_per_s = Some(calls as f64 / took.as_secs_f64());
        figures.cpu_us_per_call = Some(cpu / calls as f64);
    }
    Ok(figures)
}

async fn bench_stdio(dir: &Path, config: &Path, args: &GatewayArgs) -> anyhow::Result<Figures> {
    let mut command = gateway_command(dir, config, args.gateway_cpus.as_deref());
    command.stderr(Stdio::null());
    let transport = TokioChildProcess::new(command).context("cannot start `hpcgate run`")?;
    let pid = transport.id().context("the gateway exited at once")?;
    let client = ().serve(transport).await.context("the MCP handshake over stdio failed")?;
    set_up(&client, "stdio").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss_kb = rss_kb(pid)?;
    let cpus_allowed = proc_status(pid, "Cpus_allowed_list")?;
    for _ in 0..args.calls.min(200) {
        stat(&client, "stdio").await?;
    }
    let cpu_before = cpu_us(pid)?;
    let mut samples = latencies(&client, "stdio", args.calls).await?;
    let cpu = cpu_us(pid)? - cpu_before;
    let mut pings = timed(args.calls, || async {
        let ping = ClientRequest::PingRequest(PingRequest::default());
        client.send_request(ping).await.context("MCP ping failed")?;
        Ok(())
    })
    .await?;
    client.cancel().await?;
    let (p50_us, p99_us) = percentiles(&mut samples);
    Ok(Figures {
        p50_us,
        p99_us,
        calls_per_s: None,
        ping_p50_us: Some(percentiles(&mut pings).0),
        cpu_us_per_call: Some(cpu / samples.len().max(1) as f64),
        idle_rss_kb,
        cpus_allowed,
    })
}

/// A config with `n` tenants, each with one bearer token, beside the single-tenant one (own
/// state directory); returns it and the tokens.
fn tenants_config(dir: &Path, n: usize, extra: &str) -> anyhow::Result<(PathBuf, Vec<String>)> {
    let mut toml = format!(
        "state_dir = {}\n{extra}",
        toml::Value::String(dir.join("state-tenants").display().to_string())
    );
    let mut tokens = Vec::with_capacity(n);
    for i in 0..n {
        let token = crate::auth::bearer::generate_token()
            .map_err(|e| anyhow::anyhow!("cannot generate a token: {e}"))?;
        toml.push_str(&format!(
            "[tenants.bench{i}]\ntokens = [{{ label = \"bench{i}\", sha256 = \"{}\" }}]\n",
            hex::encode(crate::auth::bearer::hash_token(&token))
        ));
        tokens.push(token);
    }
    let config = dir.join("gateway-tenants.toml");
    std::fs::write(&config, toml)?;
    Ok((config, tokens))
}

/// The `[metrics]` and `[audit]` tables of a gateway's config: none (metrics on, checkpoints
/// off: the defaults), metrics off, checkpoints to `sink` every second.
fn extra_tables(args: &GatewayArgs, sink: &Path) -> String {
    let mut tables = String::new();
    if args.no_metrics {
        tables.push_str("[metrics]\nenabled = false\n");
    }
    if args.checkpoints || args.preallocate_bytes.is_some() {
        tables.push_str("[audit]\n");
    }
    if args.checkpoints {
        tables.push_str(&format!(
            "checkpoint_every = \"1s\"\ncheckpoint_sink = {}\n",
            toml::Value::String(sink.display().to_string())
        ));
    }
    if let Some(bytes) = args.preallocate_bytes {
        tables.push_str(&format!("preallocate_bytes = {bytes}\n"));
    }
    tables
}

/// `hpcgate run` (this executable) on `config` alone: a private HOME so no user config layers
/// in, the user's policy compile cache so start-up does not recompile; confined to `cpus` (a
/// checked `taskset -c` list) when given.
fn gateway_command(dir: &Path, config: &Path, cpus: Option<&str>) -> tokio::process::Command {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("hpcgate"));
    let mut command = match cpus {
        // `taskset` execs the gateway: same process id, every thread confined from the start.
        Some(cpus) => {
            let mut command = tokio::process::Command::new("taskset");
            command.arg("-c").arg(cpus).arg(exe);
            command
        }
        None => tokio::process::Command::new(exe),
    };
    command
        .arg("run")
        .arg("--config")
        .arg(config)
        .env("HOME", dir.join("home"))
        .env_remove("HPCGATE_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    if let Some(cache) = cache {
        command.env("XDG_CACHE_HOME", cache);
    }
    command
}

/// Reads the gateway's `hpcgate: listening on URL` line; keeps draining its stderr after.
async fn listening_address(gateway: &mut tokio::process::Child) -> anyhow::Result<String> {
    let stderr = gateway
        .stderr
        .take()
        .context("the gateway's stderr is not piped")?;
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    while let Some(line) = lines.next_line().await? {
        if let Some(url) = line.strip_prefix("hpcgate: listening on ") {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(url.to_owned());
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    bail!("the gateway exited before listening: {seen}")
}

pub(super) async fn stop(mut gateway: tokio::process::Child) {
    if let Some(pid) = gateway
        .id()
        .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let _ = gateway.wait().await;
}
