//! Operations of a protocol: how many, how many failed, how long each took, and how many bytes
//! clients read and wrote through it.
//!
//! Each protocol (the metadata and storage services, the FUSE mount, the S3 and NFS gateways,
//! the client library) has one [`OpTable`] with a slot per operation, created once with the
//! operations' names. Recording is an index into the slots and a few relaxed atomic additions:
//! no label lookup, no lock. Only slots of operations that happened are published as
//! histograms; counters are published for every operation (at 0 before the first), so that a
//! rate over a scrape interval never misses the first increase.
//!
//! Published as `trove_ops_total`, `trove_op_errors_total`, `trove_op_duration_seconds` (labels
//! `protocol`, `op`) and `trove_bytes_total` (labels `protocol`, `direction` = `read` for data
//! clients read, `write` for data they wrote); see [`crate::names`].

use crate::histogram::{Histogram, HistogramSnapshot};
use crate::names;
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One operation's figures.
#[derive(Default)]
struct OpStats {
    count: AtomicU64,
    errors: AtomicU64,
    latency: Histogram,
}

/// The operations of one protocol.
pub struct OpTable {
    protocol: &'static str,
    names: &'static [&'static str],
    ops: Box<[OpStats]>,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// Every table of this process, in creation order.
static TABLES: Mutex<Vec<&'static OpTable>> = Mutex::new(Vec::new());

/// The table of `protocol` with one slot per name in `names` (an operation is recorded by its
/// index there). Made once per protocol and process; later calls return the same table.
pub fn table(protocol: &'static str, names: &'static [&'static str]) -> &'static OpTable {
    let mut tables = TABLES.lock();
    if let Some(t) = tables.iter().find(|t| t.protocol == protocol) {
        assert_eq!(t.names, names, "protocol {protocol} was given two different operation lists");
        return t;
    }
    let t: &'static OpTable = Box::leak(Box::new(OpTable {
        protocol,
        names,
        ops: names.iter().map(|_| OpStats::default()).collect(),
        bytes_read: AtomicU64::new(0),
        bytes_written: AtomicU64::new(0),
    }));
    tables.push(t);
    t
}

impl OpTable {
    /// The protocol's name (the `protocol` label).
    pub fn protocol(&self) -> &'static str {
        self.protocol
    }

    /// The operations' names, in slot order.
    pub fn names(&self) -> &'static [&'static str] {
        self.names
    }

    /// When an operation starts: `None` while recording is off, so the clock is not read.
    #[inline]
    pub fn start(&self) -> Option<Instant> {
        crate::enabled().then(Instant::now)
    }

    /// Records operation `op` (its index in the names) that started at `started` (from
    /// [`OpTable::start`]) and succeeded or not.
    #[inline]
    pub fn done(&self, op: usize, started: Option<Instant>, ok: bool) {
        let Some(started) = started else { return };
        let Some(stats) = self.ops.get(op) else {
            return;
        };
        stats.count.fetch_add(1, Ordering::Relaxed);
        if !ok {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        stats.latency.observe_since(started);
    }

    /// Counts an operation answered without measurable work (from a cache, at once): counted
    /// with a duration of 0, so that counts stay complete.
    #[inline]
    pub fn done_at_once(&self, op: usize, ok: bool) {
        if !crate::enabled() {
            return;
        }
        let Some(stats) = self.ops.get(op) else {
            return;
        };
        stats.count.fetch_add(1, Ordering::Relaxed);
        if !ok {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        stats.latency.observe_ns(0);
    }

    /// Adds bytes clients read through this protocol.
    #[inline]
    pub fn read_bytes(&self, bytes: u64) {
        if crate::enabled() {
            self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Adds bytes clients wrote through this protocol.
    #[inline]
    pub fn write_bytes(&self, bytes: u64) {
        if crate::enabled() {
            self.bytes_written.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// (count, errors) of operation `op`.
    pub fn counts(&self, op: usize) -> (u64, u64) {
        self.ops.get(op).map_or((0, 0), |s| (s.count.load(Ordering::Relaxed), s.errors.load(Ordering::Relaxed)))
    }

    /// (bytes read, bytes written) by clients so far.
    pub fn bytes(&self) -> (u64, u64) {
        (self.bytes_read.load(Ordering::Relaxed), self.bytes_written.load(Ordering::Relaxed))
    }

    fn latency(&self, op: usize) -> HistogramSnapshot {
        self.ops.get(op).map(|s| s.latency.snapshot()).unwrap_or_default()
    }
}

/// Publishes every table at scrape time.
#[derive(Debug)]
pub(crate) struct OpsCollector;

/// One counter family with a sample per (protocol, operation) of every table.
fn encode_op_counters(
    encoder: &mut DescriptorEncoder,
    tables: &[&'static OpTable],
    name: &str,
    value: impl Fn(&OpTable, usize) -> u64,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, names::help(name), None, MetricType::Counter)?;
    for t in tables {
        for (i, op) in t.names.iter().enumerate() {
            let labels = [("protocol", t.protocol), ("op", *op)];
            m.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&value(t, i), None)?;
        }
    }
    Ok(())
}

impl Collector for OpsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let tables: Vec<&'static OpTable> = TABLES.lock().clone();
        if tables.is_empty() {
            return Ok(());
        }
        encode_op_counters(&mut encoder, &tables, names::OPS, |t, i| t.counts(i).0)?;
        encode_op_counters(&mut encoder, &tables, names::OP_ERRORS, |t, i| t.counts(i).1)?;
        {
            let mut m = encoder.encode_descriptor(
                names::OP_DURATION,
                names::help(names::OP_DURATION),
                None,
                MetricType::Histogram,
            )?;
            for t in &tables {
                for (i, op) in t.names.iter().enumerate() {
                    let h = t.latency(i);
                    if h.count == 0 {
                        continue;
                    }
                    let labels = [("protocol", t.protocol), ("op", *op)];
                    m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.encodable(), None)?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(names::BYTES, names::help(names::BYTES), None, MetricType::Counter)?;
        for t in &tables {
            let (read, written) = t.bytes();
            for (direction, v) in [("read", read), ("write", written)] {
                let labels = [("protocol", t.protocol), ("direction", direction)];
                m.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&v, None)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static NAMES: [&str; 3] = ["Get", "Put", "List"];

    #[test]
    fn operations_are_counted_only_while_enabled_and_published() {
        let t = table("unit-test", &NAMES);
        assert!(std::ptr::eq(t, table("unit-test", &NAMES)), "one table per protocol");
        crate::disable();
        let started = t.start();
        assert!(started.is_none());
        t.done(0, started, true);
        t.read_bytes(10);
        assert_eq!(t.counts(0), (0, 0));
        crate::enable();
        t.done(0, t.start(), true);
        t.done(1, t.start(), false);
        t.done_at_once(0, true);
        t.read_bytes(4096);
        t.write_bytes(100);
        assert_eq!(t.counts(0), (2, 0));
        assert_eq!(t.counts(1), (1, 1));
        assert_eq!(t.bytes(), (4096, 100));
        let text = crate::encode_text();
        assert!(text.contains("trove_ops_total{protocol=\"unit-test\",op=\"Get\"} 2"), "{text}");
        assert!(text.contains("trove_ops_total{protocol=\"unit-test\",op=\"List\"} 0"), "{text}");
        assert!(text.contains("trove_op_errors_total{protocol=\"unit-test\",op=\"Put\"} 1"), "{text}");
        assert!(text.contains("trove_op_duration_seconds_count{protocol=\"unit-test\",op=\"Get\"} 2"), "{text}");
        assert!(!text.contains("trove_op_duration_seconds_count{protocol=\"unit-test\",op=\"List\"}"), "{text}");
        assert!(text.contains("trove_bytes_total{protocol=\"unit-test\",direction=\"read\"} 4096"), "{text}");
        // The text parses back, and the histogram's buckets add up to its count.
        let parsed = crate::scrape::parse(&text);
        let buckets = parsed.histogram(names::OP_DURATION, &[("protocol", "unit-test"), ("op", "Get")]);
        assert_eq!(buckets.1.iter().sum::<u64>(), 2);
    }
}
