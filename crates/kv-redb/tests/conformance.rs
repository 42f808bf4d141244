//! The [`kv_tests::conformance`] suite against [`RedbEngine`], one test per case, each on a fresh
//! database file in its own temporary directory (removed when the case's engine is dropped).

use async_trait::async_trait;
use kv::{KvEngine, KvError, KvTxn};
use kv_redb::RedbEngine;
use std::sync::Arc;
use tempfile::TempDir;

/// A [`RedbEngine`] that owns the temporary directory of its file.
struct TempEngine {
    engine: RedbEngine,
    _dir: TempDir,
}

#[async_trait]
impl KvEngine for TempEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        self.engine.begin().await
    }

    fn describe(&self) -> String {
        self.engine.describe()
    }
}

async fn make_engine() -> Arc<dyn KvEngine> {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let engine = RedbEngine::open(dir.path().join("meta.redb")).expect("open a fresh redb database");
    Arc::new(TempEngine { engine, _dir: dir })
}

kv_tests::conformance_tests!(make_engine);
