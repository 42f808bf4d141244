//! The metadata service's glue to the key-value engine: running transactions, mapping engine
//! errors to wire errors (in one function), typed reads and writes, paged scans, usage
//! statistics, and id allocation.
//!
//! Kept apart from the operations so that namespace, cluster and GC code read as what they do
//! to records, and so that every engine error takes the same road to the client.

use crate::keys::{self, Stat};
use kv::{KvEngine, KvError, KvTxn, TxnError, TxnFuture};
use std::time::Duration;
use wire::{ErrorCode, WireError};

/// What transaction bodies return: an engine error (retried by [`kv::run_txn`] when retryable)
/// or a wire error that aborts the operation.
pub type TxResult<T> = Result<T, TxnError<WireError>>;

/// Most pairs one scan call asks for; longer ranges are read in pages of this size.
pub const SCAN_PAGE_ENTRIES_MAX: usize = 1024;

/// Aborts the transaction body with a wire error: `fail!(NotFound, "no inode {ino}")`.
macro_rules! fail {
    ($code:ident, $($arg:tt)*) => {
        return Err(kv::TxnError::Abort(wire::werr!($code, $($arg)*)))
    };
}
pub(crate) use fail;

/// Wraps a wire error so `?` can carry it out of a transaction body.
pub fn abort(err: WireError) -> TxnError<WireError> {
    TxnError::Abort(err)
}

/// The one mapping of engine errors to wire errors.
pub fn kv_error(err: KvError) -> WireError {
    let message = err.to_string();
    let code = match err {
        KvError::Conflict | KvError::TooOld => {
            return WireError::new(
                ErrorCode::Conflict,
                format!(
                    "the metadata engine kept conflicting ({message}) after {} retries; the operation was not applied",
                    kv::RETRY_COUNT_MAX
                ),
            );
        }
        KvError::MaybeCommitted(_) => ErrorCode::MaybeCommitted,
        KvError::TooLarge { .. } => ErrorCode::TooLarge,
        KvError::Unavailable(_) => ErrorCode::Unavailable,
        KvError::Corrupt(_) => ErrorCode::Internal,
        // `KvError` is non-exhaustive: a new kind is a failure we do not understand yet.
        _ => ErrorCode::Internal,
    };
    WireError::new(code, message)
}

/// How long a transaction is retried while the engine is unavailable (a PostgreSQL restart or
/// fail-over), before the caller gets `Unavailable`.
pub const ENGINE_UNAVAILABLE_DEADLINE: Duration = Duration::from_secs(20);

/// Runs `body` as one transaction with retries; the result is either the body's value or a
/// wire error. Conflicts are retried by `kv::run_txn`; an unavailable engine is retried here
/// for [`ENGINE_UNAVAILABLE_DEADLINE`] (an `Unavailable` transaction was not applied: engines
/// report an unknown outcome as `MaybeCommitted`, which is not retried).
pub async fn transact<T, F>(engine: &dyn KvEngine, mut body: F) -> Result<T, WireError>
where
    T: Send,
    F: for<'t> FnMut(&'t mut dyn KvTxn) -> TxnFuture<'t, T, WireError> + Send,
{
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(50);
    loop {
        match kv::run_txn(engine, &mut body).await {
            Ok(value) => return Ok(value),
            Err(TxnError::Kv(KvError::Unavailable(message))) if started.elapsed() < ENGINE_UNAVAILABLE_DEADLINE => {
                tracing::warn!("metadata engine unavailable, retrying: {message}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(TxnError::Kv(e)) => return Err(kv_error(e)),
            Err(TxnError::Abort(e)) => return Err(e),
        }
    }
}

/// Milliseconds since the Unix epoch, wall clock: shared meaning across metadata servers.
pub fn now_ms() -> u64 {
    wire::world::now_unix_ms()
}

/// Reads and decodes a record.
pub async fn get<T: keys::Record>(txn: &mut dyn KvTxn, key: &[u8]) -> TxResult<Option<T>> {
    match txn.get(key).await? {
        Some(value) => Ok(Some(keys::decode(key, &value).map_err(abort)?)),
        None => Ok(None),
    }
}

/// Encodes and writes a record.
pub async fn put<T: keys::Record>(txn: &mut dyn KvTxn, key: &[u8], value: &T) -> TxResult<()> {
    txn.put(key, &keys::encode(value)).await?;
    Ok(())
}

/// Reads a counter, `default` when absent.
pub async fn get_u64(txn: &mut dyn KvTxn, key: &[u8], default: u64) -> TxResult<u64> {
    match txn.get(key).await? {
        Some(value) => keys::decode_u64(key, &value).map_err(abort),
        None => Ok(default),
    }
}

/// Reads every pair of `[start, end)` in pages, within the transaction.
pub async fn scan_all(txn: &mut dyn KvTxn, start: &[u8], end: &[u8]) -> TxResult<Vec<kv::KeyValue>> {
    let mut out = Vec::new();
    let mut from = start.to_vec();
    loop {
        let page = txn.scan(&from, end, SCAN_PAGE_ENTRIES_MAX).await?;
        let full = page.len() == SCAN_PAGE_ENTRIES_MAX;
        if let Some((last, _)) = page.last() {
            from = after(last);
        }
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// The smallest key after `key`.
pub fn after(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// Adds `delta` to a usage statistic, through the shard chosen by `seed` (an inode number, so
/// that unrelated operations rarely touch the same key).
pub async fn stat_add(txn: &mut dyn KvTxn, stat: Stat, seed: u64, delta: i64) -> TxResult<()> {
    if delta == 0 {
        return Ok(());
    }
    let key = keys::stat(stat, (seed % keys::STAT_SHARDS) as u8);
    let current = match txn.get(&key).await? {
        Some(value) => keys::decode_i64(&key, &value).map_err(abort)?,
        None => 0,
    };
    txn.put(&key, &keys::encode_i64(current.saturating_add(delta))).await?;
    Ok(())
}

/// Usage statistics summed over their shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub inodes: u64,
    pub files: u64,
    pub chunks: u64,
    /// Bytes of shards queued for deletion (see `Stat::PendingDeleteBytes`).
    pub pending_delete_bytes: u64,
}

pub async fn read_stats(txn: &mut dyn KvTxn) -> TxResult<Stats> {
    let start = [keys::prefix::STAT];
    let pairs = scan_all(txn, &start, &kv::prefix_end(&start)).await?;
    let (mut inodes, mut files, mut chunks, mut pending) = (0i64, 0i64, 0i64, 0i64);
    for (key, value) in pairs {
        let n = keys::decode_i64(&key, &value).map_err(abort)?;
        match key.get(1).copied() {
            Some(s) if s == Stat::Inodes as u8 => inodes += n,
            Some(s) if s == Stat::Files as u8 => files += n,
            Some(s) if s == Stat::Chunks as u8 => chunks += n,
            Some(s) if s == Stat::PendingDeleteBytes as u8 => pending = pending.saturating_add(n),
            _ => {}
        }
    }
    let clamp = |n: i64| n.max(0) as u64;
    Ok(Stats {
        inodes: clamp(inodes),
        files: clamp(files),
        chunks: clamp(chunks),
        pending_delete_bytes: clamp(pending),
    })
}

/// Hands out unique ids from a counter in the engine, reserving them in batches.
///
/// Every metadata server sharing the engine reserves its own batch with one small transaction,
/// then hands ids out from memory: creates do not all conflict on one counter key, and servers
/// never need to know about each other. Ids of a batch a server did not use before stopping are
/// skipped forever, which is fine for 64-bit ids.
pub struct IdPool {
    counter: Vec<u8>,
    /// The first id ever handed out (the counter's value when absent).
    first: u64,
    batch: u64,
    /// The reserved range `next..end` not yet handed out.
    range: tokio::sync::Mutex<(u64, u64)>,
}

impl IdPool {
    pub fn new(counter_name: &[u8], first: u64, batch: u64) -> IdPool {
        IdPool {
            counter: keys::counter(counter_name),
            first,
            batch: batch.max(1),
            range: tokio::sync::Mutex::new((0, 0)),
        }
    }

    /// Returns `count` fresh ids (not necessarily contiguous).
    pub async fn take(&self, engine: &dyn KvEngine, count: u64) -> Result<Vec<u64>, WireError> {
        let mut ids = Vec::with_capacity(count as usize);
        // Held across the refill so that concurrent callers wait for one refill instead of each
        // reserving a batch.
        let mut range = self.range.lock().await;
        while (ids.len() as u64) < count {
            if range.0 >= range.1 {
                let want = self.batch.max(count - ids.len() as u64);
                *range = self.reserve(engine, want).await?;
            }
            ids.push(range.0);
            range.0 += 1;
        }
        Ok(ids)
    }

    async fn reserve(&self, engine: &dyn KvEngine, count: u64) -> Result<(u64, u64), WireError> {
        let (key, first) = (self.counter.clone(), self.first);
        transact(engine, move |txn| {
            let key = key.clone();
            Box::pin(async move {
                let start = get_u64(txn, &key, first).await?;
                let Some(end) = start.checked_add(count) else {
                    fail!(Internal, "counter {} is exhausted", keys::describe(&key));
                };
                txn.put(&key, &keys::encode_u64(end)).await?;
                Ok((start, end))
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn engine_errors_map_to_stable_codes() {
        let code = |e: KvError| kv_error(e).code;
        assert_eq!(code(KvError::Conflict), ErrorCode::Conflict);
        assert_eq!(code(KvError::TooOld), ErrorCode::Conflict);
        assert_eq!(code(KvError::MaybeCommitted("timeout".into())), ErrorCode::MaybeCommitted);
        assert_eq!(code(KvError::Unavailable("down".into())), ErrorCode::Unavailable);
        assert_eq!(code(KvError::Corrupt("bad page".into())), ErrorCode::Internal);
        assert_eq!(code(KvError::TooLarge { what: "value", len: 2, max: 1 }), ErrorCode::TooLarge);
        assert!(kv_error(KvError::Unavailable("disk gone".into())).message.contains("disk gone"));
    }

    #[tokio::test]
    async fn id_pools_sharing_a_counter_never_overlap() {
        let engine = kv_tests::memory::MemoryEngine::new();
        let (a, b) = (IdPool::new(b"test", 5, 3), IdPool::new(b"test", 5, 3));
        let mut seen = HashSet::new();
        for _ in 0..10 {
            for id in a
                .take(&engine, 2)
                .await
                .unwrap_or_default()
                .into_iter()
                .chain(b.take(&engine, 1).await.unwrap_or_default())
            {
                assert!(id >= 5 && seen.insert(id), "id {id} handed out twice");
            }
        }
        assert_eq!(seen.len(), 30);
        // A request larger than the batch is served in one reservation.
        assert_eq!(a.take(&engine, 10).await.map(|ids| ids.len()).ok(), Some(10));
    }
}
