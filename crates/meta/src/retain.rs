//! Locked directory trees (WORM, as PowerScale's SmartLock directories): `RetainTree` marks
//! every inode of a tree (the directory, everything below it, or one file) with a retention
//! date under `w` + ino, in one transaction. Until that date every namespace mutation that
//! names a marked inode (as the inode it changes, the directory whose entries it changes, or
//! the entry it removes, renames or replaces) is refused with `PermissionDenied` naming the
//! tree and the date, whichever front end sends it and whoever asks. Reads, access times,
//! locks, snapshots of the tree and the jobs' moves of its chunks (which change no byte) go on.
//!
//! The marks stay complete without a walk at each change: nothing can be created in, linked
//! into or renamed into a marked directory. A date is moved later by marking the tree again,
//! never earlier; marks whose date passed refuse nothing (they are left in place).
//! Snapshots are locked with `SnapshotRetain` instead (their views are read-only already).
//!
//! Cost: `K` ‖ "retain" holds the latest date of any lock, so while no lock is in force (the
//! common case) a mutation reads that one key and no mark. Restoring from a snapshot (its own
//! transactions, not a namespace call) checks each directory it writes into with
//! [`refuse_changes`].

use crate::keys::{self, RetainRec};
use crate::namespace::{self, Ctx};
use crate::snapshot::utc;
use crate::store::{self, fail, get, put, TxResult};
use kv::KvTxn;
use wire::{FileKind, Ino, MetaOp, MetaReply};

/// Most inodes one `RetainTree` marks: the tree is marked in one transaction.
pub const RETAIN_TREE_INODES_MAX: u64 = 1_000_000;

/// The inodes `op` changes, and the entries (directory, name) whose inode it removes or
/// replaces. Operations that change no byte and no name (locks, access times, the jobs' chunk
/// moves and pool changes, quotas, snapshots) are left out.
fn changed(op: &MetaOp) -> (Vec<Ino>, Vec<(Ino, &str)>) {
    match op {
        MetaOp::SetAttr { ino, .. }
        | MetaOp::SetXattr { ino, .. }
        | MetaOp::RemoveXattr { ino, .. }
        | MetaOp::SetLayout { ino, .. }
        | MetaOp::CommitChunks { ino, .. }
        | MetaOp::SetPool { ino, .. } => (vec![*ino], Vec::new()),
        MetaOp::Create { parent, .. }
        | MetaOp::Mkdir { parent, .. }
        | MetaOp::Mknod { parent, .. }
        | MetaOp::Symlink { parent, .. }
        | MetaOp::CloneFile { parent, .. } => (vec![*parent], Vec::new()),
        MetaOp::Link { ino, new_parent, .. } => (vec![*ino, *new_parent], Vec::new()),
        MetaOp::Unlink { parent, name } | MetaOp::Rmdir { parent, name } => {
            (vec![*parent], vec![(*parent, name.as_str())])
        }
        MetaOp::Rename { parent, name, new_parent, new_name, .. } => {
            (vec![*parent, *new_parent], vec![(*parent, name.as_str()), (*new_parent, new_name.as_str())])
        }
        MetaOp::AppendFile { target, parent, .. } => (vec![*target, *parent], Vec::new()),
        _ => (Vec::new(), Vec::new()),
    }
}

/// Refuses `op` if it changes an inode of a tree retained past `now_ms`.
pub async fn check(txn: &mut dyn KvTxn, op: &MetaOp, now_ms: u64) -> TxResult<()> {
    let (inos, entries) = changed(op);
    refuse_changes(txn, inos, &entries, now_ms).await
}

/// Refuses a change to inodes `inos` or to the inodes entries `entries` (directory, name) name,
/// if one of them is in a tree retained past `now_ms`.
pub async fn refuse_changes(
    txn: &mut dyn KvTxn,
    mut inos: Vec<Ino>,
    entries: &[(Ino, &str)],
    now_ms: u64,
) -> TxResult<()> {
    if inos.is_empty() || store::get_u64(txn, &keys::counter(keys::counter::RETAIN_UNTIL), 0).await? <= now_ms {
        return Ok(());
    }
    for &(parent, name) in entries {
        if let Some(entry) = namespace::get_dentry(txn, parent, name).await? {
            inos.push(entry.ino);
        }
    }
    for ino in inos {
        if let Some(rec) = get::<RetainRec>(txn, &keys::retain(ino)).await? {
            if rec.until_ms > now_ms {
                return refuse(txn, &rec, "nothing in it can be changed, renamed or deleted before then").await;
            }
        }
    }
    Ok(())
}

/// The refusal of a change to a tree locked by `rec`, naming the tree and the date.
async fn refuse(txn: &mut dyn KvTxn, rec: &RetainRec, what: &str) -> TxResult<()> {
    let tree = tree_name(txn, rec.root).await?;
    fail!(PermissionDenied, "{tree} is retained until {} (WORM): {what}", utc(rec.until_ms))
}

async fn tree_name(txn: &mut dyn KvTxn, root: Ino) -> TxResult<String> {
    Ok(match namespace::load(txn, root).await {
        Ok(rec) if rec.attr.kind == FileKind::Dir => format!("directory {:?}", namespace::dir_path(txn, root).await?),
        Ok(_) => format!("file (inode {root})"),
        Err(_) => format!("inode {root}"),
    })
}

/// Marks the tree at `ino` retained until `until_ms`; answered with `MetaReply::Retained`.
pub async fn retain_tree(txn: &mut dyn KvTxn, ctx: &Ctx, ino: Ino, until_ms: u64) -> TxResult<MetaReply> {
    let root = namespace::load(txn, ino).await?;
    if until_ms <= ctx.now_ms {
        fail!(Invalid, "a retention date must be in the future, not {}", utc(until_ms));
    }
    if let Some(rec) = get::<RetainRec>(txn, &keys::retain(ino)).await? {
        if rec.until_ms > until_ms {
            return refuse(txn, &rec, "a retention date is never moved earlier").await.map(|()| MetaReply::Ok);
        }
    }
    let latest_key = keys::counter(keys::counter::RETAIN_UNTIL);
    if store::get_u64(txn, &latest_key, 0).await? < until_ms {
        txn.put(&latest_key, &keys::encode_u64(until_ms)).await?;
    }
    let mut stack = vec![(ino, root.attr.kind)];
    let mut marked = 0u64;
    while let Some((at, kind)) = stack.pop() {
        marked += 1;
        if marked > RETAIN_TREE_INODES_MAX {
            let tree = tree_name(txn, ino).await?;
            fail!(
                TooLarge,
                "{tree} holds more than {RETAIN_TREE_INODES_MAX} files and directories, the most one retention marks; lock its subdirectories one by one"
            );
        }
        let key = keys::retain(at);
        // A tree inside one locked for longer keeps its later date.
        let kept = get::<RetainRec>(txn, &key).await?.filter(|r| r.until_ms > until_ms);
        if kept.is_none() {
            put(txn, &key, &RetainRec { until_ms, root: ino }).await?;
        }
        if kind == FileKind::Dir {
            let prefix = keys::dentry_prefix(at);
            for (_, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
                let entry: keys::DentryRec = keys::decode(&prefix, &value).map_err(store::abort)?;
                stack.push((entry.ino, entry.kind));
            }
        }
    }
    Ok(MetaReply::Retained { inodes: marked, until_ms })
}
