//! TOCTOU attacks: another thread swaps a file or a directory for a symlink to the outside in a
//! tight loop while the executor reads, writes, creates directories, moves and deletes. Each
//! test runs at least 1,000 calls and asserts that outside content never comes back and that
//! nothing outside the instance was created, modified or removed.

use crate::files_harness as harness;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harness::{Fixture, INSIDE, SECRET, variant};
use hpcgate_executors::files::{
    DeleteRequest, MakeDirectoryRequest, MoveRequest, ReadRequest, WriteMode, WriteRequest,
    delete_path, make_directory, move_path, read_file, write_file,
};
use rustix::fs::{CWD, RenameFlags, renameat_with};

const ITERATIONS: usize = 1_000;
/// How long a race test keeps going past `ITERATIONS` until it has seen both outcomes (on a
/// loaded machine the swapper thread can be starved for a while).
const PATIENCE: Duration = Duration::from_secs(20);

/// Stops the swapper when the attack ends, including by a failed assertion (otherwise the scope
/// would wait for the swapper forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `attack` while a thread keeps replacing `ws/race.txt` by a fresh regular file and by a
/// symlink to `outside_target`, alternately, with atomic renames. Returns the number of swaps.
fn with_file_swapper(fx: &Fixture, outside_target: &Path, attack: impl FnOnce()) -> u64 {
    let stop = AtomicBool::new(false);
    let swaps = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let (race, f, l) = (fx.ws.join("race.txt"), fx.ws.join(".f"), fx.ws.join(".l"));
            while !stop.load(Ordering::Relaxed) {
                std::fs::write(&f, INSIDE).expect("write");
                std::fs::rename(&f, &race).expect("rename file");
                let _ = std::fs::remove_file(&l);
                std::os::unix::fs::symlink(outside_target, &l).expect("symlink");
                std::fs::rename(&l, &race).expect("rename link");
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        });
        let _stop = StopOnDrop(&stop);
        wait_for_first_swap(&swaps);
        attack();
    });
    swaps.load(Ordering::Relaxed)
}

/// Runs `attack` while a thread keeps exchanging `ws/d` (a real directory) and a symlink to
/// `T/outside` with `RENAME_EXCHANGE`, so `d` is alternately inside and outside.
fn with_dir_swapper(fx: &Fixture, attack: impl FnOnce()) -> u64 {
    let (d, alt): (PathBuf, PathBuf) = (fx.ws.join("d"), fx.ws.join("d_alt"));
    std::fs::create_dir(&d).expect("mkdir d");
    std::fs::write(d.join("secret.txt"), INSIDE).expect("write");
    std::os::unix::fs::symlink(fx.top.join("outside"), &alt).expect("symlink");
    let stop = AtomicBool::new(false);
    let swaps = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                renameat_with(CWD, &d, CWD, &alt, RenameFlags::EXCHANGE).expect("exchange");
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        });
        let _stop = StopOnDrop(&stop);
        wait_for_first_swap(&swaps);
        attack();
    });
    swaps.load(Ordering::Relaxed)
}

/// Lets the swapper get going before the attack starts.
fn wait_for_first_swap(swaps: &AtomicU64) {
    let started = Instant::now();
    while swaps.load(Ordering::Relaxed) == 0 && started.elapsed() < PATIENCE {
        std::thread::yield_now();
    }
}

fn contains_secret(data: &[u8]) -> bool {
    data.windows(SECRET.len()).any(|w| w == SECRET)
}

#[test]
fn reads_during_file_symlink_swaps_never_return_outside_content() {
    let fx = Fixture::new();
    let before = fx.outside_snapshot();
    let (mut inside, mut refused) = (0, 0);
    let swaps = with_file_swapper(&fx, &fx.top.join("secret.txt"), || {
        let (mut i, started) = (0, Instant::now());
        // At least ITERATIONS reads, and keep going (bounded) until both outcomes were seen, so
        // the test proves the race really happened.
        while i < ITERATIONS || ((inside == 0 || refused == 0) && started.elapsed() < PATIENCE) {
            i += 1;
            let req = ReadRequest {
                path: "race.txt".into(),
                offset: 0,
                length: None,
            };
            match read_file(&fx.roots, &fx.limits, &req) {
                Ok(r) => {
                    assert!(!contains_secret(&r.data), "read returned outside content");
                    assert_eq!(r.data, INSIDE);
                    inside += 1;
                }
                Err(e) => {
                    assert!(
                        matches!(variant(&e), "SymlinkNotFollowed" | "NotFound"),
                        "{e}"
                    );
                    refused += 1;
                }
            }
        }
    });
    assert!(
        inside > 0 && refused > 0,
        "race not exercised: {inside} reads, {refused} refusals, {swaps} swaps"
    );
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn reads_through_a_swapped_directory_never_return_outside_content() {
    let fx = Fixture::new();
    let before = fx.outside_snapshot();
    let (mut inside, mut refused) = (0, 0);
    with_dir_swapper(&fx, || {
        let (mut i, started) = (0, Instant::now());
        while i < ITERATIONS || ((inside == 0 || refused == 0) && started.elapsed() < PATIENCE) {
            i += 1;
            let req = ReadRequest {
                path: "d/secret.txt".into(),
                offset: 0,
                length: None,
            };
            match read_file(&fx.roots, &fx.limits, &req) {
                Ok(r) => {
                    assert_eq!(r.data, INSIDE, "read returned other content");
                    inside += 1;
                }
                Err(e) => {
                    assert!(
                        matches!(variant(&e), "SymlinkNotFollowed" | "NotFound"),
                        "{e}"
                    );
                    refused += 1;
                }
            }
        }
    });
    assert!(
        inside > 0 && refused > 0,
        "race not exercised: {inside} reads, {refused} refusals"
    );
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn writes_during_file_symlink_swaps_never_touch_the_outside() {
    let fx = Fixture::new();
    let before = fx.outside_snapshot();
    let victim = fx.top.join("victim.txt");
    let (mut written, mut refused) = (0, 0);
    with_file_swapper(&fx, &victim, || {
        let (mut i, started) = (0, Instant::now());
        while i < 2 * ITERATIONS || ((written == 0 || refused == 0) && started.elapsed() < PATIENCE)
        {
            i += 1;
            let mode = if i % 2 == 0 {
                WriteMode::Replace
            } else {
                WriteMode::Append
            };
            let req = WriteRequest {
                path: "race.txt".into(),
                data: b"PAYLOAD".to_vec(),
                mode,
                create_dirs: false,
            };
            match write_file(&fx.roots, &fx.limits, &req) {
                Ok(_) => written += 1,
                Err(e) => {
                    assert!(
                        matches!(variant(&e), "SymlinkNotFollowed" | "NotFound"),
                        "{e} {e:?}"
                    );
                    refused += 1;
                }
            }
        }
    });
    assert!(
        written > 0 && refused > 0,
        "race not exercised: {written} writes, {refused} refusals"
    );
    assert_eq!(std::fs::read(&victim).expect("victim"), SECRET);
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn create_dirs_writes_and_mkdir_through_a_swapped_directory_stay_inside() {
    let fx = Fixture::new();
    let before = fx.outside_snapshot();
    with_dir_swapper(&fx, || {
        for i in 0..ITERATIONS {
            let req = WriteRequest {
                path: format!("d/n{i}/f.txt"),
                data: b"PAYLOAD".to_vec(),
                mode: WriteMode::Replace,
                create_dirs: true,
            };
            if let Err(e) = write_file(&fx.roots, &fx.limits, &req) {
                assert!(
                    matches!(variant(&e), "SymlinkNotFollowed" | "NotFound"),
                    "{e}"
                );
            }
            let req = WriteRequest {
                path: "d/secret.txt".into(),
                ..req
            };
            if let Err(e) = write_file(&fx.roots, &fx.limits, &req) {
                let v = variant(&e);
                assert!(matches!(v, "SymlinkNotFollowed" | "NotFound"), "{e}");
            }
            let req = MakeDirectoryRequest {
                path: format!("d/m{i}/x"),
                parents: true,
            };
            if let Err(e) = make_directory(&fx.roots, &req) {
                assert!(
                    matches!(variant(&e), "SymlinkNotFollowed" | "NotFound"),
                    "{e}"
                );
            }
        }
    });
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn moves_and_deletes_through_a_swapped_directory_stay_inside() {
    let fx = Fixture::new();
    let before = fx.outside_snapshot();
    std::fs::write(fx.ws.join("m.txt"), INSIDE).expect("write");
    with_dir_swapper(&fx, || {
        for _ in 0..ITERATIONS {
            for (from, to) in [
                ("m.txt", "d/m.txt"),
                ("d/m.txt", "m.txt"),
                ("d/secret.txt", "stolen.txt"),
            ] {
                let req = MoveRequest {
                    from: from.into(),
                    to: to.into(),
                    overwrite: false,
                    max_bytes: None,
                };
                if let Err(e) = move_path(&fx.roots, &fx.limits, &req) {
                    let v = variant(&e);
                    assert!(
                        matches!(v, "SymlinkNotFollowed" | "NotFound" | "AlreadyExists"),
                        "{e}"
                    );
                }
            }
            let req = DeleteRequest {
                path: "d/inside.txt".into(),
                recursive: false,
            };
            if let Err(e) = delete_path(&fx.roots, &fx.limits, &req) {
                assert!(
                    matches!(variant(&e), "SymlinkNotFollowed" | "NotFound"),
                    "{e}"
                );
            }
        }
    });
    if let Ok(stolen) = std::fs::read(fx.ws.join("stolen.txt")) {
        assert_eq!(
            stolen, INSIDE,
            "an outside file was moved into the workspace"
        );
    }
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn recursive_deletes_while_a_subdirectory_is_swapped_never_touch_the_outside() {
    let fx = Fixture::new();
    let before = fx.outside_snapshot();
    let (t, sub, alt) = (fx.ws.join("t"), fx.ws.join("t/sub"), fx.ws.join("t/alt"));
    let (t, sub, alt) = (&t, &sub, &alt);
    let stop = AtomicBool::new(false);
    let (mut deleted, mut swaps) = (0, 0u64);
    std::thread::scope(|s| {
        s.spawn(|| {
            // The tree comes and goes under the deletes: swap failures are expected.
            while !stop.load(Ordering::Relaxed) {
                let _ = renameat_with(CWD, sub, CWD, alt, RenameFlags::EXCHANGE);
            }
        });
        let _stop = StopOnDrop(&stop);
        for i in 0..ITERATIONS {
            // Build each tree aside and rename it into place: writing through `t/sub` here
            // could itself follow the swapped-in link (the test must not be the one escaping).
            let stage = fx.ws.join(format!("stage{i}"));
            std::fs::create_dir_all(stage.join("sub")).expect("mkdir");
            std::fs::write(stage.join("sub/secret.txt"), INSIDE).expect("write");
            std::os::unix::fs::symlink(fx.top.join("outside"), stage.join("alt")).expect("ln");
            if std::fs::rename(&stage, t).is_err() {
                let _ = std::fs::remove_dir_all(&stage);
            }
            let req = DeleteRequest {
                path: "t".into(),
                recursive: true,
            };
            match delete_path(&fx.roots, &fx.limits, &req) {
                Ok(_) => deleted += 1,
                Err(e) => {
                    let v = variant(&e);
                    // A tree changing underneath may stop the delete part-way; it never leaves.
                    let expected = ["NotFound", "DirectoryNotEmpty", "NotADirectory", "NotAFile"];
                    assert!(expected.contains(&v), "{e}");
                }
            }
            swaps += 1;
        }
    });
    assert!(deleted > 0, "no delete succeeded in {swaps} attempts");
    let _ = std::fs::remove_dir_all(t);
    assert_eq!(fx.outside_snapshot(), before);
}
