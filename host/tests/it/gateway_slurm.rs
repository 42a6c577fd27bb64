//! Slurm jobs through the dispatch function against a real one-machine cluster
//! (`scripts/slurm-local.sh start`; if it cannot start, the test fails with its message).

use crate::support::gateway as support;

use crate::support::slurm;

use serde_json::json;
use slurm::slurm_conf;
use support::{args, err, ok};

#[test]
fn slurm_jobs_run_sandboxed_report_output_and_cancel() {
    let conf = slurm_conf();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[sandbox.limits]\noutput_bytes = 65536\n[slurm]\nenabled = true\nslurm_conf = {:?}\n",
        conf.display().to_string()
    );
    let (gw, chem) = support::open_with_chems_run1(dir.path(), &config);
    ok(gw.call(
        &chem,
        "write_file",
        args(json!({"instance_id": "run1", "path": "input.txt", "content": "42\n"})),
    ));

    let done = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({
            "instance_id": "run1", "mode": "slurm", "timeout": 120,
            "command": "cat input.txt; pwd; echo oops >&2; exit 4",
            "slurm_resources": {"cpus": 1, "memory": 256}
        })),
    ))["job"]
        .clone();
    assert_eq!(done["mode"], "slurm");
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["exit_code"], 4);
    assert_eq!(done["stdout_tail"], "42\n/workspace", "{done}");
    assert_eq!(done["stderr_tail"], "oops");
    // The alias was folded into `resources` before the policies, then clamped/defaulted.
    assert_eq!(done["resources"]["memory_mb"], 256);
    assert!(
        !serde_json::to_string(&done)
            .unwrap()
            .contains("slurm_job_id"),
        "the Slurm id stays internal"
    );

    // Slurm itself caps no output: the supervisor on the node ends the flood at the cap,
    // long before the time limit, and says why.
    let flood = ok(gw.call(
        &chem,
        "submit_job",
        args(
            json!({"instance_id": "run1", "mode": "slurm", "timeout": 100, "command": "yes flood"}),
        ),
    ))["job"]
        .clone();
    assert_eq!(flood["status"], "output_cap", "{flood}");
    assert!(
        flood["stdout_tail"]
            .as_str()
            .unwrap()
            .starts_with("flood\nflood\n"),
        "{flood}"
    );

    // The supervisor ends a job at its own time limit; Slurm's, in whole minutes, comes later.
    let late = ok(gw.call(
        &chem,
        "submit_job",
        args(
            json!({"instance_id": "run1", "mode": "slurm", "timeout": 100, "command": "sleep 60",
                    "resources": {"time_limit_s": 2}}),
        ),
    ))["job"]
        .clone();
    assert_eq!(late["status"], "timeout", "{late}");
    assert!(late["duration_s"].as_f64().unwrap() < 30.0, "{late}");

    let status = ok(gw.call(&chem, "cluster_status", args(json!({}))));
    assert!(
        status["slurm"]["partitions"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{status}"
    );

    let running = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "mode": "slurm", "command": "sleep 120", "timeout": 0})),
    ))["job"]
        .clone();
    let job_id = running["job_id"].as_str().unwrap();
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
    let mut job = cancelled["job"].clone();
    // scancel is asynchronous: wait for Slurm to report the end.
    if job["final"] != true {
        job = ok(gw.call(
            &chem,
            "poll_job",
            args(json!({"instance_id": "run1", "job_id": job_id, "timeout": 60})),
        ))["job"]
            .clone();
    }
    assert_eq!(job["status"], "cancelled", "{job}");
    ok(gw.call(
        &chem,
        "archive_instance",
        args(json!({"instance_id": "run1"})),
    ));
}
