//! The append benchmark behind `hpcgate audit bench`: appends per second and append latency
//! (p50, p99) with `fdatasync` on, for a number of concurrent writers, on a realistic `call`
//! record (a `stat_path` judged by four policies).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use super::error::AuditError;
use super::log::{AuditLog, AuditOptions};
use super::record::{Entry, Outcome};
use hpcgate_policy_sdk::Call;
use hpcgate_policy_sdk::outcome::{
    ChainOutcome, DecisionKind, FinalDecision, PolicyDecision, Verdict,
};

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub writers: usize,
    pub appends: u64,
    pub seconds: f64,
    pub appends_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// `fdatasync`s issued; `appends / batches` is the group-commit factor.
    pub batches: u64,
}

/// Appends `appends_per_writer` records from each of `writers` threads to a log in `dir`.
pub fn bench(
    dir: &Path,
    writers: usize,
    appends_per_writer: usize,
) -> Result<BenchReport, AuditError> {
    let log = AuditLog::open(dir, AuditOptions::default())?;
    let entry = sample_entry();
    let started = Instant::now();
    let latencies = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut latencies = Vec::with_capacity(appends_per_writer);
                    for _ in 0..appends_per_writer {
                        let t = Instant::now();
                        log.append(entry.clone())?;
                        latencies.push(t.elapsed().as_nanos() as f64 / 1000.0);
                    }
                    Ok::<_, AuditError>(latencies)
                })
            })
            .collect();
        let mut all = Vec::new();
        for handle in handles {
            all.extend(handle.join().expect("a bench writer does not panic")?);
        }
        Ok::<_, AuditError>(all)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let mut sorted = latencies;
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    Ok(BenchReport {
        writers: writers.max(1),
        appends: sorted.len() as u64,
        seconds,
        appends_per_s: sorted.len() as f64 / seconds,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        batches: log.stats().batches,
    })
}

fn sample_entry() -> Entry {
    let call: Call = serde_json::from_value(json!({
        "phase": "call", "tenant": "chem", "principal": "alice", "tool": "stat_path",
        "server": "builtin", "remote_tool": null, "instance": "run1",
        "arguments": {"instance_id": "run1", "path": "/workspace/data/input.csv"},
        "read_only": true, "usage": {"running_jobs": 2, "instances": 3}
    }))
    .expect("a valid call");
    let policies = ["tools", "paths", "caps", "proxy"]
        .map(|name| PolicyDecision {
            policy: name.to_owned(),
            module: format!("sha256:{}", "ab".repeat(32)),
            verdict: Verdict::Allow,
            enforced: true,
            fault: None,
            fault_kind: None,
            duration_us: 3.25,
            logs: Vec::new(),
        })
        .to_vec();
    let chain = ChainOutcome {
        decision: FinalDecision {
            decision: DecisionKind::Allow,
            policy: None,
            reason: None,
            arguments: None,
        },
        policies,
    };
    Entry::call(&call, &chain)
        .outcome(Outcome {
            bytes: Some(4096),
            ..Outcome::default()
        })
        .duration(std::time::Duration::from_micros(180))
}
