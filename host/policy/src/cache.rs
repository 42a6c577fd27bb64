//! On-disk cache of compiled policy components, keyed by the module's content digest and the
//! engine's compatibility hash (wasmtime version and every setting that affects code).
//!
//! Loading a cached artifact runs native code that was compiled earlier, so the cache is only
//! used from a directory that belongs to the current user and that nobody else can write, with
//! no directory above it that another user could use to swap it ([`trusted_dir`]); a cache
//! that fails that check is ignored, and the module is compiled instead.
//!
//! Artifacts are never rewritten, and some are made per (module, settings) — configured
//! snapshots, about 12 MB for `stock:cedar` — so every edit of a policy's settings, and every
//! upgrade, would leave files behind. A successful load marks its file used (its modification
//! time), and opening the cache deletes, under the cache root, what no engine has used for
//! [`UNUSED_FOR`]: this configuration's artifacts and those of other versions and settings.
//!
//! Beside the artifacts, [`FunctionCache`] keeps Cranelift's compiled functions one by one
//! (wasmtime's incremental compilation), so that a module that shares functions with one
//! compiled before compiles only the rest: a second componentized Python or JavaScript policy
//! (the interpreter is the same code, the policy is data to it), such a policy edited and
//! loaded again.

use std::borrow::Cow;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::component::Component;
use wasmtime::{CacheStore, Engine};

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
        if !trusted_dir(&self.dir) || !private_file(&path) {
            return None;
        }
        // SAFETY: `deserialize_file` trusts the file to be an artifact wasmtime produced. It is:
        // the file sits in a directory only this user can write, on a path nobody else can
        // change between the check and the load (both checked above), named by the
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
        if !trusted_dir(&self.dir) {
            return Ok(());
        }
        let bytes = component.serialize().map_err(std::io::Error::other)?;
        let (tmp, mut file) = tempfile_in(&self.dir)?;
        let written = (file.write_all(&bytes))
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&tmp, self.path(digest)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// The directory under the cache root that holds [`FunctionCache`]'s entries.
const FUNCTIONS: &str = "functions";

/// Cranelift's compiled functions, one file each under `<cache root>/functions`, named by the
/// digest Cranelift computes of the function's code and the target's settings (its version is
/// checked inside each entry). Every engine configuration shares it: the settings that change
/// the code are in the digest. An entry is written once, through a temporary file and a
/// rename, so it is never seen half-written; like the artifacts, entries are read only from a
/// directory and files that are this user's and that nobody else can write (an entry is
/// native code). An entry that cannot be read or written costs only a compile.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
}

impl FunctionCache {
    /// Opens (and creates) the function cache under the cache `root`; `None` when its directory
    /// is not private to this user. Entries not written for [`UNUSED_FOR`] go, checked at most
    /// once a day (the walk is as long as the cache).
    pub(crate) fn open(root: &Path) -> Option<Self> {
        let dir = root.join(FUNCTIONS);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .ok()?;
        if !trusted_dir(&dir) {
            return None;
        }
        prune_functions(&dir, SystemTime::now());
        Some(FunctionCache { dir })
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        self.dir.join(hex::encode(key))
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut file = std::fs::File::open(self.path(key)).ok()?;
        let meta = file.metadata().ok()?;
        if !(meta.is_file() && private(&meta)) {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).ok()?;
        Some(Cow::Owned(bytes))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let write = || -> std::io::Result<()> {
            let (tmp, mut file) = tempfile_in(&self.dir)?;
            let written = file.write_all(&value);
            if written.is_ok() {
                std::fs::rename(&tmp, self.path(key))
            } else {
                let _ = std::fs::remove_file(&tmp);
                written
            }
        };
        write().is_ok()
    }
}

/// Deletes the function cache's entries (and temporary files a crash left) not written for
/// [`UNUSED_FOR`], when the last walk is a day old or more.
fn prune_functions(dir: &Path, now: SystemTime) {
    let walked = dir.join(".pruned");
    let due = std::fs::metadata(&walked)
        .and_then(|m| m.modified())
        .map_or(true, |last| last + Duration::from_secs(86_400) <= now);
    if !due || std::fs::write(&walked, b"").is_err() {
        return;
    }
    let Some(cutoff) = now.checked_sub(UNUSED_FOR) else {
        return;
    };
    for path in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = path.path();
        let old = std::fs::symlink_metadata(&path).is_ok_and(|m| {
            m.is_file() && owned_by_me(&m) && m.modified().is_ok_and(|t| t < cutoff)
        });
        if old && path != walked {
            let _ = std::fs::remove_file(&path);
        }
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
        // The function cache (tens of thousands of entries) prunes itself, once a day.
        if dir.file_name() == Some(FUNCTIONS.as_ref()) || !trusted_dir(&dir) {
            continue;
        }
        for path in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = path.path();
            let unused = std::fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|used| used < cutoff);
            // A module, or a write a crash left unfinished (`tempfile_in`).
            let ours = path.extension().is_some_and(|e| e == "cwasm")
                || (path.file_name()).is_some_and(|n| n.to_string_lossy().starts_with(".tmp-"));
            if unused && ours && private_file(&path) {
                let _ = std::fs::remove_file(&path);
            }
        }
        // Fails unless empty, which is what is wanted.
        let _ = std::fs::remove_dir(&dir);
    }
}

/// A new file in `dir` for a module being written, under a name nobody else holds: created
/// with `O_EXCL` (a name taken, by another thread, process or host sharing the directory, or a
/// symlink, is never opened), named by process, time and a counter, tried again if taken.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut tries = 0;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = dir.join(format!(
            ".tmp-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
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

/// This user's, and nobody else may write it.
fn private(meta: &std::fs::Metadata) -> bool {
    owned_by_me(meta) && meta.permissions().mode() & 0o022 == 0
}

fn private_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && private(&m))
}

/// Whether nobody but this user (and root) can change what `dir` holds or where it leads:
/// `dir` is private, and every directory above it, as written and as resolved, belongs to this
/// user or root and is writable by nobody else unless sticky (as `/tmp` is: there, others can
/// neither rename nor delete what is not theirs). Otherwise another user who can write a
/// directory above could swap the cache's directory between the check of a file and its load.
fn trusted_dir(dir: &Path) -> bool {
    if !private_dir(dir) {
        return false;
    }
    let Ok(resolved) = dir.canonicalize() else {
        return false;
    };
    let above = |path: &Path| {
        (path.ancestors().skip(1))
            .filter(|a| !a.as_os_str().is_empty())
            .all(safe_above)
    };
    dir.is_absolute() && above(dir) && above(&resolved)
}

/// A directory above a trusted one (or a symlink to follow there): this user's or root's, and
/// writable by no one else unless sticky.
fn safe_above(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        let mode = m.permissions().mode();
        let only_ours = mode & 0o022 == 0 || mode & 0o1000 != 0 || m.file_type().is_symlink();
        (m.uid() == 0 || owned_by_me(&m)) && only_ours
    })
}

fn private_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && private(&m))
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

    /// A component whose core module has three functions; `export` names the lifted one, so
    /// two components that differ only there share every compiled function.
    fn component_text(export: &str) -> String {
        format!(
            r#"(component
                (core module $m
                    (func $triple (param i32) (result i32) local.get 0 i32.const 3 i32.mul)
                    (func $plus_one (param i32) (result i32) local.get 0 i32.const 1 i32.add)
                    (func (export "f") (param i32) (result i32)
                        local.get 0 call $triple call $plus_one))
                (core instance $i (instantiate $m))
                (func (export "{export}") (param "x" u32) (result u32)
                    (canon lift (core func $i "f"))))"#
        )
    }

    fn engine_with_functions(root: &Path) -> Engine {
        let mut config = wasmtime::Config::new();
        let functions = FunctionCache::open(root).expect("a private function cache");
        config
            .enable_incremental_compilation(std::sync::Arc::new(functions))
            .unwrap();
        Engine::new(&config).unwrap()
    }

    /// Compiles `text` and calls its export `export` with 13: (13 * 3) + 1.
    fn compile_and_call(engine: &Engine, text: &str, export: &str) -> u32 {
        let component = Component::new(engine, text).unwrap();
        let mut store = wasmtime::Store::new(engine, ());
        let instance = wasmtime::component::Linker::new(engine)
            .instantiate(&mut store, &component)
            .unwrap();
        let f = instance
            .get_typed_func::<(u32,), (u32,)>(&mut store, export)
            .unwrap();
        f.call(&mut store, (13,)).unwrap().0
    }

    /// The function cache's entries and their inodes (a rewrite, through a rename, is a new
    /// inode).
    fn entries(root: &Path) -> Vec<(PathBuf, u64)> {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(FUNCTIONS))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .map(|p| {
                let inode = std::fs::metadata(&p).unwrap().ino();
                (p, inode)
            })
            .collect();
        entries.sort();
        entries
    }

    /// Compiles and calls the component exporting `a` with a function cache under `root`;
    /// returns the entries it wrote.
    fn compiled_once(root: &Path) -> Vec<(PathBuf, u64)> {
        let engine = engine_with_functions(root);
        assert_eq!(compile_and_call(&engine, &component_text("a"), "a"), 40);
        entries(root)
    }

    #[test]
    fn a_module_that_shares_functions_with_an_earlier_one_reuses_them() {
        let root = tempfile::tempdir().unwrap();
        let written = compiled_once(root.path());
        assert!(!written.is_empty(), "compiled functions are kept");
        for (entry, _) in &written {
            let mode = std::fs::metadata(entry).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is private", entry.display());
        }
        // Another module (another export name) in another engine, as another process would.
        let other = engine_with_functions(root.path());
        assert_eq!(compile_and_call(&other, &component_text("b"), "b"), 40);
        // A function compiled again would be written again (a new inode under its name).
        // Which trampolines a compile emits can differ from run to run, so one of its own
        // may be new.
        let after = entries(root.path());
        for entry in &written {
            assert!(
                after.contains(entry),
                "{} was compiled and written again, not taken from the cache",
                entry.0.display()
            );
        }
        assert!(after.len() < 2 * written.len(), "{after:?}");
    }

    /// Entries are native code: one that anyone else could have written is never read, even
    /// when it is a good one, and one that is not a compiled function is compiled again. Either
    /// way the module is right, and the entry is written again, private.
    #[test]
    fn an_entry_that_is_not_private_or_not_a_function_is_compiled_again() {
        let root = tempfile::tempdir().unwrap();
        let written = compiled_once(root.path());
        assert!(written.len() >= 2, "{written:?}");
        for (n, (entry, _)) in written.iter().enumerate() {
            if n % 2 == 0 {
                std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o666)).unwrap();
            } else {
                std::fs::write(entry, b"not a compiled function").unwrap();
            }
        }
        let other = engine_with_functions(root.path());
        assert_eq!(compile_and_call(&other, &component_text("b"), "b"), 40);
        for ((entry, inode), (again, inode_again)) in written.iter().zip(entries(root.path())) {
            assert_eq!(entry, &again);
            assert_ne!(inode, &inode_again, "{} was written again", entry.display());
            let meta = std::fs::metadata(entry).unwrap();
            assert_eq!(meta.permissions().mode() & 0o077, 0, "{}", entry.display());
            assert_ne!(std::fs::read(entry).unwrap(), b"not a compiled function");
        }
    }

    #[test]
    fn a_function_cache_anyone_can_write_is_not_used() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(FUNCTIONS);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(FunctionCache::open(root.path()).is_none());
    }

    #[test]
    fn function_entries_not_written_for_a_month_go_once_a_day() {
        let root = tempfile::tempdir().unwrap();
        let functions = FunctionCache::open(root.path()).unwrap();
        assert!(functions.insert(b"old", b"x".to_vec()));
        assert!(functions.insert(b"new", b"y".to_vec()));
        age(&functions.path(b"old"), 31);
        FunctionCache::open(root.path()).unwrap();
        assert!(
            functions.path(b"old").exists(),
            "the walk ran when the cache was made: not again the same day"
        );
        age(&root.path().join(FUNCTIONS).join(".pruned"), 1);
        FunctionCache::open(root.path()).unwrap();
        assert!(!functions.path(b"old").exists(), "31 days: deleted");
        assert_eq!(functions.get(b"new").as_deref(), Some(&b"y"[..]));
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
        // A write a crash left unfinished, under a name no later write takes again.
        let (left, _) = tempfile_in(&other).unwrap();
        let (next, _) = tempfile_in(&other).unwrap();
        assert_ne!(left, next, "each write has a name of its own");
        std::fs::remove_file(&next).unwrap();
        age(&left, 31);
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
        assert!(!left.exists(), "an unfinished write went too");
        assert!(
            not_ours.join("keep.txt").exists(),
            "only `.cwasm` and unfinished files are deleted"
        );
    }
}
