//! `GET /metrics`: what the gateway counts, checked against what it did (in process), its
//! exposition checked by `promtool`, and a real Prometheus scraping a real `hpcgate run`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::support::gateway::{args, caller, err, ok, open};
use crate::support::served::{Served, config, exchange};

/// The default chain plus a hostile policy that traps, judging `search_files` only.
fn trap_policy(guests: &Path) -> String {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::create_dir_all(guests).unwrap();
    let built = hpcgate_policy_build::build_guests(
        workspace,
        &["hostile"],
        hpcgate_policy_build::Target::Bare,
        guests,
    );
    format!(
        r#"
[[policies]]
name = "tools"
module = "stock:tool-filter"
[policies.config]
deny = ["host_exec"]

[[policies]]
name = "trapper"
module = {:?}
tools = ["search_files"]
[policies.config]
behaviour = "trap"
"#,
        built[0].component.display().to_string()
    )
}

/// Every sample of the exposition, `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

fn audit_records(dir: &Path) -> usize {
    let mut records = 0;
    for entry in std::fs::read_dir(dir.join("state/audit")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            records += std::fs::read_to_string(&path).unwrap().lines().count();
        }
    }
    records
}

#[test]
fn the_exposition_counts_what_the_gateway_did() {
    let dir = tempfile::tempdir().unwrap();
    let gw = open(dir.path(), &trap_policy(&dir.path().join("guests")));
    let chem = caller("chem");
    ok(gw.call(
        &chem,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    for _ in 0..3 {
        let stat = json!({"instance_id": "run1", "path": "/workspace"});
        ok(gw.call(&chem, "stat_path", args(stat)));
    }
    let denied = err(gw.call(&chem, "host_exec", args(json!({"command": "x"}))));
    assert!(denied.contains("policy `tools`"), "{denied}");
    let faulted = err(gw.call(
        &chem,
        "search_files",
        args(json!({"instance_id": "run1", "pattern": "x"})),
    ));
    assert!(faulted.contains("trapper"), "{faulted}");
    // Invented tool names share one series: a caller cannot grow the exposition.
    for i in 0..300 {
        err(gw.call(&chem, &format!("made_up_{i}"), args(json!({}))));
    }
    let job = ok(gw.call(
        &chem,
        "submit_job",
        args(json!({"instance_id": "run1", "command": "sleep 30", "timeout": 0})),
    ));
    let job_id = job["job"]["job_id"].as_str().unwrap().to_owned();

    let text = gw.metrics_text();
    let s = samples(&text);
    let value = |series: &str| {
        *s.get(series)
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(
        value(r#"hpcgate_tool_calls_total{tool="stat_path",decision="allow"}"#),
        3.0
    );
    assert_eq!(
        value(r#"hpcgate_tool_calls_total{tool="host_exec",decision="deny"}"#),
        1.0
    );
    assert_eq!(
        value(r#"hpcgate_tool_calls_total{tool="search_files",decision="deny"}"#),
        1.0
    );
    assert_eq!(
        value(r#"hpcgate_tool_calls_total{tool="unknown",decision="none"}"#),
        300.0
    );
    assert_eq!(
        value(r#"hpcgate_tool_call_duration_seconds_count{tool="stat_path"}"#),
        3.0
    );
    assert_eq!(
        value(r#"hpcgate_policy_faults_total{policy="trapper",fault="trap"}"#),
        1.0
    );
    // The tool filter judged every call that reached the chain: create, 3 stats, host_exec,
    // search_files, submit_job.
    assert_eq!(
        value(r#"hpcgate_policy_evaluation_seconds_count{policy="tools"}"#),
        7.0
    );
    assert_eq!(value(r#"hpcgate_jobs{state="running",mode="local"}"#), 1.0);
    assert_eq!(value("hpcgate_sandbox_start_seconds_count"), 1.0);
    // The audit batches hold exactly the records in the log.
    let batched = value("hpcgate_audit_batch_records_sum");
    assert_eq!(batched as usize, audit_records(dir.path()), "{text}");
    assert!(value("hpcgate_audit_append_seconds_count") > 0.0);
    assert!(!text.contains("made_up"), "{text}");
    for private in ["run1", job_id.as_str(), "chem"] {
        assert!(!text.contains(private), "`{private}` in a label:\n{text}");
    }

    ok(gw.call(
        &chem,
        "cancel_job",
        args(json!({"instance_id": "run1", "job_id": job_id})),
    ));
    let s = samples(&gw.metrics_text());
    assert!(
        !s.keys().any(|k| k.starts_with("hpcgate_jobs{")),
        "a cancelled job is not counted as unfinished: {s:?}"
    );
}

/// `[metrics] enabled = false`: nothing counted, and the endpoint says it is off.
#[tokio::test]
async fn metrics_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "\n[metrics]\nenabled = false\n");
    let served = Served::http(dir.path(), &config).await;
    let tcp = TcpStream::connect(served.authority()).await.unwrap();
    let (status, body) = exchange(tcp, "GET", "/metrics", &[], "").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("enabled = false"), "{body}");
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

fn promtool() -> &'static str {
    for candidate in ["/usr/bin/promtool", "/usr/local/bin/promtool"] {
        if Path::new(candidate).exists() {
            return candidate;
        }
    }
    panic!("promtool is missing: run scripts/setup.sh (it installs Debian's `prometheus`)")
}

/// A free loopback port (bound, then released for the child that takes it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn get(authority: &str, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(authority).await.unwrap();
    exchange(tcp, "GET", path, &[], "").await
}

/// A real Prometheus scrapes `hpcgate run` over HTTP while an MCP client works, and its query
/// API returns the gateway's series with the values the client caused; `promtool` accepts the
/// exposition. The stdio gateway's `--metrics-listen` serves the same.
#[tokio::test]
async fn prometheus_scrapes_a_running_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "");
    let served = Served::http(dir.path(), &config).await;
    let authority = served.authority();
    let url = format!("http://{authority}/mcp");
    let client = rmcp::ServiceExt::serve(
        (),
        rmcp::transport::StreamableHttpClientTransport::from_uri(url),
    )
    .await
    .unwrap();
    let call = |name: &'static str, arguments: Value| {
        let Value::Object(arguments) = arguments else {
            unreachable!()
        };
        rmcp::model::CallToolRequestParams::new(name).with_arguments(arguments)
    };
    client
        .call_tool(call("create_instance", json!({"instance_id": "run1"})))
        .await
        .unwrap();
    for _ in 0..5 {
        let stat = call(
            "stat_path",
            json!({"instance_id": "run1", "path": "/workspace"}),
        );
        client.call_tool(stat).await.unwrap();
    }
    client.list_all_tools().await.unwrap();

    let (status, text) = get(&authority, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let check = std::process::Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        check.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let prom_port = free_port();
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let prom_config = prom_dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: hpcgate\n    static_configs:\n      - targets: ['{authority}']\n"
        ),
    )
    .unwrap();
    let mut prometheus = tokio::process::Command::new("prometheus")
        .arg(format!("--config.file={}", prom_config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus is missing: run scripts/setup.sh (it installs Debian's `prometheus`)");
    let prom = format!("127.0.0.1:{prom_port}");
    let query = "/api/v1/query?query=hpcgate_tool_calls_total%7Btool%3D%22stat_path%22%7D";
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        assert!(Instant::now() < deadline, "Prometheus never had the series");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Ok(tcp) = TcpStream::connect(&prom).await else {
            continue;
        };
        let (status, body) = exchange(tcp, "GET", query, &[], "").await;
        if status != 200 {
            continue;
        }
        let body: Value = serde_json::from_str(&body).unwrap();
        let result = body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !result.is_empty() {
            break result;
        }
    };
    assert_eq!(result.len(), 1, "{result:?}");
    assert_eq!(result[0]["metric"]["decision"], "allow");
    assert_eq!(result[0]["metric"]["job"], "hpcgate");
    assert_eq!(result[0]["value"][1], "5", "{result:?}");
    let (_, up) = get(&prom, "/api/v1/query?query=up%7Bjob%3D%22hpcgate%22%7D").await;
    assert!(up.contains("\"1\""), "{up}");
    prometheus.kill().await.unwrap();
    client.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// `hpcgate run --metrics-listen` beside stdio: the same exposition on its own port, and a
/// non-loopback address without a token refused at start.
#[tokio::test]
async fn a_stdio_gateway_serves_metrics_on_its_own_listener() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "");
    let mut child =
        crate::support::served::command(dir.path(), &config, &["--metrics-listen", "127.0.0.1:0"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let authority = loop {
        let line = lines.next_line().await.unwrap().expect("no metrics line");
        if let Some(rest) = line.strip_prefix("hpcgate: metrics at http://") {
            break rest.trim_end_matches("/metrics").to_owned();
        }
    };
    let (status, text) = get(&authority, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("hpcgate_build_info{version="), "{text}");
    // A page whose name was rebound to 127.0.0.1 names itself as `Host`: refused.
    let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
    let rebound = exchange(tcp, "GET", "/metrics", &[("Host", "evil.example")], "").await;
    assert_eq!(rebound.0, 403, "{}", rebound.1);
    // Held open until the gateway has exited: `wait` would close it, and an MCP client that
    // leaves before the handshake is an error.
    let _stdin = child.stdin.take();
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().await.unwrap();
    let mut rest = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push_str(&line);
        rest.push('\n');
    }
    assert!(status.success(), "{status:?}: {rest}");

    let refused =
        crate::support::served::command(dir.path(), &config, &["--metrics-listen", "0.0.0.0:0"])
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("token_sha256"),
        "{said}"
    );
}

/// `contrib/grafana/hpcgate-dashboard.json`: every query is valid PromQL (`promtool check
/// rules`) and names only series the gateway exports.
#[test]
fn the_grafana_dashboard_queries_exported_series() {
    let dir = tempfile::tempdir().unwrap();
    let families: Vec<String> = open(dir.path(), "")
        .metrics_text()
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| rest.split(' ').next().unwrap().to_owned())
        .collect();
    let dashboard =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/grafana/hpcgate-dashboard.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard).unwrap()).unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("hpcgate_"))
            {
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .filter(|base| families.iter().any(|f| f == base))
                    .unwrap_or(name);
                assert!(
                    families.iter().any(|f| f == family),
                    "{}: `{name}` is not exported ({families:?})",
                    panel["title"]
                );
            }
            let expr = expr.replace("$__rate_interval", "5m");
            rules.push_str(&format!(
                "      - record: dashboard:q{queries}\n        expr: {}\n",
                serde_json::to_string(&expr).unwrap()
            ));
            queries += 1;
        }
    }
    assert!(queries >= 10, "{queries}");
    let file = dir.path().join("rules.yml");
    std::fs::write(&file, rules).unwrap();
    let checked = std::process::Command::new(promtool())
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}
