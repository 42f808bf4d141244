//! The metadata service on the PostgreSQL engine: the namespace cases shared with the redb
//! tests (`common/cases.rs`: create and lookup, renames, readdir paging, idempotent retries, and
//! the concurrency cases whose correctness rests on the engine's conflict detection: one winner
//! among exclusive creates, rmdir racing a create, renames atomic to readers, crossing moves
//! never making a cycle), plus two services sharing one database as two metadata servers would.
//!
//! The server is `kv_postgres::test_server`'s: `TROVE_TEST_POSTGRES_URL`, or one this test binary
//! starts with `scripts/postgres.sh`. Each test gets empty tables in a schema of its own.

mod common;

use common::*;
use meta::MetaService;
use std::sync::Arc;
use wire::{ErrorCode, MetaOp, ROOT_INO};

#[tokio::test]
async fn readdir_pages_through_thousands_of_entries() {
    cases::readdir_pages_through_entries(&env_postgres().await, 3_000, 1_000).await;
}

#[tokio::test]
async fn retried_request_ids_apply_once() {
    cases::retried_request_ids_apply_once(&env_postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_exclusive_creates_have_one_winner() {
    cases::concurrent_exclusive_creates_have_one_winner(&env_postgres().await).await;
}

/// Creates in many directories at once, from several tasks: all succeed (conflicts, including
/// PostgreSQL's false ones between neighbouring keys, are retried inside the service).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_in_many_directories_all_succeed() {
    cases::concurrent_creates_in_many_directories_all_succeed(&env_postgres().await).await;
}

/// rmdir checks emptiness with a scan; a create racing it must either land before (rmdir then
/// fails NotEmpty) or fail because the directory is gone, never leave an entry in a removed
/// directory. This is the phantom case PostgreSQL's serializable mode alone does not catch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_racing_a_create_never_orphans_an_entry() {
    cases::rmdir_racing_a_create_never_orphans_an_entry(&env_postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_are_atomic_to_readers() {
    cases::renames_are_atomic_to_readers(&env_postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_crossing_moves_never_make_a_cycle() {
    cases::concurrent_crossing_moves_never_make_a_cycle(&env_postgres().await).await;
}

/// Two services on one database through two engines (two connection pools), as two metadata
/// servers: both see one namespace and hand out distinct inode numbers.
#[tokio::test]
async fn two_servers_share_one_database() {
    let options = kv_postgres::test_server::fresh_options("two");
    let mut services = Vec::new();
    for _ in 0..2 {
        let engine = kv_postgres::PostgresEngine::connect(kv_postgres::test_server::url(), options.clone())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let engine: Arc<dyn kv::KvEngine> = Arc::new(engine);
        services.push(MetaService::new(engine, test_options()).await.unwrap_or_else(|e| panic!("{e}")));
    }
    let a = create(&services[0], ROOT_INO, "from-a").await;
    let b = create(&services[1], ROOT_INO, "from-b").await;
    assert_ne!(a.ino, b.ino);
    let expected = vec!["from-a".to_string(), "from-b".to_string()];
    assert_eq!(list(&services[0], ROOT_INO).await, expected);
    assert_eq!(list(&services[1], ROOT_INO).await, expected);
    let mkdir_a = MetaOp::Mkdir { parent: ROOT_INO, name: "from-a".into(), mode: 0o755, uid: 0, gid: 0 };
    err(&services[1], mkdir_a, ErrorCode::Exists).await;
}

#[tokio::test]
async fn create_lookup_getattr_and_inheritance() {
    cases::create_lookup_getattr_and_inheritance(&env_postgres().await).await;
}

#[tokio::test]
async fn rename_within_and_across_directories() {
    cases::rename_within_and_across_directories(&env_postgres().await).await;
}
