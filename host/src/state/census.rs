//! Unfinished jobs counted by phase and mode, for the metrics scrape (`hpcgate_jobs`).
//!
//! A scrape must not read every unfinished job's record: with 10,000 queued jobs that is
//! 10,000 opens and JSON parses (82 ms), every 15 seconds. A job's phase changes only when its
//! `record.json` is replaced, so each job's (phase, mode) is kept with the record's stamp and
//! read again only when the stamp differs — one `statat` per job, relative to the tenant's open
//! `jobs/` directory. A stamp is trusted as in `memo.rs`: only once it was first seen
//! [`SETTLE`] before the read. Jobs that left the running index are forgotten at the next scrape,
//! so the census holds no more entries than there are unfinished jobs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use rustix::fs::{Mode, OFlags};

use super::id::{JobId, TenantName};
use super::jobs::read_record;
use super::layout::{RECORD, TenantPaths};
use super::memo::{SETTLE, Stamp};

/// (phase, mode) as their serde names (`queued`, `sandbox`, …).
pub type Kind = (String, String);

struct Entry {
    stamp: Stamp,
    first_seen: Instant,
    /// `None`: not read under this stamp yet (or not settled); `Some(None)`: final.
    kind: Option<Option<Kind>>,
}

/// Per (tenant, job): what its record said, under which stamp.
#[derive(Default)]
pub(crate) struct Census {
    entries: Mutex<HashMap<(TenantName, JobId), Entry>>,
    /// Records read, for the tests.
    #[cfg(test)]
    reads: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Census {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Census")
    }
}

impl Census {
    /// The unfinished jobs among `ids` (the tenant's running index) by kind.
    pub(crate) fn count(
        &self,
        paths: &TenantPaths,
        tenant: &TenantName,
        ids: Vec<JobId>,
    ) -> BTreeMap<Kind, u64> {
        let mut counts = BTreeMap::new();
        let jobs = rustix::fs::open(
            paths.jobs(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok();
        let listed: HashSet<&JobId> = ids.iter().collect();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|(t, id), _| t != tenant || listed.contains(id));
        for id in &ids {
            let stamp = jobs
                .as_ref()
                .and_then(|dir| Stamp::at(dir, &format!("{id}/{RECORD}")));
            let kind = match stamp {
                Some(stamp) => {
                    let key = (tenant.clone(), id.clone());
                    let entry = entries.entry(key).or_insert_with(|| Entry {
                        stamp,
                        first_seen: Instant::now(),
                        kind: None,
                    });
                    if entry.stamp != stamp {
                        *entry = Entry {
                            stamp,
                            first_seen: Instant::now(),
                            kind: None,
                        };
                    }
                    match &entry.kind {
                        Some(kind) => kind.clone(),
                        None => {
                            let settled = entry.first_seen.elapsed() >= SETTLE;
                            #[cfg(test)]
                            self.reads
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let kind = read_kind(paths, tenant, id);
                            // Kept only when settled and unchanged while read.
                            let same = jobs
                                .as_ref()
                                .and_then(|dir| Stamp::at(dir, &format!("{id}/{RECORD}")));
                            if settled && same == Some(stamp) {
                                entry.kind = Some(kind.clone());
                            }
                            kind
                        }
                    }
                }
                // No stamp (a race with its removal, or no jobs directory): read it plainly.
                None => read_kind(paths, tenant, id),
            };
            if let Some(kind) = kind {
                *counts.entry(kind).or_default() += 1;
            }
        }
        counts
    }
}

/// The record's (phase, mode); `None` when it is final or cannot be read.
fn read_kind(paths: &TenantPaths, tenant: &TenantName, id: &JobId) -> Option<Kind> {
    let record = read_record(paths, tenant, id).ok()?;
    (!record.is_final()).then(|| (name(&record.status.phase), name(&record.mode)))
}

/// A unit enum variant's serialised name (`running`, `slurm`).
fn name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::state::{
        InstanceId, JobMode, JobPhase, JobStatus, NewInstance, NewJob, Observation, Resources,
        State,
    };

    fn settle_now(census: &Census) {
        let mut entries = census.entries.lock().unwrap();
        for entry in entries.values_mut() {
            entry.first_seen -= SETTLE;
        }
    }

    fn submit(state: &State, tenant: &TenantName, instance: &InstanceId) -> JobId {
        let new = NewJob {
            instance: instance.clone(),
            mode: JobMode::Slurm,
            command: vec!["true".to_owned()],
            resources: Resources::default(),
            max_running_jobs: None,
        };
        state.new_job(tenant, new).unwrap().job_id
    }

    fn to(state: &State, tenant: &TenantName, job: &JobId, phase: JobPhase) {
        let observed = Observation::new(JobStatus::new(phase));
        state.refresh(tenant, job, observed).unwrap();
    }

    #[test]
    fn records_are_read_again_only_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let tenant = TenantName::parse("chem").unwrap();
        let instance = InstanceId::parse("run1").unwrap();
        let new = NewInstance {
            id: Some(instance.clone()),
            ..NewInstance::default()
        };
        state.create(&tenant, new).unwrap();
        let jobs: Vec<JobId> = (0..3).map(|_| submit(&state, &tenant, &instance)).collect();
        for job in &jobs {
            to(&state, &tenant, job, JobPhase::Pending);
        }
        let census = &state.memos.census;
        let reads = || census.reads.load(Ordering::Relaxed);
        let count = |phase: &str| {
            let counts = state.unfinished_by_kind(&tenant).unwrap();
            counts
                .get(&(phase.to_owned(), "slurm".to_owned()))
                .copied()
                .unwrap_or(0)
        };

        assert_eq!(count("pending"), 3);
        assert_eq!(count("pending"), 3);
        assert_eq!(reads(), 6, "fresh stamps are not trusted");
        settle_now(census);
        assert_eq!(count("pending"), 3);
        assert_eq!(count("pending"), 3);
        assert_eq!(count("pending"), 3);
        assert_eq!(reads(), 9, "settled: read once more, then kept");

        // A phase change replaces the record: that one is read again, the others are not.
        to(&state, &tenant, &jobs[0], JobPhase::Running);
        assert_eq!((count("pending"), count("running")), (2, 1));
        assert_eq!(reads(), 11);
        // A finished job leaves the index and the census.
        to(&state, &tenant, &jobs[1], JobPhase::Completed);
        assert_eq!((count("pending"), count("running")), (1, 1));
        let entries = census.entries.lock().unwrap().len();
        assert_eq!(entries, 2, "only unfinished jobs are kept");
    }
}
