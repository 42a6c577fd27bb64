//! Host-side bindings for the `hpcgate:policy` world, generated from `wit/`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "policy",
});

pub use hpcgate::policy::log::Level;
pub use hpcgate::policy::types::{
    Call as WitCall, Counter, Decision as WitDecision, Phase as WitPhase, Via as WitVia,
};
