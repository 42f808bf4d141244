//! The key schema of the metadata service and the encoding of every value it stores.
//!
//! This file is the single place that knows how keys are spelled, so that the table in
//! the key table in ARCHITECTURE.md can be checked against one file. Keys are a one-byte prefix naming the record kind
//! followed by big-endian integers (so that a scan returns records in numeric order) and, for
//! directory entries and extended attributes, the raw name bytes last (so that a scan of one
//! directory returns its entries in byte order of their names).
//!
//! Every value starts with a format version byte followed by the postcard encoding of a record
//! type defined here (or raw bytes for xattr values, big-endian integers for counters). Each
//! record type says which version it is written in and how it reads older ones ([`Record`]:
//! the previous type, kept in [`v1`], and a conversion), so stored data is migrated lazily, as
//! it is read and written again; a value with an unknown version is reported, never guessed.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use wire::{
    Attr, ChunkRecord, DriveInfo, EcScheme, FileKind, Ino, MetaReply, NodeId, NodeState, PoolId, Timestamp, WireError,
};

/// Value format 1: the first. Counters, statistics, xattr values and most records are still
/// written in it.
pub const FORMAT_V1: u8 = 1;
/// Value format 2: records that grew with storage pools (inodes, node records, placement maps,
/// recorded replies), and snapshot records with a retention date ([`SnapshotRec::retain_until_ms`]).
pub const FORMAT_V2: u8 = 2;
/// Value format 3: inode records that carry their quota domain ([`InodeRec::quota`]).
pub const FORMAT_V3: u8 = 3;
/// The schema version stored under [`SCHEMA`]; bumped when keys change meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// Record kinds, as the first key byte.
pub mod prefix {
    /// `V`: the schema version of the whole key space (one key).
    pub const SCHEMA: u8 = b'V';
    /// `I` + ino: an inode.
    pub const INODE: u8 = b'I';
    /// `D` + parent ino + name: a directory entry.
    pub const DENTRY: u8 = b'D';
    /// `X` + ino + name: an extended attribute.
    pub const XATTR: u8 = b'X';
    /// `C` + ino + chunk index: a chunk record.
    pub const CHUNK: u8 = b'C';
    /// `K` + counter name: an id counter.
    pub const COUNTER: u8 = b'K';
    /// `S` + statistic + shard: one shard of a usage statistic.
    pub const STAT: u8 = b'S';
    /// `R` + request id: the stored reply of an applied mutation.
    pub const REQUEST: u8 = b'R';
    /// `E` + expiry ms + request id: when a stored reply may be removed.
    pub const REQUEST_EXPIRY: u8 = b'E';
    /// `N` + node id: a storage node.
    pub const NODE: u8 = b'N';
    /// `U` + node uuid: the node id a uuid registered as.
    pub const NODE_UUID: u8 = b'U';
    /// `P` + map version: a published placement map.
    pub const MAP: u8 = b'P';
    /// `G` + chunk id: a chunk whose shards must be deleted.
    pub const GC: u8 = b'G';
    /// `L` + ino + session + owner: the byte-range locks one lock owner holds on a file.
    pub const LOCK: u8 = b'L';
    /// `Q` + session: when a client session's lease on its locks runs out.
    pub const LEASE: u8 = b'Q';
    /// `T` + ino: a directory's latest mtime/ctime, written blindly by every change of its
    /// entries so that concurrent creates in one directory do not conflict on its inode.
    pub const DIR_TIMES: u8 = b'T';
    /// `H` + sequence number: a record of the cluster's event log (history).
    pub const EVENT: u8 = b'H';
    /// `A` + name: a lease (today only `A` + "leader", the cluster manager's).
    pub const LEASE_NAMED: u8 = b'A';
    /// `O` + pool id: a storage pool.
    pub const POOL: u8 = b'O';
    /// `F`: the file pool policies, one ordered list.
    pub const POLICIES: u8 = b'F';
    /// `J` + job name: a job's record (state, run, progress).
    pub const JOB: u8 = b'J';
    /// `B` + ino + chunk index: a chunk queued for the repair job (the work queue, its
    /// backlog), valued with the chunk id it was queued for.
    pub const WORK: u8 = b'B';
    /// `Z` + directory ino: the quota of a directory tree and its exact usage.
    pub const QUOTA: u8 = b'Z';
    /// `W` + deleted ms + ino: a file in the trash (wastebasket), oldest first.
    pub const TRASH: u8 = b'W';
    /// `M` alone: the snapshot state (epoch and live snapshots); `M` + snapshot id: a
    /// snapshot's record (moments).
    pub const SNAPSHOT: u8 = b'M';
    /// `Y` + namespace key + 0x00 + epoch: the value a namespace record (`I`, `D`, `X`, `C`,
    /// `T`) held before its first change in that snapshot epoch (yesterday's version).
    pub const VERSION: u8 = b'Y';
    /// `s` + chunk id: the slots (file, index) of a chunk held by more than one file (clones,
    /// or a chunk moved to another file while a snapshot holds its old slot).
    pub const SHARED: u8 = b's';
    /// `d` alone: the ingest rules (images derived as they land), one list in name order.
    pub const INGEST: u8 = b'd';
    /// `w` + ino: the retention date of an inode in a locked (WORM) tree.
    pub const RETAIN: u8 = b'w';
    /// `t` + name: a tenant.
    pub const TENANT: u8 = b't';
    /// `u` + name: a user.
    pub const USER: u8 = b'u';
    /// `k` + access key: an S3 access key, its secret and its user.
    pub const S3_KEY: u8 = b'k';
}

/// Names of the id counters under [`prefix::COUNTER`].
pub mod counter {
    /// The next inode number not yet handed to any metadata server.
    pub const INO: &[u8] = b"ino";
    /// The next chunk id not yet handed to any metadata server.
    pub const CHUNK: &[u8] = b"chunk";
    /// The next storage node id.
    pub const NODE: &[u8] = b"node";
    /// The sequence number the next event of the event log gets (absent: 1).
    pub const EVENT: &[u8] = b"event";
    /// The version of the newest published placement map (0: none yet).
    pub const MAP: &[u8] = b"map";
    /// The next pool id (absent: 1; pool 0 is the default pool).
    pub const POOL: &[u8] = b"pool";
    /// The latest retention date of any locked (WORM) tree, wall-clock ms (absent: 0): while it
    /// has passed, no mutation needs to look for `w` marks.
    pub const RETAIN_UNTIL: &[u8] = b"retain";
}

/// Usage statistics kept as sharded counters under [`prefix::STAT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Stat {
    /// Inodes of any kind.
    Inodes = 1,
    /// Regular files.
    Files = 2,
    /// Chunk records.
    Chunks = 3,
    /// Bytes of shards queued for deletion and not yet deleted ([`GcRec::bytes_held`] summed
    /// over the `G` entries): added in the transaction that queues a chunk, taken off in the
    /// one that records its deletion, so the figure is exact without scanning the queue.
    PendingDeleteBytes = 4,
}

/// Each statistic is split over this many keys so that concurrent transactions touching
/// unrelated inodes rarely update the same key (which would make them conflict).
pub const STAT_SHARDS: u64 = 64;

fn with_prefix(prefix: u8, capacity: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + capacity);
    key.push(prefix);
    key
}

/// The key of the schema version.
pub fn schema() -> Vec<u8> {
    vec![prefix::SCHEMA]
}

pub fn inode(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::INODE, 8);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

/// The prefix of every entry of directory `parent`.
pub fn dentry_prefix(parent: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::DENTRY, 8);
    key.extend_from_slice(&parent.to_be_bytes());
    key
}

pub fn dentry(parent: Ino, name: &str) -> Vec<u8> {
    let mut key = dentry_prefix(parent);
    key.extend_from_slice(name.as_bytes());
    key
}

/// The directory entry name a dentry key carries, if the key is one of `parent`'s.
pub fn dentry_name(parent: Ino, key: &[u8]) -> Option<&str> {
    let rest = key.strip_prefix(dentry_prefix(parent).as_slice())?;
    std::str::from_utf8(rest).ok()
}

pub fn xattr_prefix(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::XATTR, 8);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

pub fn xattr(ino: Ino, name: &str) -> Vec<u8> {
    let mut key = xattr_prefix(ino);
    key.extend_from_slice(name.as_bytes());
    key
}

pub fn chunk_prefix(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::CHUNK, 16);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

pub fn chunk(ino: Ino, index: u64) -> Vec<u8> {
    let mut key = chunk_prefix(ino);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// Splits a chunk key into inode and chunk index.
pub fn parse_chunk(key: &[u8]) -> Option<(Ino, u64)> {
    if key.len() != 17 || key[0] != prefix::CHUNK {
        return None;
    }
    let ino = u64::from_be_bytes(key[1..9].try_into().ok()?);
    let index = u64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((ino, index))
}

pub fn counter(name: &[u8]) -> Vec<u8> {
    let mut key = with_prefix(prefix::COUNTER, name.len());
    key.extend_from_slice(name);
    key
}

pub fn stat(stat: Stat, shard: u8) -> Vec<u8> {
    vec![prefix::STAT, stat as u8, shard]
}

pub fn request(request_id: u128) -> Vec<u8> {
    let mut key = with_prefix(prefix::REQUEST, 16);
    key.extend_from_slice(&request_id.to_be_bytes());
    key
}

pub fn request_expiry(expires_ms: u64, request_id: u128) -> Vec<u8> {
    let mut key = with_prefix(prefix::REQUEST_EXPIRY, 24);
    key.extend_from_slice(&expires_ms.to_be_bytes());
    key.extend_from_slice(&request_id.to_be_bytes());
    key
}

/// Splits an expiry key into expiry time and request id.
pub fn parse_request_expiry(key: &[u8]) -> Option<(u64, u128)> {
    if key.len() != 25 || key[0] != prefix::REQUEST_EXPIRY {
        return None;
    }
    let expires_ms = u64::from_be_bytes(key[1..9].try_into().ok()?);
    let request_id = u128::from_be_bytes(key[9..25].try_into().ok()?);
    Some((expires_ms, request_id))
}

pub fn node(id: NodeId) -> Vec<u8> {
    let mut key = with_prefix(prefix::NODE, 4);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

pub fn node_uuid(uuid: u128) -> Vec<u8> {
    let mut key = with_prefix(prefix::NODE_UUID, 16);
    key.extend_from_slice(&uuid.to_be_bytes());
    key
}

pub fn map(version: u32) -> Vec<u8> {
    let mut key = with_prefix(prefix::MAP, 4);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

pub fn pool(id: PoolId) -> Vec<u8> {
    let mut key = with_prefix(prefix::POOL, 4);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// The key of directory `ino`'s quota.
pub fn quota(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::QUOTA, 8);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

/// The key of a file put in the trash at `deleted_ms`.
pub fn trash(deleted_ms: u64, ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::TRASH, 16);
    key.extend_from_slice(&deleted_ms.to_be_bytes());
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

/// Splits a trash key into deletion time and inode.
pub fn parse_trash(key: &[u8]) -> Option<(u64, Ino)> {
    if key.len() != 17 || key[0] != prefix::TRASH {
        return None;
    }
    let ms = u64::from_be_bytes(key[1..9].try_into().ok()?);
    let ino = u64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((ms, ino))
}

/// The key of the snapshot state ([`SnapshotStateRec`]).
pub fn snapshot_state() -> Vec<u8> {
    vec![prefix::SNAPSHOT]
}

/// The key of snapshot `id`'s record.
pub fn snapshot(id: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix::SNAPSHOT, 8);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// Whether versions of `key` are kept for snapshots: inodes, entries, xattrs, chunk records
/// and directory times.
pub fn is_versioned(key: &[u8]) -> bool {
    matches!(key.first(), Some(&(prefix::INODE | prefix::DENTRY | prefix::XATTR | prefix::CHUNK | prefix::DIR_TIMES)))
}

/// The prefix of every preserved version of namespace key `key`: `Y` ‖ key ‖ 0x00. The NUL
/// separates the key from the epoch: names never contain NUL and the other versioned keys
/// have a fixed length, so no version of one key falls among those of another.
pub fn version_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(prefix::VERSION, key.len() + 9);
    out.extend_from_slice(key);
    out.push(0);
    out
}

/// The key of the version of `key` replaced during snapshot epoch `epoch`.
pub fn version(key: &[u8], epoch: u64) -> Vec<u8> {
    let mut out = version_prefix(key);
    out.extend_from_slice(&epoch.to_be_bytes());
    out
}

/// Splits a version key into the namespace key and the epoch.
pub fn parse_version(vkey: &[u8]) -> Option<(&[u8], u64)> {
    if vkey.len() < 11 || vkey[0] != prefix::VERSION {
        return None;
    }
    let (head, epoch) = vkey.split_at(vkey.len() - 8);
    let (key, sep) = head[1..].split_at(head.len() - 2);
    if sep != [0] {
        return None;
    }
    Some((key, u64::from_be_bytes(epoch.try_into().ok()?)))
}

/// The key of the file pool policies (one record: they are few and read as a whole, in order).
pub fn policies() -> Vec<u8> {
    vec![prefix::POLICIES]
}

/// The key of the ingest rules (one record: they are few and read as a whole).
pub fn ingest_rules() -> Vec<u8> {
    vec![prefix::INGEST]
}

/// The key of an identity record: `kind` ([`prefix::TENANT`], [`prefix::USER`],
/// [`prefix::S3_KEY`]) and its name.
pub fn identity(kind: u8, name: &str) -> Vec<u8> {
    let mut key = with_prefix(kind, name.len());
    key.extend_from_slice(name.as_bytes());
    key
}

/// The key of inode `ino`'s retention mark (WORM).
pub fn retain(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::RETAIN, 8);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

/// The key of job `name`'s record.
pub fn job(name: &str) -> Vec<u8> {
    let mut key = with_prefix(prefix::JOB, name.len());
    key.extend_from_slice(name.as_bytes());
    key
}

/// The work queue's entry for chunk `index` of file `ino`.
pub fn work(ino: Ino, index: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix::WORK, 16);
    key.extend_from_slice(&ino.to_be_bytes());
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// Splits a work queue key into file and chunk index.
pub fn parse_work(key: &[u8]) -> Option<(Ino, u64)> {
    if key.len() != 17 || key[0] != prefix::WORK {
        return None;
    }
    let ino = u64::from_be_bytes(key[1..9].try_into().ok()?);
    let index = u64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((ino, index))
}

/// The slots of shared chunk `chunk`.
pub fn shared(chunk: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix::SHARED, 8);
    key.extend_from_slice(&chunk.to_be_bytes());
    key
}

pub fn gc(chunk: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix::GC, 8);
    key.extend_from_slice(&chunk.to_be_bytes());
    key
}

/// The prefix of every lock record of file `ino`.
pub fn lock_prefix(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::LOCK, 8);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

pub fn lock(ino: Ino, session: u64, owner: u64) -> Vec<u8> {
    let mut key = lock_prefix(ino);
    key.extend_from_slice(&session.to_be_bytes());
    key.extend_from_slice(&owner.to_be_bytes());
    key
}

/// Splits a lock key into inode, session and owner.
pub fn parse_lock(key: &[u8]) -> Option<(Ino, u64, u64)> {
    if key.len() != 25 || key[0] != prefix::LOCK {
        return None;
    }
    let ino = u64::from_be_bytes(key[1..9].try_into().ok()?);
    let session = u64::from_be_bytes(key[9..17].try_into().ok()?);
    let owner = u64::from_be_bytes(key[17..25].try_into().ok()?);
    Some((ino, session, owner))
}

pub fn lease(session: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix::LEASE, 8);
    key.extend_from_slice(&session.to_be_bytes());
    key
}

/// The key of the cluster manager's leadership lease.
pub fn leader_lease() -> Vec<u8> {
    let mut key = with_prefix(prefix::LEASE_NAMED, 6);
    key.extend_from_slice(b"leader");
    key
}

/// The key of event `seq` of the event log.
pub fn event(seq: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix::EVENT, 8);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// The key of a directory's entry-change times.
pub fn dir_times(ino: Ino) -> Vec<u8> {
    let mut key = with_prefix(prefix::DIR_TIMES, 8);
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

/// A key as humans read it in error messages: the prefix letter, then the rest in hex, with
/// names shown as text.
pub fn describe(key: &[u8]) -> String {
    let Some((&first, rest)) = key.split_first() else {
        return "<empty key>".into();
    };
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    match first {
        prefix::DENTRY | prefix::XATTR if rest.len() >= 8 => {
            format!("{}/{}/{:?}", first as char, hex(&rest[..8]), String::from_utf8_lossy(&rest[8..]))
        }
        prefix::COUNTER | prefix::LEASE_NAMED | prefix::JOB => {
            format!("{}/{}", first as char, String::from_utf8_lossy(rest))
        }
        _ if first.is_ascii_graphic() => format!("{}/{}", first as char, hex(rest)),
        _ => hex(key),
    }
}

// ---------------------------------------------------------------------------------------------
// Values.

/// An inode: its attributes, and what only some kinds need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeRec {
    pub attr: Attr,
    /// For a directory, the directory containing it (the root's is itself): lets rename refuse
    /// to move a directory under itself, and resolves "..". 0 for other kinds, which may have
    /// several parents (hard links).
    pub parent: Ino,
    /// For a symlink, its target. For a directory, its name in its parent (as of its mkdir or
    /// last rename; empty for the root), so that error messages can name a directory's path by
    /// following parent pointers without scanning its parents' entries. Empty for other kinds,
    /// and in directories made before names were recorded (readers then look the name up).
    pub target: String,
    /// The quota domain: the nearest directory at or above this inode that has a quota (`Z`
    /// record), 0 for none. A directory with a quota names itself; its own inode is counted in
    /// its [`QuotaRec::parent`]'s domain. Every other inode is counted in this domain and, through
    /// the domain's `parent` chain, in every quota above it. All links of a file lie in one
    /// domain (links and renames across domains that could not move the usage are refused).
    pub quota: Ino,
}

/// A directory tree's quota (`Z` + the directory's ino) and its usage, kept exactly by every
/// transaction that changes a file's size or creates, removes or moves an inode below it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaRec {
    pub limits: wire::QuotaLimits,
    /// The quota domain of the directory itself (the nearest quota above it; 0 for none): where
    /// its own inode and, through it, all of its usage are counted too.
    pub parent: Ino,
    /// Logical bytes: the sum of the sizes of the regular files below the directory.
    pub bytes_used: u64,
    /// Inodes below the directory, not counting itself.
    pub inodes_used: u64,
    /// Wall-clock ms since which `bytes_used` has been over the soft limit (0: it is not).
    pub bytes_over_soft_since_ms: u64,
    pub inodes_over_soft_since_ms: u64,
}

/// A file in the trash (`W` + deleted ms + ino): where it came from and its name in the trash
/// directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashRec {
    /// The path it was deleted from.
    pub path: String,
    /// Its entry in the trash directory (also the id `trove trash` names it by).
    pub name: String,
}

/// Who holds the cluster manager's lease, and until when (wall clock, milliseconds since the
/// epoch). Held by one metadata server at a time: it runs rebuild, drain, rebalance, scrub,
/// GC and the marking of dead nodes out. Renewed well before it expires; another server takes
/// it only after expiry, so clocks of metadata servers must agree to well within the lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRec {
    /// Random id of the holding server process.
    pub holder: u128,
    /// The holder's address, for `trove status`.
    pub addr: String,
    pub expires_ms: u64,
}

/// When a directory's entries last changed. While this record exists its times override the
/// mtime and ctime of the directory's inode record; writing the inode's times (setattr) deletes
/// it. Entry changes write it without reading it, so they never conflict on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirTimesRec {
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

/// A directory entry: the child and its kind (so listing names needs no inode reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DentryRec {
    pub ino: Ino,
    pub kind: FileKind,
}

/// The answer of a mutation, kept so a retried request (or a late copy of it) gets it again
/// instead of being applied anew: the reply of one that was applied, or the error of one that
/// failed (format 3; format 2 kept only replies).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRec {
    pub expires_ms: u64,
    pub reply: Result<MetaReply, WireError>,
}

/// A storage node's durable record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRec {
    pub id: NodeId,
    pub uuid: u128,
    pub addr: String,
    /// The administrative state: `Up` means "in service"; whether it is reachable is known
    /// only from heartbeats, kept in memory.
    pub state: NodeState,
    /// Drives as of registration; heartbeats update the in-memory copy only.
    pub drives: Vec<StoredDrive>,
    pub registered: Timestamp,
    /// The pool the node belongs to (value format 2; 0, the default pool, in format 1).
    pub pool: PoolId,
}

/// A storage pool. The default pool (0, [`wire::DEFAULT_POOL_NAME`]) is written at every start
/// of the metadata service if missing, with the cluster's default scheme.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRec {
    pub id: PoolId,
    /// Unique among pools.
    pub name: String,
    pub kind: PoolRecKind,
    pub default_ec: EcScheme,
}

/// The file pool policies, in order (the first a file matches decides it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyListRec {
    pub policies: Vec<wire::FilePolicy>,
}

/// An inode's retention mark: nothing changes it before `until_ms`; `root` is the tree that
/// was locked (what messages name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetainRec {
    pub until_ms: u64,
    pub root: Ino,
}

/// The ingest rules, in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestListRec {
    pub rules: Vec<wire::IngestRule>,
}

/// An S3 access key (`k` + access key): whom it acts as and the secret requests are signed
/// with (kept as given: SigV4 needs the secret itself, not a hash of it).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3KeyRec {
    pub user: String,
    pub secret_key: String,
    pub created_ms: u64,
}

/// What a pool stores its chunks on, as its record keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolRecKind {
    /// Storage nodes whose configuration names the pool.
    Nodes,
    /// An S3-compatible bucket, fronted by storage nodes with an object backend (added after
    /// format 1's first records; older records are all `Nodes`).
    Object { endpoint: String, bucket: String },
}

impl PoolRecKind {
    /// The kind of pool a node keeping its shards at `object` (none: on drives) belongs in.
    pub fn of_node(object: Option<&wire::ObjectTarget>) -> PoolRecKind {
        match object {
            Some(t) => PoolRecKind::Object { endpoint: t.endpoint.clone(), bucket: t.bucket.clone() },
            None => PoolRecKind::Nodes,
        }
    }

    /// What the pool keeps its chunks on, in words.
    pub fn describe(&self) -> String {
        match self {
            PoolRecKind::Nodes => "storage nodes' drives".to_string(),
            PoolRecKind::Object { endpoint, bucket } => format!("bucket {bucket:?} at {endpoint}"),
        }
    }
}

impl PoolRec {
    /// The pool as clients are told about it.
    pub fn info(&self) -> wire::PoolInfo {
        wire::PoolInfo {
            id: self.id,
            name: self.name.clone(),
            kind: match &self.kind {
                PoolRecKind::Nodes => wire::PoolKind::Nodes,
                PoolRecKind::Object { endpoint, bucket } => {
                    wire::PoolKind::Object { endpoint: endpoint.clone(), bucket: bucket.clone() }
                }
            },
            default_ec: self.default_ec,
        }
    }

    /// The default pool as it is without a record of its own.
    pub fn default_pool(default_ec: EcScheme) -> PoolRec {
        PoolRec {
            id: wire::DEFAULT_POOL,
            name: wire::DEFAULT_POOL_NAME.to_string(),
            kind: PoolRecKind::Nodes,
            default_ec,
        }
    }
}

/// A drive as a node record stores it: [`DriveInfo`] as it was in value format 1 (without the
/// device identity, which is learnt again from the node's first heartbeat), so that records
/// written before `DriveInfo` grew keep decoding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDrive {
    pub path: String,
    pub bytes_total: u64,
    pub bytes_free: u64,
    pub shards: u64,
    pub error: String,
}

impl From<&DriveInfo> for StoredDrive {
    fn from(d: &DriveInfo) -> StoredDrive {
        StoredDrive {
            path: d.path.clone(),
            bytes_total: d.bytes_total,
            bytes_free: d.bytes_free,
            shards: d.shards,
            error: d.error.clone(),
        }
    }
}

impl StoredDrive {
    /// The drive as reported to clients; the device identity is unknown (0).
    pub fn info(&self) -> DriveInfo {
        DriveInfo {
            path: self.path.clone(),
            bytes_total: self.bytes_total,
            bytes_free: self.bytes_free,
            shards: self.shards,
            error: self.error.clone(),
            device: 0,
        }
    }
}

/// The byte-range locks one lock owner holds on one file: sorted, disjoint, adjacent ranges
/// of the same kind merged (`kind` is never `Unlock`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRec {
    pub ranges: Vec<wire::LockRange>,
}

/// A client session's lease: its locks count until `expires_ms` (wall clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRec {
    pub expires_ms: u64,
}

/// A chunk whose shards are to be deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRec {
    /// The file the chunk belonged to, and (in `chunk.index`) where: GC checks that this slot no
    /// longer references the chunk before deleting anything.
    pub ino: Ino,
    pub chunk: ChunkRecord,
    /// Wall-clock time of queueing; GC waits a grace period so readers holding the old chunk
    /// list can finish.
    pub queued_ms: u64,
    /// Bit `i` set: the node of shard `i` confirmed the deletion (or has nothing to delete).
    pub done: u64,
}

impl GcRec {
    /// Bytes of shard data this entry still holds on the nodes: one shard's length for every
    /// shard that was written (not `missing`) and whose deletion is not yet confirmed.
    pub fn bytes_held(&self) -> u64 {
        let chunk = &self.chunk;
        let width = chunk.ec.width();
        let all = if width >= 64 { u64::MAX } else { (1u64 << width) - 1 };
        let held = all & !chunk.missing & !self.done;
        u64::from(held.count_ones()) * u64::from(chunk.shard_len)
    }
}

/// The snapshot state (key `M`): the epoch of namespace changes now, and the epochs of the
/// live snapshots. Absent: epoch 1, no snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotStateRec {
    /// The epoch changes committed now belong to; a snapshot taken now gets this epoch and
    /// the counter moves on by one.
    pub epoch: u64,
    /// The epochs (= ids) of the live snapshots, ascending.
    pub live: Vec<u64>,
}

/// A snapshot (key `M` ‖ id): the namespace as it was at the end of epoch `epoch`, browsed
/// from directory `root`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRec {
    /// Equal to `epoch`: unique, as every snapshot ends an epoch.
    pub id: u64,
    pub name: String,
    pub root: Ino,
    pub epoch: u64,
    pub created_ms: u64,
    /// Wall-clock ms until which the snapshot is locked (WORM): `SnapshotDelete` is refused
    /// before then; only ever moved later. 0: never locked (value format 1 had no lock).
    pub retain_until_ms: u64,
}

/// A preserved version (key `Y` ‖ key ‖ 0x00 ‖ epoch): the raw value (format byte included)
/// that the namespace key held before its first change in `epoch`, `None` if it was absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRec {
    pub value: Option<Vec<u8>>,
}

/// The slots of a shared chunk (key `s` ‖ chunk id): every (file, index) that holds or held it
/// besides the one it was written in, and that one too. A slot may since hold another chunk;
/// whoever reads this compares chunk ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedChunkRec {
    pub slots: Vec<(Ino, u64)>,
}

// ---------------------------------------------------------------------------------------------
// Value formats and their migrations.

/// A type stored as a metadata value: the format version it is written in, and how a value of
/// an older version is read (the previous type, kept in [`v1`], decoded and converted). Values
/// are migrated lazily: an old value is read through [`Record::migrate`] and written back in
/// the current format by the next change of the record.
pub trait Record: Serialize + DeserializeOwned {
    /// The format version this type is written in: the value's first byte.
    const FORMAT: u8 = FORMAT_V1;

    /// Decodes the body of a value written in `version`, older than [`Record::FORMAT`].
    fn migrate(version: u8, _body: &[u8]) -> Result<Self, String> {
        Err(format!("unknown format version {version}"))
    }
}

impl Record for DentryRec {}
impl Record for DirTimesRec {}
impl Record for LeaderRec {}
impl Record for GcRec {}
impl Record for LockRec {}
impl Record for LeaseRec {}
impl Record for PoolRec {}
impl Record for ChunkRecord {}
impl Record for wire::Event {}
impl Record for PolicyListRec {}
impl Record for IngestListRec {}
impl Record for wire::identity::Tenant {}
impl Record for wire::identity::User {}
impl Record for S3KeyRec {}
impl Record for RetainRec {}
impl Record for wire::JobInfo {}
impl Record for QuotaRec {}
impl Record for TrashRec {}
impl Record for SnapshotStateRec {}
impl Record for SnapshotRec {
    const FORMAT: u8 = FORMAT_V2;

    fn migrate(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_V1 => {
                let old = from_body::<v1::SnapshotRec>(body)?;
                Ok(SnapshotRec {
                    id: old.id,
                    name: old.name,
                    root: old.root,
                    epoch: old.epoch,
                    created_ms: old.created_ms,
                    retain_until_ms: 0,
                })
            }
            _ => Err(format!("unknown format version {version}")),
        }
    }
}
impl Record for VersionRec {}
impl Record for SharedChunkRec {}

impl Record for InodeRec {
    const FORMAT: u8 = FORMAT_V3;

    fn migrate(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_V1 => Ok(from_body::<v1::InodeRec>(body)?.into()),
            FORMAT_V2 => Ok(from_body::<v2::InodeRec>(body)?.into()),
            _ => Err(format!("unknown format version {version}")),
        }
    }
}

impl Record for NodeRec {
    const FORMAT: u8 = FORMAT_V2;

    fn migrate(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_V1 => Ok(from_body::<v1::NodeRec>(body)?.into()),
            _ => Err(format!("unknown format version {version}")),
        }
    }
}

impl Record for wire::PlacementMap {
    const FORMAT: u8 = FORMAT_V2;

    fn migrate(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_V1 => {
                let old = from_body::<v1::PlacementMap>(body)?;
                Ok(wire::PlacementMap::of_default_pool(old.version, old.pgs))
            }
            _ => Err(format!("unknown format version {version}")),
        }
    }
}

impl Record for RequestRec {
    const FORMAT: u8 = FORMAT_V3;

    fn migrate(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_V2 => {
                let old = from_body::<v2::RequestRec>(body)?;
                Ok(RequestRec { expires_ms: old.expires_ms, reply: Ok(old.reply) })
            }
            // Format 1 replies hold attributes and maps of protocol 7 or older, which no client
            // of this version can have asked for (older clients are refused at the hello): only
            // the sweep reads such records, through `RequestHead`.
            _ => Err(format!("a reply recorded in format {version} by an older version of Trove cannot be returned")),
        }
    }
}

/// The part of a recorded reply ([`RequestRec`]) that the sweep of expired replies needs; the
/// same in every format, so old records expire like new ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestHead {
    pub expires_ms: u64,
}

impl Record for RequestHead {
    const FORMAT: u8 = FORMAT_V3;

    fn migrate(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            // `expires_ms` comes first in every format; postcard ignores what follows.
            FORMAT_V1 | FORMAT_V2 => from_body(body),
            _ => Err(format!("unknown format version {version}")),
        }
    }
}

fn from_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    postcard::from_bytes(body).map_err(|e| format!("undecodable: {e}"))
}

/// The record types as value format 1 wrote them, kept to read old values (see [`Record`]).
pub mod v1 {
    use serde::Deserialize;
    use wire::{EcScheme, FileKind, Ino, NodeId, NodeState, Timestamp};

    /// A snapshot before retention dates (WORM).
    #[derive(Deserialize)]
    pub struct SnapshotRec {
        pub id: u64,
        pub name: String,
        pub root: Ino,
        pub epoch: u64,
        pub created_ms: u64,
    }

    /// `wire::Attr` before it had a pool.
    #[derive(Deserialize)]
    pub struct Attr {
        pub ino: Ino,
        pub kind: FileKind,
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
        pub data_version: u64,
        pub ec: EcScheme,
        pub chunk_bytes: u32,
    }

    #[derive(Deserialize)]
    pub struct InodeRec {
        pub attr: Attr,
        pub parent: Ino,
        pub target: String,
    }

    /// A node record before pools: every node was in the default pool.
    #[derive(Deserialize)]
    pub struct NodeRec {
        pub id: NodeId,
        pub uuid: u128,
        pub addr: String,
        pub state: NodeState,
        pub drives: Vec<super::StoredDrive>,
        pub registered: Timestamp,
    }

    /// A placement map before pools: the default pool's groups.
    #[derive(Deserialize)]
    pub struct PlacementMap {
        pub version: u32,
        pub pgs: Vec<Vec<NodeId>>,
    }
}

/// The record types as value format 2 wrote them, kept to read old values (see [`Record`]).
pub mod v2 {
    use serde::Deserialize;
    use wire::{Attr, Ino, MetaReply};

    /// A recorded answer before failures were recorded: the reply of an applied mutation.
    #[derive(Deserialize)]
    pub struct RequestRec {
        pub expires_ms: u64,
        pub reply: MetaReply,
    }

    /// An inode before quotas: no quota domain (0, as no quota existed).
    #[derive(Deserialize)]
    pub struct InodeRec {
        pub attr: Attr,
        pub parent: Ino,
        pub target: String,
    }
}

impl From<v2::InodeRec> for InodeRec {
    fn from(old: v2::InodeRec) -> InodeRec {
        InodeRec { attr: old.attr, parent: old.parent, target: old.target, quota: 0 }
    }
}

impl From<v1::InodeRec> for InodeRec {
    fn from(old: v1::InodeRec) -> InodeRec {
        let a = old.attr;
        InodeRec {
            attr: Attr {
                ino: a.ino,
                kind: a.kind,
                mode: a.mode,
                uid: a.uid,
                gid: a.gid,
                size: a.size,
                nlink: a.nlink,
                rdev: a.rdev,
                atime: a.atime,
                mtime: a.mtime,
                ctime: a.ctime,
                crtime: a.crtime,
                data_version: a.data_version,
                ec: a.ec,
                chunk_bytes: a.chunk_bytes,
                pool: wire::DEFAULT_POOL,
            },
            parent: old.parent,
            target: old.target,
            quota: 0,
        }
    }
}

impl From<v1::NodeRec> for NodeRec {
    fn from(old: v1::NodeRec) -> NodeRec {
        NodeRec {
            id: old.id,
            uuid: old.uuid,
            addr: old.addr,
            state: old.state,
            drives: old.drives,
            registered: old.registered,
            pool: wire::DEFAULT_POOL,
        }
    }
}

/// Encodes a record: its format version byte, then its postcard encoding.
pub fn encode<T: Record>(value: &T) -> Vec<u8> {
    // Encoding into a Vec fails only for types postcard cannot represent: a bug, not input.
    postcard::to_extend(value, vec![T::FORMAT]).expect("metadata records are postcard-encodable")
}

fn internal(key: &[u8], what: impl std::fmt::Display) -> WireError {
    wire::werr!(Internal, "metadata value of key {}: {what}", describe(key))
}

/// Decodes a value written by [`encode`] in the record's current format or an older one
/// ([`Record::migrate`]), naming the key in the error.
pub fn decode<T: Record>(key: &[u8], value: &[u8]) -> Result<T, WireError> {
    match value.split_first() {
        Some((&version, body)) if version == T::FORMAT => {
            postcard::from_bytes(body).map_err(|e| internal(key, format!("undecodable: {e}")))
        }
        Some((&version, body)) if version >= FORMAT_V1 && version < T::FORMAT => {
            T::migrate(version, body).map_err(|e| internal(key, format!("format {version}: {e}")))
        }
        Some((&version, _)) => Err(internal(key, format!("unknown format version {version}"))),
        None => Err(internal(key, "empty")),
    }
}

/// Encodes raw bytes (xattr values) behind the version byte.
pub fn encode_bytes(bytes: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + bytes.len());
    value.push(FORMAT_V1);
    value.extend_from_slice(bytes);
    value
}

pub fn decode_bytes(key: &[u8], value: &[u8]) -> Result<Vec<u8>, WireError> {
    match value.split_first() {
        Some((&FORMAT_V1, body)) => Ok(body.to_vec()),
        Some((&version, _)) => Err(internal(key, format!("unknown format version {version}"))),
        None => Err(internal(key, "empty")),
    }
}

/// Encodes a counter (`u64`) big-endian behind the version byte.
pub fn encode_u64(n: u64) -> Vec<u8> {
    let mut value = vec![FORMAT_V1];
    value.extend_from_slice(&n.to_be_bytes());
    value
}

pub fn decode_u64(key: &[u8], value: &[u8]) -> Result<u64, WireError> {
    match value.split_first() {
        Some((&FORMAT_V1, body)) => {
            let bytes: [u8; 8] =
                body.try_into().map_err(|_| internal(key, format!("{} bytes, expected 8", body.len())))?;
            Ok(u64::from_be_bytes(bytes))
        }
        Some((&version, _)) => Err(internal(key, format!("unknown format version {version}"))),
        None => Err(internal(key, "empty")),
    }
}

/// Encodes a statistics shard. Shards are signed so that their sum stays right even if an
/// inode's creation and deletion ever counted through different shards.
pub fn encode_i64(n: i64) -> Vec<u8> {
    let mut value = vec![FORMAT_V1];
    value.extend_from_slice(&n.to_be_bytes());
    value
}

pub fn decode_i64(key: &[u8], value: &[u8]) -> Result<i64, WireError> {
    decode_u64(key, value).map(|n| n as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically() {
        assert!(inode(255) < inode(256));
        assert!(chunk(7, 1) < chunk(7, 1 << 40));
        assert!(chunk(7, u64::MAX) < chunk(8, 0));
        assert!(dentry(3, "a") < dentry(3, "b"));
        assert!(dentry(3, "zzz") < dentry(4, ""));
        assert!(request_expiry(10, u128::MAX) < request_expiry(11, 0));
    }

    #[test]
    fn parse_round_trips() {
        assert_eq!(parse_chunk(&chunk(9, 42)), Some((9, 42)));
        assert_eq!(parse_request_expiry(&request_expiry(5, 77)), Some((5, 77)));
        assert_eq!(dentry_name(3, &dentry(3, "hello")), Some("hello"));
        assert_eq!(dentry_name(4, &dentry(3, "hello")), None);
        let key = dentry(3, "hello");
        assert_eq!(parse_version(&version(&key, 9)), Some((key.as_slice(), 9)));
        assert_eq!(parse_version(&version(&inode(1), 2)), Some((inode(1).as_slice(), 2)));
        assert!(version(&dentry(3, "a"), u64::MAX) < version(&dentry(3, "ab"), 0));
        assert!(is_versioned(&chunk(1, 2)) && !is_versioned(&gc(1)));
    }

    #[test]
    fn decode_rejects_unknown_versions_and_garbage() {
        let rec = DentryRec { ino: 5, kind: FileKind::File };
        let bytes = encode(&rec);
        assert_eq!(decode::<DentryRec>(b"k", &bytes).ok(), Some(rec));
        let mut future = bytes.clone();
        future[0] = 3;
        let err = decode::<DentryRec>(&inode(5), &future).err().map(|e| e.message).unwrap_or_default();
        assert!(err.contains("unknown format version 3") && err.contains("I/"), "{err}");
        assert!(decode::<DentryRec>(b"k", &[]).is_err());
        assert!(decode::<InodeRec>(b"k", &[FORMAT_V1, 0xff, 0xff]).is_err());
        assert!(decode::<InodeRec>(b"k", &[FORMAT_V2, 0xff, 0xff]).is_err());
        assert!(decode::<InodeRec>(b"k", &[0, 1]).is_err());
        assert!(decode_u64(b"k", &[FORMAT_V1, 1, 2]).is_err());
        assert_eq!(decode_u64(b"k", &encode_u64(1234)).ok(), Some(1234));
        assert_eq!(decode_i64(b"k", &encode_i64(-3)).ok(), Some(-3));
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
    }

    fn at(secs: i64, nanos: u32) -> Timestamp {
        Timestamp { secs, nanos }
    }

    /// A file's attributes as the golden values below were written with (by value format 1,
    /// before pools), plus the pool they read as.
    fn golden_attr() -> Attr {
        Attr {
            ino: 42,
            kind: FileKind::File,
            mode: 0o644,
            uid: 1000,
            gid: 100,
            size: 5_000_000,
            nlink: 1,
            rdev: 0,
            atime: at(1_700_000_000, 1),
            mtime: at(1_700_000_001, 2),
            ctime: at(1_700_000_002, 3),
            crtime: at(1_700_000_003, 4),
            data_version: 7,
            ec: EcScheme { k: 4, m: 2 },
            chunk_bytes: 4 << 20,
            pool: wire::DEFAULT_POOL,
        }
    }

    /// A reply recorded in format 2 (replies only) reads as a recorded success; format 3 keeps
    /// failures too, and the sweep reads the expiry of both.
    #[test]
    fn recorded_replies_of_format_2_read_as_successes_and_failures_are_kept_in_format_3() {
        let key = request(5);
        // Format 2: expires_ms 1234 (varint d2 09), `MetaReply::Ok` (variant 0).
        let old: RequestRec = decode(&key, &unhex("02d20900")).expect("format 2 reply");
        assert_eq!(old, RequestRec { expires_ms: 1234, reply: Ok(MetaReply::Ok) });
        assert_eq!(encode(&old), unhex("03d2090000"), "format 3 wraps the reply in `Ok` (variant 0)");
        let failed = RequestRec { expires_ms: 1234, reply: Err(WireError::new(wire::ErrorCode::NotFound, "gone")) };
        let value = encode(&failed);
        assert_eq!(value[..4], unhex("03d20901"), "a failure is variant 1");
        assert_eq!(decode::<RequestRec>(&key, &value).expect("format 3 failure"), failed);
        for value in [unhex("02d20900"), value] {
            assert_eq!(decode::<RequestHead>(&key, &value).expect("the head").expires_ms, 1234);
        }
    }

    /// Values written by Trove before pools (value format 1, captured from that code) read as
    /// today's records, in the default pool.
    #[test]
    fn format_1_values_written_before_pools_read_as_records_of_the_default_pool() {
        let file = "012a00a403e80764c096b102010080c49fd50c0182c49fd50c0284c49fd50c0386c49fd50c04070402808080020000";
        let rec: InodeRec = decode(&inode(42), &unhex(file)).expect("format 1 inode");
        assert_eq!(rec, InodeRec { attr: golden_attr(), parent: 0, target: String::new(), quota: 0 });

        let dir =
            "010901a403e80764c096b102030080c49fd50c0182c49fd50c0284c49fd50c0386c49fd50c0407040280808002010464617461";
        let rec: InodeRec = decode(&inode(9), &unhex(dir)).expect("format 1 directory");
        let mut attr = golden_attr();
        (attr.ino, attr.kind, attr.nlink) = (9, FileKind::Dir, 3);
        assert_eq!(rec, InodeRec { attr, parent: 1, target: "data".into(), quota: 0 });

        let node = "0103f7ccd5a2b4c6c88880deb7de9af1d9a2a3020e3132372e302e302e313a373130330201032f64308080808080208080808080100c0080c49fd50c05";
        let rec: NodeRec = decode(&self::node(3), &unhex(node)).expect("format 1 node");
        assert_eq!(
            rec,
            NodeRec {
                id: 3,
                uuid: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
                addr: "127.0.0.1:7103".into(),
                state: NodeState::Draining,
                drives: vec![StoredDrive {
                    path: "/d0".into(),
                    bytes_total: 1 << 40,
                    bytes_free: 1 << 39,
                    shards: 12,
                    error: String::new(),
                }],
                registered: at(1_700_000_000, 5),
                pool: wire::DEFAULT_POOL,
            }
        );

        let map: wire::PlacementMap = decode(&self::map(5), &unhex("0105020301020303030102")).expect("format 1 map");
        assert_eq!(map, wire::PlacementMap::of_default_pool(5, vec![vec![1, 2, 3], vec![3, 1, 2]]));
        assert_eq!(map.node_for(1, 0), Some(3));

        // A recorded reply of format 1 cannot be returned, but still expires.
        let reply =
            "0180d095ffbc31012a00a403e80764c096b102010080c49fd50c0182c49fd50c0284c49fd50c0386c49fd50c0407040280808002";
        let err = decode::<RequestRec>(&request(7), &unhex(reply)).expect_err("old replies are not returned");
        assert!(err.message.contains("older version"), "{}", err.message);
        let head: RequestHead = decode(&request(7), &unhex(reply)).expect("its expiry reads");
        assert_eq!(head.expires_ms, 1_700_000_000_000);
    }

    #[test]
    fn records_of_format_2_round_trip() {
        let mut attr = golden_attr();
        attr.pool = 3;
        let rec = InodeRec { attr: attr.clone(), parent: 0, target: String::new(), quota: 0 };
        // An inode of format 2 (before quotas) reads with no quota domain.
        #[derive(Serialize)]
        struct V2<'a> {
            attr: &'a Attr,
            parent: Ino,
            target: &'a str,
        }
        let v2 = postcard::to_extend(&V2 { attr: &attr, parent: 0, target: "" }, vec![FORMAT_V2]).expect("encodes");
        assert_eq!(decode::<InodeRec>(b"I", &v2).ok(), Some(rec.clone()));
        let rec = InodeRec { quota: 77, ..rec };
        let bytes = encode(&rec);
        assert_eq!(bytes[0], FORMAT_V3);
        assert_eq!(decode::<InodeRec>(b"I", &bytes).ok(), Some(rec));
        let reply = RequestRec { expires_ms: 99, reply: Ok(MetaReply::Attr(attr)) };
        let bytes = encode(&reply);
        assert_eq!(decode::<RequestRec>(b"R", &bytes).ok(), Some(reply));
        assert_eq!(decode::<RequestHead>(b"R", &bytes).ok(), Some(RequestHead { expires_ms: 99 }));
        let map = wire::PlacementMap {
            version: 4,
            pools: vec![
                wire::PoolPgs { pool: 0, pgs: vec![vec![1, 2]] },
                wire::PoolPgs { pool: 2, pgs: vec![vec![5, 6]] },
            ],
        };
        assert_eq!(decode::<wire::PlacementMap>(b"P", &encode(&map)).ok(), Some(map));
        // Types that did not change are still written in format 1.
        assert_eq!(encode(&DentryRec { ino: 1, kind: FileKind::Dir })[0], FORMAT_V1);
        // A snapshot of format 1 (before retention dates) reads as never locked.
        #[derive(Serialize)]
        struct SnapV1<'a> {
            id: u64,
            name: &'a str,
            root: Ino,
            epoch: u64,
            created_ms: u64,
        }
        let v1 =
            postcard::to_extend(&SnapV1 { id: 3, name: "mon", root: 9, epoch: 3, created_ms: 1234 }, vec![FORMAT_V1])
                .expect("encodes");
        let snap = SnapshotRec { id: 3, name: "mon".into(), root: 9, epoch: 3, created_ms: 1234, retain_until_ms: 0 };
        assert_eq!(decode::<SnapshotRec>(b"M", &v1).ok(), Some(snap.clone()));
        let snap = SnapshotRec { retain_until_ms: 99, ..snap };
        let bytes = encode(&snap);
        assert_eq!(bytes[0], FORMAT_V2);
        assert_eq!(decode::<SnapshotRec>(b"M", &bytes).ok(), Some(snap));
    }
}
