//! The crash test of the `kv-tests` crate (`kv_tests::crash_test`) on [`PostgresEngine`]: a child process
//! commits with two writers and is SIGKILLed at a random moment (usually with transactions open
//! and commits in flight on the server); a new connection must show every acknowledged commit
//! and nothing of a transaction that did not commit. Six rounds continue on the same tables.
//!
//! This kills the client, not the server: it checks that a commit the engine acknowledged is
//! committed, and that a client dying mid-transaction leaves nothing half-written (the server
//! rolls back the transactions of a connection that breaks). The server's own crash safety is
//! PostgreSQL's.
//!
//! Reproducible kill timing: the seed is printed; `KV_POSTGRES_CRASH_SEED=<seed>` replays it.

use kv::KvEngine;
use kv_postgres::{PostgresEngine, PostgresOptions};
use kv_tests::crash_test::{self, CrashTest};
use std::sync::Arc;

const ENV: &str = "KV_POSTGRES_CRASH";

/// An engine on the crash test's schema of the test server.
async fn open(schema: String) -> Arc<dyn KvEngine> {
    let options = PostgresOptions { schema: Some(schema.clone()), ..PostgresOptions::default() };
    let engine = PostgresEngine::connect(kv_postgres::test_server::url(), options)
        .await
        .unwrap_or_else(|err| panic!("connect to schema {schema}: {err}"));
    Arc::new(engine)
}

#[test]
fn kill_during_commits_loses_nothing_acknowledged() {
    // The writers' keys are disjoint, but PostgreSQL's serializable mode tracks reads by page,
    // so concurrent writers do conflict at times: their commits are retried.
    if crash_test::child(ENV, true, open) {
        return;
    }
    let test = CrashTest {
        env: ENV,
        test_name: "kill_during_commits_loses_nothing_acknowledged",
        target: kv_postgres::test_server::fresh_schema("crash"),
        child_env: vec![(kv_postgres::test_server::URL_ENV.to_string(), kv_postgres::test_server::url().to_string())],
        retry_conflicts: true,
    };
    crash_test::run(test, open);
}
