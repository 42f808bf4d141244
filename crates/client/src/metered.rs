//! What the client library records into its process's metrics (protocol `client`): file
//! reads and writes with their bytes, every metadata call it sends by operation (with retries,
//! as the caller waited for it), and how often reads found their chunk in the client's chunk cache. Front ends
//! (the mount, the gateways) and programs embedding the library (`trove bench`, the Python
//! package) get these beside their own; recording is off unless the process exports.
//!
//! Also the announcement: a process that exports tells the metadata service where
//! ([`spawn_announce`]), so that `trove stats` and the dashboard find it.

use crate::Client;
use metrics::gauges::CacheStats;
use metrics::ops::OpTable;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use wire::{MetaOp, ProcessInfo};

/// Slot of a file read.
pub const READ: usize = 0;
/// Slot of a file write.
pub const WRITE: usize = 1;
/// Slot of the first metadata operation (`MetaOp::index` counts from here).
pub const META_FIRST: usize = 2;
/// How often a process that exports says so to the metadata service.
pub const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(10);

/// The `client` protocol's operations: `read`, `write`, then every `MetaOp`.
pub fn table() -> &'static OpTable {
    static TABLE: OnceLock<&'static OpTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let names: Vec<&'static str> = ["read", "write"].into_iter().chain(MetaOp::NAMES).collect();
        metrics::ops::table("client", Box::leak(names.into_boxed_slice()))
    })
}

/// The client's chunk cache (`client.chunks`, `chunk_cache.rs`).
pub fn chunk_cache() -> &'static CacheStats {
    static CACHE: OnceLock<&'static CacheStats> = OnceLock::new();
    CACHE.get_or_init(|| metrics::gauges::cache("client.chunks"))
}

/// Records an operation of slot `op` and the bytes it read or wrote.
#[inline]
pub fn done(op: usize, started: Option<Instant>, ok: bool, read: usize, written: usize) {
    if started.is_none() {
        return;
    }
    let t = table();
    t.done(op, started, ok);
    if ok && read > 0 {
        t.read_bytes(read as u64);
    }
    if ok && written > 0 {
        t.write_bytes(written as u64);
    }
}

/// Whether this process counts the busiest files at the client library: only where it is the
/// front end itself (`trove bench`, programs embedding the library); a mount or gateway counts
/// them where it serves them, and counting twice would double them.
static COUNTS_FILES: AtomicBool = AtomicBool::new(false);

/// Counts an operation on file `ino` for `/top`, where the client library is the front end.
#[inline]
pub fn file(ino: wire::Ino, read: usize, written: usize) {
    if COUNTS_FILES.load(Ordering::Relaxed) && (read > 0 || written > 0) {
        metrics::top::file(ino, read as u64, written as u64);
    }
}

/// Announces `process` (its `metrics` address set) to the metadata service through `client`
/// every [`ANNOUNCE_INTERVAL`] while the returned task runs, and sets the process's identity.
pub fn spawn_announce(client: Client, process: ProcessInfo, cluster: String) -> tokio::task::JoinHandle<()> {
    COUNTS_FILES.store(process.role == "client", Ordering::Relaxed);
    metrics::set_identity(metrics::Identity { role: process.role.clone(), id: process.id.clone(), cluster });
    tokio::spawn(async move {
        loop {
            if let Err(e) = client.meta(MetaOp::Announce { process: process.clone() }).await {
                tracing::debug!("announcing the metrics exporter failed: {e}");
            }
            tokio::time::sleep(ANNOUNCE_INTERVAL).await;
        }
    })
}

/// A description of this process for an announcement.
pub fn process_info(role: &str, id: &str, addr: &str, metrics_addr: &str) -> ProcessInfo {
    ProcessInfo {
        role: role.into(),
        id: id.into(),
        addr: addr.into(),
        metrics: metrics_addr.into(),
        host: metrics::hostname(),
        pid: std::process::id(),
        started_ms: metrics::started_ms(),
        version: env!("CARGO_PKG_VERSION").into(),
        seen_ms_ago: 0,
    }
}
