//! Bounds on a listener's connections, which cost the gateway a file descriptor each before any
//! request is read or authenticated: at most [`ConnectionLimits::max`] open at once (the
//! listener accepts no more until one closes, so the rest wait in the kernel's backlog, costing
//! nothing), and one that stays idle for [`ConnectionLimits::idle`] is closed.
//!
//! Idle means no request in flight (counted by `http::mark_in_flight` through the connection's
//! [`Activity`], which its `ConnectInfo` carries, from the request's head to its answer's last
//! byte) and nothing written to the peer: so a request's headers must arrive within that time
//! of the connection's opening or its last answer (a connection that has read part of one gets
//! that time once more), a keep-alive connection is let go after it, and so is an answer the
//! peer stopped reading for that long (a write that waits does not count as a request in
//! flight). A request in flight keeps its connection however long it takes (a long
//! `poll_job`, an SSE stream).

//!
//! axum's `serve` does not let hyper's own header timeout be set (it gives hyper no timer), so
//! the bound is kept here, on the connection's reads and writes.
//!
//! One peer may hold at most [`ConnectionLimits::per_peer`] of the places: a connection past
//! that is closed as soon as it is accepted, so one peer cannot keep every other waiting. A
//! peer is a uid on this host (a Unix socket's, from `SO_PEERCRED`; a loopback TCP client's,
//! the owner of its socket, see [`super::tcp_owner`]): every local user is 127.0.0.1, so by
//! address one user holding connections, with no token or request, would lock out all the
//! others. Any other TCP peer is its address: an IPv4 address, an IPv6 /64 (which one host
//! commonly has whole).

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

pub use crate::config::ConnectionLimits;

/// A listener whose connections are bounded as the module doc says.
pub(crate) struct Bounded<L> {
    inner: L,
    places: Arc<Semaphore>,
    peers: Peers,
    limits: ConnectionLimits,
}

impl<L> Bounded<L> {
    pub(crate) fn new(inner: L, limits: ConnectionLimits) -> Bounded<L> {
        Bounded {
            inner,
            places: Arc::new(Semaphore::new(limits.max)),
            peers: Peers::default(),
            limits,
        }
    }
}

impl<L: Listener> Listener for Bounded<L>
where
    L::Io: CountedPeer,
{
    type Io = Guarded<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Guarded<L::Io>, L::Addr) {
        loop {
            let place = (Arc::clone(&self.places).acquire_owned().await)
                .expect("the semaphore is never closed");
            let (io, addr) = self.inner.accept().await;
            let peer = match io.peer() {
                None => None,
                Some(peer) => match self.peers.admit(peer, self.limits.per_peer) {
                    Some(held) => Some(held),
                    // Its peer holds its share: closed now, its place given back.
                    None => {
                        say_refused(peer, self.limits.per_peer);
                        continue;
                    }
                },
            };
            return (Guarded::new(io, place, peer, self.limits.idle), addr);
        }
    }

    fn local_addr(&self) -> io::Result<L::Addr> {
        self.inner.local_addr()
    }
}

/// Says on the gateway's log that `peer`'s connection was closed, at most once a minute (a
/// peer that holds its share may try thousands of times).
fn say_refused(peer: Peer, share: usize) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(60)) {
        return;
    }
    *last = Some(Instant::now());
    crate::proxy::log(&format!(
        "connections from {peer} are closed as they come: it holds its {share} ([http] max_connections_per_peer; behind a reverse proxy, set it to max_connections)"
    ));
}

/// Whose a connection is, as its places are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    /// A TCP peer elsewhere: an IPv4 address, or the /64 of an IPv6 one.
    Net(IpAddr),
    /// A user of this host.
    Uid(u32),
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Net(address) => write!(f, "{address}"),
            Peer::Uid(uid) => write!(f, "uid {uid}"),
        }
    }
}

impl Peer {
    /// A TCP peer by its address: an IPv4 address (an IPv4-mapped one too), an IPv6 /64.
    pub(crate) fn of_address(address: IpAddr) -> Peer {
        Peer::Net(match address.to_canonical() {
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
            v4 => v4,
        })
    }
}

/// An accepted connection whose peer is counted; `None`: not counted.
pub(crate) trait CountedPeer {
    fn peer(&self) -> Option<Peer>;
}

impl CountedPeer for tokio::net::TcpStream {
    fn peer(&self) -> Option<Peer> {
        let remote = self.peer_addr().ok()?;
        // By netlink only: reading `/proc/net/tcp` (its fallback) takes milliseconds, too long
        // for the thread that accepts; without netlink a local client counts by its address.
        if remote.ip().to_canonical().is_loopback()
            && let Ok(local) = self.local_addr()
            && let Some(uid) = super::tcp_owner::owner_by_netlink(remote, local)
        {
            return Some(Peer::Uid(uid));
        }
        Some(Peer::of_address(remote.ip()))
    }
}

impl CountedPeer for tokio::net::UnixStream {
    fn peer(&self) -> Option<Peer> {
        self.peer_cred().ok().map(|cred| Peer::Uid(cred.uid()))
    }
}

/// The connections each counted peer holds now.
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<Peer, usize>>>);

impl Peers {
    /// One more connection of `peer`, unless it holds `most` already.
    fn admit(&self, peer: Peer, most: usize) -> Option<PeerHeld> {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(peer).or_insert(0);
        if *count >= most {
            return None;
        }
        *count += 1;
        Some(PeerHeld {
            peers: self.clone(),
            peer,
        })
    }
}

/// One connection counted against its peer, until it is dropped.
struct PeerHeld {
    peers: Peers,
    peer: Peer,
}

impl Drop for PeerHeld {
    fn drop(&mut self) {
        let mut held = (self.peers.0.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

/// What a connection's requests tell its reads and writes.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    /// A request began or ended, or bytes were written, since the idle clock was last set.
    stirred: AtomicBool,
}

/// A request in flight on a connection, from its head to its answer's last byte (held by the
/// answer's body, see `http::mark_in_flight`).
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    pub(crate) fn begin(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.stirred.store(true, Ordering::Release);
        InFlight(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.stirred.store(true, Ordering::Release);
    }
}

/// An answer's body holding its request's [`InFlight`] until the body has been sent (or
/// dropped): a streamed answer counts as in flight to its end.
pub(crate) struct Counted {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl Counted {
    pub(crate) fn new(inner: axum::body::Body, in_flight: InFlight) -> Counted {
        Counted {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl http_body::Body for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// One accepted connection: its stream, its place among the listener's, its idle clock.
pub(crate) struct Guarded<T> {
    io: T,
    _place: OwnedSemaphorePermit,
    _peer: Option<PeerHeld>,
    activity: Arc<Activity>,
    idle: std::time::Duration,
    clock: Pin<Box<Sleep>>,
    /// Bytes were read since the clock was set (part of a request may be in).
    read: bool,
    /// The once-more the clock gives a connection that has read part of a request was given.
    graced: bool,
    /// The last write waited for the peer to read: a request in flight does not keep the
    /// connection then, or a peer that stopped reading a stream would hold it for good.
    write_waits: bool,
}

impl<T> Guarded<T> {
    fn new(
        io: T,
        place: OwnedSemaphorePermit,
        peer: Option<PeerHeld>,
        idle: std::time::Duration,
    ) -> Guarded<T> {
        Guarded {
            io,
            _place: place,
            _peer: peer,
            activity: Arc::default(),
            idle,
            clock: Box::pin(tokio::time::sleep(idle)),
            read: false,
            graced: false,
            write_waits: false,
        }
    }

    /// The stream itself (for the peer's credentials and addresses).
    pub(crate) fn inner(&self) -> &T {
        &self.io
    }

    /// What `http::mark_in_flight` marks for this connection.
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Called when the stream has nothing for us: pending until the idle clock runs out, then
    /// an error that ends the connection. A connection stirred since the clock was set, or
    /// (`reading`) with a request in flight, gets a new clock.
    fn poll_idle(&mut self, cx: &mut Context<'_>, reading: bool) -> Poll<io::Error> {
        loop {
            if self.clock.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let busy =
                reading && !self.write_waits && self.activity.in_flight.load(Ordering::Acquire) > 0;
            let stirred = self.activity.stirred.swap(false, Ordering::AcqRel);
            if stirred || busy {
                self.graced = false;
            }
            // Part of a request in: one more period for the rest (a slow start is not cut at
            // once, a dribble still is).
            let grace = reading && self.read && !self.graced;
            self.graced |= grace;
            self.read = false;
            if stirred || busy || grace {
                self.clock.as_mut().reset(Instant::now() + self.idle);
                continue;
            }
            return Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection was idle too long",
            ));
        }
    }
}

impl<T> Guarded<T> {
    /// Notes what a write did: bytes out stir the connection, a write that waits starts (or
    /// goes on with) the idle clock.
    fn wrote(
        &mut self,
        written: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => {
                self.write_waits = true;
                self.poll_idle(cx, false).map(Err)
            }
            Poll::Ready(Ok(n)) => {
                self.write_waits = false;
                self.activity.stirred.store(true, Ordering::Release);
                Poll::Ready(Ok(n))
            }
            ready => ready,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Pending => this.poll_idle(cx, true).map(Err),
            ready => {
                this.read |= buf.filled().len() > before;
                ready
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(written, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(written, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
