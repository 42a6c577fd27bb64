//! How many proxied servers run, and for how long: a tenant's cap ([`MAX_TENANT_SERVERS`],
//! kept when a server starts) and the reaper of idle and dead servers.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

use super::client::Client;
use super::error::ProxyError;
use super::lifecycle::Stop;
use super::{Inner, Key, ProxySettings, Slot, lock};

/// Proxied servers one tenant runs at once, over all its instances and proxies: each is a
/// sandbox with the sandbox's memory and process limits, so a tenant's instances must not
/// multiply them without bound.
pub const MAX_TENANT_SERVERS: usize = 16;

impl Inner {
    /// `key`'s slot (made if there is none), locked, and still in the map once locked.
    /// A slot leaves the map only when its servers stop for good (archive, the gateway's
    /// stop): a call that found it before and waited for its lock meanwhile must not start a
    /// server in it, where the reaper, the tenant's cap and the stop never see it (and its
    /// lease would refuse the archive). It looks `key` up again instead, so a start after an
    /// archive fails on the lease (the instance is archived); once the manager is stopping, it
    /// fails as shutting down.
    pub(super) async fn slot(
        &self,
        key: &Key,
    ) -> Result<OwnedMutexGuard<Option<Arc<Client>>>, ProxyError> {
        live_slot(&self.clients, key, || *lock(&self.stopped))
            .await
            .ok_or(ProxyError::ShuttingDown)
    }

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
            let empty = current.is_none();
            drop(current);
            if empty {
                forget_unused(&inner.clients, &key, slot);
            }
        }
    }
}

/// Removes `key`'s `slot` from `map` if it is still the map's and nobody but the map and this
/// caller holds it: no call found it to start a server in it. (A call takes its slot under the
/// map's lock, so it either holds the slot by then, or finds none and makes a new one.)
/// Without this every (tenant, instance, proxy) ever served kept an entry until archived, and
/// `runs_in` answered yes for instances whose servers had long stopped.
fn forget_unused<K: Eq + Hash, T>(
    map: &Mutex<HashMap<K, Arc<tokio::sync::Mutex<T>>>>,
    key: &K,
    slot: Arc<tokio::sync::Mutex<T>>,
) {
    let mut map = lock(map);
    if map.get(key).is_some_and(|s| Arc::ptr_eq(s, &slot)) && Arc::strong_count(&slot) == 2 {
        map.remove(key);
    }
}

/// `key`'s slot in `map` (made if there is none), locked, and the one `map` still holds for
/// `key` once locked: one removed while this waited for its lock is looked up again. `None`
/// once `stopped` says so, before or after the wait.
async fn live_slot<K: Eq + Hash + Clone, T: Default>(
    map: &Mutex<HashMap<K, Arc<tokio::sync::Mutex<T>>>>,
    key: &K,
    stopped: impl Fn() -> bool,
) -> Option<OwnedMutexGuard<T>> {
    loop {
        if stopped() {
            return None;
        }
        let slot = lock(map).entry(key.clone()).or_default().clone();
        let locked = slot.lock_owned().await;
        let held = OwnedMutexGuard::mutex(&locked);
        if lock(map).get(key).is_some_and(|s| Arc::ptr_eq(s, held)) && !stopped() {
            return Some(locked);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    use tokio::sync::OwnedMutexGuard;

    use super::live_slot;

    type TestSlot = Arc<tokio::sync::Mutex<Option<u32>>>;
    type Slots = Mutex<HashMap<&'static str, TestSlot>>;

    /// A map with slot `k`, locked (a call starting its server, or a stop), and a call that
    /// found the slot and waits for its lock; then the slot is removed (an archive, or the
    /// gateway's stop when `stopped`) and unlocked. Returns the map, the removed slot and what
    /// the call got.
    fn race(stopped: bool) -> (Slots, TestSlot, Option<Option<u32>>) {
        let stopping = std::sync::atomic::AtomicBool::new(false);
        let map: Slots = Mutex::default();
        let old = map.lock().unwrap().entry("k").or_default().clone();
        let held = old.clone().try_lock_owned().unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let got = {
            let is_stopping = || stopping.load(std::sync::atomic::Ordering::SeqCst);
            let mut call = std::pin::pin!(live_slot(&map, &"k", is_stopping));
            assert!(call.as_mut().poll(&mut cx).is_pending(), "the slot is held");
            let removed = map.lock().unwrap().remove("k").unwrap();
            stopping.store(stopped, std::sync::atomic::Ordering::SeqCst);
            assert!(Arc::ptr_eq(&removed, &old));
            drop(held);
            let Poll::Ready(got) = call.as_mut().poll(&mut cx) else {
                panic!("the call still waits once the slot is free");
            };
            got.map(|locked| {
                let now = map.lock().unwrap().get("k").cloned();
                let now = now.expect("the call's slot is in the map");
                assert!(Arc::ptr_eq(OwnedMutexGuard::mutex(&locked), &now));
                *locked
            })
        };
        (map, old, got)
    }

    #[test]
    fn a_slot_removed_while_a_call_waits_is_looked_up_again() {
        let (map, old, got) = race(false);
        assert_eq!(got, Some(None), "a fresh slot, empty");
        let now = map.lock().unwrap()["k"].clone();
        assert!(!Arc::ptr_eq(&now, &old), "never the removed slot");
    }

    #[test]
    fn an_empty_slot_is_forgotten_unless_a_call_holds_it() {
        let map: Slots = Mutex::default();
        let slot = map.lock().unwrap().entry("k").or_default().clone();
        let call = slot.clone();
        super::forget_unused(&map, &"k", slot.clone());
        assert!(map.lock().unwrap().contains_key("k"), "a call holds it");
        drop(call);
        let newer: TestSlot = Arc::default();
        map.lock().unwrap().insert("k", newer.clone());
        super::forget_unused(&map, &"k", slot);
        assert!(
            Arc::ptr_eq(&map.lock().unwrap()["k"], &newer),
            "never another slot of the key"
        );
        let again = newer.clone();
        drop(newer);
        super::forget_unused(&map, &"k", again);
        assert!(map.lock().unwrap().is_empty());
    }

    #[test]
    fn once_stopped_a_removed_slot_is_not_made_again() {
        let (map, _, got) = race(true);
        assert_eq!(got, None);
        assert!(map.lock().unwrap().is_empty());
    }
}
