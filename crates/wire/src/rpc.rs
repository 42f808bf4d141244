//! The RPC transport: many requests in flight on one TCP connection, matched by request id.
//!
//! A connection starts with a hello exchange (service, protocol version range, cluster name).
//! Afterwards the client sends request frames and the server answers each with a response frame
//! carrying the same id, in any order. Response bodies are `Result<Reply, WireError>` encoded
//! with postcard, so every remote failure arrives as a stable [`crate::ErrorCode`].

use crate::error::WireError;
use crate::frame::{self, Frame, FrameKind};
use crate::msg::{Hello, Service};
use crate::stages::{self, Stage};
use crate::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify, Semaphore};

/// Requests one connection may have in flight at a server before it stops reading more.
pub const INFLIGHT_PER_CONNECTION_MAX: usize = 512;
/// How long connecting and the hello exchange may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
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

/// Frames on their way out on one socket, written whole and in order. The task that sends a
/// frame while nothing is waiting writes it itself, with non-blocking writes: no hand-off to
/// another task (each costs a wake-up, often of another thread, per message). What does not
/// fit into the socket at once, and what is sent while frames wait, is queued for the
/// connection's writer task, which writes it as the socket drains. A frame already begun is
/// never interleaved with another: the one being written stays at the head of the queue until
/// it is all out, and a sender writes itself only when the queue is empty.
struct Outbox {
    sock: OwnedWriteHalf,
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
}

/// Most frames one vectored write of the writer task takes.
const FRAMES_PER_WRITE_MAX: usize = 64;

impl Outbox {
    /// An outbox on `sock`, and the writer task that drains what senders could not write.
    fn start(sock: OwnedWriteHalf, on_fail: Box<dyn Fn(&str) + Send + Sync>) -> Arc<Outbox> {
        let wake = Arc::new(Notify::new());
        let outbox = Arc::new(Outbox { sock, state: Mutex::new(OutState::default()), wake: wake.clone(), on_fail });
        tokio::spawn(drain_outbox(Arc::downgrade(&outbox), wake));
        outbox
    }

    /// Sends `frame`: writes it now if nothing waits and the socket takes it, else queues it.
    /// Fails once a write on the socket has failed.
    fn send(&self, frame: OutFrame) -> Result<(), String> {
        let mut st = self.state.lock();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        if st.queue.is_empty() {
            let mut done = 0;
            while done < frame.len() {
                match self.sock.try_write_vectored(&frame.slices(done)) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let reason = e.to_string();
                        st.failed = Some(reason.clone());
                        drop(st);
                        (self.on_fail)(&reason);
                        return Err(reason);
                    }
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

    /// Writes queued frames until the queue is empty or the socket fails.
    async fn drain(&self) -> Result<(), String> {
        loop {
            if let Err(e) = self.sock.writable().await {
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
            let result = self.sock.try_write_vectored(&slices);
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

impl Drop for Outbox {
    fn drop(&mut self) {
        // The writer task waits holding only the wake-up: let it see the outbox is gone.
        self.wake.notify_one();
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
    inner: Arc<ConnInner>,
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
    pub async fn connect(addr: &str, service: Service) -> Result<(Connection, Hello), RpcError> {
        let fut = Self::connect_inner(addr, service);
        match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Connect { addr: addr.into(), reason: "timed out".into() }),
        }
    }

    async fn connect_inner(addr: &str, service: Service) -> Result<(Connection, Hello), RpcError> {
        let connect_err = |reason: String| RpcError::Connect { addr: addr.into(), reason };
        let stream = TcpStream::connect(addr).await.map_err(|e| connect_err(e.to_string()))?;
        stream.set_nodelay(true).ok();
        let (rd, mut wr) = stream.into_split();
        let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        let ours = hello(service, "");
        let bytes = frame::encode(1, FrameKind::Hello, 0, &encode_body(&ours), 0);
        wr.write_all(&bytes).await.map_err(|e| connect_err(e.to_string()))?;
        let frame = match frame::read_frame(&mut rd).await {
            Ok(Some(f)) => f,
            Ok(None) => return Err(connect_err("closed during handshake".into())),
            // The peer went away (reset, restart): unreachable, so callers retry or fail over.
            Err(frame::ReadError::Io(e)) => return Err(connect_err(format!("during the handshake: {e}"))),
            Err(e) => return Err(RpcError::Protocol { addr: addr.into(), reason: e.to_string() }),
        };
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
        Ok((Connection { inner }, theirs))
    }

    /// The address this connection was made to.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Whether the connection has failed; a dead connection fails every call.
    pub fn is_dead(&self) -> bool {
        self.inner.dead.load(Ordering::Acquire)
    }

    /// Sends a request with an optional data section and waits for the reply.
    pub async fn call<Req, Resp>(&self, req: &Req, data: Bytes, timeout: Duration) -> Result<(Resp, Bytes), RpcError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let inner = &self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let body = encode_body(req);
        if data.len() > frame::DATA_BYTES_MAX as usize {
            return Err(RpcError::Remote(WireError::new(
                crate::ErrorCode::TooLarge,
                format!("request data of {} bytes exceeds the limit of {}", data.len(), frame::DATA_BYTES_MAX),
            )));
        }
        let head_and_body = frame::encode(inner.version, FrameKind::Request, id, &body, data.len());
        let (wtx, wrx) = oneshot::channel();
        {
            let mut pending = inner.pending.lock();
            match pending.as_mut() {
                Some(p) => p.insert(id, wtx),
                None => return Err(RpcError::Closed { addr: inner.addr.clone(), reason: "connection failed earlier".into() }),
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
        let result: Result<Resp, WireError> = postcard::from_bytes(&frame.body).map_err(|e| RpcError::Protocol {
            addr: inner.addr.clone(),
            reason: format!("undecodable reply: {e}"),
        })?;
        match result {
            Ok(resp) => Ok((resp, frame.data)),
            Err(e) => Err(RpcError::Remote(e)),
        }
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

/// A lazily (re)connecting handle to one peer: connects on first use and after the connection
/// dies. It does not retry calls itself: whether a call may be retried is the caller's choice.
pub struct Peer {
    addr: String,
    service: Service,
    conn: tokio::sync::Mutex<Option<Connection>>,
}

impl Peer {
    pub fn new(addr: impl Into<String>, service: Service) -> Peer {
        Peer { addr: addr.into(), service, conn: tokio::sync::Mutex::new(None) }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Returns a live connection, connecting if needed.
    pub async fn connection(&self) -> Result<Connection, RpcError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            if !c.is_dead() {
                return Ok(c.clone());
            }
        }
        let (c, _) = Connection::connect(&self.addr, self.service).await?;
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
}

/// Serves `handler` on every connection accepted from `listener`, forever.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, service: Service, cluster: String) {
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
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, handler, service, &cluster).await {
                tracing::debug!("connection from {peer} ended: {e}");
            }
        });
    }
}

async fn serve_connection<H: Handler>(stream: TcpStream, handler: Arc<H>, service: Service, cluster: &str) -> Result<(), String> {
    stream.set_nodelay(true).ok();
    let (rd, mut wr) = stream.into_split();
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
    wr.write_all(&bytes).await.map_err(|e| e.to_string())?;
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
        let reply = |result: Result<H::Reply, WireError>, data: Bytes| {
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
        let handler = handler.clone();
        let outbox = outbox.clone();
        let read_at = Instant::now();
        tokio::spawn(async move {
            stages::record(Stage::RpcServerHandoff, read_at);
            let (result, data) = handler.handle(req, frame.data).await;
            let body = encode_body(&result);
            let head_and_body = frame::encode(version, FrameKind::Response, id, &body, data.len());
            let _ = outbox.send(OutFrame { head_and_body, data, answered: Some(Instant::now()) });
            drop(permit);
        });
    };
    result
}
