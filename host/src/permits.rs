//! Places for calls in flight on a door (MCP over HTTP or SSE, WebDAV), shared fairly between
//! tenants.
//!
//! A door runs each call on a blocking thread and holds a place for it until it ends, which is
//! what bounds the blocking threads a flood of calls can take. Some calls are long by design: a
//! `poll_job` may wait an hour for its job, a WebDAV `PUT` holds its place while the client sends
//! the body. Rate limits count calls started, not calls in flight, so with one pool for all, one
//! tenant staying inside its rate limit could park a long call in every place and stall every
//! other tenant. Here a call takes one of its tenant's places first (at most a quarter of the
//! door's), then one of the door's: one tenant alone can never hold them all.
//!
//! Calls that wait for a place are bounded too, at four times a tenant's places: a waiting call
//! holds its parsed request, and a client that sends calls faster than they end (SSE answers
//! a POST before its call runs; HTTP takes as many connections as are opened) would otherwise
//! pile them up in memory without end. One past that is refused at once, saying so.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::state::TenantName;

/// The places of one door.
pub(crate) struct Permits {
    all: Arc<Semaphore>,
    size: usize,
    tenants: Mutex<HashMap<TenantName, Arc<Tenant>>>,
}

/// One tenant's places, and its calls waiting for one.
struct Tenant {
    places: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// Why a call got no place.
#[derive(Debug)]
pub(crate) enum NoPlace {
    /// The door is closing.
    Closed,
    /// The tenant has this many calls waiting already, the most it may.
    Queue { tenant: TenantName, waiting: usize },
}

impl fmt::Display for NoPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoPlace::Closed => f.write_str("the gateway is stopping"),
            NoPlace::Queue { tenant, waiting } => write!(
                f,
                "tenant `{tenant}` has {waiting} calls waiting for a place already, the most it \
                 may: retry once some of its calls in flight have ended"
            ),
        }
    }
}

/// Counts a call among its tenant's waiting ones while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A call's places, given back when it is dropped.
pub(crate) struct Held {
    _tenant: Option<OwnedSemaphorePermit>,
    _door: OwnedSemaphorePermit,
}

impl Permits {
    /// A door with `size` places, a quarter of them (at least one) for any one tenant.
    pub(crate) fn new(size: usize) -> Permits {
        Permits {
            all: Arc::new(Semaphore::new(size)),
            size,
            tenants: Mutex::default(),
        }
    }

    /// How many places one tenant may hold at once.
    fn per_tenant(&self) -> usize {
        (self.size / 4).max(1)
    }

    /// How many calls of one tenant may wait for a place at once.
    fn waiting_per_tenant(&self) -> usize {
        4 * self.per_tenant()
    }

    /// Waits for a place of `tenant`'s, then for one of the door's; refused at once when the
    /// tenant has as many calls waiting as it may.
    pub(crate) async fn enter(&self, tenant: &TenantName) -> Result<Held, NoPlace> {
        let own = {
            let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
            (tenants.entry(tenant.clone()))
                .or_insert_with(|| {
                    Arc::new(Tenant {
                        places: Arc::new(Semaphore::new(self.per_tenant())),
                        waiting: AtomicUsize::new(0),
                    })
                })
                .clone()
        };
        let waiting = own.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&own.waiting);
        if waiting >= self.waiting_per_tenant() {
            return Err(NoPlace::Queue {
                tenant: tenant.clone(),
                waiting,
            });
        }
        let place = own.places.clone().acquire_owned().await;
        let place = place.map_err(|_| NoPlace::Closed)?;
        let door = self.all.clone().acquire_owned().await;
        Ok(Held {
            _tenant: Some(place),
            _door: door.map_err(|_| NoPlace::Closed)?,
        })
    }

    /// Every place of the door at once, if none is taken: a call that then runs alone.
    pub(crate) fn enter_alone(&self) -> Option<Held> {
        let door = self
            .all
            .clone()
            .try_acquire_many_owned(self.size as u32)
            .ok()?;
        Some(Held {
            _tenant: None,
            _door: door,
        })
    }

    /// Whether no call holds a place.
    pub(crate) fn idle(&self) -> bool {
        self.all.available_permits() == self.size
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tenant(name: &str) -> TenantName {
        TenantName::parse(name).unwrap()
    }

    #[tokio::test]
    async fn one_tenant_holds_at_most_a_quarter_and_others_still_enter() {
        let permits = Permits::new(8);
        let chem = tenant("chem");
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(permits.enter(&chem).await.unwrap());
        }
        let third = tokio::time::timeout(Duration::from_millis(50), permits.enter(&chem)).await;
        assert!(
            third.is_err(),
            "a tenant's third call waits for one of its own places"
        );
        for name in ["bio", "phys", "astro"] {
            held.push(permits.enter(&tenant(name)).await.unwrap());
        }
        assert!(!permits.idle());
        assert!(permits.enter_alone().is_none());
        held.remove(0);
        let third = tokio::time::timeout(Duration::from_millis(50), permits.enter(&chem)).await;
        assert!(
            third.is_ok(),
            "a place given back is taken by the waiting call"
        );
    }

    /// A tenant's calls beyond its places wait, up to four times its places; one more is
    /// refused at once, and a waiting call that gets its place leaves room for another.
    #[tokio::test]
    async fn calls_waiting_for_a_place_are_bounded_per_tenant() {
        let permits = Arc::new(Permits::new(8));
        let chem = tenant("chem");
        let held: Vec<_> = futures_util::future::join_all((0..2).map(|_| permits.enter(&chem)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (permits, chem) = (permits.clone(), chem.clone());
                tokio::spawn(async move { permits.enter(&chem).await.map(drop) })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = permits.enter(&chem).await.err().unwrap();
        assert!(
            matches!(refused, NoPlace::Queue { waiting: 8, .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("8 calls waiting"), "{refused}");
        let bio = tenant("bio");
        let bio = tokio::time::timeout(Duration::from_millis(50), permits.enter(&bio));
        assert!(bio.await.unwrap().is_ok(), "another tenant is not refused");
        drop(held);
        for waiter in waiters {
            assert!(
                waiter.await.unwrap().is_ok(),
                "each waiting call got its place"
            );
        }
        assert!(permits.enter(&chem).await.is_ok());
    }

    #[tokio::test]
    async fn a_lone_call_takes_every_place() {
        let permits = Permits::new(4);
        let alone = permits.enter_alone().unwrap();
        assert!(!permits.idle());
        let chem = tenant("chem");
        let other = tokio::time::timeout(Duration::from_millis(50), permits.enter(&chem));
        assert!(other.await.is_err());
        drop(alone);
        assert!(permits.idle());
        assert!(permits.enter(&chem).await.is_ok());
    }
}
