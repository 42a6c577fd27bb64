//! The files of the log: `audit-000001.jsonl`, `audit-000002.jsonl`, ... in one private
//! directory (0700), each 0600, opened with `O_APPEND` and `O_NOFOLLOW`, plus the lock file
//! `audit.lock` that serialises writers across processes.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::{AuditError, arc};

pub(crate) const LOCK_FILE: &str = "audit.lock";

/// The name of segment `number`.
pub(crate) fn file_name(number: u64) -> String {
    format!("audit-{number:06}.jsonl")
}

fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("audit-")?.strip_suffix(".jsonl")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One segment file.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub number: u64,
    pub path: PathBuf,
}

impl Segment {
    pub fn new(dir: &Path, number: u64) -> Segment {
        Segment {
            number,
            path: dir.join(file_name(number)),
        }
    }

    pub fn name(&self) -> String {
        file_name(self.number)
    }
}

/// The segments in `dir`, oldest first. A missing directory has none.
pub(crate) fn list(dir: &Path) -> Result<Vec<Segment>, AuditError> {
    let read = |source| AuditError::Read {
        path: dir.to_owned(),
        source: arc(source),
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read(e)),
    };
    let mut segments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read)?;
        if let Some(number) = entry.file_name().to_str().and_then(parse_file_name) {
            segments.push(Segment::new(dir, number));
        }
    }
    segments.sort_by_key(|s| s.number);
    Ok(segments)
}

/// Creates `dir` (0700) if needed; refuses a symlink or a non-directory; tightens a directory
/// that others could read.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), AuditError> {
    let create = |source| AuditError::CreateDir {
        dir: dir.to_owned(),
        source: arc(source),
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(create)?;
    let meta = fs::symlink_metadata(dir).map_err(create)?;
    if !meta.is_dir() {
        return Err(AuditError::NotADirectory {
            dir: dir.to_owned(),
        });
    }
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(create)?;
    }
    Ok(())
}

/// Opens (creating if `create`, exclusively if `create_new`) a file for reading and appending,
/// never through a symlink.
pub(crate) fn open_append(path: &Path, create_new: bool) -> Result<File, AuditError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true);
    }
    let file = options.open(path).map_err(|source| AuditError::Open {
        path: path.to_owned(),
        source: arc(source),
    })?;
    let mode = file
        .metadata()
        .map_err(|source| AuditError::Open {
            path: path.to_owned(),
            source: arc(source),
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|source| AuditError::Open {
                path: path.to_owned(),
                source: arc(source),
            })?;
    }
    Ok(file)
}

/// Opens a file for reading only, never through a symlink.
pub(crate) fn open_read(path: &Path) -> Result<File, AuditError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| AuditError::Read {
            path: path.to_owned(),
            source: arc(source),
        })
}

/// Makes a new directory entry durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_number() {
        assert_eq!(file_name(7), "audit-000007.jsonl");
        assert_eq!(file_name(1_234_567), "audit-1234567.jsonl");
        assert_eq!(parse_file_name("audit-000007.jsonl"), Some(7));
        assert_eq!(parse_file_name("audit-7.jsonl"), None);
        assert_eq!(parse_file_name("audit-000007.jsonl.bak"), None);
    }
}
