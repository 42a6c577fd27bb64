//! A job's start in progress: a lease the starting thread holds from the job's record until
//! the executor's answer is recorded.
//!
//! Between the two, the record has no executor handle, which is also what a crash in between
//! leaves. Start-up reconciliation (any gateway opening the state directory, the CLI's
//! commands included) takes such a record for a crashed start and ends it as `lost`: done to a
//! start another process is making, the job would run untracked. So the starting thread holds
//! an exclusive `flock` on `jobs/<id>/starting`, taken before the record is published, and a
//! reconciliation leaves a job whose lease is held alone. A crashed starter's lease is free
//! (the kernel releases it with the process), and a record from before leases has none.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// The lease file in a job's directory.
pub(crate) const LEASE: &str = "starting";

/// Held while a job starts; released, and its file removed, when dropped.
#[derive(Debug)]
pub struct Starting {
    file: Option<File>,
    path: PathBuf,
}

impl Starting {
    /// Creates and locks the lease in `job_dir` (a directory not yet published).
    pub(crate) fn take(job_dir: &Path) -> io::Result<Starting> {
        let path = job_dir.join(LEASE);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)?;
        flock(&file, FlockOperation::LockExclusive)?;
        Ok(Starting {
            file: Some(file),
            path,
        })
    }

    /// The same lease, at the path its directory was published under.
    pub(crate) fn moved_to(mut self, job_dir: &Path) -> Starting {
        Starting {
            file: self.file.take(),
            path: job_dir.join(LEASE),
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        // Removed first, then released: whoever opened it meanwhile finds it free once this
        // start is recorded, and no later reconciliation looks for it.
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether another thread or process is starting the job in `job_dir` now. Only a lock held
/// says so: a filesystem that cannot lock at all (`ENOLCK`) must not keep every crashed start
/// from being reconciled. Opened for writing, as NFS's emulation of `flock` needs for an
/// exclusive lock.
pub(crate) fn in_progress(job_dir: &Path) -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(job_dir.join(LEASE))
    else {
        return false;
    };
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Err(rustix::io::Errno::WOULDBLOCK) => true,
        Ok(()) => false,
        Err(e) => {
            crate::proxy::log(&format!(
                "cannot tell whether `{}` is held ({e}); taken for a start that ended",
                job_dir.join(LEASE).display()
            ));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_seen_until_it_is_dropped_and_its_file_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!in_progress(dir.path()), "no lease: not in progress");
        let lease = Starting::take(dir.path()).unwrap();
        assert!(in_progress(dir.path()));
        assert!(in_progress(dir.path()), "asking does not take it");
        drop(lease);
        assert!(!in_progress(dir.path()));
        assert!(!dir.path().join(LEASE).exists());
    }
}
