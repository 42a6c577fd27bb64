//! One policy instance: its store (memory cap, log lines), how it is prepared (instantiated and
//! configured), and how one evaluation runs under a deadline with every failure turned into a
//! [`Fault`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use wasmtime::{ResourceLimiter, Store, Trap};

use super::bindings::{self, Level, Policy, WitCall, WitDecision};
use super::deadline::{self, RunClock};
use super::module::PolicyModule;
use super::ticker::Ticker;
use super::wasi::WasiState;
use hpcgate_policy_sdk::outcome::Verdict;

/// The most log lines kept per evaluation, and their length.
const MAX_LOG_LINES: usize = 16;
const MAX_LOG_LINE: usize = 512;
/// Longer deny reasons and rewrite notes are cut; longer rewrites are a fault.
const MAX_REASON: usize = 4096;
const MAX_REWRITE: usize = 1 << 20;

/// Per-evaluation bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) deadline: Duration,
    pub(crate) memory_bytes: usize,
}

/// The data a policy's store carries.
pub(crate) struct GuestState {
    /// The bytes all of the instance's linear memories may hold together.
    memory_cap: usize,
    /// The bytes they hold now.
    memory_used: usize,
    /// What `memory_used` was before the last growth allowed, for one that then fails.
    memory_before_growth: usize,
    /// Whether this evaluation (or `configure`) asked for more than the cap.
    memory_cap_hit: bool,
    logs: Vec<String>,
    /// Set for a component that imports WASI (made here if a call comes without it).
    wasi: Option<Box<WasiState>>,
    /// The deadline of the guest run in progress.
    pub(crate) clock: RunClock,
}

impl GuestState {
    /// A store for one instance of `module` under `limits`' memory cap (the caller starts each
    /// run's deadline once the ticker runs).
    pub(crate) fn store(module: &PolicyModule, limits: &Limits) -> Store<GuestState> {
        let inner = &module.inner;
        let state = GuestState {
            memory_cap: limits.memory_bytes,
            memory_used: 0,
            memory_before_growth: 0,
            memory_cap_hit: false,
            logs: Vec::new(),
            wasi: inner.imports_wasi.then(|| Box::new(WasiState::new())),
            clock: RunClock::new(),
        };
        let mut store = Store::new(&inner.engine.engine, state);
        store.limiter(|state| state);
        deadline::watch(&mut store);
        store
    }

    pub(crate) fn wasi(&mut self) -> &mut WasiState {
        self.wasi.get_or_insert_with(|| Box::new(WasiState::new()))
    }
}

impl wasmtime_wasi::WasiView for GuestState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        self.wasi().view()
    }
}

impl ResourceLimiter for GuestState {
    /// The cap holds for the instance's memories together: a component can hold several core
    /// instances, each with a memory of its own, and a cap per memory would multiply by them.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = (self.memory_used - current.min(self.memory_used)).saturating_add(desired);
        if after > self.memory_cap {
            self.memory_cap_hit = true;
            return Ok(false);
        }
        self.memory_before_growth = self.memory_used;
        self.memory_used = after;
        Ok(true)
    }

    /// A growth allowed above can still fail (past the memory's own maximum, or the host's):
    /// its bytes were not taken.
    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_used = self.memory_before_growth;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 65_536)
    }
}

impl bindings::hpcgate::policy::log::Host for GuestState {
    fn log(&mut self, level: Level, message: String) {
        if self.logs.len() < MAX_LOG_LINES {
            let level = match level {
                Level::Debug => "debug",
                Level::Info => "info",
                Level::Warn => "warn",
            };
            self.logs
                .push(format!("{level}: {}", truncate(&message, MAX_LOG_LINE)));
        }
    }
}

impl bindings::hpcgate::policy::types::Host for GuestState {}

/// Why an evaluation produced no decision. Every fault becomes a deny.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Fault {
    #[error("timed out after {0} ms")]
    Timeout(u128),
    #[error("exceeded its memory limit of {0} MiB")]
    MemoryLimit(usize),
    #[error("trapped: {0}")]
    Trap(String),
    #[error("returned a malformed decision: {0}")]
    Malformed(String),
    #[error("could not be instantiated: {0}")]
    Instantiate(String),
    #[error("rejected its settings on a fresh instance: {0}")]
    Configure(String),
}

impl Fault {
    /// The fault in one word, for metrics labels (a bounded set).
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Timeout(_) => "timeout",
            Fault::MemoryLimit(_) => "memory",
            Fault::Trap(_) => "trap",
            Fault::Malformed(_) => "malformed",
            Fault::Instantiate(_) => "instantiate",
            Fault::Configure(_) => "configure",
        }
    }
}

/// An instantiated, configured policy, ready for one evaluation (or several, with reuse).
pub(crate) struct Instance {
    store: Store<GuestState>,
    policy: Policy,
    ticker: Arc<Ticker>,
}

impl Instance {
    /// Instantiates `module` and calls `configure(settings)` under the limits.
    pub(crate) fn prepare(
        module: &PolicyModule,
        settings: &str,
        limits: &Limits,
    ) -> Result<Instance, Fault> {
        let mut instance = Instance::instantiate(module, limits)?;
        instance.configure(settings, limits)?;
        Ok(instance)
    }

    /// Instantiates `module` under the limits; the instance must be configured before it
    /// evaluates ([`Instance::prepare`] does both; the benchmark times them apart).
    pub(crate) fn instantiate(module: &PolicyModule, limits: &Limits) -> Result<Instance, Fault> {
        let inner = &module.inner;
        let mut store = GuestState::store(module, limits);
        let _ticking = inner.engine.ticker.guest_run();
        deadline::start(&mut store, limits.deadline);
        let policy = inner.pre.instantiate(&mut store).map_err(|e| {
            classify(&e, &store, limits).unwrap_or_else(|| Fault::Instantiate(format!("{e:#}")))
        })?;
        Ok(Instance {
            store,
            policy,
            ticker: inner.engine.ticker.clone(),
        })
    }

    /// Calls `configure(settings)` under the limits.
    pub(crate) fn configure(&mut self, settings: &str, limits: &Limits) -> Result<(), Fault> {
        let _ticking = self.ticker.guest_run();
        self.store.data_mut().memory_cap_hit = false;
        deadline::start(&mut self.store, limits.deadline);
        match self.policy.call_configure(&mut self.store, settings) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(Fault::Configure(truncate(&message, MAX_REASON))),
            Err(e) => Err(classify(&e, &self.store, limits).unwrap_or_else(|| host_fault(&e))),
        }
    }

    /// Runs one evaluation. The instance must not be used again after a fault.
    pub(crate) fn evaluate(
        &mut self,
        call: &WitCall,
        limits: &Limits,
    ) -> (Result<Verdict, Fault>, Vec<String>) {
        let state = self.store.data_mut();
        state.logs.clear();
        state.memory_cap_hit = false;
        if let Some(wasi) = &mut state.wasi {
            // What `configure` or an earlier evaluation wrote is not this evaluation's.
            wasi.take_output();
        }
        let ticking = self.ticker.guest_run();
        deadline::start(&mut self.store, limits.deadline);
        let result = match self.policy.call_evaluate(&mut self.store, call) {
            Ok(decision) => verdict(decision),
            Err(e) => Err(classify(&e, &self.store, limits).unwrap_or_else(|| host_fault(&e))),
        };
        drop(ticking);
        let state = self.store.data_mut();
        let mut logs = std::mem::take(&mut state.logs);
        if let Some(wasi) = &mut state.wasi {
            let room = MAX_LOG_LINES.saturating_sub(logs.len());
            let output = wasi.take_output().into_iter().take(room);
            logs.extend(output.map(|line| truncate(&line, MAX_LOG_LINE)));
        }
        (result, logs)
    }
}

/// Names the fault behind a wasmtime error: a deadline, the memory cap, or a trap.
fn classify(error: &wasmtime::Error, store: &Store<GuestState>, limits: &Limits) -> Option<Fault> {
    if store.data().memory_cap_hit {
        return Some(Fault::MemoryLimit(limits.memory_bytes >> 20));
    }
    match error.downcast_ref::<Trap>()? {
        Trap::Interrupt => Some(Fault::Timeout(limits.deadline.as_millis())),
        trap => Some(Fault::Trap(trap.to_string())),
    }
}

/// A call that failed in a host function: a WASI `exit`, or an error such as a full resource
/// table (named by its cause, without the wasm backtrace around it).
fn host_fault(error: &wasmtime::Error) -> Fault {
    match error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        Some(exit) => Fault::Trap(format!("exited with status {}", exit.0)),
        None => Fault::Trap(error.root_cause().to_string()),
    }
}

fn verdict(decision: WitDecision) -> Result<Verdict, Fault> {
    Ok(match decision {
        WitDecision::Allow => Verdict::Allow,
        WitDecision::Deny(reason) => Verdict::Deny {
            reason: truncate(&reason, MAX_REASON),
        },
        WitDecision::Rewrite(rewrite) => {
            if rewrite.arguments.len() > MAX_REWRITE {
                return Err(Fault::Malformed(format!(
                    "rewrite arguments are {} bytes, over the limit of {MAX_REWRITE}",
                    rewrite.arguments.len()
                )));
            }
            let arguments: Map<String, Value> = match serde_json::from_str(&rewrite.arguments) {
                Ok(Value::Object(map)) => map,
                Ok(_) => {
                    return Err(Fault::Malformed(
                        "rewrite arguments are not a JSON object".into(),
                    ));
                }
                Err(e) => {
                    return Err(Fault::Malformed(format!(
                        "rewrite arguments are not JSON: {e}"
                    )));
                }
            };
            Verdict::Rewrite {
                arguments,
                note: truncate(&rewrite.note, MAX_REASON),
            }
        }
    })
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &text[..end], text.len() - end)
}
