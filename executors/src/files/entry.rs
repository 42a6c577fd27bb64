//! What kind of thing a directory entry is, and its metadata in result form.

use cap_std::fs::{FileType, FileTypeExt, Metadata, MetadataExt};

/// The type of a filesystem object, as reported without following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharDevice,
    Other,
}

impl EntryKind {
    /// Classifies a `FileType`.
    pub fn of(ft: FileType) -> Self {
        if ft.is_file() {
            Self::File
        } else if ft.is_dir() {
            Self::Directory
        } else if ft.is_symlink() {
            Self::Symlink
        } else if ft.is_fifo() {
            Self::Fifo
        } else if ft.is_socket() {
            Self::Socket
        } else if ft.is_block_device() {
            Self::BlockDevice
        } else if ft.is_char_device() {
            Self::CharDevice
        } else {
            Self::Other
        }
    }

    /// A lowercase description for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
            Self::Symlink => "symbolic link",
            Self::Fifo => "fifo",
            Self::Socket => "socket",
            Self::BlockDevice => "block device",
            Self::CharDevice => "character device",
            Self::Other => "special file",
        }
    }

    /// True for FIFOs, sockets and devices: never opened by the file tools.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            Self::Fifo | Self::Socket | Self::BlockDevice | Self::CharDevice | Self::Other
        )
    }
}

/// Size, time and permission facts common to `stat_path` and listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EntryFacts {
    pub kind: EntryKind,
    /// Size in bytes (for a symlink: the length of its target).
    pub size: u64,
    /// Last modification, seconds since the Unix epoch.
    pub modified_unix: i64,
    /// The nanoseconds of the last modification within its second (`st_mtime_nsec`).
    pub modified_nsec: u32,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    /// Number of hard links.
    pub hard_links: u64,
}

impl EntryFacts {
    /// Extracts the facts from metadata obtained without following the final component.
    pub fn from_metadata(md: &Metadata) -> Self {
        Self {
            kind: EntryKind::of(md.file_type()),
            size: md.len(),
            modified_unix: md.mtime(),
            modified_nsec: nsec(md),
            mode: md.mode() & 0o7777,
            hard_links: md.nlink(),
        }
    }
}

/// The nanoseconds of `md`'s modification time within its second (0 if the kernel says more).
pub(crate) fn nsec(md: &Metadata) -> u32 {
    u32::try_from(md.mtime_nsec()).unwrap_or(0)
}

/// Refuses anything but a regular file with (unless allowed) a single hard link. Called on the
/// metadata of an already-open descriptor, so the answer is about the object actually opened.
pub(crate) fn require_regular(
    path: &super::path::SandboxPath,
    md: &Metadata,
    allow_hard_links: bool,
) -> Result<(), super::error::FileError> {
    use super::error::FileError;
    let kind = EntryKind::of(md.file_type());
    match kind {
        EntryKind::File => {}
        EntryKind::Directory => {
            return Err(FileError::NotAFile {
                path: path.to_string(),
            });
        }
        EntryKind::Symlink => {
            return Err(FileError::SymlinkNotFollowed {
                path: path.to_string(),
            });
        }
        special => {
            return Err(FileError::SpecialFile {
                path: path.to_string(),
                kind: special.describe(),
            });
        }
    }
    if md.nlink() > 1 && !allow_hard_links {
        return Err(FileError::MultipleHardLinks {
            path: path.to_string(),
            links: md.nlink(),
        });
    }
    Ok(())
}

/// Flags for every open of an existing file: never block on a FIFO or device, never acquire a
/// controlling terminal.
pub(crate) fn nonblocking_flags() -> i32 {
    use rustix::fs::OFlags;
    (OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32
}
