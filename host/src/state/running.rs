//! The running-jobs index: `jobs/.running/<job-id>`, one empty file per job that may still be
//! unfinished, so that counting a tenant's running jobs (on every call, for `usage`) reads the
//! few unfinished records instead of every record kept for retention.
//!
//! The record stays the truth; the index only says which records to read. It is a superset
//! of the unfinished jobs, which is all its readers need:
//! - `new_job` makes the marker durable *before* it publishes the record, so a crash can
//!   leave a marker without a record (skipped as not found) but never a record without one;
//! - `save_record` removes the marker *after* a final record is durable, so a crash can leave
//!   a marker of a finished job (skipped as final) but never drop one of a running job;
//! - markers are added and removed only under the tenant lock, and stale ones are swept with
//!   the other leftovers.
//!
//! A state directory written before the index existed has no `.running/`: the first reader
//! builds it from a full scan under the lock and publishes it by one rename.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::OpenOptionsExt;

use super::error::StateError;
use super::fsops::{create_dir_private, ensure_dir_private, is_real_dir, remove_tree, sync_dir};
use super::id::{JobId, TenantName};
use super::jobs::{all_records, read_record};
use super::layout::{NEW_PREFIX, TenantPaths};
use super::random::random_base32;

/// The ids the index lists, or `None` if the tenant has records but no index yet. A tenant
/// without a `jobs/` directory has no jobs: nothing is created for a mere count.
pub(crate) fn listed(paths: &TenantPaths) -> Result<Option<Vec<JobId>>, StateError> {
    let entries = match fs::read_dir(paths.running()) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let has_jobs =
                is_real_dir(&paths.jobs()).map_err(StateError::io("list running jobs"))?;
            return Ok((!has_jobs).then(Vec::new));
        }
        Err(e) => return Err(StateError::io("list running jobs")(e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StateError::io("list running jobs"))?;
        if let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| JobId::parse(n).ok())
        {
            ids.push(id);
        }
    }
    Ok(Some(ids))
}

/// The index's ids, building the index first if the tenant has none. Caller holds the lock.
pub(crate) fn listed_locked(
    paths: &TenantPaths,
    tenant: &TenantName,
) -> Result<Vec<JobId>, StateError> {
    if let Some(ids) = listed(paths)? {
        return Ok(ids);
    }
    build(paths, tenant)?;
    Ok(listed(paths)?.unwrap_or_default())
}

/// Adds `id` durably. Caller holds the lock and has built the index ([`listed_locked`]).
pub(crate) fn mark(paths: &TenantPaths, id: &JobId) -> Result<(), StateError> {
    let io = || StateError::io("index a running job");
    let dir = paths.running();
    touch(&dir.join(id.as_str())).map_err(io())?;
    sync_dir(&dir).map_err(io())
}

/// Removes `id` (missing is fine): called once the job's final record is durable.
pub(crate) fn unmark(paths: &TenantPaths, id: &JobId) -> Result<(), StateError> {
    match fs::remove_file(paths.running().join(id.as_str())) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(StateError::io("unindex a finished job")(e))
        }
        _ => Ok(()),
    }
}

/// Removes markers whose record is missing or final (left by a crash). Caller holds the lock.
pub(crate) fn sweep_stale(paths: &TenantPaths, tenant: &TenantName) -> Result<(), StateError> {
    for id in listed(paths)?.unwrap_or_default() {
        match read_record(paths, tenant, &id) {
            Ok(record) if !record.is_final() => {}
            Ok(_) | Err(StateError::NotFound { .. }) => unmark(paths, &id)?,
            // Unreadable: keep the marker, the record may be repaired by hand.
            Err(_) => {}
        }
    }
    Ok(())
}

/// Builds the index from every record and publishes it by one rename. Caller holds the lock.
fn build(paths: &TenantPaths, tenant: &TenantName) -> Result<(), StateError> {
    let io = || StateError::io("build the running-jobs index");
    let jobs = paths.jobs();
    ensure_dir_private(&jobs).map_err(io())?;
    let tmp = jobs.join(format!("{NEW_PREFIX}running-{}", random_base32(12)?));
    create_dir_private(&tmp).map_err(io())?;
    for record in all_records(paths, tenant)?.iter().filter(|r| !r.is_final()) {
        touch(&tmp.join(record.job_id.as_str())).map_err(io())?;
    }
    sync_dir(&tmp).map_err(io())?;
    if let Err(e) = fs::rename(&tmp, paths.running()) {
        let _ = remove_tree(&tmp);
        return Err(io()(e));
    }
    sync_dir(&jobs).map_err(io())
}

fn touch(path: &std::path::Path) -> io::Result<()> {
    File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map(drop)
}
