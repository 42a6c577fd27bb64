//! WebDAV at `/dav`: a door into the one pipeline, not a second one.
//!
//! Every request that touches an instance becomes the equivalent tool call, a
//! [`Request`] with `via = dav` run by [`Gateway::dispatch`]: GET/HEAD → `read_file`, PUT →
//! `write_file`, DELETE → `delete_path`, MKCOL → `make_directory`, MOVE → `move_path`, COPY →
//! `copy_path`, PROPFIND → `stat_path` / `list_directory` (and `list_instances` /
//! `describe_instance` above the files). So the policies (path rules see `/workspace/…` as for an
//! agent), the quotas, the rate limits and the audit apply exactly as for an agent; a denial is a
//! 403 whose body is the pipeline's `denied by policy `<name>`: <reason>`. LOCK, UNLOCK and
//! PROPPATCH change no file and run no tool; they are answered here (see [`locks`], [`props`]).
//!
//! Bodies stream both ways without being held in memory: a PUT lends the call an
//! [`Upload`] (the request body, read on the blocking thread through a sync bridge) that
//! `write_file`'s run step streams into a temporary file beside the target, cut at the
//! `[dav] max_upload_bytes` cap or the quota's room and renamed into place only when complete; a
//! GET lends a download slot that `read_file`'s run step fills with the file it opened beneath
//! the instance root (no symlink followed, no FIFO, no hard link), which is then sent from its
//! descriptor, ranges included. The lending is [`Transfer`], the only addition to the core,
//! and it holds std types only.
//!
//! **Why hand-written, not the `dav-server` crate.** `dav-server`'s `DavFileSystem` is a
//! path-addressed filesystem that its handler drives with many small calls per request (open,
//! metadata, read_dir, then read or write in chunks); mapping those onto tool calls would
//! turn one PUT into several audited calls, or make the audit follow the crate's internals
//! instead of the client's requests, and its property and lock handling would live outside
//! the pipeline. Here one method is one decision: the handler parses the request, asks the
//! pipeline once (a COPY/MOVE also asks for its source and destination, and one that replaces a
//! collection moves it aside first and deletes it after, each its own call), and
//! answers. The handful of WebDAV methods is small enough to read in a few files.
//!
//! Authentication is the HTTP app's (`http::identify`), plus HTTP Basic with the token as the
//! password (Finder, Windows and davfs2 speak only Basic): a Basic header is rewritten to a
//! Bearer one before the authenticator sees it, and a 401 challenges with both schemes.

mod conditions;
mod copy_move;
mod extras;
mod locks;
mod methods;
mod props;
mod status;
mod target;
mod xml;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::auth::Caller;
use crate::gateway::{CallResult, Failure, Gateway, Request as CallRequest, Transfer};
use crate::permits::{Held, Permits};
use crate::policy::Via;

pub use target::MOUNT;
use target::{BadTarget, Target};

/// A request refused before any call: status and message (small, unlike a `Response`).
type Refusal = (StatusCode, String);

/// Blocking calls in flight at once from WebDAV, a quarter of them for any one tenant (see
/// [`crate::permits`]); a streaming PUT or GET holds one for its duration (the file is read or
/// written on that thread), others wait for a place.
const MAX_BLOCKING: usize = 32;

/// The DAV door's shared parts.
#[derive(Clone)]
pub struct Dav {
    gateway: Arc<Gateway>,
    bridge: Arc<Permits>,
    locks: Arc<locks::LockTable>,
}

/// The `/dav` routes; the caller must put [`crate::http`]'s authentication around them (as
/// `http::app` does) and [`basic_as_bearer`] around that.
pub fn routes(gateway: Arc<Gateway>) -> Router {
    let dav = Dav {
        gateway,
        bridge: Arc::new(Permits::new(MAX_BLOCKING)),
        locks: Arc::new(locks::LockTable::default()),
    };
    Router::new()
        .route(MOUNT, any(handle))
        .route(&format!("{MOUNT}/"), any(handle))
        .route(&format!("{MOUNT}/{{*rest}}"), any(handle))
        .with_state(dav)
}

/// The one handler: checks the door is open, parses the URL, and hands over per method.
async fn handle(State(dav): State<Dav>, request: Request) -> Response {
    if !dav.gateway.snapshot().dav().enabled {
        return (
            StatusCode::NOT_FOUND,
            "WebDAV is not enabled; set `[dav] enabled = true` in the gateway's configuration",
        )
            .into_response();
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return (StatusCode::UNAUTHORIZED, "no caller").into_response();
    };
    let target = match Target::parse(request.uri().path()) {
        Ok(target) => target,
        Err(BadTarget::NotFound) => {
            return (
                StatusCode::NOT_FOUND,
                "no such WebDAV path; the tree is /dav/instances/<id>/{workspace,output}/",
            )
                .into_response();
        }
        Err(BadTarget::Refused(why)) => {
            return (StatusCode::BAD_REQUEST, format!("refused: {why}")).into_response();
        }
    };
    let cx = methods::Cx {
        dav: &dav,
        caller,
        target,
    };
    if matches!(cx.target, Target::Extra(..)) {
        return extras::handle(&cx, request).await;
    }
    let method = request.method().clone();
    match method.as_str() {
        "OPTIONS" => options(),
        "GET" | "HEAD" => methods::get(&cx, request.headers(), method == Method::HEAD).await,
        "PUT" => methods::put(&cx, request).await,
        "DELETE" => methods::delete(&cx, request.headers()).await,
        "MKCOL" => methods::mkcol(&cx, request).await,
        "COPY" | "MOVE" => {
            copy_move::copy_or_move(&cx, request.headers(), method.as_str() == "MOVE").await
        }
        "PROPFIND" => props::propfind(&cx, request).await,
        "PROPPATCH" => props::proppatch(&cx, request).await,
        "LOCK" => locks::lock(&cx, request).await,
        "UNLOCK" => locks::unlock(&cx, request.headers()).await,
        _ => {
            let mut response =
                (StatusCode::METHOD_NOT_ALLOWED, "method not supported").into_response();
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
            response
        }
    }
}

const ALLOW: &str =
    "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, COPY, MOVE, PROPFIND, PROPPATCH, LOCK, UNLOCK";

fn options() -> Response {
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert("DAV", HeaderValue::from_static("1, 2"));
    headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    headers.insert("MS-Author-Via", HeaderValue::from_static("DAV"));
    response
}

impl Dav {
    /// Runs `work` on the blocking bridge (for the extras, which are not tool calls); `None`
    /// when it could not run.
    async fn blocking<T: Send + 'static>(
        &self,
        caller: &Caller,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let permit = self.bridge.enter(&caller.tenant).await.ok()?;
        // The place goes with the work: a client that hangs up drops this future, not the
        // blocking thread's work, which must go on counting against the tenant's places.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .ok()
    }

    /// Runs one tool call through the pipeline on the blocking bridge, lending `transfer`;
    /// gives the transfer back with the result (for a download, holding the opened file).
    async fn call(
        &self,
        caller: &Caller,
        tool: &'static str,
        arguments: Value,
        transfer: Option<Transfer>,
    ) -> (CallResult, Option<Transfer>) {
        let permit = match self.bridge.enter(&caller.tenant).await {
            Ok(permit) => permit,
            // The tenant's calls waiting for a place are as many as it may have: say so.
            Err(full) => return (busy_with(full.to_string()), None),
        };
        let place = Some(Arc::new(permit));
        (self.run(caller, tool, arguments, transfer, false, place)).await
    }

    /// A place of `caller`'s on the bridge for a run of calls that make one request.
    async fn steps(&self, caller: &Caller) -> Result<Steps, CallResult> {
        match self.bridge.enter(&caller.tenant).await {
            Ok(permit) => Ok(Steps {
                dav: self.clone(),
                caller: caller.clone(),
                place: Arc::new(permit),
            }),
            Err(full) => Err(busy_with(full.to_string())),
        }
    }

    /// Runs one call on a blocking thread, holding `place` until the call ends, whether or
    /// not this future is still awaited then (a client that hangs up drops it).
    async fn run(
        &self,
        caller: &Caller,
        tool: &'static str,
        arguments: Value,
        transfer: Option<Transfer>,
        follows: bool,
        place: Option<Arc<Held>>,
    ) -> (CallResult, Option<Transfer>) {
        let (gateway, caller) = (self.gateway.clone(), caller.clone());
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let joined = tokio::task::spawn_blocking(move || {
            let _place = place;
            let live = gateway.snapshot();
            let mut request = CallRequest::new(caller, Via::Dav, tool, arguments);
            if follows {
                request = request.following();
            }
            let result = match &transfer {
                Some(transfer) => gateway.dispatch(&live, request.with_transfer(transfer)),
                None => gateway.dispatch(&live, request),
            };
            (result, transfer)
        })
        .await;
        joined.unwrap_or_else(|_| (busy(), None))
    }
}

/// The calls of one request that must not stop halfway (an overwriting COPY or MOVE: set
/// aside, act, then put back or delete): one place of the tenant's held for all of them, so
/// none waits behind other requests or finds the tenant's queue full, and what restores or
/// finishes the request ([`Steps::finish`]) is not counted against the rate limit, which the
/// request's own calls were. Each call is still decided and recorded.
pub(super) struct Steps {
    dav: Dav,
    caller: Caller,
    /// Shared by the request and each call it makes: given back when the last of them ends, so
    /// a call whose client hung up still holds it.
    place: Arc<Held>,
}

impl Steps {
    fn place(&self) -> Option<Arc<Held>> {
        Some(Arc::clone(&self.place))
    }

    /// A call of the request, counted against the rate limit.
    pub(super) async fn call(&self, tool: &'static str, arguments: Value) -> CallResult {
        let run = self
            .dav
            .run(&self.caller, tool, arguments, None, false, self.place());
        run.await.0
    }

    /// Whether the policies would let this request's caller make this call (not made).
    pub(super) fn would_allow(&self, tool: &str, arguments: Value) -> bool {
        let Value::Object(arguments) = arguments else {
            return false;
        };
        (self.dav.gateway).would_allow(&self.caller, Via::Dav, tool, arguments)
    }

    /// Drops the locks at or beneath `view` of `instance` (after a move took it away).
    pub(super) fn forget_locks_beneath(
        &self,
        instance: &crate::state::InstanceId,
        view: &target::SandboxView,
    ) {
        let tenant = self.caller.tenant.as_ref();
        (self.dav.locks).forget_beneath_in(tenant, instance.as_str(), view);
    }

    /// A call that restores or completes what the request's calls did: not counted.
    pub(super) async fn finish(&self, tool: &'static str, arguments: Value) -> CallResult {
        let run = self
            .dav
            .run(&self.caller, tool, arguments, None, true, self.place());
        run.await.0
    }
}

fn busy() -> CallResult {
    busy_with("the gateway could not run the call; retry".to_owned())
}

fn busy_with(text: String) -> CallResult {
    CallResult::failed(Failure::Busy, text)
}

/// Rewrites `Authorization: Basic base64(user:token)` to `Bearer token` for the authenticator,
/// and makes a 401 challenge Basic too (first, so clients that take the first scheme ask for a
/// password). Layered outside the app's authentication, on `/dav` only.
pub async fn basic_as_bearer(mut request: Request, next: Next) -> Response {
    if let Some(token) = basic_password(request.headers())
        && let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {token}"))
    {
        request.headers_mut().insert(header::AUTHORIZATION, bearer);
    }
    let mut response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        let headers = response.headers_mut();
        let bearer = headers.remove(header::WWW_AUTHENTICATE);
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"hpcgate\", charset=\"UTF-8\""),
        );
        if let Some(bearer) = bearer {
            headers.append(header::WWW_AUTHENTICATE, bearer);
        }
    }
    response
}

/// The password of a Basic `Authorization` header (the user name is ignored).
fn basic_password(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_owned())
}

/// The `/dav` routes with Basic accepted; [`crate::http`] adds its authentication between.
pub fn with_basic(identified: Router) -> Router {
    identified.layer(from_fn(basic_as_bearer))
}
