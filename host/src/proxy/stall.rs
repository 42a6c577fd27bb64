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
//!
//! Time alone does not bound the memory: within that limit a server can send requests by the
//! hundred thousand. So the reader of the server's stdout counts the messages that come while
//! a write waits ([`Backlog`]); past [`MAX_MESSAGES_WHILE_WAITING`] the server counts as stalled
//! at once, stopped as above. A server that does not read its stdin has no use for more.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::Sleep;

/// Messages the server may send while a write to it waits: past that it is stalled.
pub const MAX_MESSAGES_WHILE_WAITING: u64 = 4096;

/// What the reader of the server's stdout learns of the writer to its stdin: whether a write
/// waits, and how many messages came in meanwhile.
#[derive(Debug, Default)]
pub struct Backlog {
    waiting: AtomicBool,
    messages: AtomicU64,
    stalled: Arc<AtomicBool>,
}

impl Backlog {
    /// Counts `messages` that came in; true once the server is to count as stalled.
    pub fn came(&self, messages: u64) -> bool {
        if messages > 0
            && self.waiting.load(Ordering::SeqCst)
            && self.messages.fetch_add(messages, Ordering::SeqCst) + messages
                > MAX_MESSAGES_WHILE_WAITING
        {
            self.stalled.store(true, Ordering::SeqCst);
        }
        self.stalled.load(Ordering::SeqCst)
    }
}

/// `inner`, failing for good once a write has waited `limit` for the reader, or the server
/// sent too many messages meanwhile ([`Backlog`]).
pub struct StallGuard<W> {
    inner: W,
    limit: Duration,
    /// Started when a write or flush has to wait; dropped on any progress.
    waiting: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
    backlog: Arc<Backlog>,
}

impl<W> StallGuard<W> {
    pub fn new(inner: W, limit: Duration) -> StallGuard<W> {
        let stalled = Arc::new(AtomicBool::new(false));
        StallGuard {
            inner,
            limit,
            waiting: None,
            stalled: stalled.clone(),
            backlog: Arc::new(Backlog {
                stalled,
                ..Backlog::default()
            }),
        }
    }

    /// What the reader of the server's stdout counts against this writer.
    pub fn backlog(&self) -> Arc<Backlog> {
        self.backlog.clone()
    }

    /// Set once a write waited the limit out (and stays set: every write fails after that).
    pub fn stalled(&self) -> Arc<AtomicBool> {
        self.stalled.clone()
    }

    fn error(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the server did not read its stdin for {}s, or sent over {MAX_MESSAGES_WHILE_WAITING} messages meanwhile; writing to it stopped",
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
            self.backlog.waiting.store(false, Ordering::SeqCst);
            self.backlog.messages.store(0, Ordering::SeqCst);
            return polled;
        }
        if let Some(e) = self.refused() {
            return Poll::Ready(Err(e));
        }
        self.backlog.waiting.store(true, Ordering::SeqCst);
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

    /// A server flooding the gateway with requests while it does not read the replies: the
    /// messages that came while a write to it waited are counted, and past the allowance the
    /// server is stalled at once (each would have left a reply waiting in memory). Without a
    /// write waiting, any number of messages is read.
    #[tokio::test]
    async fn a_server_that_sends_on_while_a_write_to_it_waits_is_stalled() {
        use crate::proxy::capped::CappedLines;
        let (to_server, _unread) = tokio::io::duplex(4);
        let mut guarded = StallGuard::new(to_server, Duration::from_secs(3600));
        let (stalled, backlog) = (guarded.stalled(), guarded.backlog());
        let (mut server_out, from_server) = tokio::io::duplex(1 << 20);
        let mut reader = CappedLines::new(from_server, 1 << 20).counting(backlog);
        let mut buf = vec![0u8; 1 << 20];
        let lines = |n: usize| b"{}\n".repeat(n);
        // No write waits: a chatty server is read whatever it sends.
        server_out.write_all(&lines(10_000)).await.unwrap();
        let mut read = 0;
        while read < 30_000 {
            read += reader.read(&mut buf).await.unwrap();
        }
        // A write waits (nobody reads the server's stdin): the allowance, then no more.
        let write = tokio::spawn(async move { guarded.write_all(b"0123456789").await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        server_out.write_all(&lines(4096)).await.unwrap();
        let mut read = 0;
        while read < 4096 * 3 {
            read += reader.read(&mut buf).await.unwrap();
        }
        assert!(!stalled.load(Ordering::SeqCst), "within the allowance");
        server_out.write_all(&lines(1)).await.unwrap();
        let e = reader.read(&mut buf).await.unwrap_err();
        assert!(e.to_string().contains("did not read its stdin"), "{e}");
        assert!(stalled.load(Ordering::SeqCst));
        write.abort();
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
