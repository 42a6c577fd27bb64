//! On-disk cache of compiled policy components, keyed by the module's content digest and the
//! engine's compatibility hash (wasmtime version and every setting that affects code).
//!
//! Loading a cached artifact runs native code that was compiled earlier, so the cache is only
//! used from a directory that belongs to the current user and that nobody else can write; a
//! cache that fails that check is ignored, and the module is compiled instead.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

#[derive(Debug, Clone)]
pub(crate) struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    pub(crate) fn new(root: PathBuf, engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
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
        let component = unsafe { Component::deserialize_file(engine, &path) };
        component.ok()
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
