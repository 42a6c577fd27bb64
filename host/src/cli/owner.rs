//! A root-run admin command writes into the gateway's state as the state's owner.
//!
//! The packaged gateway runs as its own user, with its state under `/var/lib/hpcgate`, while an
//! admin runs `sudo hpcgate tenant add …` (the configuration in `/etc` is root's) or `sudo
//! hpcgate audit prune`. As root, such a command would leave in the audit directory files only
//! root may read or write: a new segment, an index, a compressed segment, a checkpoint. The
//! gateway then fails to record every call. Here the thread that writes (and any thread it
//! starts) takes the directory owner's ids for as long as a guard lives: files are created as
//! that user and access is checked as that user. Root keeps its saved ids, and gets them back
//! when the guard is dropped.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::Context as _;
use rustix::process::{Gid, Uid, getegid, geteuid, getgroups};
use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};

/// While it lives, this thread acts as the owner of a directory (see the module doc). It
/// stays on the thread that made it (the ids are the thread's).
pub(crate) struct AsOwner {
    /// The ids and groups to go back to; `None` when nothing was changed.
    previous: Option<(Uid, Gid, Vec<Gid>)>,
    _this_thread: std::marker::PhantomData<*const ()>,
}

/// Acts as the owner of `dir` (or of its nearest existing ancestor) when running as root and
/// that owner is another user; otherwise changes nothing.
pub(crate) fn as_owner_of(dir: &Path) -> anyhow::Result<AsOwner> {
    let unchanged = AsOwner {
        previous: None,
        _this_thread: std::marker::PhantomData,
    };
    if !geteuid().is_root() {
        return Ok(unchanged);
    }
    let Some(meta) = dir.ancestors().find_map(|d| std::fs::metadata(d).ok()) else {
        return Ok(unchanged);
    };
    if meta.uid() == 0 {
        return Ok(unchanged);
    }
    let (uid, gid) = (Uid::from_raw(meta.uid()), Gid::from_raw(meta.gid()));
    let groups = getgroups().context("cannot read this process's groups")?;
    let previous = AsOwner {
        previous: Some((geteuid(), getegid(), groups)),
        _this_thread: std::marker::PhantomData,
    };
    // Root's groups go too: access is checked as the owner's, with its group only. Whatever
    // fails half-way is undone when `previous` drops.
    let switch = || -> std::io::Result<()> {
        set_thread_groups(&[gid])?;
        set_thread_res_gid(None, gid, None)?;
        set_thread_res_uid(None, uid, None)?;
        Ok(())
    };
    switch().with_context(|| {
        format!(
            "cannot act as uid {} (the owner of `{}`), which owns what this command writes there",
            uid.as_raw(),
            dir.display()
        )
    })?;
    Ok(previous)
}

impl Drop for AsOwner {
    fn drop(&mut self) {
        if let Some((uid, gid, groups)) = &self.previous {
            // The saved ids are root's: taking them back cannot fail.
            let _ = set_thread_res_uid(None, *uid, None);
            let _ = set_thread_res_gid(None, *gid, None);
            let _ = set_thread_groups(groups);
        }
    }
}
