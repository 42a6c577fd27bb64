//! `move_path` between `/workspace` and `/output` on different filesystems (disk temp dir and
//! `/dev/shm`): regular files are copied atomically and unlinked; everything else is refused.

use crate::files_harness as harness;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use harness::{Fixture, INSIDE, variant};
use hpcgate_executors::files::{FileLimits, InstanceRoots, MoveRequest, move_path};

#[test]
fn moves_across_filesystems_copy_regular_files_only() {
    let fx = Fixture::new();
    let shm = tempfile::tempdir_in("/dev/shm").expect("this test needs a writable /dev/shm");
    let (ws_dev, shm_dev) = (
        fs::metadata(&fx.ws).unwrap().dev(),
        fs::metadata(shm.path()).unwrap().dev(),
    );
    assert_ne!(
        ws_dev, shm_dev,
        "/dev/shm must be a different filesystem from the temp dir"
    );
    let roots = InstanceRoots::ambient(&fx.ws, shm.path());
    let mv = |from: &str, to: &str, overwrite| {
        move_path(
            &roots,
            &FileLimits::default(),
            &MoveRequest {
                from: from.into(),
                to: to.into(),
                overwrite,
                max_bytes: None,
            },
        )
    };

    fs::set_permissions(fx.ws.join("inside.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    mv("inside.txt", "/output/moved.txt", false).unwrap();
    assert!(!fx.ws.join("inside.txt").exists(), "source must be gone");
    let moved = shm.path().join("moved.txt");
    assert_eq!(fs::read(&moved).unwrap(), INSIDE);
    assert_eq!(
        fs::metadata(&moved).unwrap().permissions().mode() & 0o777,
        0o640
    );

    // The set-user-id bit a job set on its file is not carried to a copy the gateway makes.
    fs::write(fx.ws.join("suid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(fx.ws.join("suid"), fs::Permissions::from_mode(0o4755)).unwrap();
    mv("suid", "/output/suid", false).unwrap();
    let mode = fs::metadata(shm.path().join("suid"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    fs::remove_file(shm.path().join("suid")).unwrap();

    fs::write(fx.ws.join("second.txt"), b"second").unwrap();
    assert_eq!(
        variant(&mv("second.txt", "/output/moved.txt", false).unwrap_err()),
        "AlreadyExists"
    );
    assert!(
        fx.ws.join("second.txt").exists(),
        "a refused move keeps its source"
    );
    mv("second.txt", "/output/moved.txt", true).unwrap();
    assert_eq!(fs::read(&moved).unwrap(), b"second");

    assert_eq!(
        variant(&mv("sub", "/output/sub", false).unwrap_err()),
        "CrossFilesystem"
    );
    fx.symlink("sub/deep.txt", "link");
    assert_eq!(
        variant(&mv("link", "/output/link", false).unwrap_err()),
        "CrossFilesystem"
    );
    fs::hard_link(fx.top.join("secret.txt"), fx.ws.join("hl")).unwrap();
    assert_eq!(
        variant(&mv("hl", "/output/hl", false).unwrap_err()),
        "MultipleHardLinks"
    );
    assert!(!shm.path().join("hl").exists());
    let leftovers: Vec<_> = fs::read_dir(shm.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["moved.txt"], "no temp files left behind");
}
