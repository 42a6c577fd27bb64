//! Unfinished jobs counted by phase and mode, for the metrics scrape (`hpcgate_jobs`).
//!
//! A scrape must not read every unfinished job's record: with 10,000 queued jobs that is
//! 10,000 opens and JSON parses (82 ms here), every 15 seconds, and even a `stat` per job
//! costs 50 ms on this kind of machine. The running index names each job's phase and mode
//! (`running.rs`), so one directory listing counts them; a record is read only when its marker
//! says nothing (an index from before) or a crash left two names for one job.

use std::collections::BTreeMap;

use super::id::TenantName;
use super::job::{JobMode, JobPhase};
use super::jobs::read_record;
use super::layout::TenantPaths;
use super::running::Marker;

/// (phase, mode) as their serde names (`pending`, `slurm`, …).
pub type Kind = (String, String);

/// The unfinished jobs among `markers` (the tenant's running index) by kind.
pub(crate) fn count(
    paths: &TenantPaths,
    tenant: &TenantName,
    mut markers: Vec<Marker>,
) -> BTreeMap<Kind, u64> {
    markers.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // A handful of kinds: counted by value, named once at the end.
    let mut counts: Vec<((JobPhase, JobMode), u64)> = Vec::new();
    let mut i = 0;
    while i < markers.len() {
        let id = &markers[i].0;
        let same = markers[i..].iter().take_while(|m| &m.0 == id).count();
        let kind = match (same, markers[i].1) {
            (1, Some(kind)) => Some(kind),
            _ => read_record(paths, tenant, id)
                .ok()
                .filter(|record| !record.is_final())
                .map(|record| (record.status.phase, record.mode)),
        };
        if let Some(kind) = kind {
            match counts.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => counts.push((kind, 1)),
            }
        }
        i += same;
    }
    counts
        .into_iter()
        .map(|((phase, mode), n)| ((name(&phase), name(&mode)), n))
        .collect()
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
    use super::*;
    use crate::state::layout::TenantPaths;
    use crate::state::{
        InstanceId, JobId, JobMode, JobPhase, JobStatus, NewInstance, NewJob, Observation,
        Resources, State,
    };

    fn submit(state: &State, tenant: &TenantName, instance: &InstanceId, mode: JobMode) -> JobId {
        let new = NewJob {
            instance: instance.clone(),
            mode,
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

    fn kinds(state: &State, tenant: &TenantName) -> Vec<(String, String, u64)> {
        let counts = state.unfinished_by_kind(tenant).unwrap();
        counts.into_iter().map(|((p, m), n)| (p, m, n)).collect()
    }

    fn k(phase: &str, mode: &str, n: u64) -> (String, String, u64) {
        (phase.to_owned(), mode.to_owned(), n)
    }

    #[test]
    fn the_index_names_each_jobs_phase_and_counts_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let tenant = TenantName::parse("chem").unwrap();
        let instance = InstanceId::parse("run1").unwrap();
        let new = NewInstance {
            id: Some(instance.clone()),
            ..NewInstance::default()
        };
        state.create(&tenant, new).unwrap();
        let slurm: Vec<JobId> = (0..3)
            .map(|_| submit(&state, &tenant, &instance, JobMode::Slurm))
            .collect();
        let local = submit(&state, &tenant, &instance, JobMode::Local);
        assert_eq!(
            kinds(&state, &tenant),
            [k("submitting", "local", 1), k("submitting", "slurm", 3)]
        );
        for job in &slurm {
            to(&state, &tenant, job, JobPhase::Pending);
        }
        to(&state, &tenant, &slurm[0], JobPhase::Running);
        to(&state, &tenant, &local, JobPhase::Running);
        to(&state, &tenant, &slurm[1], JobPhase::Completed);
        assert_eq!(
            kinds(&state, &tenant),
            [
                k("pending", "slurm", 1),
                k("running", "local", 1),
                k("running", "slurm", 1)
            ]
        );
        // One name per unfinished job; none for the finished one.
        let paths = TenantPaths::new(dir.path(), &tenant);
        let mut names: Vec<String> = std::fs::read_dir(paths.running())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut expected = vec![
            format!("{}.running.slurm", slurm[0]),
            format!("{}.pending.slurm", slurm[2]),
            format!("{local}.running.local"),
        ];
        expected.sort();
        assert_eq!(names, expected);
    }

    #[test]
    fn bare_or_doubled_names_are_settled_by_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let tenant = TenantName::parse("chem").unwrap();
        let instance = InstanceId::parse("run1").unwrap();
        let new = NewInstance {
            id: Some(instance.clone()),
            ..NewInstance::default()
        };
        state.create(&tenant, new).unwrap();
        let a = submit(&state, &tenant, &instance, JobMode::Slurm);
        let b = submit(&state, &tenant, &instance, JobMode::Slurm);
        to(&state, &tenant, &a, JobPhase::Running);
        to(&state, &tenant, &b, JobPhase::Running);
        let running = TenantPaths::new(dir.path(), &tenant).running();
        // An index from before names no phase; a crash between the new name and the removal
        // of the old leaves two, the old one wrong.
        std::fs::rename(
            running.join(format!("{a}.running.slurm")),
            running.join(a.as_str()),
        )
        .unwrap();
        std::fs::write(running.join(format!("{b}.pending.slurm")), "").unwrap();
        assert_eq!(kinds(&state, &tenant), [k("running", "slurm", 2)]);
        assert_eq!(state.running_job_count(&tenant).unwrap(), 2);
        // The sweep names them again, once each.
        let paths = TenantPaths::new(dir.path(), &tenant);
        crate::state::running::sweep_stale(&paths, &tenant).unwrap();
        let names = std::fs::read_dir(&running).unwrap().count();
        assert_eq!(names, 2);
        assert_eq!(kinds(&state, &tenant), [k("running", "slurm", 2)]);
    }
}
