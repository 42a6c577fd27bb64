//! The HTTP face of the gateway: MCP over streamable HTTP at one path (or the legacy HTTP+SSE
//! transport, [`crate::sse`]), plus `GET /healthz`, `GET /metrics` and, with `[auth.oauth]`,
//! the RFC 9728 metadata at `/.well-known/oauth-protected-resource[/<path>]`, served by one
//! axum app on a TCP port or a Unix socket.
//!
//! Identity comes from the transport and travels with each request: a middleware puts the
//! [`Caller`] into the request's extensions, rmcp hands the request's `http::request::Parts` to
//! the handler, and [`McpServer`] reads it back with [`request_caller`]. So the MCP service is
//! stateless (rmcp's `legacy_session_mode = false`): any request can go to any gateway sharing
//! the state directory, and no session outlives its request.
//!
//! Who may connect (README, "Transports"): every MCP request goes through
//! [`Gateway::authenticate`] ([`crate::auth`]) with its `Authorization` and `Origin` headers and,
//! on a Unix socket, the peer's `SO_PEERCRED`: a refusal is a 401 with `WWW-Authenticate` or a
//! 403, before any MCP handling. Single-tenant (no `[tenants]`) listens only on loopback or a
//! Unix socket, every caller being `stdio_tenant`, and serves only the gateway's own uid and
//! root: a Unix peer by `SO_PEERCRED`, a TCP client by the owner of its socket in the kernel's
//! socket table ([`tcp_owner`], looked up once per connection), since on a shared login node
//! anyone can reach loopback. With tenants, TCP callers need a bearer token or JWT, and
//! Unix-socket peers are mapped by uid (`unix_uids`). A Slurm job's token (code
//! mode, [`crate::code_mode::remote`]) is recognised at the streamable MCP path only, where it
//! attaches the job's fixed door beside its caller; every other route refuses it.
//!
//! Who may reach the socket at all: it is created 0600 (only the gateway's own uid), which is
//! right single-tenant and when `unix_uids` names no uid but the gateway's. When some tenant
//! maps another uid, an owner-only socket could not serve that uid, so the socket is made
//! 0666 ([`Identity::socket_mode`]): connecting then proves nothing, and that is fine because
//! every request is authenticated by the kernel-reported peer uid (`SO_PEERCRED`), which a
//! client cannot forge, and a uid no tenant maps is refused (403) before any MCP handling.
//! Operators who want fewer uids to even connect restrict the socket's directory.

use std::future::Future;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use axum::Router;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::{IncomingStream, Listener};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthRequest, Caller, PeerCredentials};
use crate::config::{Settings, WELL_KNOWN};
use crate::gateway::Gateway;
use crate::mcp::McpServer;
use crate::metrics::Access;
use crate::state::TenantName;
use connections::{Activity, Bounded, Counted, InFlight};
pub(crate) use guards::host_name;
use guards::{check_host, confine_job_tokens};
use unix_socket::{RemoveOnDrop, bind_unix};

pub(crate) mod connections;
mod guards;
mod tcp_owner;
mod unix_socket;

pub(crate) use tcp_owner::TcpPeer;

/// Which MCP transport the app serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor<'a> {
    /// Streamable HTTP at this path.
    Streamable(&'a str),
    /// The legacy HTTP+SSE transport at `/sse` and `/messages` ([`crate::sse`]).
    Sse,
}

impl<'a> Flavor<'a> {
    /// The path announced as the MCP address (for SSE, where the event stream opens).
    fn path(self) -> &'a str {
        match self {
            Flavor::Streamable(path) => path,
            Flavor::Sse => crate::sse::SSE_PATH,
        }
    }
}

/// Where the app listens.
#[derive(Debug, Clone)]
pub enum Listen {
    /// `host` is an IP address or `localhost`; port 0 picks a free port.
    Tcp { host: String, port: u16 },
    /// A Unix socket at this path (mode [`Identity::socket_mode`]), removed on shutdown.
    Unix(PathBuf),
}

/// What the listen checks need to know of the tenants.
#[derive(Debug, Clone)]
pub struct Identity {
    stdio_tenant: TenantName,
    multi_tenant: bool,
    /// Whether some tenant's `unix_uids` holds a uid other than the gateway's own.
    foreign_unix_uids: bool,
    /// The configuration keys that give sandboxes the host's network (`[sandbox] network`,
    /// `[proxied_mcps.<name>] network`).
    host_network: Vec<String>,
    /// `[http] max_connections` and `idle_timeout_s`.
    connections: connections::ConnectionLimits,
    /// `[http] allowed_hosts` (and the OAuth resource's host).
    allowed_hosts: Vec<String>,
}

impl Identity {
    pub fn from_settings(settings: &Settings) -> Identity {
        let own = rustix::process::geteuid().as_raw();
        Identity {
            stdio_tenant: settings.stdio_tenant.clone(),
            multi_tenant: !settings.tenants.is_empty(),
            foreign_unix_uids: settings
                .tenants
                .values()
                .flat_map(|tenant| &tenant.unix_uids)
                .any(|&uid| uid != own),
            host_network: host_network(settings),
            connections: settings.fixed.connections,
            allowed_hosts: settings.fixed.allowed_hosts.clone(),
        }
    }

    /// The Unix socket's mode: 0600 unless a tenant maps a uid other than the gateway's own,
    /// then 0666 — every request is still authenticated by its peer uid (see the module doc).
    /// Decided at start: a reload that maps a first foreign uid needs a restart to reach it.
    pub fn socket_mode(&self) -> u32 {
        if self.foreign_unix_uids { 0o666 } else { 0o600 }
    }
}

/// Serves the gateway on `listen` until `signal` (SIGINT or SIGTERM, see [`shutdown_signal`]).
/// `path` is where MCP is mounted.
///
/// `inherited` is the socket systemd passed for `Listen::Unix` (socket activation, see
/// [`crate::activation`]): served as it is, and its file left in place at shutdown.
pub async fn serve(
    gateway: Arc<Gateway>,
    identity: Identity,
    listen: Listen,
    inherited: Option<std::os::unix::net::UnixListener>,
    flavor: Flavor<'_>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let path = flavor.path();
    check(&listen, &identity, path)?;
    let connections = identity.connections;
    let allowed_hosts = identity.allowed_hosts.clone();
    let shutdown = CancellationToken::new();
    let config = stateless_config(shutdown.clone());
    let signalled = {
        let shutdown = shutdown.clone();
        async move {
            signal.await;
            shutdown.cancel();
        }
    };
    match listen {
        Listen::Tcp { host, port } => {
            let hosts = guards::allowed_hosts(&host, &allowed_hosts);
            let config = config.with_allowed_hosts(hosts.clone());
            let listener = TcpListener::bind((host.as_str(), port))
                .await
                .with_context(|| format!("cannot listen on `{host}:{port}`"))?;
            let bound = listener.local_addr()?;
            let listener = Bounded::new(NoDelay(listener), connections);
            announce(&format!("http://{bound}{path}"));
            if gateway.snapshot().dav().enabled {
                announce_dav(&format!("http://{bound}{}/", crate::dav::MOUNT));
            }
            let app = app(
                gateway.clone(),
                mcp_routes(gateway, config, flavor),
                Access::Tcp,
                flavor,
            )
            .layer(from_fn_with_state(Arc::new(hosts), check_host));
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<TcpPeer>(),
            )
            .with_graceful_shutdown(signalled)
            .await
            .context("the HTTP server failed")
        }
        Listen::Unix(socket) => {
            let (listener, _remove) = match inherited {
                Some(listener) => (UnixListener::from_std(listener)?, None),
                None => {
                    let listener = bind_unix(&socket, identity.socket_mode())?;
                    (listener, Some(RemoveOnDrop(socket.clone())))
                }
            };
            let listener = Bounded::new(listener, connections);
            announce(&format!("unix:{} (MCP at {path})", socket.display()));
            if gateway.snapshot().dav().enabled {
                announce_dav(&format!(
                    "unix:{} at {}/",
                    socket.display(),
                    crate::dav::MOUNT
                ));
            }
            let app = app(
                gateway.clone(),
                mcp_routes(gateway, config, flavor),
                Access::Socket,
                flavor,
            );
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<UnixPeer>(),
            )
            .with_graceful_shutdown(signalled)
            .await
            .context("the Unix-socket server failed")
        }
    }
}

/// MCP at `path`, one stateless service whose handler reads the caller from each request (or
/// the SSE routes, whose sessions fix it), behind the authentication of each request.
fn mcp_routes(
    gateway: Arc<Gateway>,
    config: StreamableHttpServerConfig,
    flavor: Flavor<'_>,
) -> Router {
    // A job's token (code mode, Slurm jobs) opens only the streamable MCP path: the SSE
    // transport's sessions and WebDAV would carry its caller without the job's limits.
    let jobs = matches!(flavor, Flavor::Streamable(_));
    let mcp = match flavor {
        Flavor::Streamable(path) => {
            let server = McpServer::per_request(gateway.clone());
            let max_bytes = config.max_request_body_bytes;
            let jobs_counted = (Arc::downgrade(&gateway), None);
            Router::new()
                .nest_service(path, mcp_service(move || Ok(server.clone()), config))
                .layer(from_fn_with_state(
                    jobs_counted,
                    crate::code_mode::count_requests,
                ))
                .layer(from_fn_with_state(max_bytes, crate::bounded_json::bounded))
        }
        Flavor::Sse => crate::sse::routes(gateway.clone()),
    };
    // WebDAV: the same authentication, with Basic accepted outside it (see `crate::dav`); the
    // handler answers 404 while `[dav] enabled` is false, so a reload can turn it on.
    let dav = crate::dav::with_basic(
        crate::dav::routes(gateway.clone())
            .layer(from_fn_with_state((gateway.clone(), false), identify)),
    );
    mcp.layer(from_fn_with_state((gateway, jobs), identify))
        .merge(dav)
}

/// rmcp's streamable HTTP service as every hpcgate listener runs it: stateless, JSON responses.
pub(crate) fn stateless_config(shutdown: CancellationToken) -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_cancellation_token(shutdown)
}

/// The MCP service with a handler made by `make` for each request: the gateway's listeners
/// and the job doors ([`crate::code_mode`]) share it.
pub(crate) fn mcp_service(
    make: impl Fn() -> std::io::Result<McpServer> + Send + Sync + 'static,
    config: StreamableHttpServerConfig,
) -> StreamableHttpService<McpServer, NeverSessionManager> {
    StreamableHttpService::new(make, Arc::new(NeverSessionManager::default()), config)
}

/// The whole app: the identified MCP routes (whose `Origin` check is the authenticator's, with
/// `[http] allowed_origins`), `/healthz`, which reveals only that the gateway is up and its
/// version, to anyone who can reach the listener, and `/metrics` (see [`crate::metrics`] for
/// who may scrape).
fn app(
    gateway: Arc<Gateway>,
    identified_mcp: Router,
    access: Access,
    flavor: Flavor<'_>,
) -> Router {
    let metadata = Router::new()
        .route(WELL_KNOWN, get(resource_metadata))
        .route(&format!("{WELL_KNOWN}/{{*rest}}"), get(resource_metadata))
        .with_state(gateway.clone());
    let job_path: Option<Arc<str>> = match flavor {
        Flavor::Streamable(path) => Some(Arc::from(path)),
        Flavor::Sse => None,
    };
    identified_mcp
        .route("/healthz", get(healthz))
        .merge(metadata)
        .merge(crate::metrics::router(gateway, access))
        .layer(from_fn_with_state(job_path, confine_job_tokens))
        .layer(from_fn(mark_in_flight))
}

/// RFC 9728 protected-resource metadata (`[auth.oauth]`), unauthenticated like the document
/// says it must be, readable by browser clients from any origin (it holds only public facts);
/// 404 without `[auth.oauth]` or at another path.
async fn resource_metadata(State(gateway): State<Arc<Gateway>>, uri: axum::http::Uri) -> Response {
    match gateway.resource_metadata(uri.path()) {
        Some(document) => (
            [(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")],
            axum::Json(document),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn healthz() -> impl IntoResponse {
    axum::Json(serde_json::json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// Who a request is, as far as it can be told without reading files.
enum Identified {
    Caller(Caller),
    /// A job's token, to be checked by code mode.
    Job(String),
}

/// Authenticates one request and attaches its [`Caller`], or answers 401/403. Where `jobs`
/// (streamable MCP), a job's token (code mode) is taken to code mode instead, and the job's
/// door ([`crate::code_mode::JobScope`]) is attached beside its caller; elsewhere the
/// authenticator refuses it.
async fn identify(
    State((gateway, jobs)): State<(Arc<Gateway>, bool)>,
    mut request: Request,
    next: Next,
) -> Response {
    let unix = request
        .extensions()
        .get::<ConnectInfo<UnixPeer>>()
        .map(|info| info.0.cred);
    if let Some(None) = unix {
        return (
            StatusCode::FORBIDDEN,
            "refused: the peer's credentials (SO_PEERCRED) are unavailable",
        )
            .into_response();
    }
    // One snapshot decides both whether the owner is needed and who may call.
    let snapshot = gateway.snapshot();
    let tcp = (request.extensions().get::<ConnectInfo<TcpPeer>>()).map(|info| info.0.clone());
    let tcp_owner = match tcp {
        Some(peer) if snapshot.needs_tcp_owner() => Some(peer.owner().await),
        _ => None,
    };
    // In a block: the borrows of the request (whose body is not `Sync`) end before the await.
    let decided = {
        let header = |name| {
            request
                .headers()
                .get(name)
                .map(|v: &HeaderValue| v.to_str().unwrap_or("\u{fffd}"))
        };
        let authorization = header(header::AUTHORIZATION);
        let auth = AuthRequest {
            authorization,
            origin: header(header::ORIGIN),
            peer: unix.flatten(),
            tcp_owner,
        };
        match authorization.and_then(crate::auth::job_token::job_token_of) {
            // The `Origin` rule holds for a job as for anyone.
            Some(token) if jobs => gateway
                .check_origin(&auth)
                .map(|()| Identified::Job(token.to_owned())),
            _ => snapshot
                .authenticate_or_reject(&auth)
                .map(Identified::Caller),
        }
    };
    let decided = match decided {
        Ok(Identified::Caller(caller)) => Ok((caller, None)),
        // A job's token is checked against its job's files (and, with another gateway's
        // jobs, its stored hash): file reads, off the runtime's threads.
        Ok(Identified::Job(token)) => {
            let gateway = gateway.clone();
            let checked = tokio::task::spawn_blocking(move || gateway.authenticate_job(&token));
            match checked.await {
                Ok(checked) => checked.map(|(caller, job)| (caller, Some(job))),
                Err(_) => {
                    let why = "checking the job's token failed; retry";
                    return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
                }
            }
        }
        Err(rejection) => Err(rejection),
    };
    match decided {
        Ok((caller, job)) => {
            request.extensions_mut().insert(caller);
            if let Some(job) = job {
                request.extensions_mut().insert(job);
            }
            next.run(request).await
        }
        Err(rejection) => {
            let status = StatusCode::from_u16(rejection.status).unwrap_or(StatusCode::FORBIDDEN);
            let mut response = (status, rejection.message).into_response();
            if let Some(challenge) = rejection
                .www_authenticate
                .and_then(|c| HeaderValue::from_str(&c).ok())
            {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, challenge);
            }
            response
        }
    }
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses, before anything starts, what [`serve`] must not do: see the module doc.
pub fn check(listen: &Listen, identity: &Identity, path: &str) -> anyhow::Result<()> {
    check_mount_path(path)?;
    match listen {
        Listen::Tcp { host, .. } => check_tcp_host(host, identity),
        Listen::Unix(_) => Ok(()),
    }
}

fn check_mount_path(path: &str) -> anyhow::Result<()> {
    let taken = ["/healthz", "/metrics", crate::sse::MESSAGES_PATH].contains(&path)
        || path.starts_with("/.well-known");
    if !path.starts_with('/') || path == "/" || taken || path.ends_with('/') {
        bail!(
            "`--path {path}` is not usable: give an absolute path such as `/mcp` (not `/`, `/healthz`, `/metrics` or under `/.well-known`, no trailing slash)"
        );
    }
    Ok(())
}

fn check_tcp_host(host: &str, identity: &Identity) -> anyhow::Result<()> {
    // With tenants every TCP request must authenticate (bearer token or JWT), on any address.
    if !identity.multi_tenant && !is_loopback_host(host) {
        bail!(
            "`--host {host}` is not a loopback address: without `[tenants]` every HTTP caller acts as `{}` with no authentication, so hpcgate listens only on loopback (127.0.0.1, ::1, localhost) or a Unix socket (`--uds PATH`)",
            identity.stdio_tenant
        );
    }
    // Without tenants a TCP caller is known by the uid owning its socket, and a sandbox's
    // processes run as the gateway's own uid: with the host's network, a job or a proxied
    // server could call this listener as the tenant, past code mode's limits.
    if !identity.multi_tenant && !identity.host_network.is_empty() {
        bail!(
            "{} gives sandboxes the host's network, and without `[tenants]` this TCP listener serves every process of this uid as `{}`: jobs and proxied servers could call it as the tenant. Serve over stdio or a Unix socket (`--uds PATH`), or configure `[tenants]` with a token",
            identity.host_network.join(", "),
            identity.stdio_tenant
        );
    }
    Ok(())
}

/// The keys of `settings` that give sandboxes the host's network.
fn host_network(settings: &Settings) -> Vec<String> {
    use hpcgate_executors::sandbox::Network;
    let fixed = &settings.fixed;
    let sandbox = (fixed.sandbox.network == Network::Host)
        .then(|| "`[sandbox] network = \"host\"`".to_owned());
    let proxies = (fixed.proxied_mcps.iter())
        .filter(|(_, proxy)| proxy.network == Network::Host)
        .map(|(name, _)| format!("`[proxied_mcps.{name}] network = \"host\"`"));
    sandbox.into_iter().chain(proxies).collect()
}

/// One parseable line on stderr (stdout belongs to MCP over stdio; tests read this line).
fn announce(address: &str) {
    let _ = writeln!(std::io::stderr().lock(), "hpcgate: listening on {address}");
}

/// The WebDAV line, when `[dav] enabled`.
fn announce_dav(address: &str) {
    let _ = writeln!(std::io::stderr().lock(), "hpcgate: WebDAV on {address}");
}

/// The gateway's TCP listener, whose connections carry small request/response exchanges:
/// never hold a segment back for Nagle. (A type of its own rather than axum's `tap_io`, so
/// that [`TcpPeer`] can be the connection's `ConnectInfo`.)
pub(crate) struct NoDelay(TcpListener);

impl Listener for NoDelay {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        let (tcp, remote) = Listener::accept(&mut self.0).await;
        let _ = tcp.set_nodelay(true);
        (tcp, remote)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Listener::local_addr(&self.0)
    }
}

/// The peer of one Unix-socket connection, from `SO_PEERCRED`, and what its requests tell its
/// idle clock.
#[derive(Debug, Clone)]
pub(crate) struct UnixPeer {
    pub(crate) cred: Option<PeerCredentials>,
    pub(crate) activity: Arc<Activity>,
}

impl Connected<IncomingStream<'_, Bounded<UnixListener>>> for UnixPeer {
    fn connect_info(stream: IncomingStream<'_, Bounded<UnixListener>>) -> UnixPeer {
        let io = stream.io();
        UnixPeer {
            cred: io.inner().peer_cred().ok().map(|cred| PeerCredentials {
                uid: cred.uid(),
                gid: cred.gid(),
            }),
            activity: Arc::clone(io.activity()),
        }
    }
}

/// Middleware for every listener: marks each request in flight on its connection (see
/// [`connections`]) until its answer's body has been sent, so that no idle clock ends it
/// meanwhile (a long call, an SSE stream).
pub(crate) async fn mark_in_flight(request: Request, next: Next) -> Response {
    let extensions = request.extensions();
    let activity = (extensions.get::<ConnectInfo<TcpPeer>>())
        .map(|info| &info.0.activity)
        .or_else(|| (extensions.get::<ConnectInfo<UnixPeer>>()).map(|info| &info.0.activity));
    let Some(in_flight) = activity.map(InFlight::begin) else {
        return next.run(request).await;
    };
    let response = next.run(request).await;
    response.map(|body| axum::body::Body::new(Counted::new(body, in_flight)))
}

/// A future that resolves on SIGINT or SIGTERM. The handlers are installed now, not when the
/// future is first polled: a signal right after `listening on` must not kill the process
/// before the socket is removed.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests;
