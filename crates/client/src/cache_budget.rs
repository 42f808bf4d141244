//! The client-wide byte budget of the whole chunks that open files keep (`reader.rs`: chunks
//! read or written recently, and read-ahead that has arrived), so memory stays bounded however
//! many files are open: each file still keeps at most `ClientOptions::cached_chunks_max`
//! chunks, and all of them together at most `ClientOptions::cache_bytes_max` bytes, the
//! oldest cached anywhere going first (as JuiceFS's `--buffer-size` bounds its read buffers).
//!
//! A cached chunk holds a [`Charge`]: its bytes count against the budget from when it is
//! cached until the charge drops, however it leaves the cache (evicted here, replaced, dropped
//! by a write or a truncation, or with its file's handle), so the count cannot drift. The
//! budget keeps the charges in the order they were made, weakly; when the count is over the
//! limit, [`CacheBudget::trim`] asks the owners of the oldest to let them go. A trim takes an
//! owner's lock while holding none of its own, and owners call it after releasing theirs: the
//! budget's lock is never held across an owner's, so two files trimming at once cannot
//! deadlock.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Whoever keeps charged chunks: gives one up when the budget asks.
pub(crate) trait Evict: Send + Sync {
    /// Drops the cached chunk that holds `charge`, if it still does.
    fn evict(&self, charge: &Arc<Charge>);
}

/// The budget of one client (see the module text).
pub(crate) struct CacheBudget {
    bytes_max: u64,
    used_bytes: AtomicU64,
    /// Charges alive (for compacting `order`).
    live: AtomicUsize,
    /// Charges in the order they were made, oldest first; dropped ones are skipped.
    order: Mutex<VecDeque<Weak<Charge>>>,
}

/// The bytes of one cached chunk, counted until this drops.
pub(crate) struct Charge {
    budget: Arc<CacheBudget>,
    bytes: u64,
    owner: Weak<dyn Evict>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Stale entries `order` may hold beyond twice the live ones before it is compacted.
const STALE_ENTRIES_SLACK: usize = 64;

impl CacheBudget {
    pub(crate) fn new(bytes_max: u64) -> Arc<CacheBudget> {
        Arc::new(CacheBudget {
            bytes_max,
            used_bytes: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            order: Mutex::new(VecDeque::new()),
        })
    }

    /// Bytes cached now, by every open file of the client together.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Acquire)
    }

    /// Counts `bytes` for a chunk `owner` caches; the caller keeps the charge with the chunk
    /// and calls [`CacheBudget::trim`] once it holds none of its own locks.
    pub(crate) fn charge(self: &Arc<Self>, bytes: u64, owner: Weak<dyn Evict>) -> Arc<Charge> {
        self.used_bytes.fetch_add(bytes, Ordering::AcqRel);
        let live = self.live.fetch_add(1, Ordering::AcqRel) + 1;
        let charge = Arc::new(Charge { budget: self.clone(), bytes, owner });
        let mut order = self.order.lock();
        if order.len() > 2 * live + STALE_ENTRIES_SLACK {
            order.retain(|c| c.strong_count() > 0);
        }
        order.push_back(Arc::downgrade(&charge));
        charge
    }

    /// Evicts the oldest cached chunks, whoever holds them, until the count is within the
    /// limit. Call it holding no owner's lock.
    pub(crate) fn trim(&self) {
        while self.used_bytes() > self.bytes_max {
            let Some(oldest) = self.order.lock().pop_front() else { return };
            let Some(charge) = oldest.upgrade() else { continue };
            if let Some(owner) = charge.owner.upgrade() {
                owner.evict(&charge);
            }
            // The chunk's own reference is gone; this one drops the count.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An owner keeping charges in a list, as a file's cache keeps chunks.
    #[derive(Default)]
    struct Owner(Mutex<Vec<Arc<Charge>>>);

    impl Evict for Owner {
        fn evict(&self, charge: &Arc<Charge>) {
            self.0.lock().retain(|c| !Arc::ptr_eq(c, charge));
        }
    }

    fn cache(budget: &Arc<CacheBudget>, owner: &Arc<Owner>, bytes: u64) {
        let weak: Weak<dyn Evict> = Arc::downgrade(owner) as Weak<dyn Evict>;
        let charge = budget.charge(bytes, weak);
        owner.0.lock().push(charge);
        budget.trim();
    }

    #[test]
    fn many_owners_together_stay_within_the_limit_the_oldest_going_first() {
        let budget = CacheBudget::new(10 << 20);
        let owners: Vec<Arc<Owner>> = (0..8).map(|_| Arc::default()).collect();
        for round in 0..4 {
            for o in &owners {
                cache(&budget, o, 1 << 20);
                assert!(budget.used_bytes() <= 10 << 20, "round {round}: {} bytes", budget.used_bytes());
            }
        }
        // 32 MiB cached in all, 10 MiB kept: the last ten charges, of the last rounds.
        assert_eq!(budget.used_bytes(), 10 << 20);
        let kept: usize = owners.iter().map(|o| o.0.lock().len()).sum();
        assert_eq!(kept, 10);
        assert!(owners.iter().all(|o| o.0.lock().len() <= 2), "the oldest went first, every owner keeps its newest");
    }

    #[test]
    fn charges_dropped_any_way_return_their_bytes_and_the_order_stays_small() {
        let budget = CacheBudget::new(u64::MAX);
        let owner: Arc<Owner> = Arc::default();
        for _ in 0..10_000 {
            cache(&budget, &owner, 4096);
            owner.0.lock().clear(); // a write or truncation drops what was cached
        }
        assert_eq!(budget.used_bytes(), 0);
        assert!(budget.order.lock().len() <= 2 + STALE_ENTRIES_SLACK + 1, "{}", budget.order.lock().len());
        // An owner that is gone (its file closed) takes its charges with it.
        let gone: Arc<Owner> = Arc::default();
        cache(&budget, &gone, 1 << 20);
        drop(gone);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn a_trim_skips_owners_that_are_gone_and_charges_already_dropped() {
        let budget = CacheBudget::new(1 << 20);
        let a: Arc<Owner> = Arc::default();
        let b: Arc<Owner> = Arc::default();
        cache(&budget, &a, 1 << 20);
        a.0.lock().clear();
        cache(&budget, &b, 1 << 20);
        cache(&budget, &b, 1 << 20);
        assert_eq!(budget.used_bytes(), 1 << 20);
        assert_eq!(b.0.lock().len(), 1);
    }
}
