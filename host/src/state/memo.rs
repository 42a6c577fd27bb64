//! Values derived from files and directories, reused while those are unchanged on disk.
//!
//! Every call reads the tenant's counters (instances, running jobs) and its instance's
//! metadata; deriving them takes a directory scan or a file read and a parse each time, while
//! one `statx` per path tells whether anything could have changed. A value is reused only
//! while the *stamp* of each path it was derived from — device, inode, size, and the
//! modification and change times — is what it was.
//!
//! Timestamps are coarse (a clock tick, up to 10 ms), so two changes within one tick can leave
//! the same stamp: a value derived between them would look current after the second. Hence a
//! value is stored only if it was derived at least [`SETTLE`] after its stamp was first seen
//! (by this process's monotonic clock, so skew with a file server does not matter): any other
//! change in that tick happened before the derivation and is in the value, and any later
//! change gives another stamp. Until then each call derives the value afresh, as it would
//! without the memo. A path that cannot be stamped is never memoised.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a stamp must have been seen before a value derived under it is kept.
const SETTLE: Duration = Duration::from_secs(1);

/// At most this many values are kept; past it the memo starts over.
const CAPACITY: usize = 4096;

/// What `lstat` says of a path, enough to see that it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    fn of_all<const N: usize>(paths: [&Path; N]) -> Option<[Stamp; N]> {
        let mut stamps = [None; N];
        for (stamp, path) in stamps.iter_mut().zip(paths) {
            *stamp = Some(Stamp::of(path)?);
        }
        Some(stamps.map(|s| s.expect("every path was stamped")))
    }
}

struct Slot<V, const N: usize> {
    stamps: [Stamp; N],
    first_seen: Instant,
    value: Option<V>,
}

/// Values of type `V`, each derived from the `N` paths it is keyed by.
pub(crate) struct Memo<V, const N: usize> {
    slots: Mutex<HashMap<[PathBuf; N], Slot<V, N>>>,
}

impl<V: Clone, const N: usize> Memo<V, N> {
    pub(crate) fn new() -> Self {
        Memo {
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The value derived from `paths`: the kept one if none of them changed since, else
    /// `derive()`'s (kept when settled, see the module). Errors are never kept.
    pub(crate) fn get<E>(
        &self,
        paths: [&Path; N],
        derive: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let Some(stamps) = Stamp::of_all(paths) else {
            return derive();
        };
        let key = paths.map(Path::to_path_buf);
        let settled = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get(&key) {
                Some(slot) if slot.stamps == stamps => {
                    if let Some(value) = &slot.value {
                        return Ok(value.clone());
                    }
                    slot.first_seen.elapsed() >= SETTLE
                }
                _ => {
                    if slots.len() >= CAPACITY {
                        slots.clear();
                    }
                    let slot = Slot {
                        stamps,
                        first_seen: Instant::now(),
                        value: None,
                    };
                    slots.insert(key.clone(), slot);
                    false
                }
            }
        };
        let value = derive()?;
        // Kept only if nothing changed while it was derived.
        if settled && Stamp::of_all(paths) == Some(stamps) {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = slots.get_mut(&key).filter(|slot| slot.stamps == stamps) {
                slot.value = Some(value.clone());
            }
        }
        Ok(value)
    }
}

impl<V, const N: usize> std::fmt::Debug for Memo<V, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::fs;

    use super::*;

    /// Makes the stamps seen so far count as settled (tests cannot wait a second per step).
    fn settle_now<V, const N: usize>(memo: &Memo<V, N>) {
        let mut slots = memo.slots.lock().unwrap();
        for slot in slots.values_mut() {
            slot.first_seen -= SETTLE;
        }
    }

    fn entries(dir: &Path, derived: &Cell<u32>) -> std::io::Result<usize> {
        derived.set(derived.get() + 1);
        Ok(fs::read_dir(dir)?.count())
    }

    #[test]
    fn a_value_is_reused_only_once_settled_and_until_its_path_changes() {
        let dir = tempfile::tempdir().unwrap();
        let memo = Memo::<usize, 1>::new();
        let derived = Cell::new(0);
        let count = || {
            memo.get([dir.path()], || entries(dir.path(), &derived))
                .unwrap()
        };

        assert_eq!(count(), 0);
        assert_eq!(count(), 0);
        assert_eq!(derived.get(), 2, "a fresh stamp is not trusted");

        settle_now(&memo);
        assert_eq!(count(), 0);
        assert_eq!(count(), 0);
        assert_eq!(count(), 0);
        assert_eq!(derived.get(), 3, "settled: derived once more, then reused");

        fs::create_dir(dir.path().join("a")).unwrap();
        assert_eq!(count(), 1, "a new entry changes the directory's stamp");
        fs::remove_dir(dir.path().join("a")).unwrap();
        fs::create_dir(dir.path().join("b")).unwrap();
        fs::create_dir(dir.path().join("c")).unwrap();
        assert_eq!(count(), 2);
        assert_eq!(derived.get(), 5);
    }

    #[test]
    fn a_replaced_file_of_the_same_size_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("meta.json");
        fs::write(&file, "1").unwrap();
        let memo = Memo::<String, 1>::new();
        let read = || {
            memo.get([file.as_path()], || fs::read_to_string(&file))
                .unwrap()
        };
        assert_eq!(read(), "1");
        settle_now(&memo);
        assert_eq!(read(), "1");
        // Replaced by rename within the same clock tick, same size: the inode differs.
        let tmp = dir.path().join("tmp");
        fs::write(&tmp, "2").unwrap();
        fs::rename(&tmp, &file).unwrap();
        assert_eq!(read(), "2");
    }

    #[test]
    fn a_change_while_deriving_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let memo = Memo::<usize, 1>::new();
        let derived = Cell::new(0);
        memo.get([dir.path()], || entries(dir.path(), &derived))
            .unwrap();
        settle_now(&memo);
        let racing = memo
            .get([dir.path()], || {
                let n = entries(dir.path(), &derived);
                fs::create_dir(dir.path().join("late")).unwrap();
                n
            })
            .unwrap();
        assert_eq!(racing, 0, "the value as derived goes back");
        assert_eq!(
            memo.get([dir.path()], || entries(dir.path(), &derived))
                .unwrap(),
            1,
            "but it was not kept"
        );
    }

    #[test]
    fn a_missing_path_and_errors_are_never_kept() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let memo = Memo::<usize, 1>::new();
        let derived = Cell::new(0);
        for _ in 0..3 {
            assert!(
                memo.get([gone.as_path()], || entries(&gone, &derived))
                    .is_err()
            );
        }
        assert_eq!(derived.get(), 3);
        assert!(memo.slots.lock().unwrap().is_empty());
    }

    #[test]
    fn every_path_of_a_key_counts() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let memo = Memo::<usize, 2>::new();
        let both = || {
            memo.get([a.path(), b.path()], || {
                Ok::<_, std::io::Error>(
                    fs::read_dir(a.path())?.count() + fs::read_dir(b.path())?.count(),
                )
            })
            .unwrap()
        };
        assert_eq!(both(), 0);
        settle_now(&memo);
        assert_eq!(both(), 0);
        fs::create_dir(b.path().join("x")).unwrap();
        assert_eq!(both(), 1);
    }
}
