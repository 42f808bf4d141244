//! Lock exclusion: clients take, renew and release an exclusive lock on one shared file
//! through the real lock manager, while messages are lost and servers crash.
//!
//! Each client acts as a careful lock holder must under leases: it believes it holds the lock
//! from the moment a grant arrives until it decides to release it, or until its lease may have
//! run out, counted from when it *sent* the last request that the server answered (the grant
//! or a renewal), whichever comes first; a renewal sent after that moment restores nothing.
//! What must hold: no two clients believe they hold the lock at the same moment. (Lock records
//! themselves are checked by [`crate::invariants`]: no two live conflicting locks on a file.)

use crate::workload::Verdicts;
use client::Client;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wire::{Ino, LockKind, LockRange};

/// The lease clients ask for on their locks.
pub const LOCK_LEASE: Duration = Duration::from_secs(3);
/// How often a holder renews.
const RENEW_EVERY: Duration = Duration::from_millis(800);

/// Who believes they hold the lock, and until when at the latest.
#[derive(Default)]
pub struct Holders(Mutex<BTreeMap<usize, Instant>>);

impl Holders {
    /// Client `me` was granted the lock now, its belief lasting until `until`. A grant that
    /// arrives after its lease may have lapsed (its request waited that long) is no belief: the
    /// client lets it go at once, and another may rightly hold the lock by then.
    fn granted(&self, me: usize, until: Instant, verdicts: &Verdicts) {
        let now = Instant::now();
        if until <= now {
            return;
        }
        let mut held = self.0.lock();
        for (other, other_until) in held.iter() {
            if *other != me && *other_until > now {
                verdicts.violation(format!(
                    "locks: client {me} was granted the exclusive lock while client {other} still holds it (for {} ms more)",
                    (*other_until - now).as_millis()
                ));
            }
        }
        held.insert(me, until);
    }

    fn extend(&self, me: usize, until: Instant) {
        if let Some(held) = self.0.lock().get_mut(&me) {
            *held = until;
        }
    }

    fn release(&self, me: usize) {
        self.0.lock().remove(&me);
    }
}

fn whole(kind: LockKind, me: usize) -> LockRange {
    LockRange { start: 0, end: u64::MAX, kind, pid: me as u32 + 1 }
}

/// Client `me` takes, holds, renews and releases the lock on `ino` until `stop`.
pub async fn lock_loop(
    me: usize,
    client: Client,
    ino: Ino,
    seed: u64,
    holders: Arc<Holders>,
    stop: Arc<AtomicBool>,
    verdicts: Arc<Verdicts>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6c6f_636b ^ (me as u64) << 32);
    let session = me as u64 + 1;
    let lease_ms = LOCK_LEASE.as_millis() as u64;
    let trace = verdicts.trace.clone();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..1500))).await;
        let asked = Instant::now();
        match client.lock(ino, session, 1, whole(LockKind::Write, me), lease_ms).await {
            Ok(None) => {
                trace.note(format_args!("client{me} lock granted"));
                let mut valid_until = asked + LOCK_LEASE;
                holders.granted(me, valid_until, &verdicts);
                let hold_until = Instant::now() + Duration::from_millis(rng.gen_range(0..2500));
                while Instant::now() < hold_until && Instant::now() < valid_until {
                    tokio::time::sleep(RENEW_EVERY.min(hold_until - Instant::now())).await;
                    let renewing = Instant::now();
                    if renewing >= valid_until {
                        break;
                    }
                    if client.renew_lease(session, lease_ms).await.is_ok() {
                        valid_until = renewing + LOCK_LEASE;
                        holders.extend(me, valid_until);
                    }
                }
                holders.release(me);
                let expired = Instant::now() >= valid_until;
                trace.note(format_args!(
                    "client{me} lock released{}",
                    if expired { " (lease may have lapsed)" } else { "" }
                ));
                // Its belief is gone either way; the unlock may be lost, and the lease then ends it.
                let _ = client.lock(ino, session, 1, whole(LockKind::Unlock, me), lease_ms).await;
            }
            Ok(Some(_)) => trace.note(format_args!("client{me} lock busy")),
            Err(e) => trace.note(format_args!("client{me} lock failed: {:?}", e.code)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Trace;

    #[tokio::test(start_paused = true)]
    async fn a_grant_while_another_believes_it_holds_is_a_violation() {
        let verdicts =
            Verdicts { violations: Mutex::new(Vec::new()), ops: Default::default(), trace: Trace::new(false) };
        let holders = Holders::default();
        let now = Instant::now();
        holders.granted(0, now + Duration::from_secs(3), &verdicts);
        // Client 0's belief ran out (its lease may have lapsed): a grant to client 1 is fine.
        tokio::time::sleep(Duration::from_secs(3)).await;
        holders.granted(1, Instant::now() + Duration::from_secs(3), &verdicts);
        assert!(verdicts.violations.lock().is_empty());
        // Client 1 renewed; client 0 is granted while client 1 still believes it holds.
        holders.extend(1, Instant::now() + Duration::from_secs(3));
        tokio::time::sleep(Duration::from_secs(1)).await;
        holders.granted(0, Instant::now() + Duration::from_secs(3), &verdicts);
        let found = verdicts.violations.lock().clone();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("client 0 was granted the exclusive lock while client 1 still holds it"));
        // A grant that arrives after its lease may have lapsed is let go at once: no belief,
        // whoever holds the lock (the simulation's seed 138 with no clock skew allowance: a
        // lock request's commit stalled 3.5 s, and its grant arrived after the lock had rightly
        // passed to the other client).
        holders.granted(0, Instant::now(), &verdicts);
        assert_eq!(verdicts.violations.lock().len(), 1);
        // After client 1 released, a grant is fine again.
        holders.release(1);
        holders.release(0);
        holders.granted(1, Instant::now() + Duration::from_secs(3), &verdicts);
        assert_eq!(verdicts.violations.lock().len(), 1);
    }
}
