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
//! With `reuse`, an admin opts a policy into keeping one configured instance per tenant across
//! evaluations (state may then survive between that tenant's calls, never across tenants); an
//! instance that faulted is discarded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::bindings::WitCall;
use super::chain::Verdict;
use super::instance::{Fault, Instance, Limits};
use super::module::PolicyModule;

/// Used instances waiting to be dropped, at most; past that the caller drops its own.
const RETIRE_BACKLOG: usize = 256;
/// Reused instances kept per policy, at most (one per tenant).
const MAX_REUSED: usize = 1024;

/// What a pool shares with the maintenance thread.
struct Shared {
    module: PolicyModule,
    settings: Arc<str>,
    limits: Limits,
    ready: Sender<Instance>,
    take: Receiver<Instance>,
}

impl Shared {
    fn prepare(&self) -> Result<Instance, Fault> {
        Instance::prepare(&self.module, &self.settings, &self.limits)
    }
}

pub(crate) struct InstancePool {
    shared: Arc<Shared>,
    retire: Sender<Instance>,
    reused: Option<Mutex<HashMap<String, Instance>>>,
}

impl InstancePool {
    /// Configures one instance now (so a settings error stops the load), then lets the
    /// maintenance thread keep `depth` instances ready (none with `reuse`).
    pub(crate) fn new(
        module: PolicyModule,
        settings: String,
        limits: Limits,
        depth: usize,
        reuse: bool,
    ) -> Result<Self, Fault> {
        let maintainer = module.inner.engine.maintainer.clone();
        let depth = if reuse { 1 } else { depth.max(1) };
        let (ready, take) = crossbeam_channel::bounded(depth);
        let shared = Arc::new(Shared {
            module,
            settings: settings.into(),
            limits,
            ready,
            take,
        });
        let first = shared.prepare()?;
        let reused = if reuse {
            Some(Mutex::new(HashMap::new()))
        } else {
            let _ = shared.ready.try_send(first);
            maintainer.register(&shared);
            None
        };
        Ok(InstancePool {
            shared,
            retire: maintainer.retire.clone(),
            reused,
        })
    }

    /// Evaluates `call` on a fresh instance (or the tenant's reused one).
    pub(crate) fn evaluate(
        &self,
        tenant: &str,
        call: &WitCall,
    ) -> (Result<Verdict, Fault>, Vec<String>) {
        let Some(reused) = &self.reused else {
            let mut instance = match self.shared.take.try_recv() {
                Ok(instance) => instance,
                Err(_) => match self.shared.prepare() {
                    Ok(instance) => instance,
                    Err(fault) => return (Err(fault), Vec::new()),
                },
            };
            let outcome = instance.evaluate(call, &self.shared.limits);
            self.retire(instance);
            return outcome;
        };
        let taken = reused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tenant);
        let mut instance = match taken.map_or_else(|| self.shared.prepare(), Ok) {
            Ok(instance) => instance,
            Err(fault) => return (Err(fault), Vec::new()),
        };
        let (result, logs) = instance.evaluate(call, &self.shared.limits);
        if result.is_ok() {
            let mut map = reused.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() < MAX_REUSED {
                map.insert(tenant.to_owned(), instance);
            }
        } else {
            self.retire(instance);
        }
        (result, logs)
    }

    /// Queues a used instance for the maintenance thread, or drops it here if that thread is
    /// behind: the backlog is bounded so used instances cannot exhaust the allocator's slots.
    fn retire(&self, instance: Instance) {
        if let Err(e) = self.retire.try_send(instance) {
            drop(e.into_inner());
        }
    }
}

/// The engine's maintenance thread: drops retired instances and tops up every live pool.
pub(crate) struct Maintainer {
    pools: Mutex<Vec<Weak<Shared>>>,
    retire: Sender<Instance>,
}

impl Maintainer {
    pub(crate) fn start() -> Arc<Maintainer> {
        let (retire, retired) = crossbeam_channel::bounded(RETIRE_BACKLOG);
        let maintainer = Arc::new(Maintainer {
            pools: Mutex::new(Vec::new()),
            retire,
        });
        let weak = Arc::downgrade(&maintainer);
        let spawned = std::thread::Builder::new()
            .name("hpcgate-policy-pool".into())
            .spawn(move || maintain(&weak, &retired));
        // Without the thread every evaluation prepares its own instance: slower, still correct.
        drop(spawned);
        maintainer
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
