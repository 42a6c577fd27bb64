//! Instance metadata as stored (`meta.json`), the [`Instance`] view handed to tools, and the
//! host paths handed to executors ([`InstancePathsAmbient`]).
//!
//! Where an instance directory lives (`instances/` or `archived/`) is the single source of
//! truth for "archived": `archived_at` in the metadata is informational. A crash between the
//! archive rename and the metadata write therefore never leaves a half-archived instance
//! usable, and the metadata's `id` and `tenant` must match where the
//! file was found, or it is reported corrupt rather than trusted.

use std::path::{Path, PathBuf};

use hpcgate_executors::sandbox::{OUTPUT_MOUNT, WORKSPACE_MOUNT};
use serde::{Deserialize, Serialize};

use super::State;
use super::error::{IdKind, StateError};
use super::fsops::{is_real_dir, read_json, write_json_atomic};
use super::id::{InstanceId, TenantName};
use super::in_use::{self, InstanceLease};
use super::layout::{Location, META, OUTPUT, TenantPaths, WORKSPACE};
use crate::time::Timestamp;

/// Format version of `meta.json`.
pub(crate) const META_VERSION: u32 = 1;
/// Longest accepted description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

/// `meta.json`. Unknown fields are ignored so that a newer gateway sharing the state
/// directory does not break an older one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InstanceMeta {
    pub version: u32,
    pub id: InstanceId,
    pub tenant: TenantName,
    pub description: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived_at: Option<Timestamp>,
}

/// An instance as tools see it: no host path, only sandbox-view paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Instance {
    pub id: InstanceId,
    pub description: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived: bool,
    /// When it was archived (`None` for live instances).
    pub archived_at: Option<Timestamp>,
    /// The workspace as the sandbox sees it (`/workspace`).
    pub workspace: &'static str,
    /// The output directory as the sandbox sees it (`/output`).
    pub output: &'static str,
}

/// Host paths of a live instance, for executors only: ambient authority, never put in a
/// tool result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstancePathsAmbient {
    /// Bind this read-write at `/workspace`.
    pub workspace: PathBuf,
    /// Bind this read-write at `/output`.
    pub output: PathBuf,
    /// The instance's directory and id, for [`InstancePathsAmbient::hold`].
    dir: PathBuf,
    id: InstanceId,
}

impl InstancePathsAmbient {
    /// A lease on the instance for something that runs in it beyond one call (a shell, a
    /// proxied server): while it is held the instance cannot be archived. `Err(Archived)` if
    /// it was archived since these paths were read.
    pub fn hold(&self) -> Result<InstanceLease, StateError> {
        in_use::hold(&self.dir, self.id.as_str())
    }
}

impl InstanceMeta {
    pub(crate) fn view(&self, location: Location) -> Instance {
        let archived = location == Location::Archived;
        Instance {
            id: self.id.clone(),
            description: self.description.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            archived,
            archived_at: if archived { self.archived_at } else { None },
            workspace: WORKSPACE_MOUNT,
            output: OUTPUT_MOUNT,
        }
    }

    pub(crate) fn save(&self, dir: &Path) -> Result<(), StateError> {
        write_json_atomic(dir, META, self).map_err(StateError::io("write instance metadata"))
    }
}

/// Checks a description: at most [`MAX_DESCRIPTION_CHARS`], no control characters but
/// newline and tab. An empty description is stored as none.
pub(crate) fn check_description(text: Option<String>) -> Result<Option<String>, StateError> {
    let Some(text) = text else { return Ok(None) };
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(StateError::InvalidDescription {
            rule: "it must be at most 1000 characters long",
        });
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(StateError::InvalidDescription {
            rule: "it must not contain control characters other than newline and tab",
        });
    }
    Ok((!text.is_empty()).then_some(text))
}

impl State {
    /// Reads an instance's metadata where `location` says; `Ok(None)` if there is no such
    /// instance directory there.
    pub(crate) fn read_meta(
        &self,
        paths: &TenantPaths,
        tenant: &TenantName,
        location: Location,
        id: &InstanceId,
    ) -> Result<Option<InstanceMeta>, StateError> {
        let dir = paths.instance(location, id);
        if !is_real_dir(&dir).map_err(StateError::io("read an instance directory"))? {
            return Ok(None);
        }
        let corrupt = || StateError::Corrupt {
            kind: IdKind::Instance,
            id: id.to_string(),
            what: "metadata",
        };
        let path = dir.join(META);
        let meta: InstanceMeta = match self.memos.meta.get([path.as_path()], || read_json(&path)) {
            Ok(Some(meta)) => meta,
            Ok(None) => return Err(corrupt()),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Err(corrupt()),
            Err(e) => return Err(StateError::io("read instance metadata")(e)),
        };
        if &meta.id != id || &meta.tenant != tenant {
            return Err(corrupt());
        }
        StateError::check_format(
            IdKind::Instance,
            id.as_str(),
            "metadata",
            meta.version,
            META_VERSION,
        )?;
        Ok(Some(meta))
    }

    /// The metadata of a live instance: `NotFound`, or `Archived` if only an archived one
    /// of that id exists (same tenant, so that says nothing about other tenants).
    pub(crate) fn live_meta(
        &self,
        paths: &TenantPaths,
        tenant: &TenantName,
        id: &InstanceId,
    ) -> Result<InstanceMeta, StateError> {
        if let Some(meta) = self.read_meta(paths, tenant, Location::Live, id)? {
            return Ok(meta);
        }
        if is_real_dir(&paths.instance(Location::Archived, id))
            .map_err(StateError::io("read an instance directory"))?
        {
            return Err(StateError::Archived { id: id.to_string() });
        }
        Err(StateError::not_found(IdKind::Instance, id.as_str()))
    }

    /// Host paths of a live instance's workspace and output, for executors. The name says
    /// ambient: these are host paths with the gateway's authority; never return them from a
    /// tool.
    pub fn instance_paths_ambient(
        &self,
        tenant: &TenantName,
        id: &InstanceId,
    ) -> Result<InstancePathsAmbient, StateError> {
        let paths = self.tenant(tenant);
        self.live_meta(&paths, tenant, id)?;
        let dir = paths.instance(Location::Live, id);
        Ok(InstancePathsAmbient {
            workspace: dir.join(WORKSPACE),
            output: dir.join(OUTPUT),
            dir,
            id: id.clone(),
        })
    }
}
