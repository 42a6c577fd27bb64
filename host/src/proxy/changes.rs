//! Who is told that the proxied tools changed: a flag per audience, not a queue of changes.
//!
//! A session waits on two flags, everyone's (a discovery finished) and its own tenant's (one of
//! its tenant's running servers announced or dropped a list). Setting a flag wakes only the
//! sessions waiting on it, and any number of changes before a session looks again are one
//! change to it: a notification carries no data, so one is all the client needs. So one tenant's
//! server announcing as fast as it can never wakes another tenant's sessions, and its own
//! sessions send one notification per wake-up, not one per announcement.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::state::TenantName;

/// Who a change of the proxied tools concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The baseline changed (a discovery finished).
    Everyone,
    /// One of this tenant's running servers announced or dropped its own list.
    Tenant(TenantName),
}

/// The flags: everyone's, and one per tenant that has a session listening.
#[derive(Debug)]
pub struct Changes {
    everyone: watch::Sender<()>,
    tenants: Mutex<HashMap<TenantName, watch::Sender<()>>>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            everyone: watch::Sender::new(()),
            tenants: Mutex::default(),
        }
    }
}

impl Changes {
    /// Wakes the sessions `change` concerns (none may be listening: that is fine).
    pub fn notify(&self, change: &Change) {
        match change {
            Change::Everyone => {
                self.everyone.send_replace(());
            }
            Change::Tenant(tenant) => {
                let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(flag) = tenants.get(tenant) {
                    flag.send_replace(());
                }
            }
        }
    }

    /// What a session of `tenant` waits on (a session whose caller is unknown hears only of
    /// discovery). Flags nobody waits on any longer are dropped here, so the map holds the
    /// tenants with a session, not every tenant ever seen.
    pub fn subscribe(&self, tenant: Option<&TenantName>) -> Subscription {
        let tenant = tenant.map(|tenant| {
            let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
            tenants.retain(|_, flag| flag.receiver_count() > 0);
            tenants
                .entry(tenant.clone())
                .or_insert_with(|| watch::Sender::new(()))
                .subscribe()
        });
        Subscription {
            everyone: self.everyone.subscribe(),
            tenant,
        }
    }
}

/// One session's two flags.
#[derive(Debug)]
pub struct Subscription {
    everyone: watch::Receiver<()>,
    tenant: Option<watch::Receiver<()>>,
}

impl Subscription {
    /// Waits until a flag this session listens to is set, and clears both: `false` once the
    /// gateway's catalogue is gone (nothing will change any more).
    pub async fn changed(&mut self) -> bool {
        let woke = match &mut self.tenant {
            Some(tenant) => tokio::select! {
                r = self.everyone.changed() => r,
                r = tenant.changed() => r,
            },
            None => self.everyone.changed().await,
        };
        self.everyone.mark_unchanged();
        if let Some(tenant) = &mut self.tenant {
            tenant.mark_unchanged();
        }
        woke.is_ok()
    }

    /// Whether a flag this session listens to was set since it last looked, without waiting;
    /// clears both.
    pub fn take(&mut self) -> bool {
        // Looked at and marked seen in one step: a flag set in between is not lost.
        let mut set = self.everyone.borrow_and_update().has_changed();
        if let Some(tenant) = &mut self.tenant {
            set |= tenant.borrow_and_update().has_changed();
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tenant(name: &str) -> TenantName {
        TenantName::parse(name).unwrap()
    }

    async fn wakes(sub: &mut Subscription) -> bool {
        tokio::time::timeout(Duration::from_millis(50), sub.changed())
            .await
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn a_tenants_changes_wake_only_its_sessions_and_many_are_one() {
        let changes = Changes::default();
        let (chem, bio) = (tenant("chem"), tenant("bio"));
        let mut chem_session = changes.subscribe(Some(&chem));
        let mut bio_session = changes.subscribe(Some(&bio));
        let mut anonymous = changes.subscribe(None);
        for _ in 0..10_000 {
            changes.notify(&Change::Tenant(chem.clone()));
        }
        assert!(wakes(&mut chem_session).await, "chem's session is told");
        assert!(
            !wakes(&mut chem_session).await,
            "10,000 announcements are one change to a session that had not looked"
        );
        assert!(!wakes(&mut bio_session).await, "bio never hears of chem's");
        assert!(!wakes(&mut anonymous).await, "nor does an unknown caller");

        changes.notify(&Change::Everyone);
        for session in [&mut chem_session, &mut bio_session, &mut anonymous] {
            assert!(wakes(session).await, "a discovery concerns everyone");
            assert!(!wakes(session).await);
        }
    }

    #[tokio::test]
    async fn flags_nobody_waits_on_are_dropped() {
        let changes = Changes::default();
        for i in 0..100 {
            drop(changes.subscribe(Some(&tenant(&format!("t{i}")))));
        }
        let _kept = changes.subscribe(Some(&tenant("kept")));
        assert_eq!(changes.tenants.lock().unwrap().len(), 1);
        // A change for a tenant without a session is dropped, not kept for later.
        changes.notify(&Change::Tenant(tenant("t1")));
        assert_eq!(changes.tenants.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn the_end_of_the_catalogue_ends_the_wait() {
        let changes = Changes::default();
        let mut session = changes.subscribe(Some(&tenant("chem")));
        drop(changes);
        assert!(!session.changed().await);
    }
}
