//! The read side of an open file, shared by every reader of it: chunk records, fetches in
//! flight (demand reads, read-ahead, whole-chunk fills for random reads), and
//! sequential-stream detection. The chunks themselves are kept by the client's cache
//! (`chunk_cache.rs`), by chunk id, for every file and open.
//!
//! Many reads of one file run at once without holding a lock across I/O: a short mutex guards
//! the tables, never an await. A record or chunk that several readers miss at the same time is
//! fetched once; the others wait for that fetch (a `OnceCell` per batch of records and per
//! chunk). Read-ahead fetches are the same entries, run by a background task.
//!
//! The write side ([`crate::FileHandle`]'s buffers, uploads and commits) shares this state: a
//! commit publishes the new records (and caches the written content under the new chunk
//! ids), a truncation drops every record. Every such change bumps a generation number; a
//! record fetch that started before it does not put what it found into the table (its caller
//! still gets it: that read ran concurrently with the change). A shared fetch is joined only by
//! readers that look up the same chunk id in the same generation, so a read that starts after
//! a change never gets content from before it. A read finds cached content only through the
//! record it holds: a chunk id's bytes never change, so the cache needs no such care.
//!
//! The handle's write path keeps using the fields it always had (`records`, `prefetch`):
//! [`RecordTable`] and [`Prefetches`] are views of this shared state with the few operations
//! it needs.

use crate::chunk_cache::{ChunkCache, Fill, FillSlot, Key};
use crate::chunkio::{slice_parts, Chunk};
use crate::{Client, Result};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::OnceCell;
use tokio::task::AbortHandle;
use wire::{Attr, ChunkId, ChunkRecord, ErrorCode, Ino, MetaOp, MetaReply, WireError};

/// Chunk records fetched per metadata call; batches start at multiples of it, so readers
/// missing records of the same region share one fetch.
pub(crate) const RECORDS_PER_FETCH: u64 = 64;
/// Sequential streams told apart at once (several readers of one file, or one reader whose
/// requests arrive slightly out of order).
const STREAMS_MAX: usize = 8;
/// A read continues a stream when it starts within this many times its own length of where
/// the stream's last read ended (requests of a read-ahead window arrive out of order)...
const SEQUENTIAL_SLACK_REQUESTS: u64 = 4;
/// ...but at least this many bytes, and at most [`SEQUENTIAL_SLACK_CHUNKS`] chunks. Small
/// random reads thus count as sequential only when they really are adjacent: a fixed window of
/// two chunks took one random 4 KiB read in 16 of a 1 GiB file for part of a stream, and fetched
/// its whole chunk.
const SEQUENTIAL_SLACK_BYTES_MIN: u64 = 128 << 10;
const SEQUENTIAL_SLACK_CHUNKS: u64 = 2;

/// Chunks a reader provides itself (the write side's buffered and uploading chunks), which
/// take precedence over what the cluster holds.
pub(crate) trait LocalChunks: Sync {
    /// `take` bytes from `in_chunk` of chunk `index` if the chunk is held locally.
    fn piece(&self, index: u64, in_chunk: usize, take: usize) -> Option<Bytes>;
    /// Whether chunk `index` is held locally (read-ahead skips it).
    fn holds(&self, index: u64) -> bool;
}

/// No local chunks: a reader of what the cluster holds.
struct Nothing;

impl LocalChunks for Nothing {
    fn piece(&self, _: u64, _: usize, _: usize) -> Option<Bytes> {
        None
    }
    fn holds(&self, _: u64) -> bool {
        false
    }
}

/// The shared read side of one open file. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ReadSide {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    ino: Ino,
    chunk_bytes: u64,
    /// The file's data version as the handle last saw it (at open or after its own commits):
    /// a chunk re-encoded under a new id is followed only while the file's version is this.
    data_version: AtomicU64,
    /// "inode N", for error messages (made once, not per read).
    what: String,
    /// Bumped by every change of the write side (see the module text).
    generation: AtomicU64,
    state: Mutex<State>,
    /// The file's attributes at open, with the atime as this handle's reads last moved it
    /// (`atime.rs`).
    read_attr: parking_lot::Mutex<Attr>,
}

#[derive(Default)]
struct State {
    /// Chunk records known (None: known absent, a hole); shared, so a read takes one without
    /// copying it.
    records: HashMap<u64, Option<Arc<ChunkRecord>>>,
    /// Record fetches in flight, by the first index of their batch.
    record_fetches: HashMap<u64, Arc<OnceCell<RecordBatch>>>,
    /// Whole-chunk fetches in flight (demand reads, read-ahead and fills).
    fetches: HashMap<u64, Fetch>,
    /// Recent streams of reads, for sequential detection.
    streams: Streams,
}

/// Recent streams of reads: where each one's last read ended, how many reads in a row
/// continued it, and its read-ahead window in chunks.
#[derive(Default)]
struct Streams {
    slots: [Stream; STREAMS_MAX],
    next: usize,
}

impl Streams {
    /// Whether a read of `len` bytes at `offset`, ending at `end`, is part of a sequential
    /// stream (in a file of chunks of `chunk_bytes`); records it, and returns the stream's
    /// read-ahead window in chunks (at most `window_max`).
    fn note(&mut self, offset: u64, end: u64, len: u64, chunk_bytes: u64, window_max: usize) -> (bool, usize) {
        let slack = (len.saturating_mul(SEQUENTIAL_SLACK_REQUESTS))
            .max(SEQUENTIAL_SLACK_BYTES_MIN)
            .min(chunk_bytes * SEQUENTIAL_SLACK_CHUNKS);
        let hit = self.slots.iter().position(|s| s.end != u64::MAX && offset.abs_diff(s.end) <= slack);
        match hit {
            Some(i) => {
                let s = &mut self.slots[i];
                s.end = end;
                s.continued = s.continued.saturating_add(1);
                if s.continued < CONTINUED_TO_BE_SEQUENTIAL {
                    return (false, 1);
                }
                s.window = (s.window * 2).min(window_max.max(1));
                (true, s.window)
            }
            None => {
                self.slots[self.next] = Stream { end, ..Stream::NONE };
                self.next = (self.next + 1) % STREAMS_MAX;
                (false, 1)
            }
        }
    }
}

type RecordBatch = Arc<HashMap<u64, Option<Arc<ChunkRecord>>>>;

/// The cache's key of the chunk `rec` names.
fn key(rec: &ChunkRecord) -> Key {
    (rec.id, rec.len)
}

/// One stream of reads (see `State::streams`).
#[derive(Clone, Copy, Debug)]
struct Stream {
    end: u64,
    continued: u32,
    window: usize,
}

impl Stream {
    const NONE: Stream = Stream { end: u64::MAX, continued: 0, window: 1 };
}

impl Default for Stream {
    fn default() -> Stream {
        Stream::NONE
    }
}

/// Reads in a row that must continue a stream before it counts as sequential (whole chunks,
/// read-ahead). One is not enough: in a 1 GiB file, about 1 random read in 500 lands within its
/// slack of one of the last 8 reads, and each such read would fetch a whole chunk and more.
const CONTINUED_TO_BE_SEQUENTIAL: u32 = 2;

/// A fetch of one chunk in flight, joined by every reader of the same chunk id.
struct Fetch {
    id: ChunkId,
    generation: u64,
    cell: Arc<OnceCell<Chunk>>,
    /// The read-ahead task running it, if one does.
    task: Option<AbortHandle>,
    /// A fill for random reads (`chunk_cache.rs`): small reads do not wait for it, they fetch
    /// their own bytes meanwhile.
    fill: bool,
    /// What the client's memory cache does with the chunk, whoever finishes the fetch.
    keep: Keep,
}

/// What a finished fetch puts into the client's memory cache (`chunk_cache.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The chunk, as the most recently used.
    Cached,
    /// The chunk on probation: one reader wants it, and the kernel's page cache keeps what
    /// that reader reads.
    Once,
    /// Nothing: a fill the memory cache did not admit, for the disk cache below alone.
    Nothing,
}

impl ReadSide {
    pub(crate) fn new(client: Client, attr: &Attr) -> ReadSide {
        let (ino, chunk_bytes) = (attr.ino, u64::from(attr.chunk_bytes));
        let state = State::default();
        ReadSide {
            inner: Arc::new(Inner {
                client,
                ino,
                chunk_bytes: chunk_bytes.max(1),
                data_version: AtomicU64::new(attr.data_version),
                what: format!("inode {ino}"),
                generation: AtomicU64::new(0),
                state: Mutex::new(state),
                read_attr: parking_lot::Mutex::new(attr.clone()),
            }),
        }
    }

    /// The inode number.
    pub fn ino(&self) -> Ino {
        self.inner.ino
    }

    /// Reads up to `len` bytes at `offset` of what the cluster holds of the file, which is
    /// `size` bytes long (fewer at the end). Many reads may run at once.
    pub async fn read_at(&self, offset: u64, len: usize, size: u64) -> Result<Bytes> {
        self.read_with(offset, len, size, &Nothing).await
    }

    /// Records the file's data version the handle now holds (see `Inner::data_version`).
    pub(crate) fn saw_version(&self, version: u64) {
        self.inner.data_version.store(version, Ordering::Release);
    }

    fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Marks a change of the write side (see the module text).
    fn changed(&self) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes the records a `GetChunks` of `count` chunks from `first` returned at open; indices
    /// in that range without one are holes. Never replaces a record already known.
    pub(crate) fn know_records(&self, first: u64, count: u64, chunks: Vec<ChunkRecord>) {
        let mut st = self.inner.state.lock();
        let mut found: HashMap<u64, Option<Arc<ChunkRecord>>> =
            (first..first.saturating_add(count)).map(|i| (i, None)).collect();
        for c in chunks {
            found.insert(c.index, Some(Arc::new(c)));
        }
        for (i, r) in found {
            st.records.entry(i).or_insert(r);
        }
    }

    /// The record of chunk `index`, fetching its batch from the metadata service if unknown
    /// (once, however many readers miss it at the same time).
    pub(crate) async fn record(&self, index: u64) -> Result<Option<Arc<ChunkRecord>>> {
        let batch = index - index % RECORDS_PER_FETCH;
        let (cell, generation) = {
            let mut st = self.inner.state.lock();
            if let Some(r) = st.records.get(&index) {
                return Ok(r.clone());
            }
            (st.record_fetches.entry(batch).or_insert_with(|| Arc::new(OnceCell::new())).clone(), self.generation())
        };
        let fetched = cell
            .get_or_try_init(|| async {
                let fetching = std::time::Instant::now();
                let reply = self
                    .inner
                    .client
                    .meta(MetaOp::GetChunks { ino: self.inner.ino, first: batch, count: RECORDS_PER_FETCH })
                    .await?;
                wire::stages::record(wire::stages::Stage::ClientRecord, fetching);
                let MetaReply::Chunks { chunks, .. } = reply else {
                    return Err(WireError::new(
                        ErrorCode::Internal,
                        format!("unexpected reply to GetChunks: {reply:?}"),
                    ));
                };
                let mut found: HashMap<u64, Option<Arc<ChunkRecord>>> =
                    (batch..batch + RECORDS_PER_FETCH).map(|i| (i, None)).collect();
                for c in chunks {
                    found.insert(c.index, Some(Arc::new(c)));
                }
                Ok::<_, WireError>(Arc::new(found))
            })
            .await;
        let mut st = self.inner.state.lock();
        if st.record_fetches.get(&batch).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            st.record_fetches.remove(&batch);
            if let Ok(found) = &fetched {
                // Only what is still unknown, and only if the write side changed nothing
                // meanwhile: a commit's records are newer than any fetch that raced with it.
                if self.generation() == generation {
                    for (i, r) in found.iter() {
                        st.records.entry(*i).or_insert_with(|| r.clone());
                    }
                }
            }
        }
        Ok(fetched?.get(&index).cloned().flatten())
    }

    /// After a read of chunk `index` found too few shards where `rec` places them: the chunk's
    /// current record if the same chunk has moved since it was fetched (rebuild, drain,
    /// rebalance; its old copies are deleted after a grace period), or if the same bytes were
    /// re-encoded under a new id (widened or narrowed by the mover: the file's data version is
    /// still the one the handle saw), else `None`. A chunk replaced by a newer write is not
    /// followed (close-to-open: the open sees one version).
    async fn moved_record(&self, index: u64, rec: &ChunkRecord) -> Result<Option<ChunkRecord>> {
        let generation = self.generation();
        let reply = self.inner.client.meta(MetaOp::GetChunks { ino: self.inner.ino, first: index, count: 1 }).await?;
        let MetaReply::Chunks { attr, chunks } = reply else {
            return Err(WireError::new(ErrorCode::Internal, format!("unexpected reply to GetChunks: {reply:?}")));
        };
        let same_data = attr.data_version == self.inner.data_version.load(Ordering::Acquire);
        let fresh = chunks.into_iter().find(|c| c.index == index).filter(|fresh| {
            (fresh.id == rec.id && fresh.placement != rec.placement)
                || (same_data && fresh.id != rec.id && fresh.len == rec.len)
        });
        if let Some(fresh) = &fresh {
            let mut st = self.inner.state.lock();
            // Replaces the record that failed, unless the write side changed it meanwhile.
            if self.generation() == generation
                && st.records.get(&index).is_some_and(|r| r.as_ref().is_some_and(|r| r.id == rec.id))
            {
                st.records.insert(index, Some(Arc::new(fresh.clone())));
            }
        }
        Ok(fresh)
    }

    fn cache(&self) -> &ChunkCache {
        &self.inner.client.inner.chunk_cache
    }

    /// Keeps `data` as the content of the chunk `rec` names: the write side's, after a commit.
    /// On probation: what is written is seldom read back at once, and a large write must not
    /// push out what readers are using.
    pub(crate) fn remember_written(&self, rec: &ChunkRecord, data: Chunk) {
        if data.len() == rec.len as usize {
            self.cache().put_once(key(rec), data);
        }
    }

    /// The fetch of chunk `rec` in flight, or a new one (in `st`).
    fn fetch_entry(&self, st: &mut State, index: u64, rec: &ChunkRecord) -> Arc<OnceCell<Chunk>> {
        let generation = self.generation();
        match st.fetches.get(&index) {
            Some(f) if f.id == rec.id && f.generation == generation => f.cell.clone(),
            _ => {
                let cell = Arc::new(OnceCell::new());
                st.fetches.insert(
                    index,
                    Fetch { id: rec.id, generation, cell: cell.clone(), task: None, fill: false, keep: Keep::Cached },
                );
                cell
            }
        }
    }

    /// Runs (or waits for) the fetch in `cell` of chunk `index` as `rec` places it; the one
    /// that finishes it puts the chunk into the client's memory cache (under the id it was
    /// fetched by, whatever the write side did meanwhile: that id's bytes are these) as the
    /// fetch's [`Keep`] says.
    async fn run_fetch(&self, cell: Arc<OnceCell<Chunk>>, index: u64, rec: Arc<ChunkRecord>) -> Result<Chunk> {
        let fetched = cell.get_or_try_init(|| self.fetch_chunk(index, &rec)).await.cloned();
        let finished = {
            let mut st = self.inner.state.lock();
            match st.fetches.get(&index) {
                Some(f) if Arc::ptr_eq(&f.cell, &cell) => st.fetches.remove(&index).map(|f| f.keep),
                _ => None,
            }
        };
        if let (Some(keep), Ok(data)) = (finished, &fetched) {
            match keep {
                Keep::Cached => self.cache().put(key(&rec), data.clone()),
                Keep::Once => self.cache().put_once(key(&rec), data.clone()),
                Keep::Nothing => {}
            }
        }
        fetched
    }

    /// Reads chunk `rec` whole: from the disk cache if it holds it, else from the storage
    /// nodes (following the chunk once if it moved meanwhile), offering what arrived to the
    /// disk cache.
    async fn fetch_chunk(&self, index: u64, rec: &ChunkRecord) -> Result<Chunk> {
        let client = &self.inner.client;
        let disk = client.inner.disk_cache.as_ref();
        if let Some(disk) = disk.filter(|d| d.holds(key(rec))) {
            if let Some(data) = disk.read(rec, 0, rec.len).await {
                return Ok(Chunk::from(data));
            }
        }
        let ((data, tables), rec) = match client.read_chunk_tables(rec, &self.inner.what).await {
            Err(e) if e.code == ErrorCode::Unavailable => match self.moved_record(index, rec).await? {
                Some(fresh) => {
                    (client.read_chunk_tables(&fresh, &self.inner.what).await?, std::borrow::Cow::Owned(fresh))
                }
                None => return Err(e),
            },
            other => (other?, std::borrow::Cow::Borrowed(rec)),
        };
        if let Some(disk) = disk {
            disk.offer(&rec, data.clone(), tables);
        }
        Ok(data)
    }

    /// The whole content of chunk `index` as stored (holes are empty), from the cache, a fetch
    /// in flight or a new fetch.
    pub(crate) async fn chunk(&self, index: u64) -> Result<Chunk> {
        let Some(rec) = self.record(index).await? else { return Ok(Chunk::default()) };
        if let Some(c) = self.cache().get(key(&rec)) {
            return Ok(c);
        }
        self.chunk_uncached(index, rec).await
    }

    /// [`ReadSide::chunk`] once the cache has been asked.
    async fn chunk_uncached(&self, index: u64, rec: Arc<ChunkRecord>) -> Result<Chunk> {
        let cell = {
            let mut st = self.inner.state.lock();
            self.fetch_entry(&mut st, index, &rec)
        };
        self.run_fetch(cell, index, rec).await
    }

    /// Bytes `in_chunk .. in_chunk + take` of chunk `index` as `rec` places it: from the disk
    /// cache if it holds the chunk (then the second value is true), else only the blocks that
    /// hold them from a storage node.
    async fn range(&self, index: u64, rec: &ChunkRecord, in_chunk: u32, take: u32) -> Result<(Bytes, bool)> {
        let client = &self.inner.client;
        if let Some(disk) = client.inner.disk_cache.as_ref().filter(|d| d.holds(key(rec))) {
            if let Some(data) = disk.read(rec, in_chunk, take).await {
                return Ok((data, true));
            }
        }
        let (data, tables) = match client.read_chunk_range(rec, in_chunk, take, &self.inner.what).await {
            Err(e) if e.code == ErrorCode::Unavailable => match self.moved_record(index, rec).await? {
                // Read as `fresh` places it, offered below under `rec`: without its tables.
                Some(fresh) => (client.read_chunk_range(&fresh, in_chunk, take, &self.inner.what).await?.0, Vec::new()),
                None => return Err(e),
            },
            other => other?,
        };
        if in_chunk == 0 && take == rec.len && data.len() == take as usize {
            // The whole chunk (a small file read whole): cached like any chunk read whole.
            self.cache().put(key(rec), Chunk::from(data.clone()));
            if let Some(disk) = client.inner.disk_cache.as_ref() {
                disk.offer(rec, Chunk::from(data.clone()), tables);
            }
        }
        Ok((slice_parts(std::slice::from_ref(&data), 0, take as usize), false))
    }

    /// After a small random read of chunk `index` missed the cache: fetches the chunk whole
    /// in the background if the cache wants it (`chunk_cache.rs`) and nothing fetches it yet.
    fn maybe_fill(&self, index: u64, rec: &Arc<ChunkRecord>) {
        // With a disk cache that does not hold the chunk yet, a fill the memory cache would
        // not admit still pays: it goes to the disk.
        let disk = self.inner.client.inner.disk_cache.as_ref();
        let spill = disk.is_some_and(|d| !d.holds(key(rec)));
        let Some(Fill { slot, to_memory }) = self.cache().want(key(rec), u64::from(rec.len), spill) else { return };
        let mut st = self.inner.state.lock();
        if st.fetches.contains_key(&index) {
            return;
        }
        let cell = self.fetch_entry(&mut st, index, rec);
        let (this, rec) = (self.clone(), rec.clone());
        let task = wire::world::spawn(async move {
            let _slot: FillSlot = slot;
            if let Err(e) = this.run_fetch(cell, index, rec).await {
                // Only a cache fill: the reads themselves fetched their bytes.
                tracing::debug!("filling the cache with chunk {index} of {}: {e}", this.inner.what);
            }
        });
        if let Some(f) = st.fetches.get_mut(&index) {
            f.task = Some(task.abort_handle());
            f.fill = true;
            f.keep = if to_memory { Keep::Cached } else { Keep::Nothing };
        }
    }

    /// Whether a read of `len` bytes at `offset` continues a recent stream; records where it
    /// ends, and returns the stream's read-ahead window in chunks.
    fn note_read(&self, offset: u64, end: u64, len: u64) -> (bool, usize) {
        let window_max = self.inner.client.inner.options.readahead_chunks_max;
        self.inner.state.lock().streams.note(offset, end, len, self.inner.chunk_bytes, window_max)
    }

    /// Reads up to `len` bytes at `offset` of a file of `size` bytes, taking chunks `local`
    /// holds from it.
    pub(crate) async fn read_with(&self, offset: u64, len: usize, size: u64, local: &dyn LocalChunks) -> Result<Bytes> {
        let reading = std::time::Instant::now();
        {
            // Every read may move the atime (relatime's rule, with the cluster's lag), not only
            // the first after the open: a file kept open and read for longer than a policy's
            // age still counts as read.
            let mut attr = self.inner.read_attr.lock();
            if self.inner.client.note_read(&attr) {
                attr.atime = wire::Timestamp::now();
            }
        }
        let started = crate::metered::table().start();
        let out = self.read_pieces(offset, len, size, local).await;
        wire::stages::record(wire::stages::Stage::ClientRead, reading);
        let read = out.as_ref().map_or(0, |b| b.len());
        crate::metered::done(crate::metered::READ, started, out.is_ok(), read, 0);
        crate::metered::file(self.inner.ino, read, 0);
        out
    }

    async fn read_pieces(&self, offset: u64, len: usize, size: u64, local: &dyn LocalChunks) -> Result<Bytes> {
        let end = offset.saturating_add(len as u64).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let cb = self.inner.chunk_bytes;
        let (sequential, window) = self.note_read(offset, end, len as u64);
        if offset / cb == (end - 1) / cb {
            // Within one chunk (every small read): the piece is the answer, not copied.
            return self.piece(offset, end, sequential, window, size, local).await;
        }
        let mut out = BytesMut::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let piece_end = ((pos / cb + 1) * cb).min(end);
            out.extend_from_slice(&self.piece(pos, piece_end, sequential, window, size, local).await?);
            pos = piece_end;
        }
        Ok(out.freeze())
    }

    /// Bytes `pos .. piece_end` of the file, which lie within one chunk.
    async fn piece(
        &self,
        pos: u64,
        piece_end: u64,
        sequential: bool,
        window: usize,
        size: u64,
        local: &dyn LocalChunks,
    ) -> Result<Bytes> {
        let cb = self.inner.chunk_bytes;
        let index = pos / cb;
        let in_chunk = (pos % cb) as usize;
        let take = (piece_end - pos) as usize;
        let piece = if let Some(p) = local.piece(index, in_chunk, take) {
            p
        } else if let Some(rec) = self.record(index).await? {
            let cached = self.cache().get(key(&rec));
            crate::metered::chunk_cache().lookup(cached.is_some());
            match cached {
                Some(c) => c.slice_padded(in_chunk, take),
                None => {
                    // A demand read or read-ahead of the chunk in flight is joined; a fill is
                    // not waited for.
                    let fetching = self.inner.state.lock().fetches.get(&index).is_some_and(|f| !f.fill);
                    if !sequential && take < cb as usize / 4 && !fetching {
                        // Small random read: fetch only the bytes asked for. One the disk cache
                        // answered fills nothing: the page cache holds the rest of the chunk as
                        // well as memory would, and a fill would copy all of it.
                        let (bytes, local) = self.range(index, &rec, in_chunk as u32, take as u32).await?;
                        if !local {
                            self.maybe_fill(index, &rec);
                        }
                        bytes
                    } else {
                        self.chunk_uncached(index, rec).await?.slice_padded(in_chunk, take)
                    }
                }
            }
        } else {
            // A hole.
            Bytes::from(vec![0u8; take])
        };
        if sequential || take as u64 == cb {
            self.read_ahead(index, window, size, local).await?;
        }
        Ok(piece)
    }

    /// Starts fetching up to `window` chunks after `index` in the background.
    async fn read_ahead(&self, index: u64, window: usize, size: u64, local: &dyn LocalChunks) -> Result<()> {
        let last_chunk = size.div_ceil(self.inner.chunk_bytes);
        for ahead in index + 1..=(index + window as u64).min(last_chunk.saturating_sub(1)) {
            if self.inner.state.lock().fetches.contains_key(&ahead) || local.holds(ahead) {
                continue;
            }
            let Some(rec) = self.record(ahead).await? else { continue };
            self.fetch_in_background(ahead, rec, Keep::Cached);
        }
        Ok(())
    }

    /// Starts fetching chunk `index` whole in the background, unless it is cached or already
    /// being fetched, to be kept as `keep` says; readers of it join the fetch.
    fn fetch_in_background(&self, index: u64, rec: Arc<ChunkRecord>, keep: Keep) {
        if self.cache().contains(key(&rec)) {
            return;
        }
        let mut st = self.inner.state.lock();
        if st.fetches.contains_key(&index) {
            return;
        }
        let cell = self.fetch_entry(&mut st, index, &rec);
        let this = self.clone();
        let task = wire::world::spawn(async move {
            if let Err(e) = this.run_fetch(cell, index, rec).await {
                // A reader that needs the chunk fetches it again and reports the error.
                tracing::debug!("fetching chunk {index} of {} ahead: {e}", this.inner.what);
            }
        });
        if let Some(f) = st.fetches.get_mut(&index) {
            f.task = Some(task.abort_handle());
            f.keep = keep;
        }
    }

    /// Starts fetching the first chunk of a small file just opened for reading, whose record
    /// the open brought, so that the read about to come finds it in flight (or done) instead
    /// of asking only then; the memory cache keeps it as `keep` says ([`Keep::Once`] when the
    /// kernel's page cache will hold what is read). Does nothing when the record is not known
    /// yet: no metadata call.
    pub fn prefetch_start(&self, keep: Keep) {
        let rec = self.inner.state.lock().records.get(&0).cloned().flatten();
        if let Some(rec) = rec {
            self.fetch_in_background(0, rec, keep);
        }
    }

    /// Stops every read-ahead task and forgets every fetch in flight.
    fn stop_fetches(&self, st: &mut State) -> Vec<(u64, FetchTask)> {
        st.fetches.drain().map(|(i, f)| (i, FetchTask(f.task))).collect()
    }
}

/// The file handle's view of the shared chunk records (see the module text).
pub(crate) struct RecordTable(pub(crate) ReadSide);

impl RecordTable {
    /// Sets chunk `index`'s record: a commit's, which replaces any fetched one.
    pub(crate) fn insert(&mut self, index: u64, rec: Option<ChunkRecord>) {
        let mut st = self.0.inner.state.lock();
        self.0.changed();
        st.records.insert(index, rec.map(Arc::new));
    }

    /// Forgets chunk `index`'s record (a write given up: the next read asks again).
    pub(crate) fn remove(&mut self, index: &u64) {
        let mut st = self.0.inner.state.lock();
        self.0.changed();
        st.records.remove(index);
    }

    /// Forgets every record (after a truncation).
    pub(crate) fn clear(&mut self) {
        let mut st = self.0.inner.state.lock();
        self.0.changed();
        st.records.clear();
    }
}

/// The file handle's view of the shared fetches in flight (see the module text).
pub(crate) struct Prefetches(pub(crate) ReadSide);

impl Prefetches {
    /// Forgets the fetch of chunk `index` (a write replaces the chunk); the caller stops it.
    pub(crate) fn remove(&mut self, index: &u64) -> Option<FetchTask> {
        let mut st = self.0.inner.state.lock();
        self.0.changed();
        st.fetches.remove(index).map(|f| FetchTask(f.task))
    }

    /// Forgets every fetch in flight; the caller stops them.
    pub(crate) fn drain(&mut self) -> std::vec::IntoIter<(u64, FetchTask)> {
        let mut st = self.0.inner.state.lock();
        self.0.changed();
        self.0.stop_fetches(&mut st).into_iter()
    }
}

/// A forgotten fetch: readers already waiting on it still get its result; `abort` stops the
/// read-ahead task behind it (if any), and a waiting reader then fetches for itself.
pub(crate) struct FetchTask(Option<AbortHandle>);

impl FetchTask {
    pub(crate) fn abort(&self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_sequential_from_their_third_read_and_random_reads_never() {
        let cb = 4u64 << 20;
        let mut s = Streams::default();
        // One reader, 1 MiB requests from the start: sequential from the third, window growing.
        let mut seen = Vec::new();
        for i in 0..6u64 {
            seen.push(s.note(i << 20, (i + 1) << 20, 1 << 20, cb, 8));
        }
        assert_eq!(seen, vec![(false, 1), (false, 1), (true, 2), (true, 4), (true, 8), (true, 8)]);
        // Two readers of one file, interleaved, slightly out of order: both streams found.
        let mut s = Streams::default();
        let mut sequential = 0;
        for i in 0..20u64 {
            let (a, b) = (i * 131_072, (1 << 30) + i * 131_072);
            sequential += usize::from(s.note(a, a + 131_072, 131_072, cb, 8).0);
            sequential += usize::from(s.note(b, b + 131_072, 131_072, cb, 8).0);
        }
        assert_eq!(sequential, 36, "two streams of 20 reads: all but the first two of each");
        // Random 4 KiB reads of a 1 GiB file by 4 readers: never sequential.
        let mut s = Streams::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut sequential = 0;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let offset = (x % (1 << 18)) * 4096;
            sequential += usize::from(s.note(offset, offset + 4096, 4096, cb, 8).0);
        }
        assert!(sequential <= 2, "{sequential} of 100,000 random reads taken for sequential ones");
    }

    #[test]
    fn slack_grows_with_the_request_and_stays_within_two_chunks() {
        let cb = 4u64 << 20;
        let slack = |len: u64| {
            (len * SEQUENTIAL_SLACK_REQUESTS).max(SEQUENTIAL_SLACK_BYTES_MIN).min(cb * SEQUENTIAL_SLACK_CHUNKS)
        };
        assert_eq!(slack(4096), 128 << 10);
        assert_eq!(slack(1 << 20), 4 << 20);
        assert_eq!(slack(4 << 20), 8 << 20);
    }
}
