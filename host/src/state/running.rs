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
//!
//! A marker's name also says what the job was doing when its record was last saved —
//! `<job-id>.<phase>.<mode>` (`j-….running.slurm`) — so the metrics count unfinished jobs by
//! phase and mode from one directory listing instead of a read per job. The name is a hint
//! beside the truth: `save_record` writes the record first, then creates the new name
//! (durably) and only then removes the old one, so a crash leaves an old phase (corrected by
//! the next save or the sweep) or two names for one job (its record is read then), and never
//! drops a job from the index. A bare `<job-id>` (an index from before) says nothing; the
//! record is read.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::OpenOptionsExt;

use super::error::StateError;
use super::fsops::{create_dir_private, ensure_dir_private, is_real_dir, remove_tree, sync_dir};
use super::id::{JobId, TenantName};
use super::job::{JobMode, JobPhase, JobRecord};
use super::jobs::{all_records, read_record};
use super::layout::{NEW_PREFIX, TenantPaths};
use super::random::random_base32;

/// The ids the index lists (each once), or `None` if the tenant has records but no index yet.
/// A tenant without a `jobs/` directory has no jobs: nothing is created for a mere count.
pub(crate) fn listed(paths: &TenantPaths) -> Result<Option<Vec<JobId>>, StateError> {
    Ok(markers(paths)?.map(|markers| {
        let mut ids: Vec<JobId> = markers.into_iter().map(|(id, _)| id).collect();
        ids.sort();
        ids.dedup();
        ids
    }))
}

/// Every marker: its job and the (phase, mode) its name says, if it says one. A job may have
/// two markers after a crash (see the module).
pub(crate) fn markers(paths: &TenantPaths) -> Result<Option<Vec<Marker>>, StateError> {
    let entries = match fs::read_dir(paths.running()) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let has_jobs =
                is_real_dir(&paths.jobs()).map_err(StateError::io("list running jobs"))?;
            return Ok((!has_jobs).then(Vec::new));
        }
        Err(e) => return Err(StateError::io("list running jobs")(e)),
    };
    let mut markers = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StateError::io("list running jobs"))?;
        if let Some(marker) = entry.file_name().to_str().and_then(parse_marker) {
            markers.push(marker);
        }
    }
    Ok(Some(markers))
}

/// A marker: the job, and what its name says it was doing.
pub(crate) type Marker = (JobId, Option<(JobPhase, JobMode)>);

/// The phases a marker can name (the unfinished ones), with their names.
const PHASES: [(JobPhase, &str); 5] = [
    (JobPhase::Submitting, "submitting"),
    (JobPhase::Pending, "pending"),
    (JobPhase::Running, "running"),
    (JobPhase::Missing, "missing"),
    (JobPhase::Unknown, "unknown"),
];
const MODES: [(JobMode, &str); 2] = [(JobMode::Local, "local"), (JobMode::Slurm, "slurm")];

/// `<id>.<phase>.<mode>` for an unfinished record.
fn marker_name(record: &JobRecord) -> Option<String> {
    let phase = PHASES.iter().find(|(p, _)| *p == record.status.phase)?.1;
    let mode = MODES.iter().find(|(m, _)| *m == record.mode)?.1;
    Some(format!("{}.{phase}.{mode}", record.job_id))
}

fn parse_marker(name: &str) -> Option<Marker> {
    let mut parts = name.split('.');
    let id = JobId::parse(parts.next()?).ok()?;
    let kind = match (parts.next(), parts.next(), parts.next()) {
        (None, ..) => None,
        (Some(phase), Some(mode), None) => {
            let phase = PHASES.iter().find(|(_, n)| *n == phase)?.0;
            let mode = MODES.iter().find(|(_, n)| *n == mode)?.0;
            Some((phase, mode))
        }
        _ => return None,
    };
    Some((id, kind))
}

/// Every name a marker of `id` may have.
fn candidate_names(id: &JobId) -> impl Iterator<Item = String> + '_ {
    let kinds = PHASES.iter().flat_map(move |(_, phase)| {
        MODES
            .iter()
            .map(move |(_, mode)| format!("{id}.{phase}.{mode}"))
    });
    std::iter::once(id.to_string()).chain(kinds)
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

/// Indexes `record`'s job under the name of its phase, durably, then removes its other names.
/// Nothing is written when the name is already there. Caller holds the lock and has built the
/// index ([`listed_locked`]).
pub(crate) fn mark(paths: &TenantPaths, record: &JobRecord) -> Result<(), StateError> {
    index(paths, record, Others::IfRenamed)
}

/// [`mark`] for a job not yet published: it has no other name to remove.
pub(crate) fn mark_new(paths: &TenantPaths, record: &JobRecord) -> Result<(), StateError> {
    index(paths, record, Others::None)
}

/// Which other names of a job [`index`] removes.
#[derive(PartialEq)]
enum Others {
    /// A new job has none.
    None,
    /// Those a new name replaces (a save that changed nothing touches nothing).
    IfRenamed,
    /// Every one, even when the right name was there (the sweep, after a crash).
    All,
}

fn index(paths: &TenantPaths, record: &JobRecord, others: Others) -> Result<(), StateError> {
    let io = || StateError::io("index a running job");
    let Some(name) = marker_name(record) else {
        return Ok(());
    };
    let dir = paths.running();
    let created = match create_new(&dir.join(&name)) {
        Ok(()) => {
            sync_dir(&dir).map_err(io())?;
            true
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io()(e)),
    };
    if others == Others::All || (others == Others::IfRenamed && created) {
        for other in candidate_names(&record.job_id).filter(|n| *n != name) {
            remove_marker(&dir.join(other))?;
        }
    }
    Ok(())
}

/// Removes every marker of `id` (missing is fine): called once the job's final record is
/// durable.
pub(crate) fn unmark(paths: &TenantPaths, id: &JobId) -> Result<(), StateError> {
    let dir = paths.running();
    for name in candidate_names(id) {
        remove_marker(&dir.join(name))?;
    }
    Ok(())
}

fn remove_marker(path: &std::path::Path) -> Result<(), StateError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StateError::io("unindex a job")(e)),
        _ => Ok(()),
    }
}

/// Removes markers whose record is missing or final (left by a crash). Caller holds the lock.
pub(crate) fn sweep_stale(paths: &TenantPaths, tenant: &TenantName) -> Result<(), StateError> {
    for id in listed(paths)?.unwrap_or_default() {
        match read_record(paths, tenant, &id) {
            // Its name says its phase again (a crash may have left an old one, or two).
            Ok(record) if !record.is_final() => index(paths, &record, Others::All)?,
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
        let name = marker_name(record).unwrap_or_else(|| record.job_id.to_string());
        create_new(&tmp.join(name)).map_err(io())?;
    }
    sync_dir(&tmp).map_err(io())?;
    if let Err(e) = fs::rename(&tmp, paths.running()) {
        let _ = remove_tree(&tmp);
        return Err(io()(e));
    }
    sync_dir(&jobs).map_err(io())
}

fn create_new(path: &std::path::Path) -> io::Result<()> {
    File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map(drop)
}
