//! The compile cache: artifacts land under the engine's compatibility hash, named by the
//! module's digest; a corrupt artifact is recompiled, and a directory others can write is never
//! trusted.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hpcgate::policy::{EngineSettings, ModuleSource, PolicyEngine};

/// The compiled modules under the cache `root` (beside them, `functions/` holds the compiled
/// functions, tested in `host/policy/src/cache.rs`).
fn artifacts(root: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if file.path().extension().is_some_and(|e| e == "cwasm") {
                found.push(file.path());
            }
        }
    }
    found
}

fn engine_with_cache(dir: &Path) -> PolicyEngine {
    PolicyEngine::new(EngineSettings {
        cache_dir: Some(dir.to_owned()),
        ..EngineSettings::default()
    })
    .unwrap()
}

#[test]
fn compiled_modules_are_cached_by_digest_and_corruption_is_survived() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let engine = engine_with_cache(&root);
    let module = engine
        .load(&ModuleSource::Stock("tool-filter".into()))
        .unwrap();
    let files = artifacts(&root);
    assert_eq!(files.len(), 1, "{files:?}");
    let hex = module.digest().strip_prefix("sha256:").unwrap();
    assert_eq!(
        files[0].file_name().unwrap().to_str().unwrap(),
        format!("{hex}.cwasm")
    );

    std::fs::write(&files[0], b"not an artifact").unwrap();
    let again = engine_with_cache(&root)
        .load(&ModuleSource::Stock("tool-filter".into()))
        .unwrap();
    assert_eq!(again.digest(), module.digest());
    assert!(
        std::fs::read(&files[0]).unwrap().len() > 1000,
        "the corrupt artifact was replaced"
    );
}

#[test]
fn a_cache_directory_others_can_write_is_not_used() {
    let tmp = tempfile::tempdir().unwrap();
    let open = |path: &Path, mode: u32| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(path)
            .unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let load = |root: &Path| {
        engine_with_cache(root)
            .load(&ModuleSource::Stock("proxy-filter".into()))
            .unwrap();
    };
    // A root others can write, or one below a directory others can write (where the root
    // could be swapped between a check and a load), is neither written nor read...
    let shared = tmp.path().join("shared");
    open(&shared, 0o777);
    load(&shared);
    assert!(artifacts(&shared).is_empty(), "a root others can write");
    let below = tmp.path().join("open/cache");
    open(&below, 0o700);
    open(&tmp.path().join("open"), 0o777);
    load(&below);
    assert!(
        artifacts(&below).is_empty(),
        "a root below a directory others can write"
    );
    // ...while one below a sticky directory (as /tmp) is used.
    let sticky = tmp.path().join("sticky/cache");
    open(&sticky, 0o700);
    open(&tmp.path().join("sticky"), 0o1777);
    load(&sticky);
    let files = artifacts(&sticky);
    assert_eq!(files.len(), 1, "a private root below a sticky directory");
    // Once the hash directory itself is opened to others, nothing in it is trusted.
    let hash_dir = files[0].parent().unwrap();
    std::fs::set_permissions(hash_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(&files[0], b"planted").unwrap();
    load(&sticky);
    assert_eq!(
        std::fs::read(&files[0]).unwrap(),
        b"planted",
        "an untrusted cache is neither read nor written"
    );
}
