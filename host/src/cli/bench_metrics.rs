//! `hpcgate bench metrics`: what one scrape of `/metrics` costs on a gateway that holds many
//! jobs. A private state directory gets `--jobs` job records over `--tenants` tenants, of
//! which `--running` stay unfinished (by default all: the costly case; the rest completed, kept
//! for retention); then the exposition is rendered `--scrapes` times, as `GET /metrics`
//! renders it, after one warm-up scrape and a second's wait (the steady state of a scraper),
//! and its p50/p99 are checked against the target (20 ms for a scrape of 10,000 jobs' state).
//!
//! The records are written after the gateway opened (opening re-attaches unfinished jobs, and a
//! made-up local job has no supervisor to re-attach to), through the state layer the gateway
//! itself uses.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use serde_json::json;

use super::bench_figures::{percentiles, round};
use super::out;
use crate::config::{Environment, load_settings};
use crate::gateway::Gateway;
use crate::state::{
    InstanceId, JobMode, JobPhase, JobStatus, NewInstance, NewJob, Observation, Resources, State,
    TenantName,
};

/// The target for one scrape, in µs.
const SCRAPE_P50_US: f64 = 20_000.0;

#[derive(Debug, Args)]
pub(crate) struct BenchMetricsArgs {
    /// Job records in all.
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Of which still unfinished (each stamped at every scrape).
    #[arg(long, default_value_t = 10_000)]
    running: usize,
    /// Tenants the jobs are spread over.
    #[arg(long, default_value_t = 10)]
    tenants: usize,
    /// Scrapes measured.
    #[arg(long, default_value_t = 50)]
    scrapes: usize,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: BenchMetricsArgs) -> anyhow::Result<ExitCode> {
    let dir = tempfile::Builder::new()
        .prefix("hpcgate-bench-metrics-")
        .tempdir()
        .context("cannot create a temporary state directory")?;
    let config = dir.path().join("gateway.toml");
    let state_dir = dir.path().join("state");
    std::fs::write(
        &config,
        format!("state_dir = {:?}\n", state_dir.display().to_string()),
    )?;
    let settings = load_settings(&Environment::from_process(Some(config)))?;
    let gateway = Gateway::open(settings)?;
    let state = State::open(&state_dir)?;
    let started = Instant::now();
    write_jobs(&state, &args)?;
    let setup_s = started.elapsed().as_secs_f64();

    // Steady state, as a scraper every few seconds sees it: a record's (phase, mode) is kept
    // once its stamp has been seen for a second (`state/census.rs`), so one scrape, a second's
    // wait, then the measured ones.
    gateway.metrics_text();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut samples = Vec::with_capacity(args.scrapes);
    let mut bytes = 0;
    for _ in 0..args.scrapes.max(1) {
        let started = Instant::now();
        bytes = gateway.metrics_text().len();
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let (p50, p99) = percentiles(&mut samples);
    let pass = p50 <= SCRAPE_P50_US;
    if args.json {
        out(json!({
            "jobs": args.jobs, "running": args.running, "tenants": args.tenants,
            "scrape_p50_us": round(p50), "scrape_p99_us": round(p99),
            "exposition_bytes": bytes, "target_p50_us": SCRAPE_P50_US, "pass": pass,
        }));
    } else {
        out(format!(
            "{} jobs ({} unfinished) over {} tenants, written in {setup_s:.1} s",
            args.jobs, args.running, args.tenants
        ));
        out(format!(
            "scrape p50 {:.0} µs, p99 {:.0} µs ({bytes} bytes): target p50 ≤ {SCRAPE_P50_US:.0} µs {}",
            p50,
            p99,
            if pass { "PASS" } else { "MISS" }
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `jobs` records over `tenants` tenants (one instance each); all but `running` completed.
/// One thread per tenant: each record is made durable (fsync), which is most of the time.
fn write_jobs(state: &State, args: &BenchMetricsArgs) -> anyhow::Result<()> {
    let tenants: Vec<TenantName> = (0..args.tenants.max(1))
        .map(|i| TenantName::parse(&format!("tenant{i}")))
        .collect::<Result<_, _>>()?;
    let instance = InstanceId::parse("run1")?;
    let (tenants, instance, count) = (&tenants, &instance, tenants.len());
    std::thread::scope(|scope| {
        let workers: Vec<_> = tenants
            .iter()
            .enumerate()
            .map(|(t, tenant)| {
                scope.spawn(move || -> anyhow::Result<()> {
                    let new = NewInstance {
                        id: Some(instance.clone()),
                        ..NewInstance::default()
                    };
                    state.create(tenant, new)?;
                    for i in (t..args.jobs).step_by(count) {
                        write_job(state, tenant, instance, i, i < args.running)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|worker| worker.join().expect("a writer panicked"))
    })
}

fn write_job(
    state: &State,
    tenant: &TenantName,
    instance: &InstanceId,
    i: usize,
    running: bool,
) -> anyhow::Result<()> {
    let new = NewJob {
        instance: instance.clone(),
        mode: if i.is_multiple_of(2) {
            JobMode::Local
        } else {
            JobMode::Slurm
        },
        command: vec!["true".to_owned()],
        resources: Resources::default(),
        max_running_jobs: None,
    };
    let record = state.new_job(tenant, new)?;
    let phase = if running {
        JobPhase::Running
    } else {
        JobPhase::Completed
    };
    let observed = Observation::new(JobStatus::new(phase));
    state.refresh(tenant, &record.job_id, observed)?;
    Ok(())
}
