//! Measurement arithmetic shared by the benchmarks: latency histograms with percentiles, and
//! max/min/mean/stddev summaries of repeated measurements (mdtest's way of reporting).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Sub-buckets per power of two: relative error of a recorded latency under 1/64 (1.6%).
const SUB_BUCKETS: u64 = 64;
/// Powers of two covered: 2^40 ns is about 18 minutes, far past any sane I/O latency.
const OCTAVES: u64 = 40;

/// A log-linear latency histogram in nanoseconds: constant memory however many operations are
/// recorded (a benchmark at 100k IOPS for minutes would otherwise keep millions of samples).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
    min_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (OCTAVES * SUB_BUCKETS) as usize],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
            min_ns: u64::MAX,
        }
    }
}

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let b = bucket_index(ns);
        self.counts[b] += 1;
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
        self.min_ns = self.min_ns.min(ns);
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
    }

    /// Number of recorded latencies.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean latency in microseconds.
    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum_ns as f64 / self.count as f64 / 1e3
    }

    /// Largest latency in microseconds.
    pub fn max_us(&self) -> f64 {
        self.max_ns as f64 / 1e3
    }

    /// The latency under which fraction `q` (0..=1) of operations completed, in microseconds
    /// (the upper edge of its bucket, so never optimistic).
    pub fn percentile_us(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (bucket_upper_ns(i).min(self.max_ns)) as f64 / 1e3;
            }
        }
        self.max_us()
    }
}

/// Bucket of a latency: exact below 64 ns, then 32 sub-buckets per power of two.
fn bucket_index(ns: u64) -> usize {
    let half = SUB_BUCKETS / 2;
    if ns < SUB_BUCKETS {
        return ns as usize;
    }
    // ns has `bits` significant bits; keep its top 6 bits (32..63) as the sub-bucket.
    let bits = 64 - u64::from(ns.leading_zeros());
    let shift = bits - 6;
    let sub = (ns >> shift) - half; // 0..32
    let index = SUB_BUCKETS + (shift - 1) * half + sub;
    (index as usize).min((OCTAVES * SUB_BUCKETS) as usize - 1)
}

/// The largest latency that falls in bucket `i`.
fn bucket_upper_ns(i: usize) -> u64 {
    let half = SUB_BUCKETS / 2;
    let i = i as u64;
    if i < SUB_BUCKETS {
        return i;
    }
    let shift = (i - SUB_BUCKETS) / half + 1;
    let sub = (i - SUB_BUCKETS) % half;
    ((sub + half + 1) << shift) - 1
}

/// Max, min, mean and standard deviation of repeated measurements (e.g. ops/s per iteration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub max: f64,
    pub min: f64,
    pub mean: f64,
    /// Population standard deviation, as mdtest reports it.
    pub stddev: f64,
    pub count: usize,
}

impl Summary {
    /// Summarises `values` (all zeros when empty).
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        Summary {
            max: values.iter().cloned().fold(f64::MIN, f64::max),
            min: values.iter().cloned().fold(f64::MAX, f64::min),
            mean,
            stddev: var.sqrt(),
            count: values.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0usize;
        for ns in (0..2_000_000u64).step_by(7) {
            let b = bucket_index(ns);
            assert!(b >= last, "bucket order at {ns}");
            last = b;
            let upper = bucket_upper_ns(b);
            assert!(upper >= ns, "{ns} above its bucket's upper edge {upper}");
            // Relative error of reporting the upper edge stays under 1/32.
            assert!((upper - ns) as f64 <= ns as f64 / 32.0 + 1.0, "{ns} -> {upper}");
        }
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.count(), 1000);
        let p50 = h.percentile_us(0.50);
        let p99 = h.percentile_us(0.99);
        assert!((p50 - 500.0).abs() <= 500.0 / 32.0 + 1.0, "p50 {p50}");
        assert!((p99 - 990.0).abs() <= 990.0 / 32.0 + 1.0, "p99 {p99}");
        assert!(h.percentile_us(0.999) <= 1000.0);
        assert!((h.mean_us() - 500.5).abs() < 0.01);
        let mut g = Histogram::default();
        g.record(Duration::from_millis(5));
        h.merge(&g);
        assert_eq!(h.count(), 1001);
        assert_eq!(h.max_us(), 5000.0);
    }

    #[test]
    fn summary_matches_hand_arithmetic() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(s.max, 9.0);
        assert_eq!(s.min, 2.0);
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.stddev, 2.0);
        assert_eq!(Summary::of(&[]).count, 0);
    }
}
