//! The log's secret keys, each a file of 64 hex digits beside the log (`checkpoint.key` signs
//! checkpoints, `redaction.key` digests redacted values): 0600, created on first use, refused
//! when others can read it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Reads the key in `dir/name`, creating it with fresh random bytes if absent. The new key is
/// written to a draft of a random name and published under its name only if none is there (a
/// hard link, else a rename that replaces nothing), so a process opening the same log at the
/// same moment (on this host or another sharing the directory) reads either no key (and makes
/// its own, which loses the race) or the whole of the winner's. A filesystem with neither gets
/// the key written in place: a reader that finds it half-written waits for the rest.
pub(crate) fn load_or_create(dir: &Path, name: &str, what: &str) -> io::Result<[u8; 32]> {
    let path = dir.join(name);
    match load(&path, what) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        loaded => return loaded,
    }
    let random = || -> io::Result<[u8; 32]> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(bytes)
    };
    let key = random()?;
    let draft = dir.join(format!(".{name}.{}.new", hex::encode(&random()?[..8])));
    let mut file = create_private(&draft)?;
    let published = (|| {
        file.write_all(hex::encode(key).as_bytes())?;
        file.sync_all()?;
        match std::fs::hard_link(&draft, &path) {
            Err(e) if unsupported(&e) => {
                let flags = rustix::fs::RenameFlags::NOREPLACE;
                let cwd = rustix::fs::CWD;
                rustix::fs::renameat_with(cwd, &draft, cwd, &path, flags).map_err(io::Error::from)
            }
            linked => linked,
        }
    })();
    drop(file);
    let _ = std::fs::remove_file(&draft);
    let made = match published {
        Err(e) if unsupported(&e) || e.raw_os_error() == Some(libc::EINVAL) => {
            write_in_place(&path, &key)
        }
        published => published,
    };
    match made {
        Ok(()) => {
            File::open(dir)?.sync_all()?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load_when_written(&path, what),
        Err(e) => Err(e),
    }
}

/// An error of a filesystem that cannot do what was asked (no hard links, no `renameat2`).
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS)
    )
}

/// Writes the key as a new file named `path` (not atomic: see [`load_when_written`]); a file
/// left half-written by a failure is removed.
fn write_in_place(path: &Path, key: &[u8; 32]) -> io::Result<()> {
    let mut file = create_private(path)?;
    let written = file
        .write_all(hex::encode(key).as_bytes())
        .and_then(|()| file.sync_all());
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// [`load`], given a second for a key another process is writing in place to be whole.
fn load_when_written(path: &Path, what: &str) -> io::Result<[u8; 32]> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match load(path, what) {
            Err(e)
                if e.kind() == io::ErrorKind::InvalidData && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            loaded => return loaded,
        }
    }
}

/// A new file only this user may read or write (never through a link).
fn create_private(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A key file others can read: the key must be taken as leaked.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is readable by others; `chmod 600` it (and consider the key leaked)")]
struct ExposedKey(String);

/// Whether `error`, from reading a key file, is that others can read it (the key may have
/// leaked), rather than that it is missing, damaged or not a regular file.
pub fn is_exposed_key(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|e| e.is::<ExposedKey>())
}

/// Reads the key in `path`: a regular file (not a link, a FIFO or a device), this user's (or
/// read by root), that others cannot read, of 64 hex digits.
pub(crate) fn load(path: &Path, what: &str) -> io::Result<[u8; 32]> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    let euid = rustix::process::geteuid().as_raw();
    if !meta.is_file() || (euid != 0 && meta.uid() != euid) {
        return Err(io::Error::other(format!(
            "`{}` is not a regular file of this user's; a key is one",
            path.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::other(ExposedKey(path.display().to_string())));
    }
    let mut text = String::new();
    file.take(256).read_to_string(&mut text)?;
    hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("`{}` is not {what} (64 hex digits)", path.display()),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_kept_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), "k.key", "a key").unwrap();
        assert_eq!(load_or_create(dir.path(), "k.key", "a key").unwrap(), first);
        let path = dir.path().join("k.key");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no draft left behind");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let readable = load_or_create(dir.path(), "k.key", "a key").unwrap_err();
        assert!(
            readable.to_string().contains("readable by others") && is_exposed_key(&readable),
            "{readable}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "not hex").unwrap();
        let garbled = load(&path, "a key").unwrap_err();
        assert!(
            garbled.to_string().contains("is not a key (64 hex digits)"),
            "{garbled}"
        );
    }

    /// Where neither a hard link nor a rename that replaces nothing is possible, the key is
    /// written in place: never over one that is there, and a reader that finds it half-written
    /// waits for the rest.
    #[test]
    fn a_key_written_in_place_is_private_and_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        write_in_place(&path, &[9; 32]).unwrap();
        assert_eq!(load(&path, "a key").unwrap(), [9; 32]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = write_in_place(&path, &[8; 32]).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(load(&path, "a key").unwrap(), [9; 32]);

        let half = dir.path().join("half.key");
        let mut file = create_private(&half).unwrap();
        file.write_all(&hex::encode([7u8; 32]).as_bytes()[..20])
            .unwrap();
        let reader = std::thread::spawn({
            let half = half.clone();
            move || load_when_written(&half, "a key")
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        file.write_all(&hex::encode([7u8; 32]).as_bytes()[20..])
            .unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), [7; 32]);
    }

    #[test]
    fn a_fifo_or_a_link_is_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.key");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let refused = load(&fifo, "a key").unwrap_err();
        assert!(
            refused.to_string().contains("not a regular file"),
            "{refused}"
        );
        let real = dir.path().join("real.key");
        write_in_place(&real, &[1; 32]).unwrap();
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(load(&link, "a key").is_err(), "a link is not followed");
    }

    #[test]
    fn processes_racing_to_make_the_key_all_get_the_same_one() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<_> = std::thread::scope(|scope| {
            let racing: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| load_or_create(dir.path(), "k.key", "a key")))
                .collect();
            racing.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let first = keys[0].as_ref().unwrap();
        assert!(
            keys.iter().all(|k| k.as_ref().ok() == Some(first)),
            "{keys:?}"
        );
    }
}
