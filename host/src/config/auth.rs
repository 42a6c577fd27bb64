//! `[auth]` and `[auth.jwt]`, `[http] allowed_origins` and `[tenants.<name>.rate_limits]`: raw
//! and resolved (`[auth.oauth]` is in `oauth`).
//!
//! Only paths and validated values are kept here; key material is read by
//! `Authenticator::from_settings` (in `auth`) (so `Settings`, which is `Debug`, never holds a
//! secret).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::error::ConfigError;
use super::oauth::OAuthConfig;
use super::settings::Bad;
use crate::state::TenantName;

/// `[auth]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `[auth.jwt]`: accept JWTs as bearer tokens (besides the configured token hashes).
    pub jwt: Option<JwtConfig>,
    /// `[auth.oauth]`: act as an OAuth 2.1 resource server for the JWTs of `[auth.jwt]`
    /// (RFC 9728 metadata, `resource_metadata` challenges, required scopes).
    pub oauth: Option<OAuthConfig>,
}

/// `[auth.jwt]`: one issuer, one algorithm, its key (or a JWKS file), and how a claim names
/// the tenant.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// `HS256`, `RS256` or `ES256`; a token whose header names another algorithm is refused.
    pub algorithm: Option<String>,
    /// HS256: a file holding the shared secret (at least 32 bytes); RS256/ES256: a PEM public key.
    pub key_file: Option<PathBuf>,
    /// RS256/ES256 instead of `key_file`: a JWKS file (`{"keys": [...]}`), keys chosen by `kid`.
    pub jwks_file: Option<PathBuf>,
    /// Required `iss`.
    pub issuer: Option<String>,
    /// Accepted `aud` values (one must match).
    pub audience: Option<Vec<String>>,
    /// The claim naming the tenant: a string, or a list of strings (e.g. `groups`).
    pub tenant_claim: Option<String>,
    /// Claim value → tenant name; when set, only mapped values count.
    pub tenant_map: Option<BTreeMap<String, String>>,
    /// Clock skew allowed for `exp` and `nbf`, seconds (default 30, at most 300).
    pub leeway_s: Option<u64>,
}

/// `[http]`: what the HTTP transport accepts (the transport adds its own keys here).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Browser origins allowed to call (`scheme://host[:port]`); loopback origins always are.
    pub allowed_origins: Option<Vec<String>>,
    /// Names and addresses clients reach the gateway's TCP listener by (`gw.example.org`,
    /// `192.0.2.7`), besides loopback names, `--host` and `[auth.oauth] resource`'s host:
    /// every request's `Host` must name one of them.
    pub allowed_hosts: Option<Vec<String>>,
    /// Connections open at once on the gateway's listener (default 512); more wait unaccepted.
    pub max_connections: Option<usize>,
    /// Seconds a connection may stay open with no request in flight and nothing written to it
    /// (default 60): a request's headers must arrive within this time.
    pub idle_timeout_s: Option<u64>,
    /// Connections open at once from one peer (a local user, by uid, on the Unix socket and on
    /// loopback; else one IPv4 address or IPv6 /64; default 128); more are closed as they
    /// come. Behind a reverse proxy, every connection is its.
    pub max_connections_per_peer: Option<usize>,
}

/// One `rate_limits` entry: exactly one of `per_second`, `per_minute`, `per_hour`, and an
/// optional `burst` (default: the same number).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    pub per_second: Option<u32>,
    pub per_minute: Option<u32>,
    pub per_hour: Option<u32>,
    /// Calls allowed at once after a quiet period.
    pub burst: Option<u32>,
}

/// The JWT algorithms accepted; one per gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlgorithm {
    Hs256,
    Rs256,
    Es256,
}

impl JwtAlgorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            JwtAlgorithm::Hs256 => "HS256",
            JwtAlgorithm::Rs256 => "RS256",
            JwtAlgorithm::Es256 => "ES256",
        }
    }
}

/// Where the verification key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtKeySource {
    /// `key_file`: an HS256 secret or a PEM public key.
    KeyFile(PathBuf),
    /// `jwks_file`.
    Jwks(PathBuf),
}

/// `[auth.jwt]`, validated (paths absolute, tenants known). Keys are read by the authenticator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    pub algorithm: JwtAlgorithm,
    pub key: JwtKeySource,
    pub issuer: String,
    pub audience: Vec<String>,
    pub tenant_claim: String,
    /// Empty: the claim value is the tenant name.
    pub tenant_map: BTreeMap<String, TenantName>,
    pub leeway: Duration,
}

/// A token bucket's shape: `count` calls per `per`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub count: u32,
    pub per: Duration,
    pub burst: u32,
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "second",
            60 => "minute",
            _ => "hour",
        };
        write!(f, "{} per {unit}", self.count)?;
        if self.burst != self.count {
            write!(f, ", burst {}", self.burst)?;
        }
        Ok(())
    }
}

/// The `rate_limits` key that applies to every call of the tenant together.
pub const ALL_TOOLS: &str = "*";

/// Resolves one tenant's `rate_limits`; `key` builds the dotted key below `tenants.<name>`.
pub(crate) fn resolve_rate_limits(
    raw: &BTreeMap<String, RateLimitConfig>,
    key: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, RateLimit>, (String, String)> {
    let mut limits = BTreeMap::new();
    for (tool, r) in raw {
        let at = |field: &str| key(&format!(".rate_limits.{}{field}", quoted_key(tool)));
        if tool != ALL_TOOLS && !is_tool_name(tool) {
            return Err((
                at(""),
                "name a tool (letters, digits, `_`, `-`, `.`; proxied tools as `<proxy>__<tool>`) or use \"*\" for all calls together".to_owned(),
            ));
        }
        let given: Vec<(u32, u64, &str)> = [
            (r.per_second, 1, "per_second"),
            (r.per_minute, 60, "per_minute"),
            (r.per_hour, 3600, "per_hour"),
        ]
        .into_iter()
        .filter_map(|(v, secs, name)| v.map(|v| (v, secs, name)))
        .collect();
        let (count, secs, name) = match given.as_slice() {
            [one] => *one,
            [] => {
                return Err((
                    at(""),
                    "give one of `per_second`, `per_minute` or `per_hour`".to_owned(),
                ));
            }
            _ => {
                return Err((
                    at(""),
                    "give only one of `per_second`, `per_minute` or `per_hour`".to_owned(),
                ));
            }
        };
        if count == 0 {
            return Err((
                at(&format!(".{name}")),
                "must be positive; leave the entry out for no limit".to_owned(),
            ));
        }
        if r.burst == Some(0) {
            return Err((
                at(".burst"),
                "must be positive; it is how many calls may come at once".to_owned(),
            ));
        }
        limits.insert(
            tool.clone(),
            RateLimit {
                count,
                per: Duration::from_secs(secs),
                burst: r.burst.unwrap_or(count),
            },
        );
    }
    Ok(limits)
}

/// `"*"` needs quoting in a dotted key; tool names do not.
fn quoted_key(tool: &str) -> String {
    if is_tool_name(tool) {
        tool.to_owned()
    } else {
        format!("{tool:?}")
    }
}

fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Resolves `[auth.jwt]` against the resolved tenants.
pub(crate) fn resolve_jwt(
    raw: &JwtConfig,
    tenants: &BTreeMap<TenantName, super::Tenant>,
    bad: &Bad,
) -> Result<JwtSettings, ConfigError> {
    let algorithm = match raw.algorithm.as_deref() {
        Some("HS256") => JwtAlgorithm::Hs256,
        Some("RS256") => JwtAlgorithm::Rs256,
        Some("ES256") => JwtAlgorithm::Es256,
        Some(other) => {
            return Err(bad(
                "auth.jwt.algorithm",
                format!("`{other}` is not supported; use \"HS256\", \"RS256\" or \"ES256\""),
            ));
        }
        None => {
            return Err(bad(
                "auth.jwt.algorithm",
                "is required: \"HS256\", \"RS256\" or \"ES256\"".to_owned(),
            ));
        }
    };
    let key = match (&raw.key_file, &raw.jwks_file) {
        (Some(path), None) => {
            JwtKeySource::KeyFile(super::settings::absolute("auth.jwt.key_file", path, bad)?)
        }
        (None, Some(path)) => {
            if algorithm == JwtAlgorithm::Hs256 {
                return Err(bad(
                    "auth.jwt.jwks_file",
                    "a JWKS file holds public keys (RS256/ES256); for HS256 give the secret in `key_file`".to_owned(),
                ));
            }
            JwtKeySource::Jwks(super::settings::absolute("auth.jwt.jwks_file", path, bad)?)
        }
        (Some(_), Some(_)) => {
            return Err(bad(
                "auth.jwt.jwks_file",
                "give either `key_file` or `jwks_file`, not both".to_owned(),
            ));
        }
        (None, None) => {
            return Err(bad(
                "auth.jwt.key_file",
                "is required (or `jwks_file` for RS256/ES256): the key that verifies tokens"
                    .to_owned(),
            ));
        }
    };
    let issuer = match raw.issuer.as_deref().map(str::trim) {
        Some(issuer) if !issuer.is_empty() => issuer.to_owned(),
        _ => {
            return Err(bad(
                "auth.jwt.issuer",
                "is required: the `iss` every accepted token must carry".to_owned(),
            ));
        }
    };
    let audience = raw.audience.clone().unwrap_or_default();
    if audience.is_empty() || audience.iter().any(|a| a.trim().is_empty()) {
        return Err(bad(
            "auth.jwt.audience",
            "is required: a non-empty list of accepted `aud` values, e.g. [\"hpcgate\"]".to_owned(),
        ));
    }
    let tenant_claim = match raw.tenant_claim.as_deref().map(str::trim) {
        Some(claim) if !claim.is_empty() => claim.to_owned(),
        _ => {
            return Err(bad(
                "auth.jwt.tenant_claim",
                "is required: the claim that names the tenant, e.g. \"project\" or \"groups\""
                    .to_owned(),
            ));
        }
    };
    if tenants.is_empty() {
        return Err(bad(
            "auth.jwt",
            "maps tokens to tenants, but no `[tenants]` are configured; add them or remove `[auth.jwt]`".to_owned(),
        ));
    }
    let mut tenant_map = BTreeMap::new();
    for (value, tenant) in raw.tenant_map.iter().flatten() {
        let at = format!("auth.jwt.tenant_map.{value:?}");
        let name = TenantName::parse(tenant).map_err(|e| bad(&at, e.to_string()))?;
        if !tenants.contains_key(&name) {
            return Err(bad(
                &at,
                format!(
                    "tenant `{tenant}` is not configured; add `[tenants.{tenant}]` or fix the name"
                ),
            ));
        }
        tenant_map.insert(value.clone(), name);
    }
    let leeway_s = raw.leeway_s.unwrap_or(30);
    if leeway_s > 300 {
        return Err(bad(
            "auth.jwt.leeway_s",
            "must be at most 300 seconds; fix the clocks instead".to_owned(),
        ));
    }
    Ok(JwtSettings {
        algorithm,
        key,
        issuer,
        audience,
        tenant_claim,
        tenant_map,
        leeway: Duration::from_secs(leeway_s),
    })
}

/// Checks and normalises `[http] allowed_origins` (lowercase, no trailing `/`).
pub(crate) fn resolve_origins(raw: &HttpConfig, bad: &Bad) -> Result<Vec<String>, ConfigError> {
    let mut origins = Vec::new();
    for (i, origin) in raw.allowed_origins.iter().flatten().enumerate() {
        let normal = super::web_origin::normalize_origin(origin).ok_or_else(|| {
            bad(
                &format!("http.allowed_origins[{i}]"),
                format!(
                    "`{origin}` is not an origin; write `scheme://host` or `scheme://host:port`, e.g. \"https://notebook.example.org\""
                ),
            )
        })?;
        origins.push(normal);
    }
    Ok(origins)
}

/// `[http] allowed_hosts`, each a DNS name or an IP address (no scheme, port or path), and the
/// host of `[auth.oauth] resource` (its clients reach the gateway by that name).
pub(crate) fn resolve_hosts(config: &super::Config, bad: &Bad) -> Result<Vec<String>, ConfigError> {
    let mut hosts = Vec::new();
    for (i, host) in config.http.allowed_hosts.iter().flatten().enumerate() {
        let name = host.trim().trim_start_matches('[').trim_end_matches(']');
        let is_name = !name.is_empty()
            && name.len() <= 253
            && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
        if !is_name && name.parse::<std::net::IpAddr>().is_err() {
            return Err(bad(
                &format!("http.allowed_hosts[{i}]"),
                format!(
                    "`{host}` is not a host name or an IP address; write the name alone, e.g. \"gw.example.org\" (no scheme, port or path)"
                ),
            ));
        }
        hosts.push(name.to_ascii_lowercase());
    }
    let resource = config
        .auth
        .oauth
        .as_ref()
        .and_then(|o| o.resource.as_deref());
    let authority = resource
        .and_then(|r| r.split_once("://"))
        .map(|(_, rest)| rest.split('/').next().unwrap_or(rest));
    if let Some((host, _)) = authority.and_then(super::web_origin::split_port) {
        hosts.push(host.to_ascii_lowercase());
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{Config, Environment, Origins, Settings};
    use crate::state::TenantName;

    fn resolve(text: &str) -> Result<Settings, String> {
        let config = Config::parse(text, "t.toml").map_err(|e| e.to_string())?;
        let env = Environment {
            home: Some("/home/u".into()),
            ..Environment::default()
        };
        Settings::resolve(&config, &env, &Origins::single("t.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn allowed_hosts_are_names_or_addresses_alone() {
        let hosts = |text: &str| resolve(text).map(|s| s.fixed.allowed_hosts);
        assert_eq!(
            hosts(
                "[http]\nallowed_hosts = [\"GW.example.org\", \"[2001:db8::7]\", \"192.0.2.7\"]\n"
            )
            .unwrap(),
            ["gw.example.org", "2001:db8::7", "192.0.2.7"]
        );
        for bad in [
            "https://gw.example.org",
            "gw.example.org:8000",
            "gw/mcp",
            "",
            "*",
        ] {
            let refused = hosts(&format!("[http]\nallowed_hosts = [\"{bad}\"]\n")).unwrap_err();
            assert!(
                refused.contains("http.allowed_hosts[0]"),
                "{bad}: {refused}"
            );
        }
    }

    #[test]
    fn quotas_and_rate_limits_resolve() {
        let s = resolve(
            "[tenants.chem]\nquotas = { max_workspace_bytes = 1000, max_output_bytes = 20 }\n\
             [tenants.chem.rate_limits]\n\"*\" = { per_second = 20, burst = 40 }\n\
             submit_job = { per_minute = 10 }\nfs__read = { per_hour = 5 }\n",
        )
        .unwrap();
        let chem = &s.tenants[&TenantName::parse("chem").unwrap()];
        assert_eq!(chem.quotas.max_workspace_bytes, Some(1000));
        assert_eq!(chem.quotas.max_output_bytes, Some(20));
        assert_eq!(chem.quotas.max_instances, None);
        let star = chem.rate_limits["*"];
        assert_eq!(
            (star.count, star.per, star.burst),
            (20, Duration::from_secs(1), 40)
        );
        assert_eq!(star.to_string(), "20 per second, burst 40");
        assert_eq!(chem.rate_limits["submit_job"].to_string(), "10 per minute");
        assert_eq!(chem.rate_limits["fs__read"].to_string(), "5 per hour");
    }

    #[test]
    fn quota_and_rate_limit_errors_name_the_dotted_key() {
        let cases = [
            (
                "[tenants.chem]\nquotas = { max_workspace_bytes = 0 }\n",
                "key `tenants.chem.quotas.max_workspace_bytes`: must be positive",
            ),
            (
                "[tenants.chem]\nquotas = { max_output_bytes = 0 }\n",
                "key `tenants.chem.quotas.max_output_bytes`: must be positive",
            ),
            (
                "[tenants.chem]\nquotas = { max_workspace_bytes = -1 }\n",
                "key `tenants.chem.quotas.max_workspace_bytes`",
            ),
            (
                "[tenants.chem]\nquotas = { max_disk = 1 }\n",
                "unknown key `tenants.chem.quotas.max_disk`",
            ),
            (
                "[tenants.chem.rate_limits]\nsubmit_job = { per_minute = 10, per_second = 1 }\n",
                "key `tenants.chem.rate_limits.submit_job`: give only one of",
            ),
            (
                "[tenants.chem.rate_limits]\nsubmit_job = { burst = 3 }\n",
                "key `tenants.chem.rate_limits.submit_job`: give one of",
            ),
            (
                "[tenants.chem.rate_limits]\nsubmit_job = { per_minute = 0 }\n",
                "key `tenants.chem.rate_limits.submit_job.per_minute`: must be positive",
            ),
            (
                "[tenants.chem.rate_limits]\n\"*\" = { per_second = 1, burst = 0 }\n",
                "key `tenants.chem.rate_limits.\"*\".burst`: must be positive",
            ),
            (
                "[tenants.chem.rate_limits]\n\"a b\" = { per_second = 1 }\n",
                "key `tenants.chem.rate_limits.\"a b\"`: name a tool",
            ),
            (
                "[tenants.chem.rate_limits]\nsubmit_job = { per_day = 1 }\n",
                "unknown key `tenants.chem.rate_limits.submit_job.per_day`",
            ),
            (
                "[http]\nallowed_origin = []\n",
                "unknown key `http.allowed_origin`",
            ),
        ];
        for (text, expected) in cases {
            let err = resolve(text).unwrap_err();
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(err.starts_with("`t.toml`: "), "{err}");
        }
    }
}
