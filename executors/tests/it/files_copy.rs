//! `copy_path`: what it copies (files, trees, modes, overwrite rules, the quota's room) and
//! what it refuses, as a table of escapes and planted objects (symlinks, hard links, FIFOs,
//! devices, sockets anywhere in the tree). Every refusal leaves nothing behind: no destination,
//! no temporary copy, nothing outside the instance changed.

use crate::files_harness as harness;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use harness::{Fixture, INSIDE, SECRET, variant};
use hpcgate_executors::files::{CopyRequest, EntryKind, FileError, copy_path};

fn copy(fx: &Fixture, from: &str, to: &str, overwrite: bool) -> Result<(), FileError> {
    copy_capped(fx, from, to, overwrite, None)
}

fn copy_capped(
    fx: &Fixture,
    from: &str,
    to: &str,
    overwrite: bool,
    max_bytes: Option<u64>,
) -> Result<(), FileError> {
    let req = CopyRequest {
        from: from.into(),
        to: to.into(),
        overwrite,
        max_bytes,
    };
    copy_path(&fx.roots, &fx.limits, &req).map(|_| ())
}

/// Names in a directory (`.hpcgate-tmp-*` leftovers included), sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_file_is_copied_with_its_mode_and_the_source_kept() {
    let fx = Fixture::new();
    fs::set_permissions(fx.ws.join("inside.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    let req = CopyRequest {
        from: "inside.txt".into(),
        to: "/output/copy.txt".into(),
        overwrite: false,
        max_bytes: Some(1 << 20),
    };
    let done = copy_path(&fx.roots, &fx.limits, &req).expect("copy");
    assert_eq!(
        (done.kind, done.files, done.bytes),
        (EntryKind::File, 1, INSIDE.len() as u64)
    );
    assert_eq!(done.to, "/output/copy.txt");
    assert_eq!(fs::read(fx.out.join("copy.txt")).unwrap(), INSIDE);
    assert_eq!(fs::read(fx.ws.join("inside.txt")).unwrap(), INSIDE);
    let mode = fs::metadata(fx.out.join("copy.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
}

#[test]
fn a_tree_is_copied_whole_and_only_once_complete() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.ws.join("sub/a/b")).unwrap();
    fs::write(fx.ws.join("sub/a/b/c.txt"), b"ccc").unwrap();
    fs::create_dir(fx.ws.join("sub/empty")).unwrap();
    let req = CopyRequest {
        from: "sub".into(),
        to: "sub2".into(),
        overwrite: false,
        max_bytes: None,
    };
    let done = copy_path(&fx.roots, &fx.limits, &req).expect("copy");
    assert_eq!(
        (done.kind, done.files, done.directories),
        (EntryKind::Directory, 2, 4)
    );
    assert_eq!(done.bytes, INSIDE.len() as u64 + 3);
    assert_eq!(fs::read(fx.ws.join("sub2/deep.txt")).unwrap(), INSIDE);
    assert_eq!(fs::read(fx.ws.join("sub2/a/b/c.txt")).unwrap(), b"ccc");
    assert!(fx.ws.join("sub2/empty").is_dir());
    // Copying a directory into itself copies what was there when the copy was planned.
    copy(&fx, "sub", "sub/inner", false).expect("copy into itself");
    assert!(fx.ws.join("sub/inner/a/b/c.txt").is_file());
    assert!(!fx.ws.join("sub/inner/inner").exists());
    assert!(names(&fx.ws).iter().all(|n| !n.starts_with(".hpcgate-tmp")));
}

#[test]
fn an_existing_destination_needs_overwrite_and_a_full_directory_is_never_replaced() {
    let fx = Fixture::new();
    fs::write(fx.ws.join("old.txt"), b"old").unwrap();
    let e = copy(&fx, "inside.txt", "old.txt", false).unwrap_err();
    assert_eq!(variant(&e), "AlreadyExists", "{e}");
    assert_eq!(fs::read(fx.ws.join("old.txt")).unwrap(), b"old");
    copy(&fx, "inside.txt", "old.txt", true).expect("overwrite a file");
    assert_eq!(fs::read(fx.ws.join("old.txt")).unwrap(), INSIDE);

    let e = copy(&fx, "sub", "/workspace/sub", true).unwrap_err();
    assert_eq!(variant(&e), "InvalidRequest", "{e}");
    fs::create_dir(fx.ws.join("emptydir")).unwrap();
    let e = copy(&fx, "sub", "emptydir", false).unwrap_err();
    assert_eq!(variant(&e), "AlreadyExists", "{e}");
    copy(&fx, "sub", "emptydir", true).expect("overwrite an empty directory");
    assert!(fx.ws.join("emptydir/deep.txt").is_file());
    let e = copy(&fx, "inside.txt", "emptydir", true).unwrap_err();
    assert_eq!(variant(&e), "InvalidRequest", "{e}");
    let e = copy(&fx, "sub", "old.txt", true).unwrap_err();
    assert_eq!(variant(&e), "InvalidRequest", "{e}");
    assert_eq!(fs::read(fx.ws.join("old.txt")).unwrap(), INSIDE);
    assert!(names(&fx.ws).iter().all(|n| !n.starts_with(".hpcgate-tmp")));
}

#[test]
fn the_quota_room_is_checked_before_anything_is_written() {
    let fx = Fixture::new();
    let room = INSIDE.len() as u64 - 1;
    let e = copy_capped(&fx, "inside.txt", "a.txt", false, Some(room)).unwrap_err();
    assert_eq!(variant(&e), "TooLarge", "{e}");
    let e = copy_capped(&fx, "sub", "s2", false, Some(room)).unwrap_err();
    assert_eq!(variant(&e), "TooLarge", "{e}");
    assert_eq!(names(&fx.ws), ["inside.txt", "sub"]);
    copy_capped(&fx, "sub", "s2", false, Some(room + 1)).expect("exactly the room");
}

/// Objects a job could plant in a tree to be copied: each refuses the whole copy, names the
/// object, and leaves no destination or temporary copy behind.
#[test]
fn planted_objects_refuse_the_copy_and_leave_nothing_behind() {
    use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
    type Plant = fn(&Fixture);
    let rows: Vec<(&str, Plant, &str, &str)> = vec![
        (
            "symlink out",
            |fx| fx.symlink(fx.top.join("secret.txt"), "sub/abs"),
            "sub",
            "SymlinkNotFollowed",
        ),
        (
            "symlink in",
            |fx| fx.symlink("../inside.txt", "sub/rel"),
            "sub",
            "SymlinkNotFollowed",
        ),
        (
            "dir link out",
            |fx| fx.symlink(fx.top.join("outside"), "sub/d"),
            "sub",
            "SymlinkNotFollowed",
        ),
        (
            "final symlink",
            |fx| fx.symlink(fx.top.join("secret.txt"), "abs"),
            "abs",
            "SymlinkNotFollowed",
        ),
        (
            "final dir link",
            |fx| fx.symlink(fx.top.join("outside"), "out"),
            "out",
            "SymlinkNotFollowed",
        ),
        (
            "through a dir link",
            |fx| fx.symlink(fx.top.join("outside"), "out"),
            "out/secret.txt",
            "SymlinkNotFollowed",
        ),
        (
            "hard link",
            |fx| fs::hard_link(fx.top.join("secret.txt"), fx.ws.join("sub/hl")).unwrap(),
            "sub",
            "MultipleHardLinks",
        ),
        (
            "final hard link",
            |fx| fs::hard_link(fx.top.join("secret.txt"), fx.ws.join("hl")).unwrap(),
            "hl",
            "MultipleHardLinks",
        ),
        (
            "fifo",
            |fx| {
                mknodat(
                    CWD,
                    fx.ws.join("sub/fifo"),
                    FileType::Fifo,
                    Mode::from(0o666),
                    0,
                )
                .unwrap()
            },
            "sub",
            "SpecialFile",
        ),
        (
            "final fifo",
            |fx| {
                mknodat(
                    CWD,
                    fx.ws.join("fifo"),
                    FileType::Fifo,
                    Mode::from(0o666),
                    0,
                )
                .unwrap()
            },
            "fifo",
            "SpecialFile",
        ),
        (
            "device",
            |fx| {
                mknodat(
                    CWD,
                    fx.ws.join("sub/null"),
                    FileType::CharacterDevice,
                    Mode::from(0o666),
                    makedev(1, 3),
                )
                .expect("mknod needs root or CAP_MKNOD")
            },
            "sub",
            "SpecialFile",
        ),
        (
            "socket",
            |fx| {
                std::mem::forget(
                    std::os::unix::net::UnixListener::bind(fx.ws.join("sub/sock")).unwrap(),
                )
            },
            "sub",
            "SpecialFile",
        ),
    ];
    for (label, plant, from, expected) in rows {
        let fx = Fixture::new();
        plant(&fx);
        let before = fx.outside_snapshot();
        let ws_before = names(&fx.ws);
        for to in ["copied", "/output/copied"] {
            let e = copy(&fx, from, to, true).expect_err(label);
            assert_eq!(variant(&e), expected, "{label}: {e}");
            fx.assert_no_host_path(&e);
            assert!(!e.to_string().contains("TOP-SECRET"), "{label}: {e}");
        }
        assert_eq!(
            names(&fx.ws),
            ws_before,
            "{label}: something left in the workspace"
        );
        assert!(
            names(&fx.out).is_empty(),
            "{label}: something left in the output"
        );
        assert_eq!(fx.outside_snapshot(), before, "{label}");
        let _ = SECRET;
    }
}

/// Destinations that name a place outside, or through a planted link: refused, nothing written
/// outside.
#[test]
fn destinations_outside_the_instance_are_refused() {
    let rows = [
        ("../stolen.txt", "EscapeAttempt"),
        ("/tmp/stolen.txt", "EscapeAttempt"),
        ("/workspace2/x", "EscapeAttempt"),
        ("linkdir/stolen.txt", "SymlinkNotFollowed"),
        ("updir/outside/stolen.txt", "SymlinkNotFollowed"),
        ("/workspace", "IsRoot"),
        ("/output", "IsRoot"),
        ("a\nb", "InvalidPath"),
    ];
    for (to, expected) in rows {
        let fx = Fixture::new();
        fx.symlink(fx.top.join("outside"), "linkdir");
        fx.symlink("../..", "updir");
        let before = fx.outside_snapshot();
        for from in ["inside.txt", "sub"] {
            let e = copy(&fx, from, to, true).expect_err(to);
            assert_eq!(variant(&e), expected, "{from} → {to}: {e}");
        }
        assert_eq!(fx.outside_snapshot(), before, "{to}");
    }
}

#[test]
fn deep_and_wide_trees_are_refused_within_the_limits() {
    let mut fx = Fixture::new();
    fx.limits.max_depth = 4;
    fs::create_dir_all(fx.ws.join("deep/1/2/3/4/5")).unwrap();
    let e = copy(&fx, "deep", "d2", false).unwrap_err();
    assert_eq!(variant(&e), "TreeTooLarge", "{e}");
    fx.limits.max_depth = 32;
    fx.limits.max_walk_entries = 10;
    fs::create_dir(fx.ws.join("wide")).unwrap();
    for i in 0..11 {
        fs::write(fx.ws.join(format!("wide/{i}")), b"x").unwrap();
    }
    let e = copy(&fx, "wide", "w2", false).unwrap_err();
    assert_eq!(variant(&e), "TreeTooLarge", "{e}");
    assert!(!fx.ws.join("d2").exists() && !fx.ws.join("w2").exists());
}

/// A sparse file is copied as its data: its holes stay holes. A job's `truncate -s 8G` costs
/// nothing to make, and a copy that wrote its zeros would fill the disk with them.
#[test]
fn a_sparse_file_copies_as_its_data() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::new();
    let size = 8u64 << 30;
    let mut file = fs::File::create(fx.ws.join("sparse.bin")).unwrap();
    file.set_len(size).unwrap();
    for at in [0, 4 << 30, size - 5] {
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(b"hello").unwrap();
    }
    drop(file);
    fs::create_dir(fx.ws.join("tree")).unwrap();
    fs::copy(fx.ws.join("inside.txt"), fx.ws.join("tree/plain.txt")).unwrap();
    fs::rename(fx.ws.join("sparse.bin"), fx.ws.join("tree/sparse.bin")).unwrap();
    for (from, to) in [("tree/sparse.bin", "copy.bin"), ("tree", "/output/tree")] {
        copy(&fx, from, to, false).unwrap();
    }
    for copied in [fx.ws.join("copy.bin"), fx.out.join("tree/sparse.bin")] {
        let md = fs::metadata(&copied).unwrap();
        assert_eq!(md.len(), size, "{copied:?}");
        assert!(
            md.blocks() * 512 < 1 << 20,
            "{copied:?}: {} blocks",
            md.blocks()
        );
        let mut file = fs::File::open(&copied).unwrap();
        for (at, expected) in [(0, b"hello"), (4 << 30, b"hello"), (size - 5, b"hello")] {
            let mut data = [0u8; 5];
            file.seek(SeekFrom::Start(at)).unwrap();
            std::io::Read::read_exact(&mut file, &mut data).unwrap();
            assert_eq!(&data, expected, "{copied:?} at {at}");
        }
        let mut gap = [1u8; 5];
        file.seek(SeekFrom::Start(1 << 30)).unwrap();
        std::io::Read::read_exact(&mut file, &mut gap).unwrap();
        assert_eq!(gap, [0; 5], "{copied:?}");
    }
    assert_eq!(fs::read(fx.out.join("tree/plain.txt")).unwrap(), INSIDE);
}
