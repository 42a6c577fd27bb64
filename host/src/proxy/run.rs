//! Running one proxied tool call for the gateway's dispatch function, once policy allowed it:
//! the call's instance → the tenant's live instance → the instance's server → the remote
//! result, whole, plus what the audit log records of it.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};

use super::{ProxiedTool, ProxyManager};
use crate::state::{InstanceId, State, TenantName};

/// Longest remote error text copied into the audit record.
const AUDIT_ERROR_CHARS: usize = 200;

/// A proxied call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The remote result whole, as JSON, for the transport to pass on unchanged.
    pub whole: Value,
    /// Its `structuredContent` (null without) and first text block.
    pub structured: Value,
    pub summary: String,
    /// Its size as compact JSON.
    pub bytes: u64,
    /// For an `isError` result: what the audit log records of the remote error.
    pub remote_error: Option<String>,
}

/// Runs `tool` for `tenant` on `instance` with the final arguments; `Err` is a message for the
/// agent.
pub fn run(
    manager: &ProxyManager,
    state: &State,
    tenant: &TenantName,
    instance: Option<&InstanceId>,
    tool: &ProxiedTool,
    arguments: Map<String, Value>,
    along: super::Along,
) -> Result<Reply, String> {
    // The gateway's own argument; the rest is the remote server's to validate against its
    // schema.
    let Some(id) = instance else {
        return Err(format!(
            "invalid arguments for `{}`: `instance_id` (a string) is required; create one with `create_instance`",
            tool.exposed_name
        ));
    };
    let paths = (state.instance_paths_ambient(tenant, id)).map_err(|e| e.to_string())?;
    // The tool as this instance's server offers it now (its own `list_changed` may have
    // removed or changed it since the call was resolved).
    let Some(current) = manager.find(tenant, Some(id.as_str()), &tool.exposed_name, None) else {
        return Err(format!(
            "tool `{}` is not offered on instance `{id}`: its proxied server withdrew it; call tools/list again",
            tool.exposed_name
        ));
    };
    if tool.read_only && !current.read_only {
        return Err(format!(
            "tool `{}` on instance `{id}` is no longer the read-only tool the policies judged; call it again",
            tool.exposed_name
        ));
    }
    let result = manager
        .call(tenant, id.as_str(), paths, &current, arguments, along)
        .map_err(|e| e.to_string())?;
    let summary = first_text(&result);
    let remote_error = (result.is_error == Some(true)).then(|| {
        let text: String = summary.chars().take(AUDIT_ERROR_CHARS).collect();
        format!("the remote tool reported an error: {text}")
    });
    let structured = result.structured_content.clone().unwrap_or(Value::Null);
    let whole = serde_json::to_value(result).unwrap_or(Value::Null);
    Ok(Reply {
        bytes: json_len(&whole),
        whole,
        structured,
        summary,
        remote_error,
    })
}

/// The length of `value` as compact JSON text, counted without building the text; a value
/// that cannot be written as JSON counts as too big.
pub(super) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => u64::MAX,
    }
}

fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(ContentBlock::as_text)
        .map(|t| t.text.clone())
        .unwrap_or_default()
}
