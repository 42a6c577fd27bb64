//! File operations scoped to an instance's `/workspace` and `/output`, built on cap-std.
//!
//! The gateway names an instance's two directories once with [`InstanceRoots::ambient`] (the
//! only ambient authority here; each is opened when a path first needs it) and then calls one
//! function per tool. Paths are sandbox-view strings ([`SandboxPath`]): `/workspace/…`,
//! `/output/…`, or relative (meaning `/workspace`). Two walls keep every operation inside the
//! instance:
//!
//! 1. lexical: `..`, other absolute paths, NUL, empty and over-long paths are refused before any
//!    system call;
//! 2. structural: every directory a path names is opened by the kernel beneath a capability
//!    `Dir` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (`roots.rs`), so no symlink on the way
//!    is followed — one that leaves the root (absolute, `../..`, `/proc/self/root`) or one that
//!    stays in it — at the moment of use, with no check-then-use gap.
//!
//! **Symlink policy.** No file tool follows a symlink: path rules judge a path as written, and
//! a link a job planted (`alias -> inputs`) must not make one name a way into another. A link
//! on the way is refused with [`FileError::SymlinkNotFollowed`] naming the link; `stat_path`
//! reports a final link with its target text, so an agent can name the path it points to.
//! `delete_path` and `move_path` act on a final link itself; walks list links and never
//! descend into them.
//!
//! **Hard links.** Writing a regular file with more than one link is always refused; reading one
//! is refused unless [`FileLimits::allow_read_hard_linked`] is set, because its inode may be a
//! file outside the instance.
//!
//! **Special files.** FIFOs, sockets and devices are never read or written: the type is checked
//! without following before opening, opens use `O_NONBLOCK | O_NOCTTY`, and the type is checked
//! again on the opened descriptor.
//!
//! Names in results are escaped (see [`names`]); errors show only sandbox-view paths.
//!
//! ```
//! use hpcgate_executors::files::{
//!     Encoding, FileLimits, InstanceRoots, ReadRequest, WriteMode, WriteRequest, encode,
//!     read_file, write_file,
//! };
//! # let tmp = tempfile::tempdir().unwrap();
//! # let (ws, out) = (tmp.path().join("ws"), tmp.path().join("out"));
//! # std::fs::create_dir_all(&ws).unwrap();
//! # std::fs::create_dir_all(&out).unwrap();
//! // Once per instance, from the gateway's own records (never from an agent):
//! let roots = InstanceRoots::ambient(&ws, &out);
//! let limits = FileLimits::default();
//! let write = WriteRequest {
//!     path: "/output/result.txt".into(),
//!     data: b"42".to_vec(),
//!     mode: WriteMode::Replace,
//!     create_dirs: false,
//! };
//! write_file(&roots, &limits, &write)?;
//! let read = ReadRequest { path: "/output/result.txt".into(), offset: 0, length: None };
//! let got = read_file(&roots, &limits, &read)?;
//! assert_eq!(encode(&got.path, &got.data, Encoding::Utf8)?, "42");
//! assert!(got.eof);
//! # Ok::<(), hpcgate_executors::files::FileError>(())
//! ```

mod atomic;
mod copy;
mod delete;
mod encoding;
mod entry;
mod error;
mod limits;
mod list;
mod make_directory;
mod move_across;
mod move_path;
pub mod names;
mod open;
mod path;
mod read;
mod remove_tree;
mod roots;
mod search;
mod stat;
mod walk;
mod write;
mod write_stream;

pub use atomic::TEMP_PREFIX;
pub use copy::{CopyRequest, CopyResult, copy_path};
pub use delete::{DeleteRequest, DeleteResult, delete_path};
pub use encoding::{Encoding, decode, encode};
pub use entry::{EntryFacts, EntryKind};
pub use error::FileError;
pub use limits::FileLimits;
pub use list::{ListEntry, ListRequest, ListResult, list_directory};
pub use make_directory::{MakeDirectoryRequest, MakeDirectoryResult, make_directory};
pub use move_path::{MoveRequest, MoveResult, bytes_at, move_path};
pub use names::unescape_lossy;
pub use open::{OpenedFile, open_file};
pub use path::{MAX_PATH_BYTES, Root, SandboxPath};
pub use read::{ReadRequest, ReadResult, read_file};
pub use roots::InstanceRoots;
pub use search::{MAX_PATTERN_BYTES, SearchRequest, SearchResult, search_files};
pub use stat::{StatRequest, StatResult, stat_path};
pub use write::{WriteMode, WriteRequest, WriteResult, write_file};
pub use write_stream::{StreamWriteRequest, write_stream};
