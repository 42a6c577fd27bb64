//! Slurm jobs end to end: the real binary over stdio (with progress) and over streamable HTTP,
//! the rmcp client, and a real one-machine cluster (`scripts/slurm-local.sh start`; if it cannot
//! start, the test fails with its message). Submit with progress, list, cancel, poll, archive.

use crate::support::served;

use crate::support::slurm;

use std::path::{Path, PathBuf};

use rmcp::model::CallToolRequestParams;
use rmcp::service::Peer;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use served::Served;

fn config(dir: &Path) -> PathBuf {
    served::config(
        dir,
        &format!(
            "[slurm]\nenabled = true\nslurm_conf = {:?}\n",
            slurm::slurm_conf().display().to_string()
        ),
    )
}

/// The structured result of a call that must succeed.
async fn ok(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> Value {
    let result = peer
        .call_tool(
            CallToolRequestParams::new(tool).with_arguments(arguments.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.unwrap()
}

/// The whole Slurm workflow on instance `run1` of a fresh state directory.
async fn slurm_workflow(peer: &Peer<RoleClient>) {
    ok(peer, "create_instance", json!({"instance_id": "run1"})).await;
    ok(
        peer,
        "write_file",
        json!({"instance_id": "run1", "path": "input.txt", "content": "42\n"}),
    )
    .await;
    let done = ok(
        peer,
        "submit_job",
        json!({"instance_id": "run1", "mode": "slurm", "timeout": 120,
               "command": "sleep 2; cat input.txt; echo result > /output/r.txt",
               "resources": {"cpus": 1, "memory_mb": 256}}),
    )
    .await["job"]
        .clone();
    assert_eq!(
        (&done["mode"], &done["status"], &done["stdout_tail"]),
        (&json!("slurm"), &json!("completed"), &json!("42")),
        "{done}"
    );
    let output = ok(
        peer,
        "read_file",
        json!({"instance_id": "run1", "path": "/output/r.txt"}),
    )
    .await;
    assert_eq!(output["content"], "result\n", "{output}");

    let running = ok(
        peer,
        "submit_job",
        json!({"instance_id": "run1", "mode": "slurm", "command": "sleep 300", "timeout": 0}),
    )
    .await["job"]
        .clone();
    let job_id = running["job_id"].as_str().unwrap().to_owned();
    let listed = ok(peer, "list_jobs", json!({"instance_id": "run1"})).await;
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert_eq!(ids[0], job_id, "newest first: {listed}");

    let refused = peer
        .call_tool(
            CallToolRequestParams::new("archive_instance")
                .with_arguments(json!({"instance_id": "run1"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "archive waits for the job");
    let mut job = ok(
        peer,
        "cancel_job",
        json!({"instance_id": "run1", "job_id": job_id}),
    )
    .await["job"]
        .clone();
    if job["final"] != true {
        // scancel is asynchronous: wait for Slurm to report the end.
        job = ok(
            peer,
            "poll_job",
            json!({"instance_id": "run1", "job_id": job_id, "timeout": 60}),
        )
        .await["job"]
            .clone();
    }
    assert_eq!(job["status"], "cancelled", "{job}");
    ok(peer, "archive_instance", json!({"instance_id": "run1"})).await;
}

#[tokio::test]
async fn a_slurm_job_over_stdio_reports_progress_and_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let mut command = served::command(dir.path(), &config, &[]);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let log = served::ProgressLog::default();
    let client = log
        .clone()
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap();
    slurm_workflow(&client).await;
    // The waiting submit reports progress towards its 120 s wait. When the cancel is not yet
    // final (scancel is asynchronous), the poll after it reports towards its own 60 s.
    let progress = log.0.lock().unwrap().clone();
    let submit = progress.first().map(|p| p.progress_token.clone());
    assert!(
        submit.is_some()
            && progress
                .iter()
                .all(|p| if Some(&p.progress_token) == submit.as_ref() {
                    p.total == Some(120.0)
                } else {
                    p.total == Some(60.0)
                }),
        "the waiting Slurm submit reported progress: {progress:?}"
    );
    client.cancel().await.unwrap();
    let report = crate::support::audit::verified(&dir.path().join("state/audit"));
    assert!(report.intact, "{report:?}");
}

#[tokio::test]
async fn a_slurm_job_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let served = Served::http(dir.path(), &config).await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(
            served.address.as_str(),
        ))
        .await
        .unwrap();
    slurm_workflow(&client).await;
    client.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    let log = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let states: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"].as_str().is_some_and(|e| e.starts_with("job.")))
        .map(|r| format!("{} {}", r["event"].as_str().unwrap(), r["outcome"]))
        .collect();
    assert!(
        states.iter().any(|s| s.contains("completed"))
            && states.iter().any(|s| s.contains("cancelled")),
        "job state changes are audited: {states:?}"
    );
}
