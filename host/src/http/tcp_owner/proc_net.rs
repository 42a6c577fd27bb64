//! The socket table as text: `/proc/net/tcp` and `/proc/net/tcp6`, one socket a line. The
//! fallback of [`super::sock_diag`]: it needs no netlink, but the kernel writes out every
//! bucket of its connection table for each read (milliseconds even with few sockets).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use super::canonical;

/// The uid owning the socket at `peer` connected to `ours` (both canonical), if a process
/// holds it.
pub(super) fn owner_ambient(peer: SocketAddr, ours: SocketAddr) -> Option<u32> {
    // A v4 peer's socket is in `tcp`, or in `tcp6` if it is a dual-stack IPv6 socket.
    let tables: &[&str] = match peer.ip() {
        IpAddr::V4(_) => &["/proc/net/tcp", "/proc/net/tcp6"],
        IpAddr::V6(_) => &["/proc/net/tcp6"],
    };
    for table in tables {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        let found = text.lines().skip(1).filter_map(parse_line).find(|entry| {
            entry.inode != 0 && canonical(entry.local) == peer && canonical(entry.remote) == ours
        });
        if let Some(entry) = found {
            return Some(entry.uid);
        }
    }
    None
}

/// What the lookup reads of one line of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    local: SocketAddr,
    remote: SocketAddr,
    uid: u32,
    inode: u64,
}

/// `sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …`; `None` for
/// the header or anything malformed.
fn parse_line(line: &str) -> Option<Entry> {
    let mut fields = line.split_ascii_whitespace();
    let local = parse_address(fields.nth(1)?)?;
    let remote = parse_address(fields.next()?)?;
    let uid = fields.nth(4)?.parse().ok()?;
    let inode = fields.nth(1)?.parse().ok()?;
    Some(Entry {
        local,
        remote,
        uid,
        inode,
    })
}

/// `ADDR:PORT` in hex: the address as 1 (IPv4) or 4 (IPv6) 32-bit words each printed as a
/// native-endian number, the port as a number.
fn parse_address(field: &str) -> Option<SocketAddr> {
    let (address, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = address.get(8 * i..8 * i + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match address.len() {
        8 => IpAddr::from(word(0)?),
        32 => {
            let mut octets = [0; 16];
            for (i, chunk) in octets.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    // The kernel prints each 32-bit word in the machine's byte order: these lines are as an
    // x86-64 or arm64 kernel writes them.
    #[cfg(target_endian = "little")]
    #[test]
    fn lines_of_both_tables_parse_ipv4_ipv6_and_v4_mapped() {
        let v4 = "   3: 0100007F:A839 0100007F:1F40 01 00000000:00000000 00:00000000 00000000 \
                  1000        0 54321 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(
            parse_line(v4),
            Some(Entry {
                local: address("127.0.0.1:43065"),
                remote: address("127.0.0.1:8000"),
                uid: 1000,
                inode: 54321,
            })
        );
        let v6 = "   0: 00000000000000000000000001000000:C350 \
                  00000000000000000000000001000000:1F40 01 00000000:00000000 00:00000000 \
                  00000000 65534        0 777 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(
            parse_line(v6),
            Some(Entry {
                local: address("[::1]:50000"),
                remote: address("[::1]:8000"),
                uid: 65534,
                inode: 777,
            })
        );
        let mapped = "   1: 0000000000000000FFFF00000100007F:1F40 \
                      0000000000000000FFFF00000200007F:D431 01 00000000:00000000 00:00000000 \
                      00000000     0        0 4242 1 0000000000000000 20 4 30 10 -1";
        let entry = parse_line(mapped).unwrap();
        assert_eq!(entry.local, address("[::ffff:127.0.0.1]:8000"));
        assert_eq!(canonical(entry.remote), address("127.0.0.2:54321"));
        assert_eq!((entry.uid, entry.inode), (0, 4242));
        // A TIME_WAIT entry: uid 0, inode 0.
        let time_wait = "   7: 0100007F:A839 0100007F:1F40 06 00000000:00000000 03:00001461 \
                         00000000     0        0 0 3 0000000000000000";
        assert_eq!(parse_line(time_wait).map(|e| e.inode), Some(0));
    }

    #[test]
    fn headers_and_malformed_lines_are_skipped() {
        for line in [
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
            "   0: 0100007F:1F40",
            "   0: 0100007F 0100007F:1F40 01 00000000:00000000 00:00000000 00000000 0 0 1",
            "   0: 100007F:1F40 0100007F:1F40 01 00000000:00000000 00:00000000 00000000 0 0 1",
            "   0: 0100007F:1F40 0100007F:1F40 01 00000000:00000000 00:00000000 00000000 x 0 1",
            "",
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_live_connection_is_found_with_its_owner() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let own = rustix::process::geteuid().as_raw();
        assert_eq!(owner_ambient(peer, server.local_addr().unwrap()), Some(own));
        for (peer, ours) in super::super::tests::dual_stack_connections() {
            assert_eq!(owner_ambient(canonical(peer), canonical(ours)), Some(own));
        }
    }
}
