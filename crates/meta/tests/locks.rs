//! The lock manager through the service's front door: conflicts between owners and sessions,
//! F_GETLK answers, release, and leases that free a dead client's locks.

mod common;

use common::*;
use meta::MetaOptions;
use wire::{ErrorCode, LockKind, LockRange, MetaOp, MetaReply, ROOT_INO};

fn range(start: u64, end: u64, kind: LockKind) -> LockRange {
    LockRange { start, end, kind, pid: 7 }
}

fn lock(ino: u64, session: u64, owner: u64, r: LockRange, lease_ms: u64) -> MetaOp {
    MetaOp::Lock { ino, session, owner, range: r, lease_ms }
}

fn granted(reply: MetaReply) -> bool {
    match reply {
        MetaReply::Lock { granted, .. } => granted,
        other => panic!("unexpected reply {other:?}"),
    }
}

#[tokio::test]
async fn owners_conflict_share_and_release() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await.ino;
    // Session 1 owner 1 write-locks bytes 0..=99.
    assert!(granted(ok(svc, lock(f, 1, 1, range(0, 99, LockKind::Write), 60_000)).await));
    // Another session's owner cannot read-lock overlapping bytes, and learns who holds them.
    match ok(svc, lock(f, 2, 9, range(50, 60, LockKind::Read), 60_000)).await {
        MetaReply::Lock { granted: false, conflict: Some(c) } => assert_eq!(c, range(0, 99, LockKind::Write)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Another owner of the same session conflicts too (POSIX locks belong to owners).
    assert!(!granted(ok(svc, lock(f, 1, 2, range(0, 0, LockKind::Write), 60_000)).await));
    // Bytes after the range are free.
    assert!(granted(ok(svc, lock(f, 2, 9, range(100, 200, LockKind::Write), 60_000)).await));
    // F_GETLK reports without taking anything.
    let test = ok(svc, MetaOp::TestLock { ino: f, session: 2, owner: 9, range: range(0, 10, LockKind::Read) }).await;
    assert!(matches!(test, MetaReply::Lock { granted: false, conflict: Some(_) }), "{test:?}");
    // The holder downgrades to a read lock: readers may now share it.
    assert!(granted(ok(svc, lock(f, 1, 1, range(0, 99, LockKind::Read), 60_000)).await));
    assert!(granted(ok(svc, lock(f, 2, 9, range(0, 10, LockKind::Read), 60_000)).await));
    // Unlock is idempotent and frees the bytes for a writer.
    for _ in 0..2 {
        assert!(granted(ok(svc, lock(f, 1, 1, range(0, u64::MAX, LockKind::Unlock), 60_000)).await));
    }
    assert!(granted(ok(svc, lock(f, 2, 9, range(0, 99, LockKind::Unlock), 60_000)).await));
    assert!(granted(ok(svc, lock(f, 1, 2, range(0, 99, LockKind::Write), 60_000)).await));
    // Locking a missing inode fails; a backwards range is refused.
    err(svc, lock(999_999, 1, 1, range(0, 1, LockKind::Write), 60_000), ErrorCode::NotFound).await;
    err(svc, lock(f, 1, 1, range(5, 1, LockKind::Write), 60_000), ErrorCode::Invalid).await;
}

#[tokio::test]
async fn a_dead_sessions_locks_lapse_with_its_lease() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await.ino;
    assert!(granted(ok(svc, lock(f, 1, 1, range(0, u64::MAX, LockKind::Write), 300)).await));
    assert!(!granted(ok(svc, lock(f, 2, 1, range(0, 0, LockKind::Read), 60_000)).await));
    // Renewing keeps them.
    ok(svc, MetaOp::RenewLease { session: 1, lease_ms: 300 }).await;
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert!(!granted(ok(svc, lock(f, 2, 1, range(0, 0, LockKind::Read), 60_000)).await));
    // Without renewal the lease runs out and the locks no longer count.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(granted(ok(svc, lock(f, 2, 1, range(0, 0, LockKind::Write), 60_000)).await));
    // Ending a session releases its locks at once.
    ok(svc, MetaOp::RenewLease { session: 2, lease_ms: 0 }).await;
    assert!(granted(ok(svc, lock(f, 3, 1, range(0, u64::MAX, LockKind::Write), 60_000)).await));
}

/// A session's locks keep conflicting for `clock_skew_max_ms` after its lease's recorded end:
/// the server that recorded the lease may have had a clock that much behind this one's, and the
/// holder believes in its locks for its whole lease.
#[tokio::test]
async fn an_expired_lease_still_counts_within_the_clock_skew_allowance() {
    let env = env_with(MetaOptions { clock_skew_max_ms: 400, ..test_options() }).await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await.ino;
    assert!(granted(ok(svc, lock(f, 1, 1, range(0, u64::MAX, LockKind::Write), 200)).await));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let probe = MetaOp::TestLock { ino: f, session: 2, owner: 1, range: range(0, 0, LockKind::Write) };
    assert!(!granted(ok(svc, probe.clone()).await), "past the lease, within the allowance: still held");
    assert!(!granted(ok(svc, lock(f, 2, 1, range(0, 0, LockKind::Write), 60_000)).await));
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(granted(ok(svc, probe).await));
    assert!(granted(ok(svc, lock(f, 2, 1, range(0, 0, LockKind::Write), 60_000)).await), "past the allowance");
}
