//! State layer under concurrency: threads and separate processes (this test binary
//! re-executed for its `worker` test) creating, archiving and recording jobs on one state directory,
//! as several gateways sharing a filesystem would.

use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::thread;

use hpcgate::state::{
    InstanceId, JobMode, JobPhase, JobStatus, NewInstance, NewJob, Observation, PageRequest,
    Resources, State, StateError, TenantName,
};

use crate::support::reexec;

const WORKER_ENV: &str = "HPCGATE_STATE_TEST_WORKER_DIR";

fn t(name: &str) -> TenantName {
    TenantName::parse(name).unwrap()
}

fn id(name: &str) -> InstanceId {
    InstanceId::parse(name).unwrap()
}

fn new_instance(name: &str, max: Option<usize>) -> NewInstance {
    NewInstance {
        id: Some(id(name)),
        description: None,
        max_instances: max,
    }
}

fn all(state: &State, tenant: &TenantName) -> (usize, usize) {
    let page = PageRequest::new(500, 0).unwrap();
    (
        state.list(tenant, page).unwrap().total,
        state.list_archived(tenant, page).unwrap().total,
    )
}

#[test]
fn threads_racing_for_one_id_create_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path()).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (state, barrier) = (state.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                state.create(&t("chem"), new_instance("race", None))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(r, StateError::AlreadyExists { .. }), "{r}");
    }
    assert_eq!(all(&state, &t("chem")), (1, 0));
}

#[test]
fn threads_never_exceed_the_instance_quota() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path()).unwrap();
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let state = state.clone();
            thread::spawn(move || state.create(&t("chem"), new_instance(&format!("q{i}"), Some(5))))
        })
        .collect();
    let ok = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(Result::is_ok)
        .count();
    assert_eq!(ok, 5);
    assert_eq!(all(&state, &t("chem")), (5, 0));
}

/// Readers take no lock: while one thread rewrites an instance's metadata and job record
/// over and over, readers must always see a complete, valid version of each.
#[test]
fn readers_never_see_torn_metadata_or_records() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path()).unwrap();
    let chem = t("chem");
    state.create(&chem, new_instance("run1", None)).unwrap();
    let job = state
        .new_job(
            &chem,
            NewJob {
                instance: id("run1"),
                mode: JobMode::Local,
                command: vec!["sleep".into(), "1".into()],
                resources: Resources::default(),
                max_running_jobs: None,
            },
        )
        .unwrap();
    let writer = {
        let (state, job_id) = (state.clone(), job.job_id.clone());
        thread::spawn(move || {
            for i in 0..200 {
                let text = format!("{i}").repeat(1 + i % 50);
                state
                    .update(&t("chem"), &id("run1"), Some(Some(text)))
                    .unwrap();
                let mut status = JobStatus::new(JobPhase::Running);
                status.message = Some(format!("tick {i}"));
                state
                    .refresh(&t("chem"), &job_id, Observation::new(status))
                    .unwrap();
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() || reads < 50 {
        let instance = state.describe(&chem, &id("run1")).unwrap();
        assert!(!instance.archived);
        let record = state.job(&chem, &id("run1"), &job.job_id).unwrap();
        assert_eq!(record.job_id, job.job_id);
        assert_eq!(state.list(&chem, PageRequest::default()).unwrap().total, 1);
        reads += 1;
    }
    writer.join().unwrap();
}

/// One thread keeps recording jobs on an instance while another keeps trying to archive it:
/// the instance must never end up archived while one of its jobs is unfinished.
#[test]
fn archive_and_new_job_race_keeps_the_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path()).unwrap();
    let chem = t("chem");
    for round in 0..20 {
        let name = format!("r{round}");
        state.create(&chem, new_instance(&name, None)).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let submitter = {
            let (state, barrier, name) = (state.clone(), barrier.clone(), name.clone());
            thread::spawn(move || {
                barrier.wait();
                state.new_job(
                    &t("chem"),
                    NewJob {
                        instance: id(&name),
                        mode: JobMode::Slurm,
                        command: vec!["true".into()],
                        resources: Resources::default(),
                        max_running_jobs: None,
                    },
                )
            })
        };
        barrier.wait();
        let archived = state.archive(&chem, &id(&name), |_| None);
        let submitted = submitter.join().unwrap();
        let running = state.running_jobs(&chem, Some(&id(&name))).unwrap().len();
        match (&archived, &submitted) {
            (Ok(_), Ok(_)) => panic!("round {round}: archived with a job recorded"),
            (Ok(_), Err(e)) => assert!(matches!(e, StateError::Archived { .. }), "{e}"),
            (Err(e), Ok(_)) => {
                assert!(matches!(e, StateError::HasRunningJobs { .. }), "{e}");
                assert_eq!(running, 1);
            }
            (Err(a), Err(s)) => panic!("round {round}: both failed: {a}; {s}"),
        }
    }
}

/// Worker body, run in a child process: create `p0`..`p29` under a quota of 20, then archive
/// and unarchive (under the same quota) each instance it created. Writes the ids it created.
#[test]
#[ignore = "a worker process, run by processes_share_one_state_dir"]
fn worker() {
    let Ok(dir) = std::env::var(WORKER_ENV) else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: a worker of processes_share_one_state_dir, which sets {WORKER_ENV}"
        );
        return;
    };
    let state = State::open(Path::new(&dir).join("state")).unwrap();
    let chem = t("chem");
    let mut mine = Vec::new();
    for i in 0..30 {
        match state.create(&chem, new_instance(&format!("p{i}"), Some(20))) {
            Ok(instance) => mine.push(instance.id.to_string()),
            Err(StateError::AlreadyExists { .. } | StateError::QuotaExceeded { .. }) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    for name in &mine {
        state.archive(&chem, &id(name), |_| None).unwrap();
        state.update(&chem, &id(name), None).unwrap_err();
        // The freed slot may be taken by the other process meanwhile: then stay archived.
        match state.unarchive(&chem, &id(name), Some(20)) {
            Ok(_) => {
                let description = Some(Some(format!("by {}", std::process::id())));
                state.update(&chem, &id(name), description).unwrap();
            }
            Err(StateError::QuotaExceeded { .. }) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    let me = std::process::id();
    fs::write(
        Path::new(&dir).join(format!("created-{me}")),
        mine.join("\n"),
    )
    .unwrap();
}

#[test]
fn processes_share_one_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    State::open(dir.path().join("state")).unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            reexec("state_concurrency::worker")
                .arg("--test-threads=1")
                .env(WORKER_ENV, dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a worker failed");
    }
    let mut created: Vec<String> = Vec::new();
    for entry in fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("created-")
        {
            let text = fs::read_to_string(&path).unwrap();
            created.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned));
        }
    }
    let total = created.len();
    created.sort();
    created.dedup();
    assert_eq!(created.len(), total, "an id was created by both processes");
    assert!(total >= 20, "the quota's slots were all used: {total}");
    let state = State::open(dir.path().join("state")).unwrap();
    let (live, archived) = all(&state, &t("chem"));
    assert_eq!(
        live + archived,
        total,
        "every created instance is live or archived"
    );
    assert_eq!(live, 20, "the quota held across processes");
    for name in created {
        let instance = state.describe(&t("chem"), &id(&name)).unwrap();
        assert_eq!(instance.description.is_some(), !instance.archived, "{name}");
    }
}
