//! `GET /metrics`: who may scrape, and a listener of its own (`hpcgate run --metrics-listen`)
//! for gateways that serve MCP over stdio.
//!
//! A scrape shows counts and timings by tool and policy — no ids, arguments or tenants — but
//! that still says something about a site, so it is answered only to a peer on loopback, to a
//! peer of the gateway's Unix socket running as the gateway's user or root (the socket is
//! open to every user once a tenant maps another uid), or to a scraper presenting the token
//! whose SHA-256 is `[metrics] token_sha256`. Anyone else gets
//! 401 (when a token is configured, with `WWW-Authenticate: Bearer`) or 403; with
//! `[metrics] enabled = false`, 404.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::from_fn;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use subtle::ConstantTimeEq as _;

use crate::auth::bearer::{bearer_token, hash_token};
use crate::config::{ConnectionLimits, MetricsSettings};
use crate::gateway::Gateway;
use crate::http::connections::Bounded;
use crate::http::{TcpPeer, UnixPeer};

/// The content type of the Prometheus text format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where scrapes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A TCP listener: loopback peers (`ConnectInfo<TcpPeer>`), or the token.
    Tcp,
    /// The gateway's Unix socket: a peer running as the gateway's user or root, or the token.
    Socket,
}

/// `GET /metrics` for a listener of kind `access`.
pub fn router(gateway: Arc<Gateway>, access: Access) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state((gateway, access))
}

/// The metrics listener's connections: a few scrapers, each answered at once.
const SCRAPERS: ConnectionLimits = ConnectionLimits {
    max: 16,
    per_peer: 16,
    idle: std::time::Duration::from_secs(30),
};

/// Serves `/metrics` alone on `listener` (bound by the caller, so a bad address fails at
/// start) until the runtime stops.
pub async fn serve(gateway: Arc<Gateway>, listener: std::net::TcpListener) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let listener = Bounded::new(listener, SCRAPERS);
    let app = router(gateway, Access::Tcp).layer(from_fn(crate::http::mark_in_flight));
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<TcpPeer>(),
    )
    .await
    .context("the metrics listener failed")
}

/// Binds `--metrics-listen ADDR`; an address beyond loopback needs a token, or anyone who
/// can reach it would read the site's metrics.
pub fn bind(address: &str, token_configured: bool) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("cannot listen for metrics on `{address}`"))?;
    let bound = listener.local_addr()?;
    if !is_loopback(bound.ip()) && !token_configured {
        bail!(
            "`--metrics-listen {address}` is not a loopback address: set `[metrics] token_sha256` (the SHA-256 of your scraper's bearer token) or listen on 127.0.0.1"
        );
    }
    Ok(listener)
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Whether a `Host` header (`name`, `name:port`, `[v6]:port`) names this machine's loopback.
fn names_loopback(host: &str) -> bool {
    let name = crate::http::host_name(host);
    name.eq_ignore_ascii_case("localhost") || name.parse().is_ok_and(is_loopback)
}

async fn scrape(
    State((gateway, access)): State<(Arc<Gateway>, Access)>,
    request: Request,
) -> Response {
    let host = (request.headers().get(header::HOST)).and_then(|h| h.to_str().ok());
    let peer = match access {
        // A loopback peer whose request names another host reached us through a name rebound
        // to this machine (a web page's): it is not taken for a local scraper.
        Access::Tcp => (request.extensions().get::<ConnectInfo<TcpPeer>>())
            .map(|peer| peer.0.remote.ip())
            .filter(|&ip| !is_loopback(ip) || host.is_some_and(names_loopback))
            .map(Peer::Ip),
        Access::Socket => (request.extensions().get::<ConnectInfo<UnixPeer>>())
            .and_then(|peer| peer.0.cred)
            .map(|cred| Peer::Uid(cred.uid)),
    };
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match admit(
        &gateway.snapshot().metrics_settings(),
        access,
        peer,
        authorization,
    ) {
        Admission::Serve => {}
        refused => return refused.response(),
    }
    // Rendering reads job records: not on a runtime thread.
    match tokio::task::spawn_blocking(move || gateway.metrics_text()).await {
        Ok(text) => ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the metrics could not be rendered: {e}"),
        )
            .into_response(),
    }
}

/// Whether a scrape is answered.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    Serve,
    /// `[metrics] enabled = false`.
    Off,
    /// Not local, and no token is configured.
    Forbidden,
    /// Not local; a token is configured and was not presented (`false`) or not valid (`true`).
    Unauthorized {
        presented: bool,
    },
}

/// Who is scraping, as the listener tells.
#[derive(Debug, Clone, Copy)]
enum Peer {
    Ip(IpAddr),
    /// A Unix-socket peer's user.
    Uid(u32),
}

/// The access rule of the module doc: local peers, or the configured token.
fn admit(
    settings: &MetricsSettings,
    access: Access,
    peer: Option<Peer>,
    authorization: Option<&str>,
) -> Admission {
    if !settings.enabled {
        return Admission::Off;
    }
    let local = match (access, peer) {
        (Access::Tcp, Some(Peer::Ip(ip))) => is_loopback(ip),
        (Access::Socket, Some(Peer::Uid(uid))) => {
            uid == 0 || uid == rustix::process::geteuid().as_raw()
        }
        _ => false,
    };
    if local {
        return Admission::Serve;
    }
    let Some(want) = settings.token_sha256 else {
        return Admission::Forbidden;
    };
    match authorization.and_then(|value| bearer_token(value).ok()) {
        Some(token) if bool::from(hash_token(token).ct_eq(&want)) => Admission::Serve,
        presented => Admission::Unauthorized {
            presented: presented.is_some(),
        },
    }
}

impl Admission {
    fn response(self) -> Response {
        let (status, message) = match self {
            Admission::Serve => return StatusCode::OK.into_response(),
            Admission::Off => (
                StatusCode::NOT_FOUND,
                "metrics are off on this gateway (`[metrics] enabled = false`)",
            ),
            Admission::Forbidden => (
                StatusCode::FORBIDDEN,
                "metrics are served to loopback and Unix-socket peers only; set `[metrics] token_sha256` to let a remote scraper in with a bearer token",
            ),
            Admission::Unauthorized { presented: true } => {
                (StatusCode::UNAUTHORIZED, "the metrics token is not valid")
            }
            Admission::Unauthorized { presented: false } => (
                StatusCode::UNAUTHORIZED,
                "metrics need `Authorization: Bearer <token>` (the token whose SHA-256 is `[metrics] token_sha256`)",
            ),
        };
        let mut response = (status, message).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"hpcgate-metrics\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "hpcg_metrics-scraper";

    fn settings(token: bool) -> MetricsSettings {
        MetricsSettings {
            enabled: true,
            token_sha256: token.then(|| hash_token(TOKEN)),
        }
    }

    #[test]
    fn local_peers_are_served_and_remote_ones_need_the_token() {
        let remote = Peer::Ip("10.1.2.3".parse().unwrap());
        let ip = |text: &str| Some(Peer::Ip(text.parse().unwrap()));
        let me = Some(Peer::Uid(rustix::process::geteuid().as_raw()));
        let stranger = Some(Peer::Uid(4242));
        let bearer = format!("Bearer {TOKEN}");
        let bearer = bearer.as_str();
        let table = [
            (
                settings(false),
                Access::Tcp,
                ip("127.0.0.1"),
                None,
                Admission::Serve,
            ),
            (
                settings(false),
                Access::Tcp,
                ip("::1"),
                None,
                Admission::Serve,
            ),
            (
                settings(false),
                Access::Tcp,
                ip("::ffff:127.0.0.1"),
                None,
                Admission::Serve,
            ),
            (settings(false), Access::Socket, me, None, Admission::Serve),
            (
                settings(false),
                Access::Socket,
                Some(Peer::Uid(0)),
                None,
                Admission::Serve,
            ),
            // Another user on the socket (open to all once a tenant maps a uid): the token.
            (
                settings(false),
                Access::Socket,
                stranger,
                None,
                Admission::Forbidden,
            ),
            (
                settings(true),
                Access::Socket,
                stranger,
                Some(bearer),
                Admission::Serve,
            ),
            (
                settings(true),
                Access::Socket,
                stranger,
                None,
                Admission::Unauthorized { presented: false },
            ),
            (
                settings(false),
                Access::Tcp,
                None,
                None,
                Admission::Forbidden,
            ),
            (
                settings(false),
                Access::Tcp,
                Some(remote),
                None,
                Admission::Forbidden,
            ),
            // Without a configured token, no token opens it.
            (
                settings(false),
                Access::Tcp,
                Some(remote),
                Some(bearer),
                Admission::Forbidden,
            ),
            (
                settings(true),
                Access::Tcp,
                Some(remote),
                None,
                Admission::Unauthorized { presented: false },
            ),
            (
                settings(true),
                Access::Tcp,
                Some(remote),
                Some("Bearer hpcg_wrong"),
                Admission::Unauthorized { presented: true },
            ),
            (
                settings(true),
                Access::Tcp,
                Some(remote),
                Some("Basic aGVsbG8="),
                Admission::Unauthorized { presented: false },
            ),
            (
                settings(true),
                Access::Tcp,
                Some(remote),
                Some(bearer),
                Admission::Serve,
            ),
            (
                MetricsSettings {
                    enabled: false,
                    ..settings(true)
                },
                Access::Socket,
                None,
                Some(bearer),
                Admission::Off,
            ),
        ];
        for (settings, access, peer, authorization, expected) in table {
            assert_eq!(
                admit(&settings, access, peer, authorization),
                expected,
                "{access:?} {peer:?} {authorization:?}"
            );
        }
    }

    #[test]
    fn refusals_say_what_to_do() {
        let unauthorized = Admission::Unauthorized { presented: false }.response();
        assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert!(
            unauthorized
                .headers()
                .contains_key(header::WWW_AUTHENTICATE)
        );
        let forbidden = Admission::Forbidden.response();
        assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
        assert!(!forbidden.headers().contains_key(header::WWW_AUTHENTICATE));
        assert_eq!(Admission::Off.response().status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn a_remote_metrics_listener_needs_a_token() {
        let error = bind("0.0.0.0:0", false).unwrap_err().to_string();
        assert!(error.contains("token_sha256"), "{error}");
        assert!(bind("127.0.0.1:0", false).is_ok());
    }

    #[test]
    fn only_loopback_names_pass_for_a_local_scraper() {
        for host in [
            "localhost",
            "LOCALHOST:9464",
            "127.0.0.1:9464",
            "[::1]:80",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(names_loopback(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:9464",
            "10.0.0.1",
            "localhost.evil.example",
        ] {
            assert!(!names_loopback(host), "{host}");
        }
    }
}
