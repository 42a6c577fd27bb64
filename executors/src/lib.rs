//! hpcgate's native executors: they run work once a call has been allowed.
//!
//! Typed requests in, typed results out. This crate knows nothing of MCP, JSON-RPC or
//! wasmtime, and never builds a shell string from input: every process is started from an argv.
//!
//! - [`sandbox`]: bubblewrap sandboxes on the login node, synchronous runs and supervised jobs
//! - [`slurm`]: batch jobs on the cluster, with a lossless state model
//! - [`files`]: file operations scoped to an instance's directories with cap-std
//! - [`host`]: admin-defined host commands (a fixed argv, ambient authority, `host_exec`)
//!
//! Processes are spawned only here (`Command::new` is banned elsewhere by `clippy.toml`).

pub mod files;
pub mod host;
pub mod sandbox;
pub mod slurm;
