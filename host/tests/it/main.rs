//! hpcgate's integration tests, one binary: a module per area (each was once a test binary of
//! its own; linking 31 binaries was most of the build), shared helpers in `support/`.
//!
//! Tests that need a process of their own (a peak-memory measurement, clients run as other
//! uids, worker processes) re-execute this binary for one `#[ignore]`d test, by its full path
//! (`--exact <module>::<test> --ignored`): see `support::reexec`.

// Tests start the gateway, clients and helper processes themselves.
#![allow(clippy::disallowed_methods)]

mod support;

mod audit_checkpoints;
mod audit_cli;
mod audit_disk_full;
mod audit_log;
mod audit_redaction;
mod audit_verify;
mod bench_gateway;
mod cli;
mod cli_instance;
mod code_mode;
mod code_mode_attacks;
mod code_mode_shared;
mod code_mode_slurm;
mod code_mode_slurm_restart;
mod code_mode_stop;
mod config_cli;
mod dav;
mod dav_attacks;
mod dav_conditions;
mod dav_limits;
mod doctor;
mod gateway;
mod gateway_jobs;
mod gateway_quotas;
mod gateway_slurm;
mod gateway_tasks;
mod gateway_tenancy;
mod http_access;
mod http_tenancy;
mod import_ns_hpc;
mod kill_recovery;
mod mcp_http;
mod mcp_python;
mod mcp_results;
mod mcp_slurm;
mod mcp_sse;
mod mcp_stdio;
mod mcp_tasks;
mod mcp_typescript;
mod metrics;
mod oauth;
mod package;
mod proxy_archive;
mod proxy_audit;
mod proxy_filesystem;
mod proxy_gateway;
mod proxy_lifecycle;
mod proxy_limits;
mod proxy_mcp;
mod proxy_tenancy;
mod snapshots;
mod state_concurrency;
mod state_instances;
mod state_jobs;
mod state_tenancy;
mod systemd;
mod telemetry;
mod tenant_cli;
mod tool_schemas;
mod uds_tenancy;
