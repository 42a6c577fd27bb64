//! Who may reach the gateway over HTTP, through the real binary: the `Host` a request names
//! (DNS rebinding), `[http] allowed_origins`, the Unix socket's peer uid and tenant, and the
//! owner of a TCP client's socket on a single-tenant gateway.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::net::{TcpStream, UnixStream};

use crate::mcp_http::{POLICIES, assert_audited, exercise};
use crate::support::served as support;
use support::{INITIALIZE, MCP_POST, Served, config, exchange};

/// DNS rebinding: a web page whose name now resolves to 127.0.0.1 sends its own name as `Host`
/// (and no `Origin` on a same-origin `GET`). Every route but `/healthz` refuses a `Host` that
/// names no address the gateway listens on, not only MCP: WebDAV would otherwise hand it the
/// instance's files, and `/metrics` (which trusts loopback peers) the gateway's figures.
#[tokio::test]
async fn a_rebound_host_name_is_refused_on_every_route_but_healthz() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "[dav]\nenabled = true\n";
    let config = config(dir.path(), &format!("{POLICIES}{extra}"));
    let served = Served::http(dir.path(), &config).await;
    let authority = served.authority();
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(
            served.address.as_str(),
        ))
        .await
        .unwrap();
    for (tool, arguments) in [
        ("create_instance", json!({ "instance_id": "run1" })),
        (
            "write_file",
            json!({ "instance_id": "run1", "path": "notes.txt", "content": "private-42" }),
        ),
    ] {
        let Value::Object(arguments) = arguments else {
            unreachable!()
        };
        let result = client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    }
    client.cancel().await.unwrap();

    let port = authority.rsplit(':').next().unwrap();
    let file = "/dav/instances/run1/workspace/notes.txt";
    let get = |host: String, path: &'static str| {
        let authority = authority.clone();
        async move {
            let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
            exchange(tcp, "GET", path, &[("Host", host.as_str())], "").await
        }
    };
    // The control: the gateway's own names.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".to_owned(),
    ] {
        let (status, body) = get(host.clone(), file).await;
        assert_eq!((status, body.as_str()), (200, "private-42"), "{host}");
    }
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_owned(),
        format!("localhost.evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        String::new(),
    ] {
        for path in [
            file,
            "/metrics",
            "/dav/",
            "/.well-known/oauth-protected-resource/mcp",
        ] {
            let (status, body) = get(host.clone(), path).await;
            assert_eq!(status, 403, "Host {host:?} {path}: {body}");
            assert!(!body.contains("private-42"), "{body}");
        }
        let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
        let headers = [MCP_POST[0], MCP_POST[1], ("Host", host.as_str())];
        let (status, body) = exchange(tcp, "POST", "/mcp", &headers, INITIALIZE).await;
        assert_eq!(status, 403, "Host {host:?} /mcp: {body}");
        let (status, body) = get(host.clone(), "/healthz").await;
        assert_eq!(status, 200, "Host {host:?} /healthz: {body}");
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// `[http] allowed_hosts` names the gateway's other names (a listener on every interface is
/// reached by the machine's name or address): those pass, in any case, with or without a port;
/// any other name is still refused.
#[tokio::test]
async fn the_allowed_host_names_pass_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let extra =
        "\n[http]\nallowed_hosts = [\"gw.example.org\", \"192.0.2.7\", \"[2001:db8::7]\"]\n";
    let config = config(dir.path(), &format!("{POLICIES}{extra}"));
    let served = Served::http(dir.path(), &config).await;
    let authority = served.authority();
    let port = authority.rsplit(':').next().unwrap();
    for (host, allowed) in [
        (format!("gw.example.org:{port}"), true),
        ("GW.Example.ORG".to_owned(), true),
        (format!("192.0.2.7:{port}"), true),
        (format!("[2001:db8::7]:{port}"), true),
        (format!("evil.example:{port}"), false),
        (format!("gw.example.org.evil.example:{port}"), false),
        (format!("192.0.2.8:{port}"), false),
    ] {
        let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
        let headers = [MCP_POST[0], MCP_POST[1], ("Host", host.as_str())];
        let (status, body) = exchange(tcp, "POST", "/mcp", &headers, INITIALIZE).await;
        let expected = if allowed { 200 } else { 403 };
        assert_eq!(status, expected, "Host {host:?}: {body}");
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// `[http] allowed_origins` lets a listed web origin through (the authenticator decides, no
/// outer check refuses it first); other foreign origins stay refused, loopback ones pass.
#[tokio::test]
async fn an_allowed_origin_reaches_mcp_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "\n[http]\nallowed_origins = [\"https://notebook.example.org\"]\n";
    let config = config(dir.path(), &format!("{POLICIES}{extra}"));
    let served = Served::http(dir.path(), &config).await;
    let authority = served.authority();
    let tcp = || TcpStream::connect(authority.as_str());
    let post = |origin: &'static str| {
        let headers = [MCP_POST[0], MCP_POST[1], ("Origin", origin)];
        async move { exchange(tcp().await.unwrap(), "POST", "/mcp", &headers, INITIALIZE).await }
    };
    for (origin, expected) in [
        ("https://notebook.example.org", 200),
        ("https://NOTEBOOK.example.org/", 200),
        ("https://notebook.example.org:8443", 403),
        ("http://notebook.example.org", 403),
        ("https://evil.example", 403),
        ("null", 403),
        ("http://localhost:1234", 200),
    ] {
        let (status, body) = post(origin).await;
        assert_eq!(status, expected, "{origin}: {body}");
        if expected == 200 {
            assert!(body.contains("\"hpcgate\""), "{origin}: {body}");
        } else {
            assert!(body.contains("allowed_origins"), "{origin}: {body}");
        }
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

#[tokio::test]
async fn a_unix_socket_peer_is_its_uid_and_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let uid = rustix::process::geteuid().as_raw();
    let config = config(
        dir.path(),
        &format!("{POLICIES}\n[tenants.chem]\nunix_uids = [{uid}]\n"),
    );
    let socket = dir.path().join("gw.sock");
    let served = Served::start(dir.path(), &config, &["--uds", socket.to_str().unwrap()]).await;
    assert!(served.address.starts_with("unix:"), "{}", served.address);
    let mode = std::fs::symlink_metadata(&socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");

    let client = crate::support::served::unix_client(&socket).await;
    exercise(&client).await;
    client.cancel().await.unwrap();

    let uds = || UnixStream::connect(&socket);
    let (status, body) = exchange(uds().await.unwrap(), "GET", "/healthz", &[], "").await;
    assert_eq!(status, 200, "{body}");
    let foreign = [MCP_POST[0], MCP_POST[1], ("Origin", "https://evil.example")];
    let (status, body) = exchange(uds().await.unwrap(), "POST", "/mcp", &foreign, INITIALIZE).await;
    assert_eq!(status, 403, "{body}");

    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(!socket.exists(), "the socket is removed on shutdown");
    assert_audited(dir.path(), &format!("\"uid:{uid}\""));
    assert_audited(dir.path(), "\"chem\"");
}

#[tokio::test]
async fn a_unix_socket_peer_in_no_tenant_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = rustix::process::geteuid().as_raw() + 1;
    let config = config(
        dir.path(),
        &format!("[tenants.bio]\nunix_uids = [{other}]\n"),
    );
    let socket = dir.path().join("gw.sock");
    let served = Served::start(dir.path(), &config, &["--uds", socket.to_str().unwrap()]).await;
    let mode = std::fs::symlink_metadata(&socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o666,
        "another uid is mapped: socket mode {mode:o}"
    );
    let stream = UnixStream::connect(&socket).await.unwrap();
    let (status, body) = exchange(stream, "POST", "/mcp", &MCP_POST, INITIALIZE).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("may not use this gateway"), "{body}");
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// A local user other than the gateway's owner reaches its loopback port as easily as the
/// owner: a single-tenant gateway serves over TCP only its own uid and root, by the owner of the
/// client's socket. Needs root (to run `curl` as uid 65534); elsewhere it says so and passes.
#[tokio::test]
async fn a_single_tenant_gateway_over_tcp_refuses_other_local_users() {
    if !crate::support::root_else_skip("running a client as another uid") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "policies = []\n");
    let served = Served::http(dir.path(), &config).await;
    let instances = dir.path().join("state/tenants/default/instances");

    let Some((status, body)) = curl_create(&served.address, "stranger", Some(65534)).await else {
        let _ = writeln!(std::io::stderr(), "skipped: no `curl` on PATH");
        return;
    };
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("uid 65534 may not use this gateway") && body.contains("`[tenants]`"),
        "{body}"
    );
    assert!(!instances.join("stranger").exists());

    let (status, body) = curl_create(&served.address, "owner", None).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("created instance `owner`"), "{body}");
    assert!(instances.join("owner").is_dir());

    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}

/// `create_instance` of `id` POSTed by `curl` to `url`, as `uid` (with no supplementary
/// groups) or as ourselves: the status and the body; `None` without `curl`.
async fn curl_create(url: &str, id: &str, uid: Option<u32>) -> Option<(u16, String)> {
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "create_instance", "arguments": {"instance_id": id}}});
    let mut command = tokio::process::Command::new("curl");
    command
        .args([
            "-q",
            "-sS",
            "--max-time",
            "30",
            "-X",
            "POST",
            "-w",
            "\n%{http_code}",
        ])
        .args(
            MCP_POST
                .iter()
                .flat_map(|(name, value)| ["-H".to_owned(), format!("{name}: {value}")]),
        )
        .args(["--data", &call.to_string(), url])
        .current_dir("/");
    if let Some(uid) = uid {
        // std clears the supplementary groups when root sets a uid.
        command.uid(uid).gid(uid);
    }
    let output = match command.output().await {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        output => output.unwrap(),
    };
    let stdout = String::from_utf8(output.stdout).unwrap();
    let (body, status) = stdout.rsplit_once('\n').unwrap();
    let status = status
        .parse()
        .unwrap_or_else(|_| panic!("curl: {stdout} {}", String::from_utf8_lossy(&output.stderr)));
    Some((status, body.to_owned()))
}

/// Connections that send nothing cannot keep the gateway from others for long, nor run it out
/// of file descriptors: with `[http] max_connections = 2` and `idle_timeout_s = 1`, two
/// silent connections are closed after their idle second, and a real call made beside them
/// waits for a place and is then served. Before, every connection was accepted and kept for
/// as long as its peer liked, before any request was read or authenticated.
#[tokio::test]
async fn silent_connections_are_let_go_and_a_call_gets_their_place() {
    use tokio::io::AsyncReadExt as _;
    let dir = tempfile::tempdir().unwrap();
    let extra = "[http]\nmax_connections = 2\nidle_timeout_s = 1\n";
    let config = config(dir.path(), &format!("{POLICIES}{extra}"));
    let served = Served::http(dir.path(), &config).await;
    let authority = served.authority();
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(TcpStream::connect(authority.as_str()).await.unwrap());
    }
    let client = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        ().serve(StreamableHttpClientTransport::from_uri(
            served.address.as_str(),
        )),
    )
    .await
    .expect("the client got a place within 30 s")
    .unwrap();
    let tools = client.list_tools(None).await.unwrap();
    assert!(tools.tools.iter().any(|t| t.name == "list_instances"));
    client.cancel().await.unwrap();
    for mut tcp in silent {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tcp.read_to_end(&mut rest),
        )
        .await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "a silent connection is closed: {read:?} {rest:?}"
        );
    }
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}
