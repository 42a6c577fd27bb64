//! Third-party clients from the TypeScript side: the official SDK of both generations
//! (`@modelcontextprotocol/sdk` 1.x, `@modelcontextprotocol/client` 2.x) and the MCP Inspector
//! CLI, installed by `scripts/setup.sh` into `<target>/ts-clients` (pinned by
//! `tests/clients/ts/package-lock.json`, with the Node 22 the Inspector needs). The SDK
//! programs in `tests/clients/ts/` list, call, run a job with progress and meet a policy
//! denial over stdio and over streamable HTTP with a tenant's bearer token; the Inspector lists
//! and calls over both.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output};
use std::time::Duration;

use hpcgate::auth::bearer::{generate_token, hash_token};
use serde_json::Value;

use crate::support::proxy::target_dir;
use crate::support::served::{self, Served};

/// Where `scripts/setup.sh` installs the clients.
fn clients() -> PathBuf {
    let clients = target_dir().join("ts-clients");
    for needed in ["node_modules/.bin/node", "node_modules/.bin/mcp-inspector"] {
        assert!(
            clients.join(needed).exists(),
            "the TypeScript MCP clients are missing ({} is absent): run scripts/setup.sh (it installs \
             tests/clients/ts/package-lock.json into {})",
            needed,
            clients.display()
        );
    }
    clients
}

/// Node 22, from the npm `node` package beside the clients.
fn node() -> PathBuf {
    clients().join("node_modules/.bin/node")
}

/// A copy of `tests/clients/ts/*.mjs` in `dir/ts`, beside a `node_modules` link to the
/// installed clients: Node resolves a module's imports from the module's own directory up, and
/// the installed packages live in the target directory, not next to the sources.
fn programs(dir: &Path) -> PathBuf {
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/ts");
    let staged = dir.join("ts");
    std::fs::create_dir_all(&staged).unwrap();
    for entry in std::fs::read_dir(&sources).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "mjs") {
            std::fs::copy(&path, staged.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::os::unix::fs::symlink(clients().join("node_modules"), staged.join("node_modules"))
        .unwrap();
    staged
}

/// Runs `command` (its output captured) and returns its output; panics after five minutes,
/// which only a hung client reaches.
async fn output(mut command: tokio::process::Command) -> Output {
    command.kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .unwrap_or_else(|_| panic!("{command:?} hung"))
        .expect("run the client")
}

/// A gateway over streamable HTTP whose only tenant, `chem`, authenticates with the bearer
/// token returned beside it.
async fn http_gateway(dir: &Path) -> (Served, String) {
    let token = generate_token().unwrap();
    let config = served::config(
        dir,
        &format!(
            "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n",
            hex::encode(hash_token(&token)),
        ),
    );
    (Served::http(dir, &config).await, token)
}

/// Runs `program` (`sdk1.mjs` or `sdk2.mjs`) with `args`; its JSON report.
async fn sdk(dir: &Path, program: &str, args: &[&str]) -> Result<Value, String> {
    let mut command = tokio::process::Command::new(node());
    command
        .arg(programs(dir).join(program))
        .args(args)
        .env("HOME", dir.join("home"))
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home());
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("{program} failed ({}): {stderr}", out.status));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{program} printed no JSON report ({e}): {stderr}"))
}

/// Runs the SDK `program` against a gateway it starts over stdio; its report.
async fn over_stdio(program: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), "");
    let home = dir.path().join("home");
    sdk(
        dir.path(),
        program,
        &[
            "stdio",
            env!("CARGO_BIN_EXE_hpcgate"),
            config.to_str().unwrap(),
            home.to_str().unwrap(),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the SDK `program` against a gateway over streamable HTTP, as tenant `chem`; its report
/// and the audit log.
async fn over_http(program: &str) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let (served, token) = http_gateway(dir.path()).await;
    let report = sdk(dir.path(), program, &["http", &served.address, &token]).await;
    let (status, stderr) = served.stop().await;
    let report = report.unwrap_or_else(|e| panic!("{e}\ngateway: {stderr}"));
    assert!(status.success(), "{status:?}: {stderr}");
    (report, served::audit_text(&dir.path().join("state/audit")))
}

/// The properties an input schema declares, and those it requires.
fn schema_of(report: &Value, tool: &str) -> (Vec<String>, Vec<String>) {
    let schema = &report["shown"][tool]["inputSchema"];
    assert_eq!(schema["type"], "object", "{tool}: {schema}");
    let properties = schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{tool} declares no properties: {schema}"))
        .keys()
        .cloned()
        .collect();
    let required = schema["required"]
        .as_array()
        .map(|r| r.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    (properties, required)
}

/// What `tests/clients/ts/exercise.mjs` saw, for the instance `instance` and the file content
/// `content`.
fn assert_report(report: &Value, instance: &str, content: &str) {
    assert_eq!(report["server"], "hpcgate", "{report}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for tool in [
        "create_instance",
        "stat_path",
        "write_file",
        "read_file",
        "submit_job",
        "poll_job",
    ] {
        assert!(tools.contains(&tool), "{tool} is not listed: {tools:?}");
    }
    // `instance_id` is optional for create_instance (generated when absent).
    assert!(
        schema_of(report, "create_instance")
            .0
            .contains(&"instance_id".to_owned())
    );
    for (tool, needs) in [
        ("stat_path", &["instance_id", "path"][..]),
        ("write_file", &["instance_id", "path", "content"][..]),
        ("read_file", &["instance_id", "path"][..]),
        ("submit_job", &["instance_id", "command"][..]),
    ] {
        let (properties, required) = schema_of(report, tool);
        for name in needs {
            assert!(
                properties.contains(&(*name).to_owned()) && required.contains(&(*name).to_owned()),
                "{tool} must declare and require `{name}`: {properties:?} {required:?}"
            );
        }
    }
    assert!(
        schema_of(report, "submit_job")
            .0
            .contains(&"timeout".to_owned())
    );

    let refused: Vec<String> = ["created", "written", "stat", "read", "denied", "job"]
        .iter()
        .filter_map(|call| {
            let error = report[call]["clientError"].as_str()?;
            Some(format!("{call}: {error}"))
        })
        .collect();
    assert!(
        refused.is_empty(),
        "the client refused what the gateway answered: {refused:#?}"
    );
    for call in ["created", "written", "stat", "read", "job"] {
        assert_eq!(report[call]["isError"], false, "{call}: {report}");
    }
    assert_eq!(report["stat"]["structured"]["kind"], "file", "{report}");
    assert_eq!(
        report["stat"]["structured"]["size"],
        content.len(),
        "{report}"
    );
    assert_eq!(report["read"]["structured"]["content"], content, "{report}");
    assert!(
        report["read"]["text"].as_str().unwrap().contains(content),
        "the text block carries the content: {report}"
    );

    // A policy's refusal is a tool error naming the policy, not a protocol error.
    assert_eq!(report["denied"]["isError"], true, "{report}");
    assert!(
        report["denied"]["text"]
            .as_str()
            .unwrap()
            .starts_with("denied by policy `paths`"),
        "{report}"
    );

    let job = &report["job"];
    let output = format!("finished {instance}");
    assert_eq!(job["structured"]["job"]["status"], "completed", "{job}");
    assert_eq!(job["structured"]["job"]["stdout_tail"], output, "{job}");
    assert!(
        job["text"].as_str().unwrap().contains(&output),
        "a client that shows only the text sees the job's output: {job}"
    );
    let progress = job["progress"].as_array().unwrap();
    assert!(
        !progress.is_empty(),
        "progress arrives while the job runs: {job}"
    );
    assert!(progress.iter().all(|p| p["total"] == 30.0), "{job}");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

#[tokio::test]
async fn the_typescript_sdk_1_lists_calls_and_runs_a_job_over_stdio() {
    let report = over_stdio("sdk1.mjs").await;
    assert_report(&report, "ts1", "from sdk 1.x over stdio");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_1_lists_calls_and_runs_a_job_over_streamable_http() {
    let (report, audit) = over_http("sdk1.mjs").await;
    assert_report(&report, "ts1", "from sdk 1.x over http");
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
    assert!(audit.contains("\"token:alice\""), "calls are chem's");
}

#[tokio::test]
async fn the_typescript_sdk_2_lists_calls_and_runs_a_job_over_stdio() {
    let report = over_stdio("sdk2.mjs").await;
    assert_report(&report, "ts2", "from sdk 2.x over stdio");
    // The SDK's default legacy handshake (`initialize`).
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_2_lists_calls_and_runs_a_job_over_streamable_http() {
    let (report, audit) = over_http("sdk2.mjs").await;
    assert_report(&report, "ts2", "from sdk 2.x over http");
    // Negotiated by `server/discover`: the 2026-07-28 revision, stateless requests.
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    assert!(audit.contains("\"token:alice\""), "calls are chem's");
}

/// The Inspector CLI's entry point (its `mcp-inspector` bin; run with Node 22, which it needs).
fn inspector_cli() -> PathBuf {
    clients().join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js")
}

/// One `mcp-inspector --cli --format json` run: `request` (the method and its options), then
/// `server` (how to reach the gateway). Its exit status, the JSON it printed on stdout, and its
/// stderr.
async fn inspector(
    home: &Path,
    request: &[&str],
    server: &[String],
) -> (ExitStatus, Value, String) {
    let mut command = tokio::process::Command::new(node());
    command
        .arg(inspector_cli())
        .args(["--cli", "--format", "json"])
        .args(request)
        .args(server)
        // Its catalog and secret store live under HOME.
        .env("HOME", home);
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // A connection failure prints nothing on stdout (its error envelope goes to stderr).
    let printed = if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "the Inspector printed no JSON for {request:?} ({e}): {}\n{stderr}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    };
    (out.status, printed, stderr)
}

/// Lists and calls through the Inspector CLI reaching the gateway by `server`; `instance` is
/// the instance to create and use.
async fn inspect(home: &Path, server: &[String], instance: &str) {
    let ok = |(status, printed, stderr): (ExitStatus, Value, String)| {
        assert!(status.success(), "{status:?}: {printed}\n{stderr}");
        assert_eq!(printed["result"]["isError"], false, "{printed}");
        printed["result"].clone()
    };
    let (status, listed, stderr) = inspector(home, &["--method", "tools/list"], server).await;
    assert!(status.success(), "{status:?}: {stderr}");
    let tools = listed["result"]["tools"].as_array().unwrap();
    for name in ["create_instance", "write_file", "read_file", "submit_job"] {
        let tool = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed: {listed}"));
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
    }

    let call = async |tool: &str, args: &[&str]| {
        let mut request = vec!["--method", "tools/call", "--tool-name", tool, "--tool-arg"];
        request.extend_from_slice(args);
        inspector(home, &request, server).await
    };
    let id = format!("instance_id={instance}");
    let id = id.as_str();
    let created = ok(call("create_instance", &[id]).await);
    assert_eq!(created["structuredContent"]["instance"]["id"], instance);
    ok(call(
        "write_file",
        &[id, "path=hello.txt", "content=hello inspector"],
    )
    .await);
    let stat = ok(call("stat_path", &[id, "path=hello.txt"]).await);
    assert_eq!(stat["structuredContent"]["kind"], "file", "{stat}");
    assert_eq!(stat["structuredContent"]["size"], "hello inspector".len());
    let read = ok(call("read_file", &[id, "path=hello.txt"]).await);
    assert_eq!(read["structuredContent"]["content"], "hello inspector");
    // The Inspector shows a tool's text: the job's output must be in it, not only in the
    // structured content.
    let job = ok(call(
        "submit_job",
        &[id, "command=echo hi from the inspector", "timeout=30"],
    )
    .await);
    assert_eq!(
        job["structuredContent"]["job"]["status"], "completed",
        "{job}"
    );
    let text = job["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("submitted: job `"), "{text}");
    assert!(text.contains("hi from the inspector"), "{text}");

    // A refusal is a tool error (the Inspector's exit code 5) naming the policy.
    let (status, printed, stderr) =
        call("write_file", &[id, "path=.git/config", "content=x"]).await;
    assert_eq!(status.code(), Some(5), "{printed}\n{stderr}");
    assert_eq!(printed["result"]["isError"], true, "{printed}");
    assert!(
        printed["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("denied by policy `paths`"),
        "{printed}"
    );
}

#[tokio::test]
async fn the_inspector_cli_lists_and_calls_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), "");
    // Each run starts its own gateway; the state directory carries the instance between them.
    let server: Vec<String> = [
        "-e".to_owned(),
        format!("HOME={}", dir.path().join("home").display()),
        "-e".to_owned(),
        format!(
            "XDG_CACHE_HOME={}",
            crate::support::shared::cache_home().display()
        ),
        "--".to_owned(),
        env!("CARGO_BIN_EXE_hpcgate").to_owned(),
        "run".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ]
    .into();
    inspect(&dir.path().join("inspector"), &server, "insp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_and_calls_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let (served, token) = http_gateway(dir.path()).await;
    let server = vec![
        "--server-url".to_owned(),
        served.address.clone(),
        "--header".to_owned(),
        format!("Authorization: Bearer {token}"),
    ];
    let home = dir.path().join("inspector");
    inspect(&home, &server, "insp").await;
    // Both protocol eras list the same tools.
    let mut names = Vec::new();
    for era in ["legacy", "modern"] {
        let (status, listed, stderr) = inspector(
            &home,
            &["--protocol-era", era, "--method", "tools/list"],
            &server,
        )
        .await;
        assert!(status.success(), "{era}: {status:?}: {stderr}");
        let mut era_names: Vec<String> = listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        era_names.sort();
        names.push(era_names);
    }
    assert_eq!(names[0], names[1]);
    // Without the token, or with another, the Inspector gets nowhere: a 401 it reports as
    // needing authorization (its exit code 3).
    let wrong = [
        server[0].clone(),
        server[1].clone(),
        "--header".to_owned(),
        "Authorization: Bearer not-a-token".to_owned(),
    ];
    for server in [&server[..2], &wrong[..]] {
        let (status, printed, stderr) = inspector(&home, &["--method", "tools/list"], server).await;
        assert_eq!(status.code(), Some(3), "{printed}\n{stderr}");
        assert!(stderr.contains("auth_required"), "{stderr}");
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    let audit = served::audit_text(&dir.path().join("state/audit"));
    assert!(audit.contains("\"token:alice\""), "calls are chem's");
}
