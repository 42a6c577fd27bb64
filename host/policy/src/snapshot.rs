//! Configured snapshots: fresh instances that start configured.
//!
//! Some policies spend far longer in `configure` than in an evaluation (`stock:cedar` parses its
//! whole policy set: about a millisecond for the example rules, against tens of microseconds to
//! evaluate). A pool of fresh instances of such a policy cannot keep up with a busy gateway on
//! the spare core, and calls end up configuring their own. For those, the pool configures one
//! instance of an instrumented copy of the component, reads its memories and globals back
//! (Wizer), and writes them into a new component whose instances start where `configure` left
//! off. Instantiating that is mapping its memory image copy-on-write: no `configure` at all.
//!
//! Only components that import nothing but the `hpcgate:policy` world are snapshotted: state
//! that lives in the host (a WASI component's open streams) cannot be written into a component.
//! A snapshot is the state after `configure(settings)` of this exact module, so it is keyed
//! (and cached on disk) by the module's digest and the settings; the decisions it makes are the
//! module's, recorded under the module's own digest.

use std::pin::pin;
use std::task::{Context, Poll, Waker};

use sha2::{Digest, Sha256};
use wasmtime::Store;
use wasmtime::component::{Component, Instance, Lift, WasmList};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

use super::bindings::Policy;
use super::deadline;
use super::instance::{GuestState, Limits};
use super::module::PolicyModule;

/// The module's component, configured with `settings`, as a module whose fresh instances need
/// no `configure`. Cached on disk like any compiled module.
pub(crate) fn configured(
    module: &PolicyModule,
    settings: &str,
    limits: &Limits,
) -> Result<PolicyModule, String> {
    let inner = &module.inner;
    if inner.imports_wasi {
        return Err("the component imports WASI, whose state lives in the host".into());
    }
    let engine = &inner.engine;
    let key = hex::encode(
        Sha256::new()
            .chain_update(b"hpcgate configured snapshot\0")
            .chain_update(inner.digest.as_bytes())
            .chain_update(b"\0")
            .chain_update(settings.as_bytes())
            .finalize(),
    );
    if let Some(component) = engine
        .cache
        .as_ref()
        .and_then(|c| c.get(&engine.engine, &key))
    {
        return module.with_component(&component);
    }
    let bytes = module.component_bytes()?;
    let wizer = Wizer::new();
    let (context, instrumented) = wizer
        .instrument_component(&bytes)
        .map_err(|e| format!("cannot instrument the component: {e:#}"))?;
    let instrumented = Component::new(&engine.engine, &instrumented)
        .map_err(|e| format!("cannot compile the instrumented component: {e:#}"))?;
    let instrumented_module = module.with_component(&instrumented)?;
    let mut store = GuestState::store(&instrumented_module, limits);
    let ticking = engine.ticker.guest_run();
    deadline::start(&mut store, limits.deadline);
    let instance = instrumented_module
        .inner
        .pre
        .instance_pre()
        .instantiate(&mut store)
        .map_err(|e| format!("cannot instantiate the instrumented component: {e:#}"))?;
    let policy = Policy::new(&mut store, &instance)
        .map_err(|e| format!("the instrumented component lost its exports: {e:#}"))?;
    match policy.call_configure(&mut store, settings) {
        Ok(Ok(())) => {}
        Ok(Err(message)) => return Err(format!("configure refused: {message}")),
        Err(e) => return Err(format!("configure failed: {e:#}")),
    }
    // Wizer's accessors, which read the configured state back, are guest code too: a run of
    // their own.
    deadline::start(&mut store, limits.deadline);
    let mut state = Snapshotting {
        store: &mut store,
        instance,
        failed: None,
    };
    let snapshot = ready(wizer.snapshot_component(&context, &mut state))
        .ok_or("the snapshot waited for something, which its accessors never do")?;
    drop(ticking);
    if let Some(failed) = state.failed {
        return Err(failed);
    }
    let snapshot = snapshot.map_err(|e| format!("cannot write the snapshot: {e:#}"))?;
    let component = Component::new(&engine.engine, &snapshot)
        .map_err(|e| format!("cannot compile the snapshot: {e:#}"))?;
    if let Some(cache) = &engine.cache {
        cache.put(&key, &component);
    }
    module.with_component(&component)
}

/// The configured instance, read through the accessors Wizer's instrumentation exports.
struct Snapshotting<'a> {
    store: &'a mut Store<GuestState>,
    instance: Instance,
    /// The first accessor that failed (Wizer's interface has no error path).
    failed: Option<String>,
}

impl Snapshotting<'_> {
    fn call<R: Lift + Send + Sync + 'static>(&mut self, instance: &str, func: &str) -> Option<R> {
        if self.failed.is_some() {
            return None;
        }
        let result = (|| {
            let outer = self
                .instance
                .get_export_index(&mut *self.store, None, instance)?;
            let index = self
                .instance
                .get_export_index(&mut *self.store, Some(&outer), func)?;
            let func = self
                .instance
                .get_typed_func::<(), (R,)>(&mut *self.store, index)
                .ok()?;
            func.call(&mut *self.store, ()).ok().map(|(r,)| r)
        })();
        if result.is_none() {
            self.failed = Some(format!("cannot read `{instance}#{func}`"));
        }
        result
    }
}

impl ComponentInstanceState for Snapshotting<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        match self.call::<WasmList<u8>>(instance, func) {
            Some(list) => contents(list.as_le_slice(&*self.store)),
            None => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func).unwrap_or_default()
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func).unwrap_or_default()
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call::<f32>(instance, func)
            .map(f32::to_bits)
            .unwrap_or_default()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call::<f64>(instance, func)
            .map(f64::to_bits)
            .unwrap_or_default()
    }
}

/// The output of a future that never waits (every accessor call above completes at once).
fn ready<F: Future>(future: F) -> Option<F::Output> {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}
