//! The bubblewrap sandbox executor: hardened sandboxes for short runs and supervised jobs.
//!
//! - [`SandboxSpec`] describes one sandbox; [`bwrap_argv`] turns it into bwrap's argv (also
//!   used by the Slurm executor on compute nodes).
//! - [`run_sync`] runs a short command and waits for it (bounded by the wall time).
//! - [`spawn_job`] starts a job under a detached supervisor process (`hpcgate-supervisor`, or
//!   the gateway binary re-executing into [`supervisor_main`]) that owns the sandbox, enforces
//!   limits and writes the job state atomically into a host-side job directory the sandbox
//!   never sees. [`job_status`], [`wait_job`], [`cancel_job`], [`tail`] and [`attach_job`]
//!   work from that directory alone, so they keep working after a gateway restart: processes
//!   are recognised by pid plus start time (and boot id), never by name.
//! - Limits: cgroup v2 when a delegated cgroup is usable, rlimits plus a resident-memory
//!   watchdog otherwise; every result says which mechanism enforced which limit.

mod argv;
mod cgroup;
mod error;
mod job;
mod limits;
mod monitor;
mod proc;
mod run_sync;
mod spawn;
mod spec;
mod validate;

pub use argv::bwrap_argv;
pub use error::SandboxError;
pub use job::{
    JobHandle, JobPhase, JobState, OutputStream, SupervisorCommand, Tail, attach_job, cancel_job,
    job_status, spawn_job, supervisor_main, tail, wait_job,
};
pub use limits::{EnforcedLimit, EnforcedLimits, LimitMechanism};
pub use monitor::{EndReason, ExitInfo};
pub use proc::ProcessIdentity;
pub use run_sync::{RunResult, run_sync};
pub use spec::{
    Bind, DEFAULT_BWRAP, ETC_ESSENTIALS, EnvSpec, HostUser, Limits, Network, OUTPUT_MOUNT,
    SandboxIdentity, SandboxSpec, SystemMount, WORKSPACE_MOUNT,
};
pub use validate::validate;
