//! The [`kv_tests::conformance`] suite against [`kv_postgres::PostgresEngine`], unchanged: one test per
//! case, each on empty tables in a schema of its own on the test server (see
//! `kv_postgres::test_server`: `TROVE_TEST_POSTGRES_URL`, or a server this test binary starts).

use kv::KvEngine;
use std::sync::Arc;

async fn make_engine() -> Arc<dyn KvEngine> {
    Arc::new(kv_postgres::test_server::fresh_engine("conformance").await)
}

kv_tests::conformance_tests!(make_engine);
