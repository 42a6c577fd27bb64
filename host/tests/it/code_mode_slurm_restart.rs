//! Code mode for a Slurm job across a gateway restart: the real `hpcgate run` over streamable
//! HTTP on 127.0.0.1 with `[code_mode] url` pointing at itself, a real job on the local Slurm
//! cluster (`scripts/slurm-local.sh start`) whose Python script calls tools with `hpcgate_tools`
//! over HTTP and its job-scoped token. The script lists, reads and writes; the audit shows each
//! inner call as the job; the gateway restarts while the job runs and the job's calls go on;
//! then the attack table: the token kept after the job ended, used for another instance,
//! forged, on `/dav` and `/metrics`, and looked for in the audit log, `scontrol` and `ps`.

use std::process::Command;

use hpcgate::auth::bearer::generate_token;
use serde_json::{Value, json};

use crate::code_mode::{audit_records, job_calls};
use crate::support::code_mode::{
    call, client, code_mode_url, free_port, initialize, ok, serve, slurm_config,
};
use crate::support::served::{Served, exchange};
use crate::support::slurm::slurm_client;

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

async fn get(served: &Served, path: &str, authorization: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(served.authority())
        .await
        .unwrap();
    exchange(stream, "GET", path, &[("Authorization", authorization)], "").await
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
