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
    let asked_to_stop = dir.is_some_and(|d| d.join(sandbox::CANCEL_MARKER).exists());
    match recorded {
        Some(Ok(ended)) if ended.phase == Supervised::Finished => {
            let said_more = !matches!(ended.reason, Some(EndReason::Exited) | None);
            if (status.phase.is_final() && said_more) || status.phase == Queue::Lost {
                return Observation::from(&ended);
            }
            Observation::from(status)
        }
        // The record is not (yet) readable, say through a network file system's cache: a job
        // ended after a cancel asked it to stop (its marker is there) ends as cancelled, even
        // when it saved its work and Slurm saw it complete.
        _ if matches!(status.phase, Queue::Completed | Queue::Failed) && asked_to_stop => {
            let mut observation = Observation::from(status);
            observation.status.phase = crate::state::JobPhase::Cancelled;
            observation
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

/// Seconds from a batch job's start to Slurm's own end of it before which the supervisor
/// starts its stop: the supervisor starts a little after Slurm's clock does.
const BATCH_STOP_MARGIN_S: u64 = 15;

/// The wall time of a Slurm job's sandbox: its time limit, but ended (`SIGTERM`, then the
/// grace) before Slurm's own end of the job at that limit rounded up to whole minutes, which
/// would signal bwrap too and leave no grace; never shortened by more than half. The job's
/// `--time` stays the limit asked for, within the partition's and QOS's maximum.
pub(super) fn wall_time_s(limit_s: u64, grace_s: u64) -> u64 {
    if grace_s == 0 {
        return limit_s;
    }
    let slurm_s = limit_s.div_ceil(60).max(1) * 60;
    let before_slurm = slurm_s.saturating_sub(grace_s + BATCH_STOP_MARGIN_S);
    limit_s.min(before_slurm.max(limit_s / 2)).max(1)
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
    fn a_job_asked_to_stop_is_cancelled_though_its_record_is_not_there_yet() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(sandbox::CANCEL_MARKER), "").unwrap();
        let seen = observation(&slurm("COMPLETED", "0:0"), Some(dir.path()));
        assert_eq!(seen.status.phase, JobPhase::Cancelled);
        // Ended by the SIGTERM: Slurm says FAILED, and it is no failure to start.
        let seen = observation(&slurm("FAILED", "143:0"), Some(dir.path()));
        assert_eq!(seen.status.phase, JobPhase::Cancelled);
        let unasked = tempfile::tempdir().unwrap();
        let seen = observation(&slurm("COMPLETED", "0:0"), Some(unasked.path()));
        assert_eq!(seen.status.phase, JobPhase::Completed);
    }

    #[test]
    fn a_batch_sandbox_stops_before_slurm_does_with_its_grace() {
        // Slurm ends the job at the limit rounded up to minutes; the sandbox is asked to stop
        // its grace and a margin before, unless the rounding leaves room.
        assert_eq!(wall_time_s(3600, 10), 3575);
        assert_eq!(wall_time_s(90, 10), 90);
        assert_eq!(wall_time_s(86_400, 20), 86_365);
        // No grace, nothing to make room for.
        assert_eq!(wall_time_s(3600, 0), 3600);
        // Never more than half shorter; never zero.
        assert_eq!(wall_time_s(60, 600), 30);
        assert_eq!(wall_time_s(1, 600), 1);
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
