//! Code mode end to end: the official Python MCP SDK drives the real gateway over streamable
//! HTTP; `run_python` runs code in a real bwrap sandbox whose tool calls go through the job's
//! own socket, each judged, audited as the job (`via = "job"`) and replayable by `policy test`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sha2::Digest as _;

use crate::support::served::{self, Served};

fn python() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let python = target.parent().unwrap().join("python-mcp/bin/python");
    assert!(
        python.exists(),
        "the Python MCP SDK is missing at `{}`: run scripts/setup.sh",
        python.display()
    );
    python
}

/// Runs `calls` through the Python SDK against `served`; each call's result.
pub(crate) async fn drive(served: &Served, calls: &Value) -> Vec<Value> {
    drive_script(served, "calls_client.py", calls).await
}

/// Runs `tests/python/<script>` (a Python SDK client) against `served` with `calls` on its
/// stdin; what it prints.
pub(crate) async fn drive_script<T: serde::de::DeserializeOwned>(
    served: &Served,
    script: &str,
    calls: &Value,
) -> T {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python")
        .join(script);
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .arg(&served.address)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt as _;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(calls.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every record of the audit log in `dir/state/audit`, after checking the chain.
pub(crate) fn audit_records(dir: &Path) -> Vec<Value> {
    let audit = dir.join("state/audit");
    let report = crate::support::audit::verified(&audit);
    assert!(report.intact, "{report:?}");
    let mut records = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&audit)
        .unwrap()
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for path in files {
        // Complete lines only: a gateway still running may be midway through a batch.
        let text = std::fs::read_to_string(path).unwrap();
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            records.push(serde_json::from_str(line).unwrap());
        }
    }
    records
}

/// The decision records of the calls job `job` made (its principal is `job:<id>`).
pub(crate) fn job_calls<'a>(records: &'a [Value], job: &str) -> Vec<&'a Value> {
    let principal = format!("job:{job}");
    records
        .iter()
        .filter(|r| r["principal"] == principal.as_str() && r["call"].is_object())
        .collect()
}

/// The embedded default chain, written out: `policy test --config` reads only the file it is
/// given, and a `[[policies]]` list in `--config` replaces the default one whole.
pub(crate) const CHAIN: &str = r#"
[[policies]]
name = "tools"
module = "stock:tool-filter"
[policies.config]
allow = ["*"]
deny = ["host_exec"]

[[policies]]
name = "paths"
module = "stock:path-rules"
[policies.config]
path_arguments = ["path", "paths", "source", "destination"]
deny_read = ["**/.ssh/**"]
deny_write = ["**/.git/**"]

[[policies]]
name = "caps"
module = "stock:resource-caps"
tools = ["submit_job", "run_python"]
[policies.config]
action = "clamp"
cpus = { default = 1, max = 8 }
memory_mb = { default = 4096, max = 32768 }
time_limit_s = { default = 3600, max = 86400 }
gpus = { default = 0, max = 0 }
"#;

pub(crate) fn call(tool: &str, arguments: Value) -> Value {
    json!({ "tool": tool, "arguments": arguments })
}

const SUMMARY_SCRIPT: &str = r#"
import json
import hpcgate_tools as t
listing = t.list_directory(path="data")
names = sorted(e["name"] for e in listing["entries"])
texts = [t.read_file(path="data/" + n)["content"] for n in names]
summary = "%d files, %d bytes: %s" % (len(names), sum(len(x) for x in texts), ", ".join(names))
t.write_file(path="summary.txt", content=summary)
import time
for _ in range(100):  # the proxied server may still be in discovery
    try:
        added = t.call("calc__add", a=2, b=3)
        break
    except t.ToolError as e:
        if "unknown tool" not in str(e) and "not available" not in str(e):
            raise
        time.sleep(0.1)
import inspect
sig = str(inspect.signature(t.read_file))
print(json.dumps({"names": names, "summary": summary, "doc": t.read_file.__doc__, "sig": sig, "added": added}))
"#;

#[tokio::test]
async fn run_python_lists_reads_and_writes_through_the_pipeline_as_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = crate::support::proxy::test_proxy("calc", "");
    let config = served::config(dir.path(), &format!("{CHAIN}\n{proxy}"));
    let served = Served::http(dir.path(), &config).await;
    let mut calls = vec![call("create_instance", json!({"instance_id": "cm"}))];
    for (name, text) in [("a.txt", "alpha"), ("b.txt", "beta"), ("c.txt", "gamma")] {
        calls.push(call(
            "write_file",
            json!({"instance_id": "cm", "path": format!("data/{name}"), "content": text, "create_dirs": true}),
        ));
    }
    calls.push(call(
        "run_python",
        json!({"instance_id": "cm", "code": SUMMARY_SCRIPT, "timeout": 120}),
    ));
    calls.push(call(
        "read_file",
        json!({"instance_id": "cm", "path": "summary.txt"}),
    ));
    calls.push(call(
        "submit_job",
        json!({"instance_id": "cm", "command": "true", "mode": "slurm", "tools": true}),
    ));
    let results = drive(&served, &Value::Array(calls)).await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    for r in &results[..4] {
        assert_eq!(r["is_error"], false, "{r}");
    }
    let run = &results[4];
    let job = &run["structured"]["job"];
    assert_eq!(
        (
            run["is_error"].as_bool(),
            job["status"].as_str(),
            job["exit_code"].as_i64()
        ),
        (Some(false), Some("completed"), Some(0)),
        "{run}"
    );
    let printed: Value = serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(printed["names"], json!(["a.txt", "b.txt", "c.txt"]));
    assert_eq!(
        printed["added"],
        json!({"sum": 5}),
        "a proxied tool from the script"
    );
    assert!(
        printed["doc"].as_str().unwrap().contains("path"),
        "the generated function documents its arguments: {printed}"
    );
    assert!(
        printed["sig"].as_str().unwrap().starts_with("(*, path"),
        "the generated function has the tool's argument names: {printed}"
    );
    let summary = "3 files, 14 bytes: a.txt, b.txt, c.txt";
    assert_eq!(results[5]["structured"]["content"], summary);
    assert_eq!(results[6]["is_error"], true, "{}", results[6]);
    let slurm = results[6]["text"].as_str().unwrap();
    assert!(
        slurm.contains("`tools = true` on a Slurm job needs") && slurm.contains("[code_mode] url"),
        "no `[code_mode] url`: a Slurm job with tools is refused, saying what to set: {slurm}"
    );

    // The audit log: each inner call as the job, via = job, with its id and instance.
    let job_id = job["job_id"].as_str().unwrap();
    let records = audit_records(dir.path());
    // The job's command carries the digest the script is checked against: salted, so it says
    // nothing of the code to a reader of the log (an admin who redacts `code` keeps it private).
    let submitted = records
        .iter()
        .find(|r| r["event"] == "job.submitted" && r["tool"] == "run_python")
        .expect("run_python's job.submitted");
    let command = submitted["detail"]["command"].as_array().unwrap();
    let digest = command.last().and_then(Value::as_str).unwrap();
    let code = SUMMARY_SCRIPT.as_bytes();
    let mut with_newline = code.to_vec();
    with_newline.push(b'\n');
    assert_eq!(digest.len(), 64, "{command:?}");
    for unsalted in [code, &with_newline[..]] {
        assert_ne!(
            digest,
            hex::encode(sha2::Sha256::digest(unsalted)),
            "{command:?}"
        );
    }
    let inner = job_calls(&records, job_id);
    let tools: Vec<&str> = inner
        .iter()
        .map(|r| r["call"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "list_directory",
            "read_file",
            "read_file",
            "read_file",
            "write_file",
            "calc__add"
        ],
        "{inner:#?}"
    );
    for r in &inner {
        assert_eq!(r["call"]["via"], "job", "{r}");
        assert_eq!(r["call"]["job"], job_id, "{r}");
        assert_eq!(r["call"]["instance"], "cm", "{r}");
        assert_eq!(r["tenant"], "default", "{r}");
    }

    // The audit log is a test input: every recorded decision replays exactly.
    let audit_file = dir.path().join("state/audit/audit-000001.jsonl");
    let replay = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["policy", "test", "--json", "--config"])
        .arg(&config)
        .arg("--calls")
        .arg(&audit_file)
        .env("HOME", dir.path().join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap_or_else(|_| {
        panic!("{}", String::from_utf8_lossy(&replay.stderr));
    });
    assert!(replay.status.success(), "{report}");
    assert_eq!(report["mismatched"], 0, "{report}");
    assert!(report["total"].as_u64().unwrap() >= 10, "{report}");
}

#[tokio::test]
async fn a_policy_can_refuse_a_tool_to_scripts_and_allow_it_to_agents() {
    refused_to_scripts(
        "behaviour = \"deny-via\"\nvia = \"job\"\n",
        "`write_file` is refused to calls via `job`",
    )
    .await;
}

/// The same with a policy keyed on the job: a listing of a job's code carries its `job` (and
/// instance) as its calls do, so the tool it would refuse is not offered either.
#[tokio::test]
async fn a_policy_keyed_on_the_job_hides_what_it_refuses_from_the_jobs_listing() {
    refused_to_scripts(
        "behaviour = \"deny-job\"\n",
        "`write_file` is refused to a job's code",
    )
    .await;
}

/// A policy (the hostile guest configured with `settings`) on `write_file` that refuses it
/// to a job's code with `reason`: the agent writes, the job's code is not offered the tool,
/// and its call is refused.
async fn refused_to_scripts(settings: &str, reason: &str) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let guests = hpcgate_policy_build::build_guests(
        workspace,
        &["hostile"],
        hpcgate_policy_build::Target::Bare,
        dir.path(),
    );
    let extra = format!(
        "{CHAIN}\n[[policies]]\nname = \"no-job-writes\"\nmodule = {:?}\ntools = [\"write_file\"]\n[policies.config]\n{settings}",
        guests[0].component.display().to_string()
    );
    let config = served::config(dir.path(), &extra);
    let served = Served::http(dir.path(), &config).await;
    let script = r#"
import json
import hpcgate_tools as t
seen = {"read": t.read_file(path="agent.txt")["content"], "listed": hasattr(t, "write_file")}
try:
    t.call("write_file", path="script.txt", content="from the script")
    seen["write"] = "allowed"
except t.ToolError as e:
    seen["write"] = str(e)
print(json.dumps(seen))
"#;
    let results = drive(
        &served,
        &json!([
            call("create_instance", json!({"instance_id": "cm"})),
            call(
                "write_file",
                json!({"instance_id": "cm", "path": "agent.txt", "content": "from the agent"})
            ),
            call(
                "run_python",
                json!({"instance_id": "cm", "code": script, "timeout": 120})
            ),
            call(
                "stat_path",
                json!({"instance_id": "cm", "path": "script.txt"})
            ),
        ]),
    )
    .await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    assert_eq!(
        results[1]["is_error"], false,
        "the agent may write: {}",
        results[1]
    );
    let job = &results[2]["structured"]["job"];
    let seen: Value = serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim())
        .unwrap_or_else(|_| panic!("{}", results[2]));
    assert_eq!(seen["read"], "from the agent");
    // The list phase sees `via = job` and the job too: the script is not even offered the tool.
    assert_eq!(seen["listed"], false);
    assert_eq!(
        seen["write"],
        format!("write_file: denied by policy `no-job-writes`: {reason}")
    );
    assert_eq!(
        results[3]["is_error"], true,
        "the script's write happened: {}",
        results[3]
    );
}

/// Submits `script` as a job with tools in a new instance `cm`, then stops the gateway while
/// the job runs; the job's id.
async fn submit_then_stop(gateway: Served, script: &str) -> String {
    let submitted = drive(
        &gateway,
        &json!([
            call("create_instance", json!({"instance_id": "cm"})),
            call("submit_job", json!({"instance_id": "cm", "command": ["python3", "-c", script], "tools": true, "timeout": 0})),
        ]),
    )
    .await;
    let job_id = submitted[1]["structured"]["job"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted:?}"))
        .to_owned();
    let (status, stderr) = gateway.stop().await;
    assert!(status.success(), "{stderr}");
    job_id
}

/// The door is a directory bound into the sandbox, so a gateway that starts again while the
/// job runs makes the socket again in it, and the job's code goes on calling tools.
#[tokio::test]
async fn a_running_jobs_door_serves_again_after_a_gateway_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let first = Served::http(dir.path(), &config).await;
    let script = r#"
import json, os, time
import hpcgate_tools as t
before = t.stat_path(path=".")["kind"]
for _ in range(600):
    if os.path.exists("/workspace/go"):
        break
    time.sleep(0.1)
print(json.dumps({"before": before, "after": t.read_file(path="go")["content"]}))
"#;
    let job_id = submit_then_stop(first, script).await;

    let second = Served::http(dir.path(), &config).await;
    let finished = drive(
        &second,
        &json!([
            call(
                "write_file",
                json!({"instance_id": "cm", "path": "go", "content": "after the restart"})
            ),
            call(
                "poll_job",
                json!({"instance_id": "cm", "job_id": job_id, "timeout": 120})
            ),
        ]),
    )
    .await;
    let (status, stderr) = second.stop().await;
    assert!(status.success(), "{stderr}");
    let job = &finished[1]["structured"]["job"];
    assert_eq!(job["exit_code"], 0, "{}", finished[1]);
    let seen: Value = serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(
        seen,
        json!({"before": "directory", "after": "after the restart"})
    );
    let records = audit_records(dir.path());
    let restarted = records
        .iter()
        .rposition(|r| r["event"] == "gateway.started")
        .unwrap();
    let after_restart: Vec<_> = job_calls(&records[restarted..], &job_id)
        .iter()
        .map(|r| r["call"]["tool"].clone())
        .collect();
    assert!(
        after_restart.contains(&json!("read_file")),
        "{after_restart:?}"
    );
}

/// A job's call made while its gateway is down (restarting) waits for it to listen again and
/// then goes through: the connection was refused, so nothing was sent and nothing runs twice.
#[tokio::test]
async fn a_jobs_call_made_while_the_gateway_restarts_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let first = Served::http(dir.path(), &config).await;
    let script = r#"
import json, os, time
for _ in range(1200):
    if os.path.exists("/workspace/now"):
        break
    time.sleep(0.05)
import hpcgate_tools as t
print(json.dumps({"kind": t.stat_path(path=".")["kind"]}))
"#;
    let job_id = submit_then_stop(first, script).await;

    // The job's first call (its `initialize`) goes out while no gateway listens.
    let tenants = dir.path().join("state/tenants");
    let workspace = std::fs::read_dir(&tenants)
        .unwrap()
        .map(|tenant| tenant.unwrap().path().join("instances/cm/workspace"))
        .find(|workspace| workspace.is_dir())
        .expect("the instance's workspace");
    std::fs::write(workspace.join("now"), "").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let second = Served::http(dir.path(), &config).await;
    let finished = drive(
        &second,
        &json!([call(
            "poll_job",
            json!({"instance_id": "cm", "job_id": job_id, "timeout": 120})
        )]),
    )
    .await;
    let (status, stderr) = second.stop().await;
    assert!(status.success(), "{stderr}");
    let job = &finished[0]["structured"]["job"];
    assert_eq!(job["exit_code"], 0, "{}", finished[0]);
    let seen: Value = serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(seen, json!({"kind": "directory"}));
    let records = audit_records(dir.path());
    let restarted = records
        .iter()
        .rposition(|r| r["event"] == "gateway.started")
        .unwrap();
    let calls: Vec<_> = job_calls(&records, &job_id)
        .iter()
        .map(|r| r["call"]["tool"].clone())
        .collect();
    assert_eq!(calls, [json!("stat_path")], "one call, recorded once");
    let after_restart = job_calls(&records[restarted..], &job_id);
    assert_eq!(after_restart.len(), 1, "answered by the restarted gateway");
}

/// Calls `stat_path` ten times from a job's code; what each returned (`ok` or the error).
const RATE_SCRIPT: &str = r#"
import json
import hpcgate_tools as t
seen = []
for _ in range(10):
    try:
        t.stat_path(path=".")
        seen.append("ok")
    except t.ToolError as e:
        seen.append(str(e))
print(json.dumps(seen))
"#;

/// A job's calls are the tenant's calls: they draw on the tenant's rate limits (so a script
/// cannot multiply its tenant's rate by looping), and each refusal is audited as the job's.
#[test]
fn a_jobs_calls_count_against_its_tenants_rate_limits() {
    use crate::support::gateway::{args, caller, err, open};

    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{CHAIN}\n[tenants.chem.rate_limits]\n\"stat_path\" = {{ per_minute = 4 }}\n[tenants.bio]\n"
    );
    let gw = open(dir.path(), &config).shared();
    let chem = caller("chem");
    let create = args(json!({"instance_id": "rl"}));
    assert!(!gw.call(&chem, "create_instance", create).is_error);
    let run = args(json!({"instance_id": "rl", "code": RATE_SCRIPT, "timeout": 120}));
    let result = gw.call(&chem, "run_python", run);
    assert!(!result.is_error, "{}", result.text);
    let job = &result.structured["job"];
    assert_eq!(job["exit_code"], 0, "{job}");
    let seen: Vec<String> =
        serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(seen.iter().filter(|s| *s == "ok").count(), 4, "{seen:?}");
    for refused in &seen[4..] {
        assert!(
            refused.contains("rate limit") && refused.contains("retry in"),
            "{seen:?}"
        );
    }
    // The bucket is the tenant's: the agent is refused now too; another tenant is not.
    let stat = || args(json!({"instance_id": "rl", "path": "."}));
    assert!(err(gw.call(&chem, "stat_path", stat())).contains("rate limit"));
    let bio = caller("bio");
    assert!(
        !gw.call(&bio, "create_instance", args(json!({"instance_id": "rl"})))
            .is_error
    );
    assert!(!gw.call(&bio, "stat_path", stat()).is_error);

    let job_id = job["job_id"].as_str().unwrap();
    let records = audit_records(dir.path());
    let limited = records
        .iter()
        .filter(|r| {
            r["principal"] == format!("job:{job_id}").as_str()
                && r["outcome"]["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("rate limit"))
        })
        .count();
    assert_eq!(limited, 6, "each refusal is recorded as the job's");
}
