//! The gateway's state: instances (live and archived) and job records, per tenant, under one
//! state directory that several gateways may share.
//!
//! Synchronous and typed; no MCP types and no executor calls (the gateway observes executors
//! and hands the result to [`State::refresh`]), so every operation is testable on a temp dir.
//! Call it from the blocking bridge.
//!
//! Invariants, stated as absences:
//! - **no operation looks outside its tenant's directory**: every function takes the caller's
//!   [`TenantName`], and every path component is a validated id or a constant
//!   (`layout.rs`); another tenant's objects are "not found", with the same message;
//! - **no unvalidated identifier reaches a path**: entry points take [`TenantName`],
//!   [`InstanceId`], [`JobId`], constructible only through their checks ([`id`]);
//! - **no result contains a host path**: [`Instance`] and [`JobRecord`] carry sandbox-view
//!   paths only; host paths come from the `*_ambient` accessors, for executors;
//! - **no torn or half-done state is visible**: metadata and records are replaced atomically,
//!   instances appear, archive, unarchive and disappear by a single rename, and leftovers of
//!   a crash are named so that they can never be mistaken for an instance (`clean.rs`);
//! - **no archive happens while a job of the instance may run, or while something holds a
//!   lease on it** (a shell, a proxied server), and the checks come before anything in the
//!   state directory changes (`archive.rs`, `in_use.rs`); the caller's own servers in the
//!   instance are stopped by a hook between the two checks, unless this machine's lock table
//!   already shows another process's lease;
//! - **no check-then-act race between gateways**: read-modify-write sequences hold the
//!   tenant's `flock` (`lock.rs`).

mod archive;
mod census;
mod clean;
mod create;
mod error;
mod fsops;
pub mod id;
mod in_use;
mod instance;
mod job;
mod jobs;
mod layout;
mod lock;
mod memo;
mod observe;
mod page;
mod prune;
mod query;
mod random;
mod refresh;
mod running;
mod starting;
mod tasks;
mod update;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::time::Timestamp;
pub use create::NewInstance;
pub use error::{IdKind, StateError};
pub use id::{InstanceId, JobId, TenantName};
pub use in_use::InstanceLease;
pub use instance::{Instance, InstancePathsAmbient, MAX_DESCRIPTION_CHARS};
pub use job::{ExecutorHandle, JobMode, JobPhase, JobRecord, JobStatus, Resources};
pub use jobs::NewJob;
pub use observe::Observation;
pub use page::{DEFAULT_LIMIT, MAX_LIMIT, Page, PageRequest};
pub use refresh::Refreshed;
pub use starting::Starting;
pub use tasks::{TaskId, TaskRecord};

use fsops::ensure_dir_private;
use instance::InstanceMeta;
use layout::{TENANTS, TenantPaths};
use memo::Memo;

/// The state directory. Cheap to clone (clones share their memos); holds no open files.
#[derive(Debug, Clone)]
pub struct State {
    root: PathBuf,
    memos: Arc<Memos>,
}

/// What every call reads, kept while unchanged on disk (`memo.rs`).
#[derive(Debug)]
struct Memos {
    /// A tenant's live instances, by its `instances/` directory.
    instances: Memo<usize, 1>,
    /// A tenant's unfinished jobs, by its running index and its `jobs/` directory (a job is
    /// published there after its marker, and unmarked once final).
    running_jobs: Memo<usize, 2>,
    /// Instance metadata, by its `meta.json`.
    meta: Memo<Option<InstanceMeta>, 1>,
}

impl State {
    /// Opens (creating, mode 0700) the state directory and its `tenants/` directory, refusing
    /// one another user could change ([`fsops::check_private_root`]).
    pub fn open(state_dir: impl Into<PathBuf>) -> Result<State, StateError> {
        let root = state_dir.into();
        ensure_dir_private(&root.join(TENANTS))
            .map_err(StateError::io("create the state directory"))?;
        fsops::check_private_root(&root, &root.join(TENANTS))?;
        let memos = Arc::new(Memos {
            instances: Memo::new(),
            running_jobs: Memo::new(),
            meta: Memo::new(),
        });
        Ok(State { root, memos })
    }

    /// The state directory itself (for the gateway's own use, e.g. the audit log beside it).
    pub fn root_ambient(&self) -> &Path {
        &self.root
    }

    pub(crate) fn tenant(&self, tenant: &TenantName) -> TenantPaths {
        TenantPaths::new(&self.root, tenant)
    }
}
