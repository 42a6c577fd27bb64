//! What a Slurm job's directory adds to what Slurm says of it. The job's body is the
//! supervisor (`__supervise --batch`), which records how the sandbox ended; Slurm sees only the
//! supervisor's exit code.

use std::path::Path;

use hpcgate_executors::sandbox::{self, EndReason, JobPhase as Supervised};
use hpcgate_executors::slurm::{self, JobPhase as Queue};

use crate::state::Observation;

/// The job as Slurm reports it (`status`), told more precisely by the supervisor's record in
/// `dir` where Slurm cannot know:
/// - the sandbox was ended at its output cap or wall time, or never started;
/// - Slurm no longer knows the job (no accounting, and older than `MinJobAge`), but the
///   record says how it ended.
pub(super) fn observation(status: &slurm::JobStatus, dir: Option<&Path>) -> Observation {
    let recorded = dir.map(sandbox::batch_state);
    match recorded {
        Some(Ok(ended)) if ended.phase == Supervised::Finished => {
            let said_more = !matches!(ended.reason, Some(EndReason::Exited) | None);
            if (status.phase.is_final() && said_more) || status.phase == Queue::Lost {
                return Observation::from(&ended);
            }
            Observation::from(status)
        }
        // No record at all: the supervisor never ran, or could not write into the directory.
        Some(Err(_)) if status.phase == Queue::Failed => {
            let mut observation = Observation::from(status);
            observation.status.message = Some(
                "the job ended before its sandbox started (its supervisor recorded nothing): \
                 the gateway's operator finds why in the job's slurm.log; check that the \
                 compute node has hpcgate at the gateway's path"
                    .to_owned(),
            );
            observation
        }
        _ => Observation::from(status),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use slurm::StatusSource::Scontrol;

    use super::*;
    use crate::state::JobPhase;

    /// A job directory whose supervisor recorded `reason` and `exit`.
    fn recorded(reason: &str, exit: serde_json::Value) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let state = json!({
            "phase": "finished", "started_at_ms": 1, "finished_at_ms": 2,
            "supervisor": {"pid": 1, "start_time": 1, "boot_id": "b"},
            "sandbox": null, "sandbox_init": null, "exit": exit, "reason": reason,
            "stdout_bytes": 0, "stderr_bytes": 0, "output_truncated": false,
            "limits": null, "message": null,
        });
        std::fs::write(dir.path().join("state.json"), state.to_string()).unwrap();
        dir
    }

    fn slurm(state: &str, exit: &str) -> slurm::JobStatus {
        slurm::JobStatus::from_slurm(7, state, None, Some(exit), Scontrol)
    }

    #[test]
    fn the_supervisor_says_why_when_slurm_cannot() {
        let capped = recorded("output_cap", json!({"signal": 9}));
        let seen = observation(&slurm("FAILED", "137:0"), Some(capped.path()));
        assert_eq!(seen.status.phase, JobPhase::OutputCap);
        // An ordinary exit: Slurm's own words stay.
        let exited = recorded("exited", json!({"code": 3}));
        let seen = observation(&slurm("FAILED", "3:0"), Some(exited.path()));
        assert_eq!(
            (seen.status.phase, seen.status.reason.as_deref()),
            (JobPhase::Failed, Some("FAILED"))
        );
    }

    #[test]
    fn a_job_slurm_forgot_ends_as_its_supervisor_recorded() {
        let exited = recorded("exited", json!({"code": 0}));
        let forgotten = slurm::JobStatus::lost(7);
        let seen = observation(&forgotten, Some(exited.path()));
        assert_eq!(seen.status.phase, JobPhase::Completed);
    }

    #[test]
    fn a_failure_before_any_record_says_where_to_look() {
        let empty = tempfile::tempdir().unwrap();
        let seen = observation(&slurm("FAILED", "127:0"), Some(empty.path()));
        assert_eq!(seen.status.phase, JobPhase::Failed);
        let message = seen.status.message.unwrap();
        assert!(message.contains("slurm.log"), "{message}");
        assert!(!message.contains(&*empty.path().to_string_lossy()));
    }
}
