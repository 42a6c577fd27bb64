//! Recursive removal for `delete_path`, without recursion in our stack and without following
//! symlinks.
//!
//! A sandboxed job can build (or rename into place) a directory tree many thousands of levels
//! deep. A recursive `remove_dir_all` would then overflow the gateway's stack and abort the
//! process, or exhaust its file descriptors. Here the walk keeps an explicit stack of open
//! directory handles, bounded by [`FileLimits::max_delete_depth`](super::FileLimits): deeper
//! trees are refused with an error, the gateway keeps running. Every directory is opened with
//! `O_NOFOLLOW` relative to its parent's handle, so a subdirectory swapped for a symlink is
//! unlinked as a link, never entered.

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

/// Removes directory `name` in `parent` and everything beneath it, holding at most `max_depth`
/// directory handles open.
pub(crate) fn remove_tree(parent: &Dir, name: &str, max_depth: usize) -> Result<(), TreeError> {
    let mut stack: Vec<(Dir, OsString)> = vec![(parent.open_dir_nofollow(name)?, name.into())];
    while let Some((dir, _)) = stack.last() {
        let mut subdir = None;
        for entry in dir.entries()? {
            let child = entry?.file_name();
            match dir.open_dir_nofollow(&child) {
                Ok(handle) => {
                    subdir = Some((handle, child));
                    break;
                }
                // Not a directory, or a symlink (ELOOP/ENOTDIR under O_NOFOLLOW): unlink it.
                Err(_) => match dir.remove_file_or_symlink(&child) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
                    _ => {}
                },
            }
        }
        match subdir {
            Some(_) if stack.len() >= max_depth => return Err(TreeError::TooDeep),
            Some(next) => stack.push(next),
            None => {
                let (done, done_name) = stack.pop().expect("stack is not empty in the loop");
                drop(done);
                let holder = stack.last().map_or(parent, |(d, _)| d);
                holder.remove_dir(&done_name)?;
            }
        }
    }
    Ok(())
}
