//! The bounds on a real Unix-socket listener served by axum, as the gateway serves its own.

use std::time::Duration;

use axum::Router;
use axum::middleware::from_fn;
use axum::routing::get;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

use super::{Bounded, ConnectionLimits};
use crate::http::{UnixPeer, mark_in_flight};

const IDLE: Duration = Duration::from_millis(300);
/// Far longer than anything here should take: a test that waits this long has failed.
const PATIENCE: Duration = Duration::from_secs(20);

/// Serves `/` (answers `ok`), `/slow` (answers after three idle periods), `/big` (8 MiB) and
/// `/stream` (three pieces two idle periods apart) on a socket in `dir`, at most `max`
/// connections at once.
async fn serve(dir: &std::path::Path, max: usize) -> std::path::PathBuf {
    let limits = ConnectionLimits {
        max,
        per_peer: max,
        idle: IDLE,
    };
    serve_with(dir, limits).await
}

async fn serve_with(dir: &std::path::Path, limits: ConnectionLimits) -> std::path::PathBuf {
    let path = dir.join("s");
    let listener = Bounded::new(UnixListener::bind(&path).unwrap(), limits);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(3 * IDLE).await;
                "slow but whole"
            }),
        )
        .route("/big", get(|| async { vec![b'x'; 8 << 20] }))
        .route(
            "/flood",
            get(|| async {
                let pieces = futures_util::stream::repeat_with(|| {
                    Ok::<_, std::io::Error>(vec![b'x'; 64 << 10])
                });
                axum::body::Body::from_stream(pieces)
            }),
        )
        .route(
            "/stream",
            get(|| async {
                let pieces = futures_util::stream::unfold(0, |n| async move {
                    if n == 3 {
                        return None;
                    }
                    tokio::time::sleep(2 * IDLE).await;
                    Some((Ok::<_, std::io::Error>(format!("piece{n};")), n + 1))
                });
                axum::body::Body::from_stream(pieces)
            }),
        )
        .layer(from_fn(mark_in_flight));
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<UnixPeer>(),
        )
        .await
    });
    path
}

/// Sends `GET path` on `stream` and reads the answer to its end (the request asks to close).
async fn get_on(stream: &mut UnixStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Whether the server has closed `stream` (reads end), waiting at most `PATIENCE`.
async fn closed(stream: &mut UnixStream) -> bool {
    let mut rest = Vec::new();
    matches!(
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest)).await,
        Ok(Ok(_) | Err(_))
    )
}

#[tokio::test]
async fn idle_connections_hold_no_place_for_long_and_the_next_one_waits_for_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = serve(dir.path(), 2).await;
    // Two connections that never send a byte take both places.
    let mut silent = [
        UnixStream::connect(&path).await.unwrap(),
        UnixStream::connect(&path).await.unwrap(),
    ];
    let mut third = UnixStream::connect(&path).await.unwrap();
    let answer = get_on(&mut third, "/").await;
    assert!(answer.ends_with("ok"), "{answer}");
    // The third was answered only once a place was free: a silent one had been closed.
    let mut gone = 0;
    for stream in &mut silent {
        let mut byte = [0; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), stream.read(&mut byte)).await
        {
            gone += 1;
        }
    }
    assert!(
        gone >= 1,
        "the third connection was served beside two silent ones"
    );
    for stream in &mut silent {
        assert!(
            closed(stream).await,
            "a silent connection is closed once idle"
        );
    }
}

#[tokio::test]
async fn a_request_in_flight_keeps_its_connection_however_long_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    let path = serve(dir.path(), 4).await;
    let mut stream = UnixStream::connect(&path).await.unwrap();
    let answer = get_on(&mut stream, "/slow").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("slow but whole"), "{answer}");
}

#[tokio::test]
async fn headers_sent_a_byte_at_a_time_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = serve(dir.path(), 4).await;
    let mut stream = UnixStream::connect(&path).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nX-Slow: ")
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    // A byte every third of the idle time: the reads never pause long, but no request begins.
    let dribble = async {
        loop {
            tokio::time::sleep(IDLE / 3).await;
            if stream.write_all(b"a").await.is_err() {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "still open after {PATIENCE:?}"
            );
        }
    };
    tokio::time::timeout(PATIENCE, dribble)
        .await
        .expect("the dribbling connection is closed");
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_its_idle_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = serve(dir.path(), 4).await;
    let mut stream = UnixStream::connect(&path).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0; 4096];
    let n = stream.read(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).ends_with("ok"));
    assert!(
        closed(&mut stream).await,
        "a kept-alive connection is let go"
    );
}

/// It never reads its 8 MiB; the one place comes free once the writes have stalled a while.
#[tokio::test]
async fn an_answer_nobody_reads_gives_its_place_back() {
    a_reader_gone_gives_its_place_back("/big").await;
}

#[tokio::test]
async fn a_streamed_answer_with_pauses_keeps_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = serve(dir.path(), 4).await;
    let mut stream = UnixStream::connect(&path).await.unwrap();
    let answer = get_on(&mut stream, "/stream").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    for n in 0..3 {
        assert!(answer.contains(&format!("piece{n};")), "{answer}");
    }
}

#[tokio::test]
async fn a_request_head_that_pauses_once_is_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = serve(dir.path(), 4).await;
    let mut stream = UnixStream::connect(&path).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(IDLE + IDLE / 2).await;
    stream
        .write_all(b"Host: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.ends_with("ok"), "{answer}");
}

/// A streamed answer the peer stopped reading does not keep its connection because the
/// request is still in flight: its writes wait, and after the idle time the connection ends.
#[tokio::test]
async fn a_streamed_answer_nobody_reads_gives_its_place_back() {
    a_reader_gone_gives_its_place_back("/flood").await;
}

/// One place; a client asks for `path` and never reads the answer; the next client is served.
async fn a_reader_gone_gives_its_place_back(path: &str) {
    let dir = tempfile::tempdir().unwrap();
    let socket = serve(dir.path(), 1).await;
    let mut reader_gone = UnixStream::connect(&socket).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    reader_gone.write_all(request.as_bytes()).await.unwrap();
    let mut next = UnixStream::connect(&socket).await.unwrap();
    let answer = get_on(&mut next, "/").await;
    assert!(answer.ends_with("ok"), "{answer}");
    drop(reader_gone);
}

/// One peer holds at most `per_peer` of the places: its next connection is closed as it comes,
/// another peer's is served, and one of its own is again once it closed one. On loopback a
/// peer is the uid owning the client's socket, not its address: every local user is
/// 127.0.0.1 (or any 127.x), so by address one of them could lock all the others out.
#[tokio::test]
async fn one_peer_holds_at_most_its_share() {
    use tokio::net::{TcpListener, TcpSocket, TcpStream};
    let limits = ConnectionLimits {
        max: 8,
        per_peer: 2,
        idle: PATIENCE,
    };
    let listener = Bounded::new(TcpListener::bind("127.0.0.1:0").await.unwrap(), limits);
    let address = axum::serve::Listener::local_addr(&listener).unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let from = |ip: [u8; 4]| async move {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((ip, 0).into()).unwrap();
        socket.connect(address).await.unwrap()
    };
    let ask = |mut stream: TcpStream| async move {
        let request = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let _ = stream.write_all(request.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).ends_with("ok")
    };
    let (first, second) = (from([127, 0, 0, 1]).await, from([127, 0, 0, 1]).await);
    // The third of that peer is closed unanswered, while its first two wait, unused; from
    // another loopback address it is the same user, so the same peer.
    assert!(!ask(from([127, 0, 0, 1]).await).await, "a third was served");
    // Where netlink does not answer (no `sock_diag`), a local client counts by its address.
    let netlink = crate::http::tcp_owner::owner_by_netlink(first.local_addr().unwrap(), address);
    if netlink.is_some() {
        assert!(
            !ask(from([127, 0, 0, 2]).await).await,
            "the same user from 127.0.0.2 was served"
        );
    } else {
        use std::io::Write as _;
        let skipped = "skipped: the same user from 127.0.0.2 is refused needs netlink's sock_diag";
        let _ = writeln!(std::io::stderr(), "{skipped}");
    }
    // Another user of this host is another peer (it needs root to be one).
    another_user_is_served(&address.port().to_string()).await;
    assert!(ask(first).await, "the first is served");
    // Its first is closed now: a new one of its own is served once the listener has seen it.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !ask(from([127, 0, 0, 1]).await).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "its place never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(second);
}

/// On a Unix socket a peer is its uid too (`SO_PEERCRED`): one user past its share is closed
/// at once, and another user is still served.
#[tokio::test]
async fn one_user_holds_at_most_its_share_of_a_unix_socket() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let limits = ConnectionLimits {
        max: 8,
        per_peer: 2,
        idle: PATIENCE,
    };
    let socket = serve_with(dir.path(), limits).await;
    let held = [
        UnixStream::connect(&socket).await.unwrap(),
        UnixStream::connect(&socket).await.unwrap(),
    ];
    let mut third = UnixStream::connect(&socket).await.unwrap();
    assert!(
        closed(&mut third).await,
        "a third of the same user's was kept"
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    another_user_is_served(socket.to_str().unwrap()).await;
    drop(held);
}

/// Asserts that user 65534 (another user of this host: it needs root to be one) is answered
/// `ok` at `target`, a loopback port or a Unix socket's path; says it skipped when not root.
async fn another_user_is_served(target: &str) {
    if !rustix::process::geteuid().is_root() {
        use std::io::Write as _;
        let skipped = "skipped: another user's connection is served needs root";
        let _ = writeln!(std::io::stderr(), "{skipped}");
        return;
    }
    let other = tokio::process::Command::new("python3")
        .args(["-c", OTHER_USER_ASKS, target])
        .uid(65534)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&other.stdout);
    assert_eq!(said.trim(), "ok", "another user waits: {other:?}");
}

/// A request to `argv[1]` (a port on 127.0.0.1, or a Unix socket's path) whose answer ends in
/// `ok`: prints `ok`, else what came.
const OTHER_USER_ASKS: &str = r#"
import socket, sys
target = sys.argv[1]
if target.startswith("/"):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(target)
else:
    s = socket.create_connection(("127.0.0.1", int(target)), timeout=10)
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
answer = b""
while True:
    try:
        piece = s.recv(4096)
    except OSError:
        break
    if not piece:
        break
    answer += piece
print("ok" if answer.endswith(b"ok") else repr(answer))
"#;

/// An IPv6 peer is its /64 (one host commonly has all of it), an IPv4-mapped one its IPv4.
#[test]
fn a_peer_is_an_ipv4_address_or_an_ipv6_64() {
    let peer = |text: &str| super::Peer::of_address(text.parse().unwrap());
    assert_eq!(peer("2001:db8:1:2::1"), peer("2001:db8:1:2:ffff::9"));
    assert_ne!(peer("2001:db8:1:2::1"), peer("2001:db8:1:3::1"));
    assert_eq!(peer("::ffff:10.0.0.1"), peer("10.0.0.1"));
    assert_ne!(peer("10.0.0.1"), peer("10.0.0.2"));
}
