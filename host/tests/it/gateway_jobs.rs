//! Job, cluster and host tools through the dispatch function, in process, with real bwrap
//! jobs supervised by the real `hpcgate` binary: results, waits with progress, cancel,
//! archive checks, restart re-attach, tenant isolation of job ids, and their audit records.

use crate::support::gateway as support;

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hpcgate::gateway::Request;
use hpcgate::policy::Via;
use hpcgate::tools::Progress;
use serde_json::{Value, json};
use support::{args, caller, err, ok};

/// Stock defaults plus a host command; only `list_archived_instances` is hidden.
const CONFIG: &str = r#"
[host_commands.hello]
argv = ["/bin/echo", "hello from the host"]
description = "Say hello"

[host_commands.slow]
argv = ["/bin/sleep", "30"]
description = "Never finishes in time"
timeout_s = 1

[[policies]]
name = "tools"
module = "stock:tool-filter"
[policies.config]
deny = ["list_archived_instances"]

[[policies]]
name = "caps"
module = "stock:resource-caps"
[policies.config]
action = "clamp"
cpus = { default = 1, max = 2 }
memory_mb = { default = 512, max = 1024 }
time_limit_s = { default = 60, max = 120 }
gpus = { default = 0, max = 0 }
"#;

fn setup(dir: &Path) -> hpcgate::gateway::Gateway {
    let gw = support::open(dir, CONFIG);
    ok(gw.call(
        &caller("chem"),
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    gw
}

/// Submits `command` to the caller's instance `run1` and returns the job id.
fn submit(
    gw: &hpcgate::gateway::Gateway,
    who: &hpcgate::gateway::Caller,
    command: &str,
    timeout: u64,
) -> String {
    let submitted = ok(gw.call(
        who,
        "submit_job",
        args(json!({"instance_id": "run1", "command": command, "timeout": timeout})),
    ));
    submitted["job"]["job_id"].as_str().unwrap().to_owned()
}

/// Whether job `id` of `tenant` has finished, as its supervisor recorded it.
fn finished(dir: &Path, tenant: &str, id: &str) -> bool {
    use hpcgate::state::{JobId, State, TenantName};
    let state = State::open(dir.join("state")).unwrap();
    let tenant = TenantName::parse(tenant).unwrap();
    let job_dir = state
        .job_dir_ambient(&tenant, &JobId::parse(id).unwrap())
        .unwrap();
    hpcgate_executors::sandbox::job_status(&job_dir)
        .unwrap()
        .phase
        == hpcgate_executors::sandbox::JobPhase::Finished
}

fn audit_events(dir: &Path, event: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir.join("state/audit")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let record: Value = serde_json::from_str(line).unwrap();
                if record["event"] == event {
                    out.push(record);
                }
            }
        }
    }
    out
}

#[test]
fn a_local_job_returns_its_state_output_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let chem = caller("chem");
    let submitted = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "echo out; echo err >&2; pwd; exit 3", "timeout": 30})),
    ));
    let job = &submitted["job"];
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["exit_code"], 3);
    assert_eq!(job["final"], true);
    assert_eq!(job["stdout_tail"], "out\n/workspace");
    assert_eq!(job["stderr_tail"], "err");
    assert_eq!(job["mode"], "local");
    // The policies' clamp reached the job: defaults filled in, nothing above the caps.
    assert_eq!(
        job["resources"],
        json!({"cpus": 1, "memory_mb": 512, "time_limit_s": 60, "gpus": 0})
    );
    let text = serde_json::to_string(&submitted).unwrap();
    assert!(
        !text.contains(&dir.path().display().to_string()),
        "no host path in results: {text}"
    );

    // Polling a finished job returns the same state, with the tail size asked for.
    let job_id = job["job_id"].as_str().unwrap();
    let polled = ok(gw.call(
        &chem,
        "poll_job",
        args(json!({"instance_id": "run1", "job_id": job_id, "tail": 1})),
    ));
    assert_eq!(polled["job"]["status"], "failed");
    assert_eq!(polled["job"]["stdout_tail"], "/workspace");

    // An argv command runs exactly, without a shell.
    let argv = ok(gw.call(
        &chem,
        "submit_job",
        args(
            json!({"instance_id": "run1", "command": ["/bin/echo", "a;b", "$HOME"], "timeout": 30}),
        ),
    ));
    assert_eq!(argv["job"]["status"], "completed");
    assert_eq!(argv["job"]["stdout_tail"], "a;b $HOME");

    let listed = ok(gw.call(&chem, "list_jobs", args(json!({"instance_id": "run1"}))));
    assert_eq!(listed["total"], 2);
    assert_eq!(listed["jobs"][1]["job_id"], job_id, "newest first");

    let submitted_events = audit_events(dir.path(), "job.submitted");
    assert_eq!(submitted_events.len(), 2);
    assert_eq!(submitted_events[0]["tenant"], "chem");
    assert_eq!(submitted_events[0]["tool"], "submit_job");
    let states: Vec<(String, String)> = audit_events(dir.path(), "job.state")
        .iter()
        .map(|r| {
            (
                r["outcome"]["job_id"].as_str().unwrap().to_owned(),
                r["outcome"]["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        states.contains(&(job_id.to_owned(), "failed".to_owned())),
        "{states:?}"
    );
    // Each transition once: polling the finished job again added nothing.
    assert_eq!(
        states
            .iter()
            .filter(|(id, s)| id == job_id && s == "failed")
            .count(),
        1
    );
}

#[test]
fn waiting_reports_progress_and_detach_false_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let seen = Mutex::new(Vec::<Progress>::new());
    let started = Instant::now();
    let request = Request::new(
        caller("chem"),
        Via::Mcp,
        "submit_job",
        args(
            json!({"instance_id": "run1", "command": "echo started; sleep 60", "timeout": 2, "detach": false}),
        ),
    );
    let report = |p| seen.lock().unwrap().push(p);
    let result = gw.dispatch(&gw.snapshot(), request.with_progress(&report));
    let job = ok(result)["job"].clone();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(job["status"], "cancelled", "{job}");
    assert_eq!(job["cancelled_at_end_of_wait"], true);
    assert_eq!(job["stdout_tail"], "started");
    let seen = seen.into_inner().unwrap();
    assert!(!seen.is_empty(), "progress was reported while waiting");
    assert!(seen.iter().all(|p| p.total == Some(2.0)));
    assert!(
        seen.windows(2).all(|w| w[0].progress <= w[1].progress),
        "progress never goes back: {seen:?}"
    );
}

/// `detach: false` leaves no job behind, and waits out the grace of one saving its work.
#[test]
fn detach_false_waits_for_a_job_saving_its_work() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let saving =
        "trap 'sleep 2; echo saved; exit 0' TERM; echo started; while :; do sleep 0.1; done";
    let job = ok(gw.call(
        &caller("chem"),
        "submit_job",
        args(json!({"instance_id": "run1", "command": saving, "timeout": 2, "detach": false})),
    ))["job"]
        .clone();
    assert_eq!(
        (&job["status"], &job["exit_code"], &job["stdout_tail"]),
        (&json!("cancelled"), &json!(0), &json!("started\nsaved")),
        "{job}"
    );
    assert_eq!(job["cancelled_at_end_of_wait"], true);
}

#[test]
fn archive_is_refused_while_a_job_runs_and_allowed_after_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let chem = caller("chem");
    let job = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "sleep 60", "timeout": 0})),
    ))["job"]
        .clone();
    assert_eq!(job["status"], "running", "{job}");
    let job_id = job["job_id"].as_str().unwrap();

    let refused = err(gw.call(
        &chem,
        "archive_instance",
        args(json!({"instance_id": "run1"})),
    ));
    assert!(refused.contains("running"), "{refused}");

    let cancelled = ok(gw.call(
        &chem,
        "cancel_job",
        args(json!({"instance_id": "run1", "job_id": job_id})),
    ));
    assert_eq!(cancelled["job"]["status"], "cancelled");
    assert!(cancelled["job"]["finished_at"].is_string());
    // Cancelling again is harmless.
    let again = gw.call(
        &chem,
        "cancel_job",
        args(json!({"instance_id": "run1", "job_id": job_id})),
    );
    assert!(again.text.starts_with("already finished"), "{}", again.text);

    ok(gw.call(
        &chem,
        "archive_instance",
        args(json!({"instance_id": "run1"})),
    ));
    assert_eq!(audit_events(dir.path(), "instance.archived").len(), 1);
}

#[test]
fn jobs_survive_a_gateway_restart_and_are_reattached() {
    let dir = tempfile::tempdir().unwrap();
    let chem = caller("chem");
    let (quick, slow) = {
        let gw = setup(dir.path());
        let quick = submit(&gw, &chem, "sleep 0.5; echo done", 0);
        let slow = submit(&gw, &chem, "sleep 4; echo slow done", 0);
        (quick, slow)
        // The gateway is dropped here, with both jobs possibly running.
    };
    // The quick job ends while no gateway runs: its supervisor records it finished.
    let waited = Instant::now();
    while !finished(dir.path(), "chem", &quick) {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the quick job never finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let gw = support::open(dir.path(), CONFIG);
    let polled = ok(gw.call(
        &chem,
        "poll_job",
        args(json!({"instance_id": "run1", "job_id": slow, "timeout": 30})),
    ));
    assert_eq!(polled["job"]["status"], "completed", "{polled}");
    assert_eq!(polled["job"]["stdout_tail"], "slow done");
    let quick = ok(gw.call(
        &chem,
        "poll_job",
        args(json!({"instance_id": "run1", "job_id": quick})),
    ));
    assert_eq!(quick["job"]["status"], "completed");
    let reattached = audit_events(dir.path(), "job.state")
        .into_iter()
        .filter(|r| r["detail"]["reattached"] == true)
        .count();
    assert!(reattached >= 1, "the quick job ended while no gateway ran");
}

#[test]
fn another_tenant_cannot_see_or_touch_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let job = ok(gw.call(
        &caller("chem"),
        "submit_job",
        args(json!({"instance_id": "run1", "command": "sleep 30", "timeout": 0})),
    ))["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let bio = caller("bio");
    ok(gw.call(
        &bio,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    for tool in ["poll_job", "cancel_job"] {
        let theirs = err(gw.call(
            &bio,
            tool,
            args(json!({"instance_id": "run1", "job_id": job})),
        ));
        let random = err(gw.call(
            &bio,
            tool,
            args(json!({"instance_id": "run1", "job_id": "j-aaaaaaaaaaaaaaaa"})),
        ));
        assert_eq!(
            theirs.replace(&job, "<id>"),
            random.replace("j-aaaaaaaaaaaaaaaa", "<id>"),
            "{tool}: another tenant's job looks exactly like a job that does not exist"
        );
    }
    let listed = ok(gw.call(&bio, "list_jobs", args(json!({}))));
    assert_eq!(listed["total"], 0);
    // Still running for its owner.
    let polled = ok(gw.call(
        &caller("chem"),
        "poll_job",
        args(json!({"instance_id": "run1", "job_id": job})),
    ));
    assert_eq!(polled["job"]["status"], "running");
    ok(gw.call(
        &caller("chem"),
        "cancel_job",
        args(json!({"instance_id": "run1", "job_id": job})),
    ));
}

#[test]
fn bad_job_requests_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let chem = caller("chem");
    let cases = [
        (
            json!({"instance_id": "run1", "command": "true", "mode": "slurm"}),
            "Slurm is not enabled",
        ),
        (
            json!({"instance_id": "run1", "command": "true", "mode": "cloud"}),
            "invalid arguments",
        ),
        (
            json!({"instance_id": "run1", "command": "true", "timeout": 99999}),
            "at most 3600",
        ),
        (
            json!({"instance_id": "run1", "command": "true", "tail": 5000}),
            "at most 1000",
        ),
        (json!({"instance_id": "run1", "command": ""}), "command"),
        (json!({"instance_id": "run1", "command": []}), "command"),
        (
            json!({"instance_id": "nope", "command": "true"}),
            "not found",
        ),
        (
            json!({"instance_id": "../x", "command": "true"}),
            "instance id",
        ),
        (
            json!({"instance_id": "run1", "command": "true", "resources": {"cpus": 1, "disk": 5}}),
            "unknown field `disk`",
        ),
    ];
    for (arguments, expected) in cases {
        let message = err(gw.call(&chem, "submit_job", args(arguments.clone())));
        assert!(
            message.contains(expected),
            "{arguments}: expected `{expected}` in: {message}"
        );
    }
    let message = err(gw.call(
        &chem,
        "poll_job",
        args(json!({"instance_id": "run1", "job_id": "../../etc"})),
    ));
    assert!(message.contains("job id"), "{message}");
}

#[test]
fn cluster_status_without_slurm_and_host_exec_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let gw = setup(dir.path());
    let chem = caller("chem");
    let status = ok(gw.call(&chem, "cluster_status", args(json!({}))));
    assert_eq!(status["slurm"], Value::Null);
    assert_eq!(status["yours"]["unfinished_jobs"], 0);

    let listed = ok(gw.call(&chem, "host_exec", args(json!({}))));
    assert_eq!(listed["commands"]["hello"]["description"], "Say hello");
    assert!(
        listed["commands"]["hello"].get("argv").is_none(),
        "the host argv is not shown to agents"
    );
    let ran = ok(gw.call(&chem, "host_exec", args(json!({"command": "hello"}))));
    assert_eq!(ran["exit_code"], 0);
    assert_eq!(ran["stdout"], "hello from the host\n");

    let started = Instant::now();
    let slow = ok(gw.call(&chem, "host_exec", args(json!({"command": "slow"}))));
    assert_eq!(slow["timed_out"], true);
    assert!(started.elapsed() < Duration::from_secs(10));

    let unknown = err(gw.call(&chem, "host_exec", args(json!({"command": "rm -rf /"}))));
    assert!(unknown.contains("unknown host command"), "{unknown}");
    assert!(unknown.contains("hello, slow"), "{unknown}");
    let recorded = audit_events(dir.path(), "host_exec");
    assert_eq!(recorded.len(), 2, "one record per command run");
    assert_eq!(recorded[0]["detail"]["key"], "hello");
}

#[test]
fn the_running_jobs_quota_counts_unfinished_jobs_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{CONFIG}\n[tenants.chem]\nquotas = {{ max_running_jobs = 1 }}\n");
    let (gw, chem) = support::open_with_chems_run1(dir.path(), &config);
    let first = submit(&gw, &chem, "sleep 60", 0);
    let refused = err(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "true", "timeout": 0})),
    ));
    assert!(
        refused.contains("1 unfinished jobs (maximum 1)"),
        "{refused}"
    );
    // Another tenant has its own count.
    let bio = caller("bio");
    ok(gw.call(
        &bio,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    ok(gw.call(
        &bio,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "true", "timeout": 10})),
    ));
    ok(gw.call(
        &chem,
        "cancel_job",
        args(json!({"instance_id": "run1", "job_id": first})),
    ));
    let after = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "true", "timeout": 10})),
    ));
    assert_eq!(after["job"]["status"], "completed");
}

#[test]
fn finished_jobs_past_retention_are_pruned_at_start_and_running_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let chem = caller("chem");
    let (done, running) = {
        let gw = setup(dir.path());
        let done = submit(&gw, &chem, "true", 30);
        let running = submit(&gw, &chem, "sleep 60", 0);
        (done, running)
    };
    std::thread::sleep(Duration::from_millis(20));
    let mut settings = support::settings(dir.path(), CONFIG).unwrap();
    settings.job_retention = Some(Duration::from_millis(10));
    let supervisor = hpcgate_executors::sandbox::SupervisorCommand::reexec(
        env!("CARGO_BIN_EXE_hpcgate"),
        hpcgate::jobs::SUPERVISE_SUBCOMMAND,
    );
    let gw = hpcgate::gateway::Gateway::open_with_supervisor(settings, supervisor).unwrap();
    let listed = ok(gw.call(&chem, "list_jobs", args(json!({}))));
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [running.as_str()], "{done} was pruned");
    ok(gw.call(
        &chem,
        "cancel_job",
        args(json!({"instance_id": "run1", "job_id": running})),
    ));
}

/// A limit too large to be one is refused where no policy caps it: the cgroup would refuse a
/// `cpu.max` past about 2^44 µs and leave only rlimits; a deadline past the clock's range
/// would end the job as lost.
#[test]
fn a_limit_too_large_to_be_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = support::open(dir.path(), "policies = []\n");
    let alice = caller("default");
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    for (resources, expected) in [
        (
            json!({"cpus": 4_294_967_295u64}),
            "`cpus` is 4294967295, more than a sandbox takes (at most 65536)",
        ),
        (json!({"time_limit_s": u64::MAX}), "`time_limit_s` is"),
    ] {
        let run = json!({"instance_id": "run1", "command": "true", "resources": resources});
        let message = err(gw.call(&alice, "submit_job", args(run)));
        assert!(message.contains(expected), "{message}");
    }
}

/// A gateway starting on the same state directory (any CLI command does too) reconciles the
/// starts a crash left: a job with a record and no executor handle. One another process is
/// starting right now looks the same, and is left alone while its start holds its lease; once
/// nobody does, it is the crashed start it looks like, and is lost.
#[test]
fn a_start_in_progress_elsewhere_is_not_taken_for_a_crashed_one() {
    use crate::support::state::{create, new_job, t};
    use hpcgate::state::{JobPhase, State};
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path().join("state")).unwrap();
    let tenant = t("default");
    create(&state, &tenant, "run1");
    let (record, lease) = state.new_job_starting(&tenant, new_job("run1")).unwrap();
    let phase = || {
        let instance = hpcgate::state::InstanceId::parse("run1").unwrap();
        state
            .job(&tenant, &instance, &record.job_id)
            .unwrap()
            .status
            .phase
    };
    drop(support::open(dir.path(), CONFIG));
    assert_eq!(
        phase(),
        JobPhase::Submitting,
        "a start in progress is left alone"
    );
    drop(lease);
    drop(support::open(dir.path(), CONFIG));
    assert_eq!(
        phase(),
        JobPhase::Lost,
        "a start nobody holds is a crashed one"
    );
}
