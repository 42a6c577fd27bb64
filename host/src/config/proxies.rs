//! `[proxied_mcps.<name>]` resolved into [`ProxySettings`]: argv, environment, timeouts,
//! network and read-only binds, every value checked (errors name the dotted key).
//!
//! The command is admin configuration, yet it is still only ever an argv: it must be
//! non-empty and free of NUL bytes, and nothing is run through a shell.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hpcgate_executors::sandbox::{Bind, Network};

use super::error::ConfigError;
use super::executors::{SandboxSettings, bind_target};
use super::raw::ProxyConfig;
use super::settings::Bad;

/// One proxied MCP server, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxySettings {
    /// The `<name>` of `[proxied_mcps.<name>]`: the prefix of its tools and the policy `server`.
    pub name: String,
    /// Program and arguments, run inside the sandbox.
    pub argv: Vec<String>,
    /// Set in the sandbox on top of `[sandbox] env_allow`. Values appear in bwrap's argv on
    /// the host, like every sandbox variable: no secrets.
    pub env: Vec<(String, String)>,
    /// Stop an instance's server after this long without calls; `None` = never.
    pub idle_timeout: Option<Duration>,
    /// Longest wait for one call; on expiry the remote request is cancelled.
    pub call_timeout: Duration,
    /// Longest wait for the server to start and answer `initialize` and `tools/list`.
    pub start_timeout: Duration,
    pub network: Network,
    /// Read-only binds at the same path.
    pub binds: Vec<Bind>,
    /// Largest result (JSON bytes) passed back; a larger one becomes an error result.
    pub max_result_bytes: u64,
}

/// Default per-call timeout: long enough for a slow tool, short enough that a hung server
/// does not hold an agent forever.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn resolve_proxies(
    raw: &BTreeMap<String, ProxyConfig>,
    sandbox: &SandboxSettings,
    bad: &Bad,
) -> Result<BTreeMap<String, ProxySettings>, ConfigError> {
    let mut proxies = BTreeMap::new();
    for (name, p) in raw {
        let at = |field: &str| format!("proxied_mcps.{name}{field}");
        if !is_proxy_name(name) {
            return Err(bad(
                &at(""),
                "use 1–32 lowercase letters, digits or `-`, or single `_` (tools are exposed as \
                 `<name>__<tool>`, so the name cannot contain `__`)"
                    .to_owned(),
            ));
        }
        let Some(command) = p.command.clone().filter(|c| !c.trim().is_empty()) else {
            return Err(bad(
                &at(".command"),
                "give the server's program, e.g. \"/usr/bin/node\" or \"npx\"".to_owned(),
            ));
        };
        let argv: Vec<String> = std::iter::once(command).chain(p.args.clone()).collect();
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(bad(
                &at(".args"),
                "the command and its arguments must not contain NUL bytes".to_owned(),
            ));
        }
        let mut env = Vec::new();
        for (key, value) in &p.env {
            if !super::executors::is_env_name(key) || value.contains('\0') {
                return Err(bad(
                    &at(&format!(".env.{key}")),
                    "use a variable name of letters, digits and `_` and a value without NUL"
                        .to_owned(),
                ));
            }
            env.push((key.clone(), value.clone()));
        }
        let idle_timeout = match p.idle_timeout {
            None => None,
            Some(0.0) => None,
            Some(s) => Some(seconds(&at(".idle_timeout"), s, bad)?),
        };
        let call_timeout = match p.call_timeout {
            None => DEFAULT_CALL_TIMEOUT,
            Some(s) => seconds(&at(".call_timeout"), s, bad)?,
        };
        let start_timeout = match p.start_timeout {
            None => DEFAULT_START_TIMEOUT,
            Some(s) => seconds(&at(".start_timeout"), s, bad)?,
        };
        let network = match p.network.as_deref() {
            None => sandbox.network,
            Some("none") => Network::None,
            Some("host") => Network::Host,
            Some(other) => {
                return Err(bad(
                    &at(".network"),
                    format!("`{other}` is not a network mode: use \"none\" or \"host\""),
                ));
            }
        };
        let mut binds = Vec::new();
        for (i, path) in p.binds.iter().enumerate() {
            let path = bind_target(&at(&format!(".binds[{i}]")), PathBuf::from(path), bad)?;
            binds.push(Bind {
                source: path.clone(),
                target: path,
            });
        }
        let max_result_bytes = match p.max_result_bytes {
            Some(0) => return Err(bad(&at(".max_result_bytes"), "must be positive".to_owned())),
            Some(n) => n,
            None => sandbox.limits.output_bytes,
        };
        proxies.insert(
            name.clone(),
            ProxySettings {
                name: name.clone(),
                argv,
                env,
                idle_timeout,
                call_timeout,
                start_timeout,
                network,
                binds,
                max_result_bytes,
            },
        );
    }
    Ok(proxies)
}

fn seconds(key: &str, value: f64, bad: &Bad) -> Result<Duration, ConfigError> {
    if value.is_finite() && value > 0.0 && value < 1e9 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(bad(key, "must be a positive number of seconds".to_owned()))
    }
}

/// Proxy names: they prefix tool names (`<name>__<tool>`) and appear in policies.
pub fn is_proxy_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
