//! What keeps one client from holding the gateway: a limit on open connections per client
//! address and overall ([`ConnLimiter`]), a stall timeout on writes to a client that stopped
//! reading ([`TimedIo`]), and one on request bodies that stopped arriving ([`IdleBody`]).
//!
//! The request-head timeout (which also closes idle keep-alive connections) is hyper's own,
//! set where connections are served (`server.rs`).

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// At most one warning about refused connections per this interval; the next one counts what
/// was refused meanwhile.
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The client already has `open` connections, the most one client may have.
    Client { open: usize },
    /// The gateway already serves `open` connections, the most it takes.
    Total { open: usize },
}

struct Counts {
    per_client: HashMap<IpAddr, usize>,
    total: usize,
    /// Refusals since the last warning, and when that was.
    refused_unreported: u64,
    last_warning: Option<Instant>,
}

/// Counts open connections per client address and overall, and admits new ones while both
/// are under their limits.
pub struct ConnLimiter {
    per_client_max: usize,
    total_max: usize,
    /// Names the gateway and its options in warnings ("S3 gateway", ...).
    what: &'static str,
    counts: Mutex<Counts>,
}

/// An admitted connection; dropping it frees its place.
pub struct ConnPermit {
    limiter: Arc<ConnLimiter>,
    client: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut c = self.limiter.counts.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                c.per_client.remove(&self.client);
            }
        }
    }
}

impl ConnLimiter {
    pub fn new(what: &'static str, per_client_max: usize, total_max: usize) -> Arc<ConnLimiter> {
        Arc::new(ConnLimiter {
            per_client_max,
            total_max,
            what,
            counts: Mutex::new(Counts {
                per_client: HashMap::new(),
                total: 0,
                refused_unreported: 0,
                last_warning: None,
            }),
        })
    }

    /// Admits a connection from `client`, or says why not (and warns, rate-limited).
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<ConnPermit, Refusal> {
        let mut c = self.counts.lock();
        let open = c.per_client.get(&client).copied().unwrap_or(0);
        let refusal = if open >= self.per_client_max {
            Refusal::Client { open }
        } else if c.total >= self.total_max {
            Refusal::Total { open: c.total }
        } else {
            *c.per_client.entry(client).or_insert(0) += 1;
            c.total += 1;
            return Ok(ConnPermit { limiter: self.clone(), client });
        };
        c.refused_unreported += 1;
        let now = Instant::now();
        if c.last_warning.is_none_or(|t| now.duration_since(t) >= REFUSAL_WARNING_INTERVAL) {
            let count = std::mem::take(&mut c.refused_unreported);
            c.last_warning = Some(now);
            drop(c);
            match refusal {
                Refusal::Client { open } => tracing::warn!(
                    "{}: refused {count} connection(s) since the last warning; the latest from {client}, which has {open} open (connections_per_client_max = {})",
                    self.what,
                    self.per_client_max
                ),
                Refusal::Total { open } => tracing::warn!(
                    "{}: refused {count} connection(s) since the last warning; the latest from {client}: {open} connections are open (connections_max = {})",
                    self.what,
                    self.total_max
                ),
            }
        }
        Err(refusal)
    }

    /// Connections open now (total).
    pub fn open(&self) -> usize {
        self.counts.lock().total
    }
}

/// A connection whose writes fail with `TimedOut` once the peer has accepted no bytes for
/// `stall`: a client that stops reading a response cannot hold the connection (and the object
/// pieces queued for it) forever. Reads are untouched; hyper's head timeout and [`IdleBody`]
/// bound them, and only they know whether a request is in progress.
pub struct TimedIo<T> {
    inner: T,
    stall: StallClock,
}

impl<T> TimedIo<T> {
    pub fn new(inner: T, stall: Duration) -> TimedIo<T> {
        TimedIo { inner, stall: StallClock::new(stall) }
    }

    /// Turns a pending write into an error once the stall lasted too long.
    fn on_write<R>(&mut self, cx: &mut Context<'_>, r: Poll<std::io::Result<R>>) -> Poll<std::io::Result<R>> {
        match r {
            Poll::Pending => match self.stall.poll_waiting(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the client accepted no bytes for {} ms", self.stall.limit.as_millis()),
                ))),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                self.stall.progress();
                ready
            }
        }
    }
}

/// Measures how long something has been waited for without progress. One timer per
/// connection or body, re-armed rather than re-created at each wait (a body arrives in many
/// small frames).
struct StallClock {
    limit: Duration,
    sleep: Pin<Box<Sleep>>,
    armed: bool,
}

impl StallClock {
    fn new(limit: Duration) -> StallClock {
        StallClock { limit, sleep: Box::pin(tokio::time::sleep(limit)), armed: false }
    }

    /// Called while waiting: starts the clock if it is not running; ready once the limit has
    /// passed since then.
    fn poll_waiting(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.armed {
            self.sleep.as_mut().reset(tokio::time::Instant::now() + self.limit);
            self.armed = true;
        }
        self.sleep.as_mut().poll(cx)
    }

    /// Called on progress: stops the clock.
    fn progress(&mut self) {
        self.armed = false;
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.on_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.on_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.on_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The error of a request body whose bytes stopped arriving.
#[derive(Debug)]
pub struct BodyStalled {
    pub after: Duration,
}

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no bytes of the request body arrived for {} ms", self.after.as_millis())
    }
}

impl std::error::Error for BodyStalled {}

/// Whether `e`, or an error it wraps, is [`BodyStalled`].
pub fn is_stalled(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyStalled>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// A request body that fails with [`BodyStalled`] once the gateway has waited `stall` for its
/// next bytes. Only time spent waiting for the client counts: while the gateway is busy
/// elsewhere (uploading what it has), the body is not polled and the clock is not running.
/// `stalled` is set when it fires, so the answer can say so whatever the operation made of the
/// error.
pub struct IdleBody {
    inner: Incoming,
    stall: StallClock,
    stalled: Arc<AtomicBool>,
}

impl IdleBody {
    pub fn new(inner: Incoming, stall: Duration, stalled: Arc<AtomicBool>) -> IdleBody {
        IdleBody { inner, stall: StallClock::new(stall), stalled }
    }
}

impl Body for IdleBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                self.stall.progress();
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => match self.stall.poll_waiting(cx) {
                Poll::Ready(()) => {
                    self.stalled.store(true, Ordering::Relaxed);
                    Poll::Ready(Some(Err(Box::new(BodyStalled { after: self.stall.limit }))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_limited_per_client_and_overall() {
        let l = ConnLimiter::new("test", 2, 3);
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let a1 = l.admit(a).expect("first");
        let _a2 = l.admit(a).expect("second");
        assert_eq!(l.admit(a).err(), Some(Refusal::Client { open: 2 }));
        let _b1 = l.admit(b).expect("another client");
        assert_eq!(l.admit(b).err(), Some(Refusal::Total { open: 3 }));
        drop(a1);
        assert_eq!(l.open(), 2);
        let _a3 = l.admit(a).expect("a place was freed");
    }

    #[tokio::test]
    async fn stalled_writes_fail_and_moving_ones_do_not() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A pipe whose reader never reads: writes fill it, then stall.
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut io = TimedIo::new(ours, Duration::from_millis(100));
        let started = Instant::now();
        let err = io.write_all(&[7u8; 8192]).await.expect_err("the peer never reads");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(2));
        // A reader slower than the stall limit between bytes but never stalled that long.
        let (ours, mut theirs2) = tokio::io::duplex(64);
        let mut io = TimedIo::new(ours, Duration::from_millis(300));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut total = 0;
            while total < 1024 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                total += theirs2.read(&mut buf).await.expect("read");
            }
        });
        io.write_all(&[1u8; 1024]).await.expect("a slow but steady reader is served");
        reader.await.expect("reader");
        let mut sink = Vec::new();
        let _ = theirs.read_buf(&mut sink).await;
    }
}
