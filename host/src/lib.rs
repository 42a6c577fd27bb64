//! hpcgate: an MCP gateway that lets AI agents use an HPC cluster safely.
//!
//! Every tool call is first judged by WebAssembly policy components ([`policy`]); only then
//! does a native executor run it (`hpcgate-executors`), and every step is appended to a
//! tamper-evident audit log ([`audit`]). See `ARCHITECTURE.md` for the map of the code.
//!
//! - [`policy`]: the policy engine, crate `hpcgate-policy-engine` (wasmtime components, the
//!   chain, isolation, faults, offline testing)
//! - [`audit`]: the audit log, crate `hpcgate-audit` (hash-chained, group-committed, verified,
//!   queried); [`time`]: the one timestamp type and format everything stores
//! - [`gateway`]: the call as one value and its one pipeline (policy → executor → audit), over
//!   [`tools`]
//! - [`state`]: instances and job records per tenant under the state directory
//! - [`auth`]: who is calling (tokens, JWT, Unix peers, `Origin`) and per-tenant rate limits
//! - [`usage`]: disk usage for the host-enforced quotas
//! - [`jobs`]: job records and the job executors (supervised sandbox, Slurm) together
//! - [`mcp`]: the rmcp server over the gateway; [`http`]: its streamable HTTP and Unix-socket
//!   transport ([`activation`]: the socket systemd passes), [`sse`] the legacy HTTP+SSE one;
//!   [`resources`]: the documents it
//!   offers; [`dav`]: WebDAV at `/dav` on the same app, a door into the same pipeline
//! - [`metrics`]: what the gateway counts and times, served at `GET /metrics`;
//!   [`telemetry`]: a trace span per call, exported over OTLP
//! - [`proxy`]: proxied MCP servers (`<proxy>__<tool>`), discovered at start, run in sandboxes
//! - [`config`]: the TOML configuration, raw and resolved
//! - [`cli`]: the `hpcgate` command line

pub use hpcgate_audit as audit;
pub use hpcgate_audit::time;
pub use hpcgate_policy_engine as policy;

pub mod activation;
pub mod auth;
mod bounded_json;
pub mod cli;
pub mod code_mode;
pub mod config;
pub mod dav;
pub mod gateway;
pub mod http;
pub mod jobs;
pub mod mcp;
pub mod metrics;
mod min_rate;
mod permits;
pub mod proxy;
pub mod resources;
pub mod sse;
pub mod state;
pub mod telemetry;
pub mod tools;
pub mod usage;
