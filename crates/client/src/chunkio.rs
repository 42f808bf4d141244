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
use wire::{
    ChunkId, ChunkRecord, EcScheme, ErrorCode, NodeId, Placement, PlacementMap, RpcError, ShardInfo, ShardKey, StorageOp,
    StorageReply, WireError, SHARD_BLOCK_BYTES,
};

/// Why one shard could not be used, for error messages.
pub(crate) struct ShardFailure {
    pub(crate) index: usize,
    pub(crate) node: Option<NodeId>,
    pub(crate) reason: String,
    /// The storage node's answer, when it answered with an error; `Corrupt` also for shards
    /// that failed the client's own verification.
    pub(crate) code: Option<ErrorCode>,
}

impl Client {
    /// Encodes `data` (one chunk's bytes) and stores its shards on the nodes of `placement`,
    /// all in parallel. Succeeds when at least `k` shards are durable (missing ones are
    /// recorded in the returned record so the chunk shows as degraded); otherwise fails
    /// naming every node that refused.
    ///
    /// When fewer than `k` nodes take their shard (nodes restarting, a stale belief about
    /// which are down), the upload is retried with fresh node states until
    /// `write_retry_deadline`, so a rolling restart does not fail writes.
    pub(crate) async fn upload_chunk(
        &self,
        index: u64,
        id: ChunkId,
        placement: Placement,
        map: &PlacementMap,
        ec: EcScheme,
        data: Bytes,
    ) -> Result<ChunkRecord> {
        let started = Instant::now();
        let mut delay = std::time::Duration::from_millis(100);
        let mut skip_known_down = true;
        loop {
            let in_time = started.elapsed() < self.inner.options.write_retry_deadline;
            match self.upload_chunk_once(index, id, placement, map, ec, data.clone(), skip_known_down).await {
                // Stored, but without any redundancy left: try for a better copy first (a node
                // may be back in a moment), and accept this one only at the deadline.
                Ok(rec) if ec.m > 0 && rec.missing.count_ones() >= u32::from(ec.m) && in_time => {
                    tracing::debug!("chunk {id:016x} stored without redundancy; retrying for more shards");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(1));
                    let _ = self.refresh_nodes_forgiving().await;
                    skip_known_down = false;
                }
                Err(e) if e.code == ErrorCode::Unavailable && in_time => {
                    tracing::debug!("retrying chunk {id:016x}: {e}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(1));
                    let _ = self.refresh_nodes_forgiving().await;
                    skip_known_down = false;
                }
                other => return other,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn upload_chunk_once(
        &self,
        index: u64,
        id: ChunkId,
        placement: Placement,
        map: &PlacementMap,
        ec: EcScheme,
        data: Bytes,
        skip_known_down: bool,
    ) -> Result<ChunkRecord> {
        self.maybe_refresh_nodes();
        let len = data.len() as u32;
        let shards = erasure::encode(ec, &data);
        let shard_len = ec.shard_len(len);
        let mut table_crcs = Vec::with_capacity(shards.len());
        // Nodes known to be down are written around at once, as long as enough others remain
        // to store the chunk; otherwise every node is tried (the belief may be stale).
        let retry_after = self.inner.options.node_retry_after;
        let known_down: Vec<bool> = {
            let nodes = self.inner.nodes.read();
            (0..ec.width())
                .map(|i| map.node_for(placement.pg, i).and_then(|n| nodes.get(&n)).is_some_and(|h| h.recently_failed(retry_after)))
                .collect()
        };
        // Skipping must leave room for at least one shard of redundancy.
        let skip_down = skip_known_down && known_down.iter().filter(|d| !**d).count() > usize::from(ec.k);
        let mut sends = FuturesUnordered::new();
        for (i, shard) in shards.into_iter().enumerate() {
            let skip = skip_down && known_down[i];
            let block_crcs = erasure::block_crcs(&shard);
            table_crcs.push(erasure::table_crc(&block_crcs));
            let info = ShardInfo { key: ShardKey { chunk: id, index: i as u8 }, ec, len: shard_len, block_crcs };
            let node_id = map.node_for(placement.pg, i);
            let client = self.clone();
            sends.push(async move {
                let result = async {
                    let node_id = node_id.ok_or_else(|| {
                        WireError::new(ErrorCode::Internal, format!("placement group {} has no node for shard {i}", placement.pg))
                    })?;
                    let node = client.node(node_id).await?;
                    if skip {
                        // Known to be down: written around at once (the chunk is recorded
                        // degraded and repaired by the mover) rather than after a timeout.
                        return Err(WireError::new(ErrorCode::Unavailable, format!("node {node_id} ({}) is down", node.peer.addr())));
                    }
                    let op = StorageOp::PutShard { info };
                    let outcome = node.peer.call::<StorageOp, StorageReply>(&op, shard, client.inner.options.storage_timeout).await;
                    match outcome {
                        Ok(_) => {
                            *node.failed_at.lock() = None;
                            Ok(())
                        }
                        Err(e) => {
                            if e.is_unreachable() {
                                *node.failed_at.lock() = Some(Instant::now());
                            }
                            Err(WireError::new(rpc_error(e.clone()).code, format!("node {node_id} ({}): {e}", node.peer.addr())))
                        }
                    }
                }
                .await;
                (i, result)
            });
        }
        let mut missing = 0u64;
        let mut failures: Vec<WireError> = Vec::new();
        while let Some((i, result)) = sends.next().await {
            if let Err(e) = result {
                missing |= 1 << i;
                failures.push(e);
            }
        }
        let written = ec.width() - missing.count_ones() as usize;
        if written < usize::from(ec.k) {
            let code = if failures.iter().any(|f| f.code == ErrorCode::NoSpace) { ErrorCode::NoSpace } else { ErrorCode::Unavailable };
            let reasons: Vec<String> = failures.iter().map(|f| f.message.clone()).collect();
            return Err(WireError::new(
                code,
                format!(
                    "cannot store chunk {index} ({id:016x}): only {written} of {} shards written, {} needed: {}",
                    ec.width(),
                    ec.k,
                    reasons.join("; ")
                ),
            ));
        }
        if missing != 0 {
            tracing::warn!("chunk {id:016x} written degraded: {}", failures.iter().map(|f| f.message.as_str()).collect::<Vec<_>>().join("; "));
        }
        Ok(ChunkRecord { index, id, len, ec, shard_len, placement, table_crcs, missing })
    }

    /// Fetches shard `index` of `rec` (bytes `offset .. offset + len` of the shard, widened to
    /// whole blocks; `len == 0` means to the end) and verifies it. Returns the verified bytes
    /// starting at the block-aligned offset, and that offset.
    pub(crate) async fn fetch_shard(&self, rec: &ChunkRecord, map: &PlacementMap, index: usize, offset: u32, len: u32) -> Result<(Bytes, u32), ShardFailure> {
        let fail = |node: Option<NodeId>, reason: String| ShardFailure { index, node, reason, code: None };
        if rec.missing & (1 << index) != 0 {
            return Err(fail(None, "never written (node was down at write time)".into()));
        }
        let node_id = map.node_for(rec.placement.pg, index).ok_or_else(|| fail(None, "no node in placement".into()))?;
        let node: Arc<NodeHandle> = self.node(node_id).await.map_err(|e| fail(Some(node_id), e.message))?;
        if node.recently_failed(self.inner.options.node_retry_after) {
            return Err(fail(Some(node_id), format!("node {node_id} ({}) unreachable", node.peer.addr())));
        }
        let key = ShardKey { chunk: rec.id, index: index as u8 };
        let op = StorageOp::GetShard { key, offset, len };
        let (reply, data) = match node.peer.call::<StorageOp, StorageReply>(&op, Bytes::new(), self.inner.options.storage_timeout).await {
            Ok(r) => r,
            Err(e) => {
                if e.is_unreachable() {
                    *node.failed_at.lock() = Some(Instant::now());
                }
                let (reason, code) = match &e {
                    RpcError::Remote(w) => (format!("node {node_id} ({}): {}", node.peer.addr(), w.message), Some(w.code)),
                    other => (other.to_string(), None),
                };
                return Err(ShardFailure { code, ..fail(Some(node_id), reason) });
            }
        };
        *node.failed_at.lock() = None;
        let (info, start) = match reply {
            StorageReply::Shard { info, offset } => (info, offset),
            other => return Err(fail(Some(node_id), format!("unexpected reply {other:?}"))),
        };
        // End-to-end verification: the table must be the writer's, each block must match it.
        let corrupt = |what: String| ShardFailure {
            code: Some(ErrorCode::Corrupt),
            ..fail(Some(node_id), format!("{key} on node {node_id} failed verification: {what}"))
        };
        if info.key != key || info.len != rec.shard_len {
            return Err(corrupt(format!("header says {} of {} bytes", info.key, info.len)));
        }
        if erasure::table_crc(&info.block_crcs) != rec.table_crcs.get(index).copied().unwrap_or(0) {
            return Err(corrupt("block checksum table does not match the metadata".into()));
        }
        if info.block_crcs.len() != erasure::block_count(rec.shard_len) as usize || start % SHARD_BLOCK_BYTES != 0 {
            return Err(corrupt("block table or offset malformed".into()));
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
        Ok((data, start))
    }

    /// Reads a whole chunk: the `k` data shards in parallel, then parity shards for any that
    /// failed, and rebuilds. `what` names the file for error messages.
    /// The chunk's `len` bytes are its data shards one after another, kept as the shards that
    /// arrived (no copy into one buffer).
    pub(crate) async fn read_chunk(&self, rec: &ChunkRecord, what: &str) -> Result<Chunk> {
        Ok(Chunk::new(self.data_shards(rec, what).await?, rec.len as usize))
    }

    /// Reads a whole chunk as stored: all `shard_len * k` bytes the shards encode (at least
    /// `len`), which re-encode to exactly the shards the writer stored.
    pub(crate) async fn read_chunk_stored(&self, rec: &ChunkRecord, what: &str) -> Result<Bytes> {
        let stored_len = rec.shard_len.saturating_mul(u32::from(rec.ec.k)).max(rec.len);
        Ok(Chunk::new(self.data_shards(rec, what).await?, stored_len as usize).to_bytes())
    }

    /// The chunk's `k` data shards as stored, rebuilt from parity where needed.
    async fn data_shards(&self, rec: &ChunkRecord, what: &str) -> Result<Vec<Bytes>> {
        match self.data_shards_once(rec, what).await {
            // One more try with fresh node states: a node that just restarted answers again.
            Err(e) if e.code == ErrorCode::Unavailable => {
                let _ = self.refresh_nodes_forgiving().await;
                self.data_shards_once(rec, what).await
            }
            other => other,
        }
    }

    async fn data_shards_once(&self, rec: &ChunkRecord, what: &str) -> Result<Vec<Bytes>> {
        self.maybe_refresh_nodes();
        let map = self.map(rec.placement.map_version).await?;
        let k = usize::from(rec.ec.k);
        let width = rec.ec.width();
        let mut shards: Vec<Option<Bytes>> = vec![None; width];
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
                Some((i, Ok((data, _)))) => {
                    shards[i] = Some(data);
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
        erasure::reconstruct_data(rec.ec, stored_len.max(rec.len), &shards)
            .map_err(|e| WireError::new(ErrorCode::Internal, format!("{what}: {e}")))
    }

    /// Reads bytes `offset .. offset + len` of a chunk, fetching only the data shard blocks that
    /// hold them; falls back to a whole-chunk read (with rebuild) if any shard fails.
    pub(crate) async fn read_chunk_range(&self, rec: &ChunkRecord, offset: u32, len: u32, what: &str) -> Result<Bytes> {
        let end = (offset + len).min(rec.len);
        if offset >= end {
            return Ok(Bytes::new());
        }
        self.maybe_refresh_nodes();
        let map = self.map(rec.placement.map_version).await?;
        let shard_len = rec.shard_len;
        let first = (offset / shard_len) as usize;
        let last = ((end - 1) / shard_len) as usize;
        let mut parts = Vec::new();
        for i in first..=last {
            let s_start = if i == first { offset - i as u32 * shard_len } else { 0 };
            let s_end = if i == last { end - i as u32 * shard_len } else { shard_len };
            parts.push((i, s_start, s_end));
        }
        let fetches = parts.iter().map(|&(i, s, e)| {
            let map = map.clone();
            async move { (i, s, e, self.fetch_shard(rec, &map, i, s, e - s).await) }
        });
        let results = futures::future::join_all(fetches).await;
        let mut out = bytes::BytesMut::with_capacity((end - offset) as usize);
        for (_, s, e, r) in results {
            match r {
                Ok((data, start)) => out.extend_from_slice(&data[(s - start) as usize..(e - start) as usize]),
                Err(_) => {
                    let whole = self.read_chunk(rec, what).await?;
                    return Ok(whole.slice_padded(offset as usize, (end - offset) as usize));
                }
            }
        }
        Ok(out.freeze())
    }
}

/// A chunk's bytes as the data shards they arrived in: `len` bytes, the concatenation of
/// `parts` cut at `len`. A read within one shard is a slice of it, not a copy.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chunk {
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

    /// `take` bytes from `start`, zero-filled past the end (holes and short chunks): a slice
    /// of one shard when the range lies within it, a copy otherwise.
    pub(crate) fn slice_padded(&self, start: usize, take: usize) -> Bytes {
        slice_parts(&self.parts, start, take)
    }

    /// All the bytes in one buffer (a copy unless there is at most one part).
    pub(crate) fn to_bytes(&self) -> Bytes {
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
        if corrupt && failures.iter().all(|f| f.reason.contains("failed verification")) { ErrorCode::Corrupt } else { ErrorCode::Unavailable },
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
}
