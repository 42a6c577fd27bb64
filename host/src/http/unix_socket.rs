//! The gateway's own Unix socket: made with the mode asked for, never where others could
//! replace it, a stale one replaced, and removed again at shutdown.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tokio::net::UnixListener;

/// Binds `path` with `mode`, replacing a stale socket and refusing anything else.
pub(super) fn bind_unix(path: &Path, mode: u32) -> anyhow::Result<UnixListener> {
    check_socket_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect `{}`", path.display())),
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt as _;
            if !meta.file_type().is_socket() {
                bail!(
                    "`{}` exists and is not a socket: choose another `--uds` path or remove it",
                    path.display()
                );
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "`{}` is in use by a running server: stop it or choose another `--uds` path",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket `{}`", path.display()))?;
        }
    }
    // The socket file is created by bind with the process umask; tighten the umask around it so
    // the socket is never connectable by others, not even between bind and a chmod. The runtime's
    // other threads create no files at this point.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    let bound =
        bound.with_context(|| format!("cannot listen on the Unix socket `{}`", path.display()))?;
    // Widening after bind opens nothing too early: the wider mode is the intended one.
    if mode != 0o600 {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).with_context(
            || {
                format!(
                    "cannot set mode {mode:o} on the Unix socket `{}`",
                    path.display()
                )
            },
        )?;
    }
    Ok(bound)
}

/// Refuses a socket path in a directory others may write without the sticky bit: they could
/// replace a stale socket, or the new one between its creation and its mode being set, and
/// take the clients' tokens. (In a sticky directory such as `/tmp` nobody else may remove or
/// rename our file.)
fn check_socket_dir(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = (path.parent())
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("cannot inspect the socket's directory `{}`", dir.display()))?;
    let sticky = meta.mode() & 0o1000 != 0;
    let others_write = meta.mode() & 0o022 != 0;
    let own = rustix::process::geteuid().as_raw();
    if !sticky && (others_write || (meta.uid() != own && meta.uid() != 0)) {
        bail!(
            "the socket's directory `{}` (mode {:o}, owner uid {}) may be written by others, who could replace the socket and take its clients' tokens: put `--uds` in a directory only you or root can write",
            dir.display(),
            meta.mode() & 0o7777,
            meta.uid()
        );
    }
    Ok(())
}

pub(super) struct RemoveOnDrop(pub(super) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
