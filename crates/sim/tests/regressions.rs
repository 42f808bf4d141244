//! Bugs the simulation found in the real code, each kept as the seed that found it (with the
//! configuration it was found with) and, where one can be written, a direct test of the fixed
//! behaviour.
//!
//! - The data mover, when two moves of one chunk raced (a clone's slot and the original's, seen
//!   in the same scan), had the loser delete, as its own leftovers, the shards the winner had
//!   just placed and committed: the chunk was lost (seeds 34, 37, 59 and 134 of 1000, once the
//!   simulation ran the data mover). `jobs::repair`'s clean-up now keeps every shard the
//!   chunk's current record places.
//! - A lock request applied twice: an unlock whose first attempt waited on a slow engine and
//!   committed after the client had retried it and taken the lock again released the new lock,
//!   and another client was granted it (seed 983). Lock requests are now recorded with their
//!   reply, like namespace mutations, and a late copy is answered from the record.
//! - Leases judged by a clock ahead of the one that recorded them: with the metadata servers'
//!   clocks 149 ms apart (each within 250 ms of true time), a client's lock lease recorded by
//!   the server behind was judged expired by the server ahead while the client still rightly
//!   believed in it, and another client was granted the lock (seed 170, the first sweep with
//!   skewed clocks). The cluster manager's lease had the same flaw (two leaders at once, seeds
//!   1, 2, 14 and 15 with clocks 2 s apart). Leases now count `clock_skew_max_ms` past their
//!   recorded end when another server judges them, and the lease holder believes in its lease
//!   by the monotonic clock; `meta`'s tests `an_expired_lease_still_counts_within_the_clock_
//!   skew_allowance` and `the_lease_is_taken_over_only_after_the_clock_skew_allowance` test it
//!   directly. Seed 170 draws another run since the simulator grew (and so, since the client
//!   stopped fetching chunks that a rewrite covers, does seed 419, which took its place, and
//!   since the client's chunk cache, seed 524, which took 419's); seed 54 grants a lock twice
//!   when the servers' allowance is set to 0 (`Config::meta_clock_skew_max_ms`), and is kept
//!   both ways.
//! - A failed mutation applied late: a client's unlink of an absent name, delivered twice, was
//!   answered `NotFound`, and its second copy, held up until another client had made the name,
//!   removed the new file (seed 99, the first sweep with the shared directory's linearizability
//!   check). Only successful replies were recorded, on the reasoning that a failed operation
//!   wrote nothing; but a copy applied later may succeed where the first failed. A failure of a
//!   tracked request is now recorded too (`meta::namespace::record_failure`).
//! - A repair that lost the shard it wrote: scrub found a rotted shard, and the repair deleted
//!   it on its node before putting the rebuilt one under the same key; a repeated copy of the
//!   delete, delivered after the put, removed the new shard, and the chunk's record placed a
//!   shard no node had (seed 629 with the shared directory in one place, once the client's
//!   chunk cache changed the runs). The repair now sends the put alone: the node finds the copy
//!   it holds damaged and renames the new file over it.

use meta::{MetaOptions, MetaService};
use std::sync::Arc;
use wire::{Ino, LockKind, LockRange, MetaCall, MetaOp, MetaReply, ROOT_INO};

/// Runs `seed` as the simulator drew it before disks and clocks were simulated.
fn clean(seed: u64) {
    let outcome = sim::run(&sim::Config::without_disks(seed)).unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
    assert!(outcome.violations.is_empty(), "seed {seed}: {:#?}", outcome.violations);
}

#[test]
fn the_seeds_that_found_the_movers_race_pass() {
    for seed in [34, 37, 59, 134] {
        clean(seed);
    }
}

#[test]
fn the_seed_that_found_the_late_unlock_passes() {
    clean(983);
}

#[test]
fn the_seed_that_found_the_repair_losing_its_own_shard_passes() {
    let config = sim::Config { shared: sim::linear::Shared::OneDir, ..sim::Config::new(629) };
    let outcome = sim::run(&config).unwrap_or_else(|e| panic!("seed 629: {e:#}"));
    assert!(outcome.violations.is_empty(), "seed 629: {:#?}", outcome.violations);
}

#[test]
fn a_seed_that_grants_a_lock_twice_without_the_clock_skew_allowance_passes_with_it() {
    // Seed 170, which found the bug, draws another run since the simulator grew, and so do
    // seed 419 since the client's writes changed and seed 524 since its chunk cache; seed 54
    // shows it today (as do 385, 825, 861 and 954 of the first 1000). Should a change of the
    // simulator or the code move it off this seed too, find another with
    // `sim --seeds 1000 --meta-clock-skew-ms 0 --shared one-dir`.
    let found = sim::Config { shared: sim::linear::Shared::OneDir, ..sim::Config::new(54) };
    let without = sim::Config { meta_clock_skew_max_ms: Some(0), ..found.clone() };
    let outcome = sim::run(&without).unwrap_or_else(|e| panic!("seed 54: {e:#}"));
    assert!(
        outcome.violations.iter().any(|v| v.contains("locks:") && v.contains("was granted")),
        "seed 54 without the allowance no longer shows the bug: {:#?}",
        outcome.violations
    );
    let outcome = sim::run(&found).unwrap_or_else(|e| panic!("seed 54: {e:#}"));
    assert!(outcome.violations.is_empty(), "seed 54: {:#?}", outcome.violations);
}

#[tokio::test]
async fn a_late_copy_of_an_unlock_does_not_release_a_later_lock() {
    let svc = fresh_meta_service().await;
    let ino = create_f(&svc, 1).await;
    let range = |kind| LockRange { start: 0, end: u64::MAX, kind, pid: 1 };
    let lock = |request_id: u128, session: u64, kind| {
        let svc = svc.clone();
        async move {
            let op = MetaOp::Lock { ino, session, owner: 1, range: range(kind), lease_ms: 60_000 };
            match svc.call(MetaCall { request_id, op }).await {
                Ok(MetaReply::Lock { granted, .. }) => granted,
                other => panic!("lock: {other:?}"),
            }
        }
    };
    assert!(lock(10, 1, LockKind::Write).await, "session 1 locks");
    assert!(lock(11, 1, LockKind::Unlock).await, "session 1 unlocks");
    assert!(lock(12, 1, LockKind::Write).await, "session 1 locks again");
    // The unlock's late copy: same request id, answered from its record, not applied again.
    assert!(lock(11, 1, LockKind::Unlock).await);
    assert!(!lock(20, 2, LockKind::Write).await, "session 1 still holds the lock");
}

#[test]
fn the_seed_that_found_a_failed_unlink_applied_late_passes() {
    // As it was found: one shared directory, no renames.
    let config = sim::Config { shared: sim::linear::Shared::OneDir, ..sim::Config::new(99) };
    let outcome = sim::run(&config).unwrap_or_else(|e| panic!("seed 99: {e:#}"));
    assert!(outcome.violations.is_empty(), "seed 99: {:#?}", outcome.violations);
}

#[tokio::test]
async fn a_late_copy_of_a_failed_unlink_does_not_remove_a_file_made_since() {
    let svc = fresh_meta_service().await;
    let unlink = MetaCall { request_id: 7, op: MetaOp::Unlink { parent: ROOT_INO, name: "f".into() } };
    let told = svc.call(unlink.clone()).await.expect_err("nothing to unlink yet");
    assert_eq!(told.code, wire::ErrorCode::NotFound, "{told}");
    create_f(&svc, 8).await;
    // The unlink's late copy (same request id) gets the answer its client was given.
    let again = svc.call(unlink).await.expect_err("the late copy is answered as the first was");
    assert_eq!(again, told);
    let lookup = MetaOp::Lookup { parent: ROOT_INO, name: "f".into() };
    svc.call(MetaCall { request_id: 0, op: lookup })
        .await
        .unwrap_or_else(|e| panic!("the file made since is gone: {e}"));
}

/// A metadata service on a fresh in-memory engine, for the regressions that call it directly.
async fn fresh_meta_service() -> Arc<MetaService> {
    let engine: Arc<dyn kv::KvEngine> = Arc::new(kv_tests::memory::MemoryEngine::new());
    MetaService::new(engine, MetaOptions::default()).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Creates the file `/f` under the given request id; its inode.
async fn create_f(svc: &MetaService, request_id: u128) -> Ino {
    let create = MetaOp::Create { parent: ROOT_INO, name: "f".into(), mode: 0o644, uid: 0, gid: 0, exclusive: true };
    match svc.call(MetaCall { request_id, op: create }).await {
        Ok(MetaReply::Attr(a)) | Ok(MetaReply::Entry { attr: a, .. }) => a.ino,
        other => panic!("create: {other:?}"),
    }
}
