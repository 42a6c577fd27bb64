//! Running one proxied tool call for the gateway's dispatch function, once policy allowed it:
//! the final arguments' `instance_id` → the tenant's live instance → the instance's server →
//! the remote result, whole, plus what the audit log records.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};

use super::{INSTANCE_ID, ProxiedTool, ProxyManager};
use crate::audit::Outcome;
use crate::state::{InstanceId, State, TenantName};
use crate::tools::{Output, ToolError};

/// Longest remote error text copied into the audit record.
const AUDIT_ERROR_CHARS: usize = 200;

/// Runs `tool` for `tenant` with the final arguments. The [`Output`] is what the audit log
/// records (bytes, and the remote error text for `isError` results); the [`CallToolResult`]
/// goes back to the client unchanged.
pub fn run(
    manager: &ProxyManager,
    state: &State,
    tenant: &TenantName,
    tool: &ProxiedTool,
    arguments: Map<String, Value>,
) -> Result<(Output, CallToolResult), ToolError> {
    // Re-validation after policy rewrites: the gateway's own argument must still be there;
    // the rest is the remote server's to validate against its schema.
    let Some(instance) = arguments.get(INSTANCE_ID).and_then(Value::as_str) else {
        return Err(ToolError(format!(
            "invalid arguments for `{}`: `instance_id` (a string) is required; create one with `create_instance`",
            tool.exposed_name
        )));
    };
    let id = InstanceId::parse(instance)?;
    let paths = state.instance_paths_ambient(tenant, &id)?;
    // The tool as this instance's server offers it now (its own `list_changed` may have
    // removed or changed it since the call was resolved, or a policy rewrite moved the call).
    let Some(current) = manager.find(tenant, Some(id.as_str()), &tool.exposed_name) else {
        return Err(ToolError(format!(
            "tool `{}` is not offered on instance `{id}`: its proxied server withdrew it; call tools/list again",
            tool.exposed_name
        )));
    };
    if tool.read_only && !current.read_only {
        return Err(ToolError(format!(
            "tool `{}` on instance `{id}` is no longer the read-only tool the policies judged; call it again",
            tool.exposed_name
        )));
    }
    let result = manager
        .call(tenant, id.as_str(), paths, &current, arguments)
        .map_err(|e| ToolError(e.to_string()))?;
    let bytes = serde_json::to_vec(&result).map_or(0, |b| b.len() as u64);
    let summary = first_text(&result);
    let error = (result.is_error == Some(true)).then(|| {
        let text: String = summary.chars().take(AUDIT_ERROR_CHARS).collect();
        format!("the remote tool reported an error: {text}")
    });
    let output = Output {
        structured: result.structured_content.clone().unwrap_or(Value::Null),
        summary,
        outcome: Outcome {
            bytes: Some(bytes),
            error,
            ..Outcome::default()
        },
    };
    Ok((output, result))
}

fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(ContentBlock::as_text)
        .map(|t| t.text.clone())
        .unwrap_or_default()
}
