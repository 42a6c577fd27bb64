//! `prune_jobs`: retention for job records. Removes finished jobs (record and, for local
//! jobs, the executor's job directory with the output) that finished before a cutoff, then the
//! MCP tasks that followed them. Unfinished jobs are never pruned, whatever their age.

use std::time::Duration;

use super::State;
use super::error::StateError;
use super::fsops::{empty_trash, to_trash};
use super::id::{JobId, TenantName};
use super::jobs::all_records;
use super::lock::TenantLock;
use super::tasks::sweep_orphan_tasks;
use crate::time::Timestamp;

impl State {
    /// Removes jobs that finished more than `older_than` ago; returns their ids.
    pub fn prune_jobs(
        &self,
        tenant: &TenantName,
        older_than: Duration,
    ) -> Result<Vec<JobId>, StateError> {
        self.prune_jobs_before(tenant, Timestamp::now().minus(older_than))
    }

    /// Removes jobs whose `finished_at` is before `cutoff`; returns their ids.
    pub fn prune_jobs_before(
        &self,
        tenant: &TenantName,
        cutoff: Timestamp,
    ) -> Result<Vec<JobId>, StateError> {
        let paths = self.tenant(tenant);
        let lock = TenantLock::acquire(&paths)?;
        self.sweep_leftovers(&paths, tenant)?;
        let mut removed = Vec::new();
        let mut trash = Vec::new();
        for record in all_records(&paths, tenant)? {
            let old = record.is_final() && record.finished_at.is_some_and(|at| at < cutoff);
            if !old {
                continue;
            }
            trash.push(to_trash(
                &paths.job(&record.job_id),
                record.job_id.as_str(),
            )?);
            removed.push(record.job_id);
        }
        sweep_orphan_tasks(&paths, tenant)?;
        drop(lock);
        let emptied = empty_trash(trash);
        self.sweep_trash(&paths);
        emptied?;
        removed.sort();
        Ok(removed)
    }
}
