//! The data mover: brings every chunk to the newest placement map and to full redundancy.
//!
//! One mechanism serves rebuild (a node marked out), drain (a node leaving while it serves),
//! rebalance (a node added) and repair (shards never written, or found bad by scrub): the
//! metadata service publishes a new placement map, and each chunk still placed by an older one
//! is moved to it. Because maps assign shard slots per placement group by rendezvous hashing,
//! most slots keep their node across versions; only the shards whose slot changed node (and
//! missing or bad ones) are written, and a chunk whose slots all stay put needs only its record
//! updated.
//!
//! Moving one chunk: read it (verified end to end, rebuilt from any `k` good shards when some
//! are lost), re-encode it, check each re-encoded shard's checksum table against the chunk
//! record (so a shard is never written unless it is bit-identical to what the writer stored),
//! put the shards that change place, then commit the new placement with `MetaOp::MoveChunk`,
//! which refuses if the file changed meanwhile. Shards left at their old place are deleted
//! only after a grace period (readers holding the old record finish their reads), and only if
//! the chunk's current record does not place them there again.
//!
//! Re-encoding: a chunk coded narrower than its file's scheme (written while too few nodes were
//! up) is re-encoded in the widest scheme the nodes now allow, under a new chunk id, and a chunk
//! whose scheme the newest map cannot hold (a node removed knowingly with too few left) is
//! re-encoded narrower to fit, keeping full parity where it can. The new chunk replaces the old
//! one with `MetaOp::ReplaceChunk` (refused if the file changed meanwhile); the old one goes to
//! GC. The bytes are the same, so the file's data version does not change.
//!
//! The mover runs in the metadata server holding the cluster manager's lease (see
//! `runner.rs`); it is a client of the cluster like any other, throttled to a byte rate. Between
//! map changes it does not walk the chunk records: it repairs what the work queue names
//! ([`Mover::queue_pass`]); a full pass ([`Mover::pass`]) queues what it leaves. A chunk it
//! cannot move is logged at debug; a pass's failures are summed up by kind in its report, so a
//! cause that affects every chunk costs one line per pass, not one per chunk.

use crate::Throttle;
use bytes::Bytes;
use client::{Client, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wire::{
    ChunkRecord, EcScheme, ErrorCode, Ino, MetaOp, MetaReply, NodeId, NodeState, Placement, PlacementMap, ScannedChunk,
    ShardInfo, ShardKey, StorageReply, WireError,
};

/// Chunk records read per `ScanChunks` page.
pub const MOVE_PAGE_CHUNKS: u32 = 256;

/// What one pass of the mover did and left.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Chunk records looked at.
    pub chunks_seen: u64,
    /// Chunks whose record moved to the newest map without any shard written.
    pub chunks_relabelled: u64,
    /// Chunks with at least one shard copied or rebuilt.
    pub chunks_moved: u64,
    /// Shards written (copied, rebuilt or repaired).
    pub shards_written: u64,
    pub bytes_written: u64,
    /// Shards scrub verified where they lie, and their bytes.
    pub shards_checked: u64,
    pub bytes_checked: u64,
    /// Shards scrub found damaged on a node that serves.
    pub shards_bad: u64,
    /// Chunks re-encoded in another scheme (widened back, or narrowed to fit fewer nodes).
    pub chunks_recoded: u64,
    /// Chunks that could not be moved this pass (unreadable, nodes refusing); retried later.
    pub chunks_failed: u64,
    /// Why chunks could not be moved, by kind: (error code, chunks, the first message).
    pub failures: Vec<(ErrorCode, u64, String)>,
    /// Chunks still on an older map or with missing shards after the pass.
    pub chunks_left: u64,
    /// The placement map version the pass moved chunks to.
    pub map_version: u32,
    /// Nodes that were draining when the pass started.
    pub draining: Vec<NodeId>,
}

/// Shards one scrub request to a node verifies.
pub const SCRUB_PAGE_SHARDS: u32 = 256;

/// Which chunks a walk looks at.
/// Where a walk's next page comes from: the live chunk records (or the work queue) after a
/// file and index, then the chunks only snapshots hold after a cursor.
enum Source {
    Live(Option<(Ino, u64)>),
    Held(Option<Vec<u8>>),
}

enum Walk {
    /// Every chunk record.
    All,
    /// The work queue's.
    Queue,
    /// Those with damaged shards (chunk id -> the nodes and slots that reported them).
    Damaged(HashMap<u64, Vec<(NodeId, u8)>>),
}

/// A chunk's current record with the map it is placed by.
type Placed = (ChunkRecord, Arc<PlacementMap>);

/// A shard left at its old place, to delete once `due`.
#[derive(Clone, Debug)]
struct StaleShard {
    due: Instant,
    ino: Ino,
    index: u64,
    chunk: u64,
    slot: usize,
    node: NodeId,
}

/// The mover's state across passes: stale shards waiting for their grace period.
pub struct Mover {
    client: Client,
    grace: Duration,
    stale: Vec<StaleShard>,
}

/// The slots of a chunk that must be written to move it from `old` to `new` (node lists of its
/// placement group, slot order) with `missing` (never written) and `bad` (damaged) slots: every
/// slot whose node changes, plus missing and bad ones. Pure, for the simulation tests.
pub fn slots_to_write(old: &[NodeId], new: &[NodeId], width: usize, missing: u64, bad: u64) -> Vec<usize> {
    (0..width)
        .filter(|&i| {
            let moved = old.get(i) != new.get(i);
            let bit = if i < 64 { 1u64 << i } else { 0 };
            moved || missing & bit != 0 || bad & bit != 0
        })
        .collect()
}

impl Mover {
    /// A mover working through `client`; old shards wait `grace` before deletion.
    pub fn new(client: Client, grace: Duration) -> Mover {
        Mover { client, grace, stale: Vec::new() }
    }

    /// One pass over every chunk: moves chunks placed by an older map to the newest one and
    /// writes missing shards. Also deletes stale shards whose grace ended. What it leaves
    /// (nodes down, chunks it could not read) goes to the work queue, so that retries read the
    /// queue, not every record.
    pub async fn pass(&mut self, throttle: &mut Throttle) -> Result<MoveReport> {
        self.walk(throttle, Walk::All).await
    }

    /// Scrub: every storage node that serves verifies its own shards where they lie
    /// (`StorageOp::Scrub`, page by page, all nodes at once), so healthy shards never cross
    /// the network; the chunks of the damaged shards they report are then found (one walk of
    /// the chunk records, metadata only) and their damaged shards rewritten from the others.
    pub async fn scrub(&mut self, throttle: &mut Throttle) -> Result<MoveReport> {
        let status = self.client.status(false).await?;
        let nodes: Vec<NodeId> = status
            .nodes
            .iter()
            .filter(|n| matches!(n.state, NodeState::Up | NodeState::Draining))
            .map(|n| n.id)
            .collect();
        let client = self.client.clone();
        let pages = nodes.iter().map(|&node| {
            let client = client.clone();
            async move {
                let (mut checked, mut bytes, mut bad) = (0u64, 0u64, Vec::new());
                let mut after = None;
                loop {
                    match client.scrub_at(node, after, SCRUB_PAGE_SHARDS).await {
                        Ok(StorageReply::Scrubbed { checked: c, bytes: b, bad: found, last, more }) => {
                            checked += u64::from(c);
                            bytes += b;
                            bad.extend(found.into_iter().map(|(key, why)| (node, key, why)));
                            if !more || last.is_none() {
                                return Ok((checked, bytes, bad));
                            }
                            after = last;
                        }
                        Ok(other) => {
                            return Err(WireError::new(
                                ErrorCode::Internal,
                                format!("node {node} answered a scrub with {other:?}"),
                            ))
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        });
        let mut damaged: HashMap<u64, Vec<(NodeId, u8)>> = HashMap::new();
        let (mut checked, mut bytes) = (0u64, 0u64);
        for (node, result) in nodes.iter().zip(futures::future::join_all(pages).await) {
            match result {
                Ok((c, b, bad)) => {
                    checked += c;
                    bytes += b;
                    for (node, key, why) in bad {
                        tracing::warn!("scrub: {key} on node {node}: {why}");
                        damaged.entry(key.chunk).or_default().push((node, key.index));
                    }
                }
                Err(e) => tracing::warn!("scrub: node {node} could not be scrubbed: {e}"),
            }
        }
        let mut report = if damaged.is_empty() {
            MoveReport { map_version: status.map_version, ..MoveReport::default() }
        } else {
            self.walk(throttle, Walk::Damaged(damaged)).await?
        };
        report.shards_checked = checked;
        report.bytes_checked = bytes;
        Ok(report)
    }

    /// A pass over the chunks in the work queue only (written with shards missing or
    /// narrower than their file, left by an earlier pass): what runs between map changes.
    /// Chunks it settles leave the queue.
    pub async fn queue_pass(&mut self, throttle: &mut Throttle) -> Result<MoveReport> {
        self.walk(throttle, Walk::Queue).await
    }

    async fn walk(&mut self, throttle: &mut Throttle, walk: Walk) -> Result<MoveReport> {
        let queued = matches!(walk, Walk::Queue);
        let client = self.client.clone();
        let status = client.status(false).await?;
        let serving: HashSet<NodeId> = status
            .nodes
            .iter()
            .filter(|n| matches!(n.state, NodeState::Up | NodeState::Draining))
            .map(|n| n.id)
            .collect();
        let newest = client.map(status.map_version).await?;
        // Shards on nodes removed from the cluster are gone with them (such a node must be
        // emptied before it can join again): nothing to delete there.
        let node_states: Vec<(NodeId, NodeState)> = status.nodes.iter().map(|n| (n.id, n.state)).collect();
        self.stale.retain(|s| !node_states.contains(&(s.node, NodeState::Out)));
        let mut report = MoveReport {
            map_version: status.map_version,
            draining: status.nodes.iter().filter(|n| n.state == NodeState::Draining).map(|n| n.id).collect(),
            ..MoveReport::default()
        };
        // The live chunk records (or the queue's) first, then, for a walk of every chunk or of
        // damaged ones, the chunks only snapshots hold.
        let mut source = Source::Live(None);
        loop {
            let (chunks, next) = match &source {
                Source::Live(after) => {
                    let (after, limit) = (*after, MOVE_PAGE_CHUNKS);
                    let op =
                        if queued { MetaOp::ScanQueue { after, limit } } else { MetaOp::ScanChunks { after, limit } };
                    let (chunks, more) = match client.meta(op).await? {
                        MetaReply::ChunkPage { chunks, more } => (chunks, more),
                        other => return Err(client::unexpected(&other)),
                    };
                    let next = match chunks.last() {
                        Some(last) if more => Some(Source::Live(Some((last.ino, last.rec.index)))),
                        _ if queued => None,
                        _ => Some(Source::Held(None)),
                    };
                    (chunks, next)
                }
                Source::Held(after) => {
                    let op = MetaOp::ScanHeldChunks { after: after.clone(), limit: MOVE_PAGE_CHUNKS };
                    match client.meta(op).await? {
                        MetaReply::HeldChunkPage { chunks, next } => (chunks, next.map(|n| Source::Held(Some(n)))),
                        other => return Err(client::unexpected(&other)),
                    }
                }
            };
            let held = matches!(source, Source::Held(_));
            let (mut settled, mut left) = (Vec::new(), Vec::new());
            for found in &chunks {
                let (ino, rec) = (found.ino, &found.rec);
                // Scrub's repair walk looks only at the chunks of damaged shards: the bits of
                // their slots where the record places them on the nodes that reported them.
                let bad = match &walk {
                    Walk::Damaged(damaged) => match damaged.get(&rec.id) {
                        None => continue,
                        Some(found) => {
                            let map = client.map(rec.placement.map_version).await?;
                            found
                                .iter()
                                .filter(|(node, i)| map.node_for(rec.placement.pg, usize::from(*i)) == Some(*node))
                                .fold(0u64, |bits, (_, i)| bits | (1u64 << i))
                        }
                    },
                    _ => 0,
                };
                report.chunks_seen += 1;
                // A chunk as wide as the nodes allow but narrower than its file stays queued:
                // the queue pass after a node comes back widens it.
                let narrow = wire::pg_pool(rec.placement.pg) == found.file_pool
                    && rec.ec.narrower_than(found.file_ec.for_chunk(rec.len));
                match self.move_chunk(found, held, &newest, &serving, bad, throttle, &mut report).await {
                    Ok(true) if narrow => left.push((ino, rec.index, rec.id)),
                    Ok(true) => settled.push((ino, rec.index, rec.id)),
                    Ok(false) => {
                        report.chunks_left += 1;
                        left.push((ino, rec.index, rec.id));
                    }
                    Err(e) => {
                        report.chunks_failed += 1;
                        report.chunks_left += 1;
                        left.push((ino, rec.index, rec.id));
                        tracing::debug!("mover: chunk {} of file {ino} ({:016x}): {e}", rec.index, rec.id);
                        match report.failures.iter_mut().find(|(code, _, _)| *code == e.code) {
                            Some((_, count, _)) => *count += 1,
                            None => report.failures.push((
                                e.code,
                                1,
                                format!("chunk {} of file {ino} ({:016x}): {}", rec.index, rec.id, e.message),
                            )),
                        }
                    }
                }
            }
            // Settled chunks leave the queue; chunks left join it. A chunk re-written
            // meanwhile has a new id, and its entry stays (see `MetaOp::Dequeue`).
            // A chunk only snapshots hold is not queued: the queue names live records; the
            // next full pass (a map change) takes it up again.
            if queued && !settled.is_empty() {
                client.meta(MetaOp::Dequeue { chunks: settled }).await?;
            }
            if !queued && !held && !left.is_empty() {
                client.meta(MetaOp::QueueChunks { chunks: left }).await?;
            }
            self.delete_stale(false, &node_states).await;
            match next {
                Some(next) => source = next,
                None => break,
            }
        }
        Ok(report)
    }

    /// Moves or repairs one chunk; `Ok(true)` when it is now on `newest` with every shard in
    /// place and in its file's scheme, `Ok(false)` when something is left for a later pass.
    /// A chunk only snapshots hold (`held`) is moved as it is, never re-encoded: its records
    /// are read-only but for where its shards are.
    #[allow(clippy::too_many_arguments)]
    async fn move_chunk(
        &mut self,
        found: &ScannedChunk,
        held: bool,
        newest: &PlacementMap,
        serving: &HashSet<NodeId>,
        bad: u64,
        throttle: &mut Throttle,
        report: &mut MoveReport,
    ) -> Result<bool> {
        let (ino, rec) = (found.ino, &found.rec);
        let client = self.client.clone();
        let width = rec.ec.width();
        let old_map = client.map(rec.placement.map_version).await?;
        let pg = rec.placement.pg;
        let group = |map: &PlacementMap| -> Vec<NodeId> {
            map.group(pg).map(|g| g.iter().take(width).copied().collect()).unwrap_or_default()
        };
        let (old, new) = (group(&old_map), group(newest));
        let fits = new.len() >= width;
        // A chunk in another pool than its file's is being moved there by a tiering job,
        // coded in that pool's scheme: not widened back to the file's.
        let own_pool = wire::pg_pool(pg) == found.file_pool;
        if held && !fits {
            return Err(WireError::new(
                ErrorCode::Unavailable,
                format!("the newest placement map has {} nodes for a {} chunk that a snapshot holds (such a chunk is not re-encoded)", new.len(), rec.ec),
            ));
        }
        if !held && ((own_pool && rec.ec.narrower_than(found.file_ec.for_chunk(rec.len))) || (own_pool && !fits)) {
            // Narrower than its file (written while nodes were down), or wider than the nodes
            // left: re-encode it if the nodes now allow a better scheme.
            match self.better_scheme(ino, rec, fits).await? {
                Some(_) => return self.recode(ino, rec, throttle, report).await,
                None if !fits => {
                    return Err(WireError::new(
                        ErrorCode::Unavailable,
                        format!("the newest placement map has {} nodes for a {} chunk, and no narrower scheme fits the nodes up", new.len(), rec.ec),
                    ));
                }
                // Stays narrow: as wide as the nodes allow now. Moved like any other chunk, and
                // widened by a later pass (one runs when a node joins or comes back up).
                None => {}
            }
        }
        let settled = true;
        report.shards_bad += u64::from(bad.count_ones());
        let slots = slots_to_write(&old, &new, width, rec.missing, bad);
        if slots.is_empty() {
            if rec.placement.map_version == newest.version {
                return Ok(settled);
            }
            let placement = Placement { map_version: newest.version, pg };
            self.commit(ino, rec, placement, 0).await?;
            report.chunks_relabelled += 1;
            return Ok(settled);
        }
        // Rebuild: the chunk as stored, re-encoded; each shard must be the writer's exactly.
        let data = client.read_chunk_stored(rec, &format!("file {ino}")).await?;
        let shards = erasure::encode(rec.ec, &data);
        let mut missing = 0u64;
        let mut written: Vec<(usize, NodeId)> = Vec::new();
        for &slot in &slots {
            let node = new[slot];
            let shard: &Bytes = &shards[slot];
            let block_crcs = erasure::block_crcs(shard);
            if shard.len() != rec.shard_len as usize
                || rec.table_crcs.get(slot) != Some(&erasure::table_crc(&block_crcs))
            {
                return Err(WireError::new(
                    ErrorCode::Corrupt,
                    format!("re-encoded shard {slot} does not match the chunk record's checksums; not writing it"),
                ));
            }
            if !serving.contains(&node) {
                missing |= 1 << slot;
                continue;
            }
            let key = ShardKey { chunk: rec.id, index: slot as u8 };
            let info = ShardInfo { key, ec: rec.ec, len: rec.shard_len, block_crcs };
            // A damaged copy in place is replaced by the put itself: the node finds it damaged
            // and renames the new file over it (deleting it first lost the new shard when a
            // late copy of the delete arrived after the put, simulation seed 629).
            match self.put_shard(node, info, shard.clone()).await {
                Ok(()) => {
                    written.push((slot, node));
                    report.shards_written += 1;
                    report.bytes_written += shard.len() as u64;
                    throttle.take(shard.len() as u64).await;
                }
                Err(e) => {
                    tracing::warn!("mover: {key} to node {node}: {e}");
                    missing |= 1 << slot;
                }
            }
        }
        let placement = Placement { map_version: newest.version, pg };
        if missing.count_ones() > u32::from(rec.ec.m) {
            // Committing would leave fewer than k shards where the record points.
            self.forget(ino, rec, &old, &written).await;
            return Err(WireError::new(
                ErrorCode::Unavailable,
                format!("only {} of {width} shards could be placed", width - missing.count_ones() as usize),
            ));
        }
        if let Err(e) = self.commit(ino, rec, placement, missing).await {
            self.forget(ino, rec, &old, &written).await;
            return Err(e);
        }
        report.chunks_moved += 1;
        let settled = settled && missing == 0;
        let due = Instant::now() + self.grace;
        for &slot in &slots {
            if let Some(&node) = old.get(slot) {
                // Also when the slot was marked missing: an earlier move may have left a copy
                // there that is no longer tracked (deleting an absent shard is harmless).
                if node != new[slot] {
                    self.stale.push(StaleShard { due, ino, index: rec.index, chunk: rec.id, slot, node });
                }
            }
        }
        Ok(settled)
    }

    /// The scheme chunk `rec` of file `ino` would be written in now, if it is better than the
    /// one it has, `current`: wider than `current` (when `current` fits the newest map), or any scheme that
    /// fits (when it does not). Asks the metadata service without reserving anything.
    async fn better_scheme(&self, ino: Ino, rec: &ChunkRecord, fits: bool) -> Result<Option<EcScheme>> {
        let current = rec.ec;
        let probe = match self.client.meta(MetaOp::AllocChunks { ino, count: 0, avoid: Vec::new() }).await {
            Ok(MetaReply::Alloc { ec, .. }) => ec.for_chunk(rec.len),
            Ok(other) => return Err(client::unexpected(&other)),
            // Too few nodes up for any scheme: nothing better now.
            Err(e) if e.code == ErrorCode::Unavailable => return Ok(None),
            Err(e) => return Err(e),
        };
        let wider = (probe.k, probe.m) > (current.k, current.m) && probe.k >= current.k && probe.m >= current.m;
        Ok((wider || (!fits && probe != current)).then_some(probe))
    }

    /// Re-encodes chunk `rec` of file `ino` in the scheme the nodes allow now, under a new chunk
    /// id, and replaces the old chunk with it (queued for GC). `Ok(true)` when the new chunk is
    /// in its file's scheme with every shard stored.
    async fn recode(
        &self,
        ino: Ino,
        rec: &ChunkRecord,
        throttle: &mut Throttle,
        report: &mut MoveReport,
    ) -> Result<bool> {
        let (new, written) = crate::rewrite_chunk(&self.client, ino, rec, None).await?;
        tracing::debug!("mover: chunk {} of file {ino} re-encoded from {} to {}", rec.index, rec.ec, new.ec);
        report.chunks_recoded += 1;
        report.shards_written += (new.ec.width() - new.missing.count_ones() as usize) as u64;
        report.bytes_written += written;
        throttle.take(written).await;
        // Whether it is now in its file's scheme is seen on the next pass.
        Ok(false)
    }

    async fn commit(&self, ino: Ino, rec: &ChunkRecord, placement: Placement, missing: u64) -> Result<()> {
        let op = MetaOp::MoveChunk { ino, expected: rec.clone(), placement, missing };
        match self.client.meta(op).await? {
            MetaReply::Ok => Ok(()),
            other => Err(client::unexpected(&other)),
        }
    }

    /// Deletes shards written for a move that was not committed, where they were not already
    /// part of the chunk's recorded placement, nor are now: a put of a shard that is already
    /// there succeeds, so a move that lost a race with another move of the same chunk (a
    /// clone's slot, seen in the same scan) wrote shards the winner placed and committed. When
    /// the chunk's current placement cannot be read, nothing is deleted (a leftover copy is
    /// garbage; a deleted one could be the only one).
    async fn forget(&self, ino: Ino, rec: &ChunkRecord, old: &[NodeId], written: &[(usize, NodeId)]) {
        let extra: Vec<(usize, NodeId)> =
            written.iter().copied().filter(|&(slot, node)| old.get(slot) != Some(&node)).collect();
        if extra.is_empty() {
            return;
        }
        let placed = match self.current_record(ino, rec.index, rec.id).await {
            Ok(placed) => placed,
            Err(e) => {
                tracing::debug!("mover: keeping the shards of chunk {:016x} written for a failed move: {e}", rec.id);
                return;
            }
        };
        for (slot, node) in extra {
            let placed_here = placed
                .as_ref()
                .is_some_and(|(now, map)| now.id == rec.id && map.node_for(now.placement.pg, slot) == Some(node));
            if placed_here {
                continue;
            }
            let key = ShardKey { chunk: rec.id, index: slot as u8 };
            if let Err(e) = self.delete_shard(node, key).await {
                tracing::debug!("mover: cleaning up {key} on node {node}: {e}");
            }
        }
    }

    async fn put_shard(&self, node: NodeId, info: ShardInfo, data: Bytes) -> Result<()> {
        self.client.put_shard_at(node, info, data).await
    }

    async fn delete_shard(&self, node: NodeId, key: ShardKey) -> Result<()> {
        self.client.delete_shard_at(node, key).await
    }

    /// Shards at their old place still waiting for their grace period.
    pub fn stale_shards(&self) -> usize {
        self.stale.len()
    }

    /// Old copies on `node` not deleted yet.
    pub fn stale_on(&self, node: NodeId) -> usize {
        self.stale.iter().filter(|s| s.node == node).count()
    }

    /// Deletes stale shards whose grace ended (all of them with `now`), unless the chunk's
    /// current record places them there again. A node that does not answer keeps its entry.
    ///
    /// `nodes` are the cluster's nodes and states as last seen: entries on nodes that are out
    /// are dropped (their data went with them), entries on nodes that do not serve now wait
    /// (a call would only wait for a connection timeout).
    pub async fn delete_stale(&mut self, now: bool, nodes: &[(NodeId, NodeState)]) {
        let instant = Instant::now();
        let state = |id: NodeId| nodes.iter().find(|(n, _)| *n == id).map(|(_, s)| *s);
        self.stale.retain(|s| state(s.node) != Some(NodeState::Out));
        let (due, later): (Vec<StaleShard>, Vec<StaleShard>) =
            std::mem::take(&mut self.stale).into_iter().partition(|s| {
                (now || s.due <= instant) && matches!(state(s.node), Some(NodeState::Up | NodeState::Draining))
            });
        self.stale = later;
        let mut current: HashMap<(Ino, u64, u64), Option<Arc<Placed>>> = HashMap::new();
        for shard in due {
            let placed = match current.get(&(shard.ino, shard.index, shard.chunk)) {
                Some(found) => found.clone(),
                None => {
                    let found = self.current_record(shard.ino, shard.index, shard.chunk).await;
                    let found = match found {
                        Ok(found) => found.map(Arc::new),
                        Err(e) => {
                            tracing::debug!("mover: cannot check chunk {:016x}: {e}", shard.chunk);
                            self.stale.push(shard);
                            continue;
                        }
                    };
                    current.insert((shard.ino, shard.index, shard.chunk), found.clone());
                    found
                }
            };
            let still_there = placed.as_ref().is_some_and(|p| {
                let (rec, map) = p.as_ref();
                rec.id == shard.chunk && map.node_for(rec.placement.pg, shard.slot) == Some(shard.node)
            });
            if still_there {
                continue;
            }
            let key = ShardKey { chunk: shard.chunk, index: shard.slot as u8 };
            if let Err(e) = self.delete_shard(shard.node, key).await {
                tracing::debug!("mover: deleting stale {key} on node {}: {e}", shard.node);
                if e.code == ErrorCode::Unavailable {
                    // Tried again after another grace period, not at every tick.
                    self.stale.push(StaleShard { due: Instant::now() + self.grace, ..shard });
                }
            }
        }
    }

    /// Where chunk `chunk`, at `index` of file `ino`, is placed now: by the live record, or
    /// by the record of a snapshot that holds it; `None` when nothing holds it any more.
    async fn current_record(&self, ino: Ino, index: u64, chunk: u64) -> Result<Option<Placed>> {
        let reply = self.client.meta(MetaOp::GetChunks { ino, first: index, count: 1 }).await;
        let live = match reply {
            Ok(MetaReply::Chunks { chunks, .. }) => chunks.into_iter().find(|c| c.index == index),
            Ok(other) => return Err(client::unexpected(&other)),
            Err(e) if e.code == ErrorCode::NotFound => None,
            Err(e) => return Err(e),
        };
        let rec = match live {
            Some(rec) if rec.id == chunk => Some(rec),
            _ => match self.client.meta(MetaOp::HeldChunk { ino, index, id: chunk }).await? {
                MetaReply::HeldChunkPage { chunks, .. } => chunks.into_iter().next().map(|found| found.rec),
                other => return Err(client::unexpected(&other)),
            },
        };
        match rec {
            Some(rec) => {
                let map = self.client.map(rec.placement.map_version).await?;
                Ok(Some((rec, map)))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changed_missing_and_bad_slots_are_written() {
        let old = [1, 2, 3, 4, 5, 6];
        assert!(slots_to_write(&old, &old, 6, 0, 0).is_empty());
        let new = [1, 2, 7, 4, 5, 6];
        assert_eq!(slots_to_write(&old, &new, 6, 0, 0), vec![2]);
        assert_eq!(slots_to_write(&old, &new, 6, 1 << 5, 1 << 0), vec![0, 2, 5]);
        // Spares past the width do not count.
        assert!(slots_to_write(&[1, 2, 3, 9], &[1, 2, 3, 8], 3, 0, 0).is_empty());
    }
}
