//! Directory tree quotas: the `Z` records, their exact usage, and the checks that refuse what
//! would exceed them.
//!
//! Usage is never counted by a scan when asked for: every namespace transaction that changes a
//! file's size, creates or removes an inode, or moves one to another tree calls [`charge`] with
//! the change, in the same transaction, so a quota's figures are always those of its tree. An
//! inode names its quota domain ([`InodeRec::quota`]: the nearest directory with a quota), and a
//! quota names the domain of its own directory ([`QuotaRec::parent`]), so the quotas a change
//! counts against are found by following that chain: no reads at all where no quota exists,
//! one record per enclosing quota where one does. Only `SetQuota` walks a tree, once, to count
//! what is already there and to point the inodes below at the new domain.

use crate::keys::{self, DentryRec, InodeRec, QuotaRec};
use crate::namespace::{dir_path, load};
use crate::store::{self, abort, fail, get, put, TxResult};
use kv::KvTxn;
use std::collections::HashMap;
use wire::{FileKind, Ino, MetaReply, QuotaInfo, QuotaLimits};

/// Most inodes `SetQuota` counts and re-points in its one transaction; a larger tree gets its
/// quota before it is filled (or on a subdirectory).
pub const SET_WALK_INODES_MAX: usize = 200_000;
/// Deepest chain of nested quotas followed; a longer one means damaged records.
const CHAIN_MAX: usize = 1 << 12;

/// The domain an inode is counted in: its own domain, except for a directory with a quota,
/// which is counted in the domain above it.
pub async fn counted_in(txn: &mut dyn KvTxn, rec: &InodeRec) -> TxResult<Ino> {
    if rec.quota != 0 && rec.quota == rec.attr.ino {
        return Ok(load_quota(txn, rec.attr.ino).await?.parent);
    }
    Ok(rec.quota)
}

/// The domain of a directory's entries: the directory itself if it has a quota, else its own.
pub fn domain_of_entries(dir: &InodeRec) -> Ino {
    dir.quota
}

async fn load_quota(txn: &mut dyn KvTxn, ino: Ino) -> TxResult<QuotaRec> {
    match get::<QuotaRec>(txn, &keys::quota(ino)).await? {
        Some(rec) => Ok(rec),
        None => {
            fail!(Internal, "damaged metadata: an inode names directory {ino} as its quota domain, which has no quota")
        }
    }
}

/// Whether a new value over a limit is refused: always over a hard limit, over a soft limit
/// once it has been exceeded for longer than the grace period. Updates `since` (when usage
/// went over the soft limit). Only growth is ever refused.
fn judge(
    used: u64,
    delta: i64,
    hard: u64,
    soft: u64,
    grace_ms: u64,
    since: &mut u64,
    now_ms: u64,
) -> Result<u64, String> {
    let new = if delta >= 0 { used.saturating_add(delta as u64) } else { used.saturating_sub(delta.unsigned_abs()) };
    if delta > 0 && hard != 0 && new > hard {
        return Err(format!("{new} would exceed the hard limit of {hard}"));
    }
    if soft != 0 && new > soft {
        if *since == 0 {
            *since = now_ms;
        } else if delta > 0 && now_ms.saturating_sub(*since) >= grace_ms {
            return Err(format!(
                "{new} would exceed the soft limit of {soft}, exceeded since {} s ago (grace period {} s)",
                now_ms.saturating_sub(*since) / 1000,
                grace_ms / 1000
            ));
        }
    } else {
        *since = 0;
    }
    Ok(new)
}

/// Adds `bytes` and `inodes` to the usage of domain `domain` and of every quota above it.
/// With `enforce`, growth past a limit fails with `QuotaExceeded` naming the directory (and
/// the transaction, aborted, applies nothing); removals and moves to the trash pass
/// `enforce = false`, so that freeing space is never refused.
pub async fn charge(
    txn: &mut dyn KvTxn,
    now_ms: u64,
    domain: Ino,
    bytes: i64,
    inodes: i64,
    enforce: bool,
) -> TxResult<()> {
    if bytes == 0 && inodes == 0 {
        return Ok(());
    }
    let mut current = domain;
    for _ in 0..CHAIN_MAX {
        if current == 0 {
            return Ok(());
        }
        let key = keys::quota(current);
        let mut rec = load_quota(txn, current).await?;
        let l = rec.limits;
        let by_bytes = judge(
            rec.bytes_used,
            bytes,
            l.bytes_hard,
            l.bytes_soft,
            l.grace_ms,
            &mut rec.bytes_over_soft_since_ms,
            now_ms,
        );
        let by_inodes = judge(
            rec.inodes_used,
            inodes,
            l.inodes_hard,
            l.inodes_soft,
            l.grace_ms,
            &mut rec.inodes_over_soft_since_ms,
            now_ms,
        );
        for (what, judged) in [("bytes", &by_bytes), ("inodes", &by_inodes)] {
            if let (Err(why), true) = (judged, enforce) {
                let path = dir_path(txn, current).await?;
                fail!(QuotaExceeded, "disk quota exceeded: the quota of {path:?}: {what}: {why}");
            }
        }
        // Not enforced (freeing space, moving to the trash): the figures stay exact even past
        // a limit.
        rec.bytes_used = by_bytes.unwrap_or_else(|_| rec.bytes_used.saturating_add_signed(bytes));
        rec.inodes_used = by_inodes.unwrap_or_else(|_| rec.inodes_used.saturating_add_signed(inodes));
        put(txn, &key, &rec).await?;
        current = rec.parent;
    }
    fail!(Internal, "damaged metadata: quota {domain} is nested more than {CHAIN_MAX} deep")
}

impl QuotaRec {
    fn info(&self, ino: Ino, path: String) -> QuotaInfo {
        QuotaInfo {
            ino,
            path,
            limits: self.limits,
            bytes_used: self.bytes_used,
            inodes_used: self.inodes_used,
            bytes_over_soft_since_ms: self.bytes_over_soft_since_ms,
            inodes_over_soft_since_ms: self.inodes_over_soft_since_ms,
        }
    }
}

/// Bytes an inode counts: a regular file's size; nothing for other kinds.
pub fn bytes_of(rec: &InodeRec) -> i64 {
    if rec.attr.kind == FileKind::File {
        i64::try_from(rec.attr.size).unwrap_or(i64::MAX)
    } else {
        0
    }
}

fn check_limits(limits: &QuotaLimits) -> Result<(), wire::WireError> {
    if limits.bytes_soft != 0 && limits.bytes_hard != 0 && limits.bytes_soft > limits.bytes_hard {
        return Err(wire::werr!(
            Invalid,
            "the soft limit of bytes ({}) is above the hard limit ({})",
            limits.bytes_soft,
            limits.bytes_hard
        ));
    }
    if limits.inodes_soft != 0 && limits.inodes_hard != 0 && limits.inodes_soft > limits.inodes_hard {
        return Err(wire::werr!(
            Invalid,
            "the soft limit of inodes ({}) is above the hard limit ({})",
            limits.inodes_soft,
            limits.inodes_hard
        ));
    }
    if *limits == QuotaLimits::default() {
        return Err(wire::werr!(Invalid, "a quota needs at least one limit (bytes or inodes, hard or soft)"));
    }
    Ok(())
}

/// What a walk of a tree found.
#[derive(Default)]
struct Walked {
    bytes: u64,
    inodes: u64,
}

/// Walks the tree below directory `top`, pointing every inode of domain `from` at domain `to`
/// (stopping at directories with quotas of their own, whose `parent` moves from `from` to `to`
/// and whose usage is taken from their record), and counts the tree's usage. Refuses a tree
/// holding a file with links outside it.
async fn walk(txn: &mut dyn KvTxn, top: Ino, from: Ino, to: Ino) -> TxResult<Walked> {
    let mut found = Walked::default();
    let mut dirs = vec![top];
    // Files with several links: how many of their links were seen.
    let mut links: HashMap<Ino, (u32, u32)> = HashMap::new();
    let mut visited = 0usize;
    while let Some(dir) = dirs.pop() {
        let prefix = keys::dentry_prefix(dir);
        for (key, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
            visited += 1;
            if visited > SET_WALK_INODES_MAX {
                let path = dir_path(txn, top).await?;
                fail!(
                    TooLarge,
                    "directory {path:?} holds more than {SET_WALK_INODES_MAX} inodes; set its quota before filling it, or on its subdirectories"
                );
            }
            let entry: DentryRec = keys::decode(&key, &value).map_err(abort)?;
            let mut rec = load(txn, entry.ino).await?;
            if rec.attr.kind == FileKind::Dir && rec.quota == rec.attr.ino {
                let qkey = keys::quota(rec.attr.ino);
                let mut q = load_quota(txn, rec.attr.ino).await?;
                found.bytes = found.bytes.saturating_add(q.bytes_used);
                found.inodes = found.inodes.saturating_add(q.inodes_used + 1);
                if q.parent == from {
                    q.parent = to;
                    put(txn, &qkey, &q).await?;
                }
                continue;
            }
            if rec.attr.nlink > 1 && rec.attr.kind != FileKind::Dir {
                let seen = links.entry(rec.attr.ino).or_insert((0, rec.attr.nlink));
                seen.0 += 1;
                if seen.0 > 1 {
                    continue;
                }
            }
            found.inodes += 1;
            found.bytes = found.bytes.saturating_add(bytes_of(&rec) as u64);
            if rec.quota == from {
                rec.quota = to;
                put(txn, &keys::inode(rec.attr.ino), &rec).await?;
            }
            if rec.attr.kind == FileKind::Dir {
                dirs.push(rec.attr.ino);
            }
        }
    }
    if let Some((ino, (seen, nlink))) = links.iter().find(|(_, (seen, nlink))| seen < nlink) {
        let path = dir_path(txn, top).await?;
        fail!(
            Invalid,
            "regular file (inode {ino}) below {path:?} has {nlink} links, {seen} of them below it: a quota needs every link of a file inside its tree"
        );
    }
    Ok(found)
}

/// `SetQuota`: sets, changes or (with `None`) removes the quota of directory `ino`.
pub async fn set(txn: &mut dyn KvTxn, now_ms: u64, ino: Ino, limits: Option<QuotaLimits>) -> TxResult<MetaReply> {
    let mut dir = load(txn, ino).await?;
    if dir.attr.kind != FileKind::Dir {
        fail!(Invalid, "a quota is set on a directory; inode {ino} is a {}", dir.attr.kind.name());
    }
    let key = keys::quota(ino);
    let existing = get::<QuotaRec>(txn, &key).await?;
    let Some(limits) = limits else {
        let Some(rec) = existing else {
            let path = dir_path(txn, ino).await?;
            fail!(NotFound, "directory {path:?} has no quota");
        };
        walk(txn, ino, ino, rec.parent).await?;
        dir.quota = rec.parent;
        put(txn, &keys::inode(ino), &dir).await?;
        txn.delete(&key).await?;
        return Ok(MetaReply::Quotas(Vec::new()));
    };
    check_limits(&limits).map_err(abort)?;
    let mut rec = match existing {
        Some(rec) => rec,
        None => {
            let outer = dir.quota;
            let found = walk(txn, ino, outer, ino).await?;
            dir.quota = ino;
            put(txn, &keys::inode(ino), &dir).await?;
            QuotaRec {
                limits,
                parent: outer,
                bytes_used: found.bytes,
                inodes_used: found.inodes,
                bytes_over_soft_since_ms: 0,
                inodes_over_soft_since_ms: 0,
            }
        }
    };
    rec.limits = limits;
    // Soft limits start their grace period when found exceeded (now, for a new quota).
    let over = |used: u64, soft: u64| soft != 0 && used > soft;
    if !over(rec.bytes_used, limits.bytes_soft) {
        rec.bytes_over_soft_since_ms = 0;
    } else if rec.bytes_over_soft_since_ms == 0 {
        rec.bytes_over_soft_since_ms = now_ms;
    }
    if !over(rec.inodes_used, limits.inodes_soft) {
        rec.inodes_over_soft_since_ms = 0;
    } else if rec.inodes_over_soft_since_ms == 0 {
        rec.inodes_over_soft_since_ms = now_ms;
    }
    put(txn, &key, &rec).await?;
    let path = dir_path(txn, ino).await?;
    Ok(MetaReply::Quotas(vec![rec.info(ino, path)]))
}

/// `GetQuota`: the quota of `ino`, or with `nearest` of the nearest directory above it that
/// has one.
pub async fn get_quota(txn: &mut dyn KvTxn, ino: Ino, nearest: bool) -> TxResult<MetaReply> {
    let rec = load(txn, ino).await?;
    let domain = if rec.quota == ino || (nearest && rec.quota != 0) { rec.quota } else { 0 };
    if domain == 0 {
        return Ok(MetaReply::Quotas(Vec::new()));
    }
    let q = load_quota(txn, domain).await?;
    let path = dir_path(txn, domain).await?;
    Ok(MetaReply::Quotas(vec![q.info(domain, path)]))
}

/// `ListQuotas`: every quota.
pub async fn list(txn: &mut dyn KvTxn) -> TxResult<MetaReply> {
    let prefix = [keys::prefix::QUOTA];
    let mut out = Vec::new();
    for (key, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        let Some(bytes) = key.get(1..9).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
            continue;
        };
        let ino = u64::from_be_bytes(bytes);
        let rec: QuotaRec = keys::decode(&key, &value).map_err(abort)?;
        let path = dir_path(txn, ino).await?;
        out.push(rec.info(ino, path));
    }
    Ok(MetaReply::Quotas(out))
}

#[cfg(test)]
mod tests {
    use super::judge;

    #[test]
    fn hard_limits_refuse_growth_only() {
        let mut since = 0;
        assert_eq!(judge(90, 10, 100, 0, 0, &mut since, 5), Ok(100));
        assert!(judge(90, 11, 100, 0, 0, &mut since, 5).is_err());
        // Shrinking is allowed even above the limit.
        assert_eq!(judge(150, -10, 100, 0, 0, &mut since, 5), Ok(140));
    }

    #[test]
    fn soft_limits_start_a_grace_period() {
        let mut since = 0;
        assert_eq!(judge(90, 20, 0, 100, 1000, &mut since, 5000), Ok(110));
        assert_eq!(since, 5000);
        assert_eq!(judge(110, 1, 0, 100, 1000, &mut since, 5500), Ok(111));
        assert!(judge(111, 1, 0, 100, 1000, &mut since, 6000).is_err());
        assert_eq!(judge(111, -20, 0, 100, 1000, &mut since, 7000), Ok(91));
        assert_eq!(since, 0);
    }
}
