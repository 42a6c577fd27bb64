//! Fresh instances without paying for them on the call path.
//!
//! A policy's [`InstancePool`] keeps a few instances instantiated and configured ahead of the
//! call. One maintenance thread per engine tops the pools up and drops used instances (returning
//! their slots to the pooling allocator); an evaluation takes a ready instance, uses it once and
//! queues it for retirement. When a pool is empty the call prepares an instance itself: slower,
//! never wrong.
//!
//! The call path makes no system call to hand work over: the maintenance thread is never woken
//! by a call, it polls (every few hundred microseconds while there is work, backing off to
//! 10 ms when idle). Waking a sleeping thread from the call path costs a futex syscall and, on a
//! virtual machine, an inter-processor interrupt — more than the evaluation itself.
//!
//! With `reuse`, an admin opts a policy into keeping configured instances per tenant across
//! evaluations (state may then survive between that tenant's calls, never across tenants): a
//! call takes one of its tenant's kept instances, else a fresh one, and gives it back after a
//! clean evaluation; an instance that faulted is discarded. A tenant keeps at most `prepared`
//! instances (as many of its calls as are evaluated at once), and all reusing pools of an
//! engine together keep at most an eighth of its instance slots, so kept instances can never
//! starve fresh ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::bindings::WitCall;
use super::instance::{Fault, Instance, Limits};
use super::module::PolicyModule;
use super::{deadline, snapshot};
use hpcgate_policy_sdk::outcome::Verdict;

/// Used instances waiting to be dropped, at most; past that the caller drops its own.
const RETIRE_BACKLOG: usize = 256;

/// What a pool shares with the maintenance thread.
struct Shared {
    module: PolicyModule,
    settings: Arc<str>,
    limits: Limits,
    ready: Sender<Instance>,
    take: Receiver<Instance>,
    /// For a policy whose `configure` is slow: a configured snapshot of the module once it is
    /// built (fresh instances then start configured), or why it could not be.
    snapshot: OnceLock<Result<PolicyModule, String>>,
    /// Whether a snapshot is being built or was tried.
    snapshot_wanted: bool,
}

impl Shared {
    fn prepare(&self) -> Result<Instance, Fault> {
        match self.snapshot.get() {
            Some(Ok(configured)) => Instance::instantiate(configured, &self.limits),
            _ => Instance::prepare(&self.module, &self.settings, &self.limits),
        }
    }
}

/// Where a pool's fresh instances come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotState {
    /// `configure` is cheap: every instance is configured.
    NotNeeded,
    /// A configured snapshot is being built; instances are configured meanwhile.
    Building,
    /// Instances start from a configured snapshot.
    Ready,
    /// The snapshot could not be built (why); every instance is configured.
    Failed(String),
}

pub(crate) struct InstancePool {
    shared: Arc<Shared>,
    maintainer: Arc<Maintainer>,
    /// With `reuse`: each tenant's kept instances, and how many one tenant may keep.
    reused: Option<(Mutex<Kept>, usize)>,
    /// Evaluations that found no prepared instance (for the benchmark).
    inline_prepares: AtomicUsize,
}

/// A reusing pool's kept instances, by tenant (most recently used last).
type Kept = HashMap<String, Vec<Instance>>;

impl InstancePool {
    /// Configures two instances now (so a settings error stops the load), then lets the
    /// maintenance thread keep `depth` fresh instances ready; with `reuse`, each tenant may
    /// also keep up to `depth` used ones. With `snapshots`, a slow `configure` is done once
    /// more, for a configured snapshot (`snapshot.rs`).
    pub(crate) fn new(
        module: PolicyModule,
        settings: String,
        limits: Limits,
        depth: usize,
        reuse: bool,
        snapshots: bool,
    ) -> Result<Self, Fault> {
        let maintainer = module.inner.engine.maintainer.clone();
        let depth = depth.max(1);
        let (ready, take) = crossbeam_channel::bounded(depth);
        // Two instances, timing `configure` on both in this thread's CPU time: whether to
        // snapshot should not depend on what else the machine was doing.
        let mut configured = Vec::with_capacity(2);
        let mut fastest = Duration::MAX;
        for _ in 0..2 {
            let mut instance = Instance::instantiate(&module, &limits)?;
            let started = deadline::thread_cpu_time();
            instance.configure(&settings, &limits)?;
            fastest = fastest.min(deadline::thread_cpu_time().saturating_sub(started));
            configured.push(instance);
        }
        let worth_it = fastest >= module.inner.engine.settings.snapshot_threshold;
        let snapshot_wanted = snapshots && worth_it && !module.imports_wasi();
        let shared = Arc::new(Shared {
            module,
            settings: settings.into(),
            limits,
            ready,
            take,
            snapshot: OnceLock::new(),
            snapshot_wanted,
        });
        for instance in configured {
            let _ = shared.ready.try_send(instance);
        }
        maintainer.register(&shared);
        if snapshot_wanted {
            build_snapshot(&shared);
        }
        Ok(InstancePool {
            shared,
            maintainer,
            reused: reuse.then(|| (Mutex::new(Kept::default()), depth)),
            inline_prepares: AtomicUsize::new(0),
        })
    }

    /// Evaluates `call` on a fresh instance, or with `reuse` on one `tenant` kept.
    pub(crate) fn evaluate(
        &self,
        tenant: &str,
        call: &WitCall,
    ) -> (Result<Verdict, Fault>, Vec<String>) {
        let kept = self.reused.as_ref().and_then(|(kept, _)| {
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            let instance = kept.get_mut(tenant)?.pop()?;
            self.maintainer.kept.fetch_sub(1, Ordering::Relaxed);
            Some(instance)
        });
        let mut instance = match kept.map_or_else(|| self.fresh(), Ok) {
            Ok(instance) => instance,
            Err(fault) => return (Err(fault), Vec::new()),
        };
        let (result, logs) = instance.evaluate(call, &self.shared.limits);
        match &self.reused {
            Some((kept, per_tenant)) if result.is_ok() => {
                self.keep(kept, *per_tenant, tenant, instance)
            }
            _ => self.retire(instance),
        }
        (result, logs)
    }

    /// A ready instance, or one prepared here if the pool is empty.
    fn fresh(&self) -> Result<Instance, Fault> {
        self.shared.take.try_recv().or_else(|_| {
            self.inline_prepares.fetch_add(1, Ordering::Relaxed);
            self.shared.prepare()
        })
    }

    /// Where fresh instances come from.
    pub(crate) fn snapshot_state(&self) -> SnapshotState {
        match (self.shared.snapshot_wanted, self.shared.snapshot.get()) {
            (false, _) => SnapshotState::NotNeeded,
            (true, None) => SnapshotState::Building,
            (true, Some(Ok(_))) => SnapshotState::Ready,
            (true, Some(Err(why))) => SnapshotState::Failed(why.clone()),
        }
    }

    /// The configured snapshot, once ready.
    pub(crate) fn configured_module(&self) -> Option<PolicyModule> {
        self.shared.snapshot.get()?.as_ref().ok().cloned()
    }

    /// How many evaluations found no prepared instance and prepared their own.
    pub(crate) fn inline_prepares(&self) -> usize {
        self.inline_prepares.load(Ordering::Relaxed)
    }

    /// Keeps a used instance for `tenant`'s next call if the tenant and the engine have room,
    /// else retires it.
    fn keep(&self, kept: &Mutex<Kept>, per_tenant: usize, tenant: &str, instance: Instance) {
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        let has_room = kept.get(tenant).is_none_or(|k| k.len() < per_tenant);
        if has_room && self.maintainer.reserve_kept() {
            kept.entry(tenant.to_owned()).or_default().push(instance);
        } else {
            drop(kept);
            self.retire(instance);
        }
    }

    /// Queues a used instance for the maintenance thread, or drops it here if that thread is
    /// behind: the backlog is bounded so used instances cannot exhaust the allocator's slots.
    fn retire(&self, instance: Instance) {
        if let Err(e) = self.maintainer.retire.try_send(instance) {
            drop(e.into_inner());
        }
    }
}

impl Drop for InstancePool {
    fn drop(&mut self) {
        if let Some((kept, _)) = &self.reused {
            let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            let count = kept.values().map(Vec::len).sum();
            self.maintainer.kept.fetch_sub(count, Ordering::Relaxed);
        }
    }
}

/// Builds the pool's configured snapshot on a thread of its own (a compilation or two: the
/// gateway serves meanwhile, configuring every instance). Instances prepared before it is ready
/// are configured ones, and used as they are.
fn build_snapshot(shared: &Arc<Shared>) {
    let (module, settings, limits) = (
        shared.module.clone(),
        shared.settings.clone(),
        shared.limits,
    );
    let pool = Arc::downgrade(shared);
    let spawned = std::thread::Builder::new()
        .name("hpcgate-policy-snapshot".into())
        .spawn(move || {
            let result = snapshot::configured(&module, &settings, &limits);
            if let Some(pool) = pool.upgrade() {
                let _ = pool.snapshot.set(result);
            }
        });
    if let Err(e) = spawned {
        let _ = shared
            .snapshot
            .set(Err(format!("cannot start a thread to build it: {e}")));
    }
}

/// The engine's maintenance thread: drops retired instances and tops up every live pool.
pub(crate) struct Maintainer {
    pools: Mutex<Vec<Weak<Shared>>>,
    retire: Sender<Instance>,
    /// Instances kept for reuse by all pools, and the most they may keep.
    kept: AtomicUsize,
    kept_budget: usize,
}

impl Maintainer {
    /// `kept_budget`: how many instances reusing pools may keep in all.
    pub(crate) fn start(kept_budget: usize) -> Arc<Maintainer> {
        let (retire, retired) = crossbeam_channel::bounded(RETIRE_BACKLOG);
        let maintainer = Arc::new(Maintainer {
            pools: Mutex::new(Vec::new()),
            retire,
            kept: AtomicUsize::new(0),
            kept_budget,
        });
        let weak = Arc::downgrade(&maintainer);
        let spawned = std::thread::Builder::new()
            .name("hpcgate-policy-pool".into())
            .spawn(move || maintain(&weak, &retired));
        // Without the thread every evaluation prepares its own instance: slower, still correct.
        drop(spawned);
        maintainer
    }

    /// Counts one more kept instance, unless the budget is spent.
    fn reserve_kept(&self) -> bool {
        (self.kept)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                (k < self.kept_budget).then_some(k + 1)
            })
            .is_ok()
    }

    fn register(&self, pool: &Arc<Shared>) {
        self.pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(pool));
    }
}

fn maintain(maintainer: &Weak<Maintainer>, retired: &Receiver<Instance>) {
    let mut idle = Duration::from_micros(250);
    loop {
        let pools: Vec<Arc<Shared>> = {
            // Gone once the engine and every module and pool made from it are dropped.
            let Some(m) = maintainer.upgrade() else {
                return;
            };
            let mut pools = m.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.retain(|p| p.strong_count() > 0);
            pools.iter().filter_map(Weak::upgrade).collect()
        };
        let mut worked = false;
        while let Ok(instance) = retired.try_recv() {
            drop(instance);
            worked = true;
        }
        for pool in &pools {
            while !pool.ready.is_full() {
                // Retire first: a backlog of used instances holds allocator slots.
                while let Ok(instance) = retired.try_recv() {
                    drop(instance);
                }
                // A failing prepare is reported by the call that prepares inline.
                let Ok(instance) = pool.prepare() else { break };
                worked = true;
                if pool.ready.try_send(instance).is_err() {
                    break;
                }
            }
        }
        drop(pools);
        idle = if worked {
            Duration::from_micros(250)
        } else {
            (idle * 2).min(Duration::from_millis(10))
        };
        std::thread::sleep(idle);
    }
}
