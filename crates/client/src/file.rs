//! An open file: buffered, chunk-at-a-time writes with copy-on-write commits, and reads with
//! sequential read-ahead.
//!
//! Writes collect into whole-chunk buffers. A chunk is uploaded when its buffer fills (or on
//! flush), under a fresh chunk id; the metadata only learns of it at commit (flush, fsync,
//! close, or every few chunks), when the new record replaces the old one atomically. A reader
//! therefore sees either the old chunk or the new one, never a mix.
//!
//! Consistency is close-to-open: chunk records are fetched once per open (and after this
//! handle's own commits), like NFS.
//!
//! A failed write never looks like success: the size this handle publishes never covers bytes
//! that are not stored. A commit publishes the file only up to the first chunk still buffered,
//! uploading or failed (unless that chunk lies within the size already published, whose old
//! content stays readable until the new one replaces it); when an upload fails, the writer is
//! told at its next write, flush or close, what was stored up to there is published, and the
//! uploads that cannot be are given up (their shards go to GC). So a reader afterwards sees
//! the data or a shorter file, never zeros where data was meant to be.
//!
//! Reads go through the handle's [`ReadSide`] (`reader.rs`): records, fetches in flight and
//! read-ahead, shared with every reader that holds a clone of it, so that reads of one file
//! need not wait for each other; the chunks they bring are kept by the client's cache
//! (`chunk_cache.rs`). The handle adds its own buffered and uploading
//! chunks on top.

use crate::chunkio::{slice_parts, Allocation, Chunk};
use crate::reader::{LocalChunks, Prefetches, ReadSide, RecordTable};
use crate::{Client, Result};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use tokio::task::JoinHandle;
use wire::pool::{Pool, PooledBuf};
use wire::{Attr, ChunkRecord, ErrorCode, Ino, MetaOp, MetaReply, SetAttr, Timestamp, WireError};

/// Chunk ids reserved per metadata call when writing.
const ALLOC_BATCH: u32 = 8;
/// Uploaded-but-uncommitted chunks after which the writer commits to the metadata.
const COMMIT_EVERY_CHUNKS: usize = 16;
/// Most bytes of freed chunk buffers the process keeps for the next writes: a sequential
/// writer's commit lets go of [`COMMIT_EVERY_CHUNKS`] default chunks at once.
const WRITE_BUFFERS_BYTES_MAX: usize = 64 << 20;

/// Freed chunk buffers of writes, their pages still mapped. A fresh chunk buffer took a page
/// fault and a page clear for every 4 KiB written into it, a sixth of the mount's CPU in a
/// sequential write.
static WRITE_BUFFERS: Pool = Pool::new(WRITE_BUFFERS_BYTES_MAX);

/// The attributes of a file and the records of its first [`FirstChunks::COUNT`] chunks, read
/// in one metadata transaction ([`Client::getattr_for_open`]): an open's close-to-open check
/// that also spares a small file's first read its record lookup.
#[derive(Clone, Debug)]
pub struct FirstChunks {
    attr: Attr,
    chunks: Vec<ChunkRecord>,
}

impl FirstChunks {
    /// Chunks whose records come with the attributes: all of a file up to 16 MiB at the
    /// default chunk size, and few enough that a large file's open stays cheap.
    pub const COUNT: u64 = 4;

    /// The attributes, as fresh as a `getattr`.
    pub fn attr(&self) -> &Attr {
        &self.attr
    }
}

impl Client {
    /// A file's attributes with the records of its first chunks, in one round trip.
    pub async fn getattr_for_open(&self, ino: Ino) -> Result<FirstChunks> {
        match self.meta(MetaOp::GetChunks { ino, first: 0, count: FirstChunks::COUNT }).await? {
            MetaReply::Chunks { attr, chunks } => Ok(FirstChunks { attr, chunks }),
            other => Err(WireError::new(ErrorCode::Internal, format!("unexpected reply to GetChunks: {other:?}"))),
        }
    }

    /// Looks `name` up in `parent`, and for a regular file takes the records of its first
    /// chunks along (what [`Client::getattr_for_open`] returns), in one round trip: a file
    /// opened right after its lookup needs no other call to the metadata service.
    pub async fn lookup_for_open(&self, parent: Ino, name: &str) -> Result<(Attr, Option<FirstChunks>)> {
        let op = MetaOp::LookupChunks { parent, name: name.to_string(), count: FirstChunks::COUNT };
        match self.meta(op).await? {
            MetaReply::Chunks { attr, chunks } => Ok((attr.clone(), Some(FirstChunks { attr, chunks }))),
            MetaReply::Attr(attr) => Ok((attr, None)),
            other => Err(WireError::new(ErrorCode::Internal, format!("unexpected reply to LookupChunks: {other:?}"))),
        }
    }

    /// Opens the file [`Client::getattr_for_open`] described, knowing its first chunks.
    pub fn open_with_first_chunks(&self, first: FirstChunks) -> Result<FileHandle> {
        let handle = FileHandle::with_attr(self.clone(), first.attr)?;
        handle.read.know_records(0, FirstChunks::COUNT, first.chunks);
        Ok(handle)
    }
}

/// An open file. Not shared between tasks: wrap it in a mutex to share. Reads of what the
/// cluster holds can also go through [`FileHandle::read_side`], by many tasks at once.
pub struct FileHandle {
    client: Client,
    ino: Ino,
    attr: Attr,
    /// Size including this handle's uncommitted writes.
    size: u64,
    /// The size the metadata service has for the file as this handle last saw it (at open or
    /// from its last commit): bytes below it are stored, in old or new chunks.
    committed_size: u64,
    /// Chunk records known to this handle: the read side's, shared.
    records: RecordTable,
    /// Chunks being written: index -> bytes from the chunk's start (len = valid bytes).
    dirty: BTreeMap<u64, PooledBuf>,
    /// Dirty chunks written from their start whose stored content past the written bytes is
    /// not fetched yet: index -> how many bytes of stored content the chunk had within the
    /// file when its buffer began. A rewrite from a chunk's start usually covers the whole
    /// chunk, and then the stored content is never needed; it is fetched only when it is
    /// (an upload of a chunk still short of it, a read past the written bytes, a write that
    /// leaves a gap).
    unfetched: BTreeMap<u64, usize>,
    /// Chunk uploads in flight, in order.
    uploads: VecDeque<(u64, JoinHandle<Result<ChunkRecord>>)>,
    /// Uploaded chunks waiting for the metadata commit.
    uploaded: Vec<ChunkRecord>,
    /// Size to publish at the next commit when it shrank or must be exact.
    size_dirty: bool,
    /// Chunk ids reserved for writing, with their placements and scheme.
    alloc: VecDeque<Allocation>,
    /// Chunks whose upload failed since the last flush: the published size must not cover
    /// them.
    failed: BTreeSet<u64>,
    /// Content of chunks uploaded (or uploading) but not yet committed: reads must see them
    /// even though the handle's records still name the old chunks.
    written: HashMap<u64, Bytes>,
    /// Fetches in flight (read-ahead and demand reads): the read side's, shared.
    prefetch: Prefetches,
    /// First error of a background upload, reported at the next flush.
    deferred_error: Option<WireError>,
    /// Records, fetches and read-ahead, shared with concurrent readers.
    read: ReadSide,
}

impl FileHandle {
    pub(crate) async fn open(client: Client, ino: Ino) -> Result<FileHandle> {
        let attr = client.getattr(ino).await?;
        FileHandle::with_attr(client, attr)
    }

    /// A handle on the file whose fresh attributes the caller already has (from a create or a
    /// getattr), saving the metadata round trip of [`FileHandle::open`].
    pub(crate) fn with_attr(client: Client, attr: Attr) -> Result<FileHandle> {
        let ino = attr.ino;
        if attr.kind != wire::FileKind::File {
            return Err(WireError::new(ErrorCode::Invalid, format!("inode {ino} is not a regular file")));
        }
        let read = ReadSide::new(client.clone(), &attr);
        Ok(FileHandle {
            client,
            ino,
            size: attr.size,
            committed_size: attr.size,
            attr,
            records: RecordTable(read.clone()),
            dirty: BTreeMap::new(),
            unfetched: BTreeMap::new(),
            uploads: VecDeque::new(),
            uploaded: Vec::new(),
            size_dirty: false,
            alloc: VecDeque::new(),
            failed: BTreeSet::new(),
            written: HashMap::new(),
            prefetch: Prefetches(read.clone()),
            deferred_error: None,
            read,
        })
    }

    /// The file's shared read side: reads of what the cluster holds (not this handle's
    /// unflushed writes) that many tasks may run at once.
    pub fn read_side(&self) -> ReadSide {
        self.read.saw_version(self.attr.data_version);
        self.read.clone()
    }

    /// The inode number.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// The file size as this handle sees it (including its own unflushed writes).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The attributes fetched at open or at the last commit.
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    /// Whether [`FileHandle::flush`] has anything to do: writes buffered, uploads in flight or
    /// not committed, a size to publish, or an error to report. When it has not, a flush
    /// changes nothing and asks no one.
    pub fn has_unflushed(&self) -> bool {
        !self.dirty.is_empty()
            || !self.uploads.is_empty()
            || !self.uploaded.is_empty()
            || !self.failed.is_empty()
            || self.deferred_error.is_some()
            || self.size_dirty
            || self.size > self.committed_size
    }

    fn chunk_bytes(&self) -> u64 {
        u64::from(self.attr.chunk_bytes)
    }

    /// The whole content of chunk `index` as stored (holes are empty), this handle's uploading
    /// content first.
    async fn chunk_data(&mut self, index: u64) -> Result<Chunk> {
        if let Some(b) = self.written.get(&index) {
            return Ok(Chunk::from(b.clone()));
        }
        self.read.saw_version(self.attr.data_version);
        self.read.chunk(index).await
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file), this handle's
    /// unflushed writes included.
    pub async fn read_at(&mut self, offset: u64, len: usize) -> Result<Bytes> {
        if let Some(e) = self.deferred_error.clone() {
            return Err(e);
        }
        self.read.saw_version(self.attr.data_version);
        let cb = self.chunk_bytes();
        let touched: Vec<u64> = self
            .unfetched
            .keys()
            .copied()
            .filter(|&i| i * cb < offset.saturating_add(len as u64) && offset < (i + 1) * cb)
            .collect();
        for index in touched {
            self.fetch_unwritten(index).await?;
        }
        let local = Buffered { dirty: &self.dirty, written: &self.written };
        self.read.read_with(offset, len, self.size, &local).await
    }

    /// Writes `data` at `offset`, extending the file as needed. Data is durable only after
    /// [`FileHandle::flush`] / [`FileHandle::close`].
    pub async fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let started = crate::metered::table().start();
        let result = self.write_unmetered(offset, data).await;
        crate::metered::done(crate::metered::WRITE, started, result.is_ok(), 0, data.len());
        crate::metered::file(self.ino(), 0, data.len());
        result
    }

    async fn write_unmetered(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        if let Some(e) = self.deferred_error.clone() {
            return Err(e);
        }
        let cb = self.chunk_bytes();
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let index = pos / cb;
            let in_chunk = (pos % cb) as usize;
            let take = ((cb as usize) - in_chunk).min(rest.len());
            if !self.dirty.contains_key(&index) {
                // Copy-on-write: a partial overwrite starts from the chunk's current content,
                // fetched now unless the write starts at the chunk's start (then only when it
                // is needed, see `unfetched`).
                let covers_all = in_chunk == 0 && take == cb as usize;
                let stored = if index * cb < self.size { (self.size - index * cb).min(cb) as usize } else { 0 };
                let mut buf = WRITE_BUFFERS.take(cb as usize);
                if !covers_all && stored > 0 {
                    // (This handle's own uploading version is in memory: taken at once.)
                    if in_chunk == 0 && !self.written.contains_key(&index) {
                        self.unfetched.insert(index, stored);
                    } else {
                        buf.vec().extend_from_slice(&self.existing_content(index).await?);
                    }
                }
                self.dirty.insert(index, buf);
                self.written.remove(&index);
                if let Some(t) = self.prefetch.remove(&index) {
                    t.abort();
                }
            } else if self.unfetched.contains_key(&index) && self.dirty.get(&index).is_some_and(|b| b.len() < in_chunk)
            {
                // A gap between the written bytes and this write: the stored bytes fill it.
                self.fetch_unwritten(index).await?;
            }
            let buf = self.dirty.get_mut(&index).expect("inserted above").vec();
            // Bytes are copied in once: what lies within the buffer is overwritten, the rest
            // appended (a gap before the write, a hole, reads as zeros). Zeroing the whole
            // span first and then copying over it cost a sequential writer as much as the copy.
            let within = buf.len().saturating_sub(in_chunk).min(take);
            if within > 0 {
                buf[in_chunk..in_chunk + within].copy_from_slice(&rest[..within]);
            }
            if within < take {
                buf.resize(in_chunk + within, 0);
                buf.extend_from_slice(&rest[within..take]);
            }
            if self.unfetched.get(&index).is_some_and(|&stored| buf.len() >= stored) {
                // Every stored byte is overwritten: nothing to fetch.
                self.unfetched.remove(&index);
            }
            let full = buf.len() == cb as usize && in_chunk + take == cb as usize;
            pos += take as u64;
            rest = &rest[take..];
            if pos > self.size {
                self.size = pos;
            }
            if full {
                self.start_upload(index).await?;
            }
        }
        Ok(())
    }

    /// The chunk's current bytes within the file size (empty for a hole or past the end).
    async fn existing_content(&mut self, index: u64) -> Result<Bytes> {
        let cb = self.chunk_bytes();
        if index * cb >= self.size {
            return Ok(Bytes::new());
        }
        let data = self.chunk_data(index).await?;
        // Bytes past the file size (a truncated chunk) must read as zeros after an extension.
        let valid = (self.size - index * cb).min(cb) as usize;
        Ok(data.slice_padded(0, data.len().min(valid)))
    }

    /// Fills dirty chunk `index` (see `unfetched`) past its written bytes with the chunk's
    /// stored content, as it stood when the buffer began.
    async fn fetch_unwritten(&mut self, index: u64) -> Result<()> {
        let Some(&stored) = self.unfetched.get(&index) else { return Ok(()) };
        let data = self.chunk_data(index).await?;
        let base = data.slice_padded(0, data.len().min(stored));
        let buf = self.dirty.get_mut(&index).expect("an unfetched chunk is dirty").vec();
        if base.len() > buf.len() {
            buf.extend_from_slice(&base[buf.len()..]);
        }
        self.unfetched.remove(&index);
        Ok(())
    }

    async fn next_allocation(&mut self) -> Result<Allocation> {
        if self.alloc.is_empty() {
            let avoid = self.client.nodes_to_avoid();
            self.alloc.extend(self.client.alloc_chunks(self.ino, ALLOC_BATCH, avoid).await?);
        }
        self.alloc
            .pop_front()
            .ok_or_else(|| WireError::new(ErrorCode::Internal, "metadata service allocated no chunk ids"))
    }

    /// Uploads dirty chunk `index` in the background, waiting first if too many are in flight.
    async fn start_upload(&mut self, index: u64) -> Result<()> {
        if let Err(e) = self.fetch_unwritten(index).await {
            // As a failed upload: the chunk's new bytes cannot be stored whole.
            self.dirty.remove(&index);
            self.unfetched.remove(&index);
            self.failed.insert(index);
            self.deferred_error.get_or_insert(e.clone());
            return Err(e);
        }
        let Some(buf) = self.dirty.remove(&index) else { return Ok(()) };
        // A chunk rewritten before its previous version was committed: commit that version
        // first, so the new one replaces it copy-on-write (and the old one is collected) instead
        // of two versions of one index meeting in one commit.
        if self.uploads.iter().any(|(i, _)| *i == index) || self.uploaded.iter().any(|r| r.index == index) {
            while !self.uploads.is_empty() {
                self.reap_one().await;
            }
            self.commit().await?;
            // A version the commit held back, behind an earlier chunk not stored yet (nothing
            // is published past such a gap): the new version started from its bytes, so it is
            // given up (its shards go to GC) instead of meeting the new one in a later commit,
            // which the metadata service refuses.
            let (stale, held): (Vec<ChunkRecord>, Vec<ChunkRecord>) =
                std::mem::take(&mut self.uploaded).into_iter().partition(|r| r.index == index);
            self.uploaded = held;
            self.client.abandon_chunks(self.ino, stale).await;
        }
        while self.uploads.len() >= self.client.inner.options.write_chunks_inflight_max.max(1) {
            self.reap_one().await;
        }
        // A short chunk (a small file, a file's tail) is copied out, so the cache does not pin
        // a whole chunk's pages for it and the buffer goes back to be reused at once.
        let data = buf.freeze_compact();
        let alloc = match self.next_allocation().await {
            Ok(alloc) => alloc,
            Err(e) => {
                // The chunk's bytes are lost to this handle: the published size must stop
                // before them, and the writer is told.
                self.failed.insert(index);
                self.deferred_error.get_or_insert(e.clone());
                return Err(e);
            }
        };
        let client = self.client.clone();
        let ino = self.ino;
        self.written.insert(index, data.clone());
        self.uploads
            .push_back((index, wire::world::spawn(async move { client.upload_chunk(ino, index, alloc, data).await })));
        if self.uploaded.len() >= COMMIT_EVERY_CHUNKS {
            self.commit().await?;
        }
        Ok(())
    }

    async fn reap_one(&mut self) {
        if let Some((index, task)) = self.uploads.pop_front() {
            let failure = match task.await {
                Ok(Ok(rec)) => {
                    self.uploaded.push(rec);
                    return;
                }
                Ok(Err(e)) => e,
                Err(e) => WireError::new(ErrorCode::Internal, format!("upload task failed: {e}")),
            };
            self.failed.insert(index);
            self.deferred_error.get_or_insert(failure);
        }
    }

    /// The size this handle may publish now: its size, cut where the first chunk that is not
    /// stored yet (buffered, uploading, or failed) begins, unless that chunk lies wholly within
    /// the size already published (its old content stays readable until the new one is
    /// committed). Never below the published size.
    fn publishable_size(&self) -> u64 {
        let cb = self.chunk_bytes();
        let pending = self.dirty.keys().chain(self.uploads.iter().map(|(index, _)| index)).chain(self.failed.iter());
        let mut size = self.size;
        for &index in pending {
            let start = index.saturating_mul(cb);
            let end = start.saturating_add(cb).min(self.size);
            if end > self.committed_size {
                size = size.min(start.max(self.committed_size));
            }
        }
        size
    }

    /// Publishes the uploaded chunks that lie within [`FileHandle::publishable_size`], and that
    /// size, to the metadata service; later chunks wait for the gap before them to be stored.
    async fn commit(&mut self) -> Result<()> {
        let size = self.publishable_size();
        let cb = self.chunk_bytes();
        let (chunks, later): (Vec<ChunkRecord>, Vec<ChunkRecord>) = std::mem::take(&mut self.uploaded)
            .into_iter()
            .partition(|c| c.index.saturating_mul(cb).saturating_add(u64::from(c.len)) <= size);
        self.uploaded = later;
        if chunks.is_empty() && size <= self.committed_size && !self.size_dirty {
            return Ok(());
        }
        let reply = self
            .client
            .meta(MetaOp::CommitChunks {
                ino: self.ino,
                chunks: chunks.clone(),
                size,
                set_size: self.size_dirty,
                mtime: Timestamp::now(),
            })
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                // Not published: kept for the next commit (or given up by the flush).
                self.uploaded.extend(chunks);
                return Err(e);
            }
        };
        if let MetaReply::Attr(a) = reply {
            self.committed_size = a.size;
            self.attr = a;
        }
        for c in chunks {
            // The cache keeps serving the content; the record now names the new chunk.
            if let Some(data) = self.written.remove(&c.index) {
                self.read.remember_written(&c, Chunk::from(data));
            }
            self.records.insert(c.index, Some(c));
        }
        self.size_dirty = false;
        Ok(())
    }

    /// Uploads every buffered chunk and commits them: afterwards the data is durable and
    /// visible to every client that opens the file.
    ///
    /// When an upload failed, publishes what was stored before the first failed chunk (see
    /// [`FileHandle::publishable_size`]), gives up the uploads it cannot publish, takes the
    /// handle back to the published size, and returns the first error: the file then reads
    /// as its data or shorter, never with invented zeros.
    pub async fn flush(&mut self) -> Result<()> {
        let dirty: Vec<u64> = self.dirty.keys().copied().collect();
        for index in dirty {
            if self.start_upload(index).await.is_err() {
                // Recorded as failed (or left uploaded when only a commit failed): handled
                // below with the others.
                break;
            }
        }
        while !self.uploads.is_empty() {
            self.reap_one().await;
        }
        let error = match self.deferred_error.take() {
            Some(error) => error,
            None => match self.commit().await {
                // A commit refused for good (a quota): what it would have published is given up
                // like a failed upload's, so the file stays as it was.
                Err(e) if e.code == ErrorCode::QuotaExceeded => e,
                done => return done,
            },
        };
        // Publish what was stored before the first failed chunk; nothing acknowledged earlier
        // is lost.
        let committed = self.commit().await;
        let unpublished = std::mem::take(&mut self.uploaded);
        let mut dropped: Vec<u64> = unpublished.iter().map(|c| c.index).collect();
        dropped.extend(std::mem::take(&mut self.failed));
        dropped.extend(std::mem::take(&mut self.dirty).into_keys());
        self.unfetched.clear();
        for index in dropped {
            self.written.remove(&index);
            self.records.remove(&index);
        }
        self.client.abandon_chunks(self.ino, unpublished).await;
        self.size = self.committed_size;
        if let Err(e) = committed {
            tracing::debug!("inode {}: publishing what was stored before a failed upload: {e}", self.ino);
        }
        Err(error)
    }

    /// Same as [`FileHandle::flush`]: shards are written durably before they are acknowledged.
    pub async fn fsync(&mut self) -> Result<()> {
        self.flush().await
    }

    /// Changes the file size; bytes past a shrunk end are gone, an extension reads as zeros.
    pub async fn truncate(&mut self, size: u64) -> Result<()> {
        self.flush().await?;
        self.attr = self.client.setattr(self.ino, SetAttr { size: Some(size), ..Default::default() }).await?;
        self.size = size;
        self.committed_size = self.attr.size;
        self.records.clear();
        for (_, t) in self.prefetch.drain() {
            t.abort();
        }
        Ok(())
    }

    /// Flushes and closes the file.
    pub async fn close(mut self) -> Result<()> {
        for (_, t) in self.prefetch.drain() {
            t.abort();
        }
        self.flush().await
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        for (_, t) in self.prefetch.drain() {
            t.abort();
        }
        // Chunks uploaded (or uploading) but never committed would leave their shards behind:
        // give them up once their uploads end.
        let uploaded = std::mem::take(&mut self.uploaded);
        let uploads = std::mem::take(&mut self.uploads);
        if uploaded.is_empty() && uploads.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, ino) = (self.client.clone(), self.ino);
            runtime.spawn(async move {
                let mut chunks = uploaded;
                for (_, task) in uploads {
                    if let Ok(Ok(rec)) = task.await {
                        chunks.push(rec);
                    }
                }
                client.abandon_chunks(ino, chunks).await;
            });
        }
    }
}

/// `take` bytes of `data` from `start`, zero-filled past its end (holes and short chunks).
fn slice_padded(data: &Bytes, start: usize, take: usize) -> Bytes {
    slice_parts(std::slice::from_ref(data), start, take)
}

/// A handle's own chunks, which reads see before the cluster's: buffered (dirty) ones and
/// uploaded ones not yet committed.
struct Buffered<'a> {
    dirty: &'a BTreeMap<u64, PooledBuf>,
    written: &'a HashMap<u64, Bytes>,
}

impl LocalChunks for Buffered<'_> {
    fn piece(&self, index: u64, in_chunk: usize, take: usize) -> Option<Bytes> {
        if let Some(buf) = self.dirty.get(&index) {
            let valid = &buf[in_chunk.min(buf.len())..(in_chunk + take).min(buf.len())];
            return Some(slice_padded(&Bytes::copy_from_slice(valid), 0, take));
        }
        self.written.get(&index).map(|b| slice_padded(b, in_chunk, take))
    }

    fn holds(&self, index: u64) -> bool {
        self.dirty.contains_key(&index) || self.written.contains_key(&index)
    }
}
