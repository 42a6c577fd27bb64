//! `[code_mode]`: limits on the tool calls a job's own code makes through its job-scoped
//! socket or token (see [`crate::code_mode`]), and the URL Slurm jobs reach the gateway at,
//! raw and resolved.

use serde::Deserialize;

use super::error::ConfigError;
use super::settings::{Bad, positive};

/// `[code_mode]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeModeConfig {
    /// Requests (tool calls, listings) one job may make in its whole life (default 1000).
    pub max_calls_per_job: Option<u64>,
    /// Tool calls of one job in flight at once (default 4).
    pub max_concurrent_calls: Option<u32>,
    /// Whether a job's code may start jobs (`submit_job`, `run_python`; default false).
    pub allow_submit: Option<bool>,
    /// The gateway's streamable-HTTP MCP endpoint as compute nodes reach it
    /// (`http://login1:8000/mcp`): Slurm jobs with tools call it with a job-scoped token.
    pub url: Option<String>,
}

/// `[code_mode]`, resolved. A job's calls are held to the values in force when each is made
/// (a reload applies to running jobs too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeModeSettings {
    pub max_calls_per_job: u64,
    pub max_concurrent_calls: u32,
    pub allow_submit: bool,
}

impl Default for CodeModeSettings {
    fn default() -> Self {
        CodeModeSettings {
            max_calls_per_job: 1000,
            max_concurrent_calls: 4,
            allow_submit: false,
        }
    }
}

pub(super) fn resolve_code_mode(
    raw: &CodeModeConfig,
    bad: &Bad,
) -> Result<CodeModeSettings, ConfigError> {
    let default = CodeModeSettings::default();
    Ok(CodeModeSettings {
        max_calls_per_job: positive(
            "code_mode.max_calls_per_job",
            raw.max_calls_per_job,
            default.max_calls_per_job,
            bad,
        )?,
        max_concurrent_calls: positive(
            "code_mode.max_concurrent_calls",
            raw.max_concurrent_calls,
            default.max_concurrent_calls,
            bad,
        )?,
        allow_submit: raw.allow_submit.unwrap_or(default.allow_submit),
    })
}

/// `[code_mode] url`: `http://` or `https://`, a host, an optional port and path; no user
/// info, query, fragment or whitespace (it is written into every Slurm job's environment).
/// Only with `[tenants]`: a single-tenant gateway trusts every loopback caller, and a Slurm job
/// with tools shares its node's network, so on the gateway's own machine it could call without
/// its token.
pub(super) fn resolve_url(
    raw: &CodeModeConfig,
    single_tenant: bool,
    bad: &Bad,
) -> Result<Option<String>, ConfigError> {
    let Some(url) = &raw.url else {
        return Ok(None);
    };
    let key = "code_mode.url";
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad(key, format!("`{url}` is not an http:// or https:// URL; give the gateway's MCP endpoint as the nodes reach it, e.g. `http://login1:8000/mcp`")))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let clean = |c: char| c.is_ascii_graphic() && !"@?#\\".contains(c);
    if authority.is_empty() || !url.chars().all(clean) {
        return Err(bad(
            key,
            format!(
                "`{url}` must be `http(s)://host[:port]/path` with no user, query, fragment or spaces"
            ),
        ));
    }
    if single_tenant {
        return Err(bad(
            key,
            "needs `[tenants]`: a single-tenant gateway trusts every loopback caller, so a Slurm job sharing the gateway's machine could call it without its token; configure a tenant with a token for the agents".to_owned(),
        ));
    }
    Ok(Some(url.clone()))
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Environment, Origins, Settings};

    fn resolve(text: &str) -> Result<Settings, String> {
        let config = Config::parse(text, "t.toml").map_err(|e| e.to_string())?;
        let env = Environment {
            home: Some("/home/u".into()),
            ..Environment::default()
        };
        Settings::resolve(&config, &env, &Origins::single("t.toml")).map_err(|e| e.to_string())
    }

    const TENANT: &str = "[tenants.chem]\nunix_uids = [1000]\n";

    #[test]
    fn the_url_is_an_http_endpoint_and_needs_tenants() {
        let ok = resolve(&format!(
            "{TENANT}[code_mode]\nurl = \"http://login1:8000/mcp\"\n"
        ))
        .unwrap();
        let url = ok.fixed.code_mode_url.as_deref();
        assert_eq!(url, Some("http://login1:8000/mcp"));
        assert_eq!(resolve(TENANT).unwrap().fixed.code_mode_url, None);
        for (url, expected) in [
            ("ftp://login1/mcp", "not an http:// or https:// URL"),
            ("http:///mcp", "no user, query, fragment or spaces"),
            (
                "http://u:p@login1/mcp",
                "no user, query, fragment or spaces",
            ),
            (
                "http://login1/mcp?x=1",
                "no user, query, fragment or spaces",
            ),
            ("http://login1/m cp", "no user, query, fragment or spaces"),
        ] {
            let e = resolve(&format!("{TENANT}[code_mode]\nurl = \"{url}\"\n")).unwrap_err();
            assert!(
                e.contains("code_mode.url") && e.contains(expected),
                "{url}: {e}"
            );
        }
        let single = resolve("[code_mode]\nurl = \"http://127.0.0.1:8000/mcp\"\n").unwrap_err();
        assert!(single.contains("needs `[tenants]`"), "{single}");
    }
}
