//! Helpers shared by the test modules, one module per area; each test module uses its own
//! subset.

pub mod audit;
pub mod gateway;
pub mod matrix;
pub mod proxy;
pub mod served;
#[path = "../../../../tests/shared.rs"]
pub mod shared;
pub mod slurm;
pub mod state;

use std::process::Command;

/// This test binary, to run only the `#[ignore]`d test `test` (its full path, e.g.
/// `state_concurrency::worker`) in a process of its own. The caller adds the environment the
/// test needs and checks the outcome: a filter that matches nothing runs nothing and succeeds,
/// so a caller that cannot tell from the test's effects checks for `1 passed` on stdout.
pub fn reexec(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args(["--exact", test, "--ignored"]);
    command
}
