//! What a call gives back: the result for its caller, and the records that must be durable
//! before that result goes back.

use serde_json::{Value, json};

use super::Failure;
use crate::audit::{AuditError, Entry, Receipt};
use crate::state::TaskRecord;
use crate::tools::{Output, ToolError};

/// What goes back to the caller: structured content, the text an agent acts on, and whether
/// the call failed.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub structured: Value,
    /// A builtin tool's one-line summary followed by its structured content as text
    /// ([`crate::tools::text`]); a proxied tool's summary.
    pub text: String,
    pub is_error: bool,
    /// A proxied tool's result as its server sent it (`content`, `structuredContent`,
    /// `isError`, `_meta`), for the transport to pass on whole; `structured` and `text` then
    /// only summarise it.
    pub proxied: Option<Value>,
    /// The task that stands for this call, when its job outlived the wait and the request
    /// accepted a task (`structured` and `text` then describe the job as it was).
    pub task: Option<Box<TaskRecord>>,
    /// What kind of failure it was, when it failed (a proxied tool's: `Other`).
    pub failure: Failure,
}

impl CallResult {
    /// A failure of no particular kind.
    pub(crate) fn error(message: String) -> CallResult {
        CallResult::failed(Failure::Other, message)
    }

    pub(crate) fn failed(failure: Failure, message: String) -> CallResult {
        CallResult {
            structured: json!({ "error": message }),
            text: message,
            is_error: true,
            proxied: None,
            task: None,
            failure,
        }
    }

    pub(super) fn from_run(
        result: Result<Output, ToolError>,
        proxied: Option<Value>,
    ) -> CallResult {
        match result {
            Ok(output) => CallResult {
                is_error: proxied.as_ref().is_some_and(|r| r["isError"] == true),
                // A builtin tool's text carries its structured content too; a proxied
                // result's text only summarises what goes back whole.
                text: match proxied {
                    None => crate::tools::text::render(&output.summary, &output.structured),
                    Some(_) => output.summary,
                },
                structured: output.structured,
                proxied,
                task: None,
                failure: Failure::Other,
            },
            Err(e) => CallResult::failed(e.failure, e.message),
        }
    }
}

impl CallResult {
    /// The result to return once its records were written (or not): one that cannot be
    /// recorded is not returned as success.
    pub(super) fn settled(
        self,
        written: Result<Vec<Receipt>, AuditError>,
        ran: bool,
    ) -> CallResult {
        match written {
            Ok(_) => self,
            Err(e) if ran => CallResult::failed(
                Failure::Unrecorded,
                format!(
                    "the call ran but its outcome could not be recorded in the audit log ({e}); check its result before retrying"
                ),
            ),
            Err(e) => CallResult::failed(
                Failure::Busy,
                format!("refused: the audit log cannot record this call ({e})"),
            ),
        }
    }
}

/// A call's result and the records to make durable, in one batch, before it goes back.
pub(super) struct Unsettled {
    pub(super) records: Vec<Entry>,
    pub(super) result: CallResult,
    /// Whether the call ran (else it stopped before, and its result says why).
    pub(super) ran: bool,
}

impl Unsettled {
    pub(super) fn stopped(records: Vec<Entry>, result: CallResult) -> Unsettled {
        Unsettled {
            records,
            result,
            ran: false,
        }
    }
}
