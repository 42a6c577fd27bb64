//! Why a request was not authenticated, and how each reason maps to an HTTP answer
//! ([`AuthError::rejection`]): 401 with a `WWW-Authenticate: Bearer` challenge (RFC 6750), or
//! 403. Messages never name a tenant, a token or a key.

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
    /// A Unix-socket peer whose uid no tenant lists.
    #[error(
        "uid {uid} may not use this gateway; ask the admin to add it to a tenant's `unix_uids`"
    )]
    UnknownPeer { uid: u32 },
    /// A browser `Origin` not on the allow-list (DNS-rebinding defence).
    #[error(
        "origin `{origin}` is not a loopback origin nor in `[http] allowed_origins`; \
         non-browser MCP clients send no `Origin`, and the admin can allow a web client's origin there"
    )]
    OriginDenied { origin: String },
}

/// An HTTP answer to a refused request: status, `WWW-Authenticate` value (401 only), body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub message: String,
}

impl AuthError {
    /// What the HTTP transport sends back.
    pub fn rejection(&self) -> Rejection {
        let message = self.to_string();
        let (status, www_authenticate) = match self {
            AuthError::MissingCredentials => (401, Some(format!("Bearer realm=\"{REALM}\""))),
            AuthError::InvalidToken { reason } => (
                401,
                Some(format!(
                    "Bearer realm=\"{REALM}\", error=\"invalid_token\", error_description=\"{}\"",
                    quoted_string_safe(reason)
                )),
            ),
            AuthError::UnknownPeer { .. } | AuthError::OriginDenied { .. } => (403, None),
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
