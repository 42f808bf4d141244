//! Snapshots of directory trees: namespace versioning on the key-value engine, snapshot
//! records, reads of the namespace as of a snapshot, diff and restore.
//!
//! Creating a snapshot writes two small records and nothing else, whatever the size of the
//! tree: the snapshot state (`M`) holds the current *epoch*, and a snapshot taken now gets the
//! epoch and ends it. Every namespace record (`I`, `D`, `X`, `C`, `T`) is copied on write: the
//! engine handed to the rest of the service is a [`VersionedEngine`], whose transactions,
//! before the first change of such a key in an epoch while any snapshot is live, keep the
//! value the key held (or its absence) under `Y` ‖ key ‖ 0x00 ‖ epoch. A snapshot of epoch `s`
//! reads a key as the version with the smallest epoch above `s`, or the live value if there
//! is none (the key did not change since). The namespace code does not know about any of
//! this; with no snapshot the cost of a changing transaction is one read of the `M` key, which
//! also makes a snapshot atomic: every namespace change conflicts with a concurrent create.
//!
//! Chunks that a version still references are never collected: GC asks [`chunk_held`] before
//! deleting a queued chunk, and deleting a snapshot prunes the versions no live snapshot reads
//! any more, which lets GC finish the chunks they held.

use crate::keys::{self, DentryRec, DirTimesRec, GcRec, InodeRec, SnapshotRec, SnapshotStateRec, Stat, VersionRec};
use crate::namespace::{self, Ctx};
use crate::quota;
use crate::store::{self, abort, fail, get, put, transact, TxResult};
use async_trait::async_trait;
use kv::{KeyValue, KvEngine, KvError, KvTxn};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use wire::{Attr, ChunkRecord, FileKind, Ino, MetaOp, MetaReply, WireError};

/// Most live snapshots in a cluster (their epochs are kept in one record).
pub const SNAPSHOTS_MAX: usize = 1024;
/// Most entries one diff reports; a longer difference is cut (and says so).
pub const DIFF_ENTRIES_MAX: usize = 100_000;
/// Deepest directory nesting a diff or restore walks.
const DEPTH_MAX: usize = 4096;
/// The epoch that reads the live namespace (no version is newer).
pub const LIVE: u64 = u64::MAX;
/// The directory name under which a snapshotted directory's snapshots are reached.
pub const SNAPSHOT_DIR_NAME: &str = ".snapshots";

/// The state when no `M` record exists yet.
fn initial_state() -> SnapshotStateRec {
    SnapshotStateRec { epoch: 1, live: Vec::new() }
}

// ---------------------------------------------------------------------------------------------
// Copy-on-write of namespace records.

/// An engine whose transactions preserve the versions of namespace records that live
/// snapshots need (see the module documentation).
pub struct VersionedEngine {
    inner: Arc<dyn KvEngine>,
}

impl VersionedEngine {
    pub fn new(inner: Arc<dyn KvEngine>) -> VersionedEngine {
        VersionedEngine { inner }
    }
}

#[async_trait]
impl KvEngine for VersionedEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        Ok(Box::new(VersionedTxn { inner: self.inner.begin().await?, state: None, preserved: HashSet::new() }))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

struct VersionedTxn {
    inner: Box<dyn KvTxn>,
    /// The snapshot state, read at the first change of a namespace key.
    state: Option<SnapshotStateRec>,
    /// Namespace keys whose version for this epoch is known to be kept.
    preserved: HashSet<Vec<u8>>,
}

async fn read_state_raw(txn: &mut dyn KvTxn) -> Result<SnapshotStateRec, KvError> {
    let key = keys::snapshot_state();
    match txn.get(&key).await? {
        Some(value) => keys::decode(&key, &value).map_err(|e| KvError::Corrupt(e.message)),
        None => Ok(initial_state()),
    }
}

impl VersionedTxn {
    /// Keeps the value of `key` before its first change in this epoch, if a snapshot is live.
    async fn preserve(&mut self, key: &[u8]) -> Result<(), KvError> {
        if key == keys::snapshot_state().as_slice() {
            // The state changes in this transaction (a snapshot is taken or deleted).
            self.state = None;
            self.preserved.clear();
            return Ok(());
        }
        if !keys::is_versioned(key) || self.preserved.contains(key) {
            return Ok(());
        }
        if self.state.is_none() {
            self.state = Some(read_state_raw(self.inner.as_mut()).await?);
        }
        let (epoch, any_live) = match &self.state {
            Some(state) => (state.epoch, !state.live.is_empty()),
            None => return Ok(()),
        };
        if any_live {
            let vkey = keys::version(key, epoch);
            if self.inner.get(&vkey).await?.is_none() {
                let old = self.inner.get(key).await?;
                self.inner.put(&vkey, &keys::encode(&VersionRec { value: old })).await?;
            }
        }
        self.preserved.insert(key.to_vec());
        Ok(())
    }
}

#[async_trait]
impl KvTxn for VersionedTxn {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(key).await
    }

    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.preserve(key).await?;
        self.inner.put(key, value).await
    }

    async fn put_same_meaning(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.inner.put(key, value).await
    }

    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.preserve(key).await?;
        self.inner.delete(key).await
    }

    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        self.inner.scan(start, end, limit).await
    }

    async fn commit(self: Box<Self>) -> Result<(), KvError> {
        self.inner.commit().await
    }
}

// ---------------------------------------------------------------------------------------------
// Reads as of a snapshot.

/// The raw value of namespace key `key` as of epoch `epoch` ([`LIVE`]: now).
pub async fn get_at(txn: &mut dyn KvTxn, key: &[u8], epoch: u64) -> TxResult<Option<Vec<u8>>> {
    if epoch != LIVE {
        let prefix = keys::version_prefix(key);
        let mut start = prefix.clone();
        start.extend_from_slice(&(epoch + 1).to_be_bytes());
        let page = txn.scan(&start, &kv::prefix_end(&prefix), 1).await?;
        if let Some((vkey, value)) = page.into_iter().next() {
            let rec: VersionRec = keys::decode(&vkey, &value).map_err(abort)?;
            return Ok(rec.value);
        }
    }
    Ok(txn.get(key).await?)
}

/// Every pair under namespace prefix `prefix` as of epoch `epoch`, in key order.
pub async fn scan_at(txn: &mut dyn KvTxn, prefix: &[u8], epoch: u64) -> TxResult<Vec<KeyValue>> {
    let live = store::scan_all(txn, prefix, &kv::prefix_end(prefix)).await?;
    let mut out: BTreeMap<Vec<u8>, Option<Vec<u8>>> = live.into_iter().map(|(k, v)| (k, Some(v))).collect();
    if epoch != LIVE {
        let mut vprefix = vec![keys::prefix::VERSION];
        vprefix.extend_from_slice(prefix);
        let mut decided: HashSet<Vec<u8>> = HashSet::new();
        for (vkey, value) in store::scan_all(txn, &vprefix, &kv::prefix_end(&vprefix)).await? {
            let Some((key, d)) = keys::parse_version(&vkey) else {
                continue;
            };
            // Versions of one key come in ascending epochs: the first above `epoch` is the one.
            if d <= epoch || decided.contains(key) {
                continue;
            }
            let rec: VersionRec = keys::decode(&vkey, &value).map_err(abort)?;
            decided.insert(key.to_vec());
            out.insert(key.to_vec(), rec.value);
        }
    }
    Ok(out.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect())
}

async fn record_at<T: keys::Record>(txn: &mut dyn KvTxn, key: &[u8], epoch: u64) -> TxResult<Option<T>> {
    match get_at(txn, key, epoch).await? {
        Some(value) => Ok(Some(keys::decode(key, &value).map_err(abort)?)),
        None => Ok(None),
    }
}

/// An inode as of `epoch`.
pub async fn inode_at(txn: &mut dyn KvTxn, ino: Ino, epoch: u64) -> TxResult<Option<InodeRec>> {
    record_at(txn, &keys::inode(ino), epoch).await
}

/// An inode's attributes as clients see them, as of `epoch` (directory times folded in).
pub async fn attr_at(txn: &mut dyn KvTxn, ino: Ino, epoch: u64) -> TxResult<Option<Attr>> {
    let Some(rec) = inode_at(txn, ino, epoch).await? else {
        return Ok(None);
    };
    let mut attr = rec.attr;
    if attr.kind == FileKind::Dir {
        if let Some(times) = record_at::<DirTimesRec>(txn, &keys::dir_times(ino), epoch).await? {
            attr.mtime = attr.mtime.max(times.mtime);
            attr.ctime = attr.ctime.max(times.ctime);
        }
    }
    Ok(Some(attr))
}

/// Directory entry `name` of `parent` as of `epoch`.
pub async fn lookup_at(txn: &mut dyn KvTxn, parent: Ino, name: &str, epoch: u64) -> TxResult<Option<DentryRec>> {
    record_at(txn, &keys::dentry(parent, name), epoch).await
}

/// Every entry of directory `dir` as of `epoch`, in name order.
pub async fn entries_at(txn: &mut dyn KvTxn, dir: Ino, epoch: u64) -> TxResult<Vec<(String, DentryRec)>> {
    let mut out = Vec::new();
    for (key, value) in scan_at(txn, &keys::dentry_prefix(dir), epoch).await? {
        let Some(name) = keys::dentry_name(dir, &key) else {
            continue;
        };
        out.push((name.to_string(), keys::decode(&key, &value).map_err(abort)?));
    }
    Ok(out)
}

/// Every chunk record of file `ino` as of `epoch`, by index.
pub async fn chunks_at(txn: &mut dyn KvTxn, ino: Ino, epoch: u64) -> TxResult<Vec<ChunkRecord>> {
    let mut out = Vec::new();
    for (key, value) in scan_at(txn, &keys::chunk_prefix(ino), epoch).await? {
        out.push(keys::decode(&key, &value).map_err(abort)?);
    }
    Ok(out)
}

/// Every extended attribute of `ino` as of `epoch`.
pub async fn xattrs_at(txn: &mut dyn KvTxn, ino: Ino, epoch: u64) -> TxResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let prefix = keys::xattr_prefix(ino);
    let mut out = Vec::new();
    for (key, value) in scan_at(txn, &prefix, epoch).await? {
        out.push((key[prefix.len()..].to_vec(), keys::decode_bytes(&key, &value).map_err(abort)?));
    }
    Ok(out)
}

/// Whether chunk `id`, last at `index` of file `ino`, is still referenced by a preserved version
/// of that slot or of any other slot it is shared with (a live snapshot reads it, as versions
/// no snapshot reads are pruned).
pub async fn chunk_held(txn: &mut dyn KvTxn, ino: Ino, index: u64, id: u64) -> TxResult<bool> {
    for (ino, index) in crate::clone::slots(txn, ino, index, id).await? {
        if version_holding(txn, &keys::chunk(ino, index), id).await?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Chunks only snapshots hold, for the repair job (see `MetaOp::ScanHeldChunks`): versions of
/// chunk records from the version key after `after`, at most `limit` looked at, each chunk
/// once per chunk key (consecutive versions of one key may hold the same chunk), leaving out
/// a chunk the live record still holds (it moves with the live record).
pub async fn scan_held_chunks(
    engine: &dyn KvEngine,
    after: Option<Vec<u8>>,
    limit: u32,
) -> Result<MetaReply, WireError> {
    let limit = (limit as usize).clamp(1, store::SCAN_PAGE_ENTRIES_MAX);
    let head = keys::version_prefix(&[keys::prefix::CHUNK]);
    let start = match after {
        Some(cursor) if cursor.first() == Some(&keys::prefix::VERSION) => store::after(&cursor),
        Some(_) => {
            return Err(WireError::new(
                wire::ErrorCode::Invalid,
                "a held-chunk cursor must be a version key".to_string(),
            ))
        }
        None => head[..2].to_vec(),
    };
    let end = kv::prefix_end(&head[..2]);
    transact(engine, move |txn| {
        let (start, end) = (start.clone(), end.clone());
        Box::pin(async move {
            let page = txn.scan(&start, &end, limit).await?;
            metrics::gauges::add(metrics::names::META_CHUNK_RECORDS_WALKED, &[("walk", "held")], page.len() as f64);
            let next = match page.last() {
                Some((last, _)) if page.len() == limit => Some(last.clone()),
                _ => None,
            };
            let mut chunks: Vec<wire::ScannedChunk> = Vec::new();
            // The live record of the chunk key last looked at, and the chunk ids given for it.
            let mut live: Option<(Vec<u8>, Option<u64>, Vec<u64>)> = None;
            for (vkey, value) in page {
                let Some((key, _)) = keys::parse_version(&vkey) else {
                    fail!(Internal, "malformed version key {}", keys::describe(&vkey));
                };
                let Some((ino, _)) = keys::parse_chunk(key) else {
                    continue;
                };
                let rec: VersionRec = keys::decode(&vkey, &value).map_err(abort)?;
                let Some(raw) = rec.value else {
                    continue;
                };
                let chunk: ChunkRecord = keys::decode(key, &raw).map_err(abort)?;
                if live.as_ref().is_none_or(|(k, _, _)| k.as_slice() != key) {
                    let current = get::<ChunkRecord>(txn, key).await?.map(|c| c.id);
                    live = Some((key.to_vec(), current, Vec::new()));
                }
                let Some((_, current, given)) = live.as_mut() else {
                    continue;
                };
                if *current == Some(chunk.id) || given.contains(&chunk.id) {
                    continue;
                }
                given.push(chunk.id);
                chunks.push(wire::ScannedChunk {
                    ino,
                    file_ec: chunk.ec,
                    file_pool: wire::pg_pool(chunk.placement.pg),
                    rec: chunk,
                });
            }
            Ok(MetaReply::HeldChunkPage { chunks, next })
        })
    })
    .await
}

/// Chunk `id` at `index` of file `ino` as a record still holds it, live or preserved, in that
/// slot or another it is shared with (see `MetaOp::HeldChunk`): a page of that one record, or
/// an empty page.
pub async fn held_chunk(engine: &dyn KvEngine, ino: Ino, index: u64, id: u64) -> Result<MetaReply, WireError> {
    transact(engine, move |txn| {
        Box::pin(async move {
            // Its own slot, then any other that holds it (a clone, whose records the same moves
            // re-place).
            for (ino, index) in crate::clone::slots(txn, ino, index, id).await? {
                let key = keys::chunk(ino, index);
                let live = get::<ChunkRecord>(txn, &key).await?.filter(|c| c.id == id);
                let found = match live {
                    Some(chunk) => Some(chunk),
                    None => version_holding(txn, &key, id).await?,
                };
                if let Some(chunk) = found {
                    let found = wire::ScannedChunk {
                        ino,
                        file_ec: chunk.ec,
                        file_pool: wire::pg_pool(chunk.placement.pg),
                        rec: chunk,
                    };
                    return Ok(MetaReply::HeldChunkPage { chunks: vec![found], next: None });
                }
            }
            Ok(MetaReply::HeldChunkPage { chunks: Vec::new(), next: None })
        })
    })
    .await
}

/// The record of chunk `id` in a preserved version of chunk key `key`, if one holds it.
async fn version_holding(txn: &mut dyn KvTxn, key: &[u8], id: u64) -> TxResult<Option<ChunkRecord>> {
    let prefix = keys::version_prefix(key);
    for (vkey, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        let rec: VersionRec = keys::decode(&vkey, &value).map_err(abort)?;
        if let Some(raw) = rec.value {
            let chunk: ChunkRecord = keys::decode(key, &raw).map_err(abort)?;
            if chunk.id == id {
                return Ok(Some(chunk));
            }
        }
    }
    Ok(None)
}

/// Re-places chunk `expected.id` (at `expected.index` of file `ino`) in every record that holds
/// it, live or preserved, after the repair job copied or rebuilt its shards: all records of one
/// chunk say where its shards are. Fails with `Changed` unless one of them is `expected` as the
/// job read it. Returns whether the live record was one of them.
pub async fn move_chunk_records(
    txn: &mut dyn KvTxn,
    ino: Ino,
    expected: &ChunkRecord,
    placement: wire::Placement,
    missing: u64,
) -> TxResult<bool> {
    let moved = |mut rec: ChunkRecord| {
        rec.placement = placement;
        rec.missing = missing;
        rec
    };
    let mut found = false;
    let mut live_moved = false;
    // Its own slot and every other that holds it (clones), live records and versions.
    for (slot_ino, slot_index) in crate::clone::slots(txn, ino, expected.index, expected.id).await? {
        let key = keys::chunk(slot_ino, slot_index);
        if let Some(current) = get::<ChunkRecord>(txn, &key).await? {
            if current.id == expected.id {
                found |= current == *expected;
                txn.put_same_meaning(&key, &keys::encode(&moved(current))).await?;
                live_moved |= (slot_ino, slot_index) == (ino, expected.index);
            }
        }
        let prefix = keys::version_prefix(&key);
        for (vkey, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
            let rec: VersionRec = keys::decode(&vkey, &value).map_err(abort)?;
            let Some(raw) = rec.value else {
                continue;
            };
            let chunk: ChunkRecord = keys::decode(&key, &raw).map_err(abort)?;
            if chunk.id != expected.id {
                continue;
            }
            found |= chunk == *expected;
            let value = VersionRec { value: Some(keys::encode(&moved(chunk))) };
            txn.put(&vkey, &keys::encode(&value)).await?;
        }
    }
    if !found {
        fail!(Changed, "chunk {} of file {ino} changed while it was being moved", expected.index);
    }
    // A chunk waiting in the GC queue (a snapshot holds it) is deleted where it is now.
    let gc_key = keys::gc(expected.id);
    if let Some(mut gc) = get::<GcRec>(txn, &gc_key).await? {
        gc.chunk = moved(gc.chunk);
        gc.done = 0;
        put(txn, &gc_key, &gc).await?;
    }
    Ok(live_moved)
}

// ---------------------------------------------------------------------------------------------
// Snapshot records.

/// A snapshot as listed: its record and the bytes of chunk shards only it still holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub rec: SnapshotRec,
    /// Bytes of shards (as stored, parity included) of chunks that no live file and no other
    /// snapshot references: what deleting the snapshot frees.
    pub bytes_exclusive: u64,
}

/// Reads the snapshot state.
pub async fn read_state(txn: &mut dyn KvTxn) -> TxResult<SnapshotStateRec> {
    Ok(get(txn, &keys::snapshot_state()).await?.unwrap_or_else(initial_state))
}

/// Every snapshot record, by id.
pub async fn records(txn: &mut dyn KvTxn) -> TxResult<Vec<SnapshotRec>> {
    let start = keys::snapshot(0);
    let end = kv::prefix_end(&[keys::prefix::SNAPSHOT]);
    let mut out = Vec::new();
    for (key, value) in store::scan_all(txn, &start, &end).await? {
        out.push(keys::decode(&key, &value).map_err(abort)?);
    }
    Ok(out)
}

/// Finds the snapshot `name` of directory `root`.
pub async fn find(txn: &mut dyn KvTxn, root: Ino, name: &str) -> TxResult<SnapshotRec> {
    match records(txn).await?.into_iter().find(|r| r.root == root && r.name == name) {
        Some(rec) => Ok(rec),
        None => {
            let path = namespace::dir_path(txn, root).await?;
            fail!(NotFound, "directory {path:?} has no snapshot {name:?}")
        }
    }
}

/// A snapshot call's request id and when its recorded reply expires: a retry of a create,
/// delete or retain whose answer was lost is answered with the reply recorded in the
/// transaction that applied it (request id 0: not recorded).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tracked {
    pub request_id: u128,
    pub expires_ms: u64,
}

/// The snapshot a recorded reply holds, if the request was applied already.
async fn replayed(txn: &mut dyn KvTxn, tracked: Tracked) -> TxResult<Option<SnapshotRec>> {
    if tracked.request_id == 0 {
        return Ok(None);
    }
    match namespace::recorded_reply(txn, tracked.request_id).await?.transpose().map_err(abort)? {
        Some(MetaReply::Snapshots(mut s)) if s.len() == 1 => {
            let i = s.remove(0);
            Ok(Some(SnapshotRec {
                id: i.id,
                name: i.name,
                root: i.root,
                epoch: i.id,
                created_ms: i.created_ms,
                retain_until_ms: i.retain_until_ms,
            }))
        }
        Some(other) => {
            fail!(Internal, "request {:x} was recorded with another kind of reply: {other:?}", tracked.request_id)
        }
        None => Ok(None),
    }
}

/// Records the answer of a tracked snapshot call.
async fn record(txn: &mut dyn KvTxn, tracked: Tracked, rec: &SnapshotRec) -> TxResult<()> {
    if tracked.request_id != 0 {
        let reply = MetaReply::Snapshots(vec![info(rec.clone(), 0)]);
        namespace::record_reply(txn, tracked.request_id, &Ok(reply), tracked.expires_ms).await?;
    }
    Ok(())
}

/// Takes snapshot `name` of directory `root`: O(1) in the size of the tree, atomic with every
/// namespace change (they all read the state this writes). With `retain_until_ms` (not 0) the
/// snapshot is locked until then from the start.
pub async fn create(
    engine: &dyn KvEngine,
    root: Ino,
    name: &str,
    now_ms: u64,
    retain_until_ms: u64,
    tracked: Tracked,
) -> Result<SnapshotRec, WireError> {
    namespace::check_name(name)?;
    let name = name.to_string();
    transact(engine, move |txn| {
        let name = name.clone();
        Box::pin(async move {
            if let Some(done) = replayed(txn, tracked).await? {
                return Ok(done);
            }
            namespace::load_dir(txn, root).await?;
            let mut state = read_state(txn).await?;
            if state.live.len() >= SNAPSHOTS_MAX {
                fail!(
                    NoSpace,
                    "the cluster already has {SNAPSHOTS_MAX} snapshots, the most it keeps; delete one first"
                );
            }
            if records(txn).await?.iter().any(|r| r.root == root && r.name == name) {
                let path = namespace::dir_path(txn, root).await?;
                fail!(Exists, "directory {path:?} already has a snapshot {name:?}");
            }
            let id = state.epoch;
            let rec = SnapshotRec { id, name, root, epoch: id, created_ms: now_ms, retain_until_ms };
            state.epoch += 1;
            state.live.push(id);
            put(txn, &keys::snapshot_state(), &state).await?;
            put(txn, &keys::snapshot(id), &rec).await?;
            record(txn, tracked, &rec).await?;
            Ok(rec)
        })
    })
    .await
}

/// A wall-clock time in ms as people read it, for messages.
pub(crate) fn utc(ms: u64) -> String {
    format!("{} UTC", wire::utc_text(ms))
}

/// Locks snapshot `name` of `root` until `until_ms`: a date later than the current one (or
/// equal: a retry) is taken, an earlier one refused; nothing unlocks a snapshot before its
/// date.
pub async fn retain(
    engine: &dyn KvEngine,
    root: Ino,
    name: &str,
    until_ms: u64,
    tracked: Tracked,
) -> Result<SnapshotRec, WireError> {
    let name = name.to_string();
    transact(engine, move |txn| {
        let name = name.clone();
        Box::pin(async move {
            if let Some(done) = replayed(txn, tracked).await? {
                return Ok(done);
            }
            let mut rec = find(txn, root, &name).await?;
            if until_ms < rec.retain_until_ms {
                let path = namespace::dir_path(txn, root).await?;
                fail!(
                    PermissionDenied,
                    "snapshot {name:?} of {path:?} is retained until {} (WORM); a retention date is never moved earlier",
                    utc(rec.retain_until_ms)
                );
            }
            rec.retain_until_ms = until_ms;
            put(txn, &keys::snapshot(rec.id), &rec).await?;
            record(txn, tracked, &rec).await?;
            Ok(rec)
        })
    })
    .await
}

/// The snapshots of `root` (all, for `None`), with the bytes only each holds.
pub async fn list(engine: &dyn KvEngine, root: Option<Ino>) -> Result<Vec<SnapshotEntry>, WireError> {
    let recs = transact(engine, |txn| Box::pin(async move { records(txn).await })).await?;
    let live: Vec<u64> = recs.iter().map(|r| r.epoch).collect();
    let exclusive = exclusive_bytes(engine, &live).await?;
    Ok(recs
        .into_iter()
        .filter(|r| root.is_none_or(|root| r.root == root))
        .map(|rec| SnapshotEntry { bytes_exclusive: exclusive.get(&rec.epoch).copied().unwrap_or(0), rec })
        .collect())
}

/// Bytes a chunk's shards take as written (missing shards hold nothing).
fn stored_bytes(chunk: &ChunkRecord) -> u64 {
    GcRec { ino: 0, chunk: chunk.clone(), queued_ms: 0, done: 0 }.bytes_held()
}

/// For each live snapshot epoch, the bytes of chunks only it references, read page by page
/// from the preserved chunk versions.
async fn exclusive_bytes(engine: &dyn KvEngine, live: &[u64]) -> Result<HashMap<u64, u64>, WireError> {
    let mut out: HashMap<u64, u64> = HashMap::new();
    let mut start = vec![keys::prefix::VERSION, keys::prefix::CHUNK];
    let end = kv::prefix_end(&start);
    // The slot being summed: its key, the previous version's epoch, and for each chunk id the
    // snapshots that read it.
    let mut slot: Option<(Vec<u8>, u64, HashMap<u64, (ChunkRecord, BTreeSet<u64>)>)> = None;
    let live = Arc::new(live.to_vec());
    loop {
        let (from, end2) = (start.clone(), end.clone());
        let page = transact(engine, move |txn| {
            let (from, end2) = (from.clone(), end2.clone());
            Box::pin(async move { Ok(txn.scan(&from, &end2, store::SCAN_PAGE_ENTRIES_MAX).await?) })
        })
        .await?;
        let full = page.len() == store::SCAN_PAGE_ENTRIES_MAX;
        for (vkey, value) in &page {
            let Some((key, d)) = keys::parse_version(vkey) else {
                continue;
            };
            if slot.as_ref().is_none_or(|(k, _, _)| k.as_slice() != key) {
                if let Some((k, _, ids)) = slot.take() {
                    finish_slot(engine, &k, ids, &mut out).await?;
                }
                slot = Some((key.to_vec(), 0, HashMap::new()));
            }
            let Some((_, prev, ids)) = slot.as_mut() else {
                continue;
            };
            let readers: BTreeSet<u64> = live.iter().copied().filter(|&s| *prev <= s && s < d).collect();
            *prev = d;
            let rec: VersionRec = keys::decode(vkey, value)?;
            if let (Some(raw), false) = (rec.value, readers.is_empty()) {
                let chunk: ChunkRecord = keys::decode(vkey, &raw)?;
                ids.entry(chunk.id).or_insert_with(|| (chunk, BTreeSet::new())).1.extend(readers);
            }
        }
        match page.last() {
            Some((last, _)) if full => start = store::after(last),
            _ => break,
        }
    }
    if let Some((k, _, ids)) = slot.take() {
        finish_slot(engine, &k, ids, &mut out).await?;
    }
    Ok(out)
}

async fn finish_slot(
    engine: &dyn KvEngine,
    key: &[u8],
    ids: HashMap<u64, (ChunkRecord, BTreeSet<u64>)>,
    out: &mut HashMap<u64, u64>,
) -> Result<(), WireError> {
    let slot = keys::parse_chunk(key);
    let key = key.to_vec();
    let live: Option<ChunkRecord> = transact(engine, move |txn| {
        let key = key.clone();
        Box::pin(async move { get(txn, &key).await })
    })
    .await?;
    for (id, (chunk, readers)) in ids {
        // A chunk a clone holds in another slot is not the snapshot's alone either.
        let elsewhere = match slot {
            Some(own) => {
                transact(engine, move |txn| Box::pin(async move { crate::clone::held_elsewhere(txn, own, id).await }))
                    .await?
            }
            None => false,
        };
        if readers.len() == 1 && !elsewhere && live.as_ref().is_none_or(|l| l.id != id) {
            if let Some(&s) = readers.iter().next() {
                *out.entry(s).or_default() += stored_bytes(&chunk);
            }
        }
    }
    Ok(())
}

/// Deletes snapshot `name` of `root` and prunes the versions no live snapshot reads any more
/// (their chunks then go to GC, which had kept them); returns the deleted record.
pub async fn delete(
    engine: &dyn KvEngine,
    root: Ino,
    name: &str,
    now_ms: u64,
    tracked: Tracked,
) -> Result<SnapshotRec, WireError> {
    let name = name.to_string();
    let rec = transact(engine, move |txn| {
        let name = name.clone();
        Box::pin(async move {
            if let Some(done) = replayed(txn, tracked).await? {
                return Ok(done);
            }
            let rec = find(txn, root, &name).await?;
            if now_ms < rec.retain_until_ms {
                let path = namespace::dir_path(txn, root).await?;
                fail!(
                    PermissionDenied,
                    "snapshot {name:?} of {path:?} is retained until {} (WORM): it cannot be deleted before then",
                    utc(rec.retain_until_ms)
                );
            }
            record(txn, tracked, &rec).await?;
            let mut state = read_state(txn).await?;
            state.live.retain(|&s| s != rec.epoch);
            put(txn, &keys::snapshot_state(), &state).await?;
            txn.delete(&keys::snapshot(rec.id)).await?;
            Ok(rec)
        })
    })
    .await?;
    prune(engine).await?;
    Ok(rec)
}

/// Removes every preserved version that no live snapshot reads: version (key, d) answers the
/// snapshots of epochs from the previous version's epoch (0 for the first) up to `d`. Works in
/// one transaction per page; returns how many versions it removed.
pub async fn prune(engine: &dyn KvEngine) -> Result<u64, WireError> {
    let mut from = vec![keys::prefix::VERSION];
    let end = kv::prefix_end(&from);
    let mut prev: Option<(Vec<u8>, u64)> = None;
    let mut removed = 0u64;
    loop {
        let (start, end2, carried) = (from.clone(), end.clone(), prev.clone());
        let (n, next, last) = transact(engine, move |txn| {
            let (start, end2, mut prev) = (start.clone(), end2.clone(), carried.clone());
            Box::pin(async move {
                let live = read_state(txn).await?.live;
                let page = txn.scan(&start, &end2, store::SCAN_PAGE_ENTRIES_MAX).await?;
                let mut n = 0u64;
                for (vkey, _) in &page {
                    let Some((key, d)) = keys::parse_version(vkey) else {
                        continue;
                    };
                    let lower = match &prev {
                        Some((k, p)) if k.as_slice() == key => *p,
                        _ => 0,
                    };
                    if !live.iter().any(|&s| lower <= s && s < d) {
                        txn.delete(vkey).await?;
                        n += 1;
                    }
                    prev = Some((key.to_vec(), d));
                }
                let next = match page.last() {
                    Some((last, _)) if page.len() == store::SCAN_PAGE_ENTRIES_MAX => Some(store::after(last)),
                    _ => None,
                };
                Ok((n, next, prev))
            })
        })
        .await?;
        removed += n;
        prev = last;
        match next {
            Some(next) => from = next,
            None => return Ok(removed),
        }
    }
}

/// A snapshot as the wire carries it.
pub fn info(rec: SnapshotRec, bytes_exclusive: u64) -> wire::SnapshotInfo {
    wire::SnapshotInfo {
        id: rec.id,
        name: rec.name,
        root: rec.root,
        created_ms: rec.created_ms,
        bytes_exclusive,
        retain_until_ms: rec.retain_until_ms,
    }
}

// ---------------------------------------------------------------------------------------------
// Diff.

/// How a path differs between two views of a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Added,
    Removed,
    Changed,
}

impl From<Change> for wire::ChangeKind {
    fn from(change: Change) -> wire::ChangeKind {
        match change {
            Change::Added => wire::ChangeKind::Added,
            Change::Removed => wire::ChangeKind::Removed,
            Change::Changed => wire::ChangeKind::Changed,
        }
    }
}

/// Whether two versions of an entry differ: another inode, other attributes (times of
/// directories aside, as entry changes below show on their own), or other chunks.
async fn entry_differs(txn: &mut dyn KvTxn, a: (&DentryRec, u64), b: (&DentryRec, u64)) -> TxResult<bool> {
    if a.0.ino != b.0.ino || a.0.kind != b.0.kind {
        return Ok(true);
    }
    let ino = a.0.ino;
    let (ra, rb) = (inode_at(txn, ino, a.1).await?, inode_at(txn, ino, b.1).await?);
    let (Some(ra), Some(rb)) = (ra, rb) else {
        return Ok(true);
    };
    if a.0.kind == FileKind::Dir {
        let (x, y) = (&ra.attr, &rb.attr);
        return Ok((x.mode, x.uid, x.gid) != (y.mode, y.uid, y.gid));
    }
    if ra.attr != rb.attr || ra.target != rb.target {
        return Ok(true);
    }
    Ok(a.0.kind == FileKind::File && chunks_at(txn, ino, a.1).await? != chunks_at(txn, ino, b.1).await?)
}

/// The paths (relative to `root`, `/`-separated) added, removed or changed from epoch `a` to
/// epoch `b` ([`LIVE`] for the live tree), in path order; a directory added or removed is one
/// entry. Walks one directory per transaction.
pub async fn diff(
    engine: &dyn KvEngine,
    root: Ino,
    a: u64,
    b: u64,
) -> Result<(Vec<(String, Change)>, bool), WireError> {
    let mut out = Vec::new();
    // (path, ino in a, ino in b) of directories to compare.
    let mut todo: Vec<(String, Ino, Ino, usize)> = vec![(String::new(), root, root, 0)];
    while let Some((path, da, db, depth)) = todo.pop() {
        if depth > DEPTH_MAX {
            return Err(wire::werr!(Internal, "directory nesting under {path:?} is deeper than {DEPTH_MAX}"));
        }
        let found = transact(engine, move |txn| {
            Box::pin(async move {
                let ea = entries_at(txn, da, a).await?;
                let eb = entries_at(txn, db, b).await?;
                let mut names: BTreeMap<String, (Option<DentryRec>, Option<DentryRec>)> = BTreeMap::new();
                for (name, e) in ea {
                    names.entry(name).or_default().0 = Some(e);
                }
                for (name, e) in eb {
                    names.entry(name).or_default().1 = Some(e);
                }
                let mut found = Vec::new();
                for (name, pair) in names {
                    match pair {
                        (Some(_), None) => found.push((name, Some(Change::Removed), None)),
                        (None, Some(_)) => found.push((name, Some(Change::Added), None)),
                        (Some(x), Some(y)) => {
                            let changed = entry_differs(txn, (&x, a), (&y, b)).await?;
                            let both_dirs = x.kind == FileKind::Dir && y.kind == FileKind::Dir;
                            let recurse = both_dirs.then_some((x.ino, y.ino));
                            found.push((name, changed.then_some(Change::Changed), recurse));
                        }
                        (None, None) => {}
                    }
                }
                Ok(found)
            })
        })
        .await?;
        for (name, change, recurse) in found.into_iter().rev() {
            let child = if path.is_empty() { name } else { format!("{path}/{name}") };
            if let Some(change) = change {
                if out.len() >= DIFF_ENTRIES_MAX {
                    out.sort();
                    return Ok((out, true));
                }
                out.push((child.clone(), change));
            }
            if let Some((x, y)) = recurse {
                todo.push((child, x, y, depth + 1));
            }
        }
    }
    out.sort();
    Ok((out, false))
}

// ---------------------------------------------------------------------------------------------
// Restore.

/// What a restore did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Regular files whose content and attributes were brought back.
    pub files: u64,
    /// Directories made again because the live tree had lost them.
    pub dirs: u64,
    /// Entries of the snapshot that could not be restored (a symlink or special file, or a
    /// name taken by another kind of file), each named in the log.
    pub skipped: u64,
}

/// Resolves `rel` (`/`-separated, relative to `root`) as of `epoch`: the directory holding
/// the last component, its name and entry. Empty `rel`: the root itself, with no entry.
async fn resolve_at(
    txn: &mut dyn KvTxn,
    root: Ino,
    rel: &str,
    epoch: u64,
) -> TxResult<Option<(Ino, String, DentryRec)>> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Ok(None);
    };
    let mut dir = root;
    for part in dirs {
        match lookup_at(txn, dir, part, epoch).await? {
            Some(e) if e.kind == FileKind::Dir => dir = e.ino,
            Some(_) => fail!(NotDir, "{part:?} in {rel:?} is not a directory"),
            None => {
                fail!(NotFound, "{rel:?}: no {part:?} in the {}", if epoch == LIVE { "live tree" } else { "snapshot" })
            }
        }
    }
    match lookup_at(txn, dir, last, epoch).await? {
        Some(e) => Ok(Some((dir, last.to_string(), e))),
        None => fail!(NotFound, "{rel:?} is not in the {}", if epoch == LIVE { "live tree" } else { "snapshot" }),
    }
}

/// Brings back file `ino` as of `epoch` into live directory `parent` under `name`: the same
/// inode, with the snapshot's attributes, extended attributes and chunks (shared with the
/// snapshot: nothing is copied). A live inode keeps its links (and gets the entry if the name
/// is free); a deleted one is made again with one link. Chunks the live file had and the
/// snapshot has not are queued for GC; chunks coming back leave the GC queue.
async fn restore_file(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, epoch: u64, parent: Ino, name: &str) -> TxResult<()> {
    crate::retain::refuse_changes(txn, vec![parent], &[(parent, name)], ctx.now_ms).await?;
    let Some(snap) = inode_at(txn, ino, epoch).await? else {
        fail!(Internal, "the snapshot's entry {name:?} points at inode {ino}, which the snapshot lacks");
    };
    let dir = namespace::load_dir(txn, parent).await?;
    let entry = namespace::get_dentry(txn, parent, name).await?;
    if entry.is_some_and(|e| e.ino != ino) {
        let path = namespace::entry_path(txn, parent, name).await?;
        fail!(Exists, "{path:?} is another file now; move it away to restore the snapshot's");
    }
    let live: Option<InodeRec> = get(txn, &keys::inode(ino)).await?;
    let mut rec = snap.clone();
    rec.attr.ctime = ctx.now;
    match &live {
        Some(l) => {
            if entry.is_none() && l.quota != quota::domain_of_entries(&dir) {
                fail!(CrossDevice, "file {name:?} of the snapshot lives in another quota tree now; restore it there");
            }
            rec.attr.nlink = l.attr.nlink + u32::from(entry.is_none());
            rec.quota = l.quota;
            let domain = quota::counted_in(txn, l).await?;
            let delta = quota::bytes_of(&rec) - quota::bytes_of(l);
            quota::charge(txn, ctx.now_ms, domain, delta, 0, true).await?;
        }
        None => {
            rec.attr.nlink = 1;
            rec.quota = quota::domain_of_entries(&dir);
            quota::charge(txn, ctx.now_ms, rec.quota, quota::bytes_of(&rec), 1, true).await?;
            store::stat_add(txn, Stat::Inodes, ino, 1).await?;
            store::stat_add(txn, Stat::Files, ino, 1).await?;
        }
    }
    if entry.is_none() {
        put(txn, &keys::dentry(parent, name), &DentryRec { ino, kind: FileKind::File }).await?;
        namespace::touch_dir(txn, parent, 0, ctx.now).await?;
    }
    namespace::store_inode(txn, &rec).await?;
    // Extended attributes: the snapshot's, exactly.
    let prefix = keys::xattr_prefix(ino);
    for (key, _) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        txn.delete(&key).await?;
    }
    for (xname, value) in xattrs_at(txn, ino, epoch).await? {
        let mut key = prefix.clone();
        key.extend_from_slice(&xname);
        txn.put(&key, &keys::encode_bytes(&value)).await?;
    }
    // Chunks.
    let want: BTreeMap<u64, ChunkRecord> =
        chunks_at(txn, ino, epoch).await?.into_iter().map(|c| (c.index, c)).collect();
    let have: BTreeMap<u64, ChunkRecord> = chunks_at(txn, ino, LIVE).await?.into_iter().map(|c| (c.index, c)).collect();
    let (mut count, mut queued) = (0i64, 0u64);
    for (index, chunk) in &have {
        if want.get(index).is_none_or(|w| w.id != chunk.id) {
            txn.delete(&keys::chunk(ino, *index)).await?;
            queued += namespace::queue_gc(txn, ctx, ino, chunk.clone()).await?;
            count -= 1;
        }
    }
    let mut unqueued = 0u64;
    for (index, chunk) in &want {
        match have.get(index) {
            Some(h) if h == chunk => continue,
            // The same chunk, clamped by a truncation since: its full length comes back.
            Some(h) if h.id == chunk.id => {
                put(txn, &keys::chunk(ino, *index), chunk).await?;
                continue;
            }
            _ => {}
        }
        if let Some(gc) = get::<GcRec>(txn, &keys::gc(chunk.id)).await? {
            if gc.done != 0 {
                fail!(Internal, "chunk {:016x} of the snapshot was partly deleted by GC", chunk.id);
            }
            txn.delete(&keys::gc(chunk.id)).await?;
            unqueued += gc.bytes_held();
        }
        put(txn, &keys::chunk(ino, *index), chunk).await?;
        count += 1;
    }
    store::stat_add(txn, Stat::Chunks, ino, count).await?;
    let net = i64::try_from(queued).unwrap_or(i64::MAX) - i64::try_from(unqueued).unwrap_or(i64::MAX);
    store::stat_add(txn, Stat::PendingDeleteBytes, ino, net).await?;
    Ok(())
}

/// Restores `rel` (a path relative to the snapshot's root; empty: the whole tree) from snapshot
/// `name` of `root` into the live tree at the same place. Files come back as they were in the
/// snapshot (same inode, shared chunks); directories missing from the live tree are made
/// again; live entries the snapshot did not have are left alone. One transaction per file.
pub async fn restore(
    engine: &dyn KvEngine,
    inos: &store::IdPool,
    ctx: &Ctx,
    root: Ino,
    name: &str,
    rel: &str,
) -> Result<RestoreReport, WireError> {
    let (name, rel_s) = (name.to_string(), rel.to_string());
    let (snap, target) = transact(engine, move |txn| {
        let (name, rel_s) = (name.clone(), rel_s.clone());
        Box::pin(async move {
            let snap = find(txn, root, &name).await?;
            let target = resolve_at(txn, root, &rel_s, snap.epoch).await?;
            Ok((snap, target))
        })
    })
    .await?;
    let epoch = snap.epoch;
    let mut report = RestoreReport::default();
    // The live directory that holds the target, found along the same path.
    let parent_rel: String = {
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
        parts[..parts.len().saturating_sub(1)].join("/")
    };
    let live_parent = if parent_rel.is_empty() {
        root
    } else {
        let p = parent_rel.clone();
        transact(engine, move |txn| {
            let p = p.clone();
            Box::pin(async move {
                match resolve_at(txn, root, &p, LIVE).await? {
                    Some((_, _, e)) if e.kind == FileKind::Dir => Ok(e.ino),
                    _ => fail!(NotDir, "{p:?} is not a directory in the live tree; restore it first"),
                }
            })
        })
        .await?
    };
    // Nothing comes back into a locked (WORM) tree: refused at once for the directory restored
    // into, and entry by entry (skipped) below it.
    let now_ms = ctx.now_ms;
    transact(engine, move |txn| {
        Box::pin(async move { crate::retain::refuse_changes(txn, vec![live_parent], &[], now_ms).await })
    })
    .await?;
    // (snapshot dir, live dir) pairs to restore the entries of, or one file.
    let mut todo: Vec<(Ino, Ino, usize)> = Vec::new();
    match target {
        None => todo.push((root, root, 0)),
        Some((_, fname, e)) if e.kind == FileKind::File => {
            let c = ctx.clone();
            transact(engine, move |txn| {
                let (c, fname) = (c.clone(), fname.clone());
                Box::pin(async move { restore_file(txn, &c, e.ino, epoch, live_parent, &fname).await })
            })
            .await?;
            report.files += 1;
        }
        Some((_, dname, e)) if e.kind == FileKind::Dir => {
            let live_dir = ensure_dir(engine, inos, ctx, e.ino, epoch, live_parent, &dname, &mut report).await?;
            todo.push((e.ino, live_dir, 0));
        }
        Some((_, _, e)) => fail_now(format!("{rel:?} is a {:?}; only files and directories are restored", e.kind))?,
    }
    while let Some((sdir, ldir, depth)) = todo.pop() {
        if depth > DEPTH_MAX {
            return Err(wire::werr!(Internal, "directory nesting deeper than {DEPTH_MAX}"));
        }
        let entries = transact(engine, move |txn| Box::pin(async move { entries_at(txn, sdir, epoch).await })).await?;
        for (ename, e) in entries {
            match e.kind {
                FileKind::File => {
                    let (c, n) = (ctx.clone(), ename.clone());
                    let done = transact(engine, move |txn| {
                        let (c, n) = (c.clone(), n.clone());
                        Box::pin(async move { restore_file(txn, &c, e.ino, epoch, ldir, &n).await })
                    })
                    .await;
                    match done {
                        Ok(()) => report.files += 1,
                        Err(err) => {
                            tracing::warn!("snapshot restore: {ename:?}: {err}");
                            report.skipped += 1;
                        }
                    }
                }
                FileKind::Dir => match ensure_dir(engine, inos, ctx, e.ino, epoch, ldir, &ename, &mut report).await {
                    Ok(live) => todo.push((e.ino, live, depth + 1)),
                    Err(err) => {
                        tracing::warn!("snapshot restore: {ename:?}: {err}");
                        report.skipped += 1;
                    }
                },
                _ => {
                    tracing::warn!("snapshot restore: {ename:?} is a {:?}, not restored", e.kind);
                    report.skipped += 1;
                }
            }
        }
    }
    Ok(report)
}

fn fail_now(message: String) -> Result<(), WireError> {
    Err(wire::werr!(NotSupported, "{message}"))
}

/// The live directory `name` of `parent`, made (with the snapshot directory's mode and owner)
/// if it is missing.
#[allow(clippy::too_many_arguments)]
async fn ensure_dir(
    engine: &dyn KvEngine,
    inos: &store::IdPool,
    ctx: &Ctx,
    snap_dir: Ino,
    epoch: u64,
    parent: Ino,
    name: &str,
    report: &mut RestoreReport,
) -> Result<Ino, WireError> {
    let new_ino = inos.take(engine, 1).await?.first().copied();
    let mut c = ctx.clone();
    c.new_ino = new_ino;
    let name = name.to_string();
    let (ino, made) = transact(engine, move |txn| {
        let (c, name) = (c.clone(), name.clone());
        Box::pin(async move {
            if let Some(e) = namespace::get_dentry(txn, parent, &name).await? {
                if e.kind != FileKind::Dir {
                    let path = namespace::entry_path(txn, parent, &name).await?;
                    fail!(Exists, "{path:?} is not a directory now");
                }
                return Ok((e.ino, false));
            }
            crate::retain::refuse_changes(txn, vec![parent], &[], c.now_ms).await?;
            let Some(snap) = inode_at(txn, snap_dir, epoch).await? else {
                fail!(Internal, "the snapshot lacks directory inode {snap_dir}");
            };
            let new = namespace::NewInode {
                kind: FileKind::Dir,
                mode: snap.attr.mode,
                uid: snap.attr.uid,
                gid: snap.attr.gid,
                rdev: 0,
                target: String::new(),
            };
            match namespace::make(txn, &c, parent, &name, new).await? {
                MetaReply::Entry { attr, .. } => Ok((attr.ino, true)),
                other => fail!(Internal, "mkdir answered {other:?}"),
            }
        })
    })
    .await?;
    if made {
        report.dirs += 1;
    }
    Ok(ino)
}

// ---------------------------------------------------------------------------------------------
// Browsing: `PATH/.snapshots/NAME/...` through the ordinary read operations.

/// Bit 63 set: a view inode, which reads a directory or file as of a snapshot. Below it, the
/// snapshot id (0: the `.snapshots` directory of a live directory) and, in the low
/// [`VIEW_INO_BITS`] bits, the live inode number. Inode numbers of the live tree never reach
/// bit 40 (they count up from 2), so the two spaces never meet.
pub const VIEW_BIT: u64 = 1 << 63;
/// Bits of the live inode number in a view inode.
pub const VIEW_INO_BITS: u32 = 40;
/// The largest snapshot id a view inode can carry (23 bits).
pub const VIEW_SNAPSHOT_ID_MAX: u64 = (1 << (63 - VIEW_INO_BITS)) - 1;

/// The view inode of `ino` as of snapshot `snap` (0: the `.snapshots` directory of `ino`).
pub fn view_ino(snap: u64, ino: Ino) -> Option<Ino> {
    (snap <= VIEW_SNAPSHOT_ID_MAX && ino < (1 << VIEW_INO_BITS)).then_some(VIEW_BIT | (snap << VIEW_INO_BITS) | ino)
}

/// Splits a view inode into snapshot id and live inode number.
pub fn parse_view(ino: Ino) -> Option<(u64, Ino)> {
    (ino & VIEW_BIT != 0).then_some(((ino & !VIEW_BIT) >> VIEW_INO_BITS, ino & ((1 << VIEW_INO_BITS) - 1)))
}

pub fn is_view(ino: Ino) -> bool {
    ino & VIEW_BIT != 0
}

fn read_only(what: &str) -> WireError {
    wire::werr!(ReadOnly, "{what}: snapshots are read-only (restore with `trove snapshot restore`)")
}

/// A view's attributes: the snapshot's, with the view inode number. The mode is the file's as
/// it was (as ZFS and NetApp show theirs), so `cp -a` and `trove snapshot push` copy it as it
/// was; writes are refused whatever the mode says (`ReadOnly`).
fn view_attr_of(mut attr: Attr, snap: u64) -> TxResult<Attr> {
    let Some(ino) = view_ino(snap, attr.ino) else {
        fail!(NotSupported, "inode {} or snapshot {snap} is beyond what snapshot browsing numbers", attr.ino);
    };
    attr.ino = ino;
    Ok(attr)
}

/// The snapshot a view inode reads, if it is still live.
async fn live_snapshot(txn: &mut dyn KvTxn, snap: u64) -> TxResult<SnapshotRec> {
    match get::<SnapshotRec>(txn, &keys::snapshot(snap)).await? {
        Some(rec) => Ok(rec),
        None => fail!(NotFound, "snapshot {snap} was deleted"),
    }
}

/// The attributes of view inode `ino`.
async fn view_attr(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<Attr> {
    let Some((snap, live)) = parse_view(ino) else {
        fail!(Internal, "inode {ino} is not a snapshot view");
    };
    if snap == 0 {
        // The `.snapshots` directory: the live directory's attributes, read-only.
        let rec = namespace::load_dir(txn, live).await?;
        let mut attr = view_attr_of(rec.attr, 0)?;
        attr.mode = 0o555;
        attr.nlink = 2;
        return Ok(attr);
    }
    let rec = live_snapshot(txn, snap).await?;
    match attr_at(txn, live, rec.epoch).await? {
        Some(attr) => view_attr_of(attr, snap),
        None => fail!(NotFound, "inode {live} is not in snapshot {:?}", rec.name),
    }
}

/// Looks `name` up in `parent`, for a view parent or the `.snapshots` name; `None` when the
/// live namespace answers.
async fn view_lookup(txn: &mut dyn KvTxn, parent: Ino, name: &str) -> TxResult<Option<Attr>> {
    match parent_view(parent) {
        None if name == SNAPSHOT_DIR_NAME => {
            // Reachable by name only where the directory has snapshots.
            if records(txn).await?.iter().any(|r| r.root == parent) {
                namespace::load_dir(txn, parent).await?;
                let Some(ino) = view_ino(0, parent) else {
                    return Ok(None);
                };
                return Ok(Some(view_attr(txn, ino).await?));
            }
            Ok(None)
        }
        None => Ok(None),
        Some((0, dir)) => {
            let Some(rec) = records(txn).await?.into_iter().find(|r| r.root == dir && r.name == name) else {
                fail!(NotFound, "no snapshot {name:?}");
            };
            match attr_at(txn, dir, rec.epoch).await? {
                Some(attr) => Ok(Some(view_attr_of(attr, rec.id)?)),
                None => fail!(Internal, "snapshot {name:?} lacks its own directory"),
            }
        }
        Some((snap, dir)) => {
            let rec = live_snapshot(txn, snap).await?;
            let Some(entry) = lookup_at(txn, dir, name, rec.epoch).await? else {
                fail!(NotFound, "no entry {name:?} in this directory of snapshot {:?}", rec.name);
            };
            match attr_at(txn, entry.ino, rec.epoch).await? {
                Some(attr) => Ok(Some(view_attr_of(attr, snap)?)),
                None => fail!(Internal, "entry {name:?} of snapshot {:?} has no inode", rec.name),
            }
        }
    }
}

fn parent_view(ino: Ino) -> Option<(u64, Ino)> {
    parse_view(ino)
}

async fn view_readdir(txn: &mut dyn KvTxn, ino: Ino, after: &str, limit: u32) -> TxResult<MetaReply> {
    let Some((snap, dir)) = parse_view(ino) else {
        fail!(Internal, "inode {ino} is not a snapshot view");
    };
    let limit =
        if limit == 0 { namespace::READDIR_ENTRIES_MAX } else { limit.min(namespace::READDIR_ENTRIES_MAX) } as usize;
    let mut entries = Vec::new();
    let mut more = false;
    if snap == 0 {
        let mut recs: Vec<SnapshotRec> = records(txn).await?.into_iter().filter(|r| r.root == dir).collect();
        recs.sort_by(|a, b| a.name.cmp(&b.name));
        for rec in recs.into_iter().filter(|r| r.name.as_str() > after) {
            if entries.len() == limit {
                more = true;
                break;
            }
            if let Some(attr) = attr_at(txn, dir, rec.epoch).await? {
                entries.push(wire::DirEntry { name: rec.name.clone(), attr: view_attr_of(attr, rec.id)? });
            }
        }
    } else {
        let rec = live_snapshot(txn, snap).await?;
        for (name, entry) in entries_at(txn, dir, rec.epoch).await? {
            if name.as_str() <= after {
                continue;
            }
            if entries.len() == limit {
                more = true;
                break;
            }
            if let Some(attr) = attr_at(txn, entry.ino, rec.epoch).await? {
                entries.push(wire::DirEntry { name, attr: view_attr_of(attr, snap)? });
            }
        }
    }
    Ok(MetaReply::Entries { entries, more })
}

async fn view_chunks(txn: &mut dyn KvTxn, ino: Ino, first: u64, count: u64) -> TxResult<MetaReply> {
    let attr = view_attr(txn, ino).await?;
    let Some((snap, file)) = parse_view(ino) else {
        fail!(Internal, "inode {ino} is not a snapshot view");
    };
    if attr.kind != FileKind::File || snap == 0 {
        fail!(Invalid, "inode {ino} of a snapshot is not a regular file");
    }
    let rec = live_snapshot(txn, snap).await?;
    let count = count.min(namespace::CHUNKS_PER_CALL_MAX);
    let mut chunks: Vec<ChunkRecord> = chunks_at(txn, file, rec.epoch)
        .await?
        .into_iter()
        .filter(|c| c.index >= first && c.index - first < count)
        .collect();
    // A chunk the live file still holds may have moved since (rebuild, drain, rebalance
    // change its placement under the same id): its live record says where its shards are now.
    for chunk in &mut chunks {
        if let Some(live) = get::<ChunkRecord>(txn, &keys::chunk(file, chunk.index)).await? {
            if live.id == chunk.id {
                *chunk = live;
            }
        }
    }
    Ok(MetaReply::Chunks { attr, chunks })
}

/// Regular file `ino` of a snapshot view as the snapshot holds it (a clone's source): its
/// attributes, numbered as the live inode, and its chunk records.
pub async fn view_file(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<(Attr, Vec<ChunkRecord>)> {
    let Some((snap, file)) = parse_view(ino) else {
        fail!(Internal, "inode {ino} is not a snapshot view");
    };
    let rec = if snap == 0 {
        fail!(Invalid, "a .snapshots directory is not a regular file");
    } else {
        live_snapshot(txn, snap).await?
    };
    let Some(attr) = attr_at(txn, file, rec.epoch).await? else {
        fail!(NotFound, "inode {file} is not in snapshot {:?}", rec.name);
    };
    let chunks = chunks_at(txn, file, rec.epoch).await?;
    Ok((attr, chunks))
}

/// Resolves a path that passes through `.snapshots`, one component at a time.
async fn view_resolve(txn: &mut dyn KvTxn, path: &str) -> TxResult<Attr> {
    let mut attr = namespace::load(txn, wire::ROOT_INO).await?.attr;
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if attr.kind != FileKind::Dir {
            fail!(NotDir, "{path:?}: a component before {part:?} is not a directory");
        }
        attr = match view_lookup(txn, attr.ino, part).await? {
            Some(a) => a,
            None => match namespace::get_dentry(txn, attr.ino, part).await? {
                Some(entry) => namespace::load_attr(txn, entry.ino).await?,
                None => fail!(NotFound, "{path:?}: no {part:?}"),
            },
        };
    }
    Ok(attr)
}

/// The inodes a mutation names, to refuse it on a snapshot view.
fn mutated_inos(op: &MetaOp) -> Vec<Ino> {
    match op {
        MetaOp::SetAttr { ino, .. }
        | MetaOp::SetXattr { ino, .. }
        | MetaOp::RemoveXattr { ino, .. }
        | MetaOp::SetLayout { ino, .. }
        | MetaOp::AllocChunks { ino, .. }
        | MetaOp::AllocChunksIn { ino, .. }
        | MetaOp::AbandonChunks { ino, .. }
        | MetaOp::CommitChunks { ino, .. }
        | MetaOp::ReplaceChunk { ino, .. }
        | MetaOp::SetPool { ino, .. }
        | MetaOp::SetFilePool { ino, .. }
        | MetaOp::SetQuota { ino, .. }
        | MetaOp::RetainTree { ino, .. }
        | MetaOp::Lock { ino, .. } => vec![*ino],
        MetaOp::Create { parent, .. }
        | MetaOp::Mkdir { parent, .. }
        | MetaOp::Mknod { parent, .. }
        | MetaOp::Symlink { parent, .. }
        | MetaOp::Unlink { parent, .. }
        | MetaOp::Rmdir { parent, .. }
        | MetaOp::CloneFile { parent, .. } => vec![*parent],
        MetaOp::Link { ino, new_parent, .. } => vec![*ino, *new_parent],
        MetaOp::Rename { parent, new_parent, .. } => vec![*parent, *new_parent],
        MetaOp::AppendFile { target, parent, .. } => vec![*target, *parent],
        MetaOp::SnapshotCreate { root, .. } => vec![*root],
        _ => Vec::new(),
    }
}

/// Whether `op` would change something under a snapshot view (refused with `ReadOnly`).
pub fn writes_view(op: &MetaOp) -> bool {
    mutated_inos(op).iter().any(|&i| is_view(i))
}

/// Answers `op` when it concerns a snapshot view: reads as of the snapshot, writes refused
/// with `ReadOnly`. Gives `op` back when the live namespace answers it (access-time updates
/// lose their view inodes on the way).
pub async fn view_call(engine: &dyn KvEngine, op: MetaOp) -> Result<Result<MetaReply, WireError>, MetaOp> {
    let reads_view = match &op {
        MetaOp::Lookup { parent, name } | MetaOp::LookupChunks { parent, name, .. } => {
            is_view(*parent) || name == SNAPSHOT_DIR_NAME
        }
        MetaOp::GetAttr { ino }
        | MetaOp::ReadDir { ino, .. }
        | MetaOp::GetChunks { ino, .. }
        | MetaOp::ReadLink { ino }
        | MetaOp::GetXattr { ino, .. }
        | MetaOp::ListXattr { ino } => is_view(*ino),
        MetaOp::Resolve { path } => path.split('/').any(|p| p == SNAPSHOT_DIR_NAME),
        MetaOp::TouchAtimes { inos, atime } if inos.iter().any(|&i| is_view(i)) => {
            let inos: Vec<Ino> = inos.iter().copied().filter(|&i| !is_view(i)).collect();
            if inos.is_empty() {
                return Ok(Ok(MetaReply::Ok));
            }
            return Err(MetaOp::TouchAtimes { inos, atime: *atime });
        }
        other => {
            if mutated_inos(other).iter().any(|&i| is_view(i)) {
                return Ok(Err(read_only(other.name())));
            }
            if let MetaOp::Create { name, .. }
            | MetaOp::Mkdir { name, .. }
            | MetaOp::Mknod { name, .. }
            | MetaOp::Symlink { name, .. }
            | MetaOp::Unlink { name, .. }
            | MetaOp::Rmdir { name, .. }
            | MetaOp::CloneFile { name, .. } = other
            {
                if name == SNAPSHOT_DIR_NAME {
                    return Ok(Err(read_only(SNAPSHOT_DIR_NAME)));
                }
            }
            false
        }
    };
    if !reads_view {
        return Err(op);
    }
    let op = Arc::new(op);
    let shared = op.clone();
    let answer = transact(engine, move |txn| {
        let op = shared.clone();
        Box::pin(async move {
            match op.as_ref() {
                MetaOp::Lookup { parent, name } => match view_lookup(txn, *parent, name).await? {
                    Some(attr) => Ok(Some(MetaReply::Attr(attr))),
                    None => Ok(None),
                },
                MetaOp::LookupChunks { parent, name, count } => match view_lookup(txn, *parent, name).await? {
                    Some(attr) if attr.kind == FileKind::File => Ok(Some(view_chunks(txn, attr.ino, 0, *count).await?)),
                    Some(attr) => Ok(Some(MetaReply::Attr(attr))),
                    None => Ok(None),
                },
                MetaOp::GetAttr { ino } => Ok(Some(MetaReply::Attr(view_attr(txn, *ino).await?))),
                MetaOp::ReadDir { ino, after, limit } => Ok(Some(view_readdir(txn, *ino, after, *limit).await?)),
                MetaOp::GetChunks { ino, first, count } => Ok(Some(view_chunks(txn, *ino, *first, *count).await?)),
                MetaOp::ReadLink { ino } => {
                    let attr = view_attr(txn, *ino).await?;
                    let (snap, live) = parse_view(*ino).unwrap_or((0, 0));
                    let rec = live_snapshot(txn, snap).await?;
                    match inode_at(txn, live, rec.epoch).await? {
                        Some(r) if attr.kind == FileKind::Symlink => Ok(Some(MetaReply::Target(r.target))),
                        _ => fail!(Invalid, "inode {ino} of a snapshot is not a symlink"),
                    }
                }
                MetaOp::GetXattr { ino, name } => {
                    let (snap, live) = parse_view(*ino).unwrap_or((0, 0));
                    let rec = live_snapshot(txn, snap).await?;
                    match xattrs_at(txn, live, rec.epoch).await?.into_iter().find(|(n, _)| n == name.as_bytes()) {
                        Some((_, value)) => Ok(Some(MetaReply::Value(value))),
                        None => fail!(NoAttr, "no extended attribute {name:?}"),
                    }
                }
                MetaOp::ListXattr { ino } => {
                    let (snap, live) = parse_view(*ino).unwrap_or((0, 0));
                    if snap == 0 {
                        return Ok(Some(MetaReply::Names(Vec::new())));
                    }
                    let rec = live_snapshot(txn, snap).await?;
                    let names = xattrs_at(txn, live, rec.epoch)
                        .await?
                        .into_iter()
                        .map(|(n, _)| String::from_utf8_lossy(&n).into_owned())
                        .collect();
                    Ok(Some(MetaReply::Names(names)))
                }
                MetaOp::Resolve { path } => Ok(Some(MetaReply::Attr(view_resolve(txn, path).await?))),
                _ => Ok(None),
            }
        })
    })
    .await;
    match answer {
        Ok(Some(reply)) => Ok(Ok(reply)),
        Ok(None) => Err(Arc::try_unwrap(op).unwrap_or_else(|op| (*op).clone())),
        Err(err) => Ok(Err(err)),
    }
}
