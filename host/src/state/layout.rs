//! Where things live under the state directory. The only place that builds state paths.
//!
//! ```text
//! <state_dir>/tenants/<tenant>/
//!     lock                              flock(2) target for read-modify-write sequences
//!     instances/<id>/meta.json          live instance: metadata
//!     instances/<id>/workspace/         bound at /workspace in the sandbox
//!     instances/<id>/output/            bound at /output in the sandbox
//!     instances/<id>/in-use             flock(2) target of leases: what runs in it (`in_use.rs`)
//!     instances/.new-<id>-<random>/     a create in progress (or crashed): never an id
//!     archived/<id>/                    an archived instance, same shape
//!     archived/.trash-<id>-<random>/    an archived instance being deleted by `clean`
//!     jobs/<job-id>/record.json         the job record
//!     jobs/<job-id>/sandbox/            the sandbox executor's job directory (local jobs)
//!     jobs/.running/<job-id>            empty: the job may be unfinished (`running.rs`)
//!     jobs/.new-<job-id>/, jobs/.trash-<job-id>-<random>/   as for instances
//!     tasks/<task-id>.json              an MCP task: which job it follows (`tasks.rs`)
//! ```
//!
//! Every component comes from a validated [`TenantName`], [`InstanceId`] or [`JobId`] or is
//! a constant here, so no path can leave its tenant's directory. Names starting with `.` are
//! the state layer's own temporaries: ids can never start with `.`, so they never collide.

use std::path::{Path, PathBuf};

use super::id::{InstanceId, JobId, TenantName};

pub(crate) const TENANTS: &str = "tenants";
pub(crate) const INSTANCES: &str = "instances";
pub(crate) const ARCHIVED: &str = "archived";
pub(crate) const JOBS: &str = "jobs";
pub(crate) const RUNNING: &str = ".running";
pub(crate) const TASKS: &str = "tasks";
pub(crate) const LOCK: &str = "lock";
pub(crate) const META: &str = "meta.json";
pub(crate) const RECORD: &str = "record.json";
pub(crate) const WORKSPACE: &str = "workspace";
pub(crate) const OUTPUT: &str = "output";
/// An instance's lease file (`in_use.rs`).
pub(crate) const IN_USE: &str = "in-use";
pub(crate) const SANDBOX_JOB_DIR: &str = "sandbox";
/// Prefix of a directory being built by `create` or `new_job`.
pub(crate) const NEW_PREFIX: &str = ".new-";
/// Prefix of a directory being deleted.
pub(crate) const TRASH_PREFIX: &str = ".trash-";

/// Whether an instance lives in `instances/` or `archived/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    Live,
    Archived,
}

/// The paths of one tenant.
#[derive(Debug, Clone)]
pub(crate) struct TenantPaths {
    root: PathBuf,
}

impl TenantPaths {
    pub(crate) fn new(state_dir: &Path, tenant: &TenantName) -> TenantPaths {
        TenantPaths {
            root: state_dir.join(TENANTS).join(tenant.as_str()),
        }
    }

    pub(crate) fn lock_file(&self) -> PathBuf {
        self.root.join(LOCK)
    }

    pub(crate) fn dir(&self, location: Location) -> PathBuf {
        self.root.join(match location {
            Location::Live => INSTANCES,
            Location::Archived => ARCHIVED,
        })
    }

    pub(crate) fn instance(&self, location: Location, id: &InstanceId) -> PathBuf {
        self.dir(location).join(id.as_str())
    }

    pub(crate) fn jobs(&self) -> PathBuf {
        self.root.join(JOBS)
    }

    pub(crate) fn running(&self) -> PathBuf {
        self.jobs().join(RUNNING)
    }

    pub(crate) fn job(&self, id: &JobId) -> PathBuf {
        self.jobs().join(id.as_str())
    }

    pub(crate) fn tasks(&self) -> PathBuf {
        self.root.join(TASKS)
    }
}
