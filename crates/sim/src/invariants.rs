//! The metadata's own invariants, checked on a snapshot of the metadata engine: every
//! transaction is serializable, so every snapshot must satisfy them, mid-run as at the end.
//!
//! - every directory entry names a live inode of the kind the entry says;
//! - a directory is named by exactly one entry, in the directory its inode says is its parent;
//! - link counts: a file's is the number of entries naming it, a directory's 2 plus its
//!   subdirectories;
//! - no inode with links is unreachable (named by no entry);
//! - every chunk record belongs to a live regular file;
//! - no two live locks conflict: among the lock records of a file whose session's lease has
//!   not run out (by the simulation's clock), no two owners hold overlapping ranges of which
//!   one is exclusive.

use meta::keys::{self, prefix, DentryRec, InodeRec, LeaseRec, LockRec};
use std::collections::BTreeMap;
use wire::{ChunkRecord, FileKind, Ino, ROOT_INO};

/// Entries scanned per read of the snapshot.
const SCAN_PAGE_ENTRIES: usize = 1024;

/// Every key and value under `prefix`, from one snapshot (`txn`).
async fn scan_all(txn: &mut dyn kv::KvTxn, first: u8) -> Result<Vec<kv::KeyValue>, String> {
    let end = kv::prefix_end(&[first]);
    let mut from = vec![first];
    let mut all = Vec::new();
    loop {
        let page = txn.scan(&from, &end, SCAN_PAGE_ENTRIES).await.map_err(|e| e.to_string())?;
        let full = page.len() == SCAN_PAGE_ENTRIES;
        if let Some((last, _)) = page.last() {
            from = meta::store::after(last);
        }
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// Checks the invariants on one snapshot of `engine`; returns what is broken.
pub async fn check(engine: &dyn kv::KvEngine) -> Vec<String> {
    let mut broken = Vec::new();
    let mut txn = match engine.begin().await {
        Ok(txn) => txn,
        Err(e) => return vec![format!("the metadata engine could not begin a snapshot: {e}")],
    };
    let scanned = async {
        Ok::<_, String>((
            scan_all(txn.as_mut(), prefix::INODE).await?,
            scan_all(txn.as_mut(), prefix::DENTRY).await?,
            scan_all(txn.as_mut(), prefix::CHUNK).await?,
            scan_all(txn.as_mut(), prefix::LOCK).await?,
            scan_all(txn.as_mut(), prefix::LEASE).await?,
        ))
    }
    .await;
    let (inode_kvs, dentry_kvs, chunk_kvs, lock_kvs, lease_kvs) = match scanned {
        Ok(all) => all,
        Err(e) => return vec![format!("scanning the metadata failed: {e}")],
    };
    let mut inodes: BTreeMap<Ino, InodeRec> = BTreeMap::new();
    for (key, value) in &inode_kvs {
        match keys::decode::<InodeRec>(key, value) {
            Ok(rec) => {
                inodes.insert(rec.attr.ino, rec);
            }
            Err(e) => broken.push(format!("an inode record does not decode: {e}")),
        }
    }
    // ino -> the (parent, name) entries naming it; directory -> its subdirectories.
    let mut named: BTreeMap<Ino, Vec<(Ino, String)>> = BTreeMap::new();
    let mut subdirs: BTreeMap<Ino, u32> = BTreeMap::new();
    for (key, value) in &dentry_kvs {
        let parent = key.get(1..9).and_then(|b| b.try_into().ok()).map_or(0, Ino::from_be_bytes);
        let name = keys::dentry_name(parent, key).unwrap_or("?").to_string();
        let entry = match keys::decode::<DentryRec>(key, value) {
            Ok(entry) => entry,
            Err(e) => {
                broken.push(format!("entry {name:?} of directory {parent} does not decode: {e}"));
                continue;
            }
        };
        match inodes.get(&entry.ino) {
            None => broken
                .push(format!("entry {name:?} of directory {parent} names inode {} that does not exist", entry.ino)),
            Some(rec) if rec.attr.kind != entry.kind => broken.push(format!(
                "entry {name:?} of directory {parent} says inode {} is a {:?}; it is a {:?}",
                entry.ino, entry.kind, rec.attr.kind
            )),
            Some(_) => {}
        }
        if !matches!(inodes.get(&parent), Some(p) if p.attr.kind == FileKind::Dir) {
            broken.push(format!("entry {name:?} is in {parent}, which is not a live directory"));
        }
        if entry.kind == FileKind::Dir {
            *subdirs.entry(parent).or_default() += 1;
        }
        named.entry(entry.ino).or_default().push((parent, name));
    }
    for (ino, rec) in &inodes {
        let names = named.get(ino).map_or(&[][..], Vec::as_slice);
        match rec.attr.kind {
            FileKind::Dir => {
                if *ino != ROOT_INO {
                    match names {
                        [(parent, _)] if *parent == rec.parent => {}
                        [(parent, name)] => broken.push(format!(
                            "directory {ino} is entry {name:?} of {parent}, but its inode says its parent is {}",
                            rec.parent
                        )),
                        _ => broken.push(format!("directory {ino} is named by {} entries: {names:?}", names.len())),
                    }
                }
                let expected = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if rec.attr.nlink != expected {
                    broken.push(format!(
                        "directory {ino} has link count {}, but 2 + its {} subdirectories make {expected}",
                        rec.attr.nlink,
                        expected - 2
                    ));
                }
            }
            _ => {
                if rec.attr.nlink as usize != names.len() {
                    broken.push(format!(
                        "{:?} {ino} has link count {} but is named by {} entries",
                        rec.attr.kind,
                        rec.attr.nlink,
                        names.len()
                    ));
                }
            }
        }
    }
    for (key, value) in &chunk_kvs {
        let ino = key.get(1..9).and_then(|b| b.try_into().ok()).map_or(0, Ino::from_be_bytes);
        let chunk = match keys::decode::<ChunkRecord>(key, value) {
            Ok(chunk) => chunk,
            Err(e) => {
                broken.push(format!("a chunk record of inode {ino} does not decode: {e}"));
                continue;
            }
        };
        if !matches!(inodes.get(&ino), Some(rec) if rec.attr.kind == FileKind::File) {
            broken.push(format!(
                "chunk {:016x} (index {}) belongs to inode {ino}, which is no live file",
                chunk.id, chunk.index
            ));
        }
    }
    let now = meta::store::now_ms();
    let mut live_sessions = std::collections::BTreeSet::new();
    for (key, value) in &lease_kvs {
        let session = key.get(1..9).and_then(|b| b.try_into().ok()).map_or(0, u64::from_be_bytes);
        match keys::decode::<LeaseRec>(key, value) {
            Ok(lease) if lease.expires_ms > now => {
                live_sessions.insert(session);
            }
            Ok(_) => {}
            Err(e) => broken.push(format!("the lease of session {session} does not decode: {e}")),
        }
    }
    // ino -> the live locks on it: (session, owner, range).
    let mut locks: BTreeMap<Ino, Vec<(u64, u64, wire::LockRange)>> = BTreeMap::new();
    for (key, value) in &lock_kvs {
        let Some((ino, session, owner)) = keys::parse_lock(key) else {
            broken.push(format!("a lock key does not parse: {key:?}"));
            continue;
        };
        match keys::decode::<LockRec>(key, value) {
            Ok(rec) if live_sessions.contains(&session) => {
                locks.entry(ino).or_default().extend(rec.ranges.into_iter().map(|r| (session, owner, r)));
            }
            Ok(_) => {}
            Err(e) => broken.push(format!("a lock record of inode {ino} does not decode: {e}")),
        }
    }
    for (ino, held) in &locks {
        for (i, (s1, o1, r1)) in held.iter().enumerate() {
            for (s2, o2, r2) in &held[i + 1..] {
                let exclusive = r1.kind == wire::LockKind::Write || r2.kind == wire::LockKind::Write;
                if (s1, o1) != (s2, o2) && exclusive && r1.overlaps(r2) {
                    broken.push(format!(
                        "inode {ino}: live conflicting locks of session {s1} owner {o1} ({r1:?}) and session {s2} owner {o2} ({r2:?})"
                    ));
                }
            }
        }
    }
    broken
}
