//! The audit records of a proxied server's life: `proxy.started`, `proxy.stopped` (why: idle,
//! archive, shutdown, overflow), `proxy.crashed` (how), and `proxy.discovery_failed`.
//!
//! These happen off any call's path (the idle reaper, a shutdown, discovery in the
//! background), so an audit write failure cannot refuse anything: it is logged to stderr.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hpcgate_executors::sandbox::ExitInfo;

use super::Key;
use crate::audit::{AuditLog, Entry, Event, Outcome};

/// Who records these events in `principal`: the gateway itself, not a caller.
const PRINCIPAL: &str = "hpcgate";

/// Why a running server is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Unused for its proxy's `idle_timeout` (or found dead by the reaper).
    Idle,
    /// Its instance was archived.
    Archive,
    /// The gateway is shutting down.
    Shutdown,
    /// It sent a message over `max_result_bytes`.
    Overflow,
    /// It died during a call.
    Crashed,
    /// A discovery server, done listing.
    Discovered,
    /// Its tenant's least recently used idle server, stopped to start another past
    /// `MAX_TENANT_SERVERS`.
    Evicted,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Idle => "idle",
            Stop::Archive => "archive",
            Stop::Shutdown => "shutdown",
            Stop::Overflow => "overflow",
            Stop::Crashed => "crashed",
            Stop::Discovered => "discovered",
            Stop::Evicted => "evicted",
        }
    }
}

/// One call server's records; each server ends (stopped or crashed) once.
pub struct Lifecycle {
    audit: Option<Arc<AuditLog>>,
    key: Key,
    server: u64,
    ended: AtomicBool,
}

impl Lifecycle {
    pub fn new(audit: Option<Arc<AuditLog>>, key: Key, server: u64) -> Lifecycle {
        Lifecycle {
            audit,
            key,
            server,
            ended: AtomicBool::new(false),
        }
    }

    fn entry(&self, event: Event) -> Entry {
        Entry::new(event)
            .who(self.key.tenant.as_ref(), PRINCIPAL)
            .instance(&self.key.instance)
            .detail("proxy", self.key.proxy.as_str())
            .detail("server", self.server)
    }

    pub fn started(&self) {
        append(self.audit.as_deref(), self.entry(Event::ProxyStarted));
    }

    /// Records how the server ended: `proxy.crashed` if it was already gone (or `why` says it
    /// crashed), else `proxy.stopped` with the reason. `stalled`: it was taken for dead as it
    /// left a write to it waiting that long. Only the first end counts.
    pub fn ended(
        &self,
        why: Stop,
        was_alive: bool,
        tool: Option<&str>,
        exit: Option<ExitInfo>,
        stalled: Option<std::time::Duration>,
    ) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        let crashed = why == Stop::Crashed || (!was_alive && why != Stop::Overflow);
        let mut entry = if crashed {
            self.entry(Event::ProxyCrashed)
        } else {
            self.entry(Event::ProxyStopped)
                .detail("reason", why.as_str())
        };
        if let Some(tool) = tool {
            entry = entry.tool(tool);
        }
        if crashed {
            let exit_code = match exit {
                Some(ExitInfo::Code(code)) => Some(code),
                _ => None,
            };
            if let Some(ExitInfo::Signal(signal)) = exit {
                entry = entry.detail("signal", signal);
            }
            let during = tool.map_or("while idle".to_owned(), |t| format!("during `{t}`"));
            let error = match stalled {
                Some(after) => format!(
                    "the server did not read its stdin for {}s {during}",
                    after.as_secs_f64()
                ),
                None => format!("the server stopped on its own {during}"),
            };
            entry = entry.outcome(Outcome {
                exit_code,
                error: Some(error),
                ..Outcome::default()
            });
        }
        append(self.audit.as_deref(), entry);
    }
}

/// Records that `proxy`'s discovery failed, and why (as `doctor` shows it): which attempt,
/// and when the next one is.
pub fn discovery_failed(
    audit: Option<&AuditLog>,
    proxy: &str,
    reason: &str,
    (attempt, retry_in): (u64, std::time::Duration),
) {
    let entry = Entry::new(Event::ProxyDiscoveryFailed)
        .detail("proxy", proxy)
        .detail("attempt", attempt)
        .detail("retry_in_s", retry_in.as_secs())
        .outcome(Outcome {
            error: Some(reason.to_owned()),
            ..Outcome::default()
        });
    append(audit, entry);
}

fn append(audit: Option<&AuditLog>, entry: Entry) {
    let Some(audit) = audit else {
        return;
    };
    let event = entry.event;
    if let Err(e) = audit.append(entry) {
        super::log(&format!("cannot record `{event}` in the audit log: {e}"));
    }
}
