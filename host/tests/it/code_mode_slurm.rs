//! Code mode for Slurm jobs: the real `hpcgate run` over streamable HTTP on 127.0.0.1 with
//! `[code_mode] url` pointing at itself, a real job on the local Slurm cluster
//! (`scripts/slurm-local.sh start`) whose Python script calls tools with `hpcgate_tools` over
//! HTTP and its job-scoped token. The script lists, reads and writes; the audit shows each
//! inner call as the job; the gateway restarts while the job runs and the job's calls go on;
//! then the attack table: the token kept after the job ended, used for another instance,
//! forged, on `/dav` and `/metrics`, and looked for in the audit log, `scontrol` and `ps`.

use std::path::{Path, PathBuf};
use std::process::Command;

use hpcgate::auth::bearer::{generate_token, hash_token};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::code_mode::{audit_records, job_calls};
use crate::support::served::{self, INITIALIZE, Served, exchange};
use crate::support::slurm;

/// The job's script: keeps a copy of its token (the attack replays it after the job ended),
/// calls three tools from Python and one with `hpcgate-call`, tries another instance, then
/// waits for `go` (written by the test after the gateway restarted) and calls once more.
const SCRIPT: &str = r#"
import json, os, shutil, time
import hpcgate_tools as t
shutil.copyfile(os.environ["HPCGATE_TOOLS_TOKEN_FILE"], "kept-token")
token = open("kept-token").read().strip()
out = {
    "env": sorted(k for k in os.environ if k.startswith("HPCGATE")),
    "token_in_env": any(token in v for v in os.environ.values()),
    "token_in_argv": any(token in open("/proc/%s/cmdline" % p, errors="replace").read()
                         for p in os.listdir("/proc") if p.isdigit()),
}
out["names"] = sorted(e["name"] for e in t.list_directory(path="data")["entries"])
out["content"] = t.read_file(path="data/in.txt")["content"]
t.write_file(path="summary.txt", content="read: " + out["content"])
import subprocess
cli = subprocess.run(["hpcgate-call", "stat_path", '{"path": "summary.txt"}'],
                     capture_output=True, text=True)
out["cli"] = json.loads(cli.stdout) if cli.returncode == 0 else cli.stderr
try:
    t.read_file(path="data/in.txt", instance_id="run2")
    out["forged"] = "allowed"
except t.ToolError as e:
    out["forged"] = str(e)
# Whole or not at all: the test reads it as soon as it is there.
with open("phase1.part", "w") as f:
    json.dump(out, f)
os.rename("phase1.part", "phase1.json")
for _ in range(1500):
    if os.path.exists("go"):
        break
    time.sleep(0.2)
out["after_restart"] = t.read_file(path="summary.txt")["content"]
print(json.dumps(out))
"#;

/// A free loopback port for the gateway (the URL in its config names it before it starts).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn serve(dir: &Path, config: &Path, port: u16) -> Served {
    let port = port.to_string();
    Served::start(
        dir,
        config,
        &["--transport", "streamable-http", "--port", &port],
    )
    .await
}

async fn client(served: &Served, token: &str) -> RunningService<RoleClient, ()> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.address.as_str())
            .auth_header(token.to_owned()),
    );
    ().serve(transport).await.unwrap()
}

/// The result of one call: (is_error, structured or text).
async fn call(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> (bool, Value) {
    let result = peer
        .call_tool(
            CallToolRequestParams::new(tool).with_arguments(arguments.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let text: String = (result.content.iter())
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    let is_error = result.is_error == Some(true);
    (
        is_error,
        match result.structured_content {
            Some(s) if !is_error => s,
            _ => Value::String(text),
        },
    )
}

async fn ok(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> Value {
    let (is_error, value) = call(peer, tool, arguments).await;
    assert!(!is_error, "{tool}: {value}");
    value
}

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

/// An MCP `initialize` POST with `authorization`: the status and body.
async fn initialize(served: &Served, path: &str, authorization: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(served.authority())
        .await
        .unwrap();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", authorization),
    ];
    exchange(stream, "POST", path, &headers, INITIALIZE).await
}

async fn get(served: &Served, path: &str, authorization: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(served.authority())
        .await
        .unwrap();
    exchange(stream, "GET", path, &[("Authorization", authorization)], "").await
}

/// A gateway config: tenant `chem` with `agent_token`, the local Slurm cluster, then `extra`.
fn slurm_config(dir: &Path, agent_token: &str, extra: &str) -> PathBuf {
    served::config(
        dir,
        &format!(
            "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n\
             [slurm]\nenabled = true\nslurm_conf = {:?}\n{extra}",
            hex::encode(hash_token(agent_token)),
            slurm::slurm_conf().display().to_string(),
        ),
    )
}

/// `[code_mode] url`: the gateway's own listener on `port`, as compute nodes reach it.
fn code_mode_url(port: u16) -> String {
    format!("[code_mode]\nurl = \"http://127.0.0.1:{port}/mcp\"\n")
}

/// A Slurm client's output (`SLURM_CONF` of the local cluster).
fn slurm_client(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("SLURM_CONF", slurm::slurm_conf())
        .output()
        .unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_slurm_jobs_script_calls_tools_with_its_token_across_a_restart_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let agent_token = generate_token().unwrap();
    let dav = format!("[dav]\nenabled = true\n{}", code_mode_url(port));
    let config = slurm_config(dir.path(), &agent_token, &dav);
    let served = serve(dir.path(), &config, port).await;
    let agent = client(&served, &agent_token).await;
    for instance in ["run1", "run2"] {
        ok(&agent, "create_instance", json!({"instance_id": instance})).await;
    }
    ok(
        &agent,
        "write_file",
        json!({"instance_id": "run1", "path": "data/in.txt", "content": "42", "create_dirs": true}),
    )
    .await;
    ok(
        &agent,
        "write_file",
        json!({"instance_id": "run1", "path": "job.py", "content": SCRIPT}),
    )
    .await;
    let submitted = ok(
        &agent,
        "submit_job",
        json!({"instance_id": "run1", "mode": "slurm", "tools": true, "timeout": 0,
               "command": ["python3", "job.py"],
               "resources": {"cpus": 1, "memory_mb": 256, "time_limit_s": 600}}),
    )
    .await;
    let job_id = submitted["job"]["job_id"].as_str().unwrap().to_owned();

    // Phase 1: the script has called its tools and kept its token.
    let mut phase1 = None;
    for _ in 0..600 {
        let (failed, read) = call(
            &agent,
            "read_file",
            json!({"instance_id": "run1", "path": "phase1.json"}),
        )
        .await;
        if !failed {
            phase1 =
                Some(serde_json::from_str::<Value>(read["content"].as_str().unwrap()).unwrap());
            break;
        }
        let (_, job) = call(
            &agent,
            "poll_job",
            json!({"instance_id": "run1", "job_id": job_id}),
        )
        .await;
        assert_ne!(job["job"]["final"], true, "the job ended early: {job}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let phase1 = phase1.expect("the job's script reached its tools");
    assert_eq!(phase1["names"], json!(["in.txt"]), "{phase1}");
    assert_eq!(phase1["content"], "42", "{phase1}");
    assert_eq!(
        phase1["env"],
        json!(["HPCGATE_TOOLS_TOKEN_FILE", "HPCGATE_TOOLS_URL"]),
        "{phase1}"
    );
    assert_eq!(phase1["token_in_env"], false, "{phase1}");
    assert_eq!(phase1["token_in_argv"], false, "{phase1}");
    assert!(
        phase1["cli"].to_string().contains("\"size\":8"),
        "hpcgate-call over HTTP: {}",
        phase1["cli"]
    );
    let forged = phase1["forged"].as_str().unwrap();
    assert!(forged.contains("its own instance `run1`"), "{forged}");
    let summary = ok(
        &agent,
        "read_file",
        json!({"instance_id": "run1", "path": "summary.txt"}),
    )
    .await;
    assert_eq!(summary["content"], "read: 42");
    let kept = ok(
        &agent,
        "read_file",
        json!({"instance_id": "run1", "path": "kept-token"}),
    )
    .await["content"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();
    assert!(kept.starts_with(&format!("hpcgj_{job_id}_")), "{kept}");
    let bearer = format!("Bearer {kept}");

    // While the job runs: where the token must not be, and what it must not open.
    let slurm_id = slurm_client(
        "squeue",
        &["-h", "-o", "%i", "-n", &format!("hpcgate-{job_id}")],
    );
    let slurm_id = slurm_id.trim();
    assert!(!slurm_id.is_empty(), "the job is in the queue");
    let shown = slurm_client("scontrol", &["show", "job", "-d", slurm_id]);
    let script = slurm_client("scontrol", &["write", "batch_script", slurm_id, "-"]);
    // The script starts the supervisor on the job's directory, whose request holds the sandbox.
    let job_dir = script
        .trim_end()
        .rsplit(' ')
        .next()
        .map(|word| word.trim_matches('\''))
        .unwrap();
    let request = std::fs::read_to_string(std::path::Path::new(job_dir).join("request.json"))
        .unwrap_or_else(|e| panic!("the batch script names the job's directory ({e}): {script}"));
    assert!(
        script.contains("'--batch'")
            && request.contains("HPCGATE_TOOLS_TOKEN_FILE")
            && request.contains("\"network\": \"host\""),
        "the job's request names the token's file and shares the node's network: {request}"
    );
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    for (place, text) in [
        ("scontrol show job", &shown),
        ("batch script", &script),
        ("job's request", &request),
    ] {
        assert!(!text.contains(&kept), "the token is in the {place}");
    }
    assert!(!ps.contains(&kept), "the token is in a process's argv");
    let mut forged = kept.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
    let forged = String::from_utf8(forged).unwrap();
    let other_job = kept.replacen(&job_id, "j-aaaaaaaaaaaaaaaa", 1);
    for (what, authorization) in [
        ("a token with one digit changed", format!("Bearer {forged}")),
        (
            "the secret under another job's id",
            format!("Bearer {other_job}"),
        ),
        (
            "a truncated token",
            format!("Bearer {}", &kept[..kept.len() - 1]),
        ),
    ] {
        let (status, body) = initialize(&served, "/mcp", &authorization).await;
        assert_eq!(status, 401, "{what}: {body}");
    }
    let (status, body) = initialize(&served, "/mcp", &bearer).await;
    assert_eq!(
        status, 200,
        "the kept token works while the job runs: {body}"
    );
    for path in [
        "/metrics",
        "/dav/",
        "/dav/instances/run1/workspace/data/in.txt",
        "/healthz",
    ] {
        let (status, body) = get(&served, path, &bearer).await;
        assert_eq!(status, 403, "{path} with a job token: {body}");
    }
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("job:{kept}"));
    let (status, body) = get(&served, "/dav/", &format!("Basic {basic}")).await;
    assert_eq!(
        status, 401,
        "WebDAV with the job token as a password: {body}"
    );
    // The job's token from outside the job is still only the job: its own instance only.
    let replayed = client(&served, &kept).await;
    let (is_error, refused) = call(
        &replayed,
        "read_file",
        json!({"instance_id": "run2", "path": "x"}),
    )
    .await;
    assert!(is_error, "{refused}");
    assert!(
        refused.as_str().unwrap().contains("its own instance"),
        "{refused}"
    );
    let (is_error, refused) = call(
        &replayed,
        "submit_job",
        json!({"command": "true", "mode": "slurm"}),
    )
    .await;
    assert!(
        is_error && refused.to_string().contains("allow_submit"),
        "{refused}"
    );
    replayed.cancel().await.unwrap();
    agent.cancel().await.unwrap();

    // The gateway restarts while the job runs; the job's next call works.
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    let served = serve(dir.path(), &config, port).await;
    let agent = client(&served, &agent_token).await;
    ok(
        &agent,
        "write_file",
        json!({"instance_id": "run1", "path": "go", "content": ""}),
    )
    .await;
    let done = ok(
        &agent,
        "poll_job",
        json!({"instance_id": "run1", "job_id": job_id, "timeout": 300}),
    )
    .await["job"]
        .clone();
    assert_eq!(
        (&done["status"], &done["exit_code"]),
        (&json!("completed"), &json!(0)),
        "{done}"
    );
    let printed: Value =
        serde_json::from_str(done["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(printed["after_restart"], "read: 42", "{printed}");

    // After the job: the kept token opens nothing, and nothing of it is left.
    let (status, body) = initialize(&served, "/mcp", &bearer).await;
    assert_eq!(status, 401, "the token after its job ended: {body}");
    assert!(
        body.contains("has ended") || body.contains("not valid"),
        "{body}"
    );
    let state = dir.path().join("state");
    assert!(!state.join(format!("job-tokens/{job_id}.json")).exists());
    assert!(!state.join(format!("run/{job_id}")).exists());
    agent.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");

    // The audit log: each inner call as the job, via = job, before and after the restart; the
    // token nowhere in it; the chain intact (`audit_records` verifies it).
    let records = audit_records(dir.path());
    let inner = job_calls(&records, &job_id);
    let tools: Vec<&str> = inner
        .iter()
        .map(|r| r["call"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "list_directory",
            "read_file",
            "write_file",
            "stat_path",
            "read_file"
        ],
        "the calls the pipeline judged (the last one after the restart): {inner:#?}"
    );
    let principal = format!("job:{job_id}");
    let refused = |reason: &str| {
        (records.iter())
            .filter(|r| r["principal"] == principal.as_str())
            .filter(|r| (r["outcome"]["error"].as_str()).is_some_and(|e| e.contains(reason)))
            .count()
    };
    assert_eq!(
        (refused("its own instance"), refused("allow_submit")),
        (2, 1),
        "the refusals are recorded as the job: the script's and the replayed token's other \
         instance, the replayed token's submit"
    );
    for r in &inner {
        assert_eq!(r["call"]["via"], "job", "{r}");
        assert_eq!(r["call"]["job"], job_id.as_str(), "{r}");
        assert_eq!(r["tenant"], "chem", "{r}");
    }
    for file in std::fs::read_dir(state.join("audit")).unwrap() {
        let bytes = std::fs::read(file.unwrap().path()).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(&kept), "the token is in the audit log");
        assert!(
            !text.contains(&kept[kept.len() - 64..]),
            "the token's secret is in the audit log"
        );
    }
}

/// Ended by `cancel_job` rather than by itself: the token stops at once, and its hash and file
/// are gone.
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
