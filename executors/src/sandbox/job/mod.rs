//! Supervised sandbox jobs: start, status, wait, cancel, tail and re-attach.
//!
//! Everything goes through a host-side job directory (see [`state`] for its files), so any
//! gateway process — including one restarted after a crash — can operate on a job.

mod cancel;
mod spawn;
mod state;
mod status;
mod supervisor;
mod tail;

pub use cancel::cancel_job;
pub use spawn::{SupervisorCommand, spawn_job};
pub use state::{JobPhase, JobState};
pub use status::{JobHandle, attach_job, job_status, wait_job};
pub use supervisor::supervisor_main;
pub use tail::{OutputStream, Tail, tail};
