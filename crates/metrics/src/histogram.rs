//! A latency histogram that records without a lock: one relaxed atomic addition per bucket
//! hit, one for the sum, one for the count.
//!
//! `prometheus-client`'s own histogram takes a mutex per observation; operations of a busy
//! storage node are observed from every worker thread at once, so the buckets here are plain
//! atomics, encoded through the crate's text format at scrape time. The buckets are fixed
//! (10 µs to 10 s, 1-2.5-5 steps), the same for every operation, so that histograms can be
//! merged across operations and processes (`trove stats` computes p50 and p99 from them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Upper bounds of the buckets, in seconds (`le` labels); a last bucket takes the rest (+Inf).
pub const BUCKETS_S: [f64; 19] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// The same bounds in nanoseconds, which is what observations are compared with.
const BUCKETS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Number of buckets including the last, unbounded one.
pub const BUCKET_COUNT: usize = BUCKETS_S.len() + 1;

/// A histogram of durations.
pub struct Histogram {
    buckets: [AtomicU64; BUCKET_COUNT],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// What a histogram held at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Observations per bucket (not cumulative), the last one unbounded.
    pub buckets: Vec<u64>,
    pub sum_s: f64,
    pub count: u64,
}

impl Histogram {
    pub const fn new() -> Histogram {
        #[allow(clippy::declare_interior_mutable_const)] // only initialises the array
        const ZERO: AtomicU64 = AtomicU64::new(0);
        Histogram { buckets: [ZERO; BUCKET_COUNT], sum_ns: AtomicU64::new(0) }
    }

    /// Records one duration in nanoseconds.
    #[inline]
    pub fn observe_ns(&self, ns: u64) {
        let i = BUCKETS_NS.partition_point(|&bound| bound < ns);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Records the time since `start`.
    #[inline]
    pub fn observe_since(&self, start: Instant) {
        self.observe_ns(start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let count = buckets.iter().sum();
        HistogramSnapshot { buckets, sum_s: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9, count }
    }
}

impl HistogramSnapshot {
    /// The buckets as `prometheus-client` encodes them: (upper bound, observations in it).
    pub fn encodable(&self) -> Vec<(f64, u64)> {
        BUCKETS_S.iter().copied().chain(std::iter::once(f64::INFINITY)).zip(self.buckets.iter().copied()).collect()
    }
}

/// Publishes `histogram` under `name` (a name of [`crate::names`], without labels).
pub fn publish(name: &'static str, histogram: &'static Histogram) {
    crate::register_collector(Published { name, histogram });
}

struct Published {
    name: &'static str,
    histogram: &'static Histogram,
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published").field("name", &self.name).finish()
    }
}

impl prometheus_client::collector::Collector for Published {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let h = self.histogram.snapshot();
        let mut m = encoder.encode_descriptor(
            self.name,
            crate::names::help(self.name),
            None,
            prometheus_client::metrics::MetricType::Histogram,
        )?;
        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(h.sum_s, h.count, &h.encodable(), None)
    }
}

/// The `q` quantile (0..=1) of observations counted per bucket (`counts[i]` in the bucket with
/// upper bound `bounds[i]`, the last one unbounded), interpolating linearly inside the bucket
/// as Prometheus's `histogram_quantile` does; `None` without observations. An answer in the
/// unbounded bucket is its lower bound.
pub fn quantile(bounds: &[f64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut seen = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if (seen + c) as f64 >= rank {
            let lower = if i == 0 { 0.0 } else { bounds.get(i - 1).copied().unwrap_or(0.0) };
            let Some(&upper) = bounds.get(i) else {
                return Some(lower);
            };
            if !upper.is_finite() {
                return Some(lower);
            }
            let inside = (rank - seen as f64) / c as f64;
            return Some(lower + (upper - lower) * inside);
        }
        seen += c;
    }
    bounds.iter().rev().find(|b| b.is_finite()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_bucket_whose_bound_holds_them() {
        let h = Histogram::new();
        h.observe_ns(10_000); // exactly the first bound: le="1e-05"
        h.observe_ns(10_001);
        h.observe_ns(3_000_000);
        h.observe_ns(20_000_000_000); // beyond 10 s
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[8], 1, "3 ms is in the 5 ms bucket");
        assert_eq!(s.buckets[BUCKET_COUNT - 1], 1);
        assert!((s.sum_s - 20.003_020_001).abs() < 1e-9, "{}", s.sum_s);
        let enc = s.encodable();
        assert_eq!(enc.len(), BUCKET_COUNT);
        assert_eq!(enc[0], (0.00001, 1));
        assert!(enc[BUCKET_COUNT - 1].0.is_infinite());
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let bounds = [1.0, 2.0, 4.0, f64::INFINITY];
        // 10 in (0,1], 10 in (1,2], none above.
        let counts = [10, 10, 0, 0];
        assert_eq!(quantile(&bounds, &counts, 0.5), Some(1.0));
        assert_eq!(quantile(&bounds, &counts, 0.75), Some(1.5));
        assert_eq!(quantile(&bounds, &counts, 1.0), Some(2.0));
        assert_eq!(quantile(&bounds, &[0, 0, 0, 0], 0.5), None);
        // Everything beyond the last bound: the bound is the best that can be said.
        assert_eq!(quantile(&bounds, &[0, 0, 0, 3], 0.99), Some(4.0));
    }
}
