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

pub use cancel::{cancel_job, request_cancel};
pub use spawn::{SupervisorCommand, spawn_job, write_batch_request};
pub use state::{CANCEL as CANCEL_MARKER, JobPhase, JobState};
pub use status::{JobHandle, attach_job, batch_state, job_status, supervisor_pidfd, wait_job};
pub use supervisor::{BATCH_FLAG, CANCEL_SIGNAL_NAME, batch_main, supervisor_cli, supervisor_main};
pub use tail::{OutputStream, Tail, tail};
