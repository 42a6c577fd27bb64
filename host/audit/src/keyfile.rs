//! The log's secret keys, each a file of 64 hex digits beside the log (`checkpoint.key` signs
//! checkpoints, `redaction.key` digests redacted values): 0600, created on first use, refused
//! when others can read it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Reads the key in `dir/name`, creating it with fresh random bytes if absent. The new key is
/// written to a draft of a random name and linked into place, so a process opening the same
/// log at the same moment (on this host or another sharing the directory) reads either no key
/// (and makes its own, which loses the race) or the whole of the winner's, never a
/// half-written file. A filesystem without hard links gets the key written in place instead.
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
    let linked = (|| {
        file.write_all(hex::encode(key).as_bytes())?;
        file.sync_all()?;
        std::fs::hard_link(&draft, &path)
    })();
    drop(file);
    let _ = std::fs::remove_file(&draft);
    let made = match linked {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
            create_private(&path).and_then(|mut file| {
                file.write_all(hex::encode(key).as_bytes())?;
                file.sync_all()
            })
        }
        linked => linked,
    };
    match made {
        Ok(()) => {
            File::open(dir)?.sync_all()?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load(&path, what),
        Err(e) => Err(e),
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

/// Reads the key in `path`; refuses one others can read, or that is not 64 hex digits.
pub(crate) fn load(path: &Path, what: &str) -> io::Result<[u8; 32]> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    if file.metadata()?.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "`{}` is readable by others; `chmod 600` it (and consider the key leaked)",
            path.display()
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            io::Error::other(format!(
                "`{}` is not {what} (64 hex digits)",
                path.display()
            ))
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
            readable.to_string().contains("readable by others"),
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
