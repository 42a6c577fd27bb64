//! A proxied server keeps its instance from being archived: by another gateway on the same
//! state directory, which cannot stop it, until it stops; by its own gateway, which stops it
//! and archives. Real `mcp-test-server` in real bwrap sandboxes.

use crate::support::proxy as support;

use crate::support::gateway::open;
use serde_json::json;
use support::{args, caller, discovered, err, ok, test_proxy};

fn call(gw: &hpcgate::gateway::Gateway, tool: &str) -> hpcgate::gateway::CallResult {
    gw.call(
        &caller("chem"),
        tool,
        args(json!({ "instance_id": "run1" })),
    )
}

/// Two gateways on one state directory, a server of the first running in `run1`.
fn serving() -> (
    tempfile::TempDir,
    hpcgate::gateway::Gateway,
    hpcgate::gateway::Gateway,
) {
    let dir = tempfile::tempdir().unwrap();
    // Gateways that run jobs (their supervisor is the `hpcgate` binary, not this test's).
    let serving = open(dir.path(), &test_proxy("t", ""));
    let other = open(dir.path(), &test_proxy("t", ""));
    discovered(&serving);
    ok(call(&serving, "create_instance"));
    ok(call(&serving, "t__whoami"));
    assert_eq!(serving.proxies().running(), 1);
    (dir, serving, other)
}

#[test]
fn another_gateways_server_keeps_the_instance_from_the_archive() {
    let (_dir, serving, other) = serving();
    // The other gateway cannot stop that server, so it must not move the instance under it.
    let refused = err(call(&other, "archive_instance"));
    assert!(
        refused.contains("cannot archive instance `run1`: it is in use"),
        "{refused}"
    );
    let described = ok(call(&other, "describe_instance"));
    assert_eq!(described.structured["instance"]["archived"], false);
    ok(call(&serving, "t__whoami"));

    // Once the server stops, its lease goes with it.
    serving
        .proxies()
        .stop_instance(&caller("chem").tenant, "run1");
    ok(call(&other, "archive_instance"));
}

#[test]
fn a_crashed_server_holds_no_lease() {
    let (_dir, serving, other) = serving();
    let crashed = err(call(&serving, "t__crash"));
    assert!(crashed.contains("exited with code 3"), "{crashed}");
    ok(call(&other, "archive_instance"));
}

/// A server that dies between calls is forgotten within a second or two, and its lease with
/// it, though no call finds it dead and it has no `idle_timeout`.
#[test]
fn a_server_that_died_between_calls_holds_no_lease() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("archive-{}", std::process::id());
    let config = test_proxy("t", &format!("env = {{ TEST_MARK = {mark:?} }}"));
    let serving = open(dir.path(), &config);
    let other = open(dir.path(), &config);
    discovered(&serving);
    ok(call(&serving, "create_instance"));
    ok(call(&serving, "t__whoami"));
    let needle = format!("TEST_MARK={mark}");
    let servers: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &i32| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                (environ.split(|b| *b == 0)).any(|var| var == needle.as_bytes())
            })
        })
        .collect();
    assert!(!servers.is_empty(), "no process has {needle}");
    for pid in servers {
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    // The reaper looks every second, and forgets a dead server a second after its last use.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let archived = call(&other, "archive_instance");
        if !archived.is_error {
            break;
        }
        assert!(archived.text.contains("in use"), "{}", archived.text);
        assert!(
            std::time::Instant::now() < until,
            "the dead server's lease was never released"
        );
    }
}

#[test]
fn the_serving_gateway_stops_its_own_server_and_archives() {
    let (_dir, serving, _other) = serving();
    ok(call(&serving, "archive_instance"));
    assert_eq!(serving.proxies().running(), 0);
    let archived = err(call(&serving, "t__whoami"));
    assert!(archived.contains("archived"), "{archived}");
    assert_eq!(
        serving.proxies().running(),
        0,
        "no server for an archived instance"
    );
}

/// Another process's lease (here `flock(1)`, as a shell's would be) refuses the archive before
/// this gateway stops its own servers, which would be stopped for nothing.
#[test]
fn an_archive_refused_for_another_process_s_lease_leaves_the_servers_running() {
    use std::process::{Command, Stdio};

    let (dir, serving, _other) = serving();
    let before = ok(call(&serving, "t__whoami")).structured["nonce"].clone();
    let in_use = dir.path().join("state/tenants/chem/instances/run1/in-use");
    let mut holder = Command::new("flock")
        .args(["--shared", "--close"])
        .arg(&in_use)
        .arg("cat")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run flock(1)");
    let pid = holder.id().to_string();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|line| line.contains("FLOCK") && line.split_whitespace().nth(4) == Some(&pid))
    {
        assert!(
            std::time::Instant::now() < until,
            "flock(1) never took its lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let refused = err(call(&serving, "archive_instance"));
    assert!(refused.contains("it is in use"), "{refused}");
    let after = ok(call(&serving, "t__whoami")).structured["nonce"].clone();
    assert_eq!(before, after, "the same server, never stopped");

    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    ok(call(&serving, "archive_instance"));
    assert_eq!(serving.proxies().running(), 0);
}

#[test]
fn an_archive_refused_for_a_running_job_leaves_the_servers_running() {
    let (_dir, serving, _other) = serving();
    let before = ok(call(&serving, "t__whoami")).structured["nonce"].clone();
    let job = ok(serving.call(
        &caller("chem"),
        "submit_job",
        args(json!({ "instance_id": "run1", "command": "sleep 30", "timeout": 0 })),
    ));
    assert_eq!(job.structured["job"]["status"], "running", "{}", job.text);
    let refused = err(call(&serving, "archive_instance"));
    assert!(refused.contains("still running"), "{refused}");
    let after = ok(call(&serving, "t__whoami")).structured["nonce"].clone();
    assert_eq!(before, after, "the same server, never stopped");
    let job_id = job.structured["job"]["job_id"].as_str().unwrap().to_owned();
    ok(serving.call(
        &caller("chem"),
        "cancel_job",
        args(json!({ "instance_id": "run1", "job_id": job_id })),
    ));
}
