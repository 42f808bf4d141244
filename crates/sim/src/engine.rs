//! The metadata engine of the simulation: the in-memory reference engine
//! (`kv_tests::memory`) behind a wrapper that makes commits take time, now and then a long
//! time, as a database under load or failing over does. Delays come from the simulation's
//! seed; every metadata server of the cluster shares the one engine, as they share a
//! PostgreSQL server.

use async_trait::async_trait;
use kv::{KeyValue, KvEngine, KvError, KvTxn};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

/// How slow commits are: each takes up to `commit_ms_max`; `stall_per_mille` of them stall
/// for up to `stall_ms_max` instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineFaults {
    pub commit_ms_max: u64,
    pub stall_per_mille: u32,
    pub stall_ms_max: u64,
}

impl EngineFaults {
    pub const NONE: EngineFaults = EngineFaults { commit_ms_max: 0, stall_per_mille: 0, stall_ms_max: 0 };
}

pub struct SlowEngine {
    inner: kv_tests::memory::MemoryEngine,
    trace: Arc<crate::trace::Trace>,
    rng: Mutex<StdRng>,
    faults: Mutex<EngineFaults>,
}

impl SlowEngine {
    pub fn new(seed: u64, trace: Arc<crate::trace::Trace>) -> Arc<SlowEngine> {
        Arc::new(SlowEngine {
            inner: kv_tests::memory::MemoryEngine::new(),
            trace,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            faults: Mutex::new(EngineFaults::NONE),
        })
    }

    pub fn set_faults(&self, faults: EngineFaults) {
        *self.faults.lock() = faults;
    }

    fn commit_delay(&self) -> Duration {
        let faults = *self.faults.lock();
        let mut rng = self.rng.lock();
        let ms = if faults.stall_per_mille > 0 && rng.gen_range(0..1000) < faults.stall_per_mille {
            let ms = rng.gen_range(0..=faults.stall_ms_max);
            self.trace.note(format_args!("engine: a transaction's commit stalls {ms} ms"));
            ms
        } else if faults.commit_ms_max > 0 {
            rng.gen_range(0..=faults.commit_ms_max)
        } else {
            0
        };
        Duration::from_millis(ms)
    }
}

#[async_trait]
impl KvEngine for SlowEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        let inner = self.inner.begin().await?;
        Ok(Box::new(SlowTxn { inner, delay: self.commit_delay() }))
    }

    fn describe(&self) -> String {
        format!("simulated ({})", self.inner.describe())
    }
}

struct SlowTxn {
    inner: Box<dyn KvTxn>,
    /// How long its commit takes (drawn at begin, so draws do not depend on what it does).
    delay: Duration,
}

#[async_trait]
impl KvTxn for SlowTxn {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(key).await
    }

    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.inner.put(key, value).await
    }

    async fn put_same_meaning(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.inner.put_same_meaning(key, value).await
    }

    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.inner.delete(key).await
    }

    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        self.inner.scan(start, end, limit).await
    }

    async fn commit(self: Box<Self>) -> Result<(), KvError> {
        // The time passes before the commit is applied: a slow database answers late, and
        // what committed meanwhile is validated against.
        tokio::time::sleep(self.delay).await;
        self.inner.commit().await
    }
}
