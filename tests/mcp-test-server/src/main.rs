//! `mcp-test-server`: a small MCP server over stdio for hpcgate's proxy tests and benchmark.
//!
//! Every tool exists to exercise one thing the proxy must get right:
//!
//! | tool | what it checks |
//! |---|---|
//! | `echo` | the plain path; `readOnlyHint` passes through |
//! | `add` | integer arguments, `structuredContent` and an output schema |
//! | `failing` | a remote `isError` result passes through as is |
//! | `slow` | sleeps `ms` milliseconds: call timeouts and cancellation |
//! | `huge` | `bytes` of text: the result size cap |
//! | `flood` | writes a reply of `bytes` bytes straight to stdout, 64 KiB at a time, without holding it: the cap while reading |
//! | `image` | every content type: text, image, audio, resource link, embedded resource |
//! | `nested` | a schema with `$defs`, `$ref`, `format` and `additionalProperties: false` |
//! | `own_instance_id` | a schema with its own `instance_id` property |
//! | `enable_extra` | adds tool `extra` and sends `notifications/tools/list_changed` |
//! | `list_storm` | sends `count` `list_changed` notifications, `every_ms` milliseconds apart (default 0), and unless `endless` is false, from then on every `tools/list` page names a next one: a storm of listings, each without end |
//! | `fat_listing` | from then on every `tools/list` is `pages` pages, each with one more tool `fat_page_<n>` whose description is `bytes` bytes, and sends `list_changed`: the cap on a listing's total |
//! | `ping_flood` | sends `count` `ping` requests, waits `ms` milliseconds (for the gateway's replies to fill the pipe to its stdin), answers, and never reads its stdin again (its only thread blocks): a hung or hostile server |
//! | `crash` | exits the process with code 3 in the middle of the call |
//! | `read_text` | reads a file (paths as the sandbox sees them): mounts and path rules |
//! | `whoami` | this process's nonce, cancelled-request and `tools/list` counts, `TEST_MARK`, its whole environment (names and values) and the request as received (`_meta` included): isolation, and that no credential reaches a server |
//!
//! Every tool's result echoes nothing of the host: it runs inside hpcgate's sandbox.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

/// A 1×1 transparent PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

#[derive(Clone)]
struct TestServer {
    extra: Arc<AtomicBool>,
    nonce: u64,
    cancelled: Arc<AtomicU64>,
    /// `tools/list` requests answered.
    lists: Arc<AtomicU64>,
    /// Set by `list_storm`: every page of `tools/list` names a next one.
    endless: Arc<AtomicBool>,
    /// Set by `fat_listing`: (`bytes` of each fat tool's description, `pages`).
    fat: Arc<std::sync::Mutex<Option<(usize, u64)>>>,
}

/// Page `page` of a fat listing: the tools of `tools` on the first page, and on each one more
/// tool whose description is `bytes` bytes.
fn fat_page(all: Vec<Tool>, page: u64, (bytes, pages): (usize, u64)) -> ListToolsResult {
    let fat = json!({"name": format!("fat_page_{page}"), "description": "x".repeat(bytes),
                     "inputSchema": {"type": "object", "properties": {}}});
    let mut tools = if page == 0 { all } else { Vec::new() };
    tools.push(serde_json::from_value(fat).expect("a valid tool"));
    let mut result = ListToolsResult::with_all_items(tools);
    result.next_cursor = (page + 1 < pages).then(|| (page + 1).to_string());
    result
}

fn tools(extra: bool) -> Vec<Tool> {
    let mut list = vec![
        json!({"name": "echo", "description": "Echo `message` back.",
               "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
               "annotations": {"readOnlyHint": true, "title": "Echo"}}),
        json!({"name": "add", "description": "Add two integers.",
               "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
               "outputSchema": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
               "annotations": {"readOnlyHint": true, "idempotentHint": true}}),
        json!({"name": "failing", "description": "Always fails (isError).",
               "inputSchema": {"type": "object", "properties": {}}}),
        json!({"name": "slow", "description": "Sleep `ms` milliseconds.",
               "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}}),
        json!({"name": "huge", "description": "Return `bytes` bytes of text.",
               "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer", "minimum": 0}}, "required": ["bytes"]}}),
        json!({"name": "flood", "description": "Stream a reply of `bytes` bytes without holding it.",
               "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer", "minimum": 0}}, "required": ["bytes"]}}),
        json!({"name": "image", "description": "Return one block of every content type.",
               "inputSchema": {"type": "object", "properties": {}}}),
        json!({"name": "nested", "description": "Echo a nested, referenced argument.",
               "inputSchema": {
                   "type": "object",
                   "$defs": {
                       "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                 "required": ["x", "y"], "additionalProperties": false},
                       "shape": {"type": "object", "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/point"}},
                                                                 "label": {"type": "string"}}}
                   },
                   "properties": {"shape": {"$ref": "#/$defs/shape"}, "when": {"type": "string", "format": "date-time"}},
                   "required": ["shape"],
                   "additionalProperties": false
               },
               "annotations": {"destructiveHint": false, "openWorldHint": false}}),
        json!({"name": "own_instance_id", "description": "A tool with its own `instance_id` property.",
               "inputSchema": {"type": "object", "properties": {"instance_id": {"type": "integer"}, "note": {"type": "string"}},
                               "required": ["instance_id"]}}),
        json!({"name": "enable_extra", "description": "Add the tool `extra` and notify tools/list_changed.",
               "inputSchema": {"type": "object", "properties": {}}}),
        json!({"name": "list_storm", "description": "Send `count` list_changed, `every_ms` apart; unless `endless` is false, list without end from then on.",
               "inputSchema": {"type": "object", "properties": {"count": {"type": "integer", "minimum": 0}, "every_ms": {"type": "integer", "minimum": 0},
                                                              "endless": {"type": "boolean"}}, "required": ["count"]}}),
        json!({"name": "fat_listing", "description": "List `pages` pages from then on, each with a tool described in `bytes` bytes.",
               "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer", "minimum": 0}, "pages": {"type": "integer", "minimum": 1}},
                               "required": ["bytes", "pages"]}}),
        json!({"name": "ping_flood", "description": "Send `count` pings, wait `ms` milliseconds, answer, and never read stdin again.",
               "inputSchema": {"type": "object", "properties": {"count": {"type": "integer", "minimum": 0}, "ms": {"type": "integer", "minimum": 0}},
                               "required": ["count", "ms"]}}),
        json!({"name": "crash", "description": "Exit the process (code 3).",
               "inputSchema": {"type": "object", "properties": {}}}),
        json!({"name": "read_text", "description": "Read a text file (sandbox paths).",
               "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "whoami", "description": "This server process's nonce and environment marker.",
               "inputSchema": {"type": "object", "properties": {}},
               "annotations": {"readOnlyHint": true}}),
    ];
    if extra {
        list.push(
            json!({"name": "extra", "description": "Added by enable_extra.",
                         "inputSchema": {"type": "object", "properties": {}}}),
        );
    }
    list.into_iter()
        .map(|t| serde_json::from_value(t).expect("a valid tool"))
        .collect()
}

fn result(value: Value) -> Result<CallToolResponse, McpError> {
    serde_json::from_value::<CallToolResult>(value)
        .map(CallToolResponse::from)
        .map_err(|e| McpError::internal_error(e.to_string(), None))
}

fn text(s: impl Into<String>) -> Result<CallToolResponse, McpError> {
    result(json!({"content": [{"type": "text", "text": s.into()}]}))
}

fn int(args: &Map<String, Value>, key: &str) -> Result<i64, McpError> {
    args.get(key)
        .and_then(Value::as_i64)
        .ok_or_else(|| McpError::invalid_params(format!("`{key}` must be an integer"), None))
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("mcp-test-server", "0.1.0"))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        let fat = *self.fat.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fat) = fat {
            let cursor = request.and_then(|r| r.cursor);
            let page = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
            return Ok(fat_page(
                tools(self.extra.load(Ordering::SeqCst)),
                page,
                fat,
            ));
        }
        let mut page = ListToolsResult::with_all_items(tools(self.extra.load(Ordering::SeqCst)));
        if self.endless.load(Ordering::SeqCst) {
            page.next_cursor = Some("more".to_owned());
        }
        Ok(page)
    }

    async fn on_cancelled(
        &self,
        _notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Everything the gateway sent, for `whoami` (a test looks for credentials in it).
        let received = serde_json::to_value(&request).unwrap_or(Value::Null);
        let args = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "echo" => {
                let message = args.get("message").and_then(Value::as_str).unwrap_or("");
                // The trace context the caller passed, said back (the gateway's traces test).
                let traceparent = (request.meta.as_ref())
                    .and_then(|m| m.0.0.get("traceparent"))
                    .or_else(|| context.meta.0.0.get("traceparent"))
                    .cloned();
                match traceparent {
                    None => text(message),
                    Some(seen) => result(json!({
                        "content": [{"type": "text", "text": message}],
                        "_meta": {"seen_traceparent": seen},
                    })),
                }
            }
            "add" => {
                let sum = int(&args, "a")? + int(&args, "b")?;
                result(
                    json!({"content": [{"type": "text", "text": sum.to_string()}],
                              "structuredContent": {"sum": sum}}),
                )
            }
            "failing" => result(
                json!({"content": [{"type": "text", "text": "this tool always fails"}],
                                       "isError": true}),
            ),
            "slow" => {
                let ms = int(&args, "ms")?.max(0) as u64;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text(format!("slept {ms} ms"))
            }
            "huge" => {
                let bytes = int(&args, "bytes")?.max(0) as usize;
                text("x".repeat(bytes))
            }
            "flood" => {
                let bytes = int(&args, "bytes")?.max(0) as u64;
                match flood(&context.id, bytes) {
                    Ok(()) => text("flooded"),
                    Err(e) => Err(McpError::internal_error(e.to_string(), None)),
                }
            }
            "image" => result(json!({
                "content": [
                    {"type": "text", "text": "one of each"},
                    {"type": "image", "data": PNG, "mimeType": "image/png", "annotations": {"audience": ["user"]}},
                    {"type": "audio", "data": "UklGRiQAAABXQVZF", "mimeType": "audio/wav"},
                    {"type": "resource_link", "uri": "file:///workspace/a.txt", "name": "a.txt", "mimeType": "text/plain"},
                    {"type": "resource", "resource": {"uri": "file:///workspace/b.txt", "mimeType": "text/plain", "text": "embedded"}},
                    {"type": "resource", "resource": {"uri": "file:///workspace/c.bin", "blob": "AAEC"}}
                ],
                "structuredContent": {"kinds": 6, "nested": {"ok": true}}
            })),
            "nested" | "own_instance_id" => result(json!({
                "content": [{"type": "text", "text": Value::Object(args.clone()).to_string()}],
                "structuredContent": {"received": args}
            })),
            "enable_extra" => {
                self.extra.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("extra enabled")
            }
            "list_storm" => {
                let endless = args.get("endless").and_then(Value::as_bool).unwrap_or(true);
                self.endless.store(endless, Ordering::SeqCst);
                let every = match args.get("every_ms") {
                    Some(_) => Duration::from_millis(int(&args, "every_ms")?.max(0) as u64),
                    None => Duration::ZERO,
                };
                for _ in 0..int(&args, "count")? {
                    let _ = context.peer.notify_tool_list_changed().await;
                    if !every.is_zero() {
                        tokio::time::sleep(every).await;
                    }
                }
                text("storm sent")
            }
            "fat_listing" => {
                let bytes = int(&args, "bytes")?.max(0) as usize;
                let pages = int(&args, "pages")?.max(1) as u64;
                *self.fat.lock().unwrap_or_else(|e| e.into_inner()) = Some((bytes, pages));
                let _ = context.peer.notify_tool_list_changed().await;
                text("fat listing on")
            }
            "ping_flood" => {
                let (count, ms) = (int(&args, "count")?.max(0), int(&args, "ms")?.max(0));
                let e = ping_flood(&context.id, count as u64, Duration::from_millis(ms as u64));
                Err(McpError::internal_error(e.to_string(), None))
            }
            "crash" => std::process::exit(3),
            "read_text" => {
                let path = args.get("path").and_then(Value::as_str).unwrap_or("");
                match std::fs::read_to_string(path) {
                    Ok(s) => text(s),
                    Err(e) => result(
                        json!({"content": [{"type": "text", "text": format!("cannot read {path}: {e}")}],
                                            "isError": true}),
                    ),
                }
            }
            "whoami" => result(json!({
                "content": [{"type": "text", "text": self.nonce.to_string()}],
                "structuredContent": {
                    "nonce": self.nonce,
                    "cancelled": self.cancelled.load(Ordering::SeqCst),
                    "lists": self.lists.load(Ordering::SeqCst),
                    "mark": std::env::var("TEST_MARK").ok(),
                    "home": std::env::var("HOME").ok(),
                    "cwd": std::env::current_dir().ok().map(|p| p.display().to_string()),
                    "env_names": env_names(),
                    "environ": std::env::vars_os()
                        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                        .collect::<Vec<_>>(),
                    "request": received,
                    "request_meta": context.meta,
                }
            })),
            "extra" if self.extra.load(Ordering::SeqCst) => text("extra works"),
            other => Err(McpError::invalid_params(
                format!("unknown tool `{other}`"),
                None,
            )),
        }
    }
}

/// Writes the reply to request `id`, a text of `bytes` bytes, to stdout as it goes (rmcp
/// writes nothing else meanwhile: this is the only request in flight). Blocks the server, as a
/// hostile one would.
fn flood(id: &rmcp::model::RequestId, bytes: u64) -> std::io::Result<()> {
    use std::io::Write;
    let id = serde_json::to_string(id).map_err(std::io::Error::other)?;
    let mut out = std::io::stdout().lock();
    write!(
        out,
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
    )?;
    let chunk = [b'x'; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    out.write_all(b"\"}]}}\n")?;
    out.flush()
}

/// Sends `count` `ping` requests, gives the gateway `wait` to answer them, answers request `id`
/// itself, and blocks the server's only thread for good, so it never reads its stdin again: the
/// replies to the pings fill the pipe, and a write of the gateway's to the server waits with
/// it. Returns only if a write fails.
fn ping_flood(id: &rmcp::model::RequestId, count: u64, wait: Duration) -> std::io::Error {
    use std::io::Write;
    let written = (|| {
        let id = serde_json::to_string(id).map_err(std::io::Error::other)?;
        let mut out = std::io::stdout().lock();
        for n in 0..count {
            writeln!(
                out,
                r#"{{"jsonrpc":"2.0","id":"flood-{n}","method":"ping"}}"#
            )?;
        }
        out.flush()?;
        std::thread::sleep(wait);
        writeln!(
            out,
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"flooding"}}]}}}}"#
        )?;
        out.flush()
    })();
    match written {
        Err(e) => e,
        Ok(()) => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

/// The names of this process's environment variables, sorted.
fn env_names() -> Vec<String> {
    let mut names: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    names.sort();
    names
}

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(_) => return std::process::ExitCode::FAILURE,
    };
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let server = TestServer {
        extra: Arc::new(AtomicBool::new(false)),
        nonce,
        cancelled: Arc::new(AtomicU64::new(0)),
        lists: Arc::new(AtomicU64::new(0)),
        endless: Arc::new(AtomicBool::new(false)),
        fat: Arc::default(),
    };
    let served = runtime.block_on(async {
        let running = server.serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    });
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
