//! A failed call's answer in HTTP terms: the status WebDAV clients act on, and the pipeline's
//! own message as the body (for a denial, `denied by policy `<name>`: <reason>`).
//!
//! The pipeline's result is a message meant for an agent, whose wording the tools and the
//! state layer own; the status is derived from the phrases those messages are built with (one
//! table here, tested by the DAV integration tests, which check the statuses end to end).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::gateway::CallResult;

/// What kind of request failed, where the same failure means different statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    /// PUT and MKCOL: a missing parent is a conflict (RFC 4918 §9.7.1, §9.3.1).
    Create,
    Other,
}

/// The status for a failed call's message.
pub fn of(text: &str, op: Op) -> StatusCode {
    let has = |phrase: &str| text.contains(phrase);
    if text.starts_with("denied by policy") || has("leads outside the instance") {
        StatusCode::FORBIDDEN
    } else if has("rate limit for") {
        StatusCode::TOO_MANY_REQUESTS
    } else if has("max_workspace_bytes") || has("max_output_bytes") || has("quota's room") {
        StatusCode::INSUFFICIENT_STORAGE
    } else if has("is too large") {
        StatusCode::PAYLOAD_TOO_LARGE
    } else if has("(timed out)") && op == Op::Create {
        // The body fell behind the door's minimum rate (`min_rate`).
        StatusCode::REQUEST_TIMEOUT
    } else if has("does not exist") && op == Op::Create {
        StatusCode::CONFLICT
    } else if has("not found; list them") || has("is archived") || has("does not exist") {
        StatusCode::NOT_FOUND
    } else if has("already exists") {
        StatusCode::PRECONDITION_FAILED
    } else if has("is a directory, not a file") && op == Op::Read {
        StatusCode::METHOD_NOT_ALLOWED
    } else if has("is a directory")
        || has("is not a directory")
        || has("is not empty")
        || has("delete it first")
        || has("into itself")
        || has("instance root")
    {
        StatusCode::CONFLICT
    } else if has("symbolic link")
        || has("hard links")
        || has("which file tools do not open")
        || has("invalid path")
    {
        StatusCode::FORBIDDEN
    } else if has("audit log") {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// The answer to a failed call.
pub fn failed(result: &CallResult, op: Op) -> Response {
    (of(&result.text, op), format!("{}\n", result.text)).into_response()
}
