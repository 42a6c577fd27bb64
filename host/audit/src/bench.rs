//! The append benchmark behind `hpcgate audit bench`: appends per second and append latency
//! (p50, p99) with `fdatasync` on, for a number of concurrent writers, on a realistic `call`
//! record (a `stat_path` judged by four policies).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use super::canonical::{GENESIS, encode_body, encode_line};
use super::error::{AuditError, arc};
use super::index::{self, SegmentIndex};
use super::log::{AuditLog, AuditOptions};
use super::record::{Entry, Outcome};
use super::segment::{self, Segment};
use crate::time::Timestamp;
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

/// What [`generate`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Generated {
    pub records: u64,
    pub segments: u64,
    pub bytes: u64,
    pub first_ts: Timestamp,
    pub last_ts: Timestamp,
}

/// Writes a log of `records` records into the empty directory `dir`, laid out exactly as the
/// writer lays it out (segments rotated at `max_file_bytes`, an index beside each closed one),
/// but with chosen timestamps: record `i` (from 0) at `last_ts - (records - 1 - i) * step`,
/// so the log ends at `last_ts`. Records cycle through `entries`. No `fdatasync` per record
/// (it is a fixture for read-side benchmarks and tests, not a durable log).
pub fn generate(
    dir: &Path,
    records: u64,
    last_ts: Timestamp,
    step: std::time::Duration,
    entries: &[Entry],
    max_file_bytes: u64,
) -> Result<Generated, AuditError> {
    use std::io::Write as _;
    assert!(!entries.is_empty(), "entries to cycle through");
    segment::ensure_dir(dir)?;
    let write_err = |e: std::io::Error| AuditError::Write(arc(e));
    let bodies: Vec<Vec<u8>> = entries.iter().map(encode_body).collect();
    let step_us = step.as_micros() as i64;
    let start = last_ts.unix_micros() - step_us * (records.max(1) as i64 - 1);
    let mut number = 1;
    let mut current = Segment::new(dir, number);
    let mut out =
        std::io::BufWriter::with_capacity(1 << 20, segment::open_append(&current.path, true)?);
    let (mut len, mut total, mut prev) = (0u64, 0u64, GENESIS.to_owned());
    let mut first: Option<(u64, Timestamp)> = None;
    let mut last = Timestamp::from_unix_micros(start);
    for i in 0..records {
        let seq = i + 1;
        let ts = Timestamp::from_unix_micros(start + step_us * i as i64);
        let (line, hash) = encode_line(seq, ts, &prev, &bodies[i as usize % bodies.len()]);
        out.write_all(&line).map_err(write_err)?;
        len += line.len() as u64;
        total += line.len() as u64;
        first.get_or_insert((seq, ts));
        prev = hash;
        last = ts;
        if len >= max_file_bytes && seq < records {
            out.flush().map_err(write_err)?;
            let (first_seq, first_ts) = first.take().expect("a record was written");
            index::write(
                &current,
                &SegmentIndex {
                    bytes: len,
                    first_seq,
                    first_ts,
                    last_seq: seq,
                    last_ts: ts,
                    last_hash: prev.clone(),
                },
            )
            .map_err(write_err)?;
            number += 1;
            current = Segment::new(dir, number);
            out = std::io::BufWriter::with_capacity(
                1 << 20,
                segment::open_append(&current.path, true)?,
            );
            len = 0;
        }
    }
    out.flush().map_err(write_err)?;
    segment::open_append(&dir.join(segment::LOCK_FILE), false)?;
    Ok(Generated {
        records,
        segments: number,
        bytes: total,
        first_ts: Timestamp::from_unix_micros(start),
        last_ts: last,
    })
}

/// A realistic `call` record (what [`bench`] appends), for [`generate`].
pub fn sample_call_entry() -> Entry {
    sample_entry()
}
