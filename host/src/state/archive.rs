//! `archive` and `unarchive`: move an instance between `instances/` and `archived/` with one
//! rename, under the tenant lock.
//!
//! `archive` decides before it touches anything. It reads the instance and lets the gateway
//! observe each of the instance's unfinished jobs (through the executor, which the state layer
//! does not call itself, and without the lock: Slurm's clients can take seconds). If what was
//! seen leaves a job unfinished it refuses with `HasRunningJobs` at once. Otherwise, unless
//! this machine's lock table shows another process's lease (then `InUse`), it lets
//! the caller stop what it runs in the instance (the `release` hook) and takes the instance's
//! in-use lock exclusively, refusing with `InUse` while a shell or a proxied server still
//! holds a lease on it (`in_use.rs`), then the tenant lock. Under both it records the
//! observations and checks again, a job recorded meanwhile included. A refused archive leaves
//! the instance directory and its metadata exactly as before. Because `new_job` takes the same
//! tenant lock and requires a live instance, no job can be recorded between the check and the
//! rename.
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
        observe: F,
    ) -> Result<Instance, StateError>
    where
        F: FnMut(&JobRecord) -> Option<Observation>,
    {
        self.archive_releasing(tenant, id, observe, None::<fn()>)
    }

    /// [`State::archive`] for a caller that holds leases on the instance itself: `release` is
    /// called, with no lock held, once no job stands in the way and no other process is seen
    /// to hold a lease, and must end what the caller runs in the instance before the leases
    /// are checked.
    pub fn archive_releasing<F, R>(
        &self,
        tenant: &TenantName,
        id: &InstanceId,
        mut observe: F,
        release: Option<R>,
    ) -> Result<Instance, StateError>
    where
        F: FnMut(&JobRecord) -> Option<Observation>,
        R: FnOnce(),
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
        let mut save = |record: &JobRecord| save_record(&paths, record);
        // Refused now if what was seen leaves a job unfinished, before waiting on leases; the
        // observations are recorded all the same.
        let mut unchanged = |_: &JobRecord| Ok(());
        if !still_running(jobs, &seen, &mut unchanged)?.is_empty() {
            let _lock = TenantLock::acquire(&paths)?;
            let still = still_running(of_instance(&paths)?, &seen, &mut save)?;
            refuse_unfinished(id, still)?;
        }
        let from = paths.instance(Location::Live, id);
        if let Some(release) = release {
            // Refused before the caller's servers are stopped for nothing if another process
            // holds a lease (as far as this machine can tell).
            if in_use::held_elsewhere(&from) {
                return Err(StateError::InUse { id: id.to_string() });
            }
            release();
        }

        // Nothing may run in it under a lease, a shell or a proxied server: the in-use lock is
        // held from here until the metadata below is written. Taken before the tenant lock,
        // which a holder never takes, so the wait for a lease just released holds up no other
        // call of the tenant.
        let unused = in_use::exclusive(&from, id.as_str())?;
        let _lock = TenantLock::acquire(&paths)?;
        let mut meta = self.live_meta(&paths, tenant, id)?;
        // Still this instance's file: another archive may have moved the instance since it was
        // opened (and a new one of that name been made).
        unused.still_at(&from, id.as_str())?;
        // A job recorded meanwhile was not observed: it is unfinished, and refuses the archive.
        refuse_unfinished(id, still_running(of_instance(&paths)?, &seen, &mut save)?)?;

        let to = paths.instance(Location::Archived, id);
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

/// The ids of `records` still unfinished once each is brought up to date with what was `seen`
/// of it; a record the observation changed goes to `save` first.
fn still_running(
    records: Vec<JobRecord>,
    seen: &HashMap<JobId, Observation>,
    save: &mut dyn FnMut(&JobRecord) -> Result<(), StateError>,
) -> Result<Vec<JobId>, StateError> {
    let mut still = Vec::new();
    for mut record in records {
        if let Some(observation) = seen.get(&record.job_id) {
            let (changed, _) = apply(&mut record, observation.clone(), Timestamp::now());
            if changed {
                save(&record)?;
            }
        }
        if !record.is_final() {
            still.push(record.job_id);
        }
    }
    Ok(still)
}

/// `HasRunningJobs` if any job of `id` is still running.
fn refuse_unfinished(id: &InstanceId, still: Vec<JobId>) -> Result<(), StateError> {
    match still.iter().min() {
        Some(first) => Err(StateError::HasRunningJobs {
            id: id.to_string(),
            count: still.len(),
            first: first.to_string(),
        }),
        None => Ok(()),
    }
}
