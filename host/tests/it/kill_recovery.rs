//! Kill -9 of the gateway in the middle of a call load: the real
//! binary over stdio with the rmcp client, SIGKILLed while calls are in flight, then
//! restarted. The audit log verifies (a torn last line is repaired by the restart and
//! recorded), every job the gateway accepted is still tracked, and the jobs that ran through
//! the kill — their supervisors are separate processes — finish with their output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hpcgate::time::Timestamp;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{Peer, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Jobs submitted before the load, and while it runs.
const JOBS: usize = 4;
const LOADED_SUBMISSIONS: usize = 3;
/// Concurrent callers of cheap tools, each one call at a time until the gateway is gone.
const WORKERS: usize = 16;
/// Cheap calls answered before the kill (at least).
const ANSWERED_BEFORE_KILL: usize = 100;

static JOB: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"instance_id": "run1", "command": "sleep 3; echo done", "timeout": 0}),
);

/// Progress of the load; `enough` fires once the kill may come.
#[derive(Default)]
struct Load {
    answered: AtomicUsize,
    submitted: AtomicUsize,
    enough: Notify,
}

impl Load {
    fn check(&self) {
        if self.answered.load(Ordering::SeqCst) >= ANSWERED_BEFORE_KILL
            && self.submitted.load(Ordering::SeqCst) >= LOADED_SUBMISSIONS
        {
            // Stores a permit if nobody waits yet; later calls change nothing.
            self.enough.notify_one();
        }
    }
}

fn config(dir: &Path) -> PathBuf {
    let path = dir.join("gateway.toml");
    let state = dir.join("state").display().to_string();
    std::fs::write(&path, format!("state_dir = {state:?}\n")).unwrap();
    path
}

async fn start(dir: &Path) -> (RunningService<RoleClient, ()>, u32) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .arg("run")
        .arg("--config")
        .arg(config(dir))
        .env("HOME", dir.join("home"))
        .env("USER", "kill-tester")
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG");
    let transport = TokioChildProcess::new(command).unwrap();
    let pid = transport.id().expect("the gateway runs");
    let client = ().serve(transport).await.expect("MCP handshake");
    (client, pid)
}

fn params(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(map) = arguments else {
        unreachable!("arguments are objects")
    };
    CallToolRequestParams::new(name).with_arguments(map)
}

/// The structured result of a call that must succeed.
async fn ok(peer: &Peer<RoleClient>, name: &'static str, arguments: Value) -> Value {
    let result: CallToolResult = peer.call_tool(params(name, arguments)).await.unwrap();
    assert_eq!(result.is_error, Some(false), "{name}: {:?}", result.content);
    result.structured_content.expect("structured content")
}

fn audit_verify(dir: &Path) -> (Option<i32>, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["audit", "verify", "--json", "--dir"])
        .arg(dir.join("state/audit"))
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).expect("a JSON report");
    (output.status.code(), report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_mid_load_recovers_its_audit_log_and_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let (client, pid) = start(dir.path()).await;
    let peer = client.peer().clone();
    ok(&peer, "create_instance", json!({"instance_id": "run1"})).await;

    // Detached jobs that outlive the gateway: each returned id is a job the gateway accepted.
    let mut accepted = Vec::new();
    for _ in 0..JOBS {
        let submitted = ok(&peer, "submit_job", JOB.clone()).await;
        assert_eq!(submitted["job"]["status"], "running", "{submitted}");
        accepted.push(submitted["job"]["job_id"].as_str().unwrap().to_owned());
    }

    // Under a steady load of concurrent cheap calls, more jobs are submitted; the kill lands
    // once these submissions have returned and the load has been answered for a while, with
    // the load's next calls (and some last submissions) in flight.
    let load = Arc::new(Load::default());
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (peer, load) = (peer.clone(), Arc::clone(&load));
        workers.push(tokio::spawn(async move {
            for i in 0usize.. {
                let request = if (worker + i) % 2 == 0 {
                    let path = format!("w{worker}-{i}.txt");
                    params(
                        "write_file",
                        json!({"instance_id": "run1", "path": path, "content": "x"}),
                    )
                } else {
                    params("stat_path", json!({"instance_id": "run1", "path": "."}))
                };
                if peer.call_tool(request).await.is_err() {
                    return; // the gateway is gone: this call was in flight
                }
                load.answered.fetch_add(1, Ordering::SeqCst);
                load.check();
            }
        }));
    }
    let submit = |peer: Peer<RoleClient>, load: Arc<Load>| async move {
        let result = peer.call_tool(params("submit_job", JOB.clone())).await;
        load.submitted.fetch_add(1, Ordering::SeqCst);
        load.check();
        result.ok()
    };
    let mut submissions: Vec<_> = (0..LOADED_SUBMISSIONS)
        .map(|_| tokio::spawn(submit(peer.clone(), Arc::clone(&load))))
        .collect();
    load.enough.notified().await;
    submissions.extend((0..2).map(|_| tokio::spawn(submit(peer.clone(), Arc::clone(&load)))));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let killed_at = Timestamp::now();
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(30), worker)
            .await
            .expect("every call returns once the gateway is gone")
            .unwrap();
    }
    let mut in_flight = WORKERS;
    for submission in submissions {
        let result = tokio::time::timeout(Duration::from_secs(30), submission)
            .await
            .expect("every call returns once the gateway is gone")
            .unwrap();
        match result {
            Some(r) if r.is_error == Some(false) => {
                let job = &r.structured_content.expect("structured content")["job"];
                accepted.push(job["job_id"].as_str().unwrap().to_owned());
            }
            _ => in_flight += 1,
        }
    }
    assert!(
        accepted.len() >= JOBS + LOADED_SUBMISSIONS,
        "the submissions under load were accepted: {accepted:?}"
    );
    assert!(in_flight > 0, "the kill came after every call had returned");
    drop(client);

    // (a) Before any restart the log is intact, or broken only by a torn last line.
    let (code, before) = audit_verify(dir.path());
    let torn = match code {
        Some(0) => false,
        _ => {
            let problem = before["first_broken"]["problem"].to_string();
            assert!(
                problem.contains("torn"),
                "only a torn line may break it: {before}"
            );
            true
        }
    };

    // Restart: opening the log repairs a torn line; jobs are re-attached.
    let (client, _pid) = start(dir.path()).await;
    let peer = client.peer().clone();
    let (code, after) = audit_verify(dir.path());
    assert_eq!(code, Some(0), "intact after the restart: {after}");
    let repaired = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["audit", "query", "--event", "audit.repaired", "--dir"])
        .arg(dir.path().join("state/audit"))
        .output()
        .unwrap();
    assert_eq!(
        !repaired.stdout.is_empty(),
        torn,
        "a repair is recorded iff a line was torn: {}",
        String::from_utf8_lossy(&repaired.stdout)
    );

    // (b) Every accepted job is still tracked.
    let listed = ok(
        &peer,
        "list_jobs",
        json!({"instance_id": "run1", "limit": 500}),
    )
    .await;
    let tracked: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    for job in &accepted {
        assert!(tracked.contains(&job.as_str()), "{job} in {tracked:?}");
    }

    // (c) They ran through the kill and finish with their output.
    let mut finished_after_kill = 0;
    for job in &accepted {
        let polled = ok(
            &peer,
            "poll_job",
            json!({"instance_id": "run1", "job_id": job, "timeout": 60}),
        )
        .await;
        assert_eq!(polled["job"]["status"], "completed", "{polled}");
        assert_eq!(polled["job"]["stdout_tail"], "done", "{polled}");
        let finished: Timestamp =
            serde_json::from_value(polled["job"]["finished_at"].clone()).unwrap();
        finished_after_kill += usize::from(finished > killed_at);
    }
    // Each sleeps 3 s and the kill came within moments of the burst's submissions: the jobs
    // that were running then (at least those) outlived the gateway.
    assert!(finished_after_kill > 0, "no job ran through the kill");
    client.cancel().await.unwrap();
}
