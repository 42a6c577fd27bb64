//! `refresh` and `set_handle`: record what the executor said about a job.
//!
//! Rules, in one place (`apply`):
//! - a final record never changes again (first final observation wins), so repeated polls of
//!   a finished job neither flip its state nor produce new "state changed" events;
//! - reaching a final phase sets `finished_at` — the executor's time if it gave one, else
//!   now, never before `submitted_at` — for cancelled jobs too;
//! - `started_at` is set once, from the executor or at the first `running` observation;
//! - a job its executor has not found for [`MISSING_FOR`] in a row is `lost`, final: Slurm
//!   forgets an ended job `MinJobAge` after its end where no accounting database keeps it, and
//!   a job missing for good would count against `max_running_jobs` for ever;
//! - the record is rewritten only when something changed; [`Refreshed`] says what changed,
//!   so the gateway audits each transition exactly once.

use super::State;
use super::error::StateError;
use super::id::{JobId, TenantName};
use super::job::{ExecutorHandle, JobPhase, JobRecord};
use super::jobs::{read_record, save_record};
use super::lock::TenantLock;
use super::observe::Observation;
use crate::time::Timestamp;

/// The record after a refresh, and what the refresh changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refreshed {
    pub record: JobRecord,
    /// The status (phase, reason, exit, message) differs from before.
    pub changed: bool,
    /// This refresh moved the job into a final phase.
    pub became_final: bool,
}

impl State {
    /// Records an observation of the job (see the module doc for the rules).
    pub fn refresh(
        &self,
        tenant: &TenantName,
        job_id: &JobId,
        observation: Observation,
    ) -> Result<Refreshed, StateError> {
        let paths = self.tenant(tenant);
        let _lock = TenantLock::acquire(&paths)?;
        let mut record = read_record(&paths, tenant, job_id)?;
        let (changed, became_final) = apply(&mut record, observation, Timestamp::now());
        if changed {
            save_record(&paths, &record)?;
        }
        Ok(Refreshed {
            record,
            changed,
            became_final,
        })
    }

    /// Stores the executor handle once the executor accepted the job, with the executor's
    /// first observation. `HandleAlreadySet` if the job already has one, or has ended (a
    /// reconciliation took its start for a crashed one): the caller stops what it started.
    pub fn set_handle(
        &self,
        tenant: &TenantName,
        job_id: &JobId,
        handle: ExecutorHandle,
        observation: Observation,
    ) -> Result<Refreshed, StateError> {
        let paths = self.tenant(tenant);
        let _lock = TenantLock::acquire(&paths)?;
        let mut record = read_record(&paths, tenant, job_id)?;
        if record.handle.is_some() || record.is_final() {
            return Err(StateError::HandleAlreadySet {
                id: job_id.to_string(),
            });
        }
        record.handle = Some(handle);
        let now = Timestamp::now();
        let (changed, became_final) = apply(&mut record, observation, now);
        record.updated_at = now;
        save_record(&paths, &record)?;
        Ok(Refreshed {
            record,
            changed,
            became_final,
        })
    }
}

/// How long a job may stay `missing` (its executor finds it nowhere) before it is `lost`.
pub const MISSING_FOR: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Applies `observation` to `record`; returns `(changed, became_final)`.
pub(crate) fn apply(
    record: &mut JobRecord,
    mut observation: Observation,
    now: Timestamp,
) -> (bool, bool) {
    if record.is_final() {
        return (false, false);
    }
    let before = record.clone();
    // Missing again, as it has been since the record last changed, for long enough.
    if observation.status.phase == JobPhase::Missing
        && record.status.phase == JobPhase::Missing
        && record.updated_at <= now.minus(MISSING_FOR)
    {
        let status = &mut observation.status;
        status.phase = JobPhase::Lost;
        status.message = Some(format!(
            "the executor has not found this job for {} minutes (Slurm forgets an ended job \
             after its MinJobAge unless an accounting database keeps it); its outcome is unknown: \
             check its output",
            MISSING_FOR.as_secs() / 60
        ));
    }
    let Observation {
        status,
        started_at,
        finished_at,
    } = observation;
    let phase = status.phase;
    record.status = status;
    if record.started_at.is_none() {
        record.started_at = started_at.or((phase == JobPhase::Running).then_some(now));
    }
    let became_final = phase.is_final();
    if became_final {
        let at = finished_at.unwrap_or(now).max(record.submitted_at);
        record.finished_at = Some(at);
    }
    let changed = record.status != before.status || record.started_at != before.started_at;
    if changed {
        record.updated_at = now;
    }
    (changed, became_final)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{InstanceId, JobMode, JobStatus, Resources};

    fn record() -> JobRecord {
        JobRecord {
            version: 1,
            job_id: JobId::parse("j-aaaaaaaaaaaaaaaa").unwrap(),
            tenant: TenantName::parse("t").unwrap(),
            instance: InstanceId::parse("i").unwrap(),
            mode: JobMode::Local,
            command: vec!["true".into()],
            resources: Resources::default(),
            submitted_at: Timestamp::from_unix_ms(1000),
            handle: None,
            status: JobStatus::new(JobPhase::Submitting),
            started_at: None,
            finished_at: None,
            updated_at: Timestamp::from_unix_ms(1000),
        }
    }

    /// A job missing for [`MISSING_FOR`] in a row is lost for good; a job found again in
    /// between starts the count again.
    #[test]
    fn a_job_missing_long_enough_is_lost() {
        let mut r = record();
        let at = |minutes: u64| Timestamp::from_unix_ms(1000 + minutes * 60_000);
        let missing = || Observation::new(JobStatus::new(JobPhase::Missing));
        let running = Observation::new(JobStatus::new(JobPhase::Running));
        assert_eq!(apply(&mut r, missing(), at(1)), (true, false));
        assert_eq!(apply(&mut r, missing(), at(10)), (false, false));
        assert_eq!(apply(&mut r, running, at(12)), (true, false));
        assert_eq!(apply(&mut r, missing(), at(13)), (true, false));
        assert_eq!(apply(&mut r, missing(), at(27)), (false, false));
        assert_eq!(apply(&mut r, missing(), at(28)), (true, true));
        assert_eq!(r.status.phase, JobPhase::Lost);
        assert!(r.status.message.as_deref().unwrap().contains("15 minutes"));
        assert_eq!(r.finished_at, Some(at(28)));
    }

    #[test]
    fn final_is_sticky_and_cancelled_gets_finished_at() {
        let mut r = record();
        let now = Timestamp::from_unix_ms(5000);
        let running = Observation::new(JobStatus::new(JobPhase::Running));
        assert_eq!(apply(&mut r, running.clone(), now), (true, false));
        assert_eq!(r.started_at, Some(now));
        assert_eq!(apply(&mut r, running, now), (false, false));
        let cancelled = Observation::new(JobStatus::new(JobPhase::Cancelled));
        assert_eq!(
            apply(&mut r, cancelled, Timestamp::from_unix_ms(9000)),
            (true, true)
        );
        assert_eq!(r.finished_at, Some(Timestamp::from_unix_ms(9000)));
        let completed = Observation::new(JobStatus::new(JobPhase::Completed));
        assert_eq!(
            apply(&mut r, completed, Timestamp::from_unix_ms(9999)),
            (false, false)
        );
        assert_eq!(r.status.phase, JobPhase::Cancelled);
    }

    #[test]
    fn finished_at_never_precedes_submission() {
        let mut r = record();
        let mut obs = Observation::new(JobStatus::new(JobPhase::Failed));
        obs.finished_at = Some(Timestamp::from_unix_ms(1));
        apply(&mut r, obs, Timestamp::from_unix_ms(2000));
        assert_eq!(r.finished_at, Some(Timestamp::from_unix_ms(1000)));
    }
}
