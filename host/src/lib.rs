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
//! - [`gateway`]: the one dispatch function (policy → executor → audit) and [`tools`]
//! - [`mcp`]: the rmcp server over the gateway; [`http`]: its streamable HTTP and Unix-socket
//!   transport
//! - [`config`]: the TOML configuration, raw and resolved
//! - [`cli`]: the `hpcgate` command line

pub mod audit;
pub mod cli;
pub mod config;
pub mod gateway;
pub mod http;
pub mod mcp;
pub mod policy;
pub mod state;
pub mod time;
pub mod tools;
