//! Escape attempts against the files executor, as tables: each row is an attempt and the refusal
//! expected. Every row runs in a fresh fixture and also asserts that nothing outside the
//! instance was read, created, modified or removed (outside snapshot before == after), and that
//! the error message names no host path. Races (swaps in a tight loop) are in `files_races.rs`.

use crate::files_harness as harness;

use std::time::{Duration, Instant};

use harness::{Fixture, Op, SECRET, all_ops, run, variant};
use hpcgate_executors::files::{
    DeleteRequest, EntryKind, FileLimits, ListRequest, SearchRequest, delete_path, list_directory,
    search_files,
};

/// Runs one row in a fresh fixture prepared by `setup`, asserting the refusal and that the
/// outside is untouched. The call runs on its own thread so that a hang (a FIFO opened in
/// blocking mode) fails the row after 5 s instead of stalling the suite.
fn check_row(setup: &dyn Fn(&Fixture), op: &Op, expected: &str) {
    let fx = Fixture::new();
    setup(&fx);
    check_row_in(fx, op, expected);
}

/// [`check_row`] in a given fixture, which is returned for the next row.
fn check_row_in(fx: Fixture, op: &Op, expected: &str) -> Fixture {
    let before = fx.outside_snapshot();
    let (tx, rx) = std::sync::mpsc::channel();
    let call = op.clone();
    std::thread::spawn(move || {
        let outcome = run(&fx, &call);
        let _ = tx.send((fx, outcome));
    });
    let started = Instant::now();
    let Ok((fx, outcome)) = rx.recv_timeout(Duration::from_secs(5)) else {
        panic!("{op:?} did not return within 5 s");
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{op:?} took {:?}",
        started.elapsed()
    );
    match &outcome {
        Ok(data) => panic!(
            "{op:?}: expected {expected}, got success ({} bytes)",
            data.len()
        ),
        Err(e) => {
            assert_eq!(variant(e), expected, "{op:?}: got `{e}`");
            fx.assert_no_host_path(e);
        }
    }
    assert_eq!(
        fx.outside_snapshot(),
        before,
        "{op:?} changed something outside the instance"
    );
    fx
}

#[test]
fn lexical_escapes_are_refused_by_every_operation() {
    let huge = "a/".repeat(2100);
    let rows: Vec<(String, &str)> = vec![
        ("..".into(), "EscapeAttempt"),
        ("../secret.txt".into(), "EscapeAttempt"),
        ("../../secret.txt".into(), "EscapeAttempt"),
        ("sub/../../secret.txt".into(), "EscapeAttempt"),
        ("sub/..".into(), "EscapeAttempt"),
        ("./../x".into(), "EscapeAttempt"),
        ("sub/./../..//secret.txt".into(), "EscapeAttempt"),
        ("/workspace/..".into(), "EscapeAttempt"),
        ("/workspace/../output/x".into(), "EscapeAttempt"),
        ("/output/../workspace/..".into(), "EscapeAttempt"),
        ("/workspace/../output2/x".into(), "EscapeAttempt"),
        ("/workspace/../../secret.txt".into(), "EscapeAttempt"),
        (
            "/workspace/sub/../../../../../etc/passwd".into(),
            "EscapeAttempt",
        ),
        ("/".into(), "EscapeAttempt"),
        ("/etc/passwd".into(), "EscapeAttempt"),
        ("/tmp/x".into(), "EscapeAttempt"),
        ("/workspace2/x".into(), "EscapeAttempt"),
        ("/workspacefoo".into(), "EscapeAttempt"),
        ("/output2/x".into(), "EscapeAttempt"),
        ("/outputs".into(), "EscapeAttempt"),
        ("/Workspace/inside.txt".into(), "EscapeAttempt"),
        ("//workspace/inside.txt".into(), "EscapeAttempt"),
        ("/proc/self/root/etc/passwd".into(), "EscapeAttempt"),
        ("/proc/self/cwd/secret.txt".into(), "EscapeAttempt"),
        ("".into(), "InvalidPath"),
        ("inside.txt\0".into(), "InvalidPath"),
        ("\0/../secret.txt".into(), "InvalidPath"),
        ("/workspace/a\0b".into(), "InvalidPath"),
        (huge.clone(), "InvalidPath"),
        (format!("/workspace/{}", "x".repeat(5000)), "InvalidPath"),
    ];
    // These are refused before any system call, so one fixture serves all operations on a
    // path (a wrongly accepted call fails its row anyway).
    for (path, expected) in &rows {
        let mut fx = Fixture::new();
        for op in all_ops(path) {
            fx = check_row_in(fx, &op, expected);
        }
    }
}

/// Plants every kind of escaping symlink in the workspace.
fn plant_links(fx: &Fixture) {
    let top = &fx.top;
    fx.symlink(top.join("secret.txt"), "abs");
    fx.symlink("../../secret.txt", "rel");
    fx.symlink(top.join("outside/new.txt"), "dangling_abs");
    fx.symlink("missing.txt", "dangling_rel");
    fx.symlink(top.join("outside"), "linkdir");
    fx.symlink("../..", "updir");
    fx.symlink("c2", "c1");
    fx.symlink("c3", "c2");
    fx.symlink(top.join("secret.txt"), "c3");
    fx.symlink("sub/h2", "h1");
    fx.symlink("../../../secret.txt", "sub/h2");
    fx.symlink("l2", "l1");
    fx.symlink("l1", "l2");
    fx.symlink("self", "self");
    fx.symlink("/proc/self/root", "procroot");
    fx.symlink("/proc/self/cwd", "proccwd");
    fx.symlink(format!("{}proc/self/root", "../".repeat(12)), "relproc");
    fx.symlink("../output", "to_output");
}

/// No file tool follows a symlink, out of the root or not: path rules judge the path as
/// written, so a link must not make one name a way into another.
#[test]
fn symlinks_out_of_the_root_are_refused() {
    let s = |p: &str| p.to_string();
    let rows: Vec<(Op, &str)> = vec![
        (Op::Read(s("abs")), "SymlinkNotFollowed"),
        (Op::Read(s("rel")), "SymlinkNotFollowed"),
        (Op::Read(s("dangling_abs")), "SymlinkNotFollowed"),
        (Op::Read(s("dangling_rel")), "SymlinkNotFollowed"),
        (Op::Read(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (Op::Read(s("linkdir/inside.txt")), "SymlinkNotFollowed"),
        (Op::Read(s("updir/secret.txt")), "SymlinkNotFollowed"),
        (
            Op::Read(s("updir/instance/workspace/inside.txt")),
            "SymlinkNotFollowed",
        ),
        (Op::Read(s("c1")), "SymlinkNotFollowed"),
        (Op::Read(s("h1")), "SymlinkNotFollowed"),
        (Op::Read(s("l1")), "SymlinkNotFollowed"),
        (Op::Read(s("self")), "SymlinkNotFollowed"),
        (Op::Read(s("procroot/etc/passwd")), "SymlinkNotFollowed"),
        (Op::Read(s("proccwd/Cargo.toml")), "SymlinkNotFollowed"),
        (Op::Read(s("relproc/etc/passwd")), "SymlinkNotFollowed"),
        (Op::Read(s("to_output/x")), "SymlinkNotFollowed"),
        (Op::Write(s("abs")), "SymlinkNotFollowed"),
        (Op::Write(s("rel")), "SymlinkNotFollowed"),
        (Op::Write(s("dangling_abs")), "SymlinkNotFollowed"),
        (Op::Write(s("dangling_rel")), "SymlinkNotFollowed"),
        (Op::CreateNew(s("dangling_abs")), "SymlinkNotFollowed"),
        (Op::Append(s("abs")), "SymlinkNotFollowed"),
        (Op::Append(s("dangling_abs")), "SymlinkNotFollowed"),
        (Op::Write(s("c1")), "SymlinkNotFollowed"),
        (Op::Write(s("l1")), "SymlinkNotFollowed"),
        (Op::Write(s("linkdir/new.txt")), "SymlinkNotFollowed"),
        (Op::Write(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (Op::Append(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (Op::WriteDirs(s("linkdir/a/b.txt")), "SymlinkNotFollowed"),
        (
            Op::WriteDirs(s("updir/outside/new.txt")),
            "SymlinkNotFollowed",
        ),
        (
            Op::Write(s("procroot/tmp/hpcgate-escape")),
            "SymlinkNotFollowed",
        ),
        (
            Op::WriteDirs(s("relproc/tmp/hpcgate-escape")),
            "SymlinkNotFollowed",
        ),
        (Op::Write(s("to_output/x")), "SymlinkNotFollowed"),
        (Op::List(s("linkdir")), "SymlinkNotFollowed"),
        (Op::List(s("updir")), "SymlinkNotFollowed"),
        (Op::List(s("procroot")), "SymlinkNotFollowed"),
        (Op::Search(s("linkdir")), "SymlinkNotFollowed"),
        (Op::Stat(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (Op::Stat(s("procroot/etc")), "SymlinkNotFollowed"),
        (Op::Mkdir(s("linkdir/new")), "SymlinkNotFollowed"),
        (Op::MkdirP(s("linkdir/a/b")), "SymlinkNotFollowed"),
        (Op::MkdirP(s("updir/outside/zz")), "SymlinkNotFollowed"),
        (Op::MoveFrom(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (
            Op::MoveFrom(s("procroot/etc/hostname")),
            "SymlinkNotFollowed",
        ),
        (Op::MoveTo(s("linkdir/stolen.txt")), "SymlinkNotFollowed"),
        (
            Op::MoveTo(s("updir/outside/stolen.txt")),
            "SymlinkNotFollowed",
        ),
        (Op::Delete(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (Op::Delete(s("updir/secret.txt")), "SymlinkNotFollowed"),
        (Op::DeleteRec(s("linkdir/secret.txt")), "SymlinkNotFollowed"),
        (Op::DeleteRec(s("/workspace")), "IsRoot"),
        (Op::MoveFrom(s("/output")), "IsRoot"),
    ];
    for (op, expected) in &rows {
        check_row(&plant_links, op, expected);
    }
}

/// Links that stay inside the instance are refused too: `deny_write = ["/workspace/inputs/**"]`
/// must not be passed by `alias/x` where a job planted `alias -> inputs`. Each row also leaves
/// `inputs` as it was.
#[test]
fn symlinks_inside_the_root_are_not_followed_either() {
    let plant = |fx: &Fixture| {
        std::fs::create_dir_all(fx.ws.join("inputs/deep")).expect("mkdir");
        std::fs::write(fx.ws.join("inputs/data.csv"), SECRET).expect("write");
        fx.symlink("inputs", "alias");
        fx.symlink("inputs/data.csv", "data_link");
        fx.symlink(".", "self_dir");
        fx.symlink("../workspace", "to_workspace");
    };
    let s = |p: &str| p.to_string();
    let rows: Vec<Op> = vec![
        Op::Read(s("data_link")),
        Op::Read(s("alias/data.csv")),
        Op::Read(s("self_dir/inputs/data.csv")),
        Op::Read(s("to_workspace/inputs/data.csv")),
        Op::Write(s("alias/data.csv")),
        Op::Write(s("alias/new.txt")),
        Op::Append(s("alias/data.csv")),
        Op::WriteDirs(s("alias/a/b.txt")),
        Op::WriteDirs(s("self_dir/inputs/deep/new.txt")),
        Op::List(s("alias")),
        Op::List(s("self_dir/inputs")),
        Op::Search(s("alias")),
        Op::Stat(s("alias/data.csv")),
        Op::Mkdir(s("alias/new")),
        Op::MkdirP(s("alias/a/b")),
        Op::MkdirP(s("alias")),
        Op::MoveFrom(s("alias/data.csv")),
        Op::MoveTo(s("alias/moved.txt")),
        Op::Delete(s("alias/data.csv")),
        Op::DeleteRec(s("alias/deep")),
    ];
    for op in &rows {
        let fx = Fixture::new();
        plant(&fx);
        let fx = check_row_in(fx, op, "SymlinkNotFollowed");
        assert_eq!(
            std::fs::read(fx.ws.join("inputs/data.csv")).expect("inputs"),
            SECRET,
            "{op:?}"
        );
        let names: Vec<_> = std::fs::read_dir(fx.ws.join("inputs"))
            .expect("inputs")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{op:?} changed inputs: {names:?}");
    }
}

#[test]
fn hard_links_to_outside_files_are_refused() {
    let setup = |fx: &Fixture| {
        std::fs::hard_link(fx.top.join("secret.txt"), fx.ws.join("hl")).expect("hard link");
    };
    for op in [
        Op::Read("hl".into()),
        Op::Write("hl".into()),
        Op::Append("hl".into()),
        Op::CreateNew("hl".into()),
    ] {
        check_row(&setup, &op, "MultipleHardLinks");
    }
}

#[test]
fn special_files_are_refused_without_hanging() {
    use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
    let fifo = |fx: &Fixture| {
        mknodat(
            CWD,
            fx.ws.join("fifo"),
            FileType::Fifo,
            Mode::from(0o666),
            0,
        )
        .expect("mkfifo");
        fx.symlink("fifo", "fifolink");
    };
    let device = |fx: &Fixture| {
        mknodat(
            CWD,
            fx.ws.join("null"),
            FileType::CharacterDevice,
            Mode::from(0o666),
            makedev(1, 3),
        )
        .expect("mknod needs root or CAP_MKNOD; the test suite runs as root");
    };
    let socket = |fx: &Fixture| {
        let listener = std::os::unix::net::UnixListener::bind(fx.ws.join("sock")).expect("bind");
        std::mem::forget(listener);
    };
    check_row(&fifo, &Op::Read("fifo".into()), "SpecialFile");
    check_row(&fifo, &Op::Read("fifolink".into()), "SymlinkNotFollowed");
    for op in [Op::Write("fifo".into()), Op::Append("fifo".into())] {
        check_row(&fifo, &op, "SpecialFile");
    }
    for op in [
        Op::Read("null".into()),
        Op::Write("null".into()),
        Op::Append("null".into()),
    ] {
        check_row(&device, &op, "SpecialFile");
    }
    for op in [
        Op::Read("sock".into()),
        Op::Write("sock".into()),
        Op::Append("sock".into()),
    ] {
        check_row(&socket, &op, "SpecialFile");
    }
}

#[test]
fn deleting_a_link_to_outside_removes_only_the_link() {
    let fx = Fixture::new();
    plant_links(&fx);
    fx.symlink(fx.top.join("outside"), "tree/link");
    let before = fx.outside_snapshot();
    for (path, recursive) in [
        ("abs", false),
        ("linkdir", true),
        ("tree", true),
        ("procroot", true),
    ] {
        delete_path(
            &fx.roots,
            &fx.limits,
            &DeleteRequest {
                path: path.into(),
                recursive,
            },
        )
        .expect(path);
        assert!(
            std::fs::symlink_metadata(fx.ws.join(path)).is_err(),
            "{path} still there"
        );
    }
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn walks_never_descend_into_links_out() {
    let fx = Fixture::new();
    plant_links(&fx);
    let before = fx.outside_snapshot();
    let req = ListRequest {
        path: "/workspace".into(),
        recursive: true,
        max_entries: None,
    };
    let listing = list_directory(&fx.roots, &fx.limits, &req).expect("list");
    let link = listing
        .entries
        .iter()
        .find(|e| e.name == "linkdir")
        .expect("linkdir listed");
    assert_eq!(link.facts.kind, EntryKind::Symlink);
    assert!(
        listing
            .entries
            .iter()
            .all(|e| !e.path.starts_with("/workspace/linkdir/"))
    );
    assert!(
        listing
            .entries
            .iter()
            .all(|e| !e.path.starts_with("/workspace/updir/"))
    );
    let req = SearchRequest {
        path: "/workspace".into(),
        pattern: "**/secret.txt".into(),
        max_results: None,
    };
    let found = search_files(&fx.roots, &fx.limits, &req).expect("search");
    assert!(found.matches.is_empty(), "{found:?}");
    assert_eq!(fx.outside_snapshot(), before);
}

#[test]
fn randomized_paths_never_reach_outside() {
    let fx = Fixture::new();
    plant_links(&fx);
    let before = fx.outside_snapshot();
    let atoms = [
        "..",
        ".",
        "/",
        "//",
        "workspace",
        "output",
        "/workspace",
        "/output",
        "sub",
        "linkdir",
        "updir",
        "abs",
        "c1",
        "procroot",
        "relproc",
        "secret.txt",
        "inside.txt",
        "\0",
        "x",
        "..\\",
        "/..",
        "../",
        "~",
        "%2e%2e",
        "\u{2026}",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..1500 {
        let n = 1 + (next() % 8) as usize;
        let path: String = (0..n)
            .map(|_| atoms[(next() % atoms.len() as u64) as usize])
            .collect();
        let op = match next() % 4 {
            0 => Op::Read(path.clone()),
            1 => Op::WriteDirs(format!("{path}/f")),
            2 => Op::List(path.clone()),
            _ => Op::Stat(path.clone()),
        };
        if let Ok(data) = run(&fx, &op) {
            let hit = data.windows(SECRET.len()).any(|w| w == SECRET);
            assert!(!hit, "{op:?} returned outside content");
        }
    }
    assert_eq!(fx.outside_snapshot(), before);
}

/// Builds `ws/deep/d/d/…` with `levels` directories below `deep`, via directory handles (the
/// path would exceed `PATH_MAX`).
fn deep_tree(fx: &Fixture, levels: usize) {
    use rustix::fs::{CWD, Mode, OFlags, mkdirat, openat};
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    mkdirat(CWD, fx.ws.join("deep"), Mode::from(0o755)).expect("mkdir");
    let mut dir = openat(CWD, fx.ws.join("deep"), flags, Mode::empty()).expect("open");
    for _ in 0..levels {
        mkdirat(&dir, "d", Mode::from(0o755)).expect("mkdir");
        dir = openat(&dir, "d", flags, Mode::empty()).expect("open");
    }
    std::fs::write(fx.ws.join("deep/d/file"), b"x").expect("write");
}

#[test]
fn hostile_deep_trees_are_refused_not_recursed() {
    let fx = Fixture::new();
    deep_tree(&fx, 300);
    let before = fx.outside_snapshot();
    let req = DeleteRequest {
        path: "deep".into(),
        recursive: true,
    };
    let e = delete_path(&fx.roots, &fx.limits, &req).unwrap_err();
    assert_eq!(variant(&e), "TreeTooLarge", "{e}");
    assert!(fx.ws.join("deep/d").is_dir());
    let generous = FileLimits {
        max_delete_depth: 1_000,
        ..FileLimits::default()
    };
    delete_path(&fx.roots, &generous, &req).expect("a 300-level tree under a 1000 limit");
    assert!(!fx.ws.join("deep").exists());
    assert_eq!(fx.outside_snapshot(), before);
}
