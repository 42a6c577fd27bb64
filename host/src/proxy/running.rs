//! How many proxied servers run, and for how long: a tenant's cap ([`MAX_TENANT_SERVERS`],
//! kept when a server starts) and the reaper of idle and dead servers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::ProxyError;
use super::lifecycle::Stop;
use super::{Inner, Key, ProxySettings, Slot, lock};

/// Proxied servers one tenant runs at once, over all its instances and proxies: each is a
/// sandbox with the sandbox's memory and process limits, so a tenant's instances must not
/// multiply them without bound.
pub const MAX_TENANT_SERVERS: usize = 16;

impl Inner {
    /// Makes room for one more server of `key`'s tenant: with [`MAX_TENANT_SERVERS`] running
    /// (or starting), its least recently used idle one is stopped; with none idle, the start
    /// is refused. Concurrent starts of one tenant may each find room: the bound is soft by
    /// the calls that tenant has in flight.
    pub(super) async fn make_room(&self, key: &Key) -> Result<(), ProxyError> {
        let slots: Vec<Arc<Slot>> = (lock(&self.clients).iter())
            .filter(|(k, _)| k.tenant == key.tenant && *k != key)
            .map(|(_, slot)| slot.clone())
            .collect();
        let mut running = 0;
        let mut idlest: Option<(Instant, Arc<Slot>)> = None;
        for slot in slots {
            let Ok(current) = slot.try_lock() else {
                running += 1; // starting
                continue;
            };
            let Some(client) = current.as_ref().filter(|c| c.is_alive()) else {
                continue;
            };
            running += 1;
            if let Some(since) = client.idle_since()
                && idlest.as_ref().is_none_or(|(oldest, _)| since < *oldest)
            {
                idlest = Some((since, slot.clone()));
            }
        }
        if running < MAX_TENANT_SERVERS {
            return Ok(());
        }
        let busy = || ProxyError::Busy {
            tenant: key.tenant.to_string(),
            limit: MAX_TENANT_SERVERS,
        };
        let (_, slot) = idlest.ok_or_else(busy)?;
        let mut current = slot.try_lock().map_err(|_| busy())?;
        match current.take() {
            Some(client) if client.idle_since().is_some() => {
                client.stop(Stop::Evicted).await;
                Ok(())
            }
            // Called meanwhile: it stays.
            other => {
                *current = other;
                Err(busy())
            }
        }
    }
}

/// How long after its last use a dead server is forgotten by the reaper.
const DEAD_AFTER: Duration = Duration::from_secs(1);

/// How often idle and dead servers are looked for: a quarter of the shortest `idle_timeout`,
/// between 10 ms and 1 s; every second when no proxy has one (a dead server's lease on its
/// instance must not outlive it: `state/in_use.rs`).
pub(super) fn idle_tick(proxies: &BTreeMap<String, ProxySettings>) -> Duration {
    let shortest = proxies.values().filter_map(|p| p.idle_timeout).min();
    let tick = shortest.map_or(Duration::from_secs(1), |idle| idle / 4);
    tick.clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Stops servers idle for their proxy's `idle_timeout` and forgets dead ones. A slot being
/// started (locked) is skipped this round, as is a server with a call in flight, dead or
/// not: that call ends it, and its record names the tool it was running.
pub(super) async fn reap_idle(inner: std::sync::Weak<Inner>, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let slots: Vec<(Key, Arc<Slot>)> = lock(&inner.clients)
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (key, slot) in slots {
            let idle = inner.proxies.get(&key.proxy).and_then(|p| p.idle_timeout);
            let Ok(mut current) = slot.try_lock() else {
                continue;
            };
            // A dead server is left a second after its last use, so that a call that has just
            // taken it finds the death itself (and its record names the tool).
            let expired = current.as_ref().is_some_and(|c| {
                c.idle_since().is_some_and(|t| {
                    let dead = t.elapsed() >= DEAD_AFTER && !c.is_alive();
                    dead || idle.is_some_and(|idle| t.elapsed() >= idle)
                })
            });
            if expired && let Some(client) = current.take() {
                client.stop(Stop::Idle).await;
            }
        }
    }
}
