//! MCP tasks in the core, without a transport: a task is made only for a caller that takes
//! one, and only while the job runs; `tasks/cancel` is `cancel_job` through the whole pipeline,
//! so a policy that denies `cancel_job` refuses it (and the job runs on); `tasks/get` is a
//! `poll_job` recorded as one audit record (decision and outcome together: it only looks).

use std::time::{Duration, Instant};

use hpcgate::gateway::{Request, TaskError};
use hpcgate::policy::Via;
use serde_json::{Map, Value, json};

use crate::support::gateway::{args, caller, err, ok, open};

const DENY_CANCEL: &str = "\n[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n\
     [policies.config]\ndeny = [\"cancel_job\"]\n";

#[test]
fn tasks_take_the_pipeline_and_a_policy_can_refuse_their_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let gw = open(dir.path(), DENY_CANCEL);
    let chem = caller("chem");
    ok(gw.call(&chem, "create_instance", args(json!({"instance_id": "r1"}))));
    let submit = |accepts: bool| {
        let arguments = args(json!({
            "instance_id": "r1", "command": "sleep 2; echo finished", "timeout": 0, "tail": 5
        }));
        let request =
            Request::new(chem.clone(), Via::Mcp, "submit_job", arguments).accepting_task(accepts);
        gw.dispatch(&gw.snapshot(), request)
    };
    // No task for a caller that does not take one; a task (durable, tenant-bound) for one that
    // does, with the job as it was.
    let plain = submit(false);
    assert!(plain.task.is_none() && !plain.is_error, "{}", plain.text);
    let tasked = submit(true);
    let task = tasked.task.clone().expect("a task for a running job");
    assert_eq!(tasked.structured["job"]["final"], false);
    assert_eq!(task.tail, Some(5));
    assert_eq!(
        task.job_id.as_str(),
        tasked.structured["job"]["job_id"].as_str().unwrap()
    );
    let id = task.task_id.to_string();
    let lookup = |tenant: &str| {
        let request = Request::new(caller(tenant), Via::Mcp, "poll_job", Map::new());
        gw.find_task(&request, &id)
    };
    assert!(lookup("chem").is_ok());
    assert!(matches!(lookup("bio"), Err(TaskError::NotFound)));

    // tasks/cancel: denied by policy as cancel_job is; the job runs on.
    let request = || Request::new(chem.clone(), Via::Mcp, "cancel_job", Map::new());
    let refused = gw.cancel_task(&gw.snapshot(), request(), &id).unwrap();
    assert!(
        err(refused.result).contains("denied by policy `tools`"),
        "refused"
    );
    let polled = gw.poll_task(&gw.snapshot(), request(), &id).unwrap();
    assert_eq!(ok(polled.result)["job"]["final"], false);

    // tasks/get until the job ends: the tail the submit asked for.
    let deadline = Instant::now() + Duration::from_secs(30);
    let finished = loop {
        let polled = gw.poll_task(&gw.snapshot(), request(), &id).unwrap();
        let job = ok(polled.result)["job"].clone();
        if job["final"] == true {
            break job;
        }
        assert!(Instant::now() < deadline, "the job never ended: {job}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(finished["status"], "completed");
    assert_eq!(finished["stdout_tail"], "finished");

    // The audit log: the task's creation as an event of the submit; each poll one record
    // (its decision with its outcome), the refused cancel a decision record.
    let records = audit_records(dir.path());
    let created: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "task.created")
        .collect();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["detail"]["task_id"], id.as_str());
    assert_eq!(created[0]["tool"], "submit_job");
    let polls: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "call" && r["tool"] == "poll_job")
        .collect();
    assert!(polls.len() >= 2, "{polls:?}");
    for poll in &polls {
        assert!(
            poll.get("decision").is_some(),
            "one record per poll: {poll}"
        );
        assert!(poll["detail"].get("decision_seq").is_none(), "{poll}");
    }
    let cancels = records
        .iter()
        .filter(|r| r["tool"] == "cancel_job" && r["decision"]["decision"] == "deny")
        .count();
    assert_eq!(cancels, 1);
}

/// A task whose job is pruned (retention) or deleted with its archived instance (`clean`) goes
/// with it: its file is removed and `tasks/get` answers "not found", like an id never issued. A
/// task whose job still exists is kept. A task left behind by a crash between the two removals
/// is "not found" too (never an internal error), and the next sweep removes it.
#[test]
fn tasks_go_with_their_pruned_or_cleaned_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let gw = open(dir.path(), "");
    let chem = caller("chem");
    let tenant = hpcgate::state::TenantName::parse("chem").unwrap();
    for id in ["keep", "gone"] {
        ok(gw.call(&chem, "create_instance", args(json!({"instance_id": id}))));
    }
    let task_on = |instance: &str, command: &str| {
        let arguments = args(json!({"instance_id": instance, "command": command, "timeout": 0}));
        let request =
            Request::new(chem.clone(), Via::Mcp, "submit_job", arguments).accepting_task(true);
        let result = gw.dispatch(&gw.snapshot(), request);
        result
            .task
            .expect("a task for a running job")
            .task_id
            .to_string()
    };
    let request = || Request::new(chem.clone(), Via::Mcp, "poll_job", Map::new());
    let poll = |id: &str| gw.poll_task(&gw.snapshot(), request(), id);
    let wait_final = |id: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while ok(poll(id).unwrap().result)["job"]["final"] != true {
            assert!(Instant::now() < deadline, "the job of {id} never ended");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let pruned = task_on("keep", "sleep 1");
    let cleaned = task_on("gone", "sleep 1");
    let running = task_on("keep", "sleep 60");
    wait_final(&pruned);
    wait_final(&cleaned);
    let tasks_dir = dir.path().join("state/tenants/chem/tasks");
    let file = |id: &str| tasks_dir.join(format!("{id}.json"));
    let gone = |id: &str| !file(id).exists() && matches!(poll(id), Err(TaskError::NotFound));

    // `clean` deletes the archived instance with its jobs, and the task of its job.
    ok(gw.call(
        &chem,
        "archive_instance",
        args(json!({"instance_id": "gone"})),
    ));
    let state = hpcgate::state::State::open(dir.path().join("state")).unwrap();
    assert_eq!(state.clean(&tenant, 0).unwrap().len(), 1);
    assert!(gone(&cleaned), "the cleaned instance's task is gone");
    assert!(file(&pruned).exists() && poll(&pruned).is_ok());

    // Pruning removes finished jobs and their tasks; a running job and its task stay. The
    // pruned task's file is kept aside and put back, as a crash before the sweep would leave it.
    let kept_aside = std::fs::read(file(&pruned)).unwrap();
    let now = hpcgate::state::Timestamp::now();
    assert_eq!(state.prune_jobs_before(&tenant, now).unwrap().len(), 1);
    assert!(gone(&pruned), "the pruned job's task is gone");
    assert!(poll(&running).is_ok(), "a running job's task stays");
    std::fs::write(file(&pruned), kept_aside).unwrap();
    assert!(
        matches!(poll(&pruned), Err(TaskError::NotFound)),
        "a task whose job is gone is not found"
    );
    state.prune_jobs_before(&tenant, now).unwrap();
    assert!(gone(&pruned), "the next sweep removes a leftover task");
    assert!(file(&running).exists());

    let cancelled = gw.cancel_task(&gw.snapshot(), request(), &running).unwrap();
    ok(cancelled.result);
}

fn audit_records(dir: &std::path::Path) -> Vec<Value> {
    crate::support::served::audit_text(&dir.join("state/audit"))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}
