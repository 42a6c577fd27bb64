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
    } else if has("parts separately") {
        // A tree too large or deep to copy, move or measure whole: retrying will not help.
        StatusCode::FORBIDDEN
    } else if has("different filesystems") {
        StatusCode::CONFLICT
    } else if has("audit log")
        || has("waiting for a place")
        || has("could not run the call")
        || has("gateway is stopping")
    {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// The answer to a failed call; one that may succeed later says when to retry (a rate
/// limit's own "retry in N s", rounded up; a second otherwise).
pub fn failed(result: &CallResult, op: Op) -> Response {
    let status = of(&result.text, op);
    let body = format!("{}\n", result.text);
    match status {
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
            let after = retry_in(&result.text).unwrap_or(1).to_string();
            (status, [(axum::http::header::RETRY_AFTER, after)], body).into_response()
        }
        _ => (status, body).into_response(),
    }
}

/// The whole seconds a rate limit's message says to wait ("… retry in N s"), 1 to 3600; other
/// messages may quote a caller's path, and are not read.
fn retry_in(text: &str) -> Option<u64> {
    if !text.starts_with("rate limit for") {
        return None;
    }
    let (_, rest) = text.rsplit_once("retry in ")?;
    let seconds: f64 = rest.split_whitespace().next()?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| (seconds.ceil() as u64).clamp(1, 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_is_said_in_whole_seconds() {
        let limited = "rate limit for `submit_job` reached (10 per minute); retry in 1.8 s";
        assert_eq!(retry_in(limited), Some(2));
        assert_eq!(of(limited, Op::Other), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry_in("the gateway could not run the call; retry"), None);
        let quoted = "`/workspace/retry in 1e30 s` does not exist; audit log";
        assert_eq!(retry_in(quoted), None, "a path's words are not a wait");
        let long = "rate limit for `x` reached (1 per hour); retry in 1e9 s";
        assert_eq!(retry_in(long), Some(3600));
        let waiting = "tenant `chem` has 64 calls waiting for a place already, the most it may";
        assert_eq!(of(waiting, Op::Other), StatusCode::SERVICE_UNAVAILABLE);
        let big = "invalid request on `/workspace/t`: the tree has more than 10 entries; copy its parts separately";
        assert_eq!(of(big, Op::Other), StatusCode::FORBIDDEN);
    }
}
