//! The figures `hpcgate bench gateway` measures and the targets it checks them against.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use serde_json::{Value, json};

/// The gateway's targets (BENCHMARKS.md says where they come from).
pub(super) const HTTP_P50_US: f64 = 600.0;
const HTTP_CALLS_PER_S: f64 = 8_000.0;
/// The gateway's own CPU (user + system) per `stat_path` in the HTTP throughput run.
const HTTP_CPU_PER_CALL_US: f64 = 150.0;
/// Over stdio a call cannot beat the transport's round trip plus one durable append (its
/// audit record): the target is those two floors measured here, plus this much.
pub(super) const STDIO_OVER_FLOORS_US: f64 = 60.0;
const IDLE_RSS_KB: u64 = 40 * 1024;
/// The multi-tenant, authenticated figures within 10% of the single-tenant ones.
const TENANTS_SLOWDOWN: f64 = 1.10;

/// p50 of `appends` appends of a 1 KiB line (an audit record's size) each followed by
/// `fdatasync`, to a scratch file in `dir`, in µs.
pub(super) fn fsync_p50_us(dir: &Path, appends: usize) -> anyhow::Result<f64> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot create `{}`", path.display()))?;
    let line = [b'x'; 1024];
    let mut samples = Vec::with_capacity(appends);
    for _ in 0..appends.max(1) {
        let started = Instant::now();
        file.write_all(&line)?;
        file.sync_data()?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    std::fs::remove_file(&path)?;
    Ok(percentiles(&mut samples).0)
}

/// How many CPUs [`fsync_p50_us_per_cpu`] tries at most (the first ones this process may use).
const PROBED_CPUS: usize = 8;

/// [`fsync_p50_us`] with this thread pinned to each CPU it may use in turn (at most
/// [`PROBED_CPUS`]), then allowed on all of them again. A thread waiting in `fdatasync` is woken
/// by the disk's completion interrupt once per write it waits for (data, inode, cache flush):
/// on a CPU other than the one taking the interrupt, each wake-up is an inter-processor
/// interrupt, which on a virtual machine costs tens of microseconds.
pub(super) fn fsync_p50_us_per_cpu(
    dir: &Path,
    appends: usize,
) -> anyhow::Result<Vec<(usize, f64)>> {
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
    let allowed = sched_getaffinity(None).context("cannot read this thread's CPU affinity")?;
    let cpus = (0..CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu));
    let mut per_cpu = Vec::new();
    let probe = || -> anyhow::Result<()> {
        for cpu in cpus.take(PROBED_CPUS) {
            let mut one = CpuSet::new();
            one.set(cpu);
            sched_setaffinity(None, &one).with_context(|| format!("cannot pin to CPU {cpu}"))?;
            per_cpu.push((cpu, fsync_p50_us(dir, appends)?));
        }
        Ok(())
    };
    let probed = probe();
    sched_setaffinity(None, &allowed).context("cannot restore this thread's CPU affinity")?;
    probed.map(|()| per_cpu)
}

#[derive(Debug, Default)]
pub(super) struct Figures {
    pub p50_us: f64,
    pub p99_us: f64,
    /// Measured only over HTTP.
    pub calls_per_s: Option<f64>,
    /// The same client's MCP `ping` p50: the transport's round trip, no gateway work.
    pub ping_p50_us: Option<f64>,
    /// The gateway process's CPU time (user + system) per call: over HTTP in the throughput
    /// runs, over stdio in the latency run.
    pub cpu_us_per_call: Option<f64>,
    pub idle_rss_kb: u64,
    /// The CPUs the gateway may run on (`Cpus_allowed_list`).
    pub cpus_allowed: String,
}

impl Figures {
    pub fn to_json(&self) -> Value {
        let mut figures = json!({
            "p50_us": round(self.p50_us),
            "p99_us": round(self.p99_us),
            "idle_rss_kb": self.idle_rss_kb,
            "cpus_allowed": self.cpus_allowed,
        });
        if let Some(calls_per_s) = self.calls_per_s {
            figures["calls_per_s"] = json!(calls_per_s.round());
        }
        if let Some(ping) = self.ping_p50_us {
            figures["ping_p50_us"] = json!(round(ping));
        }
        if let Some(cpu) = self.cpu_us_per_call {
            figures["cpu_us_per_call"] = json!(round(cpu));
        }
        figures
    }
}

/// p50 and p99 of `samples` (sorted in place).
pub(super) fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// The value of `key` in `/proc/<pid>/status`, trimmed.
pub(super) fn proc_status(pid: u32, key: &str) -> anyhow::Result<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read `/proc/{pid}/status`"))?;
    (status.lines())
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .with_context(|| format!("no {key} in `/proc/{pid}/status`"))
}

/// A size in KiB from `/proc/<pid>/status` (`VmRSS`, `VmHWM`).
pub(super) fn status_kb(pid: u32, key: &str) -> anyhow::Result<u64> {
    let value = proc_status(pid, key)?;
    (value.trim_end_matches("kB").trim().parse())
        .with_context(|| format!("{key} in `/proc/{pid}/status` is not a size: {value}"))
}

/// VmRSS of `pid`.
pub(super) fn rss_kb(pid: u32) -> anyhow::Result<u64> {
    status_kb(pid, "VmRSS")
}

/// CPU time (user + system) `pid` has used so far, in µs (`/proc/<pid>/stat` fields 14 and
/// 15, in clock ticks).
pub(super) fn cpu_us(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read `/proc/{pid}/stat`"))?;
    // After the command name (in parentheses, which may hold spaces): field 3 onwards.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (Some(utime), Some(stime)) = (ticks(11), ticks(12)) else {
        anyhow::bail!("no utime/stime in `/proc/{pid}/stat`");
    };
    let per_second = rustix::param::clock_ticks_per_second() as f64;
    Ok((utime + stime) as f64 * 1e6 / per_second)
}

pub(super) fn check_cpu(name: &str, value: Option<f64>) -> Value {
    let value = value.unwrap_or(f64::INFINITY);
    json!({
        "name": name,
        "value": format!("{value:.0} µs/call"),
        "target": format!("≤ {HTTP_CPU_PER_CALL_US:.0} µs/call"),
        "pass": value <= HTTP_CPU_PER_CALL_US,
    })
}

pub(super) fn check_us(name: &str, value: f64, target: f64) -> Value {
    json!({
        "name": name,
        "value": format!("{:.0} µs", value),
        "target": format!("p50 ≤ {target:.0} µs"),
        "pass": value <= target,
    })
}

pub(super) fn check_throughput(name: &str, value: Option<f64>) -> Value {
    let value = value.unwrap_or_default();
    json!({
        "name": name,
        "value": format!("{value:.0} calls/s"),
        "target": format!("≥ {HTTP_CALLS_PER_S:.0} calls/s"),
        "pass": value >= HTTP_CALLS_PER_S,
    })
}

/// `ratio` = how many times slower the multi-tenant run was (p50 ratio, or the inverse
/// throughput ratio).
pub(super) fn check_slowdown(name: &str, ratio: f64) -> Value {
    json!({
        "name": name,
        "value": format!("{:+.1}%", (ratio - 1.0) * 100.0),
        "target": format!("≤ {:+.0}% vs 1 tenant", (TENANTS_SLOWDOWN - 1.0) * 100.0),
        "pass": ratio <= TENANTS_SLOWDOWN,
    })
}

pub(super) fn check_rss(name: &str, kb: u64) -> Value {
    json!({
        "name": name,
        "value": format!("{:.1} MB", kb as f64 / 1024.0),
        "target": format!("≤ {} MB", IDLE_RSS_KB / 1024),
        "pass": kb <= IDLE_RSS_KB,
    })
}

pub(super) fn round(us: f64) -> f64 {
    (us * 10.0).round() / 10.0
}
