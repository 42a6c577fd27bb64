//! One running proxied server and the rmcp client that talks to it over its stdio.
//!
//! The server runs in a sandbox ([`hpcgate_executors::sandbox::Service`]); the client is an
//! rmcp service over the sandbox's stdin and stdout. Its stderr is drained (only the last few
//! KiB are kept, for the log). A closed transport means the server is gone: the call in
//! flight gets [`ProxyError::Crashed`], and the manager starts a new server on the next call.
//! So does a server that stopped reading its stdin ([`StallGuard`]). Nothing a server does
//! can hold up its stop: the sandbox is killed before the client is closed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hpcgate_executors::sandbox::{ExitInfo, SandboxSpec, Service};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    Implementation, PaginatedRequestParams, Tool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::AsyncReadExt;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::capped::{CappedLines, MESSAGE_MARGIN};
use super::error::ProxyError;
use super::lifecycle::{Lifecycle, Stop};
use super::overlay::Announcer;
use super::run::json_len;
use super::spawner::Spawner;
use super::stall::StallGuard;
use crate::state::InstanceLease;

/// Bytes of a server's stderr kept for the log.
const STDERR_TAIL: usize = 4096;

/// Pages of one `tools/list` read at most, and tools taken at most: a server that pages
/// without end, or lists without end, is cut off with an error.
const MAX_LIST_PAGES: usize = 64;
const MAX_LISTED_TOOLS: usize = 2048;

/// Bytes one listing may take in all, the tools counted as JSON: what one message of the
/// server's may hold, the proxy's `max_result_bytes` plus [`MESSAGE_MARGIN`] ([`CappedLines`]),
/// so every listing of one page is taken as before. A listing is up to [`MAX_LIST_PAGES`]
/// messages, though, and it is kept (in the overlay or the catalogue) as long as the server
/// runs: without this bound a hostile server would have the gateway hold 64 times the limit,
/// per server, after every `list_changed`. So a listing holds at most this plus the page being
/// read; one over it fails as a whole, like one with too many tools.
fn max_list_bytes(max_result_bytes: u64) -> u64 {
    max_result_bytes.saturating_add(MESSAGE_MARGIN)
}

/// How long a listing after `list_changed` may take.
const RELIST_TIMEOUT: Duration = Duration::from_secs(30);

/// The least time between the starts of two listings of one server. A server's first
/// `list_changed` is listed at once; any number of them in the second after are one more
/// listing, then. Without it a server announcing as fast as it can kept the gateway listing it
/// back to back, and its tenant's sessions told to list again after each.
const RELIST_EVERY: Duration = Duration::from_secs(1);

/// How long closing a stopped server's client may take. Its sandbox is killed first, so a
/// write the server never read fails and the close is quick; this bounds it all the same.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The rmcp client side: identifies hpcgate and, on `list_changed`, records the server's new
/// list for its own (tenant, instance).
#[derive(Clone)]
pub struct Handler {
    pub proxy: String,
    /// `None` for a discovery client, whose list is read once anyway.
    pub announcer: Option<Announcer>,
    /// The audit records of a call server's life; `None` for a discovery client.
    pub lifecycle: Option<Arc<Lifecycle>>,
    /// `proxied_mcps.<proxy>.max_result_bytes`, set by [`Client::start`] (0 until then, which
    /// fails every listing).
    max_result_bytes: u64,
    /// Notifications not yet listed: any number of them make one more listing, never more
    /// than one at a time.
    relist: Arc<Relist>,
    /// Ends the lister when the last clone of the handler (the client's) is dropped.
    _alive: Arc<DropGuard>,
}

struct Relist {
    wanted: tokio::sync::Notify,
    started: AtomicBool,
    gone: CancellationToken,
}

impl Handler {
    pub fn new(
        proxy: String,
        announcer: Option<Announcer>,
        lifecycle: Option<Arc<Lifecycle>>,
    ) -> Handler {
        let gone = CancellationToken::new();
        Handler {
            proxy,
            announcer,
            lifecycle,
            max_result_bytes: 0,
            relist: Arc::new(Relist {
                wanted: tokio::sync::Notify::new(),
                started: AtomicBool::new(false),
                gone: gone.clone(),
            }),
            _alive: Arc::new(gone.drop_guard()),
        }
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("hpcgate", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(announcer) = self.announcer.clone() else {
            return;
        };
        self.relist.wanted.notify_one();
        let (proxy, peer, relist) = (self.proxy.clone(), context.peer, self.relist.clone());
        let max_bytes = max_list_bytes(self.max_result_bytes);
        // One lister per server, started by its first notification; not inline, as the reply
        // to `tools/list` is read by the same service loop that runs this handler. It ends
        // with the client, or when a listing finds the server gone.
        if self.relist.started.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = relist.wanted.notified() => {}
                    () = relist.gone.cancelled() => return,
                }
                let next = tokio::time::Instant::now() + RELIST_EVERY;
                match list_tools(&peer, &proxy, RELIST_TIMEOUT, max_bytes).await {
                    Ok(tools) => {
                        let n =
                            (announcer.overlays).announce(&announcer.key, announcer.server, &tools);
                        let key = &announcer.key;
                        super::log(&format!(
                            "proxied server `{proxy}` of tenant `{}` instance `{}` changed its tools: {n} now, for that instance only",
                            key.tenant, key.instance
                        ));
                    }
                    Err(_) if peer.is_transport_closed() => return,
                    Err(e) => super::log(&format!(
                        "proxied server `{proxy}` changed its tools but listing them failed, its last list stays: {e}"
                    )),
                }
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = relist.gone.cancelled() => return,
                }
            }
        });
    }
}

/// Every tool `peer` (proxy `proxy`) lists, page after page, within `timeout`,
/// [`MAX_LIST_PAGES`], [`MAX_LISTED_TOOLS`] and `max_bytes` (see [`max_list_bytes`]).
async fn list_tools(
    peer: &Peer<RoleClient>,
    proxy: &str,
    timeout: Duration,
    max_bytes: u64,
) -> Result<Vec<Tool>, String> {
    let pages = async {
        let mut tools = Vec::new();
        let mut bytes = 0u64;
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = (peer.list_tools(Some(params)).await)
                .map_err(|e| format!("`tools/list` failed: {e}"))?;
            bytes = (page.tools.iter()).fold(bytes, |sum, tool| sum.saturating_add(json_len(tool)));
            if bytes > max_bytes {
                return Err(format!(
                    "`tools/list` lists more than {max_bytes} bytes of tools, over what `proxied_mcps.{proxy}.max_result_bytes` allows (plus 64 KiB); ask the admin to raise it, or to configure the server to offer fewer or shorter tools"
                ));
            }
            tools.extend(page.tools);
            if tools.len() > MAX_LISTED_TOOLS {
                return Err(format!(
                    "`tools/list` lists more than {MAX_LISTED_TOOLS} tools"
                ));
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(format!("`tools/list` goes on past {MAX_LIST_PAGES} pages"))
    };
    match tokio::time::timeout(timeout, pages).await {
        Ok(listed) => listed,
        Err(_) => Err(format!(
            "`tools/list` got no answer within {}s",
            timeout.as_secs_f64()
        )),
    }
}

/// A started server with its client.
pub struct Client {
    pub proxy: String,
    announcer: Option<Announcer>,
    lifecycle: Option<Arc<Lifecycle>>,
    /// `proxied_mcps.<proxy>.max_result_bytes`.
    max_result_bytes: u64,
    /// Set once the server sent a message over the cap (see [`CappedLines`]).
    overflowed: Arc<AtomicBool>,
    /// Set once a write to the server waited `stall` for it to read (see [`StallGuard`]).
    stalled: Arc<AtomicBool>,
    stall: Duration,
    service: Mutex<Service>,
    running: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    peer: Peer<RoleClient>,
    stderr: Arc<Mutex<Vec<u8>>>,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The lease on the instance the server runs in, released when it stops.
    lease: Mutex<Option<InstanceLease>>,
}

impl Client {
    /// Starts `argv` in a sandbox built from `spec` and completes the MCP handshake within
    /// `timeout`. No message the server sends may be longer than `max_result_bytes` plus
    /// [`MESSAGE_MARGIN`]; a server that leaves a write to it waiting for `stall` counts as
    /// dead.
    pub async fn start(
        spawner: &Spawner,
        spec: SandboxSpec,
        argv: Vec<String>,
        label: String,
        mut handler: Handler,
        (timeout, max_result_bytes, stall): (Duration, u64, Duration),
    ) -> Result<Client, ProxyError> {
        handler.max_result_bytes = max_result_bytes;
        let proxy = handler.proxy.clone();
        let announcer = handler.announcer.clone();
        let lifecycle = handler.lifecycle.clone();
        let start_error = |reason: String| ProxyError::Start {
            proxy: proxy.clone(),
            reason,
        };
        let (mut service, pipes) = spawner
            .spawn(spec, argv, label)
            .await
            .map_err(|e| start_error(error_chain(&e)))?;
        let io = (
            tokio::process::ChildStdout::from_std(pipes.stdout),
            tokio::process::ChildStdin::from_std(pipes.stdin),
            tokio::process::ChildStderr::from_std(pipes.stderr),
        );
        let (stdout, stdin, stderr) = match io {
            (Ok(o), Ok(i), Ok(e)) => (o, i, e),
            _ => {
                service.kill();
                return Err(start_error("its pipes could not be set up".to_owned()));
            }
        };
        let tail = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(drain(stderr, tail.clone()));
        let stdin = StallGuard::new(stdin, stall);
        let stalled = stdin.stalled();
        let stdout = CappedLines::new(stdout, max_result_bytes.saturating_add(MESSAGE_MARGIN))
            .counting(stdin.backlog());
        let overflowed = stdout.tripped();
        // The cap is ours (`CappedLines` stops the stream); rmcp's own line limit would
        // instead drop an over-long line and leave the call waiting for its timeout.
        let transport = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
            .with_max_line_length(usize::MAX);
        let running = match tokio::time::timeout(timeout, handler.serve(transport)).await {
            Ok(Ok(running)) => running,
            Ok(Err(e)) => {
                let exit = service.kill();
                return Err(start_error(format!(
                    "the MCP handshake failed ({e}){}",
                    ended(exit)
                )));
            }
            Err(_) => {
                service.kill();
                return Err(start_error(format!(
                    "no MCP handshake within {}s",
                    timeout.as_secs_f64()
                )));
            }
        };
        Ok(Client {
            proxy,
            announcer,
            lifecycle,
            max_result_bytes,
            overflowed,
            stalled,
            stall,
            peer: running.peer().clone(),
            running: tokio::sync::Mutex::new(Some(running)),
            service: Mutex::new(service),
            stderr: tail,
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            lease: Mutex::new(None),
        })
    }

    /// Every tool the server lists (all pages, within bounds).
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<Tool>, String> {
        let max_bytes = max_list_bytes(self.max_result_bytes);
        list_tools(&self.peer, &self.proxy, timeout, max_bytes).await
    }

    /// Calls `remote` (exposed as `exposed`) with `arguments`, continuing the gateway's trace
    /// (`traceparent` in `_meta`, as the MCP semantic conventions carry it). On timeout, or
    /// when `cancel` fires, the request is dropped, which sends `notifications/cancelled` to
    /// the server. Only the request races them: once it failed, what follows (the crashed
    /// server's exit, its stop and its record) runs to its end.
    pub async fn call(
        &self,
        remote: &str,
        exposed: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        along: super::Along,
    ) -> Result<CallToolResult, ProxyError> {
        let _busy = Busy::enter(self);
        let mut params = CallToolRequestParams::new(remote.to_owned()).with_arguments(arguments);
        if let Some(traceparent) = along.trace {
            let mut meta = Map::new();
            meta.insert("traceparent".to_owned(), Value::String(traceparent));
            params.meta = Some(meta.into());
        }
        let cancel = along.cancel.unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(ProxyError::CancelledUnsent {
                proxy: self.proxy.clone(),
                tool: exposed.to_owned(),
            });
        }
        let request = tokio::time::timeout(timeout, self.peer.call_tool_once(params));
        // The request first, so that it is on its way before a cancel can drop it.
        let outcome = tokio::select! {
            biased;
            outcome = request => outcome,
            () = cancel.cancelled() => {
                return Err(ProxyError::Cancelled {
                    proxy: self.proxy.clone(),
                    tool: exposed.to_owned(),
                });
            }
        };
        match outcome {
            Err(_) => Err(ProxyError::Timeout {
                proxy: self.proxy.clone(),
                tool: exposed.to_owned(),
                after: timeout,
            }),
            Ok(Ok(CallToolResponse::Complete(result))) => Ok(result),
            Ok(Ok(_)) => Err(ProxyError::Unsupported {
                tool: exposed.to_owned(),
            }),
            Ok(Err(ServiceError::McpError(e))) => Err(ProxyError::Remote {
                proxy: self.proxy.clone(),
                tool: exposed.to_owned(),
                message: e.message.to_string(),
            }),
            Ok(Err(_)) if self.overflowed.load(Ordering::SeqCst) => {
                self.end(Stop::Overflow, Some(exposed)).await;
                super::log(&format!(
                    "proxied server `{}` sent a message over {} bytes during `{exposed}`; stopped it",
                    self.proxy, self.max_result_bytes
                ));
                Err(ProxyError::Overflow {
                    proxy: self.proxy.clone(),
                    tool: exposed.to_owned(),
                    limit: self.max_result_bytes,
                })
            }
            Ok(Err(e)) => {
                let how = if self.is_alive() {
                    format!("the connection failed: {e}")
                } else if self.stalled.load(Ordering::SeqCst) {
                    self.end(Stop::Crashed, Some(exposed)).await;
                    format!(
                        "it did not read its stdin for {}s",
                        self.stall.as_secs_f64()
                    )
                } else {
                    self.settle().await;
                    let exit = self.end(Stop::Crashed, Some(exposed)).await;
                    super::log(&format!(
                        "proxied server `{}` stopped during `{exposed}`{}; its last stderr: {}",
                        self.proxy,
                        ended(exit),
                        self.stderr_tail()
                    ));
                    ended(exit).trim_start_matches("; ").to_owned()
                };
                Err(ProxyError::Crashed {
                    proxy: self.proxy.clone(),
                    tool: exposed.to_owned(),
                    how,
                })
            }
        }
    }

    /// Records that the server started (for a call).
    pub fn started(&self) {
        if let Some(lifecycle) = &self.lifecycle {
            lifecycle.started();
        }
    }

    /// False once the server exited, its stdio closed or it stopped reading its stdin.
    pub fn is_alive(&self) -> bool {
        if self.peer.is_transport_closed() || self.stalled.load(Ordering::SeqCst) {
            return false;
        }
        let mut service = self.service.lock().unwrap_or_else(|e| e.into_inner());
        service.try_exit().is_none()
    }

    /// Gives a server whose stdio closed up to 200 ms to exit on its own, so that its exit
    /// code (not our kill) is what gets reported.
    async fn settle(&self) {
        for _ in 0..40 {
            if self
                .service
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .try_exit()
                .is_some()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Marks the server as just used.
    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Idle since when (`None` while a call is in flight).
    pub fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(*self.last_used.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stops the client and kills the whole sandbox; idempotent. Returns how it ended. What
    /// the server announced goes with it: its instance is back on the baseline. The first
    /// stop is audited, with `why` (or as a crash if the server was already gone).
    pub async fn stop(&self, why: Stop) -> Option<ExitInfo> {
        self.end(why, None).await
    }

    /// Keeps `lease` until the server stops.
    pub fn hold(&self, lease: InstanceLease) {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
    }

    async fn end(&self, why: Stop, tool: Option<&str>) -> Option<ExitInfo> {
        let was_alive = self.is_alive();
        // The sandbox first: rmcp's `cancel` waits for its service loop, whose end waits for
        // the writer of the server's stdin, which a write the server never reads holds for
        // ever. Killed, the server's pipes close and that write fails.
        let exit = self
            .service
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .kill();
        if let Some(running) = self.running.lock().await.take() {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, running.cancel()).await;
            if self.stalled.load(Ordering::SeqCst) {
                super::log(&format!(
                    "proxied server `{}` did not read its stdin for {}s; stopped it",
                    self.proxy,
                    self.stall.as_secs_f64()
                ));
            }
        }
        if let Some(a) = &self.announcer {
            a.overlays.forget(&a.key, a.server);
        }
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(lifecycle) = &self.lifecycle {
            let stalled = self.stalled.load(Ordering::SeqCst).then_some(self.stall);
            lifecycle.ended(why, was_alive, tool, exit, stalled);
        }
        exit
    }

    fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).trim().to_owned()
    }
}

/// Counts a call in flight and stamps the end of it.
struct Busy<'a>(&'a Client);

impl<'a> Busy<'a> {
    fn enter(client: &'a Client) -> Busy<'a> {
        client.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(client)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes of a server's stderr.
async fn drain(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(&buf[..n]);
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
    }
}

fn ended(exit: Option<ExitInfo>) -> String {
    match exit {
        Some(ExitInfo::Code(code)) => format!("; it exited with code {code}"),
        Some(ExitInfo::Signal(sig)) => format!("; it was killed by signal {sig}"),
        None => String::new(),
    }
}

/// An error and its sources, for messages that have no other place to show the cause.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
