//! Fuzz target for sandbox-view path resolution: `cargo +nightly fuzz run path_resolution`.
//!
//! Any string is parsed; an accepted path must have only normal components. Then the same string
//! is used for `read_file` and `stat_path` against a fixture whose workspace is full of symlinks
//! that point outside (absolute, `../..`, `/proc/self/root`, chains); no read may ever return the
//! outside canary, whatever the input.

#![no_main]

use std::path::Component;
use std::sync::OnceLock;

use hpcgate_executors::files::{
    FileLimits, InstanceRoots, ReadRequest, SandboxPath, StatRequest, read_file, stat_path,
};
use libfuzzer_sys::fuzz_target;

const SECRET: &[u8] = b"FUZZ-OUTSIDE-CANARY";

struct World {
    _tmp: tempfile::TempDir,
    roots: InstanceRoots,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let top = tmp.path().to_path_buf();
        let (ws, out) = (top.join("i/workspace"), top.join("i/output"));
        std::fs::create_dir_all(ws.join("sub")).expect("mkdir");
        std::fs::create_dir_all(&out).expect("mkdir");
        std::fs::write(top.join("secret"), SECRET).expect("write");
        std::fs::write(ws.join("ok"), b"inside").expect("write");
        let links: &[(&str, String)] = &[
            ("abs", top.join("secret").display().to_string()),
            ("up", "../..".into()),
            ("sub/up", "../../..".into()),
            ("root", "/proc/self/root".into()),
            ("c1", "c2".into()),
            ("c2", "up/secret".into()),
            ("loop", "loop".into()),
            ("to_out", "../output".into()),
        ];
        for (link, target) in links {
            std::os::unix::fs::symlink(target, ws.join(link)).expect("symlink");
        }
        let roots = InstanceRoots::ambient(&ws, &out);
        World { _tmp: tmp, roots }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = SandboxPath::parse(raw) {
        for c in p.relative().components() {
            assert!(
                matches!(c, Component::Normal(_) | Component::CurDir),
                "{raw:?}"
            );
        }
    }
    let w = world();
    let req = ReadRequest {
        path: raw.to_owned(),
        offset: 0,
        length: None,
    };
    if let Ok(r) = read_file(&w.roots, &FileLimits::default(), &req) {
        assert!(
            !r.data.windows(SECRET.len()).any(|x| x == SECRET),
            "{raw:?} read outside"
        );
    }
    let _ = stat_path(
        &w.roots,
        &StatRequest {
            path: raw.to_owned(),
        },
    );
});
