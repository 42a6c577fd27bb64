//! Who owns the client's end of a TCP connection made from this host: the uid the kernel's
//! socket table gives the socket whose local address is our peer's and whose remote address is
//! ours. TCP has no `SO_PEERCRED`; this is how a single-tenant gateway learns who connects, to
//! serve over TCP only its own uid and root, as it does over its Unix socket ([`crate::auth`]).
//!
//! The kernel is asked for that one socket over netlink ([`sock_diag`], microseconds); where
//! it cannot be asked so, the table is read as text ([`proc_net`], milliseconds). Either way
//! only a socket that some process still holds counts (a non-zero inode): the kernel reports a
//! connection whose owner closed it (an orphan in `FIN_WAIT`, a `TIME_WAIT` entry) with uid 0
//! and inode 0, which must not pass for root. A socket not found — its owner closed it, or it
//! is on another host or in another network namespace — is [`SocketOwner::NotFound`], which
//! the authenticator refuses.
//!
//! The lookup runs once per connection ([`TcpPeer::owner`]), on a blocking thread, and only
//! when the gateway needs it (single-tenant). The listener also asks netlink alone, as it
//! accepts a loopback connection, whose user it counts ([`super::connections`]).

mod proc_net;
mod sock_diag;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::TcpStream;
use tokio::sync::OnceCell;

use super::connections::{Activity, Bounded};
use crate::auth::SocketOwner;

/// One TCP connection as the HTTP app sees it: the peer's address and ours, the owner of the
/// peer's socket once looked up (shared by every request on the connection), and what its
/// requests tell its idle clock.
#[derive(Debug, Clone)]
pub(crate) struct TcpPeer {
    pub(crate) remote: SocketAddr,
    local: Option<SocketAddr>,
    owner: Arc<OnceCell<SocketOwner>>,
    pub(crate) activity: Arc<Activity>,
}

impl<L: Listener<Io = TcpStream, Addr = SocketAddr>> Connected<IncomingStream<'_, Bounded<L>>>
    for TcpPeer
{
    fn connect_info(stream: IncomingStream<'_, Bounded<L>>) -> TcpPeer {
        let io = stream.io();
        TcpPeer {
            remote: *stream.remote_addr(),
            local: io.inner().local_addr().ok(),
            owner: Arc::default(),
            activity: Arc::clone(io.activity()),
        }
    }
}

impl TcpPeer {
    /// The owner of the peer's socket, looked up on the connection's first call only.
    pub(crate) async fn owner(&self) -> SocketOwner {
        let (remote, local) = (self.remote, self.local);
        *self
            .owner
            .get_or_init(|| async move {
                let Some(local) = local else {
                    return SocketOwner::NotFound;
                };
                tokio::task::spawn_blocking(move || owner_ambient(remote, local))
                    .await
                    .unwrap_or(SocketOwner::NotFound)
            })
            .await
    }
}

/// The uid owning the socket at `peer` connected to `ours`, from the kernel's socket table of
/// this process's network namespace.
pub(crate) fn owner_ambient(peer: SocketAddr, ours: SocketAddr) -> SocketOwner {
    let (peer, ours) = (canonical(peer), canonical(ours));
    let found = match sock_diag::owner_ambient(peer, ours) {
        Ok(found) => found,
        Err(_) => proc_net::owner_ambient(peer, ours),
    };
    found.map_or(SocketOwner::NotFound, SocketOwner::Uid)
}

/// [`owner_ambient`] by netlink alone (microseconds, so it may run where connections are
/// accepted); `None` where the kernel cannot be asked so, or the socket is not found.
pub(crate) fn owner_by_netlink(peer: SocketAddr, ours: SocketAddr) -> Option<u32> {
    sock_diag::owner_ambient(canonical(peer), canonical(ours))
        .ok()
        .flatten()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is: as the kernel keys a dual-stack
/// socket's IPv4 connection.
fn canonical(address: SocketAddr) -> SocketAddr {
    SocketAddr::new(address.ip().to_canonical(), address.port())
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[test]
    fn a_live_connection_is_found_with_its_owner_and_a_closed_one_is_not() {
        let own = rustix::process::geteuid().as_raw();
        for (listen, connect) in [("127.0.0.1:0", "127.0.0.1"), ("[::1]:0", "::1")] {
            // Without IPv6 (`::1` not configured) there is nothing to look up.
            let Ok(listener) = std::net::TcpListener::bind(listen) else {
                continue;
            };
            let port = listener.local_addr().unwrap().port();
            let client = std::net::TcpStream::connect((connect, port)).unwrap();
            let (server, peer) = listener.accept().unwrap();
            let ours = server.local_addr().unwrap();
            assert_eq!(owner_ambient(peer, ours), SocketOwner::Uid(own), "{listen}");
            assert_eq!(
                owner_ambient(SocketAddr::new(peer.ip(), 1), ours),
                SocketOwner::NotFound
            );
            drop(client);
            assert_eq!(owner_ambient(peer, ours), SocketOwner::NotFound, "{listen}");
        }
    }

    #[test]
    fn v4_clients_of_a_dual_stack_listener_are_found() {
        let own = rustix::process::geteuid().as_raw();
        for (peer, ours) in dual_stack_connections() {
            assert_eq!(owner_ambient(peer, ours), SocketOwner::Uid(own), "{peer}");
        }
    }

    /// Two IPv4 connections to a listener on `[::]`, as it sees them (`::ffff:127.0.0.1`): from
    /// an IPv4 socket and from an IPv6 one; none where the listener takes no IPv4
    /// (`net.ipv6.bindv6only = 1`) or there is no IPv6.
    pub(super) fn dual_stack_connections() -> Vec<(SocketAddr, SocketAddr)> {
        let Ok(listener) = std::net::TcpListener::bind("[::]:0") else {
            return Vec::new();
        };
        let port = listener.local_addr().unwrap().port();
        let mut connections = Vec::new();
        for client in ["127.0.0.1", "::ffff:127.0.0.1"] {
            let Ok(client) = std::net::TcpStream::connect((client, port)) else {
                continue;
            };
            let (server, peer) = listener.accept().unwrap();
            assert!(
                matches!(peer.ip(), IpAddr::V6(ip) if ip.to_ipv4_mapped().is_some()),
                "{peer}"
            );
            connections.push((peer, server.local_addr().unwrap()));
            // Both ends stay open until the test ends.
            std::mem::forget((client, server));
        }
        connections
    }
}
