//! `hpcgate policy bench`: call-path latency and throughput per policy and for the whole chain.
//!
//! Two runs each. *Latency* is measured at a steady arrival rate (default 2,000 calls/s), the
//! way a gateway sees traffic: fresh instances are prepared between calls, as they are in
//! production, and each sample is the time the caller waits for the decision. *Throughput* is
//! measured flat out from one caller: every evaluation still gets a fresh instance, so it
//! includes preparing and dropping instances (on the background threads, on the other core).
//!
//! Then, for each policy, where a fresh instance's time goes, all on the calling thread with
//! nothing else preparing: instantiation, `configure`, the first evaluation, a second evaluation
//! on the same instance (what `reuse_instance` pays), and dropping the instance. The latency run
//! also counts the calls that found no prepared instance and prepared their own.

use std::time::{Duration, Instant};

use hpcgate_policy_sdk::Call;
use serde::Serialize;

use super::chain::{Chain, ChainError, ChainPolicy, to_wit};
use super::instance::{Instance, Limits};
use super::module::PolicyModule;
use super::normalize::normalize_call;
use super::pool::SnapshotState;

/// How long a latency run waits for configured snapshots to be built before it starts.
const SETTLE: Duration = Duration::from_secs(60);

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Samples in each latency run.
    pub samples: usize,
    /// Arrival rate for latency runs, calls per second.
    pub rate: f64,
    /// Evaluations in each throughput run.
    pub iterations: usize,
    /// Whether policies with a slow `configure` get a configured snapshot (as they do in a
    /// gateway); without, every fresh instance is configured.
    pub snapshots: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            samples: 5_000,
            rate: 2_000.0,
            iterations: 20_000,
            snapshots: true,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PolicyBench {
    pub name: String,
    pub p50_us: f64,
    pub p99_us: f64,
    pub evals_per_s: f64,
    /// Latency samples that found no prepared instance and prepared their own.
    pub inline_prepares: usize,
    /// Where a fresh instance's time goes (medians, µs); `None` if the policy faulted.
    pub phases: Option<Phases>,
    /// Whether fresh instances start from a configured snapshot (`ready`), are configured
    /// each (`not needed`), or why the snapshot failed.
    pub snapshot: String,
    /// The same for an instance of the configured snapshot (no `configure`), when there is one.
    pub snapshot_phases: Option<Phases>,
}

/// Medians of each step of a fresh instance's life, µs, measured on one thread.
#[derive(Debug, Clone, Serialize)]
pub struct Phases {
    pub instantiate_us: f64,
    pub configure_us: f64,
    pub first_evaluate_us: f64,
    /// A second evaluation on the same instance: what a reused instance pays.
    pub next_evaluate_us: f64,
    pub drop_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChainBench {
    pub p50_us: f64,
    pub p99_us: f64,
    pub decisions_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub policies: Vec<PolicyBench>,
    pub chain: ChainBench,
    /// The arrival rate of the latency runs, calls per second.
    pub rate_per_s: f64,
}

/// Benchmarks each policy alone, then the chain, over `calls` (cycled).
pub fn bench(
    policies: Vec<ChainPolicy>,
    calls: &[Call],
    options: &BenchOptions,
) -> Result<BenchReport, ChainError> {
    let calls: Vec<Call> = calls
        .iter()
        .cloned()
        .map(|mut call| {
            normalize_call(&mut call);
            call
        })
        .collect();
    let mut report = Vec::with_capacity(policies.len());
    for policy in &policies {
        let name = policy.name.clone();
        let rounds = options.iterations.clamp(1, 500);
        let fresh = phases(
            policy,
            &policy.module,
            Some(&policy.settings),
            &calls,
            rounds,
        );
        let chain = Chain::build(vec![policy.clone()], options.snapshots)?;
        chain.settle(SETTLE);
        let snapshot_phases = (chain.configured_modules().pop().flatten())
            .and_then(|module| phases(policy, &module, None, &calls, rounds));
        let snapshot = match chain.snapshots().remove(0).1 {
            SnapshotState::NotNeeded => "not needed".to_owned(),
            SnapshotState::Building => "still building".to_owned(),
            SnapshotState::Ready => "ready".to_owned(),
            SnapshotState::Failed(why) => format!("failed: {why}"),
        };
        let misses = chain.inline_prepares();
        let (p50_us, p99_us) = latency(&chain, &calls, options);
        let inline_prepares = chain.inline_prepares() - misses;
        let evals_per_s = throughput(&chain, &calls, options);
        report.push(PolicyBench {
            name,
            p50_us,
            p99_us,
            evals_per_s,
            inline_prepares,
            phases: fresh,
            snapshot,
            snapshot_phases,
        });
    }
    let chain = Chain::build(policies, options.snapshots)?;
    chain.settle(SETTLE);
    let (p50_us, p99_us) = latency(&chain, &calls, options);
    let decisions_per_s = throughput(&chain, &calls, options);
    Ok(BenchReport {
        policies: report,
        chain: ChainBench {
            p50_us,
            p99_us,
            decisions_per_s,
        },
        rate_per_s: options.rate,
    })
}

fn latency(chain: &Chain, calls: &[Call], options: &BenchOptions) -> (f64, f64) {
    let period = Duration::from_secs_f64(1.0 / options.rate);
    // Let the background threads fill the pools before the first sample.
    std::thread::sleep(Duration::from_millis(50));
    let mut samples = Vec::with_capacity(options.samples);
    let mut next = Instant::now();
    for i in 0..options.samples {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next += period;
        let started = Instant::now();
        let outcome = chain.evaluate(&calls[i % calls.len()]);
        samples.push(started.elapsed());
        drop(outcome);
    }
    samples.sort_unstable();
    (percentile_us(&samples, 0.50), percentile_us(&samples, 0.99))
}

/// Times each step of `rounds` fresh instances' lives; `None` if one faulted. With `settings`
/// each instance is configured; without, `module` is a configured snapshot.
fn phases(
    policy: &ChainPolicy,
    module: &PolicyModule,
    settings: Option<&str>,
    calls: &[Call],
    rounds: usize,
) -> Option<Phases> {
    let limits = Limits {
        deadline: policy.deadline,
        memory_bytes: policy
            .memory_bytes
            .min(module.inner.engine.settings.max_memory_bytes),
    };
    let mut steps: [Vec<Duration>; 5] = Default::default();
    for i in 0..rounds {
        let call = &calls[i % calls.len()];
        let wit = to_wit(call, &call.arguments);
        let mut started = Instant::now();
        let mut lap = |step: usize| {
            let now = Instant::now();
            steps[step].push(now - started);
            started = now;
        };
        let mut instance = Instance::instantiate(module, &limits).ok()?;
        lap(0);
        if let Some(settings) = settings {
            instance.configure(settings, &limits).ok()?;
        }
        lap(1);
        instance.evaluate(&wit, &limits).0.ok()?;
        lap(2);
        instance.evaluate(&wit, &limits).0.ok()?;
        lap(3);
        drop(instance);
        lap(4);
    }
    let [instantiate, configure, first, next, dropped] = steps.map(|mut step| {
        step.sort_unstable();
        percentile_us(&step, 0.5)
    });
    Some(Phases {
        instantiate_us: instantiate,
        configure_us: configure,
        first_evaluate_us: first,
        next_evaluate_us: next,
        drop_us: dropped,
    })
}

fn throughput(chain: &Chain, calls: &[Call], options: &BenchOptions) -> f64 {
    let started = Instant::now();
    for i in 0..options.iterations {
        std::hint::black_box(chain.evaluate(&calls[i % calls.len()]));
    }
    options.iterations as f64 / started.elapsed().as_secs_f64()
}

fn percentile_us(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    (sorted[index].as_nanos() as f64 / 10.0).round() / 100.0
}
