//! The conformance suite: the contract of [`KvEngine`] written once as executable cases, run
//! against every engine (redb, the in-memory reference engine, a future PostgreSQL engine).
//!
//! Each case is a `pub async fn` taking a fresh, empty engine, so a failure names the case. They
//! panic (with a message saying what was expected) on any violation; outcomes are always read
//! from the engine, never assumed. Three ways to run them:
//! - [`conformance_tests!`](crate::conformance_tests) expands to one `#[tokio::test]` per case in
//!   the engine's own test file (the calling crate needs `tokio` with the `macros` and
//!   `rt-multi-thread` features);
//! - [`run_all`] runs every case in turn, reports each one, and panics at the end naming the
//!   cases that failed;
//! - [`CASES`] lists them by name for custom runners.
//!
//! Durability cannot be checked with a factory that only makes fresh engines, so
//! [`commit_is_durable`] is separate and takes a `reopen` closure.
//!
//! What the suite deliberately does not require, so that engines with coarser conflict
//! detection (for example PostgreSQL's serializable snapshot isolation) can pass: that
//! transactions touching disjoint keys both commit, or that blind writes (writes without reads)
//! of the same key both commit. Engines may test such precision in their own crates.
//!
//! The suite uses only tokio and the trait. Every case must finish quickly on any engine;
//! together they make a few hundred commits.

use kv::{
    prefix_end, run_txn, KeyValue, KvEngine, KvError, KvTxn, TxnError, END_OF_KEYSPACE, KEY_BYTES_MAX, VALUE_BYTES_MAX,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed conformance case, as listed in [`CASES`].
pub type CaseFn = fn(Arc<dyn KvEngine>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The cases of the suite, in one place, handed to `$callback` (a macro of this crate).
#[doc(hidden)]
#[macro_export]
macro_rules! __kv_conformance_case_list {
    ($callback:ident ! ($($prefix:tt)*)) => {
        $crate::$callback!($($prefix)* ;
            get_put_delete,
            read_your_own_writes,
            overwrite,
            delete_absent_key,
            scan_order_and_bounds,
            scan_limit,
            scan_binary_keys,
            scan_prefix_end,
            scan_merges_own_writes,
            uncommitted_writes_invisible,
            snapshot_reads_stable,
            lost_update_conflicts,
            write_skew_prevented,
            phantom_insert_conflicts,
            phantom_delete_conflicts,
            phantom_within_limit_conflicts,
            absent_key_read_conflicts,
            read_only_never_conflicts,
            conflicting_txn_writes_nothing,
            dropped_txn_writes_nothing,
            blind_writes_serialize,
            run_txn_counter,
            run_txn_abort_writes_nothing,
            size_limits,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kv_conformance_cases_const {
    (; $($case:ident),* $(,)?) => {
        /// Every case of the suite with its name, in the order [`run_all`] runs them.
        pub const CASES: &[(&str, CaseFn)] = &[$((stringify!($case), |engine| Box::pin($case(engine)))),*];
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kv_conformance_tests_expand {
    ($make_engine:expr ; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let engine: ::std::sync::Arc<dyn $crate::kv::KvEngine> = ($make_engine)().await;
                $crate::conformance::$case(engine).await;
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per conformance case, each calling `$make_engine().await`
/// (which must return `Arc<dyn KvEngine>`, a fresh empty engine) and running the case on it.
///
/// ```text
/// async fn make_engine() -> Arc<dyn KvEngine> { ... }
/// kv_tests::conformance_tests!(make_engine);
/// ```
///
/// (`crates/kv-redb/tests/conformance.rs` and `crates/kv-postgres/tests/conformance.rs` are
/// complete uses.)
#[macro_export]
macro_rules! conformance_tests {
    ($make_engine:expr) => {
        $crate::__kv_conformance_case_list!(__kv_conformance_tests_expand!($make_engine));
    };
}

crate::__kv_conformance_case_list!(__kv_conformance_cases_const!());

/// Runs every case of [`CASES`], each on a fresh engine from `make_engine`, printing one line
/// per case, and panics at the end naming every case that failed. Must run inside a tokio
/// runtime (cases are spawned as tasks so that one failure does not hide the others).
pub async fn run_all<F, Fut>(mut make_engine: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Arc<dyn KvEngine>>,
{
    let mut failed = Vec::new();
    for (name, case) in CASES {
        let engine = make_engine().await;
        let described = engine.describe();
        match tokio::spawn(case(engine)).await {
            Ok(()) => println!("conformance {name} on {described} ... ok"),
            Err(err) => {
                println!("conformance {name} on {described} ... FAILED: {err}");
                failed.push(*name);
            }
        }
    }
    assert!(failed.is_empty(), "{} of {} conformance cases failed: {failed:?}", failed.len(), CASES.len());
}

// ---------------------------------------------------------------------------------------------
// Helpers. They panic with the operation and the error, so a failing case says what broke.

async fn begin(engine: &dyn KvEngine) -> Box<dyn KvTxn> {
    engine.begin().await.unwrap_or_else(|err| panic!("begin failed: {err}"))
}

async fn get(txn: &mut dyn KvTxn, key: &[u8]) -> Option<Vec<u8>> {
    txn.get(key).await.unwrap_or_else(|err| panic!("get {key:?} failed: {err}"))
}

async fn put(txn: &mut dyn KvTxn, key: &[u8], value: &[u8]) {
    txn.put(key, value).await.unwrap_or_else(|err| panic!("put {key:?} failed: {err}"))
}

async fn delete(txn: &mut dyn KvTxn, key: &[u8]) {
    txn.delete(key).await.unwrap_or_else(|err| panic!("delete {key:?} failed: {err}"))
}

async fn scan(txn: &mut dyn KvTxn, start: &[u8], end: &[u8], limit: usize) -> Vec<KeyValue> {
    txn.scan(start, end, limit)
        .await
        .unwrap_or_else(|err| panic!("scan {start:?}..{end:?} limit {limit} failed: {err}"))
}

async fn commit(txn: Box<dyn KvTxn>, what: &str) {
    txn.commit().await.unwrap_or_else(|err| panic!("commit of {what} failed: {err}"))
}

/// Commits `pairs` in one transaction.
async fn put_all(engine: &dyn KvEngine, pairs: &[(&[u8], &[u8])]) {
    let mut txn = begin(engine).await;
    for (key, value) in pairs {
        put(txn.as_mut(), key, value).await;
    }
    commit(txn, "setup writes").await;
}

/// Reads one key in a fresh transaction.
async fn read(engine: &dyn KvEngine, key: &[u8]) -> Option<Vec<u8>> {
    let mut txn = begin(engine).await;
    get(txn.as_mut(), key).await
}

/// Every committed pair, read in a fresh transaction.
async fn read_all(engine: &dyn KvEngine) -> Vec<KeyValue> {
    let mut txn = begin(engine).await;
    scan(txn.as_mut(), &[], END_OF_KEYSPACE, usize::MAX).await
}

fn pairs(items: &[(&[u8], &[u8])]) -> Vec<KeyValue> {
    items.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

fn keys(pairs: &[KeyValue]) -> Vec<Vec<u8>> {
    pairs.iter().map(|(k, _)| k.clone()).collect()
}

fn assert_conflict(result: Result<(), KvError>, what: &str) {
    match result {
        Err(KvError::Conflict) => {}
        Ok(()) => panic!("{what}: commit succeeded, expected KvError::Conflict"),
        Err(other) => panic!("{what}: commit failed with {other:?}, expected KvError::Conflict"),
    }
}

// ---------------------------------------------------------------------------------------------
// Basic reads and writes.

/// Put, get, delete and overwrite across transactions; `describe` names the engine.
pub async fn get_put_delete(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    assert!(!engine.describe().trim().is_empty(), "describe() is empty");
    assert_eq!(read(engine, b"k").await, None, "a fresh engine must be empty");
    assert_eq!(read_all(engine).await, Vec::<KeyValue>::new(), "a fresh engine must be empty");

    put_all(engine, &[(b"k", b"v1"), (b"other", b"o")]).await;
    assert_eq!(read(engine, b"k").await.as_deref(), Some(&b"v1"[..]));
    assert_eq!(read(engine, b"other").await.as_deref(), Some(&b"o"[..]));
    assert_eq!(read(engine, b"k2").await, None, "a key never written must be absent");

    let mut txn = begin(engine).await;
    delete(txn.as_mut(), b"k").await;
    commit(txn, "delete").await;
    assert_eq!(read(engine, b"k").await, None, "deleted key must be absent");
    assert_eq!(read(engine, b"other").await.as_deref(), Some(&b"o"[..]), "delete removed another key");

    put_all(engine, &[(b"k", b"again")]).await;
    assert_eq!(read(engine, b"k").await.as_deref(), Some(&b"again"[..]), "re-put after delete");
    put_all(engine, &[(b"empty", b"")]).await;
    assert_eq!(read(engine, b"empty").await, Some(Vec::new()), "an empty value is a present value");
}

/// A transaction sees its own buffered puts and deletes in gets, over committed data.
pub async fn read_your_own_writes(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"a", b"committed-a"), (b"b", b"committed-b")]).await;

    let mut txn = begin(engine).await;
    put(txn.as_mut(), b"new", b"n").await;
    assert_eq!(get(txn.as_mut(), b"new").await.as_deref(), Some(&b"n"[..]), "own put not visible");
    put(txn.as_mut(), b"a", b"mine").await;
    assert_eq!(get(txn.as_mut(), b"a").await.as_deref(), Some(&b"mine"[..]), "own overwrite not visible");
    delete(txn.as_mut(), b"b").await;
    assert_eq!(get(txn.as_mut(), b"b").await, None, "own delete not visible");
    put(txn.as_mut(), b"b", b"back").await;
    assert_eq!(get(txn.as_mut(), b"b").await.as_deref(), Some(&b"back"[..]), "put after own delete");
    delete(txn.as_mut(), b"new").await;
    assert_eq!(get(txn.as_mut(), b"new").await, None, "delete of own put not visible");
    commit(txn, "read-your-writes transaction").await;

    assert_eq!(read(engine, b"a").await.as_deref(), Some(&b"mine"[..]));
    assert_eq!(read(engine, b"b").await.as_deref(), Some(&b"back"[..]));
    assert_eq!(read(engine, b"new").await, None, "key put then deleted in one transaction must be absent");
}

/// The last write of a key wins, within a transaction and across transactions.
pub async fn overwrite(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"k", b"first")]).await;
    put_all(engine, &[(b"k", b"second, longer than the first")]).await;
    assert_eq!(read(engine, b"k").await.as_deref(), Some(&b"second, longer than the first"[..]));
    put_all(engine, &[(b"k", b"3")]).await;
    assert_eq!(read(engine, b"k").await.as_deref(), Some(&b"3"[..]), "shorter overwrite");

    let mut txn = begin(engine).await;
    put(txn.as_mut(), b"k", b"x").await;
    put(txn.as_mut(), b"k", b"y").await;
    put(txn.as_mut(), b"k", b"z").await;
    commit(txn, "repeated overwrite").await;
    assert_eq!(read(engine, b"k").await.as_deref(), Some(&b"z"[..]), "last write in a transaction wins");
    assert_eq!(read_all(engine).await.len(), 1, "overwrites must not duplicate keys");
}

/// Deleting an absent key is not an error and changes nothing.
pub async fn delete_absent_key(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"present", b"p")]).await;
    let mut txn = begin(engine).await;
    delete(txn.as_mut(), b"absent").await;
    delete(txn.as_mut(), b"absent").await;
    assert_eq!(get(txn.as_mut(), b"absent").await, None);
    commit(txn, "delete of an absent key").await;
    assert_eq!(read_all(engine).await, pairs(&[(b"present", b"p")]));
}

// ---------------------------------------------------------------------------------------------
// Scans.

/// Scans return ascending keys, start inclusive, end exclusive; empty and inverted ranges are
/// empty.
pub async fn scan_order_and_bounds(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    // Written out of order, in two transactions.
    put_all(engine, &[(b"d", b"4"), (b"b", b"2"), (b"f", b"6")]).await;
    put_all(engine, &[(b"a", b"1"), (b"e", b"5"), (b"c", b"3")]).await;

    let mut txn = begin(engine).await;
    let all = scan(txn.as_mut(), b"", END_OF_KEYSPACE, usize::MAX).await;
    assert_eq!(
        all,
        pairs(&[(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4"), (b"e", b"5"), (b"f", b"6")]),
        "full scan"
    );
    let middle = scan(txn.as_mut(), b"b", b"e", usize::MAX).await;
    assert_eq!(keys(&middle), vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()], "start inclusive, end exclusive");
    let between = scan(txn.as_mut(), b"bb", b"dd", usize::MAX).await;
    assert_eq!(keys(&between), vec![b"c".to_vec(), b"d".to_vec()], "bounds that are not keys");
    assert_eq!(scan(txn.as_mut(), b"c", b"c", usize::MAX).await, vec![], "start == end is empty");
    assert_eq!(scan(txn.as_mut(), b"e", b"b", usize::MAX).await, vec![], "start > end is empty");
    assert_eq!(scan(txn.as_mut(), b"g", END_OF_KEYSPACE, usize::MAX).await, vec![], "range past the last key");
    assert_eq!(scan(txn.as_mut(), b"", b"a", usize::MAX).await, vec![], "range before the first key");
    assert_eq!(keys(&scan(txn.as_mut(), b"f", b"f\x00", 10).await), vec![b"f".to_vec()], "single-key range");
}

/// `limit` returns the first pairs of the range, never more than `limit`.
pub async fn scan_limit(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    let items: Vec<(Vec<u8>, Vec<u8>)> = (0..10u8).map(|i| (vec![b'k', b'0' + i], vec![i])).collect();
    let refs: Vec<(&[u8], &[u8])> = items.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
    put_all(engine, &refs).await;

    let mut txn = begin(engine).await;
    assert_eq!(scan(txn.as_mut(), b"k", b"l", 0).await, vec![], "limit 0");
    assert_eq!(scan(txn.as_mut(), b"k", b"l", 1).await, vec![items[0].clone()], "limit 1");
    assert_eq!(scan(txn.as_mut(), b"k", b"l", 3).await, items[..3].to_vec(), "limit 3");
    assert_eq!(scan(txn.as_mut(), b"k3", b"l", 2).await, items[3..5].to_vec(), "limit 2 from the middle");
    assert_eq!(scan(txn.as_mut(), b"k", b"l", 10).await, items.clone(), "limit equal to the count");
    assert_eq!(scan(txn.as_mut(), b"k", b"l", 1000).await, items.clone(), "limit above the count");
    assert_eq!(scan(txn.as_mut(), b"k", b"k5", 1000).await, items[..5].to_vec(), "end before the limit");
}

/// Keys are compared as unsigned bytes: 0x00 and 0xff bytes, the empty key, and keys made of
/// 0xff up to [`KEY_BYTES_MAX`] long all sort correctly and are all below [`END_OF_KEYSPACE`].
pub async fn scan_binary_keys(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    let longest_ff = vec![0xffu8; KEY_BYTES_MAX];
    let mut expected: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x00],
        vec![0x00, 0x00],
        vec![0x00, 0x01],
        vec![0x01],
        b"a".to_vec(),
        b"a\x00".to_vec(),
        b"a\x00\xff".to_vec(),
        b"a\x01".to_vec(),
        b"a\xff".to_vec(),
        b"ab".to_vec(),
        vec![0x7f],
        vec![0x80],
        vec![0x80, 0x00],
        vec![0xfe, 0xff],
        vec![0xff],
        vec![0xff, 0x00],
        vec![0xff, 0xff],
        vec![0xff; 17],
        longest_ff.clone(),
    ];
    // Insert in a scrambled order.
    let mut txn = begin(engine).await;
    for i in 0..expected.len() {
        let key = &expected[(i * 7) % expected.len()];
        put(txn.as_mut(), key, &[key.len() as u8]).await;
    }
    commit(txn, "binary keys").await;
    expected.sort();

    let all = read_all(engine).await;
    assert_eq!(keys(&all), expected, "full scan order of binary keys");
    for (key, value) in &all {
        assert_eq!(value, &vec![key.len() as u8], "value of key {key:?}");
    }

    let mut txn = begin(engine).await;
    assert_eq!(get(txn.as_mut(), &[]).await, Some(vec![0]), "the empty key");
    assert_eq!(get(txn.as_mut(), &longest_ff).await, Some(vec![0]), "the longest all-0xff key");
    let from_zero = scan(txn.as_mut(), &[0x00], &[0x01], usize::MAX).await;
    assert_eq!(keys(&from_zero), vec![vec![0x00], vec![0x00, 0x00], vec![0x00, 0x01]], "range [00, 01)");
    let after_empty = scan(txn.as_mut(), &[0x00], END_OF_KEYSPACE, 1).await;
    assert_eq!(keys(&after_empty), vec![vec![0x00]], "the empty key is below [00]");
    let high = scan(txn.as_mut(), &[0xff], END_OF_KEYSPACE, usize::MAX).await;
    assert_eq!(
        keys(&high),
        vec![vec![0xff], vec![0xff, 0x00], vec![0xff, 0xff], vec![0xff; 17], longest_ff.clone()],
        "keys starting with 0xff, up to the end of the keyspace"
    );
    let below_ff = scan(txn.as_mut(), &[0x80], &[0xff], usize::MAX).await;
    assert_eq!(keys(&below_ff), vec![vec![0x80], vec![0x80, 0x00], vec![0xfe, 0xff]], "bytes >= 0x80 are high");
    let a_range = scan(txn.as_mut(), b"a", b"a\xff", usize::MAX).await;
    assert_eq!(
        keys(&a_range),
        vec![b"a".to_vec(), b"a\x00".to_vec(), b"a\x00\xff".to_vec(), b"a\x01".to_vec(), b"ab".to_vec()],
        "end exclusive with binary bounds (a\\xff itself excluded)"
    );
}

/// `prefix_end` bounds exactly the keys starting with a prefix, including prefixes ending in
/// 0xff and the all-0xff prefix.
pub async fn scan_prefix_end(engine: Arc<dyn KvEngine>) {
    assert_eq!(prefix_end(b"dir/"), b"dir0".to_vec());
    assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
    assert_eq!(prefix_end(b"a\xff\xff"), b"b".to_vec());
    assert_eq!(prefix_end(&[0xff, 0xff]), END_OF_KEYSPACE.to_vec());
    assert_eq!(prefix_end(&[]), END_OF_KEYSPACE.to_vec());
    assert!(END_OF_KEYSPACE > &[0xffu8; KEY_BYTES_MAX][..], "END_OF_KEYSPACE must be above every key");

    let engine = engine.as_ref();
    let keys_written: Vec<&[u8]> = vec![
        b"dir",
        b"dir/",
        b"dir/a",
        b"dir/a/deep",
        b"dir/\xff",
        b"dir0",
        b"dir.",
        b"a\xfe",
        b"a\xff",
        b"a\xff\x00",
        b"a\xff\xff\xff",
        b"b",
        b"\xff\xff",
        b"\xff\xff\x00",
        b"\xff\xff\xff",
    ];
    let mut txn = begin(engine).await;
    for key in &keys_written {
        put(txn.as_mut(), key, b"v").await;
    }
    commit(txn, "prefix keys").await;

    let mut txn = begin(engine).await;
    for prefix in [&b"dir/"[..], b"a\xff", b"\xff\xff", b"dir", b"zzz"] {
        let mut expected: Vec<Vec<u8>> =
            keys_written.iter().filter(|k| k.starts_with(prefix)).map(|k| k.to_vec()).collect();
        expected.sort();
        let found = scan(txn.as_mut(), prefix, &prefix_end(prefix), usize::MAX).await;
        assert_eq!(keys(&found), expected, "prefix scan of {prefix:?}");
    }
}

/// Scans merge the transaction's buffered writes with the snapshot: buffered puts appear in
/// order, buffered deletes hide committed keys, and `limit` counts the merged result.
pub async fn scan_merges_own_writes(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"k1", b"c1"), (b"k2", b"c2"), (b"k3", b"c3"), (b"k4", b"c4"), (b"k5", b"c5")]).await;

    let mut txn = begin(engine).await;
    delete(txn.as_mut(), b"k1").await;
    delete(txn.as_mut(), b"k2").await;
    put(txn.as_mut(), b"k3", b"mine3").await;
    put(txn.as_mut(), b"k35", b"new35").await;
    put(txn.as_mut(), b"k0", b"new0").await;
    put(txn.as_mut(), b"k9", b"outside range").await;
    delete(txn.as_mut(), b"k6").await; // absent key: no effect

    let merged = scan(txn.as_mut(), b"k", b"k9", usize::MAX).await;
    assert_eq!(
        merged,
        pairs(&[(b"k0", b"new0"), (b"k3", b"mine3"), (b"k35", b"new35"), (b"k4", b"c4"), (b"k5", b"c5")]),
        "merged scan"
    );
    let limited = scan(txn.as_mut(), b"k1", b"k9", 2).await;
    assert_eq!(limited, pairs(&[(b"k3", b"mine3"), (b"k35", b"new35")]), "limit after deleted keys");
    let one = scan(txn.as_mut(), b"k36", b"k9", 1).await;
    assert_eq!(one, pairs(&[(b"k4", b"c4")]), "limit 1 after buffered keys");
    delete(txn.as_mut(), b"k4").await;
    delete(txn.as_mut(), b"k5").await;
    delete(txn.as_mut(), b"k3").await;
    delete(txn.as_mut(), b"k35").await;
    let only_new = scan(txn.as_mut(), b"k", b"k9", usize::MAX).await;
    assert_eq!(only_new, pairs(&[(b"k0", b"new0")]), "everything else deleted in the transaction");
    drop(txn);

    // The dropped transaction changed nothing.
    let all = read_all(engine).await;
    assert_eq!(keys(&all), vec![b"k1".to_vec(), b"k2".to_vec(), b"k3".to_vec(), b"k4".to_vec(), b"k5".to_vec()]);
}

// ---------------------------------------------------------------------------------------------
// Isolation.

/// Uncommitted writes are invisible to other transactions, and a commit is invisible to a
/// transaction that started before it.
pub async fn uncommitted_writes_invisible(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"existing", b"old")]).await;

    let mut writer = begin(engine).await;
    put(writer.as_mut(), b"k", b"uncommitted").await;
    put(writer.as_mut(), b"existing", b"uncommitted").await;

    let mut before = begin(engine).await;
    assert_eq!(get(before.as_mut(), b"k").await, None, "uncommitted put visible to another transaction");
    assert_eq!(get(before.as_mut(), b"existing").await.as_deref(), Some(&b"old"[..]));
    assert_eq!(keys(&scan(before.as_mut(), b"", END_OF_KEYSPACE, usize::MAX).await), vec![b"existing".to_vec()]);

    commit(writer, "writer").await;
    assert_eq!(get(before.as_mut(), b"k").await, None, "commit after begin visible to an older transaction");
    assert_eq!(get(before.as_mut(), b"existing").await.as_deref(), Some(&b"old"[..]), "snapshot changed");
    drop(before);

    let mut after = begin(engine).await;
    assert_eq!(get(after.as_mut(), b"k").await.as_deref(), Some(&b"uncommitted"[..]), "commit not visible");
    assert_eq!(get(after.as_mut(), b"existing").await.as_deref(), Some(&b"uncommitted"[..]));
}

/// Repeated reads and scans in one transaction return the same data while other transactions
/// commit changes (including to keys the reader will only read later).
pub async fn snapshot_reads_stable(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"acct/a", b"50"), (b"acct/b", b"50"), (b"later", b"v0")]).await;

    let mut reader = begin(engine).await;
    let first_a = get(reader.as_mut(), b"acct/a").await;
    let first_scan = scan(reader.as_mut(), b"acct/", &prefix_end(b"acct/"), usize::MAX).await;

    // A transfer plus a new account, committed while the reader is open.
    let mut writer = begin(engine).await;
    put(writer.as_mut(), b"acct/a", b"20").await;
    put(writer.as_mut(), b"acct/b", b"80").await;
    put(writer.as_mut(), b"acct/c", b"0").await;
    put(writer.as_mut(), b"later", b"v1").await;
    commit(writer, "transfer").await;
    let mut deleter = begin(engine).await;
    delete(deleter.as_mut(), b"acct/b").await;
    commit(deleter, "deleter").await;

    assert_eq!(get(reader.as_mut(), b"acct/a").await, first_a, "a repeated get changed");
    assert_eq!(get(reader.as_mut(), b"acct/b").await.as_deref(), Some(&b"50"[..]), "a later get saw a commit");
    assert_eq!(get(reader.as_mut(), b"later").await.as_deref(), Some(&b"v0"[..]), "first read after a commit");
    let second_scan = scan(reader.as_mut(), b"acct/", &prefix_end(b"acct/"), usize::MAX).await;
    assert_eq!(second_scan, first_scan, "a repeated scan changed");
    assert_eq!(second_scan, pairs(&[(b"acct/a", b"50"), (b"acct/b", b"50")]));
    reader.commit().await.unwrap_or_else(|err| panic!("read-only transaction failed to commit: {err}"));
}

// ---------------------------------------------------------------------------------------------
// Conflicts (serializability).

/// Two transactions read the same key and both write it (lost update): exactly one commits,
/// the other gets `Conflict`, and the committed value is the winner's.
pub async fn lost_update_conflicts(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"counter", b"0")]).await;
    let mut t1 = begin(engine).await;
    let mut t2 = begin(engine).await;
    assert_eq!(get(t1.as_mut(), b"counter").await.as_deref(), Some(&b"0"[..]));
    assert_eq!(get(t2.as_mut(), b"counter").await.as_deref(), Some(&b"0"[..]));
    put(t1.as_mut(), b"counter", b"1 by t1").await;
    put(t2.as_mut(), b"counter", b"1 by t2").await;
    let r1 = t1.commit().await;
    let r2 = t2.commit().await;
    let final_value = read(engine, b"counter").await;
    match (r1, r2) {
        (Ok(()), Err(e)) => {
            assert_conflict(Err(e), "second committer");
            assert_eq!(final_value.as_deref(), Some(&b"1 by t1"[..]));
        }
        (Err(e), Ok(())) => {
            assert_conflict(Err(e), "first committer");
            assert_eq!(final_value.as_deref(), Some(&b"1 by t2"[..]));
        }
        (r1, r2) => panic!("expected exactly one commit and one Conflict, got {r1:?} and {r2:?}"),
    }
}

/// Write skew (each transaction reads two keys and writes the other one, keeping an invariant
/// only together) is prevented: at most one commits and the invariant holds.
pub async fn write_skew_prevented(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    // Invariant: at least one doctor on call.
    put_all(engine, &[(b"oncall/alice", b"yes"), (b"oncall/bob", b"yes")]).await;
    let mut t1 = begin(engine).await;
    let mut t2 = begin(engine).await;
    for txn in [&mut t1, &mut t2] {
        let alice = get(txn.as_mut(), b"oncall/alice").await;
        let bob = get(txn.as_mut(), b"oncall/bob").await;
        assert_eq!((alice.as_deref(), bob.as_deref()), (Some(&b"yes"[..]), Some(&b"yes"[..])));
    }
    put(t1.as_mut(), b"oncall/alice", b"no").await;
    put(t2.as_mut(), b"oncall/bob", b"no").await;
    let r1 = t1.commit().await;
    let r2 = t2.commit().await;
    let committed = usize::from(r1.is_ok()) + usize::from(r2.is_ok());
    assert_eq!(committed, 1, "write skew: expected exactly one commit, got {r1:?} and {r2:?}");
    for r in [r1, r2] {
        if r.is_err() {
            assert_conflict(r, "write-skew loser");
        }
    }
    let alice = read(engine, b"oncall/alice").await;
    let bob = read(engine, b"oncall/bob").await;
    assert!(
        alice.as_deref() == Some(b"yes") || bob.as_deref() == Some(b"yes"),
        "invariant broken: alice {alice:?}, bob {bob:?}"
    );
}

/// Phantom: A checks a directory is empty (scan), B inserts an entry and commits, A writes
/// elsewhere and commits: A must get `Conflict`.
pub async fn phantom_insert_conflicts(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"dir/", b"directory"), (b"dir0", b"neighbour")]).await;
    let mut remover = begin(engine).await;
    let children = scan(remover.as_mut(), b"dir/", &prefix_end(b"dir/"), usize::MAX).await;
    assert_eq!(keys(&children), vec![b"dir/".to_vec()], "directory must start empty");

    let mut creator = begin(engine).await;
    put(creator.as_mut(), b"dir/file", b"f").await;
    commit(creator, "creator").await;

    delete(remover.as_mut(), b"dir/").await;
    put(remover.as_mut(), b"log/removed", b"dir").await;
    assert_conflict(remover.commit().await, "remover after a concurrent insert into its scanned range");
    assert_eq!(read(engine, b"dir/").await.as_deref(), Some(&b"directory"[..]), "conflicting delete applied");
    assert_eq!(read(engine, b"log/removed").await, None, "conflicting put applied");
}

/// Phantom by deletion: a key disappearing from a scanned range is a conflict too.
pub async fn phantom_delete_conflicts(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"set/1", b""), (b"set/2", b""), (b"count", b"2")]).await;
    let mut counter = begin(engine).await;
    let members = scan(counter.as_mut(), b"set/", &prefix_end(b"set/"), usize::MAX).await;
    assert_eq!(members.len(), 2);

    let mut remover = begin(engine).await;
    delete(remover.as_mut(), b"set/2").await;
    commit(remover, "remover").await;

    put(counter.as_mut(), b"count", members.len().to_string().as_bytes()).await;
    assert_conflict(counter.commit().await, "counter after a concurrent delete in its scanned range");
}

/// A limited scan depends on the keys it returned and the gaps between them: an insert before
/// the last returned key is a conflict.
pub async fn phantom_within_limit_conflicts(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"q/10", b""), (b"q/20", b""), (b"q/30", b""), (b"q/40", b"")]).await;
    let mut consumer = begin(engine).await;
    let first_two = scan(consumer.as_mut(), b"q/", &prefix_end(b"q/"), 2).await;
    assert_eq!(keys(&first_two), vec![b"q/10".to_vec(), b"q/20".to_vec()]);

    let mut producer = begin(engine).await;
    put(producer.as_mut(), b"q/15", b"").await;
    commit(producer, "producer").await;

    delete(consumer.as_mut(), b"q/10").await;
    delete(consumer.as_mut(), b"q/20").await;
    assert_conflict(consumer.commit().await, "consumer after an insert inside its limited scan");
}

/// Reading an absent key depends on its absence: a concurrent insert of it is a conflict.
pub async fn absent_key_read_conflicts(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    let mut t1 = begin(engine).await;
    assert_eq!(get(t1.as_mut(), b"name").await, None);
    let mut t2 = begin(engine).await;
    assert_eq!(get(t2.as_mut(), b"name").await, None);
    put(t2.as_mut(), b"name", b"t2").await;
    commit(t2, "first creator").await;
    put(t1.as_mut(), b"name", b"t1").await;
    put(t1.as_mut(), b"owner/t1", b"name").await;
    assert_conflict(t1.commit().await, "second creator of the same name");
    assert_eq!(read(engine, b"name").await.as_deref(), Some(&b"t2"[..]));
}

/// A transaction without writes commits even when everything it read has changed.
pub async fn read_only_never_conflicts(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"k", b"v"), (b"r/1", b"")]).await;
    let mut reader = begin(engine).await;
    assert_eq!(get(reader.as_mut(), b"k").await.as_deref(), Some(&b"v"[..]));
    assert_eq!(get(reader.as_mut(), b"absent").await, None);
    assert_eq!(scan(reader.as_mut(), b"r/", b"r0", usize::MAX).await.len(), 1);
    let mut writer = begin(engine).await;
    put(writer.as_mut(), b"k", b"changed").await;
    put(writer.as_mut(), b"absent", b"now present").await;
    put(writer.as_mut(), b"r/2", b"").await;
    commit(writer, "writer").await;
    reader.commit().await.unwrap_or_else(|err| panic!("read-only transaction must commit, got {err:?}"));

    // A transaction that did nothing at all.
    let empty = begin(engine).await;
    empty.commit().await.unwrap_or_else(|err| panic!("empty transaction must commit, got {err:?}"));
}

/// A transaction that gets `Conflict` leaves nothing written, not even keys nobody else touched.
pub async fn conflicting_txn_writes_nothing(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"guard", b"0"), (b"keep", b"kept")]).await;
    let mut loser = begin(engine).await;
    assert_eq!(get(loser.as_mut(), b"guard").await.as_deref(), Some(&b"0"[..]));
    put(loser.as_mut(), b"fresh/1", b"x").await;
    put(loser.as_mut(), b"fresh/2", b"y").await;
    delete(loser.as_mut(), b"keep").await;

    let mut winner = begin(engine).await;
    put(winner.as_mut(), b"guard", b"1").await;
    commit(winner, "winner").await;

    put(loser.as_mut(), b"guard", b"loser").await;
    assert_conflict(loser.commit().await, "loser");
    assert_eq!(
        read_all(engine).await,
        pairs(&[(b"guard", b"1"), (b"keep", b"kept")]),
        "a conflicting transaction wrote something"
    );
}

/// Dropping a transaction without committing discards its writes.
pub async fn dropped_txn_writes_nothing(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    put_all(engine, &[(b"keep", b"kept")]).await;
    let mut txn = begin(engine).await;
    put(txn.as_mut(), b"new", b"n").await;
    put(txn.as_mut(), b"keep", b"changed").await;
    delete(txn.as_mut(), b"keep").await;
    drop(txn);
    assert_eq!(read_all(engine).await, pairs(&[(b"keep", b"kept")]), "a dropped transaction wrote something");
    // The engine still works after a drop.
    put_all(engine, &[(b"after", b"a")]).await;
    assert_eq!(read(engine, b"after").await.as_deref(), Some(&b"a"[..]));
}

/// Blind writes of one key (no reads): each commit either succeeds or fails with `Conflict`, at
/// least one succeeds, and the final value is the last successful commit's.
pub async fn blind_writes_serialize(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    let mut t1 = begin(engine).await;
    let mut t2 = begin(engine).await;
    put(t1.as_mut(), b"k", b"t1").await;
    put(t2.as_mut(), b"k", b"t2").await;
    let r1 = t1.commit().await;
    let r2 = t2.commit().await;
    let value = read(engine, b"k").await;
    match (r1, r2) {
        (_, Ok(())) => assert_eq!(value.as_deref(), Some(&b"t2"[..]), "last committed write must win"),
        (Ok(()), r2) => {
            assert_conflict(r2, "second blind writer");
            assert_eq!(value.as_deref(), Some(&b"t1"[..]));
        }
        (r1, r2) => panic!("both blind writers failed: {r1:?}, {r2:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// run_txn.

const COUNTER_TASKS: u64 = 8;
const COUNTER_INCREMENTS: u64 = 50;

/// Reads a little-endian u64 counter, absent meaning 0.
fn decode_counter(value: Option<Vec<u8>>) -> Result<u64, String> {
    match value {
        None => Ok(0),
        Some(bytes) => {
            let array: [u8; 8] = bytes.as_slice().try_into().map_err(|_| format!("counter is {bytes:?}"))?;
            Ok(u64::from_le_bytes(array))
        }
    }
}

/// 8 tasks each increment one counter 50 times through [`run_txn`]: the result is exactly 400,
/// and each task saw strictly increasing values.
pub async fn run_txn_counter(engine: Arc<dyn KvEngine>) {
    let mut tasks = Vec::new();
    for task in 0..COUNTER_TASKS {
        let engine = Arc::clone(&engine);
        tasks.push(tokio::spawn(async move {
            let mut last_seen = None;
            for _ in 0..COUNTER_INCREMENTS {
                let seen = run_txn::<u64, String, _>(engine.as_ref(), |txn| {
                    Box::pin(async move {
                        let value = decode_counter(txn.get(b"counter").await?).map_err(TxnError::Abort)?;
                        // Let other tasks run between the read and the write, as real work would.
                        tokio::task::yield_now().await;
                        txn.put(b"counter", &(value + 1).to_le_bytes()).await?;
                        Ok(value)
                    })
                })
                .await
                .unwrap_or_else(|err| panic!("task {task}: run_txn failed: {err:?}"));
                if let Some(last) = last_seen {
                    assert!(seen > last, "task {task}: counter went from {last} to {seen}");
                }
                last_seen = Some(seen);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap_or_else(|err| panic!("counter task failed: {err}"));
    }
    let total = decode_counter(read(engine.as_ref(), b"counter").await).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(total, COUNTER_TASKS * COUNTER_INCREMENTS, "increments were lost or duplicated");
}

/// A body returning `TxnError::Abort` is not retried and its writes are discarded.
pub async fn run_txn_abort_writes_nothing(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    let mut calls = 0u32;
    let result = run_txn::<(), String, _>(engine, |txn| {
        calls += 1;
        Box::pin(async move {
            txn.put(b"k", b"written before abort").await?;
            Err(TxnError::Abort("no".to_string()))
        })
    })
    .await;
    match result {
        Err(TxnError::Abort(reason)) => assert_eq!(reason, "no"),
        other => panic!("expected the body's abort, got {other:?}"),
    }
    assert_eq!(calls, 1, "an aborted body must not be retried");
    assert_eq!(read(engine, b"k").await, None, "an aborted body's write was committed");
}

// ---------------------------------------------------------------------------------------------
// Limits.

/// Keys up to [`KEY_BYTES_MAX`] and values up to [`VALUE_BYTES_MAX`] are stored and read back;
/// one byte more is rejected by `put` with `TooLarge`, which writes nothing and leaves the
/// transaction usable.
pub async fn size_limits(engine: Arc<dyn KvEngine>) {
    let engine = engine.as_ref();
    let max_key: Vec<u8> = (0..KEY_BYTES_MAX).map(|i| (i % 251) as u8).collect();
    let max_value: Vec<u8> = (0..VALUE_BYTES_MAX).map(|i| (i % 253) as u8).collect();
    let mut too_long_key = max_key.clone();
    too_long_key.push(0);
    let mut too_long_value = max_value.clone();
    too_long_value.push(0);

    let mut txn = begin(engine).await;
    put(txn.as_mut(), &max_key, b"max key").await;
    put(txn.as_mut(), b"max value", &max_value).await;
    match txn.put(&too_long_key, b"v").await {
        Err(KvError::TooLarge { what, len, max }) => {
            assert_eq!((what, len, max), ("key", KEY_BYTES_MAX + 1, KEY_BYTES_MAX), "TooLarge fields");
        }
        other => panic!("put of a {}-byte key: expected TooLarge, got {other:?}", KEY_BYTES_MAX + 1),
    }
    match txn.put(b"too long value", &too_long_value).await {
        Err(KvError::TooLarge { what, len, max }) => {
            assert_eq!((what, len, max), ("value", VALUE_BYTES_MAX + 1, VALUE_BYTES_MAX), "TooLarge fields");
        }
        other => panic!("put of a {}-byte value: expected TooLarge, got {other:?}", VALUE_BYTES_MAX + 1),
    }
    assert_eq!(get(txn.as_mut(), b"too long value").await, None, "a rejected put was buffered");
    commit(txn, "largest key and value").await;

    let mut txn = begin(engine).await;
    assert_eq!(get(txn.as_mut(), &max_key).await.as_deref(), Some(&b"max key"[..]), "largest key");
    let value = get(txn.as_mut(), b"max value").await;
    assert!(value.as_deref() == Some(&max_value[..]), "largest value read back differs");
    assert_eq!(get(txn.as_mut(), b"too long value").await, None, "a rejected put was committed");
    let all = scan(txn.as_mut(), &[], END_OF_KEYSPACE, usize::MAX).await;
    assert_eq!(all.len(), 2, "expected exactly the two accepted pairs");
    // Overwrite the large value with a small one and delete the long key.
    put(txn.as_mut(), b"max value", b"small").await;
    delete(txn.as_mut(), &max_key).await;
    commit(txn, "shrink").await;
    assert_eq!(read_all(engine).await, pairs(&[(b"max value", b"small")]));
}

// ---------------------------------------------------------------------------------------------
// Durability (not in CASES: it needs a way to reopen the same data).

/// Committed writes (puts, overwrites, deletes) survive closing and reopening the engine;
/// uncommitted ones do not. `reopen` receives the engine (it must drop it, releasing the
/// data) and returns a new engine over the same data.
pub async fn commit_is_durable<F, Fut>(engine: Arc<dyn KvEngine>, reopen: F)
where
    F: FnOnce(Arc<dyn KvEngine>) -> Fut,
    Fut: Future<Output = Arc<dyn KvEngine>>,
{
    let big: Vec<u8> = (0..VALUE_BYTES_MAX).map(|i| (i % 241) as u8).collect();
    put_all(engine.as_ref(), &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"big", &big)]).await;
    let mut txn = begin(engine.as_ref()).await;
    put(txn.as_mut(), b"a", b"overwritten").await;
    delete(txn.as_mut(), b"b").await;
    commit(txn, "overwrite and delete").await;
    let mut uncommitted = begin(engine.as_ref()).await;
    put(uncommitted.as_mut(), b"uncommitted", b"x").await;
    drop(uncommitted);

    let engine = reopen(engine).await;
    let all = read_all(engine.as_ref()).await;
    assert_eq!(keys(&all), vec![b"a".to_vec(), b"big".to_vec(), b"c".to_vec()], "keys after reopening");
    assert_eq!(all[0].1, b"overwritten".to_vec());
    assert!(all[1].1 == big, "large value differs after reopening");
    assert_eq!(all[2].1, b"3".to_vec());
    // The reopened engine accepts writes.
    put_all(engine.as_ref(), &[(b"after reopen", b"ok")]).await;
    assert_eq!(read(engine.as_ref(), b"after reopen").await.as_deref(), Some(&b"ok"[..]));
}
