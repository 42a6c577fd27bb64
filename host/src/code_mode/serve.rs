//! Serving one job's door: MCP over streamable HTTP on the job's Unix socket, with the
//! gateway's own MCP handler ([`McpServer::for_job`]) and rmcp service ([`mcp_service`]).
//!
//! Who may connect: the socket sits in a 0700 directory that only the job's sandbox sees (bound
//! at `/run/hpcgate`), and every request's peer must be a uid the job's processes run as
//! (`SO_PEERCRED`: the gateway's own); anyone else gets 403 before MCP.
//! The caller is the door's, never anything a request carries.

use std::sync::{Arc, Weak};

use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::JobScope;
use crate::config::ConnectionLimits;
use crate::gateway::Gateway;
use crate::http::connections::Bounded;
use crate::http::{UnixPeer, mark_in_flight, mcp_service, stateless_config};
use crate::mcp::McpServer;
use crate::permits::Permits;

/// Where MCP is mounted on a door (the module and `hpcgate-call` post there).
pub const DOOR_PATH: &str = "/mcp";

/// The largest request body a door accepts: the largest file write (base64) with room to spare.
const MAX_BODY_BYTES: usize = 32 << 20;

/// Requests a door reads and answers at once; more wait their turn. rmcp reads a body whole and
/// parses it into a JSON tree before any of the job's limits are checked (its values are
/// counted first, [`crate::bounded_json`]), so it is the door, not the call, that bounds this. Twice the
/// default `[code_mode] max_concurrent_calls`, so a job past that limit is still told so.
const REQUESTS: usize = 8;

/// The door's places for calls in flight (one tenant, so a quarter of them: as many as
/// `[code_mode] max_concurrent_calls` allows by default), shared by every request.
const PLACES: usize = 16;

/// The door's connections: the job's processes may hold this many open at once (more wait
/// unaccepted, costing the gateway nothing), each let go after a minute with nothing in flight.
/// `hpcgate_tools` and `hpcgate-call` close theirs after each call, so a pool of processes
/// holds one only while it calls.
/// Only the job's own calls wait for them; without a bound, a job could open connections
/// until the gateway had no file descriptor left for any tenant.
const CONNECTIONS: ConnectionLimits = ConnectionLimits {
    max: 128,
    per_peer: 128,
    idle: std::time::Duration::from_secs(60),
};

/// Serves the door on `listener` until `stop` is cancelled.
pub(super) async fn serve(
    listener: std::os::unix::net::UnixListener,
    gateway: Weak<Gateway>,
    scope: Arc<JobScope>,
    peers: Arc<[u32]>,
    stop: CancellationToken,
) {
    let Ok(listener) = tokio::net::UnixListener::from_std(listener) else {
        return;
    };
    let listener = Bounded::new(listener, CONNECTIONS);
    let (gateway_of_requests, scope_of_requests) = (gateway.clone(), Some(scope.clone()));
    let config = stateless_config(stop.clone()).with_max_request_body_bytes(MAX_BODY_BYTES);
    let places = Arc::new(Permits::new(PLACES));
    let make = move || {
        let gateway = gateway.upgrade().ok_or_else(|| {
            std::io::Error::other("the gateway is stopping; the job's tools are gone with it")
        })?;
        Ok(McpServer::for_job(gateway, scope.clone(), places.clone()))
    };
    let requests = Arc::new(Semaphore::new(REQUESTS));
    let counted = (gateway_of_requests, scope_of_requests);
    let app = Router::new()
        .nest_service(DOOR_PATH, mcp_service(make, config))
        .layer(from_fn_with_state(counted, count_requests))
        .layer(from_fn_with_state(
            MAX_BODY_BYTES,
            crate::bounded_json::bounded,
        ))
        .layer(from_fn_with_state(requests, one_of_few))
        .layer(from_fn_with_state(peers, check_peer))
        .layer(from_fn(mark_in_flight));
    let _ = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<UnixPeer>(),
    )
    .with_graceful_shutdown(stop.cancelled_owned())
    .await;
}

/// How the door counted one request of a job's code (see [`count_requests`]), attached to the
/// request for the pipeline, which then does not count it again.
#[derive(Debug, Clone)]
pub struct JobRequestCounted(pub Result<(), String>);

/// Counts every request of a job's code against `[code_mode] max_calls_per_job`, once, before
/// MCP: a tool call, a ping, a notification, a listing, a task lookup, a malformed body, any
/// method. One past the limit is refused here (403 once the job has ended, else 429), but for a
/// tool call, which goes on with the count attached ([`JobRequestCounted`]) so that the
/// pipeline refuses and records it. The job is the door's (`Some`) or the one a job's token
/// named (attached to the request by the listener). A POST's body is read whole already
/// ([`crate::bounded_json::bounded`], bounded); no other method's body is read here.
pub(crate) async fn count_requests(
    State((gateway, door)): State<(Weak<Gateway>, Option<Arc<JobScope>>)>,
    request: Request,
    next: Next,
) -> Response {
    let Some(job) = door.or_else(|| request.extensions().get::<Arc<JobScope>>().cloned()) else {
        return next.run(request).await;
    };
    let Some(gateway) = gateway.upgrade() else {
        let why = "the gateway is stopping; the job's tools are gone with it";
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    };
    let counted = gateway.count_job_request(&job);
    let (mut parts, body) = request.into_parts();
    let (body, tool_call) = if parts.method == axum::http::Method::POST {
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return (StatusCode::BAD_REQUEST, "the request body was cut off").into_response();
        };
        let tool_call = is_tool_call(&bytes);
        (axum::body::Body::from(bytes), tool_call)
    } else {
        (body, false)
    };
    if let Err(why) = &counted
        && !tool_call
    {
        let status = if job.is_closed() {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        return (status, why.clone()).into_response();
    }
    parts.extensions.insert(JobRequestCounted(counted));
    next.run(Request::from_parts(parts, body)).await
}

/// Whether a request body is one JSON-RPC `tools/call` message (an object: batches are not
/// MCP's any more).
fn is_tool_call(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    body.trim_ascii_start().starts_with(b"{")
        && serde_json::from_slice::<Message<'_>>(body)
            .is_ok_and(|m| m.method.as_deref() == Some("tools/call"))
}

/// Holds one of the door's few request places while a request is read and answered.
async fn one_of_few(
    State(requests): State<Arc<Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    match requests.acquire().await {
        Ok(_place) => next.run(request).await,
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the door is closing").into_response(),
    }
}

/// Lets through only the uids the job's processes run as.
async fn check_peer(State(peers): State<Arc<[u32]>>, request: Request, next: Next) -> Response {
    let peer = (request.extensions())
        .get::<ConnectInfo<UnixPeer>>()
        .and_then(|info| info.0.cred);
    match peer {
        Some(cred) if peers.contains(&cred.uid) => next.run(request).await,
        Some(cred) => (
            StatusCode::FORBIDDEN,
            format!(
                "refused: uid {} is not the job's; this socket serves only the job's own processes",
                cred.uid
            ),
        )
            .into_response(),
        None => (
            StatusCode::FORBIDDEN,
            "refused: the peer's credentials (SO_PEERCRED) are unavailable",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_object_naming_tools_call_is_a_tool_call() {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
        assert!(super::is_tool_call(call.as_bytes()));
        assert!(super::is_tool_call(b"  \n{\"method\":\"tools/call\"}"));
        for other in [
            r#"["tools/call"]"#,
            r#"[{"method":"tools/call"}]"#,
            r#"{"method":"tools/list"}"#,
            r#"{"params":{"method":"tools/call"}}"#,
            "",
            "not json",
        ] {
            assert!(!super::is_tool_call(other.as_bytes()), "{other}");
        }
    }
}
