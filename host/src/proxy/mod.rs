//! Proxied MCP servers (`[proxied_mcps.<name>]`): discovered at start, exposed as
//! `<name>__<tool>`, run inside each instance's sandbox.
//!
//! The [`ProxyManager`] is owned by the gateway. It keeps
//! - the [`Catalog`]: each proxy's tools, found at start by a throwaway server in a sandbox
//!   with empty scratch directories, in the background (a slow or broken server never delays
//!   or breaks the gateway's start; its failure is kept for `doctor` and logged). It is the
//!   baseline every tenant sees;
//! - the [`overlay`]s: what a running server announces later
//!   (`notifications/tools/list_changed`) applies to its own (tenant, instance) only — one
//!   tenant's server can never add, remove or change another tenant's tools;
//! - the clients: one server per (tenant, instance, proxy), never shared across tenants or
//!   instances, started lazily inside the instance's sandbox (workspace and output mounted,
//!   the sandbox's limits, environment = `[sandbox] env_allow` + the proxy's `env`, the
//!   proxy's network and binds). Concurrent first calls start one server (each key has a slot
//!   whose async lock is held while starting). A server idle for `idle_timeout` is stopped; a
//!   crashed one (or one that left a write to its stdin unread for `call_timeout`) fails the
//!   call in flight and is replaced on the next call. A tenant runs at
//!   most [`MAX_TENANT_SERVERS`] at once ([`running`]): the next start stops its least recently used idle
//!   one, or is refused while all of them are busy.
//!
//! The gateway's core is synchronous; the manager runs its own small tokio runtime, and its
//! blocking methods hand work to it and wait ([`ProxyManager::block`]), so they can be called
//! from any thread that may block. Servers are spawned by one long-lived thread
//! ([`spawner`]), because a sandbox dies with the thread that spawned it.
//!
//! The policy chain, audit and result shaping stay in the gateway's one dispatch function:
//! this module only lists and runs.

mod capped;
mod catalog;
mod changes;
mod client;
mod error;
mod lifecycle;
mod logging;
mod overlay;
mod run;
mod running;
mod schema;
mod spawner;
mod stall;
pub(crate) use logging::log;

use std::collections::{BTreeMap, HashMap};

pub use running::MAX_TENANT_SERVERS;
use running::{idle_tick, reap_idle};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hpcgate_executors::sandbox::SandboxSpec;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

pub use catalog::{Catalog, Discovery, ProxiedTool};
pub use changes::Subscription;
pub use error::ProxyError;
pub use run::{Reply, run};
pub use schema::{INSTANCE_ID, to_remote};

use crate::audit::AuditLog;
use crate::config::{ProxySettings, SandboxSettings};
use crate::state::{InstancePathsAmbient, StateError, TenantName};
use client::{Client, Handler};
use lifecycle::{Lifecycle, Stop};
use overlay::{Announcer, Overlays};
use spawner::Spawner;

/// What a gateway call hands on to the proxied call it makes: its span as a `traceparent`
/// (passed in `_meta`, as the MCP semantic conventions carry it) when the call is traced, and
/// its cancellation (the client gave up on it).
#[derive(Debug, Default, Clone)]
pub struct Along {
    pub trace: Option<String>,
    pub cancel: Option<CancellationToken>,
}

/// One client per (tenant, instance, proxy).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    overlays: Arc<Overlays>,
    clients: Mutex<HashMap<Key, Arc<Slot>>>,
    spawner: Spawner,
    starts: AtomicU64,
    /// Where servers' starts, stops and crashes and discovery failures are recorded (`None`
    /// for `doctor`'s throwaway manager).
    audit: Option<Arc<AuditLog>>,
    /// Set by [`ProxyManager::stop_all`]: discovery stops retrying and records nothing more,
    /// so no record of it follows the gateway's stop. Held while a failure is recorded.
    stopped: Mutex<bool>,
}

/// The proxied servers of one gateway.
pub struct ProxyManager {
    /// `None` when no proxy is configured: no runtime, no threads.
    inner: Option<Arc<Inner>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ProxyManager {
    /// Starts discovery of every proxy in the background and returns at once. `scratch` is a
    /// private directory for discovery's empty workspaces (e.g. under the state directory);
    /// servers' lives and discovery failures are recorded in `audit`.
    pub fn start(
        proxies: &BTreeMap<String, ProxySettings>,
        sandbox: &SandboxSettings,
        scratch: PathBuf,
        audit: Option<Arc<AuditLog>>,
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
            overlays: Arc::new(Overlays::new(catalog.clone())),
            catalog,
            clients: Mutex::new(HashMap::new()),
            spawner,
            starts: AtomicU64::new(0),
            audit,
            stopped: Mutex::new(false),
        });
        for name in proxies.keys() {
            inner.catalog.set(name, Discovery::Pending);
            runtime.spawn(discover(inner.clone(), name.clone()));
        }
        if !proxies.is_empty() {
            runtime.spawn(reap_idle(Arc::downgrade(&inner), idle_tick(proxies)));
        }
        ProxyManager {
            inner: Some(inner),
            runtime: Some(runtime),
        }
    }

    /// The exposed tools `tenant` may list (before policy): every proxy's discovered tools,
    /// plus those the tenant's own running servers announced since (see [`overlay`]).
    pub fn tools(&self, tenant: &TenantName) -> Vec<Arc<ProxiedTool>> {
        self.inner
            .as_ref()
            .map(|i| i.overlays.listed(tenant))
            .unwrap_or_default()
    }

    /// Waits, at most `bound`, until no proxy's discovery is pending (a `tools/list` right
    /// after start then shows the proxied tools, for clients that list once and ignore
    /// `list_changed`).
    pub fn settle(&self, bound: Duration) {
        if let Some(inner) = self.inner.as_ref() {
            inner.catalog.wait(None, Instant::now() + bound, None);
        }
    }

    /// The tool exposed as `name` as a call by `tenant` on `instance` sees it: from that
    /// instance's running server if it announced its own list, else from discovery. A call
    /// that races its proxy's discovery (just after start) waits for it, at most twice its
    /// `start_timeout`, rather than failing as an unknown tool; a client that gives the call
    /// up (`cancel`) ends the wait, and the call is not found.
    pub fn find(
        &self,
        tenant: &TenantName,
        instance: Option<&str>,
        name: &str,
        cancel: Option<&CancellationToken>,
    ) -> Option<Arc<ProxiedTool>> {
        let inner = self.inner.as_ref()?;
        let (proxy, _) = name.split_once("__")?;
        let settings = inner.proxies.get(proxy)?;
        let until = Instant::now() + settings.start_timeout * 2;
        if inner.catalog.wait(Some(proxy), until, cancel) {
            return None;
        }
        inner.overlays.find(tenant, instance, name)
    }

    /// Why `tenant` cannot call `name` although its proxy exists: the proxy could not list its
    /// tools (no details for the agent: those are in the log and in `hpcgate doctor`), or only
    /// the servers running in some of the tenant's other instances announced it.
    pub fn unavailable(&self, tenant: &TenantName, name: &str) -> Option<String> {
        let (proxy, _) = name.split_once("__")?;
        if let Discovery::Failed(_) = self.status().get(proxy)? {
            return Some(format!(
                "tool `{name}` is unavailable: proxied server `{proxy}` could not be started; ask the admin to check `hpcgate doctor`"
            ));
        }
        let instances = self.inner.as_ref()?.overlays.offered_in(tenant, name);
        (!instances.is_empty()).then(|| {
            format!(
                "tool `{name}` is offered only where the `{proxy}` server announced it while running: instance_id {}; call it with one of those, or call tools/list",
                instances.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Every change of the proxied tools and whom it concerns (a discovery finished: everyone;
    /// a server's `list_changed` or the end of a server that had one: its tenant); `None` when
    /// no proxy is configured.
    pub fn subscribe(&self, tenant: Option<&TenantName>) -> Option<Subscription> {
        self.inner.as_ref().map(|i| i.catalog.subscribe(tenant))
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
    /// final, policy-approved arguments (the gateway's `instance_id` included), with what the
    /// gateway's call hands on (`along`). Blocks until the server answers, the call times out,
    /// or the client cancels it; then the server is sent `notifications/cancelled`.
    pub fn call(
        &self,
        tenant: &TenantName,
        instance: &str,
        paths: InstancePathsAmbient,
        tool: &ProxiedTool,
        arguments: Map<String, Value>,
        along: Along,
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
            let (remote, exposed) = (&tool.remote_name, &tool.exposed_name);
            let unsent = || ProxyError::CancelledUnsent {
                proxy: key.proxy.clone(),
                tool: exposed.clone(),
            };
            let client = inner.client(&key, &settings, paths, along.cancel.as_ref());
            let client = client.await?.ok_or_else(unsent)?;
            let timeout = settings.call_timeout;
            let result = client
                .call(remote, exposed, arguments, timeout, along)
                .await?;
            let bytes = serde_json::to_vec(&result).map_or(0, |b| b.len() as u64);
            if bytes > settings.max_result_bytes {
                return Err(ProxyError::TooLarge {
                    proxy: key.proxy.clone(),
                    tool: tool.exposed_name.clone(),
                    bytes,
                    limit: settings.max_result_bytes,
                });
            }
            Ok(result)
        })
        .unwrap_or(Err(ProxyError::ShuttingDown))
    }

    /// Whether a server of `tenant`'s `instance` runs here (or is starting, or died and is not
    /// yet forgotten).
    pub fn runs_in(&self, tenant: &TenantName, instance: &str) -> bool {
        self.inner.as_ref().is_some_and(|inner| {
            (lock(&inner.clients).keys()).any(|k| &k.tenant == tenant && k.instance == instance)
        })
    }

    /// Stops every server of `tenant`'s `instance`, releasing their leases on it. Blocks until
    /// they are gone.
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
        self.block(stop_slots(slots, Stop::Archive));
    }

    /// Stops every running server (the gateway is stopping); audited as `shutdown`. Blocks.
    /// Discovery still retrying gives up, recording nothing more.
    pub fn stop_all(&self) {
        if let Some(inner) = &self.inner {
            *lock(&inner.stopped) = true;
            let slots: Vec<_> = lock(&inner.clients).drain().map(|(_, s)| s).collect();
            self.block(stop_slots(slots, Stop::Shutdown));
        }
    }

    /// Stops every server; later calls fail with [`ProxyError::ShuttingDown`]. Idempotent.
    pub fn shutdown(&mut self) {
        if let Some(inner) = self.inner.take() {
            *lock(&inner.stopped) = true;
            let slots: Vec<_> = lock(&inner.clients).drain().map(|(_, s)| s).collect();
            self.block(stop_slots(slots, Stop::Shutdown));
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
        cancel: Option<&CancellationToken>,
    ) -> Result<Option<Arc<Client>>, ProxyError> {
        // A cancel is heeded while the call waits for the slot (another call may be starting
        // the server), not during a start of its own: that runs to its end, bounded by the
        // start timeout, and serves the calls that follow.
        let given_up = async {
            match cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let mut current = tokio::select! {
            biased;
            () = given_up => return Ok(None),
            slot = self.slot(key) => slot?,
        };
        if let Some(client) = current.as_ref() {
            if client.is_alive() {
                // Fresh for the idle reaper until the call counts itself in flight.
                client.touch();
                return Ok(Some(client.clone()));
            }
            // Gone since its last call: audited as a crash.
            client.stop(Stop::Idle).await;
            *current = None;
        }
        // Held as long as the server runs: the instance cannot be archived under it. Taken
        // off the runtime's few threads: it may wait out an archive's rename.
        let leasing = paths.clone();
        let lease = tokio::task::spawn_blocking(move || leasing.hold())
            .await
            .map_err(|e| StateError::io("take the instance's lease")(std::io::Error::other(e)))
            .and_then(|held| held)
            .map_err(|e| ProxyError::Start {
                proxy: key.proxy.clone(),
                reason: e.to_string(),
            })?;
        self.make_room(key).await?;
        let spec = self.spec(settings, paths.workspace, paths.output);
        let n = self.starts.fetch_add(1, Ordering::SeqCst);
        let handler = Handler::new(
            key.proxy.clone(),
            Some(Announcer {
                overlays: self.overlays.clone(),
                key: key.clone(),
                server: n,
            }),
            Some(Arc::new(Lifecycle::new(self.audit.clone(), key.clone(), n))),
        );
        let client = Client::start(
            &self.spawner,
            spec,
            settings.argv.clone(),
            format!("hpcgate-proxy-{}-{n}", std::process::id()),
            handler,
            (
                settings.start_timeout,
                settings.max_result_bytes,
                settings.call_timeout,
            ),
        )
        .await
        .map(Arc::new);
        if let Err(e) = &client {
            log(&e.to_string());
        }
        let client = client?;
        client.hold(lease);
        client.started();
        *current = Some(client.clone());
        Ok(Some(client))
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

/// First wait before discovery is tried again after a failure; it doubles after each failed
/// attempt, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Discovery of one proxy: a throwaway server with empty scratch directories lists its tools.
/// A failure is kept (for `doctor` and the unavailable-tool message), audited and logged, and
/// discovery is tried again with exponential backoff until it succeeds (a server whose
/// dependency came up late is offered without a restart of the gateway).
async fn discover(inner: Arc<Inner>, proxy: String) {
    let Some(settings) = inner.proxies.get(&proxy).cloned() else {
        return;
    };
    let mut wait = RETRY_FIRST;
    for attempt in 1u64.. {
        match discover_tools(&inner, &settings).await {
            Ok(tools) => {
                let n = inner.catalog.set_tools(&proxy, &tools);
                log(&format!(
                    "proxied server `{proxy}`: {n} tools discovered (attempt {attempt})"
                ));
                return;
            }
            Err(reason) => {
                let stopped = lock(&inner.stopped);
                if *stopped {
                    return;
                }
                log(&format!(
                    "proxied server `{proxy}`: discovery failed, its tools are not offered: {reason}; trying again in {}s",
                    wait.as_secs()
                ));
                lifecycle::discovery_failed(
                    inner.audit.as_deref(),
                    &proxy,
                    &reason,
                    (attempt, wait),
                );
                drop(stopped);
                inner.catalog.set(&proxy, Discovery::Failed(reason));
            }
        }
        tokio::time::sleep(wait).await;
        if *lock(&inner.stopped) {
            return;
        }
        wait = (wait * 2).min(RETRY_MAX);
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
    let handler = Handler::new(settings.name.clone(), None, None);
    let started = Client::start(
        &inner.spawner,
        spec,
        settings.argv.clone(),
        format!("hpcgate-proxy-discover-{}-{n}", std::process::id()),
        handler,
        (
            settings.start_timeout,
            settings.max_result_bytes,
            settings.call_timeout,
        ),
    )
    .await;
    let listed = match &started {
        Ok(client) => client.list_tools(settings.start_timeout).await,
        Err(e) => Err(e.to_string()),
    };
    if let Ok(client) = started {
        client.stop(Stop::Discovered).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    listed
}

async fn stop_slots(slots: Vec<Arc<Slot>>, why: Stop) {
    for slot in slots {
        if let Some(client) = slot.lock().await.take() {
            client.stop(why).await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
