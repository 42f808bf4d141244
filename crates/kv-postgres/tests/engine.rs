//! Engine-specific tests of [`PostgresEngine`]: durability across reconnecting, schema
//! migrations (idempotent, newer versions refused), errors naming the server, recovery after a
//! server restart, the pool's limit, the precision of conflict detection (which the conformance
//! suite does not require of every engine), and why the engine checks its reads at commit at all.

use kv::{KvEngine, KvError, END_OF_KEYSPACE};
use kv_postgres::test_server::{self, fresh_options, PrivateServer};
use kv_postgres::{PostgresEngine, PostgresOptions, SCHEMA_VERSION};
use kv_tests::conformance;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn connect(url: &str, options: PostgresOptions) -> PostgresEngine {
    PostgresEngine::connect(url, options).await.unwrap_or_else(|err| panic!("connect: {err}"))
}

async fn put_committed(engine: &dyn KvEngine, key: &[u8], value: &[u8]) {
    let mut txn = engine.begin().await.expect("begin");
    txn.put(key, value).await.expect("put");
    txn.commit().await.expect("commit");
}

async fn read(engine: &dyn KvEngine, key: &[u8]) -> Option<Vec<u8>> {
    let mut txn = engine.begin().await.expect("begin");
    txn.get(key).await.expect("get")
}

/// A raw client on the shared test server, for what the engine does not expose.
async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap_or_else(|err| panic!("raw connect: {err}"));
    tokio::spawn(connection);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_survives_reconnect() {
    let url = test_server::url();
    let options = fresh_options("durable");
    let engine: Arc<dyn KvEngine> = Arc::new(connect(url, options.clone()).await);
    conformance::commit_is_durable(engine, |old| async move {
        drop(old);
        let engine: Arc<dyn KvEngine> = Arc::new(connect(url, options).await);
        engine
    })
    .await;
}

#[tokio::test]
async fn describe_names_the_server_without_the_password() {
    let options = fresh_options("describe");
    let schema = options.schema.clone().expect("schema");
    let url = test_server::url();
    let engine = connect(url, options).await;
    let config: tokio_postgres::Config = url.parse().expect("url");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let described = engine.describe();
    assert!(described.starts_with("postgres "), "{described}");
    assert!(described.contains(&format!(":{port}/")), "{described}");
    assert!(described.ends_with(&format!("(schema {schema})")), "{described}");
    assert_eq!(engine.schema(), Some(schema.as_str()));
}

#[tokio::test]
async fn migrations_are_idempotent_and_recorded() {
    let url = test_server::url();
    let options = fresh_options("migrate");
    let schema = options.schema.clone().expect("schema");
    // Several engines opening the same new schema at once: one migrates, the others find it done.
    let opens = (0..4).map(|_| PostgresEngine::connect(url, options.clone()));
    for opened in futures_join_all(opens).await {
        opened.unwrap_or_else(|err| panic!("concurrent open: {err}"));
    }
    let client = raw_client(url).await;
    let rows =
        client.query(&format!("SELECT version FROM {schema}.trove_schema"), &[]).await.expect("read the version");
    let versions: Vec<i32> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(versions, vec![SCHEMA_VERSION], "one row with the current version");
    let engine = connect(url, options).await;
    put_committed(&engine, b"k", b"v").await;
    assert_eq!(read(&engine, b"k").await.as_deref(), Some(&b"v"[..]));
}

/// Runs futures concurrently (this crate does not depend on `futures`).
async fn futures_join_all<F: std::future::Future + Send + 'static>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for task in tasks {
        outputs.push(task.await.expect("task"));
    }
    outputs
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let url = test_server::url();
    let options = fresh_options("newer");
    let schema = options.schema.clone().expect("schema");
    drop(connect(url, options.clone()).await);
    let client = raw_client(url).await;
    client
        .batch_execute(&format!("UPDATE {schema}.trove_schema SET version = {}", SCHEMA_VERSION + 1))
        .await
        .expect("pretend a newer Trove migrated");
    let err = PostgresEngine::connect(url, options).await.expect_err("a newer schema must be refused");
    let message = err.to_string();
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    assert!(
        message.contains(&format!("schema version {}", SCHEMA_VERSION + 1)) && message.contains("upgrade Trove"),
        "{message}"
    );
}

#[tokio::test]
async fn unreachable_server_is_unavailable_naming_it() {
    // A port nothing listens on (bound, then released).
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("postgres://trove:secret@127.0.0.1:{port}/meta");
    let err = PostgresEngine::connect(&url, PostgresOptions::default()).await.expect_err("nothing listens there");
    let message = err.to_string();
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    assert!(message.contains(&format!("127.0.0.1:{port}/meta")), "{message}");
    assert!(!message.contains("secret"), "the password leaked: {message}");

    let err = PostgresEngine::connect("postgres://h/d?bogus_parameter=1", PostgresOptions::default())
        .await
        .expect_err("invalid URL");
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    let bad_schema = PostgresOptions { schema: Some("Robert'); DROP TABLE x;--".into()), ..PostgresOptions::default() };
    let err = PostgresEngine::connect(test_server::url(), bad_schema).await.expect_err("invalid schema name");
    assert!(err.to_string().contains("invalid PostgreSQL schema name"), "{err}");
}

/// A server restart breaks every pooled connection: transactions in flight fail (the commit
/// with `MaybeCommitted` or `Unavailable`, never a wrong success), and the engine recovers by
/// itself once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_fails_in_flight_transactions_then_recovers() {
    let server = PrivateServer::start();
    let options = PostgresOptions { schema: Some("restart".into()), ..PostgresOptions::default() };
    let engine = connect(&server.url, options).await;
    put_committed(&engine, b"before", b"1").await;
    // Leave several idle connections in the pool, and one transaction open on the server.
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut txn = engine.begin().await.expect("begin");
        txn.get(b"before").await.expect("get");
        open.push(txn);
    }
    let mut in_flight = open.pop().expect("a transaction");
    drop(open);
    in_flight.put(b"in flight", b"x").await.expect("put");

    server.stop();
    let mut txn = engine.begin().await.expect("begin");
    let err = txn.get(b"before").await.expect_err("the server is down");
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains(&engine.describe()), "{err}");
    match in_flight.commit().await {
        Err(KvError::Unavailable(_) | KvError::MaybeCommitted(_)) => {}
        other => panic!("commit while the server is down: {other:?}"),
    }

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            let mut txn = engine.begin().await?;
            let value = txn.get(b"before").await?;
            txn.put(b"after", b"2").await?;
            txn.commit().await?;
            Ok::<_, KvError>(value)
        }
        .await;
        match attempt {
            Ok(value) => {
                assert_eq!(value.as_deref(), Some(&b"1"[..]), "data lost by the restart");
                break;
            }
            Err(err) if Instant::now() < deadline => {
                println!("while the server comes back: {err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("the engine did not recover after the restart: {err}"),
        }
    }
    assert_eq!(read(&engine, b"after").await.as_deref(), Some(&b"2"[..]));
    assert_eq!(read(&engine, b"in flight").await, None, "an uncommitted write survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_limit_makes_transactions_wait_then_fail_naming_the_server() {
    let options = PostgresOptions { connections_max: 2, acquire_timeout_ms: 1000, ..fresh_options("pool") };
    let engine = connect(test_server::url(), options).await;
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut txn = engine.begin().await.expect("begin");
        txn.get(b"k").await.expect("get");
        holders.push(txn);
    }
    let mut third = engine.begin().await.expect("begin");
    let err = third.get(b"k").await.expect_err("no connection left");
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("all 2 connections") && message.contains(&engine.describe()), "{message}");
    // Ending a holder (dropped: rolled back on a task) frees its connection.
    drop(holders.pop());
    let mut fourth = engine.begin().await.expect("begin");
    assert_eq!(fourth.get(b"k").await.expect("get after a connection was freed"), None);
}

/// Keys are B-tree index entries in PostgreSQL: a key that does not fit one even compressed is
/// refused at commit with `TooLarge`, and nothing of its transaction is written; keys up to
/// [`kv_postgres::INDEX_KEY_BYTES_MAX`] always fit.
#[tokio::test]
async fn incompressible_long_keys_are_too_large() {
    let engine = test_server::fresh_engine("longkey").await;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    };
    let fits = noise(kv_postgres::INDEX_KEY_BYTES_MAX - 64);
    put_committed(&engine, &fits, b"fits").await;
    assert_eq!(read(&engine, &fits).await.as_deref(), Some(&b"fits"[..]));

    let too_long = noise(kv::KEY_BYTES_MAX);
    let mut txn = engine.begin().await.expect("begin");
    txn.put(b"companion", b"c").await.expect("put");
    txn.put(&too_long, b"v").await.expect("put is buffered");
    match txn.commit().await {
        Err(KvError::TooLarge { what, len, max }) => {
            assert!(what.starts_with("key"), "{what}");
            assert_eq!((len, max), (kv::KEY_BYTES_MAX, kv_postgres::INDEX_KEY_BYTES_MAX));
        }
        other => panic!("commit of an incompressible {}-byte key: {other:?}", kv::KEY_BYTES_MAX),
    }
    assert_eq!(read(&engine, b"companion").await, None, "a refused transaction wrote something");
}

/// The reason for checking reads at commit: PostgreSQL's serializable isolation alone lets a
/// transaction commit although a concurrent one inserted into a range it scanned and committed
/// first (it serializes the scanner before the inserter). The `kv` contract, and so this engine,
/// report that as a conflict (conformance case `phantom_insert_conflicts`).
#[tokio::test]
async fn serializable_alone_is_weaker_than_the_kv_contract() {
    let url = test_server::url();
    let schema = test_server::fresh_schema("ssi");
    let setup = raw_client(url).await;
    setup
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.kv (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
             INSERT INTO {schema}.kv VALUES ('dir/', 'd'), ('other', 'o')"
        ))
        .await
        .expect("setup");
    let scanner = raw_client(url).await;
    let inserter = raw_client(url).await;
    scanner
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT k FROM {schema}.kv WHERE k >= 'dir/' AND k < 'dir0'"
        ))
        .await
        .expect("scan");
    inserter
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL SERIALIZABLE; INSERT INTO {schema}.kv VALUES ('dir/file', 'f'); COMMIT"
        ))
        .await
        .expect("insert");
    let scanner_commit = scanner
        .batch_execute(&format!(
            "DELETE FROM {schema}.kv WHERE k = 'dir/'; INSERT INTO {schema}.kv VALUES ('log', 'removed'); COMMIT"
        ))
        .await;
    assert!(
        scanner_commit.is_ok(),
        "PostgreSQL refused the scanner ({scanner_commit:?}): if that is now reliable, the engine's \
         commit-time read check could be reconsidered"
    );

    // The same interleaving through the engine is a conflict.
    let engine = test_server::fresh_engine("ssi_engine").await;
    put_committed(&engine, b"dir/", b"d").await;
    let mut remover = engine.begin().await.expect("begin");
    let children = remover.scan(b"dir/", b"dir0", usize::MAX).await.expect("scan");
    assert_eq!(children.len(), 1);
    put_committed(&engine, b"dir/file", b"f").await;
    remover.delete(b"dir/").await.expect("delete");
    remover.put(b"log", b"removed").await.expect("put");
    assert!(matches!(remover.commit().await, Err(KvError::Conflict)));
}

/// Prints the cost of a durable commit (a read and a write) on this machine, for the record.
#[tokio::test]
async fn commit_latency() {
    let engine = test_server::fresh_engine("latency").await;
    let count = 50u32;
    let started = Instant::now();
    for i in 0..count {
        let mut txn = engine.begin().await.expect("begin");
        let key = format!("k{i}");
        txn.get(key.as_bytes()).await.expect("get");
        txn.put(key.as_bytes(), b"value").await.expect("put");
        txn.commit().await.expect("commit");
    }
    println!("read-modify-write transaction on {}: {:?} on average", engine.describe(), started.elapsed() / count);
}

// ---------------------------------------------------------------------------------------------
// Precision: the commit compares what was read, so unrelated commits never cause a conflict
// (in a single-task interleaving: with real concurrency PostgreSQL may add rare false ones).

#[tokio::test]
async fn disjoint_transactions_both_commit() {
    let engine = test_server::fresh_engine("disjoint").await;
    let engine = &engine;
    put_committed(engine, b"a", b"0").await;
    put_committed(engine, b"b", b"0").await;
    let mut t1 = engine.begin().await.expect("begin");
    let mut t2 = engine.begin().await.expect("begin");
    t1.get(b"a").await.expect("get");
    t1.scan(b"a", b"b", 10).await.expect("scan");
    t2.get(b"b").await.expect("get");
    t2.scan(b"b", b"c", 10).await.expect("scan");
    t1.put(b"a", b"1").await.expect("put");
    t2.put(b"b", b"1").await.expect("put");
    t1.commit().await.expect("t1 commits");
    t2.commit().await.expect("t2 must commit: it read nothing t1 wrote");
}

#[tokio::test]
async fn insert_past_a_limited_scan_does_not_conflict() {
    let engine = test_server::fresh_engine("pastlimit").await;
    let engine = &engine;
    for key in [&b"q/1"[..], b"q/2", b"q/3"] {
        put_committed(engine, key, b"").await;
    }
    let mut consumer = engine.begin().await.expect("begin");
    let first = consumer.scan(b"q/", b"q0", 2).await.expect("scan");
    assert_eq!(first.len(), 2);
    put_committed(engine, b"q/4", b"").await;
    put_committed(engine, b"q/3", b"changed").await;
    consumer.delete(b"q/1").await.expect("delete");
    consumer.commit().await.expect("changes past the scan's last returned key must not conflict");
}

#[tokio::test]
async fn value_changed_and_restored_does_not_conflict() {
    let engine = test_server::fresh_engine("restored").await;
    let engine = &engine;
    let big = vec![7u8; 100_000];
    put_committed(engine, b"small", b"s").await;
    put_committed(engine, b"big", &big).await;
    let mut txn = engine.begin().await.expect("begin");
    txn.get(b"small").await.expect("get");
    txn.get(b"big").await.expect("get");
    txn.scan(b"", END_OF_KEYSPACE, usize::MAX).await.expect("scan");
    put_committed(engine, b"small", b"other").await;
    put_committed(engine, b"small", b"s").await;
    put_committed(engine, b"big", b"other").await;
    put_committed(engine, b"big", &big).await;
    txn.put(b"out", b"1").await.expect("put");
    txn.commit().await.expect("reads that still hold must not conflict");
}

#[tokio::test]
async fn changed_large_value_conflicts() {
    let engine = test_server::fresh_engine("largechange").await;
    let engine = &engine;
    let mut big = vec![7u8; 100_000];
    put_committed(engine, b"big", &big).await;
    let mut txn = engine.begin().await.expect("begin");
    txn.get(b"big").await.expect("get");
    big[50_000] = 8;
    put_committed(engine, b"big", &big).await;
    txn.put(b"out", b"1").await.expect("put");
    assert!(matches!(txn.commit().await, Err(KvError::Conflict)));
}

#[tokio::test]
async fn own_writes_in_a_scanned_range_do_not_conflict() {
    let engine = test_server::fresh_engine("ownwrites").await;
    let engine = &engine;
    put_committed(engine, b"d/1", b"old").await;
    let mut txn = engine.begin().await.expect("begin");
    txn.put(b"d/1", b"mine").await.expect("put");
    let listed = txn.scan(b"d/", b"d0", 10).await.expect("scan");
    assert_eq!(listed, vec![(b"d/1".to_vec(), b"mine".to_vec())]);
    put_committed(engine, b"d/1", b"theirs").await;
    txn.commit().await.expect("a committed change under the transaction's own write did not affect its scan");
    assert_eq!(read(engine, b"d/1").await.as_deref(), Some(&b"mine"[..]));
}

/// Many tasks on few connections, each transaction reading two accounts and moving money between
/// them through `run_txn`: the total never changes (no lost update, no write skew).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_keep_the_total() {
    const ACCOUNTS: u64 = 6;
    const TASKS: u64 = 8;
    const TRANSFERS: u64 = 25;
    let options = PostgresOptions { connections_max: 4, ..fresh_options("transfers") };
    let engine: Arc<dyn KvEngine> = Arc::new(connect(test_server::url(), options).await);
    let mut txn = engine.begin().await.expect("begin");
    for account in 0..ACCOUNTS {
        txn.put(format!("acct/{account}").as_bytes(), &100u64.to_le_bytes()).await.expect("put");
    }
    txn.commit().await.expect("setup");
    let decode = |value: Option<Vec<u8>>| -> Result<u64, String> {
        let bytes = value.ok_or("account missing")?;
        let array: [u8; 8] = bytes.as_slice().try_into().map_err(|_| "bad balance")?;
        Ok(u64::from_le_bytes(array))
    };
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let engine = Arc::clone(&engine);
        tasks.push(tokio::spawn(async move {
            for i in 0..TRANSFERS {
                let from = format!("acct/{}", (task + i) % ACCOUNTS);
                let to = format!("acct/{}", (task * 3 + i * 5 + 1) % ACCOUNTS);
                if from == to {
                    continue;
                }
                kv::run_txn::<(), String, _>(engine.as_ref(), |txn| {
                    let (from, to) = (from.clone(), to.clone());
                    Box::pin(async move {
                        let a = decode(txn.get(from.as_bytes()).await?).map_err(kv::TxnError::Abort)?;
                        let b = decode(txn.get(to.as_bytes()).await?).map_err(kv::TxnError::Abort)?;
                        if a == 0 {
                            return Ok(());
                        }
                        txn.put(from.as_bytes(), &(a - 1).to_le_bytes()).await?;
                        txn.put(to.as_bytes(), &(b + 1).to_le_bytes()).await?;
                        Ok(())
                    })
                })
                .await
                .unwrap_or_else(|err| panic!("task {task} transfer {i}: {err:?}"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("transfer task");
    }
    let mut txn = engine.begin().await.expect("begin");
    let all = txn.scan(b"acct/", b"acct0", usize::MAX).await.expect("scan");
    let total: u64 = all.into_iter().map(|(_, value)| decode(Some(value)).expect("balance")).sum();
    assert_eq!(total, 100 * ACCOUNTS, "money was created or destroyed");
}
