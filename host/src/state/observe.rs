//! [`Observation`]: what an executor said about a job, in the state layer's terms.
//!
//! The gateway asks the executor (`sandbox::job_status`, `SlurmRunner::status`) and converts
//! the answer with `From`; the state layer itself never calls an executor, so it is testable
//! with hand-made observations. The mappings are lossless where it matters: every final
//! Slurm phase stays final with its reason, a Slurm job found nowhere is `Missing` (not
//! final, not "completed"), and a local job whose supervisor vanished is `Lost` (final).

use hpcgate_executors::{sandbox, slurm};

use super::job::{JobPhase, JobStatus};
use crate::time::Timestamp;

/// One observation of a job by its executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub status: JobStatus,
    /// When the executor says the job started, if it knows.
    pub started_at: Option<Timestamp>,
    /// When the executor says the job ended, if it knows (final phases only; `now` otherwise).
    pub finished_at: Option<Timestamp>,
}

impl Observation {
    /// An observation with no executor times.
    pub fn new(status: JobStatus) -> Observation {
        Observation {
            status,
            started_at: None,
            finished_at: None,
        }
    }

    /// The executor refused or failed to start the job.
    pub fn start_failed(message: impl Into<String>) -> Observation {
        let mut status = JobStatus::new(JobPhase::StartFailed);
        status.message = Some(message.into());
        Observation::new(status)
    }

    /// The job ended without a recorded outcome and will not be found again (e.g. a
    /// `submitting` record whose start cannot be found after a crash).
    pub fn lost(message: impl Into<String>) -> Observation {
        let mut status = JobStatus::new(JobPhase::Lost);
        status.message = Some(message.into());
        Observation::new(status)
    }
}

impl From<&sandbox::JobState> for Observation {
    fn from(state: &sandbox::JobState) -> Observation {
        use sandbox::{EndReason, ExitInfo};
        let (exit_code, signal) = match state.exit {
            Some(ExitInfo::Code(code)) => (Some(code), None),
            Some(ExitInfo::Signal(sig)) => (None, Some(sig)),
            None => (None, None),
        };
        let phase = match (state.phase, state.reason) {
            (sandbox::JobPhase::Running, _) => JobPhase::Running,
            (_, Some(EndReason::Exited)) if exit_code == Some(0) => JobPhase::Completed,
            (_, Some(EndReason::Exited)) => JobPhase::Failed,
            (_, Some(EndReason::Timeout)) => JobPhase::Timeout,
            (_, Some(EndReason::Cancelled)) => JobPhase::Cancelled,
            (_, Some(EndReason::Oom)) => JobPhase::Oom,
            (_, Some(EndReason::OutputCap)) => JobPhase::OutputCap,
            (_, Some(EndReason::Lost) | None) => JobPhase::Lost,
            (_, Some(EndReason::StartFailed)) => JobPhase::StartFailed,
        };
        let reason = state.reason.map(|r| {
            serde_json::to_value(r)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        });
        Observation {
            status: JobStatus {
                phase,
                reason,
                exit_code,
                signal,
                message: state.message.clone(),
            },
            started_at: Some(Timestamp::from_unix_ms(state.started_at_ms)),
            finished_at: state.finished_at_ms.map(Timestamp::from_unix_ms),
        }
    }
}

impl From<&slurm::JobStatus> for Observation {
    fn from(status: &slurm::JobStatus) -> Observation {
        use slurm::JobPhase as S;
        let phase = match &status.phase {
            S::Pending => JobPhase::Pending,
            S::Running => JobPhase::Running,
            S::Completed => JobPhase::Completed,
            S::Failed => JobPhase::Failed,
            S::Cancelled => JobPhase::Cancelled,
            S::Timeout => JobPhase::Timeout,
            S::Oom => JobPhase::Oom,
            S::Preempted => JobPhase::Preempted,
            S::NodeFail => JobPhase::NodeFail,
            S::Lost => JobPhase::Missing,
            S::Unknown(_) => JobPhase::Unknown,
        };
        let reason = match (&status.reason, &status.slurm_state) {
            (Some(reason), _) => Some(reason.clone()),
            (None, state) => state.clone(),
        };
        Observation::new(JobStatus {
            phase,
            reason,
            exit_code: status.exit_code,
            signal: status.signal,
            message: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(
        phase: sandbox::JobPhase,
        reason: Option<sandbox::EndReason>,
        exit: Option<sandbox::ExitInfo>,
    ) -> sandbox::JobState {
        sandbox::JobState {
            phase,
            started_at_ms: 1_000,
            finished_at_ms: (phase == sandbox::JobPhase::Finished).then_some(2_000),
            supervisor: sandbox::ProcessIdentity {
                pid: 1,
                start_time: 1,
                boot_id: "b".into(),
            },
            sandbox: None,
            sandbox_init: None,
            exit,
            reason,
            stdout_bytes: 0,
            stderr_bytes: 0,
            output_truncated: false,
            limits: None,
            message: None,
        }
    }

    #[test]
    fn local_end_reasons_map_to_phases() {
        use sandbox::{EndReason as R, ExitInfo as E, JobPhase::*};
        let table = [
            (Running, None, None, JobPhase::Running),
            (
                Finished,
                Some(R::Exited),
                Some(E::Code(0)),
                JobPhase::Completed,
            ),
            (
                Finished,
                Some(R::Exited),
                Some(E::Code(3)),
                JobPhase::Failed,
            ),
            (
                Finished,
                Some(R::Exited),
                Some(E::Signal(9)),
                JobPhase::Failed,
            ),
            (
                Finished,
                Some(R::Timeout),
                Some(E::Signal(9)),
                JobPhase::Timeout,
            ),
            (
                Finished,
                Some(R::Cancelled),
                Some(E::Signal(9)),
                JobPhase::Cancelled,
            ),
            (Finished, Some(R::Oom), None, JobPhase::Oom),
            (Finished, Some(R::OutputCap), None, JobPhase::OutputCap),
            (Finished, Some(R::Lost), None, JobPhase::Lost),
            (Finished, Some(R::StartFailed), None, JobPhase::StartFailed),
            (Finished, None, None, JobPhase::Lost),
        ];
        for (phase, reason, exit, expected) in table {
            let obs = Observation::from(&local(phase, reason, exit));
            assert_eq!(obs.status.phase, expected, "{phase:?} {reason:?} {exit:?}");
            assert_eq!(obs.status.phase.is_final(), phase == Finished);
            assert_eq!(obs.started_at, Some(Timestamp::from_unix_ms(1_000)));
        }
        let cancelled = Observation::from(&local(Finished, Some(R::Cancelled), None));
        assert_eq!(cancelled.status.reason.as_deref(), Some("cancelled"));
        assert_eq!(cancelled.finished_at, Some(Timestamp::from_unix_ms(2_000)));
        let killed = Observation::from(&local(Finished, Some(R::Exited), Some(E::Signal(9))));
        assert_eq!(
            (killed.status.exit_code, killed.status.signal),
            (None, Some(9))
        );
    }

    #[test]
    fn slurm_final_states_stay_final_and_lost_is_not_completed() {
        let oom = slurm::JobStatus::from_slurm(
            7,
            "OUT_OF_MEMORY",
            None,
            Some("0:125"),
            slurm::StatusSource::Sacct,
        );
        let obs = Observation::from(&oom);
        assert_eq!(obs.status.phase, JobPhase::Oom);
        assert!(obs.status.phase.is_final());
        let lost = Observation::from(&slurm::JobStatus::lost(7));
        assert_eq!(lost.status.phase, JobPhase::Missing);
        assert!(!lost.status.phase.is_final());
    }
}
