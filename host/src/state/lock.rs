//! `TenantLock`: an exclusive `flock(2)` on `tenants/<tenant>/lock`, held around every
//! read-modify-write sequence of that tenant.
//!
//! Guarantees: between two gateways (threads or processes, on one machine or — where the
//! shared filesystem supports it — several) that use this code on one state directory,
//! creates, updates, archives, unarchives, cleans, job records and refreshes of one tenant
//! are serialised, so "check then act" sequences (does the id exist, are jobs running, is the
//! quota reached) hold until the act is done. Readers take no lock: every file they read is
//! replaced by an atomic rename, so they see the old or the new version, never a torn one.
//! Tenants never block each other.
//!
//! On Linux NFS, `flock` is emulated with POSIX byte-range locks (since 2.6.12), which need
//! the server's lock manager; a shared filesystem without working locks loses the
//! cross-gateway guarantee (not the single-gateway one, which `flock` on a local file keeps).
//! The lock is released when the guard drops (the file is closed), including on panic.

use std::fs::File;

use super::error::StateError;
use super::fsops::{ensure_dir_private, open_lock_file};
use super::layout::{Location, TenantPaths};

/// Held while a tenant's state is being changed.
#[derive(Debug)]
pub(crate) struct TenantLock {
    _file: File,
}

impl TenantLock {
    /// Creates the tenant's directories if needed and waits for the lock.
    pub(crate) fn acquire(paths: &TenantPaths) -> Result<TenantLock, StateError> {
        for dir in [
            paths.dir(Location::Live),
            paths.dir(Location::Archived),
            paths.jobs(),
        ] {
            ensure_dir_private(&dir).map_err(StateError::io("create the tenant's directories"))?;
        }
        let file =
            open_lock_file(&paths.lock_file()).map_err(StateError::io("open the tenant lock"))?;
        file.lock()
            .map_err(StateError::io("take the tenant lock"))?;
        Ok(TenantLock { _file: file })
    }
}
