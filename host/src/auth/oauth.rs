//! The OAuth 2.1 resource-server face of `[auth.oauth]` (MCP authorization, RFC 9728):
//! the protected-resource metadata document, the URLs it is served at, and the metadata URL
//! every Bearer challenge names. Tokens are verified by [`super::jwt`] (audience = this
//! resource, RFC 8707; issuer; keys from the JWKS file); nothing here sees a token.
//!
//! The document is built once from the settings (rebuilt with the authenticator on reload) and
//! holds only public facts: the resource URI, the authorization servers, the scopes.

use serde_json::{Value, json};

use crate::config::{OAuthSettings, WELL_KNOWN};

/// The metadata and where it lives.
#[derive(Debug)]
pub(crate) struct ResourceServer {
    /// `…/.well-known/oauth-protected-resource<path>`, named in challenges.
    metadata_url: String,
    /// `/.well-known/oauth-protected-resource<path>`, the path-suffixed form (RFC 9728 §3.1).
    suffixed_path: String,
    document: Value,
}

impl ResourceServer {
    pub(crate) fn new(settings: &OAuthSettings) -> ResourceServer {
        let mut document = json!({
            "resource": settings.resource,
            "authorization_servers": settings.authorization_servers,
            // Only the Authorization header: a token in a query or body could be logged.
            "bearer_methods_supported": ["header"],
            "resource_name": settings.resource_name,
        });
        if !settings.scopes_supported.is_empty() {
            document["scopes_supported"] = json!(settings.scopes_supported);
        }
        if let Some(url) = &settings.resource_documentation {
            document["resource_documentation"] = json!(url);
        }
        ResourceServer {
            metadata_url: settings.metadata_url(),
            suffixed_path: format!("{WELL_KNOWN}{}", settings.resource_path()),
            document,
        }
    }

    pub(crate) fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// The document, if `path` is where it is served: the path-suffixed URL, or the bare
    /// well-known path (clients of MCP's 2025-06-18 revision ask there first).
    pub(crate) fn document_at(&self, path: &str) -> Option<&Value> {
        (path == self.suffixed_path || path == WELL_KNOWN).then_some(&self.document)
    }
}
