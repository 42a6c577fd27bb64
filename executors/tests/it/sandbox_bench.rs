//! Benchmark, not a timed test: sandbox launch overhead with the full hardened profile.
//!
//! `run_sync` of `/bin/true` (spawn → bwrap sets up every namespace and mount → exit →
//! output drained), 20 warm-up runs, then 200 measured; prints p50/p95/max. Run with
//! `cargo test --release -p hpcgate-executors --test it -- --ignored --nocapture
//! sandbox_launch_overhead`.

use crate::sandbox_harness as harness;

use std::time::{Duration, Instant};

use harness::Instance;
use hpcgate_executors::sandbox::{EndReason, run_sync, spawn_job, wait_job};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
#[allow(clippy::print_stderr)]
fn sandbox_launch_overhead() {
    let inst = Instance::create();
    let cmd = vec!["/bin/true".to_owned()];
    for _ in 0..20 {
        run_sync(&inst.spec, &cmd, None).expect("warm-up");
    }
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let start = Instant::now();
            let r = run_sync(&inst.spec, &cmd, None).expect("run");
            assert_eq!(r.reason, EndReason::Exited);
            start.elapsed()
        })
        .collect();
    times.sort();
    eprintln!(
        "run_sync /bin/true, hardened profile, n=200: p50 {:.2?} p95 {:.2?} max {:.2?} limits {:?}",
        percentile(&times, 0.50),
        percentile(&times, 0.95),
        times[times.len() - 1],
        inst.spec.limits
    );

    let mut jobs: Vec<Duration> = (0..50)
        .map(|i| {
            let start = Instant::now();
            let dir = inst.job_dir(&format!("b{i}"));
            spawn_job(&dir, &inst.spec, &cmd, &harness::supervisor()).expect("spawn");
            let s = wait_job(&dir, Duration::from_secs(10)).expect("wait");
            assert_eq!(s.reason, Some(EndReason::Exited), "{s:?}");
            start.elapsed()
        })
        .collect();
    jobs.sort();
    eprintln!(
        "spawn_job+wait_job /bin/true (supervised), n=50: p50 {:.2?} p95 {:.2?}",
        percentile(&jobs, 0.50),
        percentile(&jobs, 0.95)
    );
}
