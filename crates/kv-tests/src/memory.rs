//! An in-memory [`KvEngine`]: the reference implementation of the trait's semantics.
//!
//! It owns nothing durable; it exists so that (1) code built on [`KvEngine`] (the metadata
//! service) can be unit-tested without a disk, and (2) the [`conformance`](crate::conformance)
//! suite is itself tested, in this crate, against an engine whose behaviour is simple enough to
//! trust, and against deliberately flawed variants of it to prove that the suite's cases fail
//! when an engine breaks the contract.
//!
//! Design: the committed state is an immutable `Arc<BTreeMap>` replaced on each commit, so a
//! snapshot is an `Arc` clone. A transaction logs every read with its result, interleaved with
//! its writes. Commit validates by replaying that log against the current state: if every read
//! returns what it returned before, the transaction behaves exactly as if it had run at commit
//! time, so committing it keeps the history serializable; otherwise it fails with
//! [`KvError::Conflict`]. Durability is not provided: data lives as long as the engine.

use async_trait::async_trait;
use kv::{check_key, check_value, KeyValue, KvEngine, KvError, KvTxn};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type WriteBuffer = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Deliberate contract violations, to check that the conformance suite notices them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Flaw {
    /// Commit never validates: lost updates, write skew and phantoms go through.
    NoValidation,
    /// Validation checks point reads but not scans: phantoms go through.
    NoScanValidation,
    /// Reads see the latest committed state instead of the transaction's snapshot.
    NoSnapshot,
    /// Reads ignore the transaction's own buffered writes.
    NoReadYourWrites,
    /// Scans return one pair more than `limit`.
    ScanLimitOffByOne,
}

/// The in-memory engine. Cheap to clone; clones share the same data.
#[derive(Clone, Default)]
pub struct MemoryEngine {
    state: Arc<Mutex<Committed>>,
    flaw: Option<Flaw>,
}

#[derive(Default)]
struct Committed {
    map: Arc<Map>,
    /// Number of commits with writes so far.
    version: u64,
}

impl MemoryEngine {
    /// A new, empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn with_flaw(flaw: Flaw) -> Self {
        MemoryEngine { state: Arc::default(), flaw: Some(flaw) }
    }
}

fn lock(state: &Mutex<Committed>) -> MutexGuard<'_, Committed> {
    // The state is only replaced whole, so a panic while holding the lock cannot leave it torn.
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait]
impl KvEngine for MemoryEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        let committed = lock(&self.state);
        Ok(Box::new(MemoryTxn {
            state: Arc::clone(&self.state),
            snapshot: Arc::clone(&committed.map),
            version: committed.version,
            writes: WriteBuffer::new(),
            log: Vec::new(),
            flaw: self.flaw,
        }))
    }

    fn describe(&self) -> String {
        "memory".to_string()
    }
}

/// One step of a transaction, as replayed by validation.
enum Step {
    Get { key: Vec<u8>, seen: Option<Vec<u8>> },
    Scan { start: Vec<u8>, end: Vec<u8>, limit: usize, seen: Vec<KeyValue> },
    Write { key: Vec<u8>, value: Option<Vec<u8>> },
}

struct MemoryTxn {
    state: Arc<Mutex<Committed>>,
    snapshot: Arc<Map>,
    version: u64,
    writes: WriteBuffer,
    log: Vec<Step>,
    flaw: Option<Flaw>,
}

impl MemoryTxn {
    /// The committed map reads go to: the snapshot, or (flawed) the latest state.
    fn base(&self) -> Arc<Map> {
        if self.flaw == Some(Flaw::NoSnapshot) {
            Arc::clone(&lock(&self.state).map)
        } else {
            Arc::clone(&self.snapshot)
        }
    }

    fn overlay(&self) -> &WriteBuffer {
        static EMPTY: WriteBuffer = WriteBuffer::new();
        if self.flaw == Some(Flaw::NoReadYourWrites) {
            &EMPTY
        } else {
            &self.writes
        }
    }

    fn write(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        self.writes.insert(key.to_vec(), value.clone());
        self.log.push(Step::Write { key: key.to_vec(), value });
    }
}

/// Reads `key` from `base` overlaid with `writes`.
fn get_merged(base: &Map, writes: &WriteBuffer, key: &[u8]) -> Option<Vec<u8>> {
    match writes.get(key) {
        Some(buffered) => buffered.clone(),
        None => base.get(key).cloned(),
    }
}

/// Scans `[start, end)` of `base` overlaid with `writes`, at most `limit` pairs.
fn scan_merged(base: &Map, writes: &WriteBuffer, start: &[u8], end: &[u8], limit: usize) -> Vec<KeyValue> {
    if start >= end || limit == 0 {
        return Vec::new();
    }
    let bounds = (Bound::Included(start), Bound::Excluded(end));
    let mut merged: BTreeMap<&[u8], Option<&Vec<u8>>> = BTreeMap::new();
    for (key, value) in base.range::<[u8], _>(bounds) {
        merged.insert(key, Some(value));
    }
    for (key, value) in writes.range::<[u8], _>(bounds) {
        merged.insert(key, value.as_ref());
    }
    merged.into_iter().filter_map(|(key, value)| value.map(|value| (key.to_vec(), value.clone()))).take(limit).collect()
}

#[async_trait]
impl KvTxn for MemoryTxn {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let seen = get_merged(&self.base(), self.overlay(), key);
        self.log.push(Step::Get { key: key.to_vec(), seen: seen.clone() });
        Ok(seen)
    }

    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        check_key(key)?;
        check_value(value)?;
        self.write(key, Some(value.to_vec()));
        Ok(())
    }

    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        check_key(key)?;
        self.write(key, None);
        Ok(())
    }

    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        let limit_used = if self.flaw == Some(Flaw::ScanLimitOffByOne) { limit.saturating_add(1) } else { limit };
        let seen = scan_merged(&self.base(), self.overlay(), start, end, limit_used);
        self.log.push(Step::Scan { start: start.to_vec(), end: end.to_vec(), limit, seen: seen.clone() });
        Ok(seen)
    }

    async fn commit(self: Box<Self>) -> Result<(), KvError> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let mut committed = lock(&self.state);
        if committed.version != self.version && self.flaw != Some(Flaw::NoValidation) {
            let mut replay = WriteBuffer::new();
            for step in &self.log {
                let unchanged = match step {
                    Step::Get { key, seen } => get_merged(&committed.map, &replay, key) == *seen,
                    Step::Scan { .. } if self.flaw == Some(Flaw::NoScanValidation) => true,
                    Step::Scan { start, end, limit, seen } => {
                        scan_merged(&committed.map, &replay, start, end, *limit) == *seen
                    }
                    Step::Write { key, value } => {
                        replay.insert(key.clone(), value.clone());
                        true
                    }
                };
                if !unchanged {
                    return Err(KvError::Conflict);
                }
            }
        }
        let map = Arc::make_mut(&mut committed.map);
        for (key, value) in self.writes {
            match value {
                Some(value) => map.insert(key, value),
                None => map.remove(&key),
            };
        }
        committed.version += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Flaw, MemoryEngine};
    use crate::conformance::{self, CASES};
    use kv::KvEngine;
    use std::sync::Arc;

    async fn make_engine() -> Arc<dyn KvEngine> {
        Arc::new(MemoryEngine::new())
    }

    // The whole suite, one test per case, through the macro other engines use.
    crate::conformance_tests!(make_engine);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_all_passes() {
        conformance::run_all(make_engine).await;
    }

    #[tokio::test]
    async fn clones_share_data_as_a_reopen() {
        let engine = MemoryEngine::new();
        let first: Arc<dyn KvEngine> = Arc::new(engine.clone());
        conformance::commit_is_durable(first, |old| async move {
            drop(old);
            Arc::new(engine) as Arc<dyn KvEngine>
        })
        .await;
    }

    /// Runs every case against a flawed engine; returns the names of the cases that failed.
    async fn failing_cases(flaw: Flaw) -> Vec<&'static str> {
        let mut failed = Vec::new();
        for (name, case) in CASES {
            let engine: Arc<dyn KvEngine> = Arc::new(MemoryEngine::with_flaw(flaw));
            if tokio::spawn(case(engine)).await.is_err() {
                failed.push(*name);
            }
        }
        failed
    }

    /// The suite must be able to fail: each flaw is caught by the cases aimed at it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn suite_catches_flawed_engines() {
        let expectations: &[(Flaw, &[&str])] = &[
            (
                Flaw::NoValidation,
                &[
                    "lost_update_conflicts",
                    "write_skew_prevented",
                    "phantom_insert_conflicts",
                    "phantom_delete_conflicts",
                    "phantom_within_limit_conflicts",
                    "absent_key_read_conflicts",
                    "conflicting_txn_writes_nothing",
                    "run_txn_counter",
                ],
            ),
            (
                Flaw::NoScanValidation,
                &["phantom_insert_conflicts", "phantom_delete_conflicts", "phantom_within_limit_conflicts"],
            ),
            (Flaw::NoSnapshot, &["snapshot_reads_stable", "uncommitted_writes_invisible"]),
            (Flaw::NoReadYourWrites, &["read_your_own_writes", "scan_merges_own_writes"]),
            (Flaw::ScanLimitOffByOne, &["scan_limit", "scan_merges_own_writes"]),
        ];
        for (flaw, expected) in expectations {
            let failed = failing_cases(*flaw).await;
            for name in *expected {
                assert!(failed.contains(name), "flaw {flaw:?}: case {name} passed; failed cases: {failed:?}");
            }
        }
    }
}
