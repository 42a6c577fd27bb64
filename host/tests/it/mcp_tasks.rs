//! MCP Tasks (`io.modelcontextprotocol/tasks`) end to end: the real binary over streamable HTTP
//! and the rmcp client. A job call that outlives its wait returns a task; the gateway restarts
//! mid-job and `tasks/get` follows the task to completion with the result inline; `tasks/cancel`
//! cancels another; a second tenant's `tasks/get` and `tasks/cancel` are "not found", exactly
//! like a made-up id; a client without the extension keeps the old behaviour; and a client of
//! the 2025-11-25 revision gets tasks as well as one of 2026-07-28.

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, ProtocolVersion, TaskPayload,
    TaskStatus, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::served::{Served, audit_text, config};

type Client = RunningService<RoleClient, ClientConfig>;

fn tenants(alice: &str, bob: &str) -> String {
    use hpcgate::auth::bearer::hash_token;
    format!(
        "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n\
         [tenants.bio]\ntokens = [{{ label = \"bob\", sha256 = \"{}\" }}]\n",
        hex::encode(hash_token(alice)),
        hex::encode(hash_token(bob))
    )
}

/// The rmcp client's identity, declaring the tasks extension if `tasks`.
fn client_config(version: ProtocolVersion, tasks: bool) -> ClientConfig {
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    ClientConfig::new(capabilities, Implementation::new("tasks-test", "0"))
        .with_protocol_version(version)
}

/// A 2026-07-28 client over HTTP with `token` (`server/discover`, capabilities per request).
async fn client(served: &Served, token: &str, tasks: bool) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.address.as_str())
            .auth_header(token.to_owned()),
    );
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = client_config(ProtocolVersion::V_2026_07_28, tasks)
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .unwrap();
    let version = &client.peer_info().unwrap().protocol_version;
    assert_eq!(version, &ProtocolVersion::V_2026_07_28);
    client
}

/// A 2025-11-25 client over stdio (`initialize`, capabilities for the session).
async fn stdio_client(dir: &Path, tasks: bool) -> Client {
    std::fs::create_dir_all(dir).unwrap();
    let config = config(dir, "");
    let command = crate::support::served::command(dir, &config, &[]);
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    let client = client_config(ProtocolVersion::V_2025_11_25, tasks)
        .serve(transport)
        .await
        .unwrap();
    let version = &client.peer_info().unwrap().protocol_version;
    assert_eq!(version, &ProtocolVersion::V_2025_11_25);
    client
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

async fn create(client: &Client, instance: &str) {
    let created = client
        .call_tool(call("create_instance", json!({ "instance_id": instance })))
        .await
        .unwrap();
    assert_eq!(created.is_error, Some(false), "{created:?}");
}

/// `submit_job` with `timeout = 0`: the job is still running when the call returns.
async fn submit(client: &Client, instance: &str, command: &str) -> CallToolResponse {
    let arguments = json!({ "instance_id": instance, "command": command, "timeout": 0 });
    client
        .call_tool_once(call("submit_job", arguments))
        .await
        .unwrap()
}

fn task_of(response: CallToolResponse) -> CreateTaskResult {
    match response {
        CallToolResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Polls `tasks/get` until the task's status is terminal (30 s at most).
async fn until_terminal(client: &Client, task_id: &str) -> GetTaskResult {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = client.get_task(GetTaskParams::new(task_id)).await.unwrap();
        if got.task.status().is_terminal() {
            return got;
        }
        assert_eq!(got.task.status(), TaskStatus::Working);
        assert!(
            Instant::now() < deadline,
            "task {task_id} never ended: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The JSON-RPC error of a refused request.
fn rpc_error(result: Result<impl std::fmt::Debug, ServiceError>) -> (i32, String) {
    match result {
        Err(ServiceError::McpError(e)) => (e.code.0, e.message.to_string()),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn tasks_survive_a_restart_carry_the_result_and_stay_with_their_tenant() {
    use hpcgate::auth::bearer::generate_token;
    let dir = tempfile::tempdir().unwrap();
    let (alice, bob) = (generate_token().unwrap(), generate_token().unwrap());
    let config = config(dir.path(), &tenants(&alice, &bob));
    let served = Served::http(dir.path(), &config).await;

    let chem = client(&served, &alice, true).await;
    create(&chem, "t1").await;
    let slow = task_of(submit(&chem, "t1", "sleep 3; echo done-$((6*7))").await);
    let long = task_of(submit(&chem, "t1", "sleep 300").await);
    for task in [&slow.task, &long.task] {
        assert_eq!(task.status, TaskStatus::Working);
        let id = task.task_id.as_str();
        assert!(id.starts_with("t-") && id.len() == 34, "{id}");
        let message = task.status_message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with("queued") || message.starts_with("running"),
            "{message}"
        );
    }
    assert_ne!(slow.task.task_id, long.task.task_id);

    // Another tenant: "not found", word for word as for an id nobody issued.
    let bio = client(&served, &bob, true).await;
    let made_up = format!("t-{}", "a".repeat(32));
    let (code, nobody) = rpc_error(bio.get_task(GetTaskParams::new(made_up.as_str())).await);
    assert_eq!(code, -32602, "{nobody}");
    assert!(nobody.contains("task not found"), "{nobody}");
    for id in [&slow.task.task_id, &long.task.task_id] {
        let got = rpc_error(bio.get_task(GetTaskParams::new(id.as_str())).await);
        assert_eq!(got, (code, nobody.clone()));
        let cancelled = rpc_error(bio.cancel_task(CancelTaskParams::new(id.as_str())).await);
        assert_eq!(cancelled, (code, nobody.clone()));
        let update = UpdateTaskParams::new(id.as_str(), Default::default());
        let updated = rpc_error(bio.update_task(update.clone()).await);
        assert_eq!(updated, (code, nobody.clone()));
        // Its own tenant's update is acknowledged (hpcgate's tasks never ask for input).
        chem.update_task(update).await.unwrap();
    }
    // Near misses of a real id, its file name, a path to it: all the same "not found".
    let real = slow.task.task_id.as_str();
    let attempts = [
        String::new(),
        "t-".to_owned(),
        real.to_uppercase(),
        format!("{real}a"),
        real[..real.len() - 1].to_owned(),
        format!("{real}.json"),
        format!("../chem/tasks/{real}"),
        format!("../../chem/tasks/{real}.json"),
        format!("{real}\n"),
    ];
    for attempt in &attempts {
        for caller in [&bio, &chem] {
            let got = rpc_error(caller.get_task(GetTaskParams::new(attempt.as_str())).await);
            assert_eq!(got, (code, nobody.clone()), "{attempt:?}");
        }
    }
    bio.cancel().await.unwrap();
    chem.cancel().await.unwrap();

    // The gateway restarts while both jobs run; the tasks are on disk with the jobs.
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    let served = Served::http(dir.path(), &config).await;
    let chem = client(&served, &alice, true).await;

    let done = until_terminal(&chem, &slow.task.task_id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed);
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("{done:?}")
    };
    let job = &result["structuredContent"]["job"];
    assert_eq!(job["status"], "completed", "{result:?}");
    assert!(
        job["stdout_tail"].as_str().unwrap().contains("done-42"),
        "{result:?}"
    );
    assert_eq!(result["isError"], false);
    let message = done.task.task.status_message.clone().unwrap_or_default();
    assert!(message.starts_with("completed"), "{message}");

    // bob's cancel above did nothing; alice's does, through cancel_job.
    let running = chem
        .get_task(GetTaskParams::new(long.task.task_id.as_str()))
        .await
        .unwrap();
    assert_eq!(running.task.status(), TaskStatus::Working);
    chem.cancel_task(CancelTaskParams::new(long.task.task_id.as_str()))
        .await
        .unwrap();
    let cancelled = until_terminal(&chem, &long.task.task_id).await;
    assert_eq!(
        cancelled.task.status(),
        TaskStatus::Cancelled,
        "{cancelled:?}"
    );
    chem.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");

    assert_tasks_audited(&dir.path().join("state/audit"), &slow, &long);
}

/// The log is intact; each task's creation is an event of the `submit_job` call that made it;
/// the polls are `poll_job` calls and the cancel a `cancel_job` call, all as alice; bob's
/// refused lookups never reached a tool.
fn assert_tasks_audited(audit: &Path, slow: &CreateTaskResult, long: &CreateTaskResult) {
    let report = hpcgate::audit::verify(audit, None).unwrap();
    assert!(report.intact, "{report:?}");
    let records: Vec<Value> = audit_text(audit)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let created: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "task.created")
        .collect();
    assert_eq!(created.len(), 2, "{created:?}");
    for (record, task) in created.iter().zip([slow, long]) {
        assert_eq!(record["detail"]["task_id"], task.task.task_id.as_str());
        assert_eq!(record["tool"], "submit_job");
        assert_eq!(record["tenant"], "chem");
    }
    let calls = |tool: &str| {
        records
            .iter()
            .filter(|r| r["event"] == "call" && r["tool"] == tool)
            .map(|r| r["tenant"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    let polls = calls("poll_job");
    assert!(
        !polls.is_empty() && polls.iter().all(|t| t == "chem"),
        "{polls:?}"
    );
    let cancels = calls("cancel_job");
    assert!(
        !cancels.is_empty() && cancels.iter().all(|t| t == "chem"),
        "{cancels:?}"
    );
}

#[tokio::test]
async fn clients_without_the_extension_keep_the_job_result_and_both_revisions_get_tasks() {
    use hpcgate::auth::bearer::generate_token;
    let dir = tempfile::tempdir().unwrap();
    let (alice, bob) = (generate_token().unwrap(), generate_token().unwrap());
    let config = config(dir.path(), &tenants(&alice, &bob));
    let served = Served::http(dir.path(), &config).await;
    let over_http = client(&served, &alice, false).await;
    let with_tasks = client(&served, &alice, true).await;
    old_and_new(&over_http, &with_tasks, "2026-07-28").await;
    for c in [over_http, with_tasks] {
        c.cancel().await.unwrap();
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");

    let stdio = tempfile::tempdir().unwrap();
    let (plain, with_tasks) = (
        stdio_client(&stdio.path().join("a"), false).await,
        stdio_client(&stdio.path().join("b"), true).await,
    );
    old_and_new(&plain, &with_tasks, "2025-11-25").await;
    for c in [plain, with_tasks] {
        c.cancel().await.unwrap();
    }
}

/// `plain` (no extension) gets the job's state as before, to follow with poll_job, and
/// `tasks/get` is refused to it; `tasks` gets a task for `submit_job` and for `run_python`,
/// and their results through `tasks/get`; a job that ends within the wait is an ordinary
/// result, task or no task.
async fn old_and_new(plain: &Client, tasks: &Client, version: &str) {
    create(plain, "p1").await;
    create(tasks, "p2").await;
    let CallToolResponse::Complete(result) = submit(plain, "p1", "sleep 300").await else {
        panic!("{version}: a client without tasks got a task")
    };
    let job = &result.structured_content.as_ref().unwrap()["job"];
    assert_eq!(job["final"], false, "{version}: {result:?}");
    let (code, message) = rpc_error(plain.get_task(GetTaskParams::new("t-x")).await);
    assert_eq!(code, -32021, "{version}: {message}");
    let stop = json!({ "instance_id": "p1", "job_id": job["job_id"] });
    let stopped = plain.call_tool(call("cancel_job", stop)).await.unwrap();
    assert_eq!(stopped.is_error, Some(false), "{stopped:?}");

    let task = task_of(submit(tasks, "p2", "echo hi-from-$((40+2)); sleep 1").await);
    let done = until_terminal(tasks, &task.task.task_id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("{version}: {done:?}")
    };
    let tail = result["structuredContent"]["job"]["stdout_tail"].as_str();
    assert!(
        tail.unwrap_or_default().contains("hi-from-42"),
        "{version}: {result:?}"
    );
    // run_python too.
    let code = "import time\ntime.sleep(1)\nprint('py-' + str(6 * 7))\n";
    let python = json!({ "instance_id": "p2", "code": code, "timeout": 0, "tools": false });
    let python = task_of(
        tasks
            .call_tool_once(call("run_python", python))
            .await
            .unwrap(),
    );
    let done = until_terminal(tasks, &python.task.task_id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("{version}: {done:?}")
    };
    let tail = result["structuredContent"]["job"]["stdout_tail"].as_str();
    assert!(
        tail.unwrap_or_default().contains("py-42"),
        "{version}: {result:?}"
    );
    let quick = json!({ "instance_id": "p2", "command": "true", "timeout": 30 });
    let quick = tasks
        .call_tool_once(call("submit_job", quick))
        .await
        .unwrap();
    assert!(
        matches!(quick, CallToolResponse::Complete(_)),
        "{version}: {quick:?}"
    );
    // The default wait is the tool's, whatever the revision: checked over one of them.
    if version != "2026-07-28" {
        return;
    }
    // Without a `timeout`, a task client waits 5 s, not the 60 s a client without tasks waits:
    // a 20 s job is a task, answered well within common client request timeouts.
    let unhurried = json!({ "instance_id": "p2", "command": "sleep 20" });
    let unhurried = tasks
        .call_tool_once(call("submit_job", unhurried))
        .await
        .unwrap();
    let task = task_of(unhurried);
    let stop = tasks
        .cancel_task(CancelTaskParams::new(task.task.task_id.clone()))
        .await;
    assert!(stop.is_ok(), "{version}: {stop:?}");
    // With `detach: false` no task can come back (the job is cancelled at the end of the wait):
    // the wait stays 60 s, and a 5.5 s job completes.
    let attached = json!({ "instance_id": "p2", "command": "sleep 5.5", "detach": false });
    let attached = tasks
        .call_tool_once(call("submit_job", attached))
        .await
        .unwrap();
    let CallToolResponse::Complete(attached) = attached else {
        panic!("{version}: {attached:?}")
    };
    let job = &attached.structured_content.as_ref().unwrap()["job"];
    assert_eq!(job["status"], "completed", "{version}: {job}");
}
