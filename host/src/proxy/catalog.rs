//! What each proxied server offers: its discovered tools as hpcgate exposes them
//! (`<proxy>__<tool>`), or why discovery failed (for `doctor` and the log).
//!
//! One list per proxy: discovery fills it at start, and it is the baseline every tenant sees.
//! A running server's `notifications/tools/list_changed` never changes it: what that server
//! announces applies to its own (tenant, instance) only (see [`super::overlay`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use rmcp::model::Tool;

use super::changes::{Change, Changes, Subscription};
use super::schema;
use crate::state::TenantName;

/// A remote tool as exposed by hpcgate.
#[derive(Debug, Clone)]
pub struct ProxiedTool {
    /// The proxy's name: the policy input's `server`.
    pub server: String,
    /// The tool's name on the remote server: the policy input's `remote_tool`.
    pub remote_name: String,
    /// `<server>__<remote_name>`: the policy input's `tool`.
    pub exposed_name: String,
    /// The MCP tool as listed: the remote tool with the exposed name and the wrapped schema;
    /// title, description, annotations, output schema, icons and `_meta` as the server gave them.
    pub tool: Tool,
    /// The exposed name of the remote `instance_id` property, if it had one.
    pub renamed_instance_id: Option<String>,
    /// The remote `readOnlyHint`. It is the server's own claim about itself: policies that
    /// relax rules for read-only tools trust whoever configured the proxy.
    pub read_only: bool,
}

impl ProxiedTool {
    /// Wraps `remote` for exposure; `None` for a name hpcgate would not expose (empty, or with
    /// characters other than letters, digits, `_`, `-` and `.`).
    pub fn expose(server: &str, remote: &Tool) -> Option<ProxiedTool> {
        let name = remote.name.as_ref();
        let valid = (1..=128).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !valid {
            return None;
        }
        let exposed_name = format!("{server}__{name}");
        let (input_schema, renamed_instance_id) = schema::wrap(&remote.input_schema);
        let mut tool = remote.clone();
        tool.name = exposed_name.clone().into();
        tool.input_schema = Arc::new(input_schema);
        let read_only = remote
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Some(ProxiedTool {
            server: server.to_owned(),
            remote_name: name.to_owned(),
            exposed_name,
            tool,
            renamed_instance_id,
            read_only,
        })
    }
}

/// Where one proxy's discovery stands.
#[derive(Debug, Clone)]
pub enum Discovery {
    /// Still starting the throwaway server.
    Pending,
    /// The exposed tools, in the server's order.
    Ready(Vec<Arc<ProxiedTool>>),
    /// Why no tools are known; calls to this proxy's tools are unknown tools until a refresh.
    Failed(String),
}

/// Every proxy's discovery state, and the changes of the proxied tools (baseline and
/// per-tenant) for MCP sessions to send `notifications/tools/list_changed`.
#[derive(Debug, Default)]
pub struct Catalog {
    map: RwLock<BTreeMap<String, Discovery>>,
    changes: Changes,
}

impl Catalog {
    pub fn set(&self, proxy: &str, discovery: Discovery) {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(proxy.to_owned(), discovery);
        self.notify(&Change::Everyone);
    }

    /// Tells the sessions `change` concerns (none may be listening: that is fine).
    pub fn notify(&self, change: &Change) {
        self.changes.notify(change);
    }

    /// What a session of `tenant` waits on to hear that the tools it may list changed.
    pub fn subscribe(&self, tenant: Option<&TenantName>) -> Subscription {
        self.changes.subscribe(tenant)
    }

    /// Sets a proxy's baseline to `remote` (as listed by its discovery server).
    pub fn set_tools(&self, proxy: &str, remote: &[Tool]) -> usize {
        let tools: Vec<_> = expose_all(proxy, remote)
            .into_iter()
            .map(Arc::new)
            .collect();
        let n = tools.len();
        self.set(proxy, Discovery::Ready(tools));
        n
    }

    /// Every exposed tool, proxies in name order.
    pub fn tools(&self) -> Vec<Arc<ProxiedTool>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values()
            .filter_map(|d| match d {
                Discovery::Ready(tools) => Some(tools.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The tool exposed as `exposed`.
    pub fn find(&self, exposed: &str) -> Option<Arc<ProxiedTool>> {
        let (proxy, _) = exposed.split_once("__")?;
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        match map.get(proxy)? {
            Discovery::Ready(tools) => tools.iter().find(|t| t.exposed_name == exposed).cloned(),
            _ => None,
        }
    }

    /// True while `proxy`'s discovery has not finished.
    pub fn is_pending(&self, proxy: &str) -> bool {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        matches!(map.get(proxy), Some(Discovery::Pending))
    }

    /// Whether some proxy's discovery has not ended yet.
    pub fn any_pending(&self) -> bool {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().any(|d| matches!(d, Discovery::Pending))
    }

    /// Waits, polling every 10 ms (discovery ends once per proxy per start), until `proxy`'s
    /// discovery (any proxy's, for `None`) is not pending, `until` passes, or `cancel` is
    /// cancelled; whether it was cancelled.
    pub fn wait(
        &self,
        proxy: Option<&str>,
        until: std::time::Instant,
        cancel: Option<&tokio_util::sync::CancellationToken>,
    ) -> bool {
        let pending = || proxy.map_or_else(|| self.any_pending(), |p| self.is_pending(p));
        while pending() && std::time::Instant::now() < until {
            if cancel.is_some_and(|c| c.is_cancelled()) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// Each proxy's state, for `doctor` and tests.
    pub fn snapshot(&self) -> BTreeMap<String, Discovery> {
        self.map.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// `remote` as exposed for `proxy`, skipping (and logging) names hpcgate would not expose, and
/// every tool whose name the server lists more than once: which of them a call would run, and
/// so what a policy judged, could not be told (MCP wants names unique).
pub fn expose_all(proxy: &str, remote: &[Tool]) -> Vec<ProxiedTool> {
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for tool in remote {
        *times.entry(&tool.name).or_default() += 1;
    }
    for (name, _) in times.iter().filter(|(_, n)| **n > 1) {
        super::log(&format!(
            "proxied server `{proxy}`: tool `{}` not exposed: the server lists that name more than once",
            name.escape_debug()
        ));
    }
    remote
        .iter()
        .filter(|t| times.get(t.name.as_ref()) == Some(&1))
        .filter_map(|t| {
            let exposed = ProxiedTool::expose(proxy, t);
            if exposed.is_none() {
                tracing_skip(proxy, &t.name);
            }
            exposed
        })
        .collect()
}

fn tracing_skip(proxy: &str, name: &str) {
    super::log(&format!(
        "proxied server `{proxy}`: tool `{}` not exposed: its name is not 1–128 letters, digits, `_`, `-` or `.`",
        name.escape_debug()
    ));
}

#[cfg(test)]
mod tests {
    use rmcp::model::Tool;
    use std::sync::Arc;

    #[test]
    fn a_name_the_server_lists_twice_is_not_exposed() {
        let tool = |name: &'static str, description: &'static str| {
            Tool::new(name, description, Arc::new(serde_json::Map::new()))
        };
        let remote = [tool("dup", "one"), tool("ok", "fine"), tool("dup", "other")];
        let exposed: Vec<_> = (super::expose_all("evil", &remote).into_iter())
            .map(|t| t.exposed_name)
            .collect();
        assert_eq!(exposed, ["evil__ok"]);
    }
}
