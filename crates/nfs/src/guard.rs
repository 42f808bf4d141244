//! The front door of an export: the only socket clients reach. It admits connections within
//! the limits per client address and overall, and relays each to nfsserve, which listens on a
//! loopback port of its own, checking the RPC record marking on the way in.
//!
//! nfsserve 0.11 serves a connection for as long as the client keeps it, whatever it sends (or
//! does not send): a client that stops half-way through a call holds its connection and buffers
//! forever, and a record mark announcing a 2 GiB fragment makes it allocate 2 GiB before a byte
//! of it arrives. Its connection loop is private, so these rules are enforced here, in front:
//!
//! - a call (one RPC record: 4-byte marks, each followed by its fragment) may hold at most
//!   [`CALL_BYTES_MAX`] bytes, the largest WRITE the gateway offers plus headers; a larger one
//!   closes the connection before it reaches nfsserve;
//! - once a call has begun, its bytes may stall for at most `call_idle_timeout_ms`; so may a
//!   reply the client does not read;
//! - between calls a connection may stay idle (nothing either way) for `idle_timeout_ms`, 6
//!   minutes by default as Linux's knfsd; clients reconnect transparently;
//! - a client address may hold `connections_per_client_max` connections, the gateway
//!   `connections_max`: the excess is closed at once (NFS has no way to say "busy"), with one
//!   warning per 10 seconds at most;
//! - a client whose address is not in the export's `clients` list (when it has one) is closed
//!   at once, before a byte reaches nfsserve, with the same warnings.
//!
//! The relay costs one more pass of every byte through a loopback socket. Deliberately absent:
//! exclusivity of the loopback port. A local process can reach nfsserve there without these
//! limits (not without the export's rules, which nfsserve's file system applies either way).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Most bytes of one call: a WRITE of the largest transfer the gateway advertises, plus room for
/// the RPC and NFS headers and credentials.
pub const CALL_BYTES_MAX: usize = crate::fs::TRANSFER_BYTES_MAX as usize + (64 << 10);
/// At most one warning about refused connections per this interval.
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// Bytes relayed per read.
const RELAY_BUFFER_BYTES: usize = 256 << 10;

/// The client addresses an export admits: networks and single addresses (`10.0.0.0/8`,
/// `192.168.1.5`, `fd00::/8`); empty admits every address. An IPv4 client reaching an IPv6
/// socket (`::ffff:10.1.2.3`) is matched as its IPv4 address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList(Vec<ipnet::IpNet>);

impl AllowList {
    /// Whether every client address is admitted (no list given).
    pub fn admits_every_address(&self) -> bool {
        self.0.is_empty()
    }

    /// Parses the entries of an export's `clients`; the error names the entry that is neither
    /// an address nor a network.
    pub fn parse(entries: &[String]) -> Result<AllowList, String> {
        let mut nets = Vec::with_capacity(entries.len());
        for entry in entries {
            let e = entry.trim();
            let net = match e.parse::<ipnet::IpNet>() {
                Ok(net) => net.trunc(),
                Err(_) => match e.parse::<IpAddr>() {
                    Ok(addr) => ipnet::IpNet::from(addr),
                    Err(_) => {
                        return Err(format!(
                            "clients entry {entry:?} is neither an IP address nor a network (address/prefix length)"
                        ))
                    }
                },
            };
            nets.push(net);
        }
        Ok(AllowList(nets))
    }

    /// Whether `client` may connect.
    pub fn allows(&self, client: IpAddr) -> bool {
        self.0.is_empty() || self.0.iter().any(|net| net.contains(&client.to_canonical()))
    }

    /// The entries, for messages.
    pub fn describe(&self) -> String {
        self.0.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// The limits of one export's connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub idle: Duration,
    pub call_stall: Duration,
    pub connections_max: usize,
    pub connections_per_client_max: usize,
}

struct Counts {
    per_client: HashMap<IpAddr, usize>,
    total: usize,
    refused_unreported: u64,
    last_warning: Option<Instant>,
}

/// Open connections per client address and overall.
struct Admission {
    limits: Limits,
    allow: AllowList,
    export: String,
    counts: Mutex<Counts>,
}

/// An admitted connection; dropping it frees its place.
struct Permit {
    admission: Arc<Admission>,
    client: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.admission.counts.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                c.per_client.remove(&self.client);
            }
        }
    }
}

impl Admission {
    fn admit(self: &Arc<Self>, client: IpAddr) -> Option<Permit> {
        let mut c = self.counts.lock();
        let open = c.per_client.get(&client).copied().unwrap_or(0);
        let why = if !self.allow.allows(client) {
            format!("{client} is not in the export's clients ({})", self.allow.describe())
        } else if open >= self.limits.connections_per_client_max {
            format!(
                "{client} has {open} open (connections_per_client_max = {})",
                self.limits.connections_per_client_max
            )
        } else if c.total >= self.limits.connections_max {
            format!("{} are open (connections_max = {})", c.total, self.limits.connections_max)
        } else {
            *c.per_client.entry(client).or_insert(0) += 1;
            c.total += 1;
            return Some(Permit { admission: self.clone(), client });
        };
        c.refused_unreported += 1;
        let now = Instant::now();
        if c.last_warning.is_none_or(|t| now.duration_since(t) >= REFUSAL_WARNING_INTERVAL) {
            let count = std::mem::take(&mut c.refused_unreported);
            c.last_warning = Some(now);
            drop(c);
            tracing::warn!(
                "NFS export {}: closed {count} connection(s) refused since the last warning; the latest from {client}: {why}",
                self.export
            );
        }
        None
    }
}

/// When the connection last moved a byte either way.
struct Activity(Mutex<Instant>);

impl Activity {
    fn touch(&self) {
        *self.0.lock() = Instant::now();
    }

    fn last(&self) -> Instant {
        *self.0.lock()
    }
}

fn timed_out(what: &str, after: Duration) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} for {} ms", after.as_millis()))
}

/// Accepts connections on `front` from the clients `allow` admits and relays each to nfsserve
/// at `backend`, within `limits`.
pub async fn serve(
    front: TcpListener,
    backend: SocketAddr,
    limits: Limits,
    allow: AllowList,
    export: String,
) -> io::Result<()> {
    let admission = Arc::new(Admission {
        limits,
        allow,
        export,
        counts: Mutex::new(Counts { per_client: HashMap::new(), total: 0, refused_unreported: 0, last_warning: None }),
    });
    loop {
        let (client, peer) = match front.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!("accepting an NFS connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(permit) = admission.admit(peer.ip()) else {
            continue;
        };
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = relay(client, backend, limits).await {
                tracing::debug!("NFS connection from {peer} closed: {e}");
            }
        });
    }
}

async fn relay(client: TcpStream, backend: SocketAddr, limits: Limits) -> io::Result<()> {
    let server = TcpStream::connect(backend).await?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let activity = Activity(Mutex::new(Instant::now()));
    // Whichever direction ends first ends the connection (as nfsserve does on a client's EOF).
    tokio::select! {
        r = calls(&mut from_client, &mut to_server, limits, &activity) => r,
        r = replies(&mut from_server, &mut to_client, limits, &activity) => r,
    }
}

/// Relays calls, record by record, checking their size and that they keep arriving. Returns
/// at the client's EOF between calls.
async fn calls<R, W>(from: &mut R, to: &mut W, limits: Limits, activity: &Activity) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; RELAY_BUFFER_BYTES];
    let mut call_bytes = 0usize;
    loop {
        let mut mark = [0u8; 4];
        if call_bytes == 0 {
            // Between calls: idle until the first byte of the next one, or until nothing has
            // moved either way (a long reply going out keeps the connection busy) for too long.
            loop {
                let deadline = activity.last() + limits.idle;
                match tokio::time::timeout_at(deadline.into(), from.read(&mut mark[..1])).await {
                    Ok(Ok(0)) => return Ok(()),
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(_) if activity.last() + limits.idle <= Instant::now() => {
                        return Err(timed_out("idle between calls", limits.idle))
                    }
                    Err(_) => {}
                }
            }
            read_stalling(from, &mut mark[1..], limits.call_stall).await?;
        } else {
            read_stalling(from, &mut mark, limits.call_stall).await?;
        }
        activity.touch();
        let word = u32::from_be_bytes(mark);
        let last = word & (1 << 31) != 0;
        let len = (word & !(1 << 31)) as usize;
        call_bytes += len;
        if call_bytes > CALL_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a call of more than {call_bytes} bytes was announced; the most is {CALL_BYTES_MAX}"),
            ));
        }
        to.write_all(&mark).await?;
        let mut left = len;
        while left > 0 {
            let want = left.min(buf.len());
            let n = match tokio::time::timeout(limits.call_stall, from.read(&mut buf[..want])).await {
                Ok(Ok(0)) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the client closed mid-call")),
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(timed_out("no bytes of a call arrived", limits.call_stall)),
            };
            activity.touch();
            metrics::gauges::net_in(n as u64);
            to.write_all(&buf[..n]).await?;
            left -= n;
        }
        if last {
            call_bytes = 0;
        }
    }
}

/// Reads exactly `buf.len()` bytes, none of them more than `stall` after the previous.
async fn read_stalling<R: AsyncRead + Unpin>(from: &mut R, buf: &mut [u8], stall: Duration) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match tokio::time::timeout(stall, from.read(&mut buf[got..])).await {
            Ok(Ok(0)) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the client closed mid-call")),
            Ok(Ok(n)) => got += n,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out("no bytes of a call arrived", stall)),
        }
    }
    Ok(())
}

/// Relays replies; a client that accepts none of a reply's bytes for `call_stall` is dropped.
async fn replies<R, W>(from: &mut R, to: &mut W, limits: Limits, activity: &Activity) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; RELAY_BUFFER_BYTES];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        activity.touch();
        metrics::gauges::net_out(n as u64);
        let mut sent = 0;
        while sent < n {
            match tokio::time::timeout(limits.call_stall, to.write(&buf[sent..n])).await {
                Ok(Ok(0)) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the client stopped reading")),
                Ok(Ok(w)) => sent += w,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(timed_out("the client accepted no bytes of a reply", limits.call_stall)),
            }
            activity.touch();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            idle: Duration::from_millis(300),
            call_stall: Duration::from_millis(100),
            connections_max: 3,
            connections_per_client_max: 2,
        }
    }

    fn admission(allow: AllowList) -> Arc<Admission> {
        Arc::new(Admission {
            limits: limits(),
            allow,
            export: "/".into(),
            counts: Mutex::new(Counts {
                per_client: HashMap::new(),
                total: 0,
                refused_unreported: 0,
                last_warning: None,
            }),
        })
    }

    fn record(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32 | 1 << 31).to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[tokio::test]
    async fn whole_calls_pass_and_bad_ones_end_the_connection() {
        let activity = Activity(Mutex::new(Instant::now()));
        // Two calls, the second in two fragments, then EOF: relayed unchanged.
        let mut input = record(b"first call");
        input.extend_from_slice(&(3u32).to_be_bytes());
        input.extend_from_slice(b"sec");
        input.extend_from_slice(&record(b"ond"));
        let mut out = Vec::new();
        calls(&mut input.as_slice(), &mut out, limits(), &activity).await.expect("relayed");
        assert_eq!(out, input);
        // A mark announcing more than a call may hold: refused before anything is read.
        let huge = (1u32 << 30 | 1 << 31).to_be_bytes();
        let mut out = Vec::new();
        let err = calls(&mut &huge[..], &mut out, limits(), &activity).await.expect_err("too large");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(out.is_empty(), "nothing reached nfsserve");
        // Fragments adding up to too much are refused too.
        let mut many = Vec::new();
        for _ in 0..3 {
            many.extend_from_slice(&((CALL_BYTES_MAX / 2) as u32).to_be_bytes());
            many.extend(std::iter::repeat_n(0u8, CALL_BYTES_MAX / 2));
        }
        let err = calls(&mut many.as_slice(), &mut Vec::new(), limits(), &activity).await.expect_err("too large");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn stalled_calls_and_idle_connections_time_out() {
        let activity = Activity(Mutex::new(Instant::now()));
        // Half a mark, then nothing: cut after the call stall limit.
        let (mut client, mut ours) = tokio::io::duplex(1024);
        client.write_all(&[0x80, 0]).await.expect("write");
        let started = Instant::now();
        let err = calls(&mut ours, &mut Vec::new(), limits(), &activity).await.expect_err("stalled");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_millis(250), "{:?}", started.elapsed());
        // Nothing at all: cut after the idle limit.
        let (_client, mut ours) = tokio::io::duplex(1024);
        let activity = Activity(Mutex::new(Instant::now()));
        let started = Instant::now();
        let err = calls(&mut ours, &mut Vec::new(), limits(), &activity).await.expect_err("idle");
        assert!(err.to_string().contains("idle"), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(290));
    }

    #[test]
    fn allow_lists_admit_their_networks_and_addresses_only() {
        let parse = |e: &[&str]| AllowList::parse(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let ip = |s: &str| s.parse::<IpAddr>().expect("address");
        let list = parse(&["10.1.0.0/16", " 192.168.7.9 ", "fd00::/8", "172.16.5.77/12"]).expect("parses");
        for yes in ["10.1.200.3", "192.168.7.9", "fd12::1", "::ffff:10.1.0.1", "172.31.0.1"] {
            assert!(list.allows(ip(yes)), "{yes}");
        }
        for no in ["10.2.0.1", "192.168.7.10", "fe80::1", "127.0.0.1", "::ffff:192.168.7.8"] {
            assert!(!list.allows(ip(no)), "{no}");
        }
        assert!(parse(&[]).expect("empty").allows(ip("203.0.113.9")), "no list admits everyone");
        let err = parse(&["10.0.0.0/8", "tenant-a"]).expect_err("not an address");
        assert!(err.contains("\"tenant-a\""), "{err}");
        assert!(parse(&["10.0.0.0/33"]).is_err(), "a prefix longer than the address");
        let a = admission(parse(&["127.0.0.2"]).expect("parses"));
        assert!(a.admit(ip("127.0.0.1")).is_none(), "an address not listed is refused");
        assert!(a.admit(ip("127.0.0.2")).is_some());
    }

    #[test]
    fn connections_are_limited_per_client_and_overall() {
        let a = admission(AllowList::default());
        let (x, y): (IpAddr, IpAddr) = ("10.0.0.1".parse().expect("ip"), "10.0.0.2".parse().expect("ip"));
        let x1 = a.admit(x).expect("first");
        let _x2 = a.admit(x).expect("second");
        assert!(a.admit(x).is_none(), "a third from one client");
        let _y1 = a.admit(y).expect("another client");
        assert!(a.admit(y).is_none(), "over the total");
        drop(x1);
        assert!(a.admit(x).is_some(), "a place was freed");
    }
}
