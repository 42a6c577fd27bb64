//! Recursive removal for `delete_path`, without recursion in our stack and without following
//! symlinks.
//!
//! A sandboxed job can build (or rename into place) a directory tree many thousands of levels
//! deep. A recursive `remove_dir_all` would then overflow the gateway's stack and abort the
//! process, or exhaust its file descriptors. Here the walk keeps an explicit stack of open
//! directory handles, bounded by [`FileLimits::max_delete_depth`](super::FileLimits): deeper
//! trees are refused with an error, the gateway keeps running. Every directory is opened with
//! `O_NOFOLLOW` relative to its parent's handle, so a subdirectory swapped for a symlink is
//! unlinked as a link, never entered. A tree that changes underneath (a concurrent job) can make
//! the removal stop part-way with an error; it never reaches outside the tree.

use std::ffi::OsString;
use std::io;

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;

/// Why a tree could not be removed.
pub(crate) enum TreeError {
    /// The tree has more than `max_depth` levels; nothing below that level was touched.
    TooDeep,
    Io(io::Error),
}

impl From<io::Error> for TreeError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// A directory being emptied: its handle, its name in its parent, subdirectories still to do.
struct Frame {
    dir: Dir,
    name: OsString,
    subdirs: Vec<OsString>,
}

impl Frame {
    /// Opens `name` in `parent` without following it, unlinks every non-directory inside and
    /// records the subdirectories. One pass over the entries per directory.
    fn enter(parent: &Dir, name: OsString) -> io::Result<Self> {
        let dir = parent.open_dir_nofollow(&name)?;
        let mut subdirs = Vec::new();
        for entry in dir.entries()? {
            let child = entry?.file_name();
            match dir.symlink_metadata(&child) {
                Ok(md) if md.is_dir() => subdirs.push(child),
                // Swapped for a directory since the lstat: treat it as one.
                Ok(_) => match dir.remove_file_or_symlink(&child) {
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ISDIR.raw_os_error()) => {
                        subdirs.push(child)
                    }
                    other => ignore_missing(other)?,
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Self { dir, name, subdirs })
    }
}

/// Removes directory `name` in `parent` and everything beneath it, holding at most `max_depth`
/// directory handles open.
pub(crate) fn remove_tree(parent: &Dir, name: &str, max_depth: usize) -> Result<(), TreeError> {
    let mut stack = vec![Frame::enter(parent, name.into())?];
    loop {
        let depth = stack.len();
        let Some(top) = stack.last_mut() else { break };
        if let Some(child) = top.subdirs.pop() {
            if depth >= max_depth {
                return Err(TreeError::TooDeep);
            }
            let holder = &top.dir;
            match Frame::enter(holder, child.clone()) {
                Ok(frame) => stack.push(frame),
                // Swapped for a symlink or a file since the scan (O_NOFOLLOW gives ELOOP or
                // ENOTDIR): unlink whatever the name is now, never enter it.
                Err(e) if is_not_a_dir(&e) => {
                    ignore_missing(holder.remove_file_or_symlink(&child))?
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let done = stack.pop().expect("the loop saw a top frame");
        let holder = stack.last().map_or(parent, |f| &f.dir);
        holder.remove_dir(&done.name)?;
    }
    Ok(())
}

fn is_not_a_dir(e: &io::Error) -> bool {
    use rustix::io::Errno;
    let errno = e.raw_os_error().map(Errno::from_raw_os_error);
    matches!(errno, Some(Errno::LOOP | Errno::NOTDIR))
}

fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
