//! The bubblewrap sandbox executor: hardened sandboxes for short runs and supervised jobs.
//!
//! - [`SandboxSpec`] describes one sandbox; [`bwrap_argv`] turns it into bwrap's argv (also
//!   used by the Slurm executor on compute nodes).
//! - [`run_sync`] runs a short command and waits for it (bounded by the wall time);
//!   [`run_attached`] does the same with the caller's stdin, stdout and stderr (the CLI).
//! - [`spawn_service`] starts a long-lived process that talks over its pipes (a proxied MCP
//!   server); the caller owns the [`Service`] and kills it.
//! - [`spawn_job`] starts a job under a detached supervisor process (`hpcgate-supervisor`, or
//!   the gateway binary re-executing into [`supervisor_main`]) that owns the sandbox, enforces
//!   limits and writes the job state atomically into a host-side job directory the sandbox
//!   never sees. [`job_status`], [`wait_job`], [`cancel_job`], [`tail`] and [`attach_job`]
//!   work from that directory alone, so they keep working after a gateway restart: processes
//!   are recognised by pid plus start time (and boot id), never by name.
//! - Limits: cgroup v2 when a delegated cgroup is usable, else cgroup v1 for each of pids,
//!   memory and CPUs whose controller is usable, rlimits plus a resident-memory watchdog for
//!   the rest; every result says which mechanism enforced which limit.
//!
//! Invariants, stated as absences:
//! - no shell string is ever built: the command reaches bwrap after `--`, element by element;
//! - no environment variable, fd above 2, capability, network, host `$HOME`, `/etc/shadow`
//!   or host pid reaches a sandbox unless the spec asks for it;
//! - no job output is read or written through a path the sandbox can see or a symlink;
//! - no process is recognised by name: only pid + start time + boot id, signalled via pidfd;
//! - no sandbox outlives the wall time, its supervisor, or (for `run_sync`) the gateway.
//!
//! Using it from the gateway: call [`run_sync`] inside the blocking bridge; for jobs, give
//! [`spawn_job`] a fresh directory under the state directory (outside every bind) and a
//! [`SupervisorCommand`] — the `hpcgate-supervisor` binary, or the gateway itself through
//! [`SupervisorCommand::reexec`] with a hidden subcommand whose handler calls
//! [`supervisor_main`] before any thread starts. Everything else takes that directory.

mod argv;
mod cgroup;
mod cgroup_v1;
mod error;
mod job;
mod limits;
mod monitor;
mod proc;
mod run_attached;
mod run_sync;
mod scheduler;
mod seccomp;
mod service;
mod spawn;
mod spec;
mod validate;

pub use argv::bwrap_argv;
pub use error::SandboxError;
pub use job::{
    BATCH_FLAG, CANCEL_MARKER, CANCEL_SIGNAL_NAME, JobHandle, JobPhase, JobState, OutputStream,
    SupervisorCommand, Tail, attach_job, batch_main, batch_state, cancel_job, job_status,
    request_cancel, spawn_job, supervisor_cli, supervisor_main, supervisor_pidfd, tail, wait_job,
    write_batch_request,
};
pub use limits::{EnforcedLimit, EnforcedLimits, LimitMechanism};
pub use monitor::{EndReason, ExitInfo};
pub use proc::ProcessIdentity;
pub use run_attached::{AttachedResult, run_attached};
pub use run_sync::{RunResult, run_sync};
pub use service::{Service, ServicePipes, spawn_service};
pub use spec::{
    Bind, DEFAULT_BWRAP, ETC_ESSENTIALS, EnvSpec, HostUser, Limits, Network, OUTPUT_MOUNT,
    SandboxIdentity, SandboxSpec, SystemMount, WORKSPACE_MOUNT,
};
pub use validate::{MAX_STOP_GRACE_S, validate, validate_limits};
