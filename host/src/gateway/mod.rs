//! The gateway: its long-lived parts (settings and policy chain, state, jobs, proxied servers,
//! audit log) and the one pipeline every call takes ([`call`]), usable without any transport:
//! the MCP server, the CLI and tests all go through [`Gateway::dispatch`].
//!
//! A reload replaces the settings and the chain whole; each request takes one [`Snapshot`] of
//! them at its start, so a reload never changes a call half-way.

mod call;
mod chores;
mod failure;
mod refusals;
mod request;
mod result;
mod target;
mod tasks;
mod transfer;

pub use failure::Failure;
pub use request::Request;
pub use result::CallResult;
pub use tasks::{TaskCall, TaskError};
pub use transfer::{Transfer, Upload};

use std::sync::{Arc, RwLock};

use hpcgate_executors::sandbox::SupervisorCommand;
use serde_json::{Map, Value};

use crate::audit::{AuditLog, Entry, Event, Outcome};
pub use crate::auth::Caller;
use crate::auth::{AuthError, AuthRequest, Authenticator, RateLimiter};
use crate::code_mode::CodeMode;
use crate::config::{ResultType, Settings};
use crate::jobs::Jobs;
use crate::metrics::{Gauges, Metrics};
use crate::policy::{Chain, Phase, PolicyEngine, Via};
use crate::proxy::{ProxiedTool, ProxyManager};
use crate::state::{InstanceId, JobId, JobRecord, State, TenantName};
use crate::telemetry::Telemetry;
use crate::tools::{Tool, ToolSpec};
use target::Target;

/// The gateway's long-lived parts.
pub struct Gateway {
    /// Settings and policy chain, replaced whole by [`Gateway::reload`]; each call takes one
    /// snapshot at its start, so a reload never changes a call half-way.
    live: RwLock<Arc<Live>>,
    /// Shared with the proxies, which record their servers' lives.
    audit: Arc<AuditLog>,
    state: State,
    jobs: Jobs,
    /// Proxied MCP servers (`[proxied_mcps]`, restart-only like the executors).
    proxies: ProxyManager,
    engine: PolicyEngine,
    /// Counted on the call path, rendered at `GET /metrics`.
    metrics: Arc<Metrics>,
    /// A trace span per call, when `[telemetry]` names a collector.
    telemetry: Telemetry,
    /// The doors of running jobs with tools (they serve once the gateway is [`Gateway::shared`]).
    code_mode: CodeMode,
    /// Room under the space quotas held by uploads in flight.
    room: crate::tools::Room,
    /// Work that must end even if whoever started it stops waiting (a WebDAV overwrite's
    /// put-back or clean-up): waited for at stop ([`Gateway::let_finish`]).
    finishing: tokio_util::task::TaskTracker,
    /// Each tenant's audit budget of calls that did not run, and what it held back.
    refusals: refusals::Refusals,
}

/// The settings and policy chain in force when a request began (see [`Gateway::snapshot`]).
#[derive(Clone)]
pub struct Snapshot(Arc<Live>);

impl std::ops::Deref for Snapshot {
    type Target = Live;

    fn deref(&self) -> &Live {
        &self.0
    }
}

impl Snapshot {
    /// `[dav]`: whether WebDAV is served, and its upload cap.
    pub fn dav(&self) -> &crate::config::DavSettings {
        &self.settings.dav
    }

    /// `[files]`: the file tools' caps (WebDAV's extras read with them too).
    pub fn file_limits(&self) -> hpcgate_executors::files::FileLimits {
        self.settings.files
    }

    /// What tool results carry (`[mcp] result_type`).
    pub fn result_type(&self) -> ResultType {
        self.settings.result_type
    }

    /// `[metrics]` in force.
    pub fn metrics_settings(&self) -> crate::config::MetricsSettings {
        self.settings.metrics
    }

    /// Whether authenticating a TCP request needs the owner of the client's socket
    /// ([`AuthRequest::tcp_owner`]): on a single-tenant gateway.
    pub fn needs_tcp_owner(&self) -> bool {
        self.settings.single_tenant()
    }

    /// Who is calling and, on refusal, the HTTP answer, both by this snapshot's settings (so a
    /// challenge names the metadata URL of the settings that refused).
    pub fn authenticate_or_reject(
        &self,
        request: &AuthRequest,
    ) -> Result<Caller, crate::auth::Rejection> {
        (self.auth)
            .authenticate(request)
            .map_err(|e| self.auth.rejection(&e))
    }

    /// Whether a call of `tool` may run on the thread of a session's async runtime: a brief
    /// builtin tool (see [`Tool::brief`]) with no WASI policy in the chain (wasmtime-wasi's
    /// synchronous functions block on a Tokio runtime, see [`Chain::imports_wasi`]).
    pub fn runs_inline(&self, tool: &str) -> bool {
        Tool::from_name(tool).is_some_and(Tool::brief) && !self.chain.imports_wasi()
    }

    /// Whether a call of `tool` may run on an async runtime's worker without ever parking it:
    /// a brief read-only call, whose records are all written after it ran, in one batch that
    /// the caller awaits ([`Gateway::dispatch_async`]).
    pub fn runs_on_runtime(&self, tool: &str) -> bool {
        let read_only = Tool::from_name(tool).is_some_and(|t| t.spec().read_only);
        read_only && self.runs_inline(tool)
    }
}

/// What a reload replaces.
pub struct Live {
    settings: Settings,
    chain: Chain,
    limiter: RateLimiter,
    /// Who a transport's request is; rebuilt from the settings (so a removed token stops
    /// working at the reload).
    auth: Authenticator,
}

/// What [`Gateway::reload`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub policies: usize,
    /// Settings that changed in the files but only take effect after a restart.
    pub needs_restart: Vec<&'static str>,
}

impl Gateway {
    /// Loads the policies, opens the state directory and the audit log; local jobs are
    /// supervised by this binary re-executed (`hpcgate __supervise`).
    pub fn open(settings: Settings) -> anyhow::Result<Gateway> {
        Gateway::open_with_supervisor(settings, Jobs::reexec_supervisor()?)
    }

    /// [`Gateway::open`] with another job supervisor (tests embed the gateway in a test
    /// binary, which cannot supervise). Jobs that ended while no gateway ran get their final
    /// state now, each change audited.
    pub fn open_with_supervisor(
        settings: Settings,
        supervisor: SupervisorCommand,
    ) -> anyhow::Result<Gateway> {
        let engine = PolicyEngine::new(settings.fixed.engine.clone())?;
        let chain = settings.build_chain(&engine)?;
        let state = State::open(&settings.fixed.state_dir)?;
        let settings_state_dir = settings.fixed.state_dir.clone();
        let code_mode_url = settings.fixed.code_mode_url.clone();
        let audit = Arc::new(AuditLog::open(
            &settings.fixed.audit_dir,
            settings.fixed.audit.clone(),
        )?);
        let metrics = Arc::new(Metrics::default());
        metrics.set_enabled(settings.metrics.enabled);
        audit.observe(metrics.audit_observer());
        let telemetry = Telemetry::start(settings.fixed.telemetry.as_ref(), metrics.clone())?;
        let jobs = Jobs::new(
            settings.fixed.sandbox.clone(),
            settings.fixed.slurm.clone(),
            &settings.fixed.state_dir,
            supervisor,
            metrics.clone(),
        );
        // Discovery runs in the background: a slow or broken server never delays the start.
        let proxies = ProxyManager::start(
            &settings.fixed.proxied_mcps,
            &settings.fixed.sandbox,
            settings.fixed.state_dir.join("tmp").join("proxy"),
            Some(audit.clone()),
        );
        let gateway = Gateway {
            live: RwLock::new(Arc::new(Live {
                limiter: RateLimiter::from_settings(&settings),
                auth: Authenticator::from_settings(&settings)?,
                settings,
                chain,
            })),
            audit,
            state,
            jobs,
            proxies,
            engine,
            metrics,
            telemetry,
            code_mode: CodeMode::new(&settings_state_dir, code_mode_url),
            room: crate::tools::Room::default(),
            finishing: tokio_util::task::TaskTracker::new(),
            refusals: refusals::Refusals::default(),
        };
        gateway.prune_old_jobs()?;
        for record in gateway.jobs.reattach(&gateway.state) {
            gateway.audit.append(
                crate::jobs::state_event(&record)
                    .who(record.tenant.as_ref(), "hpcgate")
                    .detail("reattached", true),
            )?;
        }
        Ok(gateway)
    }

    /// The gateway shared by its transports: from now on a job with tools gets a door that
    /// serves through it, and the doors of running jobs are opened again (after a restart).
    pub fn shared(self) -> Arc<Gateway> {
        let gateway = Arc::new_cyclic(|weak| {
            self.code_mode.attach(weak.clone());
            self
        });
        gateway.code_mode.reopen(&gateway.state);
        let chorer = Arc::downgrade(&gateway);
        let _ = std::thread::Builder::new()
            .name("hpcgate-chores".to_owned())
            .spawn(move || chores::run(&chorer));
        gateway
    }

    /// The doors of jobs with tools.
    pub fn code_mode(&self) -> &CodeMode {
        &self.code_mode
    }

    /// Job `job_id` of the tenant's `instance` as recorded now (code mode checks a job
    /// token's job on every request), if there is one.
    pub(crate) fn job_record(
        &self,
        tenant: &TenantName,
        instance: &InstanceId,
        job_id: &JobId,
    ) -> Option<JobRecord> {
        self.state.job(tenant, instance, job_id).ok()
    }

    /// Asks the executor about job `job_id` and records what changed, audited as the
    /// gateway's own observation (as at start); code mode's watcher of Slurm jobs with tools.
    /// `None` when the job is not there (any more).
    pub(crate) fn observe_job(
        &self,
        tenant: &TenantName,
        instance: &InstanceId,
        job_id: &JobId,
    ) -> Option<JobRecord> {
        let record = self.state.job(tenant, instance, job_id).ok()?;
        let Ok(refreshed) = self.jobs.refresh(&self.state, record.clone()) else {
            return Some(record);
        };
        if refreshed.changed {
            // A failed append leaves this change unaudited, as a failed poll would; the
            // record itself is already durable.
            let _ = self.audit.append(
                crate::jobs::state_event(&refreshed.record).who(tenant.as_ref(), "hpcgate"),
            );
        }
        Some(refreshed.record)
    }

    /// The `Origin` check of [`Self::authenticate`] alone, with its HTTP answer.
    pub fn check_origin(&self, request: &AuthRequest) -> Result<(), crate::auth::Rejection> {
        let snapshot = self.snapshot();
        (snapshot.auth)
            .check_origin(request)
            .map_err(|e| snapshot.auth.rejection(&e))
    }

    /// The caller and door of a job token presented over HTTP ([`crate::code_mode::remote`]),
    /// or the 401 answer.
    pub fn authenticate_job(
        &self,
        token: &str,
    ) -> Result<(Caller, Arc<crate::code_mode::JobScope>), crate::auth::Rejection> {
        match self.code_mode.authenticate(token) {
            Ok(scope) => Ok((scope.caller(), scope)),
            Err(reason) => {
                let snapshot = self.snapshot();
                Err(snapshot.auth.rejection(&AuthError::invalid(reason)))
            }
        }
    }

    /// The settings and policies in force now. A request takes one snapshot at its start and
    /// keeps it to the end, so a reload never changes a call half-way.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(
            self.live
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }

    /// The gateway's metrics (transports count their requests there).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The metrics exposition, with the gauges read from the state now: unfinished jobs of
    /// every tenant by state and mode (the running index, each record read again only when it
    /// changed), proxied servers.
    pub fn metrics_text(&self) -> String {
        // A tenant whose records cannot be read now is left out of this scrape rather than
        // failing it: the other series still matter, and the next scrape tries again.
        let mut jobs = std::collections::BTreeMap::<(String, String), u64>::new();
        for tenant in self.state.tenants().unwrap_or_default() {
            for (kind, n) in self.state.unfinished_by_kind(&tenant).unwrap_or_default() {
                *jobs.entry(kind).or_default() += n;
            }
        }
        let mut discovery = [("pending", 0), ("ready", 0), ("failed", 0)];
        for state in self.proxies.status().values() {
            let i = match state {
                crate::proxy::Discovery::Pending => 0,
                crate::proxy::Discovery::Ready(_) => 1,
                crate::proxy::Discovery::Failed(_) => 2,
            };
            discovery[i].1 += 1;
        }
        self.metrics.render(&Gauges {
            jobs: jobs.into_iter().collect(),
            proxy_servers_running: self.proxies.running() as u64,
            proxy_discovery: discovery.to_vec(),
        })
    }

    /// Who is calling, from what the transport knows (token, JWT, Unix peer, `Origin`), with
    /// the tenants and keys in force now.
    pub fn authenticate(&self, request: &AuthRequest) -> Result<Caller, AuthError> {
        self.snapshot().auth.authenticate(request)
    }

    /// The protected-resource metadata served at `path` (`[auth.oauth]`), if any.
    pub fn resource_metadata(&self, path: &str) -> Option<serde_json::Value> {
        self.snapshot().auth.resource_metadata(path).cloned()
    }

    /// The caller of stdio and the local CLI: see [`Authenticator::local_caller`].
    pub fn local_caller(&self) -> Caller {
        self.snapshot().auth.local_caller()
    }

    /// Replaces the policy chain, tenants, quotas, host commands and result type with those
    /// of `settings` (SIGHUP). Everything is built and checked first: on any error the old
    /// set stays in force and the error says why. Settings that need a restart (state and
    /// audit directories, executors, engine, proxies) are kept and named in the result.
    /// Audited either way.
    pub fn reload(&self, settings: Settings) -> anyhow::Result<Reloaded> {
        let result = self.build_live(settings);
        let entry = Entry::new(Event::PoliciesReloaded);
        let entry = match &result {
            Ok((live, reloaded)) => entry
                .detail("policies", live.chain.names().collect::<Vec<_>>())
                .detail("needs_restart", reloaded.needs_restart.clone()),
            Err(e) => entry.outcome(Outcome {
                error: Some(format!("{e:#}")),
                ..Outcome::default()
            }),
        };
        // The record and the swap under one write lock: once the record is durable no request
        // takes a snapshot of the old set (a reader waits out one append at most).
        let mut slot = (self.live.write()).unwrap_or_else(std::sync::PoisonError::into_inner);
        self.audit.append(entry)?;
        let (live, reloaded) = result?;
        self.metrics.set_enabled(live.settings.metrics.enabled);
        *slot = Arc::new(live);
        Ok(reloaded)
    }

    fn build_live(&self, mut settings: Settings) -> anyhow::Result<(Live, Reloaded)> {
        let old = self.snapshot();
        let mut needs_restart = Vec::new();
        if settings.fixed != old.settings.fixed {
            needs_restart = old.settings.fixed.differences(&settings.fixed);
            settings.fixed = old.settings.fixed.clone();
        }
        // Checked again against the sandbox limits that stay until a restart.
        let limits = &settings.fixed.sandbox.limits;
        (crate::config::caps::check_caps(&settings.policies, limits)).map_err(
            |(key, message)| {
                anyhow::anyhow!(
                    "`{key}`: {message} (the sandbox limits in force are those the gateway \
                     started with: a new [sandbox.limits] takes a restart)"
                )
            },
        )?;
        let chain = settings.build_chain(&self.engine)?;
        let reloaded = Reloaded {
            policies: settings.policies.len(),
            needs_restart,
        };
        let limiter = old.limiter.reloaded(&settings);
        let auth = Authenticator::from_settings(&settings)?;
        Ok((
            Live {
                settings,
                chain,
                limiter,
                auth,
            },
            reloaded,
        ))
    }

    /// The MCP resources: the guide and the site's context documents.
    pub fn resources(&self) -> Vec<crate::resources::ResourceEntry> {
        let live = self.snapshot();
        crate::resources::list(
            &live.settings.context_dirs,
            &live.settings.resource_patterns,
        )
    }

    /// One resource's text.
    pub fn read_resource(&self, uri: &str) -> Result<crate::resources::ResourceText, String> {
        let live = self.snapshot();
        let s = &live.settings;
        crate::resources::read(&s.context_dirs, &s.resource_patterns, uri)
    }

    /// Records that a transport started serving.
    pub fn started(&self, transport: &str) -> anyhow::Result<()> {
        let entry = Entry::new(Event::GatewayStarted).detail("transport", transport);
        let entry = entry.detail("version", env!("CARGO_PKG_VERSION"));
        self.audit.append(entry.detail("pid", std::process::id()))?;
        Ok(())
    }

    /// Runs `work` on the runtime to its end, whether or not its starter still waits for it;
    /// a stopping gateway waits for it ([`Gateway::let_finish`]).
    pub fn finish<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.finishing.spawn(work)
    }

    /// Waits, at most `within` in all, for the jobs' doors to answer their calls in flight
    /// ([`CodeMode::stop_serving`]) and for the work started with [`Gateway::finish`] (called
    /// once the listeners have closed, so that nothing starts more).
    pub async fn let_finish(&self, within: std::time::Duration) {
        let until = tokio::time::Instant::now() + within;
        self.code_mode.stop_serving(until).await;
        self.finishing.close();
        let _ = tokio::time::timeout_at(until, self.finishing.wait()).await;
    }

    /// Stops the proxied servers (each audited) and records a clean stop, with how many
    /// records this process wrote and in how many `fdatasync`ed batches (the group commit).
    pub fn stopped(&self, transport: &str) -> anyhow::Result<()> {
        self.proxies.stop_all();
        if let Err(e) = self.record_held_refusals() {
            crate::proxy::log(&format!(
                "the summary of refused calls was not recorded ({e})"
            ));
        }
        let written = self.audit.stats();
        self.audit.append(
            Entry::new(Event::GatewayStopped)
                .detail("transport", transport)
                .detail("pid", std::process::id())
                .detail("audit_records", written.records)
                .detail("audit_batches", written.batches),
        )?;
        Ok(())
    }

    /// The audit log (for start and stop records by the transports).
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// The proxied servers: discovery status, running servers.
    pub fn proxies(&self) -> &ProxyManager {
        &self.proxies
    }

    /// The tools `caller` may see through `via` (from `job`'s code, when `Some`), as the list
    /// phase of the chain in `live` allows: the builtin ones in their fixed order, and the proxied ones by name, as their
    /// servers describe them
    /// (discovery's, plus those the caller's own tenant's servers announced since).
    pub fn list(
        &self,
        live: &Snapshot,
        caller: &Caller,
        via: Via,
        job: Option<&crate::code_mode::JobScope>,
    ) -> (Vec<&'static ToolSpec>, Vec<Arc<ProxiedTool>>) {
        let allows = |target: &Target| {
            let mut call = target.input(caller, via, Phase::List, Map::new());
            if let Some(job) = job {
                job.mark_listing(&mut call);
            }
            !live.chain.evaluate(&call).is_denied()
        };
        let builtin = Tool::all()
            .filter(|tool| allows(&Target::Builtin(*tool)))
            .map(Tool::spec)
            .collect();
        let mut proxied: Vec<_> = (self.proxies.tools(&caller.tenant).into_iter())
            .filter(|tool| allows(&Target::Proxied(tool.clone())))
            .collect();
        // Deterministic whatever order servers list in or announcements arrive.
        proxied.sort_by(|a, b| a.exposed_name.cmp(&b.exposed_name));
        (builtin, proxied)
    }

    /// The builtin tools an MCP client of `caller` sees.
    pub fn tools(&self, caller: &Caller) -> Vec<&'static ToolSpec> {
        self.list(&self.snapshot(), caller, Via::Mcp, None).0
    }

    /// The proxied tools an MCP client of `caller` sees.
    pub fn proxied_tools(&self, caller: &Caller) -> Vec<Arc<ProxiedTool>> {
        self.list(&self.snapshot(), caller, Via::Mcp, None).1
    }

    /// One MCP call of `caller`, with the settings in force now and no progress reports.
    pub fn call(&self, caller: &Caller, tool: &str, arguments: Map<String, Value>) -> CallResult {
        let request = Request::new(caller.clone(), Via::Mcp, tool, arguments);
        self.dispatch(&self.snapshot(), request)
    }

    /// A builtin tool, else a proxied one (`<proxy>__<tool>`) as the caller's instance sees it
    /// (waiting for its proxy's discovery, unless the client gives the call up: `cancel`).
    fn target(
        &self,
        caller: &Caller,
        instance: Option<&str>,
        name: &str,
        cancel: Option<&tokio_util::sync::CancellationToken>,
    ) -> Option<Target> {
        Tool::from_name(name).map(Target::Builtin).or_else(|| {
            self.proxies
                .find(&caller.tenant, instance, name, cancel)
                .map(Target::Proxied)
        })
    }
}
