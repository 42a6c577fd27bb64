//! The socket table asked for one socket: `SOCK_DIAG_BY_FAMILY` over `NETLINK_SOCK_DIAG`
//! (what `ss` uses), an exact lookup by address and port that the kernel answers from its
//! connection hash, in microseconds however many sockets there are. The request and reply are
//! plain bytes (`linux/netlink.h`, `linux/inet_diag.h`): no `unsafe`.
//!
//! Given the exact four addresses the kernel may still answer with a listening socket (on the
//! peer's address and port, when the peer's connection is gone) or a `TIME_WAIT` entry: only
//! a connection some process holds (a non-zero inode) with the ports asked for counts.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netlink, sockopt};

/// `nlmsghdr`: length, type, flags, sequence, port id.
const HEADER: usize = 16;
/// `SOCK_DIAG_BY_FAMILY`, the request and reply type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR`: an `i32` errno (negative) after the header.
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IPPROTO_TCP: u8 = 6;
const TCP_TIME_WAIT: u8 = 6;
const TCP_LISTEN: u8 = 10;
/// `inet_diag_msg`: family, state, timer, retrans, `inet_diag_sockid` (48), expires, rqueue,
/// wqueue, uid, inode.
const MESSAGE: usize = 72;
const SEQUENCE: u32 = 1;

/// The uid owning the socket at `peer` connected to `ours` (both canonical): `Ok(None)` when
/// no process holds such a socket, `Err` when the kernel cannot be asked (no netlink, no
/// `inet_diag`), for the caller to look elsewhere.
pub(super) fn owner_ambient(peer: SocketAddr, ours: SocketAddr) -> rustix::io::Result<Option<u32>> {
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    // The kernel answers within `send`; the timeout only bounds a kernel that would not.
    sockopt::set_socket_timeout(
        &socket,
        sockopt::Timeout::Recv,
        Some(Duration::from_secs(1)),
    )?;
    rustix::net::send(&socket, &request(peer, ours), SendFlags::empty())?;
    let mut reply = [0u8; 1024];
    let (_, length) = rustix::net::recv(&socket, &mut reply, RecvFlags::empty())?;
    read_reply(&reply[..length.min(reply.len())], peer.port(), ours.port())
}

/// The request: `nlmsghdr` then `inet_diag_req_v2` whose `id` is the peer's socket as the
/// kernel keys it (source: the peer; destination: us). Addresses and ports in network order.
fn request(peer: SocketAddr, ours: SocketAddr) -> Vec<u8> {
    let family = match peer.ip() {
        IpAddr::V4(_) => AddressFamily::INET,
        IpAddr::V6(_) => AddressFamily::INET6,
    };
    let length = HEADER + 56;
    let mut bytes = Vec::with_capacity(length);
    bytes.extend_from_slice(&(length as u32).to_ne_bytes());
    bytes.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    bytes.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    bytes.extend_from_slice(&SEQUENCE.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    // `sdiag_family` (AF_INET, AF_INET6: both below 256), protocol, ext, pad, every state.
    bytes.extend_from_slice(&[family.as_raw() as u8, IPPROTO_TCP, 0, 0]);
    bytes.extend_from_slice(&u32::MAX.to_ne_bytes());
    bytes.extend_from_slice(&peer.port().to_be_bytes());
    bytes.extend_from_slice(&ours.port().to_be_bytes());
    bytes.extend_from_slice(&address_bytes(peer.ip()));
    bytes.extend_from_slice(&address_bytes(ours.ip()));
    // Any interface; `INET_DIAG_NOCOOKIE`.
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    bytes.extend_from_slice(&[0xff; 8]);
    bytes
}

/// `idiag_src` / `idiag_dst`: 16 bytes, an IPv4 address in the first 4.
fn address_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut bytes = [0; 16];
            bytes[..4].copy_from_slice(&v4.octets());
            bytes
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The owner in a reply to [`request`], if it names a connection some process holds between
/// these ports.
fn read_reply(reply: &[u8], peer_port: u16, our_port: u16) -> rustix::io::Result<Option<u32>> {
    let u16_at = |at: usize| u16::from_ne_bytes([reply[at], reply[at + 1]]);
    let u32_at = |at: usize| u32::from_ne_bytes(reply[at..at + 4].try_into().unwrap_or([0; 4]));
    if reply.len() < HEADER + 4 {
        return Err(Errno::PROTO);
    }
    match u16_at(4) {
        NLMSG_ERROR => match (u32_at(HEADER) as i32).wrapping_neg() {
            errno if errno == Errno::NOENT.raw_os_error() => Ok(None),
            errno if errno > 0 => Err(Errno::from_raw_os_error(errno)),
            _ => Err(Errno::PROTO),
        },
        SOCK_DIAG_BY_FAMILY if reply.len() >= HEADER + MESSAGE && u32_at(8) == SEQUENCE => {
            let message = &reply[HEADER..HEADER + MESSAGE];
            let state = message[1];
            let sport = u16::from_be_bytes([message[4], message[5]]);
            let dport = u16::from_be_bytes([message[6], message[7]]);
            let uid = u32_at(HEADER + 64);
            let inode = u32_at(HEADER + 68);
            let held = inode != 0 && state != TCP_LISTEN && state != TCP_TIME_WAIT;
            Ok((held && sport == peer_port && dport == our_port).then_some(uid))
        }
        _ => Err(Errno::PROTO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_connection_is_found_with_its_owner_and_a_closed_one_is_not() {
        let own = rustix::process::geteuid().as_raw();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let ours = server.local_addr().unwrap();
        assert_eq!(owner_ambient(peer, ours), Ok(Some(own)));
        // The listener, on our side, is no connection of a peer's.
        let elsewhere = SocketAddr::new(peer.ip(), 1);
        assert_eq!(owner_ambient(ours, elsewhere), Ok(None));
        drop(client);
        assert_eq!(owner_ambient(peer, ours), Ok(None));
        for (peer, ours) in super::super::tests::dual_stack_connections() {
            let (peer, ours) = (super::super::canonical(peer), super::super::canonical(ours));
            assert_eq!(owner_ambient(peer, ours), Ok(Some(own)), "{peer}");
        }
    }

    #[test]
    fn errors_and_strangers_in_a_reply_are_no_owner() {
        let mut error = vec![0u8; HEADER + 4];
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error[HEADER..].copy_from_slice(&(-Errno::NOENT.raw_os_error()).to_ne_bytes());
        assert_eq!(read_reply(&error, 1, 2), Ok(None));
        error[HEADER..].copy_from_slice(&(-Errno::PERM.raw_os_error()).to_ne_bytes());
        assert_eq!(read_reply(&error, 1, 2), Err(Errno::PERM));
        assert_eq!(read_reply(&error[..HEADER], 1, 2), Err(Errno::PROTO));

        let mut reply = vec![0u8; HEADER + MESSAGE];
        reply[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        reply[8..12].copy_from_slice(&SEQUENCE.to_ne_bytes());
        reply[HEADER + 1] = 1; // ESTABLISHED
        reply[HEADER + 4..HEADER + 6].copy_from_slice(&40000u16.to_be_bytes());
        reply[HEADER + 6..HEADER + 8].copy_from_slice(&8000u16.to_be_bytes());
        reply[HEADER + 64..HEADER + 68].copy_from_slice(&1000u32.to_ne_bytes());
        reply[HEADER + 68..HEADER + 72].copy_from_slice(&777u32.to_ne_bytes());
        assert_eq!(read_reply(&reply, 40000, 8000), Ok(Some(1000)));
        assert_eq!(read_reply(&reply, 40001, 8000), Ok(None), "another port");
        let mut listening = reply.clone();
        listening[HEADER + 1] = TCP_LISTEN;
        assert_eq!(read_reply(&listening, 40000, 8000), Ok(None));
        let mut closed = reply.clone();
        closed[HEADER + 68..HEADER + 72].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(
            read_reply(&closed, 40000, 8000),
            Ok(None),
            "no process holds it"
        );
        assert_eq!(
            read_reply(&reply[..HEADER + 40], 40000, 8000),
            Err(Errno::PROTO)
        );
    }
}
