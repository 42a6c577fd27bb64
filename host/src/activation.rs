//! systemd socket activation: `contrib/systemd/hpcgate.socket` binds the Unix socket (owner,
//! mode, the directory under `/run`) and hands the listening socket to `hpcgate run --uds
//! PATH` as file descriptor 3 (`LISTEN_PID` = this process, `LISTEN_FDS=1`, see
//! `sd_listen_fds(3)`). The gateway then serves on it instead of binding, and leaves the
//! socket file in place when it stops: it belongs to systemd, which may start the gateway
//! again on the next connection.
//!
//! Nothing is taken on trust: exactly one socket, a listening Unix stream socket, bound at the
//! `--uds` path the service was given (a unit file naming another path is an error that says
//! which two differ).

use std::os::fd::{FromRawFd as _, OwnedFd};
use std::path::Path;

use anyhow::{Context as _, bail};
use rustix::net::SocketType;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// The listening socket systemd passed for `path`, or `None` when the gateway was not
/// socket-activated (it binds `path` itself then). Called first thing, before any process
/// is started, so that no child inherits the descriptor.
pub fn inherited_unix(path: &Path) -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|pid| pid.parse::<u32>().ok())
        == Some(std::process::id());
    if !for_us {
        return Ok(None);
    }
    let count = std::env::var("LISTEN_FDS").unwrap_or_default();
    if count != "1" {
        bail!(
            "systemd passed `LISTEN_FDS={count}`; hpcgate serves exactly one socket: give `hpcgate.socket` one `ListenStream=`"
        );
    }
    // SAFETY: systemd passed descriptor 3 to this process (LISTEN_PID is our pid) for it to
    // own; nothing else in hpcgate opens or adopts it, and this runs once, at start.
    #[allow(unsafe_code)]
    let fd = unsafe { OwnedFd::from_raw_fd(LISTEN_FDS_START) };
    // Inherited without close-on-exec: no sandbox or supervisor may keep it.
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
        .context("cannot set close-on-exec on the socket systemd passed")?;
    let kind = rustix::net::sockopt::socket_type(&fd).ok();
    let listening = rustix::net::sockopt::socket_acceptconn(&fd).unwrap_or(false);
    if kind != Some(SocketType::STREAM) || !listening {
        bail!(
            "the descriptor systemd passed is not a listening stream socket: use `ListenStream=` in `hpcgate.socket`"
        );
    }
    let listener = std::os::unix::net::UnixListener::from(fd);
    let bound = listener
        .local_addr()
        .context("the socket systemd passed is not a Unix socket: `ListenStream=` takes a path")?;
    if bound.as_pathname() != Some(path) {
        bail!(
            "systemd passed a socket bound at `{}` but `--uds` is `{}`: make `ListenStream=` and `--uds` the same path",
            bound
                .as_pathname()
                .map_or("(unnamed)".into(), |p| p.display().to_string()),
            path.display()
        );
    }
    listener.set_nonblocking(true)?;
    Ok(Some(listener))
}
