//! MCP tasks in the core: a task is a handle on a job (see [`crate::state::TaskRecord`]), so
//! its operations are the job tools, taken through the one pipeline. `tasks/get` is a
//! `poll_job` of the task's job and `tasks/cancel` a `cancel_job`: the policies judge them,
//! the audit log records them, the rate limits count them, exactly as if the agent had called
//! the tools itself. What is task-specific is only the lookup, by the caller's tenant: a task
//! of another tenant, a made-up id, and a task whose job was pruned are all "not found".
//!
//! The task is created by the call itself ([`super::Gateway::dispatch`], `open_task`).

use serde_json::{Map, Value, json};

use super::{CallResult, Gateway, Request, Snapshot};
use crate::state::{StateError, TaskRecord};

/// A task and the answer of the job tool that looked at it.
#[derive(Debug, Clone)]
pub struct TaskCall {
    pub task: TaskRecord,
    pub result: CallResult,
}

/// Why a task operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// No task of that id for the caller's tenant (or its job is gone).
    #[error("task not found; tasks are valid only for the tenant whose call created them")]
    NotFound,
    #[error(transparent)]
    State(#[from] StateError),
}

impl Gateway {
    /// `tasks/get`: the task's job as `poll_job` reports it now (no wait), with the tail the
    /// call that made the task asked for. `request` names the caller and the door; its tool
    /// and arguments are replaced.
    pub fn poll_task(
        &self,
        live: &Snapshot,
        request: Request<'_>,
        task_id: &str,
    ) -> Result<TaskCall, TaskError> {
        let task = self.find_task(&request, task_id)?;
        let mut arguments = job_arguments(&task);
        if let Some(tail) = task.tail {
            arguments.insert("tail".to_owned(), json!(tail));
        }
        // No wait and no cancel at its end: the poll only looks, and is recorded as a read.
        let request = Request {
            observes: true,
            ..retarget(request, "poll_job", arguments)
        };
        let result = self.dispatch(live, request);
        Ok(TaskCall { task, result })
    }

    /// `tasks/cancel`: `cancel_job` on the task's job (policy, audit and the job's own
    /// cancellation, as for the tool); a finished job is left as it is.
    pub fn cancel_task(
        &self,
        live: &Snapshot,
        request: Request<'_>,
        task_id: &str,
    ) -> Result<TaskCall, TaskError> {
        let task = self.find_task(&request, task_id)?;
        let mut arguments = job_arguments(&task);
        arguments.insert("tail".to_owned(), json!(0));
        let result = self.dispatch(live, retarget(request, "cancel_job", arguments));
        Ok(TaskCall { task, result })
    }

    /// The caller's task `task_id` whose job still exists.
    pub fn find_task(&self, request: &Request<'_>, task_id: &str) -> Result<TaskRecord, TaskError> {
        let tenant = &request.caller.tenant;
        let task = self
            .state
            .task(tenant, task_id)?
            .ok_or(TaskError::NotFound)?;
        match self.state.job(tenant, &task.instance, &task.job_id) {
            Ok(_) => Ok(task),
            Err(StateError::NotFound { .. }) => Err(TaskError::NotFound),
            Err(e) => Err(e.into()),
        }
    }
}

fn job_arguments(task: &TaskRecord) -> Map<String, Value> {
    let mut arguments = Map::new();
    arguments.insert("instance_id".to_owned(), json!(task.instance));
    arguments.insert("job_id".to_owned(), json!(task.job_id));
    arguments
}

fn retarget<'a>(request: Request<'a>, tool: &str, arguments: Map<String, Value>) -> Request<'a> {
    Request {
        tool: tool.to_owned(),
        arguments,
        accepts_task: false,
        observes: false,
        ..request
    }
}
