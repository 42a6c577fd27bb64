//! Checks in front of the whole HTTP app, before any route: the `Host` a request names (over
//! TCP), and where a job's token may be presented.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::StreamableHttpServerConfig;

/// Over TCP, every request but `/healthz` must name in its `Host` header an address this gateway
/// listens on (a loopback name, the `--host` given, or a name of `[http] allowed_hosts`), as
/// rmcp requires at the MCP path. A web
/// page whose name was rebound to 127.0.0.1 sends its own name, and no `Origin` on a same-origin
/// `GET`: without this it could read `/dav` and `/metrics` of a gateway that trusts loopback.
pub(super) async fn check_host(
    State(allowed): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let host = (request.headers().get(header::HOST)).and_then(|h| h.to_str().ok());
    if request.uri().path() == "/healthz" || host.is_some_and(|host| host_allowed(&allowed, host)) {
        return next.run(request).await;
    }
    (
        StatusCode::FORBIDDEN,
        "refused: the `Host` header names no address this gateway listens on\n",
    )
        .into_response()
}

/// Whether `host` (`name`, `name:port` or `[v6]:port`) names one of `allowed`.
fn host_allowed(allowed: &[String], host: &str) -> bool {
    let name = host_name(host);
    allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// The name of a `Host` header (`name`, `name:port` or `[v6]:port`): without port or brackets.
pub(crate) fn host_name(host: &str) -> &str {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    name.trim_start_matches('[').trim_end_matches(']')
}

/// A job's token (code mode) is for MCP at `path` only: `/metrics` (which loopback peers may
/// scrape without a token), WebDAV and the rest refuse a request that presents one.
pub(super) async fn confine_job_tokens(
    State(path): State<Option<Arc<str>>>,
    request: Request,
    next: Next,
) -> Response {
    let presents_job_token = (request.headers().get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::job_token::job_token_of)
        .is_some();
    if presents_job_token && path.as_deref() != Some(request.uri().path()) {
        return (
            StatusCode::FORBIDDEN,
            "refused: a job's token is accepted only for MCP requests at the gateway's MCP path",
        )
            .into_response();
    }
    next.run(request).await
}

/// rmcp's loopback `Host` names, plus the host we listen on (e.g. `127.0.0.2`) and `extra`
/// (`[http] allowed_hosts`, the OAuth resource's host).
pub(super) fn allowed_hosts(host: &str, extra: &[String]) -> Vec<String> {
    let mut hosts = StreamableHttpServerConfig::default().allowed_hosts;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    for host in std::iter::once(host).chain(extra.iter().map(String::as_str)) {
        if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            hosts.push(host.to_owned());
        }
    }
    hosts
}
