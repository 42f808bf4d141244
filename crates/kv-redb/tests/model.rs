//! The model-based randomized test of the `kv-tests` crate (`kv_tests::model_test`) on [`RedbEngine`]:
//! snapshots are taken at `begin`; every round is a new file, reopened mid-round and at its end.
//!
//! Reproducible: the seed is printed; `KV_REDB_MODEL_SEED=<seed>` replays it and
//! `KV_REDB_MODEL_OPS=<n>` changes the number of operations per round.

use kv::KvEngine;
use kv_redb::RedbEngine;
use kv_tests::model_test::{self, ModelTest, SnapshotAt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_match_the_model() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let test = ModelTest { env: "KV_REDB_MODEL", snapshot_at: SnapshotAt::Begin };
    model_test::run(test, |round| {
        let path = dir.path().join(format!("round{round}.redb"));
        async move {
            let engine = RedbEngine::open(&path).unwrap_or_else(|err| panic!("open {}: {err}", path.display()));
            Box::new(engine) as Box<dyn KvEngine>
        }
    })
    .await;
}
