//! Code mode with several gateways on one state directory (which README allows): a job's door
//! has one owner. A gateway that starts and stops beside the one serving a door leaves the door
//! alone, and a gateway that runs when the owner dies takes the door over (one started before
//! the job too), so the job's calls go on.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::code_mode::{CHAIN, audit_records, call, drive, job_calls};
use crate::support::served::{self, Served};

/// Reads `one`, then `two`, each once it exists in the workspace; prints what it read.
const TWO_READS: &str = r#"
import json, os, time
import hpcgate_tools as t
seen = []
for step in ("one", "two"):
    while not os.path.exists("/workspace/" + step):
        time.sleep(0.05)
    seen.append(t.read_file(path=step)["content"])
print(json.dumps(seen))
"#;

/// Waits until job `job_id` has made `calls` calls that the audit log recorded.
async fn wait_for_job_calls(dir: &Path, job_id: &str, calls: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_calls(&audit_records(dir), job_id).len() < calls {
        assert!(
            Instant::now() < deadline,
            "job {job_id} made fewer than {calls} calls in 60 s: its door did not answer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_jobs_door_stays_with_its_gateway_and_passes_on_when_that_gateway_dies() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let mut first = Served::http(dir.path(), &config).await;
    // Started before the job: only its sweeps, not its start, can find the door.
    let third = Served::http(dir.path(), &config).await;
    let submitted = drive(
        &first,
        &json!([
            call("create_instance", json!({"instance_id": "cm"})),
            call("submit_job", json!({"instance_id": "cm", "command": ["python3", "-c", TWO_READS], "tools": true, "timeout": 0})),
        ]),
    )
    .await;
    let job_id = submitted[1]["structured"]["job"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted:?}"))
        .to_owned();

    // Another gateway starts and stops while the first one serves the door: the door is still
    // the first one's (it used to be made again by the second, and dead once it stopped).
    let second = Served::http(dir.path(), &config).await;
    let (status, stderr) = second.stop().await;
    assert!(status.success(), "{stderr}");
    drive(
        &first,
        &json!([call(
            "write_file",
            json!({"instance_id": "cm", "path": "one", "content": "while the first ran"})
        )]),
    )
    .await;
    wait_for_job_calls(dir.path(), &job_id, 1).await;

    // The first gateway dies: the third, running beside it all along, takes the door over.
    first.child.kill().await.unwrap();
    let finished = drive(
        &third,
        &json!([
            call(
                "write_file",
                json!({"instance_id": "cm", "path": "two", "content": "after the first died"})
            ),
            call(
                "poll_job",
                json!({"instance_id": "cm", "job_id": job_id, "timeout": 120})
            ),
        ]),
    )
    .await;
    let job = &finished[1]["structured"]["job"];
    assert_eq!(job["exit_code"], 0, "{}", finished[1]);
    let seen: Value = serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(seen, json!(["while the first ran", "after the first died"]));
    let read: Vec<_> = job_calls(&audit_records(dir.path()), &job_id)
        .iter()
        .map(|r| r["call"]["arguments"]["path"].clone())
        .collect();
    assert_eq!(read, [json!("one"), json!("two")], "each call judged once");

    // The job has ended: its door, and the third gateway's hold on it, are gone.
    let run = dir.path().join("state/run");
    let deadline = Instant::now() + Duration::from_secs(30);
    while run.join(&job_id).exists() || run.join("owners").join(&job_id).exists() {
        assert!(Instant::now() < deadline, "the ended job's door was left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, stderr) = third.stop().await;
    assert!(status.success(), "{stderr}");
}
