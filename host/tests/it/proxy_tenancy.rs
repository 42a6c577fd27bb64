//! What a running proxied server announces (`notifications/tools/list_changed`) stays with its
//! own tenant and instance: another tenant never sees or calls the tools it added, the
//! discovery catalogue is untouched, only that tenant is told, and the announcement ends with
//! the server.

use crate::support::proxy as support;

use std::time::{Duration, Instant};

use hpcgate::gateway::Gateway;
use hpcgate::proxy::Discovery;
use serde_json::json;
use support::{args, caller, discovered, err, gateway, names, ok, test_proxy};

fn create(gw: &Gateway, tenant: &str, id: &str) {
    ok(gw.call(
        &caller(tenant),
        "create_instance",
        args(json!({ "instance_id": id })),
    ));
}

fn call(gw: &Gateway, tenant: &str, tool: &str, instance: &str) -> hpcgate::gateway::CallResult {
    gw.call(
        &caller(tenant),
        tool,
        args(json!({ "instance_id": instance })),
    )
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_servers_new_tools_stay_with_its_tenant_and_instance() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    let subscribe = |tenant: &str| {
        let tenant = caller(tenant).tenant;
        gw.proxies()
            .subscribe(Some(&tenant))
            .expect("a proxy is configured")
    };
    let (mut chem_session, mut bio_session) = (subscribe("chem"), subscribe("bio"));
    for (tenant, id) in [("chem", "run1"), ("chem", "run2"), ("bio", "run1")] {
        create(&gw, tenant, id);
    }
    // bio's server runs too, so that it could hear of (or be steered by) chem's change.
    ok(call(&gw, "bio", "t__whoami", "run1"));
    ok(call(&gw, "chem", "t__enable_extra", "run1"));
    wait_until("t__extra never appeared for chem", || {
        names(&gw, "chem").contains(&"t__extra".to_owned())
    });
    assert_eq!(
        ok(call(&gw, "chem", "t__extra", "run1")).text,
        "extra works"
    );

    // Not for the other tenant: neither listed nor callable, even on an instance of the same
    // name.
    assert!(!names(&gw, "bio").contains(&"t__extra".to_owned()));
    let theirs = err(call(&gw, "bio", "t__extra", "run1"));
    assert!(theirs.contains("unknown tool `t__extra`"), "{theirs}");
    assert!(
        !theirs.contains("instance_id"),
        "chem's instances leak: {theirs}"
    );
    // Not for the tenant's other instance, whose server never announced it: the refusal says
    // where it is offered.
    let other = err(call(&gw, "chem", "t__extra", "run2"));
    assert!(
        other.contains("tool `t__extra` is offered only where the `t` server announced it")
            && other.contains("instance_id `run1`;"),
        "{other}"
    );
    // The discovery catalogue (the admin's view, and `doctor`'s) is unchanged.
    match &gw.proxies().status()["t"] {
        Discovery::Ready(tools) => assert!(tools.iter().all(|t| t.exposed_name != "t__extra")),
        other => panic!("{other:?}"),
    }
    // A tool the server added is not trusted as read-only by the policies.
    let extra = gw.proxied_tools(&caller("chem"));
    let extra = extra.iter().find(|t| t.exposed_name == "t__extra").unwrap();
    assert!(!extra.read_only);

    // Only chem's sessions are told.
    assert!(chem_session.take(), "chem's session was not told");
    assert!(!bio_session.take(), "another tenant was told");

    // The announcement ends with its server: archiving the instance stops it.
    ok(call(&gw, "chem", "archive_instance", "run1"));
    assert!(!names(&gw, "chem").contains(&"t__extra".to_owned()));
    assert!(
        chem_session.take(),
        "chem's session was not told of the end"
    );
    assert!(!bio_session.take(), "another tenant was told of the end");
}

#[test]
fn a_server_restarted_after_its_announcement_is_back_on_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    ok(call(&gw, "chem", "t__enable_extra", "run1"));
    wait_until("t__extra never appeared", || {
        names(&gw, "chem").contains(&"t__extra".to_owned())
    });
    // The server crashes; its successor has not announced anything.
    err(call(&gw, "chem", "t__crash", "run1"));
    assert!(!names(&gw, "chem").contains(&"t__extra".to_owned()));
    ok(call(&gw, "chem", "t__whoami", "run1"));
    let gone = err(call(&gw, "chem", "t__extra", "run1"));
    assert!(gone.contains("unknown tool `t__extra`"), "{gone}");
}
