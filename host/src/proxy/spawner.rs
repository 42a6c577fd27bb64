//! The one thread that starts proxied servers.
//!
//! A sandbox dies with the *thread* that spawned it (`PR_SET_PDEATHSIG`): started from a
//! pooled thread (tokio's blocking pool retires idle threads), a server would be killed at a
//! random moment. So every server is spawned here, on a thread that lives as long as the
//! [`super::ProxyManager`]; when the gateway process dies, its servers die with it.

use std::sync::mpsc;
use std::thread::JoinHandle;

use hpcgate_executors::sandbox::{SandboxError, SandboxSpec, Service, ServicePipes, spawn_service};
use tokio::sync::oneshot;

type Reply = oneshot::Sender<Result<(Service, ServicePipes), SandboxError>>;

struct Request {
    spec: SandboxSpec,
    argv: Vec<String>,
    name: String,
    reply: Reply,
}

/// Handle on the spawner thread; dropping it ends the thread once pending requests are served.
pub struct Spawner {
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Spawner {
    pub fn start() -> std::io::Result<Spawner> {
        let (tx, rx) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("hpcgate-proxy-spawner".to_owned())
            .spawn(move || {
                for r in rx {
                    let _ = r.reply.send(spawn_service(&r.spec, &r.argv, &r.name));
                }
            })?;
        Ok(Spawner {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Starts `argv` in a sandbox built from `spec`.
    pub async fn spawn(
        &self,
        spec: SandboxSpec,
        argv: Vec<String>,
        name: String,
    ) -> Result<(Service, ServicePipes), SandboxError> {
        let (reply, answer) = oneshot::channel();
        let gone = || {
            SandboxError::Spawn(std::io::Error::other(
                "the gateway is shutting down; no new proxied server starts",
            ))
        };
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        tx.send(Request {
            spec,
            argv,
            name,
            reply,
        })
        .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
