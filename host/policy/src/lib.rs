//! The policy engine: WebAssembly components that judge every tool call.
//!
//! - [`PolicyEngine`] owns the wasmtime engine (pooling allocator, epoch deadlines) and the
//!   on-disk compile cache; it loads [`PolicyModule`]s from a path or `stock:<name>`.
//! - [`Chain`] runs configured policies in order with the contract's semantics (tenant globs,
//!   first enforced deny stops, rewrites pass on, monitor mode, list phase) and returns a
//!   [`ChainOutcome`]: the final decision plus every policy's decision with its module digest.
//! - Isolation: every evaluation gets a fresh instance unless an admin opts a policy into reuse.
//!   Fresh instances are prepared (instantiated and configured) ahead of the call on a background
//!   thread and dropped off the call path, so isolation costs the call path almost nothing.
//! - A fault (trap, timeout, memory cap, malformed decision) is a deny naming the policy and the
//!   fault: policies fail closed, and a fault is data, not an error.

pub mod bench;
mod bindings;
mod cache;
pub mod cases;
mod chain;
mod deadline;
mod engine;
mod instance;
mod module;
pub mod normalize;
mod pool;
mod snapshot;
pub mod stock;
mod ticker;
mod wasi;

pub use chain::{Chain, ChainError, ChainPolicy, Mode};
pub use engine::{EngineSettings, PolicyEngine};
pub use hpcgate_policy_sdk::outcome::{
    ChainOutcome, DecisionKind, FinalDecision, PolicyDecision, Verdict,
};
pub use hpcgate_policy_sdk::{Call, Phase, Via};
pub use instance::Fault;
pub use module::{LoadError, ModuleSource, PolicyModule};
pub use pool::SnapshotState;
