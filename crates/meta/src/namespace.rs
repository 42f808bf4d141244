//! The namespace: inodes, directory entries, symlinks, hard links, extended attributes, file
//! layouts and chunk records, and the idempotency of their mutations.
//!
//! Every operation here runs inside one key-value transaction handed in by the caller, so it
//! sees a serializable snapshot and commits all of its writes or none. Operations never keep
//! state between calls: anything they need (a fresh inode number, the time) arrives in [`Ctx`],
//! prepared outside the transaction so that a retried transaction body has no side effects.
//!
//! Permission checks are deliberately absent: they belong to the front ends, which know the
//! caller's credentials. Validation of names, kinds and invariants (a directory's `nlink`, its
//! parent pointer, chunk records within the file size) is here.

use crate::identity;
use crate::ingest;
use crate::jobs;
use crate::keys::{self, DentryRec, DirTimesRec, GcRec, InodeRec, RequestRec, Stat};
use crate::policies;
use crate::pools;
use crate::quota;
use crate::retain;
use crate::store::{self, abort, fail, get, put, transact, TxResult};
use crate::trash;
use kv::{KvEngine, KvTxn};
use std::collections::HashMap;
use wire::identity::{permits as identity_permits, Access, Caller};
use wire::{
    Attr, ChunkRecord, DirEntry, EcScheme, FileKind, Ino, MetaOp, MetaReply, PoolId, RenameMode, SetAttr, Timestamp,
    WireError, XattrMode, NAME_BYTES_MAX, ROOT_INO, SYMLINK_BYTES_MAX, XATTR_VALUE_BYTES_MAX,
};

/// Most entries one `ReadDir` returns, whatever the caller asks for.
pub const READDIR_ENTRIES_MAX: u32 = 1024;
/// Most chunk records one `GetChunks` returns or one `CommitChunks` publishes.
pub const CHUNKS_PER_CALL_MAX: u64 = 1024;
/// Longest path `Resolve` accepts, as Linux's PATH_MAX.
pub const PATH_BYTES_MAX: usize = 4096;
/// Longest extended attribute name, as Linux's XATTR_NAME_MAX.
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Smallest chunk size a layout may ask for: one checksum block.
pub const CHUNK_BYTES_MIN: u32 = wire::SHARD_BLOCK_BYTES;
/// Largest chunk size a layout may ask for.
pub const CHUNK_BYTES_MAX: u32 = 64 << 20;
/// Deepest directory nesting walked when checking that a rename does not create a cycle; a
/// longer walk means the parent pointers are damaged.
const DEPTH_MAX: usize = 1 << 16;

/// What an operation needs from outside its transaction.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// The time stamped on changed inodes.
    pub now: Timestamp,
    /// Wall-clock milliseconds, for idempotency expiry and GC grace.
    pub now_ms: u64,
    /// A fresh inode number for operations that create one.
    pub new_ino: Option<Ino>,
    /// How long the reply of a mutation is kept for retries.
    pub request_ttl_ms: u64,
    /// Whether deleted files go to the trash (`trash_days > 0`); an `Unlink` then carries a
    /// fresh inode number in `new_ino` for the trash directory, should it not exist yet.
    pub trash: bool,
}

impl Ctx {
    pub(crate) fn new_ino(&self) -> TxResult<Ino> {
        match self.new_ino {
            Some(ino) => Ok(ino),
            None => fail!(Internal, "no inode number was reserved for this operation"),
        }
    }
}

/// Whether `op` changes the namespace, so that its reply is recorded under its request id.
pub fn is_mutation(op: &MetaOp) -> bool {
    matches!(
        op,
        MetaOp::SetAttr { .. }
            | MetaOp::Create { .. }
            | MetaOp::Mkdir { .. }
            | MetaOp::Mknod { .. }
            | MetaOp::Symlink { .. }
            | MetaOp::Link { .. }
            | MetaOp::Unlink { .. }
            | MetaOp::Rmdir { .. }
            | MetaOp::Rename { .. }
            | MetaOp::SetXattr { .. }
            | MetaOp::RemoveXattr { .. }
            | MetaOp::SetLayout { .. }
            | MetaOp::CommitChunks { .. }
            | MetaOp::AppendFile { .. }
            | MetaOp::AbandonChunks { .. }
            | MetaOp::ReplaceChunk { .. }
            | MetaOp::CreatePool { .. }
            | MetaOp::SetPoolOptions { .. }
            | MetaOp::SetPool { .. }
            | MetaOp::AddPolicy { .. }
            | MetaOp::RemovePolicy { .. }
            | MetaOp::AddIngestRule { .. }
            | MetaOp::RemoveIngestRule { .. }
            | MetaOp::ChangeIdentity { .. }
            | MetaOp::RetainTree { .. }
            | MetaOp::SetFilePool { .. }
            | MetaOp::ControlJob { .. }
            | MetaOp::SetQuota { .. }
            | MetaOp::RestoreTrash { .. }
            | MetaOp::PurgeTrash { .. }
            | MetaOp::CloneFile { .. }
            | MetaOp::SnapshotCreate { .. }
            | MetaOp::SnapshotDelete { .. }
            | MetaOp::SnapshotRetain { .. }
    )
}

/// Whether `op` may create an inode (and so needs [`Ctx::new_ino`]).
pub fn needs_ino(op: &MetaOp) -> bool {
    matches!(
        op,
        MetaOp::Create { .. }
            | MetaOp::Mkdir { .. }
            | MetaOp::Mknod { .. }
            | MetaOp::Symlink { .. }
            | MetaOp::CloneFile { .. }
    )
}

/// Whether `op` is answered by this module (the rest are the cluster manager's).
pub fn is_namespace_op(op: &MetaOp) -> bool {
    !matches!(
        op,
        MetaOp::StatFs
            | MetaOp::AllocChunks { .. }
            | MetaOp::GetMap { .. }
            | MetaOp::RegisterNode { .. }
            | MetaOp::Heartbeat { .. }
            | MetaOp::Status { .. }
            | MetaOp::Lock { .. }
            | MetaOp::TestLock { .. }
            | MetaOp::RenewLease { .. }
            | MetaOp::ScanChunks { .. }
            | MetaOp::ScanHeldChunks { .. }
            | MetaOp::HeldChunk { .. }
            | MetaOp::MoveChunk { .. }
            | MetaOp::SetNodeState { .. }
            | MetaOp::NodeStates { .. }
            | MetaOp::AllocChunksIn { .. }
    )
}

/// Checks a directory entry name.
pub fn check_name(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(wire::werr!(Invalid, "{name:?} is not a valid file name"));
    }
    if name.contains('/') || name.contains('\0') {
        return Err(wire::werr!(Invalid, "file name {name:?} contains '/' or NUL"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(wire::werr!(
            NameTooLong,
            "file name of {} bytes exceeds the limit of {NAME_BYTES_MAX}",
            name.len()
        ));
    }
    Ok(())
}

/// Checks an erasure scheme and chunk size for use as a layout.
pub fn check_layout(ec: EcScheme, chunk_bytes: u32) -> Result<(), WireError> {
    ec.validate().map_err(|e| wire::werr!(Invalid, "{e}"))?;
    if !(CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&chunk_bytes) || !chunk_bytes.is_multiple_of(4096) {
        return Err(wire::werr!(
            Invalid,
            "chunk size {chunk_bytes} must be a multiple of 4096 between {CHUNK_BYTES_MIN} and {CHUNK_BYTES_MAX} bytes"
        ));
    }
    Ok(())
}

fn check_xattr_name(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.contains('\0') {
        return Err(wire::werr!(Invalid, "{name:?} is not a valid extended attribute name"));
    }
    if name.len() > XATTR_NAME_BYTES_MAX {
        return Err(wire::werr!(
            NameTooLong,
            "extended attribute name of {} bytes exceeds the limit of {XATTR_NAME_BYTES_MAX}",
            name.len()
        ));
    }
    Ok(())
}

/// Creates the root directory and records the schema version, unless already done. Safe to run
/// concurrently from several metadata servers (the transaction makes one of them win).
pub async fn ensure_root(engine: &dyn KvEngine, ec: EcScheme, chunk_bytes: u32) -> Result<(), WireError> {
    transact(engine, move |txn| {
        Box::pin(async move {
            let schema_key = keys::schema();
            match txn.get(&schema_key).await? {
                Some(value) => {
                    let version = keys::decode_u64(&schema_key, &value).map_err(abort)?;
                    if version > u64::from(keys::SCHEMA_VERSION) {
                        fail!(
                            Internal,
                            "the metadata was written by a newer Trove (schema {version}; this build knows {})",
                            keys::SCHEMA_VERSION
                        );
                    }
                }
                None => txn.put(&schema_key, &keys::encode_u64(u64::from(keys::SCHEMA_VERSION))).await?,
            }
            pools::ensure_default(txn, ec).await?;
            if txn.get(&keys::inode(ROOT_INO)).await?.is_some() {
                return Ok(());
            }
            let now = Timestamp::now();
            let attr = Attr {
                ino: ROOT_INO,
                kind: FileKind::Dir,
                mode: 0o755,
                uid: 0,
                gid: 0,
                size: 0,
                nlink: 2,
                rdev: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                data_version: 0,
                ec,
                chunk_bytes,
                pool: wire::DEFAULT_POOL,
            };
            put(txn, &keys::inode(ROOT_INO), &InodeRec { attr, parent: ROOT_INO, target: String::new(), quota: 0 })
                .await?;
            store::stat_add(txn, Stat::Inodes, ROOT_INO, 1).await?;
            Ok(())
        })
    })
    .await
}

/// Applies one call: returns the recorded answer if this request was answered before,
/// otherwise applies the operation and (for tracked mutations) records its reply in the same
/// transaction.
///
/// A failure is not recorded here: the transaction that found it is not committed, as the
/// operation may have written part of its work before failing. [`record_failure`] records it in
/// a transaction of its own.
pub async fn apply_call(txn: &mut dyn KvTxn, request_id: u128, op: &MetaOp, ctx: &Ctx) -> TxResult<MetaReply> {
    let tracked = is_tracked(request_id, op);
    if tracked && !wire::world::flawed(wire::world::Flaw::ForgetReplies) {
        if let Some(done) = recorded_reply(txn, request_id).await? {
            return done.map_err(abort);
        }
    }
    if is_mutation(op) {
        retain::check(txn, op, ctx.now_ms).await?;
    }
    let reply = apply(txn, op, ctx).await?;
    if tracked {
        let answer = Ok(reply.clone());
        record_reply(txn, request_id, &answer, ctx.now_ms.saturating_add(ctx.request_ttl_ms)).await?;
    }
    Ok(reply)
}

/// Whether call `request_id` of `op` keeps its answer: a mutation with a request id.
pub fn is_tracked(request_id: u128, op: &MetaOp) -> bool {
    request_id != 0 && is_mutation(op)
}

/// Records that tracked request `request_id` failed with `error` (found by a transaction that
/// was not committed), so that a retry or a late copy of it is answered with the same error
/// instead of being applied later, when it might succeed: the client was told it failed.
///
/// If another copy of the request was applied in the meantime, its answer is kept and
/// returned. Otherwise the failure stands as of the failed transaction's reads: no copy of the
/// request had been applied before them (it would have been answered from its record), and
/// none can be after this commit.
pub async fn record_failure(
    engine: &dyn KvEngine,
    request_id: u128,
    error: WireError,
    expires_ms: u64,
) -> Result<MetaReply, WireError> {
    transact(engine, move |txn| {
        let error = error.clone();
        Box::pin(async move {
            if !wire::world::flawed(wire::world::Flaw::ForgetReplies) {
                if let Some(done) = recorded_reply(txn, request_id).await? {
                    return Ok(done);
                }
            }
            let answer = Err(error);
            record_reply(txn, request_id, &answer, expires_ms).await?;
            Ok(answer)
        })
    })
    .await?
}

/// The answer recorded for request `request_id` (not 0) if it was answered already: a retry
/// after a lost answer is answered with it instead of applying the mutation again.
pub async fn recorded_reply(txn: &mut dyn KvTxn, request_id: u128) -> TxResult<Option<Result<MetaReply, WireError>>> {
    Ok(get::<RequestRec>(txn, &keys::request(request_id)).await?.map(|done| done.reply))
}

/// Records `answer` as request `request_id`'s until `expires_ms`, in the transaction that
/// applied it (or, for a failure, found it).
pub async fn record_reply(
    txn: &mut dyn KvTxn,
    request_id: u128,
    answer: &Result<MetaReply, WireError>,
    expires_ms: u64,
) -> TxResult<()> {
    put(txn, &keys::request(request_id), &RequestRec { expires_ms, reply: answer.clone() }).await?;
    txn.put(&keys::request_expiry(expires_ms, request_id), &[keys::FORMAT_V1]).await?;
    Ok(())
}

/// Removes recorded replies that expired before `now_ms`; returns how many. Each page is its own
/// transaction so the sweep never holds a large one.
pub async fn sweep_requests(engine: &dyn KvEngine, now_ms: u64) -> Result<u64, WireError> {
    let mut removed = 0u64;
    loop {
        let count = transact(engine, move |txn| {
            Box::pin(async move {
                let start = [keys::prefix::REQUEST_EXPIRY];
                let end = keys::request_expiry(now_ms, 0);
                let page = txn.scan(&start, &end, store::SCAN_PAGE_ENTRIES_MAX).await?;
                for (key, _) in &page {
                    txn.delete(key).await?;
                    let Some((expires_ms, request_id)) = keys::parse_request_expiry(key) else {
                        continue;
                    };
                    // A request id whose record expired may have been applied again since, with
                    // a later expiry: delete the reply only if it is the one this entry is for.
                    let request_key = keys::request(request_id);
                    if let Some(rec) = get::<keys::RequestHead>(txn, &request_key).await? {
                        if rec.expires_ms == expires_ms {
                            txn.delete(&request_key).await?;
                        }
                    }
                }
                Ok(page.len())
            })
        })
        .await?;
        removed += count as u64;
        if count < store::SCAN_PAGE_ENTRIES_MAX {
            return Ok(removed);
        }
    }
}

/// Applies a namespace operation inside `txn`.
pub async fn apply(txn: &mut dyn KvTxn, op: &MetaOp, ctx: &Ctx) -> TxResult<MetaReply> {
    match op {
        MetaOp::Lookup { parent, name } => lookup(txn, *parent, name).await,
        MetaOp::LookupChunks { parent, name, count } => lookup_chunks(txn, *parent, name, *count).await,
        MetaOp::Resolve { path } => resolve(txn, path).await,
        MetaOp::GetAttr { ino } => Ok(MetaReply::Attr(load_attr(txn, *ino).await?)),
        MetaOp::SetAttr { ino, set } => set_attr(txn, ctx, *ino, set).await,
        MetaOp::Create { parent, name, mode, uid, gid, exclusive } => {
            create(txn, ctx, *parent, name, *mode, *uid, *gid, *exclusive).await
        }
        MetaOp::Mkdir { parent, name, mode, uid, gid } => {
            let new =
                NewInode { kind: FileKind::Dir, mode: *mode, uid: *uid, gid: *gid, rdev: 0, target: String::new() };
            make(txn, ctx, *parent, name, new).await
        }
        MetaOp::Mknod { parent, name, kind, mode, rdev, uid, gid } => {
            if matches!(kind, FileKind::Dir | FileKind::Symlink) {
                fail!(Invalid, "mknod cannot create a {kind:?}; use mkdir or symlink");
            }
            let new = NewInode { kind: *kind, mode: *mode, uid: *uid, gid: *gid, rdev: *rdev, target: String::new() };
            make(txn, ctx, *parent, name, new).await
        }
        MetaOp::Symlink { parent, name, target, uid, gid } => {
            if target.is_empty() || target.contains('\0') {
                fail!(Invalid, "symlink target {target:?} is empty or contains NUL");
            }
            if target.len() > SYMLINK_BYTES_MAX {
                fail!(NameTooLong, "symlink target of {} bytes exceeds the limit of {SYMLINK_BYTES_MAX}", target.len());
            }
            let new = NewInode {
                kind: FileKind::Symlink,
                mode: 0o777,
                uid: *uid,
                gid: *gid,
                rdev: 0,
                target: target.clone(),
            };
            make(txn, ctx, *parent, name, new).await
        }
        MetaOp::ReadLink { ino } => {
            let rec = load(txn, *ino).await?;
            if rec.attr.kind != FileKind::Symlink {
                fail!(Invalid, "{} is not a symbolic link", inode_name(txn, &rec).await?);
            }
            Ok(MetaReply::Target(rec.target))
        }
        MetaOp::Link { ino, new_parent, new_name } => link(txn, ctx, *ino, *new_parent, new_name).await,
        MetaOp::Unlink { parent, name } => unlink(txn, ctx, *parent, name).await,
        MetaOp::Rmdir { parent, name } => rmdir(txn, ctx, *parent, name).await,
        MetaOp::Rename { parent, name, new_parent, new_name, mode } => {
            rename(txn, ctx, *parent, name, *new_parent, new_name, *mode).await
        }
        MetaOp::ReadDir { ino, after, limit } => read_dir(txn, *ino, after, *limit).await,
        MetaOp::SetXattr { ino, name, value, mode } => set_xattr(txn, ctx, *ino, name, value, *mode).await,
        MetaOp::GetXattr { ino, name } => {
            check_xattr_name(name).map_err(abort)?;
            load(txn, *ino).await?;
            let key = keys::xattr(*ino, name);
            match txn.get(&key).await? {
                Some(value) => Ok(MetaReply::Value(keys::decode_bytes(&key, &value).map_err(abort)?)),
                None => {
                    let rec = load(txn, *ino).await?;
                    fail!(NoAttr, "{} has no extended attribute {name:?}", inode_name(txn, &rec).await?)
                }
            }
        }
        MetaOp::ListXattr { ino } => {
            load(txn, *ino).await?;
            let prefix = keys::xattr_prefix(*ino);
            let pairs = store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await?;
            let names =
                pairs.iter().map(|(key, _)| String::from_utf8_lossy(&key[prefix.len()..]).into_owned()).collect();
            Ok(MetaReply::Names(names))
        }
        MetaOp::RemoveXattr { ino, name } => {
            check_xattr_name(name).map_err(abort)?;
            let mut rec = load(txn, *ino).await?;
            let key = keys::xattr(*ino, name);
            if txn.get(&key).await?.is_none() {
                fail!(NoAttr, "{} has no extended attribute {name:?}", inode_name(txn, &rec).await?);
            }
            txn.delete(&key).await?;
            rec.attr.ctime = ctx.now;
            store_inode(txn, &rec).await?;
            Ok(MetaReply::Ok)
        }
        // Whether the cluster can hold the scheme is checked by the service before the
        // transaction (`Cluster::check_layout_fits`).
        MetaOp::SetLayout { ino, ec, chunk_bytes, check: _ } => set_layout(txn, ctx, *ino, *ec, *chunk_bytes).await,
        MetaOp::SetPool { ino, pool } => set_pool(txn, ctx, *ino, pool).await,
        MetaOp::ListPools => {
            Ok(MetaReply::Pools(pools::read_all(txn).await?.iter().map(keys::PoolRec::info).collect()))
        }
        MetaOp::CreatePool { name, kind, default_ec } => {
            let pool = pools::create(txn, name, kind.clone(), *default_ec).await?;
            Ok(MetaReply::Pools(vec![pool.info()]))
        }
        MetaOp::SetPoolOptions { name, default_ec } => {
            let pool = pools::set_options(txn, name, *default_ec).await?;
            Ok(MetaReply::Pools(vec![pool.info()]))
        }
        MetaOp::ListPolicies => Ok(MetaReply::Policies(policies::read(txn).await?)),
        MetaOp::AddPolicy { policy, before } => {
            Ok(MetaReply::Policies(policies::add(txn, policy.clone(), before.as_deref()).await?))
        }
        MetaOp::RemovePolicy { name } => Ok(MetaReply::Policies(policies::remove(txn, name).await?)),
        MetaOp::RetainTree { ino, until_ms } => retain::retain_tree(txn, ctx, *ino, *until_ms).await,
        MetaOp::ListIngestRules => Ok(MetaReply::IngestRules(ingest::read(txn).await?)),
        MetaOp::AddIngestRule { rule } => Ok(MetaReply::IngestRules(ingest::add(txn, rule.clone()).await?)),
        MetaOp::RemoveIngestRule { name } => Ok(MetaReply::IngestRules(ingest::remove(txn, name).await?)),
        MetaOp::ChangeIdentity { change } => {
            Ok(MetaReply::Identities(identity::change(txn, ctx.now_ms, change).await?))
        }
        MetaOp::ListIdentities => Ok(MetaReply::Identities(identity::list(txn).await?)),
        MetaOp::ResolveAs { path, caller, want } => {
            let rec = resolve_walk(txn, path, Some((caller, Access::from_bits(*want)))).await?;
            Ok(MetaReply::Attr(with_dir_times(txn, rec.attr).await?))
        }
        MetaOp::LookupS3Key { access_key } => {
            Ok(MetaReply::S3Key(identity::lookup_key(txn, access_key).await?.map(Box::new)))
        }
        MetaOp::AbandonChunks { ino, chunks } => abandon_chunks(txn, ctx, *ino, chunks).await,
        MetaOp::SetFilePool { ino, pool, ec } => set_file_pool(txn, ctx, *ino, pool, *ec).await,
        MetaOp::TouchAtimes { inos, atime } => touch_atimes(txn, inos, *atime).await,
        MetaOp::ListJobs => jobs::list(txn).await,
        MetaOp::ControlJob { name, action } => jobs::control(txn, ctx.now_ms, name, action).await,
        MetaOp::ReportJob { info } => jobs::report(txn, info).await,
        MetaOp::QueueChunks { chunks } => jobs::queue_chunks(txn, chunks).await,
        MetaOp::ScanQueue { after, limit } => jobs::scan_queue(txn, *after, *limit).await,
        MetaOp::Dequeue { chunks } => jobs::dequeue(txn, chunks).await,
        MetaOp::SetQuota { ino, limits } => quota::set(txn, ctx.now_ms, *ino, *limits).await,
        MetaOp::GetQuota { ino, nearest } => quota::get_quota(txn, *ino, *nearest).await,
        MetaOp::ListQuotas => quota::list(txn).await,
        MetaOp::ListTrash => trash::list(txn).await,
        MetaOp::RestoreTrash { id, to } => trash::restore(txn, ctx, id, to.as_deref()).await,
        MetaOp::PurgeTrash { id, before_ms } => trash::purge(txn, ctx, id, *before_ms).await,
        MetaOp::ReplaceChunk { ino, expected, new } => replace_chunk(txn, ctx, *ino, expected, new).await,
        MetaOp::GetChunks { ino, first, count } => get_chunks(txn, *ino, *first, *count).await,
        MetaOp::CommitChunks { ino, chunks, size, set_size, mtime } => {
            commit_chunks(txn, ctx, *ino, chunks, *size, *set_size, *mtime).await
        }
        MetaOp::AppendFile { target, parent, name, mtime } => {
            append_file(txn, ctx, *target, *parent, name, *mtime).await
        }
        MetaOp::CloneFile { src, parent, name } => crate::clone::clone_file(txn, ctx, *src, *parent, name).await,
        MetaOp::StatFs
        | MetaOp::AllocChunks { .. }
        | MetaOp::GetMap { .. }
        | MetaOp::RegisterNode { .. }
        | MetaOp::Heartbeat { .. }
        | MetaOp::Status { .. }
        | MetaOp::Lock { .. }
        | MetaOp::TestLock { .. }
        | MetaOp::RenewLease { .. }
        | MetaOp::ScanChunks { .. }
        | MetaOp::ScanHeldChunks { .. }
        | MetaOp::HeldChunk { .. }
        | MetaOp::MoveChunk { .. }
        | MetaOp::SetNodeState { .. }
        | MetaOp::NodeStates { .. }
        | MetaOp::Announce { .. }
        | MetaOp::ReportAuthFailures { .. }
        | MetaOp::Processes
        | MetaOp::AllocChunksIn { .. }
        | MetaOp::SnapshotCreate { .. }
        | MetaOp::SnapshotList { .. }
        | MetaOp::SnapshotDelete { .. }
        | MetaOp::SnapshotRetain { .. }
        | MetaOp::SnapshotDiff { .. }
        | MetaOp::SnapshotRestore { .. }
        | MetaOp::Events { .. } => fail!(Internal, "{op:?} is not a namespace operation"),
    }
}

// ---------------------------------------------------------------------------------------------
// Names in error messages.
//
// Clients name inodes by number, but people read the errors (the CLI prints them, the mount and
// the gateways log them), so messages name a directory by its path and an entry by its
// directory's path and its name. Building a path reads one inode record per level, and only on
// the error path: the failed operation's transaction is aborted, so those reads add no
// conflicts, and a successful operation pays nothing. Non-directories have no parent pointer
// (they may have several names): they are named by kind and inode number, and front ends that
// know the path the user gave add it.

/// What a kind of inode is called in messages.
pub(crate) fn kind_name(kind: FileKind) -> &'static str {
    kind.name()
}

/// The path of directory `ino` from the root ("/" for the root, "/a/b" below it), for error
/// messages. Follows parent pointers, taking each directory's name from its inode record (see
/// [`InodeRec::target`]); a directory made before names were recorded is looked up among its
/// parent's entries, reading at most [`NAME_SCAN_ENTRIES_MAX`] of them. A level that cannot be
/// named (a directory removed meanwhile, or damaged metadata) shows as `<inode N>`.
pub async fn dir_path(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<String> {
    let mut names: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    let mut current = ino;
    let mut reached_root = false;
    while bytes <= PATH_BYTES_MAX {
        if current == ROOT_INO {
            reached_root = true;
            break;
        }
        let Some(rec) = get::<InodeRec>(txn, &keys::inode(current)).await? else {
            names.push(format!("<inode {current}>"));
            break;
        };
        let name = match rec.attr.kind {
            FileKind::Dir if !rec.target.is_empty() => Some(rec.target),
            FileKind::Dir => find_entry_name(txn, rec.parent, current).await?,
            _ => None,
        };
        let Some(name) = name else {
            names.push(format!("<inode {current}>"));
            break;
        };
        bytes += name.len() + 1;
        names.push(name);
        current = rec.parent;
    }
    names.reverse();
    let path = names.join("/");
    Ok(match (reached_root, path.is_empty()) {
        (true, true) => "/".to_string(),
        (true, false) => format!("/{path}"),
        // Cut short (deeper than any path can be: damaged parent pointers).
        (false, _) if bytes > PATH_BYTES_MAX => format!(".../{path}"),
        // A level without a name: the path from that level on.
        (false, _) => path,
    })
}

/// Most directory entries [`dir_path`] reads to find the name of one directory whose inode
/// record has none.
const NAME_SCAN_ENTRIES_MAX: usize = 4 * store::SCAN_PAGE_ENTRIES_MAX;

/// The name under which directory `parent` holds `child`, by a bounded scan of its entries.
async fn find_entry_name(txn: &mut dyn KvTxn, parent: Ino, child: Ino) -> TxResult<Option<String>> {
    let prefix = keys::dentry_prefix(parent);
    let end = kv::prefix_end(&prefix);
    let mut from = prefix.clone();
    let mut read = 0usize;
    while read < NAME_SCAN_ENTRIES_MAX {
        let page = txn.scan(&from, &end, store::SCAN_PAGE_ENTRIES_MAX).await?;
        read += page.len();
        for (key, value) in &page {
            if keys::decode::<DentryRec>(key, value).is_ok_and(|e| e.ino == child) {
                return Ok(keys::dentry_name(parent, key).map(str::to_string));
            }
        }
        match page.last() {
            Some((last, _)) if page.len() == store::SCAN_PAGE_ENTRIES_MAX => from = store::after(last),
            _ => break,
        }
    }
    Ok(None)
}

/// The path of entry `name` of directory `parent`, for error messages.
pub(crate) async fn entry_path(txn: &mut dyn KvTxn, parent: Ino, name: &str) -> TxResult<String> {
    let dir = dir_path(txn, parent).await?;
    Ok(format!("{}/{name}", dir.trim_end_matches('/')))
}

/// An inode as error messages name it: a directory by its path, anything else by its kind and
/// number (it has no single path).
async fn inode_name(txn: &mut dyn KvTxn, rec: &InodeRec) -> TxResult<String> {
    Ok(match rec.attr.kind {
        FileKind::Dir => format!("directory {:?}", dir_path(txn, rec.attr.ino).await?),
        kind => format!("{} (inode {})", kind_name(kind), rec.attr.ino),
    })
}

// ---------------------------------------------------------------------------------------------
// Record helpers.

/// Reads an inode; `NotFound` if it does not exist.
pub async fn load(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<InodeRec> {
    match get::<InodeRec>(txn, &keys::inode(ino)).await? {
        Some(rec) => Ok(rec),
        None => fail!(NotFound, "no such file or directory: inode {ino} was removed"),
    }
}

/// Reads a directory inode; `NotDir` if it is something else.
pub(crate) async fn load_dir(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<InodeRec> {
    let rec = load(txn, ino).await?;
    if rec.attr.kind != FileKind::Dir {
        fail!(NotDir, "not a directory: inode {ino} is a {}", kind_name(rec.attr.kind));
    }
    Ok(rec)
}

pub(crate) async fn store_inode(txn: &mut dyn KvTxn, rec: &InodeRec) -> TxResult<()> {
    put(txn, &keys::inode(rec.attr.ino), rec).await
}

pub(crate) async fn get_dentry(txn: &mut dyn KvTxn, parent: Ino, name: &str) -> TxResult<Option<DentryRec>> {
    get(txn, &keys::dentry(parent, name)).await
}

/// Reads the inode a directory entry points to; a missing one means damaged metadata.
pub(crate) async fn load_child(txn: &mut dyn KvTxn, parent: Ino, name: &str, entry: DentryRec) -> TxResult<InodeRec> {
    match get::<InodeRec>(txn, &keys::inode(entry.ino)).await? {
        Some(rec) => Ok(rec),
        None => {
            let path = entry_path(txn, parent, name).await?;
            fail!(Internal, "damaged metadata: entry {path:?} points to missing inode {}", entry.ino)
        }
    }
}

/// Stamps a directory's mtime and ctime (its entries changed) and adds `nlink_delta` to its
/// link count; returns the directory's attributes after the change (the post-operation
/// attributes clients cache). The times go to the directory's [`DirTimesRec`], written without being read, so
/// that concurrent creates and removes in one directory do not conflict; only a change of the
/// link count (a subdirectory made or removed) reads and rewrites the inode. The times shown
/// are those of the change committed last: concurrent changes may commit in another order than
/// their clocks were read, so a directory's mtime can be a few microseconds older than the
/// latest of them (never older than the change before them all).
pub(crate) async fn touch_dir(txn: &mut dyn KvTxn, ino: Ino, nlink_delta: i64, now: Timestamp) -> TxResult<Attr> {
    // The transaction has read the inode already (it checked it is a directory), so this read
    // adds no dependency.
    let mut rec = load(txn, ino).await?;
    if nlink_delta != 0 {
        let nlink = i64::from(rec.attr.nlink) + nlink_delta;
        let Ok(nlink) = u32::try_from(nlink) else {
            let path = dir_path(txn, ino).await?;
            fail!(TooLarge, "directory {path:?} would have a link count of {nlink}");
        };
        rec.attr.nlink = nlink;
        rec.attr.mtime = now;
        rec.attr.ctime = now;
        store_inode(txn, &rec).await?;
    }
    put(txn, &keys::dir_times(ino), &DirTimesRec { mtime: now, ctime: now }).await?;
    // What `with_dir_times` will show, as far as this transaction knows (the record is written
    // blindly, so a concurrent change's later time is not seen here).
    let mut attr = rec.attr;
    attr.mtime = attr.mtime.max(now);
    attr.ctime = attr.ctime.max(now);
    Ok(attr)
}

/// A directory's attributes with its latest entry-change times (see [`touch_dir`]): the later
/// of the inode's and the record's, as other changes (xattrs, renames) stamp the inode's ctime
/// and `set_attr`, the only way to move a time back, deletes the record. Other kinds unchanged.
async fn with_dir_times(txn: &mut dyn KvTxn, mut attr: Attr) -> TxResult<Attr> {
    if attr.kind == FileKind::Dir {
        if let Some(times) = get::<DirTimesRec>(txn, &keys::dir_times(attr.ino)).await? {
            attr.mtime = attr.mtime.max(times.mtime);
            attr.ctime = attr.ctime.max(times.ctime);
        }
    }
    Ok(attr)
}

/// An inode's attributes as clients see them.
pub(crate) async fn load_attr(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<Attr> {
    let rec = load(txn, ino).await?;
    with_dir_times(txn, rec.attr).await
}

/// Queues a chunk no longer referenced for deletion of its shards; returns the bytes its shards
/// hold, which the caller must add to `Stat::PendingDeleteBytes` (once per operation, not per
/// chunk).
pub(crate) async fn queue_gc(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, chunk: ChunkRecord) -> TxResult<u64> {
    let key = keys::gc(chunk.id);
    let rec = GcRec { ino, chunk, queued_ms: ctx.now_ms, done: 0 };
    put(txn, &key, &rec).await?;
    Ok(rec.bytes_held())
}

/// Counts bytes newly queued for deletion (see `Stat::PendingDeleteBytes`).
async fn add_pending_delete(txn: &mut dyn KvTxn, ino: Ino, bytes: u64) -> TxResult<()> {
    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
    store::stat_add(txn, Stat::PendingDeleteBytes, ino, bytes).await
}

/// Removes the chunk records of `ino` from index `first` on, queueing them for GC; returns how
/// many there were.
async fn remove_chunks_from(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, first: u64) -> TxResult<u64> {
    let end = kv::prefix_end(&keys::chunk_prefix(ino));
    let mut from = keys::chunk(ino, first);
    let mut removed = 0u64;
    let mut queued_bytes = 0u64;
    loop {
        let page = txn.scan(&from, &end, store::SCAN_PAGE_ENTRIES_MAX).await?;
        for (key, value) in &page {
            let chunk: ChunkRecord = keys::decode(key, value).map_err(abort)?;
            txn.delete(key).await?;
            queued_bytes += queue_gc(txn, ctx, ino, chunk).await?;
            removed += 1;
        }
        match page.last() {
            Some((last, _)) if page.len() == store::SCAN_PAGE_ENTRIES_MAX => from = store::after(last),
            _ => break,
        }
    }
    store::stat_add(txn, Stat::Chunks, ino, -(removed as i64)).await?;
    add_pending_delete(txn, ino, queued_bytes).await?;
    Ok(removed)
}

/// Deletes an inode with its extended attributes and chunk records (queued for GC).
async fn delete_inode(txn: &mut dyn KvTxn, ctx: &Ctx, rec: &InodeRec) -> TxResult<()> {
    let ino = rec.attr.ino;
    // Freed from its quotas (never refused); a directory's own quota goes with it.
    let domain = quota::counted_in(txn, rec).await?;
    quota::charge(txn, ctx.now_ms, domain, -quota::bytes_of(rec), -1, false).await?;
    if rec.quota == ino {
        txn.delete(&keys::quota(ino)).await?;
    }
    let prefix = keys::xattr_prefix(ino);
    for (key, _) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        txn.delete(&key).await?;
    }
    if rec.attr.kind == FileKind::File {
        remove_chunks_from(txn, ctx, ino, 0).await?;
        store::stat_add(txn, Stat::Files, ino, -1).await?;
    }
    if rec.attr.kind == FileKind::Dir {
        txn.delete(&keys::dir_times(ino)).await?;
    }
    txn.delete(&keys::inode(ino)).await?;
    store::stat_add(txn, Stat::Inodes, ino, -1).await
}

/// Drops one link of a non-directory inode, deleting it with the last link.
pub(crate) async fn drop_link(txn: &mut dyn KvTxn, ctx: &Ctx, mut rec: InodeRec) -> TxResult<()> {
    if rec.attr.nlink <= 1 {
        return delete_inode(txn, ctx, &rec).await;
    }
    rec.attr.nlink -= 1;
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await
}

/// Whether directory `ino` has at least one entry. Scans with limit 1, so a concurrent create
/// in it conflicts with this transaction.
pub(crate) async fn dir_has_entries(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<bool> {
    let prefix = keys::dentry_prefix(ino);
    Ok(!txn.scan(&prefix, &kv::prefix_end(&prefix), 1).await?.is_empty())
}

// ---------------------------------------------------------------------------------------------
// Operations.

async fn lookup(txn: &mut dyn KvTxn, parent: Ino, name: &str) -> TxResult<MetaReply> {
    check_name(name).map_err(abort)?;
    load_dir(txn, parent).await?;
    let Some(entry) = get_dentry(txn, parent, name).await? else {
        let dir = dir_path(txn, parent).await?;
        fail!(NotFound, "no entry {name:?} in directory {dir:?}");
    };
    let attr = load_child(txn, parent, name, entry).await?.attr;
    Ok(MetaReply::Attr(with_dir_times(txn, attr).await?))
}

/// `lookup`, and for a regular file the records of its chunks `0 .. count` from the same
/// transaction (`get_chunks`'s answer).
async fn lookup_chunks(txn: &mut dyn KvTxn, parent: Ino, name: &str, count: u64) -> TxResult<MetaReply> {
    match lookup(txn, parent, name).await? {
        MetaReply::Attr(attr) if attr.kind == FileKind::File => get_chunks(txn, attr.ino, 0, count).await,
        other => Ok(other),
    }
}

async fn resolve(txn: &mut dyn KvTxn, path: &str) -> TxResult<MetaReply> {
    let rec = resolve_rec(txn, path).await?;
    Ok(MetaReply::Attr(with_dir_times(txn, rec.attr).await?))
}

/// The inode a slash-separated path from the root names (following no symlinks).
pub(crate) async fn resolve_rec(txn: &mut dyn KvTxn, path: &str) -> TxResult<InodeRec> {
    resolve_walk(txn, path, None).await
}

/// Refuses `caller` access `want` to `rec` (at path `walked`) unless POSIX permissions allow it.
fn check_access(rec: &InodeRec, walked: &str, caller: &Caller, want: Access) -> TxResult<()> {
    let a = &rec.attr;
    if !identity_permits(caller, a.uid, a.gid, a.mode, want) {
        fail!(
            PermissionDenied,
            "uid {} may not {} {walked:?} (mode {:04o}, owner {}:{})",
            caller.uid,
            match (want.read, want.write, want.exec, a.kind == FileKind::Dir) {
                (false, false, true, true) => "search".to_string(),
                (true, false, _, true) => "list".to_string(),
                (false, true, _, true) => "change entries of".to_string(),
                _ => format!("have {} access to", want.letters()),
            },
            a.mode & 0o7777,
            a.uid,
            a.gid
        );
    }
    Ok(())
}

/// As [`resolve_rec`], checking permissions as `caller` when given: search on every directory
/// walked, and the access asked on what the path names.
async fn resolve_walk(txn: &mut dyn KvTxn, path: &str, caller: Option<(&Caller, Access)>) -> TxResult<InodeRec> {
    if path.len() > PATH_BYTES_MAX {
        fail!(NameTooLong, "path of {} bytes exceeds the limit of {PATH_BYTES_MAX}", path.len());
    }
    let mut current = load(txn, ROOT_INO).await?;
    // The path walked so far as the caller spelled it, for error messages.
    let mut walked = String::from("/");
    for component in path.split('/') {
        match component {
            "" | "." => continue,
            ".." => {
                // The root's parent pointer is itself, so ".." at the root stays there.
                let parent = current.parent;
                current = load(txn, parent).await?;
                walked = format!("{}/..", walked.trim_end_matches('/'));
                continue;
            }
            _ => {}
        }
        if current.attr.kind != FileKind::Dir {
            fail!(
                NotDir,
                "{walked:?} is a {}, not a directory, so it has no entry {component:?}",
                kind_name(current.attr.kind)
            );
        }
        check_name(component).map_err(abort)?;
        if let Some((caller, _)) = caller {
            check_access(&current, &walked, caller, Access::X)?;
        }
        let dir = current.attr.ino;
        let Some(entry) = get_dentry(txn, dir, component).await? else {
            fail!(NotFound, "no entry {component:?} in directory {walked:?}");
        };
        current = load_child(txn, dir, component, entry).await?;
        walked = format!("{}/{component}", walked.trim_end_matches('/'));
    }
    if let Some((caller, want)) = caller {
        check_access(&current, &walked, caller, want)?;
    }
    Ok(current)
}

async fn set_attr(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, set: &SetAttr) -> TxResult<MetaReply> {
    let mut rec = load(txn, ino).await?;
    if rec.attr.kind == FileKind::Dir {
        // The inode takes the directory's latest times, and holds them alone from now on.
        rec.attr = with_dir_times(txn, rec.attr).await?;
        txn.delete(&keys::dir_times(ino)).await?;
    }
    if let Some(size) = set.size {
        match rec.attr.kind {
            FileKind::File => {}
            FileKind::Dir => {
                let path = dir_path(txn, ino).await?;
                fail!(IsDir, "{path:?} is a directory; its size cannot be set")
            }
            kind => {
                fail!(Invalid, "a {} (inode {ino}) has no size that can be set; only regular files do", kind_name(kind))
            }
        }
        if size != rec.attr.size {
            let delta = i128::from(size) - i128::from(rec.attr.size);
            let delta = i64::try_from(delta).unwrap_or(if delta > 0 { i64::MAX } else { i64::MIN });
            quota::charge(txn, ctx.now_ms, rec.quota, delta, 0, true).await?;
            if size < rec.attr.size {
                truncate_chunks(txn, ctx, ino, rec.attr.chunk_bytes, size).await?;
            }
            rec.attr.size = size;
            rec.attr.data_version += 1;
            rec.attr.mtime = ctx.now;
        }
    }
    let attr = &mut rec.attr;
    if let Some(mode) = set.mode {
        attr.mode = mode & 0o7777;
    }
    if let Some(uid) = set.uid {
        attr.uid = uid;
    }
    if let Some(gid) = set.gid {
        attr.gid = gid;
    }
    if let Some(atime) = set.atime {
        attr.atime = atime;
    }
    if let Some(mtime) = set.mtime {
        attr.mtime = mtime;
    }
    attr.ctime = set.ctime.unwrap_or(ctx.now);
    store_inode(txn, &rec).await?;
    Ok(MetaReply::Attr(rec.attr))
}

/// Shrinks the chunk records of a file to `size` bytes: records wholly past it are removed and
/// queued for GC; the record of the last, partial chunk has its `len` clamped, so that bytes
/// past the new end read as zeros if the file is extended later (the shard data still holds the
/// old bytes; readers honour `len`).
async fn truncate_chunks(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, chunk_bytes: u32, size: u64) -> TxResult<()> {
    let chunk_bytes = u64::from(chunk_bytes.max(1));
    let partial = size % chunk_bytes;
    if partial != 0 {
        let key = keys::chunk(ino, size / chunk_bytes);
        if let Some(mut chunk) = get::<ChunkRecord>(txn, &key).await? {
            if u64::from(chunk.len) > partial {
                chunk.len = partial as u32;
                put(txn, &key, &chunk).await?;
            }
        }
    }
    remove_chunks_from(txn, ctx, ino, size.div_ceil(chunk_bytes)).await?;
    Ok(())
}

/// What `make` creates.
pub(crate) struct NewInode {
    pub(crate) kind: FileKind,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) rdev: u32,
    pub(crate) target: String,
}

#[allow(clippy::too_many_arguments)]
async fn create(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    parent: Ino,
    name: &str,
    mode: u32,
    uid: u32,
    gid: u32,
    exclusive: bool,
) -> TxResult<MetaReply> {
    if !exclusive {
        check_name(name).map_err(abort)?;
        load_dir(txn, parent).await?;
        if let Some(entry) = get_dentry(txn, parent, name).await? {
            let existing = load_child(txn, parent, name, entry).await?;
            if existing.attr.kind == FileKind::Dir {
                let path = entry_path(txn, parent, name).await?;
                fail!(IsDir, "{path:?} is a directory");
            }
            return Ok(MetaReply::Attr(existing.attr));
        }
    }
    let new = NewInode { kind: FileKind::File, mode, uid, gid, rdev: 0, target: String::new() };
    make(txn, ctx, parent, name, new).await
}

/// Creates an inode of any kind under `parent`; `Exists` if the name is taken.
pub(crate) async fn make(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    parent: Ino,
    name: &str,
    new: NewInode,
) -> TxResult<MetaReply> {
    check_name(name).map_err(abort)?;
    let dir = load_dir(txn, parent).await?;
    let entry_key = keys::dentry(parent, name);
    if txn.get(&entry_key).await?.is_some() {
        let path = entry_path(txn, parent, name).await?;
        fail!(Exists, "{path:?} already exists");
    }
    let ino = ctx.new_ino()?;
    let is_dir = new.kind == FileKind::Dir;
    let now = ctx.now;
    let attr = Attr {
        ino,
        kind: new.kind,
        mode: new.mode & 0o7777,
        uid: new.uid,
        gid: new.gid,
        size: if new.kind == FileKind::Symlink { new.target.len() as u64 } else { 0 },
        nlink: if is_dir { 2 } else { 1 },
        rdev: new.rdev,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        data_version: 0,
        // New files and directories inherit the layout of the directory they are created in.
        ec: dir.attr.ec,
        chunk_bytes: dir.attr.chunk_bytes,
        pool: dir.attr.pool,
    };
    let domain = quota::domain_of_entries(&dir);
    quota::charge(txn, ctx.now_ms, domain, 0, 1, true).await?;
    let rec = InodeRec {
        attr,
        parent: if is_dir { parent } else { 0 },
        // A directory keeps its own name, so that error messages can name its path.
        target: if is_dir { name.to_string() } else { new.target },
        quota: domain,
    };
    store_inode(txn, &rec).await?;
    put(txn, &entry_key, &DentryRec { ino, kind: new.kind }).await?;
    let dir = touch_dir(txn, parent, i64::from(is_dir), now).await?;
    store::stat_add(txn, Stat::Inodes, ino, 1).await?;
    if new.kind == FileKind::File {
        store::stat_add(txn, Stat::Files, ino, 1).await?;
    }
    Ok(MetaReply::Entry { attr: rec.attr, dir })
}

async fn link(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, new_parent: Ino, new_name: &str) -> TxResult<MetaReply> {
    check_name(new_name).map_err(abort)?;
    let mut rec = load(txn, ino).await?;
    if rec.attr.kind == FileKind::Dir {
        let path = dir_path(txn, ino).await?;
        fail!(IsDir, "{path:?} is a directory; directories cannot be hard-linked");
    }
    let dir = load_dir(txn, new_parent).await?;
    if quota::domain_of_entries(&dir) != rec.quota {
        let path = dir_path(txn, new_parent).await?;
        fail!(
            CrossDevice,
            "{} lies in another quota tree than directory {path:?}; a hard link cannot join two quota trees",
            inode_name(txn, &rec).await?
        );
    }
    let entry_key = keys::dentry(new_parent, new_name);
    if txn.get(&entry_key).await?.is_some() {
        let path = entry_path(txn, new_parent, new_name).await?;
        fail!(Exists, "{path:?} already exists");
    }
    let Some(nlink) = rec.attr.nlink.checked_add(1) else {
        fail!(TooLarge, "{} has the most links an inode can have", inode_name(txn, &rec).await?);
    };
    rec.attr.nlink = nlink;
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await?;
    put(txn, &entry_key, &DentryRec { ino, kind: rec.attr.kind }).await?;
    let dir = touch_dir(txn, new_parent, 0, ctx.now).await?;
    Ok(MetaReply::Entry { attr: rec.attr, dir })
}

async fn unlink(txn: &mut dyn KvTxn, ctx: &Ctx, parent: Ino, name: &str) -> TxResult<MetaReply> {
    check_name(name).map_err(abort)?;
    let dir = load_dir(txn, parent).await?;
    let Some(entry) = get_dentry(txn, parent, name).await? else {
        let dir = dir_path(txn, parent).await?;
        fail!(NotFound, "no entry {name:?} in directory {dir:?}");
    };
    let child = load_child(txn, parent, name, entry).await?;
    if child.attr.kind == FileKind::Dir {
        let path = entry_path(txn, parent, name).await?;
        fail!(IsDir, "{path:?} is a directory; use rmdir");
    }
    if trash::is_trash_dir(&dir) {
        trash::forget(txn, name).await?;
    } else if ctx.trash
        && child.attr.kind == FileKind::File
        && child.attr.nlink == 1
        && !name.starts_with(wire::TMP_NAME_PREFIX)
    {
        return trash::put_in(txn, ctx, parent, name, child).await;
    }
    txn.delete(&keys::dentry(parent, name)).await?;
    let ino = child.attr.ino;
    drop_link(txn, ctx, child).await?;
    let dir = touch_dir(txn, parent, 0, ctx.now).await?;
    Ok(MetaReply::Removed { ino, dir })
}

async fn rmdir(txn: &mut dyn KvTxn, ctx: &Ctx, parent: Ino, name: &str) -> TxResult<MetaReply> {
    check_name(name).map_err(abort)?;
    load_dir(txn, parent).await?;
    let Some(entry) = get_dentry(txn, parent, name).await? else {
        let dir = dir_path(txn, parent).await?;
        fail!(NotFound, "no entry {name:?} in directory {dir:?}");
    };
    let child = load_child(txn, parent, name, entry).await?;
    if child.attr.kind != FileKind::Dir {
        let path = entry_path(txn, parent, name).await?;
        fail!(NotDir, "{path:?} is a {}, not a directory", kind_name(child.attr.kind));
    }
    if dir_has_entries(txn, child.attr.ino).await? {
        let path = entry_path(txn, parent, name).await?;
        fail!(NotEmpty, "directory {path:?} is not empty");
    }
    txn.delete(&keys::dentry(parent, name)).await?;
    delete_inode(txn, ctx, &child).await?;
    let dir = touch_dir(txn, parent, -1, ctx.now).await?;
    Ok(MetaReply::Removed { ino: child.attr.ino, dir })
}

/// Fails with `Invalid` if directory `start` is `dir` or lies under it: moving `dir` into
/// `start` would then cut it from the tree. Walks parent pointers, which the transaction reads,
/// so a concurrent rename changing them conflicts instead of racing into a cycle.
async fn check_not_under(txn: &mut dyn KvTxn, start: Ino, dir: Ino) -> TxResult<()> {
    let mut current = start;
    for _ in 0..DEPTH_MAX {
        if current == dir {
            let (moved, into) = (dir_path(txn, dir).await?, dir_path(txn, start).await?);
            fail!(Invalid, "cannot move directory {moved:?} under itself (into {into:?})");
        }
        if current == ROOT_INO {
            return Ok(());
        }
        current = load(txn, current).await?.parent;
    }
    fail!(
        Internal,
        "damaged metadata: walking up from directory inode {start} did not reach the root after {DEPTH_MAX} steps"
    )
}

pub(crate) async fn rename(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    parent: Ino,
    name: &str,
    new_parent: Ino,
    new_name: &str,
    mode: RenameMode,
) -> TxResult<MetaReply> {
    check_name(name).map_err(abort)?;
    check_name(new_name).map_err(abort)?;
    let parent_rec = load_dir(txn, parent).await?;
    let new_parent_rec = load_dir(txn, new_parent).await?;
    let Some(src) = get_dentry(txn, parent, name).await? else {
        let dir = dir_path(txn, parent).await?;
        fail!(NotFound, "no entry {name:?} in directory {dir:?}");
    };
    let dst = get_dentry(txn, new_parent, new_name).await?;
    match (mode, dst) {
        (RenameMode::NoReplace, Some(_)) => {
            let path = entry_path(txn, new_parent, new_name).await?;
            fail!(Exists, "{path:?} already exists")
        }
        (RenameMode::Exchange, None) => {
            let dir = dir_path(txn, new_parent).await?;
            fail!(NotFound, "no entry {new_name:?} in directory {dir:?} to exchange with")
        }
        _ => {}
    }
    // Renaming a name onto itself, or onto another link of the same inode, changes nothing
    // (POSIX says so for the second case too).
    if dst.is_some_and(|d| d.ino == src.ino) {
        return Ok(MetaReply::Ok);
    }
    let mut src_rec = load_child(txn, parent, name, src).await?;
    let src_is_dir = src_rec.attr.kind == FileKind::Dir;
    let dst_rec = match dst {
        Some(entry) => Some(load_child(txn, new_parent, new_name, entry).await?),
        None => None,
    };
    let dst_is_dir = dst_rec.as_ref().is_some_and(|r| r.attr.kind == FileKind::Dir);

    if src_is_dir && parent != new_parent {
        check_not_under(txn, new_parent, src.ino).await?;
    }
    let (parent_delta, new_parent_delta);
    if mode == RenameMode::Exchange {
        let Some(dst_rec) = dst_rec else {
            fail!(Internal, "exchange destination vanished");
        };
        if dst_is_dir && parent != new_parent {
            check_not_under(txn, parent, dst_rec.attr.ino).await?;
        }
        if quota::counted_in(txn, &src_rec).await? != quota::domain_of_entries(&new_parent_rec)
            || quota::counted_in(txn, &dst_rec).await? != quota::domain_of_entries(&parent_rec)
        {
            let (from, to) = (dir_path(txn, parent).await?, dir_path(txn, new_parent).await?);
            fail!(CrossDevice, "cannot exchange entries of {from:?} and {to:?}: they lie in different quota trees");
        }
        put(txn, &keys::dentry(parent, name), &DentryRec { ino: dst_rec.attr.ino, kind: dst_rec.attr.kind }).await?;
        put(txn, &keys::dentry(new_parent, new_name), &src).await?;
        move_inode(txn, ctx, src_rec, new_parent, new_name).await?;
        move_inode(txn, ctx, dst_rec, parent, name).await?;
        parent_delta = i64::from(dst_is_dir) - i64::from(src_is_dir);
        new_parent_delta = i64::from(src_is_dir) - i64::from(dst_is_dir);
    } else {
        if let Some(dst_rec) = dst_rec {
            match (src_is_dir, dst_is_dir) {
                (true, false) => {
                    let path = entry_path(txn, new_parent, new_name).await?;
                    fail!(NotDir, "cannot replace {} {path:?} with a directory", kind_name(dst_rec.attr.kind))
                }
                (false, true) => {
                    let path = entry_path(txn, new_parent, new_name).await?;
                    fail!(IsDir, "cannot replace directory {path:?} with a {}", kind_name(src_rec.attr.kind))
                }
                (true, true) => {
                    if dir_has_entries(txn, dst_rec.attr.ino).await? {
                        let path = entry_path(txn, new_parent, new_name).await?;
                        fail!(NotEmpty, "directory {path:?} is not empty");
                    }
                    delete_inode(txn, ctx, &dst_rec).await?;
                }
                (false, false) => drop_link(txn, ctx, dst_rec).await?,
            }
        }
        let from = quota::counted_in(txn, &src_rec).await?;
        let to = quota::domain_of_entries(&new_parent_rec);
        if from != to {
            move_domain(txn, ctx, &mut src_rec, from, to).await?;
        }
        txn.delete(&keys::dentry(parent, name)).await?;
        put(txn, &keys::dentry(new_parent, new_name), &src).await?;
        move_inode(txn, ctx, src_rec, new_parent, new_name).await?;
        parent_delta = -i64::from(src_is_dir);
        new_parent_delta = i64::from(src_is_dir) - i64::from(dst_is_dir);
    }
    // A directory's nlink counts its subdirectories' ".." entries.
    if parent == new_parent {
        touch_dir(txn, parent, parent_delta + new_parent_delta, ctx.now).await?;
    } else {
        touch_dir(txn, parent, parent_delta, ctx.now).await?;
        touch_dir(txn, new_parent, new_parent_delta, ctx.now).await?;
    }
    Ok(MetaReply::Ok)
}

/// Moves an inode's usage from quota domain `from` to `to` (a rename between quota trees): a
/// file with one link, anything without entries, and a directory with a quota of its own (its
/// record holds its tree's usage) can move; anything else would need a walk of its tree or
/// would split a file's links between trees, and is refused with `CrossDevice` (EXDEV: `mv`
/// then copies, as between file systems).
async fn move_domain(txn: &mut dyn KvTxn, ctx: &Ctx, rec: &mut InodeRec, from: Ino, to: Ino) -> TxResult<()> {
    let ino = rec.attr.ino;
    if rec.attr.kind == FileKind::Dir && rec.quota == ino {
        let key = keys::quota(ino);
        let Some(mut q) = get::<keys::QuotaRec>(txn, &key).await? else {
            fail!(Internal, "damaged metadata: directory {ino} names itself as a quota without one");
        };
        let (bytes, inodes) = (
            i64::try_from(q.bytes_used).unwrap_or(i64::MAX),
            i64::try_from(q.inodes_used.saturating_add(1)).unwrap_or(i64::MAX),
        );
        quota::charge(txn, ctx.now_ms, from, -bytes, -inodes, false).await?;
        quota::charge(txn, ctx.now_ms, to, bytes, inodes, true).await?;
        q.parent = to;
        return put(txn, &key, &q).await;
    }
    let movable = match rec.attr.kind {
        FileKind::Dir => !dir_has_entries(txn, ino).await?,
        _ => rec.attr.nlink <= 1,
    };
    if !movable {
        let what = inode_name(txn, rec).await?;
        let (from, to) = (quota_name(txn, from).await?, quota_name(txn, to).await?);
        fail!(
            CrossDevice,
            "{what} lies under {from} and cannot move under {to}: only files with one link, empty directories and directories with a quota of their own move between quota trees"
        );
    }
    let bytes = quota::bytes_of(rec);
    quota::charge(txn, ctx.now_ms, from, -bytes, -1, false).await?;
    quota::charge(txn, ctx.now_ms, to, bytes, 1, true).await?;
    rec.quota = to;
    Ok(())
}

/// A quota domain as messages name it.
async fn quota_name(txn: &mut dyn KvTxn, domain: Ino) -> TxResult<String> {
    Ok(match domain {
        0 => "no quota".to_string(),
        d => format!("the quota of {:?}", dir_path(txn, d).await?),
    })
}

/// Records that an inode is now entry `new_name` of `new_parent`: a directory's parent pointer
/// and name follow it; every inode's ctime changes.
async fn move_inode(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    mut rec: InodeRec,
    new_parent: Ino,
    new_name: &str,
) -> TxResult<()> {
    if rec.attr.kind == FileKind::Dir {
        rec.parent = new_parent;
        rec.target = new_name.to_string();
    }
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await
}

async fn read_dir(txn: &mut dyn KvTxn, ino: Ino, after: &str, limit: u32) -> TxResult<MetaReply> {
    if after.len() > NAME_BYTES_MAX {
        fail!(NameTooLong, "readdir position of {} bytes exceeds the name limit of {NAME_BYTES_MAX}", after.len());
    }
    load_dir(txn, ino).await?;
    let limit = if limit == 0 { READDIR_ENTRIES_MAX } else { limit.min(READDIR_ENTRIES_MAX) } as usize;
    let prefix = keys::dentry_prefix(ino);
    // Names never contain NUL, so `after` + NUL is the first key strictly after `after`.
    let start = if after.is_empty() { prefix.clone() } else { store::after(&keys::dentry(ino, after)) };
    // One entry more than asked says whether there are more.
    let mut page = txn.scan(&start, &kv::prefix_end(&prefix), limit + 1).await?;
    let more = page.len() > limit;
    page.truncate(limit);
    let mut entries = Vec::with_capacity(page.len());
    for (key, value) in page {
        let Some(name) = keys::dentry_name(ino, &key) else {
            fail!(Internal, "directory entry key {} is not valid UTF-8", keys::describe(&key));
        };
        let name = name.to_string();
        let entry: DentryRec = keys::decode(&key, &value).map_err(abort)?;
        let attr = load_child(txn, ino, &name, entry).await?.attr;
        let attr = with_dir_times(txn, attr).await?;
        entries.push(DirEntry { name, attr });
    }
    Ok(MetaReply::Entries { entries, more })
}

async fn set_xattr(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    ino: Ino,
    name: &str,
    value: &[u8],
    mode: XattrMode,
) -> TxResult<MetaReply> {
    check_xattr_name(name).map_err(abort)?;
    if value.len() > XATTR_VALUE_BYTES_MAX {
        fail!(
            TooLarge,
            "extended attribute value of {} bytes exceeds the limit of {XATTR_VALUE_BYTES_MAX}",
            value.len()
        );
    }
    let mut rec = load(txn, ino).await?;
    let key = keys::xattr(ino, name);
    let exists = txn.get(&key).await?.is_some();
    match mode {
        XattrMode::Create if exists => {
            fail!(Exists, "{} already has extended attribute {name:?}", inode_name(txn, &rec).await?)
        }
        XattrMode::Replace if !exists => {
            fail!(NoAttr, "{} has no extended attribute {name:?}", inode_name(txn, &rec).await?)
        }
        _ => {}
    }
    txn.put(&key, &keys::encode_bytes(value)).await?;
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await?;
    Ok(MetaReply::Ok)
}

async fn set_layout(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, ec: EcScheme, chunk_bytes: u32) -> TxResult<MetaReply> {
    check_layout(ec, chunk_bytes).map_err(abort)?;
    let mut rec = load(txn, ino).await?;
    match rec.attr.kind {
        FileKind::Dir => {}
        FileKind::File => {
            // Chunk records carry their own scheme, but the chunk size decides where each byte
            // lives: it can change only while the file has no data.
            let prefix = keys::chunk_prefix(ino);
            if rec.attr.size != 0 || !txn.scan(&prefix, &kv::prefix_end(&prefix), 1).await?.is_empty() {
                fail!(Invalid, "the regular file (inode {ino}) already has data; its layout can no longer change");
            }
        }
        kind => fail!(Invalid, "a {} (inode {ino}) has no layout; only files and directories do", kind_name(kind)),
    }
    rec.attr.ec = ec;
    rec.attr.chunk_bytes = chunk_bytes;
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await?;
    Ok(MetaReply::Attr(with_dir_times(txn, rec.attr).await?))
}

/// Puts a directory, or a regular file without data, in pool `name` with the pool's default
/// scheme. A file with data changes pool only by having its chunks moved (a file pool policy's
/// job), so that its record never names a pool its data is not on.
async fn set_pool(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, name: &str) -> TxResult<MetaReply> {
    let mut rec = load(txn, ino).await?;
    match rec.attr.kind {
        FileKind::Dir => {}
        FileKind::File => {
            let prefix = keys::chunk_prefix(ino);
            if rec.attr.size != 0 || !txn.scan(&prefix, &kv::prefix_end(&prefix), 1).await?.is_empty() {
                fail!(
                    Invalid,
                    "the regular file (inode {ino}) already has data; it moves to another pool when a file pool policy matches it (trove policy add, trove job start tier)"
                );
            }
        }
        kind => fail!(Invalid, "a {} (inode {ino}) has no pool; only files and directories do", kind_name(kind)),
    }
    let pool = pools::by_name(txn, name).await?;
    rec.attr.pool = pool.id;
    rec.attr.ec = pool.default_ec;
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await?;
    Ok(MetaReply::Attr(with_dir_times(txn, rec.attr).await?))
}

/// Puts regular file `ino` in pool `name` once every chunk of it is there (see
/// `MetaOp::SetFilePool`).
async fn set_file_pool(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    ino: Ino,
    name: &str,
    ec: Option<EcScheme>,
) -> TxResult<MetaReply> {
    let mut rec = load_file(txn, ino).await?;
    let pool = pools::by_name(txn, name).await?;
    let ec = ec.unwrap_or(pool.default_ec);
    ec.validate().map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
    let prefix = keys::chunk_prefix(ino);
    for (key, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        let chunk: ChunkRecord = keys::decode(&key, &value).map_err(abort)?;
        let at = wire::pg_pool(chunk.placement.pg);
        if at != pool.id || chunk.ec.k > ec.k || chunk.ec.m > ec.m {
            fail!(
                Changed,
                "chunk {} of file {ino} is in pool {at} coded {}, not yet in pool {:?} within {ec}; move it first",
                chunk.index,
                chunk.ec,
                pool.name
            );
        }
    }
    if rec.attr.pool != pool.id || rec.attr.ec != ec {
        rec.attr.pool = pool.id;
        rec.attr.ec = ec;
        rec.attr.ctime = ctx.now;
        store_inode(txn, &rec).await?;
    }
    Ok(MetaReply::Attr(rec.attr))
}

/// Records reads of files at `atime`, with relatime's rule (see `MetaOp::TouchAtimes`).
async fn touch_atimes(txn: &mut dyn KvTxn, inos: &[Ino], atime: Timestamp) -> TxResult<MetaReply> {
    if inos.len() as u64 > CHUNKS_PER_CALL_MAX {
        fail!(TooLarge, "{} files in one atime update exceed the limit of {CHUNKS_PER_CALL_MAX}", inos.len());
    }
    // Relatime's rule, with a lag fine enough for the policies that judge atimes.
    let lag_s = wire::policy::atime_lag_s(&crate::policies::read(txn).await?);
    for &ino in inos {
        let Some(mut rec) = get::<InodeRec>(txn, &keys::inode(ino)).await? else {
            continue;
        };
        let a = rec.attr.atime;
        let stale = wire::policy::atime_due(a, rec.attr.mtime, rec.attr.ctime, atime, lag_s);
        if stale && atime > a {
            rec.attr.atime = atime;
            store_inode(txn, &rec).await?;
        }
    }
    Ok(MetaReply::Ok)
}

/// Reads a regular file's inode; `IsDir` / `Invalid` for other kinds.
pub async fn load_file(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<InodeRec> {
    let rec = load(txn, ino).await?;
    match rec.attr.kind {
        FileKind::File => Ok(rec),
        FileKind::Dir => {
            let path = dir_path(txn, ino).await?;
            fail!(IsDir, "{path:?} is a directory, not a regular file")
        }
        kind => fail!(Invalid, "a {} (inode {ino}) is not a regular file", kind_name(kind)),
    }
}

async fn get_chunks(txn: &mut dyn KvTxn, ino: Ino, first: u64, count: u64) -> TxResult<MetaReply> {
    let rec = load_file(txn, ino).await?;
    let count = count.min(CHUNKS_PER_CALL_MAX) as usize;
    let mut chunks = Vec::new();
    if count > 0 {
        let end = match first.checked_add(count as u64) {
            Some(end) => keys::chunk(ino, end),
            None => kv::prefix_end(&keys::chunk_prefix(ino)),
        };
        for (key, value) in txn.scan(&keys::chunk(ino, first), &end, count).await? {
            chunks.push(keys::decode::<ChunkRecord>(&key, &value).map_err(abort)?);
        }
    }
    Ok(MetaReply::Chunks { attr: rec.attr, chunks })
}

#[allow(clippy::too_many_arguments)]
async fn commit_chunks(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    ino: Ino,
    chunks: &[ChunkRecord],
    size: u64,
    set_size: bool,
    mtime: Timestamp,
) -> TxResult<MetaReply> {
    if chunks.len() as u64 > CHUNKS_PER_CALL_MAX {
        fail!(TooLarge, "{} chunks in one commit exceed the limit of {CHUNKS_PER_CALL_MAX}", chunks.len());
    }
    let mut rec = load_file(txn, ino).await?;
    let old_size = rec.attr.size;
    let new_size = if set_size { size } else { old_size.max(size) };
    let chunk_bytes = u64::from(rec.attr.chunk_bytes);
    let mut indices = std::collections::HashSet::with_capacity(chunks.len());
    for chunk in chunks {
        let index = chunk.index;
        if !indices.insert(index) {
            fail!(Invalid, "chunk index {index} appears twice in one commit");
        }
        check_chunk_record(ino, rec.attr.ec, chunk).map_err(abort)?;
        if chunk.len == 0 || u64::from(chunk.len) > chunk_bytes {
            fail!(Invalid, "chunk index {index} holds {} bytes; chunks hold 1 to {chunk_bytes}", chunk.len);
        }
        // Every chunk record lies within the file size (an invariant truncation relies on).
        let end = index.checked_mul(chunk_bytes).and_then(|start| start.checked_add(u64::from(chunk.len)));
        if end.is_none_or(|end| end > new_size) {
            fail!(Invalid, "chunk index {index} ends past the file size {new_size}");
        }
        // A chunk id queued for deletion must never be referenced again (a late retry of an
        // old commit would otherwise point at shards GC is deleting).
        if txn.get(&keys::gc(chunk.id)).await?.is_some() {
            fail!(Invalid, "chunk {:016x} was replaced or deleted earlier; write the data again", chunk.id);
        }
    }
    if new_size != old_size {
        let delta = i128::from(new_size) - i128::from(old_size);
        let delta = i64::try_from(delta).unwrap_or(if delta > 0 { i64::MAX } else { i64::MIN });
        quota::charge(txn, ctx.now_ms, rec.quota, delta, 0, true).await?;
    }
    if new_size < old_size {
        truncate_chunks(txn, ctx, ino, rec.attr.chunk_bytes, new_size).await?;
    }
    let mut added = 0i64;
    let mut queued_bytes = 0u64;
    // A chunk placed by an older map than the newest (allocated before a map change, committed
    // after the repair pass for it walked the records) is queued too, or it would wait for the
    // next map change.
    let newest_map = store::get_u64(txn, &keys::counter(keys::counter::MAP), 0).await?;
    for chunk in chunks {
        let key = keys::chunk(ino, chunk.index);
        match get::<ChunkRecord>(txn, &key).await? {
            // Copy-on-write: the replaced version's shards go to GC, unless this is the same
            // chunk committed again (a retry), which must stay referenced.
            Some(old) if old.id != chunk.id => queued_bytes += queue_gc(txn, ctx, ino, old).await?,
            Some(_) => {}
            None => added += 1,
        }
        put(txn, &key, chunk).await?;
        if jobs::needs_repair(chunk, rec.attr.ec) || u64::from(chunk.placement.map_version) < newest_map {
            jobs::queue(txn, ino, chunk.index, chunk.id).await?;
        }
    }
    store::stat_add(txn, Stat::Chunks, ino, added).await?;
    add_pending_delete(txn, ino, queued_bytes).await?;
    rec.attr.size = new_size;
    rec.attr.data_version += 1;
    rec.attr.mtime = mtime;
    rec.attr.ctime = ctx.now;
    store_inode(txn, &rec).await?;
    Ok(MetaReply::Attr(rec.attr))
}

// ---------------------------------------------------------------------------------------------
// Schemes in use (for refusing drains the nodes left could not hold, and for `trove status`).

/// A directory or file and the scheme it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemeAt {
    pub ino: Ino,
    /// Its path, or `inode N` if it cannot be named cheaply.
    pub path: String,
    pub ec: EcScheme,
}

/// What a walk over every inode found about the schemes in use.
#[derive(Clone, Debug, Default)]
pub struct SchemeUse {
    /// The widest scheme any directory or file uses (a directory preferred as the example).
    pub widest: Option<SchemeAt>,
    /// The scheme with the fewest parity shards any directory or file uses.
    pub least_parity: Option<SchemeAt>,
    /// Directories whose scheme is wider than the nodes given to [`scheme_use`], at most
    /// `limit` of them.
    pub too_wide: Vec<SchemeAt>,
    /// How many directories are too wide in all.
    pub too_wide_count: u64,
}

/// The widest scheme a directory or file (of `pool`, or of any pool) uses, with an example.
/// Walks every inode, one page per transaction: for operator commands (drain, remove), not for
/// the data path.
pub async fn widest_scheme(engine: &dyn KvEngine, pool: Option<PoolId>) -> Result<Option<SchemeAt>, WireError> {
    Ok(scheme_use(engine, pool, &HashMap::new(), 0).await?.widest)
}

/// The scheme with the fewest parity shards a directory or file uses, with an example. Walks
/// every inode.
pub async fn least_parity(engine: &dyn KvEngine) -> Result<Option<SchemeAt>, WireError> {
    Ok(scheme_use(engine, None, &HashMap::new(), 0).await?.least_parity)
}

/// Walks every inode (of `pool`, or of every pool): the widest scheme in use, and the
/// directories (at most `limit`) whose scheme needs more storage nodes than their pool has
/// (`members`, by pool).
pub async fn scheme_use(
    engine: &dyn KvEngine,
    pool: Option<PoolId>,
    members: &HashMap<PoolId, usize>,
    limit: usize,
) -> Result<SchemeUse, WireError> {
    let prefix = [keys::prefix::INODE];
    let end = kv::prefix_end(&prefix);
    let mut from = prefix.to_vec();
    let mut found = SchemeUse::default();
    let mut widest: Option<(EcScheme, Ino, FileKind)> = None;
    let mut least: Option<(EcScheme, Ino)> = None;
    let mut too_wide: Vec<(EcScheme, Ino)> = Vec::new();
    loop {
        let page = {
            let (from, end) = (from.clone(), end.clone());
            transact(engine, move |txn| {
                let (from, end) = (from.clone(), end.clone());
                Box::pin(async move { Ok(txn.scan(&from, &end, store::SCAN_PAGE_ENTRIES_MAX).await?) })
            })
            .await?
        };
        for (key, value) in &page {
            let rec: InodeRec = keys::decode(key, value)?;
            let attr = &rec.attr;
            if !matches!(attr.kind, FileKind::Dir | FileKind::File) || pool.is_some_and(|p| p != attr.pool) {
                continue;
            }
            let better = match widest {
                None => true,
                Some((ec, _, kind)) => {
                    attr.ec.width() > ec.width()
                        || (attr.ec.width() == ec.width() && kind != FileKind::Dir && attr.kind == FileKind::Dir)
                }
            };
            if better {
                widest = Some((attr.ec, attr.ino, attr.kind));
            }
            if least.is_none_or(|(ec, _)| attr.ec.m < ec.m) {
                least = Some((attr.ec, attr.ino));
            }
            let nodes = members.get(&attr.pool).copied().unwrap_or(0);
            if attr.kind == FileKind::Dir && attr.ec.width() > nodes {
                found.too_wide_count += 1;
                if too_wide.len() < limit {
                    too_wide.push((attr.ec, attr.ino));
                }
            }
        }
        match page.last() {
            Some((last, _)) if page.len() == store::SCAN_PAGE_ENTRIES_MAX => from = store::after(last),
            _ => break,
        }
    }
    if let Some((ec, ino, _)) = widest {
        found.widest = Some(SchemeAt { ino, path: path_of(engine, ino).await, ec });
    }
    if let Some((ec, ino)) = least {
        found.least_parity = Some(SchemeAt { ino, path: path_of(engine, ino).await, ec });
    }
    for (ec, ino) in too_wide {
        found.too_wide.push(SchemeAt { ino, path: path_of(engine, ino).await, ec });
    }
    Ok(found)
}

/// The path of a directory, for messages a person reads (see [`dir_path`]); anything else, or
/// a path that cannot be read, shows as `<inode N>`.
pub async fn path_of(engine: &dyn KvEngine, ino: Ino) -> String {
    let found = transact(engine, move |txn| Box::pin(async move { dir_path(txn, ino).await })).await;
    found.unwrap_or_else(|_| format!("<inode {ino}>"))
}

/// Checks a chunk record a client made before it is stored or queued: its scheme is one the
/// file allows (the file's, or narrower: never more data or parity shards), and its checksum
/// table and missing shards match its width.
fn check_chunk_record(ino: Ino, file_ec: EcScheme, chunk: &ChunkRecord) -> Result<(), WireError> {
    let index = chunk.index;
    if chunk.id == 0 {
        return Err(wire::werr!(Invalid, "chunk index {index}: chunk id 0 is not a valid id"));
    }
    chunk.ec.validate().map_err(|e| wire::werr!(Invalid, "chunk index {index}: {e}"))?;
    if chunk.ec.k > file_ec.k || chunk.ec.m > file_ec.m {
        return Err(wire::werr!(
            Invalid,
            "chunk index {index} is coded {} but file {ino} uses {file_ec}: a chunk may be narrower than its file's scheme, never wider",
            chunk.ec
        ));
    }
    let width = chunk.ec.width();
    if chunk.table_crcs.len() != width {
        return Err(wire::werr!(
            Invalid,
            "chunk index {index} has {} shard checksums for {width} shards",
            chunk.table_crcs.len()
        ));
    }
    if width < 64 && chunk.missing >> width != 0 {
        return Err(wire::werr!(Invalid, "chunk index {index} marks shards beyond its width {width} missing"));
    }
    let missing = chunk.missing.count_ones();
    if missing > u32::from(chunk.ec.m) {
        return Err(wire::werr!(
            Invalid,
            "chunk index {index} lacks {missing} shards; with {} at most {} may be missing",
            chunk.ec,
            chunk.ec.m
        ));
    }
    Ok(())
}

/// Queues chunks a client uploaded (perhaps in part) for `ino` but gave up on, so their shards
/// are deleted like those of replaced chunks. A chunk the file references, or one queued
/// already, is left alone; the file itself may be gone.
async fn abandon_chunks(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, chunks: &[ChunkRecord]) -> TxResult<MetaReply> {
    if chunks.len() as u64 > CHUNKS_PER_CALL_MAX {
        fail!(TooLarge, "{} chunks in one call exceed the limit of {CHUNKS_PER_CALL_MAX}", chunks.len());
    }
    let mut queued_bytes = 0u64;
    for chunk in chunks {
        if chunk.id == 0 || chunk.ec.validate().is_err() {
            fail!(Invalid, "chunk index {} is not a valid record", chunk.index);
        }
        let referenced = get::<ChunkRecord>(txn, &keys::chunk(ino, chunk.index))
            .await?
            .is_some_and(|current| current.id == chunk.id);
        if referenced || txn.get(&keys::gc(chunk.id)).await?.is_some() {
            continue;
        }
        // Counted at its full width (shards whose upload failed are not stored, and their
        // deletion is confirmed at once), like every queued chunk until the GC deletes it.
        queued_bytes += queue_gc(txn, ctx, ino, chunk.clone()).await?;
    }
    add_pending_delete(txn, ino, queued_bytes).await?;
    Ok(MetaReply::Ok)
}

/// Replaces chunk `expected` of `ino` by `new`, the same bytes re-encoded (see
/// `MetaOp::ReplaceChunk`). The data is unchanged, so the file's size, times and data version
/// are too: caches of its content stay valid.
async fn replace_chunk(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    ino: Ino,
    expected: &ChunkRecord,
    new: &ChunkRecord,
) -> TxResult<MetaReply> {
    let file = load_file(txn, ino).await?;
    let key = keys::chunk(ino, expected.index);
    match get::<ChunkRecord>(txn, &key).await? {
        Some(current) if current == *expected => {}
        _ => fail!(Changed, "chunk {} of file {ino} changed while it was being re-encoded", expected.index),
    }
    if new.index != expected.index || new.len != expected.len || new.id == expected.id {
        fail!(Invalid, "a replacement of chunk {} must hold the same index and length under a new id", expected.index);
    }
    // A chunk moving to another pool than its file's (a tiering job's, before the file
    // follows with `SetFilePool`) is coded in that pool's scheme, which may be wider.
    let moving = wire::pg_pool(new.placement.pg) != file.attr.pool;
    let bound = if moving { new.ec } else { file.attr.ec };
    check_chunk_record(ino, bound, new).map_err(abort)?;
    if new.missing != 0 {
        jobs::queue(txn, ino, new.index, new.id).await?;
    }
    if txn.get(&keys::gc(new.id)).await?.is_some() {
        fail!(Invalid, "chunk {:016x} was given up earlier; it cannot replace another", new.id);
    }
    put(txn, &key, new).await?;
    let queued_bytes = queue_gc(txn, ctx, ino, expected.clone()).await?;
    add_pending_delete(txn, ino, queued_bytes).await?;
    Ok(MetaReply::Ok)
}

/// Moves the chunk records of file `name` in `parent` to the end of file `target` (re-indexed,
/// never copied or queued for GC) and removes the emptied source. Every record keeps its chunk
/// id, so each id is still referenced by exactly one live `C` record.
async fn append_file(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    target: Ino,
    parent: Ino,
    name: &str,
    mtime: Timestamp,
) -> TxResult<MetaReply> {
    check_name(name).map_err(abort)?;
    load_dir(txn, parent).await?;
    let Some(entry) = get_dentry(txn, parent, name).await? else {
        let dir = dir_path(txn, parent).await?;
        fail!(NotFound, "no entry {name:?} in directory {dir:?}");
    };
    let src = load_child(txn, parent, name, entry).await?;
    let src_ino = src.attr.ino;
    if src.attr.kind != FileKind::File {
        let path = entry_path(txn, parent, name).await?;
        fail!(Invalid, "{path:?} is a {}, not a regular file", kind_name(src.attr.kind));
    }
    if src_ino == target {
        fail!(Invalid, "cannot append file {target} to itself");
    }
    if src.attr.nlink != 1 {
        let path = entry_path(txn, parent, name).await?;
        fail!(Invalid, "{path:?} has {} links; only a file with one link can be moved", src.attr.nlink);
    }
    let mut dst = load_file(txn, target).await?;
    if dst.attr.chunk_bytes != src.attr.chunk_bytes || dst.attr.ec != src.attr.ec {
        fail!(
            Invalid,
            "file {src_ino} ({} bytes per chunk, {}) and file {target} ({} bytes per chunk, {}) have different layouts",
            src.attr.chunk_bytes,
            src.attr.ec,
            dst.attr.chunk_bytes,
            dst.attr.ec
        );
    }
    let chunk_bytes = u64::from(dst.attr.chunk_bytes);
    if !dst.attr.size.is_multiple_of(chunk_bytes) {
        fail!(Invalid, "file {target} is {} bytes long, not a multiple of its chunk size {chunk_bytes}", dst.attr.size);
    }
    let base = dst.attr.size / chunk_bytes;
    let Some(new_size) = dst.attr.size.checked_add(src.attr.size) else {
        fail!(TooLarge, "appending file {src_ino} to file {target} overflows its size");
    };
    // Existing records of the target all end within its size (an invariant), so every index
    // from `base` on is free.
    let prefix = keys::chunk_prefix(src_ino);
    let records = store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await?;
    // While a snapshot is live, a version of the source's slot may hold a moved chunk: both
    // slots are recorded, as for a clone (and always for a chunk already shared).
    let snapshots = !crate::snapshot::read_state(txn).await?.live.is_empty();
    for (key, value) in &records {
        let mut chunk: ChunkRecord = keys::decode(key, value).map_err(abort)?;
        txn.delete(key).await?;
        let Some(index) = chunk.index.checked_add(base) else {
            fail!(TooLarge, "chunk index overflow appending file {src_ino} to file {target}");
        };
        if snapshots || txn.get(&keys::shared(chunk.id)).await?.is_some() {
            crate::clone::share(txn, chunk.id, &[(src_ino, chunk.index), (target, index)]).await?;
        }
        chunk.index = index;
        put(txn, &keys::chunk(target, index), &chunk).await?;
    }
    let moved = records.len() as i64;
    store::stat_add(txn, Stat::Chunks, src_ino, -moved).await?;
    store::stat_add(txn, Stat::Chunks, target, moved).await?;
    // The source has no chunk records left, so deleting it queues nothing for GC.
    txn.delete(&keys::dentry(parent, name)).await?;
    delete_inode(txn, ctx, &src).await?;
    touch_dir(txn, parent, 0, ctx.now).await?;
    quota::charge(txn, ctx.now_ms, dst.quota, quota::bytes_of(&src), 0, true).await?;
    dst.attr.size = new_size;
    dst.attr.data_version += 1;
    dst.attr.mtime = mtime;
    dst.attr.ctime = ctx.now;
    store_inode(txn, &dst).await?;
    Ok(MetaReply::Attr(dst.attr))
}
