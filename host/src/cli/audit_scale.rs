//! `hpcgate audit bench --records N`: the costs of using a big log. Generates an N-record log
//! (one day of a busy gateway at the default 1,000,000: about a record every 86 ms, call records
//! of the stock chain's real decisions — the chain of the shipped default configuration), then
//! times the commands an admin runs on it, each in a
//! child process (so its peak RSS is its own): `audit tail -n 20`, `audit query --since 1h`,
//! `audit verify`, `policy test --calls <dir>` with the stock chain. With `--compress`, then
//! compresses the closed segments (`audit compress`) and times the same commands again.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::audit::bench::generate;
use crate::audit::{Entry, Outcome, Timestamp};
use crate::policy::cases::parse_cases;
use crate::policy::normalize::normalize_call;

/// The calls the generated records cycle through (the `policy bench` mix).
const CALLS: &str = include_str!("bench_calls.jsonl");

/// One command's figures: the median wall time of `runs` runs and the largest peak RSS.
struct Measured {
    ms: f64,
    /// User + system CPU seconds of the median-time run (less sensitive to load than wall).
    cpu_s: f64,
    rss_mb: f64,
    status: i32,
}

pub(crate) fn run(
    parent: &Path,
    records: u64,
    runs: usize,
    compress: bool,
) -> anyhow::Result<Value> {
    let scratch = tempfile::Builder::new()
        .prefix("hpcgate-audit-scale-")
        .tempdir_in(parent)
        .with_context(|| {
            format!(
                "cannot create a scratch directory in `{}`",
                parent.display()
            )
        })?;
    let config = scratch.path().join("gateway.toml");
    // The shipped defaults: the stock chain as a gateway runs it out of the box (`policy test`
    // reads one file, without the defaults underneath), with a generous policy deadline so
    // that a loaded machine cannot turn a slow evaluation into a fault-deny on one side of the
    // replay only.
    let mut defaults: toml::Table = crate::config::DEFAULT_CONFIG
        .parse()
        .context("the default configuration parses")?;
    defaults.insert(
        "state_dir".into(),
        toml::Value::String(scratch.path().join("state").display().to_string()),
    );
    if let Some(toml::Value::Table(engine)) = defaults.get_mut("policy_engine") {
        engine.insert("deadline_ms".into(), toml::Value::Integer(10_000));
    }
    std::fs::write(&config, toml::to_string(&defaults)?)?;
    let entries = stock_entries(&config)?;
    anyhow::ensure!(
        entries.iter().any(|e| !e.policies.is_empty()),
        "the stock chain judged none of the bench calls"
    );
    let dir = scratch.path().join("audit");
    let day = Duration::from_secs(86_400);
    let step = day / records.max(1) as u32;
    let started = Instant::now();
    let made = generate(&dir, records, Timestamp::now(), step, &entries, 64 << 20)?;
    let generate_s = started.elapsed().as_secs_f64();
    let exe = std::env::current_exe().context("cannot find the hpcgate executable")?;
    let hour = count_lines(
        &exe,
        &[
            "audit",
            "query",
            "--since",
            "1h",
            "--dir",
            &dir.display().to_string(),
        ],
    )?;
    let load_before = load_average();
    let commands = time_commands(&exe, &dir, &config, runs, made.records)?;
    let compressed = if compress {
        let started = Instant::now();
        let report = crate::audit::compress_closed(&dir)?;
        let compress_s = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.skipped.is_empty(),
            "segments left uncompressed: {:?}",
            report.skipped
        );
        Some(json!({
            "segments": report.segments,
            "plain_bytes": report.plain_bytes,
            "compressed_bytes": report.compressed_bytes,
            "compress_s": round(compress_s),
            "records_in_last_hour": count_lines(
                &exe,
                &["audit", "query", "--since", "1h", "--dir", &dir.display().to_string()],
            )?,
            "load_before": load_average(),
            "commands": time_commands(&exe, &dir, &config, runs, made.records)?,
        }))
    } else {
        None
    };
    Ok(json!({
        "records": made.records,
        "segments": made.segments,
        "bytes": made.bytes,
        "span": format!("{} .. {}", made.first_ts, made.last_ts),
        "records_in_last_hour": hour,
        "generate_s": round(generate_s),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "load_before": load_before,
        "runs": runs,
        "commands": commands,
        "compressed": compressed,
    }))
}

/// Times tail, query, verify and `policy test` on the log in `dir` (checking that they
/// succeed and that `policy test` judges all `records` alike); one row each.
fn time_commands(
    exe: &Path,
    dir: &Path,
    config: &Path,
    runs: usize,
    records: u64,
) -> anyhow::Result<Vec<Value>> {
    let dir_s = dir.display().to_string();
    let config_s = config.display().to_string();
    let measure = |args: &[&str]| measure(exe, args, runs);
    let tail = measure(&["audit", "tail", "-n", "20", "--dir", &dir_s])?;
    let query = measure(&["audit", "query", "--since", "1h", "--json", "--dir", &dir_s])?;
    let verify = measure(&["audit", "verify", "--dir", &dir_s])?;
    let test = measure(&["policy", "test", "--config", &config_s, "--calls", &dir_s])?;
    let checked = command(exe)
        .args([
            "policy", "test", "--json", "--config", &config_s, "--calls", &dir_s,
        ])
        .output()?;
    let checked: Value = serde_json::from_slice(&checked.stdout)
        .context("`policy test --json` printed no report")?;
    anyhow::ensure!(
        checked["total"] == records && checked["mismatched"] == 0,
        "`policy test` did not judge every record alike: {}",
        checked
    );
    anyhow::ensure!(
        tail.status == 0 && query.status == 0 && verify.status == 0,
        "a read command failed on the generated log (exit {}, {}, {})",
        tail.status,
        query.status,
        verify.status
    );
    anyhow::ensure!(
        test.status == 0,
        "`policy test` found mismatches on records of the stock chain's own decisions (exit {})",
        test.status
    );
    let row = |name: &str, m: &Measured, target_ms: f64, target_mb: Option<f64>| {
        json!({
            "command": name, "ms": round(m.ms), "cpu_s": round(m.cpu_s), "rss_mb": round(m.rss_mb),
            "target_ms": target_ms, "target_rss_mb": target_mb,
            "pass": m.ms <= target_ms && target_mb.is_none_or(|t| m.rss_mb <= t),
        })
    };
    Ok(vec![
        row("audit tail -n 20", &tail, 50.0, Some(30.0)),
        row("audit query --since 1h --json", &query, 200.0, None),
        row("audit verify", &verify, 5_000.0, None),
        row(
            "policy test --calls <dir> (stock chain)",
            &test,
            10_000.0,
            Some(150.0),
        ),
    ])
}

/// Call records of the bench mix with the decisions the stock chain makes for them.
fn stock_entries(config: &Path) -> anyhow::Result<Vec<Entry>> {
    let (config, base) = crate::config::Config::load(config)?;
    let engine = crate::policy::PolicyEngine::new(config.engine_settings())?;
    let chain = crate::policy::Chain::new(config.chain_policies(&engine, &base)?)?;
    let (cases, _) = parse_cases(CALLS)?;
    Ok(cases
        .into_iter()
        .map(|case| {
            let mut call = case.call;
            normalize_call(&mut call);
            let outcome = chain.evaluate(&call);
            Entry::call(&call, &outcome)
                .outcome(Outcome {
                    bytes: Some(4096),
                    ..Outcome::default()
                })
                .duration(Duration::from_micros(180))
        })
        .collect())
}

/// Runs `exe args` `runs` times with output discarded, under GNU `time` for the peak RSS: a
/// child's `ru_maxrss` as `wait4` reports it starts at its parent's high-water mark (Linux
/// carries it across `exec`), so this process, which just generated the log, cannot measure
/// it itself; `time` is small.
fn measure(exe: &Path, args: &[&str], runs: usize) -> anyhow::Result<Measured> {
    let time = Path::new("/usr/bin/time");
    anyhow::ensure!(
        time.exists(),
        "`/usr/bin/time` (GNU time) is needed to measure peak RSS; install the `time` package"
    );
    let rss_file = tempfile::NamedTempFile::new()?;
    let (mut times, mut cpu) = (Vec::new(), Vec::new());
    let (mut rss_kb, mut status) = (0u64, 0);
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        let code = command(time)
            .args(["-f", "%U %S %M", "-o"])
            .arg(rss_file.path())
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("cannot run `hpcgate {}`", args.join(" ")))?
            .code()
            .unwrap_or(128);
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        let text = std::fs::read_to_string(rss_file.path())?;
        let fields: Vec<f64> = text
            .lines()
            .last()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [user, system, kb] = fields[..] else {
            anyhow::bail!("GNU time printed no CPU times and peak RSS: {text:?}");
        };
        rss_kb = rss_kb.max(kb as u64);
        status = status.max(code);
        cpu.push(user + system);
    }
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|&a, &b| times[a].total_cmp(&times[b]));
    let median = order[order.len() / 2];
    Ok(Measured {
        ms: times[median],
        cpu_s: cpu[median],
        rss_mb: rss_kb as f64 / 1024.0,
        status,
    })
}

fn count_lines(exe: &Path, args: &[&str]) -> anyhow::Result<usize> {
    let out = command(exe).args(args).output()?;
    Ok(out.stdout.iter().filter(|&&b| b == b'\n').count())
}

/// The benchmark times this binary's own commands (under GNU `time`): argv only, nothing from
/// input, no sandbox wanted (the figures are the commands' own).
#[allow(clippy::disallowed_methods)]
fn command(program: &Path) -> Command {
    Command::new(program)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
