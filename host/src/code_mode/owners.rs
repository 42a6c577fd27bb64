//! Which gateway serves a door, where several on one host share a state directory: the
//! owner's exclusive `flock(2)` on `<state_dir>/run/owners/<job_id>` (out of every sandbox's
//! reach), taken before the door's directory is made and let go after it is removed, and the
//! sweep that every gateway runs at start and every [`WATCH_STEP`](super::WATCH_STEP).

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{CodeMode, OWNERS_DIR, create_private_dir, lock};
use crate::state::{ExecutorHandle, JobId, JobMode, State};

/// This gateway's hold on a door: the lock file, locked, for as long as the door is open.
pub(super) struct Owner {
    pub(super) path: PathBuf,
    lock: Option<std::fs::File>,
    job_id: JobId,
    /// [`CodeMode::held`].
    held: Arc<Mutex<HashSet<JobId>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        drop(self.lock.take());
        lock(&self.held).remove(&self.job_id);
    }
}

impl CodeMode {
    /// Serves the doors no gateway serves. Each door directory whose lock this gateway can take
    /// (no live gateway holds it: its owner stopped or died) is opened again if its job runs
    /// here (a local job; the sandbox keeps its bind of the directory, the socket is made again
    /// in it), and removed with its lock file if its job has ended. A door another gateway
    /// holds, one being made (its maker holds the lock before it makes the directory), a
    /// starting job's and a running Slurm job's directory are left alone.
    pub(super) fn sweep(&self, state: &State) {
        let Ok(entries) = std::fs::read_dir(&self.base) else {
            return;
        };
        // The locks first, then the records: a record read while its door's lock is held is
        // not a gateway's that is still making or serving that door.
        let mut free = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(job_id) = name.to_str().and_then(|n| JobId::parse(n).ok()) else {
                continue;
            };
            if self.has_token(&job_id) {
                continue;
            }
            if let Ok(Some(owner)) = self.own(&job_id) {
                free.push((job_id, owner));
            }
        }
        self.sweep_owners();
        if free.is_empty() {
            return;
        }
        // Unfinished jobs, `None` for those being started now.
        let mut unfinished = HashMap::new();
        for tenant in state.tenants().unwrap_or_default() {
            for listed in state.running_jobs(&tenant, None).unwrap_or_default() {
                let job_id = listed.job_id.clone();
                unfinished.insert(job_id, crate::jobs::unless_starting(state, listed));
            }
        }
        for (job_id, owner) in free {
            match unfinished.get(&job_id) {
                Some(Some(record))
                    if record.mode == JobMode::Local
                        && record.handle == Some(ExecutorHandle::Local) =>
                {
                    // One that fails (no descriptor left, say) is tried again at the next sweep.
                    self.reopen_door(state, record, owner);
                }
                Some(Some(_)) => {
                    // A Slurm job's token directory: served by whoever holds its token.
                    let _ = std::fs::remove_file(&owner.path);
                }
                Some(None) => {}
                None => {
                    let _ = std::fs::remove_dir_all(self.base.join(job_id.as_str()));
                    let _ = std::fs::remove_file(&owner.path);
                }
            }
        }
    }

    /// Removes the lock files left without a door (a submit that failed before its door was
    /// made, a gateway killed while closing one) that nobody holds and that are a minute old:
    /// a new door's maker creates its lock file, then locks it.
    fn sweep_owners(&self) {
        let Ok(entries) = std::fs::read_dir(self.base.join(OWNERS_DIR)) else {
            return;
        };
        let minute = Duration::from_secs(60);
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(job_id) = name.to_str().and_then(|n| JobId::parse(n).ok()) else {
                continue;
            };
            let old = (entry.metadata().and_then(|m| m.modified()))
                .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > minute));
            if !old || self.base.join(&name).exists() {
                continue;
            }
            if let Ok(Some(owner)) = self.own(&job_id)
                && !self.base.join(&name).exists()
            {
                let _ = std::fs::remove_file(&owner.path);
            }
        }
    }

    /// A hold on `job_id`'s door, or `None` if this gateway holds it already, another gateway
    /// (a process with the lock file open) holds it now, or one let it go and removed its file
    /// meanwhile (closing the door).
    pub(super) fn own(&self, job_id: &JobId) -> io::Result<Option<Owner>> {
        // Never a second descriptor of a lock file this process holds: where `flock` is
        // emulated with POSIX locks (NFS), closing it would let go of the first one's lock.
        if !lock(&self.held).insert(job_id.clone()) {
            return Ok(None);
        }
        match self.lock_file(job_id) {
            Ok(Some((path, file))) => Ok(Some(Owner {
                path,
                lock: Some(file),
                job_id: job_id.clone(),
                held: self.held.clone(),
            })),
            other => {
                lock(&self.held).remove(job_id);
                other.map(|_| None)
            }
        }
    }

    /// `run/owners/<job_id>`, created if need be, and locked, unless another process holds it
    /// or it was replaced before it was locked.
    fn lock_file(&self, job_id: &JobId) -> io::Result<Option<(PathBuf, std::fs::File)>> {
        use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
        let owners = self.base.join(OWNERS_DIR);
        create_private_dir(&self.base).and_then(|()| create_private_dir(&owners))?;
        let path = owners.join(job_id.as_str());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                let (held, named) = (file.metadata()?, std::fs::metadata(&path));
                let same = named.is_ok_and(|n| (n.dev(), n.ino()) == (held.dev(), held.ino()));
                Ok(same.then_some((path, file)))
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
