//! Moving one chunk between the client and the storage nodes: encode and upload its shards in
//! parallel; fetch, verify and (when needed) rebuild it from any `k` valid shards.
//!
//! Verification is end to end: the writer computes each shard's block checksums before the
//! bytes leave the client and records the checksum of each shard's table in the chunk record.
//! A reader accepts a shard's blocks only if the table the node returns matches the record and
//! every block matches the table.

use crate::{rpc_error, Client, NodeHandle, Result};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::Arc;
use std::time::Instant;
use wire::stages::{self, Stage};
use wire::{
    ChunkId, ChunkRecord, EcScheme, ErrorCode, Ino, MetaOp, MetaReply, NodeId, Placement, PlacementMap, RpcError,
    ShardInfo, ShardKey, StorageOp, StorageReply, WireError, SHARD_BLOCK_BYTES,
};

/// Why one shard could not be used, for error messages.
pub struct ShardFailure {
    pub index: usize,
    pub node: Option<NodeId>,
    pub reason: String,
    /// The storage node's answer, when it answered with an error; `Corrupt` also for shards
    /// that failed the client's own verification.
    pub code: Option<ErrorCode>,
}

/// Where and how one chunk is to be written: a fresh id, its placement, the scheme (the file's,
/// or narrower while too few nodes can take writes) and the map the placement refers to.
#[derive(Clone, Debug)]
pub struct Allocation {
    pub id: ChunkId,
    pub placement: Placement,
    pub ec: EcScheme,
    pub map: Arc<PlacementMap>,
    /// The pool and scheme asked for instead of the file's (a job moving the file), which a
    /// fresh allocation after a failed upload asks for again.
    pub target: Option<(String, Option<EcScheme>)>,
}

impl Allocation {
    /// The allocation for a chunk of `len` bytes: small chunks are mirrored
    /// ([`EcScheme::for_chunk`]), on the first nodes of the same group.
    fn for_len(mut self, len: usize) -> Allocation {
        self.ec = self.ec.for_chunk(u32::try_from(len).unwrap_or(u32::MAX));
        self
    }

    /// The nodes its shards go to, in slot order.
    fn nodes(&self) -> Vec<Option<NodeId>> {
        (0..self.ec.width()).map(|i| self.map.node_for(self.placement.pg, i)).collect()
    }
}

/// What sending one chunk's shards gave: the record as written (`missing` marks the shards not
/// stored) and why each missing shard failed.
struct Sent {
    rec: ChunkRecord,
    failures: Vec<(NodeId, WireError)>,
}

/// Placements one chunk upload tries before it gives up (or accepts a chunk with shards
/// missing, if it still has redundancy). Each retry is a fresh allocation that avoids the
/// nodes that failed, so it costs one metadata call, never a wait.
pub const UPLOAD_ATTEMPTS_MAX: u32 = 4;

impl Client {
    /// Reserves `count` chunk ids for file `ino`, placed on nodes that are up and not in
    /// `avoid`, with the scheme to write them in.
    pub async fn alloc_chunks(&self, ino: Ino, count: u32, avoid: Vec<NodeId>) -> Result<Vec<Allocation>> {
        self.alloc_chunks_for(ino, count, avoid, None).await
    }

    /// [`Client::alloc_chunks`] in pool `target.0` with scheme `target.1` (`None`: the pool's
    /// default) instead of the file's, or the file's with `target` `None`.
    pub async fn alloc_chunks_for(
        &self,
        ino: Ino,
        count: u32,
        avoid: Vec<NodeId>,
        target: Option<(String, Option<EcScheme>)>,
    ) -> Result<Vec<Allocation>> {
        let op = match &target {
            None => MetaOp::AllocChunks { ino, count, avoid },
            Some((pool, ec)) => MetaOp::AllocChunksIn { ino, count, avoid, pool: pool.clone(), ec: *ec },
        };
        match self.meta(op).await? {
            MetaReply::Alloc { chunks, map, ec } => {
                self.remember_map(map.clone());
                let map = Arc::new(map);
                Ok(chunks
                    .into_iter()
                    .map(|(id, placement)| Allocation { id, placement, ec, map: map.clone(), target: target.clone() })
                    .collect())
            }
            other => Err(crate::unexpected(&other)),
        }
    }

    /// Gives up chunks that were (partly) uploaded for `ino` and will not be committed, so GC
    /// deletes their shards. Best effort: a failure is logged, and the shards stay behind.
    pub async fn abandon_chunks(&self, ino: Ino, chunks: Vec<ChunkRecord>) {
        if chunks.is_empty() {
            return;
        }
        let ids: Vec<String> = chunks.iter().map(|c| format!("{:016x}", c.id)).collect();
        if let Err(e) = self.meta(MetaOp::AbandonChunks { ino, chunks }).await {
            tracing::debug!("cannot give up chunks {} of inode {ino}: {e}", ids.join(", "));
        }
    }

    /// Stores one chunk of file `ino`: encodes `data` in the allocation's scheme and sends
    /// every shard to its node, all in parallel. When a node fails to take its shard (down,
    /// full, refusing), the chunk is not written degraded and not retried in place: the partial
    /// upload is given up and the chunk goes to a fresh allocation that avoids the nodes that
    /// failed (narrower if too few nodes are left for the file's scheme), at once. Only the
    /// last attempt accepts a chunk with shards missing, and only while it keeps some
    /// redundancy. When no node answers at all (the cluster or this client's network is out),
    /// the upload waits for them with backoff until `write_retry_deadline`.
    ///
    /// Fails naming the chunk, every node that failed and why; the code is `NoSpace` when
    /// nodes were full.
    pub async fn upload_chunk(&self, ino: Ino, index: u64, first: Allocation, data: Bytes) -> Result<ChunkRecord> {
        let started = Instant::now();
        let mut delay = std::time::Duration::from_millis(50);
        let len = data.len();
        let first_target = first.target.clone();
        let mut alloc = first.for_len(len);
        let mut avoid: Vec<NodeId> = Vec::new();
        let mut attempts = 0u32;
        let mut reasons: Vec<(NodeId, WireError)> = Vec::new();
        loop {
            // Nodes this client saw fail moments ago are not tried again: place elsewhere.
            let known_bad: Vec<NodeId> = {
                let bad = self.nodes_to_avoid();
                alloc.nodes().into_iter().flatten().filter(|n| bad.contains(n) && !avoid.contains(n)).collect()
            };
            if !known_bad.is_empty() && attempts + 1 < UPLOAD_ATTEMPTS_MAX {
                avoid.extend(known_bad);
                attempts += 1;
                match self.alloc_chunks_for(ino, 1, avoid.clone(), first_target.clone()).await {
                    Ok(mut fresh) if !fresh.is_empty() => {
                        alloc = fresh.swap_remove(0).for_len(len);
                        continue;
                    }
                    // No placement without those nodes: try them after all (the belief may
                    // be stale).
                    Ok(_) | Err(_) => {}
                }
            }
            attempts += 1;
            let sent = self.send_shards(index, &alloc, data.clone()).await;
            if sent.failures.is_empty() {
                return Ok(sent.rec);
            }
            let ec = alloc.ec;
            let written = ec.width() - sent.failures.len();
            let last = attempts >= UPLOAD_ATTEMPTS_MAX;
            let redundant = if ec.m == 0 { written == ec.width() } else { written > usize::from(ec.k) };
            if last && redundant {
                tracing::warn!(
                    "chunk {:016x} of inode {ino} written with {} of {} shards: {}",
                    alloc.id,
                    written,
                    ec.width(),
                    sent.failures.iter().map(|(_, e)| e.message.as_str()).collect::<Vec<_>>().join("; ")
                );
                return Ok(sent.rec);
            }
            self.abandon_chunks(ino, vec![sent.rec]).await;
            let unreachable = sent.failures.iter().all(|(_, e)| e.code == ErrorCode::Unavailable);
            for (node, e) in sent.failures {
                if !avoid.contains(&node) {
                    avoid.push(node);
                }
                reasons.push((node, e));
            }
            if written == 0 && unreachable && started.elapsed() < self.inner.options.write_retry_deadline {
                // Nothing answered: not a placement problem. Wait for the nodes, then start over.
                tracing::debug!("chunk {index} of inode {ino}: no storage node answered; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(1));
                let _ = self.refresh_nodes_forgiving().await;
                avoid.clear();
                attempts = attempts.saturating_sub(1);
            } else if last {
                return Err(upload_failed(ino, index, &reasons, None));
            }
            match self.alloc_chunks_for(ino, 1, avoid.clone(), first_target.clone()).await {
                Ok(mut fresh) if !fresh.is_empty() => alloc = fresh.swap_remove(0).for_len(len),
                Ok(_) => {
                    return Err(upload_failed(ino, index, &reasons, Some("the metadata service allocated nothing")))
                }
                Err(e) => return Err(upload_failed(ino, index, &reasons, Some(&e.message))),
            }
        }
    }

    /// Stores one shard on `node` (a data mover's write: the shard is already checked against
    /// its chunk record). A damaged copy there is replaced where it lies, by a rename (the
    /// node verifies what it holds under the key first): no delete goes before the put, which a
    /// late or repeated copy of it could apply after the new shard was written.
    pub async fn put_shard_at(&self, node: NodeId, info: ShardInfo, data: Bytes) -> Result<()> {
        let handle = self.node(node).await?;
        let timeout = self.inner.options.storage_timeout;
        let op = StorageOp::PutShard { info };
        handle.peer.call::<StorageOp, StorageReply>(&op, data, timeout).await.map_err(rpc_error)?;
        Ok(())
    }

    /// Asks `node` to verify its own shards after `after` (at most `limit`) where they lie;
    /// answered with `StorageReply::Scrubbed`. Waits as long as a scrub page may take.
    pub async fn scrub_at(&self, node: NodeId, after: Option<ShardKey>, limit: u32) -> Result<StorageReply> {
        let handle = self.node(node).await?;
        let op = StorageOp::Scrub { after, limit };
        let timeout = self.inner.options.storage_timeout * 6;
        let (reply, _) =
            handle.peer.call::<StorageOp, StorageReply>(&op, Bytes::new(), timeout).await.map_err(rpc_error)?;
        Ok(reply)
    }

    /// Deletes one shard on `node` (deleting an absent shard is not an error).
    pub async fn delete_shard_at(&self, node: NodeId, key: ShardKey) -> Result<()> {
        let handle = self.node(node).await?;
        let op = StorageOp::DeleteShards { keys: vec![key] };
        handle
            .peer
            .call::<StorageOp, StorageReply>(&op, Bytes::new(), self.inner.options.storage_timeout)
            .await
            .map_err(rpc_error)?;
        Ok(())
    }

    /// Encodes `data` in the allocation's scheme and sends every shard to its node in parallel.
    async fn send_shards(&self, index: u64, alloc: &Allocation, data: Bytes) -> Sent {
        self.maybe_refresh_nodes();
        let ec = alloc.ec;
        let len = data.len() as u32;
        let shards = erasure::encode(ec, &data);
        let shard_len = ec.shard_len(len);
        let mut table_crcs = Vec::with_capacity(shards.len());
        let mut sends = FuturesUnordered::new();
        for (i, shard) in shards.into_iter().enumerate() {
            let block_crcs = erasure::block_crcs(&shard);
            table_crcs.push(erasure::table_crc(&block_crcs));
            let info = ShardInfo { key: ShardKey { chunk: alloc.id, index: i as u8 }, ec, len: shard_len, block_crcs };
            let node_id = alloc.map.node_for(alloc.placement.pg, i);
            let client = self.clone();
            sends.push(async move {
                let Some(node_id) = node_id else {
                    let e = WireError::new(
                        ErrorCode::Internal,
                        format!("placement group {} has no node for shard {i}", alloc.placement.pg),
                    );
                    return (i, 0, Err(e));
                };
                let result = async {
                    let node = client.node(node_id).await?;
                    let op = StorageOp::PutShard { info };
                    match node
                        .peer
                        .call::<StorageOp, StorageReply>(&op, shard, client.inner.options.storage_timeout)
                        .await
                    {
                        Ok(_) => {
                            *node.failed_at.lock() = None;
                            Ok(())
                        }
                        Err(e) => {
                            let code = rpc_error(e.clone()).code;
                            if e.is_unreachable() {
                                *node.failed_at.lock() = Some(tokio::time::Instant::now());
                            }
                            if code == ErrorCode::NoSpace {
                                *node.full_at.lock() = Some(tokio::time::Instant::now());
                            }
                            Err(WireError::new(code, format!("node {node_id} ({}): {e}", node.peer.addr())))
                        }
                    }
                }
                .await;
                (i, node_id, result)
            });
        }
        let mut missing = 0u64;
        let mut failures = Vec::new();
        while let Some((i, node, result)) = sends.next().await {
            if let Err(e) = result {
                if wire::world::flawed(wire::world::Flaw::IgnoreFailedShardPut) {
                    continue;
                }
                missing |= 1 << i;
                failures.push((node, e));
            }
        }
        let rec =
            ChunkRecord { index, id: alloc.id, len, ec, shard_len, placement: alloc.placement, table_crcs, missing };
        Sent { rec, failures }
    }

    /// Sends `op` about shard `index` of `rec` to the node holding it, unless the shard was
    /// never written or its node failed moments ago; returns the reply, its data and the node.
    async fn call_shard_node(
        &self,
        rec: &ChunkRecord,
        map: &PlacementMap,
        index: usize,
        op: &StorageOp,
    ) -> Result<(StorageReply, Bytes, NodeId), ShardFailure> {
        let fail = |node: Option<NodeId>, reason: String| ShardFailure { index, node, reason, code: None };
        if rec.missing & (1 << index) != 0 {
            return Err(fail(None, "never written (node was down at write time)".into()));
        }
        let node_id = map.node_for(rec.placement.pg, index).ok_or_else(|| fail(None, "no node in placement".into()))?;
        let node: Arc<NodeHandle> = self.node(node_id).await.map_err(|e| fail(Some(node_id), e.message))?;
        if node.recently_failed(self.inner.options.node_retry_after) {
            return Err(fail(Some(node_id), format!("node {node_id} ({}) unreachable", node.peer.addr())));
        }
        let calling = Instant::now();
        let called =
            node.peer.call::<StorageOp, StorageReply>(op, Bytes::new(), self.inner.options.storage_timeout).await;
        stages::record(Stage::ClientStorageCall, calling);
        match called {
            Ok((reply, data)) => {
                if node.failed_at.lock().is_some() {
                    *node.failed_at.lock() = None;
                }
                Ok((reply, data, node_id))
            }
            Err(e) => {
                if e.is_unreachable() {
                    *node.failed_at.lock() = Some(tokio::time::Instant::now());
                }
                let (reason, code) = match &e {
                    RpcError::Remote(w) => {
                        (format!("node {node_id} ({}): {}", node.peer.addr(), w.message), Some(w.code))
                    }
                    other => (other.to_string(), None),
                };
                Err(ShardFailure { code, ..fail(Some(node_id), reason) })
            }
        }
    }

    /// Fetches shard `index` of `rec` (bytes `offset .. offset + len` of the shard, widened to
    /// whole blocks; `len == 0` means to the end) and verifies it. Returns the verified bytes
    /// starting at the block-aligned offset, and that offset.
    pub async fn fetch_shard(
        &self,
        rec: &ChunkRecord,
        map: &PlacementMap,
        index: usize,
        offset: u32,
        len: u32,
    ) -> Result<(Bytes, u32, ShardTable), ShardFailure> {
        let key = ShardKey { chunk: rec.id, index: index as u8 };
        let (reply, data, node_id) =
            self.call_shard_node(rec, map, index, &StorageOp::GetShard { key, offset, len }).await?;
        let fail = |reason: String| ShardFailure { index, node: Some(node_id), reason, code: None };
        let (info, start) = match reply {
            StorageReply::Shard { info, offset } => (info, offset),
            other => return Err(fail(format!("unexpected reply {other:?}"))),
        };
        // End-to-end verification: the table must be the writer's, each block must match it.
        let verifying = Instant::now();
        let corrupt = |what: String| ShardFailure {
            code: Some(ErrorCode::Corrupt),
            ..fail(format!("{key} on node {node_id} failed verification: {what}"))
        };
        check_table(rec, index, &info).map_err(corrupt)?;
        if start % SHARD_BLOCK_BYTES != 0 {
            return Err(corrupt("offset not at a block".into()));
        }
        let want_end = if len == 0 { rec.shard_len } else { (offset + len).min(rec.shard_len) };
        let expected_end = want_end.div_ceil(SHARD_BLOCK_BYTES).saturating_mul(SHARD_BLOCK_BYTES).min(rec.shard_len);
        if start > offset || start as usize + data.len() != expected_end as usize {
            return Err(corrupt(format!("returned {} bytes at {start}, expected up to {expected_end}", data.len())));
        }
        let first_block = (start / SHARD_BLOCK_BYTES) as usize;
        for (i, block) in data.chunks(SHARD_BLOCK_BYTES as usize).enumerate() {
            if crc32c::crc32c(block) != info.block_crcs[first_block + i] {
                return Err(corrupt(format!("block {} checksum mismatch", first_block + i)));
            }
        }
        stages::record(Stage::ClientVerify, verifying);
        Ok((data, start, info.block_crcs))
    }

    /// Fetches exactly bytes `offset .. offset + len` of shard `index` of `rec` (within the
    /// shard) in one round trip to its node, and verifies them end to end: with the crc32c of
    /// the rest of the blocks they touch, which the node sends along, each block's checksum is
    /// recomputed and compared with the writer's table, itself tied to the metadata.
    async fn fetch_range(
        &self,
        rec: &ChunkRecord,
        map: &PlacementMap,
        index: usize,
        offset: u32,
        len: u32,
    ) -> Result<(Bytes, ShardTable), ShardFailure> {
        let key = ShardKey { chunk: rec.id, index: index as u8 };
        let (reply, data, node_id) =
            self.call_shard_node(rec, map, index, &StorageOp::ReadRange { key, offset, len }).await?;
        let fail = |reason: String| ShardFailure { index, node: Some(node_id), reason, code: None };
        let (info, head, tail) = match reply {
            StorageReply::Range { info, head_crc, tail_crc } => (info, head_crc, tail_crc),
            other => return Err(fail(format!("unexpected reply {other:?}"))),
        };
        let verifying = Instant::now();
        let corrupt = |what: String| ShardFailure {
            code: Some(ErrorCode::Corrupt),
            ..fail(format!("{key} on node {node_id} failed verification: {what}"))
        };
        check_table(rec, index, &info).map_err(corrupt)?;
        let want = (offset.saturating_add(len)).min(rec.shard_len).saturating_sub(offset);
        if data.len() != want as usize {
            return Err(corrupt(format!("returned {} bytes, asked for {want}", data.len())));
        }
        verify_cut(&data, offset, rec.shard_len, &info.block_crcs, head, tail).map_err(corrupt)?;
        stages::record(Stage::ClientVerify, verifying);
        Ok((data, info.block_crcs))
    }

    /// Reads a whole chunk: the `k` data shards in parallel, then parity shards for any that
    /// failed, and rebuilds. `what` names the file for error messages.
    /// The chunk's `len` bytes are its data shards one after another, kept as the shards that
    /// arrived (no copy into one buffer).
    pub async fn read_chunk(&self, rec: &ChunkRecord, what: &str) -> Result<Chunk> {
        Ok(self.read_chunk_tables(rec, what).await?.0)
    }

    /// [`Client::read_chunk`], with the block tables of the data shards that came from their
    /// nodes (see [`ShardTables`]).
    pub(crate) async fn read_chunk_tables(&self, rec: &ChunkRecord, what: &str) -> Result<(Chunk, ShardTables)> {
        let (shards, tables) = self.data_shards(rec, what).await?;
        Ok((Chunk::new(shards, rec.len as usize), tables))
    }

    /// Reads a whole chunk as stored: all `shard_len * k` bytes the shards encode (at least
    /// `len`), which re-encode to exactly the shards the writer stored.
    pub async fn read_chunk_stored(&self, rec: &ChunkRecord, what: &str) -> Result<Bytes> {
        let stored_len = rec.shard_len.saturating_mul(u32::from(rec.ec.k)).max(rec.len);
        Ok(Chunk::new(self.data_shards(rec, what).await?.0, stored_len as usize).to_bytes())
    }

    /// The chunk's `k` data shards as stored, rebuilt from parity where needed, and the block
    /// tables of those that came from their nodes.
    async fn data_shards(&self, rec: &ChunkRecord, what: &str) -> Result<(Vec<Bytes>, ShardTables)> {
        match self.data_shards_once(rec, what).await {
            // One more try with fresh node states: a node that just restarted answers again.
            Err(e) if e.code == ErrorCode::Unavailable => {
                let _ = self.refresh_nodes_forgiving().await;
                self.data_shards_once(rec, what).await
            }
            other => other,
        }
    }

    async fn data_shards_once(&self, rec: &ChunkRecord, what: &str) -> Result<(Vec<Bytes>, ShardTables)> {
        self.maybe_refresh_nodes();
        let map = self.map(rec.placement.map_version).await?;
        let k = usize::from(rec.ec.k);
        let width = rec.ec.width();
        let mut shards: Vec<Option<Bytes>> = vec![None; width];
        let mut tables: ShardTables = vec![None; k];
        let mut failures: Vec<ShardFailure> = Vec::new();
        // Data shards first (no decoding needed), then parity. Shards known to be unavailable
        // (never written, or on a node that failed moments ago) go last, so a degraded read
        // asks for its parity shards in the first round instead of after a failure.
        let order: Vec<usize> = {
            let nodes = self.inner.nodes.read();
            let retry_after = self.inner.options.node_retry_after;
            let known_bad = |i: usize| {
                rec.missing & (1 << i) != 0
                    || map
                        .node_for(rec.placement.pg, i)
                        .and_then(|n| nodes.get(&n))
                        .is_some_and(|h| h.recently_failed(retry_after))
            };
            let (good, bad): (Vec<usize>, Vec<usize>) = (0..width).partition(|&i| !known_bad(i));
            good.into_iter().chain(bad).collect()
        };
        let mut next = 0usize;
        let mut pending = FuturesUnordered::new();
        let mut ok = 0usize;
        while ok < k {
            while ok + pending.len() < k && next < width {
                let i = order[next];
                next += 1;
                let map = map.clone();
                let this = self.clone();
                let rec = rec.clone();
                pending.push(async move { (i, this.fetch_shard(&rec, &map, i, 0, 0).await) });
            }
            match pending.next().await {
                Some((i, Ok((data, _, table)))) => {
                    shards[i] = Some(data);
                    if let Some(slot) = tables.get_mut(i) {
                        *slot = Some(table);
                    }
                    ok += 1;
                }
                Some((_, Err(f))) => failures.push(f),
                None => break,
            }
        }
        if ok < k {
            return Err(unavailable(rec, what, ok, failures));
        }
        if !failures.is_empty() {
            tracing::debug!("chunk {:016x} of {what}: rebuilt around {} failed shards", rec.id, failures.len());
        }
        // A truncation clamps a record's `len` but leaves its shards as written: rebuild them at
        // their stored size; callers keep the record's valid bytes (`Chunk::new`).
        let stored_len = rec.shard_len.saturating_mul(u32::from(rec.ec.k));
        // A data shard that arrived is returned as it arrived, so its table still holds.
        let data = erasure::reconstruct_data(rec.ec, stored_len.max(rec.len), &shards)
            .map_err(|e| WireError::new(ErrorCode::Internal, format!("{what}: {e}")))?;
        Ok((data, tables))
    }

    /// Reads bytes `offset .. offset + len` of a chunk, fetching only those bytes of the data
    /// shards that hold them (one round trip to one node when they lie in one shard, and then
    /// no copy: the bytes returned are the reply's); falls back to a whole-chunk read (with
    /// rebuild) if any shard fails.
    /// With the bytes come the block tables of the shards they were read from, at those
    /// shards' places (see [`ShardTables`]).
    pub(crate) async fn read_chunk_range(
        &self,
        rec: &ChunkRecord,
        offset: u32,
        len: u32,
        what: &str,
    ) -> Result<(Bytes, ShardTables)> {
        let end = (offset + len).min(rec.len);
        if offset >= end {
            return Ok((Bytes::new(), Vec::new()));
        }
        self.maybe_refresh_nodes();
        let map = self.map(rec.placement.map_version).await?;
        let shard_len = rec.shard_len.max(1);
        let first = (offset / shard_len) as usize;
        let last = ((end - 1) / shard_len) as usize;
        let fetched = if first == last {
            let start = offset - first as u32 * shard_len;
            self.fetch_range(rec, &map, first, start, end - offset).await.map(|got| vec![got])
        } else {
            let fetches = (first..=last).map(|i| {
                let s_start = if i == first { offset - i as u32 * shard_len } else { 0 };
                let s_end = if i == last { end - i as u32 * shard_len } else { shard_len };
                let map = &map;
                async move { self.fetch_range(rec, map, i, s_start, s_end - s_start).await }
            });
            futures::future::join_all(fetches).await.into_iter().collect::<Result<Vec<_>, ShardFailure>>()
        };
        match fetched {
            Ok(got) => {
                let mut tables: ShardTables = vec![None; usize::from(rec.ec.k)];
                let mut parts = Vec::with_capacity(got.len());
                for (i, (data, table)) in (first..).zip(got) {
                    if let Some(slot) = tables.get_mut(i) {
                        *slot = Some(table);
                    }
                    parts.push(data);
                }
                Ok((slice_parts(&parts, 0, (end - offset) as usize), tables))
            }
            Err(f) => {
                tracing::debug!(
                    "{what}: ranged read of chunk {:016x} falls back to a whole read: shard {}: {}",
                    rec.id,
                    f.index,
                    f.reason
                );
                let (whole, tables) = self.read_chunk_tables(rec, what).await?;
                Ok((whole.slice_padded(offset as usize, (end - offset) as usize), tables))
            }
        }
    }
}

/// Checks that a shard's header and block table, as a node returned them, are the writer's:
/// the key and length of the record, and the table whose checksum the record holds.
fn check_table(rec: &ChunkRecord, index: usize, info: &ShardInfo) -> Result<(), String> {
    let key = ShardKey { chunk: rec.id, index: index as u8 };
    if info.key != key || info.len != rec.shard_len {
        return Err(format!("header says {} of {} bytes", info.key, info.len));
    }
    if erasure::table_crc(&info.block_crcs) != rec.table_crcs.get(index).copied().unwrap_or(0) {
        return Err("block checksum table does not match the metadata".into());
    }
    if info.block_crcs.len() != erasure::block_count(rec.shard_len) as usize {
        return Err("block table malformed".into());
    }
    Ok(())
}

/// Checks `data`, bytes `offset ..` of a shard of `shard_len` bytes, against the shard's block
/// checksums `table`: for each block it touches, the crc32c of the block's bytes before it
/// (`head`, first block), its own bytes and the block's bytes after it (`tail`, last block)
/// must combine to the table's entry.
fn verify_cut(data: &[u8], offset: u32, shard_len: u32, table: &[u32], head: u32, tail: u32) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    let bs = u64::from(SHARD_BLOCK_BYTES);
    let (offset, end, shard_len) = (u64::from(offset), u64::from(offset) + data.len() as u64, u64::from(shard_len));
    if end > shard_len {
        return Err(format!("bytes {offset}..{end} lie past the shard's end ({shard_len})"));
    }
    let (first, last) = (offset / bs, (end - 1) / bs);
    let mut pos = offset;
    for b in first..=last {
        let block_end = ((b + 1) * bs).min(shard_len);
        let part_end = block_end.min(end);
        let part = &data[(pos - offset) as usize..(part_end - offset) as usize];
        let mut crc = crc32c::crc32c_append(if b == first { head } else { 0 }, part);
        if b == last {
            let tail_len = (block_end - part_end) as usize;
            if tail_len == 0 && tail != 0 {
                return Err(format!("block {b}: a checksum of bytes after the end of the block"));
            }
            crc = wire::crc::crc32c_combine(crc, tail, tail_len);
        }
        if table.get(b as usize) != Some(&crc) {
            return Err(format!("block {b} checksum mismatch"));
        }
        pos = part_end;
    }
    Ok(())
}

/// A shard's block checksum table as its node sent it: the crc32c of each
/// [`SHARD_BLOCK_BYTES`] block of the shard as stored.
pub type ShardTable = Vec<u32>;

/// The tables of a chunk's data shards, by shard index, of those a read fetched from their
/// nodes (`None` for the others, or an empty list when none is known). Each was checked
/// against the chunk record's `table_crcs` and every block the read returned against it, so a
/// block of the returned bytes that a table covers whole has that table's checksum without
/// computing it again (the disk cache's writer builds its file's tables from them).
pub type ShardTables = Vec<Option<ShardTable>>;

/// A chunk's bytes as the data shards they arrived in: `len` bytes, the concatenation of
/// `parts` cut at `len`. A read within one shard is a slice of it, not a copy.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    parts: Vec<Bytes>,
}

impl Chunk {
    /// The first `len` bytes of `shards` laid end to end (all of them if they hold fewer).
    pub(crate) fn new(shards: Vec<Bytes>, len: usize) -> Chunk {
        let mut left = len;
        let mut parts = Vec::with_capacity(shards.len());
        for shard in shards {
            if left == 0 {
                break;
            }
            let take = shard.len().min(left);
            parts.push(shard.slice(..take));
            left -= take;
        }
        Chunk { parts }
    }

    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    /// The bytes as pieces laid end to end.
    pub(crate) fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// `take` bytes from `start`, zero-filled past the end (holes and short chunks): a slice
    /// of one shard when the range lies within it, a copy otherwise.
    pub(crate) fn slice_padded(&self, start: usize, take: usize) -> Bytes {
        slice_parts(&self.parts, start, take)
    }

    /// All the bytes in one buffer (a copy unless there is at most one part).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            parts => Bytes::from(parts.concat()),
        }
    }
}

/// `take` bytes from `start` of `parts` laid end to end, zero-filled past their end: a slice of
/// one part when the range lies within it, a copy otherwise.
pub(crate) fn slice_parts(parts: &[Bytes], start: usize, take: usize) -> Bytes {
    let mut part_start = 0;
    for part in parts {
        let part_end = part_start + part.len();
        if start >= part_start && start + take <= part_end {
            return part.slice(start - part_start..start - part_start + take);
        }
        part_start = part_end;
    }
    let mut out = vec![0u8; take];
    let mut part_start = 0;
    for part in parts {
        let (from, to) = (start.max(part_start), (start + take).min(part_start + part.len()));
        if from < to {
            out[from - start..to - start].copy_from_slice(&part[from - part_start..to - part_start]);
        }
        part_start += part.len();
    }
    Bytes::from(out)
}

impl From<Bytes> for Chunk {
    fn from(data: Bytes) -> Chunk {
        Chunk { parts: if data.is_empty() { Vec::new() } else { vec![data] } }
    }
}

/// The error of a chunk upload that gave up: which chunk, the nodes that failed by cause (with
/// the first node's own words for each), and why no other placement was possible. `NoSpace`
/// when nodes were full, so writers see ENOSPC.
fn upload_failed(ino: Ino, index: u64, reasons: &[(NodeId, WireError)], no_placement: Option<&str>) -> WireError {
    let mut causes: Vec<(ErrorCode, Vec<NodeId>, &str)> = Vec::new();
    for (node, e) in reasons {
        match causes.iter_mut().find(|(code, _, _)| *code == e.code) {
            Some((_, nodes, _)) if nodes.contains(node) => {}
            Some((_, nodes, _)) => nodes.push(*node),
            None => causes.push((e.code, vec![*node], e.message.as_str())),
        }
    }
    let full = causes.iter().any(|(code, _, _)| *code == ErrorCode::NoSpace);
    let described: Vec<String> = causes
        .iter()
        .map(|(code, nodes, example)| {
            let what = match code {
                ErrorCode::NoSpace => "no space left",
                ErrorCode::Unavailable => "unreachable",
                _ => "refused the shard",
            };
            let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
            format!("{what} on node{} {} ({example})", if nodes.len() == 1 { "" } else { "s" }, list.join(", "))
        })
        .collect();
    let tail = no_placement.map(|why| format!("; no other placement: {why}")).unwrap_or_default();
    WireError::new(
        if full { ErrorCode::NoSpace } else { ErrorCode::Unavailable },
        format!("cannot store chunk {index} of inode {ino}: {}{tail}", described.join("; ")),
    )
}

fn unavailable(rec: &ChunkRecord, what: &str, ok: usize, failures: Vec<ShardFailure>) -> WireError {
    let mut nodes: Vec<String> = failures
        .iter()
        .map(|f| match f.node {
            Some(n) => format!("shard {} (node {n}): {}", f.index, f.reason),
            None => format!("shard {}: {}", f.index, f.reason),
        })
        .collect();
    nodes.sort();
    let corrupt = failures.iter().any(|f| f.reason.contains("failed verification"));
    WireError::new(
        if corrupt && failures.iter().all(|f| f.reason.contains("failed verification")) {
            ErrorCode::Corrupt
        } else {
            ErrorCode::Unavailable
        },
        format!(
            "{what}: chunk {} (id {:016x}, {}) is unavailable: {ok} of {} shards readable, {} needed; {}",
            rec.index,
            rec.id,
            rec.ec,
            rec.ec.width(),
            rec.ec.k,
            nodes.join("; ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Chunk {
        // Three shards of 4 bytes, cut at 10: "abcd" "efgh" "ij".
        Chunk::new(vec![Bytes::from_static(b"abcd"), Bytes::from_static(b"efgh"), Bytes::from_static(b"ijkl")], 10)
    }

    #[test]
    fn a_chunk_is_its_shards_cut_at_its_length() {
        let c = parts();
        assert_eq!(c.len(), 10);
        assert_eq!(c.to_bytes(), Bytes::from_static(b"abcdefghij"));
        assert_eq!(Chunk::new(vec![Bytes::from_static(b"abcd")], 0).len(), 0);
        assert_eq!(Chunk::new(vec![Bytes::from_static(b"ab")], 5).to_bytes(), Bytes::from_static(b"ab"));
    }

    #[test]
    fn reads_within_a_shard_are_slices_of_it() {
        let shard = Bytes::from(vec![7u8; 4096]);
        let c = Chunk::new(vec![Bytes::from(vec![1u8; 4096]), shard.clone()], 8192);
        let read = c.slice_padded(4096 + 100, 1000);
        assert_eq!(read.as_ptr(), shard[100..].as_ptr(), "copied instead of sliced");
        assert_eq!(read.len(), 1000);
    }

    #[test]
    fn reads_across_shards_and_past_the_end() {
        let c = parts();
        assert_eq!(c.slice_padded(2, 4), Bytes::from_static(b"cdef"));
        assert_eq!(c.slice_padded(0, 10), Bytes::from_static(b"abcdefghij"));
        assert_eq!(c.slice_padded(6, 4), Bytes::from_static(b"ghij"));
        assert_eq!(c.slice_padded(7, 6), Bytes::from_static(b"hij\0\0\0"));
        assert_eq!(c.slice_padded(12, 3), Bytes::from_static(b"\0\0\0"));
        assert_eq!(Chunk::default().slice_padded(0, 2), Bytes::from_static(b"\0\0"));
        assert_eq!(c.slice_padded(3, 0), Bytes::new());
    }

    #[test]
    fn cut_bytes_verify_against_the_block_table_with_head_and_tail() {
        let bs = SHARD_BLOCK_BYTES as usize;
        let shard: Vec<u8> = (0..3 * bs + 777).map(|i| (i * 7 + i / 13) as u8).collect();
        let table: Vec<u32> = shard.chunks(bs).map(crc32c::crc32c).collect();
        let len = shard.len() as u32;
        for (offset, end) in
            [(0usize, 1usize), (5, 4096), (bs - 10, bs + 10), (100, 3 * bs + 777), (3 * bs, 3 * bs + 777), (bs, 2 * bs)]
        {
            let first_block = offset / bs * bs;
            let last_end = (((end - 1) / bs + 1) * bs).min(shard.len());
            let head = crc32c::crc32c(&shard[first_block..offset]);
            let tail = crc32c::crc32c(&shard[end..last_end]);
            let data = &shard[offset..end];
            assert_eq!(verify_cut(data, offset as u32, len, &table, head, tail), Ok(()), "{offset}..{end}");
            let mut bad = data.to_vec();
            bad[data.len() / 2] ^= 0x10;
            assert!(
                verify_cut(&bad, offset as u32, len, &table, head, tail).is_err(),
                "damage in {offset}..{end} passed"
            );
            assert!(verify_cut(data, offset as u32, len, &table, head ^ 1, tail).is_err());
            assert!(verify_cut(data, offset as u32, len, &table, head, tail ^ 1).is_err());
        }
        assert!(verify_cut(&shard[..10], len - 5, len, &table, 0, 0).is_err(), "bytes past the end");
    }
}
