//! `[auth.oauth]`: hpcgate as an OAuth 2.1 resource server for the JWTs of `[auth.jwt]`, raw and
//! resolved: the protected-resource metadata (RFC 9728) it publishes, and the scopes every token
//! must carry.

use serde::Deserialize;

use super::auth::JwtSettings;
use super::error::ConfigError;
use super::settings::Bad;

/// `[auth.oauth]`: what the protected-resource metadata (RFC 9728) says, and the scopes every
/// token must carry. Tokens themselves are verified by `[auth.jwt]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// This gateway's canonical resource URI (RFC 8707), e.g. `https://gw.example.org/mcp`; it
    /// must be one of `auth.jwt.audience`.
    pub resource: Option<String>,
    /// Issuer identifiers of the authorization servers that issue tokens for this resource;
    /// `auth.jwt.issuer` must be one of them.
    pub authorization_servers: Option<Vec<String>>,
    /// Scopes advertised in the metadata (`scopes_supported`).
    pub scopes_supported: Option<Vec<String>>,
    /// Scopes every token must carry in its `scope` claim; a token without them is refused
    /// with 403 `insufficient_scope`.
    pub required_scopes: Option<Vec<String>>,
    /// `resource_name` in the metadata (default `hpcgate`).
    pub resource_name: Option<String>,
    /// `resource_documentation` in the metadata: a URL.
    pub resource_documentation: Option<String>,
}

/// `[auth.oauth]`, validated against `[auth.jwt]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    /// The canonical resource URI, as configured (no trailing slash added or removed).
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
    pub required_scopes: Vec<String>,
    pub resource_name: String,
    pub resource_documentation: Option<String>,
}

impl OAuthSettings {
    /// The path part of [`Self::resource`] (`""` for a bare origin), which the path-suffixed
    /// metadata URL appends to `/.well-known/oauth-protected-resource` (RFC 9728 §3.1).
    pub fn resource_path(&self) -> &str {
        let rest = self.resource.split_once("://").map_or("", |(_, rest)| rest);
        match rest.find('/') {
            Some(i) => rest[i..].trim_end_matches('/'),
            None => "",
        }
    }

    /// The metadata URL named in every `WWW-Authenticate` challenge: the well-known URI
    /// inserted between the resource's origin and its path (RFC 9728 §3.1).
    pub fn metadata_url(&self) -> String {
        let path = self.resource_path();
        let origin = self.resource.trim_end_matches('/');
        let origin = &origin[..origin.len() - path.len()];
        format!("{origin}{WELL_KNOWN}{path}")
    }
}

/// The well-known path of protected-resource metadata (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// Resolves `[auth.oauth]`: it needs `[auth.jwt]` (the tokens are JWTs), its resource must be
/// an accepted audience (RFC 8707) and the JWT issuer one of its authorization servers.
pub(crate) fn resolve_oauth(
    raw: &OAuthConfig,
    jwt: Option<&JwtSettings>,
    bad: &Bad,
) -> Result<OAuthSettings, ConfigError> {
    let Some(jwt) = jwt else {
        return Err(bad(
            "auth.oauth",
            "needs `[auth.jwt]`: the access tokens are JWTs verified against the issuer's keys (`jwks_file`)".to_owned(),
        ));
    };
    let resource = match raw.resource.as_deref().map(str::trim) {
        Some(resource) if !resource.is_empty() => resource.to_owned(),
        _ => {
            return Err(bad(
                "auth.oauth.resource",
                "is required: this gateway's URL as clients reach it, e.g. \"https://gw.example.org/mcp\"".to_owned(),
            ));
        }
    };
    check_url("auth.oauth.resource", &resource, bad)?;
    if !jwt.audience.contains(&resource) {
        return Err(bad(
            "auth.oauth.resource",
            format!(
                "`{resource}` is not in `auth.jwt.audience`: tokens for this resource carry it as `aud` (RFC 8707); add it there"
            ),
        ));
    }
    let authorization_servers = raw.authorization_servers.clone().unwrap_or_default();
    if authorization_servers.is_empty() {
        return Err(bad(
            "auth.oauth.authorization_servers",
            "is required: the issuer URLs clients get tokens from, e.g. [\"https://idp.example.org\"]".to_owned(),
        ));
    }
    for (i, server) in authorization_servers.iter().enumerate() {
        check_url(
            &format!("auth.oauth.authorization_servers[{i}]"),
            server,
            bad,
        )?;
    }
    if !authorization_servers.contains(&jwt.issuer) {
        return Err(bad(
            "auth.oauth.authorization_servers",
            format!(
                "does not list `auth.jwt.issuer` (`{}`): clients would be sent to a server whose tokens this gateway refuses",
                jwt.issuer
            ),
        ));
    }
    let scopes = |key: &str, list: &Option<Vec<String>>| -> Result<Vec<String>, ConfigError> {
        let list = list.clone().unwrap_or_default();
        for scope in &list {
            // RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
            if scope.is_empty()
                || !scope
                    .bytes()
                    .all(|b| b == 0x21 || ((0x23..=0x7e).contains(&b) && b != b'\\'))
            {
                return Err(bad(
                    key,
                    format!(
                        "`{scope}` is not a scope token (printable ASCII without spaces, `\"` or `\\`)"
                    ),
                ));
            }
        }
        Ok(list)
    };
    let resource_documentation = match &raw.resource_documentation {
        Some(url) => {
            check_url("auth.oauth.resource_documentation", url, bad)?;
            Some(url.clone())
        }
        None => None,
    };
    Ok(OAuthSettings {
        resource,
        authorization_servers,
        scopes_supported: scopes("auth.oauth.scopes_supported", &raw.scopes_supported)?,
        required_scopes: scopes("auth.oauth.required_scopes", &raw.required_scopes)?,
        resource_name: raw
            .resource_name
            .clone()
            .unwrap_or_else(|| "hpcgate".to_owned()),
        resource_documentation,
    })
}

/// An absolute `https` URL (or `http` on a loopback host, for testing) without query or
/// fragment, as RFC 8707 and RFC 9728 require of resource and issuer identifiers.
fn check_url(key: &str, url: &str, bad: &Bad) -> Result<(), ConfigError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| {
            url.strip_prefix("http://").filter(|rest| {
                let host = rest.split(['/', ':']).next().unwrap_or("");
                host == "localhost" || host == "127.0.0.1" || rest.starts_with("[::1]")
            })
        })
        .ok_or_else(|| {
            bad(
                key,
                format!("`{url}` is not an `https://` URL (`http://` only for localhost)"),
            )
        })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty()
        || url.contains(['?', '#'])
        || url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"')
    {
        return Err(bad(
            key,
            format!("`{url}` must be an absolute URL with a host and no query or fragment"),
        ));
    }
    Ok(())
}
