//! The client's second cache tier: whole chunks kept in files on a local disk, under the
//! memory cache of `chunk_cache.rs` (JuiceFS's `--cache-dir`, Alluxio's worker storage).
//!
//! Why: training reads the same data every epoch, often more of it than a client's memory
//! holds. Chunks that random reads come back to, or that a reader fetched whole, are written
//! here in the background; later reads of them (the next epoch, another process, the same
//! mount started again) cost a local `pread`, which the kernel's page cache usually answers,
//! instead of a network round trip to a storage node and its drive.
//!
//! Keyed like the memory cache, by (chunk id, length): a key's bytes never change. A file here
//! holds the chunk's `k` data shards exactly as the writer encoded them (zero-padded to
//! `k * shard_len`) and their block checksum tables. Every read checks each table against the
//! chunk record's `table_crcs` (the checksums the writer recorded in the metadata) and each
//! block it returns against its table, as a read from a storage node is checked: what this
//! cache returns is verified end to end, whatever happened to the file since (a crash, bit rot,
//! another cluster's file of the same name). A file that fails is removed and the read goes to
//! the cluster.
//!
//! Bounded in bytes (`DiskCacheOptions::bytes_max`) and by the file system's free space (it
//! keeps [`FREE_PERMILLE_MIN`] of it free, looked at once a second and counted in between from
//! what it writes and removes); past either, the least recently used chunks go, and when
//! something else fills the file system below its free share, the cache gives back the
//! difference at its next write (as far as it holds that much). One process at a time: the
//! directory is locked (`flock`) while a client uses it. It survives restarts: a client opening it lists the files already there
//! (in the background, oldest first), so a mount started again reads warm.
//!
//! Writes go through one thread with a short queue ([`WRITES_QUEUED_MAX`]), at the lowest CPU
//! priority: when the disk or the CPU cannot keep up, chunks are simply not cached (counted as
//! `dropped`), and the reads that fetched them never wait for the cache. Files are written in
//! place and never synced; the index takes a file only once it is written, and a cache file
//! lost or torn by a crash fails its checks and is removed. Files under a temporary name
//! (written by earlier versions) are removed when the directory is listed. A file is written
//! from the chunk's buffers as they are (one vectored write after its header and tables; its
//! zero padding is left a hole), never copied into an image first.
//!
//! Reads of a file kept open whose bytes are in the page cache are answered on the calling
//! task without waiting (`RWF_NOWAIT`); others run on tokio's blocking pool.
//!
//! The format (version 1) is described in ARCHITECTURE.md under "Formats".

use crate::chunk_cache::Key;
use crate::chunkio::{Chunk, ShardTable, ShardTables};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use wire::{ChunkRecord, SHARD_BLOCK_BYTES};

/// The default of `DiskCacheOptions::bytes_max`: 100 GiB (JuiceFS's default cache size).
pub const DISK_CACHE_BYTES_MAX_DEFAULT: u64 = 100 << 30;
/// The share of the cache's file system, in thousandths, that it leaves free: 10%.
pub const FREE_PERMILLE_MIN: u64 = 100;
/// Chunks waiting to be written at most; more are not cached.
pub const WRITES_QUEUED_MAX: usize = 8;
/// The writer thread's nice value: it runs on what the readers leave of the CPU (a busy machine
/// caches less, and never reads slower for it).
const WRITER_NICE: i32 = 19;
/// Cache files kept open for reads at most.
const OPEN_FILES_MAX: usize = 256;
/// How long opening waits for another user of the directory to let it go (a client of this
/// process being dropped, a mount being restarted, finish their queued writes first).
const LOCK_WAIT_MS_MAX: u64 = 3000;
/// How long one look at the file system's free space stands; the writer counts what it wrote
/// meanwhile (a `statvfs` per write cost more than the rest of a small chunk's bookkeeping).
const FREE_SPACE_CHECK_MS: u64 = 1000;
/// Stale recency entries kept beyond twice the live ones before the list is compacted.
const STALE_ENTRIES_SLACK: usize = 64;

const MAGIC: &[u8; 4] = b"TRCC";
const FORMAT_VERSION: u16 = 1;
/// Bytes of the fixed header.
const HEADER_BYTES: usize = 32;
/// Largest `k` a cache file may claim (`wire::SHARDS_MAX`).
const K_MAX: u8 = 32;
/// Largest shard a cache file may claim: a whole shard fits one reply frame.
const SHARD_BYTES_MAX: u32 = 64 << 20;
const LOCK_FILE: &str = "lock";
const TMP_PREFIX: &str = ".tmp-";

/// Where a client keeps its disk cache, and how much.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskCacheOptions {
    /// The directory; the cache itself is a directory below it named after the cluster.
    pub dir: PathBuf,
    /// Most bytes of cache files.
    pub bytes_max: u64,
    /// Whether a cache that cannot be opened fails the client's connect (a directory the user
    /// named) or only leaves it without one, with a warning (a default).
    pub required: bool,
}

/// Errors of opening a disk cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiskCacheError {
    /// The directory cannot be made or used.
    #[error("disk cache {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// Another process uses it.
    #[error("disk cache {path} is in use by another process (each mount needs a cache directory of its own)")]
    Locked { path: PathBuf },
}

/// How the disk cache has done since the client started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCacheStats {
    /// Bytes of cache files now.
    pub cached_bytes: u64,
    /// Chunks cached now.
    pub chunks: u64,
    /// Reads answered from it.
    pub hits: u64,
    /// Reads of chunks it did not hold.
    pub misses: u64,
    /// Chunks written to it.
    pub writes: u64,
    /// Chunks let go for others or for free space.
    pub evictions: u64,
    /// Files that failed a check (removed; their reads went to the cluster).
    pub damaged: u64,
    /// Chunks not cached because the writer was behind or the disk full.
    pub dropped: u64,
}

/// A chunk to write (what a record says of it, and its bytes).
struct Put {
    key: Key,
    k: u8,
    shard_len: u32,
    table_crcs: Vec<u32>,
    data: Chunk,
    tables: ShardTables,
}

/// A client's disk cache (see the module text).
pub(crate) struct DiskCache {
    shared: Arc<Shared>,
    /// To the writer thread, which holds the directory's lock until it ends (after this is
    /// dropped and the chunks queued are written).
    writes: Option<SyncSender<Put>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for DiskCache {
    fn drop(&mut self) {
        self.writes.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

struct Shared {
    root: PathBuf,
    bytes_max: u64,
    index: Mutex<Index>,
    open: Mutex<OpenFiles>,
    hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    evictions: AtomicU64,
    damaged: AtomicU64,
    dropped: AtomicU64,
    /// The last look at the file system's free space: when, and how many bytes then lay above
    /// the share left free (negative: below it), less what was written since (the writer's
    /// alone).
    free: Mutex<Option<(std::time::Instant, i64)>>,
    /// How the file system's space is looked at: `statvfs`, or a test's stand-in.
    space: SpaceProbe,
}

/// Looks at the space of the file system holding a directory: (total, available to an
/// unprivileged writer) in bytes.
type SpaceProbe = Arc<dyn Fn(&Path) -> io::Result<(u64, u64)> + Send + Sync>;

fn statvfs_space(dir: &Path) -> io::Result<(u64, u64)> {
    let st = rustix::fs::statvfs(dir)?;
    let unit = st.f_frsize.max(1);
    Ok((st.f_blocks.saturating_mul(unit), st.f_bavail.saturating_mul(unit)))
}

#[derive(Default)]
struct Index {
    entries: HashMap<Key, Entry>,
    /// Recency, least recent first: (stamp, key); an entry whose stamp has moved on is stale.
    order: VecDeque<(u64, Key)>,
    next_stamp: u64,
    used_bytes: u64,
}

struct Entry {
    file_bytes: u64,
    stamp: u64,
}

/// A cache file open for reads, its header and tables checked against a record.
struct OpenFile {
    file: File,
    shard_len: u32,
    /// Blocks per shard.
    blocks: usize,
    /// The block checksums of the data shards, shard after shard.
    tables: Vec<u32>,
}

#[derive(Default)]
struct OpenFiles {
    files: HashMap<Key, (Arc<OpenFile>, u64)>,
    next: u64,
}

/// Why a read from the cache found nothing to return.
enum ReadFail {
    /// The bytes are not in the page cache; try again where waiting is allowed.
    WouldBlock,
    /// No such file (evicted meanwhile): a miss.
    Gone,
    /// The file is not what the record says: removed, a miss.
    Damaged(String),
}

impl DiskCache {
    /// Opens (creating it if needed) the cache of cluster `cluster` below `options.dir`, locks
    /// it, and lists what it holds in the background.
    pub(crate) fn open(options: &DiskCacheOptions, cluster: &str) -> Result<DiskCache, DiskCacheError> {
        DiskCache::open_with(options, cluster, Arc::new(statvfs_space))
    }

    /// [`DiskCache::open`], looking at the file system's space with `space`.
    fn open_with(options: &DiskCacheOptions, cluster: &str, space: SpaceProbe) -> Result<DiskCache, DiskCacheError> {
        let root = options.dir.join(dir_name(cluster));
        let io_err = |path: &Path, source| DiskCacheError::Io { path: path.to_path_buf(), source };
        std::fs::create_dir_all(&root).map_err(|e| io_err(&root, e))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err(&lock_path, e))?;
        let asked = std::time::Instant::now();
        loop {
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if asked.elapsed().as_millis() < u128::from(LOCK_WAIT_MS_MAX) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => return Err(DiskCacheError::Locked { path: root }),
                Err(e) => return Err(io_err(&lock_path, e.into())),
            }
        }
        // A probe write: a directory that takes no files fails here, not at every put.
        let probe = root.join(format!("{TMP_PREFIX}probe"));
        std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe)).map_err(|e| io_err(&root, e))?;
        let shared = Arc::new(Shared {
            root,
            bytes_max: options.bytes_max,
            index: Mutex::new(Index::default()),
            open: Mutex::new(OpenFiles::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            damaged: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            free: Mutex::new(None),
            space,
        });
        let (writes, queue) = sync_channel::<Put>(WRITES_QUEUED_MAX);
        let writer = shared.clone();
        let writer = std::thread::Builder::new()
            .name("trove-disk-cache".into())
            .spawn(move || {
                let _lock = lock;
                // Background work: a failure to lower the thread's priority changes nothing else.
                let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), WRITER_NICE);
                writer.scan();
                for put in queue {
                    writer.put(put);
                }
            })
            .map_err(|e| io_err(&shared.root, e))?;
        Ok(DiskCache { shared, writes: Some(writes), writer: Some(writer) })
    }

    /// The cache's directory (the cluster's, below the configured one).
    pub(crate) fn root(&self) -> &Path {
        &self.shared.root
    }

    /// Whether the chunk under `key` is cached (no recency change, not counted).
    pub(crate) fn holds(&self, key: Key) -> bool {
        self.shared.index.lock().entries.contains_key(&key)
    }

    /// Bytes `start .. start + len` of the chunk `rec` names (within its `len`), verified, if
    /// the cache holds it; `None` otherwise (then the caller reads from the cluster).
    pub(crate) async fn read(&self, rec: &ChunkRecord, start: u32, len: u32) -> Option<Bytes> {
        let key = (rec.id, rec.len);
        let end = start.checked_add(len)?.min(rec.len);
        if start >= end || !self.shared.touch(key) {
            self.shared.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let kept = self.shared.open.lock().files.get(&key).map(|(f, _)| f.clone());
        let first = match kept {
            Some(open) => read_blocks(&open, start, end, Wait::NoWait),
            None => Err(ReadFail::WouldBlock),
        };
        let result = match first {
            Err(ReadFail::WouldBlock) => {
                let (shared, rec) = (self.shared.clone(), rec.clone());
                match tokio::task::spawn_blocking(move || shared.read_blocking(&rec, start, end)).await {
                    Ok(r) => r,
                    Err(e) => Err(ReadFail::Damaged(format!("the read's thread failed: {e}"))),
                }
            }
            other => other,
        };
        match result {
            Ok(bytes) => {
                self.shared.hits.fetch_add(1, Ordering::Relaxed);
                Some(bytes)
            }
            Err(fail) => {
                self.shared.misses.fetch_add(1, Ordering::Relaxed);
                if let ReadFail::Damaged(why) = fail {
                    self.shared.damaged.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("disk cache: {why}; removed, reading from the cluster");
                    self.shared.remove(key);
                }
                None
            }
        }
    }

    /// Offers `data`, the verified content of the chunk `rec` names, for caching: queued for
    /// the writer unless it is already cached or the queue is full.
    /// `tables` are the block tables the read had for the chunk's data shards, if any
    /// ([`ShardTables`]): the writer takes the checksums of whole blocks from them instead of
    /// computing them again.
    pub(crate) fn offer(&self, rec: &ChunkRecord, data: Chunk, tables: ShardTables) {
        let key = (rec.id, rec.len);
        if data.len() != rec.len as usize || rec.len == 0 || self.holds(key) {
            return;
        }
        let put = Put { key, k: rec.ec.k, shard_len: rec.shard_len, table_crcs: rec.table_crcs.clone(), data, tables };
        let Some(writes) = &self.writes else { return };
        match writes.try_send(put) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    pub(crate) fn stats(&self) -> DiskCacheStats {
        let s = &self.shared;
        let (cached_bytes, chunks) = {
            let ix = s.index.lock();
            (ix.used_bytes, ix.entries.len() as u64)
        };
        DiskCacheStats {
            cached_bytes,
            chunks,
            hits: s.hits.load(Ordering::Relaxed),
            misses: s.misses.load(Ordering::Relaxed),
            writes: s.writes.load(Ordering::Relaxed),
            evictions: s.evictions.load(Ordering::Relaxed),
            damaged: s.damaged.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
        }
    }
}

/// The directory name of cluster `cluster`'s cache: the name itself when it is a plain one,
/// else its bytes in hex.
fn dir_name(cluster: &str) -> String {
    let plain = !cluster.is_empty()
        && cluster.len() <= 64
        && !cluster.starts_with('.')
        && cluster.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if plain {
        cluster.to_string()
    } else {
        let hex: String = cluster.bytes().take(32).map(|b| format!("{b:02x}")).collect();
        format!("x{hex}")
    }
}

/// The subdirectory of `id` (256 of them, by a mix of the id: chunk ids are sequential).
fn subdir(id: u64) -> String {
    let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{:02x}", (z ^ (z >> 31)) >> 56)
}

fn file_name(key: Key) -> String {
    format!("{:016x}-{}", key.0, key.1)
}

fn parse_file_name(name: &str) -> Option<Key> {
    let (id, len) = name.split_once('-')?;
    if id.len() != 16 {
        return None;
    }
    let key = (u64::from_str_radix(id, 16).ok()?, len.parse::<u32>().ok()?);
    (file_name(key) == name).then_some(key)
}

/// The fixed header of a cache file (see ARCHITECTURE.md, "Client disk cache files").
fn encode_header(key: Key, k: u8, shard_len: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(MAGIC);
    h[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[6] = k;
    h[8..16].copy_from_slice(&key.0.to_le_bytes());
    h[16..20].copy_from_slice(&key.1.to_le_bytes());
    h[20..24].copy_from_slice(&shard_len.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a header against the record `rec` it is read for; returns `(k, shard_len)`.
fn decode_header(h: &[u8], rec: &ChunkRecord) -> Result<(u8, u32), String> {
    let h: &[u8; HEADER_BYTES] = h.get(..HEADER_BYTES).and_then(|h| h.try_into().ok()).ok_or("header cut short")?;
    let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    if &h[0..4] != MAGIC {
        return Err("not a cache file (bad magic)".into());
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != FORMAT_VERSION {
        return Err(format!("format version {version}, this build reads {FORMAT_VERSION}"));
    }
    if crc32c::crc32c(&h[..28]) != u32_at(28) {
        return Err("header checksum mismatch".into());
    }
    let (k, id, len, shard_len) =
        (h[6], u64::from_le_bytes(h[8..16].try_into().unwrap_or_default()), u32_at(16), u32_at(20));
    if h[7] != 0 || u32_at(24) != 0 {
        return Err("reserved header bytes are not zero".into());
    }
    if (id, len) != (rec.id, rec.len) || k != rec.ec.k || shard_len != rec.shard_len {
        return Err(format!(
            "holds chunk {id:016x} of {len} bytes in {k} shards of {shard_len}, not what the record says"
        ));
    }
    if k == 0
        || k > K_MAX
        || len == 0
        || shard_len == 0
        || shard_len > SHARD_BYTES_MAX
        || u64::from(len) > u64::from(k) * u64::from(shard_len)
    {
        return Err(format!("impossible layout: {k} shards of {shard_len} bytes for {len} bytes"));
    }
    Ok((k, shard_len))
}

/// Bytes of a file holding `k` shards of `shard_len`.
fn file_bytes(k: usize, shard_len: u32) -> u64 {
    let blocks = shard_len.div_ceil(SHARD_BLOCK_BYTES) as u64;
    HEADER_BYTES as u64 + 4 * k as u64 * blocks + k as u64 * u64::from(shard_len)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Block,
    NoWait,
}

/// Fills `buf` from `pos` of `file`; with `Wait::NoWait`, only from the page cache.
fn read_exact_at(file: &File, buf: &mut [u8], pos: u64, wait: Wait) -> Result<(), ReadFail> {
    let mut done = 0;
    while done < buf.len() {
        let at = pos + done as u64;
        let got = match wait {
            Wait::Block => file.read_at(&mut buf[done..], at).map_err(|e| ReadFail::Damaged(format!("read: {e}")))?,
            Wait::NoWait => {
                let mut iov = [io::IoSliceMut::new(&mut buf[done..])];
                match rustix::io::preadv2(file, &mut iov, at, rustix::io::ReadWriteFlags::NOWAIT) {
                    Ok(n) => n,
                    // EAGAIN: not cached; EOPNOTSUPP/EINVAL: the file system cannot say.
                    Err(_) => return Err(ReadFail::WouldBlock),
                }
            }
        };
        if got == 0 {
            return Err(ReadFail::Damaged("file cut short".into()));
        }
        done += got;
    }
    Ok(())
}

/// The blocks holding chunk bytes `start .. end` (`start < end`) of chunks of `k` shards of
/// `s` bytes: the first and last as (shard, block), and the span of the data they cover.
/// Block (shard i, block j) spans chunk bytes `i*s + j*B .. i*s + min((j+1)*B, s)`; blocks lie
/// end to end, so the blocks holding a range are one span of the file.
fn block_span(s: u32, start: u32, end: u32) -> ((u32, u32), (u32, u32), u32, u32) {
    let block = SHARD_BLOCK_BYTES;
    let locate = |pos: u32| (pos / s, (pos % s) / block);
    let (first, last) = (locate(start), locate(end - 1));
    let from = first.0 * s + first.1 * block;
    let to = last.0 * s + ((last.1 + 1) * block).min(s);
    (first, last, from, to)
}

/// Checks the blocks `first ..= last` (as [`block_span`] gives them), whose bytes are `buf`
/// (starting at chunk byte `from`), against `tables` (`blocks` entries per shard).
fn verify_span(
    buf: &[u8],
    from: u32,
    (first, last): ((u32, u32), (u32, u32)),
    s: u32,
    blocks: usize,
    tables: &[u32],
) -> Result<(), String> {
    let block = SHARD_BLOCK_BYTES;
    let mut at = first;
    loop {
        let (lo, hi) = (at.0 * s + at.1 * block, at.0 * s + ((at.1 + 1) * block).min(s));
        let entry = at.0 as usize * blocks + at.1 as usize;
        let want = tables.get(entry).copied().ok_or("the block table is too short")?;
        let bytes = buf.get((lo - from) as usize..(hi - from) as usize).ok_or("the data is cut short")?;
        if crc32c::crc32c(bytes) != want {
            return Err(format!("block {} of shard {} fails its checksum", at.1, at.0));
        }
        if at == last {
            return Ok(());
        }
        at = if hi < (at.0 + 1) * s { (at.0, at.1 + 1) } else { (at.0 + 1, 0) };
    }
}

/// Decodes the `k` tables of `blocks` entries in `raw` and checks each against the record.
fn decode_tables(raw: &[u8], k: usize, blocks: usize, rec: &ChunkRecord) -> Result<Vec<u32>, String> {
    if raw.len() != 4 * k * blocks {
        return Err("the block tables are cut short".into());
    }
    let tables: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    for (i, table) in tables.chunks(blocks.max(1)).enumerate().take(k) {
        if rec.table_crcs.get(i).copied() != Some(erasure::table_crc(table)) {
            return Err(format!("the block table of shard {i} is not the one the metadata records"));
        }
    }
    Ok(tables)
}

/// Reads and verifies chunk bytes `start .. end` of an open cache file: the whole blocks that
/// hold them, each checked against its table entry.
fn read_blocks(open: &OpenFile, start: u32, end: u32, wait: Wait) -> Result<Bytes, ReadFail> {
    let (first, last, from, to) = block_span(open.shard_len, start, end);
    let data_at = HEADER_BYTES as u64 + 4 * open.tables.len() as u64;
    // A reused buffer, neither cleared nor faulted in anew: the read overwrites all of it.
    let mut buf = wire::pool::take_filled((to - from) as usize);
    read_exact_at(&open.file, &mut buf, data_at + u64::from(from), wait)?;
    verify_span(&buf, from, (first, last), open.shard_len, open.blocks, &open.tables).map_err(ReadFail::Damaged)?;
    Ok(buf.freeze().slice((start - from) as usize..(end - from) as usize))
}

/// The image of the cache file of chunk `id` of `len` bytes, `k` data shards of `shard_len`,
/// holding `parts` (the chunk's bytes laid end to end, `len` in all), and the crc32c of each
/// data shard's block table (what the chunk's record must say for the file to be read). The
/// writer does not build it: it writes [`encode_head`]'s bytes and then `parts` themselves.
pub fn encode_file(id: u64, len: u32, k: u8, shard_len: u32, parts: &[Bytes]) -> (Vec<u8>, Vec<u32>) {
    let (mut image, crcs) = encode_head(id, len, k, shard_len, parts, &[]);
    let file_len = file_bytes(usize::from(k), shard_len) as usize;
    for part in parts {
        let take = part.len().min(file_len - image.len());
        image.extend_from_slice(&part[..take]);
    }
    image.resize(file_len, 0);
    (image, crcs)
}

/// The header and block tables of the cache file [`encode_file`] describes, computed over
/// `parts` where they lie (the zero padding past them up to `k` shards taken into the
/// checksums without being written out), and the crc32c of each shard's table.
///
/// A block that lies whole within `parts` and whose shard has a table in `known` (the reader's,
/// [`ShardTables`]) takes its checksum from there; only the others are computed. Whatever
/// came from `known`, the caller still compares the tables' checksums with the record's.
fn encode_head(
    id: u64,
    len: u32,
    k: u8,
    shard_len: u32,
    parts: &[Bytes],
    known: &[Option<ShardTable>],
) -> (Vec<u8>, Vec<u32>) {
    let (kk, s) = (usize::from(k), shard_len as usize);
    let block = SHARD_BLOCK_BYTES as usize;
    let blocks = shard_len.div_ceil(SHARD_BLOCK_BYTES) as usize;
    let data_len: usize = parts.iter().map(Bytes::len).sum();
    let mut head = Vec::with_capacity(HEADER_BYTES + 4 * kk * blocks);
    head.extend_from_slice(&encode_header((id, len), k, shard_len));
    let mut data = Cursor::new(parts, kk * s);
    let mut crcs = Vec::with_capacity(kk);
    for i in 0..kk {
        let known = known.get(i).and_then(Option::as_ref).filter(|t| t.len() == blocks);
        let mut table = Vec::with_capacity(blocks);
        for j in 0..blocks {
            let take = block.min(s - j * block);
            match known {
                Some(t) if i * s + j * block + take <= data_len => {
                    data.skip(take);
                    table.push(t[j]);
                }
                _ => table.push(data.crc_of_next(take)),
            }
        }
        crcs.push(erasure::table_crc(&table));
        for c in table {
            head.extend_from_slice(&c.to_le_bytes());
        }
    }
    (head, crcs)
}

/// Zeros to take into checksums of padding.
static ZEROS: [u8; SHARD_BLOCK_BYTES as usize] = [0; SHARD_BLOCK_BYTES as usize];

/// Walks the bytes of `parts` laid end to end, then zeros, up to `total`.
struct Cursor<'a> {
    parts: &'a [Bytes],
    /// The part being read and the offset in it.
    part: usize,
    at: usize,
    /// Bytes left to `total`.
    left: usize,
}

impl<'a> Cursor<'a> {
    fn new(parts: &'a [Bytes], total: usize) -> Cursor<'a> {
        Cursor { parts, part: 0, at: 0, left: total }
    }

    /// The crc32c of the next `n` bytes (`n` at most a block), moving past them.
    fn crc_of_next(&mut self, n: usize) -> u32 {
        let mut crc = 0;
        self.walk(n, |piece| crc = crc32c::crc32c_append(crc, piece));
        crc
    }

    /// Moves past the next `n` bytes without looking at them.
    fn skip(&mut self, n: usize) {
        self.walk(n, |_| {});
    }

    /// Moves past the next `n` bytes, handing them to `each` piece by piece.
    fn walk(&mut self, n: usize, mut each: impl FnMut(&[u8])) {
        let mut want = n.min(self.left);
        self.left -= want;
        while want > 0 {
            match self.parts.get(self.part) {
                Some(p) if self.at < p.len() => {
                    let take = want.min(p.len() - self.at);
                    each(&p[self.at..self.at + take]);
                    self.at += take;
                    want -= take;
                }
                Some(_) => {
                    self.part += 1;
                    self.at = 0;
                }
                None => {
                    let take = want.min(ZEROS.len());
                    each(&ZEROS[..take]);
                    want -= take;
                }
            }
        }
    }
}

/// Writes all of `bufs` to `file` with vectored writes.
fn write_all_vectored(file: &mut File, bufs: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    let mut bufs = bufs;
    while !bufs.is_empty() {
        match file.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Checks a whole cache file `image` against the record `rec` as reads do (header, length,
/// tables, every block), and that the padding past the chunk's length is zeros (which reads
/// never return), and returns the chunk's bytes. Reads check the same piecewise; this is for
/// tests and the fuzz target.
pub fn verify_file(image: &[u8], rec: &ChunkRecord) -> Result<Vec<u8>, String> {
    let (k, shard_len) = decode_header(image, rec)?;
    let k = usize::from(k);
    if image.len() as u64 != file_bytes(k, shard_len) {
        return Err(format!("{} bytes, expected {}", image.len(), file_bytes(k, shard_len)));
    }
    let blocks = shard_len.div_ceil(SHARD_BLOCK_BYTES) as usize;
    let data_at = HEADER_BYTES + 4 * k * blocks;
    let tables = decode_tables(&image[HEADER_BYTES..data_at], k, blocks, rec)?;
    let (first, last, from, to) = block_span(shard_len, 0, rec.len);
    let data = &image[data_at..];
    verify_span(&data[from as usize..to as usize], from, (first, last), shard_len, blocks, &tables)?;
    if data[rec.len as usize..].iter().any(|&b| b != 0) {
        return Err("the padding past the chunk's length is not zeros".into());
    }
    Ok(data[..rec.len as usize].to_vec())
}

impl Shared {
    fn path_of(&self, key: Key) -> PathBuf {
        self.root.join(subdir(key.0)).join(file_name(key))
    }

    /// Marks `key` the most recently used; false if it is not cached.
    fn touch(&self, key: Key) -> bool {
        let mut ix = self.index.lock();
        let stamp = ix.next_stamp;
        let Some(e) = ix.entries.get_mut(&key) else { return false };
        e.stamp = stamp;
        ix.next_stamp += 1;
        ix.order.push_back((stamp, key));
        ix.compact();
        true
    }

    /// Opens (or takes the kept) file of `rec` and reads `start .. end`, waiting for the drive.
    fn read_blocking(&self, rec: &ChunkRecord, start: u32, end: u32) -> Result<Bytes, ReadFail> {
        let key = (rec.id, rec.len);
        let kept = self.open.lock().files.get(&key).map(|(f, _)| f.clone());
        let open = match kept {
            Some(open) => open,
            None => {
                let open = Arc::new(self.open_file(rec)?);
                self.keep_open(key, open.clone());
                open
            }
        };
        read_blocks(&open, start, end, Wait::Block)
    }

    /// Opens the file of `rec` and checks its header, length and tables against the record.
    fn open_file(&self, rec: &ChunkRecord) -> Result<OpenFile, ReadFail> {
        let path = self.path_of((rec.id, rec.len));
        let damaged = |why: String| ReadFail::Damaged(format!("{}: {why}", path.display()));
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadFail::Gone),
            Err(e) => return Err(damaged(e.to_string())),
        };
        let mut header = [0u8; HEADER_BYTES];
        read_exact_at(&file, &mut header, 0, Wait::Block).map_err(|_| damaged("header cut short".into()))?;
        let (k, shard_len) = decode_header(&header, rec).map_err(damaged)?;
        let k = usize::from(k);
        let expected = file_bytes(k, shard_len);
        let have = file.metadata().map_err(|e| damaged(e.to_string()))?.len();
        if have != expected {
            return Err(damaged(format!("{have} bytes, expected {expected}")));
        }
        let blocks = shard_len.div_ceil(SHARD_BLOCK_BYTES) as usize;
        let mut raw = vec![0u8; 4 * k * blocks];
        read_exact_at(&file, &mut raw, HEADER_BYTES as u64, Wait::Block)
            .map_err(|_| damaged("tables cut short".into()))?;
        let tables = decode_tables(&raw, k, blocks, rec).map_err(damaged)?;
        Ok(OpenFile { file, shard_len, blocks, tables })
    }

    fn keep_open(&self, key: Key, file: Arc<OpenFile>) {
        let mut open = self.open.lock();
        let stamp = open.next;
        open.next += 1;
        open.files.insert(key, (file, stamp));
        if open.files.len() > OPEN_FILES_MAX {
            // Close the oldest opened (a scan of a few hundred entries, once per open).
            if let Some(oldest) = open.files.iter().min_by_key(|(_, (_, s))| *s).map(|(k, _)| *k) {
                open.files.remove(&oldest);
            }
        }
    }

    /// Forgets `key` and removes its file.
    fn remove(&self, key: Key) {
        self.open.lock().files.remove(&key);
        let removed = {
            let mut ix = self.index.lock();
            let e = ix.entries.remove(&key);
            if let Some(e) = &e {
                ix.used_bytes -= e.file_bytes;
            }
            e.is_some()
        };
        if removed {
            let _ = std::fs::remove_file(self.path_of(key));
        }
    }

    /// Lists what the directory holds (the writer's first job): oldest files first, so they
    /// are the first to go; removes unfinished writes.
    fn scan(&self) {
        let mut found: Vec<(std::time::SystemTime, Key, u64)> = Vec::new();
        let Ok(dirs) = std::fs::read_dir(&self.root) else { return };
        for dir in dirs.flatten() {
            let is_subdir =
                dir.file_name().to_str().is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()));
            if !is_subdir {
                continue;
            }
            let Ok(files) = std::fs::read_dir(dir.path()) else { continue };
            for f in files.flatten() {
                let name = f.file_name();
                let Some(name) = name.to_str() else { continue };
                if name.starts_with(TMP_PREFIX) {
                    let _ = std::fs::remove_file(f.path());
                    continue;
                }
                let (Some(key), Ok(meta)) = (parse_file_name(name), f.metadata()) else { continue };
                found.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), key, meta.len()));
            }
        }
        found.sort();
        let mut ix = self.index.lock();
        for (_, key, bytes) in found {
            if ix.entries.contains_key(&key) {
                continue;
            }
            let stamp = ix.next_stamp;
            ix.next_stamp += 1;
            ix.entries.insert(key, Entry { file_bytes: bytes, stamp });
            ix.order.push_back((stamp, key));
            ix.used_bytes += bytes;
        }
        drop(ix);
        self.evict_for(0);
    }

    /// Writes one chunk (the writer thread).
    fn put(&self, put: Put) {
        if self.index.lock().entries.contains_key(&put.key) {
            return;
        }
        let (k, s) = (usize::from(put.k), put.shard_len);
        if k == 0 || k > usize::from(K_MAX) || s > SHARD_BYTES_MAX || put.key.1 as usize > k * s as usize {
            return;
        }
        // The header and tables, then the chunk's bytes where they lie (no image of the file
        // is built, which saved a copy and an allocation of the whole file), then a hole for
        // the padding.
        let (head, crcs) = encode_head(put.key.0, put.key.1, put.k, s, put.data.parts(), &put.tables);
        if put.table_crcs.get(..k) != Some(&crcs[..]) {
            // Not the bytes the record describes: never cached (a bug elsewhere if seen).
            tracing::warn!("disk cache: chunk {:016x} does not match its record; not cached", put.key.0);
            return;
        }
        let bytes = file_bytes(k, s);
        if bytes > self.bytes_max || !self.evict_for(bytes) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let path = self.path_of(put.key);
        let Some(dir) = path.parent() else { return };
        // Written in place: no reader opens the file before the index has it, and a file torn
        // by a crash fails its checks at its first read (a temporary name and a rename cost
        // two more directory changes per chunk, a good part of the writer's time).
        let written = (|| {
            let mut file = match File::create(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(dir)?;
                    File::create(&path)?
                }
                file => file?,
            };
            let data_bytes = (bytes as usize).saturating_sub(head.len());
            let mut slices = vec![io::IoSlice::new(&head)];
            let mut left = data_bytes;
            for part in put.data.parts() {
                let take = part.len().min(left);
                slices.push(io::IoSlice::new(&part[..take]));
                left -= take;
            }
            write_all_vectored(&mut file, &mut slices)?;
            if left > 0 {
                // Reads of a hole give the zeros the tables were computed over.
                file.set_len(bytes)?;
            }
            Ok::<(), io::Error>(())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&path);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("disk cache: writing {}: {e}", path.display());
            return;
        }
        let mut ix = self.index.lock();
        let stamp = ix.next_stamp;
        ix.next_stamp += 1;
        ix.entries.insert(put.key, Entry { file_bytes: bytes, stamp });
        ix.order.push_back((stamp, put.key));
        ix.used_bytes += bytes;
        drop(ix);
        self.space_used(bytes as i64);
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    /// How many bytes the file system lacks for `bytes` more while leaving its free share, from
    /// a `statvfs` at most [`FREE_SPACE_CHECK_MS`] old and what this cache wrote and removed
    /// since ([`Shared::space_used`]).
    fn short_of_space(&self, bytes: u64) -> u64 {
        let mut free = self.free.lock();
        let fresh = |(at, _): &(std::time::Instant, i64)| at.elapsed().as_millis() < u128::from(FREE_SPACE_CHECK_MS);
        if !free.as_ref().is_some_and(fresh) {
            let signed = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
            *free = match (self.space)(&self.root) {
                Ok((total, avail)) => Some((
                    std::time::Instant::now(),
                    signed(avail).saturating_sub(signed(total / 1000 * FREE_PERMILLE_MIN)),
                )),
                // Unknown: the byte limit alone bounds the cache until a look succeeds.
                Err(_) => Some((std::time::Instant::now(), i64::MAX)),
            };
        }
        free.as_ref().map_or(0, |&(_, above)| {
            let short = i128::from(bytes) - i128::from(above);
            u64::try_from(short.max(0)).unwrap_or(u64::MAX)
        })
    }

    /// Counts `bytes` written (positive) or removed (negative) against the last look at the
    /// free space.
    fn space_used(&self, bytes: i64) {
        if let Some((_, above)) = self.free.lock().as_mut() {
            *above = above.saturating_sub(bytes);
        }
    }

    /// Lets the least recently used files go until `bytes` more fit within the byte limit and
    /// the file system's free share; false if they cannot.
    fn evict_for(&self, bytes: u64) -> bool {
        let mut short = self.short_of_space(bytes);
        loop {
            let victim = {
                let mut ix = self.index.lock();
                if ix.used_bytes + bytes <= self.bytes_max && short == 0 {
                    return true;
                }
                let Some(victim) = ix.least_recent() else { return false };
                let e = ix.entries.remove(&victim);
                if let Some(e) = &e {
                    ix.used_bytes -= e.file_bytes;
                    short = short.saturating_sub(e.file_bytes);
                    self.space_used(-(e.file_bytes as i64));
                }
                victim
            };
            self.open.lock().files.remove(&victim);
            let _ = std::fs::remove_file(self.path_of(victim));
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Index {
    /// The key of the least recently used chunk, taken off the recency list.
    fn least_recent(&mut self) -> Option<Key> {
        while let Some((stamp, key)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|e| e.stamp == stamp) {
                return Some(key);
            }
        }
        None
    }

    /// Drops stale recency entries once they outnumber the live ones.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + STALE_ENTRIES_SLACK {
            let entries = &self.entries;
            self.order.retain(|(stamp, key)| entries.get(key).is_some_and(|e| e.stamp == *stamp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};
    use wire::{EcScheme, Placement};

    /// The record a writer would commit for `data` as chunk `id` in scheme `ec`.
    fn record(id: u64, data: &[u8], ec: EcScheme) -> ChunkRecord {
        let shards = erasure::encode(ec, &Bytes::copy_from_slice(data));
        let table_crcs = shards.iter().map(|s| erasure::table_crc(&erasure::block_crcs(s))).collect();
        ChunkRecord {
            index: 0,
            id,
            len: data.len() as u32,
            ec,
            shard_len: ec.shard_len(data.len() as u32),
            placement: Placement { map_version: 1, pg: 0 },
            table_crcs,
            missing: 0,
        }
    }

    fn options(dir: &Path, bytes_max: u64) -> DiskCacheOptions {
        DiskCacheOptions { dir: dir.to_path_buf(), bytes_max, required: true }
    }

    fn data(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..len).map(|_| rng.gen()).collect()
    }

    /// Offers `data` and waits until the writer has it.
    fn put_and_wait(cache: &DiskCache, rec: &ChunkRecord, data: &[u8]) {
        cache.offer(rec, Chunk::from(Bytes::copy_from_slice(data)), Vec::new());
        let start = Instant::now();
        while !cache.holds((rec.id, rec.len)) {
            assert!(start.elapsed() < Duration::from_secs(10), "chunk {} was not written", rec.id);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[tokio::test]
    async fn chunks_read_back_whole_and_in_ranges_across_shards_and_blocks() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = DiskCache::open(&options(dir.path(), 1 << 30), "trove-test").expect("open");
        // 4+2 of 4 MiB; an uneven length (padded last shard, short last blocks); replication.
        let cases = [
            (1u64, 4usize << 20, EcScheme { k: 4, m: 2 }),
            (2, (3 << 20) + 12_345, EcScheme { k: 4, m: 2 }),
            (3, 128 << 10, EcScheme { k: 1, m: 2 }),
            (4, 100, EcScheme { k: 4, m: 2 }),
        ];
        for (id, len, ec) in cases {
            let bytes = data(len, id);
            let rec = record(id, &bytes, ec);
            put_and_wait(&cache, &rec, &bytes);
            assert_eq!(cache.read(&rec, 0, rec.len).await.as_deref(), Some(&bytes[..]), "chunk {id} whole");
            let s = rec.shard_len as usize;
            // Across a shard boundary, within one block, a last byte.
            for (start, take) in [(s.saturating_sub(5000), 10_000), (70_000, 4096), (len - 1, 1), (0, 1)] {
                let (start, take) = (start.min(len - 1), take.min(len - start.min(len - 1)));
                let got = cache.read(&rec, start as u32, take as u32).await;
                assert_eq!(got.as_deref(), Some(&bytes[start..start + take]), "chunk {id} at {start} +{take}");
            }
        }
        let st = cache.stats();
        assert_eq!((st.writes, st.chunks, st.damaged), (4, 4, 0));
    }

    #[tokio::test]
    async fn a_subdirectory_removed_under_the_cache_is_made_again_by_the_next_write() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = DiskCache::open(&options(dir.path(), 1 << 30), "c").expect("open");
        let (one, two) = (data(100_000, 1), data(100_000, 2));
        let ec = EcScheme { k: 1, m: 2 };
        let twin = (2..).find(|&id| subdir(id) == subdir(1)).expect("an id in the same subdirectory");
        let (r1, r2) = (record(1, &one, ec), record(twin, &two, ec));
        put_and_wait(&cache, &r1, &one);
        // Both chunks live in one subdirectory; someone removes it.
        let sub = cache.shared.path_of((r1.id, r1.len)).parent().expect("subdirectory").to_path_buf();
        assert_eq!(Some(sub.as_path()), cache.shared.path_of((r2.id, r2.len)).parent());
        std::fs::remove_dir_all(&sub).expect("rm");
        put_and_wait(&cache, &r2, &two);
        assert_eq!(cache.read(&r2, 0, r2.len).await.as_deref(), Some(&two[..]));
        assert_eq!(cache.read(&r1, 0, r1.len).await, None, "its file went with the directory");
        assert_eq!((cache.stats().writes, cache.stats().dropped), (2, 0));
    }

    #[tokio::test]
    async fn a_damaged_or_foreign_file_is_never_returned_and_is_removed() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = DiskCache::open(&options(dir.path(), 1 << 30), "c").expect("open");
        let bytes = data(1 << 20, 7);
        let rec = record(7, &bytes, EcScheme { k: 4, m: 2 });
        put_and_wait(&cache, &rec, &bytes);
        // A chunk of the same id and length whose record names other checksums (another
        // cluster's chunk, say): refused by the table check, though the file itself is whole.
        let other = record(7, &data(1 << 20, 8), EcScheme { k: 4, m: 2 });
        assert_eq!(cache.read(&other, 0, 4096).await, None);
        assert!(!cache.holds((7, 1 << 20)), "a file that fails is removed");
        // Bit rot in a data block.
        put_and_wait(&cache, &rec, &bytes);
        cache.shared.open.lock().files.clear();
        let path = cache.shared.path_of((7, 1 << 20));
        let mut raw = std::fs::read(&path).expect("file");
        let last = raw.len() - 1;
        raw[last] ^= 1;
        std::fs::write(&path, &raw).expect("rewrite");
        assert_eq!(cache.read(&rec, 0, 4096).await.as_deref(), Some(&bytes[..4096]), "other blocks still serve");
        assert_eq!(cache.read(&rec, (1 << 20) - 10, 10).await, None, "the damaged block is refused");
        assert!(!path.exists());
        // A torn file (cut short by a crash).
        put_and_wait(&cache, &rec, &bytes);
        cache.shared.open.lock().files.clear();
        let f = File::options().write(true).open(&path).expect("open");
        f.set_len(1000).expect("cut");
        assert_eq!(cache.read(&rec, 0, 10).await, None);
        assert_eq!(cache.stats().damaged, 3);
        // A chunk whose bytes do not match its record is never written.
        cache.offer(&rec, Chunk::from(Bytes::from(data(1 << 20, 9))), Vec::new());
        std::thread::sleep(Duration::from_millis(200));
        assert!(!cache.holds((7, 1 << 20)));
    }

    /// Files are written in place, so a crash during a write leaves a torn file under its
    /// final name: a client opening the directory again lists it, its first read refuses and
    /// removes it, and the next write of the chunk caches it again. A file under a temporary
    /// name (left by an earlier version) is removed by the listing.
    #[tokio::test]
    async fn a_file_torn_by_a_crash_is_listed_then_refused_removed_and_written_again() {
        let dir = tempfile::tempdir().expect("dir");
        let bytes = data(64 << 10, 5);
        let rec = record(5, &bytes, EcScheme { k: 1, m: 2 });
        let path = {
            let cache = DiskCache::open(&options(dir.path(), 1 << 30), "c").expect("open");
            put_and_wait(&cache, &rec, &bytes);
            cache.shared.path_of((rec.id, rec.len))
        };
        let f = File::options().write(true).open(&path).expect("open");
        f.set_len(1000).expect("cut");
        let tmp = path.with_file_name(format!("{TMP_PREFIX}{}", file_name((rec.id, rec.len))));
        std::fs::write(&tmp, b"half a file").expect("temporary file");
        let again = DiskCache::open(&options(dir.path(), 1 << 30), "c").expect("reopen");
        let start = Instant::now();
        while again.stats().chunks < 1 {
            assert!(start.elapsed() < Duration::from_secs(10), "the reopened cache did not list the torn file");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(!tmp.exists(), "the listing removes files under a temporary name");
        assert_eq!(again.read(&rec, 0, 10).await, None);
        assert!(!path.exists() && !again.holds((rec.id, rec.len)));
        assert_eq!(again.stats().damaged, 1);
        put_and_wait(&again, &rec, &bytes);
        assert_eq!(again.read(&rec, 0, 64 << 10).await.as_deref(), Some(&bytes[..]));
    }

    #[tokio::test]
    async fn past_its_limit_the_least_recently_read_go_and_a_reopened_cache_keeps_the_rest() {
        let dir = tempfile::tempdir().expect("dir");
        let one = file_bytes(1, 64 << 10);
        let (recs, chunks): (Vec<_>, Vec<_>) = (1..=4u64)
            .map(|id| {
                let bytes = data(64 << 10, id);
                (record(id, &bytes, EcScheme { k: 1, m: 2 }), bytes)
            })
            .unzip();
        {
            let cache = DiskCache::open(&options(dir.path(), 3 * one), "c").expect("open");
            for (rec, bytes) in recs.iter().zip(&chunks).take(3) {
                put_and_wait(&cache, rec, bytes);
            }
            // Chunk 1 is read again: chunk 2 is now the least recent, and goes for chunk 4.
            assert!(cache.read(&recs[0], 0, 10).await.is_some());
            put_and_wait(&cache, &recs[3], &chunks[3]);
            let held: Vec<bool> = recs.iter().map(|r| cache.holds((r.id, r.len))).collect();
            assert_eq!(held, [true, false, true, true]);
            assert_eq!(cache.stats().evictions, 1);
            assert!(cache.stats().cached_bytes <= 3 * one);
            assert!(matches!(DiskCache::open(&options(dir.path(), 3 * one), "c"), Err(DiskCacheError::Locked { .. })));
        }
        let again = DiskCache::open(&options(dir.path(), 3 * one), "c").expect("reopen");
        let start = Instant::now();
        while again.stats().chunks < 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "the reopened cache did not list its files");
            std::thread::sleep(Duration::from_millis(2));
        }
        for i in [0, 2, 3] {
            assert_eq!(again.read(&recs[i], 0, 64 << 10).await.as_deref(), Some(&chunks[i][..]));
        }
        assert_eq!(again.read(&recs[1], 0, 10).await, None);
    }

    /// Bytes of the files below `dir`.
    fn bytes_under(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => bytes_under(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }

    #[tokio::test]
    async fn it_leaves_the_file_system_its_free_share_and_gives_back_what_others_take() {
        let dir = tempfile::tempdir().expect("dir");
        let one = file_bytes(1, 64 << 10);
        // A file system of 1,000 cache files' worth, 100 of them its free share. What is
        // available is what the rest of the disk leaves (the test sets it: another program
        // filling the disk or freeing it) less what the cache's own files take.
        let total = 1000 * one;
        let floor = total / 1000 * FREE_PERMILLE_MIN;
        let rest = Arc::new(AtomicU64::new(floor + 3 * one + one / 2));
        let probe = {
            let rest = rest.clone();
            Arc::new(move |root: &Path| Ok((total, rest.load(Ordering::SeqCst).saturating_sub(bytes_under(root)))))
                as SpaceProbe
        };
        let cache = DiskCache::open_with(&options(dir.path(), 1 << 30), "c", probe).expect("open");
        let (recs, chunks): (Vec<_>, Vec<_>) = (1..=6u64)
            .map(|id| {
                let bytes = data(64 << 10, id);
                (record(id, &bytes, EcScheme { k: 1, m: 2 }), bytes)
            })
            .unzip();
        let held = |cache: &DiskCache| recs.iter().map(|r| cache.holds((r.id, r.len))).collect::<Vec<_>>();
        let wait_until = |what: &str, done: &dyn Fn() -> bool| {
            let start = Instant::now();
            while !done() {
                assert!(start.elapsed() < Duration::from_secs(10), "{what}");
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        // Room for three and a half files above the free share, far under the byte limit: the
        // fourth takes the place of the least recent. (Written within one look at the space,
        // only the cache's own count of what it wrote sees the first three.)
        for (rec, bytes) in recs.iter().zip(&chunks).take(4) {
            put_and_wait(&cache, rec, bytes);
        }
        assert_eq!(held(&cache), [false, true, true, true, false, false]);
        assert_eq!(cache.stats().evictions, 1);
        // Another program takes two and a half files' worth: the disk is two below its free
        // share. The next write gives those two back and takes the place of a third.
        rest.fetch_sub(2 * one + one / 2, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(FREE_SPACE_CHECK_MS + 100));
        put_and_wait(&cache, &recs[4], &chunks[4]);
        assert_eq!(held(&cache), [false, false, false, false, true, false]);
        assert_eq!((cache.stats().evictions, cache.stats().dropped), (4, 0));
        // The disk fills further: nothing more is cached, and what the cache held is given back.
        rest.fetch_sub(2 * one, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(FREE_SPACE_CHECK_MS + 100));
        cache.offer(&recs[5], Chunk::from(Bytes::copy_from_slice(&chunks[5])), Vec::new());
        wait_until("the chunk offered on a full disk was not refused", &|| cache.stats().dropped == 1);
        assert_eq!(held(&cache), [false; 6]);
        assert_eq!((cache.stats().cached_bytes, bytes_under(cache.root())), (0, 0));
        // Space comes back: the cache takes chunks again.
        rest.fetch_add(10 * one, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(FREE_SPACE_CHECK_MS + 100));
        put_and_wait(&cache, &recs[5], &chunks[5]);
        assert_eq!(cache.read(&recs[5], 0, 64 << 10).await.as_deref(), Some(&chunks[5][..]));
    }

    #[test]
    fn a_file_image_round_trips_and_any_flipped_bit_is_refused() {
        for (len, ec) in [(1000usize, EcScheme { k: 3, m: 2 }), (70_000, EcScheme { k: 1, m: 2 })] {
            let bytes = data(len, len as u64);
            let rec = record(9, &bytes, ec);
            let (image, crcs) = encode_file(9, rec.len, ec.k, rec.shard_len, &[Bytes::copy_from_slice(&bytes)]);
            assert_eq!(crcs[..], rec.table_crcs[..usize::from(ec.k)]);
            assert_eq!(image.len() as u64, file_bytes(usize::from(ec.k), rec.shard_len));
            assert_eq!(verify_file(&image, &rec).as_deref(), Ok(&bytes[..]));
            // Every byte of a small image, one bit flipped at a time; a sample of a larger one.
            let step = if image.len() < 4096 { 1 } else { 997 };
            for at in (0..image.len()).step_by(step) {
                let mut bad = image.clone();
                bad[at] ^= 0x04;
                assert!(verify_file(&bad, &rec).is_err(), "a flipped bit at {at} of {} went unseen", image.len());
            }
            assert!(verify_file(&image[..image.len() - 1], &rec).is_err(), "a torn file");
        }
    }

    /// The file image as the first writer built it: one contiguous copy, zero-padded, and
    /// each shard's table computed over it.
    fn image_model(id: u64, len: u32, k: u8, shard_len: u32, bytes: &[u8]) -> Vec<u8> {
        let (kk, s) = (usize::from(k), shard_len as usize);
        let mut padded = bytes.to_vec();
        padded.resize(kk * s, 0);
        let mut image = encode_header((id, len), k, shard_len).to_vec();
        for shard in padded.chunks(s) {
            for c in erasure::block_crcs(shard) {
                image.extend_from_slice(&c.to_le_bytes());
            }
        }
        image.extend_from_slice(&padded);
        image
    }

    /// The block tables of the data shards the writer stores for `data` in `ec`, as a reader
    /// that fetched them all has them.
    fn shard_tables(data: &[u8], ec: EcScheme) -> ShardTables {
        let shards = erasure::encode(ec, &Bytes::copy_from_slice(data));
        shards.iter().take(usize::from(ec.k)).map(|s| Some(erasure::block_crcs(s))).collect()
    }

    /// The block table entries of the head [`encode_head`] built, shard by shard.
    fn head_tables(head: &[u8], k: usize, blocks: usize) -> Vec<Vec<u32>> {
        let entries: Vec<u32> =
            head[HEADER_BYTES..].chunks(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
        assert_eq!(entries.len(), k * blocks);
        entries.chunks(blocks).map(<[u32]>::to_vec).collect()
    }

    #[test]
    fn whole_blocks_take_their_checksums_from_the_readers_tables_and_the_rest_are_computed() {
        // Three copies of 150,001 bytes: blocks of 64 KiB, 64 KiB and 18,930 bytes, the last
        // one past the data's end (a byte of padding), so only the first two can come from a
        // table. Marked tables show which entries were taken and which computed.
        let bytes = data(150_001, 3);
        let ec = EcScheme { k: 1, m: 2 };
        let rec = record(7, &bytes, ec);
        let truth = shard_tables(&bytes, ec);
        let marked: ShardTables = vec![Some(vec![0xdead_0000, 0xdead_0001, 0xdead_0002])];
        let (head, crcs) = encode_head(7, rec.len, 1, rec.shard_len, &[Bytes::copy_from_slice(&bytes)], &marked);
        let real = truth[0].clone().expect("table");
        assert_eq!(head_tables(&head, 1, 3), vec![vec![0xdead_0000, 0xdead_0001, real[2]]]);
        assert_ne!(crcs[..], rec.table_crcs[..1], "the writer's comparison with the record catches a wrong table");
        // With the true tables, the head is the computed one.
        let (with_tables, crcs) = encode_head(7, rec.len, 1, rec.shard_len, &[Bytes::copy_from_slice(&bytes)], &truth);
        assert_eq!(with_tables, encode_head(7, rec.len, 1, rec.shard_len, &[Bytes::copy_from_slice(&bytes)], &[]).0);
        assert_eq!(crcs[..], rec.table_crcs[..1]);

        // 4+2 of 200,000 bytes: four shards of one block each, all within the data. Tables for
        // shards 0 and 2 only (a read that rebuilt 1 and 3), and one of the wrong length.
        let bytes = data(200_000, 4);
        let ec = EcScheme { k: 4, m: 2 };
        let rec = record(8, &bytes, ec);
        let truth = shard_tables(&bytes, ec);
        let marked: ShardTables = vec![Some(vec![0xbeef_0000]), None, Some(vec![0xbeef_0002]), Some(vec![1, 2])];
        let (head, _) = encode_head(8, rec.len, 4, rec.shard_len, &[Bytes::copy_from_slice(&bytes)], &marked);
        let real = |i: usize| truth[i].clone().expect("table")[0];
        assert_eq!(head_tables(&head, 4, 1), vec![vec![0xbeef_0000], vec![real(1)], vec![0xbeef_0002], vec![real(3)]]);
    }

    #[tokio::test]
    async fn a_file_written_from_a_chunks_parts_is_its_image_wherever_the_parts_are_cut() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = DiskCache::open(&options(dir.path(), 1 << 30), "c").expect("cache opens");
        // Shards of several blocks with a short last one, padding within a block and across a
        // whole shard, one shard and many.
        let layouts = [
            (200_000usize, EcScheme { k: 4, m: 2 }),
            (150_001, EcScheme { k: 1, m: 2 }),
            (70_000, EcScheme { k: 3, m: 1 }),
        ];
        for (n, (len, ec)) in layouts.into_iter().enumerate() {
            let bytes = data(len, n as u64 + 5);
            let id = 100 + n as u64;
            let rec = record(id, &bytes, ec);
            let want = image_model(id, rec.len, ec.k, rec.shard_len, &bytes);
            for cuts in [vec![], vec![1], vec![65_535, 65_537, 65_538], vec![len / 3, len / 2, len - 1]] {
                let mut parts = Vec::new();
                let mut from = 0;
                for &cut in cuts.iter().chain(std::iter::once(&len)) {
                    parts.push(Bytes::copy_from_slice(&bytes[from..cut]));
                    from = cut;
                }
                let (image, crcs) = encode_file(id, rec.len, ec.k, rec.shard_len, &parts);
                assert!(image == want, "layout {n}, cut at {cuts:?}: another image than the model's");
                assert_eq!(crcs[..], rec.table_crcs[..usize::from(ec.k)]);
            }
            // The writer's file, from a chunk of uneven parts, holds that image byte for byte,
            // with the reader's tables for some shards (the first) and none for the others.
            let parts: Vec<Bytes> = bytes.chunks(40_000).map(Bytes::copy_from_slice).collect();
            let mut tables = shard_tables(&bytes, ec);
            tables.truncate(1);
            cache.offer(&rec, Chunk::new(parts, len), tables);
            let start = Instant::now();
            while !cache.holds((rec.id, rec.len)) {
                assert!(start.elapsed() < Duration::from_secs(10), "chunk {id} was not written");
                std::thread::sleep(Duration::from_millis(2));
            }
            let path = cache.shared.path_of((rec.id, rec.len));
            assert!(std::fs::read(&path).expect("cache file") == want, "layout {n}: the file is not the image");
            assert_eq!(cache.read(&rec, 0, rec.len).await.as_deref(), Some(&bytes[..]));
        }
    }

    #[test]
    fn names_round_trip_and_odd_cluster_names_become_hex() {
        for key in [(0u64, 0u32), (u64::MAX, u32::MAX), (0x1234, 4 << 20)] {
            assert_eq!(parse_file_name(&file_name(key)), Some(key));
        }
        assert_eq!(parse_file_name("00000000000000ff-007"), None, "one spelling per key");
        assert_eq!(parse_file_name("ff-7"), None);
        assert_eq!(dir_name("trove-24e264cf"), "trove-24e264cf");
        assert_eq!(dir_name("../x"), "x2e2e2f78");
        assert_eq!(dir_name(""), "x");
    }

    /// Random chunks, reads, damage, evictions and restarts against a model of what the cache
    /// may return: a read gives the chunk's exact bytes or nothing, never anything else.
    #[tokio::test]
    async fn random_use_matches_a_model() {
        let dir = tempfile::tempdir().expect("dir");
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7c0c);
        let bytes_max = 6 << 20;
        let mut cache = DiskCache::open(&options(dir.path(), bytes_max), "m").expect("open");
        let mut model: BTreeMap<u64, (ChunkRecord, Vec<u8>)> = BTreeMap::new();
        let (mut hits, mut damaged) = (0, 0);
        for step in 0..600 {
            match rng.gen_range(0..10) {
                0..=3 => {
                    let id = rng.gen_range(0..40u64);
                    let len = rng.gen_range(1..(2usize << 20));
                    let ec = [EcScheme { k: 4, m: 2 }, EcScheme { k: 1, m: 2 }, EcScheme { k: 3, m: 1 }]
                        [rng.gen_range(0..3)];
                    let (rec, bytes) = model.entry(id).or_insert_with(|| {
                        let bytes = data(len, step);
                        (record(id, &bytes, ec), bytes)
                    });
                    cache.offer(rec, Chunk::from(Bytes::copy_from_slice(bytes)), Vec::new());
                    if rng.gen_bool(0.5) {
                        // Let the writer catch up (it may also have dropped the chunk).
                        let start = Instant::now();
                        while !cache.holds((rec.id, rec.len)) && start.elapsed() < Duration::from_secs(1) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                4..=7 => {
                    let Some((rec, bytes)) = model.values().nth(rng.gen_range(0..model.len().max(1))) else {
                        continue;
                    };
                    let start = rng.gen_range(0..rec.len);
                    let take = rng.gen_range(1..=rec.len - start);
                    if let Some(got) = cache.read(rec, start, take).await {
                        assert_eq!(&got[..], &bytes[start as usize..(start + take) as usize], "step {step}");
                    }
                }
                8 => {
                    // Damage a random cached file somewhere.
                    let keys: Vec<Key> = cache.shared.index.lock().entries.keys().copied().collect();
                    if let Some(key) = keys.get(rng.gen_range(0..keys.len().max(1))) {
                        cache.shared.open.lock().files.clear();
                        let path = cache.shared.path_of(*key);
                        if let Ok(mut raw) = std::fs::read(&path) {
                            let at = rng.gen_range(0..raw.len());
                            raw[at] ^= 1 << rng.gen_range(0..8);
                            let _ = std::fs::write(&path, &raw);
                        }
                    }
                }
                _ => {
                    (hits, damaged) = (hits + cache.stats().hits, damaged + cache.stats().damaged);
                    drop(cache);
                    cache = DiskCache::open(&options(dir.path(), bytes_max), "m").expect("reopen");
                }
            }
            assert!(cache.stats().cached_bytes <= bytes_max);
        }
        (hits, damaged) = (hits + cache.stats().hits, damaged + cache.stats().damaged);
        assert!(hits > 10 && damaged > 0, "the run exercised the cache: {hits} hits, {damaged} damaged files");
    }
}
