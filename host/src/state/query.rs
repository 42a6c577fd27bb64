//! Read-only instance queries: `list`, `list_archived`, `describe`, `count`, `tenants`.
//!
//! No lock: directories appear and disappear by rename and metadata is replaced atomically,
//! so a reader sees each instance before or after a change, never in between. Directory
//! entries whose names are not valid ids (temporaries, trash, anything planted by hand) are
//! skipped, and so are instances whose metadata is unreadable (`describe` reports those as
//! corrupt). A tenant that never wrote anything simply has no instances: reads create no
//! directories.

use std::fs;
use std::io;

use super::State;
use super::error::StateError;
use super::id::{InstanceId, TenantName};
use super::instance::{Instance, InstanceMeta};
use super::layout::{Location, TENANTS, TenantPaths};
use super::page::{Page, PageRequest};

impl State {
    /// Live instances sorted by id.
    pub fn list(
        &self,
        tenant: &TenantName,
        page: PageRequest,
    ) -> Result<Page<Instance>, StateError> {
        Ok(page.apply(self.all(tenant, Location::Live)?))
    }

    /// Archived instances sorted by id.
    pub fn list_archived(
        &self,
        tenant: &TenantName,
        page: PageRequest,
    ) -> Result<Page<Instance>, StateError> {
        Ok(page.apply(self.all(tenant, Location::Archived)?))
    }

    /// One instance, live or archived (`archived` says which); `NotFound` otherwise.
    pub fn describe(&self, tenant: &TenantName, id: &InstanceId) -> Result<Instance, StateError> {
        let paths = self.tenant(tenant);
        for location in [Location::Live, Location::Archived] {
            if let Some(meta) = self.read_meta(&paths, tenant, location, id)? {
                return Ok(meta.view(location));
            }
        }
        Err(StateError::not_found(super::IdKind::Instance, id.as_str()))
    }

    /// How many live instances the tenant has (the policies' `usage.instances`; quotas count
    /// again under the tenant lock).
    pub fn count(&self, tenant: &TenantName) -> Result<usize, StateError> {
        let paths = self.tenant(tenant);
        let dir = paths.dir(Location::Live);
        (self.memos.instances).get([dir.as_path()], || self.count_live(&paths))
    }

    /// Every tenant that has state, sorted: for work across tenants such as re-attaching
    /// unfinished jobs after a restart ([`State::running_jobs`]) or retention sweeps.
    pub fn tenants(&self) -> Result<Vec<TenantName>, StateError> {
        let entries = match fs::read_dir(self.root_ambient().join(TENANTS)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StateError::io("list tenants")(e)),
        };
        let mut tenants = Vec::new();
        for entry in entries {
            let entry = entry.map_err(StateError::io("list tenants"))?;
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let name = entry
                .file_name()
                .to_str()
                .and_then(|n| TenantName::parse(n).ok());
            if let (true, Some(name)) = (is_dir, name) {
                tenants.push(name);
            }
        }
        tenants.sort();
        Ok(tenants)
    }

    pub(crate) fn count_live(&self, paths: &TenantPaths) -> Result<usize, StateError> {
        Ok(instance_ids(paths, Location::Live)?.len())
    }

    fn all(&self, tenant: &TenantName, location: Location) -> Result<Vec<Instance>, StateError> {
        let paths = self.tenant(tenant);
        let mut out: Vec<Instance> = instance_ids(&paths, location)?
            .iter()
            .filter_map(|id| self.read_meta(&paths, tenant, location, id).ok().flatten())
            .map(|meta: InstanceMeta| meta.view(location))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// The valid instance ids among the real directories in `instances/` or `archived/`.
pub(crate) fn instance_ids(
    paths: &TenantPaths,
    location: Location,
) -> Result<Vec<InstanceId>, StateError> {
    let entries = match fs::read_dir(paths.dir(location)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StateError::io("list instances")(e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StateError::io("list instances"))?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let id = entry
            .file_name()
            .to_str()
            .and_then(|n| InstanceId::parse(n).ok());
        if let (true, Some(id)) = (is_dir, id) {
            ids.push(id);
        }
    }
    ids.sort();
    Ok(ids)
}
