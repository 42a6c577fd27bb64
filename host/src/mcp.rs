//! The MCP face of the gateway: an rmcp `ServerHandler` written by hand (the tools are known
//! only at run time, after policy), serving [`Gateway::tools`] and [`Gateway::call`].
//!
//! Async at the edge, sync in the core: every gateway call crosses [`blocking`], the one bridge,
//! bounded by a semaphore so a flood of calls cannot starve the runtime of blocking threads. On a
//! session's own runtime (stdio) a brief call with nothing else in flight runs on the runtime's
//! thread instead: handing it to a blocking thread and back costs two cross-CPU wake-ups, a
//! quarter of such a call's time here.

mod tasks;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::code_mode::JobScope;
use crate::config::ResultType;
use crate::gateway::{CallResult, Caller, Gateway, Request, Snapshot};
use crate::permits::Permits;
use crate::policy::Via;
use crate::telemetry::TraceParent;
use crate::tools::{Progress, ToolSpec};

const INSTRUCTIONS: &str = "hpcgate runs your work on an HPC cluster under the site's policies. \
Start with `create_instance` (a private /workspace and /output), then use the file tools on that \
instance and `submit_job` to run commands. The resource `resource://hpcgate/guide` explains the \
workflow; other resources are the site's own documentation. Every call is checked by policy and \
recorded; a refusal says why and what to do.";

/// Calls in flight at most on one listener (a quarter of them for any one tenant, see
/// [`crate::permits`]).
const MAX_BLOCKING: usize = 64;

/// The gateway as an MCP server, for one session's caller or for callers identified per request.
#[derive(Clone)]
pub struct McpServer {
    gateway: Arc<Gateway>,
    /// `None`: every request carries its caller (HTTP, see [`request_caller`]).
    caller: Option<Caller>,
    /// Places for calls in flight: bounds blocking calls and one tenant's share of them, and
    /// tells a lone call it is alone.
    bridge: Arc<Permits>,
    /// A job's door ([`crate::code_mode`]): the caller is the job, calls come `via = job`.
    job: Option<Arc<JobScope>>,
}

impl McpServer {
    /// One session, one caller: stdio.
    pub fn new(gateway: Arc<Gateway>, caller: Caller) -> McpServer {
        McpServer::per_request(gateway).in_session(caller)
    }

    /// This server for one session of `caller` (the legacy SSE transport, [`crate::sse`]),
    /// sharing its places for calls in flight with every other session of the listener.
    pub fn in_session(&self, caller: Caller) -> McpServer {
        McpServer {
            caller: Some(caller),
            ..self.clone()
        }
    }

    /// Callers identified by the transport on each request (HTTP); clones share the bridge.
    pub fn per_request(gateway: Arc<Gateway>) -> McpServer {
        McpServer {
            gateway,
            caller: None,
            bridge: Arc::new(Permits::new(MAX_BLOCKING)),
            job: None,
        }
    }

    /// The server behind one job's socket: every request is that job, whatever it sends. The
    /// door makes one per request (it holds the gateway only while serving one), all sharing
    /// the door's `places`.
    pub(crate) fn for_job(
        gateway: Arc<Gateway>,
        scope: Arc<JobScope>,
        places: Arc<Permits>,
    ) -> McpServer {
        McpServer {
            gateway,
            caller: Some(scope.caller()),
            bridge: places,
            job: Some(scope),
        }
    }

    /// The job whose code sent this request, and so how it came in: this server's own door,
    /// else the one the HTTP transport attached for a job's token.
    fn job(&self, context: &RequestContext<RoleServer>) -> (Via, Option<Arc<JobScope>>) {
        let job = (self.job.clone()).or_else(|| request_job(&context.extensions));
        (if job.is_some() { Via::Job } else { Via::Mcp }, job)
    }

    /// Who sent this request: the session's caller, else the one the transport attached.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        self.caller
            .clone()
            .or_else(|| request_caller(&context.extensions))
            .ok_or_else(|| {
                McpError::internal_error("the transport did not identify the caller", None)
            })
    }

    /// The bridge from async to the synchronous core: a permit, then `spawn_blocking`; or, for
    /// a `brief` call that runs alone (see [`McpServer::alone`]), right here on the runtime's
    /// thread, holding it no longer than a bounded file operation and one audit commit (see
    /// [`Snapshot::runs_inline`]).
    async fn blocking<T, F>(&self, caller: Caller, brief: bool, work: F) -> Result<T, McpError>
    where
        T: Send + 'static,
        F: FnOnce(&Gateway, Caller) -> T + Send + 'static,
    {
        if brief
            && !self.gateway.audit().calls_arrive_together()
            && let Some(_all) = self.bridge.enter_alone()
        {
            let run = AssertUnwindSafe(|| work(&self.gateway, caller));
            return std::panic::catch_unwind(run).map_err(|_| call_failed(&"it panicked"));
        }
        let permit = (self.bridge.enter(&caller.tenant).await).map_err(|e| call_failed(&e))?;
        let gateway = self.gateway.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work(&gateway, caller)
        })
        .await;
        joined.map_err(|e| call_failed(&e))
    }

    /// Whether a call runs alone: no other call is in flight on this server, and calls do not
    /// arrive together ([`crate::audit::AuditLog::calls_arrive_together`]). A lone call
    /// commits its own record on its own thread, with no hand-off; but under load a call finds
    /// itself alone whenever a batch has just answered everyone, and leading a batch of one
    /// there would keep the calls that arrive during its `fdatasync` waiting for the next
    /// (measured: batches alternate between one call and the rest, and throughput drops by a
    /// tenth). Then it awaits the commit thread with the others ([`McpServer::on_runtime`]).
    fn alone(&self) -> bool {
        self.bridge.idle() && !self.gateway.audit().calls_arrive_together()
    }

    /// Runs a call on this task, for a call that needs no blocking thread (see
    /// [`Snapshot::runs_on_runtime`]): everything up to its audit records here, and the wait
    /// for them to be durable as a future. It holds a permit like a blocking call, so that a
    /// lone call still knows it is alone.
    async fn on_runtime(
        &self,
        live: &Snapshot,
        request: Request<'_>,
    ) -> Result<CallResult, McpError> {
        use futures_util::FutureExt as _;
        let enter = self.bridge.enter(&request.caller.tenant);
        let _permit = match &request.cancel {
            Some(cancel) => tokio::select! {
                held = enter => held,
                () = cancel.cancelled() => return Err(given_up_on()),
            },
            None => enter.await,
        }
        .map_err(|e| call_failed(&e))?;
        let call = AssertUnwindSafe(self.gateway.dispatch_async(live, request));
        call.catch_unwind()
            .await
            .map_err(|_| call_failed(&"it panicked"))
    }
}

/// What a call the client gave up on before it ran answers (rmcp sends no answer to a
/// cancelled request; this is for the record of whoever reads it).
const GIVEN_UP: &str = "the client gave up on the call before it ran";

fn given_up_on() -> McpError {
    McpError::internal_error(GIVEN_UP, None)
}

fn call_failed(e: &dyn std::fmt::Display) -> McpError {
    McpError::internal_error(format!("the gateway call failed: {e}"), None)
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("hpcgate", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Proxied tools appear when background discovery finishes, and change for one tenant
        // when one of its servers says so: tell the client to list again, only if the change
        // concerns its caller (a session whose caller is unknown hears only of discovery).
        // Ends with the session or the gateway.
        let tenant = self
            .caller
            .clone()
            .or_else(|| request_caller(&context.extensions))
            .map(|c| c.tenant);
        let Some(mut changes) = self.gateway.proxies().subscribe(tenant.as_ref()) else {
            return;
        };
        let peer = context.peer;
        tokio::spawn(async move {
            loop {
                let changed =
                    tokio::time::timeout(std::time::Duration::from_secs(30), changes.changed());
                match changed.await {
                    Ok(true) => {
                        if peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    Ok(false) => return,
                    Err(_) if peer.is_transport_closed() => return,
                    Err(_) => {}
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.gateway.metrics().request("tools/list");
        let (via, job) = self.job(&context);
        let (specs, proxied, result_type) = self
            .blocking(self.caller(&context)?, false, move |gateway, caller| {
                gateway.proxies().settle(LIST_WAITS_FOR_DISCOVERY);
                let live = gateway.snapshot();
                let (specs, proxied) = gateway.list(&live, &caller, via, job.as_deref());
                (specs, proxied, live.result_type())
            })
            .await?;
        // A proxied tool is listed as its server listed it (with its own outputSchema or none).
        let proxied = proxied.into_iter().map(|p| p.tool.clone());
        let builtin = specs.into_iter().map(|spec| mcp_tool(spec, result_type));
        Ok(ListToolsResult::with_all_items(
            builtin.chain(proxied).collect(),
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.gateway.metrics().request("resources/list");
        let entries = self
            .blocking(self.caller(&context)?, false, |gateway, _| {
                gateway.resources()
            })
            .await?;
        let resources = entries
            .into_iter()
            .map(|e| {
                let mut r = Resource::new(e.uri, e.name).with_description(e.description);
                r.mime_type = Some("text/markdown".to_owned());
                r.size = e.size;
                r
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.gateway.metrics().request("resources/read");
        let uri = request.uri;
        let read = self
            .blocking(self.caller(&context)?, false, move |gateway, _| {
                gateway.read_resource(&uri)
            })
            .await?;
        match read {
            Ok(text) => Ok(
                ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
                    uri: text.uri,
                    mime_type: Some(text.mime_type.to_owned()),
                    text: text.text,
                    meta: None,
                }])
                .into(),
            ),
            Err(message) => Err(McpError::resource_not_found(message, None)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.gateway.metrics().request("tools/call");
        let caller = self.caller(&context)?;
        // A client that declared the tasks extension (per request, or at `initialize`) gets a
        // task for a job that outlives the call's wait; others get the job's state.
        let accepts_task = (context.client_capabilities()).is_some_and(|c| c.supports_tasks());
        let name = request.name.to_string();
        let token = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let trace = (request.meta.as_ref().map(|m| &m.0.0))
            .and_then(trace_parent)
            .or_else(|| trace_parent(&context.meta.0.0));
        let arguments = request.arguments.unwrap_or_default();
        // Progress from the blocking call goes through a channel to a task that sends the
        // notifications in order; without a token nothing is sent.
        let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
        let forward = token.map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                while let Some(p) = progress_rx.recv().await {
                    let mut param = ProgressNotificationParam::new(token.clone(), p.progress);
                    param.total = p.total;
                    param.message = Some(p.message);
                    if peer.notify_progress(param).await.is_err() {
                        break;
                    }
                }
            })
        });
        // One snapshot of the settings and policies for the whole call: whether it may run
        // here, the pipeline, the shape of its result.
        let live = self.gateway.snapshot();
        // A job's call never runs on a runtime's thread: every door of every job shares the
        // code-mode runtime's few threads, and each door would think itself alone, so a job's
        // reads from a stalled filesystem would hold up every other job's tools; and a job's
        // call (through its door or with its token) is held for the stop (below).
        let (via, job) = self.job(&context);
        let door = job.is_some();
        let brief = live.runs_inline(&name) && !door;
        let counted = door_count(&context.extensions);
        let cancel = context.ct.clone();
        let result = if live.runs_on_runtime(&name) && !self.alone() && !door {
            drop(progress_tx);
            let request = Request::new(caller, via, &name, arguments)
                .for_job(job)
                .counted_at_door(counted)
                .in_trace(trace)
                .accepting_task(accepts_task)
                .cancelled_by(cancel);
            self.on_runtime(&live, request).await?
        } else {
            let snapshot = live.clone();
            let given_up = cancel.clone();
            // A stopping gateway waits for a job's call to be recorded, not only answered:
            // the door answers a call given up on at once, while it still ends and records.
            let held = door.then(|| self.gateway.code_mode().holding_a_call());
            let work = move |gateway: &Gateway, caller| {
                let _held = held;
                if given_up.is_cancelled() {
                    // Given up on while it waited for its place: it does not run.
                    return CallResult::error(GIVEN_UP.to_owned());
                }
                let report = |p: Progress| {
                    let _ = progress_tx.send(p);
                };
                let request = Request::new(caller, via, &name, arguments)
                    .for_job(job)
                    .counted_at_door(counted)
                    .in_trace(trace)
                    .accepting_task(accepts_task)
                    .cancelled_by(given_up);
                gateway.dispatch(&snapshot, request.with_progress(&report))
            };
            // A call given up on while it waits for a place never runs.
            tokio::select! {
                result = self.blocking(caller, brief, work) => result?,
                () = cancel.cancelled() => return Err(given_up_on()),
            }
        };
        if let Some(forward) = forward {
            // The sender is gone with the call: the task ends after the last notification.
            let _ = forward.await;
        }
        if let Some(task) = &result.task {
            return Ok(CallToolResponse::Task(tasks::created(task, &result)));
        }
        Ok(mcp_result(&live, result).into())
    }

    // rmcp answers the tasks methods itself for a client that did not declare the extension
    // (`-32021`), so these run only for clients that did.

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.gateway.metrics().request("tasks/get");
        let live = self.gateway.snapshot();
        let snapshot = live.clone();
        let (via, job) = self.job(&context);
        let counted = door_count(&context.extensions);
        let held = job
            .is_some()
            .then(|| self.gateway.code_mode().holding_a_call());
        let task_id = request.task_id;
        let polled = self
            .blocking(self.caller(&context)?, false, move |gateway, caller| {
                let _held = held;
                let request = Request::new(caller, via, "poll_job", Default::default());
                let request = request.for_job(job).counted_at_door(counted);
                gateway.poll_task(&snapshot, request, &task_id)
            })
            .await?;
        tasks::detailed(polled.map_err(tasks::error)?, |r| mcp_result(&live, r))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gateway.metrics().request("tasks/cancel");
        let live = self.gateway.snapshot();
        let (via, job) = self.job(&context);
        let counted = door_count(&context.extensions);
        let held = job
            .is_some()
            .then(|| self.gateway.code_mode().holding_a_call());
        let cancelled = self
            .blocking(self.caller(&context)?, false, move |gateway, caller| {
                let _held = held;
                let call = Request::new(caller, via, "cancel_job", Default::default());
                let call = call.for_job(job).counted_at_door(counted);
                gateway.cancel_task(&live, call, &request.task_id)
            })
            .await?;
        let cancelled = cancelled.map_err(tasks::error)?;
        if cancelled.result.is_error {
            // Refused by a policy or a limit: the job runs on, and the client must know.
            return Err(McpError::invalid_request(
                format!(
                    "tasks/cancel for `{}`: {}",
                    cancelled.task.task_id, cancelled.result.text
                ),
                None,
            ));
        }
        Ok(())
    }

    /// hpcgate's tasks never ask for input, so there is nothing to deliver: a known task is
    /// acknowledged (the spec: responses to keys not outstanding are ignored), an unknown one
    /// is "not found".
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gateway.metrics().request("tasks/update");
        let (via, job) = self.job(&context);
        let found = self
            .blocking(self.caller(&context)?, false, move |gateway, caller| {
                let call = Request::new(caller, via, "poll_job", Default::default()).for_job(job);
                gateway.find_task(&call, &request.task_id).map(|_| ())
            })
            .await?;
        found.map_err(tasks::error)?;
        Ok(())
    }
}

/// How long a `tools/list` waits for proxied servers' discovery still under way at start, so
/// that clients which list once see the proxied tools.
const LIST_WAITS_FOR_DISCOVERY: Duration = Duration::from_secs(3);

/// A call's result as MCP says it. A proxied tool's goes back whole, as the remote server sent
/// it, whatever `result_type` says (that shapes hpcgate's own results).
fn mcp_result(live: &Snapshot, result: CallResult) -> CallToolResult {
    if let Some(whole) = result.proxied {
        match serde_json::from_value::<CallToolResult>(whole) {
            Ok(mut proxied) => {
                // Required by the 2026-07-28 revision; rmcp drops it again for clients of
                // older revisions.
                proxied.result_type = Some(rmcp::model::ResultType::COMPLETE);
                return proxied;
            }
            Err(e) => {
                let message = format!("the proxied server's result is not an MCP tool result: {e}");
                return CallToolResult::error(vec![ContentBlock::text(message)]);
            }
        }
    }
    if result.is_error {
        // The message as text, whatever `result_type` says, and no structured content: an
        // error's `{"error": …}` is no tool's result type, and a client that checks every
        // structured content against the tool's outputSchema (the TypeScript SDK 1.x does,
        // errors included) would refuse the result instead of showing the error.
        return CallToolResult::error(vec![ContentBlock::text(result.text)]);
    }
    let result_type = live.result_type();
    let content = match result_type {
        ResultType::Both | ResultType::Text => vec![ContentBlock::text(result.text)],
        ResultType::Structured => Vec::new(),
    };
    let mut response = CallToolResult::success(content);
    if result_type != ResultType::Text {
        response.structured_content = Some(result.structured);
    }
    response
}

/// A builtin tool as `tools/list` shows it. Its `outputSchema` only when results carry
/// structured content (`result_type` other than `text`): MCP requires structured content from a
/// tool that declares one.
fn mcp_tool(spec: &ToolSpec, result_type: ResultType) -> Tool {
    let object = |schema: &serde_json::Value| match schema {
        serde_json::Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let tool = Tool::new(
        spec.name,
        spec.description,
        Arc::new(object(&spec.input_schema)),
    );
    let tool = match result_type {
        ResultType::Text => tool,
        ResultType::Both | ResultType::Structured => {
            tool.with_raw_output_schema(Arc::new(object(&spec.output_schema)))
        }
    };
    tool.annotate(
        ToolAnnotations::new()
            .read_only(spec.read_only)
            .destructive(spec.destructive)
            .idempotent(spec.idempotent),
    )
}

/// The caller's trace context, from `_meta` as the MCP semantic conventions carry it.
fn trace_parent(meta: &rmcp::model::JsonObject) -> Option<TraceParent> {
    let parent = meta.get("traceparent")?.as_str()?;
    TraceParent::parse(parent, meta.get("tracestate").and_then(|s| s.as_str()))
}

/// How the job's door counted this request, when a job's code sent it over HTTP (see
/// [`crate::code_mode::count_requests`]).
fn door_count(extensions: &rmcp::model::Extensions) -> Option<Result<(), String>> {
    extensions
        .get::<::http::request::Parts>()
        .and_then(|parts| {
            parts
                .extensions
                .get::<crate::code_mode::JobRequestCounted>()
        })
        .map(|counted| counted.0.clone())
}

/// The job door a transport attached to this MCP request (a job's token, see
/// [`crate::code_mode::remote`]), if any.
fn request_job(extensions: &rmcp::model::Extensions) -> Option<Arc<JobScope>> {
    extensions
        .get::<::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Arc<JobScope>>())
        .cloned()
}

/// The caller a transport attached to this MCP request (`http.rs` puts it in the request's extensions, which rmcp hands on), if any.
fn request_caller(extensions: &rmcp::model::Extensions) -> Option<Caller> {
    extensions
        .get::<::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
}
