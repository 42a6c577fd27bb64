//! Atomic placement of a new file: temp file next to the target, fsync, rename, fsync the dir.
//!
//! Used by `write_file` (replace, create-new), by `copy_path`, and by `move_path` when a move
//! crosses filesystems. Nothing is ever written into an existing inode, and a rename replaces a
//! directory entry without following it, so a symlink swapped in at the target at any moment is
//! replaced, never written through.
//!
//! A temporary file or directory is named with [`TEMP_PREFIX`] and held under an exclusive
//! `flock` for as long as it is being written, so that a gateway killed half-way leaves a
//! leftover that nothing holds: the usage walk deletes such leftovers ([`claim`] says how a
//! sweeper tells them from a live writer's).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt};
use cap_std::fs::{Dir, File, OpenOptions, OpenOptionsExt};
use rustix::fs::{FlockOperation, RenameFlags, flock, renameat_with};
use rustix::io::Errno;

/// How the names of temporary files and directories begin.
pub const TEMP_PREFIX: &str = ".hpcgate-tmp-";

/// Creates `name` in `dir` with the content `fill` writes. With `no_replace`, an existing
/// `name` fails with `AlreadyExists` (atomically where the filesystem has `RENAME_NOREPLACE`;
/// by check-then-rename elsewhere, which can only race with writers inside the instance).
pub(crate) fn place_atomically(
    dir: &Dir,
    name: &str,
    no_replace: bool,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let (tmp_name, mut tmp) = create_temp(dir)?;
    let result = (|| {
        fill(&mut tmp)?;
        tmp.sync_all()?;
        if !no_replace {
            return dir.rename(&tmp_name, dir, name);
        }
        match renameat_with(dir, &tmp_name, dir, name, RenameFlags::NOREPLACE) {
            Err(Errno::INVAL) if dir.symlink_metadata(name).is_err() => {
                dir.rename(&tmp_name, dir, name)
            }
            Err(Errno::INVAL) => Err(io::ErrorKind::AlreadyExists.into()),
            other => other.map_err(io::Error::from),
        }
    })();
    if let Err(e) = result {
        let _ = dir.remove_file(&tmp_name);
        return Err(e);
    }
    // The data is durable already; a failed directory fsync only risks losing the rename on a
    // crash, which is reported rather than hidden.
    sync_dir(dir)
}

/// Fsyncs a directory. cap-std holds directories as `O_PATH` descriptors, on which `fsync` fails
/// with `EBADF`, so `.` is opened for reading first. A directory nobody may read (a job's
/// `chmod 0333`) cannot be opened so: the rename stands, and reporting it as failed would have
/// the caller undo or repeat what was done (a move across filesystems would keep its source).
fn sync_dir(dir: &Dir) -> io::Result<()> {
    let mut opts = OpenOptions::new();
    opts.read(true).maybe_dir(true);
    match dir.open_with(".", &opts) {
        Ok(this) => this.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates a fresh, empty temporary directory in `dir` (for a tree copy that is renamed into
/// place once complete), returned with its name and the claim on it, to be held until it is
/// placed or removed.
pub(crate) fn create_temp_dir(dir: &Dir) -> io::Result<(String, Dir, File)> {
    let mut last = None;
    for _ in 0..8 {
        let tmp_name = temp_name();
        match dir.create_dir(&tmp_name) {
            Ok(()) => {
                let mut opts = OpenOptions::new();
                opts.read(true).maybe_dir(true).follow(FollowSymlinks::No);
                let opened = (dir.open_with(&tmp_name, &opts))
                    .and_then(|held| claim(&held).map(|()| held))
                    .and_then(|held| Ok((dir.open_dir_nofollow(&tmp_name)?, held)));
                return match opened {
                    Ok((tmp, held)) => Ok((tmp_name, tmp, held)),
                    Err(e) => {
                        let _ = dir.remove_dir(&tmp_name);
                        Err(e)
                    }
                };
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}

/// A name no one else picks: pid, a counter and the clock's nanoseconds.
fn temp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{TEMP_PREFIX}{}-{n}-{nanos}", std::process::id())
}

/// Takes the exclusive `flock` that marks a temporary file or directory as being written. The
/// kernel lets it go when the descriptor closes or the process dies, so a sweeper that can
/// take it (`LOCK_NB`) knows no writer holds the temporary. Where the filesystem has no
/// locks, writing goes on unclaimed, and a sweeper, which cannot take a lock there either,
/// leaves every temporary alone.
pub(crate) fn claim(held: &impl std::os::fd::AsFd) -> io::Result<()> {
    match flock(held, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) | Err(Errno::NOLCK | Errno::OPNOTSUPP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates a fresh temporary file next to the target. `O_EXCL` means a name planted in advance
/// (even a symlink) makes the open fail instead of being followed; we then try another name.
fn create_temp(dir: &Dir) -> io::Result<(String, File)> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true).mode(0o644);
    let mut last = None;
    for _ in 0..8 {
        let tmp_name = temp_name();
        match dir.open_with(&tmp_name, &opts) {
            Ok(f) => {
                if let Err(e) = claim(&f) {
                    let _ = dir.remove_file(&tmp_name);
                    return Err(e);
                }
                return Ok((tmp_name, f));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The temporaries in `dir`, by path.
    fn temporaries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        let temporary = |p: &std::path::PathBuf| {
            (p.file_name().unwrap().to_str()).is_some_and(|n| n.starts_with(TEMP_PREFIX))
        };
        entries.filter(temporary).collect()
    }

    /// Whether another descriptor can take the claim on `path` now.
    fn free(path: &std::path::Path) -> bool {
        let other = std::fs::File::open(path).unwrap();
        flock(&other, FlockOperation::NonBlockingLockExclusive).is_ok()
    }

    #[test]
    fn temporaries_are_claimed_while_they_are_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        place_atomically(&dir, "f", false, |_| {
            let written = temporaries(tmp.path());
            assert_eq!(written.len(), 1);
            assert!(!free(&written[0]), "a file being written is claimed");
            Ok(())
        })
        .unwrap();
        assert!(temporaries(tmp.path()).is_empty());
        let (name, _tree, claim) = create_temp_dir(&dir).unwrap();
        assert!(
            !free(&tmp.path().join(&name)),
            "a tree being copied is claimed"
        );
        drop(claim);
        // Another test of this binary that forks a child at this moment holds a copy of the
        // claim's descriptor, and so its lock, until the child execs: a few tries, not one.
        let gone = (0..50).any(|_| {
            let now = free(&tmp.path().join(&name));
            if !now {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            now
        });
        assert!(gone, "a dead writer's claim is gone");
    }
}
