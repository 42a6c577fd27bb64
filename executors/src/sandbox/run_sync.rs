//! `run_sync`: run a short command in the sandbox and wait for it, within its limits.
//!
//! The sandbox is a child of the calling thread and bwrap runs with `--die-with-parent`: if
//! the gateway dies, the sandbox dies with it (no orphans). Because the parent-death signal
//! follows the *thread*, call this from a thread that lives until it returns (e.g. inside
//! `spawn_blocking`, never by handing the child to another thread).
//!
//! Known window: bwrap arms the namespace's parent-death signal only at the end of its
//! set-up (a few ms). If the gateway is SIGKILLed inside that window, bwrap's half-built
//! child stays behind, blocked before it ever runs the command (observed: it waits for the
//! uid map its dead parent would have written). It runs nothing but is a leaked process;
//! a delegated cgroup (`cgroup.kill`) closes the window.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::error::SandboxError;
use super::limits::EnforcedLimits;
use super::monitor::{EndReason, ExitInfo, Watch, monitor};
use super::spawn::{Containment, prepare, sandbox_init};
use super::spec::SandboxSpec;

/// The result of a synchronous sandbox run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    pub exit: ExitInfo,
    pub reason: EndReason,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Some stdout was dropped because the output cap was reached.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
    pub limits: EnforcedLimits,
}

/// Runs `command` in a sandbox built from `spec` and waits for it. `stdin` is fed to the
/// command (then closed); `None` gives it `/dev/null`. Output beyond
/// `spec.limits.output_bytes` (stdout and stderr together) kills the sandbox.
pub fn run_sync(
    spec: &SandboxSpec,
    command: &[String],
    stdin: Option<&[u8]>,
) -> Result<RunResult, SandboxError> {
    let started = Instant::now();
    let name = format!("hpcgate-run-{}-{}", std::process::id(), unique());
    let stdin_mode = if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    let mut prepared = prepare(spec, command, stdin_mode, &name, Containment::Own)?;
    let mut child = prepared.spawn().map_err(SandboxError::Spawn)?;
    let init = sandbox_init(&mut prepared.info, child.id() as i32);

    let feeder = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => {
            let data = data.to_vec();
            // A broken pipe only means the command did not read all of its input.
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            }))
        }
        _ => None,
    };

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let never = || false;
    let watch = Watch {
        wall_time: spec.limits.wall_time,
        stop_grace: spec.limits.stop_grace,
        output_bytes: spec.limits.output_bytes,
        watch_memory_bytes: prepared.plan.watch_memory_bytes,
        cgroup: prepared.cgroup.as_ref(),
        init: init.as_ref(),
        cancel_requested: &never,
        terminated: &never,
        started,
    };
    let outcome = monitor(&mut child, [&mut out, &mut err], &watch);
    if let Some(cg) = prepared.cgroup.take() {
        cg.remove();
    }
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let outcome = outcome.map_err(SandboxError::Monitor)?;
    Ok(RunResult {
        exit: outcome.exit,
        reason: outcome.reason,
        stdout: out,
        stderr: err,
        stdout_truncated: outcome.truncated[0],
        stderr_truncated: outcome.truncated[1],
        duration: outcome.duration,
        limits: prepared.plan.enforced,
    })
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
