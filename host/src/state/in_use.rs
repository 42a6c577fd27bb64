//! Leases on a live instance. What runs inside an instance beyond one call — an
//! `hpcgate instance enter` shell, `hpcgate bwrap`, a proxied MCP server — holds a shared
//! `flock(2)` on the instance's `in-use` file for as long as it runs, and `archive` takes that
//! lock exclusively (trying for a second at most) before its rename. So an instance is never
//! moved to the archive (where `clean` later deletes it) under a process still working in it,
//! whichever gateway or command started that process. Jobs are not leased: their records
//! already stop an archive (`archive.rs`).
//!
//! The file moves with the instance. A holder therefore checks, once it has the lock, that the
//! live path still names the file it locked: an archive that renamed the instance between the
//! holder's `open` and its lock is seen, and the lease refused; an archive checks the same
//! once it has the tenant lock. An archive holds the lock from before it takes the tenant lock
//! until its metadata is written (the tenant lock's wait, a rename and a few `fsync`s); a
//! holder waits for it, at most [`MAX_WAIT`].
//!
//! The lock is on an open file description: it is released when the lease drops (the file is
//! closed), when the holding process dies, never inherited across `exec` (the file is opened
//! close-on-exec).

use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::error::StateError;
use super::fsops::open_lock_file;
use super::layout::IN_USE;

/// Held while something runs in a live instance; the instance cannot be archived meanwhile.
#[derive(Debug)]
pub struct InstanceLease {
    _file: File,
}

/// Takes a shared lease on the live instance at `dir` (whose id is `id`), waiting out an
/// archive's rename in progress. `Err(Archived)` if the instance was archived meanwhile.
pub(crate) fn hold(dir: &Path, id: &str) -> Result<InstanceLease, StateError> {
    checked(open_in(dir, id)?, &dir.join(IN_USE), id)
}

/// The in-use file of the live instance at `dir`; `Err(Archived)` if the instance directory is
/// gone (archived, or cleaned, since the caller found it).
fn open_in(dir: &Path, id: &str) -> Result<File, StateError> {
    open_lock_file(&dir.join(IN_USE)).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => StateError::Archived { id: id.to_owned() },
        _ => StateError::io("open the instance's in-use file")(e),
    })
}

/// Tries for `file`'s lock (`shared` or exclusive) for up to `patience`, pausing a little
/// longer each time: whether it was taken.
fn lock_within(file: &File, shared: bool, patience: Duration) -> Result<bool, StateError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let tried = if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match tried {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if started.elapsed() < patience => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => {
                return Err(StateError::io("take the instance's in-use lock")(e));
            }
        }
    }
}

/// The longest a holder waits for the lock: an archive holds it for a rename and a few
/// `fsync`s; nothing else takes it exclusively.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// Waits for a shared lock on `file`, opened at `path` (at most [`MAX_WAIT`]), and keeps it
/// if `path` still names it.
fn checked(file: File, path: &Path, id: &str) -> Result<InstanceLease, StateError> {
    if !lock_within(&file, true, MAX_WAIT)? {
        return Err(StateError::io(
            "take the instance's in-use lock (held for over 10 s, by an archive or a stuck process; retry)",
        )(io::ErrorKind::WouldBlock.into()));
    }
    names(path, &file, id)?;
    Ok(InstanceLease { _file: file })
}

/// `Err(Archived)` unless `path` names the open `file`: the instance it was opened in has moved.
fn names(path: &Path, file: &File, id: &str) -> Result<(), StateError> {
    let held = file
        .metadata()
        .map_err(StateError::io("read the instance's in-use file"))?;
    match std::fs::symlink_metadata(path) {
        Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => Ok(()),
        _ => Err(StateError::Archived { id: id.to_owned() }),
    }
}

/// The in-use lock held exclusively by an archive; released when dropped.
#[derive(Debug)]
pub(crate) struct Exclusive(File);

impl Exclusive {
    /// `Err(Archived)` if the live instance at `dir` is no longer the one whose file is locked.
    pub(crate) fn still_at(&self, dir: &Path, id: &str) -> Result<(), StateError> {
        names(&dir.join(IN_USE), &self.0, id)
    }
}

/// Whether a process other than this one holds a lease on the live instance at `dir`, as far
/// as this machine's lock table (`/proc/locks`) shows, for [`ARCHIVE_PATIENCE`] (a lease just
/// released may still be listed a moment). An archive asks before it stops its own servers in
/// the instance, which would be stopped for nothing. Holders on other machines of a network
/// filesystem are not listed: for them, as when the table cannot be read, the answer is `false`
/// and the exclusive lock decides. `true` while another archive holds the lock exclusively.
pub(crate) fn held_elsewhere(dir: &Path) -> bool {
    // The kernel's own name for the file, as the table prints it (a filesystem's `st_dev` may
    // differ, as btrfs subvolumes' do): read from this descriptor's lock, taken shared for it.
    let Ok(file) = open_lock_file(&dir.join(IN_USE)) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return true,
        Err(TryLockError::Error(_)) => return false,
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let Some(key) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()
        .and_then(|info| lock_key(&info))
    else {
        return false;
    };
    // This process as the table's `/proc` numbers it (a pid namespace may number it otherwise).
    let Some(me) = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
    else {
        return false;
    };
    let started = Instant::now();
    loop {
        let Ok(table) = std::fs::read_to_string("/proc/locks") else {
            return false;
        };
        // `1: FLOCK  ADVISORY  READ 4242 fe:00:10011113 0 EOF`; a waiter's line has `->` second.
        let others = table.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            matches!(fields.as_slice(), [_, "FLOCK", _, _, pid, file, ..] if *file == key && *pid != me)
        });
        if !others || started.elapsed() >= ARCHIVE_PATIENCE {
            return others;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `major:minor:inode` of the lock in a descriptor's `fdinfo`
/// (`lock:\t1: FLOCK  ADVISORY  READ 4242 fe:00:10011113 0 EOF`).
fn lock_key(fdinfo: &str) -> Option<String> {
    let line = fdinfo.lines().find(|l| l.starts_with("lock:"))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        ["lock:", _, "FLOCK", _, _, _, key, ..] => Some((*key).to_owned()),
        _ => None,
    }
}

/// How long `archive` tries for the exclusive lock before it says the instance is in use. A
/// lease just released can outlive its holder by a moment: a process forked at that instant
/// (to start any sandbox) holds a copy of the descriptor until it runs its `exec`.
const ARCHIVE_PATIENCE: Duration = Duration::from_secs(1);

/// For `archive`, before it takes the tenant lock: the instance's in-use lock taken
/// exclusively (hold it across the rename), or `Err(InUse)` if a lease is still held after
/// [`ARCHIVE_PATIENCE`]. `Err(Archived)` if the instance is gone from the live ones.
pub(crate) fn exclusive(dir: &Path, id: &str) -> Result<Exclusive, StateError> {
    let file = open_in(dir, id)?;
    match lock_within(&file, false, ARCHIVE_PATIENCE)? {
        true => Ok(Exclusive(file)),
        false => Err(StateError::InUse { id: id.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn instance() -> (tempfile::TempDir, std::path::PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("instances/run1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir(root.path().join("archived")).unwrap();
        (root, dir)
    }

    #[test]
    fn leases_are_shared_and_keep_the_archive_out_until_all_are_gone() {
        let (_root, dir) = instance();
        let first = hold(&dir, "run1").unwrap();
        let second = hold(&dir, "run1").unwrap();
        let refused = exclusive(&dir, "run1").unwrap_err();
        assert!(matches!(refused, StateError::InUse { .. }), "{refused}");
        drop(first);
        assert!(exclusive(&dir, "run1").is_err(), "one lease still held");
        drop(second);
        let archiving = exclusive(&dir, "run1").unwrap();

        // A holder waits for the archive's rename, and takes its lease after it.
        let (done, finished) = mpsc::channel();
        let waiting = dir.clone();
        std::thread::spawn(move || done.send(hold(&waiting, "run1").map(drop)));
        assert!(finished.recv_timeout(Duration::from_millis(200)).is_err());
        drop(archiving);
        let taken = finished.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(taken.is_ok(), "{taken:?}");
    }

    #[test]
    fn a_holder_waiting_out_an_archive_is_refused_once_it_moved_the_instance() {
        let (root, dir) = instance();
        let archiving = exclusive(&dir, "run1").unwrap();
        // Opened while live, as a holder that then waits for the lock.
        let opened = open_lock_file(&dir.join(IN_USE)).unwrap();
        let (done, finished) = mpsc::channel();
        let path = dir.join(IN_USE);
        std::thread::spawn(move || done.send(checked(opened, &path, "run1").map(drop)));
        assert!(finished.recv_timeout(Duration::from_millis(100)).is_err());
        std::fs::rename(&dir, root.path().join("archived/run1")).unwrap();
        drop(archiving);
        let refused = finished.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(refused, Err(StateError::Archived { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_lease_on_an_instance_archived_meanwhile_is_refused() {
        let (root, dir) = instance();
        // Opened while live; the archive renames the instance before the lock is taken.
        let file = open_lock_file(&dir.join(IN_USE)).unwrap();
        std::fs::rename(&dir, root.path().join("archived/run1")).unwrap();
        let refused = checked(file, &dir.join(IN_USE), "run1").unwrap_err();
        assert!(matches!(refused, StateError::Archived { .. }), "{refused}");
        // Found archived before the open: the same answer.
        let refused = hold(&dir, "run1").unwrap_err();
        assert!(matches!(refused, StateError::Archived { .. }), "{refused}");
    }

    #[test]
    fn an_archive_sees_the_instance_it_locked_was_moved_and_replaced() {
        let (root, dir) = instance();
        let locked = exclusive(&dir, "run1").unwrap();
        locked.still_at(&dir, "run1").unwrap();
        // Another archive moved it, and a new instance of that name was made.
        std::fs::rename(&dir, root.path().join("archived/run1")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        drop(hold(&dir, "run1").unwrap());
        let refused = locked.still_at(&dir, "run1").unwrap_err();
        assert!(matches!(refused, StateError::Archived { .. }), "{refused}");
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // flock(1): another process holding a lease
    fn another_process_s_lease_is_seen_and_this_one_s_is_not() {
        let (_root, dir) = instance();
        let mine = hold(&dir, "run1").unwrap();
        assert!(!held_elsewhere(&dir), "this process's own lease");
        let mut other = std::process::Command::new("flock")
            .args(["--shared", "--close"])
            .arg(dir.join(IN_USE))
            .arg("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run flock(1)");
        let until = Instant::now() + Duration::from_secs(10);
        while !held_elsewhere(&dir) {
            assert!(Instant::now() < until, "flock(1)'s lease was never seen");
        }
        drop(other.stdin.take());
        assert!(other.wait().unwrap().success());
        assert!(!held_elsewhere(&dir), "its lease went with it");
        drop(mine);
        let archiving = exclusive(&dir, "run1").unwrap();
        assert!(held_elsewhere(&dir), "an archive holds it exclusively");
        drop(archiving);
    }

    #[test]
    fn the_kernel_s_name_of_a_lock_is_read_from_fdinfo() {
        let info = "pos:\t0\nflags:\t02100000\nlock:\t1: FLOCK  ADVISORY  READ 32019 fe:00:10011113 0 EOF\n";
        assert_eq!(lock_key(info).as_deref(), Some("fe:00:10011113"));
        assert_eq!(lock_key("pos:\t0\n"), None);
    }

    #[test]
    fn a_symlink_in_place_of_the_file_is_not_followed() {
        let (root, dir) = instance();
        let elsewhere = root.path().join("elsewhere");
        std::fs::write(&elsewhere, "").unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join(IN_USE)).unwrap();
        assert!(hold(&dir, "run1").is_err());
        assert!(exclusive(&dir, "run1").is_err());
    }
}
