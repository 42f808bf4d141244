//! The lock manager: POSIX byte-range locks (and flock, which front ends map onto whole-file
//! byte-range locks, as the Linux NFS client does) shared by every client of the cluster, held
//! under leases so that a client that dies does not keep its locks forever.
//!
//! State lives in the KV engine like everything else (architecture invariant: no durable state
//! outside it): one record per (file, session, owner) listing that owner's ranges, and one lease
//! record per client session. A lock request is one transaction that scans the file's lock
//! records, so two requests on one file serialize through the engine's conflict detection.
//! Locks of a session whose lease has run out are ignored, and deleted by the next request that
//! meets them; there is no background sweep and no clock shared beyond the wall clock the
//! idempotency records already rely on.
//!
//! Requests never wait here: a front end that must block (F_SETLKW) retries. A request with a
//! request id is recorded with its reply in the transaction that applies it, as namespace
//! mutations are: a copy of it that arrives or commits late (a retry after a lost reply, while
//! the first attempt waited on a slow engine) is answered from the record instead of being
//! applied again. Applied again, a late unlock would release a lock its owner took after it
//! (the deterministic simulation found this: seed 983 of `crates/sim` before the fix).

use crate::keys::{self, LeaseRec, LockRec};
use crate::store::{self, abort, fail, get, put, TxResult};
use kv::{KvEngine, KvTxn};
use std::collections::HashMap;
use wire::{Ino, LockKind, LockRange, MetaOp, MetaReply, WireError};

/// Longest lease a client may ask for; a client renews well before its lease runs out.
pub const LEASE_MS_MAX: u64 = 10 * 60 * 1000;
/// Most separate ranges one owner may hold on one file (each is a few bytes in one record).
pub const RANGES_PER_OWNER_MAX: usize = 4096;

/// Whether `op` is answered by this module.
pub fn is_lock_op(op: &MetaOp) -> bool {
    matches!(op, MetaOp::Lock { .. } | MetaOp::TestLock { .. } | MetaOp::RenewLease { .. })
}

/// Answers a lock operation, each in its own transaction; `tracked` (request id, when its
/// record expires) makes a lock or a renewal apply once however often it arrives (request id 0:
/// not recorded).
///
/// A session's lease recorded by one server is judged expired by another only
/// `clock_skew_max_ms` after its recorded end: the other server's clock may be that much ahead,
/// and the holder believes in its locks for its whole lease.
pub async fn apply(
    engine: &dyn KvEngine,
    op: MetaOp,
    tracked: (u128, u64),
    clock_skew_max_ms: u64,
) -> Result<MetaReply, WireError> {
    let (request_id, expires_ms) = tracked;
    match op {
        MetaOp::Lock { ino, session, owner, range, lease_ms } => {
            check_range(&range)?;
            let lease_ms = lease_ms.min(LEASE_MS_MAX);
            store::transact(engine, move |txn| {
                Box::pin(async move {
                    if let Some(reply) = replayed(txn, request_id).await? {
                        return Ok(reply);
                    }
                    let clock = LeaseClock::now(clock_skew_max_ms);
                    let reply = lock(txn, ino, session, owner, range, lease_ms, clock).await?;
                    record(txn, request_id, &reply, expires_ms).await?;
                    Ok(reply)
                })
            })
            .await
        }
        MetaOp::TestLock { ino, session, owner, range } => {
            check_range(&range)?;
            store::transact(engine, move |txn| {
                Box::pin(async move {
                    let expired_before_ms = store::now_ms().saturating_sub(clock_skew_max_ms);
                    let conflict = find_conflict(txn, ino, session, owner, &range, expired_before_ms, false).await?;
                    Ok(MetaReply::Lock { granted: conflict.is_none(), conflict })
                })
            })
            .await
        }
        MetaOp::RenewLease { session, lease_ms } => {
            let lease_ms = lease_ms.min(LEASE_MS_MAX);
            store::transact(engine, move |txn| {
                Box::pin(async move {
                    if let Some(reply) = replayed(txn, request_id).await? {
                        return Ok(reply);
                    }
                    let key = keys::lease(session);
                    if lease_ms == 0 {
                        txn.delete(&key).await?;
                    } else {
                        put(txn, &key, &LeaseRec { expires_ms: store::now_ms().saturating_add(lease_ms) }).await?;
                    }
                    record(txn, request_id, &MetaReply::Ok, expires_ms).await?;
                    Ok(MetaReply::Ok)
                })
            })
            .await
        }
        other => Err(wire::werr!(Internal, "{other:?} is not a lock operation")),
    }
}

/// The recorded reply of request `request_id`, if it was applied already.
async fn replayed(txn: &mut dyn KvTxn, request_id: u128) -> TxResult<Option<MetaReply>> {
    if request_id == 0 {
        return Ok(None);
    }
    match crate::namespace::recorded_reply(txn, request_id).await? {
        Some(answer) => answer.map(Some).map_err(abort),
        None => Ok(None),
    }
}

/// Records `reply` as the answer of request `request_id` (none for 0).
async fn record(txn: &mut dyn KvTxn, request_id: u128, reply: &MetaReply, expires_ms: u64) -> TxResult<()> {
    if request_id != 0 {
        crate::namespace::record_reply(txn, request_id, &Ok(reply.clone()), expires_ms).await?;
    }
    Ok(())
}

fn check_range(range: &LockRange) -> Result<(), WireError> {
    if range.start > range.end {
        return Err(wire::werr!(Invalid, "lock range {}..={} ends before it starts", range.start, range.end));
    }
    Ok(())
}

async fn lock(
    txn: &mut dyn KvTxn,
    ino: Ino,
    session: u64,
    owner: u64,
    range: LockRange,
    lease_ms: u64,
    clock: LeaseClock,
) -> TxResult<MetaReply> {
    if get::<keys::InodeRec>(txn, &keys::inode(ino)).await?.is_none() {
        fail!(NotFound, "no inode {ino} to lock");
    }
    put(txn, &keys::lease(session), &LeaseRec { expires_ms: clock.now_ms.saturating_add(lease_ms) }).await?;
    if range.kind != LockKind::Unlock {
        if let Some(conflict) = find_conflict(txn, ino, session, owner, &range, clock.expired_before_ms, true).await? {
            return Ok(MetaReply::Lock { granted: false, conflict: Some(conflict) });
        }
    }
    let key = keys::lock(ino, session, owner);
    let mut rec: LockRec = get(txn, &key).await?.unwrap_or_default();
    rec.ranges = set_range(&rec.ranges, range);
    if rec.ranges.len() > RANGES_PER_OWNER_MAX {
        fail!(
            TooLarge,
            "lock owner {owner} would hold {} ranges of inode {ino}; at most {RANGES_PER_OWNER_MAX}",
            rec.ranges.len()
        );
    }
    if rec.ranges.is_empty() {
        txn.delete(&key).await?;
    } else {
        put(txn, &key, &rec).await?;
    }
    Ok(MetaReply::Lock { granted: true, conflict: None })
}

/// The time a lock request is judged at: now, by this server's clock, and the moment before
/// which other sessions' leases count as expired (now less the clock skew bound).
#[derive(Clone, Copy)]
struct LeaseClock {
    now_ms: u64,
    expired_before_ms: u64,
}

impl LeaseClock {
    fn now(clock_skew_max_ms: u64) -> LeaseClock {
        let now_ms = store::now_ms();
        LeaseClock { now_ms, expired_before_ms: now_ms.saturating_sub(clock_skew_max_ms) }
    }
}

/// The first range of another live owner that conflicts with `range`: a session is live unless
/// its lease ended before `expired_before_ms`. With `clean`, records of sessions whose lease ran
/// out are deleted on the way.
async fn find_conflict(
    txn: &mut dyn KvTxn,
    ino: Ino,
    session: u64,
    owner: u64,
    range: &LockRange,
    expired_before_ms: u64,
    clean: bool,
) -> TxResult<Option<LockRange>> {
    let prefix = keys::lock_prefix(ino);
    let mut alive: HashMap<u64, bool> = HashMap::new();
    for (key, value) in store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await? {
        let Some((_, their_session, their_owner)) = keys::parse_lock(&key) else {
            fail!(Internal, "malformed lock key {}", keys::describe(&key));
        };
        if their_session == session && their_owner == owner {
            continue;
        }
        let live = match alive.get(&their_session) {
            Some(&live) => live,
            None => {
                let lease: Option<LeaseRec> = get(txn, &keys::lease(their_session)).await?;
                let live = lease.is_some_and(|l| l.expires_ms > expired_before_ms);
                alive.insert(their_session, live);
                live
            }
        };
        if !live {
            if clean {
                txn.delete(&key).await?;
            }
            continue;
        }
        let rec: LockRec = keys::decode(&key, &value).map_err(abort)?;
        if let Some(c) = rec.ranges.iter().find(|held| held.conflicts_with(range)) {
            return Ok(Some(*c));
        }
    }
    Ok(None)
}

/// One owner's ranges after a request: the request's bytes take the request's kind (or are
/// released, for `Unlock`), as POSIX says a new lock replaces the owner's overlapping ones.
/// Returns sorted, disjoint ranges with adjacent ranges of one kind merged.
pub fn set_range(held: &[LockRange], req: LockRange) -> Vec<LockRange> {
    let mut out: Vec<LockRange> = Vec::with_capacity(held.len() + 2);
    for h in held {
        if !h.overlaps(&req) {
            out.push(*h);
            continue;
        }
        // Keep the parts of `h` outside the request.
        if h.start < req.start {
            out.push(LockRange { end: req.start - 1, ..*h });
        }
        if h.end > req.end {
            out.push(LockRange { start: req.end + 1, ..*h });
        }
    }
    if req.kind != LockKind::Unlock {
        out.push(req);
    }
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<LockRange> = Vec::with_capacity(out.len());
    for r in out {
        match merged.last_mut() {
            Some(last) if last.kind == r.kind && last.end.checked_add(1).is_some_and(|next| next >= r.start) => {
                last.end = last.end.max(r.end);
                last.pid = r.pid;
            }
            _ => merged.push(r),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64, kind: LockKind) -> LockRange {
        LockRange { start, end, kind, pid: 1 }
    }

    #[test]
    fn requests_split_replace_and_merge_ranges() {
        use LockKind::*;
        let held = set_range(&[], r(0, 99, Write));
        assert_eq!(held, vec![r(0, 99, Write)]);
        // Downgrading the middle splits the range in three.
        let held = set_range(&held, r(10, 19, Read));
        assert_eq!(held, vec![r(0, 9, Write), r(10, 19, Read), r(20, 99, Write)]);
        // Unlocking across two pieces.
        let held = set_range(&held, r(5, 25, Unlock));
        assert_eq!(held, vec![r(0, 4, Write), r(26, 99, Write)]);
        // Filling the hole merges everything back.
        let held = set_range(&held, r(5, 25, Write));
        assert_eq!(held, vec![r(0, 99, Write)]);
        // To the end of the file, then releasing all.
        let held = set_range(&held, r(50, u64::MAX, Read));
        assert_eq!(held, vec![r(0, 49, Write), r(50, u64::MAX, Read)]);
        assert_eq!(set_range(&held, r(0, u64::MAX, Unlock)), vec![]);
    }

    #[test]
    fn only_overlapping_exclusive_ranges_conflict() {
        use LockKind::*;
        assert!(r(0, 10, Write).conflicts_with(&r(10, 20, Read)));
        assert!(!r(0, 10, Read).conflicts_with(&r(5, 20, Read)));
        assert!(!r(0, 9, Write).conflicts_with(&r(10, 20, Write)));
        assert!(r(0, u64::MAX, Read).conflicts_with(&r(u64::MAX, u64::MAX, Write)));
    }
}
