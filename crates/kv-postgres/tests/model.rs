//! The model-based randomized test of the `kv-tests` crate (`kv_tests::model_test`) on [`PostgresEngine`]:
//! snapshots are taken at a transaction's first read from the database, as PostgreSQL takes
//! them; every round is a fresh schema, reconnected (a new engine) mid-round and at its end.
//!
//! Reproducible: the seed is printed; `KV_POSTGRES_MODEL_SEED=<seed>` replays it and
//! `KV_POSTGRES_MODEL_OPS=<n>` changes the number of operations per round.

use kv::KvEngine;
use kv_postgres::PostgresEngine;
use kv_tests::model_test::{self, ModelTest, SnapshotAt, ROUNDS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_match_the_model() {
    let schemas: Vec<_> =
        (0..ROUNDS).map(|round| kv_postgres::test_server::fresh_options(&format!("model{round}"))).collect();
    let test = ModelTest { env: "KV_POSTGRES_MODEL", snapshot_at: SnapshotAt::FirstRead };
    model_test::run(test, |round| {
        let options = schemas[round as usize].clone();
        async move {
            let engine = PostgresEngine::connect(kv_postgres::test_server::url(), options)
                .await
                .unwrap_or_else(|err| panic!("connect: {err}"));
            Box::new(engine) as Box<dyn KvEngine>
        }
    })
    .await;
}
