//! Helpers shared by the state layer's test modules: a state directory in a temp dir, ids,
//! instances, job requests, pages, and a byte-for-byte snapshot of a directory tree.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use hpcgate::state::{
    InstanceId, JobMode, JobPhase, JobStatus, NewInstance, NewJob, Observation, PageRequest,
    Resources, State, TenantName,
};

pub fn state() -> (tempfile::TempDir, State) {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path().join("state")).unwrap();
    (dir, state)
}

pub fn t(name: &str) -> TenantName {
    TenantName::parse(name).unwrap()
}

pub fn id(name: &str) -> InstanceId {
    InstanceId::parse(name).unwrap()
}

pub fn create(state: &State, tenant: &TenantName, name: &str) {
    let new = NewInstance {
        id: Some(id(name)),
        ..NewInstance::default()
    };
    state.create(tenant, new).unwrap();
}

pub fn new_job(instance: &str) -> NewJob {
    NewJob {
        instance: id(instance),
        mode: JobMode::Local,
        command: vec!["make".into(), "-j".into(), "4".into()],
        resources: Resources {
            cpus: Some(4),
            ..Resources::default()
        },
        max_running_jobs: None,
    }
}

pub fn observed(phase: JobPhase) -> Observation {
    Observation::new(JobStatus::new(phase))
}

pub fn page(limit: usize, offset: usize) -> PageRequest {
    PageRequest::new(limit, offset).unwrap()
}

/// Every file under `dir` with its bytes (directories as empty entries).
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let key = path.strip_prefix(base).unwrap().display().to_string();
            if path.is_dir() {
                out.insert(key + "/", Vec::new());
                walk(base, &path, out);
            } else {
                out.insert(key, fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}
