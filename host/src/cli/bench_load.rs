//! The load `hpcgate bench` puts on a gateway through one MCP client: set-up, `stat_path`
//! calls timed one by one, and calls spread over concurrent clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::{Value, json};

use super::bench::Client;

/// An instance and a file in it; a few calls so that every lazy path has run once.
pub(super) async fn set_up(client: &Client, instance: &str) -> anyhow::Result<()> {
    call(
        client,
        "create_instance",
        json!({ "instance_id": instance }),
    )
    .await?;
    call(
        client,
        "write_file",
        json!({ "instance_id": instance, "path": "data.txt", "content": "benchmark" }),
    )
    .await?;
    for _ in 0..10 {
        stat(client, instance).await?;
    }
    Ok(())
}

pub(super) async fn stat(client: &Client, instance: &str) -> anyhow::Result<()> {
    call(
        client,
        "stat_path",
        json!({ "instance_id": instance, "path": "data.txt" }),
    )
    .await
    .map(drop)
}

/// Calls `tool` through any rmcp client session (plain, or one that declares extensions): its
/// structured content (`null` without); an error result is an error.
pub(super) async fn call<S: rmcp::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    tool: &'static str,
    arguments: Value,
) -> anyhow::Result<Value> {
    let Value::Object(arguments) = arguments else {
        bail!("arguments must be an object");
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .with_context(|| format!("`{tool}` failed on the wire"))?;
    if result.is_error == Some(true) {
        bail!(
            "`{tool}` was refused: {}",
            serde_json::to_string(&result.content)?
        );
    }
    Ok(result.structured_content.unwrap_or_default())
}

/// The latencies of `calls` sequential `stat_path` calls, in µs.
pub(super) async fn latencies(
    client: &Client,
    instance: &str,
    calls: usize,
) -> anyhow::Result<Vec<f64>> {
    timed(calls, || stat(client, instance)).await
}

/// The latencies of `calls` sequential runs of `request`, in µs.
pub(super) async fn timed<F, Fut>(calls: usize, mut request: F) -> anyhow::Result<Vec<f64>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        request().await?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(samples)
}

/// `calls` `stat_path` calls in all, spread over the clients running at once: how many ran,
/// and how long they took.
pub(super) async fn throughput(
    clients: Vec<Client>,
    instance: &str,
    calls: usize,
) -> anyhow::Result<(usize, Duration)> {
    let per_client = calls.div_ceil(clients.len());
    let start = Arc::new(tokio::sync::Barrier::new(clients.len() + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        let (start, instance) = (start.clone(), instance.to_owned());
        tasks.spawn(async move {
            start.wait().await;
            for _ in 0..per_client {
                stat(&client, &instance).await?;
            }
            client.cancel().await?;
            anyhow::Ok(())
        });
    }
    let total = per_client * tasks.len();
    start.wait().await;
    let started = Instant::now();
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((total, started.elapsed()))
}
