//! The real binary over stdio with the rmcp client: the handshake, `tools/list` after policy,
//! tool calls with structured results, and a denial coming back as a tool error.

use crate::support::served;

use std::path::Path;
use std::time::Instant;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value, json};

/// The test config, with `extra` TOML after it.
fn config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(
        dir.join("docs/site.md"),
        "# Our cluster\nUse partition `cpu`.\n",
    )
    .unwrap();
    let text = format!(
        "state_dir = {:?}\n[mcp]\ncontext_dirs = [\"docs\"]\n\n[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n\
         [policies.config]\ndeny = [\"list_archived_instances\"]\n\n[[policies]]\nname = \"paths\"\n\
         module = \"stock:path-rules\"\n[policies.config]\ndeny_write = [\"**/.git/**\"]\n",
        dir.join("state").display().to_string()
    );
    std::fs::write(&path, text + extra).unwrap();
    path
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

/// `hpcgate run` on a fresh state directory under `dir`.
fn gateway_command(dir: &Path) -> tokio::process::Command {
    gateway_command_with(dir, "")
}

/// `hpcgate run` on a fresh state directory under `dir`, with `extra` config.
fn gateway_command_with(dir: &Path, extra: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .arg("run")
        .arg("--config")
        .arg(config(dir, extra))
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("HPCGATE_CONFIG");
    command
}

#[tokio::test]
async fn an_mcp_client_lists_calls_and_is_refused_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let command = gateway_command(dir.path());
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("hpcgate")
    );

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert!(
        names.contains(&"create_instance".to_owned()) && names.contains(&"write_file".to_owned())
    );
    assert!(
        !names.contains(&"list_archived_instances".to_owned()),
        "hidden by policy: {names:?}"
    );

    let call = |name: &'static str, arguments: Value| {
        CallToolRequestParams::new(name).with_arguments(args(arguments))
    };
    let created = client
        .call_tool(call("create_instance", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    assert_eq!(created.is_error, Some(false));
    assert_eq!(
        created.structured_content.unwrap()["instance"]["id"],
        "run1"
    );

    let written = client
        .call_tool(call(
            "write_file",
            json!({"instance_id": "run1", "path": "a.txt", "content": "over stdio"}),
        ))
        .await
        .unwrap();
    assert_eq!(written.is_error, Some(false));
    let read = client
        .call_tool(call(
            "read_file",
            json!({"instance_id": "run1", "path": "a.txt"}),
        ))
        .await
        .unwrap();
    assert_eq!(read.structured_content.unwrap()["content"], "over stdio");

    let denied = client
        .call_tool(call(
            "write_file",
            json!({"instance_id": "run1", "path": ".git/x", "content": "no"}),
        ))
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true));
    let text = serde_json::to_string(&denied.content).unwrap();
    assert!(text.contains("denied by policy `paths`"), "{text}");

    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "resource://hpcgate/guide",
            "resource://hpcgate/context/site.md"
        ]
    );
    let site = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "resource://hpcgate/context/site.md",
        ))
        .await
        .unwrap();
    let text = serde_json::to_string(&site.contents).unwrap();
    assert!(text.contains("Use partition `cpu`."), "{text}");
    let missing = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "resource://hpcgate/context/../../etc/passwd",
        ))
        .await;
    assert!(missing.is_err());

    client.cancel().await.unwrap();
    let report = crate::support::audit::verified(&dir.path().join("state/audit"));
    // gateway.started, three allowed calls (decision + outcome each), the instance's
    // creation, one denial (decision only), and gateway.stopped once the gateway has seen the
    // client leave (it may still be on its way).
    assert!(
        report.intact && (report.records == 9 || report.records == 10),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_waiting_submit_job_sends_progress_for_the_callers_token() {
    let dir = tempfile::tempdir().unwrap();
    let log = served::ProgressLog::default();
    let client = log
        .clone()
        .serve(TokioChildProcess::new(gateway_command(dir.path())).unwrap())
        .await
        .unwrap();
    client
        .call_tool(
            CallToolRequestParams::new("create_instance")
                .with_arguments(args(json!({"instance_id": "run1"}))),
        )
        .await
        .unwrap();
    // The rmcp client puts its own progress token on every request; the gateway must echo it.
    let submit = |command: &str| {
        CallToolRequestParams::new("submit_job").with_arguments(args(
            json!({"instance_id": "run1", "command": command, "timeout": 30}),
        ))
    };
    let result = client
        .call_tool(submit("sleep 2.5; echo finished"))
        .await
        .unwrap();
    let job = &result.structured_content.unwrap()["job"];
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["stdout_tail"], "finished");

    let first = log.0.lock().unwrap().clone();
    assert!(
        first.len() >= 2,
        "about one notification a second: {first:?}"
    );
    let token = first[0].progress_token.clone();
    assert!(first.iter().all(|p| p.progress_token == token), "{first:?}");
    assert!(first.iter().all(|p| p.total == Some(30.0)));
    assert!(
        first.windows(2).all(|w| w[0].progress < w[1].progress),
        "{first:?}"
    );

    client.call_tool(submit("sleep 1.5")).await.unwrap();
    let second: Vec<_> = log.0.lock().unwrap()[first.len()..].to_vec();
    assert!(!second.is_empty());
    assert!(
        second.iter().all(|p| p.progress_token != token),
        "each call's notifications carry that call's token: {second:?}"
    );
    client.cancel().await.unwrap();
}

/// A client that gives up on a waiting call (MCP `notifications/cancelled`) ends the wait: a
/// `submit_job` with `detach: false` then cancels its job at once, not at the end of its hour.
#[tokio::test]
async fn a_call_the_client_gives_up_on_stops_waiting() {
    use rmcp::model::ClientRequest;
    use rmcp::service::PeerRequestOptions;
    let dir = tempfile::tempdir().unwrap();
    let client =
        ().serve(TokioChildProcess::new(gateway_command(dir.path())).unwrap())
            .await
            .unwrap();
    client
        .call_tool(
            CallToolRequestParams::new("create_instance")
                .with_arguments(args(json!({"instance_id": "run1"}))),
        )
        .await
        .unwrap();
    let submit = CallToolRequestParams::new("submit_job").with_arguments(args(json!({
        "instance_id": "run1", "command": "sleep 600", "timeout": 3600, "detach": false
    })));
    let handle = client
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(rmcp::model::Request::new(submit)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let jobs = || async {
        let listed = client
            .call_tool(
                CallToolRequestParams::new("list_jobs")
                    .with_arguments(args(json!({"instance_id": "run1"}))),
            )
            .await
            .unwrap();
        let status = &listed.structured_content.unwrap()["jobs"][0]["status"];
        status.as_str().unwrap_or_default().to_owned()
    };
    let started = Instant::now();
    while jobs().await != "running" && started.elapsed().as_secs() < 60 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    handle
        .cancel(Some("the user gave up".into()))
        .await
        .unwrap();
    let started = Instant::now();
    let mut status = jobs().await;
    while status != "cancelled" && started.elapsed().as_secs() < 20 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        status = jobs().await;
    }
    assert_eq!(status, "cancelled", "the job of the call given up on");
    client.cancel().await.unwrap();
}

/// Brief calls run on the stdio session's own thread while nothing else is in flight; a call
/// that waits must not hold them up, and calls sent together must all be answered (and
/// recorded) whichever way each one ran.
#[tokio::test]
async fn brief_calls_are_answered_while_a_job_waits_and_when_sent_together() {
    let dir = tempfile::tempdir().unwrap();
    let client =
        ().serve(TokioChildProcess::new(gateway_command(dir.path())).unwrap())
            .await
            .unwrap();
    let call = |name: &str, arguments: Value| {
        let peer = client.peer().clone();
        let request = CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments));
        tokio::spawn(async move { (peer.call_tool(request).await.unwrap(), Instant::now()) })
    };
    call("create_instance", json!({"instance_id": "run1"}))
        .await
        .unwrap();
    let submit = call(
        "submit_job",
        json!({"instance_id": "run1", "command": "sleep 3; echo done", "timeout": 30}),
    );
    let mut stats = Vec::new();
    for i in 0..40 {
        let path = if i % 2 == 0 { "/workspace" } else { "/output" };
        stats.push(call(
            "stat_path",
            json!({"instance_id": "run1", "path": path}),
        ));
    }
    let mut last_stat = None;
    for (i, stat) in stats.into_iter().enumerate() {
        let (result, at) = stat.await.unwrap();
        let stat = result.structured_content.expect("structured stat result");
        let path = if i % 2 == 0 { "/workspace" } else { "/output" };
        assert_eq!(stat["path"], path, "{stat}");
        assert_eq!(stat["kind"], "directory", "{stat}");
        last_stat = last_stat.max(Some(at));
    }
    let (submitted, job_done) = submit.await.unwrap();
    let job = &submitted.structured_content.unwrap()["job"];
    assert_eq!(job["status"], "completed", "{job}");
    assert!(
        last_stat.unwrap() < job_done,
        "every stat_path was answered while submit_job still waited for its job"
    );
    client.cancel().await.unwrap();

    // Every call was recorded, in one unbroken chain.
    let verify = std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["audit", "verify", "--dir"])
        .arg(dir.path().join("state/audit"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
    let query = std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["audit", "query", "--tool", "stat_path", "--dir"])
        .arg(dir.path().join("state/audit"))
        .output()
        .unwrap();
    assert!(query.status.success(), "{query:?}");
    let lines = String::from_utf8(query.stdout).unwrap();
    assert_eq!(lines.lines().count(), 40, "{lines}");
}

/// With `[audit] preallocate_bytes`, the live segment ends in zeros allocated ahead of its
/// records: while the gateway serves, the CLI's readers (verify, query, tail, a replay of the
/// file itself) see every record and nothing else; when it stops, the zeros are gone.
#[tokio::test]
async fn space_allocated_ahead_of_the_audit_records_is_read_past_and_cut_off_at_stop() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "\n[audit]\npreallocate_bytes = 65536\n";
    let client =
        ().serve(TokioChildProcess::new(gateway_command_with(dir.path(), extra)).unwrap())
            .await
            .unwrap();
    let call = |name: &'static str, arguments: Value| {
        let request = CallToolRequestParams::new(name).with_arguments(args(arguments));
        client.call_tool(request)
    };
    let created = call("create_instance", json!({"instance_id": "run1"}))
        .await
        .unwrap();
    assert_eq!(created.is_error, Some(false));
    for _ in 0..30 {
        let stat = call(
            "stat_path",
            json!({"instance_id": "run1", "path": "/workspace"}),
        )
        .await
        .unwrap();
        assert_eq!(stat.is_error, Some(false));
    }
    let audit = dir.path().join("state/audit");
    let segment = audit.join("audit-000001.jsonl");
    let records_end = |bytes: &[u8]| bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let live = std::fs::read(&segment).unwrap();
    let end = records_end(&live);
    assert!(
        live.len() > end,
        "zeros follow the records while the gateway serves"
    );
    assert_eq!(live[end - 1], b'\n');

    let hpcgate = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
            .args(args)
            .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let dir_arg = audit.to_str().unwrap();
    hpcgate(&["audit", "verify", "--dir", dir_arg]);
    let stats = hpcgate(&["audit", "query", "--tool", "stat_path", "--dir", dir_arg]);
    assert_eq!(stats.lines().count(), 30, "{stats}");
    let newest = hpcgate(&["audit", "tail", "-n", "1", "--json", "--dir", dir_arg]);
    let newest: Value = serde_json::from_str(newest.lines().next().unwrap()).unwrap();
    assert_eq!(newest["call"]["tool"], "stat_path", "{newest:#}");
    let config = dir.path().join("gateway.toml");
    let replay = hpcgate(&[
        "policy",
        "test",
        "--json",
        "--config",
        config.to_str().unwrap(),
        "--calls",
        segment.to_str().unwrap(),
    ]);
    let replay: Value = serde_json::from_str(&replay).unwrap();
    assert_eq!(replay["mismatched"], 0, "{replay:#}");
    assert!(replay["total"].as_u64().unwrap() >= 31, "{replay:#}");

    client.cancel().await.unwrap();
    let stopped = std::fs::read(&segment).unwrap();
    assert_eq!(
        records_end(&stopped),
        stopped.len(),
        "no zeros once it stopped"
    );
    assert!(stopped.starts_with(&live[..end]));
    hpcgate(&["audit", "verify", "--dir", dir_arg]);
}

/// A policy built for `wasm32-wasip2` judges calls over stdio, brief ones included: its WASI
/// functions block on a Tokio runtime, so with it loaded no call may run on the session's
/// runtime thread (where that would panic).
#[tokio::test]
async fn a_wasi_policy_judges_brief_calls_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let guests = hpcgate_policy_build::build_guests(
        workspace,
        &["hostile"],
        hpcgate_policy_build::Target::Wasip2,
        dir.path(),
    );
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["policy", "check"])
        .arg(&guests[0].component)
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && said.contains("imports the hpcgate world and WASI"),
        "{said}"
    );
    let extra = format!(
        "\n[[policies]]\nname = \"probe\"\nmodule = {:?}\ntools = [\"stat_path\"]\n\
         [policies.config]\nbehaviour = \"wasi-probe\"\n",
        guests[0].component.display().to_string()
    );
    let command = gateway_command_with(dir.path(), &extra);
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"read_file".to_owned()), "{names:?}");
    assert!(
        !names.contains(&"stat_path".to_owned()),
        "the probe denies it: {names:?}"
    );
    let created = client
        .call_tool(
            CallToolRequestParams::new("create_instance")
                .with_arguments(args(json!({"instance_id": "w1"}))),
        )
        .await
        .unwrap();
    assert_eq!(created.is_error, Some(false));
    let mut reports = Vec::new();
    for _ in 0..3 {
        let stat = client
            .call_tool(
                CallToolRequestParams::new("stat_path")
                    .with_arguments(args(json!({"instance_id": "w1", "path": "."}))),
            )
            .await
            .unwrap();
        assert_eq!(stat.is_error, Some(true));
        let text = serde_json::to_string(&stat.content).unwrap();
        assert!(
            text.contains(r#"\"env\":0"#) && text.contains(r#"\"wall_ns\":0"#),
            "{text}"
        );
        reports.push(text);
    }
    assert!(reports.windows(2).all(|w| w[0] == w[1]), "{reports:?}");
    client.cancel().await.unwrap();
    let report = crate::support::audit::verified(&dir.path().join("state/audit"));
    // gateway.started, the creation (decision, instance, outcome), three denials.
    assert!(report.intact && report.records >= 7, "{report:?}");

    // Offline, on a thread with no async runtime, the audit log replays to the same decisions.
    let replayed = std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["policy", "test", "--json", "--config"])
        .arg(dir.path().join("gateway.toml"))
        .arg("--calls")
        .arg(dir.path().join("state/audit/audit-000001.jsonl"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    let replay: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(replay["mismatched"], 0, "{replay:#}");
    assert!(replay["total"].as_u64().unwrap() >= 4, "{replay:#}");
    assert!(replayed.status.success());
}

/// A JavaScript `while (true)` and a Python memory hog judge tools of a gateway serving over
/// stdio: each call they judge is denied as a fault naming the policy, and the gateway serves
/// the next call. The deadlines are generous: a fresh instance is prepared under the same
/// deadline, and an unoptimised host on a loaded machine takes milliseconds to instantiate
/// QuickJS (the time to deny, deadline + 5 ms, is measured in `tests/deadline`).
#[tokio::test]
async fn javascript_and_python_hostile_policies_fault_while_the_gateway_serves() {
    let dir = tempfile::tempdir().unwrap();
    let js = crate::support::shared::componentized("js", "policies/hostile/js/hostile.js", false);
    let python = crate::support::shared::componentized(
        "python",
        "policies/hostile/python/hostile.py",
        false,
    );
    let extra = format!(
        "\n[[policies]]\nname = \"spin\"\nmodule = {:?}\ntools = [\"stat_path\"]\ndeadline_ms = 200\n\
         [policies.config]\nbehaviour = \"spin\"\non = \"stat_path\"\n\
         \n[[policies]]\nname = \"hog\"\nmodule = {:?}\ntools = [\"list_directory\"]\n\
         memory_limit_mb = 64\ndeadline_ms = 2000\n\
         [policies.config]\nbehaviour = \"hog\"\non = \"list_directory\"\n",
        js.display().to_string(),
        python.display().to_string()
    );
    let command = gateway_command_with(dir.path(), &extra);
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    for tool in ["stat_path", "list_directory", "write_file"] {
        assert!(names.contains(&tool.to_owned()), "{tool}: {names:?}");
    }
    let call = |tool: &'static str, arguments: Value| {
        let client = &client;
        async move {
            client
                .call_tool(CallToolRequestParams::new(tool).with_arguments(args(arguments)))
                .await
                .unwrap()
        }
    };
    let created = call("create_instance", json!({"instance_id": "w1"})).await;
    assert_eq!(created.is_error, Some(false));
    for round in 0..3 {
        let stat = call("stat_path", json!({"instance_id": "w1", "path": "."})).await;
        assert_eq!(stat.is_error, Some(true));
        let text = serde_json::to_string(&stat.content).unwrap();
        assert!(
            text.contains("policy `spin` timed out after 200 ms"),
            "{text}"
        );
        let list = call("list_directory", json!({"instance_id": "w1", "path": "."})).await;
        assert_eq!(list.is_error, Some(true));
        let text = serde_json::to_string(&list.content).unwrap();
        assert!(
            text.contains("policy `hog` exceeded its memory limit of 64 MiB"),
            "{text}"
        );
        // The gateway goes on serving what the faulting policies do not judge.
        let path = format!("note-{round}.txt");
        let written = call(
            "write_file",
            json!({"instance_id": "w1", "path": path, "content": "still serving"}),
        )
        .await;
        assert_eq!(written.is_error, Some(false), "{written:?}");
        let read = call("read_file", json!({"instance_id": "w1", "path": path})).await;
        assert_eq!(read.is_error, Some(false), "{read:?}");
        assert_eq!(read.structured_content.unwrap()["content"], "still serving");
    }
    client.cancel().await.unwrap();
}

/// Under an address-space limit (`ulimit -v`, as some login nodes set) the policy engine cannot
/// reserve its instance slots: the gateway says so and what to do, not only a byte count.
#[test]
fn an_address_space_limit_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "");
    let output = std::process::Command::new("prlimit")
        .arg(format!("--as={}", 8u64 << 30))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["run", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run prlimit (util-linux)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    for said in [
        "cannot reserve address space for its 1024 instance slots",
        "may map only 8.0 GiB (RLIMIT_AS",
        "`ulimit -v unlimited`",
    ] {
        assert!(stderr.contains(said), "`{said}` in: {stderr}");
    }
}
