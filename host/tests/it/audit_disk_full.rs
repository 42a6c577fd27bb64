//! The audit disk fills up while the gateway serves: the call whose record cannot be written is
//! refused, nothing half-written stays in the log, and once space returns the gateway serves
//! again and the chain continues without a gap. The state directory is a real 1 MiB tmpfs
//! (needs root to mount).

use hpcgate::audit::verify;
use serde_json::json;

use crate::support::disk::{Tmpfs, fill};
use crate::support::gateway::{args, caller, err, ok, open};

#[test]
fn a_full_audit_disk_refuses_the_call_and_serving_resumes_when_space_returns() {
    if !crate::support::root_else_skip("mounting a tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let _mount = Tmpfs::mount(&state, "1m");
    let gw = open(dir.path(), "");
    let alice = caller("default");
    ok(gw.call(
        &alice,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    let audit = state.join("audit");
    let before = verify(&audit, None).unwrap();
    assert!(before.intact, "{before:#?}");

    let filler = fill(&state);
    // The segment's last page may still hold a few records; then the disk is full for it.
    let mut served = 0;
    let refused = loop {
        let result = gw.call(&alice, "list_instances", args(json!({})));
        if result.is_error {
            break result.text;
        }
        served += 1;
        assert!(served < 100, "never refused on a full disk");
    };
    assert!(
        refused.contains("audit"),
        "refused because of the audit log: {refused}"
    );
    // A few more, so that a batch is tried against the full disk more than once.
    for _ in 0..3 {
        err(gw.call(&alice, "list_instances", args(json!({}))));
    }
    let during = verify(&audit, None).unwrap();
    assert!(during.intact, "nothing half-written: {during:#?}");
    assert_eq!(
        during.records,
        before.records + served,
        "the served calls' records, none of a refused one"
    );

    std::fs::remove_file(filler).unwrap();
    ok(gw.call(&alice, "list_instances", args(json!({}))));
    let after = verify(&audit, None).unwrap();
    assert!(after.intact, "{after:#?}");
    assert_eq!(
        after.records,
        during.records + 1,
        "the chain continues with the served call, without a gap"
    );
    drop(gw);
}
