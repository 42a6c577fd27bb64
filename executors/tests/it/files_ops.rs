//! Behaviour of each file operation on legitimate requests: ranges, atomic writes, caps,
//! truncation flags, name escaping, no-overwrite moves, recursive deletes, globbing, and the
//! shape of error messages.

use crate::files_harness as harness;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use harness::{Fixture, INSIDE, SECRET, variant};
use hpcgate_executors::files::{
    DeleteRequest, EntryKind, FileError, FileLimits, InstanceRoots, ListRequest,
    MakeDirectoryRequest, MoveRequest, ReadRequest, SearchRequest, StatRequest, WriteMode,
    WriteRequest, delete_path, list_directory, make_directory, move_path, read_file, search_files,
    stat_path, write_file,
};

fn read(
    fx: &Fixture,
    path: &str,
    offset: u64,
    length: Option<u64>,
) -> Result<hpcgate_executors::files::ReadResult, FileError> {
    read_file(
        &fx.roots,
        &fx.limits,
        &ReadRequest {
            path: path.into(),
            offset,
            length,
        },
    )
}

fn write(
    fx: &Fixture,
    path: &str,
    data: &[u8],
    mode: WriteMode,
    create_dirs: bool,
) -> Result<hpcgate_executors::files::WriteResult, FileError> {
    let req = WriteRequest {
        path: path.into(),
        data: data.to_vec(),
        mode,
        create_dirs,
    };
    write_file(&fx.roots, &fx.limits, &req)
}

#[test]
fn read_ranges_report_size_and_eof() {
    let mut fx = Fixture::new();
    fs::write(fx.ws.join("ten.txt"), b"0123456789").unwrap();
    let r = read(&fx, "/workspace/ten.txt", 2, Some(3)).unwrap();
    assert_eq!(
        (r.data.as_slice(), r.total_size, r.eof, r.path.as_str()),
        (&b"234"[..], 10, false, "/workspace/ten.txt")
    );
    let r = read(&fx, "ten.txt", 7, None).unwrap();
    assert_eq!((r.data.as_slice(), r.eof), (&b"789"[..], true));
    let r = read(&fx, "ten.txt", 50, Some(5)).unwrap();
    assert_eq!((r.data.len(), r.eof), (0, true));
    fx.limits.max_read_bytes = 4;
    let r = read(&fx, "ten.txt", 0, Some(100)).unwrap();
    assert_eq!(
        (r.data.as_slice(), r.eof),
        (&b"0123"[..], false),
        "length is capped, not refused"
    );
}

/// A link is not followed, even inside the instance; the refusal names the link, and
/// `stat_path` tells where it points, so the agent can name that path instead.
#[test]
fn read_refuses_symlinks_and_directories() {
    let mut fx = Fixture::new();
    fx.symlink("sub/deep.txt", "link");
    fx.symlink("sub", "subdir");
    assert_eq!(read(&fx, "sub/deep.txt", 0, None).unwrap().data, INSIDE);
    for (path, link) in [
        ("link", "/workspace/link"),
        ("subdir/deep.txt", "/workspace/subdir"),
    ] {
        let refused = read(&fx, path, 0, None).unwrap_err();
        assert_eq!(variant(&refused), "SymlinkNotFollowed", "{path}");
        assert!(
            refused.to_string().contains(&format!("`{link}`")),
            "{refused}"
        );
        let stat = StatRequest { path: link.into() };
        let facts = stat_path(&fx.roots, &stat).unwrap();
        assert_eq!(facts.facts.kind, EntryKind::Symlink, "{path}");
    }
    let stat = StatRequest {
        path: "link".into(),
    };
    let target = stat_path(&fx.roots, &stat).unwrap().link_target;
    assert_eq!(target.as_deref(), Some("sub/deep.txt"));
    assert_eq!(variant(&read(&fx, "sub", 0, None).unwrap_err()), "NotAFile");
    assert_eq!(
        variant(&read(&fx, "/output/none", 0, None).unwrap_err()),
        "NotFound"
    );
    // Hard-linked files are readable only when the limits allow it.
    fs::hard_link(fx.ws.join("inside.txt"), fx.ws.join("twin.txt")).unwrap();
    assert_eq!(
        variant(&read(&fx, "twin.txt", 0, None).unwrap_err()),
        "MultipleHardLinks"
    );
    fx.limits = FileLimits {
        allow_read_hard_linked: true,
        ..FileLimits::default()
    };
    assert_eq!(read(&fx, "twin.txt", 0, None).unwrap().data, INSIDE);
}

#[test]
fn replace_is_atomic_keeps_mode_and_leaves_no_temp_files() {
    let fx = Fixture::new();
    fs::set_permissions(fx.ws.join("inside.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    let r = write(&fx, "inside.txt", b"new", WriteMode::Replace, false).unwrap();
    assert_eq!((r.bytes_written, r.size, r.created), (3, 3, false));
    assert_eq!(fs::read(fx.ws.join("inside.txt")).unwrap(), b"new");
    assert_eq!(
        fs::metadata(fx.ws.join("inside.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // Permission bits are kept; set-user-id, set-group-id and sticky are not.
    fs::set_permissions(fx.ws.join("inside.txt"), fs::Permissions::from_mode(0o6755)).unwrap();
    write(&fx, "inside.txt", b"newer", WriteMode::Replace, false).unwrap();
    let mode = fs::metadata(fx.ws.join("inside.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    // The gateway's temporary names cannot be created: the usage walk deletes such leftovers.
    for name in [".hpcgate-tmp-keep.txt", ".hpcgate-tmp-dir/x.txt"] {
        let refused = write(&fx, name, b"x", WriteMode::Replace, true).unwrap_err();
        assert_eq!(variant(&refused), "InvalidPath", "{name}: {refused}");
    }
    let r = write(
        &fx,
        "/output/result.csv",
        b"a,b\n",
        WriteMode::Replace,
        false,
    )
    .unwrap();
    assert!(r.created);
    assert_eq!(fs::read(fx.out.join("result.csv")).unwrap(), b"a,b\n");
    let names: Vec<_> = fs::read_dir(&fx.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.to_string_lossy().contains("hpcgate-tmp")),
        "{names:?}"
    );
}

#[test]
fn create_new_append_and_create_dirs() {
    let mut fx = Fixture::new();
    assert_eq!(
        variant(&write(&fx, "inside.txt", b"x", WriteMode::CreateNew, false).unwrap_err()),
        "AlreadyExists"
    );
    assert_eq!(
        fs::read(fx.ws.join("inside.txt")).unwrap(),
        INSIDE,
        "create-new must not clobber"
    );
    write(&fx, "fresh.txt", b"x", WriteMode::CreateNew, false).unwrap();
    let r = write(&fx, "fresh.txt", b"yz", WriteMode::Append, false).unwrap();
    assert_eq!((r.size, r.created), (3, false));
    assert_eq!(fs::read(fx.ws.join("fresh.txt")).unwrap(), b"xyz");
    let r = write(&fx, "log.txt", b"1", WriteMode::Append, false).unwrap();
    assert!(r.created);
    assert_eq!(
        variant(&write(&fx, "a/b/c.txt", b"x", WriteMode::Replace, false).unwrap_err()),
        "NotFound"
    );
    write(&fx, "a/b/c.txt", b"x", WriteMode::Replace, true).unwrap();
    assert_eq!(fs::read(fx.ws.join("a/b/c.txt")).unwrap(), b"x");
    assert_eq!(
        variant(&write(&fx, "sub", b"x", WriteMode::Replace, false).unwrap_err()),
        "NotAFile"
    );
    assert_eq!(
        variant(&write(&fx, "/workspace", b"x", WriteMode::Replace, false).unwrap_err()),
        "IsRoot"
    );
    assert_eq!(
        variant(&write(&fx, "bad\nname", b"x", WriteMode::Replace, false).unwrap_err()),
        "InvalidPath"
    );
    fx.limits.max_write_bytes = 4;
    let e = write(&fx, "big.txt", b"12345", WriteMode::Replace, false).unwrap_err();
    assert_eq!(variant(&e), "TooLarge");
    assert!(!fx.ws.join("big.txt").exists());
}

#[test]
fn list_is_sorted_capped_and_escapes_names() {
    let fx = Fixture::new();
    fs::write(fx.ws.join("a\nb"), b"x").unwrap();
    let req = ListRequest {
        path: "/workspace".into(),
        recursive: false,
        max_entries: None,
    };
    let l = list_directory(&fx.roots, &fx.limits, &req).unwrap();
    let names: Vec<_> = l
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.escaped))
        .collect();
    assert_eq!(
        names,
        [("a\\nb", true), ("inside.txt", false), ("sub", false)]
    );
    assert!(!l.truncated);
    // Below a directory whose own name is escaped, every path is one to escape back.
    fs::create_dir(fx.ws.join("d\ne")).unwrap();
    fs::write(fx.ws.join("d\ne/plain"), b"x").unwrap();
    let below = ListRequest {
        path: "/workspace/d\ne".into(),
        ..req.clone()
    };
    let under = list_directory(&fx.roots, &fx.limits, &below).unwrap();
    let entry = &under.entries[0];
    assert_eq!(
        (entry.path.as_str(), entry.name.as_str(), entry.escaped),
        ("/workspace/d\\ne/plain", "plain", true)
    );
    let file = &l.entries[1];
    assert_eq!(
        (file.path.as_str(), file.facts.kind, file.facts.size),
        (
            "/workspace/inside.txt",
            EntryKind::File,
            INSIDE.len() as u64
        )
    );
    assert!(file.facts.modified_unix > 1_600_000_000);
    let req = ListRequest {
        recursive: true,
        ..req
    };
    let l = list_directory(&fx.roots, &fx.limits, &req).unwrap();
    assert!(
        l.entries
            .iter()
            .any(|e| e.path == "/workspace/sub/deep.txt")
    );
    let depth1 = FileLimits {
        max_depth: 1,
        ..FileLimits::default()
    };
    let cut = list_directory(&fx.roots, &depth1, &req).unwrap();
    assert!(!cut.truncated, "depth 1 reaches everything here");
    fs::create_dir_all(fx.ws.join("sub/deeper")).unwrap();
    let cut = list_directory(&fx.roots, &depth1, &req).unwrap();
    assert!(
        cut.truncated,
        "a directory left unentered at max_depth marks the listing truncated"
    );
    let req = ListRequest {
        max_entries: Some(2),
        ..req
    };
    let l = list_directory(&fx.roots, &fx.limits, &req).unwrap();
    assert_eq!((l.entries.len(), l.truncated), (2, true));
    let req = ListRequest {
        path: "inside.txt".into(),
        recursive: false,
        max_entries: None,
    };
    assert_eq!(
        variant(&list_directory(&fx.roots, &fx.limits, &req).unwrap_err()),
        "NotADirectory"
    );
}

#[test]
fn stat_reports_links_without_following_them() {
    let fx = Fixture::new();
    fx.symlink(fx.top.join("secret.txt"), "abs");
    let s = stat_path(&fx.roots, &StatRequest { path: "abs".into() }).unwrap();
    assert_eq!(s.facts.kind, EntryKind::Symlink);
    assert!(s.link_target.is_some());
    let s = stat_path(
        &fx.roots,
        &StatRequest {
            path: "/output".into(),
        },
    )
    .unwrap();
    assert_eq!(s.facts.kind, EntryKind::Directory);
    let s = stat_path(
        &fx.roots,
        &StatRequest {
            path: "sub/deep.txt".into(),
        },
    )
    .unwrap();
    assert_eq!(
        (s.facts.kind, s.facts.size, s.facts.hard_links),
        (EntryKind::File, INSIDE.len() as u64, 1)
    );
}

/// A root is opened when a path first names it: a call on `/workspace` works while `/output`
/// is gone, and one on `/output` says which root is missing, never its host path.
#[test]
fn each_root_is_opened_only_when_a_path_names_it() {
    let fx = Fixture::new();
    fs::remove_dir(&fx.out).unwrap();
    let roots = InstanceRoots::ambient(&fx.ws, &fx.out);
    let stat = |path: &str| stat_path(&roots, &StatRequest { path: path.into() });
    assert_eq!(stat("inside.txt").unwrap().facts.kind, EntryKind::File);
    assert_eq!(stat("/workspace").unwrap().facts.kind, EntryKind::Directory);

    let missing = stat("/output/x").unwrap_err();
    assert_eq!(variant(&missing), "RootUnavailable");
    let message = missing.to_string();
    assert!(message.contains("`/output`"), "{message}");
    assert!(!message.contains(fx.top.to_str().unwrap()), "{message}");

    // Created later, the root opens at the next call that names it (a failure is not kept).
    fs::create_dir(&fx.out).unwrap();
    fs::write(fx.out.join("x"), b"x").unwrap();
    assert_eq!(stat("/output/x").unwrap().facts.kind, EntryKind::File);
    // Once open, the handle is the root: moving the directory away does not reach a new one
    // at the old path.
    fs::rename(&fx.out, fx.top.join("moved-output")).unwrap();
    fs::create_dir(&fx.out).unwrap();
    assert_eq!(stat("/output/x").unwrap().facts.kind, EntryKind::File);
}

#[test]
fn make_directory_with_and_without_parents() {
    let fx = Fixture::new();
    let mk = |path: &str, parents| {
        make_directory(
            &fx.roots,
            &MakeDirectoryRequest {
                path: path.into(),
                parents,
            },
        )
    };
    assert_eq!(variant(&mk("x/y", false).unwrap_err()), "NotFound");
    assert!(mk("x/y", true).unwrap().created);
    assert!(!mk("x/y", true).unwrap().created);
    assert_eq!(variant(&mk("x", false).unwrap_err()), "AlreadyExists");
    assert_eq!(
        variant(&mk("inside.txt/z", true).unwrap_err()),
        "NotADirectory"
    );
    assert!(fx.ws.join("x/y").is_dir());
}

#[test]
fn move_refuses_overwrite_unless_asked_and_crosses_roots() {
    let fx = Fixture::new();
    let mv = |from: &str, to: &str, overwrite| {
        move_path(
            &fx.roots,
            &fx.limits,
            &MoveRequest {
                from: from.into(),
                to: to.into(),
                overwrite,
                max_bytes: None,
            },
        )
    };
    fs::write(fx.ws.join("other.txt"), b"other").unwrap();
    assert_eq!(
        variant(&mv("other.txt", "inside.txt", false).unwrap_err()),
        "AlreadyExists"
    );
    assert_eq!(fs::read(fx.ws.join("inside.txt")).unwrap(), INSIDE);
    mv("other.txt", "inside.txt", true).unwrap();
    assert_eq!(fs::read(fx.ws.join("inside.txt")).unwrap(), b"other");
    let r = mv("/workspace/inside.txt", "/output/final.txt", false).unwrap();
    assert_eq!(
        (r.to.as_str(), r.kind),
        ("/output/final.txt", EntryKind::File)
    );
    assert_eq!(fs::read(fx.out.join("final.txt")).unwrap(), b"other");
    // Onto another name of the same file: `rename` alone would leave the source.
    fs::write(fx.ws.join("one.txt"), b"same").unwrap();
    fs::hard_link(fx.ws.join("one.txt"), fx.ws.join("two.txt")).unwrap();
    mv("one.txt", "two.txt", true).unwrap();
    assert!(!fx.ws.join("one.txt").exists(), "the source's name is gone");
    assert_eq!(fs::read(fx.ws.join("two.txt")).unwrap(), b"same");
    // Onto itself, however it is written: refused, the file stays.
    for overwrite in [false, true] {
        let same = mv("two.txt", "/workspace/./two.txt", overwrite).unwrap_err();
        assert_eq!(variant(&same), "InvalidRequest", "{same}");
        assert_eq!(fs::read(fx.ws.join("two.txt")).unwrap(), b"same");
    }
    assert_eq!(
        variant(&mv("sub", "sub/inner", false).unwrap_err()),
        "InvalidRequest"
    );
    assert_eq!(variant(&mv("/output", "x", false).unwrap_err()), "IsRoot");
    assert_eq!(variant(&mv("nothing", "x", false).unwrap_err()), "NotFound");
    fx.symlink(fx.top.join("secret.txt"), "abs");
    mv("abs", "moved_link", false).unwrap();
    assert!(
        fs::symlink_metadata(fx.ws.join("moved_link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read(fx.top.join("secret.txt")).unwrap(), SECRET);
}

#[test]
fn delete_is_recursive_only_on_request() {
    let fx = Fixture::new();
    let del = |path: &str, recursive| {
        delete_path(
            &fx.roots,
            &fx.limits,
            &DeleteRequest {
                path: path.into(),
                recursive,
            },
        )
    };
    assert_eq!(
        variant(&del("sub", false).unwrap_err()),
        "DirectoryNotEmpty"
    );
    assert!(fx.ws.join("sub/deep.txt").exists());
    assert_eq!(del("sub", true).unwrap().kind, EntryKind::Directory);
    assert!(!fx.ws.join("sub").exists());
    assert_eq!(del("inside.txt", false).unwrap().kind, EntryKind::File);
    assert_eq!(variant(&del("/workspace", true).unwrap_err()), "IsRoot");
    assert_eq!(variant(&del("inside.txt", false).unwrap_err()), "NotFound");
}

#[test]
fn search_globs_relative_paths_with_a_cap() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.ws.join("runs/1")).unwrap();
    fs::write(fx.ws.join("runs/1/log.txt"), b"x").unwrap();
    let find = |pattern: &str, max| {
        let req = SearchRequest {
            path: "/workspace".into(),
            pattern: pattern.into(),
            max_results: max,
        };
        search_files(&fx.roots, &fx.limits, &req)
    };
    let paths = |r: hpcgate_executors::files::SearchResult| {
        r.matches.into_iter().map(|m| m.path).collect::<Vec<_>>()
    };
    assert_eq!(
        paths(find("*.txt", None).unwrap()),
        ["/workspace/inside.txt"]
    );
    assert_eq!(
        paths(find("**/*.txt", None).unwrap()),
        [
            "/workspace/inside.txt",
            "/workspace/sub/deep.txt",
            "/workspace/runs/1/log.txt"
        ]
    );
    assert_eq!(
        paths(find("runs/*/log.txt", None).unwrap()),
        ["/workspace/runs/1/log.txt"]
    );
    let capped = find("**/*.txt", Some(1)).unwrap();
    assert_eq!((capped.matches.len(), capped.truncated), (1, true));
    assert_eq!(variant(&find("[", None).unwrap_err()), "InvalidPattern");
}

#[test]
fn error_messages_are_lowercase_without_period_and_show_sandbox_paths() {
    let fx = Fixture::new();
    fx.symlink(fx.top.join("secret.txt"), "abs");
    let errors = [
        read(&fx, "abs", 0, None).unwrap_err(),
        read(&fx, "missing", 0, None).unwrap_err(),
        read(&fx, "", 0, None).unwrap_err(),
        write(&fx, "abs", b"x", WriteMode::Replace, false).unwrap_err(),
        delete_path(
            &fx.roots,
            &fx.limits,
            &DeleteRequest {
                path: "sub".into(),
                recursive: false,
            },
        )
        .unwrap_err(),
    ];
    for e in &errors {
        let msg = e.to_string();
        assert!(msg.starts_with(|c: char| !c.is_uppercase()), "{msg}");
        assert!(!msg.ends_with('.'), "{msg}");
        fx.assert_no_host_path(e);
    }
    assert!(
        errors[0].to_string().contains("`/workspace/abs`"),
        "{}",
        errors[0]
    );
}
