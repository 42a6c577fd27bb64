//! `update`: change a live instance's description (set, clear, or leave as is).

use super::State;
use super::error::StateError;
use super::id::{InstanceId, TenantName};
use super::instance::{Instance, check_description};
use super::layout::Location;
use super::lock::TenantLock;
use crate::time::Timestamp;

impl State {
    /// `description`: `None` leaves it unchanged (the call is then a plain read),
    /// `Some(None)` or `Some(Some(""))` clears it, `Some(Some(text))` sets it.
    /// Archived instances cannot be updated (`Archived`).
    pub fn update(
        &self,
        tenant: &TenantName,
        id: &InstanceId,
        description: Option<Option<String>>,
    ) -> Result<Instance, StateError> {
        let Some(description) = description else {
            let paths = self.tenant(tenant);
            return Ok(self.live_meta(&paths, tenant, id)?.view(Location::Live));
        };
        let description = check_description(description)?;
        let paths = self.tenant(tenant);
        let _lock = TenantLock::acquire(&paths)?;
        let mut meta = self.live_meta(&paths, tenant, id)?;
        meta.description = description;
        meta.updated_at = Timestamp::now();
        // A live instance's `archived_at` left by a crashed unarchive is cleared here.
        meta.archived_at = None;
        meta.save(&paths.instance(Location::Live, id))?;
        Ok(meta.view(Location::Live))
    }
}
