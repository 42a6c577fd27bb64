//! `archive` and `unarchive`: move an instance between `instances/` and `archived/` with one
//! rename, under the tenant lock.
//!
//! `archive` decides before it touches anything: it reads the instance,
//! lets the gateway observe each of the instance's unfinished jobs (through the executor,
//! which the state layer does not call itself, and without the lock: Slurm's clients can take
//! seconds), then under the lock records those observations, and refuses with
//! `HasRunningJobs` if any job is still unfinished — one recorded meanwhile included — the
//! instance directory and its metadata are then exactly as before. Because `new_job` takes the
//! same lock and requires a live instance, no job can be recorded between the check and the
//! rename. Then, still before anything moves, it takes the instance's in-use lock exclusively
//! and refuses with `InUse` if a shell or a proxied server holds a lease on it (`in_use.rs`).
//!
//! The rename is the commit point; `archived_at` is written into the metadata afterwards.
//! A crash in between leaves an archived instance without `archived_at`, which `clean`
//! repairs (it stamps it and keeps the instance for another period).

use std::collections::HashMap;

use super::State;
use super::error::{IdKind, StateError};
use super::fsops::{rename_noreplace, sync_dir};
use super::id::{InstanceId, JobId, TenantName};
use super::in_use;
use super::instance::Instance;
use super::job::JobRecord;
use super::jobs::{save_record, unfinished_strict};
use super::layout::Location;
use super::lock::TenantLock;
use super::observe::Observation;
use super::refresh::apply;
use super::running;
use crate::time::Timestamp;

impl State {
    /// Archives a live instance. `observe` is called for each unfinished job of the instance
    /// and returns the executor's current view of it (`None`: no news, keep the record).
    pub fn archive<F>(
        &self,
        tenant: &TenantName,
        id: &InstanceId,
        mut observe: F,
    ) -> Result<Instance, StateError>
    where
        F: FnMut(&JobRecord) -> Option<Observation>,
    {
        let paths = self.tenant(tenant);
        let of_instance = |paths| -> Result<Vec<JobRecord>, StateError> {
            let indexed = running::listed_locked(paths, tenant)?;
            let mut jobs = unfinished_strict(paths, tenant, indexed)?;
            jobs.retain(|record| &record.instance == id);
            Ok(jobs)
        };
        // The executor is asked without the lock (Slurm's clients may take seconds a job, and
        // every call of the tenant waits for the lock); what it says is recorded under it.
        let jobs = {
            let _lock = TenantLock::acquire(&paths)?;
            self.live_meta(&paths, tenant, id)?;
            of_instance(&paths)?
        };
        let mut seen: HashMap<JobId, Observation> = HashMap::new();
        for record in &jobs {
            if let Some(observation) = observe(record) {
                seen.insert(record.job_id.clone(), observation);
            }
        }

        let _lock = TenantLock::acquire(&paths)?;
        let mut meta = self.live_meta(&paths, tenant, id)?;
        let mut still_running = Vec::new();
        // A job recorded meanwhile was not observed: it is unfinished, and refuses the archive.
        for mut record in of_instance(&paths)? {
            if let Some(observation) = seen.remove(&record.job_id) {
                let (changed, _) = apply(&mut record, observation, Timestamp::now());
                if changed {
                    save_record(&paths, &record)?;
                }
            }
            if !record.is_final() {
                still_running.push(record.job_id);
            }
        }
        if let Some(first) = still_running.iter().min() {
            return Err(StateError::HasRunningJobs {
                id: id.to_string(),
                count: still_running.len(),
                first: first.to_string(),
            });
        }

        let from = paths.instance(Location::Live, id);
        let to = paths.instance(Location::Archived, id);
        // Nothing may run in it under a lease: a shell, a proxied server (held to the rename).
        let _unused = in_use::exclusive(&from, id.as_str())?;
        rename_noreplace(&from, &to).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                StateError::AlreadyExists {
                    id: id.to_string(),
                    where_: " in the archive (clean the archive first)",
                }
            } else {
                StateError::io("archive an instance")(e)
            }
        })?;
        for dir in [paths.dir(Location::Live), paths.dir(Location::Archived)] {
            sync_dir(&dir).map_err(StateError::io("archive an instance"))?;
        }
        let now = Timestamp::now();
        meta.archived_at = Some(now);
        meta.updated_at = now;
        meta.save(&to)?;
        Ok(meta.view(Location::Archived))
    }

    /// Brings an archived instance back. `max_instances` as in [`super::NewInstance`].
    pub fn unarchive(
        &self,
        tenant: &TenantName,
        id: &InstanceId,
        max_instances: Option<usize>,
    ) -> Result<Instance, StateError> {
        let paths = self.tenant(tenant);
        let _lock = TenantLock::acquire(&paths)?;
        let Some(mut meta) = self.read_meta(&paths, tenant, Location::Archived, id)? else {
            return Err(StateError::not_found(IdKind::Instance, id.as_str()));
        };
        if let Some(max) = max_instances {
            let count = self.count_live(&paths)?;
            if count >= max {
                return Err(StateError::QuotaExceeded {
                    tenant: tenant.to_string(),
                    count,
                    max,
                });
            }
        }
        let to = paths.instance(Location::Live, id);
        rename_noreplace(&paths.instance(Location::Archived, id), &to).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                StateError::AlreadyExists {
                    id: id.to_string(),
                    where_: "",
                }
            } else {
                StateError::io("unarchive an instance")(e)
            }
        })?;
        for dir in [paths.dir(Location::Archived), paths.dir(Location::Live)] {
            sync_dir(&dir).map_err(StateError::io("unarchive an instance"))?;
        }
        meta.archived_at = None;
        meta.updated_at = Timestamp::now();
        meta.save(&to)?;
        Ok(meta.view(Location::Live))
    }
}
