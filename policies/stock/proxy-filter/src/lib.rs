//! `stock:proxy-filter`: which tools of each proxied MCP server an agent may see and call.
//!
//! Only calls whose `server` has an entry under `servers` are judged; builtin tools and other
//! servers are allowed. For a configured server the call's `remote_tool` (the tool's name on the
//! remote server) must match an `include` glob when `include` is non-empty (include first, then exclude),
//! and must match no `exclude` glob. The same rule runs in the list phase, so filtered tools are
//! also hidden from `tools/list`.
//!
//! Decision the contract leaves open: a call to a configured server without a `remote_tool` is
//! denied (fail closed), since the filter cannot tell which remote tool would run.
//!
//! ```toml
//! [policies.config.servers.fs]
//! include = ["read_*", "list_*"]
//! exclude = ["*_dangerous"]
//! ```

use std::collections::BTreeMap;

use hpcgate_policy_sdk::glob::GlobSet;
use hpcgate_policy_sdk::{Call, Decision, Policy, args};
use serde::Deserialize;

/// The `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFilter {
    /// Filters by proxied server name.
    #[serde(default)]
    servers: BTreeMap<String, ServerFilter>,
}

/// One server's filter.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFilter {
    /// Globs over remote tool names; when non-empty, a tool must match one.
    #[serde(default)]
    include: GlobSet,
    /// Globs over remote tool names; a tool matching one is denied.
    #[serde(default)]
    exclude: GlobSet,
}

impl Policy for ProxyFilter {
    fn configure(settings: &str) -> Result<Self, String> {
        args::parse_settings(settings)
    }

    fn needs_arguments(&self, _call: &Call) -> bool {
        false
    }

    fn evaluate(&self, call: &Call) -> Decision {
        let server = &call.server;
        let Some(filter) = self.servers.get(server) else {
            return Decision::allow();
        };
        let Some(remote) = call.remote_tool.as_deref() else {
            return Decision::deny(format!(
                "tool `{}` of proxied server `{server}` carries no remote tool name, so the \
                 server's filter cannot be applied",
                call.tool
            ));
        };
        if !filter.include.is_empty() && !filter.include.is_match(remote) {
            return Decision::deny(format!(
                "tool `{remote}` of proxied server `{server}` is not allowed: it matches none \
                 of the include globs {}",
                filter.include.describe()
            ));
        }
        if let Some(glob) = filter.exclude.first_match(remote) {
            return Decision::deny(format!(
                "tool `{remote}` of proxied server `{server}` is not allowed: it matches the \
                 exclude glob `{glob}`"
            ));
        }
        Decision::allow()
    }
}

hpcgate_policy_sdk::export_policy!(ProxyFilter);

#[cfg(test)]
mod tests {
    use hpcgate_policy_sdk::Phase;
    use serde_json::json;

    use super::*;

    fn policy() -> ProxyFilter {
        let settings = json!({"servers": {
            "fs": {"include": ["read_*", "list_*"], "exclude": ["*_dangerous"]},
            "web": {"exclude": ["post_*"]}
        }});
        ProxyFilter::configure(&settings.to_string()).expect("valid settings")
    }

    fn proxied(server: &str, remote: Option<&str>) -> Call {
        let mut call = Call::new(&format!("{server}__{}", remote.unwrap_or("x")), json!({}));
        call.server = server.to_owned();
        call.remote_tool = remote.map(str::to_owned);
        call
    }

    fn reason(decision: Decision) -> String {
        match decision {
            Decision::Deny { reason } => reason,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn table() {
        // (server, remote tool, allowed)
        let cases = [
            ("fs", Some("read_text_file"), true),
            ("fs", Some("list_directory"), true),
            ("fs", Some("write_file"), false),
            ("fs", Some("read_dangerous"), false),
            ("fs", Some("Read_text_file"), false),
            ("fs", None, false),
            ("web", Some("get_page"), true),
            ("web", Some("post_form"), false),
            ("git", Some("push"), true),
            ("git", None, true),
            ("builtin", None, true),
        ];
        for (server, remote, allowed) in cases {
            let decision = policy().evaluate(&proxied(server, remote));
            assert_eq!(
                decision.is_allow(),
                allowed,
                "{server} {remote:?}: {decision:?}"
            );
        }
    }

    #[test]
    fn reasons_name_server_tool_and_glob() {
        let why = reason(policy().evaluate(&proxied("fs", Some("write_file"))));
        assert!(
            why.contains("`write_file`") && why.contains("`fs`"),
            "{why}"
        );
        assert!(why.contains("`read_*`, `list_*`"), "{why}");
        let why = reason(policy().evaluate(&proxied("fs", Some("read_dangerous"))));
        assert!(why.contains("exclude glob `*_dangerous`"), "{why}");
        let why = reason(policy().evaluate(&proxied("fs", None)));
        assert!(why.contains("no remote tool"), "{why}");
    }

    #[test]
    fn list_phase_is_filtered_too() {
        let mut call = proxied("fs", Some("write_file"));
        call.phase = Phase::List;
        assert!(policy().evaluate(&call).is_deny());
    }

    #[test]
    fn bad_settings_are_explained() {
        assert!(
            ProxyFilter::configure("")
                .unwrap()
                .evaluate(&proxied("fs", None))
                .is_allow()
        );
        let err = ProxyFilter::configure(r#"{"servers": {"fs": {"includes": []}}}"#).unwrap_err();
        assert!(
            err.contains("unknown field `includes`") && err.contains("`include`"),
            "{err}"
        );
        let err = ProxyFilter::configure(r#"{"server": {}}"#).unwrap_err();
        assert!(
            err.contains("unknown field `server`") && err.contains("`servers`"),
            "{err}"
        );
    }
}
