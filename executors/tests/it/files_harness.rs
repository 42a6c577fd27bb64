//! Shared fixture for the files executor tests (`files_*.rs`).
//!
//! Layout in a fresh temp dir `T`:
//!
//! ```text
//! T/secret.txt                 outside canary (SECRET)
//! T/victim.txt                 outside file a write must never touch
//! T/outside/secret.txt         outside directory with a canary of the same name as inside files
//! T/instance/workspace/        root: /workspace (holds inside.txt, sub/deep.txt)
//! T/instance/output/           root: /output
//! T/instance/workspace2/, output2/   siblings whose names share a prefix with the roots
//! ```
//!
//! [`Fixture::outside_snapshot`] records everything under `T` except the two roots, so a test can
//! assert that nothing outside was created, modified or removed. [`Op`] and [`run`] express one
//! file-tool call as a table cell.

// A fixture is built explicitly, never defaulted.
#![allow(clippy::new_without_default)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use hpcgate_executors::files::{
    CopyRequest, DeleteRequest, FileError, FileLimits, InstanceRoots, ListRequest,
    MakeDirectoryRequest, MoveRequest, ReadRequest, SearchRequest, StatRequest, WriteMode,
    WriteRequest, copy_path, delete_path, list_directory, make_directory, move_path, read_file,
    search_files, stat_path, write_file,
};

/// Content of every outside canary; no result may ever contain it.
pub const SECRET: &[u8] = b"TOP-SECRET-CANARY-4f1c";
/// Content of files legitimately inside the workspace.
pub const INSIDE: &[u8] = b"inside content";

pub struct Fixture {
    /// Keeps the temp dir alive (removed on drop).
    #[allow(dead_code)]
    pub tmp: tempfile::TempDir,
    pub top: PathBuf,
    pub ws: PathBuf,
    pub out: PathBuf,
    pub roots: InstanceRoots,
    pub limits: FileLimits,
}

/// One outside object: its kind and content (files), target (links) or nothing (dirs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snap {
    File(Vec<u8>),
    Dir,
    Link(PathBuf),
    Other,
}

impl Fixture {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let top = tmp.path().canonicalize().expect("canonical temp dir");
        let ws = top.join("instance/workspace");
        let out = top.join("instance/output");
        for d in [
            &ws,
            &out,
            &top.join("outside"),
            &top.join("instance/workspace2"),
        ] {
            fs::create_dir_all(d).expect("mkdir");
        }
        fs::create_dir_all(top.join("instance/output2")).expect("mkdir");
        fs::write(top.join("secret.txt"), SECRET).expect("write");
        fs::write(top.join("victim.txt"), SECRET).expect("write");
        fs::write(top.join("outside/secret.txt"), SECRET).expect("write");
        fs::write(top.join("outside/inside.txt"), SECRET).expect("write");
        fs::write(top.join("instance/workspace2/x"), SECRET).expect("write");
        fs::write(top.join("instance/output2/x"), SECRET).expect("write");
        fs::write(ws.join("inside.txt"), INSIDE).expect("write");
        fs::create_dir_all(ws.join("sub")).expect("mkdir");
        fs::write(ws.join("sub/deep.txt"), INSIDE).expect("write");
        let roots = InstanceRoots::ambient(&ws, &out);
        Self {
            tmp,
            top,
            ws,
            out,
            roots,
            limits: FileLimits::default(),
        }
    }

    /// Creates a symlink at `ws/<link>` whose content is `target` (taken literally).
    pub fn symlink(&self, target: impl AsRef<Path>, link: &str) {
        let at = self.ws.join(link);
        if let Some(parent) = at.parent() {
            fs::create_dir_all(parent).expect("mkdir for link");
        }
        std::os::unix::fs::symlink(target, at).expect("symlink");
    }

    /// Everything under `T` except the two roots.
    pub fn outside_snapshot(&self) -> BTreeMap<PathBuf, Snap> {
        let mut map = BTreeMap::new();
        let mut stack = vec![self.top.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).expect("read_dir") {
                let path = entry.expect("entry").path();
                if path == self.ws || path == self.out {
                    continue;
                }
                let md = fs::symlink_metadata(&path).expect("lstat");
                let snap = if md.file_type().is_symlink() {
                    Snap::Link(fs::read_link(&path).expect("readlink"))
                } else if md.is_dir() {
                    stack.push(path.clone());
                    Snap::Dir
                } else if md.is_file() {
                    Snap::File(fs::read(&path).expect("read"))
                } else {
                    Snap::Other
                };
                map.insert(path, snap);
            }
        }
        map
    }

    /// Asserts an error message names no host path.
    pub fn assert_no_host_path(&self, err: &FileError) {
        let msg = err.to_string();
        assert!(
            !msg.contains(self.top.to_str().expect("utf-8 temp path")),
            "error message leaks a host path: {msg}"
        );
    }
}

/// The variant name of an error, for table rows.
pub fn variant(err: &FileError) -> &'static str {
    match err {
        FileError::InvalidPath { .. } => "InvalidPath",
        FileError::EscapeAttempt { .. } => "EscapeAttempt",
        FileError::NotFound { .. } => "NotFound",
        FileError::AlreadyExists { .. } => "AlreadyExists",
        FileError::TooLarge { .. } => "TooLarge",
        FileError::NotAFile { .. } => "NotAFile",
        FileError::NotADirectory { .. } => "NotADirectory",
        FileError::SpecialFile { .. } => "SpecialFile",
        FileError::MultipleHardLinks { .. } => "MultipleHardLinks",
        FileError::SymlinkNotFollowed { .. } => "SymlinkNotFollowed",
        FileError::IsRoot { .. } => "IsRoot",
        FileError::DirectoryNotEmpty { .. } => "DirectoryNotEmpty",
        FileError::CrossFilesystem { .. } => "CrossFilesystem",
        FileError::InvalidRequest { .. } => "InvalidRequest",
        FileError::TreeTooLarge { .. } => "TreeTooLarge",
        FileError::InvalidPattern { .. } => "InvalidPattern",
        FileError::NotUtf8 { .. } => "NotUtf8",
        FileError::RootUnavailable { .. } => "RootUnavailable",
        FileError::Io { .. } => "Io",
        _ => "unknown",
    }
}

/// One file-tool call.
#[derive(Debug, Clone)]
pub enum Op {
    Read(String),
    Write(String),
    CreateNew(String),
    Append(String),
    WriteDirs(String),
    List(String),
    Stat(String),
    Mkdir(String),
    MkdirP(String),
    MoveFrom(String),
    MoveTo(String),
    CopyFrom(String),
    CopyTo(String),
    Delete(String),
    DeleteRec(String),
    Search(String),
}

/// Runs `op`; `Ok` carries any bytes the call returned (read data).
pub fn run(fx: &Fixture, op: &Op) -> Result<Vec<u8>, FileError> {
    let w = |path: &str, mode, create_dirs| WriteRequest {
        path: path.into(),
        data: b"PAYLOAD".to_vec(),
        mode,
        create_dirs,
    };
    let (r, l) = (&fx.roots, &fx.limits);
    match op {
        Op::Read(p) => read_file(
            r,
            l,
            &ReadRequest {
                path: p.clone(),
                offset: 0,
                length: None,
            },
        )
        .map(|res| res.data),
        Op::Write(p) => write_file(r, l, &w(p, WriteMode::Replace, false)).map(|_| vec![]),
        Op::CreateNew(p) => write_file(r, l, &w(p, WriteMode::CreateNew, false)).map(|_| vec![]),
        Op::Append(p) => write_file(r, l, &w(p, WriteMode::Append, false)).map(|_| vec![]),
        Op::WriteDirs(p) => write_file(r, l, &w(p, WriteMode::Replace, true)).map(|_| vec![]),
        Op::List(p) => {
            let req = ListRequest {
                path: p.clone(),
                recursive: true,
                max_entries: None,
            };
            list_directory(r, l, &req).map(|res| format!("{res:?}").into_bytes())
        }
        Op::Stat(p) => stat_path(r, &StatRequest { path: p.clone() }).map(|_| vec![]),
        Op::Mkdir(p) => make_directory(
            r,
            &MakeDirectoryRequest {
                path: p.clone(),
                parents: false,
            },
        )
        .map(|_| vec![]),
        Op::MkdirP(p) => make_directory(
            r,
            &MakeDirectoryRequest {
                path: p.clone(),
                parents: true,
            },
        )
        .map(|_| vec![]),
        Op::MoveFrom(p) => {
            let req = MoveRequest {
                from: p.clone(),
                to: "moved".into(),
                overwrite: true,
                max_bytes: None,
            };
            move_path(r, l, &req).map(|_| vec![])
        }
        Op::MoveTo(p) => {
            let req = MoveRequest {
                from: "inside.txt".into(),
                to: p.clone(),
                overwrite: true,
                max_bytes: None,
            };
            move_path(r, l, &req).map(|_| vec![])
        }
        Op::CopyFrom(p) => {
            let req = CopyRequest {
                from: p.clone(),
                to: "copied".into(),
                overwrite: true,
                max_bytes: None,
            };
            copy_path(r, l, &req).map(|_| vec![])
        }
        Op::CopyTo(p) => {
            let req = CopyRequest {
                from: "inside.txt".into(),
                to: p.clone(),
                overwrite: true,
                max_bytes: None,
            };
            copy_path(r, l, &req).map(|_| vec![])
        }
        Op::Delete(p) => delete_path(
            r,
            l,
            &DeleteRequest {
                path: p.clone(),
                recursive: false,
            },
        )
        .map(|_| vec![]),
        Op::DeleteRec(p) => delete_path(
            r,
            l,
            &DeleteRequest {
                path: p.clone(),
                recursive: true,
            },
        )
        .map(|_| vec![]),
        Op::Search(p) => {
            let req = SearchRequest {
                path: p.clone(),
                pattern: "**".into(),
                max_results: None,
            };
            search_files(r, l, &req).map(|res| format!("{res:?}").into_bytes())
        }
    }
}

pub fn all_ops(p: &str) -> Vec<Op> {
    let p = p.to_string();
    vec![
        Op::Read(p.clone()),
        Op::Write(p.clone()),
        Op::CreateNew(p.clone()),
        Op::Append(p.clone()),
        Op::WriteDirs(p.clone()),
        Op::List(p.clone()),
        Op::Stat(p.clone()),
        Op::Mkdir(p.clone()),
        Op::MkdirP(p.clone()),
        Op::MoveFrom(p.clone()),
        Op::MoveTo(p.clone()),
        Op::CopyFrom(p.clone()),
        Op::CopyTo(p.clone()),
        Op::Delete(p.clone()),
        Op::DeleteRec(p.clone()),
        Op::Search(p),
    ]
}
