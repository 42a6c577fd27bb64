//! The cross-tenant matrix over streamable HTTP on TCP: the real `hpcgate run`, tenants `chem`
//! and `bio` each authenticated by a bearer token, the rmcp client. chem sets up, bio runs the
//! shared table of `support/matrix.rs` against chem's ids and paths, chem checks its objects,
//! and bio's audit query shows none of chem's records. (`uds_tenancy` runs the same table over
//! the Unix socket with two real uids.)

use crate::support::served;

use crate::support::matrix;

use hpcgate::auth::bearer::{generate_token, hash_token};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use served::{Served, config};

#[test]
fn two_bearer_tenants_see_nothing_of_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let (chem_token, bio_token) = (generate_token().unwrap(), generate_token().unwrap());
    let config = config(
        dir.path(),
        &format!(
            "policies = []\n[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n\
             [tenants.bio]\ntokens = [{{ label = \"bob\", sha256 = \"{}\" }}]\n",
            hex::encode(hash_token(&chem_token)),
            hex::encode(hash_token(&bio_token)),
        ),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // rmcp's transport spawns its worker when built: inside the runtime.
    let _inside = runtime.enter();
    let served = runtime.block_on(Served::http(dir.path(), &config));
    let connect = |token: &str| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(served.address.as_str())
                .auth_header(token.to_owned()),
        );
        runtime.block_on(().serve(transport)).unwrap()
    };

    let chem = connect(&chem_token);
    let job = matrix::chem_setup(&mut |tool, arguments| {
        matrix::mcp_call(&runtime, &chem, tool, arguments)
    });
    let bio = connect(&bio_token);
    matrix::bio_attack(
        &mut |tool, arguments| matrix::mcp_call(&runtime, &bio, tool, arguments),
        &job,
    );
    matrix::assert_bio_audit_scoped(&dir.path().join("state/audit"));
    matrix::chem_check(
        &mut |tool, arguments| matrix::mcp_call(&runtime, &chem, tool, arguments),
        &job,
    );
    runtime.block_on(bio.cancel()).unwrap();
    runtime.block_on(chem.cancel()).unwrap();

    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
    let audit = served::audit_text(&dir.path().join("state/audit"));
    assert!(
        audit.contains("\"token:bob\""),
        "bio's calls name its token label"
    );
    assert!(
        !audit.contains(&bio_token) && !audit.contains(&chem_token),
        "no token in the audit log"
    );
}
