//! A failed call's answer in HTTP terms: the status WebDAV clients act on, and the pipeline's
//! own message as the body (for a denial, `denied by policy `<name>`: <reason>`).
//!
//! The status comes from the kind of failure ([`Failure`]), said by whoever failed the call,
//! never from its message, which may quote a caller's path.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::gateway::{CallResult, Failure};

/// What kind of request failed, where the same failure means different statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    /// PUT and MKCOL: a missing parent is a conflict (RFC 4918 §9.7.1, §9.3.1).
    Create,
    Other,
}

/// The status for a failure of `failure`'s kind.
pub fn of(failure: Failure, op: Op) -> StatusCode {
    match failure {
        Failure::Denied | Failure::Forbidden => StatusCode::FORBIDDEN,
        Failure::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Failure::Busy => StatusCode::SERVICE_UNAVAILABLE,
        Failure::NoRoom => StatusCode::INSUFFICIENT_STORAGE,
        Failure::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        // The body fell behind the door's minimum rate (`min_rate`).
        Failure::TimedOut if op == Op::Create => StatusCode::REQUEST_TIMEOUT,
        Failure::NoPath if op == Op::Create => StatusCode::CONFLICT,
        Failure::NoPath | Failure::NotFound => StatusCode::NOT_FOUND,
        Failure::Exists => StatusCode::PRECONDITION_FAILED,
        Failure::IsDirectory if op == Op::Read => StatusCode::METHOD_NOT_ALLOWED,
        Failure::IsDirectory | Failure::NotEmpty | Failure::Conflict => StatusCode::CONFLICT,
        Failure::TimedOut | Failure::Unrecorded | Failure::Other => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// The answer to a failed call; one that may succeed later says when to retry (a rate
/// limit's own seconds, at most an hour; a second otherwise).
pub fn failed(result: &CallResult, op: Op) -> Response {
    with_body(result.failure, op, format!("{}\n", result.text))
}

/// The answer to a failure of `failure`'s kind, with `body`.
pub fn with_body(failure: Failure, op: Op, body: String) -> Response {
    let status = of(failure, op);
    let after = match failure {
        Failure::RateLimited { retry_after_s } => retry_after_s.clamp(1, 3600),
        Failure::Busy => 1,
        _ => return (status, body).into_response(),
    };
    let retry = [(axum::http::header::RETRY_AFTER, after.to_string())];
    (status, retry, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_is_said_in_whole_seconds_of_at_most_an_hour() {
        let answer = |failure| {
            let response = with_body(failure, Op::Other, String::new());
            let after = response.headers().get("retry-after").cloned();
            (
                response.status(),
                after.map(|v| v.to_str().unwrap().to_owned()),
            )
        };
        let limited = |s| Failure::RateLimited { retry_after_s: s };
        assert_eq!(
            answer(limited(2)),
            (StatusCode::TOO_MANY_REQUESTS, Some("2".into()))
        );
        assert_eq!(answer(limited(0)).1.as_deref(), Some("1"));
        assert_eq!(answer(limited(u32::MAX)).1.as_deref(), Some("3600"));
        assert_eq!(
            answer(Failure::Busy),
            (StatusCode::SERVICE_UNAVAILABLE, Some("1".into()))
        );
        assert_eq!(answer(Failure::Forbidden), (StatusCode::FORBIDDEN, None));
    }

    /// What a failure's kind means depends on the request only where RFC 4918 says so.
    #[test]
    fn a_missing_path_is_a_conflict_only_when_creating_under_it() {
        assert_eq!(of(Failure::NoPath, Op::Create), StatusCode::CONFLICT);
        assert_eq!(of(Failure::NoPath, Op::Read), StatusCode::NOT_FOUND);
        assert_eq!(of(Failure::NotFound, Op::Create), StatusCode::NOT_FOUND);
        assert_eq!(
            of(Failure::IsDirectory, Op::Read),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(of(Failure::IsDirectory, Op::Other), StatusCode::CONFLICT);
        assert_eq!(
            of(Failure::TimedOut, Op::Create),
            StatusCode::REQUEST_TIMEOUT
        );
    }
}
