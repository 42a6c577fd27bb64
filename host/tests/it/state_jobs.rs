//! State layer, jobs: job records, refresh rules, quotas, retention, and the archive check
//! (a refusal leaves every byte untouched).

use std::fs;

use hpcgate::state::{
    ExecutorHandle, JobId, JobPhase, JobRecord, JobStatus, NewJob, Observation, StateError,
    Timestamp,
};

use crate::support::state as support;
use support::{create, id, new_job, observed, page, snapshot, state, t};

#[test]
fn job_lifecycle_refresh_and_listing() {
    let (dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    create(&state, &chem, "run2");
    let job = state.new_job(&chem, new_job("run1")).unwrap();
    assert_eq!(job.status.phase, JobPhase::Submitting);
    assert!(job.job_id.as_str().starts_with("j-"));
    assert_eq!((job.handle.clone(), job.finished_at), (None, None));

    let job_dir = state.job_dir_ambient(&chem, &job.job_id).unwrap();
    assert!(job_dir.parent().unwrap().is_dir() && !job_dir.exists());
    let started = state
        .set_handle(
            &chem,
            &job.job_id,
            ExecutorHandle::Local,
            observed(JobPhase::Running),
        )
        .unwrap();
    assert!(started.changed && !started.became_final);
    assert!(started.record.started_at.is_some());
    let twice = state.set_handle(
        &chem,
        &job.job_id,
        ExecutorHandle::Local,
        observed(JobPhase::Running),
    );
    assert!(matches!(twice, Err(StateError::HandleAlreadySet { .. })));

    let same = state
        .refresh(&chem, &job.job_id, observed(JobPhase::Running))
        .unwrap();
    assert!(!same.changed);
    let mut failed = JobStatus::new(JobPhase::Failed);
    failed.exit_code = Some(2);
    let done = state
        .refresh(&chem, &job.job_id, Observation::new(failed))
        .unwrap();
    assert!(done.changed && done.became_final);
    assert!(done.record.finished_at.is_some());
    // Final is final: a later observation changes nothing, and produces no second event.
    let late = state
        .refresh(&chem, &job.job_id, observed(JobPhase::Completed))
        .unwrap();
    assert!(!late.changed && !late.became_final);
    assert_eq!(late.record.status.exit_code, Some(2));
    let reread = state.job(&chem, &id("run1"), &job.job_id).unwrap();
    assert_eq!(reread, late.record);

    // The job is not reachable through another instance of the same tenant.
    let wrong = state.job(&chem, &id("run2"), &job.job_id).unwrap_err();
    assert!(matches!(wrong, StateError::NotFound { .. }), "{wrong}");

    // Cancelled jobs get finished_at.
    let cancelled = state.new_job(&chem, new_job("run1")).unwrap();
    let c = state
        .refresh(&chem, &cancelled.job_id, observed(JobPhase::Cancelled))
        .unwrap();
    assert!(c.record.finished_at.is_some());

    // Listing: newest first, per instance, paginated.
    let mut ids = vec![job.job_id.clone(), cancelled.job_id.clone()];
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        ids.push(state.new_job(&chem, new_job("run1")).unwrap().job_id);
    }
    state.new_job(&chem, new_job("run2")).unwrap();
    let listed = state
        .list_jobs(&chem, Some(&id("run1")), page(10, 0))
        .unwrap();
    assert_eq!(listed.total, 5);
    let got: Vec<JobId> = listed.items.iter().map(|r| r.job_id.clone()).collect();
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(&got[..3], &expected[..3], "newest first");
    assert_eq!(state.list_jobs(&chem, None, page(10, 0)).unwrap().total, 6);
    let past = state
        .list_jobs(&chem, Some(&id("run1")), page(2, 5))
        .unwrap();
    assert_eq!((past.items.len(), past.range()), (0, None));
    assert_eq!(
        state.running_jobs(&chem, Some(&id("run1"))).unwrap().len(),
        3
    );
    assert_eq!(state.running_jobs(&chem, None).unwrap().len(), 4);

    let json = serde_json::to_string(&listed).unwrap();
    assert!(!json.contains(dir.path().to_str().unwrap()), "{json}");
}

#[test]
fn new_job_checks_instance_command_and_quota() {
    let (_dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let missing = state.new_job(&chem, new_job("nope")).unwrap_err();
    assert!(matches!(missing, StateError::NotFound { .. }), "{missing}");
    let mut empty = new_job("run1");
    empty.command = vec![];
    assert!(matches!(
        state.new_job(&chem, empty),
        Err(StateError::InvalidCommand)
    ));
    let mut blank = new_job("run1");
    blank.command = vec!["  ".into()];
    assert!(matches!(
        state.new_job(&chem, blank),
        Err(StateError::InvalidCommand)
    ));

    let limited = || NewJob {
        max_running_jobs: Some(2),
        ..new_job("run1")
    };
    let first = state.new_job(&chem, limited()).unwrap();
    state.new_job(&chem, limited()).unwrap();
    let over = state.new_job(&chem, limited()).unwrap_err();
    assert!(
        matches!(over, StateError::JobQuotaExceeded { .. }),
        "{over}"
    );
    state
        .refresh(&chem, &first.job_id, observed(JobPhase::Completed))
        .unwrap();
    state.new_job(&chem, limited()).unwrap();

    state
        .archive(&chem, &id("run1"), |_| Some(observed(JobPhase::Completed)))
        .unwrap();
    let archived = state.new_job(&chem, new_job("run1")).unwrap_err();
    assert!(
        matches!(archived, StateError::Archived { .. }),
        "{archived}"
    );
    // History of an archived instance stays listable.
    assert_eq!(
        state
            .list_jobs(&chem, Some(&id("run1")), page(10, 0))
            .unwrap()
            .total,
        3
    );
}

#[test]
fn archive_with_a_running_job_changes_nothing() {
    let (dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let job = state.new_job(&chem, new_job("run1")).unwrap();
    state
        .set_handle(
            &chem,
            &job.job_id,
            ExecutorHandle::Local,
            observed(JobPhase::Running),
        )
        .unwrap();
    let tenant_dir = dir.path().join("state/tenants/chem");
    let before = snapshot(&tenant_dir);

    let mut seen = Vec::new();
    let err = state
        .archive(&chem, &id("run1"), |r: &JobRecord| {
            seen.push(r.job_id.clone());
            None
        })
        .unwrap_err();
    assert!(
        matches!(&err, StateError::HasRunningJobs { count: 1, first, .. } if *first == job.job_id.to_string()),
        "{err}"
    );
    assert_eq!(
        seen,
        vec![job.job_id.clone()],
        "the gateway is asked about each unfinished job"
    );
    let refused_again = state
        .archive(&chem, &id("run1"), |_| Some(observed(JobPhase::Running)))
        .unwrap_err();
    assert!(matches!(refused_again, StateError::HasRunningJobs { .. }));
    assert_eq!(
        snapshot(&tenant_dir),
        before,
        "a refused archive touches nothing"
    );
    assert!(!state.describe(&chem, &id("run1")).unwrap().archived);

    // Once the executor reports the end, the archive goes through and records it.
    let mut oom = JobStatus::new(JobPhase::Oom);
    oom.reason = Some("OUT_OF_MEMORY".into());
    state
        .archive(&chem, &id("run1"), |_| Some(Observation::new(oom.clone())))
        .unwrap();
    let record = state.job(&chem, &id("run1"), &job.job_id).unwrap();
    assert_eq!(record.status.phase, JobPhase::Oom);
    assert!(record.finished_at.is_some());
}

#[test]
fn prune_removes_only_old_finished_jobs() {
    let (_dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let running = state.new_job(&chem, new_job("run1")).unwrap();
    let done = state.new_job(&chem, new_job("run1")).unwrap();
    state
        .refresh(&chem, &done.job_id, observed(JobPhase::Completed))
        .unwrap();
    let job_dir = state.job_dir_ambient(&chem, &done.job_id).unwrap();
    fs::create_dir(&job_dir).unwrap();
    fs::write(job_dir.join("stdout"), b"out").unwrap();

    assert!(
        state
            .prune_jobs(&chem, std::time::Duration::from_secs(3600))
            .unwrap()
            .is_empty()
    );
    let future = Timestamp::from_unix_ms(Timestamp::now().unix_ms() + 60_000);
    assert_eq!(
        state.prune_jobs_before(&chem, future).unwrap(),
        vec![done.job_id.clone()]
    );
    assert!(!job_dir.exists());
    assert!(matches!(
        state.job(&chem, &id("run1"), &done.job_id),
        Err(StateError::NotFound { .. })
    ));
    state.job(&chem, &id("run1"), &running.job_id).unwrap();

    // Cleaning an archived instance removes its job records too: a new instance with the
    // same id does not inherit them.
    state
        .refresh(&chem, &running.job_id, observed(JobPhase::Completed))
        .unwrap();
    state.archive(&chem, &id("run1"), |_| None).unwrap();
    state.clean_before(&chem, future).unwrap();
    create(&state, &chem, "run1");
    assert_eq!(
        state
            .list_jobs(&chem, Some(&id("run1")), page(10, 0))
            .unwrap()
            .total,
        0
    );
}

#[test]
fn crashed_new_job_leftovers_are_ignored_then_swept() {
    let (dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let job = state.new_job(&chem, new_job("run1")).unwrap();
    let jobs = dir.path().join("state/tenants/chem/jobs");
    // A new_job that crashed before publishing, holding a complete-looking record.
    let leftover = jobs.join(".new-j-bbbbbbbbbbbbbbbb");
    fs::create_dir(&leftover).unwrap();
    fs::copy(
        jobs.join(job.job_id.as_str()).join("record.json"),
        leftover.join("record.json"),
    )
    .unwrap();
    let listed = state.list_jobs(&chem, None, page(10, 0)).unwrap();
    assert_eq!(listed.total, 1);
    assert_eq!(state.running_jobs(&chem, None).unwrap().len(), 1);
    let bogus = JobId::parse("j-bbbbbbbbbbbbbbbb").unwrap();
    assert!(matches!(
        state.job(&chem, &id("run1"), &bogus),
        Err(StateError::NotFound { .. })
    ));
    state
        .prune_jobs(&chem, std::time::Duration::from_secs(60))
        .unwrap();
    assert!(!leftover.exists(), "prune sweeps crashed new_job leftovers");
    state.job(&chem, &id("run1"), &job.job_id).unwrap();
}

/// The running-jobs index (`jobs/.running/`) lists the unfinished jobs, so `usage` and the
/// quota read those records only; crash leftovers in it are harmless and swept, and a state
/// directory without it gets it rebuilt from the records.
#[test]
fn running_index_follows_jobs_and_recovers_from_crashes() {
    let (dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let jobs: Vec<JobRecord> = (0..3)
        .map(|_| state.new_job(&chem, new_job("run1")).unwrap())
        .collect();
    let index = dir.path().join("state/tenants/chem/jobs/.running");
    let names = || {
        let mut names: Vec<String> = fs::read_dir(&index)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    // The job ids the markers name (a marker is `<id>.<phase>.<mode>`).
    let markers = || {
        let ids = names().into_iter();
        ids.map(|n| n.split('.').next().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let ids = |records: &[&JobRecord]| {
        let mut ids: Vec<String> = records.iter().map(|r| r.job_id.to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(markers(), ids(&[&jobs[0], &jobs[1], &jobs[2]]));
    for name in names() {
        assert!(name.ends_with(".submitting.local"), "{name}");
    }

    let finished = &jobs[0];
    state
        .refresh(&chem, &finished.job_id, observed(JobPhase::Completed))
        .unwrap();
    assert_eq!(markers(), ids(&[&jobs[1], &jobs[2]]));
    assert_eq!(state.running_jobs(&chem, None).unwrap().len(), 2);

    // A crash between "final record durable" and "marker removed", and one between "marker
    // durable" and "record published": both leave a marker that counts for nothing.
    fs::write(index.join(finished.job_id.as_str()), b"").unwrap();
    fs::write(index.join("j-cccccccccccccccc"), b"").unwrap();
    assert_eq!(state.running_jobs(&chem, None).unwrap().len(), 2);
    assert!(matches!(
        state.new_job(
            &chem,
            NewJob {
                max_running_jobs: Some(2),
                ..new_job("run1")
            }
        ),
        Err(StateError::JobQuotaExceeded { count: 2, .. })
    ));
    state
        .prune_jobs(&chem, std::time::Duration::from_secs(3600))
        .unwrap();
    assert_eq!(markers(), ids(&[&jobs[1], &jobs[2]]), "stale markers swept");

    // Only indexed records are read: a finished record that claims to run again (edited
    // by hand, never by the gateway) is not counted.
    let edited = dir
        .path()
        .join("state/tenants/chem/jobs")
        .join(finished.job_id.as_str())
        .join("record.json");
    let text = fs::read_to_string(&edited).unwrap();
    assert!(text.contains("\"completed\""));
    fs::write(&edited, text.replace("\"completed\"", "\"running\"")).unwrap();
    assert_eq!(state.running_jobs(&chem, None).unwrap().len(), 2);
    fs::write(&edited, text).unwrap();

    // A state directory from before the index: rebuilt from the records on first use, and
    // the archive check still sees the running jobs.
    fs::remove_dir_all(&index).unwrap();
    assert!(matches!(
        state.archive(&chem, &id("run1"), |_| None),
        Err(StateError::HasRunningJobs { count: 2, .. })
    ));
    assert_eq!(markers(), ids(&[&jobs[1], &jobs[2]]));
    fs::remove_dir_all(&index).unwrap();
    let running = state.running_jobs(&chem, Some(&id("run1"))).unwrap();
    assert_eq!(ids(&running.iter().collect::<Vec<_>>()), markers());
    assert_eq!(running.len(), 2);

    // Counting for a tenant that never had a job creates nothing.
    assert!(state.running_jobs(&t("bio"), None).unwrap().is_empty());
    assert!(!dir.path().join("state/tenants/bio").exists());
}

/// A running job whose record cannot be read (corrupt, or a newer version's) is not a job that
/// ended: the running-jobs quota and archive refuse rather than let it pass uncounted.
#[test]
fn an_unreadable_running_record_is_not_taken_for_an_ended_job() {
    let (_dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let job = state.new_job(&chem, new_job("run1")).unwrap();
    let record = (state.job_dir_ambient(&chem, &job.job_id).unwrap()).with_file_name("record.json");
    assert!(record.is_file(), "{}", record.display());
    fs::write(
        &record,
        br#"{"version": 9, "status": {"phase": "teleported"}}"#,
    )
    .unwrap();
    let limited = NewJob {
        max_running_jobs: Some(5),
        ..new_job("run1")
    };
    let refused = state.new_job(&chem, limited).unwrap_err();
    assert!(matches!(refused, StateError::Corrupt { .. }), "{refused}");
    let refused = state
        .archive(&chem, &id("run1"), |_| Some(observed(JobPhase::Completed)))
        .unwrap_err();
    assert!(matches!(refused, StateError::Corrupt { .. }), "{refused}");
    assert_eq!(
        state.running_jobs(&chem, None).unwrap().len(),
        0,
        "listing skips it"
    );

    // A newer hpcgate's record, well-formed: not read with this one's meaning either.
    fs::remove_dir_all(record.parent().unwrap()).unwrap();
    let job = state.new_job(&chem, new_job("run1")).unwrap();
    let path = (state.job_dir_ambient(&chem, &job.job_id).unwrap()).with_file_name("record.json");
    let mut newer: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    newer["version"] = 2.into();
    fs::write(&path, serde_json::to_vec(&newer).unwrap()).unwrap();
    let refused = state.job(&chem, &id("run1"), &job.job_id).unwrap_err();
    assert!(
        matches!(refused, StateError::NewerFormat { version: 2, .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("newer"), "{refused}");
}

/// Archive asks the executor about the instance's jobs without the tenant's lock (Slurm's
/// clients can take seconds, and every call of the tenant waits for the lock): another job can
/// be recorded meanwhile, and then refuses the archive.
#[test]
fn archive_asks_the_executor_without_holding_the_tenant() {
    let (_dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    state.new_job(&chem, new_job("run1")).unwrap();
    let state = std::sync::Arc::new(state);
    let (tx, rx) = std::sync::mpsc::channel();
    let archiving = state.clone();
    std::thread::spawn(move || {
        let chem = t("chem");
        let outcome = archiving.archive(&chem, &id("run1"), |_| {
            // What another call of the tenant does while Slurm answers.
            archiving.new_job(&chem, new_job("run1")).unwrap();
            Some(observed(JobPhase::Completed))
        });
        let _ = tx.send(outcome.map(drop));
    });
    let outcome = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the tenant was locked while the executor was asked");
    assert!(
        matches!(outcome, Err(StateError::HasRunningJobs { count: 1, .. })),
        "{outcome:?}"
    );
}

/// A record that ended (a reconciliation took its start for a crashed one) takes no executor
/// handle afterwards: the starter is told, and stops what it started.
#[test]
fn an_ended_record_takes_no_handle() {
    let (_dir, state) = state();
    let chem = t("chem");
    create(&state, &chem, "run1");
    let job = state.new_job(&chem, new_job("run1")).unwrap();
    state
        .refresh(
            &chem,
            &job.job_id,
            Observation::lost("taken for a crashed start"),
        )
        .unwrap();
    let refused = state
        .set_handle(
            &chem,
            &job.job_id,
            ExecutorHandle::Local,
            observed(JobPhase::Running),
        )
        .unwrap_err();
    assert!(
        matches!(refused, StateError::HandleAlreadySet { .. }),
        "{refused}"
    );
    let record = state.job(&chem, &id("run1"), &job.job_id).unwrap();
    assert_eq!((record.status.phase, record.handle), (JobPhase::Lost, None));
}
