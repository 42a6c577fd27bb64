//! What the gateway counts and times, exported at `GET /metrics` in the Prometheus text format.
//!
//! Recording is on the call path, so it is a few relaxed atomic adds: each call takes a
//! [`Tally`] that records its tool, decision and duration when dropped (whichever way the
//! call ends); the chain's per-policy times and faults come from the decision the audit log
//! records anyway; the audit log reports its batches through [`BatchObserver`]. What is a
//! state rather than an event — jobs by state, running proxied servers — is read when scraped.
//!
//! Labels never carry unbounded values: no instance, job or tenant ids; tools and policies are
//! named by the configuration, and a label set stops growing at a cap (further values share
//! one `other` series), so a caller who invents tool names or a proxied server that announces
//! thousands of tools cannot grow the exposition.

mod endpoint;
mod series;

pub use endpoint::{Access, bind, router, serve};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use series::{CALLS, Family, Histogram, Labelled, MICROS, RECORDS};

use crate::audit::BatchObserver;
use crate::policy::{ChainOutcome, DecisionKind};

/// Distinct tool names with series of their own (builtin tools and every proxied tool a site
/// is likely to configure); the rest share `other`.
const MAX_TOOLS: usize = 256;
/// Distinct policy names with series of their own.
const MAX_POLICIES: usize = 64;

/// Decision labels of `hpcgate_tool_calls_total`: the chain's decision, or `none` for a call
/// that stopped before the policies (unknown tool, invalid instance id).
const DECISIONS: [&str; 4] = ["allow", "deny", "rewrite", "none"];
/// Fault labels of `hpcgate_policy_faults_total` (the policy engine's fault kinds).
const FAULTS: [&str; 6] = [
    "timeout",
    "memory",
    "trap",
    "malformed",
    "instantiate",
    "configure",
];
/// MCP methods counted by name; the rest are not served by hpcgate's handler.
pub const METHODS: [&str; 7] = [
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "tasks/get",
    "tasks/cancel",
    "tasks/update",
];

/// The gateway's series.
pub struct Metrics {
    /// `false`: nothing is recorded (`[metrics] enabled = false`).
    enabled: AtomicBool,
    requests: [AtomicU64; METHODS.len()],
    tools: Labelled<ToolSeries>,
    policies: Labelled<PolicySeries>,
    sandbox_start: Histogram,
    audit: Arc<AuditSeries>,
    /// Trace spans exported and dropped (`[telemetry]`).
    spans: [AtomicU64; 2],
    /// Calls that did not run, over their tenant's audit budget: counted into a summary
    /// record instead of recorded one by one.
    refusals_summarised: AtomicU64,
}

/// One tool's calls by decision, and their durations.
struct ToolSeries {
    decisions: [AtomicU64; DECISIONS.len()],
    duration: Histogram,
}

/// One policy's evaluation times and faults.
struct PolicySeries {
    evaluation: Histogram,
    faults: [AtomicU64; FAULTS.len()],
}

/// The audit log's batches, as its [`BatchObserver`].
struct AuditSeries {
    append: Histogram,
    batch_records: Histogram,
}

impl BatchObserver for AuditSeries {
    fn committed(&self, records: usize, took: Duration) {
        self.append.observe_duration(took);
        self.batch_records.observe(records as f64);
    }
}

/// What a scrape reads from the gateway's state at that moment.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Unfinished jobs by (state, mode).
    pub jobs: Vec<((String, String), u64)>,
    /// Proxied servers running for calls.
    pub proxy_servers_running: u64,
    /// Configured proxies by discovery state (`pending`, `ready`, `failed`).
    pub proxy_discovery: Vec<(&'static str, u64)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            enabled: AtomicBool::new(true),
            requests: Default::default(),
            // The builtin tools keep series of their own whatever names proxied servers
            // (which a running server can announce) brought in first.
            tools: Labelled::new(MAX_TOOLS, "other", || ToolSeries {
                decisions: Default::default(),
                duration: Histogram::new(CALLS),
            })
            .reserving(|name| crate::tools::Tool::from_name(name).is_some()),
            policies: Labelled::new(MAX_POLICIES, "other", || PolicySeries {
                evaluation: Histogram::new(MICROS),
                faults: Default::default(),
            }),
            sandbox_start: Histogram::new(CALLS),
            audit: Arc::new(AuditSeries {
                append: Histogram::new(MICROS),
                batch_records: Histogram::new(RECORDS),
            }),
            spans: Default::default(),
            refusals_summarised: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Turns recording on or off (`[metrics] enabled`, applied at start and on reload).
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The audit log's observer (its batch sizes and commit times).
    pub fn audit_observer(&self) -> Arc<dyn BatchObserver> {
        self.audit.clone()
    }

    /// Counts one MCP request of `method` (one of [`METHODS`]).
    pub fn request(&self, method: &str) {
        if !self.enabled() {
            return;
        }
        if let Some(i) = METHODS.iter().position(|m| *m == method) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a call that did not run and was counted into its tenant's summary record
    /// instead of recorded one by one.
    pub fn refusal_summarised(&self) {
        if self.enabled() {
            self.refusals_summarised.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How long a sandbox took to start (a local job's supervisor up and the job recorded).
    pub fn sandbox_started(&self, took: Duration) {
        if self.enabled() {
            self.sandbox_start.observe_duration(took);
        }
    }

    /// `count` trace spans went to the collector (`exported`) or were dropped. Counted even
    /// with `[metrics] enabled = false`: traces are configured apart, and this is their
    /// only health signal.
    pub fn spans(&self, exported: bool, count: u64) {
        self.spans[usize::from(!exported)].fetch_add(count, Ordering::Relaxed);
    }

    /// A tally for one call, recorded when dropped.
    pub fn tally(&self) -> Tally<'_> {
        Tally {
            metrics: self.enabled().then_some(self),
            tool: None,
            decision: DECISIONS.len() - 1,
            started: Instant::now(),
        }
    }

    /// The exposition: every family, then the gauges read for this scrape.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let mut f = Family::new(
            &mut out,
            "hpcgate_build_info",
            "gauge",
            "The running build.",
        );
        f.sample(&[("version", env!("CARGO_PKG_VERSION"))], 1);
        let mut f = Family::new(
            &mut out,
            "hpcgate_mcp_requests_total",
            "counter",
            "MCP requests handled, by method.",
        );
        for (method, n) in METHODS.iter().zip(&self.requests) {
            f.sample(&[("method", method)], n.load(Ordering::Relaxed));
        }
        let tools = self.tools.sorted();
        let mut f = Family::new(
            &mut out,
            "hpcgate_tool_calls_total",
            "counter",
            "Tool calls by tool and the policy chain's decision (none: stopped before the policies).",
        );
        for (tool, series) in &tools {
            for (decision, n) in DECISIONS.iter().zip(&series.decisions) {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    f.sample(&[("tool", tool), ("decision", decision)], n);
                }
            }
        }
        let mut f = Family::new(
            &mut out,
            "hpcgate_tool_call_duration_seconds",
            "histogram",
            "Whole calls through the pipeline (policies, audit, run), by tool.",
        );
        for (tool, series) in &tools {
            f.histogram(&[("tool", tool)], &series.duration);
        }
        let policies = self.policies.sorted();
        let mut f = Family::new(
            &mut out,
            "hpcgate_policy_evaluation_seconds",
            "histogram",
            "One policy's evaluation of one call or listing.",
        );
        for (policy, series) in &policies {
            f.histogram(&[("policy", policy)], &series.evaluation);
        }
        let mut f = Family::new(
            &mut out,
            "hpcgate_policy_faults_total",
            "counter",
            "Policy evaluations that faulted (each a deny), by policy and fault.",
        );
        for (policy, series) in &policies {
            for (fault, n) in FAULTS.iter().zip(&series.faults) {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    f.sample(&[("policy", policy), ("fault", fault)], n);
                }
            }
        }
        let mut f = Family::new(
            &mut out,
            "hpcgate_jobs",
            "gauge",
            "Unfinished jobs of every tenant, by state and mode.",
        );
        for ((state, mode), n) in &gauges.jobs {
            f.sample(&[("state", state), ("mode", mode)], *n);
        }
        let mut f = Family::new(
            &mut out,
            "hpcgate_sandbox_start_seconds",
            "histogram",
            "From a local job's submission to its sandbox running under its supervisor.",
        );
        f.histogram(&[], &self.sandbox_start);
        let mut f = Family::new(
            &mut out,
            "hpcgate_audit_append_seconds",
            "histogram",
            "One audit batch written and fdatasync'ed.",
        );
        f.histogram(&[], &self.audit.append);
        let mut f = Family::new(
            &mut out,
            "hpcgate_audit_batch_records",
            "histogram",
            "Records per audit batch (group commit).",
        );
        f.histogram(&[], &self.audit.batch_records);
        let mut f = Family::new(
            &mut out,
            "hpcgate_audit_refusals_summarised_total",
            "counter",
            "Calls that did not run, over their tenant's [audit] refusals_per_minute: counted into a refusals.summarised record instead of recorded one by one.",
        );
        f.sample(&[], self.refusals_summarised.load(Ordering::Relaxed));
        let mut f = Family::new(
            &mut out,
            "hpcgate_proxy_servers",
            "gauge",
            "Proxied MCP servers running for calls.",
        );
        f.sample(&[("state", "running")], gauges.proxy_servers_running);
        let mut f = Family::new(
            &mut out,
            "hpcgate_proxy_discovery",
            "gauge",
            "Configured proxied servers by the state of their tool discovery.",
        );
        for (state, n) in &gauges.proxy_discovery {
            f.sample(&[("state", state)], *n);
        }
        let [exported, dropped] = &self.spans;
        let mut f = Family::new(
            &mut out,
            "hpcgate_trace_spans_total",
            "counter",
            "Trace spans sent to the OTLP collector (exported) or lost to a full queue or a failed export (dropped).",
        );
        f.sample(&[("outcome", "exported")], exported.load(Ordering::Relaxed));
        f.sample(&[("outcome", "dropped")], dropped.load(Ordering::Relaxed));
        out
    }
}

/// One call's entry in the metrics: the tool once known, the decision once made, the
/// duration when dropped.
pub struct Tally<'a> {
    metrics: Option<&'a Metrics>,
    tool: Option<Arc<ToolSeries>>,
    /// Index into [`DECISIONS`].
    decision: usize,
    started: Instant,
}

impl Tally<'_> {
    /// The call's tool, once it is known to exist (an unknown name stays `unknown`).
    pub fn tool(&mut self, name: &str) {
        if let Some(metrics) = self.metrics {
            self.tool = Some(metrics.tools.get(name));
        }
    }

    /// The chain's decision: the call's label, and each policy's time and fault.
    pub fn decided(&mut self, outcome: &ChainOutcome) {
        let Some(metrics) = self.metrics else {
            return;
        };
        self.decision = match outcome.decision.decision {
            DecisionKind::Allow => 0,
            DecisionKind::Deny => 1,
            DecisionKind::Rewrite => 2,
        };
        for decision in &outcome.policies {
            let series = metrics.policies.get(&decision.policy);
            series.evaluation.observe(decision.duration_us / 1e6);
            if let Some(kind) = decision.fault_kind
                && let Some(i) = FAULTS.iter().position(|f| *f == kind)
            {
                series.faults[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        let Some(metrics) = self.metrics else {
            return;
        };
        let series = self
            .tool
            .take()
            .unwrap_or_else(|| metrics.tools.get("unknown"));
        series.decisions[self.decision].fetch_add(1, Ordering::Relaxed);
        series.duration.observe_duration(self.started.elapsed());
    }
}
