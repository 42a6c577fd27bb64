//! Bounds on a listener's connections, which cost the gateway a file descriptor each before any
//! request is read or authenticated: at most [`ConnectionLimits::max`] open at once (the
//! listener accepts no more until one closes, so the rest wait in the kernel's backlog, costing
//! nothing), and one that stays idle for [`ConnectionLimits::idle`] is closed.
//!
//! Idle means no request in flight (counted by `http::mark_in_flight` through the connection's
//! [`Activity`], which its `ConnectInfo` carries) and no byte written to the peer: so a request's headers
//! must arrive within that time of the connection's opening or its last answer, a keep-alive
//! connection is let go after it, and so is an answer the peer stopped reading. A request in
//! flight keeps its connection however long it takes (a long `poll_job`); an answer streamed
//! in pieces (SSE, whose keep-alive comments come every 15 s) keeps it while it moves.
//!
//! axum's `serve` does not let hyper's own header timeout be set (it gives hyper no timer), so
//! the bound is kept here, on the connection's reads and writes.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    limits: ConnectionLimits,
}

impl<L> Bounded<L> {
    pub(crate) fn new(inner: L, limits: ConnectionLimits) -> Bounded<L> {
        Bounded {
            inner,
            places: Arc::new(Semaphore::new(limits.max)),
            limits,
        }
    }
}

impl<L: Listener> Listener for Bounded<L> {
    type Io = Guarded<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Guarded<L::Io>, L::Addr) {
        let place = (Arc::clone(&self.places).acquire_owned().await)
            .expect("the semaphore is never closed");
        let (io, addr) = self.inner.accept().await;
        (Guarded::new(io, place, self.limits.idle), addr)
    }

    fn local_addr(&self) -> io::Result<L::Addr> {
        self.inner.local_addr()
    }
}

/// What a connection's requests tell its reads and writes.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    /// A request began or ended, or bytes were written, since the idle clock was last set.
    stirred: AtomicBool,
}

/// A request in flight on a connection, from its headers to its answer's head.
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

/// One accepted connection: its stream, its place among the listener's, its idle clock.
pub(crate) struct Guarded<T> {
    io: T,
    _place: OwnedSemaphorePermit,
    activity: Arc<Activity>,
    idle: std::time::Duration,
    clock: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(io: T, place: OwnedSemaphorePermit, idle: std::time::Duration) -> Guarded<T> {
        Guarded {
            io,
            _place: place,
            activity: Arc::default(),
            idle,
            clock: Box::pin(tokio::time::sleep(idle)),
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
            let busy = reading && self.activity.in_flight.load(Ordering::Acquire) > 0;
            if self.activity.stirred.swap(false, Ordering::AcqRel) || busy {
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

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Pending => this.poll_idle(cx, true).map(Err),
            ready => ready,
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
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Pending => this.poll_idle(cx, false).map(Err),
            Poll::Ready(Ok(n)) => {
                this.activity.stirred.store(true, Ordering::Release);
                Poll::Ready(Ok(n))
            }
            ready => ready,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.poll_idle(cx, false).map(Err),
            Poll::Ready(Ok(n)) => {
                this.activity.stirred.store(true, Ordering::Release);
                Poll::Ready(Ok(n))
            }
            ready => ready,
        }
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
