//! Job records: `new_job` (before the executor starts it), lookups, listings, and the host
//! directory handed to the sandbox executor.
//!
//! Records live per tenant, so a job id from another tenant is simply not found. Lookups also
//! take the instance and answer "not found" when the job belongs to another instance of the
//! tenant, so a tool cannot operate on a job through the wrong instance.

use std::fs;
use std::io;
use std::path::PathBuf;

use super::State;
use super::error::{IdKind, StateError};
use super::fsops::{
    create_dir_private, is_real_dir, read_json, remove_tree, rename_noreplace, sync_dir,
    write_json_atomic,
};
use super::id::{InstanceId, JobId, TenantName};
use super::job::{JobMode, JobPhase, JobRecord, JobStatus, RECORD_VERSION, Resources};
use super::layout::{Location, NEW_PREFIX, RECORD, SANDBOX_JOB_DIR, TenantPaths};
use super::lock::TenantLock;
use super::page::{Page, PageRequest};
use super::running;
use super::starting::Starting;
use crate::time::Timestamp;

/// What `new_job` records.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub instance: InstanceId,
    pub mode: JobMode,
    /// The argv; must not be empty.
    pub command: Vec<String>,
    pub resources: Resources,
    /// Refuse if the tenant already has this many unfinished jobs (checked under the lock).
    pub max_running_jobs: Option<usize>,
}

impl State {
    /// Records a job in phase `submitting` for a live instance and returns it. Start it with
    /// the executor next (a local job in [`State::job_dir_ambient`]), then report the outcome
    /// with [`State::set_handle`] or, if the start failed, [`State::refresh`] with
    /// [`super::Observation::start_failed`].
    pub fn new_job(&self, tenant: &TenantName, new: NewJob) -> Result<JobRecord, StateError> {
        self.new_job_starting(tenant, new).map(|(record, _)| record)
    }

    /// [`State::new_job`], with the lease on its start ([`Starting`]), taken before the record
    /// was published: hold it until the executor's answer is recorded.
    pub fn new_job_starting(
        &self,
        tenant: &TenantName,
        new: NewJob,
    ) -> Result<(JobRecord, Starting), StateError> {
        if new.command.is_empty() || new.command[0].trim().is_empty() {
            return Err(StateError::InvalidCommand);
        }
        let paths = self.tenant(tenant);
        let _lock = TenantLock::acquire(&paths)?;
        // Under the lock, so archive cannot slip in between this check and the record.
        self.live_meta(&paths, tenant, &new.instance)?;
        let indexed = running::listed_locked(&paths, tenant)?;
        if let Some(max) = new.max_running_jobs {
            let running = unfinished_strict(&paths, tenant, indexed)?.len();
            if running >= max {
                return Err(StateError::JobQuotaExceeded {
                    tenant: tenant.to_string(),
                    count: running,
                    max,
                });
            }
        }
        let job_id = JobId::generate()?;
        // Built under a temporary name and published by one rename, like an instance: a
        // crash leaves either no job or a complete record (the sweep removes the rest).
        let tmp = paths.jobs().join(format!("{NEW_PREFIX}{job_id}"));
        remove_tree(&tmp).map_err(StateError::io("create a job record"))?;
        create_dir_private(&tmp).map_err(StateError::io("create a job record"))?;
        let lease = Starting::take(&tmp).map_err(StateError::io("create a job record"))?;
        let now = Timestamp::now();
        let record = JobRecord {
            version: RECORD_VERSION,
            job_id,
            tenant: tenant.clone(),
            instance: new.instance,
            mode: new.mode,
            command: new.command,
            resources: new.resources,
            submitted_at: now,
            handle: None,
            status: JobStatus::new(JobPhase::Submitting),
            started_at: None,
            finished_at: None,
            updated_at: now,
        };
        write_json_atomic(&tmp, RECORD, &record).map_err(StateError::io("write a job record"))?;
        running::mark_new(&paths, &record)?;
        rename_noreplace(&tmp, &paths.job(&record.job_id))
            .map_err(StateError::io("create a job record"))?;
        let lease = lease.moved_to(&paths.job(&record.job_id));
        sync_dir(&paths.jobs()).map_err(StateError::io("create a job record"))?;
        Ok((record, lease))
    }

    /// Whether a thread or process is starting the job now (it holds its [`Starting`]).
    pub fn starting(&self, tenant: &TenantName, job_id: &JobId) -> bool {
        super::starting::in_progress(&self.tenant(tenant).job(job_id))
    }

    /// One job of `instance`; `NotFound` if the tenant has no such job or it belongs to
    /// another instance.
    pub fn job(
        &self,
        tenant: &TenantName,
        instance: &InstanceId,
        job_id: &JobId,
    ) -> Result<JobRecord, StateError> {
        let record = read_record(&self.tenant(tenant), tenant, job_id)?;
        if &record.instance != instance {
            return Err(StateError::not_found(IdKind::Job, job_id.as_str()));
        }
        Ok(record)
    }

    /// Jobs of the tenant (of one instance, live or archived, if given), newest first.
    pub fn list_jobs(
        &self,
        tenant: &TenantName,
        instance: Option<&InstanceId>,
        page: PageRequest,
    ) -> Result<Page<JobRecord>, StateError> {
        let paths = self.tenant(tenant);
        if let Some(id) = instance {
            let exists = [Location::Live, Location::Archived]
                .into_iter()
                .map(|l| is_real_dir(&paths.instance(l, id)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(StateError::io("read an instance directory"))?;
            if !exists.contains(&true) {
                return Err(StateError::not_found(IdKind::Instance, id.as_str()));
            }
        }
        let mut records: Vec<JobRecord> = all_records(&paths, tenant)?
            .into_iter()
            .filter(|r| instance.is_none_or(|id| &r.instance == id))
            .collect();
        records.sort_by(|a, b| (b.submitted_at, &b.job_id).cmp(&(a.submitted_at, &a.job_id)));
        Ok(page.apply(records))
    }

    /// Unfinished jobs (not in a final phase) of the tenant, or of one instance: for the
    /// archive check and the `max_running_jobs` quota. Oldest first.
    pub fn running_jobs(
        &self,
        tenant: &TenantName,
        instance: Option<&InstanceId>,
    ) -> Result<Vec<JobRecord>, StateError> {
        let paths = self.tenant(tenant);
        let ids = match running::listed(&paths)? {
            Some(ids) => ids,
            None => {
                let _lock = TenantLock::acquire(&paths)?;
                running::listed_locked(&paths, tenant)?
            }
        };
        let mut records = unfinished(&paths, tenant, ids);
        records.retain(|r| instance.is_none_or(|id| &r.instance == id));
        Ok(records)
    }

    /// The tenant's unfinished jobs by (phase, mode) names, for the metrics: from the running
    /// index's names, reading only the records whose name says nothing (`census.rs`).
    pub fn unfinished_by_kind(
        &self,
        tenant: &TenantName,
    ) -> Result<std::collections::BTreeMap<(String, String), u64>, StateError> {
        let paths = self.tenant(tenant);
        let markers = match running::markers(&paths)? {
            Some(markers) => markers,
            None => {
                let _lock = TenantLock::acquire(&paths)?;
                running::listed_locked(&paths, tenant)?;
                running::markers(&paths)?.unwrap_or_default()
            }
        };
        Ok(super::census::count(&paths, tenant, markers))
    }

    /// How many unfinished jobs the tenant has (the policies' `usage.running_jobs`; the
    /// `max_running_jobs` quota counts again under the tenant lock).
    pub fn running_job_count(&self, tenant: &TenantName) -> Result<usize, StateError> {
        let paths = self.tenant(tenant);
        let (index, jobs) = (paths.running(), paths.jobs());
        let count = || Ok(self.running_jobs(tenant, None)?.len());
        (self.memos.running_jobs).get([index.as_path(), jobs.as_path()], count)
    }

    /// The host directory for the sandbox executor's job directory (`spawn_job` creates it;
    /// its parent exists once the job is recorded). Ambient authority: never show it.
    pub fn job_dir_ambient(
        &self,
        tenant: &TenantName,
        job_id: &JobId,
    ) -> Result<PathBuf, StateError> {
        let paths = self.tenant(tenant);
        read_record(&paths, tenant, job_id)?;
        Ok(paths.job(job_id).join(SANDBOX_JOB_DIR))
    }
}

/// Replaces a job's record (caller holds the lock); a final record leaves the running index,
/// another is indexed under its phase.
pub(crate) fn save_record(paths: &TenantPaths, record: &JobRecord) -> Result<(), StateError> {
    write_json_atomic(&paths.job(&record.job_id), RECORD, record)
        .map_err(StateError::io("write a job record"))?;
    if record.is_final() {
        running::unmark(paths, &record.job_id)?;
    } else {
        running::mark(paths, record)?;
    }
    Ok(())
}

/// [`unfinished`], for a check that must not miss a job (the running-jobs quota, archive): a
/// record that exists and cannot be read (an I/O error, a corrupt record, a newer version's)
/// is an error, not a job that has ended.
pub(crate) fn unfinished_strict(
    paths: &TenantPaths,
    tenant: &TenantName,
    ids: Vec<JobId>,
) -> Result<Vec<JobRecord>, StateError> {
    let mut records = Vec::new();
    for id in &ids {
        match read_record(paths, tenant, id) {
            Ok(record) if !record.is_final() => records.push(record),
            Ok(_) | Err(StateError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    records.sort_by(|a, b| (a.submitted_at, &a.job_id).cmp(&(b.submitted_at, &b.job_id)));
    Ok(records)
}

/// The unfinished records among `ids` (from the running index), oldest first. Markers whose
/// record is missing, final or unreadable are skipped.
pub(crate) fn unfinished(
    paths: &TenantPaths,
    tenant: &TenantName,
    ids: Vec<JobId>,
) -> Vec<JobRecord> {
    let mut records: Vec<JobRecord> = ids
        .iter()
        .filter_map(|id| read_record(paths, tenant, id).ok())
        .filter(|r| !r.is_final())
        .collect();
    records.sort_by(|a, b| (a.submitted_at, &a.job_id).cmp(&(b.submitted_at, &b.job_id)));
    records
}

/// Reads a record; `NotFound` if absent, `Corrupt` if unparsable or stored under another
/// tenant or id.
pub(crate) fn read_record(
    paths: &TenantPaths,
    tenant: &TenantName,
    job_id: &JobId,
) -> Result<JobRecord, StateError> {
    let corrupt = || StateError::Corrupt {
        kind: IdKind::Job,
        id: job_id.to_string(),
        what: "record",
    };
    let dir = paths.job(job_id);
    if !is_real_dir(&dir).map_err(StateError::io("read a job record"))? {
        return Err(StateError::not_found(IdKind::Job, job_id.as_str()));
    }
    let record: JobRecord = match read_json(&dir.join(RECORD)) {
        Ok(Some(record)) => record,
        Ok(None) => return Err(corrupt()),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(corrupt()),
        Err(e) => return Err(StateError::io("read a job record")(e)),
    };
    if &record.job_id != job_id || &record.tenant != tenant {
        return Err(corrupt());
    }
    StateError::check_format(
        IdKind::Job,
        job_id.as_str(),
        "record",
        record.version,
        RECORD_VERSION,
    )?;
    Ok(record)
}

/// Every readable record of the tenant; unreadable or foreign ones are skipped.
pub(crate) fn all_records(
    paths: &TenantPaths,
    tenant: &TenantName,
) -> Result<Vec<JobRecord>, StateError> {
    let entries = match fs::read_dir(paths.jobs()) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StateError::io("list job records")(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StateError::io("list job records"))?;
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| JobId::parse(n).ok())
        else {
            continue;
        };
        if let Ok(record) = read_record(paths, tenant, &id) {
            out.push(record);
        }
    }
    Ok(out)
}
