//! Start-up: the jobs a gateway finds unfinished when it opens the state directory.

use hpcgate_executors::sandbox;

use super::Jobs;
use crate::state::{ExecutorHandle, JobMode, JobRecord, Observation, State};

impl Jobs {
    /// At start: every unfinished job of every tenant is observed again, so jobs that ended
    /// while the gateway was down get their final state, and records left `submitting` by a
    /// crash are reconciled. Returns the transitions, for the audit log.
    pub fn reattach(&self, state: &State) -> Vec<JobRecord> {
        let mut transitions = Vec::new();
        for tenant in state.tenants().unwrap_or_default() {
            for listed in state.running_jobs(&tenant, None).unwrap_or_default() {
                let Some(record) = unless_starting(state, listed) else {
                    continue;
                };
                let observation = match (&record.handle, record.mode) {
                    (None, JobMode::Local) => {
                        // Crashed between the record and the handle: did the start happen?
                        let dir = state.job_dir_ambient(&tenant, &record.job_id).ok();
                        match dir.map(|d| sandbox::job_status(&d)) {
                            Some(Ok(job)) => {
                                let observation = Observation::from(&job);
                                if let Ok(r) = state.set_handle(
                                    &tenant,
                                    &record.job_id,
                                    ExecutorHandle::Local,
                                    observation,
                                ) && r.changed
                                {
                                    transitions.push(r.record);
                                }
                                continue;
                            }
                            _ => Some(Observation::lost(
                                "the gateway stopped while starting this job; it never ran",
                            )),
                        }
                    }
                    (None, JobMode::Slurm) => Some(Observation::lost(
                        "the gateway stopped while submitting this job to Slurm; it is not tracked (check squeue for a job named hpcgate-<job id>)",
                    )),
                    _ => self.observe(state, &record),
                };
                if let Some(observation) = observation
                    && let Ok(r) = state.refresh(&tenant, &record.job_id, observation)
                    && r.changed
                {
                    transitions.push(r.record);
                }
            }
        }
        transitions
    }
}

/// `listed` as it is now, or `None` if it is being started (another thread or process holds
/// its lease) or has ended. A record listed without an executor handle may have been given
/// one since (the listing, and whatever was done with the jobs before it, took time): its
/// lease is looked at first, then it is read again. The handle is written before the lease is
/// let go, so a free lease means the record read after it is the start's last word.
pub(crate) fn unless_starting(state: &State, listed: JobRecord) -> Option<JobRecord> {
    if listed.handle.is_some() {
        return Some(listed);
    }
    if state.starting(&listed.tenant, &listed.job_id) {
        return None;
    }
    let now = (state.job(&listed.tenant, &listed.instance, &listed.job_id)).ok()?;
    (!now.is_final()).then_some(now)
}
