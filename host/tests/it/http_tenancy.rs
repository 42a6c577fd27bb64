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

/// A gateway config with tenants chem (token label alice) and bio (bob), no policies: their
/// tokens and the config's path.
fn two_tenants(dir: &std::path::Path) -> (String, String, std::path::PathBuf) {
    let (chem, bio) = (generate_token().unwrap(), generate_token().unwrap());
    let config = config(
        dir,
        &format!(
            "policies = []\n[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n\
             [tenants.bio]\ntokens = [{{ label = \"bob\", sha256 = \"{}\" }}]\n",
            hex::encode(hash_token(&chem)),
            hex::encode(hash_token(&bio)),
        ),
    );
    (chem, bio, config)
}

#[test]
fn two_bearer_tenants_see_nothing_of_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let (chem_token, bio_token, config) = two_tenants(dir.path());
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

fn call(name: &'static str, arguments: serde_json::Value) -> rmcp::model::CallToolRequestParams {
    let serde_json::Value::Object(arguments) = arguments else {
        unreachable!("arguments are an object")
    };
    rmcp::model::CallToolRequestParams::new(name).with_arguments(arguments)
}

/// One tenant's long calls cannot hold every place a listener has for calls in flight: chem
/// parks 64 `poll_job` calls (each waiting for its job to end), and bio's own call is still
/// answered while all of chem's wait. Before, the listener's 64 places were one pool, and bio
/// waited until chem's job ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_long_calls_leave_room_for_another_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let (chem_token, bio_token, config) = two_tenants(dir.path());
    let served = Served::http(dir.path(), &config).await;
    let connect = |token: String| {
        ().serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(served.address.as_str())
                .auth_header(token),
        ))
    };
    let (chem, bio) = (
        connect(chem_token).await.unwrap(),
        connect(bio_token).await.unwrap(),
    );
    for (client, instance) in [(&chem, "c1"), (&bio, "b1")] {
        let created = (client.call_tool(call(
            "create_instance",
            serde_json::json!({ "instance_id": instance }),
        )))
        .await
        .unwrap();
        assert_ne!(created.is_error, Some(true), "{created:?}");
    }
    let submitted = chem
        .call_tool(call(
            "submit_job",
            serde_json::json!({ "instance_id": "c1", "command": "sleep 8", "timeout": 0 }),
        ))
        .await
        .unwrap();
    let job_id = submitted.structured_content.unwrap()["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let polls: Vec<_> = (0..64)
        .map(|_| {
            let (peer, job_id) = (chem.peer().clone(), job_id.clone());
            tokio::spawn(async move {
                let poll =
                    serde_json::json!({ "instance_id": "c1", "job_id": job_id, "timeout": 60 });
                peer.call_tool(call("poll_job", poll)).await
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;

    let listed = bio
        .call_tool(call("list_instances", serde_json::json!({})))
        .await
        .unwrap();
    assert_ne!(listed.is_error, Some(true), "{listed:?}");
    let waiting = polls.iter().filter(|poll| !poll.is_finished()).count();
    assert_eq!(
        waiting, 64,
        "bio was answered while chem's polls all wait for chem's job"
    );
    for poll in polls {
        let polled = poll.await.unwrap().unwrap();
        assert_ne!(polled.is_error, Some(true), "{polled:?}");
        assert_eq!(
            polled.structured_content.unwrap()["job"]["status"],
            "completed"
        );
    }
    chem.cancel().await.unwrap();
    bio.cancel().await.unwrap();
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");
}
