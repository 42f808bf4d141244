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

use crate::chunkio::{slice_parts, Allocation, Chunk};
use crate::{Client, Result};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use tokio::task::JoinHandle;
use wire::{Attr, ChunkRecord, ErrorCode, Ino, MetaOp, MetaReply, SetAttr, Timestamp, WireError};

/// Chunk records fetched per metadata call.
const RECORDS_PER_FETCH: u64 = 64;
/// Chunk ids reserved per metadata call when writing.
const ALLOC_BATCH: u32 = 8;
/// Uploaded-but-uncommitted chunks after which the writer commits to the metadata.
const COMMIT_EVERY_CHUNKS: usize = 16;
/// How far (in chunks) a read may start from where the previous one ended and still count as
/// part of a sequential stream.
const SEQUENTIAL_SLACK_CHUNKS: u64 = 2;

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

    /// Opens the file [`Client::getattr_for_open`] described, knowing its first chunks.
    pub fn open_with_first_chunks(&self, first: FirstChunks) -> Result<FileHandle> {
        let mut handle = FileHandle::with_attr(self.clone(), first.attr)?;
        handle.know_records(0, FirstChunks::COUNT, first.chunks);
        Ok(handle)
    }
}

/// An open file. Not shared between tasks: wrap it in a mutex to share.
pub struct FileHandle {
    client: Client,
    ino: Ino,
    attr: Attr,
    /// Size including this handle's uncommitted writes.
    size: u64,
    /// The size the metadata service has for the file as this handle last saw it (at open or
    /// from its last commit): bytes below it are stored, in old or new chunks.
    committed_size: u64,
    /// Chunk records known to this handle (None = known absent, i.e. a hole).
    records: HashMap<u64, Option<ChunkRecord>>,
    /// Chunks being written: index -> bytes from the chunk's start (len = valid bytes).
    dirty: BTreeMap<u64, BytesMut>,
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
    /// Whole chunks read recently.
    cache: VecDeque<(u64, Chunk)>,
    /// Read-ahead fetches in flight.
    prefetch: HashMap<u64, JoinHandle<Result<Chunk>>>,
    /// End offset of the last read (sequential detection).
    last_read_end: u64,
    /// Current read-ahead window in chunks.
    window: usize,
    /// First error of a background upload, reported at the next flush.
    deferred_error: Option<WireError>,
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
        Ok(FileHandle {
            client,
            ino,
            size: attr.size,
            committed_size: attr.size,
            attr,
            records: HashMap::new(),
            dirty: BTreeMap::new(),
            uploads: VecDeque::new(),
            uploaded: Vec::new(),
            size_dirty: false,
            alloc: VecDeque::new(),
            failed: BTreeSet::new(),
            written: HashMap::new(),
            cache: VecDeque::new(),
            prefetch: HashMap::new(),
            last_read_end: u64::MAX,
            window: 1,
            deferred_error: None,
        })
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

    fn chunk_bytes(&self) -> u64 {
        u64::from(self.attr.chunk_bytes)
    }

    fn what(&self) -> String {
        format!("inode {}", self.ino)
    }

    /// The record of chunk `index`, fetching a batch of records from the metadata if unknown.
    async fn record(&mut self, index: u64) -> Result<Option<ChunkRecord>> {
        if let Some(r) = self.records.get(&index) {
            return Ok(r.clone());
        }
        let fetching = std::time::Instant::now();
        let reply = self.client.meta(MetaOp::GetChunks { ino: self.ino, first: index, count: RECORDS_PER_FETCH }).await?;
        wire::stages::record(wire::stages::Stage::ClientRecord, fetching);
        let MetaReply::Chunks { chunks, .. } = reply else {
            return Err(WireError::new(ErrorCode::Internal, format!("unexpected reply to GetChunks: {reply:?}")));
        };
        self.know_records(index, RECORDS_PER_FETCH, chunks);
        Ok(self.records.get(&index).cloned().flatten())
    }

    /// Takes the records a `GetChunks` of `count` chunks from `first` returned; indices in that
    /// range without one, and not known otherwise, are holes.
    fn know_records(&mut self, first: u64, count: u64, chunks: Vec<ChunkRecord>) {
        for i in first..first.saturating_add(count) {
            self.records.entry(i).or_insert(None);
        }
        for c in chunks {
            self.records.insert(c.index, Some(c));
        }
    }

    fn cached(&self, index: u64) -> Option<Chunk> {
        self.cache.iter().find(|(i, _)| *i == index).map(|(_, b)| b.clone())
    }

    fn remember(&mut self, index: u64, data: Chunk) {
        self.cache.retain(|(i, _)| *i != index);
        self.cache.push_back((index, data));
        while self.cache.len() > self.client.inner.options.cached_chunks_max {
            self.cache.pop_front();
        }
    }

    /// The whole content of chunk `index` as stored (holes are empty), using the cache and
    /// read-ahead results.
    async fn chunk_data(&mut self, index: u64) -> Result<Chunk> {
        if let Some(b) = self.written.get(&index) {
            return Ok(Chunk::from(b.clone()));
        }
        if let Some(b) = self.cached(index) {
            return Ok(b);
        }
        if let Some(task) = self.prefetch.remove(&index) {
            match task.await.map_err(|e| WireError::new(ErrorCode::Internal, format!("read-ahead task failed: {e}")))? {
                Ok(data) => {
                    self.remember(index, data.clone());
                    return Ok(data);
                }
                // Read again below, with the record re-checked.
                Err(e) if e.code == ErrorCode::Unavailable => {}
                Err(e) => return Err(e),
            }
        }
        let data = match self.record(index).await? {
            Some(rec) => match self.client.read_chunk(&rec, &self.what()).await {
                Err(e) if e.code == ErrorCode::Unavailable => match self.moved_record(index, &rec).await? {
                    Some(fresh) => self.client.read_chunk(&fresh, &self.what()).await?,
                    None => return Err(e),
                },
                other => other?,
            },
            None => Chunk::default(),
        };
        self.remember(index, data.clone());
        Ok(data)
    }

    /// After a read of chunk `index` found too few shards where `rec` places them: the chunk's
    /// current record if the same chunk has moved since this handle fetched `rec` (rebuild,
    /// drain, rebalance; its old copies are deleted after a grace period), or if the same bytes
    /// were re-encoded under a new id (widened or narrowed by the mover: the file's data
    /// version is still the one this handle saw), else `None`. A chunk replaced by a newer
    /// write is not followed (close-to-open: the open sees one version).
    async fn moved_record(&mut self, index: u64, rec: &ChunkRecord) -> Result<Option<ChunkRecord>> {
        self.records.remove(&index);
        let reply = self.client.meta(MetaOp::GetChunks { ino: self.ino, first: index, count: 1 }).await?;
        let MetaReply::Chunks { attr, chunks } = reply else {
            return Err(WireError::new(ErrorCode::Internal, format!("unexpected reply to GetChunks: {reply:?}")));
        };
        let same_data = attr.data_version == self.attr.data_version;
        let fresh = chunks.into_iter().find(|c| c.index == index).filter(|fresh| {
            (fresh.id == rec.id && fresh.placement != rec.placement) || (same_data && fresh.id != rec.id && fresh.len == rec.len)
        });
        if let Some(fresh) = &fresh {
            self.records.insert(index, Some(fresh.clone()));
        }
        Ok(fresh)
    }

    /// Starts fetching the chunks after `index` in the background.
    async fn read_ahead(&mut self, index: u64) -> Result<()> {
        let last_chunk = self.size.div_ceil(self.chunk_bytes());
        for ahead in index + 1..=(index + self.window as u64).min(last_chunk.saturating_sub(1)) {
            if self.prefetch.contains_key(&ahead)
                || self.cached(ahead).is_some()
                || self.dirty.contains_key(&ahead)
                || self.written.contains_key(&ahead)
            {
                continue;
            }
            if let Some(rec) = self.record(ahead).await? {
                let client = self.client.clone();
                let what = self.what();
                self.prefetch.insert(ahead, tokio::spawn(async move { client.read_chunk(&rec, &what).await }));
            }
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub async fn read_at(&mut self, offset: u64, len: usize) -> Result<Bytes> {
        let reading = std::time::Instant::now();
        let out = self.read_at_inner(offset, len).await;
        wire::stages::record(wire::stages::Stage::ClientRead, reading);
        out
    }

    async fn read_at_inner(&mut self, offset: u64, len: usize) -> Result<Bytes> {
        if let Some(e) = self.deferred_error.clone() {
            return Err(e);
        }
        let end = offset.saturating_add(len as u64).min(self.size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let cb = self.chunk_bytes();
        // Front ends with several requests in flight (the FUSE mount's read-ahead) deliver a
        // sequential stream slightly out of order: anything near the last read's end counts.
        let sequential =
            self.last_read_end != u64::MAX && offset.abs_diff(self.last_read_end) <= cb * SEQUENTIAL_SLACK_CHUNKS;
        self.last_read_end = end;
        if sequential {
            self.window = (self.window * 2).min(self.client.inner.options.readahead_chunks_max.max(1));
        } else {
            self.window = 1;
        }
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut pos = offset;
        while pos < end {
            let index = pos / cb;
            let in_chunk = (pos % cb) as usize;
            let take = ((cb - in_chunk as u64).min(end - pos)) as usize;
            let piece: Bytes = if let Some(buf) = self.dirty.get(&index) {
                slice_padded(&Bytes::copy_from_slice(&buf[in_chunk.min(buf.len())..(in_chunk + take).min(buf.len())]), 0, take)
            } else if let Some(b) = self.written.get(&index) {
                slice_padded(b, in_chunk, take)
            } else if let Some((_, b)) = self.cache.iter().find(|(i, _)| *i == index) {
                b.slice_padded(in_chunk, take)
            } else if !sequential && take < cb as usize / 4 && !self.prefetch.contains_key(&index) {
                // Small random read: fetch only the blocks that hold it.
                match self.record(index).await? {
                    Some(rec) => {
                        let what = self.what();
                        let data = match self.client.read_chunk_range(&rec, in_chunk as u32, take as u32, &what).await {
                            Err(e) if e.code == ErrorCode::Unavailable => match self.moved_record(index, &rec).await? {
                                Some(fresh) => self.client.read_chunk_range(&fresh, in_chunk as u32, take as u32, &what).await?,
                                None => return Err(e),
                            },
                            other => other?,
                        };
                        slice_padded(&data, 0, take)
                    }
                    None => Bytes::from(vec![0u8; take]),
                }
            } else {
                let data = self.chunk_data(index).await?;
                data.slice_padded(in_chunk, take)
            };
            pieces.push(piece);
            pos += take as u64;
            if sequential || take as u64 == cb {
                self.read_ahead(index).await?;
            }
        }
        if pieces.len() == 1 {
            return Ok(pieces.pop().expect("one piece"));
        }
        let mut out = BytesMut::with_capacity((end - offset) as usize);
        for p in pieces {
            out.extend_from_slice(&p);
        }
        Ok(out.freeze())
    }

    /// Writes `data` at `offset`, extending the file as needed. Data is durable only after
    /// [`FileHandle::flush`] / [`FileHandle::close`].
    pub async fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
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
                // Copy-on-write: a partial overwrite starts from the chunk's current content.
                let covers_all = in_chunk == 0 && take == cb as usize;
                let base = if covers_all { Bytes::new() } else { self.existing_content(index).await? };
                let mut buf = BytesMut::with_capacity(cb as usize);
                buf.extend_from_slice(&base);
                self.dirty.insert(index, buf);
                self.cache.retain(|(i, _)| *i != index);
                self.written.remove(&index);
                if let Some(t) = self.prefetch.remove(&index) {
                    t.abort();
                }
            }
            let buf = self.dirty.get_mut(&index).expect("inserted above");
            if buf.len() < in_chunk + take {
                buf.resize(in_chunk + take, 0);
            }
            buf[in_chunk..in_chunk + take].copy_from_slice(&rest[..take]);
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

    async fn next_allocation(&mut self) -> Result<Allocation> {
        if self.alloc.is_empty() {
            let avoid = self.client.nodes_to_avoid();
            self.alloc.extend(self.client.alloc_chunks(self.ino, ALLOC_BATCH, avoid).await?);
        }
        self.alloc.pop_front().ok_or_else(|| WireError::new(ErrorCode::Internal, "metadata service allocated no chunk ids"))
    }

    /// Uploads dirty chunk `index` in the background, waiting first if too many are in flight.
    async fn start_upload(&mut self, index: u64) -> Result<()> {
        let Some(buf) = self.dirty.remove(&index) else { return Ok(()) };
        // A chunk rewritten before its previous version was committed: commit that version
        // first, so the new one replaces it copy-on-write (and the old one is collected) instead
        // of two versions of one index meeting in one commit.
        if self.uploads.iter().any(|(i, _)| *i == index) || self.uploaded.iter().any(|r| r.index == index) {
            while !self.uploads.is_empty() {
                self.reap_one().await;
            }
            self.commit().await?;
        }
        while self.uploads.len() >= self.client.inner.options.write_chunks_inflight_max.max(1) {
            self.reap_one().await;
        }
        let data = buf.freeze();
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
        self.uploads.push_back((index, tokio::spawn(async move { client.upload_chunk(ino, index, alloc, data).await })));
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
                self.remember(c.index, Chunk::from(data));
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
        let Some(error) = self.deferred_error.take() else {
            return self.commit().await;
        };
        // Publish what was stored before the first failed chunk; nothing acknowledged earlier
        // is lost.
        let committed = self.commit().await;
        let unpublished = std::mem::take(&mut self.uploaded);
        let mut dropped: Vec<u64> = unpublished.iter().map(|c| c.index).collect();
        dropped.extend(std::mem::take(&mut self.failed));
        dropped.extend(std::mem::take(&mut self.dirty).into_keys());
        for index in dropped {
            self.written.remove(&index);
            self.cache.retain(|(i, _)| *i != index);
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
        self.cache.clear();
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
