//! The doctor's check of `[proxied_mcps]`: each server is started the way the gateway's
//! background discovery starts it (a throwaway sandbox with empty scratch directories), and
//! must answer the MCP handshake and `tools/list` within its `start_timeout`.

use std::time::{Duration, Instant};

use super::{Check, Status, fail, pass};
use crate::config::Settings;
use crate::proxy::{Discovery, ProxyManager};

pub(super) fn proxied_mcps(settings: &Settings) -> Check {
    const NAME: &str = "proxied mcps";
    if settings.fixed.proxied_mcps.is_empty() {
        return Check {
            name: NAME,
            status: Status::Skip,
            detail: "none configured".to_owned(),
            hint: None,
        };
    }
    // A fresh private directory: the servers' sandboxes mount directories made below it.
    use std::os::unix::fs::PermissionsExt;
    let private = std::fs::Permissions::from_mode(0o700);
    let scratch = match (tempfile::Builder::new().prefix("hpcgate-doctor-"))
        .permissions(private)
        .tempdir()
    {
        Ok(scratch) => scratch,
        Err(e) => {
            return Check {
                name: NAME,
                status: Status::Fail,
                detail: format!("cannot create a scratch directory: {e}"),
                hint: Some("check that TMPDIR is writable".to_owned()),
            };
        }
    };
    let longest = settings
        .fixed
        .proxied_mcps
        .values()
        .map(|p| p.start_timeout)
        .max()
        .unwrap_or_default();
    let mut manager = ProxyManager::start(
        &settings.fixed.proxied_mcps,
        &settings.fixed.sandbox,
        scratch.path().to_owned(),
        None,
    );
    // Discovery waits for the start, then for `tools/list`: each bounded by `start_timeout`.
    let until = Instant::now() + longest * 2 + Duration::from_secs(2);
    while Instant::now() < until
        && manager
            .status()
            .values()
            .any(|d| matches!(d, Discovery::Pending))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = manager.status();
    manager.shutdown();
    drop(scratch);
    let mut ready = Vec::new();
    let mut failed = Vec::new();
    for (name, discovery) in status {
        match discovery {
            Discovery::Ready(tools) => ready.push(format!("`{name}` ({} tools)", tools.len())),
            Discovery::Pending => failed.push(format!("`{name}`: no answer in time")),
            Discovery::Failed(reason) => failed.push(format!("`{name}`: {reason}")),
        }
    }
    if failed.is_empty() {
        pass(NAME, format!("listed their tools: {}", ready.join(", ")))
    } else {
        fail(
            NAME,
            failed.join("; "),
            "check `proxied_mcps.<name>.command`, `args` and `binds` (the sandbox sees only \
             /usr, the binds and an empty /workspace); the gateway still starts, without \
             these servers' tools",
        )
    }
}
