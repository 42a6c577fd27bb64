//! A request body that must keep coming: at least [`MIN_BYTES_PER_S`] on average after a grace
//! of [`GRACE`], and some of it every [`MAX_IDLE`], else it ends in an error. Every body the
//! gateway reads goes through it: a WebDAV PUT's stream, and the bodies read whole first
//! ([`read_whole`]: MCP messages, WebDAV's XML).
//!
//! A request holds one of its tenant's places on a door, and its connection, while its body
//! streams in. A client that promises a body and sends a byte now and then (or nothing) would
//! hold both for as long as it likes; with enough such requests one token could fill the
//! listener's connections for good.
//! Like Kestrel's minimum request body data rate, the body is given up once it falls behind a
//! low average rate: the upload then fails like any interrupted one (nothing is left behind).
//! An average alone can be gamed (a gigabyte sent fast buys days of silence), so, like nginx's
//! `client_body_timeout`, a body silent for [`MAX_IDLE`] is given up too.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt as _, TryStreamExt as _};
use tokio::time::{Instant, Sleep};

/// The average rate a body must keep after [`GRACE`].
pub(crate) const MIN_BYTES_PER_S: u64 = 1024;
/// How long a body may take before the rate counts (a client's start, a slow first chunk).
pub(crate) const GRACE: Duration = Duration::from_secs(10);
/// The longest a body may send nothing, however fast it was before.
pub(crate) const MAX_IDLE: Duration = Duration::from_secs(60);

/// `inner`, ending in a `TimedOut` error once it falls behind the minimum rate. The clock
/// starts when the body is first asked for: a PUT that waited for its tenant's place, or
/// for the checks before the write, has not been slow.
pub(crate) struct MinRate<S> {
    inner: S,
    started: Instant,
    bytes: u64,
    /// When the body falls behind unless more arrives (set at the first poll).
    behind: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl<S> MinRate<S> {
    pub(crate) fn new(inner: S) -> MinRate<S> {
        MinRate {
            inner,
            started: Instant::now(),
            bytes: 0,
            behind: None,
            ended: false,
        }
    }

    /// When the body falls behind the average rate unless more arrives.
    fn falls_behind_at(&self) -> Instant {
        let earned = Duration::from_secs_f64(self.bytes as f64 / MIN_BYTES_PER_S as f64);
        self.started + GRACE + earned
    }
}

impl<S, B, E> Stream for MinRate<S>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<std::io::Error>,
{
    type Item = Result<B, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if self.behind.is_none() {
            self.started = Instant::now();
            self.behind = Some(Box::pin(tokio::time::sleep_until(self.started + GRACE)));
        }
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.bytes += chunk.as_ref().len() as u64;
                let at = self.falls_behind_at().min(Instant::now() + MAX_IDLE);
                if let Some(behind) = self.behind.as_mut() {
                    behind.as_mut().reset(at);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match (self.behind.as_mut())
                .map_or(Poll::Pending, |behind| behind.as_mut().poll(cx))
            {
                Poll::Ready(()) => {
                    self.ended = true;
                    let why = if self.falls_behind_at() > Instant::now() {
                        format!(
                            "the client sent nothing of the body for {} s: the upload was given \
                             up; send it again",
                            MAX_IDLE.as_secs()
                        )
                    } else {
                        format!(
                            "the client sent the body slower than {MIN_BYTES_PER_S} bytes a \
                             second on average ({} bytes in {} s): the upload was given up; send \
                             it again",
                            self.bytes,
                            self.started.elapsed().as_secs()
                        )
                    };
                    Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        why,
                    ))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// Reads `body` whole, at most `max_bytes`, at the minimum rate; else the answer to give:
/// 413 (larger), 408 (slower than the rate, or silent), 400 (cut off).
pub(crate) async fn read_whole(body: Body, max_bytes: usize) -> Result<Bytes, Response> {
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    let mut stream = MinRate::new(stream);
    let (mut parts, mut length) = (Vec::<Bytes>::new(), 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                (StatusCode::REQUEST_TIMEOUT, e.to_string()).into_response()
            } else {
                let why = format!("the request body was cut off ({e}); send it again");
                (StatusCode::BAD_REQUEST, why).into_response()
            }
        })?;
        length += chunk.len();
        if length > max_bytes {
            let why = format!("the request body is larger than {max_bytes} bytes");
            return Err((StatusCode::PAYLOAD_TOO_LARGE, why).into_response());
        }
        parts.push(chunk);
    }
    // A body in one piece (the usual) is passed on as it came, uncopied.
    Ok(match parts.len() {
        1 => parts.pop().unwrap_or_default(),
        _ => Bytes::from(parts.concat()),
    })
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt as _;

    use super::*;

    type Chunk = Result<Vec<u8>, std::io::Error>;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_the_rate_streams_whole() {
        // 2 KiB a second for 30 s: above the minimum throughout.
        let chunks = futures_util::stream::unfold(0, |sent| async move {
            if sent == 30 {
                return None;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok(vec![0u8; 2048]) as Chunk, sent + 1))
        });
        let body: Vec<Chunk> = MinRate::new(Box::pin(chunks)).collect().await;
        assert_eq!(body.len(), 30);
        assert!(body.iter().all(Result::is_ok));
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_given_up_once_it_falls_behind() {
        // A byte every 5 s: within the grace at first, then behind.
        let chunks = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Some((Ok(vec![0u8; 1]) as Chunk, ()))
        });
        let started = Instant::now();
        let body: Vec<Chunk> = MinRate::new(Box::pin(chunks)).collect().await;
        let (last, sent) = body.split_last().unwrap();
        let e = last.as_ref().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(
            e.to_string().contains("slower than 1024 bytes a second"),
            "{e}"
        );
        assert!(sent.iter().all(Result::is_ok));
        // Given up just after the grace (a byte buys a millisecond), not at the first pause.
        let waited = started.elapsed();
        assert!(
            waited >= GRACE && waited < GRACE + Duration::from_secs(1),
            "{waited:?}"
        );
    }

    /// A fast start does not buy silence: a megabyte at once (a thousand seconds' worth at the
    /// minimum rate), then nothing, is given up after [`MAX_IDLE`], not after 17 minutes.
    #[tokio::test(start_paused = true)]
    async fn a_fast_start_then_silence_is_given_up_after_the_idle_limit() {
        let first = futures_util::stream::iter([Ok(vec![0u8; 1 << 20]) as Chunk]);
        let chunks = first.chain(futures_util::stream::pending());
        let started = Instant::now();
        let body: Vec<Chunk> = MinRate::new(Box::pin(chunks)).collect().await;
        assert_eq!(body.len(), 2);
        let e = body[1].as_ref().unwrap_err();
        assert!(
            e.to_string().contains("sent nothing of the body for 60 s"),
            "{e}"
        );
        assert_eq!(started.elapsed(), MAX_IDLE);
    }

    /// A body first asked for long after the request came (its PUT waited for a place, or for
    /// the walks before the write) has its grace from then: a fast upload is not given up.
    #[tokio::test(start_paused = true)]
    async fn the_clock_starts_when_the_body_is_first_read() {
        let chunks = futures_util::stream::iter([Ok(vec![0u8; 10]) as Chunk]);
        let body = MinRate::new(Box::pin(chunks.chain(futures_util::stream::pending())));
        tokio::time::sleep(5 * GRACE).await;
        let started = Instant::now();
        let read: Vec<Chunk> = body.collect().await;
        assert!(read[0].is_ok(), "the first chunk is not refused: {read:?}");
        assert!(started.elapsed() >= GRACE, "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_body_is_given_up_after_the_grace() {
        let silent = futures_util::stream::pending::<Chunk>();
        let started = Instant::now();
        let body: Vec<Chunk> = MinRate::new(Box::pin(silent)).collect().await;
        assert_eq!(body.len(), 1);
        assert!(body[0].is_err());
        assert_eq!(started.elapsed(), GRACE);
    }
}
