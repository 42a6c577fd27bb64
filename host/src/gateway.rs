//! The gateway: one dispatch function from a tool call to its result, usable without any
//! transport (the MCP server and the CLI both call [`Gateway::call`]).
//!
//! The order is the contract and reads top to bottom in [`Gateway::call`]: resolve the tool →
//! build the policy input (host normalisation included) → policy chain → write-ahead audit of
//! the decision (nothing runs if it cannot be recorded; a read-only call's decision is instead
//! recorded with its outcome, in one record) → deny, or run the tool with the final arguments
//! (deserialising them is the re-validation after rewrites) → audit the outcome → result.
//! Every exit path leaves an audit record. Proxied tools (`<proxy>__<tool>`) take the same
//! path; only the run step differs ([`crate::proxy::run`]).

use std::cell::RefCell;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use hpcgate_executors::sandbox::SupervisorCommand;
use serde_json::{Map, Value, json};

use crate::audit::{AuditLog, Entry, Event, Outcome};
use crate::auth::{AuthError, AuthRequest, Authenticator, RateLimiter};
use crate::config::Settings;
use crate::jobs::Jobs;
use crate::policy::normalize::normalize_call;
use crate::policy::{Call, Chain, DecisionKind, Phase, PolicyEngine};
use crate::proxy::{ProxiedTool, ProxyManager};
use crate::state::{State, TenantName};
use crate::tools::{Context, InstanceTool, Output, Progress, Tool, ToolError, ToolSpec};
use crate::usage::Measured;

/// Who is calling, as the transport established it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: TenantName,
    /// Token label, JWT subject, uid or local user: recorded in every audit record.
    pub principal: String,
}

/// What goes back to the client: structured content, a one-line text, and whether it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub structured: Value,
    pub text: String,
    pub is_error: bool,
    /// A proxied tool's result, passed to the client whole (every content block,
    /// `structuredContent`, `isError`); `structured` and `text` then only summarise it.
    pub proxied: Option<Box<rmcp::model::CallToolResult>>,
}

impl CallResult {
    fn error(message: String) -> CallResult {
        CallResult {
            structured: json!({ "error": message }),
            text: message,
            is_error: true,
            proxied: None,
        }
    }
}

/// Where a call's decision record is.
enum Recorded {
    /// Durable before the call ran (calls that may change something, and denials).
    Ahead(crate::audit::Receipt),
    /// Written with the outcome, after a read-only call ran.
    Deferred(Box<Entry>),
}

/// What a call runs: a builtin tool or a proxied server's tool.
enum Target {
    Builtin(Tool),
    Proxied(Arc<ProxiedTool>),
}

impl Target {
    /// Whether a call can add file bytes to its instance (a proxied tool's claim to be
    /// read-only is the remote server's).
    fn adds_bytes(&self) -> bool {
        match self {
            Target::Builtin(tool) => tool.adds_bytes(),
            Target::Proxied(tool) => !tool.read_only,
        }
    }
}

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
}

/// What a reload replaces.
struct Live {
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
        let engine = PolicyEngine::new(settings.engine.clone())?;
        let chain = settings.build_chain(&engine)?;
        let state = State::open(&settings.state_dir)?;
        let audit = Arc::new(AuditLog::open(&settings.audit_dir, settings.audit.clone())?);
        let jobs = Jobs::new(
            settings.sandbox.clone(),
            settings.slurm.clone(),
            &settings.state_dir,
            supervisor,
        );
        // Discovery runs in the background: a slow or broken server never delays the start.
        let proxies = ProxyManager::start(
            &settings.proxied_mcps,
            &settings.sandbox,
            settings.state_dir.join("tmp").join("proxy"),
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
        };
        if let Some(age) = gateway.live().settings.job_retention {
            for tenant in gateway.state.tenants()? {
                gateway.state.prune_jobs(&tenant, age)?;
            }
        }
        for record in gateway.jobs.reattach(&gateway.state) {
            gateway.audit.append(
                crate::tools::job_state_event(&record)
                    .who(record.tenant.as_ref(), "hpcgate")
                    .detail("reattached", true),
            )?;
        }
        Ok(gateway)
    }

    fn live(&self) -> Arc<Live> {
        self.live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Who is calling, from what the transport knows (token, JWT, Unix peer, `Origin`), with
    /// the tenants and keys in force now.
    pub fn authenticate(&self, request: &AuthRequest) -> Result<Caller, AuthError> {
        self.live().auth.authenticate(request)
    }

    /// The caller of stdio and the local CLI.
    pub fn local_caller(&self) -> Caller {
        self.live().auth.local_caller()
    }

    /// What tool results carry (`[mcp] result_type`).
    pub fn result_type(&self) -> crate::config::ResultType {
        self.live().settings.result_type
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
        self.audit.append(entry)?;
        let (live, reloaded) = result?;
        *self
            .live
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(live);
        Ok(reloaded)
    }

    fn build_live(&self, mut settings: Settings) -> anyhow::Result<(Live, Reloaded)> {
        let old = self.live();
        let old = &old.settings;
        let mut needs_restart = Vec::new();
        macro_rules! keep {
            ($($field:ident),*) => {$(
                if format!("{:?}", settings.$field) != format!("{:?}", old.$field) {
                    needs_restart.push(stringify!($field));
                    settings.$field = old.$field.clone();
                }
            )*};
        }
        keep!(
            state_dir,
            audit_dir,
            sandbox,
            slurm,
            audit,
            engine,
            proxied_mcps
        );
        let chain = settings.build_chain(&self.engine)?;
        let reloaded = Reloaded {
            policies: settings.policies.len(),
            needs_restart,
        };
        let limiter = self.live().limiter.reloaded(&settings);
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
        let live = self.live();
        crate::resources::list(
            &live.settings.context_dirs,
            &live.settings.resource_patterns,
        )
    }

    /// One resource's text.
    pub fn read_resource(&self, uri: &str) -> Result<crate::resources::ResourceText, String> {
        let live = self.live();
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

    /// Stops the proxied servers (each audited) and records a clean stop, with how many
    /// records this process wrote and in how many `fdatasync`ed batches (the group commit).
    pub fn stopped(&self, transport: &str) -> anyhow::Result<()> {
        self.proxies.stop_all();
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

    /// Whether a live policy imports WASI (see [`Chain::imports_wasi`]).
    pub fn policies_import_wasi(&self) -> bool {
        self.live().chain.imports_wasi()
    }

    /// The tools `caller` may see: every builtin tool the list phase of the chain allows.
    pub fn tools(&self, caller: &Caller) -> Vec<ToolSpec> {
        let live = self.live();
        Tool::all()
            .filter(|tool| {
                let call =
                    self.policy_input(caller, &Target::Builtin(*tool), Phase::List, Map::new());
                !live.chain.evaluate(&call).is_denied()
            })
            .map(|tool| tool.spec().clone())
            .collect()
    }

    /// The proxied tools `caller` may see (list phase), as the remote servers describe them:
    /// discovery's, plus those the caller's own tenant's servers announced since.
    pub fn proxied_tools(&self, caller: &Caller) -> Vec<Arc<ProxiedTool>> {
        let live = self.live();
        self.proxies
            .tools(&caller.tenant)
            .into_iter()
            .filter(|tool| {
                let target = Target::Proxied(tool.clone());
                let call = self.policy_input(caller, &target, Phase::List, Map::new());
                !live.chain.evaluate(&call).is_denied()
            })
            .collect()
    }

    /// Runs one tool call through policy, executor and audit.
    pub fn call(&self, caller: &Caller, name: &str, arguments: Map<String, Value>) -> CallResult {
        self.call_with_progress(caller, name, arguments, &|_| {})
    }

    /// [`Gateway::call`], reporting progress while a tool waits (for MCP progress
    /// notifications).
    pub fn call_with_progress(
        &self,
        caller: &Caller,
        name: &str,
        arguments: Map<String, Value>,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> CallResult {
        let started = Instant::now();
        let instance = arguments.get("instance_id").and_then(Value::as_str);
        let Some(target) = self.target(caller, instance, name) else {
            let unknown =
                || format!("unknown tool `{name}`; call tools/list for the tools you may use");
            let message = (self.proxies.unavailable(&caller.tenant, name)).unwrap_or_else(unknown);
            let record = self.outcome_record(caller, name, None, Err(&ToolError(message.clone())));
            let record = record.duration(started.elapsed());
            return self.finish(vec![record], CallResult::error(message));
        };
        let mut call = self.policy_input(caller, &target, Phase::Call, arguments);
        // A call that can add bytes to its instance: the policies see the instance's usage,
        // and the space quotas reuse the walk.
        let measured = match &call.instance {
            Some(instance) if target.adds_bytes() => {
                Measured::of(&self.state, &caller.tenant, instance)
            }
            _ => Measured::default(),
        };
        measured.report(&mut call.usage);
        normalize_call(&mut call);
        let live = self.live();
        let decided = live.chain.evaluate(&call);
        // Write-ahead: a call that may change something is recorded before it runs, and nothing
        // runs if it cannot be. A read-only call's decision waits for its outcome and both are
        // one record (one fsync): nothing reaches the agent before it is durable, and a read
        // that never completes had no effect to record.
        let decision_record = Entry::call(&call, &decided);
        let recorded = if decided.is_denied() || !call.read_only {
            match self.audit.append(decision_record) {
                Ok(receipt) => Recorded::Ahead(receipt),
                Err(e) => {
                    return CallResult::error(format!(
                        "refused: the audit log cannot record this call ({e})"
                    ));
                }
            }
        } else {
            Recorded::Deferred(Box::new(decision_record))
        };
        let decision = decided.decision;
        if decision.decision == DecisionKind::Deny {
            let policy = decision.policy.unwrap_or_default();
            let reason = decision.reason.unwrap_or_default();
            return CallResult::error(format!("denied by policy `{policy}`: {reason}"));
        }
        // After the policies: a call they refused takes nothing from the tenant's buckets.
        if let Err(retry) = live.limiter.check(&caller.tenant, name) {
            let message = retry.to_string();
            let outcome = self
                .outcome_record(
                    caller,
                    name,
                    call.instance.as_deref(),
                    Err(&ToolError(message.clone())),
                )
                .detail("retry_after_s", retry.seconds());
            return self.settle(recorded, Vec::new(), outcome, CallResult::error(message));
        }
        let arguments = decision.arguments.unwrap_or(call.arguments);
        let context = self.context(&live.settings, caller, progress, measured);
        let (result, proxied) = self.run(&target, &context, arguments);
        let events = (context.events.take().into_iter())
            .map(|event| {
                event
                    .who(caller.tenant.as_ref(), &caller.principal)
                    .tool(name)
            })
            .collect();
        let outcome = self
            .outcome_record(caller, name, call.instance.as_deref(), result.as_ref())
            .duration(started.elapsed());
        let response = match result {
            Ok(output) => CallResult {
                structured: output.structured,
                text: output.summary,
                is_error: proxied.as_ref().is_some_and(|r| r.is_error == Some(true)),
                proxied: proxied.map(Box::new),
            },
            Err(e) => CallResult::error(e.0),
        };
        self.settle(recorded, events, outcome, response)
    }

    /// A builtin tool, else a proxied one (`<proxy>__<tool>`) as the caller's instance sees it.
    fn target(&self, caller: &Caller, instance: Option<&str>, name: &str) -> Option<Target> {
        Tool::from_name(name).map(Target::Builtin).or_else(|| {
            self.proxies
                .find(&caller.tenant, instance, name)
                .map(Target::Proxied)
        })
    }

    /// The run step: the builtin tool, or the proxied server (whose raw result comes back too).
    fn run(
        &self,
        target: &Target,
        cx: &Context<'_>,
        arguments: Map<String, Value>,
    ) -> (
        Result<Output, ToolError>,
        Option<rmcp::model::CallToolResult>,
    ) {
        match target {
            Target::Builtin(tool) => {
                let result = tool.run(cx, arguments);
                if *tool == Tool::Instances(InstanceTool::ArchiveInstance)
                    && let Some(Value::String(id)) = result
                        .as_ref()
                        .ok()
                        .and_then(|o| o.structured.pointer("/instance/id"))
                {
                    // The archive check passed and the instance is archived: stop its servers.
                    self.proxies.stop_instance(cx.tenant, id);
                }
                (result, None)
            }
            Target::Proxied(tool) => {
                match crate::proxy::run(&self.proxies, &self.state, cx.tenant, tool, arguments) {
                    Ok((output, raw)) => (Ok(output), Some(raw)),
                    Err(e) => (Err(e), None),
                }
            }
        }
    }

    /// The policy input for a builtin or proxied tool. A proxied tool's `read_only` is the
    /// remote `readOnlyHint`: the server's own claim, trusted as far as whoever configured it.
    fn policy_input(
        &self,
        caller: &Caller,
        target: &Target,
        phase: Phase,
        arguments: Map<String, Value>,
    ) -> Call {
        let (name, read_only) = match target {
            Target::Builtin(tool) => (tool.name(), tool.spec().read_only),
            Target::Proxied(tool) => (tool.exposed_name.as_str(), tool.read_only),
        };
        let mut call = Call::new(name, Value::Object(arguments));
        if let Target::Proxied(tool) = target {
            call.server = tool.server.clone();
            call.remote_tool = Some(tool.remote_name.clone());
        }
        call.phase = phase;
        call.tenant = caller.tenant.to_string();
        call.principal = caller.principal.clone();
        call.read_only = read_only;
        call.instance = call
            .arguments
            .get("instance_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if phase == Phase::Call {
            if let Ok(instances) = self.state.count(&caller.tenant) {
                call.usage.insert("instances".to_owned(), instances as u64);
            }
            if let Ok(jobs) = self.state.running_jobs(&caller.tenant, None) {
                call.usage
                    .insert("running_jobs".to_owned(), jobs.len() as u64);
            }
        }
        call
    }

    fn context<'a>(
        &'a self,
        settings: &'a Settings,
        caller: &'a Caller,
        progress: &'a (dyn Fn(Progress) + Sync),
        measured: Measured,
    ) -> Context<'a> {
        let quotas = settings.tenants.get(&caller.tenant).map(|t| t.quotas);
        Context {
            tenant: &caller.tenant,
            state: &self.state,
            files: &settings.files,
            quotas: quotas.unwrap_or_default(),
            jobs: &self.jobs,
            host_commands: &settings.host_commands,
            progress,
            events: RefCell::new(Vec::new()),
            measured,
        }
    }

    /// The record of what a call did (or why it did not run), without the policy input: that
    /// is in the decision record, which replays; this one is skipped by `policy test`.
    fn outcome_record(
        &self,
        caller: &Caller,
        name: &str,
        instance: Option<&str>,
        result: Result<&Output, &ToolError>,
    ) -> Entry {
        let outcome = match result {
            Ok(output) => output.outcome.clone(),
            Err(e) => Outcome {
                error: Some(e.0.clone()),
                ..Outcome::default()
            },
        };
        let entry = Entry::new(Event::Call)
            .who(caller.tenant.as_ref(), &caller.principal)
            .tool(name)
            .outcome(outcome);
        match instance {
            Some(instance) => entry.instance(instance),
            None => entry,
        }
    }

    /// Makes a call's records durable, in one batch, before its result goes back: the events it
    /// caused, then its outcome — a record pointing at the write-ahead decision, or the
    /// deferred decision record completed with the outcome.
    fn settle(
        &self,
        decision: Recorded,
        mut records: Vec<Entry>,
        outcome: Entry,
        response: CallResult,
    ) -> CallResult {
        records.push(match decision {
            Recorded::Ahead(receipt) => outcome.detail("decision_seq", receipt.seq),
            Recorded::Deferred(decision) => Entry {
                outcome: outcome.outcome,
                duration_ms: outcome.duration_ms,
                detail: outcome.detail,
                ..*decision
            },
        });
        self.finish(records, response)
    }

    /// Appends the records; a result that cannot be recorded is not returned as success.
    fn finish(&self, records: Vec<Entry>, response: CallResult) -> CallResult {
        match self.audit.append_all(records) {
            Ok(_) => response,
            Err(e) => CallResult::error(format!(
                "the call ran but its outcome could not be recorded in the audit log ({e}); check its result before retrying"
            )),
        }
    }
}
