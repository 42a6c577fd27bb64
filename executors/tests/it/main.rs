//! hpcgate-executors' integration tests, one binary: a module per area (each was once a test
//! binary of its own; linking them was most of the build), with the shared set-up of the files
//! tests in `files_harness`, of the sandbox tests in `sandbox_harness`.
//!
//! Rows that need a process of their own (a controlling terminal, a secret in the gateway's
//! environment, a gateway to SIGKILL, a hostile `SBATCH_*` environment) re-execute this binary
//! for one `#[ignore]`d test, by its full path: see [`reexec`].

// Tests start the gateway, clients and helper processes themselves.
#![allow(clippy::disallowed_methods)]

mod files_harness;
mod sandbox_harness;

mod files_attacks;
mod files_copy;
mod files_cross_fs;
mod files_ops;
mod files_races;
mod sandbox_attacks;
mod sandbox_bench;
mod sandbox_cgroup_v1;
mod sandbox_env;
mod sandbox_gateway_kill;
mod sandbox_smoke;
mod sandbox_stop;
mod sandbox_tty;
mod slurm;

use std::process::Command;

/// This test binary, to run only the `#[ignore]`d test `test` (its full path, e.g.
/// `sandbox_tty::terminal_role_when_reexecuted`) in a process of its own. The caller adds the
/// environment the test needs and checks the outcome: a filter that matches nothing runs
/// nothing and succeeds, so every caller checks for an effect of the test itself.
pub fn reexec(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args(["--exact", test, "--ignored"]);
    command
}
