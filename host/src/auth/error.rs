//! Why a request was not authenticated, and how each reason maps to an HTTP answer
//! ([`AuthError::rejection`]): 401 with a `WWW-Authenticate: Bearer` challenge (RFC 6750), or
//! 403 (with an `insufficient_scope` challenge for a valid token that grants nothing here).
//! Messages never name a tenant, a token or a key.

use std::path::PathBuf;

/// A request the authenticator refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header and no Unix peer credentials.
    #[error("authentication required: send `Authorization: Bearer <token>`")]
    MissingCredentials,
    /// A bearer token (or JWT) that does not authenticate; `reason` is safe to show.
    #[error("invalid bearer token: {reason}")]
    InvalidToken { reason: String },
    /// A valid token that grants nothing here: a required scope missing, or no (or more than
    /// one) tenant named by its tenant claim. 403 `insufficient_scope` (RFC 6750 §3.1).
    #[error("the token does not grant access to this gateway: {reason}")]
    InsufficientScope {
        reason: String,
        /// The scopes a token needs (`[auth.oauth] required_scopes`), space-separated.
        scope: Option<String>,
    },
    /// A Unix-socket peer whose uid no tenant lists.
    #[error(
        "uid {uid} may not use this gateway; ask the admin to add it to a tenant's `unix_uids`"
    )]
    UnknownPeer { uid: u32 },
    /// Single-tenant, over TCP: a client socket owned by a uid that is neither the gateway's
    /// nor root.
    #[error(
        "uid {uid} may not use this gateway: without `[tenants]` it serves only its owner's uid \
         (and root) over TCP; connect from the owner's account, or ask the owner to configure \
         `[tenants]` with tokens, or to serve `--uds` with `unix_uids`"
    )]
    ForeignTcpPeer { uid: u32 },
    /// Single-tenant, over TCP: no socket on this host is the client's (closed, or remote).
    #[error(
        "the owner of this connection could not be found on this host: without `[tenants]` this \
         gateway serves only its owner's uid (and root) over TCP, from this host; connect from \
         the owner's account, or ask the owner to configure `[tenants]` with tokens, or to serve \
         `--uds` with `unix_uids`"
    )]
    UnknownTcpPeer,
    /// A browser `Origin` not on the allow-list (DNS-rebinding defence).
    #[error(
        "origin `{origin}` is not a loopback origin nor in `[http] allowed_origins`; \
         non-browser MCP clients send no `Origin`, and the admin can allow a web client's origin there"
    )]
    OriginDenied { origin: String },
}

/// An HTTP answer to a refused request: status, `WWW-Authenticate` value (401, and 403 for a
/// token lacking scope), body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub message: String,
}

impl AuthError {
    /// What the HTTP transport sends back, without protected-resource metadata.
    pub fn rejection(&self) -> Rejection {
        self.rejection_with(None)
    }

    /// What the HTTP transport sends back; `resource_metadata` (the RFC 9728 metadata URL,
    /// with `[auth.oauth]`) is named in every Bearer challenge so that a client can discover
    /// the authorization server (RFC 9728 §5.1).
    pub fn rejection_with(&self, resource_metadata: Option<&str>) -> Rejection {
        let message = self.to_string();
        let mut challenge = format!("Bearer realm=\"{REALM}\"");
        if let Some(url) = resource_metadata {
            challenge.push_str(&format!(
                ", resource_metadata=\"{}\"",
                quoted_string_safe(url)
            ));
        }
        let (status, www_authenticate) = match self {
            AuthError::MissingCredentials => (401, Some(challenge)),
            AuthError::InvalidToken { reason } => (
                401,
                Some(format!(
                    "{challenge}, error=\"invalid_token\", error_description=\"{}\"",
                    quoted_string_safe(reason)
                )),
            ),
            AuthError::InsufficientScope { reason, scope } => {
                let mut value = format!(
                    "{challenge}, error=\"insufficient_scope\", error_description=\"{}\"",
                    quoted_string_safe(reason)
                );
                if let Some(scope) = scope {
                    value.push_str(&format!(", scope=\"{}\"", quoted_string_safe(scope)));
                }
                (403, Some(value))
            }
            AuthError::UnknownPeer { .. }
            | AuthError::ForeignTcpPeer { .. }
            | AuthError::UnknownTcpPeer
            | AuthError::OriginDenied { .. } => (403, None),
        };
        Rejection {
            status,
            www_authenticate,
            message,
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> AuthError {
        AuthError::InvalidToken {
            reason: reason.into(),
        }
    }
}

/// The `realm` of every challenge.
pub const REALM: &str = "hpcgate";

/// RFC 6750 `error_description` allows only `%x20-21 / %x23-5B / %x5D-7E`.
fn quoted_string_safe(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

/// Why the authenticator could not be built from the settings (a key file unreadable or
/// unusable). Names the dotted key and the file; never the key material.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("cannot read `{key}` file `{path}`")]
    Read {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{key}` file `{path}`: {message}")]
    Unusable {
        key: &'static str,
        path: PathBuf,
        message: String,
    },
}
