//! `run_attached`: run a command in the sandbox with the caller's stdin, stdout and stderr,
//! and wait for it (the CLI's `hpcgate bwrap` and `hpcgate instance enter`).
//!
//! The same hardened spec and limits as [`super::run_sync`] and jobs, with one difference:
//! the three standard streams are the caller's own (a terminal, a pipe, a file), not pipes
//! the monitor reads, so the output cap does not apply — the output goes where the caller
//! already could write. `--new-session` stays: the sandbox has no controlling terminal, so a
//! process inside cannot push keystrokes into the caller's terminal (TIOCSTI) once the
//! sandbox ends; the price is that an interactive shell has no job control and the terminal's
//! Ctrl-C reaches the caller, not the sandbox (by default the caller dies, and the sandbox
//! with it).
//!
//! Like `run_sync`, the sandbox is a child of the calling thread with a parent-death signal:
//! it never outlives the caller.

use std::process::Stdio;
use std::time::Instant;

use super::error::SandboxError;
use super::monitor::{EndReason, ExitInfo, Watch, monitor};
use super::spawn::{Containment, prepare, sandbox_init};
use super::spec::SandboxSpec;

/// How an attached run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachedResult {
    pub exit: ExitInfo,
    pub reason: EndReason,
}

/// Runs `command` in a sandbox built from `spec` with the caller's standard streams and waits
/// for it, within the spec's wall time and memory limits.
pub fn run_attached(
    spec: &SandboxSpec,
    command: &[String],
) -> Result<AttachedResult, SandboxError> {
    let started = Instant::now();
    let name = format!("hpcgate-attached-{}", std::process::id());
    let mut prepared = prepare(spec, command, Stdio::inherit(), &name, Containment::Own)?;
    prepared
        .command
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    let mut child = prepared.spawn().map_err(SandboxError::Spawn)?;
    let init = sandbox_init(&mut prepared.info, child.id() as i32);
    let never = || false;
    let watch = Watch {
        wall_time: spec.limits.wall_time,
        stop_grace: spec.limits.stop_grace,
        output_bytes: u64::MAX,
        watch_memory_bytes: prepared.plan.watch_memory_bytes,
        cgroup: prepared.cgroup.as_ref(),
        init: init.as_ref(),
        cancel_requested: &never,
        terminated: &never,
        started,
    };
    // No pipes to read: the sinks stay empty.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let outcome = monitor(&mut child, [&mut out, &mut err], &watch);
    if let Some(cg) = prepared.cgroup.take() {
        cg.remove();
    }
    let outcome = outcome.map_err(SandboxError::Monitor)?;
    Ok(AttachedResult {
        exit: outcome.exit,
        reason: outcome.reason,
    })
}
