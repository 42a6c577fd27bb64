//! Proxied MCP servers (`[proxied_mcps.<name>]`): discovered at start, exposed as
//! `<name>__<tool>`, run inside each instance's sandbox.
//!
//! The [`ProxyManager`] is owned by the gateway. It keeps
//! - the [`Catalog`]: each proxy's tools, found at start by a throwaway server in a sandbox
//!   with empty scratch directories, in the background (a slow or broken server never delays
//!   or breaks the gateway's start; its failure is kept for `doctor` and logged), refreshed on
//!   `notifications/tools/list_changed`;
//! - the clients: one server per (tenant, instance, proxy), never shared across tenants or
//!   instances, started lazily inside the instance's sandbox (workspace and output mounted,
//!   the sandbox's limits, environment = `[sandbox] env_allow` + the proxy's `env`, the
//!   proxy's network and binds). Concurrent first calls start one server (each key has a slot
//!   whose async lock is held while starting). A server idle for `idle_timeout` is stopped; a
//!   crashed one fails the call in flight and is replaced on the next call.
//!
//! The gateway's core is synchronous; the manager runs its own small tokio runtime, and its
//! blocking methods hand work to it and wait ([`ProxyManager::block`]), so they can be called
//! from any thread that may block. Servers are spawned by one long-lived thread
//! ([`spawner`]), because a sandbox dies with the thread that spawned it.
//!
//! The policy chain, audit and result shaping stay in the gateway's one dispatch function:
//! this module only lists and runs.

mod catalog;
mod client;
mod error;
mod run;
mod schema;
mod spawner;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hpcgate_executors::sandbox::SandboxSpec;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value};

pub use catalog::{Catalog, Discovery, ProxiedTool};
pub use error::ProxyError;
pub use run::run;
pub use schema::{INSTANCE_ID, to_remote};

use crate::config::{ProxySettings, SandboxSettings};
use crate::state::{InstancePathsAmbient, TenantName};
use client::{Client, Handler};
use spawner::Spawner;

/// One client per (tenant, instance, proxy).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    tenant: TenantName,
    instance: String,
    proxy: String,
}

/// Held while a server starts, so concurrent first calls start exactly one.
type Slot = tokio::sync::Mutex<Option<Arc<Client>>>;

struct Inner {
    proxies: BTreeMap<String, ProxySettings>,
    sandbox: SandboxSettings,
    /// Empty workspace and output directories for discovery servers are made below it.
    scratch: PathBuf,
    catalog: Arc<Catalog>,
    clients: Mutex<HashMap<Key, Arc<Slot>>>,
    spawner: Spawner,
    starts: AtomicU64,
}

/// The proxied servers of one gateway.
pub struct ProxyManager {
    /// `None` when no proxy is configured: no runtime, no threads.
    inner: Option<Arc<Inner>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ProxyManager {
    /// Starts discovery of every proxy in the background and returns at once. `scratch` is a
    /// private directory for discovery's empty workspaces (e.g. under the state directory).
    pub fn start(
        proxies: &BTreeMap<String, ProxySettings>,
        sandbox: &SandboxSettings,
        scratch: PathBuf,
    ) -> ProxyManager {
        if proxies.is_empty() {
            return ProxyManager {
                inner: None,
                runtime: None,
            };
        }
        let catalog = Arc::new(Catalog::default());
        let built = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hpcgate-proxy")
            .enable_all()
            .build()
            .and_then(|runtime| Ok((runtime, Spawner::start()?)));
        let (runtime, spawner) = match built {
            Ok(parts) => parts,
            Err(e) => {
                for name in proxies.keys() {
                    catalog.set(
                        name,
                        Discovery::Failed(format!("cannot start threads: {e}")),
                    );
                }
                log(&format!(
                    "proxied servers disabled: cannot start threads: {e}"
                ));
                return ProxyManager {
                    inner: None,
                    runtime: None,
                };
            }
        };
        let inner = Arc::new(Inner {
            proxies: proxies.clone(),
            sandbox: sandbox.clone(),
            scratch,
            catalog,
            clients: Mutex::new(HashMap::new()),
            spawner,
            starts: AtomicU64::new(0),
        });
        for name in proxies.keys() {
            inner.catalog.set(name, Discovery::Pending);
            runtime.spawn(discover(inner.clone(), name.clone()));
        }
        if let Some(tick) = idle_tick(proxies) {
            runtime.spawn(reap_idle(Arc::downgrade(&inner), tick));
        }
        ProxyManager {
            inner: Some(inner),
            runtime: Some(runtime),
        }
    }

    /// Every exposed tool of every proxy whose discovery succeeded (before policy).
    pub fn tools(&self) -> Vec<Arc<ProxiedTool>> {
        self.inner
            .as_ref()
            .map(|i| i.catalog.tools())
            .unwrap_or_default()
    }

    /// The tool exposed as `name`, if a proxy offers it. A call that races its proxy's
    /// discovery (just after start) waits for it, at most twice its `start_timeout`, rather
    /// than failing as an unknown tool.
    pub fn find(&self, name: &str) -> Option<Arc<ProxiedTool>> {
        let inner = self.inner.as_ref()?;
        let (proxy, _) = name.split_once("__")?;
        let settings = inner.proxies.get(proxy)?;
        let until = std::time::Instant::now() + settings.start_timeout * 2;
        while inner.catalog.is_pending(proxy) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        inner.catalog.find(name)
    }

    /// Why `name` is not offered when its proxy exists but could not list its tools: a message
    /// for the agent (no details: those are in the log and in `hpcgate doctor`).
    pub fn unavailable(&self, name: &str) -> Option<String> {
        let (proxy, _) = name.split_once("__")?;
        match self.status().get(proxy)? {
            Discovery::Failed(_) => Some(format!(
                "tool `{name}` is unavailable: proxied server `{proxy}` could not be started; ask the admin to check `hpcgate doctor`"
            )),
            _ => None,
        }
    }

    /// Wakes whenever the proxied tools change (discovery finished, a server's
    /// `list_changed`); `None` when no proxy is configured.
    pub fn subscribe(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.as_ref().map(|i| i.catalog.subscribe())
    }

    /// Each proxy's discovery state (tools, pending, or the failure), for `doctor` and tests.
    pub fn status(&self) -> BTreeMap<String, Discovery> {
        self.inner
            .as_ref()
            .map(|i| i.catalog.snapshot())
            .unwrap_or_default()
    }

    /// Servers started for calls since the gateway opened (discovery not counted).
    pub fn starts(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.starts.load(Ordering::SeqCst))
    }

    /// Servers currently running for calls.
    pub fn running(&self) -> usize {
        let Some(inner) = &self.inner else {
            return 0;
        };
        let slots: Vec<_> = lock(&inner.clients).values().cloned().collect();
        slots
            .iter()
            .filter(|s| s.try_lock().map(|c| c.is_some()).unwrap_or(true))
            .count()
    }

    /// Calls `tool` for `tenant` in `instance` (whose host directories are `paths`) with the
    /// final, policy-approved arguments (the gateway's `instance_id` included). Blocks.
    pub fn call(
        &self,
        tenant: &TenantName,
        instance: &str,
        paths: InstancePathsAmbient,
        tool: &ProxiedTool,
        arguments: Map<String, Value>,
    ) -> Result<CallToolResult, ProxyError> {
        let Some(inner) = self.inner.clone() else {
            return Err(ProxyError::ShuttingDown);
        };
        let key = Key {
            tenant: tenant.clone(),
            instance: instance.to_owned(),
            proxy: tool.server.clone(),
        };
        let tool = tool.clone();
        let arguments = to_remote(arguments, tool.renamed_instance_id.as_deref());
        self.block(async move {
            let Some(settings) = inner.proxies.get(&key.proxy).cloned() else {
                return Err(ProxyError::ShuttingDown);
            };
            let client = inner.client(&key, &settings, paths).await?;
            let result = client
                .call(
                    &tool.remote_name,
                    &tool.exposed_name,
                    arguments,
                    settings.call_timeout,
                )
                .await?;
            let bytes = serde_json::to_vec(&result).map_or(0, |b| b.len() as u64);
            if bytes > settings.max_result_bytes {
                return Err(ProxyError::TooLarge {
                    tool: tool.exposed_name.clone(),
                    bytes,
                    limit: settings.max_result_bytes,
                });
            }
            Ok(result)
        })
        .unwrap_or(Err(ProxyError::ShuttingDown))
    }

    /// Stops every server of `tenant`'s `instance` (after its archive check passed). Blocks
    /// until they are gone.
    pub fn stop_instance(&self, tenant: &TenantName, instance: &str) {
        let Some(inner) = self.inner.clone() else {
            return;
        };
        let slots: Vec<_> = {
            let mut clients = lock(&inner.clients);
            let keys: Vec<_> = clients
                .keys()
                .filter(|k| &k.tenant == tenant && k.instance == instance)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| clients.remove(k)).collect()
        };
        self.block(stop_slots(slots));
    }

    /// Stops every server; later calls fail with [`ProxyError::ShuttingDown`]. Idempotent.
    pub fn shutdown(&mut self) {
        if let Some(inner) = self.inner.take() {
            let slots: Vec<_> = lock(&inner.clients).drain().map(|(_, s)| s).collect();
            self.block(stop_slots(slots));
        }
        if let Some(runtime) = self.runtime.take() {
            // Not `shutdown_timeout`: the last owner may drop the gateway inside an async
            // context (the MCP session's task), where blocking on a runtime panics. Every
            // server is already stopped; what remains are idle tasks.
            runtime.shutdown_background();
        }
    }

    /// Runs `work` on the manager's runtime and waits for it (`None` once shut down). Safe on
    /// any thread that may block, including inside another runtime's `spawn_blocking`.
    fn block<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let runtime = self.runtime.as_ref()?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().ok()
    }
}

impl Drop for ProxyManager {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    /// The live client for `key`, starting one if there is none (or the last one died).
    async fn client(
        &self,
        key: &Key,
        settings: &ProxySettings,
        paths: InstancePathsAmbient,
    ) -> Result<Arc<Client>, ProxyError> {
        let slot = lock(&self.clients).entry(key.clone()).or_default().clone();
        let mut current = slot.lock().await;
        if let Some(client) = current.as_ref() {
            if client.is_alive() {
                // Fresh for the idle reaper until the call counts itself in flight.
                client.touch();
                return Ok(client.clone());
            }
            client.stop().await;
            *current = None;
        }
        let spec = self.spec(settings, paths.workspace, paths.output);
        let n = self.starts.fetch_add(1, Ordering::SeqCst);
        let handler = Handler {
            proxy: key.proxy.clone(),
            catalog: Some(self.catalog.clone()),
        };
        let client = Client::start(
            &self.spawner,
            spec,
            settings.argv.clone(),
            format!("hpcgate-proxy-{}-{n}", std::process::id()),
            handler,
            settings.start_timeout,
        )
        .await
        .map(Arc::new);
        if let Err(e) = &client {
            log(&e.to_string());
        }
        let client = client?;
        *current = Some(client.clone());
        Ok(client)
    }

    /// The instance's sandbox with the proxy's network, binds and environment.
    fn spec(&self, settings: &ProxySettings, workspace: PathBuf, output: PathBuf) -> SandboxSpec {
        let mut spec = self.sandbox.spec(workspace, output);
        spec.network = settings.network;
        spec.extra_ro_binds.extend(settings.binds.iter().cloned());
        spec.env.set.extend(settings.env.iter().cloned());
        spec
    }
}

/// Discovery of one proxy: a throwaway server with empty scratch directories lists its tools.
async fn discover(inner: Arc<Inner>, proxy: String) {
    let Some(settings) = inner.proxies.get(&proxy).cloned() else {
        return;
    };
    let outcome = discover_tools(&inner, &settings).await;
    match outcome {
        Ok(tools) => {
            let n = inner.catalog.set_tools(&proxy, &tools);
            log(&format!("proxied server `{proxy}`: {n} tools discovered"));
        }
        Err(reason) => {
            log(&format!(
                "proxied server `{proxy}`: discovery failed, its tools are not offered: {reason}"
            ));
            inner.catalog.set(&proxy, Discovery::Failed(reason));
        }
    }
}

async fn discover_tools(
    inner: &Inner,
    settings: &ProxySettings,
) -> Result<Vec<rmcp::model::Tool>, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = inner.scratch.join(format!(
        "discover-{}-{}-{n}",
        settings.name,
        std::process::id()
    ));
    let (workspace, output) = (dir.join("workspace"), dir.join("output"));
    for d in [&workspace, &output] {
        std::fs::create_dir_all(d)
            .map_err(|e| format!("cannot create its scratch directories: {e}"))?;
    }
    let spec = inner.spec(settings, workspace, output);
    let handler = Handler {
        proxy: settings.name.clone(),
        catalog: None,
    };
    let started = Client::start(
        &inner.spawner,
        spec,
        settings.argv.clone(),
        format!("hpcgate-proxy-discover-{}-{n}", std::process::id()),
        handler,
        settings.start_timeout,
    )
    .await;
    let listed = match &started {
        Ok(client) => client.list_tools(settings.start_timeout).await,
        Err(e) => Err(e.to_string()),
    };
    if let Ok(client) = started {
        client.stop().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    listed
}

async fn stop_slots(slots: Vec<Arc<Slot>>) {
    for slot in slots {
        if let Some(client) = slot.lock().await.take() {
            client.stop().await;
        }
    }
}

/// How often idle servers are looked for: a quarter of the shortest `idle_timeout`, between
/// 10 ms and 1 s; `None` when no proxy has one.
fn idle_tick(proxies: &BTreeMap<String, ProxySettings>) -> Option<Duration> {
    let shortest = proxies.values().filter_map(|p| p.idle_timeout).min()?;
    Some((shortest / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)))
}

/// Stops servers idle for their proxy's `idle_timeout` and forgets dead ones. A slot being
/// started or called (locked) is skipped this round.
async fn reap_idle(inner: std::sync::Weak<Inner>, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let slots: Vec<(Key, Arc<Slot>)> = lock(&inner.clients)
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (key, slot) in slots {
            let Some(idle) = inner.proxies.get(&key.proxy).and_then(|p| p.idle_timeout) else {
                continue;
            };
            let Ok(mut current) = slot.try_lock() else {
                continue;
            };
            let expired = current.as_ref().is_some_and(|c| {
                !c.is_alive() || c.idle_since().is_some_and(|t| t.elapsed() >= idle)
            });
            if expired && let Some(client) = current.take() {
                client.stop().await;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The gateway's log is its stderr (stdout may be the MCP stream).
#[allow(clippy::print_stderr)]
pub(crate) fn log(message: &str) {
    eprintln!("hpcgate: {message}");
}
