//! `make_directory`: create a directory, optionally with its missing parents.
//!
//! Parents are created one at a time beneath the root, following no symlink (a link on the way
//! is refused, [`super::roots`]); without `parents` the parent is opened once and the final
//! name created in it.

use super::error::FileError;
use super::path::SandboxPath;
use super::roots::InstanceRoots;

/// A request to create the directory `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MakeDirectoryRequest {
    /// Sandbox-view path.
    pub path: String,
    /// Create missing parents, and succeed if the directory already exists.
    pub parents: bool,
}

/// The directory made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MakeDirectoryResult {
    /// Canonical sandbox-view path, escaped.
    pub path: String,
    /// False if it already existed (only possible with `parents`).
    pub created: bool,
}

/// Creates a directory beneath the instance roots.
pub fn make_directory(
    roots: &InstanceRoots,
    req: &MakeDirectoryRequest,
) -> Result<MakeDirectoryResult, FileError> {
    let path = SandboxPath::parse(&req.path)?;
    path.check_creatable()?;
    let io_err = |e| FileError::from_io("create directory", &path, e);
    let created = if req.parents {
        roots.make_dirs(&path, path.components().len())?
    } else {
        let (dir, name) = roots.open_parent(&path, "created")?;
        dir.create_dir(name).map_err(io_err)?;
        true
    };
    Ok(MakeDirectoryResult {
        path: path.to_string(),
        created,
    })
}
