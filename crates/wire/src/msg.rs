//! Request and response messages of the metadata and storage services.
//!
//! Each message travels as the postcard-encoded body of a frame; bulk data (shard bytes) travels
//! beside it as the frame's raw data section so it is never re-encoded.

use crate::error::WireError;
use crate::events::{Event, ProcessInfo};
use crate::identity::{Caller, Identities, IdentityChange, S3KeyGrant};
use crate::ingest::IngestRule;
use crate::jobs::{JobAction, JobInfo};
use crate::policy::FilePolicy;
use crate::types::*;
use serde::{Deserialize, Serialize};

/// Which service a connection talks to; sent in the handshake so a client that dialled the
/// wrong port gets a clear error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Service {
    Meta,
    Storage,
}

/// Most bytes of each text a front end reports in `ReportAuthFailures` (longer is cut).
pub const AUDIT_TEXT_BYTES_MAX: usize = 512;

/// The first frame on every connection, in both directions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: [u8; 4],
    pub version_min: u16,
    pub version_max: u16,
    pub service: Service,
    /// The cluster's identity; empty in a client's hello. A server answers with its own so a
    /// client never mixes two clusters.
    pub cluster: String,
}

/// A call to the metadata service. Mutations carry a request id; the service records the
/// answer under it in the same transaction, so a retried request returns the first answer
/// instead of being applied twice. `request_id == 0` means "not idempotent-tracked"
/// (read-only operations).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaCall {
    pub request_id: u128,
    pub op: MetaOp,
}

/// How `Rename` treats an existing destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenameMode {
    /// Replace the destination (POSIX rename).
    #[default]
    Replace,
    /// Fail with `Exists` if the destination exists (RENAME_NOREPLACE).
    NoReplace,
    /// Swap source and destination atomically (RENAME_EXCHANGE).
    Exchange,
}

/// What `SetLayout` checks about the scheme it is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayoutCheck {
    /// A scheme a person chose: refused when wider than the cluster's storage nodes, or
    /// without parity (`K+0`).
    #[default]
    Chosen,
    /// Chosen, and without parity on purpose (`trove mkdir --no-redundancy`).
    ChosenWithoutRedundancy,
    /// Copied as it is from another directory or file (the S3 gateway's upload directories
    /// take their target's): not refused; where the cluster cannot hold it, chunks are
    /// written narrower.
    Copied,
}

/// How `SetXattr` treats an existing attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrMode {
    #[default]
    Upsert,
    /// XATTR_CREATE: fail if it exists.
    Create,
    /// XATTR_REPLACE: fail if it does not exist.
    Replace,
}

/// Metadata operations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaOp {
    Lookup {
        parent: Ino,
        name: String,
    },
    /// Resolves a slash-separated path from the root, following no symlinks.
    Resolve {
        path: String,
    },
    GetAttr {
        ino: Ino,
    },
    SetAttr {
        ino: Ino,
        set: SetAttr,
    },
    /// Creates a regular file. With `exclusive == false` an existing file is returned instead.
    Create {
        parent: Ino,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
        exclusive: bool,
    },
    Mkdir {
        parent: Ino,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Mknod {
        parent: Ino,
        name: String,
        kind: FileKind,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    },
    Symlink {
        parent: Ino,
        name: String,
        target: String,
        uid: u32,
        gid: u32,
    },
    ReadLink {
        ino: Ino,
    },
    Link {
        ino: Ino,
        new_parent: Ino,
        new_name: String,
    },
    Unlink {
        parent: Ino,
        name: String,
    },
    Rmdir {
        parent: Ino,
        name: String,
    },
    Rename {
        parent: Ino,
        name: String,
        new_parent: Ino,
        new_name: String,
        mode: RenameMode,
    },
    /// Lists entries with names strictly after `after` (empty: from the start), at most `limit`.
    ReadDir {
        ino: Ino,
        after: String,
        limit: u32,
    },
    SetXattr {
        ino: Ino,
        name: String,
        value: Vec<u8>,
        mode: XattrMode,
    },
    GetXattr {
        ino: Ino,
        name: String,
    },
    ListXattr {
        ino: Ino,
    },
    RemoveXattr {
        ino: Ino,
        name: String,
    },
    StatFs,
    /// Sets the erasure scheme and chunk size that new files under a directory inherit, checked
    /// as `check` says.
    SetLayout {
        ino: Ino,
        ec: EcScheme,
        chunk_bytes: u32,
        check: LayoutCheck,
    },
    /// Returns the records of chunks `first .. first + count` that exist, and the file's
    /// attributes.
    GetChunks {
        ino: Ino,
        first: u64,
        count: u64,
    },
    /// Reserves `count` fresh chunk ids and their placements for writing chunks of `ino`,
    /// placed on nodes that are up and not in `avoid` (nodes the writer just failed to reach or
    /// found full). Answered with the scheme to write them in: the file's, or a narrower one
    /// (fewer data shards, full parity where the nodes allow) when too few nodes are up to
    /// place the file's scheme.
    AllocChunks {
        ino: Ino,
        count: u32,
        avoid: Vec<NodeId>,
    },
    /// Gives up chunks that were (partly) uploaded for `ino` but will never be committed: their
    /// shards are queued for deletion like replaced chunks. Chunks that `ino` references are
    /// left alone.
    AbandonChunks {
        ino: Ino,
        chunks: Vec<ChunkRecord>,
    },
    /// Publishes written chunks (copy-on-write: replaced chunks are queued for deletion) and
    /// sets the file size to at least `size` (exactly `size` if `set_size`).
    CommitChunks {
        ino: Ino,
        chunks: Vec<ChunkRecord>,
        size: u64,
        set_size: bool,
        mtime: Timestamp,
    },
    /// Returns a placement map version.
    GetMap {
        version: u32,
    },
    /// Storage node registration: returns its node id (stable across restarts by uuid). `pool`
    /// names the pool the node belongs to (empty: the default pool); a pool of nodes that does
    /// not exist yet is created with the cluster's default scheme, as the node is the first of
    /// its kind. A node whose configuration names another pool than before moves to it.
    /// `object` is where a node of an object pool keeps its shards (none: on its drives); the
    /// first node to join a pool decides the pool's kind.
    RegisterNode {
        uuid: u128,
        addr: String,
        drives: Vec<DriveInfo>,
        pool: String,
        object: Option<ObjectTarget>,
    },
    Heartbeat {
        node: NodeId,
        drives: Vec<DriveInfo>,
    },
    /// Cluster status; `scan_chunks` also counts degraded chunks (walks all chunk records).
    Status {
        scan_chunks: bool,
    },
    /// Takes, changes or (with `LockKind::Unlock`) releases the byte-range lock `range` of
    /// `ino` for lock owner `owner` of client session `session`, and renews the session's lease
    /// for `lease_ms`. Answered with `MetaReply::Lock`, granted or not (never waits). Locks of a
    /// session whose lease ran out no longer count: a dead client's locks are released. Applying
    /// it twice gives the same result, so it needs no idempotency record.
    Lock {
        ino: Ino,
        session: u64,
        owner: u64,
        range: LockRange,
        lease_ms: u64,
    },
    /// Which lock of another owner would conflict with `range` (fcntl's F_GETLK).
    TestLock {
        ino: Ino,
        session: u64,
        owner: u64,
        range: LockRange,
    },
    /// Extends the lease on all locks of `session` by `lease_ms` from now; 0 ends the session
    /// and so releases its locks at once (clean unmount).
    RenewLease {
        session: u64,
        lease_ms: u64,
    },
    /// Moves the data of regular file `name` in directory `parent` to the end of regular file
    /// `target` without copying it: its chunk records are re-indexed (the shards stay where they
    /// are), then the entry and its inode are removed, all in one transaction. The target's size
    /// must be a multiple of its chunk size and both files must share chunk size and erasure
    /// scheme. Answered with the target's attributes. (The S3 gateway completes multipart
    /// uploads with it.)
    AppendFile {
        target: Ino,
        parent: Ino,
        name: String,
        mtime: Timestamp,
    },
    /// Lists chunk records in key order (file, then index) after `after` (`None`: from the
    /// start), at most `limit`; answered with `ChunkPage`. Used by rebuild, drain, rebalance
    /// and scrub.
    ScanChunks {
        after: Option<(Ino, u64)>,
        limit: u32,
    },
    /// Moves chunk `index` of `ino` to `placement` with `missing` as its unwritten shards,
    /// after its shards were copied or rebuilt there. Refused with `Changed` unless the record
    /// is still exactly `expected` (the file was not rewritten or moved meanwhile).
    MoveChunk {
        ino: Ino,
        expected: ChunkRecord,
        placement: Placement,
        missing: u64,
    },
    /// Replaces chunk `expected.index` of `ino` by `new`, the same bytes re-encoded under a new
    /// chunk id in another scheme (a chunk written narrower while nodes were down, widened
    /// again; or narrowed to fit fewer nodes); the replaced chunk is queued for deletion.
    /// Refused with `Changed` unless the record is still exactly `expected`.
    ReplaceChunk {
        ino: Ino,
        expected: ChunkRecord,
        new: ChunkRecord,
    },
    /// Operator changes of a storage node's state: `Draining` (move its data off while it
    /// serves), `Up` (cancel a drain), `Out` (remove it from the cluster). Publishes a new
    /// placement map when the set of nodes taking new data changes. Draining or removing a
    /// node that would leave fewer nodes than a scheme in use needs is refused with the reason
    /// unless `force` (chunks are then re-encoded narrower to fit).
    SetNodeState {
        node: NodeId,
        state: NodeState,
        force: bool,
    },
    /// The storage nodes' addresses and states as this metadata server sees them, unless their
    /// version is still `known` (the version the caller holds; 0 for none): then only the
    /// version is answered. Answered with `MetaReply::NodeStates`. What clients poll, cheaply,
    /// to route around nodes that are down.
    NodeStates {
        known: u64,
    },
    /// A process says where its metrics exporter is (every few seconds while it runs); the
    /// server keeps what it heard lately, in memory. Answered with `Ok`.
    Announce {
        process: ProcessInfo,
    },
    /// The processes announced to this server lately (and the server itself). Answered with
    /// `MetaReply::Processes`.
    Processes,
    /// Events of the cluster's event log with sequence numbers after `after`, oldest first, at
    /// most `limit`; with `newest`, the last `limit` of them. Answered with `MetaReply::Events`.
    Events {
        after: u64,
        limit: u32,
        newest: bool,
    },
    /// Every pool; answered with `MetaReply::Pools`.
    ListPools,
    /// Creates a pool named `name` (refused when the name is taken); answered with
    /// `MetaReply::Pools` holding the new pool.
    CreatePool {
        name: String,
        kind: PoolKind,
        default_ec: EcScheme,
    },
    /// Changes a pool's default scheme (`None`: unchanged); answered with `MetaReply::Pools`
    /// holding the pool as changed.
    SetPoolOptions {
        name: String,
        default_ec: Option<EcScheme>,
    },
    /// Puts directory `ino` (new files below it inherit the pool) or a regular file without data
    /// in pool `pool` (by name), with the pool's default scheme as its scheme (a `SetLayout`
    /// after it chooses another). Answered with the inode's attributes.
    SetPool {
        ino: Ino,
        pool: String,
    },
    /// The file pool policies in order; answered with `MetaReply::Policies`.
    ListPolicies,
    /// Adds a file pool policy before the policy named `before` (`None`: last). Refused when
    /// its name is taken, its target pool does not exist, it is malformed, or it would come
    /// after a policy without conditions (which matches every file, so it could never match).
    /// Answered with `MetaReply::Policies`, the list as changed.
    AddPolicy {
        policy: FilePolicy,
        before: Option<String>,
    },
    /// Removes the policy named `name`; answered with `MetaReply::Policies`.
    RemovePolicy {
        name: String,
    },
    /// `AllocChunks` in pool `pool` (by name) with scheme `ec` (`None`: the pool's default)
    /// instead of the file's: what a job moving a file to another pool writes its chunks with.
    AllocChunksIn {
        ino: Ino,
        count: u32,
        avoid: Vec<NodeId>,
        pool: String,
        ec: Option<EcScheme>,
    },
    /// Puts regular file `ino`, whose every chunk is already in pool `pool` (by name), in that
    /// pool with scheme `ec` (`None`: the pool's default), so that data written to it later
    /// goes there too; refused with `Changed` while a chunk is elsewhere. The last step of a
    /// job moving the file. Answered with the file's attributes.
    SetFilePool {
        ino: Ino,
        pool: String,
        ec: Option<EcScheme>,
    },
    /// Records that files were read at `atime` (relatime: a file's atime changes only when it
    /// is not later than its mtime or ctime, or is a day old), all in one transaction: readers
    /// batch them, so reading costs no metadata round trip per read. Inodes that no longer
    /// exist are passed over. Answered with `Ok`.
    TouchAtimes {
        inos: Vec<Ino>,
        atime: Timestamp,
    },
    /// Every job's record; answered with `MetaReply::Jobs`.
    ListJobs,
    /// An operator's action on job `name`; answered with `MetaReply::Jobs` holding the job as
    /// changed. Refused with the reason when the job's state does not allow it (pausing a job
    /// that does not run, ...).
    ControlJob {
        name: String,
        action: JobAction,
    },
    /// The job runner's report on run `info.run` of job `info.name`: its progress, and with
    /// `info.state` `Done`, `Failed` or `Cancelled`, its end. Ignored (answered with the record as
    /// it is) when the record is on another run or the run was cancelled meanwhile, so that an
    /// operator's action is never undone by a report in flight. A report of a newer run than
    /// the record's, while no run is under way, records it (a run the runner starts by
    /// itself). Answered with
    /// `MetaReply::Jobs` holding the record.
    ReportJob {
        info: JobInfo,
    },
    /// Records chunks that need the repair job's attention (shards missing, a narrower scheme
    /// than their file's, placed by an older map): `(file, index, chunk id)`. Answered with
    /// `Ok`.
    QueueChunks {
        chunks: Vec<(Ino, u64, ChunkId)>,
    },
    /// Chunks queued for the repair job after `after`, at most `limit`, with their current
    /// records (entries whose chunk is gone or was replaced are dropped); answered with
    /// `ChunkPage`.
    ScanQueue {
        after: Option<(Ino, u64)>,
        limit: u32,
    },
    /// Removes queue entries `(file, index, chunk id)` whose chunk is still the one named (an
    /// entry queued again for a newer chunk stays).
    Dequeue {
        chunks: Vec<(Ino, u64, ChunkId)>,
    },
    /// Sets the quota of directory `ino` (`None`: removes it). Setting one on a directory with
    /// content counts its tree once, in the same transaction. Answered with `MetaReply::Quotas`
    /// holding the quota as set (empty when removed).
    SetQuota {
        ino: Ino,
        limits: Option<QuotaLimits>,
    },
    /// The quota of directory `ino`; with `nearest`, the quota of the nearest directory at or
    /// above `ino` that has one (what `df` below it shows). Answered with `MetaReply::Quotas`,
    /// empty when there is none.
    GetQuota {
        ino: Ino,
        nearest: bool,
    },
    /// Every quota; answered with `MetaReply::Quotas`.
    ListQuotas,
    /// The files in the trash, oldest first; answered with `MetaReply::Trash`.
    ListTrash,
    /// Puts the trashed file `id` back at the path it was deleted from, or at `to` (a path)
    /// when given. Answered with the file's attributes.
    RestoreTrash {
        id: String,
        to: Option<String>,
    },
    /// Deletes trashed files for good: `id`, or (empty `id`) every one deleted before
    /// `before_ms` (wall clock). Answered with `MetaReply::Trash` holding those purged.
    PurgeTrash {
        id: String,
        before_ms: u64,
    },
    /// Takes snapshot `name` of directory `root`: O(1) in the size of the tree, atomic with
    /// every other change; with `retain_until_ms` (wall clock, 0 for none) it is locked (WORM)
    /// from the start: nothing deletes it before then. Answered with `MetaReply::Snapshots`
    /// holding it.
    SnapshotCreate {
        root: Ino,
        name: String,
        retain_until_ms: u64,
    },
    /// The snapshots of directory `root` (of every directory for `None`), with the bytes only
    /// each holds; answered with `MetaReply::Snapshots`.
    SnapshotList {
        root: Option<Ino>,
    },
    /// Deletes snapshot `name` of `root`; the chunks only it held go to GC. Answered with
    /// `MetaReply::Snapshots` holding it.
    SnapshotDelete {
        root: Ino,
        name: String,
    },
    /// The paths under `root` added, removed or changed from snapshot `a` to snapshot `b`
    /// (`None`: the live tree); answered with `MetaReply::SnapshotDiff`.
    SnapshotDiff {
        root: Ino,
        a: String,
        b: Option<String>,
    },
    /// Brings `path` (relative to `root`; empty: the whole tree) back from snapshot `name`
    /// into the live tree; answered with `MetaReply::Restored`.
    SnapshotRestore {
        root: Ino,
        name: String,
        path: String,
    },
    /// Chunks that only snapshots hold (a preserved version's chunk whose id the live record
    /// no longer has), from the version key after `after` (an opaque cursor: the `next` of the
    /// previous page), looking at `limit` versions at most; answered with `HeldChunkPage`. The
    /// repair job moves and rebuilds them like live chunks (`MoveChunk` re-places every record
    /// of the chunk).
    ScanHeldChunks {
        after: Option<Vec<u8>>,
        limit: u32,
    },
    /// A record of chunk `id`, once at `index` of file `ino`, wherever it is still held: that
    /// slot's or a clone's live record, or a snapshot's version (where its shards are, for the
    /// repair job's check before it deletes an old copy); answered with `HeldChunkPage`, empty
    /// when nothing holds it.
    HeldChunk {
        ino: Ino,
        index: u64,
        id: ChunkId,
    },
    /// Makes file `name` in `parent` a clone of regular file `src` (a live file, or a file of
    /// a snapshot view): same contents, mode and owner, sharing every chunk (no byte copied);
    /// a later write to either file does not show through the other. Answered with `Entry`.
    CloneFile {
        src: Ino,
        parent: Ino,
        name: String,
    },
    /// Locks snapshot `name` of `root` (WORM) until `until_ms` (wall clock): nothing deletes
    /// it before then, and the date can be moved later but never earlier. Answered with
    /// `MetaReply::Snapshots` holding it.
    SnapshotRetain {
        root: Ino,
        name: String,
        until_ms: u64,
    },
    /// The ingest rules; answered with `MetaReply::IngestRules`.
    ListIngestRules,
    /// Adds an ingest rule; refused when its name is taken, it is malformed, or its trees
    /// overlap another rule's so that one rule's variants would land in another's source.
    /// Answered with `MetaReply::IngestRules`, every rule as changed.
    AddIngestRule {
        rule: IngestRule,
    },
    /// Removes the ingest rule named `name` (the variants it wrote stay); answered with
    /// `MetaReply::IngestRules`.
    RemoveIngestRule {
        name: String,
    },
    /// Locks the tree at `ino` (a directory and everything below it, or one file) until
    /// `until_ms` (wall clock, WORM): until then nothing in it can be changed, renamed or
    /// deleted by any front end. A date already later is kept; the tree's own date is never
    /// moved earlier (refused). Answered with `MetaReply::Retained`.
    RetainTree {
        ino: Ino,
        until_ms: u64,
    },
    /// A front end reports the requests it refused for failed authentication since its last
    /// report (bad signatures, unknown access keys, unsigned requests where anonymous access
    /// is off); the server records one `auth_failure` event. Answered with `Ok`.
    ReportAuthFailures {
        /// Which front end ("S3 gateway 10.0.0.5:9000"); at most [`AUDIT_TEXT_BYTES_MAX`].
        front: String,
        refused: u64,
        /// The latest refusal: its code, client address and access key; at most
        /// [`AUDIT_TEXT_BYTES_MAX`].
        latest: String,
    },
    /// Changes the cluster's tenants, users or S3 keys (an administrative operation); answered
    /// with `MetaReply::Identities`, all of them as changed.
    ChangeIdentity {
        change: IdentityChange,
    },
    /// The tenants, users and S3 keys (never a secret); answered with `MetaReply::Identities`.
    ListIdentities,
    /// An S3 access key's secret and whom it acts as, for the S3 gateway; answered with
    /// `MetaReply::S3Key` (`None`: no such key). Refused to client credentials.
    LookupS3Key {
        access_key: String,
    },
    /// Resolves a path as `Resolve` does, checking POSIX permissions as `caller`: search
    /// (execute) on every directory walked and `want` ([`crate::identity::Access::bits`]) on
    /// what the path names. Refused with `PermissionDenied` naming the path where it failed.
    ResolveAs {
        path: String,
        caller: Caller,
        want: u8,
    },
    /// `Lookup` that, when the name is a regular file, also returns the records of its chunks
    /// `0 .. count` that exist, read in the same transaction as the attributes: answered with
    /// `MetaReply::Chunks` for a regular file (as `GetChunks` would), `MetaReply::Attr` for
    /// anything else. A client opening a file it just looked up needs no other round trip to
    /// the metadata service.
    LookupChunks {
        parent: Ino,
        name: String,
        count: u64,
    },
}

/// Answers of the metadata service, one variant per kind of result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaReply {
    Ok,
    Attr(Attr),
    Entries {
        entries: Vec<DirEntry>,
        more: bool,
    },
    Target(String),
    Value(Vec<u8>),
    Names(Vec<String>),
    StatFs(StatFs),
    Chunks {
        attr: Attr,
        chunks: Vec<ChunkRecord>,
    },
    /// The answer to `AllocChunks`: ids and placements, the map they refer to, and the scheme
    /// to encode them in.
    Alloc {
        chunks: Vec<(ChunkId, Placement)>,
        map: PlacementMap,
        ec: EcScheme,
    },
    Map(PlacementMap),
    Node {
        id: NodeId,
        map_version: u32,
    },
    /// The answer to a heartbeat: the newest placement map version, and the cluster's bytes of
    /// shards waiting for the GC and at most how long until they are freed (a node that finds
    /// its drives full says so to the writer).
    Heartbeat {
        map_version: u32,
        bytes_pending_delete: u64,
        pending_delete_within_ms: u64,
    },
    Status(ClusterStatus),
    /// The answer to `Lock` and `TestLock`: whether the lock was (or would be) granted, and if
    /// not, one conflicting lock of another owner.
    Lock {
        granted: bool,
        conflict: Option<LockRange>,
    },
    /// The answer to `ScanChunks`: the records, each with its file and the file's scheme, and
    /// whether there may be more.
    ChunkPage {
        chunks: Vec<ScannedChunk>,
        more: bool,
    },
    /// The answer to `Create` (of a new file), `Mkdir`, `Mknod`, `Symlink` and `Link`: the
    /// entry's inode, and the directory's attributes after the change (post-operation
    /// attributes, as NFS's: a client can cache them instead of asking again).
    Entry {
        attr: Attr,
        dir: Attr,
    },
    /// The answer to `Unlink` and `Rmdir`: the inode the removed entry named, and the
    /// directory's attributes after the change.
    Removed {
        ino: Ino,
        dir: Attr,
    },
    /// The answer to `NodeStates`: the version of the node states (a digest of every node's
    /// id, address and state: equal versions mean equal states, whichever metadata server
    /// answers), and the nodes, or none when `version` is the one the caller said it knew.
    NodeStates {
        version: u64,
        nodes: Vec<NodeBrief>,
    },
    /// The answer to `Processes`.
    Processes(Vec<ProcessInfo>),
    /// The answer to `Events`: the events, and the sequence number the next event will get
    /// (what to ask after, to follow the log).
    Events {
        events: Vec<Event>,
        next: u64,
    },
    /// The answer to `ListPools`, `CreatePool` and `SetPoolOptions`.
    Pools(Vec<PoolInfo>),
    /// The answer to `ListPolicies`, `AddPolicy` and `RemovePolicy`: every policy, in order.
    Policies(Vec<FilePolicy>),
    /// The answer to `ListJobs`, `ControlJob` and `ReportJob`.
    Jobs(Vec<JobInfo>),
    /// The answer to `SetQuota`, `GetQuota` and `ListQuotas`.
    Quotas(Vec<QuotaInfo>),
    /// The answer to `ListTrash` and `PurgeTrash`.
    Trash(Vec<TrashEntry>),
    /// The answer to `SnapshotCreate`, `SnapshotList` and `SnapshotDelete`.
    Snapshots(Vec<SnapshotInfo>),
    /// The answer to `SnapshotDiff`: the changes in path order, and whether the list was cut
    /// at its limit.
    SnapshotDiff {
        changes: Vec<SnapshotChange>,
        cut: bool,
    },
    /// The answer to `SnapshotRestore`: files brought back, directories made again, entries
    /// left out (another kind of file holds the name, or neither file nor directory).
    Restored {
        files: u64,
        dirs: u64,
        skipped: u64,
    },
    /// Chunks only snapshots hold; `next` is the cursor of the following page (`None`: done).
    /// `file_ec` is the chunk's own scheme and `file_pool` the pool that holds it: such a
    /// chunk is moved as it is, never re-encoded.
    HeldChunkPage {
        chunks: Vec<ScannedChunk>,
        next: Option<Vec<u8>>,
    },
    /// The answer to `ListIngestRules`, `AddIngestRule` and `RemoveIngestRule`: every rule, in
    /// name order.
    IngestRules(Vec<IngestRule>),
    /// The answer to `RetainTree`: how many files and directories were locked, and until when.
    Retained {
        inodes: u64,
        until_ms: u64,
    },
    /// The answer to `ChangeIdentity` and `ListIdentities`.
    Identities(Identities),
    /// The answer to `LookupS3Key`.
    S3Key(Option<Box<S3KeyGrant>>),
}

/// One chunk record found by `ScanChunks`, with what the data mover needs to judge it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScannedChunk {
    pub ino: Ino,
    pub rec: ChunkRecord,
    /// The file's scheme: a chunk coded narrower (written while nodes were down) is widened
    /// back to it when the nodes allow.
    pub file_ec: EcScheme,
    /// The file's pool.
    pub file_pool: PoolId,
}

/// What the metadata service sends back for a [`MetaCall`].
pub type MetaResult = Result<MetaReply, WireError>;

/// Shard header fields sent with `PutShard` and returned with `GetShard`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub key: ShardKey,
    pub ec: EcScheme,
    /// Length of the shard's data in bytes.
    pub len: u32,
    /// crc32c of each [`SHARD_BLOCK_BYTES`] block of the shard data.
    pub block_crcs: Vec<u32>,
}

/// Storage service operations. Shard data travels in the frame's data section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StorageOp {
    /// Stores a shard durably (data section: the shard bytes). Overwriting an existing shard
    /// with different content is refused: chunks are copy-on-write.
    PutShard {
        info: ShardInfo,
    },
    /// Reads `len` bytes at `offset` of a shard; returns whole blocks covering that range
    /// (the reply says where they start) so the client can verify them.
    GetShard {
        key: ShardKey,
        offset: u32,
        len: u32,
    },
    DeleteShards {
        keys: Vec<ShardKey>,
    },
    /// Lists shard keys greater than `after`, at most `limit`.
    ListShards {
        after: Option<ShardKey>,
        limit: u32,
    },
    Stat,
    /// The node's per-stage latency totals (`crate::stages`), for a benchmark's breakdown.
    Stages,
    /// Reads exactly bytes `offset .. offset + len` of a shard (`len == 0`, or past the end:
    /// to the end). The node reads and verifies the whole blocks that hold them, but sends only
    /// the bytes asked for, with what a reader needs to check them against the shard's block
    /// checksums itself (see `StorageReply::Range`).
    ReadRange {
        key: ShardKey,
        offset: u32,
        len: u32,
    },
    /// Verifies the node's own shards with keys after `after` (at most `limit`) where they lie:
    /// header, block table and every block, read from the drive. Answered with
    /// `StorageReply::Scrubbed`; no shard data crosses the network.
    Scrub {
        after: Option<ShardKey>,
        limit: u32,
    },
}

/// Answers of the storage service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StorageReply {
    Ok,
    /// Data section: the shard bytes from `offset` (block-aligned) on.
    Shard {
        info: ShardInfo,
        offset: u32,
    },
    Deleted {
        count: u32,
    },
    Keys(Vec<ShardKey>),
    Stat {
        node: NodeId,
        drives: Vec<DriveInfo>,
    },
    /// The answer to `Stages`.
    Stages(Vec<crate::stages::StageTotal>),
    /// The answer to `ReadRange`. Data section: exactly the bytes asked for (cut at the end of
    /// the shard). `head_crc` is the crc32c of the bytes of the first block they touch that come
    /// before them, `tail_crc` that of the bytes of the last block they touch that come after
    /// them, so that `crc32c(head ‖ bytes ‖ tail)` of each block can be checked against
    /// `info.block_crcs` (tied to the metadata) without the whole blocks crossing the network.
    Range {
        info: ShardInfo,
        head_crc: u32,
        tail_crc: u32,
    },
    /// The answer to `Scrub`: shards verified and their bytes, the damaged ones (with why),
    /// the last key looked at (where the next page starts) and whether there may be more.
    Scrubbed {
        checked: u32,
        bytes: u64,
        bad: Vec<(ShardKey, String)>,
        last: Option<ShardKey>,
        more: bool,
    },
}

/// What the storage service sends back for a [`StorageOp`].
pub type StorageResult = Result<StorageReply, WireError>;
