//! State layer, tenancy: the cross-tenant isolation matrix (tenant B sees exactly what it
//! would see if tenant A did not exist) and metadata that disagrees with where it is stored.

use std::fs;

use hpcgate::state::{ExecutorHandle, JobId, JobPhase, State, StateError, Timestamp};

use crate::support::state as support;
use support::{create, id, new_job, observed, page, snapshot, state, t};

/// Runs every tenant-B operation against `run1` and a job id, and renders the outcome.
fn tenant_b_view(state: &State, job_id: &JobId) -> Vec<String> {
    let b = t("bio");
    let run1 = id("run1");
    let show = |r: Result<String, StateError>| match r {
        Ok(v) => format!("ok {v}"),
        Err(e) => format!("err {e}"),
    };
    vec![
        show(state.describe(&b, &run1).map(|i| i.id.to_string())),
        show(state.update(&b, &run1, None).map(|i| i.id.to_string())),
        show(
            state
                .update(&b, &run1, Some(Some("x".into())))
                .map(|i| i.id.to_string()),
        ),
        show(state.archive(&b, &run1, |_| None).map(|i| i.id.to_string())),
        show(state.unarchive(&b, &run1, None).map(|i| i.id.to_string())),
        show(
            state
                .instance_paths_ambient(&b, &run1)
                .map(|_| String::new()),
        ),
        show(state.list(&b, page(10, 0)).map(|p| p.total.to_string())),
        show(
            state
                .list_archived(&b, page(10, 0))
                .map(|p| p.total.to_string()),
        ),
        show(state.count(&b).map(|c| c.to_string())),
        show(
            state
                .list_jobs(&b, Some(&run1), page(10, 0))
                .map(|p| p.total.to_string()),
        ),
        show(
            state
                .list_jobs(&b, None, page(10, 0))
                .map(|p| p.total.to_string()),
        ),
        show(state.running_jobs(&b, None).map(|v| v.len().to_string())),
        show(state.job(&b, &run1, job_id).map(|r| r.job_id.to_string())),
        show(state.job_dir_ambient(&b, job_id).map(|_| String::new())),
        show(
            state
                .refresh(&b, job_id, observed(JobPhase::Cancelled))
                .map(|_| String::new()),
        ),
        show(
            state
                .set_handle(
                    &b,
                    job_id,
                    ExecutorHandle::Local,
                    observed(JobPhase::Running),
                )
                .map(|_| String::new()),
        ),
        show(state.new_job(&b, new_job("run1")).map(|_| String::new())),
        show(
            state
                .prune_jobs_before(&b, Timestamp::from_unix_ms(u64::MAX))
                .map(|v| v.len().to_string()),
        ),
        show(
            state
                .clean_before(&b, Timestamp::from_unix_ms(u64::MAX))
                .map(|v| v.len().to_string()),
        ),
    ]
}

#[test]
fn tenant_b_sees_exactly_what_it_would_see_if_tenant_a_did_not_exist() {
    // World 1: tenant A has live `run1` with a running job, and archived `old` with a job.
    let (dir, state) = state();
    let a = t("chem");
    create(&state, &a, "run1");
    create(&state, &a, "old");
    let job = state.new_job(&a, new_job("run1")).unwrap();
    state
        .set_handle(
            &a,
            &job.job_id,
            ExecutorHandle::Local,
            observed(JobPhase::Running),
        )
        .unwrap();
    let old_job = state.new_job(&a, new_job("old")).unwrap();
    state
        .refresh(&a, &old_job.job_id, observed(JobPhase::Completed))
        .unwrap();
    state.archive(&a, &id("old"), |_| None).unwrap();
    let b = t("bio");
    let a_before = snapshot(&dir.path().join("state/tenants/chem"));

    // World 2: tenant A does not exist at all.
    let empty_dir = tempfile::tempdir().unwrap();
    let empty = State::open(empty_dir.path().join("state")).unwrap();

    assert_eq!(
        tenant_b_view(&state, &job.job_id),
        tenant_b_view(&empty, &job.job_id)
    );
    assert_eq!(
        tenant_b_view(&state, &old_job.job_id),
        tenant_b_view(&empty, &old_job.job_id)
    );
    assert_eq!(
        snapshot(&dir.path().join("state/tenants/chem")),
        a_before,
        "A untouched"
    );

    assert_eq!(state.tenants().unwrap(), vec![b.clone(), a.clone()]);

    // Same id in two tenants: independent instances.
    create(&state, &b, "run1");
    state
        .update(&b, &id("run1"), Some(Some("b's".into())))
        .unwrap();
    assert_eq!(state.describe(&a, &id("run1")).unwrap().description, None);
    assert_ne!(
        state.instance_paths_ambient(&a, &id("run1")).unwrap(),
        state.instance_paths_ambient(&b, &id("run1")).unwrap()
    );
    assert!(state.job(&b, &id("run1"), &job.job_id).is_err());
}

#[test]
fn metadata_copied_from_another_tenant_is_not_trusted() {
    let (dir, state) = state();
    let (a, b) = (t("chem"), t("bio"));
    create(&state, &a, "run1");
    let job = state.new_job(&a, new_job("run1")).unwrap();
    create(&state, &b, "other");
    // Someone with host access copies A's instance and job record into B's tree.
    let root = dir.path().join("state/tenants");
    fs::create_dir_all(root.join("bio/instances/run1")).unwrap();
    fs::copy(
        root.join("chem/instances/run1/meta.json"),
        root.join("bio/instances/run1/meta.json"),
    )
    .unwrap();
    let job_dir = root.join("bio/jobs").join(job.job_id.as_str());
    fs::create_dir_all(&job_dir).unwrap();
    fs::copy(
        root.join("chem/jobs")
            .join(job.job_id.as_str())
            .join("record.json"),
        job_dir.join("record.json"),
    )
    .unwrap();

    let err = state.describe(&b, &id("run1")).unwrap_err();
    assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
    assert_eq!(
        state.list(&b, page(10, 0)).unwrap().total,
        1,
        "skipped in listings"
    );
    assert!(matches!(
        state.job(&b, &id("run1"), &job.job_id),
        Err(StateError::Corrupt { .. })
    ));
    assert_eq!(state.list_jobs(&b, None, page(10, 0)).unwrap().total, 0);
}
