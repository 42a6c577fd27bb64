//! What every test binary of the workspace shares, included by path by the host's integration
//! tests and by the end-to-end and deadline tests: one compile cache, and the JavaScript and
//! Python policies built once. A fresh checkout compiles each policy once for the whole suite
//! (a Python component is about 13 s of Cranelift in a debug host, its componentizer about 8 s),
//! not once per binary or per area, and the binaries may run side by side.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The `XDG_CACHE_HOME` of every gateway and CLI the tests run (created, private). Its compile
/// cache is [`policy_cache`]. Artifacts are keyed by content digest and engine settings and
/// written by rename, so concurrent users share it safely.
pub fn cache_home() -> PathBuf {
    private_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("cache-home"))
}

/// The compile cache a gateway with [`cache_home`] as `XDG_CACHE_HOME` uses, for engines the
/// tests build themselves (created, private).
pub fn policy_cache() -> PathBuf {
    private_dir(cache_home().join("hpcgate/policies"))
}

/// `dir`, created with its parents, only the user's (the compile cache trusts nothing else).
fn private_dir(dir: PathBuf) -> PathBuf {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// A JavaScript or Python policy (`lang` is `js` or `python`), built from `source` (relative to
/// the repository root) by `scripts/componentize.sh` with the pinned componentizers
/// `scripts/setup.sh` installs in the target directory, as `hpcgate policy new` projects build.
/// `keep_wasi` keeps the WASI imports the componentizer would otherwise stub out. Built once and
/// kept under the target directory until the source, the script or the contract changes; one
/// build at a time across the test binaries (a lock file), since the componentizers are not
/// deterministic and a second build would be a new module to compile.
// Test support runs the build script directly, as a developer would (argv only).
#[allow(clippy::disallowed_methods)]
pub fn componentized(lang: &str, source: &str, keep_wasi: bool) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().expect("CARGO_TARGET_TMPDIR is <target>/tmp");
    let inputs = [
        repo.join(source),
        repo.join("scripts/componentize.sh"),
        repo.join("wit/policy.wit"),
    ];
    let stem = Path::new(source)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a source file name");
    let suffix = if keep_wasi { "-wasi" } else { "" };
    let dir = tmp.join("componentized");
    std::fs::create_dir_all(&dir).expect("create the output dir");
    let out = dir.join(format!("{lang}-{stem}{suffix}.wasm"));
    let lock = std::fs::File::create(dir.join(".lock")).expect("create the build lock");
    lock.lock().expect("take the build lock");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = modified(&out).is_some_and(|built| {
        inputs
            .iter()
            .all(|i| modified(i).is_some_and(|changed| changed <= built))
    });
    if !fresh {
        let partial = out.with_extension("partial.wasm");
        let mut command = std::process::Command::new(repo.join("scripts/componentize.sh"));
        command
            .args([lang, inputs[0].to_str().unwrap(), partial.to_str().unwrap()])
            .env("CARGO_TARGET_DIR", target);
        if keep_wasi {
            command.arg("--keep-wasi");
        }
        let output = command.output().expect("run scripts/componentize.sh");
        assert!(
            output.status.success(),
            "scripts/componentize.sh {lang} {source} failed (scripts/setup.sh installs the componentizers): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::rename(&partial, &out).expect("move the component into place");
    }
    out
}
