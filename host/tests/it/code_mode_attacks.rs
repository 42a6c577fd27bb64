//! Code mode's attack table: what a job's code tries against its door — forged instance,
//! tenant and principal, another job's socket, writes into the door's directory, sub-jobs,
//! malformed and 100 MB requests, a flood past `max_calls_per_job`, a connection kept past the
//! job's end, a background process, another uid — each refused, the gateway up, the audit log
//! intact and holding every refusal.

use std::process::Command;

use serde_json::{Value, json};

use crate::code_mode::{CHAIN, audit_records, call, drive};
use crate::support::served::{self, Served};

/// What the attack script tries from inside its sandbox; each attempt's outcome as JSON.
const ATTACK_SCRIPT: &str = r#"
import json, socket, subprocess
import hpcgate_tools as t
OTHER = "@OTHER@"
r = {}
def attempt(name, f):
    try:
        r[name] = {"ok": True, "value": f()}
    except t.ToolError as e:
        r[name] = {"ok": False, "error": str(e)}
    except Exception as e:
        r[name] = {"ok": False, "error": type(e).__name__ + ": " + str(e)}
attempt("forged_instance", lambda: t.call("stat_path", instance_id="other", path="."))
attempt("foreign_tenant_instance", lambda: t.call("stat_path", instance_id="chem-run1", path="."))
attempt("principal_field", lambda: t.call("stat_path", path=".", principal="alice", tenant="chem"))
attempt("own_instance", lambda: t.stat_path(path="."))
attempt("other_socket", lambda: socket.socket(socket.AF_UNIX).connect(OTHER))
attempt("plant_file", lambda: open("/run/hpcgate/planted", "w").write("x"))
attempt("replace_socket", lambda: __import__("os").unlink("/run/hpcgate/tools.sock"))
attempt("submit_job", lambda: t.submit_job(command="true"))
attempt("run_python", lambda: t.call("run_python", code="print(1)"))
def raw(body, length):
    c = t._UnixConnection(t.SOCKET)
    c.putrequest("POST", "/mcp")
    for k, v in [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"), ("Content-Length", str(length))]:
        c.putheader(k, v)
    c.endheaders()
    sent = 0
    try:
        while sent < length:
            chunk = body[sent:sent + (1 << 20)]
            c.send(chunk)
            sent += len(chunk)
    except OSError as e:
        pass
    resp = c.getresponse()
    return {"status": resp.status, "body": resp.read(300).decode(errors="replace"), "sent": sent}
attempt("malformed", lambda: raw(b"{not json", 9))
huge = b"x" * (100 << 20)
attempt("huge", lambda: raw(huge, len(huge)))
del huge
n = 0
while n <= 1000:
    try:
        t.stat_path(path=".")
        n += 1
    except t.ToolError as e:
        r["flood"] = {"n": n, "error": str(e)}
        break
subprocess.Popen(["sh", "-c", "sleep 2; hpcgate-call stat_path '{\"path\": \".\"}' > /workspace/late.out 2>&1"], start_new_session=True)
print(json.dumps(r))
"#;

#[tokio::test]
async fn a_jobs_code_cannot_forge_its_identity_escape_its_door_or_outlive_it() {
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{CHAIN}\n[code_mode]\nmax_calls_per_job = 40\n");
    let config = served::config(dir.path(), &extra);
    let served = Served::http(dir.path(), &config).await;
    // Another job with tools, still running: its socket exists on the host.
    let first = drive(
        &served,
        &json!([
            call("create_instance", json!({"instance_id": "cm"})),
            call("create_instance", json!({"instance_id": "other"})),
            call(
                "submit_job",
                json!({"instance_id": "other", "command": "sleep 60", "tools": true, "timeout": 0})
            ),
        ]),
    )
    .await;
    let sleeper = first[2]["structured"]["job"]["job_id"].as_str().unwrap();
    let other_socket = dir.path().join(format!("state/run/{sleeper}/tools.sock"));
    assert!(other_socket.exists(), "{first:?}");
    // A connection to the other job's door kept open from outside, to be used after it ended.
    let mut kept = std::os::unix::net::UnixStream::connect(&other_socket).unwrap();

    let script = ATTACK_SCRIPT.replace("@OTHER@", other_socket.to_str().unwrap());
    let results = drive(
        &served,
        &json!([
            call(
                "run_python",
                json!({"instance_id": "cm", "code": script, "timeout": 300})
            ),
            call(
                "cancel_job",
                json!({"instance_id": "other", "job_id": sleeper})
            ),
        ]),
    )
    .await;
    let job = &results[0]["structured"]["job"];
    assert_eq!(job["exit_code"], 0, "{}", results[0]);
    let seen: Value = serde_json::from_str(job["stdout_tail"].as_str().unwrap().trim()).unwrap();
    let error = |name: &str| -> String {
        assert_eq!(seen[name]["ok"], false, "{name} was not refused: {seen}");
        seen[name]["error"].as_str().unwrap().to_owned()
    };
    for forged in ["forged_instance", "foreign_tenant_instance"] {
        assert!(
            error(forged).contains("may only use its own instance `cm`"),
            "{seen}"
        );
    }
    assert!(error("principal_field").contains("unknown field"), "{seen}");
    assert_eq!(seen["own_instance"]["ok"], true, "{seen}");
    assert!(
        error("other_socket").contains("FileNotFoundError"),
        "{seen}"
    );
    for write in ["plant_file", "replace_socket"] {
        assert!(error(write).contains("Read-only file system"), "{seen}");
    }
    for submit in ["submit_job", "run_python"] {
        assert!(error(submit).contains("allow_submit"), "{seen}");
    }
    let malformed = &seen["malformed"]["value"];
    assert!(
        malformed["status"].as_u64().unwrap() >= 400
            || malformed["body"].as_str().unwrap().contains("error"),
        "{seen}"
    );
    // 100 MB: refused with 413 part-way, or the connection is cut; never accepted.
    match &seen["huge"] {
        v if v["ok"] == true => assert_eq!(v["value"]["status"], 413, "{seen}"),
        v => assert!(!v["error"].as_str().unwrap().is_empty(), "{seen}"),
    }
    let flood = &seen["flood"];
    assert!(
        flood["error"]
            .as_str()
            .unwrap()
            .contains("max_calls_per_job"),
        "{seen}"
    );
    assert!(flood["n"].as_u64().unwrap() < 40, "{seen}");

    // The other job ended (cancelled): its socket is gone, a kept connection is served no more.
    // Its watcher removes the socket (30 s at most); 3 s at least, for the script's late call.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    while other_socket.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(!other_socket.exists(), "the door outlived its job");
    use std::io::{Read as _, Write as _};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = kept.write_all(request.as_bytes());
    let mut answer = String::new();
    let _ = kept.read_to_string(&mut answer);
    assert!(
        !answer.contains("\"tools\""),
        "a kept connection listed tools: {answer}"
    );
    // The background process left by the script never got a call through.
    let late = std::fs::read_to_string(
        dir.path()
            .join("state/tenants/default/instances/cm/workspace/late.out"),
    );
    assert!(
        late.as_deref()
            .map_or(true, |text| !text.contains("\"kind\"")),
        "{late:?}"
    );

    // The gateway is still up, and every refusal is in an intact audit log.
    let after = drive(
        &served,
        &json!([call("stat_path", json!({"instance_id": "cm", "path": "."}))]),
    )
    .await;
    assert_eq!(after[0]["is_error"], false, "{after:?}");
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    let job_id = job["job_id"].as_str().unwrap();
    let records = audit_records(dir.path());
    let principal = format!("job:{job_id}");
    let refusals: Vec<String> = records
        .iter()
        .filter(|r| r["principal"] == principal.as_str())
        .filter_map(|r| r["outcome"]["error"].as_str().map(str::to_owned))
        .collect();
    for needle in [
        "its own instance",
        "allow_submit",
        "max_calls_per_job",
        "unknown field",
    ] {
        assert!(
            refusals.iter().any(|e| e.contains(needle)),
            "{needle}: {refusals:#?}"
        );
    }
    assert!(
        records
            .iter()
            .all(|r| r["principal"] != "alice" && r["tenant"] != "chem"),
        "a forged field became an identity"
    );
}

/// What a process of another uid gets from a job's door: the directory keeps it out, and
/// with the directory opened up, `SO_PEERCRED` does (403 before any MCP).
const PEER_SCRIPT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(type(e).__name__)
    sys.exit(0)
body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
s.sendall(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
print(s.makefile("rb").readline().decode().split()[1])
"#;

#[tokio::test]
async fn another_uid_is_refused_at_a_jobs_door() {
    if !crate::support::root_else_skip("running a client as another uid") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let served = Served::http(dir.path(), &config).await;
    let started = drive(
        &served,
        &json!([
            call("create_instance", json!({"instance_id": "cm"})),
            call(
                "submit_job",
                json!({"instance_id": "cm", "command": "sleep 60", "tools": true, "timeout": 0})
            ),
        ]),
    )
    .await;
    let job_id = started[1]["structured"]["job"]["job_id"].as_str().unwrap();
    let door = dir.path().join(format!("state/run/{job_id}"));
    let socket = door.join("tools.sock");
    let as_stranger = || {
        use std::os::unix::process::CommandExt as _;
        let output = Command::new("python3")
            .args(["-c", PEER_SCRIPT])
            .arg(&socket)
            .uid(61004)
            .gid(61004)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    assert_eq!(
        as_stranger(),
        "PermissionError",
        "the door's directory is private"
    );
    use std::os::unix::fs::PermissionsExt as _;
    for (path, mode) in [
        (dir.path().to_owned(), 0o755),
        (dir.path().join("state"), 0o755),
        (dir.path().join("state/run"), 0o755),
        (door.clone(), 0o755),
        (socket.clone(), 0o666),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    assert_eq!(
        as_stranger(),
        "403",
        "a stranger's request is refused by its peer uid"
    );
    let cancelled = drive(
        &served,
        &json!([call(
            "cancel_job",
            json!({"instance_id": "cm", "job_id": job_id})
        )]),
    )
    .await;
    assert_eq!(cancelled[0]["is_error"], false, "{cancelled:?}");
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
}

/// Instance `cm`, a job of `sh -c script` without tools (waited for `timeout` s), a
/// `run_python` with `python`, then `then`: the calls of the tests below, for `drive`.
fn after_a_tool_less_job(script: &str, timeout: u64, python: Value, then: &[Value]) -> Value {
    let submit = json!({"instance_id": "cm", "command": ["sh", "-c", script], "tools": false,
                        "timeout": timeout});
    let mut calls = vec![
        call("create_instance", json!({"instance_id": "cm"})),
        call("submit_job", submit),
        call("run_python", python),
    ];
    calls.extend_from_slice(then);
    Value::Array(calls)
}

/// The script of the planting test.
const IMPORTS_JSON: &str = r#"
import json, sys
print(json.dumps({"argv": sys.argv[1:], "file": __file__}))
"#;

/// A job run without tools cannot plant code that a later `run_python`, with tools, imports:
/// the working directory is the workspace, which Python put first on its import path. The
/// tool-less job leaves a `json.py` there and in `/workspace/.hpcgate` (where a script without
/// tools is written); the later script imports `json` and gets the standard library's.
#[tokio::test]
async fn a_tool_less_job_cannot_plant_modules_for_run_python() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let served = Served::http(dir.path(), &config).await;
    // `hashlib.py` too: the bootstrap imports it to check the script (a fake one would say
    // any script is the one written).
    let plant = "mkdir -p /workspace/.hpcgate && for d in /workspace /workspace/.hpcgate; do \
                 printf 'print(\"PLANTED\")\\ndumps = lambda *a, **k: \"PLANTED\"\\n' > $d/json.py; \
                 printf 'print(\"PLANTED\")\\n' > $d/hashlib.py; done";
    let python = json!({"instance_id": "cm", "code": IMPORTS_JSON, "timeout": 120});
    let calls = after_a_tool_less_job(plant, 60, python, &[]);
    let results = drive(&served, &calls).await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    let planted = &results[1]["structured"]["job"];
    assert_eq!(planted["exit_code"], 0, "{planted}");
    let run = &results[2]["structured"]["job"];
    assert_eq!(run["exit_code"], 0, "{run}");
    let stdout = run["stdout_tail"].as_str().unwrap();
    assert!(!stdout.contains("PLANTED"), "{stdout}");
    let printed: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        printed,
        json!({"argv": [], "file": "/run/hpcgate/run.py"}),
        "the script runs as `python3 SCRIPT` would, from beside its door"
    );
}

/// A script run without tools is in the workspace, where another job could replace it before
/// Python reads it: it is read once and run only if its SHA-256 is the one written. The job
/// below waits for the script, overwrites it with code that leaves a mark, and ends;
/// `run_python` must refuse what it finds, and the mark must not appear.
#[tokio::test]
async fn a_script_run_without_tools_runs_only_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let served = Served::http(dir.path(), &config).await;
    let swap = "mkdir -p /workspace/.hpcgate; end=$(( $(date +%s) + 60 )); \
                while [ $(date +%s) -lt $end ]; do for f in /workspace/.hpcgate/run-*.py; do \
                if [ -e \"$f\" ]; then printf 'open(\"/workspace/swapped\", \"w\").write(\"x\")\\n' > \"$f\"; \
                exit 0; fi; done; done; exit 7";
    // Waits one second, so the loop runs before the script is written; the job goes on.
    let python = json!({"instance_id": "cm", "code": IMPORTS_JSON, "timeout": 120, "tools": false});
    let calls = after_a_tool_less_job(
        swap,
        1,
        python,
        &[
            call("list_jobs", json!({"instance_id": "cm"})),
            call("stat_path", json!({"instance_id": "cm", "path": "swapped"})),
        ],
    );
    let results = drive(&served, &calls).await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    let swapper = &results[1]["structured"]["job"];
    assert_eq!(
        swapper["final"], false,
        "the swapper still waits: {swapper}"
    );
    let run = &results[2]["structured"]["job"];
    assert_eq!(run["exit_code"], 1, "{run}");
    assert!(
        run["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("changed after run_python wrote it"),
        "{run}"
    );
    let jobs = &results[3]["structured"]["jobs"];
    let swapper_id = &swapper["job_id"];
    let swapper = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|job| &job["job_id"] == swapper_id)
        .unwrap();
    assert_eq!(swapper["exit_code"], 0, "the swap happened: {swapper}");
    let stat = &results[4];
    assert!(
        stat["is_error"] == true && stat["text"].as_str().unwrap().contains("swapped"),
        "the swapped-in code ran: {stat}"
    );
}

/// With tools, the script is out of every job's reach: beside the job's door, which no job can
/// write, not in the workspace, where another job of the instance could replace it before
/// `multiprocessing` runs it again in a spawned child, and run its own code with the tools.
/// Nor does the child import what such a job left in the workspace (`multiprocessing` starts
/// it with `python3 -c`, which puts the working directory first on the import path). A
/// tool-less job plants `multiprocessing.py` and overwrites every Python file it finds in the
/// workspace for 20 s; the script spawns a child after 2 s, and the child must be the script's
/// own code. A script over `[files] max_write_bytes` is refused and says which limit.
#[tokio::test]
async fn run_pythons_script_with_tools_is_out_of_other_jobs_reach() {
    const SPAWNS: &str = r#"
import json, multiprocessing, time
def child(conn):
    conn.send(["original", __file__])
if __name__ == "__main__":
    time.sleep(2)
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    process = ctx.Process(target=child, args=(theirs,))
    process.start()
    got = mine.recv() if mine.poll(30) else "no answer"
    process.join(5)
    print(json.dumps({"file": __file__, "child": got}))
"#;
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(
        dir.path(),
        &format!("{CHAIN}\n[files]\nmax_write_bytes = 4096\n"),
    );
    let served = Served::http(dir.path(), &config).await;
    let swap = "printf 'open(\"/workspace/swapped\", \"w\").write(\"x\")\\n' > /tmp/payload; \
                cp /tmp/payload /workspace/multiprocessing.py; end=$(( $(date +%s) + 20 )); while [ $(date +%s) -lt $end ]; do \
                find /workspace -name '*.py' -type f -exec cp /tmp/payload {} \\; ; done";
    let python = json!({"instance_id": "cm", "code": SPAWNS, "timeout": 120});
    let big = json!({"instance_id": "cm", "code": format!("# {}\n", "x".repeat(5000))});
    let calls = after_a_tool_less_job(
        swap,
        1,
        python,
        &[
            call("stat_path", json!({"instance_id": "cm", "path": "swapped"})),
            call("run_python", big),
        ],
    );
    let results = drive(&served, &calls).await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    assert_eq!(
        results[1]["structured"]["job"]["final"], false,
        "the swapper still looks: {}",
        results[1]
    );
    let run = &results[2]["structured"]["job"];
    assert_eq!(run["exit_code"], 0, "{run}");
    let printed: Value = serde_json::from_str(run["stdout_tail"].as_str().unwrap().trim()).unwrap();
    assert_eq!(
        printed,
        json!({"file": "/run/hpcgate/run.py", "child": ["original", "/run/hpcgate/run.py"]}),
        "the spawned child ran the script as written"
    );
    let stat = &results[3];
    assert!(
        stat["is_error"] == true && stat["text"].as_str().unwrap().contains("swapped"),
        "code swapped in ran: {stat}"
    );
    let too_large = &results[4];
    assert!(
        too_large["is_error"] == true
            && too_large["text"]
                .as_str()
                .unwrap()
                .contains("`[files] max_write_bytes`"),
        "{too_large}"
    );
}

/// Running jobs with tools hold no thread each. Each one's door is closed by a watcher when
/// the job ends; a watcher used to be a blocking thread, from the pool every tenant's door
/// calls share, for the job's whole life: a few hundred jobs of one tenant stalled every
/// other tenant's doors. The gateway's threads are counted before and after 24 more jobs.
#[tokio::test]
async fn running_jobs_with_tools_hold_no_thread_each() {
    const JOBS: usize = 24;
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CHAIN);
    let served = Served::http(dir.path(), &config).await;
    let pid = served.child.id().unwrap();
    let threads = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
        line["Threads:".len()..].trim().parse::<usize>().unwrap()
    };
    let job = |seconds: u32| {
        call(
            "submit_job",
            json!({"instance_id": "cm", "command": format!("sleep {seconds}"), "tools": true, "timeout": 0}),
        )
    };
    // One job first, so that the code-mode runtime and its threads exist; it ends by itself.
    let create = call("create_instance", json!({"instance_id": "cm"}));
    let first = drive(&served, &json!([create, job(3)])).await;
    let before = threads();
    let more = drive(&served, &Value::Array((0..JOBS).map(|_| job(60)).collect())).await;
    let after = threads();
    // Its door closes when it ends, with nobody asking about it.
    let first_job = first[1]["structured"]["job"]["job_id"].as_str().unwrap();
    let first_socket = dir.path().join(format!("state/run/{first_job}/tools.sock"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while first_socket.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(!first_socket.exists(), "the door outlived its job");
    let cancels: Vec<Value> = more
        .iter()
        .map(|submitted| {
            let job = &submitted["structured"]["job"];
            assert_eq!(job["status"], "running", "{submitted}");
            call(
                "cancel_job",
                json!({"instance_id": "cm", "job_id": job["job_id"]}),
            )
        })
        .collect();
    drive(&served, &Value::Array(cancels)).await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    assert!(
        after < before + JOBS / 2,
        "{JOBS} running jobs took the gateway from {before} to {after} threads"
    );
}

/// Every request of a job's code counts against its `max_calls_per_job` once, of whatever
/// kind: a listing asks the policies about every tool, a ping or a notification costs the
/// door's shared threads, a malformed body or another method is work too, so a job's code
/// could send any of them forever. No body but a POST's is read: a `PUT` that promises a
/// terabyte is answered at once.
#[tokio::test]
async fn a_jobs_requests_of_every_kind_count_against_its_calls() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{CHAIN}\n[code_mode]\nmax_calls_per_job = 8\n");
    let config = served::config(dir.path(), &extra);
    let served = Served::http(dir.path(), &config).await;
    let submit = call(
        "submit_job",
        json!({"instance_id": "cm", "command": "sleep 60", "tools": true, "timeout": 0}),
    );
    let create = call("create_instance", json!({"instance_id": "cm"}));
    let started = drive(&served, &json!([create, submit])).await;
    let job_id = started[1]["structured"]["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let socket = dir.path().join(format!("state/run/{job_id}/tools.sock"));
    let exchange = |head: &str, body: &str| {
        let mut door = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        door.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let request = format!(
            "{head}\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\n\r\n{body}"
        );
        door.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = door.read_to_string(&mut answer);
        answer
    };
    let post = |body: &str| {
        exchange(
            &format!("POST /mcp HTTP/1.1\r\nContent-Length: {}", body.len()),
            body,
        )
    };
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let stat = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"stat_path","arguments":{"path":"."}}}"#;
    let mut answers: Vec<String> = [
        initialize,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/templates/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"t-nosuchtask"}}"#,
        r#"["tools/call"]"#,
    ]
    .iter()
    .map(|body| post(body))
    .collect();
    answers.push(exchange(
        "PUT /mcp HTTP/1.1\r\nContent-Length: 1000000000000",
        "",
    ));
    answers.extend(
        [
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
            stat,
        ]
        .iter()
        .map(|body| post(body)),
    );
    drive(
        &served,
        &json!([call(
            "cancel_job",
            json!({"instance_id": "cm", "job_id": job_id})
        )]),
    )
    .await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{stderr}");
    for answer in &answers[..7] {
        assert!(answer.starts_with("HTTP/1.1 "), "answered: {answer:?}");
        assert!(!answer.contains("max_calls_per_job"), "{answer}");
    }
    assert!(answers[6].starts_with("HTTP/1.1 405"), "{}", answers[6]);
    assert!(answers[7].contains("\"tools\""), "{}", answers[7]);
    assert!(answers[8].starts_with("HTTP/1.1 429"), "{}", answers[8]);
    for answer in &answers[8..] {
        assert!(answer.contains("max_calls_per_job"), "{answer}");
    }
}
