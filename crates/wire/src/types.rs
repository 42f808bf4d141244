//! Domain types shared by every Trove process: identifiers, attributes, layouts, placement.
//!
//! These types cross the network (encoded with postcard inside frames) and are stored in the
//! metadata engine, so changing a field is a format change: add new fields only at the end of a
//! struct and bump [`crate::PROTOCOL_VERSION`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// An inode number. [`ROOT_INO`] is the root directory.
pub type Ino = u64;
/// The root directory's inode number (as in FUSE).
pub const ROOT_INO: Ino = 1;
/// A storage node's identifier, assigned by the metadata service at first registration.
pub type NodeId = u32;
/// A chunk's identifier. Every write of a chunk gets a fresh id (copy-on-write), so a shard's
/// content never changes once written.
pub type ChunkId = u64;

/// Longest file name component, as in Linux.
pub const NAME_BYTES_MAX: usize = 255;
/// Longest symlink target.
pub const SYMLINK_BYTES_MAX: usize = 4095;
/// Largest extended attribute value.
pub const XATTR_VALUE_BYTES_MAX: usize = 64 * 1024;
/// Default chunk size: a file is cut into chunks of this many bytes.
pub const CHUNK_BYTES_DEFAULT: u32 = 4 << 20;
/// Shards are checksummed in blocks of this many bytes so ranged reads can be verified.
pub const SHARD_BLOCK_BYTES: u32 = 64 << 10;
/// Most shards a chunk can have (data + parity).
pub const SHARDS_MAX: usize = 32;

/// A storage pool's identifier: a set of storage nodes with its own placement groups and
/// default erasure scheme. Stable for the pool's life; [`DEFAULT_POOL`] always exists.
pub type PoolId = u32;
/// The pool of nodes that name none, and of every file and chunk written before pools existed.
pub const DEFAULT_POOL: PoolId = 0;
/// The default pool's name.
pub const DEFAULT_POOL_NAME: &str = "default";
/// Largest pool id: a placement group number holds its pool in its upper 16 bits.
pub const POOL_ID_MAX: PoolId = 0xffff;
/// Most placement groups one pool may have: the lower 16 bits of a placement group number.
pub const POOL_PGS_MAX: u32 = 1 << 16;
/// Longest pool name.
pub const POOL_NAME_BYTES_MAX: usize = 64;

/// The pool a (global) placement group number belongs to. Placement group numbers are
/// `pool << 16 | local`, so that every chunk record of the time before pools (pool 0) keeps its
/// meaning, and a chunk's pool is known from its record alone.
pub fn pg_pool(pg: u32) -> PoolId {
    pg >> 16
}

/// A placement group's number within its pool.
pub fn pg_local(pg: u32) -> u32 {
    pg & (POOL_PGS_MAX - 1)
}

/// The global number of placement group `local` of `pool`.
pub fn pg_global(pool: PoolId, local: u32) -> u32 {
    (pool << 16) | (local & (POOL_PGS_MAX - 1))
}

/// Checks a pool name: 1 to [`POOL_NAME_BYTES_MAX`] bytes of ASCII letters, digits, `.`, `_`
/// and `-`, not starting with `-` (names appear in commands and configuration files).
pub fn check_pool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > POOL_NAME_BYTES_MAX {
        return Err(format!("pool name {name:?} must be 1 to {POOL_NAME_BYTES_MAX} bytes long"));
    }
    if name.starts_with('-') || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Err(format!(
            "pool name {name:?} may hold only ASCII letters, digits, '.', '_' and '-', and may not start with '-'"
        ));
    }
    Ok(())
}

/// What a pool stores its chunks on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolKind {
    /// Trove storage nodes that name the pool in their configuration (`pool = "flash"`).
    Nodes,
    /// An S3-compatible bucket, fronted by storage nodes configured with an object backend
    /// (`[object]`), each keeping its shards as objects under a prefix of its own. Never the
    /// credentials: they stay in the nodes' configurations.
    Object { endpoint: String, bucket: String },
}

impl PoolKind {
    /// What the kind is called in listings.
    pub fn name(&self) -> &'static str {
        match self {
            PoolKind::Nodes => "nodes",
            PoolKind::Object { .. } => "object",
        }
    }
}

/// Where a storage node of an object pool keeps its shards, as it tells the metadata service
/// at registration (no credentials).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectTarget {
    /// The S3 endpoint's URL.
    pub endpoint: String,
    pub bucket: String,
    /// The node's prefix in the bucket ("" for its root), without slashes around it.
    pub prefix: String,
}

/// A storage pool as the metadata service describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolInfo {
    pub id: PoolId,
    pub name: String,
    pub kind: PoolKind,
    /// The scheme of directories put in the pool without one of their own, and of files a
    /// policy moves there without naming one.
    pub default_ec: EcScheme,
}

/// The prefix of the names of files being written under a temporary name (`trove put`, S3
/// uploads), renamed onto their final name once complete: listings leave them out, and the
/// metadata service deletes them at once when they are removed (a write given up is not a file
/// anyone deleted, so it does not go to the trash).
pub const TMP_NAME_PREFIX: &str = ".trove-tmp.";

/// The limits of a directory tree's quota; 0 means no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLimits {
    /// Logical bytes (the sum of the sizes of the regular files in the tree) never exceeded.
    pub bytes_hard: u64,
    /// Logical bytes that may be exceeded for `grace_ms`, then are enforced as hard.
    pub bytes_soft: u64,
    /// Inodes (files, directories, symlinks, special files below the directory) never exceeded.
    pub inodes_hard: u64,
    /// Inodes that may be exceeded for `grace_ms`, then are enforced as hard.
    pub inodes_soft: u64,
    /// How long a soft limit may stay exceeded.
    pub grace_ms: u64,
}

/// A directory tree's quota and its exact usage, as `GetQuota` and `ListQuotas` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaInfo {
    /// The directory the quota is on.
    pub ino: Ino,
    /// Its path.
    pub path: String,
    pub limits: QuotaLimits,
    /// Logical bytes of the regular files below the directory.
    pub bytes_used: u64,
    /// Inodes below the directory (not counting the directory itself).
    pub inodes_used: u64,
    /// Wall-clock ms since which usage has been over the soft limit of bytes (0: it is not).
    pub bytes_over_soft_since_ms: u64,
    /// The same for the soft limit of inodes.
    pub inodes_over_soft_since_ms: u64,
}

/// A snapshot of a directory tree, as `SnapshotList` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub id: u64,
    pub name: String,
    /// The snapshotted directory.
    pub root: Ino,
    /// Wall-clock ms when it was taken.
    pub created_ms: u64,
    /// Bytes of stored shards (parity included) that no live file and no other snapshot
    /// references: what deleting it frees.
    pub bytes_exclusive: u64,
    /// Wall-clock ms until which it is locked (WORM): not deletable before; 0 for never locked.
    pub retain_until_ms: u64,
}

/// How a path differs between two versions of a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// One path of a `SnapshotDiff`, relative to the snapshotted directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChange {
    pub path: String,
    pub change: ChangeKind,
}

/// A file in the trash, as `ListTrash` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashEntry {
    /// What `RestoreTrash` and `PurgeTrash` name it by: its name in the trash directory.
    pub id: String,
    /// The path it was deleted from.
    pub path: String,
    /// When it was deleted, wall-clock ms.
    pub deleted_ms: u64,
    pub size: u64,
    pub ino: Ino,
}

/// One pool's figures in [`ClusterStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    pub pool: PoolInfo,
    /// Storage nodes in the pool (not counting those removed), and how many of them are up.
    pub nodes: u32,
    pub nodes_up: u32,
    /// Raw capacity and free space of the pool's nodes' drives (each file system counted once).
    pub bytes_total: u64,
    pub bytes_free: u64,
    /// Chunks placed in the pool and the raw bytes of their stored shards (counted only by a
    /// status that walks the chunk records).
    pub chunks: u64,
    pub bytes_stored: u64,
    /// Schemes of the pool's chunks and how many each has (with the walk only).
    pub schemes: Vec<(EcScheme, u64)>,
}

/// An erasure-coding scheme: `k` data shards plus `m` parity shards. `k = 1` is replication
/// with `m` extra copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EcScheme {
    pub k: u8,
    pub m: u8,
}

/// Chunks of at most this many bytes are mirrored (see [`EcScheme::for_chunk`]).
pub const SMALL_CHUNK_BYTES_MAX: u32 = 128 * 1024;

impl EcScheme {
    /// The default scheme: 4 data + 2 parity.
    pub const DEFAULT: EcScheme = EcScheme { k: 4, m: 2 };

    /// Total shards per chunk.
    pub fn width(self) -> usize {
        usize::from(self.k) + usize::from(self.m)
    }

    /// Checks the scheme is one Trove supports.
    pub fn validate(self) -> Result<(), String> {
        Self::check(u64::from(self.k), u64::from(self.m))
    }

    /// Checks `k` data and `m` parity shards against Trove's limits, naming them.
    fn check(k: u64, m: u64) -> Result<(), String> {
        if k == 0 {
            return Err(format!("{k}+{m} has no data shard; {}", Self::LIMITS));
        }
        if k.saturating_add(m) > SHARDS_MAX as u64 {
            return Err(format!("{k}+{m} has {} shards; {}", k.saturating_add(m), Self::LIMITS));
        }
        Ok(())
    }

    /// The limits every scheme keeps, as error messages state them.
    const LIMITS: &'static str =
        "a scheme K+M needs K >= 1 and K + M <= 32 shards in all (e.g. 4+2, 8+3, or 1+2 for three copies)";

    /// The scheme a chunk of `len` bytes of a file coded `self` is written in: `self`, except
    /// that a chunk of at most [`SMALL_CHUNK_BYTES_MAX`] is mirrored, `1+m` (three copies for
    /// 4+2), with the same number of failures survived. Reading it then costs one request to
    /// one node instead of `k` small ones to `k` nodes, which for small files (a training
    /// sample per file) is what a drive's and a network's request rates are spent on; the
    /// space this costs is small in bytes. Isilon OneFS mirrors small files for the same
    /// reason.
    pub fn for_chunk(self, len: u32) -> EcScheme {
        if len <= SMALL_CHUNK_BYTES_MAX && self.k > 1 {
            EcScheme { k: 1, m: self.m }
        } else {
            self
        }
    }

    /// Whether a chunk coded `self` is narrower than `wanted`, the scheme it should have
    /// ([`EcScheme::for_chunk`] of its file's): fewer data or parity shards.
    pub fn narrower_than(self, wanted: EcScheme) -> bool {
        self.k < wanted.k || self.m < wanted.m
    }

    /// The size of each shard for a chunk holding `len` bytes: `len / k` rounded up to an even
    /// number of bytes (the Reed-Solomon codec works on 2-byte symbols), at least 2.
    pub fn shard_len(self, len: u32) -> u32 {
        let per = len.div_ceil(u32::from(self.k)).max(2);
        per + (per & 1)
    }
}

impl fmt::Display for EcScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
    }
}

impl std::str::FromStr for EcScheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, m) =
            s.split_once('+').ok_or_else(|| format!("erasure scheme {s:?} is not of the form K+M (e.g. 4+2)"))?;
        // Parsed wider than the fields, so that "300+2" is told it is over the limit rather
        // than that 300 is not a number.
        let number = |part: &str| -> Result<u64, String> {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("erasure scheme {s:?}: {part:?} is not a whole number; {}", Self::LIMITS));
            }
            // All digits: only overflow can fail, and such a number is over the limit anyway.
            Ok(part.parse().unwrap_or(u64::MAX))
        };
        let (k, m) = (number(k)?, number(m)?);
        Self::check(k, m).map_err(|e| format!("erasure scheme {s:?}: {e}"))?;
        // `check` bounds both by SHARDS_MAX, so they fit in a byte.
        Ok(EcScheme { k: k as u8, m: m as u8 })
    }
}

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// What this kind is called in messages ("regular file", "directory", ...).
    pub fn name(self) -> &'static str {
        match self {
            FileKind::File => "regular file",
            FileKind::Dir => "directory",
            FileKind::Symlink => "symbolic link",
            FileKind::Fifo => "FIFO",
            FileKind::Socket => "socket",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
        }
    }
}

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A wall-clock time in ms since the epoch as people read it, in UTC: `YYYY-MM-DD HH:MM:SS`
/// (for messages and listings).
pub fn utc_text(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        let d = crate::world::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() }
    }
}

/// The attributes of an inode, as `stat` shows them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileKind,
    /// Permission bits (07777), without the file type bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub rdev: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    /// Bumped by every change to the file's data; clients use it for close-to-open cache
    /// validation.
    pub data_version: u64,
    /// The erasure scheme of the file's chunks; for a directory, the scheme new files inherit.
    pub ec: EcScheme,
    /// Chunk size in bytes of the file (for a directory: inherited by new files).
    pub chunk_bytes: u32,
    /// The pool new chunks of the file are written to (for a directory: the pool new files
    /// inherit). Chunks already written say in their record where they are.
    pub pool: PoolId,
}

impl Attr {
    /// Bytes the file occupies on storage, rounded like `st_blocks` wants (512-byte units).
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(512)
    }
}

/// Which attributes a `SetAttr` changes. `None` leaves the attribute as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncates or extends the file.
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    pub ctime: Option<Timestamp>,
}

/// One directory entry as returned by `ReadDir` (with the child's attributes, like READDIRPLUS).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub attr: Attr,
}

/// File system capacity as `statfs` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFs {
    pub bytes_total: u64,
    /// Free space, counting what deleted and overwritten files still hold until the GC frees
    /// it (`bytes_pending_delete`), so that `df` shows deletions at once.
    pub bytes_free: u64,
    pub inodes_used: u64,
    pub block_bytes: u32,
    pub name_bytes_max: u32,
    /// The part of `bytes_free` that deleted and overwritten files still hold: the GC frees it
    /// after its grace period (30 s by default). Until then a write may find the nodes full.
    pub bytes_pending_delete: u64,
}

/// Where a chunk's shards live: shard `i` is on `pg_nodes[i]` of placement group `pg` in map
/// version `map_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub map_version: u32,
    pub pg: u32,
}

/// The metadata record of one chunk of a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    /// Position of the chunk in the file: bytes `index * chunk_bytes ..`.
    pub index: u64,
    pub id: ChunkId,
    /// Valid bytes in this chunk; bytes past `len` (up to the file size) read as zeros.
    pub len: u32,
    pub ec: EcScheme,
    /// Bytes per shard.
    pub shard_len: u32,
    pub placement: Placement,
    /// For each shard, the crc32c of its block checksum table: ties every stored block to what
    /// the writer computed (end-to-end).
    pub table_crcs: Vec<u32>,
    /// Bit `i` set: shard `i` was not written (its node was down); the chunk is degraded.
    pub missing: u64,
}

/// The key of a shard on a storage node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShardKey {
    pub chunk: ChunkId,
    pub index: u8,
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chunk {:016x} shard {}", self.chunk, self.index)
    }
}

/// The lifecycle state of a storage node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Heartbeating and serving.
    Up,
    /// Missed heartbeats; its shards are unavailable.
    Down,
    /// Data is being moved off it; it still serves reads.
    Draining,
    /// Removed from placement.
    Out,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Up => "up",
            NodeState::Down => "down",
            NodeState::Draining => "draining",
            NodeState::Out => "out",
        })
    }
}

/// Capacity and health of one drive of a storage node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveInfo {
    pub path: String,
    pub bytes_total: u64,
    pub bytes_free: u64,
    pub shards: u64,
    /// Empty when healthy; otherwise what is wrong (e.g. "read-only file system").
    pub error: String,
    /// The file system the drive is on ([`device_id`]); drives with the same non-zero id share
    /// their space (several nodes on one disk), so capacity counts it once. 0: unknown.
    pub device: u64,
}

/// Total and free bytes of `drives`, each file system counted once: drives reporting the same
/// non-zero [`DriveInfo::device`] share one disk (several storage nodes on one host), so its
/// space is counted once (the largest total and the smallest free any of them reported, as
/// reports are taken at slightly different moments). Drives of unknown device count alone.
pub fn capacity_once_per_device(drives: &[DriveInfo]) -> (u64, u64) {
    let mut per_device: std::collections::HashMap<u64, (u64, u64)> = std::collections::HashMap::new();
    let (mut total, mut free) = (0u64, 0u64);
    for d in drives {
        if d.device == 0 {
            total = total.saturating_add(d.bytes_total);
            free = free.saturating_add(d.bytes_free);
            continue;
        }
        let seen = per_device.entry(d.device).or_insert((d.bytes_total, d.bytes_free));
        seen.0 = seen.0.max(d.bytes_total);
        seen.1 = seen.1.min(d.bytes_free);
    }
    for (t, f) in per_device.into_values() {
        total = total.saturating_add(t);
        free = free.saturating_add(f);
    }
    (total, free)
}

/// The identity of a file system as [`DriveInfo::device`] reports it: a hash of the host's
/// identity (its machine id), the device number (`st_dev`) and the file system id (`statvfs`'s
/// `f_fsid`). The same for every directory of one file system on one host, different across
/// hosts (device numbers repeat there), never 0.
pub fn device_id(host: &str, st_dev: u64, fsid: u64) -> u64 {
    // FNV-1a: fixed forever, as ids computed by different builds (a storage node and a client
    // checking space) must agree.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes().chain([0]).chain(st_dev.to_le_bytes()).chain(fsid.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// A storage node as the cluster manager knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// Random identity kept on the node's first drive, so a restarted node gets its id back.
    pub uuid: u128,
    /// Address clients connect to ("127.0.0.1:7101").
    pub addr: String,
    pub state: NodeState,
    pub drives: Vec<DriveInfo>,
    /// Milliseconds since the last heartbeat (as seen by the metadata service answering).
    pub heartbeat_age_ms: u64,
    /// The pool the node belongs to.
    pub pool: PoolId,
}

/// A version of the placement map: for each pool of storage nodes, for each of its placement
/// groups, the ordered list of nodes holding shard 0, 1, 2, ... of the chunks in that group.
/// Versions are immutable once published; one version covers every pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementMap {
    pub version: u32,
    /// The groups of each pool that has member nodes, by pool id ascending.
    pub pools: Vec<PoolPgs>,
}

/// The placement groups of one pool in a [`PlacementMap`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPgs {
    pub pool: PoolId,
    /// `pgs[local]` lists every member node of the pool in the group's order; a chunk of width
    /// `w` uses the first `w`. The group's global number is [`pg_global`]`(pool, local)`.
    pub pgs: Vec<Vec<NodeId>>,
}

impl PlacementMap {
    /// A map of the default pool only (maps from before pools, and tests).
    pub fn of_default_pool(version: u32, pgs: Vec<Vec<NodeId>>) -> PlacementMap {
        PlacementMap { version, pools: vec![PoolPgs { pool: DEFAULT_POOL, pgs }] }
    }

    /// The placement groups of `pool`, indexed by local number (empty when it has no members).
    pub fn pool_pgs(&self, pool: PoolId) -> &[Vec<NodeId>] {
        self.pools.iter().find(|p| p.pool == pool).map_or(&[], |p| p.pgs.as_slice())
    }

    /// The ordered nodes of global placement group `pg`.
    pub fn group(&self, pg: u32) -> Option<&[NodeId]> {
        self.pool_pgs(pg_pool(pg)).get(pg_local(pg) as usize).map(Vec::as_slice)
    }

    /// The node holding shard `index` of a chunk in (global) placement group `pg`.
    pub fn node_for(&self, pg: u32, index: usize) -> Option<NodeId> {
        self.group(pg)?.get(index).copied()
    }

    /// The member nodes of `pool` (every group lists all of them).
    pub fn members(&self, pool: PoolId) -> &[NodeId] {
        self.pool_pgs(pool).first().map_or(&[], Vec::as_slice)
    }
}

/// Cluster-wide status for `trove status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub nodes: Vec<NodeInfo>,
    pub map_version: u32,
    pub default_ec: EcScheme,
    pub chunk_bytes: u32,
    pub files: u64,
    /// Chunks stored: every live chunk record, and each chunk only snapshots hold once (a
    /// walking status counts them all; the health counts below cover both).
    pub chunks: u64,
    /// Chunks with at least one shard missing or on a node that is not up.
    pub chunks_degraded: u64,
    /// Chunks with more than `m` shards unavailable: unreadable until nodes return.
    pub chunks_unavailable: u64,
    /// Chunks still placed by an older placement map than the newest: what rebuild, drain and
    /// rebalance have left to move (most need only their record updated).
    pub chunks_misplaced: u64,
    /// The metadata server holding the cluster manager's lease (its address), if any.
    pub leader: Option<String>,
    /// Schemes in use and how many chunks each has.
    pub ec_schemes: Vec<(EcScheme, u64)>,
    pub engine: String,
    /// Chunks coded narrower than their file's scheme (written while too few nodes were up, or
    /// re-encoded to fit fewer nodes): the mover widens them when the nodes allow.
    pub chunks_narrow: u64,
    /// Directories whose scheme needs more storage nodes than the cluster has, by path (the
    /// first few): new files there are written narrower.
    pub dirs_too_wide: Vec<(String, EcScheme)>,
    /// How many directories need more storage nodes than the cluster has.
    pub dirs_too_wide_count: u64,
    /// Bytes of shards (raw, on the nodes' drives) that deleted and overwritten files still
    /// hold: the GC deletes them after its grace period.
    pub bytes_pending_delete: u64,
    /// At most how long until the GC has freed what is pending now (its grace period and a
    /// pass), when every node holding those shards is reachable.
    pub pending_delete_within_ms: u64,
    /// Every pool with its nodes, capacity and (with the chunk walk) chunks.
    pub pools: Vec<PoolStatus>,
}

/// What a byte-range lock request asks for (fcntl's F_RDLCK, F_WRLCK, F_UNLCK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// Shared: other readers may hold the same bytes.
    Read,
    /// Exclusive.
    Write,
    /// Releases the range.
    Unlock,
}

/// A byte range of a lock: bytes `start..=end` (`end = u64::MAX` or `i64::MAX`: to the end of
/// the file, whatever its size), as FUSE and fcntl's `struct flock` describe them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRange {
    pub start: u64,
    pub end: u64,
    pub kind: LockKind,
    /// The process that asked (reported to F_GETLK callers; never used to decide anything).
    pub pid: u32,
}

impl LockRange {
    /// Whether the two ranges share at least one byte.
    pub fn overlaps(&self, other: &LockRange) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// Whether two owners holding these ranges would conflict: shared bytes, and one of them
    /// exclusive.
    pub fn conflicts_with(&self, other: &LockRange) -> bool {
        self.overlaps(other) && (self.kind == LockKind::Write || other.kind == LockKind::Write)
    }
}

/// What a client needs to know of a storage node to route reads and writes: where it is and
/// whether it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeBrief {
    pub id: NodeId,
    pub addr: String,
    pub state: NodeState,
}

impl NodeBrief {
    /// The version of a set of node states: a 64-bit FNV-1a digest of every node's id, address
    /// and state in id order, never 0 (which stands for "none known"). A content digest rather
    /// than a counter, so every metadata server of a cluster gives the same version for the
    /// same states and a client failing over between them fetches nothing again.
    pub fn version_of(nodes: &[NodeBrief]) -> u64 {
        let mut sorted: Vec<&NodeBrief> = nodes.iter().collect();
        sorted.sort_by_key(|n| n.id);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for n in sorted {
            eat(&n.id.to_le_bytes());
            eat(&(n.addr.len() as u32).to_le_bytes());
            eat(n.addr.as_bytes());
            eat(&[n.state as u8]);
        }
        h.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(s: &str) -> String {
        s.parse::<EcScheme>().err().unwrap_or_default()
    }

    #[test]
    fn placement_groups_carry_their_pool() {
        assert_eq!(pg_global(0, 17), 17);
        assert_eq!(pg_global(3, 17), (3 << 16) | 17);
        assert_eq!((pg_pool(pg_global(3, 17)), pg_local(pg_global(3, 17))), (3, 17));
        let map = PlacementMap {
            version: 2,
            pools: vec![
                PoolPgs { pool: 0, pgs: vec![vec![1, 2], vec![2, 1]] },
                PoolPgs { pool: 3, pgs: vec![vec![7, 8], vec![8, 7]] },
            ],
        };
        assert_eq!(map.node_for(1, 0), Some(2));
        assert_eq!(map.node_for(pg_global(3, 1), 0), Some(8));
        assert_eq!(map.node_for(pg_global(3, 2), 0), None);
        assert_eq!(map.node_for(pg_global(4, 0), 0), None);
        assert_eq!(map.members(3), &[7, 8]);
        assert!(map.pool_pgs(9).is_empty());
    }

    #[test]
    fn pool_names_are_checked() {
        for good in ["flash", "hdd-2", "tier_1.cold", "A"] {
            assert!(check_pool_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", "a b", "fläsh", "a/b", &"x".repeat(65)] {
            assert!(check_pool_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn small_chunks_are_mirrored_with_the_files_parity() {
        let ec = EcScheme::DEFAULT;
        assert_eq!(ec.for_chunk(0), EcScheme { k: 1, m: 2 });
        assert_eq!(ec.for_chunk(SMALL_CHUNK_BYTES_MAX), EcScheme { k: 1, m: 2 });
        assert_eq!(ec.for_chunk(SMALL_CHUNK_BYTES_MAX + 1), ec);
        assert_eq!(EcScheme { k: 8, m: 3 }.for_chunk(4096), EcScheme { k: 1, m: 3 });
        assert_eq!(EcScheme { k: 6, m: 0 }.for_chunk(4096), EcScheme { k: 1, m: 0 });
        assert_eq!(EcScheme { k: 1, m: 2 }.for_chunk(4096), EcScheme { k: 1, m: 2 });
        // Mirrored small chunks are what their file wants; narrower ones are not.
        assert!(!EcScheme { k: 1, m: 2 }.narrower_than(ec.for_chunk(1000)));
        assert!(
            !ec.narrower_than(ec.for_chunk(1000)),
            "a small chunk written wide (before mirroring) is left as it is"
        );
        assert!(EcScheme { k: 2, m: 2 }.narrower_than(ec.for_chunk(4 << 20)));
        assert!(EcScheme { k: 1, m: 1 }.narrower_than(ec.for_chunk(1000)));
    }

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00");
        assert_eq!(utc_text(1_764_147_600_000), "2025-11-26 09:00:00");
        // 2000-02-29 23:59:59.999: a leap day of a century divisible by 400.
        assert_eq!(utc_text(951_868_799_999), "2000-02-29 23:59:59");
    }

    #[test]
    fn schemes_parse_and_errors_state_the_limits() {
        assert_eq!("4+2".parse::<EcScheme>(), Ok(EcScheme { k: 4, m: 2 }));
        assert_eq!(" 1 + 0 ".parse::<EcScheme>(), Ok(EcScheme { k: 1, m: 0 }));
        assert_eq!("30+2".parse::<EcScheme>(), Ok(EcScheme { k: 30, m: 2 }));
        // Over the limit, within a byte or not, is said to be over the limit.
        for over in ["300+2", "31+2", "20+20", "99999999999999999999999+1"] {
            let e = parse_err(over);
            assert!(e.contains("K + M <= 32") && !e.contains("number"), "{over}: {e}");
        }
        let e = parse_err("0+2");
        assert!(e.contains("no data shard") && e.contains("K >= 1"), "{e}");
        let e = parse_err("x+2");
        assert!(e.contains("\"x\" is not a whole number") && e.contains("K + M <= 32"), "{e}");
        assert!(parse_err("-1+2").contains("not a whole number"));
        assert!(parse_err("4").contains("K+M"));
        assert!(EcScheme { k: 0, m: 1 }.validate().is_err());
        assert!(EcScheme { k: 16, m: 17 }.validate().is_err());
        assert!(EcScheme { k: 16, m: 16 }.validate().is_ok());
    }
}
