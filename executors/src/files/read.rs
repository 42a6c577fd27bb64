//! `read_file`: a byte range of a regular file.
//!
//! No symlink is followed, final or on the way ([`super::roots`]); the type is checked before
//! opening, so a FIFO or device is never opened, and checked again on the
//! opened descriptor, so a swap between the two checks is caught. Files with several hard links
//! are refused unless [`FileLimits::allow_read_hard_linked`] is set.

use std::io::{Read, Seek, SeekFrom};

use super::error::FileError;
use super::limits::FileLimits;
use super::path::SandboxPath;
use super::roots::InstanceRoots;

/// A request for `length` bytes (capped by [`FileLimits::max_read_bytes`]) from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// Sandbox-view path.
    pub path: String,
    /// First byte to return.
    pub offset: u64,
    /// Bytes wanted; `None` means as many as the cap allows.
    pub length: Option<u64>,
}

/// The bytes read; encode them with [`super::encoding::encode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Canonical sandbox-view path, escaped.
    pub path: String,
    /// Where `data` starts in the file.
    pub offset: u64,
    pub data: Vec<u8>,
    /// Size of the file when it was opened.
    pub total_size: u64,
    /// True when `data` reaches the end of the file; otherwise read again from `offset + len`.
    pub eof: bool,
}

/// Reads a byte range of a regular file beneath the instance roots.
pub fn read_file(
    roots: &InstanceRoots,
    limits: &FileLimits,
    req: &ReadRequest,
) -> Result<ReadResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    let io_err = |e| FileError::from_io("read", &path, e);
    let (mut file, md) = super::open::open_regular(roots, limits, &path)?;

    let total_size = md.len();
    let want = req
        .length
        .unwrap_or(limits.max_read_bytes)
        .min(limits.max_read_bytes);
    let mut data = Vec::new();
    if req.offset < total_size && want > 0 {
        file.seek(SeekFrom::Start(req.offset)).map_err(io_err)?;
        let take = want.min(total_size - req.offset);
        data.reserve(usize::try_from(take).unwrap_or(0));
        (&mut file)
            .take(take)
            .read_to_end(&mut data)
            .map_err(io_err)?;
    }
    let end = req.offset.saturating_add(data.len() as u64);
    Ok(ReadResult {
        path: path.to_string(),
        offset: req.offset,
        data,
        total_size,
        eof: end >= total_size,
    })
}
