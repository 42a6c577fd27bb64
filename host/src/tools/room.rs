//! Room under a space quota held for writes in flight.
//!
//! A streamed upload (a WebDAV `PUT`) learns how much room its area has when it starts and may
//! take seconds or hours to arrive; a copy of a tree takes a while too. Checked only at their
//! start, two such writes in flight at once could each take all of the room and together pass
//! the quota. So every write that adds bytes under a quota first *holds* the room it needs —
//! an inline write its size, a copy or a move between areas its source's, an upload the size
//! its client announced, else (an upload without one) all the room there is — and every
//! writer's room (see
//! [`super::check_space`]) is what the quota leaves after the bytes on disk and the room others
//! hold. The area is measured afresh, one writer of an area at a time, when room is taken; a
//! hold ends when the write is in place or failed.
//!
//! Holds are this process's: gateways sharing one state directory each hold their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::state::{InstanceId, TenantName};
use crate::usage::Count;

use super::Area;

type Key = (TenantName, InstanceId, Area);

/// The room held in each instance's areas.
#[derive(Default)]
pub struct Room {
    held: Mutex<HashMap<Key, Arc<Mutex<u64>>>>,
}

/// Room held by one write, given back when it is dropped.
pub(crate) struct Hold {
    held: Arc<Mutex<u64>>,
    bytes: u64,
}

impl Room {
    /// The room others hold in `area` of `tenant`'s `instance`.
    pub(crate) fn held(&self, tenant: &TenantName, instance: &InstanceId, area: Area) -> u64 {
        let area = self.area(tenant, instance, area);
        *area.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `wanted(measured, left, held)` bytes: `measure()` gives what it measured and the
    /// quota, measured while no other upload of this area takes room; `left` is what the quota
    /// leaves after the bytes on disk and the room others hold (`held`), the partly written
    /// files of those others counted once ([`Count::beside_holds`]). `wanted` refuses with its
    /// own message.
    pub(crate) fn take<E>(
        &self,
        (tenant, instance, area): (&TenantName, &InstanceId, Area),
        measure: impl FnOnce() -> Result<(Count, u64), E>,
        wanted: impl FnOnce(Count, u64, u64) -> Result<u64, E>,
    ) -> Result<Hold, E> {
        let area = self.area(tenant, instance, area);
        let mut held = area.lock().unwrap_or_else(PoisonError::into_inner);
        let (measured, max) = measure()?;
        let used = measured.beside_holds(*held);
        let left = max.saturating_sub(used).saturating_sub(*held);
        let bytes = wanted(measured, left, *held)?;
        *held += bytes;
        drop(held);
        Ok(Hold { held: area, bytes })
    }

    fn area(&self, tenant: &TenantName, instance: &InstanceId, area: Area) -> Arc<Mutex<u64>> {
        let mut areas = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        // An area no upload holds room in is forgotten when the next one starts.
        areas.retain(|_, held| Arc::strong_count(held) > 1);
        let key = (tenant.clone(), instance.clone(), area);
        areas.entry(key).or_default().clone()
    }
}

impl Hold {
    /// The bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        *held = held.saturating_sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (TenantName, InstanceId) {
        (
            TenantName::parse("chem").unwrap(),
            InstanceId::parse("run1").unwrap(),
        )
    }

    #[test]
    fn holds_add_up_and_are_given_back() {
        let room = Room::default();
        let (tenant, instance) = key();
        let at = (&tenant, &instance, Area::Workspace);
        let on_disk = |bytes, writing_here| Count {
            bytes,
            writing_here,
            ..Count::default()
        };
        let measure = || Ok::<_, String>((on_disk(100, 0), 1000));
        let first = room
            .take(at, measure, |_, left, _| Ok::<_, String>(left.min(600)))
            .unwrap();
        assert_eq!(first.bytes(), 600);
        assert_eq!(room.held(&tenant, &instance, Area::Workspace), 600);
        assert_eq!(room.held(&tenant, &instance, Area::Output), 0);
        let refused = room.take(at, measure, |_, left, held| {
            if left < 600 {
                Err(format!("only {left} left, {held} held"))
            } else {
                Ok(600)
            }
        });
        assert_eq!(refused.err().as_deref(), Some("only 300 left, 600 held"));
        // The first write's 250 bytes on disk so far are inside its 600 held: counted once.
        let writing = || Ok::<_, String>((on_disk(350, 250), 1000));
        let beside = room
            .take(at, writing, |_, left, _| Ok::<_, String>(left))
            .unwrap();
        assert_eq!(beside.bytes(), 300);
        drop(beside);
        drop(first);
        assert_eq!(room.held(&tenant, &instance, Area::Workspace), 0);
        let again = room
            .take(at, measure, |_, left, _| Ok::<_, String>(left))
            .unwrap();
        assert_eq!(again.bytes(), 900);
    }
}
