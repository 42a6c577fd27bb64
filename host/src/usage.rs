//! Disk usage for the host-enforced quotas (`max_workspace_bytes`, `max_output_bytes`).
//!
//! [`count`] walks a directory with `openat(O_NOFOLLOW)` and `fstatat(AT_SYMLINK_NOFOLLOW)`
//! relative to each directory's own descriptor, so a symlink (even one swapped in during the
//! walk) is never followed and nothing outside the directory is counted. Only regular files
//! count, by their size (hard links count once per link: over, never under). The walk is
//! bounded: it stops after [`Caps::max_entries`] entries, below [`Caps::max_depth`] levels, or
//! once the total passes [`Caps::stop_above`], and then says the figure is a lower bound.
//!
//! The walk also deletes what a gateway killed in the middle of a write left behind: a
//! temporary file or directory of the executors' atomic placement (named with
//! [`exec::TEMP_PREFIX`]) that no writer holds under its `flock` and that nothing touched for a
//! minute. Such leftovers would otherwise count against the quota until someone found them.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use hpcgate_executors::files as exec;
use rustix::fs::{AtFlags, CWD, Dir, FileType, FlockOperation, Mode, OFlags, Stat};

use crate::state::{InstanceId, State, TenantName};

/// Where the walk stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Directory entries looked at (each costs one `fstatat`).
    pub max_entries: u64,
    /// Directory levels below the root (each holds one descriptor while open).
    pub max_depth: usize,
    /// Stop once this many bytes are counted (e.g. the quota: past it the exact figure does
    /// not matter).
    pub stop_above: Option<u64>,
}

impl Default for Caps {
    /// 200 000 entries (well under a second on a local disk), 64 levels, no byte cap.
    fn default() -> Caps {
        Caps {
            max_entries: 200_000,
            max_depth: 64,
            stop_above: None,
        }
    }
}

/// What a walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    /// Bytes of regular files.
    pub bytes: u64,
    pub files: u64,
    /// Entries looked at (files, directories, symlinks, others).
    pub entries: u64,
    /// False when a cap stopped the walk: then `bytes` is a lower bound.
    pub complete: bool,
    /// Of `bytes`, those of this process's temporary files: writes in flight here, whose room
    /// their holds count already (see [`Count::beside_holds`]).
    pub writing_here: u64,
}

impl Count {
    /// The bytes to count beside `held` bytes of room that this process's writes in flight
    /// hold: their partly written temporary files are inside that room, so counting them as
    /// well would count them twice.
    pub fn beside_holds(&self, held: u64) -> u64 {
        self.bytes.saturating_sub(self.writing_here.min(held))
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.complete {
            write!(f, "{} bytes", self.bytes)
        } else {
            write!(f, "at least {} bytes", self.bytes)
        }
    }
}

/// An instance's two areas, measured once per call that can add bytes to it: reported to the
/// policies as `usage.workspace_bytes` / `usage.output_bytes`, then reused by the host's space
/// quotas instead of a second walk.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    instance: Option<InstanceId>,
    workspace: Option<Count>,
    output: Option<Count>,
}

impl Measured {
    /// Walks both areas of `instance`, a live instance of `tenant`; nothing if it is not one
    /// (the call then fails on the instance). A walk that fails is an error, naming the area: a
    /// policy must not judge the call as if the area held nothing. (A directory a job made
    /// unreadable is not a failure: the count is then a lower bound, see [`walk`].)
    pub(crate) fn of(
        state: &State,
        tenant: &TenantName,
        id: &InstanceId,
    ) -> Result<Measured, String> {
        let Ok(paths) = state.instance_paths_ambient(tenant, id) else {
            return Ok(Measured::default());
        };
        let area = |dir: &Path, name: &str| {
            count(dir, &Caps::default())
                .map_err(|e| format!("{name} of `{id}` could not be measured ({e})"))
        };
        Ok(Measured {
            workspace: Some(area(&paths.workspace, "/workspace")?),
            output: Some(area(&paths.output, "/output")?),
            instance: Some(id.clone()),
        })
    }

    /// Adds the byte counters to a policy's `usage`.
    pub(crate) fn report(&self, usage: &mut BTreeMap<String, u64>) {
        for (key, area) in [
            ("workspace_bytes", self.workspace),
            ("output_bytes", self.output),
        ] {
            if let Some(area) = area {
                usage.insert(key.to_owned(), area.bytes);
            }
        }
    }

    /// The count of `instance`'s workspace (or output), if it is the one measured.
    pub(crate) fn area(&self, instance: &InstanceId, workspace: bool) -> Option<Count> {
        if self.instance.as_ref() != Some(instance) {
            return None;
        }
        if workspace {
            self.workspace
        } else {
            self.output
        }
    }
}

/// Regular-file bytes under `dir` with the default [`Caps`]; past a cap, a lower bound ("at
/// least N"). Use [`count`] to know whether it is exact.
pub fn workspace_bytes(dir: &Path) -> io::Result<u64> {
    Ok(count(dir, &Caps::default())?.bytes)
}

/// Walks `dir` (which must itself be a directory, not a symlink to one) within `caps`.
pub fn count(dir: &Path, caps: &Caps) -> io::Result<Count> {
    let root = open_dir(CWD, dir)?;
    let mut total = Count {
        complete: true,
        ..Count::default()
    };
    walk(root, 0, caps, &mut total)?;
    Ok(total)
}

fn open_dir<Fd: std::os::fd::AsFd, P: rustix::path::Arg>(at: Fd, path: P) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        at,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Adds everything below `fd` to `total`; `Ok(true)` when a cap stopped the whole walk (a
/// directory too deep is only skipped).
fn walk(fd: OwnedFd, depth: usize, caps: &Caps, total: &mut Count) -> io::Result<bool> {
    let mut dir = Dir::read_from(&fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if total.entries >= caps.max_entries || caps.stop_above.is_some_and(|cap| total.bytes > cap)
        {
            total.complete = false;
            return Ok(true);
        }
        total.entries += 1;
        let stat = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Removed since it was listed: nothing to count.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        if name.to_bytes().starts_with(exec::TEMP_PREFIX.as_bytes())
            && swept(&fd, name, &stat, caps.max_depth.saturating_sub(depth))
        {
            continue;
        }
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {
                let size = stat.st_size.max(0) as u64;
                total.files += 1;
                total.bytes = total.bytes.saturating_add(size);
                if written_here(name) {
                    total.writing_here = total.writing_here.saturating_add(size);
                }
            }
            FileType::Directory => {
                if depth + 1 > caps.max_depth {
                    total.complete = false;
                    continue;
                }
                let child = match open_dir(&fd, name) {
                    Ok(child) => child,
                    // Removed, or replaced by a symlink or file since the stat: not followed.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
                        ) =>
                    {
                        continue;
                    }
                    // One a job made unreadable (`chmod 000`): what is inside cannot be
                    // counted, so the count is a lower bound, as past a cap. Failing the walk
                    // would refuse every call that adds bytes, the job that could repair it
                    // included.
                    Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                        total.complete = false;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if walk(child, depth + 1, caps, total)? {
                    return Ok(true);
                }
            }
            _ => {}
        }
    }
    Ok(false)
}

/// How long a temporary must be left untouched before it can be a leftover: its writer takes
/// its `flock` right after making it, so only a moment needs covering.
const LEFTOVER_AFTER_S: i64 = 60;

/// Deletes `name` in `fd` (found as `stat`), a temporary of an atomic placement, if it is a
/// leftover: untouched for [`LEFTOVER_AFTER_S`] and held by no writer (its `flock` can be
/// taken). True when it is gone. Anything unexpected leaves it in place, to be counted.
/// Whether `name` is a temporary file of this process's atomic placement
/// (`<TEMP_PREFIX><pid>-…`).
fn written_here(name: &CStr) -> bool {
    let ours = format!("{}{}-", exec::TEMP_PREFIX, std::process::id());
    name.to_bytes().starts_with(ours.as_bytes())
}

fn swept(fd: &OwnedFd, name: &CStr, stat: &Stat, depth_left: usize) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let now = now.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if now.saturating_sub(stat.st_mtime) < LEFTOVER_AFTER_S {
        return false;
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(held) = rustix::fs::openat(fd, name, flags, Mode::empty()) else {
        return false;
    };
    let free = rustix::fs::flock(&held, FlockOperation::NonBlockingLockExclusive).is_ok();
    let same = rustix::fs::fstat(&held).is_ok_and(|now| {
        (now.st_dev, now.st_ino, now.st_mode) == (stat.st_dev, stat.st_ino, stat.st_mode)
    });
    if !free || !same {
        return false;
    }
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => rustix::fs::unlinkat(fd, name, AtFlags::empty()).is_ok(),
        FileType::Directory => {
            remove_tree(&held, depth_left).is_ok()
                && rustix::fs::unlinkat(fd, name, AtFlags::REMOVEDIR).is_ok()
        }
        _ => false,
    }
}

/// Empties the directory `fd`, never following a symlink, at most `depth_left` levels down.
fn remove_tree(fd: &OwnedFd, depth_left: usize) -> io::Result<()> {
    let mut dir = Dir::read_from(fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let stat = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            if depth_left == 0 {
                return Err(io::Error::other("too deep to remove"));
            }
            remove_tree(&open_dir(fd, name)?, depth_left - 1)?;
            rustix::fs::unlinkat(fd, name, AtFlags::REMOVEDIR)?;
        } else {
            rustix::fs::unlinkat(fd, name, AtFlags::empty())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a"), vec![0u8; 100]).unwrap();
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("d/b"), vec![0u8; 20]).unwrap();
        std::fs::write(root.join("d/e/c"), vec![0u8; 3]).unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        dir
    }

    #[test]
    fn counts_regular_file_bytes_in_every_subdirectory() {
        let dir = tree();
        let c = count(dir.path(), &Caps::default()).unwrap();
        assert_eq!((c.bytes, c.files, c.complete), (123, 4, true));
        assert_eq!(c.to_string(), "123 bytes");
        assert_eq!(workspace_bytes(dir.path()).unwrap(), 123);
    }

    #[test]
    fn symlinks_are_never_followed() {
        let dir = tree();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![0u8; 10_000]).unwrap();
        symlink(outside.path(), dir.path().join("link-dir")).unwrap();
        symlink(outside.path().join("big"), dir.path().join("link-file")).unwrap();
        assert_eq!(workspace_bytes(dir.path()).unwrap(), 123);
        // The root itself must not be a symlink either.
        let err = workspace_bytes(&dir.path().join("link-dir")).unwrap_err();
        // Linux answers `O_DIRECTORY | O_NOFOLLOW` on a symlink with ENOTDIR (ELOOP elsewhere).
        assert!(
            matches!(err.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{err}"
        );
    }

    #[test]
    fn caps_stop_the_walk_and_report_a_lower_bound() {
        let dir = tree();
        let c = count(
            dir.path(),
            &Caps {
                max_entries: 2,
                ..Caps::default()
            },
        )
        .unwrap();
        assert!(!c.complete);
        assert_eq!(c.entries, 2);
        assert!(c.bytes <= 123);
        assert!(c.to_string().starts_with("at least "), "{c}");
        let shallow = count(
            dir.path(),
            &Caps {
                max_depth: 0,
                ..Caps::default()
            },
        )
        .unwrap();
        assert_eq!((shallow.bytes, shallow.complete), (100, false));
        let above = count(
            dir.path(),
            &Caps {
                stop_above: Some(50),
                ..Caps::default()
            },
        )
        .unwrap();
        assert!(above.bytes > 50 && !above.complete, "{above:?}");
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(workspace_bytes(&dir.path().join("nope")).is_err());
    }

    /// Sets `path`'s modification time `seconds` back.
    fn age(path: &Path, seconds: u64) {
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(seconds);
        std::fs::File::open(path)
            .unwrap()
            .set_modified(then)
            .unwrap();
    }

    /// A crash's leftovers are deleted as the walk finds them, and nothing else: not a fresh
    /// temporary, not one a writer holds, not a name without the prefix, not what a symlink in
    /// a leftover directory points at.
    #[test]
    fn the_walk_deletes_only_leftovers_no_writer_holds() {
        let dir = tree();
        let root = dir.path();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"outside").unwrap();
        let temp = |name: &str| root.join(format!("{}{name}", exec::TEMP_PREFIX));
        std::fs::write(temp("left"), vec![0u8; 1000]).unwrap();
        age(&temp("left"), 120);
        std::fs::write(temp("fresh"), vec![0u8; 10]).unwrap();
        std::fs::write(temp("held"), vec![0u8; 10_000]).unwrap();
        age(&temp("held"), 120);
        let writer = std::fs::File::open(temp("held")).unwrap();
        rustix::fs::flock(&writer, FlockOperation::NonBlockingLockExclusive).unwrap();
        std::fs::create_dir_all(temp("tree").join("a/b")).unwrap();
        std::fs::write(temp("tree").join("a/b/c"), vec![0u8; 100_000]).unwrap();
        symlink(outside.path(), temp("tree").join("a/out")).unwrap();
        age(&temp("tree"), 120);
        std::fs::write(root.join("old"), vec![0u8; 7]).unwrap();
        age(&root.join("old"), 120);

        let c = count(root, &Caps::default()).unwrap();
        assert_eq!(c.bytes, 123 + 10 + 10_000 + 7, "{c:?}");
        assert!(!temp("left").exists() && !temp("tree").exists());
        assert!(temp("fresh").exists() && temp("held").exists() && root.join("old").exists());
        assert!(outside.path().join("keep").exists());
        drop(writer);
        // Another test of this binary that forks a child at this moment holds a copy of the
        // writer's descriptor, and so its lock, until the child execs: a few tries, not one.
        let mut c = count(root, &Caps::default()).unwrap();
        for _ in 0..50 {
            if c.bytes == 123 + 10 + 7 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            c = count(root, &Caps::default()).unwrap();
        }
        assert_eq!(c.bytes, 123 + 10 + 7, "a leftover once its writer is gone");
    }
}
