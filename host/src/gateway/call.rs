//! One tool call as one value, whichever way it came in.
//!
//! A transport turns what it received into a [`Request`] (who, how, which tool, which
//! arguments). [`Gateway::dispatch`] derives everything else **once** — the target tool, the
//! instance, the tenant's usage, the policy input — into a [`Prepared`] call, and then runs the
//! one pipeline: decide (policy chain) → admit (the decision, the rate limit) → record the
//! decision → run → record the outcome → [`CallResult`]. No layer below looks anything up again, and no transport type reaches it:
//! MCP over any transport, the local CLI and later entry points only translate to and from it.
//!
//! Every exit path leaves an audit record. A call that may change something is recorded before
//! it runs (write-ahead: nothing runs if it cannot be recorded); a read-only call's decision is
//! recorded with its outcome, in one record and one `fdatasync`, and a call refused before it
//! ran in one record when it ends (nothing ran), within its tenant's budget of such records
//! (beyond it, counted into a summary: `refusals.rs`). The last records are written on the caller's thread
//! ([`Gateway::dispatch`]) or awaited as a future ([`Gateway::dispatch_async`]); either way the
//! result goes back only once they are durable.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use super::result::Unsettled;
use super::target::Target;
use super::{CallResult, Caller, Failure, Gateway, Request, Snapshot, Transfer};
use crate::audit::{Entry, Event, Outcome, Receipt};
use crate::code_mode::JobScope;
use crate::policy::normalize::normalize_call;
use crate::policy::{Call, DecisionKind, FinalDecision, Phase};
use crate::state::{InstanceId, JobId, TaskRecord};
use crate::telemetry::CallSpan;
use crate::tools::{Context, Output, Progress, ToolError};
use crate::usage::Measured;

/// A call with everything derived once: caller, target, instance, usage and the policy input
/// (whose `arguments` are the call's, normalised).
struct Prepared<'a> {
    caller: Caller,
    target: Target,
    /// The call's `instance_id`, validated.
    instance: Option<InstanceId>,
    input: Call,
    /// The instance's bytes as the policies saw them, reused by the space quotas.
    measured: Measured,
    progress: &'a (dyn Fn(Progress) + Sync),
    transfer: Option<&'a Transfer>,
    started: Instant,
    /// The job's door counts this call in flight until the call is dropped.
    _job: Option<JobCall>,
    accepts_task: bool,
    observes: bool,
    cancel: Option<tokio_util::sync::CancellationToken>,
    /// A later step of a request already counted against the rate limit.
    follows: bool,
}

/// A call from a job's code, holding its place in the job's concurrency limit.
struct JobCall {
    scope: Arc<JobScope>,
}

impl Drop for JobCall {
    fn drop(&mut self) {
        self.scope.release();
    }
}

/// Who watches a call go through the pipeline: its metrics (recorded when dropped) and its
/// trace span (sent when it ends).
struct Watch<'a> {
    tally: crate::metrics::Tally<'a>,
    span: CallSpan<'a>,
}

/// A call that stopped before it ran, with the record that says why (none for a denial: its
/// decision record says it).
struct Stopped {
    record: Option<Box<Entry>>,
    result: CallResult,
}

/// Where a call's decision record is.
enum Recorded {
    /// Durable before the call ran (admitted calls that may change something).
    Ahead(Receipt),
    /// Written with the outcome, after a read-only call ran or once a call was refused.
    Deferred(Box<Entry>),
}

impl Gateway {
    /// Counts a request of a job's code that is not a tool call against the job's
    /// `[code_mode] max_calls_per_job` (a tool call is counted as it is admitted).
    pub fn count_job_request(&self, job: &JobScope) -> Result<(), String> {
        job.count(&self.snapshot().settings.code_mode)
    }

    /// Runs one call through the pipeline with the settings and policies of `live`, counted in
    /// the metrics and traced (when `[telemetry]` is on) whichever way it ends. Its records
    /// are made durable on this thread (see [`crate::audit::AuditLog::append_all`]).
    pub fn dispatch(&self, live: &Snapshot, request: Request<'_>) -> CallResult {
        let mut watch = self.watch(&request);
        let unsettled = self.budgeted(live, self.pipeline(live, request, &mut watch));
        let written = self.audit.append_all(unsettled.records);
        watch.end(unsettled.result.settled(written, unsettled.ran))
    }

    /// [`Gateway::dispatch`] for an async task that must not park its thread: for a call that
    /// runs without writing ahead (see [`Snapshot::runs_on_runtime`]), nothing here waits but
    /// for its records to be durable, and that wait is a future (the audit log's commit thread
    /// writes them). Any other call still works, but may park the thread on the log.
    pub async fn dispatch_async(&self, live: &Snapshot, request: Request<'_>) -> CallResult {
        let mut watch = self.watch(&request);
        let unsettled = self.budgeted(live, self.pipeline(live, request, &mut watch));
        let written = self.audit.submit(unsettled.records).await;
        watch.end(unsettled.result.settled(written, unsettled.ran))
    }

    /// A call that did not run keeps its records within its tenant's budget of them; beyond
    /// it they are counted into a summary instead (see [`super::refusals`]).
    fn budgeted(&self, live: &Snapshot, mut unsettled: Unsettled) -> Unsettled {
        if !unsettled.ran {
            let records = std::mem::take(&mut unsettled.records);
            let (failure, per_minute) =
                (unsettled.result.failure, live.settings.refusals_per_minute);
            let admitted = self.refusals.admit(records, failure, per_minute);
            unsettled.records = admitted.unwrap_or_else(|| {
                self.metrics.refusal_summarised();
                Vec::new()
            });
        }
        unsettled
    }

    fn watch(&self, request: &Request<'_>) -> Watch<'_> {
        let trace = request.trace.as_ref();
        let tenant = request.caller.tenant.as_ref();
        Watch {
            tally: self.metrics.tally(),
            span: (self.telemetry).span(trace, tenant, request.via.as_str()),
        }
    }

    /// [`Gateway::dispatch`]'s steps, each reported to `watch`. The order is the contract:
    /// prepare → decide → admit → record → run → record → result. What it returns goes back to the
    /// caller once its records are durable.
    fn pipeline(&self, live: &Snapshot, request: Request<'_>, watch: &mut Watch<'_>) -> Unsettled {
        let mut call = match self.prepare(live, request) {
            Ok(call) => call,
            Err(stopped) => {
                let records = stopped.record.into_iter().map(|r| *r).collect();
                return Unsettled::stopped(records, stopped.result);
            }
        };
        watch.tally.tool(&call.input.tool);
        watch.span.prepared(&call.input);
        let decided = live.chain.evaluate(&call.input);
        watch.tally.decided(&decided);
        watch.span.decided(&decided);
        let decision = Entry::call(&call.input, &decided);
        // Admitted (or stopped: denied, over the rate limit) before anything is written, so a
        // call that does not run makes one record, written with the others of its batch.
        let arguments = match self.admit(live, &mut call, decided.decision) {
            Ok(arguments) => arguments,
            Err(Stopped {
                record: None,
                result,
            }) => return Unsettled::stopped(vec![decision], result),
            Err(Stopped {
                record: Some(outcome),
                result,
            }) => {
                let decision = Recorded::Deferred(Box::new(decision));
                return Unsettled::stopped(settle(decision, Vec::new(), *outcome), result);
            }
        };
        let recorded = match self.record_decision(&call, decision) {
            Ok(recorded) => recorded,
            Err(refused) => return Unsettled::stopped(Vec::new(), refused),
        };
        // A listing asks the chain about each entry, as the same call on that entry.
        let listing = match call.target {
            Target::Builtin(tool) if tool.lists() => Some(arguments.clone()),
            _ => None,
        };
        let visible = |path: &str| call.may_see(live, listing.as_ref(), path);
        let ahead = matches!(recorded, Recorded::Ahead(_));
        let commit = |events: Vec<Entry>| {
            if !ahead || events.is_empty() {
                return Err(events);
            }
            let attributed = events.iter().cloned().map(|e| call.attribute(e)).collect();
            self.audit
                .append_all(attributed)
                .map(drop)
                .map_err(|_| events)
        };
        let cx = self.context(live, &call, &visible, &commit);
        let tail = arguments.get("tail").and_then(Value::as_u64);
        let trace = watch.span.traceparent();
        let (result, proxied) = self.run(&call, &cx, arguments, trace);
        let task = match &result {
            Ok(output) => self.open_task(&call, &cx, output, tail),
            Err(_) => None,
        };
        let events = cx.events.take().into_iter();
        let events = events.map(|event| call.attribute(event)).collect();
        let outcome = call.outcome(result.as_ref());
        let response = CallResult {
            task: task.map(Box::new),
            ..CallResult::from_run(result, proxied)
        };
        Unsettled {
            records: settle(recorded, events, outcome),
            result: response,
            ran: true,
        }
    }

    /// A task for a job call whose job still runs after the wait, if the client takes one:
    /// durable, and recorded as an event of this call. `None` also when the task cannot be
    /// written: the call then answers as for a client without tasks (the job runs on, and
    /// `poll_job` follows it).
    fn open_task(
        &self,
        call: &Prepared<'_>,
        cx: &Context<'_>,
        output: &Output,
        tail: Option<u64>,
    ) -> Option<TaskRecord> {
        let Target::Builtin(tool) = call.target else {
            return None;
        };
        let given_up = call.cancel.as_ref().is_some_and(|c| c.is_cancelled());
        if !call.accepts_task
            || given_up
            || !tool.becomes_task()
            || output.structured["job"]["final"] != false
        {
            return None;
        }
        let job = output.structured["job"]["job_id"].as_str()?;
        let job = JobId::parse(job).ok()?;
        let instance = call.instance.as_ref()?;
        let tail = tail.and_then(|t| usize::try_from(t).ok());
        let tenant = &call.caller.tenant;
        match self
            .state
            .new_task(tenant, instance, &job, tool.name(), tail)
        {
            Ok(task) => {
                cx.record(
                    Entry::new(Event::TaskCreated)
                        .instance(instance.as_str())
                        .detail("task_id", task.task_id.as_str())
                        .detail("job_id", job.as_str()),
                );
                Some(task)
            }
            Err(e) => {
                crate::proxy::log(&format!("could not create a task for job `{job}`: {e}"));
                None
            }
        }
    }

    /// Derives the call once: target (builtin, else the caller's instance's proxied tool),
    /// validated instance, usage counters, normalised policy input.
    fn prepare<'a>(&self, live: &Snapshot, request: Request<'a>) -> Result<Prepared<'a>, Stopped> {
        let started = Instant::now();
        let Request {
            caller,
            via,
            tool,
            mut arguments,
            progress,
            transfer,
            job,
            job_counted,
            trace: _,
            accepts_task,
            observes,
            cancel,
            follows,
        } = request;
        let stop_as = |failure: Failure, message: String| {
            let error = ToolError::of(failure, message);
            Stopped {
                record: Some(Box::new(
                    outcome_record(&caller, &tool, None, Err(&error)).duration(started.elapsed()),
                )),
                result: CallResult::failed(error.failure, error.message),
            }
        };
        let stop = |message: String| stop_as(Failure::Other, message);
        // A job's code: its tenant still served (a job outlives the reload that takes its
        // tenant out), its door's limits, and its own instance (filled in or checked).
        let job = match job {
            None => None,
            Some(scope) if !live.auth.serves(&scope.tenant) => {
                return Err(stop_as(
                    Failure::Denied,
                    format!(
                        "refused: tenant `{}` is no longer configured on this gateway (ask the admin)",
                        scope.tenant
                    ),
                ));
            }
            Some(scope) => {
                match scope.admit(&live.settings.code_mode, &tool, &mut arguments, job_counted) {
                    Ok(()) => Some(JobCall { scope }),
                    Err(message) => return Err(stop(message)),
                }
            }
        };
        let raw_instance = arguments.get("instance_id").and_then(Value::as_str);
        let Some(target) = self.target(&caller, raw_instance, &tool, cancel.as_ref()) else {
            if cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                return Err(stop(format!(
                    "the client cancelled `{tool}` before the gateway found the tool; nothing ran"
                )));
            }
            let unknown =
                || format!("unknown tool `{tool}`; call tools/list for the tools you may use");
            let unavailable = self.proxies.unavailable(&caller.tenant, &tool);
            return Err(stop(unavailable.unwrap_or_else(unknown)));
        };
        let instance = match raw_instance.map(InstanceId::parse).transpose() {
            Ok(instance) => instance,
            Err(e) => return Err(stop(e.to_string())),
        };
        let mut input = target.input(&caller, via, Phase::Call, arguments);
        input.instance = instance.as_ref().map(|id| id.as_str().to_owned());
        input.job = job.as_ref().map(|j| j.scope.job_id.to_string());
        // The counters a quota policy judges: one the host cannot take refuses the call, since a
        // policy would read a missing counter as nothing used.
        let uncounted = |what: &str, e: &dyn std::fmt::Display| {
            stop(format!(
                "refused: the gateway could not count {what} ({e}), which the policies judge; retry, or ask the admin if it persists"
            ))
        };
        let instances = (self.state.count(&caller.tenant))
            .map_err(|e| uncounted("the tenant's instances", &e))?;
        input.usage.insert("instances".to_owned(), instances as u64);
        let jobs = (self.state.running_job_count(&caller.tenant))
            .map_err(|e| uncounted("the tenant's running jobs", &e))?;
        (input.usage).insert("running_jobs".to_owned(), jobs as u64);
        // A call that can add bytes to its instance: the policies see the instance's usage,
        // and the space quotas reuse the walk.
        let measured = match &instance {
            Some(id) if target.adds_bytes() => Measured::of(&self.state, &caller.tenant, id)
                .map_err(|e| uncounted("the bytes the instance holds", &e))?,
            _ => Measured::default(),
        };
        measured.report(&mut input.usage);
        normalize_call(&mut input);
        Ok(Prepared {
            caller,
            target,
            instance,
            input,
            measured,
            progress,
            transfer,
            started,
            _job: job,
            accepts_task,
            observes,
            cancel,
            follows,
        })
    }

    /// Write-ahead: an admitted call that may change something is durable before it runs. A
    /// built-in read-only (or only observing) call's decision waits for its outcome (nothing
    /// reaches the caller before its records are durable, and a call that only reads had no
    /// effect to record first). `Err` is the refusal to return when the log cannot record the
    /// call.
    fn record_decision(&self, call: &Prepared<'_>, record: Entry) -> Result<Recorded, CallResult> {
        // A proxied tool's `readOnlyHint` is the server's claim: enough for the policies, not
        // for running before the decision is durable.
        let read_only = call.input.read_only && matches!(call.target, Target::Builtin(_));
        if read_only || call.observes {
            return Ok(Recorded::Deferred(Box::new(record)));
        }
        match self.audit.append(record) {
            Ok(receipt) => Ok(Recorded::Ahead(receipt)),
            Err(e) => Err(CallResult::failed(
                Failure::Busy,
                format!("refused: the audit log cannot record this call ({e})"),
            )),
        }
    }

    /// The final arguments of a call the policies let through, or why it stops: a denial
    /// (its decision record is already the whole story), a rewrite that moved the call to
    /// another instance (usage, quotas and the proxied target were derived for this one), or
    /// the tenant's rate limit (checked after the policies, so a refused call takes nothing
    /// from the buckets).
    fn admit(
        &self,
        live: &Snapshot,
        call: &mut Prepared<'_>,
        decision: FinalDecision,
    ) -> Result<Map<String, Value>, Stopped> {
        let policy = decision.policy.unwrap_or_default();
        let arguments = match decision.decision {
            DecisionKind::Deny => {
                let reason = decision.reason.unwrap_or_default();
                return Err(Stopped {
                    record: None,
                    result: CallResult::failed(
                        Failure::Denied,
                        format!("denied by policy `{policy}`: {reason}"),
                    ),
                });
            }
            DecisionKind::Rewrite => decision.arguments.unwrap_or_default(),
            // The decision record holds the input now: its arguments can move.
            DecisionKind::Allow => std::mem::take(&mut call.input.arguments),
        };
        let instance = arguments.get("instance_id").and_then(Value::as_str);
        if instance != call.instance.as_ref().map(InstanceId::as_str) {
            return Err(call.stop(Failure::Denied, format!(
                "refused: policy `{policy}` rewrote `instance_id`; a policy may change a call's arguments but not move it to another instance (ask the admin to fix the policy)"
            )));
        }
        if !call.follows
            && let Err(retry) = live.limiter.check(&call.caller.tenant, &call.input.tool)
        {
            let limited = Failure::RateLimited {
                retry_after_s: u32::try_from(retry.seconds()).unwrap_or(u32::MAX),
            };
            let mut stopped = call.stop(limited, retry.to_string());
            stopped.record =
                (stopped.record).map(|r| Box::new(r.detail("retry_after_s", retry.seconds())));
            return Err(stopped);
        }
        Ok(arguments)
    }

    fn context<'a>(
        &'a self,
        live: &'a Snapshot,
        call: &'a Prepared<'a>,
        visible: &'a dyn Fn(&str) -> bool,
        commit: &'a dyn Fn(Vec<Entry>) -> Result<(), Vec<Entry>>,
    ) -> Context<'a> {
        let settings = &live.settings;
        let quotas = settings.tenants.get(&call.caller.tenant).map(|t| t.quotas);
        Context {
            tenant: &call.caller.tenant,
            instance: call.instance.as_ref(),
            state: &self.state,
            files: &settings.files,
            quotas: quotas.unwrap_or_default(),
            jobs: &self.jobs,
            code_mode: &self.code_mode,
            proxies: &self.proxies,
            host_commands: &settings.host_commands,
            progress: call.progress,
            events: RefCell::new(Vec::new()),
            commit,
            measured: &call.measured,
            transfer: call.transfer,
            room: &self.room,
            accepts_task: call.accepts_task,
            cancel: call.cancel.as_ref(),
            visible,
        }
    }

    /// The run step: the builtin tool, or the proxied server (whose whole result comes back
    /// too; `trace` is the call's span as a `traceparent`, passed on in `_meta`).
    fn run(
        &self,
        call: &Prepared<'_>,
        cx: &Context<'_>,
        arguments: Map<String, Value>,
        trace: Option<String>,
    ) -> (Result<Output, ToolError>, Option<Value>) {
        match &call.target {
            Target::Builtin(tool) => (tool.run(cx, arguments), None),
            Target::Proxied(tool) => {
                let (tenant, instance) = (&call.caller.tenant, call.instance.as_ref());
                let proxies = &self.proxies;
                let state = &self.state;
                let along = crate::proxy::Along {
                    trace,
                    cancel: call.cancel.clone(),
                };
                match crate::proxy::run(proxies, state, tenant, instance, tool, arguments, along) {
                    Ok(reply) => {
                        let outcome = Outcome {
                            bytes: Some(reply.bytes),
                            error: reply.remote_error,
                            ..Outcome::default()
                        };
                        let output = Output {
                            structured: reply.structured,
                            summary: reply.summary,
                            outcome,
                        };
                        (Ok(output), Some(reply.whole))
                    }
                    Err(message) => (Err(ToolError::new(message)), None),
                }
            }
        }
    }
}

/// The records of a call that ran (or stopped after its decision): the events it caused, then
/// its outcome — a record pointing at the write-ahead decision, or the deferred decision
/// record completed with the outcome.
fn settle(decision: Recorded, mut records: Vec<Entry>, outcome: Entry) -> Vec<Entry> {
    records.push(match decision {
        Recorded::Ahead(receipt) => outcome.detail("decision_seq", receipt.seq),
        Recorded::Deferred(decision) => Entry {
            outcome: outcome.outcome,
            duration_ms: outcome.duration_ms,
            detail: outcome.detail,
            ..*decision
        },
    });
    records
}

impl Watch<'_> {
    /// Ends the call's trace span with its result.
    fn end(self, result: CallResult) -> CallResult {
        let failed = result.is_error.then_some(result.text.as_str());
        self.span.end(failed);
        result
    }
}

impl Prepared<'_> {
    /// Whether the policies let this call's caller look at `path`: asked as this listing's
    /// call (its final `arguments`) on `path` instead. A listing shows only such entries, so
    /// listing a directory does not reveal the names beneath it that the policies keep from
    /// the caller. A fault is a denial. Nothing is recorded: the listing's call is.
    fn may_see(&self, live: &Snapshot, arguments: Option<&Map<String, Value>>, path: &str) -> bool {
        let Some(arguments) = arguments else {
            return true;
        };
        if !live.chain.judges(&self.input.tenant, &self.input.tool) {
            return true;
        }
        let mut input = self.input.clone();
        input.arguments = arguments.clone();
        input.arguments.insert("path".to_owned(), path.into());
        !live.chain.evaluate(&input).is_denied()
    }

    /// Stops this call with `message`, recorded as its outcome.
    fn stop(&self, failure: Failure, message: String) -> Stopped {
        let error = ToolError::of(failure, message);
        Stopped {
            record: Some(Box::new(self.outcome(Err(&error)))),
            result: CallResult::failed(error.failure, error.message),
        }
    }

    /// An event a tool queued, attributed to this call's caller and tool.
    fn attribute(&self, event: Entry) -> Entry {
        let caller = &self.caller;
        event
            .who(caller.tenant.as_ref(), &caller.principal)
            .tool(&self.input.tool)
    }

    fn outcome(&self, result: Result<&Output, &ToolError>) -> Entry {
        let instance = self.instance.as_ref().map(InstanceId::as_str);
        outcome_record(&self.caller, &self.input.tool, instance, result)
            .duration(self.started.elapsed())
    }
}

/// The record of what a call did (or why it did not run), without the policy input: that is in
/// the decision record, which replays; this one is skipped by `policy test`.
fn outcome_record(
    caller: &Caller,
    tool: &str,
    instance: Option<&str>,
    result: Result<&Output, &ToolError>,
) -> Entry {
    let outcome = match result {
        Ok(output) => output.outcome.clone(),
        Err(e) => Outcome {
            error: Some(e.message.clone()),
            ..Outcome::default()
        },
    };
    let entry = Entry::new(Event::Call)
        .who(caller.tenant.as_ref(), &caller.principal)
        .tool(tool)
        .outcome(outcome);
    match instance {
        Some(instance) => entry.instance(instance),
        None => entry,
    }
}
