//! hpcgate: an MCP gateway that lets AI agents use an HPC cluster safely.
//!
//! Every tool call is first judged by WebAssembly policy components ([`policy`]); only then
//! does a native executor run it (`hpcgate-executors`), and every step is appended to a
//! tamper-evident audit log. See `ARCHITECTURE.md` for the map of the code.
//!
//! - [`policy`]: the policy engine (wasmtime components, the chain, isolation, faults)
//! - [`audit`]: the hash-chained, group-committed audit log, its verification and queries
//! - [`state`]: instances and job records per tenant under the state directory
//! - [`time`]: the one timestamp type and format everything stores
//! - [`auth`]: who is calling (tokens, JWT, Unix peers, `Origin`) and per-tenant rate limits
//! - [`usage`]: disk usage for the host-enforced quotas
//! - [`gateway`]: the one dispatch function (policy → executor → audit) and [`tools`]
//! - [`jobs`]: job records and the job executors (supervised sandbox, Slurm) together
//! - [`mcp`]: the rmcp server over the gateway; [`http`]: its streamable HTTP and Unix-socket
//!   transport; [`resources`]: the documents it offers
//! - [`proxy`]: proxied MCP servers (`<proxy>__<tool>`), discovered at start, run in sandboxes
//! - [`config`]: the TOML configuration, raw and resolved
//! - [`cli`]: the `hpcgate` command line

pub mod audit;
pub mod auth;
pub mod cli;
pub mod config;
pub mod gateway;
pub mod http;
pub mod jobs;
pub mod mcp;
pub mod policy;
pub mod proxy;
pub mod resources;
pub mod state;
pub mod time;
pub mod tools;
pub mod usage;
