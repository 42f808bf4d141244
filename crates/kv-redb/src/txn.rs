//! One optimistic transaction of the redb engine: snapshot reads overlaid with buffered writes,
//! the read set those reads leave behind, and commit-time validation against it.
//!
//! Serializability argument: a transaction commits only if, under the writer lock (so against
//! the latest committed state, which cannot move meanwhile), every read it made would return
//! exactly what it returned. It then behaves as if it had run entirely at its commit point, so
//! the commit order is a serial order. What is checked:
//! - point reads from the snapshot: the key's value (or absence), kept as a [`Digest`];
//! - scans: the committed pairs (keys and value digests) of the part of the range the result
//!   depended on: the whole `[start, end)` when the scan returned fewer pairs than its limit,
//!   `[start, last returned key]` when it stopped at the limit (keys past the last one returned
//!   cannot change the result). Keys the transaction had itself written before scanning are left
//!   out: the result shows the buffered write whatever is committed under it.
//!
//! Reads of keys the transaction wrote earlier come from the buffer and depend on nothing. When
//! no commit happened since the snapshot (the engine's commit sequence is unchanged), the
//! snapshot *is* the latest state and validation is skipped.

use crate::wal::AppendError;
use crate::{LogState, Shared, LOG_APPLIED, STATE, TABLE};
use async_trait::async_trait;
use kv::readset::{Digest, ScanRead};
use kv::{check_key, check_value, KeyValue, KvError, KvTxn};
use redb::{Durability, ReadOnlyTable, ReadableDatabase, ReadableTable};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

type Table = ReadOnlyTable<&'static [u8], &'static [u8]>;

pub(crate) struct RedbTxn {
    shared: Arc<Shared>,
    /// The snapshot; `None` once commit released it.
    snapshot: Option<Table>,
    /// The engine's commit sequence number when the snapshot was taken (or a smaller one).
    snapshot_seq: u64,
    /// Buffered writes: `None` deletes.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Point reads served by the snapshot, with what they saw.
    point_reads: BTreeMap<Vec<u8>, Option<Digest>>,
    scans: Vec<ScanRead>,
}

impl RedbTxn {
    pub(crate) fn begin(shared: Arc<Shared>) -> Result<Self, KvError> {
        // Read the sequence number first: the snapshot then includes at least that many commits.
        let snapshot_seq = shared.commit_seq();
        let read = shared.db.begin_read().map_err(|err| shared.error("begin a read transaction", err))?;
        // The table keeps the read transaction (and so the snapshot) alive by itself.
        let table = read.open_table(TABLE).map_err(|err| shared.error("open the key-value table", err))?;
        Ok(RedbTxn {
            shared,
            snapshot: Some(table),
            snapshot_seq,
            writes: BTreeMap::new(),
            point_reads: BTreeMap::new(),
            scans: Vec::new(),
        })
    }

    fn snapshot(&self) -> Result<&Table, KvError> {
        // Unreachable through the trait (commit consumes the transaction); kept as an error
        // rather than a panic.
        self.snapshot
            .as_ref()
            .ok_or_else(|| KvError::Unavailable("redb transaction used after its snapshot was released".into()))
    }

    /// Validates against `table` (the latest state: everything committed, plus the writes of the
    /// transactions applied before this one in the current batch), then applies the buffered
    /// writes. Returns `Conflict` when a read would now differ. `batch_dirty` says whether an
    /// earlier transaction of the batch wrote: then the commit sequence number alone cannot
    /// prove the snapshot current.
    fn validate_and_apply(
        &self,
        table: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
        batch_dirty: bool,
    ) -> Result<(), KvError> {
        let shared = &self.shared;
        let snapshot_current = !batch_dirty && shared.commit_seq() == self.snapshot_seq;
        if !snapshot_current && !self.reads_unchanged(table)? {
            return Err(KvError::Conflict);
        }
        for (key, value) in &self.writes {
            match value {
                Some(value) => {
                    table.insert(key.as_slice(), value.as_slice()).map_err(|err| shared.error("write a pair", err))?;
                }
                None => {
                    table.remove(key.as_slice()).map_err(|err| shared.error("delete a key", err))?;
                }
            }
        }
        Ok(())
    }

    /// Whether every read of the read set returns the same against `table`.
    fn reads_unchanged(&self, table: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<bool, KvError> {
        let shared = &self.shared;
        for (key, seen) in &self.point_reads {
            let now = table.get(key.as_slice()).map_err(|err| shared.error("re-read a key", err))?;
            if now.map(|guard| shared.digester.digest(guard.value())) != *seen {
                return Ok(false);
            }
        }
        for scan in &self.scans {
            let bounds = (Bound::Included(scan.start.as_slice()), as_ref_bound(&scan.end));
            let range = table.range::<&[u8]>(bounds).map_err(|err| shared.error("re-run a scan", err))?;
            let mut seen = scan.seen.iter();
            for entry in range {
                let (key, value) = entry.map_err(|err| shared.error("re-run a scan", err))?;
                let key = key.value();
                if scan.masked.binary_search_by(|masked| masked.as_slice().cmp(key)).is_ok() {
                    continue;
                }
                match seen.next() {
                    Some((seen_key, seen_digest))
                        if seen_key.as_slice() == key && *seen_digest == shared.digester.digest(value.value()) => {}
                    _ => return Ok(false),
                }
            }
            if seen.next().is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A transaction waiting for the committer, and where its outcome goes.
pub(crate) struct Pending {
    txn: Box<RedbTxn>,
    done: tokio::sync::oneshot::Sender<Result<(), KvError>>,
}

/// The commit queue (see the crate documentation on group commit).
#[derive(Default)]
pub(crate) struct CommitQueue {
    pending: Vec<Pending>,
    /// A committer task is running; it takes everything queued before it goes idle.
    running: bool,
}

/// The committer: commits batches until the queue is empty. Runs in `spawn_blocking`; exactly
/// one runs at a time (`CommitQueue::running`), so batches are committed one after another.
///
/// The last batch's callers are answered only after the committer has dropped its reference
/// to the engine: a caller that closes the engine right after its commit returned must find
/// the database closed (redb refuses to open a file that is still open).
fn run_committer(shared: Arc<Shared>) {
    let mut answers = Vec::new();
    loop {
        let batch = {
            let mut queue = shared.queue.lock();
            if queue.pending.is_empty() {
                queue.running = false;
                None
            } else {
                Some(std::mem::take(&mut queue.pending))
            }
        };
        let Some(batch) = batch else { break };
        send_answers(std::mem::take(&mut answers));
        answers = commit_batch(&shared, batch);
    }
    drop(shared);
    send_answers(answers);
}

type Answer = (tokio::sync::oneshot::Sender<Result<(), KvError>>, Result<(), KvError>);

fn send_answers(answers: Vec<Answer>) {
    for (done, result) in answers {
        // The caller may have stopped waiting; its outcome is then unknown to it.
        let _ = done.send(result);
    }
}

/// Validates and applies each transaction of `batch` in order inside one redb write transaction
/// and makes the batch durable (see the crate documentation); returns every caller's answer
/// (the transactions themselves, and their references to the engine, are dropped by then).
fn commit_batch(shared: &Shared, batch: Vec<Pending>) -> Vec<Answer> {
    let (txns, senders): (Vec<Box<RedbTxn>>, Vec<_>) =
        batch.into_iter().map(|pending| (pending.txn, pending.done)).unzip();
    let results = commit_txns(shared, &txns);
    drop(txns);
    senders.into_iter().zip(results).collect()
}

/// The work of [`commit_batch`]: one result per transaction, in order.
///
/// The durable redb commits (checkpoints) are redb's default one-phase, checksummed, fsynced
/// commit. redb's quick-repair mode is left off: it would make reopening after a crash instant,
/// but it rewrites the allocator state of the whole file on every durable commit, a cost
/// growing with the database.
fn commit_txns(shared: &Shared, txns: &[Box<RedbTxn>]) -> Vec<Result<(), KvError>> {
    let all = |err: KvError| vec![Err(err); txns.len()];
    let mut log = shared.log.lock();
    if let Some(reason) = &log.failed {
        return all(KvError::Unavailable(reason.clone()));
    }
    let write = match shared.db.begin_write() {
        Ok(write) => write,
        Err(err) => return all(shared.error("begin a write transaction", err)),
    };
    // Outcome per transaction: Ok = applied, Err = left out with this error.
    let mut outcomes: Vec<Result<(), KvError>> = Vec::with_capacity(txns.len());
    let applied = match write.open_table(TABLE) {
        Ok(mut table) => {
            let mut batch_dirty = false;
            let mut failed = None;
            for txn in txns {
                match txn.validate_and_apply(&mut table, batch_dirty) {
                    Ok(()) => {
                        batch_dirty = true;
                        outcomes.push(Ok(()));
                    }
                    Err(KvError::Conflict) => outcomes.push(Err(KvError::Conflict)),
                    // A failed write may have left part of this transaction in the table: the
                    // whole batch is abandoned.
                    Err(err) => {
                        failed = Some(err);
                        break;
                    }
                }
            }
            match failed {
                Some(err) => Err(err),
                None => Ok(batch_dirty),
            }
        }
        Err(err) => Err(shared.error("open the key-value table for writing", err)),
    };
    let any_applied = match applied {
        Ok(any_applied) => any_applied,
        Err(err) => {
            // Nothing was committed; an abort failure changes nothing for the callers.
            let _ = write.abort();
            return all(err);
        }
    };
    if !any_applied {
        let _ = write.abort();
        return outcomes;
    }
    let lsn = log.last_lsn + 1;
    let mut record = Vec::new();
    let batch_writes = txns.iter().zip(&outcomes).filter(|(_, outcome)| outcome.is_ok());
    crate::wal::encode(
        lsn,
        batch_writes.flat_map(|(txn, _)| txn.writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref()))),
        &mut record,
    );
    let committed = if log.checkpoint_due(record.len()) {
        checkpoint(shared, &mut log, write, lsn)
    } else {
        log_then_commit(shared, &mut log, write, lsn, &record)
    };
    // Published whatever the outcome: if it is unknown, later committers must validate.
    shared.publish_commit();
    outcomes
        .into_iter()
        .map(|outcome| match (outcome, &committed) {
            (Err(err), _) => Err(err),
            (Ok(()), Ok(())) => Ok(()),
            (Ok(()), Err(err)) => Err(err.clone()),
        })
        .collect()
}

/// Commits the batch in `write` durably to redb, recording `lsn` as logged up to: a
/// checkpoint. The log then starts over.
fn checkpoint(shared: &Shared, log: &mut LogState, mut write: redb::WriteTransaction, lsn: u64) -> Result<(), KvError> {
    let prepared = write
        .set_durability(Durability::Immediate)
        .map_err(redb::Error::from)
        .and_then(|()| Ok(write.open_table(STATE)?.insert(LOG_APPLIED, lsn).map(drop)?));
    if let Err(err) = prepared {
        let _ = write.abort();
        return Err(shared.error("prepare a checkpoint", err));
    }
    match write.commit() {
        Ok(()) => {
            log.last_lsn = lsn;
            log.wal.restart();
            log.checkpointed_at = Instant::now();
            Ok(())
        }
        Err(err) => Err(log.fail(maybe_committed(shared.error("commit a checkpoint", err)))),
    }
}

/// Appends the batch's `record` to the log and syncs it, then commits `write` to redb without
/// an fsync of its own.
fn log_then_commit(
    shared: &Shared,
    log: &mut LogState,
    mut write: redb::WriteTransaction,
    lsn: u64,
    record: &[u8],
) -> Result<(), KvError> {
    if let Err(err) = write.set_durability(Durability::None) {
        let _ = write.abort();
        return Err(shared.error("request a non-durable commit", err));
    }
    let shown = log.wal.path().display().to_string();
    match log.wal.append(record) {
        Ok(()) => {}
        Err(AppendError::Write(err)) => {
            let _ = write.abort();
            return Err(log.fail(KvError::Unavailable(format!("cannot write to write-ahead log {shown}: {err}"))));
        }
        Err(AppendError::Sync(err)) => {
            let _ = write.abort();
            return Err(log.fail(KvError::MaybeCommitted(format!("cannot sync write-ahead log {shown}: {err}"))));
        }
    }
    log.last_lsn = lsn;
    // The batch is durable in the log; the next open replays it even if this fails.
    write.commit().map_err(|err| log.fail(maybe_committed(shared.error("commit", err))))
}

/// The outcome of a commit that failed after it may have taken effect.
fn maybe_committed(err: KvError) -> KvError {
    match err {
        KvError::Unavailable(message) | KvError::Corrupt(message) => KvError::MaybeCommitted(message),
        other => other,
    }
}

fn as_ref_bound(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(key) => Bound::Included(key.as_slice()),
        Bound::Excluded(key) => Bound::Excluded(key.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Runs a snapshot read, turning a panic inside redb into `Corrupt`: redb stops with an
/// internal panic (even in release builds) on some damaged pages, and data read from the disk
/// must never bring the process down.
fn guarded<T>(shared: &Shared, what: &str, read: impl FnOnce() -> Result<T, KvError>) -> Result<T, KvError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
        Ok(result) => result,
        Err(_) => Err(KvError::Corrupt(format!("redb {}: damaged data met during {what}", shared.path.display()))),
    }
}

#[async_trait]
impl KvTxn for RedbTxn {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let shared = self.shared.clone();
        guarded(&shared, "a read", || {
            if let Some(buffered) = self.writes.get(key) {
                return Ok(buffered.clone());
            }
            let value = self
                .snapshot()?
                .get(key)
                .map_err(|err| self.shared.error("read a key", err))?
                .map(|guard| guard.value().to_vec());
            if !self.point_reads.contains_key(key) {
                let digest = value.as_deref().map(|value| self.shared.digester.digest(value));
                self.point_reads.insert(key.to_vec(), digest);
            }
            Ok(value)
        })
    }

    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        check_key(key)?;
        check_value(value)?;
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        check_key(key)?;
        self.writes.insert(key.to_vec(), None);
        Ok(())
    }

    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        let shared = self.shared.clone();
        guarded(&shared, "a scan", || {
            if limit == 0 || start >= end {
                return Ok(Vec::new());
            }
            let shared = &self.shared;
            let bounds = (Bound::Included(start), Bound::Excluded(end));
            let mut committed = self.snapshot()?.range::<&[u8]>(bounds).map_err(|err| shared.error("scan", err))?;
            let mut next_committed = || -> Result<Option<KeyValue>, KvError> {
                match committed.next() {
                    None => Ok(None),
                    Some(Ok((key, value))) => Ok(Some((key.value().to_vec(), value.value().to_vec()))),
                    Some(Err(err)) => Err(shared.error("scan", err)),
                }
            };
            let mut buffered = self.writes.range::<[u8], _>(bounds).peekable();

            let mut result: Vec<KeyValue> = Vec::new();
            let mut seen = Vec::new();
            let mut masked = Vec::new();
            let mut committed_head = next_committed()?;
            let complete = loop {
                if result.len() >= limit {
                    break false;
                }
                let buffered_first = match (&committed_head, buffered.peek()) {
                    (None, None) => break true,
                    (Some(_), None) => false,
                    (None, Some(_)) => true,
                    (Some((committed_key, _)), Some((buffered_key, _))) => {
                        buffered_key.as_slice() <= committed_key.as_slice()
                    }
                };
                if buffered_first {
                    let Some((key, value)) = buffered.next() else {
                        break true;
                    };
                    if committed_head.as_ref().is_some_and(|(committed_key, _)| committed_key == key) {
                        committed_head = next_committed()?;
                    }
                    masked.push(key.clone());
                    if let Some(value) = value {
                        result.push((key.clone(), value.clone()));
                    }
                } else {
                    let Some((key, value)) = committed_head.take() else {
                        break true;
                    };
                    seen.push((key.clone(), shared.digester.digest(&value)));
                    result.push((key, value));
                    committed_head = next_committed()?;
                }
            };
            let end = match (complete, result.last()) {
                (false, Some((last, _))) => Bound::Included(last.clone()),
                _ => Bound::Excluded(end.to_vec()),
            };
            self.scans.push(ScanRead { start: start.to_vec(), end, seen, masked });
            Ok(result)
        })
    }

    async fn commit(mut self: Box<Self>) -> Result<(), KvError> {
        if self.writes.is_empty() {
            return Ok(());
        }
        // Validation reads the latest state, not the snapshot: let redb free its pages.
        self.snapshot = None;
        let shared = Arc::clone(&self.shared);
        let (done, outcome) = tokio::sync::oneshot::channel();
        let start_committer = {
            let mut queue = shared.queue.lock();
            queue.pending.push(Pending { txn: self, done });
            !std::mem::replace(&mut queue.running, true)
        };
        // Once queued, the transaction is committed (or refused) even if this future is
        // dropped; its outcome is then unknown to the caller.
        if start_committer {
            let committer = Arc::clone(&shared);
            tokio::task::spawn_blocking(move || run_committer(committer));
        }
        match outcome.await {
            Ok(result) => result,
            Err(_) => Err(KvError::MaybeCommitted(format!(
                "redb {}: the commit task ended without an answer",
                shared.path.display()
            ))),
        }
    }
}
