//! WebDAV's limits through the real `hpcgate run`, driven by `curl` and raw HTTP: a tenant's
//! share of the door's places and the minimum body rate, room under a byte quota held by
//! uploads in flight, and listings of many instances (all of them, or a 507 where cut).

use crate::support::dav::{curl, find_workspace, setup};
use crate::support::gateway as in_process;
use crate::support::served::Served;

use hpcgate::auth::bearer::{generate_token, hash_token};
use serde_json::json;

/// The real gateway serving `config` of `dir` over HTTP, with the runtime it runs on (drop the
/// gateway first).
fn serve(dir: &std::path::Path, config: &std::path::Path) -> (tokio::runtime::Runtime, Served) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(dir, config));
    (runtime, served)
}

/// One tenant's slow uploads neither stall another tenant's WebDAV nor hold its own places for
/// good: chem opens 12 PUTs that promise 30 kB (all within its quota) and send one byte, bio
/// still gets its file while all of them wait, and each of chem's is given up once it falls
/// behind the door's minimum body rate, leaving no file behind: the 8 that hold chem's places
/// first, then the 4 that waited for them (whose rate counts from when their body is read).
/// Before, the door's 32 places were one pool with no rate: bio waited for as long as chem
/// held its connections.
#[test]
fn slow_uploads_hold_only_their_tenants_places_and_are_given_up() {
    use std::io::{Read as _, Write as _};
    let s = setup();
    let bio_file = find_workspace(&s.dir.path().join("state"), "bio", "run1").join("mine.txt");
    std::fs::write(&bio_file, "bio's own").unwrap();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let authority = served.authority();
    let mut slow: Vec<_> = (0..12)
        .map(|i| {
            let mut tcp = std::net::TcpStream::connect(&authority).unwrap();
            let head = format!(
                "PUT /dav/instances/run1/workspace/slow{i} HTTP/1.1\r\nHost: localhost\r\n\
                 Authorization: Bearer {}\r\nContent-Length: 30000\r\n\r\nx",
                s.chem
            );
            tcp.write_all(head.as_bytes()).unwrap();
            tcp
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(1));

    let scratch = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {}", s.bio);
    let url = format!("http://{authority}/dav/instances/run1/workspace/mine.txt");
    let got = curl(scratch.path(), &["-H", &auth, &url]);
    assert_eq!((got.status, got.body.as_str()), (200, "bio's own"));
    for tcp in &mut slow {
        tcp.set_nonblocking(true).unwrap();
        let waiting = tcp.read(&mut [0; 1]).map_err(|e| e.kind());
        assert_eq!(
            waiting,
            Err(std::io::ErrorKind::WouldBlock),
            "chem's PUT is still open"
        );
        tcp.set_nonblocking(false).unwrap();
    }
    // The minimum rate gives each trickle up after its grace.
    for tcp in &mut slow {
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        let status = answer.split(' ').nth(1).unwrap_or("none");
        assert_eq!(
            status, "408",
            "a trickling PUT is refused once behind: {answer:?}"
        );
        assert!(answer.contains("(timed out)"), "{answer}");
    }
    let left: Vec<_> = (std::fs::read_dir(&s.workspace).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("slow") || name.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "given-up uploads left {left:?}");
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
}

/// A body promised and never sent holds its connection only until it falls behind the door's
/// minimum rate, whatever reads it whole: an MCP message, a PROPFIND's or a LOCK's XML. Before,
/// such requests were in flight for good, and one token could fill the listener.
#[test]
fn bodies_promised_and_never_sent_are_given_up() {
    use std::io::{Read as _, Write as _};
    let s = setup();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let authority = served.authority();
    let heads = [
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream",
        "PROPFIND /dav/instances/run1/workspace/ HTTP/1.1\r\nDepth: 1",
        "LOCK /dav/instances/run1/workspace/a.txt HTTP/1.1",
    ];
    let mut held: Vec<_> = heads
        .iter()
        .map(|head| {
            let mut tcp = std::net::TcpStream::connect(&authority).unwrap();
            let head = format!(
                "{head}\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nContent-Length: 100000\r\n\r\n",
                s.chem
            );
            tcp.write_all(head.as_bytes()).unwrap();
            tcp
        })
        .collect();
    for (tcp, head) in held.iter_mut().zip(heads) {
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        let status = answer.split(' ').nth(1).unwrap_or("none");
        assert_eq!(status, "408", "{head}: {answer:?}");
        assert!(answer.contains("slower than"), "{head}: {answer}");
    }
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
}

/// PROPFIND Depth 1 of `/dav/instances/` lists every instance past `list_instances`' page of
/// 500, up to `[files] max_list_entries`; past that, a 507 for the collection says it is cut.
#[test]
fn a_propfind_of_the_instances_lists_them_all_or_says_it_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let token = generate_token().unwrap();
    let config = format!(
        "[dav]\nenabled = true\n[tenants.chem]\ntokens = [{{ label = \"a\", sha256 = \"{}\" }}]\n",
        hex::encode(hash_token(&token))
    );
    {
        let gw = in_process::open(dir.path(), &config);
        for i in 0..505 {
            in_process::ok(gw.call(
                &in_process::caller("chem"),
                "create_instance",
                in_process::args(json!({ "instance_id": format!("run{i:03}") })),
            ));
        }
    }
    let file = dir.path().join("gateway.toml");
    let sc = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {token}");
    for (cap, listed, cut) in [(None, 505, false), (Some(502), 502, true)] {
        if let Some(cap) = cap {
            let mut text = std::fs::read_to_string(&file).unwrap();
            text.push_str(&format!("\n[files]\nmax_list_entries = {cap}\n"));
            std::fs::write(&file, text).unwrap();
        }
        let (runtime, served) = serve(dir.path(), &file);
        let url = format!("http://{}/dav/instances/", served.authority());
        let reply = curl(
            sc.path(),
            &["-H", &auth, "-X", "PROPFIND", "-H", "Depth: 1", &url],
        );
        let (status, stderr) = runtime.block_on(served.stop());
        assert!(status.success(), "{status:?}: {stderr}");
        assert_eq!(reply.status, 207, "{}", reply.body);
        let instances = reply.body.matches("/dav/instances/run").count();
        assert_eq!(instances, listed, "cap {cap:?}");
        assert_eq!(
            reply.body.contains("507 Insufficient Storage"),
            cut,
            "cap {cap:?}"
        );
    }
}

/// Uploads in flight together cannot pass a space quota: while chem's first PUT of 700 KiB is
/// still arriving, the room it announced is held, so a second of 700 KiB into the same 1 MiB
/// workspace is refused at once (507) and a third small one fits; the first then lands whole.
/// Before, each upload saw the room as it was when it started and both landed (1.4 MiB).
#[test]
fn uploads_in_flight_together_cannot_pass_the_quota() {
    use std::io::{Read as _, Write as _};
    let s = setup();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let authority = served.authority();
    let size = 700 * 1024;
    let mut first = std::net::TcpStream::connect(&authority).unwrap();
    let head = format!(
        "PUT /dav/instances/run1/workspace/first.bin HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n",
        s.chem
    );
    first.write_all(head.as_bytes()).unwrap();
    first.write_all(&vec![b'a'; 100 * 1024]).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));

    let scratch = tempfile::tempdir().unwrap();
    let body = scratch.path().join("second.bin");
    std::fs::write(&body, vec![b'b'; size]).unwrap();
    let auth = format!("Authorization: Bearer {}", s.chem);
    let ws = format!("http://{authority}/dav/instances/run1/workspace");
    let second = curl(
        scratch.path(),
        &[
            "-H",
            &auth,
            "-T",
            body.to_str().unwrap(),
            &format!("{ws}/second.bin"),
        ],
    );
    assert_eq!(second.status, 507, "{}", second.body);
    assert!(
        second.body.contains("writes in flight hold"),
        "{}",
        second.body
    );
    let small = scratch.path().join("small.txt");
    std::fs::write(&small, "fits").unwrap();
    let third = curl(
        scratch.path(),
        &[
            "-H",
            &auth,
            "-T",
            small.to_str().unwrap(),
            &format!("{ws}/small.txt"),
        ],
    );
    assert_eq!(third.status, 201, "{}", third.body);

    first.write_all(&vec![b'a'; size - 100 * 1024]).unwrap();
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(
        std::fs::metadata(s.workspace.join("first.bin"))
            .unwrap()
            .len(),
        size as u64
    );
    assert!(!s.workspace.join("second.bin").exists());

    // A chunked upload that says its size (as Finder does, in X-Expected-Entity-Length) holds
    // that much, not all the room left, and is cut at it: one that sends more is refused.
    let chunked = |name: &str, said: usize, sent: usize| {
        let mut put = std::net::TcpStream::connect(&authority).unwrap();
        let head = format!(
            "PUT /dav/instances/run1/workspace/{name} HTTP/1.1\r\nHost: localhost\r\n\
             Authorization: Bearer {}\r\nTransfer-Encoding: chunked\r\n\
             X-Expected-Entity-Length: {said}\r\nConnection: close\r\n\r\n{sent:x}\r\n{}\r\n0\r\n\r\n",
            s.chem,
            "c".repeat(sent)
        );
        put.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        put.read_to_string(&mut answer).unwrap();
        answer
    };
    let honest = chunked("honest.bin", 64, 64);
    assert!(honest.starts_with("HTTP/1.1 201"), "{honest}");
    let more = chunked("more.bin", 10, 64);
    assert!(more.starts_with("HTTP/1.1 413"), "{more}");
    assert!(more.contains("bytes its request announced"), "{more}");
    assert!(!s.workspace.join("more.bin").exists());
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
}

/// An overwriting MOVE of a folder is three calls (set the destination aside, move, then put it
/// back or delete it). A rate limit that lets the first through and refuses the move must not
/// leave the destination under its hidden name: the answer is 429 and both folders are as they
/// were. Before, the put-back was refused by the same limit.
#[test]
fn a_rate_limit_halfway_through_an_overwrite_leaves_the_destination_in_place() {
    let limit = "\n[tenants.chem.rate_limits]\n\"move_path\" = { per_minute = 1 }\n";
    let (s, moved) = folder_over_folder(limit, "MOVE");
    assert_eq!(moved.status, 429, "{}", moved.body);
    assert!(moved.headers.contains("retry-after:"), "{}", moved.headers);
    let read = |folder: &str| std::fs::read_to_string(s.workspace.join(folder).join("f")).unwrap();
    assert_eq!((read("new"), read("old")), ("new".into(), "old".into()));
    assert_no_hidden_destination(&s);
}

/// With `extra` added to the configuration, a `method` (COPY or MOVE) of the folder `new` onto
/// the folder `old` (each holding `f`, whose content is its folder's name).
fn folder_over_folder(
    extra: &str,
    method: &str,
) -> (crate::support::dav::Setup, crate::support::dav::Reply) {
    let s = setup();
    let file = s.dir.path().join("gateway.toml");
    let mut config = std::fs::read_to_string(&file).unwrap();
    config.push_str(extra);
    std::fs::write(&file, config).unwrap();
    for folder in ["new", "old"] {
        std::fs::create_dir(s.workspace.join(folder)).unwrap();
        std::fs::write(s.workspace.join(folder).join("f"), folder).unwrap();
    }
    let (_runtime, served) = serve(s.dir.path(), &file);
    let ws = format!("http://{}/dav/instances/run1/workspace", served.authority());
    let scratch = tempfile::tempdir().unwrap();
    let reply = curl(
        scratch.path(),
        &[
            "-H",
            &format!("Authorization: Bearer {}", s.chem),
            "-X",
            method,
            "-H",
            &format!("Destination: {ws}/old"),
            &format!("{ws}/new"),
        ],
    );
    drop(served);
    (s, reply)
}

/// No name of the workspace is one an overwrite hides a destination under.
fn assert_no_hidden_destination(s: &crate::support::dav::Setup) {
    let names: Vec<_> = std::fs::read_dir(&s.workspace)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".hpcgate-replaced-")),
        "{names:?}"
    );
}

/// A client that goes away in the middle of an overwriting COPY of a folder (set the
/// destination aside, copy, delete what was set aside) does not leave the destination under its
/// hidden name: the request finishes on its own, and the destination ends up replaced.
#[test]
fn a_client_gone_halfway_through_an_overwrite_leaves_no_hidden_destination() {
    overwrite_without_its_client(false);
}

/// The same, with the gateway told to stop as soon as the client has gone: it finishes the
/// request before it exits (a stopping runtime cancelled it).
#[test]
fn a_gateway_stopped_halfway_through_an_overwrite_finishes_it_first() {
    overwrite_without_its_client(true);
}

fn overwrite_without_its_client(then_stop: bool) {
    use std::io::Write as _;
    let s = setup();
    for i in 0..1500 {
        let dir = s.workspace.join(format!("big/d{}", i % 30));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), "x").unwrap();
    }
    std::fs::create_dir(s.workspace.join("old")).unwrap();
    std::fs::write(s.workspace.join("old/kept"), "old").unwrap();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let ws = format!("http://{}/dav/instances/run1/workspace", served.authority());
    let mut tcp = std::net::TcpStream::connect(served.authority()).unwrap();
    let head = format!(
        "COPY /dav/instances/run1/workspace/big HTTP/1.1\r\nHost: {}\r\n\
         Authorization: Bearer {}\r\nDestination: {ws}/old\r\nContent-Length: 0\r\n\r\n",
        served.authority(),
        s.chem
    );
    tcp.write_all(head.as_bytes()).unwrap();
    let hidden = || {
        std::fs::read_dir(&s.workspace)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .any(|n| n.starts_with(".hpcgate-replaced-"))
    };
    // Gone as soon as the destination is set aside (the copy then takes 1,500 `fsync`s).
    let wait = |until: &dyn Fn() -> bool, secs| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !until() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        until()
    };
    assert!(wait(&hidden, 30), "the destination was never set aside");
    drop(tcp);
    if then_stop {
        // Still copying (1,500 files, each `fsync`ed), or this would not test the stop.
        assert!(
            hidden(),
            "the copy ended before the gateway was told to stop"
        );
        let (status, stderr) = runtime.block_on(served.stop());
        assert!(status.success(), "{stderr}");
        assert!(!hidden(), "the gateway stopped before finishing: {stderr}");
    }
    assert!(
        wait(&|| !hidden(), 60),
        "the destination was left under its hidden name"
    );
    let copied = std::fs::read_dir(s.workspace.join("old")).unwrap().count();
    assert_eq!(copied, 30, "the copy finished without its client");
}

/// Replacing a collection ends by deleting what it set aside: under policies that refuse
/// `delete_path`, an overwriting COPY of a folder is refused before anything moves (403), not
/// carried out and then answered 403 with the old folder left under a hidden name.
#[test]
fn an_overwrite_the_policies_would_not_finish_is_refused_first() {
    let no_deletes = "\n[[policies]]\nname = \"no-deletes\"\nmodule = \"stock:tool-filter\"\n\
                      [policies.config]\ndeny = [\"delete_path\"]\n";
    let (s, copied) = folder_over_folder(no_deletes, "COPY");
    assert_eq!(copied.status, 403, "{}", copied.body);
    let kept = std::fs::read_to_string(s.workspace.join("old/f")).unwrap();
    assert_eq!(kept, "old");
    assert_no_hidden_destination(&s);
}

/// A request whose client hangs up keeps its tenant's place until its call has ended: chem
/// sends eight DELETEs of large trees (its share of the door's 32 places) and hangs up once
/// every removal has begun; chem's next GET then waits for a place, so by its answer one tree
/// at least is gone. Before, the place was given back with the request's future while the
/// removal went on, and a tenant could keep any number of calls running by hanging up.
#[test]
fn a_client_that_hangs_up_leaves_its_call_holding_its_place() {
    use std::io::Write as _;
    const TREES: usize = 8;
    const FILES: usize = 20_000;
    let s = setup();
    let tree = |t: usize| s.workspace.join(format!("tree{t}"));
    for t in 0..TREES {
        std::fs::create_dir(tree(t)).unwrap();
        for f in 0..FILES {
            std::fs::File::create(tree(t).join(f.to_string())).unwrap();
        }
    }
    std::fs::write(s.workspace.join("after.txt"), "served").unwrap();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let authority = served.authority();
    let hanging: Vec<_> = (0..TREES)
        .map(|t| {
            let mut tcp = std::net::TcpStream::connect(&authority).unwrap();
            let head = format!(
                "DELETE /dav/instances/run1/workspace/tree{t}/ HTTP/1.1\r\nHost: localhost\r\n\
                 Authorization: Bearer {}\r\n\r\n",
                s.chem
            );
            tcp.write_all(head.as_bytes()).unwrap();
            tcp
        })
        .collect();
    let begun = |t: usize| std::fs::read_dir(tree(t)).map_or(true, |d| d.count() < FILES);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(0..TREES).all(begun) {
        assert!(
            std::time::Instant::now() < deadline,
            "the removals did not begin"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(hanging);

    let scratch = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {}", s.chem);
    let url = format!("http://{authority}/dav/instances/run1/workspace/after.txt");
    let got = curl(scratch.path(), &["--max-time", "60", "-H", &auth, &url]);
    assert_eq!((got.status, got.body.as_str()), (200, "served"));
    let gone = (0..TREES).filter(|&t| !tree(t).exists()).count();
    assert!(
        gone >= 1,
        "chem's GET was served while its eight hung-up removals all still ran"
    );
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
}

/// A policy that narrows a read (here a Rego rule gives `capped.txt` reads 5 bytes) narrows a
/// GET too. The door used to send the whole file whatever the policy rewrote. A GET asks for
/// the whole file, or one range: only what lies inside the allowed bytes is sent, never a part
/// dressed as the whole.
#[test]
fn a_policy_that_narrows_reads_narrows_gets() {
    let s = setup();
    std::fs::write(s.workspace.join("capped.txt"), "0123456789abcdefghij").unwrap();
    std::fs::write(s.workspace.join("open.txt"), "0123456789abcdefghij").unwrap();
    std::fs::write(
        s.dir.path().join("narrow.rego"),
        r#"package hpcgate
import rego.v1
rewrite := object.union(input.arguments, {"length": 5}) if {
	input.tool == "read_file"
	endswith(input.arguments.path, "capped.txt")
}
"#,
    )
    .unwrap();
    let config = s.dir.path().join("gateway.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[[policies]]\nname = \"narrow\"\nmodule = \"stock:rego\"\n[policies.config]\npolicy_file = {:?}\n",
        s.dir.path().join("narrow.rego").display().to_string()
    ));
    std::fs::write(&config, text).unwrap();
    let (runtime, served) = serve(s.dir.path(), &config);
    let scratch = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {}", s.chem);
    let base = format!("http://{}/dav/instances/run1/workspace", served.authority());
    let get = |file: &str, extra: &[&str]| {
        let url = format!("{base}/{file}");
        let mut args = vec!["-H", auth.as_str(), url.as_str()];
        args.extend_from_slice(extra);
        curl(scratch.path(), &args)
    };
    let whole = get("capped.txt", &[]);
    assert_eq!(whole.status, 403, "{}", whole.body);
    assert!(whole.body.contains("bytes 0-4"), "{}", whole.body);
    let part = get("capped.txt", &["-H", "Range: bytes=1-3"]);
    assert_eq!((part.status, part.body.as_str()), (206, "123"));
    let past = get("capped.txt", &["-H", "Range: bytes=3-9"]);
    assert_eq!(past.status, 403, "{}", past.body);
    let open = get("open.txt", &[]);
    assert_eq!(
        (open.status, open.body.as_str()),
        (200, "0123456789abcdefghij")
    );
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{stderr}");
}

/// An upload in flight counts once against the quota: by the room it holds, not by that room
/// and again by the part of its file already written. chem's quota is 1 MiB: a PUT of 600 kB
/// that has sent 400 kB leaves room for a PUT of 300 kB (counted twice, 1.3 MB would not fit).
#[test]
fn an_upload_in_flight_counts_once_against_the_quota() {
    use std::io::{Read as _, Write as _};
    let s = setup();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let authority = served.authority();
    let mut first = std::net::TcpStream::connect(&authority).unwrap();
    let head = format!(
        "PUT /dav/instances/run1/workspace/first.bin HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\nContent-Length: 600000\r\nConnection: close\r\n\r\n",
        s.chem
    );
    first.write_all(head.as_bytes()).unwrap();
    first.write_all(&[b'a'; 400_000]).unwrap();
    // Until its temporary file holds what was sent.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let written = || {
        std::fs::read_dir(&s.workspace)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".hpcgate-tmp-"))
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    while written() < 400_000 {
        assert!(std::time::Instant::now() < deadline, "the upload stalled");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let scratch = tempfile::tempdir().unwrap();
    std::fs::write(scratch.path().join("second.bin"), [b'b'; 300_000]).unwrap();
    let auth = format!("Authorization: Bearer {}", s.chem);
    let url = format!("http://{authority}/dav/instances/run1/workspace/second.bin");
    let data = format!("@{}", scratch.path().join("second.bin").display());
    let second = curl(
        scratch.path(),
        &["-X", "PUT", "-H", &auth, "--data-binary", &data, &url],
    );
    assert_eq!(second.status, 201, "{}", second.body);

    first.write_all(&[b'a'; 200_000]).unwrap();
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{stderr}");
}

/// An upload of unknown size (chunked) past `[dav] max_upload_bytes` is too large (413), also
/// where a quota leaves more room than that: the cap, not the quota, stopped it (it said 507).
#[test]
fn a_chunked_upload_past_the_cap_is_too_large_under_a_roomy_quota() {
    let dir = tempfile::tempdir().unwrap();
    let token = generate_token().unwrap();
    let config = format!(
        "[dav]\nenabled = true\nmax_upload_bytes = 1000\n[tenants.chem]\ntokens = [{{ label = \"a\", sha256 = \"{}\" }}]\nquotas = {{ max_workspace_bytes = 1048576 }}\n",
        hex::encode(hash_token(&token))
    );
    {
        let gw = in_process::open(dir.path(), &config);
        in_process::ok(gw.call(
            &in_process::caller("chem"),
            "create_instance",
            in_process::args(json!({ "instance_id": "run1" })),
        ));
    }
    let sc = tempfile::tempdir().unwrap();
    let upload = sc.path().join("upload.bin");
    std::fs::write(&upload, vec![b'x'; 5000]).unwrap();
    let (runtime, served) = serve(dir.path(), &dir.path().join("gateway.toml"));
    let url = format!(
        "http://{}/dav/instances/run1/workspace/big.bin",
        served.authority()
    );
    let auth = format!("Authorization: Bearer {token}");
    let upload = upload.display().to_string();
    let chunked = [
        "-H",
        &auth,
        "-H",
        "Transfer-Encoding: chunked",
        "-T",
        &upload,
        &url,
    ];
    let reply = curl(sc.path(), &chunked);
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
    assert_eq!(reply.status, 413, "{}", reply.body);
    let workspace = find_workspace(&dir.path().join("state"), "chem", "run1");
    assert!(!workspace.join("big.bin").exists());
}

/// An UNLOCK whose record cannot be written (the audit disk is full) leaves the lock where it
/// was (503): another user is still kept out, and the lock is given back, with its record, once
/// the disk has room. The log never says a lock was given back that still blocks writes.
#[test]
fn an_unlock_that_cannot_be_recorded_leaves_the_lock() {
    use crate::support::disk::{Tmpfs, fill};
    if !crate::support::root_else_skip("mounting a tmpfs") {
        return;
    }
    let s = setup();
    // The audit directory alone on a small tmpfs, with its files.
    let audit = s.dir.path().join("state/audit");
    let kept = s.dir.path().join("audit-kept");
    std::fs::rename(&audit, &kept).unwrap();
    let _mount = Tmpfs::mount(&audit, "2m");
    for entry in std::fs::read_dir(&kept).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), audit.join(entry.file_name())).unwrap();
    }
    // The lock to give back is on a long name, so its record is longer than a refresh of the
    // lock on a short one: once a refresh no longer fits on the disk, the UNLOCK cannot.
    let long = format!("{}.txt", "l".repeat(200));
    std::fs::write(s.workspace.join(&long), "held").unwrap();
    std::fs::write(s.workspace.join("s.txt"), "short").unwrap();
    let (runtime, served) = serve(s.dir.path(), &s.dir.path().join("gateway.toml"));
    let sc = tempfile::tempdir().unwrap();
    let ws = format!("http://{}/dav/instances/run1/workspace", served.authority());
    let (file, short) = (format!("{ws}/{long}"), format!("{ws}/s.txt"));
    let (alice, carol) = (
        format!("Authorization: Bearer {}", s.chem),
        format!("Authorization: Bearer {}", s.carol),
    );
    let as_user = |auth: &str, args: &[&str]| curl(sc.path(), &[&["-H", auth], args].concat());
    let lock_body = r#"<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"#;
    let lock = |url: &str| {
        let locked = as_user(&alice, &["-X", "LOCK", "--data-binary", lock_body, url]);
        assert_eq!(locked.status, 200, "{}", locked.body);
        (locked.headers.lines())
            .find_map(|l| l.strip_prefix("lock-token: "))
            .expect("a Lock-Token header")
            .trim()
            .to_owned()
    };
    let (token, short_token) = (lock(&file), lock(&short));
    let unlock = format!("Lock-Token: {token}");

    let filler = fill(&audit);
    // The segment's last page may still take a few records; refresh until none fits.
    let refresh = format!("If: ({short_token})");
    let mut tries = 0;
    while as_user(&alice, &["-X", "LOCK", "-H", &refresh, &short]).status == 200 {
        tries += 1;
        assert!(
            tries < 200,
            "the full audit disk never refused a lock's record"
        );
    }
    let refused = as_user(&alice, &["-X", "UNLOCK", "-H", &unlock, &file]);
    assert_eq!(refused.status, 503, "{}", refused.body);
    std::fs::remove_file(filler).unwrap();

    let upload = sc.path().join("new.txt");
    std::fs::write(&upload, "carol's").unwrap();
    let put = as_user(&carol, &["-T", upload.to_str().unwrap(), &file]);
    assert_eq!(put.status, 423, "the lock still holds: {}", put.body);
    let given_back = as_user(&alice, &["-X", "UNLOCK", "-H", &unlock, &file]);
    assert_eq!(given_back.status, 204, "{}", given_back.body);
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
    let unlocked = crate::support::served::audit_text(&audit)
        .lines()
        .filter(|l| l.contains(r#""event":"dav.unlocked""#))
        .count();
    assert_eq!(unlocked, 1, "one UNLOCK took effect, one record");
}
