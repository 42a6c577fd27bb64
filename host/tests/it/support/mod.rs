//! Helpers shared by the test modules, one module per area; each test module uses its own
//! subset.

pub mod audit;
pub mod code_mode;
pub mod dav;
pub mod disk;
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

/// Whether this test runs as root, which `needs` (what the test does that needs it); if not,
/// it says on stderr that it skipped, so that a pass without root is not mistaken for a check.
pub fn root_else_skip(needs: &str) -> bool {
    use std::io::Write as _;
    let root = rustix::process::geteuid().is_root();
    if !root {
        let _ = writeln!(std::io::stderr(), "skipped: {needs} needs root");
    }
    root
}
