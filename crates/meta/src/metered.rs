//! What the metadata service records into the process's metrics: every call it answers over the
//! network (count, errors and latency per `MetaOp`, protocol `meta`), and every commit of its
//! engine (outcome and latency), measured by wrapping the handler and the engine so that the
//! namespace and cluster code stay as they are.

use crate::MetaService;
use async_trait::async_trait;
use bytes::Bytes;
use kv::{KeyValue, KvEngine, KvError, KvTxn};
use metrics::histogram::Histogram;
use metrics::ops::OpTable;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use wire::{MetaCall, MetaOp, MetaReply, MetaResult};

/// The `meta` protocol's operations.
pub fn table() -> &'static OpTable {
    static TABLE: OnceLock<&'static OpTable> = OnceLock::new();
    TABLE.get_or_init(|| metrics::ops::table("meta", &MetaOp::NAMES))
}

/// The metadata service as served over the network, recording each call.
pub struct MeteredService(pub Arc<MetaService>);

#[async_trait]
impl wire::Handler for MeteredService {
    type Req = MetaCall;
    type Reply = MetaReply;

    async fn handle(&self, req: MetaCall, _data: Bytes) -> (MetaResult, Bytes) {
        let t = table();
        let started = t.start();
        let op = req.op.index();
        let result = self.0.call_from_network(req).await;
        t.done(op, started, result.is_ok());
        (result, Bytes::new())
    }
}

/// Commit outcomes, as the `result` label spells them.
const RESULTS: [&str; 6] = ["ok", "conflict", "too_old", "maybe_committed", "unavailable", "error"];

struct KvStats {
    commits: [std::sync::atomic::AtomicU64; 6],
    latency: Histogram,
}

fn kv_stats() -> &'static KvStats {
    static STATS: OnceLock<KvStats> = OnceLock::new();
    STATS.get_or_init(|| {
        metrics::gauges::register_source(|out| {
            let s = kv_stats();
            for (i, result) in RESULTS.iter().enumerate() {
                let v = s.commits[i].load(std::sync::atomic::Ordering::Relaxed);
                out.push(metrics::gauges::Sample::new(metrics::names::KV_COMMITS, &[("result", result)], v as f64));
            }
        });
        KvStats { commits: Default::default(), latency: Histogram::new() }
    })
}

/// Publishes the commit latency histogram (once per process).
fn publish_latency() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| metrics::histogram::publish(metrics::names::KV_COMMIT_DURATION, &kv_stats().latency));
}

/// The engine, with each commit's outcome and latency recorded.
pub struct MeteredEngine {
    inner: Arc<dyn KvEngine>,
}

impl MeteredEngine {
    pub fn new(inner: Arc<dyn KvEngine>) -> MeteredEngine {
        publish_latency();
        MeteredEngine { inner }
    }
}

#[async_trait]
impl KvEngine for MeteredEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        let inner = self.inner.begin().await?;
        if !metrics::enabled() {
            return Ok(inner);
        }
        Ok(Box::new(MeteredTxn { inner }))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

struct MeteredTxn {
    inner: Box<dyn KvTxn>,
}

#[async_trait]
impl KvTxn for MeteredTxn {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(key).await
    }

    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.inner.put(key, value).await
    }

    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.inner.delete(key).await
    }

    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        self.inner.scan(start, end, limit).await
    }

    async fn commit(self: Box<Self>) -> Result<(), KvError> {
        let started = Instant::now();
        let result = self.inner.commit().await;
        let s = kv_stats();
        s.latency.observe_since(started);
        let i = match &result {
            Ok(()) => 0,
            Err(KvError::Conflict) => 1,
            Err(KvError::TooOld) => 2,
            Err(KvError::MaybeCommitted(_)) => 3,
            Err(KvError::Unavailable(_)) => 4,
            Err(_) => 5,
        };
        s.commits[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn commits_are_counted_by_outcome() {
        metrics::enable();
        let engine = MeteredEngine::new(Arc::new(kv_tests::memory::MemoryEngine::new()));
        let before = kv_stats().commits[0].load(std::sync::atomic::Ordering::Relaxed);
        let mut a = engine.begin().await.expect("begins");
        let mut b = engine.begin().await.expect("begins");
        a.get(b"k").await.expect("reads");
        b.get(b"k").await.expect("reads");
        a.put(b"k", b"1").await.expect("writes");
        b.put(b"k", b"2").await.expect("writes");
        a.commit().await.expect("the first commits");
        assert!(matches!(b.commit().await, Err(KvError::Conflict)));
        let s = kv_stats();
        assert!(s.commits[0].load(std::sync::atomic::Ordering::Relaxed) > before);
        assert!(s.commits[1].load(std::sync::atomic::Ordering::Relaxed) >= 1);
        let text = metrics::encode_text();
        assert!(text.contains("trove_kv_commits_total{result=\"conflict\"}"), "{text}");
        assert!(text.contains("trove_kv_commit_duration_seconds_count"), "{text}");
    }
}
