//! Trove's metrics: one home for what every role measures, the names it is published under,
//! and how it leaves the process.
//!
//! Roles only record. A front end or service keeps an [`ops::OpTable`] of its operations
//! (counts, errors, bytes and a latency histogram per operation), sets a few gauges, and that is
//! all; the registry, the Prometheus text format (the `prometheus-client` crate) and the HTTP
//! exporter ([`http`]) live here. The names and labels are stable and documented in [`names`]
//! (and in `docs/metrics.md`, which a test keeps in step).
//!
//! Recording is cheap and never waits: counters and histogram buckets are relaxed atomic
//! additions on pre-created slots (no label lookup, no lock, no allocation on the hot path), so
//! the overhead stays far below the cost of any I/O operation. A process that exports nothing
//! records nothing: recording is off until [`enable`] (which the exporter calls), and then one
//! relaxed load decides.
//!
//! Also here: the process and host figures read from `/proc` at scrape time ([`process`]), the
//! busiest files and clients ([`top`]), and the other side, a scraper and text-format reader
//! with the rate and quantile arithmetic that `trove stats` and the dashboard share
//! ([`scrape`]).

pub mod gauges;
pub mod histogram;
pub mod http;
pub mod names;
pub mod ops;
pub mod process;
pub mod scrape;
pub mod top;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process records metrics (it exports them).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns recording on (the exporter does this when it starts).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Turns recording off again (tests of the recorders).
pub fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// The process's registry: every metric and collector of every role that runs in it.
pub(crate) fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ops::OpsCollector));
        registry.register_collector(Box::new(process::ProcessCollector::default()));
        registry.register_collector(Box::new(gauges::GaugesCollector));
        Mutex::new(registry)
    })
}

/// Adds a collector that computes metrics at scrape time (figures that live elsewhere: a
/// store's drives, the transport's counters).
pub fn register_collector(collector: impl Collector) {
    registry().lock().register_collector(Box::new(collector));
}

/// Who this process is, published as `trove_process_info` and announced to the metadata
/// service so that `trove stats` and the dashboard find its exporter.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// `meta`, `storage`, `mount`, `s3`, `nfs`, or `client` (a program embedding the client
    /// library).
    pub role: String,
    /// The instance within its role: a storage node's id, a mount point, a listen address.
    pub id: String,
    /// The cluster's name.
    pub cluster: String,
}

static IDENTITY: Mutex<Option<Identity>> = Mutex::new(None);

/// Sets (or updates, e.g. once a storage node learnt its id) who this process is.
pub fn set_identity(identity: Identity) {
    *IDENTITY.lock() = Some(identity);
}

/// Who this process said it is.
pub fn identity() -> Option<Identity> {
    IDENTITY.lock().clone()
}

/// The registry's metrics in the Prometheus text format (version 0.0.4).
pub fn encode_text() -> String {
    let mut out = String::with_capacity(64 << 10);
    let registry = registry().lock();
    // Writing into a String cannot fail; a collector that fails leaves what it wrote.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::debug!("encoding metrics failed: {e}");
    }
    out
}

/// This host's name (as `hostname` prints it), for announcements.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// When this process started, in ms since the Unix epoch (as announced).
pub fn started_ms() -> u64 {
    static STARTED: OnceLock<u64> = OnceLock::new();
    *STARTED.get_or_init(|| (now_s() * 1000.0) as u64)
}

/// The address others reach an exporter bound to `bound` at: `bound` itself, or, when it is
/// bound to every interface (0.0.0.0, ::), the host of `service` (the role's advertised
/// "HOST:PORT") with the exporter's port.
pub fn advertised(bound: std::net::SocketAddr, service: &str) -> String {
    if !bound.ip().is_unspecified() {
        return bound.to_string();
    }
    let host = service.rsplit_once(':').map(|(h, _)| h).filter(|h| !h.is_empty()).unwrap_or("127.0.0.1");
    let host = if host == "0.0.0.0" || host == "[::]" { "127.0.0.1" } else { host };
    format!("{host}:{}", bound.port())
}

/// Seconds since the Unix epoch, wall clock.
pub(crate) fn now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
