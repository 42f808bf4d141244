//! The record layer of the cluster's TLS sessions: rustls negotiates each session (certificates,
//! keys) and keeps its key schedule, and this module protects and opens the records itself
//! (RFC 8446 §5), the way kernel TLS does, through rustls's API for record layers outside it
//! (`rustls::kernel`).
//!
//! Why: rustls's stream API reads its transport 4 KiB at a time into a buffer it grows and
//! shrinks again for every record, copies each record's plaintext into an allocation of its own
//! and then out to the reader, and on the way out copies each record into an allocation before
//! sealing it. Here a read of 64 KiB or more (shard data, most of the bytes) goes from the
//! socket straight into the caller's buffer, and each record is opened there, its plaintext
//! moved down over the headers and tags before it in the same pass as the decryption: no copy
//! at all. A smaller read goes through the connection's read buffer, where records are opened
//! the same way and copied once, to the reader. A write is copied once, into the write buffer, and
//! sealed there. AES-GCM itself is ring's, as before.
//!
//! - [`connect`] and [`accept`] drive rustls's unbuffered connection over the socket until the
//!   handshake is complete (certificates checked both ways), then take the traffic secrets and
//!   the `KernelConnection` that derives the next ones. Records that arrived with the end of the
//!   handshake are kept for the reader.
//! - [`RecordReader`] (`AsyncRead`) opens records: application data is returned; a
//!   NewSessionTicket is ignored (sessions are not resumed); a KeyUpdate moves the receiving
//!   key on, and when the peer asks for it the writer sends its own before its next record; a
//!   close_notify alert ends the stream, any other alert is an error naming it.
//! - [`RecordWriter`] (`AsyncWrite`) fills records of up to 16 KiB in its buffer and seals each
//!   when it is full or on flush; it moves to a new key by itself before the suite's
//!   confidentiality limit, and `shutdown` sends close_notify.
//!
//! Invariants: sequence numbers count every record of a direction from the key it was sealed
//! with (a KeyUpdate restarts them at 0, after the record that carries it); a record that fails
//! authentication, is longer than the protocol allows or carries an unknown content type ends the
//! connection with an error; a handshake message must lie within one record (the messages after
//! a handshake are a few bytes long).
//!
//! Deliberately absent: TLS 1.2 (the cluster's links speak TLS 1.3 only), early data, and
//! session resumption.

use parking_lot::Mutex;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305, NONCE_LEN};
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::{AlertDescription, ClientConfig, ConnectionTrafficSecrets, ServerConfig, SupportedCipherSuite};
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Bytes of a record's header: content type, legacy version, length.
const HEADER_BYTES: usize = 5;
/// Most plaintext bytes of one record.
const PLAINTEXT_PER_RECORD_MAX: usize = 1 << 14;
/// Most bytes of a protected record after its header (RFC 8446 §5.2).
const CIPHERTEXT_PER_RECORD_MAX: usize = PLAINTEXT_PER_RECORD_MAX + 256;
/// Bytes of an AEAD tag (every suite of TLS 1.3 has 16).
const TAG_BYTES: usize = 16;
/// The outer content type of every protected record, and the inner one of application data.
const APPLICATION_DATA: u8 = 23;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
/// Handshake message types handled after the handshake.
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
/// Bytes read into the read buffer at once, at most. Reads of large replies go straight to the
/// caller (`DIRECT_READ_BYTES_MIN`); what comes through here is small messages, the ends of
/// large ones and what follows them, which the reader copies out: the less of a following
/// large reply it takes in, the less is copied.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Reads of at least this many bytes go from the socket straight into the caller's buffer and
/// are opened there (smaller ones through the read buffer, copied out).
const DIRECT_READ_BYTES_MIN: usize = 64 << 10;
/// Sealed bytes the writer collects before it sends them.
const WRITE_BUFFER_BYTES: usize = 256 << 10;
/// Most bytes of the handshake the driver buffers (rustls allows handshake messages up to
/// 64 KiB).
const HANDSHAKE_BUFFER_BYTES_MAX: usize = 128 << 10;

/// Where a session's next traffic keys come from (rustls's key schedule; a fixed one in the fuzz
/// target).
trait KeySchedule: Send {
    fn update_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error>;
    fn update_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error>;
}

/// The key schedule rustls keeps for a session after its handshake.
enum Kernel {
    Client(KernelConnection<ClientConnectionData>),
    Server(KernelConnection<ServerConnectionData>),
}

impl KeySchedule for Kernel {
    fn update_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Client(k) => k.update_tx_secret(),
            Kernel::Server(k) => k.update_tx_secret(),
        }
    }

    fn update_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Client(k) => k.update_rx_secret(),
            Kernel::Server(k) => k.update_rx_secret(),
        }
    }
}

impl Kernel {
    fn suite(&self) -> SupportedCipherSuite {
        match self {
            Kernel::Client(k) => k.negotiated_cipher_suite(),
            Kernel::Server(k) => k.negotiated_cipher_suite(),
        }
    }
}

/// What the reader and the writer of one session share.
struct Shared {
    kernel: Box<dyn KeySchedule>,
    /// The peer asked for a key update: the writer sends its own before its next record.
    answer_key_update: bool,
}

/// One direction's key and the sequence number of its next record.
struct Protection {
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    seq: u64,
}

impl Protection {
    fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> io::Result<Protection> {
        let (algorithm, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&CHACHA20_POLY1305, key, iv),
            _ => return Err(invalid("the TLS session negotiated a cipher this record layer does not offer")),
        };
        let key =
            UnboundKey::new(algorithm, key.as_ref()).map_err(|_| invalid("a TLS traffic key of a wrong length"))?;
        let iv: [u8; NONCE_LEN] = iv.as_ref().try_into().map_err(|_| invalid("a TLS traffic IV of a wrong length"))?;
        Ok(Protection { key: LessSafeKey::new(key), iv, seq })
    }

    /// The nonce of the next record: the IV with the sequence number XORed into its low bytes.
    fn next_nonce(&mut self) -> Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(nonce)
    }
}

fn invalid(reason: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.into())
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// The two kinds of unbuffered connection, driven alike through the handshake.
trait Handshaking: Sized {
    type Data;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn is_handshaking(&self) -> bool;
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), rustls::Error>;
}

impl Handshaking for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn is_handshaking(&self) -> bool {
        (**self).is_handshaking()
    }
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), rustls::Error> {
        self.dangerous_into_kernel_connection().map(|(s, k)| (s, Kernel::Client(k)))
    }
}

impl Handshaking for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn is_handshaking(&self) -> bool {
        (**self).is_handshaking()
    }
    fn into_kernel(self) -> Result<(rustls::ExtractedSecrets, Kernel), rustls::Error> {
        self.dangerous_into_kernel_connection().map(|(s, k)| (s, Kernel::Server(k)))
    }
}

/// Opens a session as a client over `stream`: the server's certificate must be valid for
/// `name` under `config`'s roots. `config` must allow secret extraction.
pub async fn connect(
    stream: TcpStream,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<(RecordReader, RecordWriter)> {
    let conn = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
    let (conn, stream, leftover, plaintext) = handshake(conn, stream).await?;
    let (secrets, kernel) = conn.into_kernel().map_err(tls_error)?;
    session(stream, secrets, kernel, leftover, plaintext)
}

/// Accepts a session as a server over `stream`; answers the halves and the client's
/// certificate chain (end entity first). `config` must allow secret extraction.
pub async fn accept(
    stream: TcpStream,
    config: Arc<ServerConfig>,
) -> io::Result<(RecordReader, RecordWriter, Vec<CertificateDer<'static>>)> {
    let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
    let (conn, stream, leftover, plaintext) = handshake(conn, stream).await?;
    let certs = conn.peer_certificates().map(<[_]>::to_vec).unwrap_or_default();
    let (secrets, kernel) = conn.into_kernel().map_err(tls_error)?;
    let (r, w) = session(stream, secrets, kernel, leftover, plaintext)?;
    Ok((r, w, certs))
}

fn session(
    stream: TcpStream,
    secrets: rustls::ExtractedSecrets,
    kernel: Kernel,
    leftover: Vec<u8>,
    plaintext: Vec<u8>,
) -> io::Result<(RecordReader, RecordWriter)> {
    #[allow(unreachable_patterns)] // TLS 1.2 suites exist where a crate enables rustls's tls12
    let limit = match kernel.suite() {
        // Move to a new key well before the suite's limit of records under one key.
        SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit / 2,
        _ => return Err(invalid("the TLS session is not TLS 1.3")),
    };
    let tx = Protection::new(secrets.tx)?;
    let rx = Protection::new(secrets.rx)?;
    let shared = Arc::new(Mutex::new(Shared { kernel: Box::new(kernel), answer_key_update: false }));
    let (rd, wr) = stream.into_split();
    let reader = RecordReader::new(rd, shared.clone(), rx, &leftover, plaintext);
    let writer = RecordWriter {
        sock: wr,
        shared,
        tx,
        limit,
        buf: vec![0u8; WRITE_BUFFER_BYTES + 4 * (HEADER_BYTES + CIPHERTEXT_PER_RECORD_MAX)].into_boxed_slice(),
        sent: 0,
        sealed: 0,
        open: None,
        filled: 0,
        closed: false,
    };
    Ok((reader, writer))
}

/// Drives `conn` through its handshake over `stream`. Answers the connection, the stream, the
/// bytes read after the handshake's last record (records for the record layer), and any
/// application data rustls opened with the handshake's last flight.
async fn handshake<C: Handshaking>(mut conn: C, mut stream: TcpStream) -> io::Result<(C, TcpStream, Vec<u8>, Vec<u8>)> {
    let mut incoming = vec![0u8; 16 << 10];
    let mut used = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut plaintext = Vec::new();
    loop {
        let status = conn.process(&mut incoming[..used]);
        let mut discard = status.discard;
        let state = match status.state {
            Ok(state) => state,
            Err(e) => {
                send_alert(&mut conn, &mut stream).await;
                return Err(tls_error(e));
            }
        };
        let mut read = false;
        let mut done = false;
        match state {
            ConnectionState::EncodeTlsData(mut data) => {
                let at = out.len();
                out.resize(at + 4096, 0);
                let n = match data.encode(&mut out[at..]) {
                    Err(EncodeError::InsufficientSize(s)) => {
                        out.resize(at + s.required_size, 0);
                        data.encode(&mut out[at..])
                    }
                    other => other,
                }
                .map_err(|e| invalid(e.to_string()))?;
                out.truncate(at + n);
            }
            ConnectionState::TransmitTlsData(data) => {
                stream.write_all(&out).await?;
                out.clear();
                data.done();
            }
            ConnectionState::BlockedHandshake => read = true,
            ConnectionState::ReadTraffic(mut traffic) => {
                while let Some(record) = traffic.next_record() {
                    let record = record.map_err(tls_error)?;
                    discard += record.discard;
                    plaintext.extend_from_slice(record.payload);
                }
            }
            ConnectionState::WriteTraffic(_) => {
                // A server may send before the client's last flight: the handshake is not over
                // until the client's certificate has been checked.
                if conn.is_handshaking() {
                    read = true;
                } else {
                    done = true;
                }
            }
            ConnectionState::PeerClosed | ConnectionState::Closed => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the TLS session in its handshake",
                ))
            }
            _ => return Err(invalid("an unexpected state of the TLS handshake")),
        }
        incoming.copy_within(discard..used, 0);
        used -= discard;
        if done {
            incoming.truncate(used);
            return Ok((conn, stream, incoming, plaintext));
        }
        if read {
            if used == incoming.len() {
                if incoming.len() >= HANDSHAKE_BUFFER_BYTES_MAX {
                    return Err(invalid("the TLS handshake sent more than the handshake buffer holds"));
                }
                incoming.resize(incoming.len() * 2, 0);
            }
            let n = stream.read(&mut incoming[used..]).await?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "unexpected eof in the TLS handshake"));
            }
            used += n;
        }
    }
}

/// After a failed handshake step, sends the alert rustls queued for the peer, if any, so that
/// the peer learns why (best effort).
async fn send_alert<C: Handshaking>(conn: &mut C, stream: &mut TcpStream) {
    let mut out = vec![0u8; 512];
    let mut n = 0;
    if let Ok(ConnectionState::EncodeTlsData(mut data)) = conn.process(&mut []).state {
        n = data.encode(&mut out).unwrap_or(0);
    }
    if n > 0 {
        let _ = stream.write_all(&out[..n]).await;
    }
}

/// The read half of a session (over the socket's read half; over bytes in the fuzz target).
pub struct RecordReader<S = OwnedReadHalf> {
    sock: S,
    shared: Arc<Mutex<Shared>>,
    rx: Protection,
    /// Bytes read from the socket: `start..end` not yet opened; opened records before `start`.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Application data opened in place and not yet returned.
    plain: Range<usize>,
    /// Application data rustls opened with the handshake, returned first.
    early: Vec<u8>,
    early_at: usize,
    eof: bool,
    /// Application data opened in the caller's buffer, never copied (for tests and the fuzz
    /// target).
    opened_in_place: u64,
}

impl<S> RecordReader<S> {
    /// A reader of `sock` under `rx`: `leftover` is the records read with the end of the
    /// handshake, opened first, and `early` application data rustls opened with it, returned
    /// first.
    fn new(sock: S, shared: Arc<Mutex<Shared>>, rx: Protection, leftover: &[u8], early: Vec<u8>) -> RecordReader<S> {
        // The leftover is at most the handshake's buffer; the read buffer grows to hold it all
        // in the rare case it must.
        let size = (READ_BUFFER_BYTES + HEADER_BYTES + CIPHERTEXT_PER_RECORD_MAX).max(leftover.len());
        let mut buf = vec![0u8; size].into_boxed_slice();
        buf[..leftover.len()].copy_from_slice(leftover);
        RecordReader {
            sock,
            shared,
            rx,
            buf,
            start: 0,
            end: leftover.len(),
            plain: 0..0,
            early,
            early_at: 0,
            eof: false,
            opened_in_place: 0,
        }
    }

    /// Opens the whole records buffered at `start` ([`Self::open_packed`]): their application
    /// data is then `plain`, at `start`, and `start` moves past them.
    fn open_buffered(&mut self) -> io::Result<()> {
        // The buffer is lent to the opening, which needs the rest of the reader too; an empty
        // box takes its place meanwhile (no allocation).
        let mut buf = std::mem::take(&mut self.buf);
        let opened = self.open_packed(&mut buf[self.start..self.end]);
        self.buf = buf;
        let (plain, used) = opened?;
        self.plain = self.start..self.start + plain;
        self.start += used;
        Ok(())
    }

    /// Opens the whole records at the front of `region` where they lie, each record's
    /// plaintext moved down to follow the last one's as it is decrypted (one pass over the
    /// bytes, the cipher writing where the move puts them). Answers the application data's
    /// length, now at the front of `region`, and the bytes of the records opened; stops at an
    /// incomplete record or after close_notify.
    fn open_packed(&mut self, region: &mut [u8]) -> io::Result<(usize, usize)> {
        let (mut at, mut to) = (0, 0);
        while !self.eof {
            let Some(len) = whole_record(&region[at..])? else { break };
            let mut header = [0u8; HEADER_BYTES];
            header.copy_from_slice(&region[at..at + HEADER_BYTES]);
            let body = at + HEADER_BYTES;
            let nonce = self.rx.next_nonce();
            let inner = self
                .rx
                .key
                .open_within(nonce, Aad::from(header), &mut region[to..body + len], body - to..)
                .map_err(|_| invalid("a TLS record failed authentication"))?;
            at = body + len;
            let (content_type, content_len) = inner_content(inner)?;
            if content_type == APPLICATION_DATA {
                to += content_len;
            } else {
                let content = inner[..content_len].to_vec();
                self.act_on(content_type, &content)?;
            }
        }
        Ok((to, at))
    }

    /// Acts on a record that is not application data: an alert, or handshake messages.
    fn act_on(&mut self, content_type: u8, content: &[u8]) -> io::Result<()> {
        match content_type {
            ALERT => {
                if content.len() != 2 {
                    return Err(invalid("a malformed TLS alert"));
                }
                let description = AlertDescription::from(content[1]);
                if description == AlertDescription::CloseNotify {
                    self.eof = true;
                    Ok(())
                } else {
                    Err(tls_error(rustls::Error::AlertReceived(description)))
                }
            }
            HANDSHAKE => self.handshake_messages(content),
            other => Err(invalid(format!("a TLS record of content type {other}"))),
        }
    }

    /// Acts on the handshake messages of one record (after the handshake: tickets, key
    /// updates).
    fn handshake_messages(&mut self, content: &[u8]) -> io::Result<()> {
        let mut at = 0;
        while at < content.len() {
            let m = &content[at..];
            if m.len() < 4 {
                return Err(invalid("a TLS handshake message split across records"));
            }
            let len = u32::from_be_bytes([0, m[1], m[2], m[3]]) as usize;
            if m.len() < 4 + len {
                return Err(invalid("a TLS handshake message split across records"));
            }
            match m[0] {
                NEW_SESSION_TICKET => {}
                KEY_UPDATE => {
                    if len != 1 || at + 5 != content.len() || m[4] > 1 {
                        return Err(invalid("a malformed TLS key update"));
                    }
                    let mut shared = self.shared.lock();
                    self.rx = Protection::new(shared.kernel.update_rx().map_err(tls_error)?)?;
                    if m[4] == 1 {
                        shared.answer_key_update = true;
                    }
                }
                other => return Err(invalid(format!("a TLS handshake message of type {other} after the handshake"))),
            }
            at += 4 + len;
        }
        Ok(())
    }
}

/// The length after the header of the record at the front of `have`, once its header is there
/// (checked: a protected record of a length the protocol allows).
fn record_len(have: &[u8]) -> io::Result<Option<usize>> {
    if have.len() < HEADER_BYTES {
        return Ok(None);
    }
    if have[0] != APPLICATION_DATA || have[1] != 3 || have[2] != 3 {
        return Err(invalid(format!(
            "a TLS record of type {} version {}.{} where only protected records may come",
            have[0], have[1], have[2]
        )));
    }
    let len = usize::from(u16::from_be_bytes([have[3], have[4]]));
    if !(TAG_BYTES + 1..=CIPHERTEXT_PER_RECORD_MAX).contains(&len) {
        return Err(invalid(format!("a TLS record of {len} bytes")));
    }
    Ok(Some(len))
}

/// The length after the header of the whole record at the front of `have`, if it is all there.
fn whole_record(have: &[u8]) -> io::Result<Option<usize>> {
    Ok(record_len(have)?.filter(|len| have.len() >= HEADER_BYTES + len))
}

/// An opened record's content type and the length of its content (the inner plaintext ends in
/// the type and zero padding).
fn inner_content(inner: &[u8]) -> io::Result<(u8, usize)> {
    let Some(type_at) = inner.iter().rposition(|&b| b != 0) else {
        return Err(invalid("a TLS record without a content type"));
    };
    if type_at > PLAINTEXT_PER_RECORD_MAX {
        return Err(invalid("a TLS record longer than the protocol allows"));
    }
    Ok((inner[type_at], type_at))
}

impl<S: AsyncRead + Unpin> RecordReader<S> {
    /// Reads from the socket straight into `out` (the read buffer holds nothing) and opens the
    /// records there ([`Self::open_packed`]); an incomplete record at the end moves to the read
    /// buffer. Answers whether to return to the caller: `out` got data, or the stream ended.
    fn poll_read_direct(&mut self, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<bool>> {
        let base = out.filled().len();
        ready!(Pin::new(&mut self.sock).poll_read(cx, out))?;
        let read = out.filled().len() - base;
        if read == 0 {
            // The peer closed its side without close_notify, between records.
            self.eof = true;
            return Poll::Ready(Ok(true));
        }
        let (plain, used) = match self.open_packed(&mut out.filled_mut()[base..]) {
            Ok(opened) => opened,
            Err(e) => {
                out.set_filled(base);
                return Poll::Ready(Err(e));
            }
        };
        // What follows close_notify is not read; an incomplete record is at most one record.
        let rest = if self.eof { 0 } else { read - used };
        self.buf[..rest].copy_from_slice(&out.filled()[base + used..base + used + rest]);
        self.start = 0;
        self.end = rest;
        self.opened_in_place += plain as u64;
        out.set_filled(base + plain);
        Poll::Ready(Ok(plain > 0 || self.eof))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RecordReader<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.early_at < me.early.len() {
                let n = out.remaining().min(me.early.len() - me.early_at);
                out.put_slice(&me.early[me.early_at..me.early_at + n]);
                me.early_at += n;
                return Poll::Ready(Ok(()));
            }
            if !me.plain.is_empty() {
                let n = out.remaining().min(me.plain.len());
                out.put_slice(&me.buf[me.plain.start..me.plain.start + n]);
                me.plain.start += n;
                return Poll::Ready(Ok(()));
            }
            if me.eof || out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if whole_record(&me.buf[me.start..me.end])?.is_some() {
                me.open_buffered()?;
                continue;
            }
            let direct = out.remaining() >= DIRECT_READ_BYTES_MIN;
            if direct && me.start == me.end {
                if ready!(me.poll_read_direct(cx, out))? {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            // Room for a whole record after what is buffered: move the partial one to the front.
            if me.start == me.end {
                me.start = 0;
                me.end = 0;
            } else if me.buf.len() - me.start < HEADER_BYTES + CIPHERTEXT_PER_RECORD_MAX {
                me.buf.copy_within(me.start..me.end, 0);
                me.end -= me.start;
                me.start = 0;
            }
            let mut room = (me.buf.len() - me.end).min(READ_BUFFER_BYTES);
            if direct {
                // Only the rest of the incomplete record: what comes after it is read straight
                // into `out`.
                let have = &me.buf[me.start..me.end];
                let need = match record_len(have)? {
                    Some(len) => HEADER_BYTES + len - have.len(),
                    None => HEADER_BYTES - have.len(),
                };
                room = room.min(need);
            }
            let mut read = ReadBuf::new(&mut me.buf[me.end..me.end + room]);
            ready!(Pin::new(&mut me.sock).poll_read(cx, &mut read))?;
            let n = read.filled().len();
            if n == 0 {
                if me.start == me.end {
                    // The peer closed its side without close_notify, between records.
                    me.eof = true;
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection within a TLS record",
                )));
            }
            me.end += n;
        }
    }
}

/// The write half of a session.
pub struct RecordWriter {
    sock: OwnedWriteHalf,
    shared: Arc<Mutex<Shared>>,
    tx: Protection,
    /// Records sealed under one key before the writer moves to the next.
    limit: u64,
    /// `sent..sealed`: sealed records not yet sent; `open..filled`: the record being filled
    /// (its header's place, then its plaintext).
    buf: Box<[u8]>,
    sent: usize,
    sealed: usize,
    open: Option<usize>,
    filled: usize,
    closed: bool,
}

impl RecordWriter {
    /// Seals the record being filled, if it holds anything.
    fn seal_open(&mut self) -> io::Result<()> {
        let Some(at) = self.open.take() else { return Ok(()) };
        if self.filled == at + HEADER_BYTES {
            self.filled = at;
            return Ok(());
        }
        self.buf[self.filled] = APPLICATION_DATA;
        self.filled += 1;
        self.seal(at)
    }

    /// Seals the record whose header goes at `at` and whose inner plaintext (content and type)
    /// is `at + HEADER_BYTES..filled`.
    fn seal(&mut self, at: usize) -> io::Result<()> {
        let len = self.filled - at - HEADER_BYTES + TAG_BYTES;
        let len16 = u16::try_from(len).map_err(|_| invalid("a TLS record too long"))?;
        let [hi, lo] = len16.to_be_bytes();
        let header = [APPLICATION_DATA, 3, 3, hi, lo];
        self.buf[at..at + HEADER_BYTES].copy_from_slice(&header);
        let nonce = self.tx.next_nonce();
        let tag = self
            .tx
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(header), &mut self.buf[at + HEADER_BYTES..self.filled])
            .map_err(|_| invalid("sealing a TLS record failed"))?;
        self.buf[self.filled..self.filled + TAG_BYTES].copy_from_slice(tag.as_ref());
        self.filled += TAG_BYTES;
        self.sealed = self.filled;
        Ok(())
    }

    /// Seals a record of `content_type` holding `content` (alerts, handshake messages).
    fn push_record(&mut self, content_type: u8, content: &[u8]) -> io::Result<()> {
        self.seal_open()?;
        let at = self.filled;
        let body = at + HEADER_BYTES;
        self.buf[body..body + content.len()].copy_from_slice(content);
        self.buf[body + content.len()] = content_type;
        self.filled = body + content.len() + 1;
        self.seal(at)
    }

    /// Sends a KeyUpdate and moves to the next key when the peer asked for it or the current
    /// key has sealed its share of records.
    fn maybe_update_key(&mut self) -> io::Result<()> {
        let answer = std::mem::take(&mut self.shared.lock().answer_key_update);
        if answer || self.tx.seq >= self.limit {
            // update_not_requested: the peer's key is the peer's business.
            self.push_record(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0])?;
            self.tx = Protection::new(self.shared.lock().kernel.update_tx().map_err(tls_error)?)?;
        }
        Ok(())
    }

    /// Seals `parts` (one message, laid end to end) into records and sends what the socket
    /// takes at once, without waiting: `Some(true)` when all of it is out, `Some(false)` when
    /// some sealed records wait in the buffer (a later flush sends them, before anything
    /// written after), `None` when the buffer has no room for the message now (nothing was
    /// taken; write it with `write_all` and `flush` instead).
    ///
    /// This is what lets a task that answers a request send the answer itself instead of
    /// handing it to the connection's writer task (a wake-up of another task, often of another
    /// thread, per message).
    pub fn send_now(&mut self, parts: &[&[u8]]) -> io::Result<Option<bool>> {
        if self.closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the TLS session was closed"));
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        // Each record adds its header, inner content type and tag; the one being filled and a
        // key update may add one more each.
        let records = total / PLAINTEXT_PER_RECORD_MAX + 3;
        if self.filled + total + records * (HEADER_BYTES + 1 + TAG_BYTES) > WRITE_BUFFER_BYTES {
            return Ok(None);
        }
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        for part in parts {
            // Within the room checked above, `poll_write` takes everything without sending.
            match Pin::new(&mut *self).poll_write(&mut cx, part)? {
                Poll::Ready(n) if n == part.len() => {}
                _ => return Err(invalid("a message did not fit the write buffer it was measured against")),
            }
        }
        self.seal_open()?;
        // A pending send leaves `sent..sealed` for the next flush; the socket's readiness is
        // registered by whoever polls it next with a real waker.
        Ok(Some(self.poll_send(&mut cx)?.is_ready()))
    }

    /// Sends the sealed records; then the buffer starts again at the record being filled.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.sealed {
            let n = ready!(Pin::new(&mut self.sock).poll_write(cx, &self.buf[self.sent..self.sealed]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        let keep = self.sealed..self.filled;
        self.buf.copy_within(keep.clone(), 0);
        self.open = self.open.map(|at| at - keep.start);
        self.filled = keep.len();
        self.sent = 0;
        self.sealed = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for RecordWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.closed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "the TLS session was closed")));
        }
        if me.filled >= WRITE_BUFFER_BYTES {
            me.seal_open()?;
            ready!(me.poll_send(cx))?;
        }
        me.maybe_update_key()?;
        let mut taken = 0;
        while taken < data.len() && me.filled < WRITE_BUFFER_BYTES {
            let at = match me.open {
                Some(at) => at,
                None => {
                    if me.tx.seq >= me.limit {
                        me.maybe_update_key()?;
                    }
                    me.open = Some(me.filled);
                    me.filled += HEADER_BYTES;
                    me.filled - HEADER_BYTES
                }
            };
            let room = PLAINTEXT_PER_RECORD_MAX - (me.filled - at - HEADER_BYTES);
            let n = room.min(data.len() - taken);
            me.buf[me.filled..me.filled + n].copy_from_slice(&data[taken..taken + n]);
            me.filled += n;
            taken += n;
            if n == room {
                me.seal_open()?;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.seal_open()?;
        ready!(me.poll_send(cx))?;
        Pin::new(&mut me.sock).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.closed {
            me.push_record(ALERT, &[1, AlertDescription::CloseNotify.into()])?;
            me.closed = true;
        }
        ready!(me.poll_send(cx))?;
        Pin::new(&mut me.sock).poll_shutdown(cx)
    }
}

/// The record reader over bytes in memory, for the fuzz target in `fuzz/` (`tls_records`;
/// built with `--cfg fuzzing`, which cargo-fuzz sets) and the tests.
#[cfg(any(fuzzing, test))]
pub mod fuzzing {
    use super::*;

    /// A key schedule that hands out the first keys again (sequence numbers restart at 0).
    struct Fixed;

    fn secrets() -> (u64, ConnectionTrafficSecrets) {
        let key = rustls::crypto::cipher::AeadKey::from([7u8; 32]);
        (0, ConnectionTrafficSecrets::Aes256Gcm { key, iv: rustls::crypto::cipher::Iv::from([9u8; NONCE_LEN]) })
    }

    impl KeySchedule for Fixed {
        fn update_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
            Ok(secrets())
        }
        fn update_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
            Ok(secrets())
        }
    }

    /// The sending side of the fixed keys.
    pub struct Sealer(Protection);

    impl Default for Sealer {
        fn default() -> Sealer {
            Sealer::new()
        }
    }

    impl Sealer {
        pub fn new() -> Sealer {
            Sealer(Protection::new(secrets()).expect("fixed keys"))
        }

        /// Seals `inner` (content, content type, padding) as the next record into `out`.
        pub fn seal(&mut self, inner: &[u8], out: &mut Vec<u8>) {
            let len = u16::try_from(inner.len() + TAG_BYTES).unwrap_or(u16::MAX);
            let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
            let mut body = inner.to_vec();
            let nonce = self.0.next_nonce();
            let tag = self.0.key.seal_in_place_separate_tag(nonce, Aad::from(header), &mut body).expect("seal");
            out.extend_from_slice(&header);
            out.extend_from_slice(&body);
            out.extend_from_slice(tag.as_ref());
        }

        /// Starts the sequence numbers again, as after a key update (the fixed schedule's next
        /// keys are the first ones).
        pub fn restart(&mut self) {
            self.0.seq = 0;
        }
    }

    /// Bytes in memory handed out at most `piece` at a time, as a socket hands out what has
    /// arrived.
    struct Trickle<'a> {
        bytes: &'a [u8],
        piece: usize,
    }

    impl AsyncRead for Trickle<'_> {
        fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            let me = self.get_mut();
            let n = out.remaining().min(me.piece).min(me.bytes.len());
            out.put_slice(&me.bytes[..n]);
            me.bytes = &me.bytes[n..];
            Poll::Ready(Ok(()))
        }
    }

    /// What [`open_records`] read.
    pub struct Opened {
        /// The application data, in order.
        pub data: Vec<u8>,
        /// The error that ended the session, if one did.
        pub error: Option<String>,
        /// Bytes of `data` opened in the reader's buffer (reads of at least 64 KiB).
        pub in_place: u64,
    }

    /// Reads `records` (what a peer sent, arriving `piece` bytes at a time at most) to their end
    /// through a reader holding the fixed keys, `read_bytes` asked for at a time.
    pub fn open_records(records: &[u8], piece: usize, read_bytes: usize) -> Opened {
        open_records_after_handshake(&[], records, piece, read_bytes)
    }

    /// [`open_records`] where `leftover` came with the end of the handshake, before `records`.
    pub fn open_records_after_handshake(leftover: &[u8], records: &[u8], piece: usize, read_bytes: usize) -> Opened {
        let rx = Protection::new(secrets()).expect("fixed keys");
        let shared = Arc::new(Mutex::new(Shared { kernel: Box::new(Fixed), answer_key_update: false }));
        let sock = Trickle { bytes: records, piece: piece.max(1) };
        let mut reader = RecordReader::new(sock, shared, rx, leftover, Vec::new());
        let mut data = Vec::new();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut chunk = vec![0u8; read_bytes.max(1)];
        let error = loop {
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut reader).poll_read(&mut cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => break None,
                Poll::Ready(Ok(())) => data.extend_from_slice(read.filled()),
                Poll::Ready(Err(e)) => break Some(e.to_string()),
                Poll::Pending => break Some("pending on bytes in memory".into()),
            }
        };
        Opened { data, error, in_place: reader.opened_in_place }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::Authority;
    use crate::tls::{Role, TlsContext};
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::net::TcpListener;

    /// A node (server) and a client credential of one authority.
    fn credentials() -> (Arc<TlsContext>, Arc<TlsContext>, tempfile::TempDir) {
        let ca = Authority::create("records").expect("authority");
        let dir = tempfile::tempdir().expect("tempdir");
        ca.issue(Role::Node, "node", ca.cert_pem(), &dir.path().join("node")).expect("issue");
        ca.issue(Role::Client, "client", ca.cert_pem(), &dir.path().join("client")).expect("issue");
        let node = TlsContext::load(&dir.path().join("node")).expect("node credential");
        let client = TlsContext::load(&dir.path().join("client")).expect("client credential");
        (node, client, dir)
    }

    fn node_name() -> ServerName<'static> {
        ServerName::try_from(Role::Node.dns_name()).expect("name").to_owned()
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.expect("connect"), server.expect("accept").0)
    }

    /// Writes `data` in pieces of uneven sizes, flushing now and then.
    async fn write_pieces<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) {
        let mut at = 0;
        let mut piece = 1;
        while at < data.len() {
            let n = piece.min(data.len() - at);
            w.write_all(&data[at..at + n]).await.expect("write");
            at += n;
            piece = (piece * 7 + 13) % 70_000 + 1;
            if piece % 3 == 0 {
                w.flush().await.expect("flush");
            }
        }
        w.flush().await.expect("flush");
    }

    async fn read_exactly<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> Vec<u8> {
        let mut got = vec![0u8; len];
        r.read_exact(&mut got).await.expect("read");
        got
    }

    /// Records as a peer sends them, sealed under the fixed keys: application data of every
    /// size with padding now and then, session tickets, key updates, then close_notify and
    /// bytes that must not be read. Answers the records, the application data in order, and
    /// where each record starts.
    fn sealed_session(seed: u64) -> (Vec<u8>, Vec<u8>, Vec<usize>) {
        let mut rng = seed;
        let mut next = move |below: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % below as u64) as usize
        };
        let mut sealer = fuzzing::Sealer::new();
        let (mut records, mut expected, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..400 {
            let kind = next(20);
            let mut inner = match kind {
                0 => vec![NEW_SESSION_TICKET, 0, 0, 3, 1, 2, 3, HANDSHAKE],
                1 => vec![KEY_UPDATE, 0, 0, 1, 0, HANDSHAKE],
                _ => {
                    let len = [next(100), next(PLAINTEXT_PER_RECORD_MAX + 1), PLAINTEXT_PER_RECORD_MAX][next(3)];
                    let data = pattern(i as u8, len);
                    expected.extend_from_slice(&data);
                    let mut inner = data;
                    inner.push(APPLICATION_DATA);
                    inner
                }
            };
            inner.resize(inner.len() + [0, 0, 0, 200][next(4)], 0);
            starts.push(records.len());
            sealer.seal(&inner, &mut records);
            if kind == 1 {
                sealer.restart();
            }
        }
        sealer.seal(&[1, 0, ALERT], &mut records);
        sealer.seal(&[9, 9, 9, APPLICATION_DATA], &mut records);
        (records, expected, starts)
    }

    #[test]
    fn records_give_what_was_sealed_however_they_arrive_and_are_read() {
        let (records, expected, _) = sealed_session(0x5eed);
        assert!(expected.len() > 2 << 20, "a session of {} bytes", expected.len());
        for piece in [1, 1_000, 16_406, 100_000, usize::MAX] {
            for read_bytes in [1, 4_096, 65_536, 1 << 20] {
                if piece == 1 && read_bytes == 1 {
                    continue; // a byte at a time both ways: minutes, and nothing new
                }
                let opened = fuzzing::open_records(&records, piece, read_bytes);
                let case = format!("{piece} bytes arriving at a time, {read_bytes} read at a time");
                assert_eq!(opened.error, None, "{case}");
                assert!(opened.data == expected, "{case}: other bytes than were sealed");
                // Reads of 64 KiB or more are opened in the caller's buffer, smaller ones not.
                if read_bytes < 65_536 {
                    assert_eq!(opened.in_place, 0, "{case}");
                } else if piece >= 100_000 {
                    // Only what follows an incomplete record at the end of a read is copied.
                    let share = opened.in_place as f64 / expected.len() as f64;
                    assert!(share > 0.8, "{case}: {:.0}% opened in place", share * 100.0);
                }
            }
        }
    }

    #[test]
    fn records_that_came_with_the_handshake_are_read_first_up_to_the_handshake_buffer() {
        let (records, expected, _) = sealed_session(0xabc);
        // As much as the handshake's buffer may hold, more than the read buffer: cut anywhere,
        // within a record.
        let cut = HANDSHAKE_BUFFER_BYTES_MAX - 7;
        assert!(cut > READ_BUFFER_BYTES + HEADER_BYTES + CIPHERTEXT_PER_RECORD_MAX);
        for read_bytes in [4_096, 1 << 20] {
            let opened = fuzzing::open_records_after_handshake(&records[..cut], &records[cut..], 100_000, read_bytes);
            assert_eq!(opened.error, None, "{read_bytes} read at a time");
            assert!(opened.data == expected, "{read_bytes} read at a time: other bytes than were sealed");
        }
    }

    #[test]
    fn a_changed_byte_ends_the_session_at_its_record_however_it_is_read() {
        let (mut records, expected, starts) = sealed_session(77);
        // A byte of the body of the record in the middle (a changed header is refused as such).
        records[starts[starts.len() / 2] + HEADER_BYTES + 1] ^= 1;
        for (piece, read_bytes) in [(1_000, 4_096), (100_000, 1 << 20), (usize::MAX, 65_536)] {
            let opened = fuzzing::open_records(&records, piece, read_bytes);
            let error = opened.error.unwrap_or_default();
            assert!(error.contains("failed authentication"), "{piece}/{read_bytes}: {error:?}");
            assert!(
                opened.data.len() < expected.len() && expected.starts_with(&opened.data),
                "{piece}/{read_bytes}: the data returned is not what came before the changed record"
            );
        }
    }

    #[tokio::test]
    async fn a_stock_rustls_server_and_this_client_talk_through_key_updates_and_tickets() {
        let (node, client, _dir) = credentials();
        // The stock server sends session tickets (this layer ignores them).
        let mut stock = (*node.server_config()).clone();
        stock.send_tls13_tickets = 2;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(stock));
        let (c, s) = pair().await;
        let (ours, theirs) = tokio::join!(connect(c, client.client_config(), node_name()), acceptor.accept(s));
        let (mut r, mut w) = ours.expect("our handshake");
        let mut theirs = theirs.expect("their handshake");
        let up = pattern(1, 3 << 20);
        let down = pattern(2, (2 << 20) + 12_345);
        let (_, got) = tokio::join!(write_pieces(&mut w, &up), read_exactly(&mut theirs, up.len()));
        assert!(got == up, "the stock server read different bytes");
        // The stock server moves to a new key, then asks for ours to move too.
        theirs.get_mut().1.refresh_traffic_keys().expect("key update");
        let (_, got) = tokio::join!(write_pieces(&mut theirs, &down), read_exactly(&mut r, down.len()));
        assert!(got == down, "this client read different bytes after the server's key update");
        let (_, got) = tokio::join!(write_pieces(&mut w, &up[..100_000]), read_exactly(&mut theirs, 100_000));
        assert!(got[..] == up[..100_000]);
        // The server asked for a key update: this writer answered with its own and counts the
        // records of its new key from 0 (3 MiB went out under the first one).
        assert!(w.tx.seq < 20, "the writer did not move to a new key: {} records under one", w.tx.seq);
        // close_notify from the stock server ends this side's stream.
        theirs.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.expect("read to the end");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_stock_rustls_client_and_this_server_talk_and_close() {
        let (node, client, _dir) = credentials();
        let connector = tokio_rustls::TlsConnector::from(client.client_config());
        let (c, s) = pair().await;
        let (theirs, ours) = tokio::join!(connector.connect(node_name(), c), accept(s, node.server_config()));
        let mut theirs = theirs.expect("their handshake");
        let (mut r, mut w, certs) = ours.expect("our handshake");
        assert_eq!(crate::tls::role_of(&certs[0]), Some(Role::Client));
        let up = pattern(3, (1 << 20) + 7);
        let (_, got) = tokio::join!(write_pieces(&mut theirs, &up), read_exactly(&mut r, up.len()));
        assert!(got == up);
        theirs.get_mut().1.refresh_traffic_keys().expect("key update");
        let down = pattern(4, 5 << 20);
        let (_, got) = tokio::join!(write_pieces(&mut theirs, &up), read_exactly(&mut r, up.len()));
        assert!(got == up, "this server read different bytes after the client's key update");
        let (_, got) = tokio::join!(write_pieces(&mut w, &down), read_exactly(&mut theirs, down.len()));
        assert!(got == down, "the stock client read different bytes");
        // This server's close_notify ends the stock client's stream cleanly.
        w.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.expect("a clean end");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn cluster_links_choose_aes_128_gcm_and_a_peer_offering_only_aes_256_still_talks() {
        let (node, client, _dir) = credentials();
        let suite_of = |c: &rustls::ClientConnection| c.negotiated_cipher_suite().map(|s| s.suite());
        // Two ends with the cluster's configuration: AES-128-GCM.
        let connector = tokio_rustls::TlsConnector::from(client.client_config());
        let (c, s) = pair().await;
        let (theirs, ours) = tokio::join!(connector.connect(node_name(), c), accept(s, node.server_config()));
        let theirs = theirs.expect("their handshake");
        ours.expect("our handshake");
        assert_eq!(suite_of(theirs.get_ref().1), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
        // A client that offers AES-256-GCM alone (another implementation, or another order)
        // gets it, and the records go both ways.
        use rustls::pki_types::pem::PemObject;
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.retain(|s| s.suite() == rustls::CipherSuite::TLS13_AES_256_GCM_SHA384);
        let pem = |file: &str| std::fs::read(client.dir().join(file)).expect("credential file");
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(&pem(crate::tls::CA_FILE)) {
            roots.add(ca.expect("CA certificate")).expect("a CA certificate");
        }
        let chain: Vec<_> =
            CertificateDer::pem_slice_iter(&pem(crate::tls::CERT_FILE)).map(|c| c.expect("certificate")).collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&pem(crate::tls::KEY_FILE)).expect("key");
        let only_256 = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("client certificate");
        let connector = tokio_rustls::TlsConnector::from(Arc::new(only_256));
        let (c, s) = pair().await;
        let (theirs, ours) = tokio::join!(connector.connect(node_name(), c), accept(s, node.server_config()));
        let mut theirs = theirs.expect("their handshake");
        let (mut r, mut w, _) = ours.expect("our handshake");
        assert_eq!(suite_of(theirs.get_ref().1), Some(rustls::CipherSuite::TLS13_AES_256_GCM_SHA384));
        let up = pattern(5, 300_000);
        let (_, got) = tokio::join!(write_pieces(&mut theirs, &up), read_exactly(&mut r, up.len()));
        assert!(got == up);
        let (_, got) = tokio::join!(write_pieces(&mut w, &up), read_exactly(&mut theirs, up.len()));
        assert!(got == up);
    }

    /// A session between this client and this server over loopback: the client's halves, the
    /// server's, and the credentials' directory (kept while the session is used).
    async fn session() -> ((RecordReader, RecordWriter), (RecordReader, RecordWriter), tempfile::TempDir) {
        let (node, client, dir) = credentials();
        let (c, s) = pair().await;
        let (ours, theirs) =
            tokio::join!(connect(c, client.client_config(), node_name()), accept(s, node.server_config()));
        let (sr, sw, _) = theirs.expect("server handshake");
        (ours.expect("client handshake"), (sr, sw), dir)
    }

    #[tokio::test]
    async fn both_ends_move_to_new_keys_when_their_limit_comes() {
        let ((mut cr, mut cw), (mut sr, mut sw), _dir) = session().await;
        // A key update every 3 records, each way.
        cw.limit = 3;
        sw.limit = 3;
        let up = pattern(5, 1 << 20);
        let down = pattern(6, 1 << 20);
        let ((), got_up, (), got_down) = tokio::join!(
            write_pieces(&mut cw, &up),
            read_exactly(&mut sr, up.len()),
            write_pieces(&mut sw, &down),
            read_exactly(&mut cr, down.len())
        );
        assert!(got_up == up && got_down == down);
        assert!(cw.tx.seq <= 3 && sr.rx.seq <= 4, "keys did not move on");
    }

    #[tokio::test]
    async fn messages_sent_at_once_arrive_whole_and_in_order_when_the_socket_is_full_too() {
        let ((_cr, mut cw), (mut sr, _sw), _dir) = session().await;
        // A key update every 5 records on the way, and messages of two parts, up to 200 KiB.
        cw.limit = 5;
        let sizes = [1usize, 17, 16_384, 16_385, 100_000, 200_000, 3, 65_536];
        let mut sent = Vec::new();
        let (mut all_out, mut left_in_buffer, mut no_room) = (0, 0, 0);
        // Nobody reads yet: the socket fills, and then sealed records wait in the buffer until
        // it has no room for the next message.
        for round in 0..2_000 {
            let size = sizes[round % sizes.len()];
            let message = pattern(round as u8, size);
            let (head, body) = message.split_at(size.min(7));
            match cw.send_now(&[head, body]).expect("send") {
                Some(true) => all_out += 1,
                Some(false) => left_in_buffer += 1,
                None => {
                    no_room += 1;
                    break;
                }
            }
            sent.extend_from_slice(&message);
        }
        assert!(all_out > 0 && left_in_buffer > 0 && no_room == 1, "{all_out} out, {left_in_buffer} left, {no_room}");
        // A flush sends what waits, once the peer reads; then messages go out at once again.
        let (flushed, got) = tokio::join!(cw.flush(), read_exactly(&mut sr, sent.len()));
        flushed.expect("flush");
        assert!(got == sent, "other bytes than were sent, or in another order");
        let last = pattern(99, 5_000);
        assert_eq!(cw.send_now(&[&last]).expect("send"), Some(true));
        assert!(read_exactly(&mut sr, last.len()).await == last);
        assert!(cw.tx.seq <= 5, "keys did not move on");
    }

    #[tokio::test]
    async fn a_changed_byte_is_an_error_not_data() {
        let (node, client, _dir) = credentials();
        // client -> relay -> server; the relay flips one byte once armed.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let relay_addr = listener.local_addr().expect("addr");
        let (to_server, server_side) = pair().await;
        let armed = Arc::new(AtomicBool::new(false));
        let arm = armed.clone();
        tokio::spawn(async move {
            let (from_client, _) = listener.accept().await.expect("accept");
            let (mut cr, mut cw) = from_client.into_split();
            let (mut sr, mut sw) = to_server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
            });
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if n > 40 && arm.swap(false, Ordering::SeqCst) {
                    buf[30] ^= 0x40;
                }
                if sw.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        let c = TcpStream::connect(relay_addr).await.expect("connect");
        let (ours, theirs) =
            tokio::join!(connect(c, client.client_config(), node_name()), accept(server_side, node.server_config()));
        let (_cr, mut cw) = ours.expect("client handshake");
        let (mut sr, _sw, _) = theirs.expect("server handshake");
        armed.store(true, Ordering::SeqCst);
        cw.write_all(&pattern(7, 1000)).await.expect("write");
        cw.flush().await.expect("flush");
        let mut got = vec![0u8; 1000];
        let e = sr.read_exact(&mut got).await.expect_err("a changed record is refused");
        assert!(e.to_string().contains("failed authentication"), "{e}");
    }

    #[tokio::test]
    async fn strangers_are_refused_with_an_alert_both_ways() {
        let (node, _client, _dir) = credentials();
        // A client of another authority that does not trust this one: it refuses the node's
        // certificate, and the node hears why.
        let (_other_node, stranger, _other_dir) = credentials();
        let (c, s) = pair().await;
        let (ours, theirs) =
            tokio::join!(connect(c, stranger.client_config(), node_name()), accept(s, node.server_config()));
        let e = ours.err().expect("the stranger's handshake fails");
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        let e = theirs.err().expect("the node's handshake fails");
        assert!(e.to_string().contains("alert"), "the node was not told why: {e}");
        // A client of another authority that trusts this one: its handshake ends, the node
        // refuses its certificate, and the client's first read says so.
        let other = Authority::create("other").expect("authority");
        let dir = tempfile::tempdir().expect("tempdir");
        let ours_pem = std::fs::read_to_string(_dir.path().join("node").join(crate::tls::CA_FILE)).expect("ca");
        other.issue(Role::Client, "sneaky", &format!("{ours_pem}{}", other.cert_pem()), dir.path()).expect("issue");
        let sneaky = TlsContext::load(dir.path()).expect("credential");
        let (c, s) = pair().await;
        let (ours, theirs) =
            tokio::join!(connect(c, sneaky.client_config(), node_name()), accept(s, node.server_config()));
        assert!(theirs.is_err(), "the node accepted a certificate of another authority");
        let (mut r, _w) = ours.expect("the client's side of the handshake ends");
        let e = r.read_u8().await.expect_err("the client learns it was refused");
        assert!(e.to_string().contains("alert"), "{e}");
    }
}
