//! Atomic placement of a new file: temp file next to the target, fsync, rename, fsync the dir.
//!
//! Used by `write_file` (replace, create-new), by `copy_path`, and by `move_path` when a move
//! crosses filesystems. Nothing is ever written into an existing inode, and a rename replaces a
//! directory entry without following it, so a symlink swapped in at the target at any moment is
//! replaced, never written through.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{DirExt, OpenOptionsMaybeDirExt};
use cap_std::fs::{Dir, File, OpenOptions, OpenOptionsExt};
use rustix::fs::{RenameFlags, renameat_with};
use rustix::io::Errno;

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
/// with `EBADF`, so `.` is opened for reading first.
fn sync_dir(dir: &Dir) -> io::Result<()> {
    let mut opts = OpenOptions::new();
    opts.read(true).maybe_dir(true);
    dir.open_with(".", &opts)?.sync_all()
}

/// Creates a fresh, empty temporary directory in `dir` (for a tree copy that is renamed into
/// place once complete), returned with its name.
pub(crate) fn create_temp_dir(dir: &Dir) -> io::Result<(String, Dir)> {
    let mut last = None;
    for _ in 0..8 {
        let tmp_name = temp_name();
        match dir.create_dir(&tmp_name) {
            Ok(()) => return Ok((tmp_name.clone(), dir.open_dir_nofollow(&tmp_name)?)),
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
    format!(".hpcgate-tmp-{}-{n}-{nanos}", std::process::id())
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
            Ok(f) => return Ok((tmp_name, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}
