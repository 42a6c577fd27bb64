//! `create`: a new instance, built in a temporary directory and published by one rename.
//!
//! Under the tenant lock: sweep leftovers of crashed creates (nobody else can be creating
//! while we hold the lock), refuse an id that exists live *or* archived (ids are unique per
//! tenant, so unarchive can never collide), check the quota, build
//! `instances/.new-<id>-<random>/{workspace,output,meta.json}`, fsync, and rename it to
//! `instances/<id>` with `RENAME_NOREPLACE`. A crash at any point leaves either nothing
//! visible or the complete instance.

use super::State;
use super::error::StateError;
use super::fsops::{create_dir_private, is_real_dir, remove_tree, rename_noreplace, sync_dir};
use super::id::{InstanceId, TenantName};
use super::instance::{Instance, InstanceMeta, META_VERSION, check_description};
use super::layout::{Location, NEW_PREFIX, OUTPUT, WORKSPACE};
use super::lock::TenantLock;
use super::random::random_base32;
use crate::time::Timestamp;

/// What `create` needs.
#[derive(Debug, Clone, Default)]
pub struct NewInstance {
    /// The id; `None` generates `i-<random>`.
    pub id: Option<InstanceId>,
    pub description: Option<String>,
    /// Refuse if the tenant already has this many live instances (checked under the lock,
    /// so two gateways cannot both take the last slot).
    pub max_instances: Option<usize>,
}

impl State {
    /// Creates an instance; `AlreadyExists` if the id is taken (live or archived).
    pub fn create(&self, tenant: &TenantName, new: NewInstance) -> Result<Instance, StateError> {
        let description = check_description(new.description)?;
        let id = match new.id {
            Some(id) => id,
            None => InstanceId::generate()?,
        };
        let paths = self.tenant(tenant);
        let _lock = TenantLock::acquire(&paths)?;
        self.sweep_leftovers(&paths, tenant)?;

        let io = StateError::io;
        for (location, where_) in [
            (Location::Live, ""),
            (
                Location::Archived,
                " in the archive (unarchive it, or clean the archive)",
            ),
        ] {
            if is_real_dir(&paths.instance(location, &id)).map_err(io("check an instance id"))? {
                return Err(StateError::AlreadyExists {
                    id: id.to_string(),
                    where_,
                });
            }
        }
        if let Some(max) = new.max_instances {
            let count = self.count_live(&paths)?;
            if count >= max {
                return Err(StateError::QuotaExceeded {
                    tenant: tenant.to_string(),
                    count,
                    max,
                });
            }
        }

        let live = paths.dir(Location::Live);
        let tmp = live.join(format!("{NEW_PREFIX}{id}-{}", random_base32(8)?));
        create_dir_private(&tmp).map_err(io("create an instance directory"))?;
        let now = Timestamp::now();
        let meta = InstanceMeta {
            version: META_VERSION,
            id: id.clone(),
            tenant: tenant.clone(),
            description,
            created_at: now,
            updated_at: now,
            archived_at: None,
        };
        let built = create_dir_private(&tmp.join(WORKSPACE))
            .and_then(|()| create_dir_private(&tmp.join(OUTPUT)))
            .map_err(io("create an instance directory"))
            .and_then(|()| meta.save(&tmp));
        if let Err(e) = built {
            let _ = remove_tree(&tmp);
            return Err(e);
        }
        match rename_noreplace(&tmp, &paths.instance(Location::Live, &id)) {
            Ok(()) => {}
            Err(e) => {
                let _ = remove_tree(&tmp);
                return Err(if e.kind() == std::io::ErrorKind::AlreadyExists {
                    StateError::AlreadyExists {
                        id: id.to_string(),
                        where_: "",
                    }
                } else {
                    io("publish a new instance")(e)
                });
            }
        }
        sync_dir(&live).map_err(io("publish a new instance"))?;
        Ok(meta.view(Location::Live))
    }
}
