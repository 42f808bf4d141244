//! Every metric that is not an operation: values roles set now and then (cluster figures,
//! job progress), values computed at scrape time by the role that owns them (a storage node's
//! drives, the transport's byte counts), and the hot counters of caches and network bytes.
//!
//! Roles publish here without depending on the text format: [`set`] and [`add`] keep a value
//! under a name of [`crate::names`] and labels; [`register_source`] adds a function called at
//! every scrape. Both are for figures that change at most a few times a second (a mutex is
//! taken); the hot paths use [`CacheStats`] and [`net_in`]/[`net_out`], plain atomics.

use crate::names;
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One value of a metric with its labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// A name of [`crate::names`] (counters without `_total`).
    pub name: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl Sample {
    pub fn new(name: &'static str, labels: &[(&'static str, &str)], value: f64) -> Sample {
        Sample { name, labels: labels.iter().map(|(k, v)| (*k, v.to_string())).collect(), value }
    }
}

type Key = (&'static str, Vec<(&'static str, String)>);
type Source = Box<dyn Fn(&mut Vec<Sample>) + Send + Sync>;

static VALUES: Mutex<BTreeMap<Key, f64>> = Mutex::new(BTreeMap::new());
static SOURCES: Mutex<Vec<Source>> = Mutex::new(Vec::new());

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    (name, labels.iter().map(|(k, v)| (*k, v.to_string())).collect())
}

/// Sets a gauge (or a counter a role keeps itself) to `value`.
pub fn set(name: &'static str, labels: &[(&'static str, &str)], value: f64) {
    VALUES.lock().insert(key(name, labels), value);
}

/// Adds `delta` to a counter.
pub fn add(name: &'static str, labels: &[(&'static str, &str)], delta: f64) {
    *VALUES.lock().entry(key(name, labels)).or_insert(0.0) += delta;
}

/// Removes every value of `name` (a lease holder's cluster figures when it loses the lease).
pub fn clear(name: &'static str) {
    VALUES.lock().retain(|(n, _), _| *n != name);
}

/// The value kept under `name` and `labels`, if any.
pub fn get(name: &'static str, labels: &[(&'static str, &str)]) -> Option<f64> {
    VALUES.lock().get(&key(name, labels)).copied()
}

/// Adds a function called at every scrape to contribute samples.
pub fn register_source(source: impl Fn(&mut Vec<Sample>) + Send + Sync + 'static) {
    SOURCES.lock().push(Box::new(source));
}

/// Hits and misses of one cache.
pub struct CacheStats {
    name: &'static str,
    hits: AtomicU64,
    misses: AtomicU64,
}

static CACHES: Mutex<Vec<&'static CacheStats>> = Mutex::new(Vec::new());

/// The statistics of cache `name` (made once per process).
pub fn cache(name: &'static str) -> &'static CacheStats {
    let mut caches = CACHES.lock();
    if let Some(c) = caches.iter().find(|c| c.name == name) {
        return c;
    }
    let c: &'static CacheStats =
        Box::leak(Box::new(CacheStats { name, hits: AtomicU64::new(0), misses: AtomicU64::new(0) }));
    caches.push(c);
    c
}

impl CacheStats {
    #[inline]
    pub fn hit(&self) {
        if crate::enabled() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn miss(&self) {
        if crate::enabled() {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a lookup that hit or missed.
    #[inline]
    pub fn lookup(&self, hit: bool) {
        if hit {
            self.hit()
        } else {
            self.miss()
        }
    }

    pub fn counts(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

static NET_IN: AtomicU64 = AtomicU64::new(0);
static NET_OUT: AtomicU64 = AtomicU64::new(0);

/// Counts bytes received on the network (gateways' own sockets).
#[inline]
pub fn net_in(bytes: u64) {
    if crate::enabled() {
        NET_IN.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Counts bytes sent on the network.
#[inline]
pub fn net_out(bytes: u64) {
    if crate::enabled() {
        NET_OUT.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Every sample of this process that is not an operation, grouped by name.
fn gather() -> BTreeMap<&'static str, Vec<(Vec<(&'static str, String)>, f64)>> {
    let mut out: BTreeMap<&'static str, Vec<(Vec<(&'static str, String)>, f64)>> = BTreeMap::new();
    for ((name, labels), value) in VALUES.lock().iter() {
        out.entry(name).or_default().push((labels.clone(), *value));
    }
    let mut samples = Vec::new();
    for source in SOURCES.lock().iter() {
        source(&mut samples);
    }
    for s in samples {
        out.entry(s.name).or_default().push((s.labels, s.value));
    }
    let caches: Vec<&'static CacheStats> = CACHES.lock().clone();
    for c in caches {
        let (hits, misses) = c.counts();
        let list = out.entry(names::CACHE).or_default();
        list.push((vec![("cache", c.name.to_string()), ("result", "hit".into())], hits as f64));
        list.push((vec![("cache", c.name.to_string()), ("result", "miss".into())], misses as f64));
    }
    if crate::enabled() {
        let list = out.entry(names::NET_BYTES).or_default();
        // Sources may have added their own (the transport's): the sums are what is published.
        let (mut i, mut o) = (NET_IN.load(Ordering::Relaxed) as f64, NET_OUT.load(Ordering::Relaxed) as f64);
        for (labels, v) in list.drain(..) {
            match labels.iter().find(|(k, _)| *k == "direction").map(|(_, d)| d.as_str()) {
                Some("in") => i += v,
                Some("out") => o += v,
                _ => {}
            }
        }
        list.push((vec![("direction", "in".into())], i));
        list.push((vec![("direction", "out".into())], o));
    }
    out
}

/// Publishes [`gather`]'s samples in the order of [`names::ALL`] with their types.
#[derive(Debug)]
pub(crate) struct GaugesCollector;

impl Collector for GaugesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut all = gather();
        for (name, kind, _) in names::ALL {
            let Some(series) = all.remove(name) else {
                continue;
            };
            let metric_type = match *kind {
                "counter" => MetricType::Counter,
                "gauge" => MetricType::Gauge,
                _ => continue,
            };
            let mut m = encoder.encode_descriptor(name, names::help(name), None, metric_type)?;
            for (labels, value) in series {
                let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut f = m.encode_family(&labels)?;
                if metric_type == MetricType::Counter {
                    f.encode_counter::<NoLabelSet, _, u64>(&value, None)?;
                } else {
                    f.encode_gauge(&value)?;
                }
            }
        }
        // A name outside the list is a bug of the role that published it: left out, said once.
        for name in all.keys() {
            tracing::debug!("metric {name} is not one of the documented names; not published");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_sources_are_published_with_their_types() {
        crate::enable();
        set(names::CLUSTER_FILES, &[], 12.0);
        add(names::JOB_PASSES, &[("job", "unit")], 1.0);
        add(names::JOB_PASSES, &[("job", "unit")], 2.0);
        register_source(|out| out.push(Sample::new(names::DRIVE_SHARDS, &[("drive", "/d0")], 7.0)));
        cache("unit.cache").hit();
        cache("unit.cache").miss();
        cache("unit.cache").hit();
        net_in(100);
        register_source(|out| out.push(Sample::new(names::NET_BYTES, &[("direction", "in")], 5.0)));
        let text = crate::encode_text();
        assert!(text.contains("# TYPE trove_cluster_files gauge\ntrove_cluster_files 12"), "{text}");
        assert!(text.contains("trove_job_passes_total{job=\"unit\"} 3"), "{text}");
        assert!(text.contains("trove_drive_shards{drive=\"/d0\"} 7"), "{text}");
        assert!(text.contains("trove_cache_requests_total{cache=\"unit.cache\",result=\"hit\"} 2"), "{text}");
        let parsed = crate::scrape::parse(&text);
        assert!(parsed.value("trove_net_bytes_total", &[("direction", "in")]).is_some_and(|v| v >= 105.0));
        clear(names::CLUSTER_FILES);
        assert!(!crate::encode_text().contains("trove_cluster_files 12"));
    }
}
