//! `clean`: delete archived instances archived before a cutoff, with their job records and
//! the MCP tasks that followed those jobs; and the sweep of leftovers from crashed operations.
//!
//! Deleting a tree is not atomic, so an instance is first renamed to
//! `archived/.trash-<id>-<random>` (gone from every listing at once), under the tenant's
//! lock, and removed once the lock is let go; a crash mid-way leaves only trash, which the
//! next `clean` or job pruning sweeps. Job records of the instance
//! are removed before its directory, so a crash never leaves records of a deleted instance
//! that a future instance of the same id would inherit. Symlinks inside are removed, never
//! followed (`remove_dir_all`).

use std::fs;
use std::io;
use std::path::Path;
use std::time::Duration;

use super::State;
use super::error::StateError;
use super::fsops::{empty_trash, remove_tree, to_trash};
use super::id::{InstanceId, TenantName};
use super::jobs::all_records;
use super::layout::{Location, NEW_PREFIX, TRASH_PREFIX, TenantPaths};
use super::lock::TenantLock;
use super::query::instance_ids;
use super::running;
use super::tasks::sweep_orphan_tasks;
use crate::time::Timestamp;

impl State {
    /// Deletes archived instances archived more than `older_than_days` days ago; returns
    /// their ids.
    pub fn clean(
        &self,
        tenant: &TenantName,
        older_than_days: u64,
    ) -> Result<Vec<InstanceId>, StateError> {
        let age = Duration::from_secs(older_than_days.saturating_mul(86_400));
        self.clean_before(tenant, Timestamp::now().minus(age))
    }

    /// Deletes archived instances whose `archived_at` is before `cutoff`. One without
    /// `archived_at` (a crash right after the archive rename) is stamped now and kept.
    pub fn clean_before(
        &self,
        tenant: &TenantName,
        cutoff: Timestamp,
    ) -> Result<Vec<InstanceId>, StateError> {
        let paths = self.tenant(tenant);
        let lock = TenantLock::acquire(&paths)?;
        self.sweep_leftovers(&paths, tenant)?;
        let mut removed = Vec::new();
        let mut trash = Vec::new();
        let records = all_records(&paths, tenant)?;
        for id in instance_ids(&paths, Location::Archived)? {
            let Ok(Some(mut meta)) = self.read_meta(&paths, tenant, Location::Archived, &id) else {
                // Unreadable metadata: leave it for an administrator rather than guess its age.
                continue;
            };
            let Some(archived_at) = meta.archived_at else {
                meta.archived_at = Some(Timestamp::now());
                meta.save(&paths.instance(Location::Archived, &id))?;
                continue;
            };
            if archived_at >= cutoff {
                continue;
            }
            for record in records.iter().filter(|r| r.instance == id) {
                trash.push(to_trash(
                    &paths.job(&record.job_id),
                    record.job_id.as_str(),
                )?);
            }
            trash.push(to_trash(
                &paths.instance(Location::Archived, &id),
                id.as_str(),
            )?);
            removed.push(id);
        }
        sweep_orphan_tasks(&paths, tenant)?;
        drop(lock);
        let emptied = empty_trash(trash);
        self.sweep_trash(&paths);
        emptied?;
        Ok(removed)
    }

    /// [`State::sweep_trash`] for a tenant by name (the gateway's start and daily upkeep).
    pub fn sweep_tenant_trash(&self, tenant: &TenantName) {
        self.sweep_trash(&self.tenant(tenant));
    }

    /// Removes what deletions that never finished left (`.trash-*` in `archived/` and
    /// `jobs/`). Without the lock: a tree can be large, and nothing else uses trash.
    pub(crate) fn sweep_trash(&self, paths: &TenantPaths) {
        for dir in [paths.dir(Location::Archived), paths.jobs()] {
            if let Err(e) = sweep(&dir, TRASH_PREFIX) {
                crate::proxy::log(&format!("cannot sweep `{}` ({e})", dir.display()));
            }
        }
    }

    /// Removes what crashed operations left under way: `.new-*` in `instances/` and `jobs/`
    /// (a create or `new_job` that never published), and running-index markers of finished or
    /// missing jobs. Only called with the tenant lock held, so none of them belongs to a
    /// running operation. (Trash is swept without the lock: [`State::sweep_trash`].)
    pub(crate) fn sweep_leftovers(
        &self,
        paths: &TenantPaths,
        tenant: &TenantName,
    ) -> Result<(), StateError> {
        sweep(&paths.dir(Location::Live), NEW_PREFIX)?;
        sweep(&paths.jobs(), NEW_PREFIX)?;
        running::sweep_stale(paths, tenant)
    }
}

/// Removes the leftovers named `prefix…` in `dir`. One that cannot be removed is said on
/// stderr and left for the next sweep: garbage must not stop the call that found it.
fn sweep(dir: &Path, prefix: &str) -> Result<(), StateError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StateError::io("sweep leftovers")(e)),
    };
    for entry in entries {
        let entry = entry.map_err(StateError::io("sweep leftovers"))?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(prefix))
            && let Err(e) = remove_tree(&entry.path())
        {
            crate::proxy::log(&format!(
                "cannot remove the leftover `{}` ({e}); it is tried again at the next sweep",
                entry.path().display()
            ));
        }
    }
    Ok(())
}
