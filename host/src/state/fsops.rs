//! The filesystem primitives every state write goes through: private directories, atomic JSON
//! files (temp + fsync + rename + fsync of the directory), no-follow reads, and renames that
//! never replace an existing target.
//!
//! Nothing here follows a symlink: the state directory is the gateway's, but instance
//! directories contain sandbox-writable subdirectories, so reads use `O_NOFOLLOW` and
//! directory checks use `symlink_metadata`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::StateError;
use super::layout::TRASH_PREFIX;
use super::random::random_base32;

/// Permissions of every directory the state layer creates.
pub(crate) const DIR_MODE: u32 = 0o700;

/// Creates `path` (its parent must exist) with mode 0700; fails if it exists.
pub(crate) fn create_dir_private(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(path)
}

/// Creates `path` and missing parents with mode 0700; an existing real directory is fine,
/// a symlink or a file in its place is an error.
pub(crate) fn ensure_dir_private(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "not a directory (or a symlink)",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => DirBuilder::new()
            .mode(DIR_MODE)
            .recursive(true)
            .create(path),
        Err(e) => Err(e),
    }
}

/// Refuses a state directory another user could change: `root` or `tenants` not this user's
/// or writable by others, or `root` below a directory anyone may write that is not sticky
/// (there anyone could move it away and put theirs in its place). Everything the gateway keeps
/// is reached through it by path: instances, job records, the sockets of jobs' doors.
pub(crate) fn check_private_root(root: &Path, tenants: &Path) -> Result<(), StateError> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| {
        Err(StateError::NotPrivate {
            path: root.display().to_string(),
            why,
        })
    };
    let euid = rustix::process::geteuid().as_raw();
    for dir in [root, tenants] {
        let meta =
            fs::symlink_metadata(dir).map_err(StateError::io("check the state directory"))?;
        if meta.uid() != euid {
            return refuse(format!(
                "(or its `tenants`) belongs to uid {}, not to this gateway's ({euid}): give it to this user or choose another `state_dir`",
                meta.uid()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return refuse(
                "(or its `tenants`) may be written by other users: `chmod go-w` it".to_owned(),
            );
        }
    }
    let resolved = root
        .canonicalize()
        .map_err(StateError::io("check the state directory"))?;
    for above in resolved.ancestors().skip(1) {
        let meta = fs::metadata(above).map_err(StateError::io("check the state directory"))?;
        if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
            return refuse(format!(
                "is below `{}`, which anyone may write and which is not sticky: choose a `state_dir` elsewhere",
                above.display()
            ));
        }
    }
    Ok(())
}

/// Whether `path` is a directory itself (not a symlink to one).
pub(crate) fn is_real_dir(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(meta.is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `value` as pretty JSON to `<dir>/<name>` atomically. The temp name is fixed
/// (`.<name>.tmp`): callers hold the tenant lock, so a leftover can only come from a crash
/// and is simply replaced.
pub(crate) fn write_json_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)?;
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// Reads and parses `path`, never through a symlink; `Ok(None)` if it does not exist.
/// A parse failure is `Err(InvalidData)`.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut file = File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// fsyncs a directory so that renames and creations in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Renames `from` to `to`, failing with `AlreadyExists` if `to` exists (`rename` alone would
/// replace an empty directory). Uses `renameat2(RENAME_NOREPLACE)`; on filesystems without
/// it (some NFS servers) falls back to check-then-rename, which the tenant lock held by every
/// caller makes safe against other gateways using this code.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    match rustix::fs::renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(Errno::EXIST) => Err(io::ErrorKind::AlreadyExists.into()),
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes a directory tree; symlinks inside are removed, never followed. Missing is fine.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        // A directory a job made unreadable or unwritable (`chmod 000`; root is not stopped
        // by that, the gateway's own user is): its owner may open it up again, then retry.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            open_up(path);
            match fs::remove_dir_all(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        }
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Gives the owner full access to every directory in the tree at `path`. Each directory is
/// reached beneath the tree's top through no symlink (`openat2`), and changed through the
/// descriptor held (`/proc/self/fd`), so one swapped for a link while this runs (a job may
/// still write there) leads nowhere else. A stack of its own: a job can build a tree deeper
/// than any thread's. Best effort: what cannot be opened up stays as it is.
fn open_up(path: &Path) {
    open_up_by(path, true);
}

/// [`open_up`], with `openat2` or (`false`, and where it cannot be used) without.
fn open_up_by(path: &Path, openat2: bool) {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;

    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
    let held = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(top) = rustix::fs::open(path, held | OFlags::NOFOLLOW, Mode::empty()) else {
        return;
    };
    let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
    // Beneath the top through no link: `openat2`, or one `O_NOFOLLOW` open a component where
    // it cannot be used (systemd's `RestrictSUIDSGID=`, which the shipped unit sets, answers
    // it `ENOSYS`).
    let first = |rel: &Path| {
        if openat2 {
            rustix::fs::openat2(&top, rel, held, Mode::empty(), beneath)
        } else {
            Err(Errno::NOSYS)
        }
    };
    let open = |rel: &Path| match first(rel) {
        Err(Errno::NOSYS | Errno::PERM) => {
            let mut here = rustix::fs::openat(&top, ".", held, Mode::empty())?;
            for part in rel.components() {
                if let std::path::Component::Normal(name) = part {
                    here = rustix::fs::openat(&here, name, held | OFlags::NOFOLLOW, Mode::empty())?;
                }
            }
            Ok(here)
        }
        other => other,
    };
    let mut stack = vec![PathBuf::from(".")];
    while let Some(rel) = stack.pop() {
        let Ok(dir) = open(&rel) else {
            continue;
        };
        let inode = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let _ = rustix::fs::chmod(inode.as_str(), Mode::from_raw_mode(0o700));
        let listing = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let Ok(readable) = rustix::fs::openat(&dir, ".", listing, Mode::empty()) else {
            continue;
        };
        let Ok(mut entries) = Dir::read_from(&readable) else {
            continue;
        };
        while let Some(Ok(entry)) = entries.read() {
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => rustix::fs::statat(&readable, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
                _ => false,
            };
            if is_dir {
                stack.push(rel.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
            }
        }
    }
}

/// Takes `path` out of every listing at once by renaming it to
/// `<parent>/.trash-<label>-<random>`, which is returned to be removed ([`remove_tree`])
/// once the tenant's lock is let go: a tree can be large, and every call of the tenant waits
/// for the lock. A crash before the removal leaves only trash, which `clean` and job
/// pruning sweep.
pub(crate) fn to_trash(path: &Path, label: &str) -> Result<PathBuf, StateError> {
    let io = StateError::io("delete a directory");
    let parent = path
        .parent()
        .ok_or_else(|| io(io::ErrorKind::InvalidInput.into()))?;
    let trash = parent.join(format!("{TRASH_PREFIX}{label}-{}", random_base32(8)?));
    rename_noreplace(path, &trash).map_err(StateError::io("delete a directory"))?;
    Ok(trash)
}

/// Removes trees [`to_trash`] set aside, all it can; the first failure is the error (the tree
/// stays as trash, gone from every listing, for the next sweep to try again).
pub(crate) fn empty_trash(trash: Vec<PathBuf>) -> Result<(), StateError> {
    let mut first = None;
    for tree in trash {
        if let Err(e) = remove_tree(&tree) {
            first.get_or_insert(StateError::io(
                "delete a directory (kept as trash, removed at the next clean or pruning)",
            )(e));
        }
    }
    first.map_or(Ok(()), Err)
}

/// Opens (creating, mode 0600) a file to `flock`: for reading and writing, which a lock on a
/// network filesystem needs; never through a symbolic link; closed on `exec`.
pub(crate) fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags((OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a job can leave (directories with no permission at all, a link to the outside):
    /// every directory of the tree is opened up for its owner, nothing through the link.
    #[test]
    fn a_tree_a_job_closed_is_opened_up_for_removal() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let top = dir.path().join("w");
        fs::create_dir_all(top.join("a/b/c")).unwrap();
        std::os::unix::fs::symlink(outside.path(), top.join("a/out")).unwrap();
        fs::set_permissions(outside.path(), fs::Permissions::from_mode(0o555)).unwrap();
        for closed in ["a/b/c", "a/b", "a"] {
            fs::set_permissions(top.join(closed), fs::Permissions::from_mode(0o000)).unwrap();
        }
        for openat2 in [true, false] {
            for closed in ["a/b/c", "a/b", "a"] {
                fs::set_permissions(top.join(closed), fs::Permissions::from_mode(0o000)).unwrap();
            }
            open_up_by(&top, openat2);
            for opened in ["", "a", "a/b", "a/b/c"] {
                let mode = fs::metadata(top.join(opened)).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o700, "{opened}, openat2 {openat2}");
            }
        }
        let mode = fs::metadata(outside.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o555, "the link's target is not touched");
        remove_tree(&top).unwrap();
        assert!(!top.exists());
    }

    #[test]
    fn noreplace_refuses_an_empty_target_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        create_dir_private(&a).unwrap();
        create_dir_private(&b).unwrap();
        let err = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(a.is_dir());
    }

    #[test]
    fn read_json_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        write_json_atomic(dir.path(), "x.json", &1u32).unwrap();
        std::os::unix::fs::symlink(dir.path().join("x.json"), dir.path().join("l.json")).unwrap();
        assert_eq!(
            read_json::<u32>(&dir.path().join("x.json")).unwrap(),
            Some(1)
        );
        assert!(read_json::<u32>(&dir.path().join("l.json")).is_err());
        assert_eq!(
            read_json::<u32>(&dir.path().join("none.json")).unwrap(),
            None
        );
    }
}
