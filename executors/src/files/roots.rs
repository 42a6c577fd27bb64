//! An instance's two capability directories, and the one place that opens them from host paths.
//!
//! Everything after [`InstanceRoots::ambient`] works relative to these `Dir`s, and the
//! directories a path names are opened with [`open_dir_beneath`]: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (component-by-component `O_NOFOLLOW` opens where
//! `openat2` is unavailable), so `..`, absolute paths and **every** symbolic link on the way are
//! refused by the kernel at the moment of use, not checked beforehand. There is no window for
//! a swap. Operations then act on the final name relative to that directory, not following a
//! final link either where they would read or list through it.
//!
//! Following no link, not even one that stays inside the instance, is what lets path rules
//! mean what they say: they judge the path as written (`deny_write = ["/workspace/inputs/**"]`),
//! and a job that planted `alias -> inputs` must not make `alias/x` a way into `inputs`. An
//! agent told that a name is a link reads where it points with `stat_path` and uses that path.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use cap_fs_ext::DirExt;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::error::FileError;
use super::path::{Root, SandboxPath};

/// The `/workspace` and `/output` directories of one instance, as capabilities, each opened
/// when a path first names it: a call that touches one root opens only that one.
#[derive(Debug)]
pub struct InstanceRoots {
    workspace: LazyRoot,
    output: LazyRoot,
    /// Links that stay inside a root are followed (see [`InstanceRoots::following_links`]).
    follow_inside: bool,
}

/// One root: its host path, and the capability once opened.
#[derive(Debug)]
struct LazyRoot {
    host: PathBuf,
    dir: OnceLock<Dir>,
}

impl InstanceRoots {
    /// The two roots at these host paths, not yet opened. This is the only function in the
    /// files executor that takes ambient authority; the paths come from the gateway's own
    /// instance records, never from an agent. A root that cannot be opened is an error of the
    /// first operation that needs it ([`FileError::RootUnavailable`], naming `/workspace` or
    /// `/output`, never the host path).
    pub fn ambient(workspace: &Path, output: &Path) -> Self {
        let root = |host: &Path| LazyRoot {
            host: host.to_owned(),
            dir: OnceLock::new(),
        };
        Self {
            workspace: root(workspace),
            output: root(output),
            follow_inside: false,
        }
    }

    /// The same roots, where links that stay inside a root are followed, a path's final one
    /// included (`stat_path` describes what it leads to; the kernel still refuses one that
    /// leaves the root): for a read-only tree no path rule judges, such as an admin's dataset
    /// served over WebDAV, where `latest -> v38` is what its users expect.
    /// An instance's roots never follow one: path rules judge a path as written.
    pub fn following_links(self) -> Self {
        Self {
            follow_inside: true,
            ..self
        }
    }

    /// Whether links inside a root are followed ([`InstanceRoots::following_links`]).
    pub(crate) fn follows_links(&self) -> bool {
        self.follow_inside
    }

    /// The capability directory for `root`, opened on first use.
    pub fn dir(&self, root: Root) -> Result<&Dir, FileError> {
        let lazy = match root {
            Root::Workspace => &self.workspace,
            Root::Output => &self.output,
        };
        if let Some(dir) = lazy.dir.get() {
            return Ok(dir);
        }
        let dir = Dir::open_ambient_dir(&lazy.host, ambient_authority()).map_err(|source| {
            FileError::RootUnavailable {
                root: root.prefix(),
                kind: source.kind(),
                source,
            }
        })?;
        // Two threads may open it at once: one handle is kept, the other closed.
        Ok(lazy.dir.get_or_init(|| dir))
    }

    /// Opens the parent directory of `path` (beneath the root, following no symlink) and
    /// returns it with the final name. Operations on the final name then use this pinned handle,
    /// so a later swap of any ancestor for a symlink cannot redirect them.
    pub(crate) fn open_parent<'p>(
        &self,
        path: &'p SandboxPath,
        action: &'static str,
    ) -> Result<(Dir, &'p str), FileError> {
        let (parent, name) = path.split_last().ok_or_else(|| FileError::IsRoot {
            path: path.to_string(),
            action,
        })?;
        let dir = self.open_within(path, &parent, "open the parent of")?;
        Ok((dir, name))
    }

    /// Opens the directory `path` names (its root for a root), following no symlink.
    pub(crate) fn open_directory(
        &self,
        path: &SandboxPath,
        op: &'static str,
    ) -> Result<Dir, FileError> {
        self.open_within(path, &path.relative(), op)
    }

    /// Creates the directories `path`'s first `depth` components name, where missing, following
    /// no symlink: a link on the way is refused, not created through. Whether the last of them
    /// was created (false if it existed, or for no component).
    pub(crate) fn make_dirs(&self, path: &SandboxPath, depth: usize) -> Result<bool, FileError> {
        let mut dir = self
            .dir(path.root())?
            .try_clone()
            .map_err(|e| FileError::from_io("open", &path.ancestor(0), e))?;
        let mut created = false;
        for (i, name) in path.components().iter().take(depth).enumerate() {
            let here = || path.ancestor(i + 1);
            match dir.create_dir(name) {
                Ok(()) => created = true,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => created = false,
                Err(e) => return Err(FileError::from_io("create directory", &here(), e)),
            }
            dir = open_dir_beneath(&dir, Path::new(name))
                .map_err(|e| FileError::from_io("open directory", &here(), e))?;
        }
        Ok(created)
    }

    /// `rel` (a prefix of `path`'s components) opened beneath `path`'s root as a directory; a
    /// symlink on the way is [`FileError::SymlinkNotFollowed`], naming the link.
    fn open_within(
        &self,
        path: &SandboxPath,
        rel: &Path,
        op: &'static str,
    ) -> Result<Dir, FileError> {
        let root = self.dir(path.root())?;
        if self.follow_inside {
            return (root.open_dir(rel)).map_err(|e| FileError::from_io(op, path, e));
        }
        open_dir_beneath(root, rel).map_err(|e| {
            let error = FileError::from_io(op, path, e);
            match error {
                FileError::SymlinkNotFollowed { .. } => first_link(root, path).unwrap_or(error),
                error => error,
            }
        })
    }
}

/// Opens the directory `rel` beneath `dir` following no symbolic link, final or not, and
/// never leaving `dir`: one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or
/// [`open_dir_walking`] where `openat2` cannot be used. A link on the way is `ELOOP`. The
/// directory is held as cap-std holds its own (`O_PATH`): no read permission is needed to
/// reach what is inside it.
pub(crate) fn open_dir_beneath(dir: &Dir, rel: &Path) -> io::Result<Dir> {
    static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return open_dir_walking(dir, rel);
    }
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
        Ok(fd) => Ok(Dir::from_std_file(std::fs::File::from(fd))),
        // No `openat2` (before Linux 5.6), or a seccomp filter that refuses a call whose
        // arguments it cannot inspect: systemd's `RestrictSUIDSGID=` answers `ENOSYS`, some
        // container runtimes `EPERM` (which `openat2` itself never gives for a directory).
        Err(Errno::NOSYS | Errno::PERM) => {
            NO_OPENAT2.store(true, Ordering::Relaxed);
            open_dir_walking(dir, rel)
        }
        Err(errno) => Err(errno.into()),
    }
}

/// [`open_dir_beneath`] without `openat2`: one `O_NOFOLLOW` open a component, each relative
/// to the last, so no link is followed and nothing outside `dir` is reached.
fn open_dir_walking(dir: &Dir, rel: &Path) -> io::Result<Dir> {
    let mut here = dir.try_clone()?;
    for part in rel.components() {
        match part {
            Component::CurDir => {}
            Component::Normal(name) => {
                here = here.open_dir_nofollow(name).map_err(|e| {
                    // `O_DIRECTORY | O_NOFOLLOW` on a link is `ENOTDIR`: say `ELOOP`, as
                    // `openat2` does.
                    match here.symlink_metadata(name) {
                        Ok(md) if md.file_type().is_symlink() => Errno::LOOP.into(),
                        _ => e,
                    }
                })?
            }
            _ => return Err(io::Error::from(io::ErrorKind::PermissionDenied)),
        }
    }
    Ok(here)
}

/// The first symlink among `path`'s components, as the error that names it; `None` if the
/// walk finds none (it changed since, or the failure was something else).
fn first_link(root: &Dir, path: &SandboxPath) -> Option<FileError> {
    let mut dir = root.try_clone().ok()?;
    for (i, name) in path.components().iter().enumerate() {
        let kind = dir.symlink_metadata(name).ok()?.file_type();
        if kind.is_symlink() {
            return Some(FileError::SymlinkNotFollowed {
                path: path.ancestor(i + 1).to_string(),
            });
        }
        dir = dir.open_dir_nofollow(name).ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of opening a directory refuse every link on the way and reach the same
    /// directories: the walking one is what runs where `openat2` cannot (under systemd's
    /// `RestrictSUIDSGID=`, as the shipped unit sets it).
    #[test]
    fn both_openers_follow_no_link() {
        let top = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(top.path().join("a/b")).unwrap();
        std::fs::write(top.path().join("a/b/f"), b"x").unwrap();
        std::os::unix::fs::symlink("a", top.path().join("l")).unwrap();
        std::os::unix::fs::symlink("/", top.path().join("a/up")).unwrap();
        let root = Dir::open_ambient_dir(top.path(), ambient_authority()).unwrap();
        let errno = |e: io::Error| e.raw_os_error().map(Errno::from_raw_os_error);
        for open in [open_dir_beneath, open_dir_walking] {
            let b = open(&root, Path::new("a/b")).unwrap();
            assert!(b.symlink_metadata("f").unwrap().is_file());
            assert!(open(&root, Path::new("./a")).is_ok());
            for (rel, expected) in [
                ("l", Errno::LOOP),
                ("l/b", Errno::LOOP),
                ("a/up", Errno::LOOP),
                ("a/missing", Errno::NOENT),
                ("a/b/f", Errno::NOTDIR),
            ] {
                let e = open(&root, Path::new(rel)).err().map(errno);
                assert_eq!(e, Some(Some(expected)), "{rel}");
            }
        }
    }
}
