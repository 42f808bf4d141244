//! Garbage collection of chunk shards: deletes, on the storage nodes, the shards of chunks that
//! the namespace no longer references (replaced by copy-on-write, truncated away, or belonging to
//! deleted files).
//!
//! The namespace queues such chunks under `G` keys in the same transaction that drops the
//! reference, so nothing is ever forgotten; this module drains the queue. An entry is removed
//! only after every node holding one of its shards confirmed the deletion; a node that is down
//! or unreachable is retried on a later pass. Nothing referenced is deleted: the namespace
//! refuses to reference a queued chunk id again, and before deleting, GC checks that the
//! chunk's former slot no longer points at it.
//!
//! A chunk that a preserved version of its slot still references (a live snapshot reads it,
//! see `snapshot`) is left queued and untouched until the snapshot is deleted. A chunk another
//! file holds (a clone, see `clone`: its `s` record lists the slots) leaves the queue without
//! being deleted; the last file to let it go queues it again.
//!
//! Entries wait a grace period after queueing, so that a reader that fetched the old chunk list
//! just before an overwrite or unlink can still finish its read.

use crate::cluster::Cluster;
use crate::keys::{self, GcRec, NodeRec, Stat};
use crate::store::{self, abort, get, now_ms, transact};
use bytes::Bytes;
use kv::KvEngine;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use wire::{ChunkRecord, NodeId, NodeState, Peer, Service, ShardKey, StorageOp, StorageReply, WireError};

/// Most queue entries one GC step reads and works on.
pub const GC_BATCH_ENTRIES_MAX: usize = 256;
/// How long a storage node may take to confirm a deletion.
pub const DELETE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one GC pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Queue entries completed and removed (every shard confirmed deleted).
    pub chunks_deleted: u64,
    /// Queue entries left for a later pass (in their grace period, or a node did not confirm).
    pub chunks_pending: u64,
    /// Queue entries dropped without deleting because the chunk is still referenced (a bug
    /// elsewhere; logged).
    pub chunks_referenced: u64,
    /// Queue entries dropped without deleting because another file (a clone) holds the chunk.
    pub chunks_shared: u64,
    /// Shard deletions confirmed by storage nodes.
    pub shards_deleted: u64,
}

/// The garbage collector: a connection per storage node, reused across passes.
pub struct Gc {
    grace_ms: u64,
    peers: Mutex<HashMap<NodeId, Arc<Peer>>>,
    /// The network the storage nodes are reached over (TCP but under the simulator).
    net: Mutex<wire::world::Net>,
}

/// One queue entry as a pass works on it.
struct Entry {
    key: Vec<u8>,
    rec: GcRec,
    /// Shards confirmed during this pass.
    done: u64,
    /// Drop the entry without further deletions (still referenced).
    referenced: bool,
    /// Drop the entry without further deletions: another file (a clone) holds the chunk.
    shared: bool,
    /// Whether this pass considered it (out of its grace period).
    due: bool,
}

fn width_mask(chunk: &ChunkRecord) -> u64 {
    let width = chunk.ec.width();
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

impl Gc {
    pub fn new(grace_ms: u64) -> Gc {
        Gc { grace_ms, peers: Mutex::new(HashMap::new()), net: Mutex::new(wire::world::Net::Tcp) }
    }

    /// Reaches the storage nodes over `net` from now on.
    pub fn set_net(&self, net: wire::world::Net) {
        *self.net.lock() = net;
        self.peers.lock().clear();
    }

    fn peer(&self, node: &NodeRec) -> Arc<Peer> {
        let mut peers = self.peers.lock();
        match peers.get(&node.id) {
            Some(peer) if peer.addr() == node.addr => peer.clone(),
            _ => {
                let net = self.net.lock().clone();
                let peer = Arc::new(Peer::on(net, node.addr.clone(), Service::Storage, Default::default()));
                peers.insert(node.id, peer.clone());
                peer
            }
        }
    }

    /// Works through the whole queue once.
    pub async fn run_once(&self, engine: &dyn KvEngine, cluster: &Cluster) -> Result<GcReport, WireError> {
        let nodes: HashMap<NodeId, NodeRec> = cluster.nodes(engine).await?.into_iter().map(|n| (n.id, n)).collect();
        let mut report = GcReport::default();
        let mut from = vec![keys::prefix::GC];
        loop {
            let (mut entries, next) = self.read_batch(engine, &from).await?;
            self.delete_shards(engine, cluster, &nodes, &mut entries, &mut report).await;
            self.record(engine, &entries, &mut report).await?;
            match next {
                Some(next) => from = next,
                None => return Ok(report),
            }
        }
    }

    /// Reads up to a batch of queue entries from `from` on, checking whether each chunk is still
    /// referenced; returns them and where the next batch starts (`None`: queue end).
    async fn read_batch(&self, engine: &dyn KvEngine, from: &[u8]) -> Result<(Vec<Entry>, Option<Vec<u8>>), WireError> {
        let (now, grace_ms) = (now_ms(), self.grace_ms);
        let from = from.to_vec();
        transact(engine, move |txn| {
            let from = from.clone();
            Box::pin(async move {
                let end = kv::prefix_end(&[keys::prefix::GC]);
                let page = txn.scan(&from, &end, GC_BATCH_ENTRIES_MAX).await?;
                let next = match page.last() {
                    Some((last, _)) if page.len() == GC_BATCH_ENTRIES_MAX => Some(store::after(last)),
                    _ => None,
                };
                let mut entries = Vec::with_capacity(page.len());
                for (key, value) in page {
                    let rec: GcRec = keys::decode(&key, &value).map_err(abort)?;
                    let slot = keys::chunk(rec.ino, rec.chunk.index);
                    let referenced = get::<ChunkRecord>(txn, &slot).await?.is_some_and(|c| c.id == rec.chunk.id);
                    // A chunk another file still holds (a clone) leaves the queue; it is queued
                    // again when the last of them lets it go.
                    let shared = !referenced
                        && !wire::world::flawed(wire::world::Flaw::GcIgnoresClones)
                        && crate::clone::held_elsewhere(txn, (rec.ino, rec.chunk.index), rec.chunk.id).await?;
                    // A chunk a snapshot still reads waits, queued, until the snapshot goes.
                    let held = !referenced
                        && !shared
                        && crate::snapshot::chunk_held(txn, rec.ino, rec.chunk.index, rec.chunk.id).await?;
                    let due = !held && rec.queued_ms.saturating_add(grace_ms) <= now;
                    entries.push(Entry { key, rec, done: 0, referenced, shared, due });
                }
                Ok((entries, next))
            })
        })
        .await
    }

    /// Sends the deletions of due entries to the nodes that serve, marking confirmed shards.
    async fn delete_shards(
        &self,
        engine: &dyn KvEngine,
        cluster: &Cluster,
        nodes: &HashMap<NodeId, NodeRec>,
        entries: &mut [Entry],
        report: &mut GcReport,
    ) {
        // node -> (entry index, shard index) pairs to delete there.
        // Ordered, so that the deletions go out in the same order every time (the simulator
        // replays a seed exactly).
        let mut work: BTreeMap<NodeId, Vec<(usize, usize)>> = BTreeMap::new();
        for (e, entry) in entries.iter_mut().enumerate() {
            if !entry.due || entry.referenced || entry.shared {
                continue;
            }
            let chunk = &entry.rec.chunk;
            let map = match cluster.map(engine, chunk.placement.map_version).await {
                Ok(map) => map,
                Err(err) => {
                    tracing::warn!("gc: chunk {:016x}: placement map unavailable: {err}", chunk.id);
                    continue;
                }
            };
            for shard in 0..chunk.ec.width() {
                let bit = 1u64 << shard;
                if entry.rec.done & bit != 0 {
                    continue;
                }
                let node = map.node_for(chunk.placement.pg, shard).and_then(|id| nodes.get(&id));
                match node {
                    // No node, or one removed from the cluster: nothing left to delete there.
                    None => entry.done |= bit,
                    Some(node) if node.state == NodeState::Out => entry.done |= bit,
                    Some(node) if cluster.serves(node) => work.entry(node.id).or_default().push((e, shard)),
                    // A down node never received a shard marked missing; others wait for it.
                    Some(_) if chunk.missing & bit != 0 => entry.done |= bit,
                    Some(_) => {}
                }
            }
        }
        let mut calls = JoinSet::new();
        for (node, shards) in work {
            let Some(rec) = nodes.get(&node) else {
                continue;
            };
            let peer = self.peer(rec);
            let keys: Vec<ShardKey> = shards
                .iter()
                .map(|&(e, shard)| ShardKey { chunk: entries[e].rec.chunk.id, index: shard as u8 })
                .collect();
            calls.spawn(async move {
                let op = StorageOp::DeleteShards { keys };
                let result = peer.call::<StorageOp, StorageReply>(&op, Bytes::new(), DELETE_TIMEOUT).await;
                (node, shards, result)
            });
        }
        while let Some(joined) = calls.join_next().await {
            let Ok((node, shards, result)) = joined else {
                continue;
            };
            match result {
                Ok((StorageReply::Deleted { .. } | StorageReply::Ok, _)) => {
                    report.shards_deleted += shards.len() as u64;
                    for (e, shard) in shards {
                        entries[e].done |= 1u64 << shard;
                    }
                }
                Ok((other, _)) => {
                    tracing::warn!("gc: node {node} answered DeleteShards with {other:?}")
                }
                Err(err) => tracing::warn!("gc: node {node}: {err}; retrying on a later pass"),
            }
        }
    }

    /// Stores what this pass achieved: completed entries are removed, partial progress is
    /// merged into the stored entry.
    async fn record(&self, engine: &dyn KvEngine, entries: &[Entry], report: &mut GcReport) -> Result<(), WireError> {
        let mut changes: Vec<(Vec<u8>, u64, bool)> = Vec::new();
        for entry in entries {
            if entry.referenced {
                tracing::error!(
                    "gc: chunk {:016x} is queued for deletion but still referenced by inode {} index {}; dropping it from the queue without deleting",
                    entry.rec.chunk.id,
                    entry.rec.ino,
                    entry.rec.chunk.index
                );
                report.chunks_referenced += 1;
                changes.push((entry.key.clone(), 0, true));
                continue;
            }
            if entry.shared {
                report.chunks_shared += 1;
                changes.push((entry.key.clone(), 0, true));
                continue;
            }
            let done = entry.rec.done | entry.done;
            let complete = done & width_mask(&entry.rec.chunk) == width_mask(&entry.rec.chunk);
            if complete {
                report.chunks_deleted += 1;
            } else {
                report.chunks_pending += 1;
            }
            if complete || entry.done != 0 {
                changes.push((entry.key.clone(), entry.done, complete));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let changes = Arc::new(changes);
        transact(engine, move |txn| {
            let changes = changes.clone();
            Box::pin(async move {
                // Bytes no longer held, per statistics shard (the shard of the entry's file,
                // as queueing counted them): one update per shard, not per entry.
                let mut freed: HashMap<u64, u64> = HashMap::new();
                for (key, done, remove) in changes.iter() {
                    let Some(mut rec) = get::<GcRec>(txn, key).await? else {
                        continue;
                    };
                    let held = rec.bytes_held();
                    if *remove {
                        txn.delete(key).await?;
                        // Every shard deleted: the record of the chunk's slots goes with it.
                        // (An entry dropped because the chunk is held keeps it.)
                        if (rec.done | done) & width_mask(&rec.chunk) == width_mask(&rec.chunk) {
                            txn.delete(&keys::shared(rec.chunk.id)).await?;
                        }
                        *freed.entry(rec.ino % keys::STAT_SHARDS).or_default() += held;
                    } else {
                        rec.done |= done;
                        store::put(txn, key, &rec).await?;
                        *freed.entry(rec.ino % keys::STAT_SHARDS).or_default() += held - rec.bytes_held();
                    }
                }
                for (shard, bytes) in freed {
                    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
                    store::stat_add(txn, Stat::PendingDeleteBytes, shard, -bytes).await?;
                }
                Ok(())
            })
        })
        .await
    }
}
