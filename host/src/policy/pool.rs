//! Fresh instances without paying for them on the call path.
//!
//! A policy's [`InstancePool`] keeps a few instances instantiated and configured ahead of the
//! call, prepared by a background thread; an evaluation takes one, uses it once, and hands it to
//! the retire thread, which drops it (returning its slot to the pooling allocator) off the call
//! path. When the pool is empty the call prepares an instance itself: slower, never wrong.
//!
//! With `reuse`, an admin opts a policy into keeping one configured instance per tenant across
//! evaluations (state may then survive between that tenant's calls, never across tenants); an
//! instance that faulted is discarded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::bindings::WitCall;
use super::chain::Verdict;
use super::instance::{Fault, Instance, Limits};
use super::module::PolicyModule;

pub(crate) struct InstancePool {
    module: PolicyModule,
    settings: Arc<str>,
    limits: Limits,
    ready: Option<Receiver<Instance>>,
    retire: Sender<Instance>,
    reused: Option<Mutex<HashMap<String, Instance>>>,
}

impl InstancePool {
    /// Configures one instance now (so a settings error stops the load), then starts preparing
    /// `depth` instances in the background (none with `reuse`).
    pub(crate) fn new(
        module: PolicyModule,
        settings: String,
        limits: Limits,
        depth: usize,
        reuse: bool,
        retire: Sender<Instance>,
    ) -> Result<Self, Fault> {
        let settings: Arc<str> = settings.into();
        let first = Instance::prepare(&module, &settings, &limits)?;
        let (ready, reused) = if reuse {
            (None, Some(Mutex::new(HashMap::new())))
        } else {
            let (tx, rx) = crossbeam_channel::bounded(depth.max(1));
            let _ = tx.try_send(first);
            spawn_preparer(module.clone(), settings.clone(), limits, tx);
            (Some(rx), None)
        };
        Ok(InstancePool { module, settings, limits, ready, retire, reused })
    }

    /// Evaluates `call` on a fresh instance (or the tenant's reused one).
    pub(crate) fn evaluate(&self, tenant: &str, call: &WitCall) -> (Result<Verdict, Fault>, Vec<String>) {
        if let Some(reused) = &self.reused {
            let taken = reused.lock().unwrap_or_else(|e| e.into_inner()).remove(tenant);
            let mut instance = match taken.map_or_else(|| self.prepare(), Ok) {
                Ok(instance) => instance,
                Err(fault) => return (Err(fault), Vec::new()),
            };
            let (result, logs) = instance.evaluate(call, &self.limits);
            if result.is_ok() {
                reused.lock().unwrap_or_else(|e| e.into_inner()).insert(tenant.to_owned(), instance);
            } else {
                let _ = self.retire.send(instance);
            }
            return (result, logs);
        }
        let ready = self.ready.as_ref().and_then(|rx| rx.try_recv().ok());
        let mut instance = match ready.map_or_else(|| self.prepare(), Ok) {
            Ok(instance) => instance,
            Err(fault) => return (Err(fault), Vec::new()),
        };
        let outcome = instance.evaluate(call, &self.limits);
        let _ = self.retire.send(instance);
        outcome
    }

    fn prepare(&self) -> Result<Instance, Fault> {
        Instance::prepare(&self.module, &self.settings, &self.limits)
    }
}

/// Keeps the ready queue full until the pool (its receiver) is dropped.
fn spawn_preparer(module: PolicyModule, settings: Arc<str>, limits: Limits, ready: Sender<Instance>) {
    let spawned = std::thread::Builder::new().name("hpcgate-policy-prep".into()).spawn(move || {
        loop {
            let instance = match Instance::prepare(&module, &settings, &limits) {
                Ok(instance) => instance,
                // The call path prepares its own instance and reports the fault as a deny.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            // Blocks while the queue is full; fails once the pool is dropped.
            if ready.send(instance).is_err() {
                return;
            }
        }
    });
    // Without the thread every evaluation prepares inline: slower, still correct.
    drop(spawned);
}

/// Starts the thread that drops used instances off the call path.
pub(crate) fn spawn_retirer() -> Sender<Instance> {
    let (tx, rx) = crossbeam_channel::unbounded::<Instance>();
    let spawned = std::thread::Builder::new().name("hpcgate-policy-retire".into()).spawn(move || {
        for instance in rx {
            drop(instance);
        }
    });
    drop(spawned);
    tx
}
