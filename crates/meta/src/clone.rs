//! Clones: `MetaOp::CloneFile` makes a new file that shares every chunk of another (a live
//! file, or a file as a snapshot holds it) without copying a byte, and the record of where a
//! chunk held by more than one file is (`s` ‖ chunk id, [`SharedChunkRec`]).
//!
//! Elsewhere a chunk id lives in one slot (file, index), which is what GC, the snapshots'
//! held-chunk checks and the repair job's moves look at. A shared chunk is in several, and all
//! of them are listed in its `s` record: GC deletes it only when no listed slot holds it (live
//! or in a preserved version), and a move re-places it in every one. Writes never change a
//! chunk in place (a write makes a new chunk), so a write to a clone never shows through the
//! other file. A slot may later hold another chunk: readers compare ids, and the record goes
//! with the chunk when GC deletes it.

use crate::keys::{self, InodeRec, SharedChunkRec, Stat};
use crate::namespace::{self, Ctx, NewInode};
use crate::quota;
use crate::snapshot;
use crate::store::{self, abort, fail, get, put, TxResult};
use kv::KvTxn;
use wire::{ChunkRecord, FileKind, Ino, MetaReply};

/// Most chunks one clone copies the records of (one transaction): 100,000 chunks are 400 GB at
/// the default 4 MiB chunk size.
pub const CLONE_CHUNKS_MAX: usize = 100_000;

/// The slots of chunk `id`: its own (`ino`, `index`) first, then every other its `s` record
/// lists.
pub async fn slots(txn: &mut dyn KvTxn, ino: Ino, index: u64, id: u64) -> TxResult<Vec<(Ino, u64)>> {
    let mut out = vec![(ino, index)];
    if let Some(rec) = get::<SharedChunkRec>(txn, &keys::shared(id)).await? {
        for slot in rec.slots {
            if !out.contains(&slot) {
                out.push(slot);
            }
        }
    }
    Ok(out)
}

/// Records that chunk `id` is (or was) held in each of `add`.
pub async fn share(txn: &mut dyn KvTxn, id: u64, add: &[(Ino, u64)]) -> TxResult<()> {
    let key = keys::shared(id);
    let mut rec = get::<SharedChunkRec>(txn, &key).await?.unwrap_or_default();
    let before = rec.slots.len();
    for slot in add {
        if !rec.slots.contains(slot) {
            rec.slots.push(*slot);
        }
    }
    if rec.slots.len() != before {
        put(txn, &key, &rec).await?;
    }
    Ok(())
}

/// Whether a live record of a slot other than `own` holds chunk `id`.
pub async fn held_elsewhere(txn: &mut dyn KvTxn, own: (Ino, u64), id: u64) -> TxResult<bool> {
    let Some(rec) = get::<SharedChunkRec>(txn, &keys::shared(id)).await? else {
        return Ok(false);
    };
    for (ino, index) in rec.slots {
        if (ino, index) == own {
            continue;
        }
        if get::<ChunkRecord>(txn, &keys::chunk(ino, index)).await?.is_some_and(|c| c.id == id) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Makes `name` in `parent` a clone of regular file `src` (see `MetaOp::CloneFile`).
pub async fn clone_file(txn: &mut dyn KvTxn, ctx: &Ctx, src: Ino, parent: Ino, name: &str) -> TxResult<MetaReply> {
    // The source as it is now, or as a snapshot holds it; `home` is the inode whose slots
    // hold its chunks.
    let (attr, chunks, home) = if snapshot::is_view(src) {
        let (attr, chunks) = snapshot::view_file(txn, src).await?;
        let home = attr.ino;
        (attr, chunks, home)
    } else {
        let rec: InodeRec = namespace::load(txn, src).await?;
        let prefix = keys::chunk_prefix(src);
        let mut chunks = Vec::new();
        for (key, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
            chunks.push(keys::decode::<ChunkRecord>(&key, &value).map_err(abort)?);
        }
        (rec.attr, chunks, src)
    };
    if attr.kind != FileKind::File {
        fail!(
            Invalid,
            "inode {src} is a {}; only regular files are cloned (trove clone walks directories)",
            namespace::kind_name(attr.kind)
        );
    }
    if chunks.len() > CLONE_CHUNKS_MAX {
        fail!(
            TooLarge,
            "inode {src} has {} chunks; one clone copies the records of at most {CLONE_CHUNKS_MAX}",
            chunks.len()
        );
    }
    let new = NewInode {
        kind: FileKind::File,
        mode: attr.mode,
        uid: attr.uid,
        gid: attr.gid,
        rdev: 0,
        target: String::new(),
    };
    let MetaReply::Entry { .. } = namespace::make(txn, ctx, parent, name, new).await? else {
        fail!(Internal, "making the clone's inode answered something else");
    };
    let ino = ctx.new_ino()?;
    let mut rec: InodeRec = namespace::load(txn, ino).await?;
    // The same data in the same layout; its own times from now on (its mtime is the source's,
    // as the bytes are).
    rec.attr.size = attr.size;
    rec.attr.ec = attr.ec;
    rec.attr.chunk_bytes = attr.chunk_bytes;
    rec.attr.pool = attr.pool;
    rec.attr.mtime = attr.mtime;
    quota::charge(txn, ctx.now_ms, rec.quota, quota::bytes_of(&rec), 0, true).await?;
    namespace::store_inode(txn, &rec).await?;
    for chunk in &chunks {
        put(txn, &keys::chunk(ino, chunk.index), chunk).await?;
        share(txn, chunk.id, &[(home, chunk.index), (ino, chunk.index)]).await?;
        // A chunk only a snapshot held waited in the GC queue: a live file holds it again.
        let gc_key = keys::gc(chunk.id);
        if let Some(gc) = get::<keys::GcRec>(txn, &gc_key).await? {
            if gc.done != 0 {
                fail!(Internal, "chunk {:016x} of the source was partly deleted by GC", chunk.id);
            }
            txn.delete(&gc_key).await?;
            let held = i64::try_from(gc.bytes_held()).unwrap_or(i64::MAX);
            store::stat_add(txn, Stat::PendingDeleteBytes, gc.ino, -held).await?;
        }
        if crate::jobs::needs_repair(chunk, rec.attr.ec) {
            crate::jobs::queue(txn, ino, chunk.index, chunk.id).await?;
        }
    }
    store::stat_add(txn, Stat::Chunks, ino, chunks.len() as i64).await?;
    let dir = namespace::load_attr(txn, parent).await?;
    Ok(MetaReply::Entry { attr: rec.attr, dir })
}
