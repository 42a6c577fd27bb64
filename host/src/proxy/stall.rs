//! A proxied server's stdin, given up on once the server stops reading it.
//!
//! A server that never reads its stdin (hung, or hostile: it floods the gateway with requests,
//! whose replies fill the pipe to it) would hold a write of the gateway's for ever, and rmcp
//! queues every later message behind that write: each further request of the server's leaves
//! one more reply waiting in the gateway's memory, without bound. [`StallGuard`] fails a write
//! (or flush) that has waited its limit without the server taking a byte, and every write
//! after it: the replies queued behind fail at once, the server counts as dead
//! ([`StallGuard::stalled`]) and is stopped like one (the next call starts a fresh server).
//! The limit is the proxy's `call_timeout`: by then every call that was in flight when the
//! write began has timed out, and a write cut short has broken the stream anyway.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::Sleep;

/// `inner`, failing for good once a write has waited `limit` for the reader.
pub struct StallGuard<W> {
    inner: W,
    limit: Duration,
    /// Started when a write or flush has to wait; dropped on any progress.
    waiting: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
}

impl<W> StallGuard<W> {
    pub fn new(inner: W, limit: Duration) -> StallGuard<W> {
        StallGuard {
            inner,
            limit,
            waiting: None,
            stalled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Set once a write waited the limit out (and stays set: every write fails after that).
    pub fn stalled(&self) -> Arc<AtomicBool> {
        self.stalled.clone()
    }

    fn error(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the server did not read its stdin for {}s; writing to it stopped",
                self.limit.as_secs_f64()
            ),
        )
    }

    /// `polled`, unless it waited past the limit.
    fn guard<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let limit = self.limit;
        let timer = (self.waiting).get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(timer.as_mut().poll(cx));
        self.stalled.store(true, Ordering::SeqCst);
        Poll::Ready(Err(self.error()))
    }

    /// The error every write gets once stalled.
    fn refused(&self) -> Option<io::Error> {
        self.stalled.load(Ordering::SeqCst).then(|| self.error())
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for StallGuard<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.refused() {
            return Poll::Ready(Err(e));
        }
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, polled)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.refused() {
            return Poll::Ready(Err(e));
        }
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.stalled.load(Ordering::SeqCst) {
            return Poll::Ready(Ok(()));
        }
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_reader_never_takes_fails_after_the_limit_and_so_do_all_later_ones() {
        let (writer, _reader) = tokio::io::duplex(4);
        let mut guarded = StallGuard::new(writer, Duration::from_secs(30));
        let stalled = guarded.stalled();
        let started = tokio::time::Instant::now();
        let e = guarded.write_all(b"12345678").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(
            e.to_string().contains("did not read its stdin for 30s"),
            "{e}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(stalled.load(Ordering::SeqCst));
        let again = guarded.write_all(b"1").await.unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30), "at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_waited_for() {
        let (writer, mut reader) = tokio::io::duplex(4);
        let mut guarded = StallGuard::new(writer, Duration::from_secs(30));
        let stalled = guarded.stalled();
        let read = tokio::spawn(async move {
            let mut all = Vec::new();
            let mut buf = [0u8; 4];
            loop {
                tokio::time::sleep(Duration::from_secs(20)).await;
                match reader.read(&mut buf).await.unwrap() {
                    0 => return all,
                    n => all.extend_from_slice(&buf[..n]),
                }
            }
        });
        guarded.write_all(b"0123456789abcdef").await.unwrap();
        guarded.shutdown().await.unwrap();
        assert_eq!(read.await.unwrap(), b"0123456789abcdef");
        assert!(!stalled.load(Ordering::SeqCst));
    }
}
