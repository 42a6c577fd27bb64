//! Write hpcgate policies in Rust.
//!
//! A policy is a type implementing [`Policy`]: it is built from the admin's `config` table
//! ([`Policy::configure`]) and judges one [`Call`] at a time ([`Policy::evaluate`]), returning a
//! [`Decision`]. [`export_policy!`] turns the type into the `hpcgate:policy` component exports when
//! compiled for `wasm32-unknown-unknown`; compiled natively the same type is plain Rust, so a
//! policy's logic is unit-tested with `cargo test` like any other code.
//!
//! Helpers for the common jobs: [`glob`] (the documented `*`, `**`, `?` semantics),
//! [`path`] (lexical sandbox-view normalisation) and [`args`] (finding values in nested JSON
//! arguments).
//!
//! [`outcome`] holds what a host's chain decided (each policy's verdict and the final
//! decision), as audit records and `policy test` cases store it.

#[doc(hidden)]
pub mod arena;
pub mod args;
mod call;
mod decision;
pub mod glob;
#[doc(hidden)]
pub mod guest;
pub mod log;
pub mod outcome;
pub mod path;

pub use call::{Call, Phase, Via};
pub use decision::Decision;
pub use serde_json::{Map, Value};

/// A policy: configured once per instance, then asked to judge calls.
///
/// Implementations must be deterministic functions of their configuration and the call: the
/// host gives them no clocks, randomness or I/O, and offline replay depends on it.
pub trait Policy: Sized + Send {
    /// Builds the policy from its `config` table (JSON text). An error names the bad key and
    /// says what is expected; the gateway refuses to load the policy with that message.
    fn configure(settings: &str) -> Result<Self, String>;

    /// Judges one call.
    fn evaluate(&self, call: &Call) -> Decision;

    /// Whether [`evaluate`](Policy::evaluate) reads `call.arguments` for this call. `call` is
    /// complete except for `arguments`, which is empty. Answering `false` skips parsing the
    /// arguments (the most expensive part of a small policy's evaluation); `arguments` is then
    /// empty in `evaluate`. The default parses them always.
    fn needs_arguments(&self, call: &Call) -> bool {
        let _ = call;
        true
    }
}

/// The WIT bindings, generated for the `policy` world. Only exists when compiled for wasm32.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "policy",
        pub_export_macro: true,
        default_bindings_module: "hpcgate_policy_sdk::bindings",
    });
}

/// Exports a [`Policy`] type as the component's `configure` and `evaluate`.
///
/// ```ignore
/// struct MyPolicy;
/// impl hpcgate_policy_sdk::Policy for MyPolicy { /* ... */ }
/// hpcgate_policy_sdk::export_policy!(MyPolicy);
/// ```
#[macro_export]
macro_rules! export_policy {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[global_allocator]
        static HPCGATE_ALLOCATOR: $crate::arena::Arena = $crate::arena::Arena::new();

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            static SLOT: ::std::sync::Mutex<::core::option::Option<$ty>> =
                ::std::sync::Mutex::new(::core::option::Option::None);

            struct HpcgateGuest;

            impl $crate::bindings::Guest for HpcgateGuest {
                fn configure(
                    settings: ::std::string::String,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::guest::configure::<$ty>(&SLOT, &settings)
                }

                fn evaluate(
                    call: $crate::bindings::hpcgate::policy::types::Call,
                ) -> $crate::bindings::hpcgate::policy::types::Decision {
                    let decision = $crate::guest::evaluate::<$ty>(&SLOT, call);
                    // Any later evaluation is on a reused instance.
                    HPCGATE_ALLOCATOR.recycle();
                    decision
                }
            }

            $crate::bindings::export!(HpcgateGuest);
        };
    };
}
