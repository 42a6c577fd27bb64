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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

use crate::state::TenantName;

/// The places of one door.
pub(crate) struct Permits {
    all: Arc<Semaphore>,
    size: usize,
    tenants: Mutex<HashMap<TenantName, Arc<Semaphore>>>,
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

    /// Waits for a place of `tenant`'s, then for one of the door's.
    pub(crate) async fn enter(&self, tenant: &TenantName) -> Result<Held, AcquireError> {
        let own = {
            let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
            (tenants.entry(tenant.clone()))
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant())))
                .clone()
        };
        let own = own.acquire_owned().await?;
        let door = self.all.clone().acquire_owned().await?;
        Ok(Held {
            _tenant: Some(own),
            _door: door,
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
