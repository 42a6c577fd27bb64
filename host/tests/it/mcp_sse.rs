//! `hpcgate run --transport sse`, the legacy HTTP+SSE transport: the official Python SDK 1.x
//! (`mcp` from PyPI, installed by `scripts/setup.sh` into `target/python-mcp1`) lists, calls
//! and runs a job over it with a tenant's bearer token; raw HTTP shows the same authentication
//! and `Origin`/`Host` rules as streamable HTTP, and that a session answers only the caller
//! that opened it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hpcgate::auth::bearer::{generate_token, hash_token};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::support::served::{self, INITIALIZE, Served};

fn python1() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let python = target
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target dir")
        .join("python-mcp1/bin/python");
    assert!(
        python.exists(),
        "the Python MCP SDK 1.x is missing at `{}`: run scripts/setup.sh (it installs `mcp==1.30.0` from PyPI there)",
        python.display()
    );
    python
}

struct Gateway {
    served: Served,
    authority: String,
    chem: String,
    bio: String,
}

async fn start(dir: &Path) -> Gateway {
    let (chem, bio) = (generate_token().unwrap(), generate_token().unwrap());
    let config = served::config(
        dir,
        &format!(
            "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n\
             [tenants.bio]\ntokens = [{{ label = \"bob\", sha256 = \"{}\" }}]\n",
            hex::encode(hash_token(&chem)),
            hex::encode(hash_token(&bio)),
        ),
    );
    let served = Served::start(dir, &config, &["--transport", "sse", "--port", "0"]).await;
    let authority = served
        .address
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/sse"))
        .unwrap_or_else(|| panic!("unexpected listening line: {}", served.address))
        .to_owned();
    Gateway {
        served,
        authority,
        chem,
        bio,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_1_lists_calls_and_runs_a_job_over_sse() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/sse_client.py");
    let output = tokio::process::Command::new(python1())
        .arg(script)
        .arg(&gw.served.address)
        .arg(&gw.chem)
        .output()
        .await
        .expect("run the Python client");
    let (status, stderr) = gw.served.stop().await;
    assert!(
        output.status.success(),
        "{}\ngateway: {stderr}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(status.success(), "{status:?}: {stderr}");
    let seen: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the client prints JSON");
    assert_eq!(seen["server"], "hpcgate");
    let tools = seen["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t == "submit_job"), "{seen}");
    assert_eq!(seen["created_error"], false, "{seen}");
    assert_eq!(seen["read_content"], "over sse", "{seen}");
    assert_eq!(seen["denied_error"], true, "{seen}");
    assert_eq!(seen["job_status"], "completed", "{seen}");
    assert!(
        seen["job_text"]
            .as_str()
            .unwrap()
            .contains("stdout_tail: hi"),
        "{seen}"
    );
    let audit = served::audit_text(&dir.path().join("state/audit"));
    assert!(audit.contains("\"token:alice\""), "calls are chem's");
}

/// Opens `GET /sse` with `headers`; the status, and for a 200 the stream (its `endpoint`
/// event read).
async fn open(
    authority: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<(String, BufReader<TcpStream>)>) {
    let mut stream = TcpStream::connect(authority).await.unwrap();
    let mut request = String::from("GET /sse HTTP/1.1\r\nAccept: text/event-stream\r\n");
    if !headers.iter().any(|(n, _)| *n == "Host") {
        request.push_str("Host: localhost\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).await.unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    if status != 200 {
        return (status, None);
    }
    let endpoint = tokio::time::timeout(Duration::from_secs(10), async {
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).await.unwrap();
            if let Some(data) = line.trim_end().strip_prefix("data: ")
                && data.starts_with("/messages")
            {
                return data.to_owned();
            }
        }
    })
    .await
    .expect("the endpoint event comes first");
    (status, Some((endpoint, reader)))
}

async fn post(authority: &str, path: &str, token: &str, body: &str) -> u16 {
    let stream = TcpStream::connect(authority).await.unwrap();
    let (status, _) = served::exchange(
        stream,
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {token}")),
        ],
        body,
    )
    .await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_sessions_are_authenticated_and_answer_only_their_caller() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let a = gw.authority.as_str();
    let chem = format!("Bearer {}", gw.chem);

    // Who may open a stream: the same rules as streamable HTTP.
    assert_eq!(open(a, &[]).await.0, 401, "no token");
    assert_eq!(open(a, &[("Authorization", "Bearer nope")]).await.0, 401);
    assert_eq!(
        open(
            a,
            &[("Authorization", &chem), ("Origin", "https://evil.example")]
        )
        .await
        .0,
        403,
        "a foreign Origin"
    );
    assert_eq!(
        open(a, &[("Authorization", &chem), ("Host", "evil.example")])
            .await
            .0,
        403,
        "a Host this gateway does not listen on (DNS rebinding)"
    );

    let (status, session) = open(a, &[("Authorization", &chem)]).await;
    assert_eq!(status, 200);
    let (endpoint, mut events) = session.unwrap();
    assert!(endpoint.starts_with("/messages?session="), "{endpoint}");
    let id = endpoint.rsplit('=').next().unwrap();
    assert_eq!(id.len(), 32, "128 random bits: {id}");

    // Another tenant's POST to chem's session reads like an unknown session; chem's is taken.
    assert_eq!(post(a, &endpoint, &gw.bio, INITIALIZE).await, 404);
    assert_eq!(
        post(
            a,
            "/messages?session=00000000000000000000000000000000",
            &gw.bio,
            INITIALIZE
        )
        .await,
        404
    );
    assert_eq!(post(a, "/messages", &gw.chem, INITIALIZE).await, 400);
    assert_eq!(post(a, &endpoint, &gw.chem, "{not json").await, 400);
    assert_eq!(post(a, &endpoint, &gw.chem, INITIALIZE).await, 202);
    // The answer comes on chem's stream.
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        let mut line = String::new();
        loop {
            line.clear();
            events.read_line(&mut line).await.unwrap();
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                return data.to_owned();
            }
        }
    })
    .await
    .expect("the initialize answer arrives on the stream");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["id"], 1);
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "hpcgate",
        "{answer}"
    );

    // Closing the stream ends the session: its endpoint is gone.
    drop(events);
    let mut gone = false;
    for _ in 0..100 {
        if post(a, &endpoint, &gw.chem, INITIALIZE).await == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "a closed stream's session is forgotten");
    let (status, stderr) = gw.served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// One tenant may have at most `MAX_SESSIONS_PER_TENANT` sessions open (each holds a server,
/// queues and a stream): the next is refused with 429 and what to do, another tenant still
/// opens one, and a closed session makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_cannot_open_sessions_without_bound() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let a = gw.authority.as_str();
    let (chem, bio) = (format!("Bearer {}", gw.chem), format!("Bearer {}", gw.bio));
    let mut held = Vec::new();
    for _ in 0..hpcgate::sse::MAX_SESSIONS_PER_TENANT {
        let (status, session) = open(a, &[("Authorization", &chem)]).await;
        assert_eq!(status, 200);
        held.push(session.unwrap());
    }
    let (status, _) = open(a, &[("Authorization", &chem)]).await;
    assert_eq!(status, 429, "one session past the bound");
    let (status, other) = open(a, &[("Authorization", &bio)]).await;
    assert_eq!(status, 200, "another tenant is not counted against chem");
    drop(other);
    drop(held.pop());
    // The closed stream is noticed when the server next writes to it (a keep-alive at the
    // latest): chem may open one again once it is forgotten.
    let reopened = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (status, session) = open(a, &[("Authorization", &chem)]).await;
            if status == 200 {
                return session;
            }
            assert_eq!(status, 429);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("a closed session makes room");
    drop((reopened, held));
    let (status, stderr) = gw.served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// A client that sends calls but does not read its stream gets 429 once its answers back up,
/// rather than the gateway keeping every answer in memory; reading them lets it send again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_answers_are_not_read_may_send_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let a = gw.authority.as_str();
    let chem = format!("Bearer {}", gw.chem);
    let (_, session) = open(a, &[("Authorization", &chem)]).await;
    let (endpoint, mut events) = session.unwrap();
    assert_eq!(post(a, &endpoint, &gw.chem, INITIALIZE).await, 202);
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(a, &endpoint, &gw.chem, initialized).await, 202);
    let mut refused = None;
    for id in 2..5000 {
        let list = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
        let status = post(a, &endpoint, &gw.chem, &list).await;
        if status == 429 {
            refused = Some(id);
            break;
        }
        assert_eq!(status, 202, "tools/list {id}");
    }
    let refused = refused.expect("answers nobody reads back up into a refusal");
    // A notification makes no answer: it is taken even now (a cancellation is one).
    let cancelled =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999999}}"#;
    assert_eq!(post(a, &endpoint, &gw.chem, cancelled).await, 202);
    // Reading the stream drains them: the session takes calls again.
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        let mut line = String::new();
        let mut answers = 0;
        while answers < refused - 1 {
            line.clear();
            events.read_line(&mut line).await.unwrap();
            if line.starts_with("data: ") {
                answers += 1;
            }
        }
        answers
    })
    .await
    .expect("every accepted call is answered");
    assert_eq!(drained, refused - 1);
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert_eq!(post(a, &endpoint, &gw.chem, list).await, 202);
    drop(events);
    let (status, stderr) = gw.served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// Answers wait in memory until the client reads them, and a file read's is megabytes: a
/// session that reads nothing has at most 16 requests unanswered, however many it sends at
/// once. Before, the check looked at the answers already queued, so a burst of reads was taken
/// whole and each answer waited in memory.
#[tokio::test]
async fn a_session_that_reads_nothing_holds_few_answers_however_many_it_sends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let a = gw.authority.as_str();
    let chem = format!("Bearer {}", gw.chem);
    let (_, session) = open(a, &[("Authorization", &chem)]).await;
    let (endpoint, mut events) = session.unwrap();
    let big = "x".repeat(1_000_000);
    for body in [
        INITIALIZE.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_instance","arguments":{"instance_id":"big"}}}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"write_file","arguments":{{"instance_id":"big","path":"big.txt","content":"{big}"}}}}}}"#),
    ] {
        assert_eq!(post(a, &endpoint, &gw.chem, &body).await, 202);
    }
    let mut answers = 0;
    let mut line = String::new();
    while answers < 3 {
        line.clear();
        events.read_line(&mut line).await.unwrap();
        if line.starts_with("data: ") {
            assert!(!line.contains("\"isError\":true"), "{line}");
            answers += 1;
        }
    }
    let reads = (100..200).map(|id| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_file","arguments":{{"instance_id":"big","path":"big.txt"}}}}}}"#
        );
        let (endpoint, token) = (endpoint.clone(), gw.chem.clone());
        async move { post(a, &endpoint, &token, &body).await }
    });
    let statuses = futures_util::future::join_all(reads).await;
    let taken = statuses.iter().filter(|&&s| s == 202).count();
    assert!(
        statuses.iter().all(|s| [202, 429].contains(s)),
        "{statuses:?}"
    );
    // 16 unanswered, and what the kernel's socket buffers took of the answers (a few).
    assert!((16..=32).contains(&taken), "{taken} of 100 taken");
    drop(events);
    let (status, stderr) = gw.served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}
