//! A gateway that stops while a job's code calls a tool: the call is recorded before the
//! gateway's last record, and never sent again to the gateway that starts after.

use serde_json::{Value, json};

use crate::code_mode::{CHAIN, audit_records, call, drive, job_calls};
use crate::support::served::{self, Served};

/// A job's call in flight when the gateway stops is ended by the stop and recorded before the
/// gateway's last record, and never sent again: the job it started is in the log (written as
/// it started, not at the end of the call's wait), and after a restart there is still one.
#[tokio::test]
async fn a_jobs_call_in_flight_at_a_stop_is_recorded_and_never_sent_again() {
    let stdout = call_in_flight_at_a_stop(rustix::process::Signal::TERM).await;
    assert!(!stdout.contains("may or may not"), "{stdout}");
}

/// The same with the gateway killed: the job's code is told that its call may have run; it is
/// not sent again to the gateway that starts after.
#[tokio::test]
async fn a_jobs_call_in_flight_when_the_gateway_is_killed_is_never_sent_again() {
    let stdout = call_in_flight_at_a_stop(rustix::process::Signal::KILL).await;
    assert!(stdout.contains("may or may not have run"), "{stdout}");
}

/// A job's code submits a job and waits for it; the gateway gets `signal` during the wait and
/// starts again. Returns what the job's code printed of its call.
async fn call_in_flight_at_a_stop(signal: rustix::process::Signal) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(
        dir.path(),
        &format!("{CHAIN}\n[code_mode]\nallow_submit = true\n"),
    );
    let first = Served::http(dir.path(), &config).await;
    let script = r#"
import json
import hpcgate_tools as t
try:
    t.submit_job(command=["sleep", "300"], timeout=120)
    print(json.dumps("returned"))
except t.ToolError as e:
    print(json.dumps(str(e)))
"#;
    let submitted = drive(
        &first,
        &json!([
            call("create_instance", json!({"instance_id": "cm"})),
            call("submit_job", json!({"instance_id": "cm", "command": ["python3", "-c", script], "tools": true, "timeout": 0})),
        ]),
    )
    .await;
    let outer = submitted[1]["structured"]["job"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted:?}"))
        .to_owned();
    let principal = format!("job:{outer}");
    let started = |records: &[Value]| -> Vec<Value> {
        (records.iter())
            .filter(|r| r["event"] == "job.submitted" && r["principal"] == principal.as_str())
            .map(|r| r["outcome"]["job_id"].clone())
            .collect()
    };
    // The inner job is in the log while its submit still waits (for minutes).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while started(&audit_records(dir.path())).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job's submit never started its job"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, stderr) = first.signal(signal).await;
    let records = audit_records(dir.path());
    if signal == rustix::process::Signal::TERM {
        assert!(status.success(), "{stderr}");
        let stopped = records
            .iter()
            .rposition(|r| r["event"] == "gateway.stopped")
            .unwrap();
        let outcomes = records[..stopped]
            .iter()
            .filter(|r| r["principal"] == principal.as_str() && r["tool"] == "submit_job")
            .filter(|r| r["event"] == "call" && !r["call"].is_object())
            .count();
        assert_eq!(
            outcomes, 1,
            "the call in flight is recorded before the stop"
        );
    }
    let inner = started(&records).remove(0);

    let second = Served::http(dir.path(), &config).await;
    let finished = drive(
        &second,
        &json!([
            call(
                "poll_job",
                json!({"instance_id": "cm", "job_id": outer, "timeout": 120})
            ),
            call("cancel_job", json!({"instance_id": "cm", "job_id": inner})),
        ]),
    )
    .await;
    let (status, stderr) = second.stop().await;
    assert!(status.success(), "{stderr}");
    let job = &finished[0]["structured"]["job"];
    assert_eq!(job["exit_code"], 0, "{}", finished[0]);
    let records = audit_records(dir.path());
    assert_eq!(
        started(&records),
        [inner],
        "the job's one submit started one job"
    );
    let decided = job_calls(&records, &outer)
        .iter()
        .filter(|r| r["tool"] == "submit_job")
        .count();
    assert_eq!(decided, 1, "the job's one submit was sent once");
    job["stdout_tail"].as_str().unwrap().to_owned()
}
