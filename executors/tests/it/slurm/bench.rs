//! Latency of a trivial job on the local cluster: submit → state `completed`, sandboxed
//! `/bin/true`. Not a timed test: it measures and reports, on an idle cluster (a pause before
//! each job) and back to back (each job submitted as the previous one completes, while its
//! node is still being cleaned up, so it waits for slurmctld's next one-second pass).
//!
//! `cargo test -p hpcgate-executors --test it -- --ignored --nocapture bench_`
//! (`HPCGATE_BENCH_RUNS`, default 20 per mode)

use std::time::{Duration, Instant};

use hpcgate_executors::slurm::{JobPhase, SlurmJobSpec, SlurmRunner};

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
    // Warm-up: the first job after slurmctld starts waits for a scheduler pass.
    measure(&runner, &spec, 1, Duration::ZERO);
    for (mode, pause) in [
        ("idle", Duration::from_millis(1500)),
        ("back-to-back", Duration::ZERO),
    ] {
        let (mut total, mut submit) = measure(&runner, &spec, runs, pause);
        total.sort();
        submit.sort();
        let pct = |v: &[Duration], p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
        eprintln!(
            "slurm submit→completed, {mode}, {runs} jobs: p50 {:?} p95 {:?} max {:?} \
             (sbatch alone: p50 {:?} p95 {:?})",
            pct(&total, 50),
            pct(&total, 95),
            total[total.len() - 1],
            pct(&submit, 50),
            pct(&submit, 95),
        );
    }
}

/// `runs` jobs, each after `pause`: (submit → completed, sbatch alone) per job.
fn measure(
    runner: &SlurmRunner,
    spec: &SlurmJobSpec,
    runs: usize,
    pause: Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut total, mut submit) = (Vec::new(), Vec::new());
    let logs = tempfile::tempdir().unwrap();
    for run in 0..runs {
        std::thread::sleep(pause);
        // Each job's output directory is its own: its supervisor creates `stdout` anew.
        let mut spec = spec.clone();
        spec.output_dir = logs.path().join(run.to_string());
        std::fs::create_dir(&spec.output_dir).unwrap();
        let start = Instant::now();
        let job = runner.submit(&spec).unwrap();
        submit.push(start.elapsed());
        loop {
            let status = runner.status(job.id, super::harness::NAME).unwrap();
            if status.phase.is_final() {
                assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        total.push(start.elapsed());
    }
    (total, submit)
}
