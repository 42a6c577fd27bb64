//! A proxied server keeps its instance from being archived: by another gateway on the same
//! state directory, which cannot stop it, until it stops; by its own gateway, which stops it
//! first. Real `mcp-test-server` in real bwrap sandboxes.

use crate::support::proxy as support;

use std::time::Duration;

use serde_json::json;
use support::{args, caller, discovered, err, gateway, ok, test_proxy};

fn call(gw: &hpcgate::gateway::Gateway, tool: &str) -> hpcgate::gateway::CallResult {
    gw.call(
        &caller("chem"),
        tool,
        args(json!({ "instance_id": "run1" })),
    )
}

#[test]
fn another_gateways_server_keeps_the_instance_from_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_proxy("t", "idle_timeout = 1");
    let serving = gateway(dir.path(), &config);
    let other = gateway(dir.path(), &config);
    discovered(&serving);
    ok(call(&serving, "create_instance"));
    ok(call(&serving, "t__whoami"));
    assert_eq!(serving.proxies().running(), 1);

    // The other gateway cannot stop that server, so it must not move the instance under it.
    let refused = err(call(&other, "archive_instance"));
    assert!(
        refused.contains("cannot archive instance `run1`: it is in use"),
        "{refused}"
    );
    let described = ok(call(&other, "describe_instance"));
    assert_eq!(described.structured["instance"]["archived"], false);
    ok(call(&serving, "t__whoami"));

    // Once the server stops (idle here), its lease goes with it.
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while serving.proxies().running() > 0 {
        assert!(
            std::time::Instant::now() < until,
            "the idle server was never stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(call(&other, "archive_instance"));
}

#[test]
fn the_serving_gateway_stops_its_own_server_and_archives() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    ok(call(&gw, "create_instance"));
    ok(call(&gw, "t__whoami"));
    assert_eq!(gw.proxies().running(), 1);
    ok(call(&gw, "archive_instance"));
    assert_eq!(gw.proxies().running(), 0);
    let archived = err(call(&gw, "t__whoami"));
    assert!(archived.contains("archived"), "{archived}");
    assert_eq!(
        gw.proxies().running(),
        0,
        "no server for an archived instance"
    );
}
