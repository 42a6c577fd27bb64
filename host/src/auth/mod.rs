//! Who is calling, and how often they may: the transport-independent half of tenancy.
//!
//! A transport builds an [`AuthRequest`] from what it knows (the `Authorization` and `Origin`
//! headers, the Unix peer's uid and gid) and asks [`Authenticator::authenticate`] for a
//! [`Caller`], or an [`AuthError`] whose [`AuthError::rejection`] is the HTTP answer. The
//! order is fixed:
//!
//! 1. `Origin`, if present, must be loopback or on `[http] allowed_origins` (else 403);
//! 2. single-tenant gateway (no `[tenants]`): every caller is `stdio_tenant`, but a Unix peer
//!    must be the gateway's own uid or root, and so must the owner of a TCP client's socket
//!    ([`SocketOwner`], which the transport finds), else 403;
//! 3. an `Authorization: Bearer` token: a configured token (SHA-256, constant-time over every
//!    hash; principal `token:<label>`), else, with `[auth.jwt]`, a JWT (principal
//!    `jwt:<sub>`); anything else is 401 `invalid_token`;
//! 4. no token but Unix peer credentials: the tenant listing the uid in `unix_uids`
//!    (principal `uid:<n>`), else 403;
//! 5. nothing: 401 without an error attribute (RFC 6750 §3.1).
//!
//! A JWT that verifies but grants nothing here (required scope missing, no tenant) is 403
//! `insufficient_scope`. With `[auth.oauth]` the gateway is an OAuth 2.1 resource server:
//! [`Authenticator::rejection`] names the RFC 9728 metadata URL in every Bearer challenge and
//! [`Authenticator::resource_metadata`] serves the document ([`oauth`]).
//!
//! stdio and local CLI use take [`Authenticator::local_caller`].
//!
//! Nothing is cached: a token removed from the config fails as soon as the transport builds a
//! new authenticator from the reloaded settings (build it on every reload; it is cheap).
//! [`RateLimiter`] holds the token buckets; [`bearer`] makes and hashes tokens for
//! `hpcgate tenant token`; [`job_token`] makes and checks the job-scoped tokens of Slurm jobs
//! with tools, which this authenticator never accepts (code mode does, for MCP only).

pub mod bearer;
mod error;
pub mod job_token;
mod jwt;
mod oauth;
mod origin;
mod rate;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};

pub use error::{AuthError, AuthSetupError, REALM, Rejection};
pub use rate::{RateLimiter, RetryAfter};

use crate::config::Settings;
use crate::state::TenantName;
use bearer::TokenTable;
use jwt::JwtVerifier;
use oauth::ResourceServer;
use origin::OriginPolicy;

/// Who is calling, as the transport established it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: TenantName,
    /// Token label, JWT subject, uid or local user: recorded in every audit record.
    pub principal: String,
}

/// What the transport knows about one request (or one connection).
#[derive(Debug, Clone, Copy, Default)]
pub struct AuthRequest<'a> {
    /// The `Authorization` header value, if any.
    pub authorization: Option<&'a str>,
    /// The `Origin` header value, if any.
    pub origin: Option<&'a str>,
    /// `SO_PEERCRED` of a Unix-socket connection; `None` over TCP.
    pub peer: Option<PeerCredentials>,
    /// Over TCP, when the gateway is single-tenant: who owns the client's socket. A
    /// multi-tenant gateway authenticates TCP callers by their token alone.
    pub tcp_owner: Option<SocketOwner>,
}

/// Who owns the client's end of a TCP connection, as the kernel's socket table says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketOwner {
    Uid(u32),
    /// No socket held by a process on this host (in this network namespace) is the client's.
    NotFound,
}

/// A Unix-socket peer's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    pub uid: u32,
    pub gid: u32,
}

/// Turns requests into callers; built from the settings, rebuilt on reload.
#[derive(Debug)]
pub struct Authenticator {
    /// `Some(stdio_tenant)` on a single-tenant gateway.
    single: Option<TenantName>,
    tokens: TokenTable,
    uids: HashMap<u32, TenantName>,
    jwt: Option<JwtVerifier>,
    oauth: Option<ResourceServer>,
    origins: OriginPolicy,
    own_uid: u32,
    stdio_tenant: TenantName,
    tenants: BTreeSet<TenantName>,
}

impl Authenticator {
    /// Reads the JWT key files, if `[auth.jwt]` is set; everything else is already resolved.
    pub fn from_settings(settings: &Settings) -> Result<Authenticator, AuthSetupError> {
        let mut tokens = TokenTable::default();
        let mut uids = HashMap::new();
        for (name, tenant) in &settings.tenants {
            for token in &tenant.tokens {
                tokens.push(token.sha256, name.clone(), token.label.clone());
            }
            for uid in &tenant.unix_uids {
                uids.insert(*uid, name.clone());
            }
        }
        let jwt = match &settings.jwt {
            Some(jwt) => Some(JwtVerifier::load(
                jwt,
                settings.tenants.keys().cloned().collect::<BTreeSet<_>>(),
                settings
                    .oauth
                    .as_ref()
                    .map(|o| o.required_scopes.clone())
                    .unwrap_or_default(),
            )?),
            None => None,
        };
        Ok(Authenticator {
            single: settings
                .single_tenant()
                .then(|| settings.stdio_tenant.clone()),
            tokens,
            uids,
            jwt,
            oauth: settings.oauth.as_ref().map(ResourceServer::new),
            origins: OriginPolicy::new(settings.allowed_origins.clone()),
            own_uid: rustix::process::geteuid().as_raw(),
            stdio_tenant: settings.stdio_tenant.clone(),
            tenants: settings.tenants.keys().cloned().collect(),
        })
    }

    /// Who is calling; see the module doc for the order of the checks.
    pub fn authenticate(&self, request: &AuthRequest) -> Result<Caller, AuthError> {
        self.check_origin(request)?;
        if let Some(tenant) = &self.single {
            let trusted = |uid| uid == self.own_uid || uid == 0;
            return match (request.peer, request.tcp_owner) {
                (Some(peer), _) if !trusted(peer.uid) => {
                    Err(AuthError::UnknownPeer { uid: peer.uid })
                }
                (Some(peer), _) => Ok(caller(tenant.clone(), format!("uid:{}", peer.uid))),
                (None, Some(SocketOwner::Uid(uid))) if !trusted(uid) => {
                    Err(AuthError::ForeignTcpPeer { uid })
                }
                (None, Some(SocketOwner::NotFound)) => Err(AuthError::UnknownTcpPeer),
                (None, _) => Ok(caller(tenant.clone(), "anonymous".to_owned())),
            };
        }
        if let Some(header) = request.authorization {
            let token = bearer::bearer_token(header).map_err(AuthError::invalid)?;
            if token.starts_with(job_token::JOB_TOKEN_PREFIX) {
                return Err(AuthError::invalid(
                    "a job's token is accepted only for MCP requests at the gateway's MCP path",
                ));
            }
            // Always scan the whole table first, so a JWT costs the same lookup as any token.
            if let Some((tenant, label)) = self.tokens.find(token) {
                return Ok(caller(tenant.clone(), format!("token:{label}")));
            }
            return match &self.jwt {
                Some(jwt) if token.split('.').count() == 3 => {
                    let (tenant, principal) = jwt.verify(token)?;
                    Ok(caller(tenant, principal))
                }
                _ => Err(AuthError::invalid("the token is not known to this gateway")),
            };
        }
        if let Some(peer) = request.peer {
            return match self.uids.get(&peer.uid) {
                Some(tenant) => Ok(caller(tenant.clone(), format!("uid:{}", peer.uid))),
                None => Err(AuthError::UnknownPeer { uid: peer.uid }),
            };
        }
        Err(AuthError::MissingCredentials)
    }

    /// Step 1 alone: an `Origin`, if present, must be loopback or on `[http] allowed_origins`
    /// (a job's token is checked by code mode, after this).
    pub fn check_origin(&self, request: &AuthRequest) -> Result<(), AuthError> {
        match request.origin {
            Some(origin) if !self.origins.allows(origin) => Err(AuthError::OriginDenied {
                origin: printable(origin),
            }),
            _ => Ok(()),
        }
    }

    /// The HTTP answer to `error`: with `[auth.oauth]`, every Bearer challenge names the
    /// protected-resource metadata URL (RFC 9728 §5.1).
    pub fn rejection(&self, error: &AuthError) -> Rejection {
        error.rejection_with(self.oauth.as_ref().map(ResourceServer::metadata_url))
    }

    /// The protected-resource metadata document served at `path`, if `[auth.oauth]` is set and
    /// `path` is one of its well-known URLs.
    pub fn resource_metadata(&self, path: &str) -> Option<&serde_json::Value> {
        self.oauth.as_ref()?.document_at(path)
    }

    /// The caller of stdio and local CLI use, as the local user (`$USER`, else `uid:<n>`). On
    /// a multi-tenant gateway whose `stdio_tenant` is not a configured tenant, the tenant that
    /// lists the gateway's own uid in `unix_uids` is used instead, if there is one.
    pub fn local_caller(&self) -> Caller {
        caller(self.local_tenant().clone(), local_principal())
    }

    fn local_tenant(&self) -> &TenantName {
        match &self.single {
            Some(tenant) => tenant,
            None if self.tenants.contains(&self.stdio_tenant) => &self.stdio_tenant,
            None => self.uids.get(&self.own_uid).unwrap_or(&self.stdio_tenant),
        }
    }

    /// Whether this configuration serves `tenant`: a configured tenant, or the local caller's
    /// (the single tenant without `[tenants]`). A job's calls are refused once a reload took
    /// its tenant out: its token or door was made under the configuration before.
    pub fn serves(&self, tenant: &TenantName) -> bool {
        self.tenants.contains(tenant) || self.local_tenant() == tenant
    }

    /// How many static tokens are configured (for the startup log line).
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// True when `[auth.jwt]` is configured.
    pub fn accepts_jwt(&self) -> bool {
        self.jwt.is_some()
    }
}

fn caller(tenant: TenantName, principal: String) -> Caller {
    Caller { tenant, principal }
}

/// At most 200 printable ASCII characters of a header value, for messages.
fn printable(value: &str) -> String {
    value
        .chars()
        .take(200)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// The local user, as the principal of admin commands: `$USER`, `$LOGNAME`, else `uid:<n>`.
pub fn local_principal() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| format!("uid:{}", rustix::process::geteuid().as_raw()))
}
