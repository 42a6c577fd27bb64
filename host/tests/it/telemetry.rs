//! OpenTelemetry traces: the real `hpcgate run` over HTTP, driven by the rmcp client with W3C
//! trace context in `_meta`, exports to an OTLP/HTTP receiver that decodes every body with the
//! official generated protobuf classes (`tests/python/otlp_receiver.py`, PyPI
//! `opentelemetry-proto`); and a collector that is down costs spans, never calls.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;

use crate::support::gateway::{args, caller, ok, open};
use crate::support::served::{Served, config, exchange};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn python() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let python = target.parent().unwrap().join("python-mcp/bin/python");
    assert!(
        python.exists(),
        "the test venv is missing at `{}`: run scripts/setup.sh",
        python.display()
    );
    python
}

/// The receiver, listening; its spans land in `out`.
async fn receiver(out: &Path) -> (tokio::process::Child, u16) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/otlp_receiver.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .arg(out)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .next_line()
        .await
        .unwrap()
        .expect("the receiver printed its port");
    let port = line.strip_prefix("listening ").unwrap().parse().unwrap();
    (child, port)
}

/// The spans received so far, waiting until `until` holds (10 s at most).
async fn spans_until(out: &Path, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        // Complete lines only: the receiver may be midway through appending the last one.
        let spans: Vec<Value> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for span in &spans {
            assert!(
                span.get("decode_error").is_none(),
                "undecodable body: {span}"
            );
        }
        if until(&spans) || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn call(name: &'static str, arguments: Value, traceparent: Option<&str>) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    let mut params = CallToolRequestParams::new(name).with_arguments(arguments);
    if let Some(parent) = traceparent {
        let mut meta = Map::new();
        meta.insert("traceparent".into(), json!(parent));
        meta.insert("tracestate".into(), json!("hpc=1"));
        params.meta = Some(RequestMetaObject::from(meta));
    }
    params
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no span `{name}` in {spans:#?}"))
}

#[tokio::test]
async fn calls_continue_the_callers_trace_at_a_real_otlp_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_receiver, port) = receiver(&out).await;
    let config = config(
        dir.path(),
        &format!(
            r#"
[telemetry]
otlp_endpoint = "http://127.0.0.1:{port}"
service_name = "hpcgate-test"
export_interval_ms = 50
headers = {{ "x-scope-orgid" = "hpc" }}

[[policies]]
name = "tools"
module = "stock:tool-filter"
[policies.config]
deny = ["host_exec"]
"#
        ),
    );
    let served = Served::http(dir.path(), &config).await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(
            served.address.as_str(),
        ))
        .await
        .unwrap();
    let sampled = format!("00-{TRACE}-{PARENT}-01");
    let unsampled = format!("00-{TRACE}-{PARENT}-00");
    let create = json!({"instance_id": "t1"});
    client
        .call_tool(call("create_instance", create, Some(&sampled)))
        .await
        .unwrap();
    let denied = json!({"command": "true"});
    let result = client
        .call_tool(call("host_exec", denied, Some(&sampled)))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    // Not sampled by the caller: no span. Then a call of a trace of its own, which also
    // shows the unsampled one was not merely late (one queue, sent in order).
    let stat = json!({"instance_id": "t1", "path": "/workspace"});
    client
        .call_tool(call("stat_path", stat.clone(), Some(&unsampled)))
        .await
        .unwrap();
    client
        .call_tool(call("list_instances", json!({}), None))
        .await
        .unwrap();
    let spans = spans_until(&out, |s| {
        s.iter().any(|s| s["name"] == "tools/call list_instances")
    })
    .await;
    assert_eq!(spans.len(), 3, "{spans:#?}");

    let created = named(&spans, "tools/call create_instance");
    assert_eq!(created["trace_id"], TRACE);
    assert_eq!(created["parent_span_id"], PARENT);
    assert_ne!(created["span_id"], PARENT);
    assert_eq!(created["trace_state"], "hpc=1");
    assert_eq!(created["kind"], 2, "SPAN_KIND_SERVER");
    assert!(created["end"].as_u64() >= created["start"].as_u64());
    let s = |v: &str| json!({ "string_value": v });
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "create_instance"),
        ("gen_ai.operation.name", "execute_tool"),
        ("hpcgate.tenant", "default"),
        ("hpcgate.via", "mcp"),
        ("hpcgate.instance", "t1"),
        ("hpcgate.decision", "allow"),
    ] {
        assert_eq!(attribute(created, key), &s(value), "{key}: {created:#}");
    }
    assert_eq!(created["status"]["code"], 0, "unset");
    assert!(attribute(created, "error.type").is_null());
    let events = created["events"].as_array().unwrap();
    let judged: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                &e["attributes"]["hpcgate.policy.name"],
            )
        })
        .collect();
    assert!(
        judged.contains(&("hpcgate.policy.decision", &s("tools"))),
        "{events:#?}"
    );
    assert!(events.iter().all(|e| {
        e["attributes"]["hpcgate.policy.duration_us"]["double_value"]
            .as_f64()
            .is_some_and(|us| us > 0.0)
    }));
    // These attributes and no others: arguments and results are never exported.
    let keys: Vec<_> = created["attributes"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let expected = [
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "hpcgate.decision",
        "hpcgate.instance",
        "hpcgate.principal",
        "hpcgate.tenant",
        "hpcgate.via",
        "mcp.method.name",
    ];
    assert_eq!(keys, expected);

    let refused = named(&spans, "tools/call host_exec");
    assert_eq!(refused["trace_id"], TRACE);
    assert_eq!(refused["status"]["code"], 2, "STATUS_CODE_ERROR");
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("denied by policy `tools`"), "{message}");
    assert_eq!(attribute(refused, "error.type"), &s("tool_error"));
    assert_eq!(attribute(refused, "hpcgate.decision"), &s("deny"));
    assert_eq!(attribute(refused, "hpcgate.decision.policy"), &s("tools"));
    let verdict = &refused["events"][0]["attributes"];
    assert_eq!(verdict["hpcgate.policy.verdict"], s("deny"));
    assert!(
        verdict["hpcgate.policy.reason"]["string_value"].is_string(),
        "{verdict}"
    );

    let own = named(&spans, "tools/call list_instances");
    assert_ne!(own["trace_id"], TRACE);
    assert_eq!(own["trace_id"].as_str().unwrap().len(), 32);
    assert_eq!(own["parent_span_id"], "");
    let resource = &own["resource"];
    assert_eq!(resource["service.name"], s("hpcgate-test"));
    assert_eq!(resource["service.version"], s(env!("CARGO_PKG_VERSION")));
    assert_eq!(own["scope"]["name"], "hpcgate");
    assert_eq!(own["headers"]["x-scope-orgid"], "hpc");

    // The receiver has written the spans before the gateway has its answer and counts them.
    let exported = "hpcgate_trace_spans_total{outcome=\"exported\"} 3";
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let tcp = TcpStream::connect(served.authority()).await.unwrap();
        let (status, text) = exchange(tcp, "GET", "/metrics", &[], "").await;
        assert_eq!(status, 200, "{text}");
        if text.contains(exported) || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(text.contains(exported), "{text}");
    assert!(
        text.contains("hpcgate_trace_spans_total{outcome=\"dropped\"} 0"),
        "{text}"
    );
    client.cancel().await.unwrap();
    served.stop().await;
}

#[test]
fn a_collector_that_is_down_costs_spans_not_calls() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\nexport_interval_ms = 20\n"
    );
    let gw = open(dir.path(), &toml);
    let chem = caller("default");
    for i in 0..5 {
        let id = format!("d{i}");
        ok(gw.call(&chem, "create_instance", args(json!({"instance_id": id}))));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let dropped = loop {
        let text = gw.metrics_text();
        let dropped = text
            .lines()
            .find_map(|l| l.strip_prefix("hpcgate_trace_spans_total{outcome=\"dropped\"} "))
            .map(|n| n.parse::<u64>().unwrap())
            .unwrap();
        if dropped == 5 || Instant::now() > deadline {
            break dropped;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(dropped, 5);
    ok(gw.call(&chem, "list_instances", args(json!({}))));
}

#[test]
fn telemetry_settings_are_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "otlp_endpoint = \"https://otel.example:4318\"",
            "speaks no TLS",
        ),
        ("otlp_endpoint = \"127.0.0.1:4318\"", "http://"),
        (
            "otlp_endpoint = \"http://c:4318\"\nexport_interval_ms = 0",
            "between 10 and 60000",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\nheaders = { \"bad header\" = \"x\" }",
            "not a valid HTTP header",
        ),
        ("headers = { a = \"b\" }", "otlp_endpoint` is not"),
    ];
    for (body, expected) in cases {
        let error =
            crate::support::gateway::settings(dir.path(), &format!("[telemetry]\n{body}\n"))
                .err()
                .unwrap_or_else(|| panic!("{body} accepted"));
        let message = format!("{error:#}");
        assert!(message.contains(expected), "{body}: {message}");
        assert!(message.contains("telemetry."), "names the key: {message}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_proxied_server_gets_the_gateways_span_as_its_parent() {
    use crate::support::proxy::{discovered, gateway, raw, test_proxy};
    use hpcgate::gateway::Request;
    use hpcgate::policy::Via;
    use hpcgate::telemetry::TraceParent;

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_receiver, port) = receiver(&out).await;
    let toml = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\nexport_interval_ms = 20\n{}",
        test_proxy("t", "")
    );
    let spans = tokio::task::spawn_blocking(move || {
        let gw = gateway(dir.path(), &toml);
        discovered(&gw);
        let me = caller("default");
        ok(gw.call(&me, "create_instance", args(json!({"instance_id": "p1"}))));
        let parent = TraceParent::parse(&format!("00-{TRACE}-{PARENT}-01"), None);
        let echo = args(json!({"instance_id": "p1", "message": "hi"}));
        let request = Request::new(me, Via::Mcp, "t__echo", echo).in_trace(parent);
        let result = crate::support::proxy::ok(gw.dispatch(&gw.snapshot(), request));
        (raw(&result), dir)
    })
    .await
    .unwrap();
    let (result, dir) = spans;
    let spans = spans_until(&dir.path().join("spans.jsonl"), |s| {
        s.iter().any(|s| s["name"] == "tools/call t__echo")
    })
    .await;
    let echo = named(&spans, "tools/call t__echo");
    assert_eq!(echo["parent_span_id"], PARENT);
    assert_eq!(
        attribute(echo, "hpcgate.proxied_server"),
        &json!({"string_value": "t"})
    );
    let expected = format!("00-{TRACE}-{}-01", echo["span_id"].as_str().unwrap());
    assert_eq!(result["_meta"]["seen_traceparent"], expected, "{result:#}");
}
