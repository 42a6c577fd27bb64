//! On-disk cache of compiled policy components, keyed by the module's content digest and the
//! engine's compatibility hash (wasmtime version and every setting that affects code).
//!
//! Loading a cached artifact runs native code that was compiled earlier, so the cache is only
//! used from a directory that belongs to the current user and that nobody else can write; a
//! cache that fails that check is ignored, and the module is compiled instead.
//!
//! Artifacts are never rewritten, and some are made per (module, settings) — configured
//! snapshots, about 12 MB for `stock:cedar` — so every edit of a policy's settings, and every
//! upgrade, would leave files behind. A successful load marks its file used (its modification
//! time), and opening the cache deletes, under the cache root, what no engine has used for
//! [`UNUSED_FOR`]: this configuration's artifacts and those of other versions and settings.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

/// How long an artifact may go unused before opening the cache deletes it.
pub(crate) const UNUSED_FOR: Duration = Duration::from_secs(30 * 86_400);

#[derive(Debug, Clone)]
pub(crate) struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    pub(crate) fn new(root: PathBuf, engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        prune(&root, SystemTime::now());
        CompileCache {
            dir: root.join(format!("{:016x}", hasher.finish())),
        }
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.cwasm"))
    }

    /// The cached component for `digest`, if there is a trustworthy one.
    pub(crate) fn get(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        if !private_dir(&self.dir) || !private_file(&path) {
            return None;
        }
        // SAFETY: `deserialize_file` trusts the file to be an artifact wasmtime produced. It is:
        // the file sits in a directory only this user can write (checked above), named by the
        // digest of the module it was compiled from, and written by `put` below via
        // temp + rename, so a half-written artifact is never visible under its final name.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize_file(engine, &path) }.ok()?;
        // Used now: kept by `prune` for another `UNUSED_FOR`.
        let _ = std::fs::File::open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        Some(component)
    }

    /// Stores a compiled component; failures only cost a recompile next time.
    pub(crate) fn put(&self, digest: &str, component: &Component) {
        let _ = self.try_put(digest, component);
    }

    fn try_put(&self, digest: &str, component: &Component) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        if !private_dir(&self.dir) {
            return Ok(());
        }
        let bytes = component.serialize().map_err(std::io::Error::other)?;
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(&bytes)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, self.path(digest))
    }
}

/// Deletes the artifacts under `root` (one directory per engine configuration) last used
/// before `now - UNUSED_FOR`, and the directories left empty; only in directories and of files
/// that are this user's and private, like everything the cache reads.
fn prune(root: &Path, now: SystemTime) {
    let Some(cutoff) = now.checked_sub(UNUSED_FOR) else {
        return;
    };
    let Ok(configurations) = std::fs::read_dir(root) else {
        return;
    };
    for dir in configurations.flatten().map(|entry| entry.path()) {
        if !private_dir(&dir) {
            continue;
        }
        for path in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = path.path();
            let unused = std::fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|used| used < cutoff);
            if unused && path.extension().is_some_and(|e| e == "cwasm") && private_file(&path) {
                let _ = std::fs::remove_file(&path);
            }
        }
        // Fails unless empty, which is what is wanted.
        let _ = std::fs::remove_dir(&dir);
    }
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(format!(
        ".tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, file))
}

fn owned_by_me(meta: &std::fs::Metadata) -> bool {
    meta.uid() == rustix_uid()
}

fn rustix_uid() -> u32 {
    // The owner of our own /proc entry is our effective uid; avoids a libc dependency.
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

fn private_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && owned_by_me(&m) && m.permissions().mode() & 0o022 == 0)
}

fn private_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.is_file() && owned_by_me(&m) && m.permissions().mode() & 0o022 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path, days: u64) {
        let when = SystemTime::now() - Duration::from_secs(days * 86_400);
        let file = std::fs::File::open(path).unwrap();
        file.set_modified(when).unwrap();
    }

    fn days_unused(path: &Path) -> u64 {
        let used = std::fs::metadata(path).unwrap().modified().unwrap();
        SystemTime::now()
            .duration_since(used)
            .unwrap_or_default()
            .as_secs()
            / 86_400
    }

    #[test]
    fn artifacts_unused_for_a_month_go_when_an_engine_opens_the_cache() {
        let root = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = CompileCache::new(root.path().to_owned(), &engine);
        let component = Component::new(&engine, "(component)").unwrap();
        for digest in ["old", "recent", "read"] {
            cache.put(digest, &component);
        }
        // Another version's or other settings' directory, with an old artifact and a stranger.
        let other = root.path().join("0123456789abcdef");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&other)
            .unwrap();
        let other_old = other.join("x.cwasm");
        std::fs::write(&other_old, b"artifact").unwrap();
        let not_ours = root.path().join("notes");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&not_ours)
            .unwrap();
        std::fs::write(not_ours.join("keep.txt"), b"not an artifact").unwrap();
        age(&not_ours.join("keep.txt"), 400);
        age(&cache.path("old"), 31);
        age(&cache.path("recent"), 29);
        age(&cache.path("read"), 29);
        age(&other_old, 31);
        assert!(cache.get(&engine, "read").is_some());
        assert_eq!(
            days_unused(&cache.path("read")),
            0,
            "a load marks the file used"
        );

        let reopened = CompileCache::new(root.path().to_owned(), &engine);
        assert!(!cache.path("old").exists(), "unused for 31 days: deleted");
        assert!(reopened.get(&engine, "recent").is_some(), "29 days: kept");
        assert!(
            !other.exists(),
            "the other configuration's directory went with its artifact"
        );
        assert!(
            not_ours.join("keep.txt").exists(),
            "only `.cwasm` files are deleted"
        );
    }
}
