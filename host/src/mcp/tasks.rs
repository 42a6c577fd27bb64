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
use crate::state::{JobPhase, TaskRecord};

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
    let phase = serde_json::from_value::<JobPhase>(job["status"].clone()).ok();
    let state = phase.map_or("in a state hpcgate cannot read", phase_words);
    let summary = text.lines().next().unwrap_or_default();
    match job["reason"].as_str() {
        Some(reason) if !reason.is_empty() => format!("{state} ({reason}) — {summary}"),
        _ => format!("{state} — {summary}"),
    }
}

/// Every phase in words (the match is exhaustive: a new phase must say what it means).
fn phase_words(phase: JobPhase) -> &'static str {
    match phase {
        JobPhase::Submitting | JobPhase::Pending => "queued",
        JobPhase::Running => "running",
        JobPhase::Missing => "not seen by its executor right now (looked for again at each poll)",
        JobPhase::Unknown => "in a state its executor reports but hpcgate does not know",
        JobPhase::Completed => "completed",
        JobPhase::Failed => "failed",
        JobPhase::Cancelled => "cancelled",
        JobPhase::Timeout => "stopped: its time limit ran out",
        JobPhase::Oom => "stopped: out of memory",
        JobPhase::OutputCap => "stopped: it wrote more output than allowed",
        JobPhase::Preempted => "preempted",
        JobPhase::NodeFail => "ended by a node failure",
        JobPhase::StartFailed => "could not start",
        JobPhase::Lost => "lost: it ended without a recorded outcome",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gateway::Failure;
    use crate::state::{InstanceId, JobId, TaskId, TenantName};
    use crate::time::Timestamp;

    fn task() -> TaskRecord {
        TaskRecord {
            version: 1,
            task_id: TaskId::parse(&format!("t-{}", "a".repeat(32))).unwrap(),
            tenant: TenantName::parse("chem").unwrap(),
            job_id: JobId::parse("j-aaaaaaaaaaaaaaaa").unwrap(),
            instance: InstanceId::parse("run1").unwrap(),
            tool: "submit_job".to_owned(),
            tail: None,
            created_at: Timestamp::now(),
        }
    }

    /// `tasks/get` for a job in `phase`: the task's status, message and whether it has a result.
    fn get(phase: &str, is_final: bool, reason: Option<&str>) -> (TaskStatus, String, bool) {
        let result = CallResult {
            structured: json!({ "job": {
                "status": phase, "final": is_final, "reason": reason,
                "submitted_at": "2026-11-24T10:00:00.000000Z",
            }}),
            text: format!("job: job `j-aaaaaaaaaaaaaaaa` [slurm] {phase} — make\nmore lines"),
            is_error: false,
            proxied: None,
            task: None,
            failure: Failure::Other,
        };
        let call = TaskCall {
            task: task(),
            result,
        };
        let got = detailed(call, |r| {
            CallToolResult::success(vec![rmcp::model::ContentBlock::text(r.text)])
        })
        .unwrap();
        let message = got.task.task.status_message.clone().unwrap();
        let has_result = matches!(got.task.payload, TaskPayload::Completed { .. });
        assert_eq!(got.task.task.last_updated_at, "2026-11-24T10:00:00.000000Z");
        (got.task.status(), message, has_result)
    }

    #[test]
    fn every_job_phase_maps_to_a_status_with_a_message() {
        use TaskStatus::{Cancelled, Completed, Working};
        let table = [
            ("submitting", false, Working, "queued"),
            ("pending", false, Working, "queued"),
            ("running", false, Working, "running"),
            ("missing", false, Working, "not seen by its executor"),
            ("unknown", false, Working, "in a state its executor reports"),
            ("completed", true, Completed, "completed"),
            ("failed", true, Completed, "failed"),
            ("cancelled", true, Cancelled, "cancelled"),
            (
                "timeout",
                true,
                Completed,
                "stopped: its time limit ran out",
            ),
            ("oom", true, Completed, "stopped: out of memory"),
            (
                "output_cap",
                true,
                Completed,
                "stopped: it wrote more output",
            ),
            ("preempted", true, Completed, "preempted"),
            ("node_fail", true, Completed, "ended by a node failure"),
            ("start_failed", true, Completed, "could not start"),
            ("lost", true, Completed, "lost"),
        ];
        for (phase, is_final, status, words) in table {
            let (got, message, has_result) = get(phase, is_final, None);
            assert_eq!(got, status, "{phase}");
            assert!(message.starts_with(words), "{phase}: {message}");
            assert!(
                message.contains(&format!("[slurm] {phase} — make")),
                "{message}"
            );
            assert!(!message.contains("more lines"), "{message}");
            assert_eq!(has_result, status == Completed, "{phase}");
        }
        let (_, message, _) = get("pending", false, Some("Priority"));
        assert!(message.starts_with("queued (Priority) — job:"), "{message}");
    }

    #[test]
    fn a_refused_poll_is_an_error_not_a_status() {
        let call = TaskCall {
            task: task(),
            result: CallResult {
                structured: json!({ "error": "denied by policy `tools`: no polling" }),
                text: "denied by policy `tools`: no polling".to_owned(),
                is_error: true,
                proxied: None,
                task: None,
                failure: Failure::Denied,
            },
        };
        let e = detailed(call, |_| unreachable!("no result")).unwrap_err();
        assert!(e.message.contains("denied by policy `tools`"), "{e:?}");
    }
}
