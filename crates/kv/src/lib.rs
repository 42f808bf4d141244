//! The transactional key-value engine that holds every durable byte of Trove's metadata.
//!
//! The metadata service is stateless; it talks to storage only through [`KvEngine`]. Two kinds of
//! engine exist or are planned: an embedded one (redb, one machine) and a PostgreSQL-wire one
//! (many machines). Both must pass the conformance suite of the `kv-tests` crate, written once
//! there with the other test drivers and the in-memory reference engine (a dev-dependency: no
//! product crate links the test kit).
//!
//! The model is optimistic concurrency with serializable isolation:
//! - a transaction reads a consistent snapshot and buffers its writes;
//! - `commit` either makes every write durable at once, or fails with
//!   [`KvError::Conflict`] when a concurrent commit changed something this transaction read
//!   (keys *and* scanned ranges), in which case nothing was written and the caller retries;
//! - [`KvError::MaybeCommitted`] is kept apart: the outcome is unknown (for example the connection
//!   to a remote engine broke during commit). Callers make their operations idempotent so that a
//!   retry after `MaybeCommitted` is safe.
//!
//! Keys and values are opaque bytes ordered lexicographically. Key and value sizes are bounded by
//! [`KEY_BYTES_MAX`] and [`VALUE_BYTES_MAX`] so every engine can store them.

pub mod readset;

use async_trait::async_trait;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Largest key an engine must accept.
pub const KEY_BYTES_MAX: usize = 4096;
/// Largest value an engine must accept.
pub const VALUE_BYTES_MAX: usize = 1 << 20;
/// How many times [`run_txn`] retries a transaction that conflicted before giving up.
pub const RETRY_COUNT_MAX: u32 = 64;

/// Errors of the key-value engines.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// A concurrent transaction changed data this one read; nothing was written. Retry.
    #[error("transaction conflict; retry")]
    Conflict,
    /// The transaction is too old for the engine to keep serving (snapshot expired). Retry.
    #[error("transaction too old; retry")]
    TooOld,
    /// The commit may or may not have been applied (the engine did not answer in time).
    #[error("commit outcome unknown: {0}")]
    MaybeCommitted(String),
    /// A key or value exceeds the engine-independent limits.
    #[error("{what} is {len} bytes, larger than the limit of {max}")]
    TooLarge { what: &'static str, len: usize, max: usize },
    /// The engine is unreachable or failed (disk error, connection refused, ...).
    #[error("key-value engine unavailable: {0}")]
    Unavailable(String),
    /// The engine found its own data damaged.
    #[error("key-value engine data corrupt: {0}")]
    Corrupt(String),
}

impl KvError {
    /// Whether running the whole transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, KvError::Conflict | KvError::TooOld)
    }
}

/// One key-value pair as returned by a scan.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// A transactional, ordered key-value store. Cheap to share (`Arc<dyn KvEngine>`).
#[async_trait]
pub trait KvEngine: Send + Sync + 'static {
    /// Starts a transaction that sees a consistent snapshot of committed data.
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError>;

    /// A short human-readable name for status displays ("redb /var/lib/trove/meta.redb").
    fn describe(&self) -> String;
}

/// An open transaction. Dropping it without `commit` discards its writes.
///
/// Reads see the snapshot plus this transaction's own buffered writes.
#[async_trait]
pub trait KvTxn: Send {
    /// Reads one key.
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;

    /// Writes one key (buffered until commit).
    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError>;

    /// Writes one key with a value that means what the old one meant (a chunk record whose
    /// chunk moved to other nodes, same bytes): an engine that keeps old versions of changed
    /// keys for snapshots keeps none for this write. Plain engines treat it as [`Self::put`].
    async fn put_same_meaning(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.put(key, value).await
    }

    /// Deletes one key (buffered until commit). Deleting an absent key is not an error.
    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError>;

    /// Returns up to `limit` pairs with `start <= key < end`, in ascending key order.
    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError>;

    /// Makes every buffered write durable atomically, or fails leaving nothing written.
    /// A transaction without writes commits trivially.
    async fn commit(self: Box<Self>) -> Result<(), KvError>;
}

/// Checks a key against [`KEY_BYTES_MAX`].
pub fn check_key(key: &[u8]) -> Result<(), KvError> {
    if key.len() > KEY_BYTES_MAX {
        return Err(KvError::TooLarge { what: "key", len: key.len(), max: KEY_BYTES_MAX });
    }
    Ok(())
}

/// Checks a value against [`VALUE_BYTES_MAX`].
pub fn check_value(value: &[u8]) -> Result<(), KvError> {
    if value.len() > VALUE_BYTES_MAX {
        return Err(KvError::TooLarge { what: "value", len: value.len(), max: VALUE_BYTES_MAX });
    }
    Ok(())
}

/// The smallest key greater than every key starting with `prefix` (for prefix scans), so that
/// `scan(prefix, &prefix_end(prefix), ..)` returns exactly the keys starting with `prefix`.
/// When no such key exists (an empty prefix, or one made only of 0xff bytes) it returns
/// [`END_OF_KEYSPACE`], which is above every key an engine accepts.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    END_OF_KEYSPACE.to_vec()
}

/// A scan bound larger than any key engines accept: [`KEY_BYTES_MAX`]` + 1` bytes of 0xff, so every
/// accepted key (at most [`KEY_BYTES_MAX`] bytes) sorts below it. Used as the open upper bound of
/// scans; it is never stored as a key. (Engines must accept scan bounds longer than
/// [`KEY_BYTES_MAX`].)
pub const END_OF_KEYSPACE: &[u8] = &[0xff; KEY_BYTES_MAX + 1];

/// A boxed future returned by transaction bodies given to [`run_txn`].
pub type TxnFuture<'a, T, E = String> = Pin<Box<dyn Future<Output = Result<T, TxnError<E>>> + Send + 'a>>;

/// What a transaction body may fail with: an engine error, or the caller's own error which
/// aborts the transaction without retry.
#[derive(Debug)]
pub enum TxnError<E = String> {
    Kv(KvError),
    Abort(E),
}

impl<E> From<KvError> for TxnError<E> {
    fn from(e: KvError) -> Self {
        TxnError::Kv(e)
    }
}

/// Runs `body` in a fresh transaction and commits it, retrying on [`KvError::is_retryable`]
/// errors (from the body or the commit) with a randomized exponential backoff (see
/// [`retry_backoff`]), at most [`RETRY_COUNT_MAX`] times. The body must not have side effects
/// outside the transaction.
pub async fn run_txn<T, E, F>(engine: &dyn KvEngine, mut body: F) -> Result<T, TxnError<E>>
where
    T: Send,
    E: Send,
    F: for<'t> FnMut(&'t mut dyn KvTxn) -> TxnFuture<'t, T, E> + Send,
{
    let mut attempt = 0u32;
    loop {
        let mut txn = engine.begin().await.map_err(TxnError::Kv)?;
        let outcome = body(txn.as_mut()).await;
        let err = match outcome {
            Ok(value) => match txn.commit().await {
                Ok(()) => return Ok(value),
                Err(e) => e,
            },
            Err(TxnError::Kv(e)) => e,
            Err(abort) => return Err(abort),
        };
        if !err.is_retryable() || attempt >= RETRY_COUNT_MAX {
            return Err(TxnError::Kv(err));
        }
        attempt += 1;
        tokio::time::sleep(retry_backoff(attempt)).await;
    }
}

/// Shortest backoff ceiling of [`retry_backoff`] (first retry).
const RETRY_BACKOFF_FIRST: Duration = Duration::from_micros(500);
/// Largest backoff ceiling of [`retry_backoff`].
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// How long [`run_txn`] sleeps before retry number `attempt` (1 for the first retry): a uniformly
/// random duration up to a ceiling that starts at 0.5 ms and doubles with each attempt up to
/// 100 ms ("full jitter").
///
/// The ceiling must grow past the engines' commit latency (an fsync, or a network round trip):
/// with a fixed short backoff, the transaction that just committed starts its next attempt while
/// the losers are still sleeping, and on a hot key it keeps winning until the losers exhaust
/// [`RETRY_COUNT_MAX`].
pub fn retry_backoff(attempt: u32) -> Duration {
    let shift = attempt.saturating_sub(1).min(16);
    let ceiling = RETRY_BACKOFF_FIRST.saturating_mul(1 << shift).min(RETRY_BACKOFF_MAX);
    let ceiling_us = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    let draw = JITTER.with(|j| j.borrow_mut().as_mut().map(rand::RngCore::next_u64)).unwrap_or_else(rand::random);
    Duration::from_micros(draw % (ceiling_us + 1))
}

thread_local! {
    /// The seeded source of [`retry_backoff`]'s jitter on this thread, under a deterministic
    /// simulation; `None`: the OS-seeded generator.
    static JITTER: std::cell::RefCell<Option<rand::rngs::StdRng>> = const { std::cell::RefCell::new(None) };
}

/// Draws [`retry_backoff`]'s jitter on this thread from a generator seeded with `seed`, or,
/// with `None`, from the OS-seeded one again. For a deterministic simulation, which runs every
/// transaction of a cluster on one thread (`crates/sim`); production never calls it.
pub fn seed_retry_jitter(seed: Option<u64>) {
    use rand::SeedableRng;
    JITTER.with(|j| *j.borrow_mut() = seed.map(rand::rngs::StdRng::seed_from_u64));
}
