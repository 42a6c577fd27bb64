//! The MCP face of the gateway: an rmcp `ServerHandler` written by hand (the tools are known
//! only at run time, after policy), serving [`Gateway::tools`] and [`Gateway::call`].
//!
//! Async at the edge, sync in the core: every gateway call crosses [`blocking`], the one bridge,
//! bounded by a semaphore so a flood of calls cannot starve the runtime of blocking threads.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::Semaphore;

use crate::gateway::{Caller, Gateway};
use crate::tools::ToolSpec;

const INSTRUCTIONS: &str = "hpcgate runs your work on an HPC cluster under the site's policies. \
Start with `create_instance` (a private /workspace and /output), then use the file tools on that \
instance. Every call is checked by policy and recorded; a refusal says why and what to do.";

/// Blocking calls in flight at most.
const MAX_BLOCKING: usize = 64;

/// The gateway as an MCP server, for one session's caller or for callers identified per request.
#[derive(Clone)]
pub struct McpServer {
    gateway: Arc<Gateway>,
    /// `None`: every request carries its caller (HTTP, see [`crate::http::request_caller`]).
    caller: Option<Caller>,
    bridge: Arc<Semaphore>,
}

impl McpServer {
    /// One session, one caller (stdio).
    pub fn new(gateway: Arc<Gateway>, caller: Caller) -> McpServer {
        McpServer {
            caller: Some(caller),
            ..McpServer::per_request(gateway)
        }
    }

    /// Callers identified by the transport on each request (HTTP); clones share the bridge.
    pub fn per_request(gateway: Arc<Gateway>) -> McpServer {
        McpServer {
            gateway,
            caller: None,
            bridge: Arc::new(Semaphore::new(MAX_BLOCKING)),
        }
    }

    /// Who sent this request: the session's caller, else the one the transport attached.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        self.caller
            .clone()
            .or_else(|| crate::http::request_caller(&context.extensions))
            .ok_or_else(|| {
                McpError::internal_error("the transport did not identify the caller", None)
            })
    }

    /// The bridge from async to the synchronous core: a permit, then `spawn_blocking`.
    async fn blocking<T, F>(&self, caller: Caller, work: F) -> Result<T, McpError>
    where
        T: Send + 'static,
        F: FnOnce(&Gateway, &Caller) -> T + Send + 'static,
    {
        let permit = self.bridge.clone().acquire_owned().await;
        let gateway = self.gateway.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work(&gateway, &caller)
        })
        .await;
        joined.map_err(|e| McpError::internal_error(format!("the gateway call failed: {e}"), None))
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("hpcgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let specs = self
            .blocking(self.caller(&context)?, |gateway, caller| {
                gateway.tools(caller)
            })
            .await?;
        Ok(ListToolsResult::with_all_items(
            specs.into_iter().map(mcp_tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = self.caller(&context)?;
        let name = request.name.to_string();
        let arguments = request.arguments.unwrap_or_default();
        let result = self
            .blocking(caller, move |gateway, caller| {
                gateway.call(caller, &name, arguments)
            })
            .await?;
        let content = vec![ContentBlock::text(result.text)];
        let mut response = if result.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        response.structured_content = Some(result.structured);
        Ok(response.into())
    }
}

fn mcp_tool(spec: ToolSpec) -> Tool {
    let schema = match spec.input_schema {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema)).annotate(
        ToolAnnotations::new()
            .read_only(spec.read_only)
            .destructive(spec.destructive)
            .idempotent(spec.idempotent),
    )
}
