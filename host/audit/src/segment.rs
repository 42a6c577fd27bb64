//! The files of the log: `audit-000001.jsonl`, `audit-000002.jsonl`, ... in one private
//! directory (0700), each 0600, opened with `O_NOFOLLOW`, plus the lock file `audit.lock` that
//! serialises writers across processes. While a writer is open, the newest segment may end in
//! zeros allocated ahead of its records (see the writer); a record never holds a NUL byte (JSON
//! escapes it), so a segment's content is its bytes up to its trailing zeros ([`data_len`]).
//! A closed segment may be compressed (`audit-000001.jsonl.zst`, see `compress`): while both
//! forms of a segment exist (a compression under way or interrupted) the plain one is the
//! segment and the other is ignored; [`open_stream`] reads either as the plain bytes.

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::compress;
use super::error::{AuditError, arc};

pub(crate) const LOCK_FILE: &str = "audit.lock";

/// The name of segment `number`.
pub(crate) fn file_name(number: u64) -> String {
    format!("audit-{number:06}.jsonl")
}

/// The name of segment `number` compressed.
pub(crate) fn compressed_name(number: u64) -> String {
    format!("audit-{number:06}.jsonl.zst")
}

/// The number of a segment file and whether it is the compressed form.
fn parse_file_name(name: &str) -> Option<(u64, bool)> {
    let (name, compressed) = match name.strip_suffix(".zst") {
        Some(plain) => (plain, true),
        None => (name, false),
    };
    let digits = name.strip_prefix("audit-")?.strip_suffix(".jsonl")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, compressed))
}

/// One segment file.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub number: u64,
    /// The file: `audit-NNNNNN.jsonl`, or `audit-NNNNNN.jsonl.zst` when `compressed`.
    pub path: PathBuf,
    pub compressed: bool,
}

impl Segment {
    /// The plain (uncompressed) segment `number`.
    pub fn new(dir: &Path, number: u64) -> Segment {
        Segment {
            number,
            path: dir.join(file_name(number)),
            compressed: false,
        }
    }

    /// The compressed segment `number`.
    pub fn compressed(dir: &Path, number: u64) -> Segment {
        Segment {
            number,
            path: dir.join(compressed_name(number)),
            compressed: true,
        }
    }

    /// The file's name inside the directory.
    pub fn name(&self) -> String {
        if self.compressed {
            compressed_name(self.number)
        } else {
            file_name(self.number)
        }
    }

    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

/// The segments in `dir`, oldest first, each in its plain form where that exists. A missing
/// directory has none.
///
/// A compression renames the compressed file in before it removes the plain one, so one of
/// them always exists; but a directory listing taken meanwhile may see neither. A number
/// missing between two listed ones at most 64 apart is therefore looked up by name (the plain
/// file first, since the compressed one exists before the plain one goes).
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
    let mut found: BTreeMap<u64, bool> = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(read)?;
        if let Some((number, compressed)) = entry.file_name().to_str().and_then(parse_file_name) {
            let only_compressed = found.get(&number).copied().unwrap_or(true) && compressed;
            found.insert(number, only_compressed);
        }
    }
    // A number between two listed ones is looked for too: a segment being compressed (or read
    // back) may have been renamed while the directory was read. Only across a short gap: a
    // stray file numbered in the billions must not make every open count up to it.
    const MAX_LOOKED_GAP: u64 = 64;
    let listed: Vec<u64> = found.keys().copied().collect();
    let numbers = listed.iter().enumerate().flat_map(|(i, &number)| {
        let between = match listed.get(i + 1) {
            Some(&next) if next - number <= MAX_LOOKED_GAP => number + 1..next,
            _ => 0..0,
        };
        std::iter::once(number).chain(between)
    });
    let mut segments = Vec::with_capacity(found.len());
    for number in numbers {
        let segment = match found.get(&number) {
            Some(false) => Segment::new(dir, number),
            Some(true) => Segment::compressed(dir, number),
            None if Segment::new(dir, number).path.exists() => Segment::new(dir, number),
            None if Segment::compressed(dir, number).path.exists() => {
                Segment::compressed(dir, number)
            }
            None => continue,
        };
        segments.push(segment);
    }
    Ok(segments)
}

/// The length of `segment`'s plain bytes to read: its content's length ([`data_len`]), or for
/// a compressed segment (closed, so it does not grow) `u64::MAX`, to its end.
pub(crate) fn plain_len(segment: &Segment) -> Result<u64, AuditError> {
    if segment.compressed {
        return Ok(u64::MAX);
    }
    data_len(&open_read(&segment.path)?).map_err(|source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    })
}

/// The length of `file`'s content: its length without the trailing zeros a writer allocated
/// ahead of its records. Reads backwards from the end: one small read when there are none. A
/// file cut shorter meanwhile (a writer cutting its zeros off) is read again.
pub fn data_len(file: &File) -> io::Result<u64> {
    let mut tries = 0;
    loop {
        match trimmed_len(file) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && tries < 3 => tries += 1,
            other => return other,
        }
    }
}

fn trimmed_len(file: &File) -> io::Result<u64> {
    let mut end = file.metadata()?.len();
    let mut buf = vec![0; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b != 0) {
            return Ok(start + i as u64 + 1);
        }
        end = start;
        buf.resize(64 * 1024, 0);
    }
    Ok(0)
}

/// `segment`'s plain bytes `[from, len)` as a stream, decompressed if need be. A plain segment
/// that is gone (compressed since it was listed) is read from its compressed form.
pub(crate) fn open_stream(
    segment: &Segment,
    from: u64,
    len: u64,
) -> Result<Box<dyn Read + Send>, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let mut compressed = segment.compressed;
    let file = match open_read(&segment.path) {
        Err(AuditError::Read { source, .. })
            if !compressed && source.kind() == io::ErrorKind::NotFound =>
        {
            compressed = true;
            open_read(&Segment::compressed(segment.dir(), segment.number).path)?
        }
        other => other?,
    };
    let rest = len.saturating_sub(from);
    if !compressed {
        let mut file = file;
        file.seek(SeekFrom::Start(from)).map_err(read)?;
        return Ok(Box::new(file.take(rest)));
    }
    let mut decoder = compress::decoder(file).map_err(read)?;
    io::copy(&mut (&mut decoder).take(from), &mut io::sink()).map_err(read)?;
    Ok(Box::new(decoder.take(rest)))
}

/// A compressed segment's plain bytes from the frame that starts at `offset` in the file.
pub(crate) fn open_compressed_at(
    segment: &Segment,
    offset: u64,
) -> Result<Box<dyn Read + Send>, AuditError> {
    let read = |source| AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    };
    let mut file = open_read(&segment.path)?;
    file.seek(SeekFrom::Start(offset)).map_err(read)?;
    Ok(Box::new(compress::decoder(file).map_err(read)?))
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
    open_private(path, create_new, OpenOptions::new().append(true))
}

/// [`open_append`] for the writer's live segment, which it writes at its records' end with
/// `pwrite` (zeros allocated ahead may follow them); `O_APPEND` would make every `pwrite` land
/// after those zeros.
pub(crate) fn open_live(path: &Path, create_new: bool) -> Result<File, AuditError> {
    open_private(path, create_new, OpenOptions::new().write(true))
}

fn open_private(
    path: &Path,
    create_new: bool,
    options: &mut OpenOptions,
) -> Result<File, AuditError> {
    options
        .read(true)
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
        assert_eq!(parse_file_name("audit-000007.jsonl"), Some((7, false)));
        assert_eq!(parse_file_name("audit-000007.jsonl.zst"), Some((7, true)));
        assert_eq!(parse_file_name("audit-7.jsonl"), None);
        assert_eq!(parse_file_name("audit-000007.jsonl.bak"), None);
        assert_eq!(parse_file_name("audit-000007.jsonl.zst.tmp"), None);
    }

    /// Every listed segment is found, and a short gap is looked into, but a stray file numbered
    /// in the billions does not make the list count up to it (it took hours).
    #[test]
    fn a_far_numbered_file_is_listed_without_counting_up_to_it() {
        let dir = tempfile::tempdir().unwrap();
        for number in [1, 2, 4, 999_999_999_999] {
            std::fs::write(dir.path().join(file_name(number)), "").unwrap();
        }
        let started = std::time::Instant::now();
        let numbers: Vec<u64> = list(dir.path()).unwrap().iter().map(|s| s.number).collect();
        assert_eq!(numbers, [1, 2, 4, 999_999_999_999]);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
