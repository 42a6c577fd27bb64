//! The gateway's upkeep beside its calls: old job records pruned, and the summaries of
//! refusals held back over their tenant's audit budget recorded.

use super::Gateway;
use crate::state::StateError;

impl Gateway {
    /// Deletes the job records (and their tasks) older than `[jobs] retention_days`, if set.
    /// One tenant's failure is said and left: it must not keep every tenant's gateway (and
    /// the CLI, which opens one) from starting.
    /// With no retention, each tenant's trash (deletions a crash or a failure cut short) is
    /// still swept.
    pub(super) fn prune_old_jobs(&self) -> Result<(), StateError> {
        let retention = self.snapshot().settings.job_retention;
        for tenant in self.state.tenants()? {
            let Some(age) = retention else {
                self.state.sweep_tenant_trash(&tenant);
                continue;
            };
            if let Err(e) = self.state.prune_jobs(&tenant, age) {
                crate::proxy::log(&format!(
                    "tenant `{tenant}`: old job records were not pruned ({e}); they are tried again later"
                ));
            }
        }
        Ok(())
    }

    /// Records the summaries of the calls refused before they ran and not recorded one by
    /// one (over their tenant's `[audit] refusals_per_minute`), if any; the gateway's chores
    /// do this once a minute, and [`Gateway::stopped`] at the end. What could not be written
    /// is kept for the next time.
    pub fn record_held_refusals(&self) -> Result<(), crate::audit::AuditError> {
        let per_minute = self.snapshot().settings.refusals_per_minute;
        let held = self.refusals.take_held(per_minute);
        let summaries = held.iter().map(|h| h.entry(per_minute)).collect();
        let written = self.audit.append_all(summaries).map(drop);
        if written.is_err() {
            self.refusals.put_back(held);
        }
        written
    }
}

/// The gateway's chores, for as long as it runs, looking a minute at a time whether it is
/// gone: each minute it records the summaries of refusals held back; each day it prunes old
/// job records (at start too, in [`Gateway::open`]), since a gateway that runs for months
/// would otherwise keep every job's record, output and task.
pub(super) fn run(gateway: &std::sync::Weak<Gateway>) {
    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);
    const LOOK: std::time::Duration = std::time::Duration::from_secs(60);
    let mut last = std::time::Instant::now();
    loop {
        std::thread::sleep(LOOK);
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        if let Err(e) = gateway.record_held_refusals() {
            crate::proxy::log(&format!(
                "the summary of refused calls was not recorded ({e}); it is tried again in a minute"
            ));
        }
        if last.elapsed() >= DAY {
            last = std::time::Instant::now();
            if let Err(e) = gateway.prune_old_jobs() {
                crate::proxy::log(&format!("old job records were not pruned ({e})"));
            }
        }
    }
}
