//! The RPC transport: many requests in flight on one TCP connection, matched by request id.
//!
//! A connection starts with a hello exchange (service, protocol version range, cluster name).
//! Afterwards the client sends request frames and the server answers each with a response frame
//! carrying the same id, in any order. Response bodies are `Result<Reply, WireError>` encoded
//! with postcard, so every remote failure arrives as a stable [`crate::ErrorCode`].
//!
//! With a TLS credential ([`crate::tls`]) the connection is a mutual TLS 1.3 session begun
//! before the hello; the server learns the client's [`Role`] from its certificate and handlers
//! read it with [`current_role`]. A TLS server answers a plaintext Trove hello with a TLS alert,
//! so the client can say what is wrong.

use crate::error::WireError;
use crate::frame::{self, Frame, FrameKind};
use crate::msg::{Hello, Service};
use crate::stages::{self, Stage};
use crate::tls::{Role, TlsChoice, TlsContext};
use crate::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify, Semaphore};

/// Requests one connection may have in flight at a server before it stops reading more.
pub const INFLIGHT_PER_CONNECTION_MAX: usize = 512;
/// How long connecting and the hello exchange may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a peer that answered the hello with something other than a Trove frame is given to
/// send the rest of its answer, so that it can be recognised (an HTTP server's status line and
/// headers come in one or two segments).
const FOREIGN_READ_TIMEOUT: Duration = Duration::from_millis(300);
/// Most bytes of a foreign peer's answer kept to recognise it.
const FOREIGN_BYTES_MAX: usize = 512;
/// Read buffer of a connection: a small frame's header, body and data (a 4 KiB read's reply)
/// arrive in one read system call instead of three. Small, because what of a large data section
/// lands in it is copied once more; the rest of such a section bypasses it.
const READ_BUFFER_BYTES: usize = 16 << 10;

/// Errors of a remote call.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("connection to {addr} lost: {reason}")]
    Closed { addr: String, reason: String },
    #[error("protocol error with {addr}: {reason}")]
    Protocol { addr: String, reason: String },
    #[error("{addr} speaks Trove protocol versions {min}..={max}; this build speaks {PROTOCOL_VERSION_MIN}..={PROTOCOL_VERSION}")]
    Version { addr: String, min: u16, max: u16 },
    #[error("{addr} did not answer within {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    /// The peer answered the hello with something that is not Trove's protocol.
    #[error("{addr} is not a Trove {service} service: {looks_like}")]
    Foreign { addr: String, service: &'static str, looks_like: String },
    #[error("{0}")]
    Remote(WireError),
}

impl RpcError {
    /// Whether the call failed because the peer could not be reached (as opposed to the peer
    /// answering with an error).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RpcError::Connect { .. } | RpcError::Closed { .. } | RpcError::Timeout { .. })
    }
}

type Pending = Mutex<Option<HashMap<u64, oneshot::Sender<Result<Frame, RpcError>>>>>;

struct OutFrame {
    head_and_body: Vec<u8>,
    data: Bytes,
    /// When a server's handler answered (for the `rpc.server.reply` stage); `None` on clients.
    answered: Option<Instant>,
}

impl OutFrame {
    fn len(&self) -> usize {
        self.head_and_body.len() + self.data.len()
    }

    /// The bytes from `from` on, as at most two slices.
    fn slices(&self, from: usize) -> [IoSlice<'_>; 2] {
        let head = self.head_and_body.len();
        if from < head {
            [IoSlice::new(&self.head_and_body[from..]), IoSlice::new(&self.data)]
        } else {
            [IoSlice::new(&[]), IoSlice::new(&self.data[from - head..])]
        }
    }
}

/// The read side of a connection.
enum Source {
    Plain(OwnedReadHalf),
    Tls(crate::records::RecordReader),
}

impl AsyncRead for Source {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Source::Plain(r) => Pin::new(r).poll_read(cx, buf),
            Source::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

/// The write side of a connection, before its outbox takes it.
enum Sink {
    Plain(OwnedWriteHalf),
    Tls(crate::records::RecordWriter),
}

impl Sink {
    /// Writes `bytes` out now (the hello).
    async fn write_now(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(bytes).await,
            Sink::Tls(w) => {
                w.write_all(bytes).await?;
                w.flush().await
            }
        }
    }
}

/// Splits a connected stream, in TLS when a credential is given: a client's handshake checks
/// the server holds a node certificate of a trusted authority.
async fn client_halves(stream: TcpStream, tls: Option<&TlsContext>) -> std::io::Result<(Source, Sink)> {
    match tls {
        None => {
            let (r, w) = stream.into_split();
            Ok((Source::Plain(r), Sink::Plain(w)))
        }
        Some(ctx) => {
            let name = rustls::pki_types::ServerName::try_from(Role::Node.dns_name())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let (r, w) = crate::records::connect(stream, ctx.client_config(), name.to_owned()).await?;
            Ok((Source::Tls(r), Sink::Tls(w)))
        }
    }
}

/// What probably causes the TLS failure `text` of a client.
fn tls_failure_hint(text: &str) -> &'static str {
    if text.contains("UnknownIssuer") || text.contains("BadSignature") {
        "the server's certificate is not from an authority this process's credential trusts (a server of another cluster?)"
    } else if text.contains("NotValidForName") || text.contains("extended key usage") {
        "the server's certificate is not a node certificate"
    } else if text.contains("alert") {
        "the server refused this process's certificate (a credential of another cluster, or an outdated one?)"
    } else if text.contains("reset") || text.contains("eof") || text.contains("early") {
        "the server closed the connection: does it run without TLS?"
    } else {
        "see the reason"
    }
}

/// Says why a TLS handshake as a client failed, with what probably causes it.
fn client_handshake_failure(e: &std::io::Error, ctx: &TlsContext) -> String {
    let text = e.to_string();
    format!("the TLS handshake failed: {text}: {} (credential {})", tls_failure_hint(&text), ctx.dir().display())
}

/// Where frames are written.
enum OutSock {
    /// Written by whichever task sends, with non-blocking writes.
    Plain(OwnedWriteHalf),
    /// Written by the task that sends while the queue is empty and the writer task is not
    /// writing (`RecordWriter::send_now`: sealed at once, sent as far as the socket takes
    /// it), else by the writer task; `None` once the outbox is dropped.
    Tls(tokio::sync::Mutex<Option<crate::records::RecordWriter>>),
}

/// Frames on their way out on one socket, written whole and in order. The task that sends a
/// frame while nothing is waiting writes it itself, with non-blocking writes (through TLS:
/// sealed into the writer's buffer, then sent as far as the socket takes it): no hand-off to
/// another task (each costs a wake-up, often of another thread, per message). What does not
/// fit into the socket at once, and what is sent while frames wait, is queued for the
/// connection's writer task, which writes it as the socket drains. A frame already begun is
/// never interleaved with another: the one being written stays at the head of the queue until
/// it is all out, and a sender writes itself only when the queue is empty.
struct Outbox {
    sock: OutSock,
    state: Mutex<OutState>,
    /// Wakes the writer task; kept apart so the task can wait without keeping the outbox (and
    /// the socket) alive.
    wake: Arc<Notify>,
    /// Told once when a write fails (the client fails every call waiting on the connection).
    on_fail: Box<dyn Fn(&str) + Send + Sync>,
}

#[derive(Default)]
struct OutState {
    /// Frames not yet (all) written, with how many bytes of the first one are.
    queue: VecDeque<OutFrame>,
    written: usize,
    failed: Option<String>,
    /// A TLS sender left sealed records in the writer's buffer that the socket did not take:
    /// the writer task flushes them even if the queue is empty.
    unflushed: bool,
}

/// Most frames one vectored write of the writer task takes.
const FRAMES_PER_WRITE_MAX: usize = 64;

impl Outbox {
    /// An outbox on `sock`, and the writer task that drains what senders could not write.
    fn start(sink: Sink, on_fail: Box<dyn Fn(&str) + Send + Sync>) -> Arc<Outbox> {
        let wake = Arc::new(Notify::new());
        let sock = match sink {
            Sink::Plain(w) => OutSock::Plain(w),
            Sink::Tls(w) => OutSock::Tls(tokio::sync::Mutex::new(Some(w))),
        };
        let outbox = Arc::new(Outbox { sock, state: Mutex::new(OutState::default()), wake: wake.clone(), on_fail });
        tokio::spawn(drain_outbox(Arc::downgrade(&outbox), wake));
        outbox
    }

    /// Sends `frame`: writes it now if nothing waits and the socket takes it, else queues it.
    /// Fails once a write on the socket has failed.
    fn send(&self, frame: OutFrame) -> Result<(), String> {
        crate::traffic::sent(frame.len());
        let mut st = self.state.lock();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        if let (true, OutSock::Tls(half)) = (st.queue.is_empty(), &self.sock) {
            // The writer is free when the writer task is not writing: then nothing waits
            // before this frame (the queue is empty), and records left unsent by an earlier
            // sender are sent first by the writer itself.
            if let Ok(mut guard) = half.try_lock() {
                if let Some(w) = guard.as_mut() {
                    match w.send_now(&[&frame.head_and_body, &frame.data]) {
                        Ok(Some(all_out)) => {
                            // Sealed and handed on: when records wait for the writer task,
                            // the stage ends before the last bytes reach the socket.
                            if let Some(at) = frame.answered {
                                stages::record(Stage::RpcServerReply, at);
                            }
                            if !all_out {
                                st.unflushed = true;
                                drop(guard);
                                drop(st);
                                self.wake.notify_one();
                            }
                            return Ok(());
                        }
                        Ok(None) => {}
                        Err(e) => {
                            drop(guard);
                            return self.fail(st, e.to_string());
                        }
                    }
                }
            }
        }
        if let (true, OutSock::Plain(sock)) = (st.queue.is_empty(), &self.sock) {
            let mut done = 0;
            while done < frame.len() {
                match sock.try_write_vectored(&frame.slices(done)) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return self.fail(st, e.to_string()),
                }
            }
            if done == frame.len() {
                if let Some(at) = frame.answered {
                    stages::record(Stage::RpcServerReply, at);
                }
                return Ok(());
            }
            st.written = done;
        }
        st.queue.push_back(frame);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// Marks the outbox failed for `reason` (every later send fails with it), tells
    /// `on_fail` and answers the sender with it.
    fn fail(&self, mut st: parking_lot::MutexGuard<'_, OutState>, reason: String) -> Result<(), String> {
        st.failed = Some(reason.clone());
        drop(st);
        (self.on_fail)(&reason);
        Err(reason)
    }

    /// Writes queued frames until the queue is empty or the socket fails.
    async fn drain(&self) -> Result<(), String> {
        let sock = match &self.sock {
            OutSock::Plain(sock) => sock,
            OutSock::Tls(half) => return self.drain_tls(half).await,
        };
        loop {
            if let Err(e) = sock.writable().await {
                return Err(e.to_string());
            }
            let mut st = self.state.lock();
            if st.queue.is_empty() {
                return Ok(());
            }
            let written = st.written;
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * FRAMES_PER_WRITE_MAX);
            for (i, f) in st.queue.iter().take(FRAMES_PER_WRITE_MAX).enumerate() {
                slices.extend(f.slices(if i == 0 { written } else { 0 }).into_iter().filter(|s| !s.is_empty()));
            }
            let result = sock.try_write_vectored(&slices);
            drop(slices);
            match result {
                Ok(n) => {
                    let mut n = st.written + n;
                    while let Some(f) = st.queue.front() {
                        if n < f.len() {
                            break;
                        }
                        n -= f.len();
                        if let Some(at) = f.answered {
                            stages::record(Stage::RpcServerReply, at);
                        }
                        st.queue.pop_front();
                    }
                    st.written = n;
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => {}
                Err(e) => {
                    let reason = e.to_string();
                    st.failed = Some(reason.clone());
                    st.queue.clear();
                    return Err(reason);
                }
            }
        }
    }
}

impl Outbox {
    /// Writes queued frames through TLS until the queue is empty or the stream fails.
    async fn drain_tls(&self, half: &tokio::sync::Mutex<Option<crate::records::RecordWriter>>) -> Result<(), String> {
        let mut guard = half.lock().await;
        let Some(w) = guard.as_mut() else { return Err("connection closed".into()) };
        loop {
            let batch: Vec<OutFrame> = {
                let mut st = self.state.lock();
                if st.queue.is_empty() && !st.unflushed {
                    return Ok(());
                }
                // Holding the writer, no sender adds to its buffer until this flush is done.
                st.unflushed = false;
                let n = st.queue.len().min(FRAMES_PER_WRITE_MAX);
                st.queue.drain(..n).collect()
            };
            let written = async {
                for f in &batch {
                    w.write_all(&f.head_and_body).await?;
                    if !f.data.is_empty() {
                        w.write_all(&f.data).await?;
                    }
                }
                w.flush().await
            };
            if let Err(e) = written.await {
                let reason = e.to_string();
                let mut st = self.state.lock();
                st.failed = Some(reason.clone());
                st.queue.clear();
                return Err(reason);
            }
            for at in batch.iter().filter_map(|f| f.answered) {
                stages::record(Stage::RpcServerReply, at);
            }
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // The writer task waits holding only the wake-up: let it see the outbox is gone.
        self.wake.notify_one();
        // A TLS stream's halves share the socket, which stays open while the reader holds its
        // half: close the session (close_notify, then the socket's write side) so the peer
        // sees the end, as a plain write half's drop does.
        if let OutSock::Tls(half) = &mut self.sock {
            if let (Some(mut w), Ok(rt)) = (half.get_mut().take(), tokio::runtime::Handle::try_current()) {
                rt.spawn(async move {
                    let _ = w.shutdown().await;
                });
            }
        }
    }
}

/// The writer task of an outbox: ends when the outbox is dropped (its socket half then shuts
/// down) or a write fails.
async fn drain_outbox(outbox: Weak<Outbox>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        let Some(ob) = outbox.upgrade() else { return };
        if let Err(reason) = ob.drain().await {
            (ob.on_fail)(&reason);
            return;
        }
    }
}

struct ConnInner {
    addr: String,
    outbox: Arc<Outbox>,
    /// `None` once the connection is dead: new calls fail at once.
    pending: Pending,
    next_id: AtomicU64,
    dead: AtomicBool,
    version: u16,
}

/// A client connection to one service. Cheap to clone; all clones share the socket.
#[derive(Clone)]
pub struct Connection {
    link: Link,
}

/// What a connection carries its calls over.
#[derive(Clone)]
enum Link {
    Socket(Arc<ConnInner>),
    /// A simulator's network ([`crate::world`]): calls are handed to it whole.
    Simulated(Arc<SimulatedLink>),
}

struct SimulatedLink {
    endpoint: crate::world::Endpoint,
    addr: String,
    service: Service,
}

fn encode_body<T: Serialize>(value: &T) -> Vec<u8> {
    // Encoding into a Vec only fails for types postcard cannot represent, which is a bug.
    postcard::to_allocvec(value).expect("message types are postcard-encodable")
}

fn hello(service: Service, cluster: &str) -> Hello {
    Hello {
        magic: *b"TROV",
        version_min: PROTOCOL_VERSION_MIN,
        version_max: PROTOCOL_VERSION,
        service,
        cluster: cluster.to_string(),
    }
}

impl Connection {
    /// Connects to `addr`, checks it is the expected service and speaks a compatible version.
    /// Returns the server's hello (which names its cluster).
    /// Uses the process's installed TLS credential, if any ([`crate::tls::install`]).
    pub async fn connect(addr: &str, service: Service) -> Result<(Connection, Hello), RpcError> {
        Self::connect_with(addr, service, crate::tls::installed().as_deref()).await
    }

    /// Connects over `net`: as [`Connection::connect_with`] on TCP, through the simulator's
    /// network on a simulated one (where TLS does not apply).
    pub async fn connect_on(
        net: &crate::world::Net,
        addr: &str,
        service: Service,
        tls: Option<&TlsContext>,
    ) -> Result<(Connection, Hello), RpcError> {
        match net {
            crate::world::Net::Tcp => Self::connect_with(addr, service, tls).await,
            crate::world::Net::Simulated(endpoint) => {
                let hello = endpoint.network.connect(&endpoint.name, addr, service).await?;
                let link = SimulatedLink { endpoint: endpoint.clone(), addr: addr.to_string(), service };
                Ok((Connection { link: Link::Simulated(Arc::new(link)) }, hello))
            }
        }
    }

    /// As [`Connection::connect`], in TLS with `tls` (plaintext with `None`).
    pub async fn connect_with(
        addr: &str,
        service: Service,
        tls: Option<&TlsContext>,
    ) -> Result<(Connection, Hello), RpcError> {
        let connected = AtomicBool::new(false);
        let fut = Self::connect_inner(addr, service, tls, &connected);
        match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
            Ok(r) => r,
            Err(_) => {
                let waited = CONNECT_TIMEOUT.as_secs();
                let reason = if connected.load(Ordering::Relaxed) {
                    format!(
                        "timed out: the connection was accepted, but nothing answered Trove's hello within {waited} s (not a Trove {} service, or one too busy to answer)",
                        service_name(service)
                    )
                } else {
                    format!(
                        "timed out: no connection within {waited} s (a wrong address, or a firewall dropping packets?)"
                    )
                };
                Err(RpcError::Connect { addr: addr.into(), reason })
            }
        }
    }

    async fn connect_inner(
        addr: &str,
        service: Service,
        tls: Option<&TlsContext>,
        connected: &AtomicBool,
    ) -> Result<(Connection, Hello), RpcError> {
        let connect_err = |reason: String| RpcError::Connect { addr: addr.into(), reason };
        let stream = TcpStream::connect(addr).await.map_err(|e| {
            connect_err(match e.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!("connection refused: nothing listens there ({e})")
                }
                _ => e.to_string(),
            })
        })?;
        connected.store(true, Ordering::Relaxed);
        stream.set_nodelay(true).ok();
        let (rd, mut wr) = match (client_halves(stream, tls).await, tls) {
            (Ok(halves), _) => halves,
            (Err(e), Some(ctx)) => return Err(connect_err(client_handshake_failure(&e, ctx))),
            (Err(e), None) => return Err(connect_err(e.to_string())),
        };
        let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        let ours = hello(service, "");
        let bytes = frame::encode(1, FrameKind::Hello, 0, &encode_body(&ours), 0);
        wr.write_now(&bytes).await.map_err(|e| connect_err(e.to_string()))?;
        // In TLS 1.3 the server checks the client's certificate after the client's side of the
        // handshake is done: a refusal arrives as an alert in place of the hello.
        let frame = read_hello(&mut rd, addr, service).await.map_err(|e| match (e, tls) {
            (RpcError::Connect { addr, reason }, Some(ctx)) if reason.contains("alert") => RpcError::Connect {
                addr,
                reason: format!(
                    "the TLS handshake failed: {reason}: {} (credential {})",
                    tls_failure_hint(&reason),
                    ctx.dir().display()
                ),
            },
            (e, _) => e,
        })?;
        if frame.header.kind != FrameKind::Hello {
            return Err(RpcError::Protocol { addr: addr.into(), reason: "expected a hello frame".into() });
        }
        let theirs: Hello = postcard::from_bytes(&frame.body)
            .map_err(|e| RpcError::Protocol { addr: addr.into(), reason: format!("bad hello: {e}") })?;
        if theirs.service != service {
            return Err(RpcError::Protocol {
                addr: addr.into(),
                reason: format!("expected the {service:?} service, found {:?}", theirs.service),
            });
        }
        let version = PROTOCOL_VERSION.min(theirs.version_max);
        if version < theirs.version_min || version < PROTOCOL_VERSION_MIN {
            return Err(RpcError::Version { addr: addr.into(), min: theirs.version_min, max: theirs.version_max });
        }
        let inner = Arc::new_cyclic(|me: &Weak<ConnInner>| {
            let me = me.clone();
            let on_fail = Box::new(move |reason: &str| {
                if let Some(inner) = me.upgrade() {
                    inner.fail_all(reason);
                }
            });
            ConnInner {
                addr: addr.to_string(),
                outbox: Outbox::start(wr, on_fail),
                pending: Mutex::new(Some(HashMap::new())),
                next_id: AtomicU64::new(1),
                dead: AtomicBool::new(false),
                version,
            }
        });
        // The reader holds only a weak reference: when the last `Connection` clone is dropped,
        // the inner state and its outbox go, the socket's write half shuts down, and the reader
        // then sees the end of the stream.
        let reader_inner = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let reason = loop {
                match frame::read_frame(&mut rd).await {
                    Ok(Some(f)) => {
                        let Some(inner) = reader_inner.upgrade() else { return };
                        let waiter = inner.pending.lock().as_mut().and_then(|p| p.remove(&f.header.request_id));
                        if let Some(w) = waiter {
                            let _ = w.send(Ok(f));
                        }
                    }
                    Ok(None) => break "closed by peer".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            if let Some(inner) = reader_inner.upgrade() {
                inner.fail_all(&reason);
            }
        });
        Ok((Connection { link: Link::Socket(inner) }, theirs))
    }

    /// The address this connection was made to.
    pub fn addr(&self) -> &str {
        match &self.link {
            Link::Socket(inner) => &inner.addr,
            Link::Simulated(link) => &link.addr,
        }
    }

    /// Whether the connection has failed; a dead connection fails every call. (A simulated
    /// connection fails call by call instead.)
    pub fn is_dead(&self) -> bool {
        match &self.link {
            Link::Socket(inner) => inner.dead.load(Ordering::Acquire),
            Link::Simulated(_) => false,
        }
    }

    /// Sends a request with an optional data section and waits for the reply.
    pub async fn call<Req, Resp>(&self, req: &Req, data: Bytes, timeout: Duration) -> Result<(Resp, Bytes), RpcError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        if data.len() > frame::DATA_BYTES_MAX as usize {
            return Err(RpcError::Remote(WireError::new(
                crate::ErrorCode::TooLarge,
                format!("request data of {} bytes exceeds the limit of {}", data.len(), frame::DATA_BYTES_MAX),
            )));
        }
        let inner = match &self.link {
            Link::Socket(inner) => inner,
            Link::Simulated(link) => return link.call(req, data, timeout).await,
        };
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let body = encode_body(req);
        let head_and_body = frame::encode(inner.version, FrameKind::Request, id, &body, data.len());
        let (wtx, wrx) = oneshot::channel();
        {
            let mut pending = inner.pending.lock();
            match pending.as_mut() {
                Some(p) => p.insert(id, wtx),
                None => {
                    return Err(RpcError::Closed {
                        addr: inner.addr.clone(),
                        reason: "connection failed earlier".into(),
                    })
                }
            };
        }
        let closed = || RpcError::Closed { addr: inner.addr.clone(), reason: "connection closed".into() };
        if let Err(reason) = inner.outbox.send(OutFrame { head_and_body, data, answered: None }) {
            inner.forget(id);
            return Err(RpcError::Closed { addr: inner.addr.clone(), reason });
        }
        let frame = match tokio::time::timeout(timeout, wrx).await {
            Ok(Ok(Ok(f))) => f,
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => return Err(closed()),
            Err(_) => {
                inner.forget(id);
                return Err(RpcError::Timeout { addr: inner.addr.clone(), timeout_ms: timeout.as_millis() as u64 });
            }
        };
        decode_reply(&inner.addr, &frame.body, frame.data)
    }
}

/// A reply's body (`Result<Resp, WireError>`, postcard) and data section as the caller gets
/// them.
fn decode_reply<Resp: DeserializeOwned>(addr: &str, body: &[u8], data: Bytes) -> Result<(Resp, Bytes), RpcError> {
    let result: Result<Resp, WireError> = postcard::from_bytes(body)
        .map_err(|e| RpcError::Protocol { addr: addr.to_string(), reason: format!("undecodable reply: {e}") })?;
    match result {
        Ok(resp) => Ok((resp, data)),
        Err(e) => Err(RpcError::Remote(e)),
    }
}

impl SimulatedLink {
    /// Hands the request to the simulator's network (the data section's size was checked).
    async fn call<Req, Resp>(&self, req: &Req, data: Bytes, timeout: Duration) -> Result<(Resp, Bytes), RpcError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let request = crate::world::Request { service: self.service, body: encode_body(req), data, timeout };
        let (body, data) = self.endpoint.network.call(&self.endpoint.name, &self.addr, request).await?;
        decode_reply(&self.addr, &body, data)
    }
}

impl ConnInner {
    fn fail_all(&self, reason: &str) {
        self.dead.store(true, Ordering::Release);
        let waiters = self.pending.lock().take();
        for (_, w) in waiters.into_iter().flatten() {
            let _ = w.send(Err(RpcError::Closed { addr: self.addr.clone(), reason: reason.to_string() }));
        }
    }

    fn forget(&self, id: u64) {
        if let Some(p) = self.pending.lock().as_mut() {
            p.remove(&id);
        }
    }
}

/// What services are called in messages.
fn service_name(service: Service) -> &'static str {
    match service {
        Service::Meta => "metadata",
        Service::Storage => "storage",
    }
}

/// Reads the peer's answer to our hello. A Trove peer answers with a hello frame; anything else
/// is told apart by its first bytes, so that the error says what is listening there instead of
/// reporting a bad frame magic.
async fn read_hello<R: AsyncRead + Unpin>(rd: &mut R, addr: &str, service: Service) -> Result<Frame, RpcError> {
    let connect_err = |reason: String| RpcError::Connect { addr: addr.into(), reason };
    let mut first = [0u8; 4];
    let mut got = 0;
    while got < first.len() {
        match rd.read(&mut first[got..]).await {
            Ok(0) => break,
            Ok(n) => got += n,
            // The peer went away (reset, restart): unreachable, so callers retry or fail over.
            Err(e) => return Err(connect_err(format!("during the handshake: {e}"))),
        }
    }
    if got == first.len() && first == frame::MAGIC {
        let mut rest = (&first[..]).chain(&mut *rd);
        return match frame::read_frame(&mut rest).await {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(connect_err("closed during handshake".into())),
            Err(frame::ReadError::Io(e)) => Err(connect_err(format!("during the handshake: {e}"))),
            Err(e) => Err(RpcError::Protocol { addr: addr.into(), reason: e.to_string() }),
        };
    }
    if got == 0 {
        // Every Trove service answers a hello, even one it refuses; a peer that hangs up
        // without a word is something else (or a Trove process that just died).
        return Err(connect_err(format!(
            "the peer closed the connection without answering Trove's hello: no Trove {} service listens there",
            service_name(service)
        )));
    }
    // Something else answered: take what else it sends right away, to recognise it.
    let mut seen = first[..got].to_vec();
    let deadline = tokio::time::Instant::now() + FOREIGN_READ_TIMEOUT;
    let mut buf = [0u8; FOREIGN_BYTES_MAX];
    while seen.len() < FOREIGN_BYTES_MAX {
        let want = FOREIGN_BYTES_MAX - seen.len();
        match tokio::time::timeout_at(deadline, rd.read(&mut buf[..want])).await {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    Err(RpcError::Foreign { addr: addr.into(), service: service_name(service), looks_like: describe_foreign(&seen) })
}

/// Says what a peer looks like from the first bytes it sent in answer to a Trove hello.
pub fn describe_foreign(seen: &[u8]) -> String {
    let first_line = || {
        let end = seen.iter().position(|&b| b == b'\r' || b == b'\n').unwrap_or(seen.len()).min(80);
        String::from_utf8_lossy(&seen[..end]).into_owned()
    };
    if seen.starts_with(b"HTTP/") {
        format!("it answers like an HTTP server ({:?})", first_line())
    } else if seen.starts_with(b"SSH-") {
        format!("it answers like an SSH server ({:?})", first_line())
    } else if seen.len() >= 2 && matches!(seen[0], 0x15 | 0x16) && seen[1] == 0x03 {
        // A TLS record: an alert (21) or handshake (22), protocol major version 3.
        "it answers like a TLS server (it expects an encrypted connection: a Trove cluster with TLS needs its credential, `--credentials DIR` or the cluster's directory)".to_string()
    } else if seen.starts_with(b"-ERR") || seen.starts_with(b"-NOAUTH") {
        format!("it answers like a Redis server ({:?})", first_line())
    } else if seen.len() >= 5 && seen[0] == b'E' && seen[5..].starts_with(b"S") {
        "it answers like a PostgreSQL server".to_string()
    } else if seen.len() > 4 && seen[4] == 10 && seen[3] == 0 {
        // MySQL's greeting: 3-byte length, sequence 0, protocol version 10.
        "it answers like a MySQL server".to_string()
    } else if seen.iter().all(|&b| b == b'\r' || b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b)) {
        format!("it answered {:?}", first_line())
    } else {
        let shown: Vec<String> = seen.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!(
            "it answered {} bytes that are not a Trove frame ({}{})",
            seen.len(),
            shown.join(" "),
            if seen.len() > 16 { " ..." } else { "" }
        )
    }
}

/// A lazily (re)connecting handle to one peer: connects on first use and after the connection
/// dies. It does not retry calls itself: whether a call may be retried is the caller's choice.
pub struct Peer {
    addr: String,
    service: Service,
    tls: TlsChoice,
    net: crate::world::Net,
    conn: tokio::sync::Mutex<Option<Connection>>,
    /// The cluster the server named in its hello, once connected.
    cluster: std::sync::OnceLock<String>,
}

impl Peer {
    /// A peer reached with the process's installed TLS credential, if any.
    pub fn new(addr: impl Into<String>, service: Service) -> Peer {
        Peer::with_tls(addr, service, TlsChoice::Installed)
    }

    /// A peer reached with the credential `tls` chooses.
    pub fn with_tls(addr: impl Into<String>, service: Service, tls: TlsChoice) -> Peer {
        Peer::on(crate::world::Net::Tcp, addr, service, tls)
    }

    /// A peer reached over `net` (TCP with the credential `tls` chooses, or a simulator's
    /// network).
    pub fn on(net: crate::world::Net, addr: impl Into<String>, service: Service, tls: TlsChoice) -> Peer {
        Peer {
            addr: addr.into(),
            service,
            tls,
            net,
            conn: tokio::sync::Mutex::new(None),
            cluster: std::sync::OnceLock::new(),
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The cluster the server named in its hello when first connected (`None` before that).
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.get().map(String::as_str)
    }

    /// Returns a live connection, connecting if needed.
    pub async fn connection(&self) -> Result<Connection, RpcError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            if !c.is_dead() {
                return Ok(c.clone());
            }
        }
        let (c, hello) =
            Connection::connect_on(&self.net, &self.addr, self.service, self.tls.resolve().as_deref()).await?;
        let _ = self.cluster.set(hello.cluster);
        *guard = Some(c.clone());
        Ok(c)
    }

    /// Calls the peer over its (re)established connection.
    pub async fn call<Req, Resp>(&self, req: &Req, data: Bytes, timeout: Duration) -> Result<(Resp, Bytes), RpcError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let conn = self.connection().await?;
        conn.call(req, data, timeout).await
    }
}

/// A service that answers requests. The transport decodes requests and encodes replies.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    type Req: DeserializeOwned + Send + 'static;
    type Reply: Serialize + Send + 'static;

    /// Answers one request. `data` is the request's data section; the returned bytes become
    /// the reply's data section.
    async fn handle(&self, req: Self::Req, data: Bytes) -> (Result<Self::Reply, WireError>, Bytes);

    /// Answers `req` at once, on the task that read it, if that needs no waiting at all (a
    /// storage read the page cache holds): then no task is started for it. `None` (the
    /// default): [`Handler::handle`] answers it on a task of its own. Must not block.
    fn handle_now(&self, _req: &Self::Req) -> Option<(Result<Self::Reply, WireError>, Bytes)> {
        None
    }

    /// Answers `req` with blocking work alone (a storage read that waits for the drive),
    /// when it can start now: the work then runs on tokio's blocking pool, handed there by the
    /// task that read the request, and sends its answer itself when done. A request answered
    /// so costs one hand-off to another thread, where a task of its own that hands the work
    /// to the pool and waits for it costs three. `None` (the default, or when the work would
    /// have to queue): [`Handler::handle`] answers it on a task of its own. Must not block;
    /// the work it returns may, and must not need the runtime's context or the peer
    /// ([`current_peer`]).
    fn handle_blocking(&self, _req: &Self::Req) -> Option<BlockingAnswer<Self::Reply>> {
        None
    }
}

/// The blocking work [`Handler::handle_blocking`] returns: the answer, as from
/// [`Handler::handle`].
pub type BlockingAnswer<R> = Box<dyn FnOnce() -> (Result<R, WireError>, Bytes) + Send>;

/// Who asked the request being answered.
#[derive(Debug, Clone)]
struct Caller {
    addr: std::net::SocketAddr,
    /// The role of its certificate; `None` on a plaintext connection.
    role: Option<Role>,
    /// The name its certificate was issued under ([`crate::tls::name_of`]).
    name: Option<Arc<str>>,
}

tokio::task_local! {
    /// The peer whose request the current task answers.
    static PEER: Caller;
}

/// The address of the peer whose request is being answered, inside [`Handler::handle`] (for
/// audit records); `None` elsewhere.
pub fn current_peer() -> Option<std::net::SocketAddr> {
    PEER.try_with(|p| p.addr).ok()
}

/// The role of the certificate of the peer whose request is being answered, inside
/// [`Handler::handle`]; `None` elsewhere and on plaintext connections.
pub fn current_role() -> Option<Role> {
    PEER.try_with(|p| p.role).ok().flatten()
}

/// The name in the certificate of the peer whose request is being answered, inside
/// [`Handler::handle`] on a TLS connection (for audit records); `None` elsewhere.
pub fn current_credential_name() -> Option<Arc<str>> {
    PEER.try_with(|p| p.name.clone()).ok().flatten()
}

/// Answers one request that arrived over a simulated network ([`crate::world::answer`]), as
/// [`serve_connection`] answers one from a socket.
pub(crate) async fn answer_simulated<H: Handler>(
    handler: Arc<H>,
    from: Arc<str>,
    body: Vec<u8>,
    data: Bytes,
) -> (Vec<u8>, Bytes) {
    let req = match postcard::from_bytes::<H::Req>(&body) {
        Ok(req) => req,
        Err(e) => {
            let error: Result<H::Reply, WireError> =
                Err(WireError::new(crate::ErrorCode::Invalid, format!("undecodable request: {e}")));
            return (encode_body(&error), Bytes::new());
        }
    };
    let (result, data) = match handler.handle_now(&req) {
        Some(answered) => answered,
        None => {
            // Simulated endpoints are named like socket addresses; one that is not shows as
            // the unspecified address.
            let addr = from.parse().unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
            let caller = Caller { addr, role: None, name: None };
            PEER.scope(caller, handler.handle(req, data)).await
        }
    };
    (encode_body(&result), data)
}

/// How often services report the connections their TLS servers refused to the event log.
pub const REFUSAL_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Connections the TLS servers of this process refused and not yet reported: how many, and
/// the latest with its peer and reason.
static REFUSED: Mutex<(u64, String)> = Mutex::new((0, String::new()));

/// The connections this process's TLS servers refused since the last call (how many, and the
/// latest, with its peer and reason); `None` when there were none. Services report them to the
/// event log every [`REFUSAL_REPORT_INTERVAL`], so a flood of strangers makes one event per
/// interval, not one per connection.
pub fn take_refusals() -> Option<(u64, String)> {
    let mut refused = REFUSED.lock();
    (refused.0 > 0).then(|| (std::mem::take(&mut refused.0), std::mem::take(&mut refused.1)))
}

/// A TLS alert record (fatal, protocol_version): what a TLS server answers a plaintext Trove
/// hello with, so that the client reports a TLS server instead of a closed connection.
const TLS_REFUSAL: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46];

/// Serves `handler` on every connection accepted from `listener`, forever, with the process's
/// installed TLS credential, if any ([`crate::tls::install`]).
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, service: Service, cluster: String) {
    serve_with(listener, handler, service, cluster, TlsChoice::Installed).await
}

/// As [`serve`], with the credential `tls` chooses (looked up again for every connection, so a
/// reloaded credential applies to the next one).
pub async fn serve_with<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    service: Service,
    cluster: String,
    tls: TlsChoice,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handler = handler.clone();
        let cluster = cluster.clone();
        let tls = tls.resolve();
        tokio::spawn(async move {
            stream.set_nodelay(true).ok();
            let (rd, wr, role, name) = match tls {
                None => {
                    let (r, w) = stream.into_split();
                    (Source::Plain(r), Sink::Plain(w), None, None)
                }
                Some(ctx) => match accept_tls(stream, &ctx).await {
                    Ok(halves) => halves,
                    Err(reason) => {
                        tracing::warn!("refused a connection from {peer}: {reason}");
                        let mut refused = REFUSED.lock();
                        refused.0 += 1;
                        refused.1 = format!("a connection from {peer}: {reason}");
                        return;
                    }
                },
            };
            let caller = Caller { addr: peer, role, name };
            if let Err(e) = serve_connection(rd, wr, caller, handler, service, &cluster).await {
                tracing::debug!("connection from {peer} ended: {e}");
            }
        });
    }
}

/// The TLS server's side of a handshake: the client must present a certificate of a trusted
/// authority and of a Trove role. A plaintext Trove client is answered with a TLS alert.
/// Answers the connection's halves, the role of the client's certificate and the name it was
/// issued under.
#[allow(clippy::type_complexity)]
async fn accept_tls(
    stream: TcpStream,
    ctx: &TlsContext,
) -> Result<(Source, Sink, Option<Role>, Option<Arc<str>>), String> {
    let mut first = [0u8; 4];
    let peeked = tokio::time::timeout(CONNECT_TIMEOUT, stream.peek(&mut first)).await;
    if let Ok(Ok(n)) = peeked {
        if n > 0 && first[..n] == frame::MAGIC[..n] {
            let mut stream = stream;
            let _ = stream.write_all(&TLS_REFUSAL).await;
            return Err("it speaks plaintext, and this service requires TLS".into());
        }
    }
    let (r, w, certs) = tokio::time::timeout(CONNECT_TIMEOUT, crate::records::accept(stream, ctx.server_config()))
        .await
        .map_err(|_| "no TLS handshake within the connect timeout".to_string())?
        .map_err(|e| format!("the TLS handshake failed: {e}"))?;
    let cert = certs.first();
    let Some(role) = cert.and_then(crate::tls::role_of) else {
        return Err("its certificate is of no Trove role".into());
    };
    let name = cert.and_then(crate::tls::name_of).map(Arc::from);
    Ok((Source::Tls(r), Sink::Tls(w), Some(role), name))
}

async fn serve_connection<H: Handler>(
    rd: Source,
    mut wr: Sink,
    caller: Caller,
    handler: Arc<H>,
    service: Service,
    cluster: &str,
) -> Result<(), String> {
    let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
    // A peer that never completes its hello must not hold the connection forever.
    let first = match tokio::time::timeout(CONNECT_TIMEOUT, frame::read_frame(&mut rd)).await {
        Ok(Ok(Some(f))) => f,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("no hello within the connect timeout".into()),
    };
    if first.header.kind != FrameKind::Hello {
        return Err("first frame is not a hello".into());
    }
    let theirs: Hello = postcard::from_bytes(&first.body).map_err(|e| format!("bad hello: {e}"))?;
    // Always answer with our hello so the peer can explain a mismatch to its user.
    let ours = hello(service, cluster);
    let bytes = frame::encode(1, FrameKind::Hello, 0, &encode_body(&ours), 0);
    wr.write_now(&bytes).await.map_err(|e| e.to_string())?;
    let version = PROTOCOL_VERSION.min(theirs.version_max);
    if version < theirs.version_min || theirs.service != service {
        return Err(format!(
            "refused peer: wants {:?} versions {}..={}",
            theirs.service, theirs.version_min, theirs.version_max
        ));
    }
    // The read loop ends when the peer closes or breaks the stream; the outbox (and with it
    // the write half) goes when the last request in flight has answered.
    let outbox = Outbox::start(wr, Box::new(|reason: &str| tracing::debug!("writing a reply failed: {reason}")));
    let limit = Arc::new(Semaphore::new(INFLIGHT_PER_CONNECTION_MAX));
    let result = loop {
        let frame = match frame::read_frame(&mut rd).await {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.to_string()),
        };
        if frame.header.kind != FrameKind::Request {
            break Err(format!("unexpected {:?} frame", frame.header.kind));
        }
        let id = frame.header.request_id;
        // The answer's frame, stamped as answered now (`Send + 'static`: the blocking pool's
        // threads and answer tasks build it too).
        let reply = move |result: Result<H::Reply, WireError>, data: Bytes| {
            let body = encode_body(&result);
            let head_and_body = frame::encode(version, FrameKind::Response, id, &body, data.len());
            OutFrame { head_and_body, data, answered: Some(Instant::now()) }
        };
        let req = match postcard::from_bytes::<H::Req>(&frame.body) {
            Ok(req) => req,
            Err(e) => {
                let error = WireError::new(crate::ErrorCode::Invalid, format!("undecodable request: {e}"));
                let _ = outbox.send(reply(Err(error), Bytes::new()));
                continue;
            }
        };
        if let Some((result, data)) = handler.handle_now(&req) {
            let _ = outbox.send(reply(result, data));
            continue;
        }
        let permit = match limit.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => break Ok(()),
        };
        let outbox = outbox.clone();
        let read_at = Instant::now();
        if let Some(work) = handler.handle_blocking(&req) {
            tokio::task::spawn_blocking(move || {
                stages::record(Stage::RpcServerHandoff, read_at);
                let (result, data) = work();
                let _ = outbox.send(reply(result, data));
                drop(permit);
            });
            continue;
        }
        let handler = handler.clone();
        let caller = caller.clone();
        tokio::spawn(async move {
            stages::record(Stage::RpcServerHandoff, read_at);
            let mut answer = std::pin::pin!(PEER.scope(caller, handler.handle(req, frame.data)));
            // A handler that panics fails its request with an error, instead of leaving its
            // caller waiting until its timeout.
            let answered = std::future::poll_fn(|cx| {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer.as_mut().poll(cx))) {
                    Ok(Poll::Ready(answer)) => Poll::Ready(Some(answer)),
                    Ok(Poll::Pending) => Poll::Pending,
                    Err(_) => Poll::Ready(None),
                }
            })
            .await;
            let (result, data) = answered.unwrap_or_else(|| {
                tracing::error!("a {service:?} handler panicked answering request {id}");
                (
                    Err(WireError::new(crate::ErrorCode::Internal, "the service failed answering this request")),
                    Bytes::new(),
                )
            });
            let _ = outbox.send(reply(result, data));
            drop(permit);
        });
    };
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A one-connection server that reads the hello and answers with `reply`, then waits.
    async fn answering(reply: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(reply).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        addr
    }

    async fn connect_error(addr: &str) -> String {
        match Connection::connect(addr, Service::Meta).await {
            Ok(_) => panic!("{addr} accepted as a Trove service"),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn foreign_peers_are_named_by_what_they_look_like() {
        let http = answering(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
        let e = connect_error(&http).await;
        assert!(
            e.contains("is not a Trove metadata service")
                && e.contains("an HTTP server")
                && e.contains("400 Bad Request"),
            "{e}"
        );
        let ssh = answering(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n").await;
        assert!(connect_error(&ssh).await.contains("an SSH server (\"SSH-2.0-OpenSSH_9.2p1 Debian-2\")"));
        let tls = answering(&[0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46]).await;
        assert!(connect_error(&tls).await.contains("a TLS server"));
        let text = answering(b"hello there\n").await;
        assert!(connect_error(&text).await.contains("it answered \"hello there\""));
        let binary = answering(&[0, 1, 2, 3, 4, 5]).await;
        assert!(connect_error(&binary).await.contains("6 bytes that are not a Trove frame (00 01 02 03 04 05)"));
    }

    #[tokio::test]
    async fn a_refused_or_silently_closed_connection_says_so() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let e = connect_error(&addr).await;
        assert!(e.contains("connection refused: nothing listens there"), "{e}");
        let silent = answering(b"").await;
        let e = connect_error(&silent).await;
        // The server holds the connection open without a word until it gives up.
        assert!(e.contains("timed out") || e.contains("without answering"), "{e}");
    }
}
