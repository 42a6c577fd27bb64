//! The result cap holds while a proxied server's reply is being read: a server that streams
//! half a gigabyte is cut off after about the cap, the gateway's memory never holds the reply,
//! the call says which limit and which config key, and the next call gets a fresh server.
//! It measures the process's peak memory, so it runs alone in a process of its own: the test
//! re-executes this binary for the `#[ignore]`d test that does the work.
//!
//! A listing of tools is capped as a whole too: pages each under the cap that add up to more
//! are refused, and the server's last good list stays.

use crate::support::proxy as support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{args, caller, discovered, err, gateway, names, ok, test_proxy};

use crate::support::reexec;

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Resets `VmHWM` to the current resident size (Linux ≥ 4.0).
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// Runs [`cut_off_at_the_cap_in_a_process_of_its_own`] alone in a child process: other tests
/// of this binary would add to the peak memory it measures.
#[test]
fn a_flooding_server_is_cut_off_at_the_cap_while_reading() {
    let output = reexec("proxy_limits::cut_off_at_the_cap_in_a_process_of_its_own")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{}:\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[ignore = "measures the process's peak memory: run alone by a_flooding_server_is_cut_off_at_the_cap_while_reading"]
fn cut_off_at_the_cap_in_a_process_of_its_own() {
    const MB: u64 = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(
        dir.path(),
        &test_proxy("t", "max_result_bytes = 1000000\ncall_timeout = 60"),
    );
    discovered(&gw);
    let alice = caller("chem");
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    let first = ok(gw.call(&alice, "t__whoami", args(json!({"instance_id": "run1"}))));

    reset_peak_rss();
    let before = peak_rss();
    let started = Instant::now();
    let cut = err(gw.call(
        &alice,
        "t__flood",
        args(json!({"instance_id": "run1", "bytes": 512 * MB})),
    ));
    let grew = peak_rss().saturating_sub(before);
    assert!(
        cut.contains("over the limit of 1000000 bytes")
            && cut.contains("cut off")
            && cut.contains("`proxied_mcps.t.max_result_bytes`"),
        "{cut}"
    );
    assert!(
        grew < 64 * MB,
        "the gateway's peak memory grew by {} MiB reading a capped reply",
        grew / MB
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The flooding server was stopped; the next call gets a fresh one.
    let second = ok(gw.call(&alice, "t__whoami", args(json!({"instance_id": "run1"}))));
    assert_ne!(first.structured["nonce"], second.structured["nonce"]);
    assert_eq!(gw.proxies().starts(), 2);
    // A reply under the cap plus margin but over the cap is still refused, exactly.
    let over = err(gw.call(
        &alice,
        "t__huge",
        args(json!({"instance_id": "run1", "bytes": 1_010_000})),
    ));
    assert!(
        over.contains("over the limit of 1000000") && over.contains("max_result_bytes"),
        "{over}"
    );
}

/// A server whose listing, after `list_changed`, is 8 pages each under the cap (one tool
/// described in 300 kB) but 2.4 MB in all: the listing is refused, its tools are never taken,
/// and the server's last good list (with `t__extra`) stays.
#[test]
fn a_listing_over_the_cap_in_all_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", "max_result_bytes = 1000000"));
    discovered(&gw);
    let alice = caller("chem");
    let run1 = || args(json!({"instance_id": "run1"}));
    ok(gw.call(&alice, "create_instance", run1()));
    ok(gw.call(&alice, "t__enable_extra", run1()));
    let until = Instant::now() + Duration::from_secs(10);
    while !names(&gw, "chem").contains(&"t__extra".to_owned()) {
        assert!(Instant::now() < until, "t__extra never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let lists = || {
        let whoami = ok(gw.call(&alice, "t__whoami", run1()));
        whoami.structured["lists"].as_u64().expect("a count")
    };
    let before = lists();
    let fat = args(json!({"instance_id": "run1", "bytes": 300_000, "pages": 8}));
    ok(gw.call(&alice, "t__fat_listing", fat));
    // The gateway reads pages until the listing is over the cap (4 pages), then stops.
    let until = Instant::now() + Duration::from_secs(20);
    let mut seen = lists();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = lists();
        if now == seen && now >= before + 4 {
            break;
        }
        assert!(Instant::now() < until, "the listing never ended: {now}");
        seen = now;
    }
    // Exactly the pages up to the cap: a slow stretch cannot pass for the end of the listing.
    assert_eq!(lists(), before + 4, "pages listed");
    std::thread::sleep(Duration::from_millis(200));
    let listed = names(&gw, "chem");
    assert!(
        listed.iter().all(|n| !n.starts_with("t__fat_page_")),
        "the fat listing was taken: {listed:?}"
    );
    assert!(listed.contains(&"t__extra".to_owned()), "{listed:?}");
    ok(gw.call(&alice, "t__extra", run1()));
}
