//! The trash: with `trash_days > 0`, a regular file unlinked through any front end is not
//! deleted but moved into the hidden root directory `.trash`, with its chunks, and recorded
//! under `W` (deletion time, inode) with the path it was deleted from. `trove trash` lists,
//! restores and purges; the lease holder purges what is older than `trash_days`.
//!
//! A trashed file is an ordinary inode with an ordinary entry (in `/.trash`), so its chunk
//! records stay referenced and the GC, which only deletes chunks queued under `G`, leaves its
//! data alone until it is purged (then it is deleted like any file). Its usage leaves the quota
//! of the tree it was deleted from (it counts where `/.trash` lies: under a quota on the root,
//! if there is one). Only files with one link go to the trash: removing one name of a file
//! with several deletes no data.

use crate::keys::{self, DentryRec, InodeRec, TrashRec};
use crate::namespace::{
    drop_link, entry_path, get_dentry, load_attr, load_child, make, rename, resolve_rec, store_inode, touch_dir, Ctx,
    NewInode,
};
use crate::quota;
use crate::store::{self, abort, fail, get, put, TxResult};
use kv::KvTxn;
use wire::{FileKind, Ino, MetaReply, RenameMode, TrashEntry, NAME_BYTES_MAX, ROOT_INO};

/// The name of the trash directory in the root.
pub const TRASH_DIR: &str = ".trash";
/// Most trashed files one `PurgeTrash` by age deletes (the lease holder's purge repeats it).
pub const PURGE_ENTRIES_MAX: usize = 256;
/// Milliseconds in a day, for `trash_days`.
pub const DAY_MS: u64 = 24 * 3600 * 1000;

/// Whether `dir` is the trash directory.
pub fn is_trash_dir(dir: &InodeRec) -> bool {
    dir.attr.kind == FileKind::Dir && dir.parent == ROOT_INO && dir.attr.ino != ROOT_INO && dir.target == TRASH_DIR
}

/// The trash directory, made on first use (with the inode number the call reserved).
async fn trash_dir(txn: &mut dyn KvTxn, ctx: &Ctx) -> TxResult<InodeRec> {
    if let Some(entry) = get_dentry(txn, ROOT_INO, TRASH_DIR).await? {
        let rec = load_child(txn, ROOT_INO, TRASH_DIR, entry).await?;
        if !is_trash_dir(&rec) {
            fail!(Invalid, "\"/{TRASH_DIR}\" is not a directory; move it away to use the trash");
        }
        return Ok(rec);
    }
    let new = NewInode { kind: FileKind::Dir, mode: 0o700, uid: 0, gid: 0, rdev: 0, target: String::new() };
    let MetaReply::Entry { attr, .. } = make(txn, ctx, ROOT_INO, TRASH_DIR, new).await? else {
        fail!(Internal, "making the trash directory answered no entry");
    };
    crate::namespace::load(txn, attr.ino).await
}

/// The trash directory if it exists.
async fn existing_trash_dir(txn: &mut dyn KvTxn) -> TxResult<Option<InodeRec>> {
    let Some(entry) = get_dentry(txn, ROOT_INO, TRASH_DIR).await? else {
        return Ok(None);
    };
    let rec = load_child(txn, ROOT_INO, TRASH_DIR, entry).await?;
    Ok(is_trash_dir(&rec).then_some(rec))
}

/// A trashed file's name in the trash directory and id: deletion time, inode, and the path it
/// came from with `%` and `/` escaped (cut to fit a name).
fn entry_name(deleted_ms: u64, ino: Ino, path: &str) -> String {
    let mut name = format!("{deleted_ms}-{ino}-");
    for c in path.trim_start_matches('/').chars() {
        let piece = match c {
            '%' => "%25".to_string(),
            '/' => "%2F".to_string(),
            c => c.to_string(),
        };
        if name.len() + piece.len() > NAME_BYTES_MAX {
            break;
        }
        name.push_str(&piece);
    }
    name
}

/// The deletion time and inode an id (a name in the trash) starts with.
fn parse_id(id: &str) -> Option<(u64, Ino)> {
    let mut parts = id.splitn(3, '-');
    let ms = parts.next()?.parse().ok()?;
    let ino = parts.next()?.parse().ok()?;
    Some((ms, ino))
}

/// Moves file `child`, entry `name` of `parent`, to the trash instead of deleting it.
pub async fn put_in(
    txn: &mut dyn KvTxn,
    ctx: &Ctx,
    parent: Ino,
    name: &str,
    mut child: InodeRec,
) -> TxResult<MetaReply> {
    let trash = trash_dir(txn, ctx).await?;
    let path = entry_path(txn, parent, name).await?;
    let ino = child.attr.ino;
    let id = entry_name(ctx.now_ms, ino, &path);
    txn.delete(&keys::dentry(parent, name)).await?;
    put(txn, &keys::dentry(trash.attr.ino, &id), &DentryRec { ino, kind: child.attr.kind }).await?;
    let (from, to) = (child.quota, trash.quota);
    if from != to {
        let bytes = quota::bytes_of(&child);
        quota::charge(txn, ctx.now_ms, from, -bytes, -1, false).await?;
        quota::charge(txn, ctx.now_ms, to, bytes, 1, false).await?;
        child.quota = to;
    }
    child.attr.ctime = ctx.now;
    store_inode(txn, &child).await?;
    touch_dir(txn, trash.attr.ino, 0, ctx.now).await?;
    let dir = touch_dir(txn, parent, 0, ctx.now).await?;
    put(txn, &keys::trash(ctx.now_ms, ino), &TrashRec { path, name: id }).await?;
    Ok(MetaReply::Removed { ino, dir })
}

/// Drops the record of trashed file `name` (it is being deleted from the trash directory).
pub async fn forget(txn: &mut dyn KvTxn, name: &str) -> TxResult<()> {
    if let Some((ms, ino)) = parse_id(name) {
        txn.delete(&keys::trash(ms, ino)).await?;
    }
    Ok(())
}

/// `ListTrash`.
pub async fn list(txn: &mut dyn KvTxn) -> TxResult<MetaReply> {
    let prefix = [keys::prefix::TRASH];
    let mut out = Vec::new();
    for (key, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        let Some((deleted_ms, ino)) = keys::parse_trash(&key) else {
            continue;
        };
        let rec: TrashRec = keys::decode(&key, &value).map_err(abort)?;
        let size = match get::<InodeRec>(txn, &keys::inode(ino)).await? {
            Some(inode) => inode.attr.size,
            None => continue,
        };
        out.push(TrashEntry { id: rec.name, path: rec.path, deleted_ms, size, ino });
    }
    Ok(MetaReply::Trash(out))
}

async fn find(txn: &mut dyn KvTxn, id: &str) -> TxResult<(Vec<u8>, TrashRec)> {
    if let Some((ms, ino)) = parse_id(id) {
        let key = keys::trash(ms, ino);
        if let Some(rec) = get::<TrashRec>(txn, &key).await? {
            return Ok((key, rec));
        }
    }
    fail!(NotFound, "nothing in the trash has id {id:?} (trove trash list shows the ids)")
}

/// `RestoreTrash`: moves trashed file `id` back to where it was deleted from (or `to`), refused
/// when that name is taken or its directory is gone, and counted against the quotas there.
pub async fn restore(txn: &mut dyn KvTxn, ctx: &Ctx, id: &str, to: Option<&str>) -> TxResult<MetaReply> {
    let (key, rec) = find(txn, id).await?;
    let Some(trash) = existing_trash_dir(txn).await? else {
        fail!(NotFound, "the trash directory \"/{TRASH_DIR}\" is gone");
    };
    let dest = to.unwrap_or(&rec.path).trim_end_matches('/');
    let (dir, name) = match dest.rsplit_once('/') {
        Some((dir, name)) if !name.is_empty() => (dir, name),
        _ => fail!(Invalid, "cannot restore to {dest:?}: give a path such as /dir/name"),
    };
    let dir = resolve_rec(txn, if dir.is_empty() { "/" } else { dir }).await?;
    if dir.attr.kind != FileKind::Dir {
        fail!(NotDir, "cannot restore to {dest:?}: its parent is not a directory");
    }
    let ino = match get_dentry(txn, trash.attr.ino, &rec.name).await? {
        Some(entry) => entry.ino,
        None => fail!(NotFound, "trashed file {id:?} was removed from \"/{TRASH_DIR}\""),
    };
    // Coming back is a rename out of the trash: a locked (WORM) directory takes nothing in.
    let back = wire::MetaOp::Rename {
        parent: trash.attr.ino,
        name: rec.name.clone(),
        new_parent: dir.attr.ino,
        new_name: name.to_string(),
        mode: RenameMode::NoReplace,
    };
    crate::retain::check(txn, &back, ctx.now_ms).await?;
    rename(txn, ctx, trash.attr.ino, &rec.name, dir.attr.ino, name, RenameMode::NoReplace).await?;
    txn.delete(&key).await?;
    Ok(MetaReply::Attr(load_attr(txn, ino).await?))
}

/// `PurgeTrash`: deletes trashed file `id`, or (empty `id`) up to [`PURGE_ENTRIES_MAX`] of
/// those deleted before `before_ms`; their chunks go to the GC like any deleted file's.
pub async fn purge(txn: &mut dyn KvTxn, ctx: &Ctx, id: &str, before_ms: u64) -> TxResult<MetaReply> {
    let victims: Vec<(Vec<u8>, TrashRec)> = if id.is_empty() {
        let start = [keys::prefix::TRASH];
        let end = keys::trash(before_ms, 0);
        let mut found = Vec::new();
        for (key, value) in txn.scan(&start, &end, PURGE_ENTRIES_MAX).await? {
            let rec: TrashRec = keys::decode(&key, &value).map_err(abort)?;
            found.push((key, rec));
        }
        found
    } else {
        vec![find(txn, id).await?]
    };
    let trash = existing_trash_dir(txn).await?;
    let mut purged = Vec::with_capacity(victims.len());
    for (key, rec) in victims {
        txn.delete(&key).await?;
        let Some((deleted_ms, ino)) = keys::parse_trash(&key) else {
            continue;
        };
        let Some(trash) = &trash else { continue };
        let Some(entry) = get_dentry(txn, trash.attr.ino, &rec.name).await? else {
            continue;
        };
        let child = load_child(txn, trash.attr.ino, &rec.name, entry).await?;
        let size = child.attr.size;
        txn.delete(&keys::dentry(trash.attr.ino, &rec.name)).await?;
        drop_link(txn, ctx, child).await?;
        touch_dir(txn, trash.attr.ino, 0, ctx.now).await?;
        purged.push(TrashEntry { id: rec.name, path: rec.path, deleted_ms, size, ino });
    }
    Ok(MetaReply::Trash(purged))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_time_inode_and_path() {
        let name = entry_name(1_700_000_000_000, 42, "/b/x%y/z");
        assert_eq!(name, "1700000000000-42-b%2Fx%25y%2Fz");
        assert_eq!(parse_id(&name), Some((1_700_000_000_000, 42)));
        assert_eq!(parse_id("junk"), None);
        let long = "/".to_string() + &"a".repeat(400);
        assert!(entry_name(1, 2, &long).len() <= NAME_BYTES_MAX);
    }
}
