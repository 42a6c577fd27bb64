//! The builtin tools, one file per family behind one [`Tool`] enum.
//!
//! Each family owns its argument structs (`deny_unknown_fields`: deserialising the final
//! arguments is the re-validation after policy rewrites), their JSON schemas, descriptions and
//! annotations, and the conversion into state or executor calls. Tools run synchronously: the
//! gateway calls them from its blocking bridge.

mod cluster;
mod files;
mod instances;
mod jobs;
pub mod results;
mod room;
pub mod text;
mod visible;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::audit::{Entry, Outcome};
use crate::code_mode::CodeMode;
use crate::config::{HostCommand, Quotas};
use crate::gateway::Failure;
use crate::jobs::Jobs;
use crate::proxy::ProxyManager;
use crate::state::{InstanceId, State, StateError, TenantName};
use hpcgate_executors::files::{FileError, FileLimits};

pub use jobs::MAX_WAIT_S;
pub use room::Room;

/// What a tool needs to run for one call, derived once by the gateway.
pub struct Context<'a> {
    pub tenant: &'a TenantName,
    /// The call's `instance_id`, validated once (its argument struct still declares it, for the
    /// schema and `deny_unknown_fields`).
    pub instance: Option<&'a InstanceId>,
    pub state: &'a State,
    pub files: &'a FileLimits,
    pub quotas: Quotas,
    pub jobs: &'a Jobs,
    /// The doors of jobs with tools (`tools = true`).
    pub code_mode: &'a CodeMode,
    /// Proxied servers (an archived instance's are stopped).
    pub proxies: &'a ProxyManager,
    pub host_commands: &'a BTreeMap<String, HostCommand>,
    /// Called while a tool waits (jobs); the transport turns it into progress notifications.
    pub progress: &'a (dyn Fn(Progress) + Sync),
    /// Audit events the tool produced (instance lifecycle, job state changes), appended by
    /// the gateway before the call's outcome record — also when the tool then fails.
    pub events: RefCell<Vec<Entry>>,
    /// Makes events durable now, attributed as [`Context::events`] are; gives them back if
    /// it cannot (or if the call's decision is not in the log yet: they must not precede it).
    pub commit: &'a dyn Fn(Vec<Entry>) -> Result<(), Vec<Entry>>,
    /// The call's instance as measured for the policies, for the space quotas.
    pub measured: &'a crate::usage::Measured,
    /// A streamed body lent by the door (see [`crate::gateway::Transfer`]).
    pub transfer: Option<&'a crate::gateway::Transfer>,
    /// Room under the space quotas held by writes in flight.
    pub room: &'a Room,
    /// The client takes a task for a job still running at the end of the call's wait.
    pub accepts_task: bool,
    /// Cancelled when the client gives up on the call.
    pub cancel: Option<&'a tokio_util::sync::CancellationToken>,
    /// Whether the policies let the caller look at a sandbox-view path with this tool: a
    /// listing leaves out the entries they would not.
    pub visible: &'a dyn Fn(&str) -> bool,
}

impl Context<'_> {
    /// Whether the client has given up on the call: a tool that waits stops.
    pub fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c.is_cancelled())
    }
}

impl Context<'_> {
    /// The call's instance; every tool whose arguments require `instance_id` has one.
    pub fn instance(&self) -> Result<&InstanceId, ToolError> {
        self.instance.ok_or_else(|| {
            ToolError::new(
                "`instance_id` is required; create one with `create_instance`".to_owned(),
            )
        })
    }

    /// Queues an audit event; the gateway adds tenant, principal and tool.
    pub fn record(&self, entry: Entry) {
        self.events.borrow_mut().push(entry);
    }

    /// Makes the events queued so far durable now rather than with the call's outcome: before
    /// a long wait, so that what the call started is in the log even if the gateway is killed
    /// during it. Those that cannot be written now stay queued.
    pub fn record_now(&self) {
        let events = self.events.take();
        if let Err(events) = (self.commit)(events) {
            self.events.borrow_mut().splice(0..0, events);
        }
    }
}

/// How far a waiting tool has got.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: String,
}

/// A tool's result: structured content, a one-line summary, and what the audit log records.
/// The transports' text block is the summary followed by the structured content ([`text`]).
#[derive(Debug, Clone)]
pub struct Output {
    /// A value of the tool's result type ([`results`]), whose schema is its `outputSchema`.
    pub structured: Value,
    pub summary: String,
    pub outcome: Outcome,
}

impl Output {
    /// The result `result` (a type of [`results`]) with its summary.
    fn new(result: &impl serde::Serialize, summary: String, outcome: Outcome) -> Output {
        Output {
            // Result types are plain records with string keys: serialising cannot fail.
            structured: serde_json::to_value(result).unwrap_or(Value::Null),
            summary,
            outcome,
        }
    }
}

/// Why a tool did not run or failed. The message is shown to the agent: it says what was
/// wrong and what to do, and never contains a host path. Its kind is said where it is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub message: String,
    pub failure: Failure,
}

impl ToolError {
    /// A failure of no particular kind.
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError::of(Failure::Other, message)
    }

    pub fn of(failure: Failure, message: impl Into<String>) -> ToolError {
        ToolError {
            message: message.into(),
            failure,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<StateError> for ToolError {
    fn from(e: StateError) -> Self {
        ToolError::of(Failure::from(&e), e.to_string())
    }
}

impl From<crate::jobs::JobError> for ToolError {
    fn from(e: crate::jobs::JobError) -> Self {
        ToolError::new(e.0)
    }
}

impl From<FileError> for ToolError {
    fn from(e: FileError) -> Self {
        ToolError::of(Failure::from(&e), e.to_string())
    }
}

/// How a tool presents itself in `tools/list`.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON schema of the arguments.
    pub input_schema: Value,
    /// JSON schema of the structured content of a successful result (an object).
    pub output_schema: Value,
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
}

impl ToolSpec {
    /// A tool that changes something, is not idempotent and destroys nothing; the builder
    /// methods below say otherwise. Both schemas are required: a tool cannot come without
    /// the type of its result.
    fn new(
        name: &'static str,
        description: &'static str,
        input_schema: Value,
        output_schema: Value,
    ) -> ToolSpec {
        ToolSpec {
            name,
            description,
            input_schema,
            output_schema,
            read_only: false,
            destructive: false,
            idempotent: false,
        }
    }

    /// Changes nothing (implies idempotent). Policies check only `deny_read` for these.
    fn read_only(self) -> ToolSpec {
        ToolSpec {
            read_only: true,
            idempotent: true,
            ..self
        }
    }

    fn destructive(self) -> ToolSpec {
        ToolSpec {
            destructive: true,
            ..self
        }
    }

    fn idempotent(self) -> ToolSpec {
        ToolSpec {
            idempotent: true,
            ..self
        }
    }
}

/// Declares a family's tool enum: variants, exposed names, `ALL` and `name()`.
macro_rules! tool_family {
    ($(#[$doc:meta])* $family:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $family {
            $($variant),*
        }

        impl $family {
            pub const ALL: &'static [$family] = &[$($family::$variant),*];

            /// The exposed name.
            pub fn name(self) -> &'static str {
                match self {
                    $($family::$variant => $name),*
                }
            }
        }
    };
}
use tool_family;

pub use cluster::ClusterTool;
pub use files::FileTool;
pub use instances::InstanceTool;
pub use jobs::JobTool;

/// Every builtin tool, by family: each family matches exhaustively over its own tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Instances(InstanceTool),
    Jobs(JobTool),
    Files(FileTool),
    Cluster(ClusterTool),
}

impl Tool {
    /// Every builtin tool, in `tools/list` order.
    pub fn all() -> impl Iterator<Item = Tool> {
        let instances = InstanceTool::ALL.iter().map(|t| Tool::Instances(*t));
        let jobs = JobTool::ALL.iter().map(|t| Tool::Jobs(*t));
        let files = FileTool::ALL.iter().map(|t| Tool::Files(*t));
        let cluster = ClusterTool::ALL.iter().map(|t| Tool::Cluster(*t));
        instances.chain(jobs).chain(files).chain(cluster)
    }

    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::all().find(|t| t.name() == name)
    }

    /// The exposed name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Instances(tool) => tool.name(),
            Tool::Jobs(tool) => tool.name(),
            Tool::Files(tool) => tool.name(),
            Tool::Cluster(tool) => tool.name(),
        }
    }

    /// How the tool presents itself; built once (a JSON schema costs allocations enough to
    /// show in the gateway's per-call profile).
    pub fn spec(self) -> &'static ToolSpec {
        static SPECS: std::sync::OnceLock<Vec<ToolSpec>> = std::sync::OnceLock::new();
        let specs = SPECS.get_or_init(|| Tool::all().map(Tool::build_spec).collect());
        let index = Tool::all().position(|t| t == self);
        &specs[index.expect("every tool is in Tool::all()")]
    }

    fn build_spec(self) -> ToolSpec {
        match self {
            Tool::Instances(tool) => instances::spec(tool),
            Tool::Jobs(tool) => jobs::spec(tool),
            Tool::Files(tool) => files::spec(tool),
            Tool::Cluster(tool) => cluster::spec(tool),
        }
    }

    /// Whether a call can add file bytes to its instance (so the gateway measures the
    /// instance's `workspace_bytes` / `output_bytes` for the policies first).
    pub fn adds_bytes(self) -> bool {
        matches!(
            self,
            Tool::Files(FileTool::WriteFile | FileTool::MovePath | FileTool::CopyPath)
                | Tool::Jobs(JobTool::SubmitJob | JobTool::RunPython)
        )
    }

    /// Whether a call is one bounded step that never waits on a job, a child process or a
    /// peer, and walks no tree: a single file operation within the file limits. Such a call
    /// may run on a session's runtime thread (see `McpServer::blocking`).
    pub fn brief(self) -> bool {
        matches!(
            self,
            Tool::Files(FileTool::StatPath | FileTool::ReadFile | FileTool::MakeDirectory)
        )
    }

    /// Whether the tool lists entries, each of which the policies are asked about
    /// ([`Context::visible`]).
    pub fn lists(self) -> bool {
        matches!(
            self,
            Tool::Files(FileTool::ListDirectory | FileTool::SearchFiles)
        )
    }

    /// Whether a call whose job outlives its wait may come back as an MCP task (when the
    /// client declared the tasks extension).
    pub fn becomes_task(self) -> bool {
        matches!(self, Tool::Jobs(JobTool::SubmitJob | JobTool::RunPython))
    }

    /// Runs the tool with its final (policy-approved) arguments.
    pub fn run(self, cx: &Context<'_>, arguments: Map<String, Value>) -> Result<Output, ToolError> {
        match self {
            Tool::Instances(tool) => instances::run(tool, cx, arguments),
            Tool::Jobs(tool) => jobs::run(tool, cx, arguments),
            Tool::Files(tool) => files::run(tool, cx, arguments),
            Tool::Cluster(tool) => cluster::run(tool, cx, arguments),
        }
    }
}

/// An instance's two writable areas, for the space quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Area {
    Workspace,
    Output,
}

/// Refuses `adding` more bytes in `area` of `instance` when that would pass the tenant's
/// `max_workspace_bytes` / `max_output_bytes` (see [`measure`]).
pub(crate) fn check_space(
    cx: &Context<'_>,
    instance: &crate::state::InstanceId,
    area: Area,
    adding: u64,
) -> Result<(), ToolError> {
    let Some((used, max)) = measure(cx, instance, area)? else {
        return Ok(());
    };
    let held = cx.room.held(cx.tenant, instance, area);
    if used
        .beside_holds(held)
        .saturating_add(held)
        .saturating_add(adding)
        > max
    {
        return Err(full(instance, area, used, held, max, adding));
    }
    Ok(())
}

/// Why `adding` bytes do not fit in `area`.
fn full(
    instance: &InstanceId,
    area: Area,
    used: crate::usage::Count,
    held: u64,
    max: u64,
    adding: u64,
) -> ToolError {
    let name = area.name();
    let uploads = match held {
        0 => String::new(),
        held => format!(", writes in flight hold {held} more,"),
    };
    ToolError::of(
        Failure::NoRoom,
        format!(
            "the {name} of `{instance}` holds {used}{uploads} and may hold {max} bytes (the tenant's \
         max_{name}_bytes); delete files there before adding {adding} more"
        ),
    )
}

/// Holds room in `area` of `instance` for a write ([`room`]): the `announced` size, else all
/// the room left up to `cap`; `None` when the area has no quota. The area is measured afresh.
pub(crate) fn hold_room(
    cx: &Context<'_>,
    instance: &InstanceId,
    area: Area,
    announced: Option<u64>,
    cap: u64,
) -> Result<Option<room::Hold>, ToolError> {
    let Some(max) = quota(cx, area) else {
        return Ok(None);
    };
    let measure = || walk(cx, instance, area, max).map(|used| (used, max));
    let wanted = |used, left: u64, held| match announced {
        Some(size) if size > left => Err(full(instance, area, used, held, max, size)),
        Some(size) => Ok(size),
        None => Ok(left.min(cap)),
    };
    cx.room
        .take((cx.tenant, instance, area), measure, wanted)
        .map(Some)
}

/// The bytes used in `area` of `instance` and the tenant's `max_workspace_bytes` /
/// `max_output_bytes` (`None`: no quota, and no walk): counted as measured for the policies
/// when this call's instance was, else by walking the area (stopping once the quota is passed).
fn measure(
    cx: &Context<'_>,
    instance: &crate::state::InstanceId,
    area: Area,
) -> Result<Option<(crate::usage::Count, u64)>, ToolError> {
    let Some(max) = quota(cx, area) else {
        return Ok(None);
    };
    let used = match cx.measured.area(instance, area == Area::Workspace) {
        Some(used) => used,
        None => walk(cx, instance, area, max)?,
    };
    Ok(Some((used, max)))
}

/// Whether the tenant has a byte quota on `area`.
pub(crate) fn has_quota(cx: &Context<'_>, area: Area) -> bool {
    quota(cx, area).is_some()
}

/// The tenant's `max_workspace_bytes` / `max_output_bytes` for `area`.
fn quota(cx: &Context<'_>, area: Area) -> Option<u64> {
    match area {
        Area::Workspace => cx.quotas.max_workspace_bytes,
        Area::Output => cx.quotas.max_output_bytes,
    }
}

/// The bytes in `area` of `instance` now (a walk that stops once past `max`).
fn walk(
    cx: &Context<'_>,
    instance: &InstanceId,
    area: Area,
    max: u64,
) -> Result<crate::usage::Count, ToolError> {
    let paths = cx.state.instance_paths_ambient(cx.tenant, instance)?;
    let dir = match area {
        Area::Workspace => paths.workspace,
        Area::Output => paths.output,
    };
    let caps = crate::usage::Caps {
        stop_above: Some(max),
        ..crate::usage::Caps::default()
    };
    crate::usage::count(&dir, &caps).map_err(|_| {
        let name = area.name();
        ToolError::new(format!("cannot measure the {name} of `{instance}`; retry"))
    })
}

impl Area {
    fn name(self) -> &'static str {
        match self {
            Area::Workspace => "workspace",
            Area::Output => "output",
        }
    }
}

/// Deserialises a tool's arguments; the error names the tool and says what was wrong.
fn parse<T: DeserializeOwned>(tool: &str, arguments: Map<String, Value>) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|e| ToolError::new(format!("invalid arguments for `{tool}`: {e}")))
}

/// The JSON schema of an argument struct.
fn schema<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

use results::output_schema;

#[cfg(test)]
mod tests {
    use super::Tool;

    /// `read_only` decides whether path policies check `deny_write`: a tool that changes
    /// anything must never claim to be read-only.
    #[test]
    fn only_tools_that_change_nothing_are_read_only() {
        let read_only: Vec<_> = Tool::all()
            .filter(|t| t.spec().read_only)
            .map(Tool::name)
            .collect();
        assert_eq!(
            read_only,
            [
                "list_instances",
                "list_archived_instances",
                "describe_instance",
                "list_jobs",
                "read_file",
                "list_directory",
                "stat_path",
                "search_files",
                "cluster_status"
            ]
        );
        for tool in Tool::all() {
            let spec = tool.spec();
            assert_eq!(spec.name, tool.name());
            assert!(!(spec.read_only && spec.destructive), "{}", spec.name);
            assert_eq!(Tool::from_name(spec.name), Some(tool));
            assert_eq!(
                spec.input_schema["additionalProperties"], false,
                "{}",
                spec.name
            );
            // MCP: the root of an outputSchema is an object. Inlined: clients that resolve no
            // `$ref` can read it whole.
            assert_eq!(spec.output_schema["type"], "object", "{}", spec.name);
            let text = spec.output_schema.to_string();
            assert!(!text.contains("\"$ref\""), "{}: {text}", spec.name);
            // Only standard formats: validators warn about others.
            for format in ["uint", "int32", "int64", "double"] {
                assert!(
                    !text.contains(&format!("\"{format}")),
                    "{}: {text}",
                    spec.name
                );
            }
        }
    }
}
