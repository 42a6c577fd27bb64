//! Latency of a trivial job on the local cluster: submit → state `completed`, sandboxed
//! `/bin/true`. Not a timed test: it measures and reports.
//!
//! `cargo test -p hpcgate-executors --test slurm --release -- --ignored --nocapture bench_`

use std::time::{Duration, Instant};

use hpcgate_executors::slurm::JobPhase;

use super::harness::JobDirs;

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
#[allow(clippy::print_stderr, reason = "the benchmark's report")]
fn bench_submit_to_completed() {
    let runs: usize = std::env::var("HPCGATE_BENCH_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let spec = dirs.spec(&["/bin/true"]);
    // One warm-up job: the first job after slurmctld starts waits for a scheduler pass.
    let mut samples = Vec::with_capacity(runs);
    for run in 0..=runs {
        let start = Instant::now();
        let job = runner.submit(&spec).unwrap();
        let submitted = start.elapsed();
        loop {
            let status = runner.status(job.id).unwrap();
            if status.phase.is_final() {
                assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if run > 0 {
            samples.push((submitted, start.elapsed()));
        }
    }
    let mut submit: Vec<Duration> = samples.iter().map(|s| s.0).collect();
    let mut total: Vec<Duration> = samples.iter().map(|s| s.1).collect();
    submit.sort();
    total.sort();
    let pct = |v: &[Duration], p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
    eprintln!(
        "slurm submit→completed over {runs} jobs: p50 {:?} p95 {:?} max {:?} (sbatch alone: p50 {:?} p95 {:?})",
        pct(&total, 50),
        pct(&total, 95),
        total[total.len() - 1],
        pct(&submit, 50),
        pct(&submit, 95),
    );
}
