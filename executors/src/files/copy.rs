//! `copy_path`: copy a regular file or a directory tree within or across `/workspace` and
//! `/output`.
//!
//! The copy is planned first, then made, and only the finished copy gets the destination name:
//!
//! 1. **plan**: the source is examined without following it (a final symlink is refused, not
//!    followed); a directory is walked with `O_NOFOLLOW` opens relative to the source's own
//!    handle, breadth-first, bounded by [`FileLimits::max_walk_entries`] and
//!    [`FileLimits::max_depth`]. A symlink, FIFO, socket or device anywhere in the tree refuses
//!    the whole copy (a job can plant them; copying a link could carry a path the agent never
//!    saw, opening a FIFO could block), as does a hard-linked file unless reads of those are
//!    allowed. The planned bytes are checked against the request's `max_bytes` (the quota's
//!    room) before anything is written.
//! 2. **make**: a file is copied into a fresh temporary file next to the destination
//!    ([`super::atomic`]); a tree into a fresh temporary directory, each source file opened with
//!    `O_NOFOLLOW | O_NONBLOCK` and checked again on its descriptor, each copy cut at the planned
//!    budget (a file that grows meanwhile fails the copy instead of overrunning the quota).
//! 3. **place**: one rename puts the copy at the destination (`RENAME_NOREPLACE` unless
//!    `overwrite`). On any failure the temporary copy is removed: nothing half-copied is ever
//!    visible under the destination name.
//!
//! Only the entries planned are copied, so a directory copied into itself (or a tree growing
//! while it is copied) cannot make the copy run away.

use std::collections::VecDeque;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, File, OpenOptions, OpenOptionsExt, PermissionsExt};
use rustix::fs::{RenameFlags, renameat, renameat_with};
use rustix::io::Errno;

use super::atomic::{create_temp_dir, place_atomically};
use super::entry::{EntryFacts, EntryKind, nonblocking_flags, require_regular};
use super::error::FileError;
use super::limits::FileLimits;
use super::names::escape_os;
use super::path::SandboxPath;
use super::remove_tree::remove_tree;
use super::roots::{InstanceRoots, open_dir_beneath};

/// A request to copy `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRequest {
    /// Sandbox-view source path (a regular file or a directory).
    pub from: String,
    /// Sandbox-view destination path (the copy's name, not a directory to copy into).
    pub to: String,
    /// Replace an existing destination (a file, or an empty directory when copying a
    /// directory).
    pub overwrite: bool,
    /// Most bytes the copy may add (the room left under a quota); `None`: no byte cap.
    pub max_bytes: Option<u64>,
}

/// What was copied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CopyResult {
    /// Canonical sandbox-view source, escaped.
    pub from: String,
    /// Canonical sandbox-view destination, escaped.
    pub to: String,
    pub kind: EntryKind,
    /// Regular files copied.
    pub files: u64,
    /// Directories created (the top one included).
    pub directories: u64,
    /// Bytes copied.
    pub bytes: u64,
}

/// One planned entry of a tree copy, relative to the source directory.
struct Planned {
    rel: PathBuf,
    kind: EntryKind,
    size: u64,
}

/// Copies a file or a directory tree beneath the instance roots.
pub fn copy_path(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &CopyRequest,
) -> Result<CopyResult, FileError> {
    let from = SandboxPath::parse(&req.from)?;
    let to = SandboxPath::parse(&req.to)?;
    to.check_creatable()?;
    let (from_dir, from_name) = roots.open_parent(&from, "copied")?;
    let (to_dir, to_name) = roots.open_parent(&to, "replaced")?;
    let md = from_dir
        .symlink_metadata(from_name)
        .map_err(|e| FileError::from_io("copy", &from, e))?;
    let kind = EntryFacts::from_metadata(&md).kind;
    let done = |files, directories, bytes| CopyResult {
        from: from.to_string(),
        to: to.to_string(),
        kind,
        files,
        directories,
        bytes,
    };
    match kind {
        EntryKind::File => {
            let bytes = copy_file(
                &from_dir,
                from_name,
                &from,
                (&to_dir, to_name, &to),
                limits,
                req,
            )?;
            Ok(done(1, 0, bytes))
        }
        EntryKind::Directory => {
            let source = from_dir
                .open_dir_nofollow(from_name)
                .map_err(|e| FileError::from_io("copy", &from, e))?;
            let plan = plan_tree(&source, &from, limits)?;
            let bytes: u64 = plan.iter().map(|p| p.size).sum();
            check_budget(&from, bytes, req.max_bytes)?;
            let files = plan.iter().filter(|p| p.kind == EntryKind::File).count() as u64;
            let dirs = 1 + plan.len() as u64 - files;
            copy_tree(
                &source,
                &from,
                &plan,
                bytes,
                limits,
                (&to_dir, to_name, &to),
                req,
            )?;
            Ok(done(files, dirs, bytes))
        }
        EntryKind::Symlink => Err(FileError::SymlinkNotFollowed {
            path: from.to_string(),
        }),
        special => Err(FileError::SpecialFile {
            path: from.to_string(),
            kind: special.describe(),
        }),
    }
}

/// The destination: pinned parent, final name, sandbox-view path.
type Dest<'a> = (&'a Dir, &'a str, &'a SandboxPath);

fn check_budget(path: &SandboxPath, bytes: u64, max: Option<u64>) -> Result<(), FileError> {
    match max {
        Some(limit) if bytes > limit => Err(FileError::TooLarge {
            path: path.to_string(),
            size: bytes,
            limit,
            hint: "that is more than the room left under the quota; delete files first",
        }),
        _ => Ok(()),
    }
}

/// Opens a source file without following it, checked on the descriptor.
fn open_source(
    dir: &Dir,
    name: &Path,
    shown: &SandboxPath,
    limits: &FileLimits,
) -> Result<(File, cap_std::fs::Metadata), FileError> {
    let io_err = |e| FileError::from_io("copy", shown, e);
    let mut opts = OpenOptions::new();
    opts.read(true)
        .custom_flags(nonblocking_flags())
        .follow(FollowSymlinks::No);
    // A file deep in a tree: its directory is opened following no link on the way either.
    let parent = match name.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            Some(open_dir_beneath(dir, parent).map_err(io_err)?)
        }
        _ => None,
    };
    let file_name = name.file_name().unwrap_or(name.as_os_str());
    let file = (parent.as_ref().unwrap_or(dir))
        .open_with(file_name, &opts)
        .map_err(io_err)?;
    let md = file.metadata().map_err(io_err)?;
    require_regular(shown, &md, limits.allow_read_hard_linked)?;
    Ok((file, md))
}

/// Copies the `len` bytes of `src` into `dst` (a new, empty file), failing if `src` is not
/// `len` bytes long when done (it grew or shrank since it was measured). Only the data is
/// copied, holes staying holes: a sparse file (`truncate -s 1T`) costs its data, not its
/// apparent size, in time and in disk. Returns `len`, the size the copy has.
pub(crate) fn copy_capped(src: &mut File, dst: &mut File, len: u64) -> io::Result<u64> {
    let changed = |how: &str| io::Error::other(format!("the file {how} while it was copied"));
    let mut at = 0;
    while let Some((start, end)) = data_after(src, at, len)? {
        if end <= start {
            return Err(changed("changed"));
        }
        src.seek(SeekFrom::Start(start))?;
        dst.seek(SeekFrom::Start(start))?;
        let copied = io::copy(&mut (&mut *src).take(end - start), dst)?;
        if copied < end - start {
            return Err(changed("shrank"));
        }
        at = end;
    }
    dst.set_len(len)?;
    match src.metadata()?.len() {
        now if now < len => Err(changed("shrank")),
        now if now > len => Err(changed("grew")),
        _ => Ok(len),
    }
}

/// The next range of data of `src` at or after `at`, cut at `len`; `None` when only a hole is
/// left. A filesystem that cannot tell data from holes has data everywhere.
fn data_after(src: &File, at: u64, len: u64) -> io::Result<Option<(u64, u64)>> {
    use rustix::fs::{SeekFrom as At, seek};
    use rustix::io::Errno;
    if at >= len {
        return Ok(None);
    }
    let start = match seek(src, At::Data(at)) {
        Ok(start) if start >= len => return Ok(None),
        Ok(start) => start,
        // No data past `at`.
        Err(Errno::NXIO) => return Ok(None),
        Err(Errno::INVAL | Errno::OPNOTSUPP) => return Ok(Some((at, len))),
        Err(e) => return Err(e.into()),
    };
    let end = match seek(src, At::Hole(start)) {
        Ok(end) => end.min(len),
        Err(Errno::INVAL | Errno::OPNOTSUPP) => len,
        Err(e) => return Err(e.into()),
    };
    Ok(Some((start, end)))
}

fn copy_file(
    from_dir: &Dir,
    from_name: &str,
    from: &SandboxPath,
    (to_dir, to_name, to): Dest<'_>,
    limits: &FileLimits,
    req: &CopyRequest,
) -> Result<u64, FileError> {
    let (mut src, md) = open_source(from_dir, Path::new(from_name), from, limits)?;
    check_budget(from, md.len(), req.max_bytes)?;
    let mut copied = 0;
    place_atomically(to_dir, to_name, !req.overwrite, |tmp| {
        copied = copy_capped(&mut src, tmp, md.len())?;
        tmp.set_permissions(cap_std::fs::Permissions::from_mode(
            md.permissions().mode() & 0o777,
        ))
    })
    .map_err(|e| placement_error(e, to, req.overwrite))?;
    Ok(copied)
}

/// Why placing the copy failed, in the destination's terms.
fn placement_error(e: io::Error, to: &SandboxPath, overwrite: bool) -> FileError {
    let delete_first = |what: &str| FileError::InvalidRequest {
        path: to.to_string(),
        reason: format!("the destination is {what}; delete it first"),
    };
    match e.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::ISDIR) => delete_first("a directory and the source a file"),
        Some(Errno::NOTDIR) => delete_first("a file and the source a directory"),
        Some(Errno::NOTEMPTY | Errno::EXIST) if overwrite => {
            delete_first("a directory with contents")
        }
        _ if e.kind() == io::ErrorKind::AlreadyExists => FileError::AlreadyExists {
            path: to.to_string(),
        },
        _ => FileError::from_io("copy to", to, e),
    }
}

/// Walks the source tree without following anything, refusing what cannot be copied.
fn plan_tree(
    source: &Dir,
    from: &SandboxPath,
    limits: &FileLimits,
) -> Result<Vec<Planned>, FileError> {
    let shown = |rel: &Path| {
        let (escaped, _) = escape_os(rel.as_os_str());
        format!("{from}/{escaped}")
    };
    let mut plan = Vec::new();
    let mut queue = VecDeque::from([(PathBuf::new(), 0usize)]);
    while let Some((rel, depth)) = queue.pop_front() {
        let dir = if rel.as_os_str().is_empty() {
            source.try_clone()
        } else {
            open_dir_beneath(source, &rel)
        }
        .map_err(|e| FileError::from_io("copy", &shown(&rel), e))?;
        let too_many = || FileError::TreeTooLarge {
            path: from.to_string(),
            reason: format!(
                "the tree has more than {} entries; copy its parts separately",
                limits.max_walk_entries
            ),
        };
        let mut names = Vec::new();
        for entry in dir
            .entries()
            .map_err(|e| FileError::from_io("list", &shown(&rel), e))?
        {
            // A directory of millions of names is refused as it is read, not once all are held.
            if plan.len() + names.len() >= limits.max_walk_entries {
                return Err(too_many());
            }
            names.push(
                entry
                    .map_err(|e| FileError::from_io("list", &shown(&rel), e))?
                    .file_name(),
            );
        }
        names.sort();
        for name in names {
            let child = rel.join(&name);
            let md = dir
                .symlink_metadata(&name)
                .map_err(|e| FileError::from_io("copy", &shown(&child), e))?;
            let facts = EntryFacts::from_metadata(&md);
            match facts.kind {
                EntryKind::File if facts.hard_links > 1 && !limits.allow_read_hard_linked => {
                    return Err(FileError::MultipleHardLinks {
                        path: shown(&child),
                        links: facts.hard_links,
                    });
                }
                EntryKind::File => {}
                EntryKind::Directory if depth + 1 >= limits.max_depth => {
                    return Err(FileError::TreeTooLarge {
                        path: shown(&child),
                        reason: format!(
                            "the tree is deeper than {} levels; copy its parts separately",
                            limits.max_depth
                        ),
                    });
                }
                EntryKind::Directory => queue.push_back((child.clone(), depth + 1)),
                EntryKind::Symlink => {
                    return Err(FileError::SymlinkNotFollowed {
                        path: shown(&child),
                    });
                }
                special => {
                    return Err(FileError::SpecialFile {
                        path: shown(&child),
                        kind: special.describe(),
                    });
                }
            }
            if plan.len() >= limits.max_walk_entries {
                return Err(too_many());
            }
            let size = if facts.kind == EntryKind::File {
                facts.size
            } else {
                0
            };
            plan.push(Planned {
                rel: child,
                kind: facts.kind,
                size,
            });
        }
    }
    Ok(plan)
}

/// Copies the planned tree into a temporary directory next to the destination, then renames
/// it into place; removes the temporary copy on any failure.
fn copy_tree(
    source: &Dir,
    from: &SandboxPath,
    plan: &[Planned],
    budget: u64,
    limits: &FileLimits,
    (to_dir, to_name, to): Dest<'_>,
    req: &CopyRequest,
) -> Result<(), FileError> {
    let (tmp_name, tmp, _claim) =
        create_temp_dir(to_dir).map_err(|e| FileError::from_io("copy to", to, e))?;
    let result = (|| {
        let mut left = budget;
        for entry in plan {
            let shown = || {
                let (escaped, _) = escape_os(entry.rel.as_os_str());
                format!("{from}/{escaped}")
            };
            if entry.kind == EntryKind::Directory {
                tmp.create_dir(&entry.rel)
                    .map_err(|e| FileError::from_io("copy to", to, e))?;
                continue;
            }
            let (mut src, md) = open_source(source, &entry.rel, from, limits)
                .map_err(|e| rename_path(e, &shown()))?;
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(true).mode(0o644);
            let mut dst = tmp
                .open_with(&entry.rel, &opts)
                .map_err(|e| FileError::from_io("copy to", to, e))?;
            let copied = copy_capped(&mut src, &mut dst, md.len().min(left))
                .map_err(|e| FileError::from_io("copy", &shown(), e))?;
            left -= copied;
            dst.set_permissions(cap_std::fs::Permissions::from_mode(
                md.permissions().mode() & 0o777,
            ))
            .and_then(|()| dst.sync_data())
            .map_err(|e| FileError::from_io("copy to", to, e))?;
        }
        let placed = if req.overwrite {
            renameat(to_dir, &tmp_name, to_dir, to_name)
        } else {
            match renameat_with(to_dir, &tmp_name, to_dir, to_name, RenameFlags::NOREPLACE) {
                Err(Errno::INVAL) if to_dir.symlink_metadata(to_name).is_err() => {
                    renameat(to_dir, &tmp_name, to_dir, to_name)
                }
                Err(Errno::INVAL) => Err(Errno::EXIST),
                other => other,
            }
        };
        placed.map_err(|errno| placement_error(errno.into(), to, req.overwrite))
    })();
    if result.is_err() {
        drop(tmp);
        let _ = remove_tree(to_dir, &tmp_name, limits.max_depth + 2);
    }
    result
}

/// An error from opening a planned file, named by that file's path rather than the copy's.
fn rename_path(e: FileError, shown: &str) -> FileError {
    let path = shown.to_owned();
    match e {
        FileError::SymlinkNotFollowed { .. } => FileError::SymlinkNotFollowed { path },
        FileError::SpecialFile { kind, .. } => FileError::SpecialFile { path, kind },
        FileError::MultipleHardLinks { links, .. } => FileError::MultipleHardLinks { path, links },
        FileError::NotAFile { .. } => FileError::NotAFile { path },
        FileError::NotFound { .. } => FileError::NotFound { path },
        other => other,
    }
}
