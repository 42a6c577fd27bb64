//! Tasks as MCP says them (`io.modelcontextprotocol/tasks`, SEP-2663): a job call that became a
//! task ([`CallResult::task`]) → `CreateTaskResult`; a [`TaskCall`] (`poll_job` of the task's
//! job, through the pipeline) → `tasks/get`'s `DetailedTask`. Translation only.
//!
//! Every job phase maps to a task status with a status message that says what the job does:
//! unfinished phases are `working` (queued, running, or not seen by its executor right now);
//! a cancelled job is `cancelled`; every other final phase — success, a failed command, a time
//! limit, out of memory, a lost job — is `completed` with the job tool's result inline. The
//! spec keeps `failed` for JSON-RPC errors, and a job that ended badly is a tool result that
//! says so, not a protocol fault.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::Value;

use crate::gateway::{CallResult, TaskCall, TaskError};
use crate::state::TaskRecord;

/// How often a client should poll, milliseconds: jobs run for seconds to days.
const POLL_INTERVAL_MS: u64 = 2000;

/// The task that answers a job call whose job still runs.
pub(super) fn created(task: &TaskRecord, result: &CallResult) -> CreateTaskResult {
    CreateTaskResult::new(base(task, result))
}

/// `tasks/get`'s answer from the job tool's answer; `whole` turns a final result into the
/// `CallToolResult` the call would have returned.
pub(super) fn detailed(
    call: TaskCall,
    whole: impl FnOnce(CallResult) -> CallToolResult,
) -> Result<GetTaskResult, McpError> {
    let TaskCall { task, result } = call;
    let job = &result.structured["job"];
    if result.is_error || !job.is_object() {
        // The poll itself was refused (a policy, a rate limit) or failed: say why.
        return Err(McpError::invalid_request(
            format!("tasks/get for `{}`: {}", task.task_id, result.text),
            None,
        ));
    }
    let base = base(&task, &result);
    let payload = match (job["final"] == true, job["status"].as_str()) {
        (false, _) => TaskPayload::Working,
        (true, Some("cancelled")) => TaskPayload::Cancelled,
        (true, _) => {
            let value = serde_json::to_value(whole(result))
                .map_err(|e| McpError::internal_error(format!("a task result: {e}"), None))?;
            let Value::Object(object) = value else {
                return Err(McpError::internal_error(
                    "a task result is not an object",
                    None,
                ));
            };
            TaskPayload::Completed {
                result: JsonObject::from_iter(object),
            }
        }
    };
    Ok(GetTaskResult::new(DetailedTask::new(base, payload)))
}

/// The error a task operation answers with: "not found" is the spec's `-32602`, the same for
/// an id nobody issued and another tenant's.
pub(super) fn error(e: TaskError) -> McpError {
    match e {
        TaskError::NotFound => McpError::invalid_params(e.to_string(), None),
        TaskError::State(e) => McpError::internal_error(format!("a task: {e}"), None),
    }
}

fn base(task: &TaskRecord, result: &CallResult) -> Task {
    let job = &result.structured["job"];
    let updated = ["finished_at", "started_at", "submitted_at"]
        .iter()
        .find_map(|key| job[key].as_str())
        .map_or_else(|| task.created_at.to_string(), str::to_owned);
    Task::new(
        task.task_id.as_str(),
        TaskStatus::Working,
        task.created_at.to_string(),
        updated,
    )
    .with_status_message(status_message(job, &result.text))
    .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// What the job does in a few words, its executor's reason, then the job tool's summary line.
fn status_message(job: &Value, text: &str) -> String {
    let phase = job["status"].as_str().unwrap_or("unknown");
    let state = match phase {
        "submitting" | "pending" => "queued",
        "running" => "running",
        "missing" => "not seen by its executor right now (looked for again at each poll)",
        "unknown" => "in a state its executor reports but hpcgate does not know",
        "completed" => "completed",
        "failed" => "failed",
        "cancelled" => "cancelled",
        "timeout" => "stopped: its time limit ran out",
        "oom" => "stopped: out of memory",
        "output_cap" => "stopped: it wrote more output than allowed",
        "preempted" => "preempted",
        "node_fail" => "ended by a node failure",
        "start_failed" => "could not start",
        "lost" => "lost: it ended without a recorded outcome",
        _ => phase,
    };
    let summary = text.lines().next().unwrap_or_default();
    match job["reason"].as_str() {
        Some(reason) if !reason.is_empty() => format!("{state} ({reason}) — {summary}"),
        _ => format!("{state} — {summary}"),
    }
}
