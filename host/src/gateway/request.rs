//! A call as a transport hands it to [`Gateway::dispatch`](super::Gateway::dispatch): who,
//! how, which tool and arguments, and what the door lends it (progress, a streamed body, a
//! job's identity, a trace, whether a task may come back). Translation only: nothing here is
//! derived from the state.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{Caller, Transfer};
use crate::code_mode::JobScope;
use crate::policy::Via;
use crate::telemetry::TraceParent;
use crate::tools::Progress;

/// A call as a transport received it.
pub struct Request<'a> {
    pub caller: Caller,
    pub via: Via,
    /// The exposed tool name (`submit_job`, `fs__read_text_file`).
    pub tool: String,
    pub arguments: Map<String, Value>,
    /// Called while a tool waits (jobs); MCP turns it into progress notifications.
    pub progress: &'a (dyn Fn(Progress) + Sync),
    /// A streamed body lent by the door (WebDAV), for `write_file` or `read_file`.
    pub transfer: Option<&'a Transfer>,
    /// The job whose code sent the call (`via = job`): its door's identity and limits.
    pub job: Option<Arc<JobScope>>,
    /// How the door counted this request of the job's code against `max_calls_per_job`
    /// ([`crate::code_mode::count_requests`]): not counted again; `None`: count it here.
    pub job_counted: Option<Result<(), String>>,
    /// The caller's trace (MCP `_meta.traceparent`): the call's span continues it.
    pub trace: Option<TraceParent>,
    /// The client takes an MCP task in lieu of the result: a job call whose job outlives its
    /// wait comes back with [`CallResult::task`].
    pub accepts_task: bool,
    /// The call only looks (a task's `tasks/get`: `poll_job` without a wait): its decision
    /// is recorded with its outcome in one batch, as a read-only call's is. The policies
    /// still see the tool as it is.
    pub observes: bool,
    /// Cancelled when the client gives up on the call (MCP `notifications/cancelled`, or the
    /// connection gone): a tool that waits (a job's) stops waiting.
    pub cancel: Option<CancellationToken>,
    /// A later step of one request whose first call was counted against the tenant's rate
    /// limit (WebDAV's putting back or deleting what an overwriting COPY or MOVE set aside):
    /// not counted again, so a request is never refused halfway. Decided and recorded as any.
    pub follows: bool,
}

impl Request<'static> {
    /// A call without progress reports.
    pub fn new(caller: Caller, via: Via, tool: &str, arguments: Map<String, Value>) -> Self {
        Request {
            caller,
            via,
            tool: tool.to_owned(),
            arguments,
            progress: &no_progress,
            transfer: None,
            job: None,
            job_counted: None,
            trace: None,
            accepts_task: false,
            observes: false,
            cancel: None,
            follows: false,
        }
    }
}

impl<'a> Request<'a> {
    /// The same call, reporting progress to `progress`.
    pub fn with_progress<'b>(self, progress: &'b (dyn Fn(Progress) + Sync)) -> Request<'b>
    where
        'a: 'b,
    {
        Request {
            caller: self.caller,
            via: self.via,
            tool: self.tool,
            arguments: self.arguments,
            progress,
            transfer: self.transfer,
            job: self.job,
            job_counted: self.job_counted,
            trace: self.trace,
            accepts_task: self.accepts_task,
            observes: self.observes,
            cancel: self.cancel,
            follows: self.follows,
        }
    }

    /// The same call, with a streamed body lent by the door.
    pub fn with_transfer(self, transfer: &'a Transfer) -> Request<'a> {
        Request {
            transfer: Some(transfer),
            ..self
        }
    }

    /// The same call, sent by the code of the job behind `job`'s door (none: not a job).
    pub fn for_job(self, job: Option<Arc<JobScope>>) -> Self {
        Request { job, ..self }
    }

    /// The same call, counted already by the job's door as `counted` (see
    /// [`Request::job_counted`]).
    pub fn counted_at_door(self, counted: Option<Result<(), String>>) -> Self {
        Request {
            job_counted: counted,
            ..self
        }
    }

    /// The same call, continuing the caller's trace.
    pub fn in_trace(self, trace: Option<TraceParent>) -> Self {
        Request { trace, ..self }
    }

    /// The same call, given up on when `cancel` is.
    pub fn cancelled_by(self, cancel: CancellationToken) -> Self {
        Request {
            cancel: Some(cancel),
            ..self
        }
    }

    /// The same call, as a later step of a request whose first call was counted against the
    /// rate limit.
    pub fn following(self) -> Self {
        Request {
            follows: true,
            ..self
        }
    }

    /// The same call, from a client that takes an MCP task in lieu of a job's result.
    pub fn accepting_task(self, accepts_task: bool) -> Self {
        Request {
            accepts_task,
            ..self
        }
    }
}

fn no_progress(_: Progress) {}
