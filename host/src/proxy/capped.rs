//! A proxied server's stdout with the result cap enforced while it is read, not after.
//!
//! The MCP stdio transport is one JSON-RPC message per line. [`CappedLines`] counts the bytes
//! of the line being read and fails the read once it passes the limit
//! (`proxied_mcps.<name>.max_result_bytes` plus [`MESSAGE_MARGIN`] for the JSON-RPC envelope),
//! so a hostile or broken server that sends gigabytes costs the gateway at most the limit in
//! memory (a listing of tools, which spans pages, is capped as a whole at the limit by
//! `client::list_tools`). A failed read ends the client's transport: the call in flight fails,
//! the client sees [`CappedLines::tripped`] to say why, and the server is stopped (the next
//! call starts a fresh one). The exact cap on the result itself is still checked once it is parsed.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// Bytes a message may have beyond the result cap: the JSON-RPC envelope and the escaping of
/// text that the exact check (on the parsed result) does not count.
pub const MESSAGE_MARGIN: u64 = 64 * 1024;

/// `inner`, failing once one line exceeds `limit` bytes (newline excluded).
pub struct CappedLines<R> {
    inner: R,
    limit: u64,
    line: u64,
    tripped: Arc<AtomicBool>,
    /// The writer to the server, whose wait the messages read here count against.
    backlog: Option<Arc<super::stall::Backlog>>,
}

impl<R> CappedLines<R> {
    pub fn new(inner: R, limit: u64) -> CappedLines<R> {
        CappedLines {
            inner,
            limit,
            line: 0,
            tripped: Arc::new(AtomicBool::new(false)),
            backlog: None,
        }
    }

    /// The same, counting each message read against `backlog` (see [`super::stall`]): once
    /// the server counts as stalled, reading fails.
    pub fn counting(self, backlog: Arc<super::stall::Backlog>) -> CappedLines<R> {
        CappedLines {
            backlog: Some(backlog),
            ..self
        }
    }

    /// Set once a line went over the limit (and stays set: the stream is dead after that).
    pub fn tripped(&self) -> Arc<AtomicBool> {
        self.tripped.clone()
    }

    fn over(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message is over {} bytes; stopped reading", self.limit),
        )
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CappedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.tripped.load(Ordering::SeqCst) {
            return Poll::Ready(Err(this.over()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut segments = buf.filled()[before..].split(|b| *b == b'\n');
        let first = segments.next().map_or(0, <[u8]>::len) as u64;
        this.line += first;
        let mut longest = this.line;
        for segment in segments {
            this.line = segment.len() as u64;
            longest = longest.max(this.line);
        }
        if longest > this.limit {
            // A failed read hands back nothing (tokio's contract for `poll_read`).
            buf.set_filled(before);
            this.tripped.store(true, Ordering::SeqCst);
            return Poll::Ready(Err(this.over()));
        }
        let messages = buf.filled()[before..]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        if let Some(backlog) = &this.backlog
            && backlog.came(messages as u64)
        {
            buf.set_filled(before);
            let why = "the server sent on while it did not read its stdin; stopped reading";
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn read_all(input: &[u8], limit: u64) -> (io::Result<Vec<u8>>, bool) {
        let mut capped = CappedLines::new(input, limit);
        let tripped = capped.tripped();
        let mut out = Vec::new();
        let result = capped.read_to_end(&mut out).await.map(|_| out);
        (result, tripped.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn lines_up_to_the_limit_pass_whole() {
        let input = b"12345\n1234\n\n12345";
        let (read, tripped) = read_all(input, 5).await;
        assert_eq!(read.unwrap(), input);
        assert!(!tripped);
    }

    #[tokio::test]
    async fn a_longer_line_fails_the_read_anywhere_in_the_stream() {
        for input in [&b"123456\n"[..], b"12\n123456", b"1234\n12345\n123456\n12"] {
            let (read, tripped) = read_all(input, 5).await;
            let e = read.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("over 5 bytes"), "{e}");
            assert!(tripped, "{input:?}");
        }
    }

    #[tokio::test]
    async fn a_line_split_across_reads_is_counted_whole() {
        let (client, mut server) = tokio::io::duplex(4);
        let mut capped = CappedLines::new(client, 10);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for _ in 0..4 {
                if server.write_all(b"xxxx").await.is_err() {
                    return;
                }
            }
        });
        let mut out = Vec::new();
        let e = capped.read_to_end(&mut out).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(out.len() <= 12, "{}", out.len());
        writer.await.unwrap();
    }
}
