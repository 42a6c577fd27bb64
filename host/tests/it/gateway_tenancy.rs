//! The cross-tenant matrix, in process (the dispatch function is where isolation lives; the
//! transports only establish the caller): for every builtin tool, tenant `bio` aims at tenant
//! `chem`'s instance ids, job ids and paths, with a policy set that allows everything. The
//! table and its checks are `support/matrix.rs`, shared with the Unix-socket run by two real
//! uids (`uds_tenancy.rs`).

use crate::support::gateway as support;

use crate::support::matrix;

use hpcgate::gateway::{Caller, Gateway};
use matrix::Reply;
use serde_json::Value;
use support::{args, caller};

/// Everything allowed: isolation must not depend on policy.
const PERMISSIVE: &str = r#"
policies = []
"#;

/// One call by `who` through the dispatch function.
fn through<'a>(gw: &'a Gateway, who: &'a Caller) -> impl FnMut(&str, Value) -> Reply + 'a {
    move |tool, arguments| {
        let result = gw.call(who, tool, args(arguments));
        Reply {
            text: result.text,
            structured: result.structured,
            is_error: result.is_error,
        }
    }
}

#[test]
fn no_tool_lets_one_tenant_see_or_touch_anothers_objects() {
    let dir = tempfile::tempdir().unwrap();
    let gw = support::open(dir.path(), PERMISSIVE);
    let (chem, bio) = (caller("chem"), caller("bio"));
    let job = matrix::chem_setup(&mut through(&gw, &chem));
    matrix::bio_attack(&mut through(&gw, &bio), &job);
    matrix::assert_bio_audit_scoped(&dir.path().join("state/audit"));
    matrix::chem_check(&mut through(&gw, &chem), &job);
}
