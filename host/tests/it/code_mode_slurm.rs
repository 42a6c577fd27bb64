//! Code mode for Slurm jobs, the life of a job's token: the real `hpcgate run` over streamable
//! HTTP with `[code_mode] url` pointing at itself, and jobs with tools on the local Slurm
//! cluster (`scripts/slurm-local.sh start`). A cancelled job's token stops at once; an unpolled
//! job's end revokes it; a revocation cut short by a stop is finished by the next start; tools
//! on a Slurm job need the URL; a tenant taken out by a reload takes its jobs' tools. The
//! restart and the attack table are in `code_mode_slurm_restart`.

use std::path::{Path, PathBuf};

use hpcgate::auth::bearer::generate_token;
use rmcp::RoleClient;
use rmcp::service::{Peer, RunningService};
use serde_json::json;

use crate::code_mode::audit_records;
use crate::support::code_mode::{
    call, client, code_mode_url, free_port, initialize, ok, serve, slurm_config,
};
use crate::support::served::Served;
use crate::support::slurm::slurm_client;

/// Creates instance `run1` and submits `command` to Slurm there with tools (1 CPU, 128 MB,
/// not waited for): the job's id.
async fn submit_with_tools(agent: &Peer<RoleClient>, command: &str) -> String {
    ok(agent, "create_instance", json!({"instance_id": "run1"})).await;
    let submitted = ok(
        agent,
        "submit_job",
        json!({"instance_id": "run1", "mode": "slurm", "tools": true, "timeout": 0,
               "command": command, "resources": {"cpus": 1, "memory_mb": 128}}),
    )
    .await;
    submitted["job"]["job_id"].as_str().unwrap().to_owned()
}

/// Looks every 100 ms, for up to a minute, until `done`; panics with `what` if it never is.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(done(), "{what}");
}

/// The gateway's audit log (verified) records a Slurm job's completion as its own observation.
fn assert_end_audited(dir: &Path, job_id: &str, what: &str) {
    let records = audit_records(dir);
    let seen = records.iter().any(|r| {
        r["principal"] == "hpcgate"
            && r["outcome"]["job_id"] == job_id
            && r["outcome"]["state"] == "completed"
    });
    assert!(seen, "{what}: {records:#?}");
}

/// A gateway in `dir` for tenant `chem` with code mode's URL, and a Slurm job with tools that
/// sleeps 300 s in `run1`: the config's path, the gateway, the agent and the job's id.
async fn sleeping_job(dir: &Path) -> (PathBuf, Served, RunningService<RoleClient, ()>, String) {
    let port = free_port();
    let agent_token = generate_token().unwrap();
    let config = slurm_config(dir, &agent_token, &code_mode_url(port));
    let served = serve(dir, &config, port).await;
    let agent = client(&served, &agent_token).await;
    let job_id = submit_with_tools(&agent, "sleep 300").await;
    (config, served, agent, job_id)
}

/// Ended by `cancel_job` rather than by itself: the token stops at once, and its hash and file
/// are gone.
#[tokio::test]
async fn a_cancelled_slurm_jobs_token_stops_working() {
    let dir = tempfile::tempdir().unwrap();
    let (_, served, agent, job_id) = sleeping_job(dir.path()).await;
    let state = dir.path().join("state");
    let token_file = state.join(format!("run/{job_id}/token"));
    let token = std::fs::read_to_string(&token_file).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the token file is the job user's only");
    let stored = std::fs::read_to_string(state.join(format!("job-tokens/{job_id}.json"))).unwrap();
    assert!(
        !stored.contains(&token),
        "only the hash is stored: {stored}"
    );
    let bearer = format!("Bearer {token}");
    let (status, body) = initialize(&served, "/mcp", &bearer).await;
    assert_eq!(status, 200, "{body}");
    let mut job = ok(
        &agent,
        "cancel_job",
        json!({"instance_id": "run1", "job_id": job_id}),
    )
    .await["job"]
        .clone();
    if job["final"] != true {
        job = ok(
            &agent,
            "poll_job",
            json!({"instance_id": "run1", "job_id": job_id, "timeout": 60}),
        )
        .await["job"]
            .clone();
    }
    assert_eq!(job["status"], "cancelled", "{job}");
    let (status, body) = initialize(&served, "/mcp", &bearer).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("has ended"), "{body}");
    assert!(!token_file.exists());
    assert!(!state.join(format!("job-tokens/{job_id}.json")).exists());
    agent.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
}

/// Ended by itself while nobody polls: the gateway's watcher sees the end in Slurm, records it
/// (audited as the gateway's observation) and deletes the token's hash and file.
#[tokio::test]
async fn an_unpolled_slurm_jobs_end_revokes_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let agent_token = generate_token().unwrap();
    let config = slurm_config(dir.path(), &agent_token, &code_mode_url(port));
    let served = serve(dir.path(), &config, port).await;
    let agent = client(&served, &agent_token).await;
    let job_id = submit_with_tools(&agent, "true").await;
    let stored = dir.path().join(format!("state/job-tokens/{job_id}.json"));
    assert!(stored.exists(), "the hash is stored while the job runs");
    wait_until("the watcher never saw the job's end", || !stored.exists()).await;
    // The stored hash is the last thing a revocation deletes.
    assert!(
        !dir.path().join(format!("state/run/{job_id}")).exists(),
        "the token file and its directory went before the hash"
    );
    agent.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    assert_end_audited(
        dir.path(),
        &job_id,
        "the watcher's observation of the end is audited",
    );
}

/// Ended while the gateway was down, and the gateway had stopped half-way through a revocation
/// (the token file gone, the stored hash left): the next start finishes it.
#[tokio::test]
async fn a_revocation_cut_short_by_a_stop_is_finished_by_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let agent_token = generate_token().unwrap();
    let config = slurm_config(dir.path(), &agent_token, &code_mode_url(port));
    let served = serve(dir.path(), &config, port).await;
    let agent = client(&served, &agent_token).await;
    let job_id = submit_with_tools(&agent, "true").await;
    agent.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");

    let state = dir.path().join("state");
    let (stored, run_dir) = (
        state.join(format!("job-tokens/{job_id}.json")),
        state.join(format!("run/{job_id}")),
    );
    assert!(
        stored.exists() && run_dir.join("token").exists(),
        "a stop is not the job's end: its token is kept for the next start"
    );
    let name = format!("hpcgate-{job_id}");
    wait_until("the job never left Slurm's queue", || {
        slurm_client("squeue", &["-h", "-o", "%i", "-n", &name])
            .trim()
            .is_empty()
    })
    .await;
    // Where a stop between a revocation's two steps leaves it.
    std::fs::remove_file(run_dir.join("token")).unwrap();
    std::fs::remove_dir(&run_dir).unwrap();

    let served = serve(dir.path(), &config, port).await;
    wait_until("the next start left the stored hash", || !stored.exists()).await;
    assert!(!run_dir.exists());
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    assert_end_audited(
        dir.path(),
        &job_id,
        "the end seen after the start is audited",
    );
}

#[tokio::test]
async fn a_slurm_job_with_tools_needs_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let agent_token = generate_token().unwrap();
    let config = slurm_config(dir.path(), &agent_token, "");
    let served = serve(dir.path(), &config, 0).await;
    let agent = client(&served, &agent_token).await;
    ok(&agent, "create_instance", json!({"instance_id": "run1"})).await;
    let (is_error, refused) = call(
        &agent,
        "submit_job",
        json!({"instance_id": "run1", "mode": "slurm", "tools": true, "command": "true"}),
    )
    .await;
    assert!(is_error, "{refused}");
    let refused = refused.as_str().unwrap();
    assert!(
        refused.contains("`tools = true` on a Slurm job needs")
            && refused.contains("[code_mode] url"),
        "{refused}"
    );
    let jobs = ok(&agent, "list_jobs", json!({"instance_id": "run1"})).await;
    assert_eq!(jobs["total"], 0, "nothing was recorded or started: {jobs}");
    agent.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
}

/// A reload that takes a tenant out of the configuration takes its running jobs' tools with
/// it: the job's token is refused (and the refusal audited) while the tenant is gone, though
/// the job runs on; put back, the tenant's job calls tools again.
#[tokio::test]
async fn a_tenant_taken_out_by_a_reload_takes_its_jobs_tools() {
    let dir = tempfile::tempdir().unwrap();
    let (config, served, agent, job_id) = sleeping_job(dir.path()).await;
    let token =
        std::fs::read_to_string(dir.path().join(format!("state/run/{job_id}/token"))).unwrap();
    let job = client(&served, token.trim()).await;
    let listing = json!({"path": "."});
    ok(&job, "list_directory", listing.clone()).await;

    let reloads = |dir: &Path| {
        (audit_records(dir).iter())
            .filter(|r| r["event"] == "policies.reloaded")
            .count()
    };
    let reload_with = async |text: String| {
        let before = reloads(dir.path());
        std::fs::write(&config, text).unwrap();
        let pid = rustix::process::Pid::from_raw(served.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
        wait_until("a reload record", || reloads(dir.path()) > before).await;
    };
    let with_chem = std::fs::read_to_string(&config).unwrap();
    reload_with(with_chem.replace("[tenants.chem]", "[tenants.bio]")).await;
    let (is_error, refused) = call(&job, "list_directory", listing.clone()).await;
    assert!(is_error, "{refused}");
    assert!(
        refused
            .as_str()
            .unwrap()
            .contains("tenant `chem` is no longer configured"),
        "{refused}"
    );
    let audited = audit_records(dir.path()).into_iter().any(|r| {
        let error = r["outcome"]["error"].as_str().unwrap_or_default();
        r["tenant"] == "chem" && r["tool"] == "list_directory" && error.contains("no longer")
    });
    assert!(audited, "the refusal is audited");

    reload_with(with_chem).await;
    ok(&job, "list_directory", listing).await;
    let cancelled = json!({"instance_id": "run1", "job_id": job_id});
    ok(&agent, "cancel_job", cancelled).await;
    job.cancel().await.unwrap();
    agent.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
}
