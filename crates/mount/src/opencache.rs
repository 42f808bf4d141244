//! Files' attributes and first chunk records as this mount's opens fetched them, kept for the
//! open-cache time (`MountOptions::open_cache`, `--open-cache-ms`; zero, off, by default) so that opening a file again soon costs no round trip, and neither does
//! the GETATTR the kernel sends right after an open (a `stat` of the open file, or the atime
//! check that follows every read).
//!
//! Why: close-to-open asks the metadata service at every open (`Client::getattr_for_open`,
//! the attributes and the records of the first chunks in one call). A program that opens the
//! same small files again and again (a data loader's epochs over a small set, a build reading
//! headers) pays that round trip each time, although the kernel itself would trust attributes
//! this old. With the cache on, an open of a file whose answer is younger than the open-cache
//! time uses it instead, and other clients' changes show within that bound; off, every open
//! asks (close-to-open between mounts, which `trove mount` keeps by default, as JuiceFS does
//! with its `--open-cache 0`).
//!
//! This mount's own changes must show at once: every change that can move a file's attributes
//! or data calls [`OpenCache::changed`] (the same places that drop statahead listings), which
//! drops everything; an answer whose fetch started before a change is not kept (an epoch
//! number, as in `statahead.rs`). An entry is used only until the open-cache time after its
//! fetch *started*.
//!
//! Apart from the cache, and on whatever its time: the answer a LOOKUP brought
//! (`Client::lookup_for_open`, the same attributes and records) is handed to the OPEN of that
//! inode by the same process that follows it within [`HANDOFF_MS`], once. Almost always that
//! is the LOOKUP of the open's own path walk, whose fetch started after the open(2) did, so
//! close-to-open holds and a cold small file costs one metadata round trip, not two. When it
//! is not (the same thread's `stat` of the name, then its open within the hand-off time, the
//! kernel still holding the entry), the answer the open uses is at most [`HANDOFF_MS`] old:
//! other clients' closes show at an open from that long after them. An OPEN that finds no
//! such answer (the name was looked up by an earlier call, another process, or too long ago)
//! asks the service.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use wire::Ino;

/// Most files kept; when full, the cache starts over (it only saves round trips).
const ENTRIES_MAX: usize = 1 << 16;

/// How long after its fetch started a LOOKUP's answer waits for the OPEN it was fetched for.
pub(crate) const HANDOFF_MS: u64 = 20;
/// Most LOOKUP answers waiting for their OPEN; when full, the stale ones go, then all.
const HANDOFFS_MAX: usize = 1024;

/// Kept answers (for the mount, `client::FirstChunks`) by inode.
pub(crate) struct OpenCache<T> {
    ttl: Duration,
    entries: HashMap<Ino, (Instant, T)>,
    /// LOOKUP answers waiting for their OPEN: inode -> (fetch start, requesting process, answer).
    handoffs: HashMap<Ino, (Instant, u32, T)>,
    /// Moves with every [`OpenCache::changed`]: a fetch that started before is not kept.
    epoch: u64,
}

impl<T: Clone> OpenCache<T> {
    pub(crate) fn new(ttl: Duration) -> OpenCache<T> {
        OpenCache { ttl, entries: HashMap::new(), handoffs: HashMap::new(), epoch: 0 }
    }

    /// What an open of `ino` may use instead of asking, if a fetch of it started less than the
    /// attribute timeout ago.
    pub(crate) fn get(&self, ino: Ino, now: Instant) -> Option<T> {
        self.get_with_left(ino, now).map(|(first, _)| first)
    }

    /// [`OpenCache::get`], with how much longer the answer may be used.
    pub(crate) fn get_with_left(&self, ino: Ino, now: Instant) -> Option<(T, Duration)> {
        let (at, first) = self.entries.get(&ino)?;
        let age = now.saturating_duration_since(*at);
        (age < self.ttl).then(|| (first.clone(), self.ttl - age))
    }

    /// The epoch to hand back to [`OpenCache::put`] with what a fetch starting now brings.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Keeps what a fetch of `ino` that started at `at`, in epoch `epoch`, brought back, unless
    /// this mount changed something since.
    pub(crate) fn put(&mut self, ino: Ino, first: T, at: Instant, epoch: u64) {
        if self.ttl.is_zero() || epoch != self.epoch {
            return;
        }
        if self.entries.len() >= ENTRIES_MAX && !self.entries.contains_key(&ino) {
            let ttl = self.ttl;
            self.entries.retain(|_, (t, _)| t.elapsed() < ttl);
            if self.entries.len() >= ENTRIES_MAX {
                self.entries.clear();
            }
        }
        self.entries.insert(ino, (at, first));
    }

    /// Keeps what a LOOKUP by process `pid` that started at `at`, in epoch `epoch`, brought
    /// back for `ino`, for the OPEN that follows it ([`OpenCache::take_handoff`]); kept
    /// whatever the cache's time, unless this mount changed something since.
    pub(crate) fn hand_off(&mut self, ino: Ino, pid: u32, first: T, at: Instant, epoch: u64) {
        if epoch != self.epoch {
            return;
        }
        if self.handoffs.len() >= HANDOFFS_MAX && !self.handoffs.contains_key(&ino) {
            self.handoffs.retain(|_, (t, _, _)| t.elapsed() < Duration::from_millis(HANDOFF_MS));
            if self.handoffs.len() >= HANDOFFS_MAX {
                self.handoffs.clear();
            }
        }
        self.handoffs.insert(ino, (at, pid, first));
    }

    /// The answer a LOOKUP of `ino` by process `pid` fetched for this OPEN, if it started at
    /// most [`HANDOFF_MS`] before `now`; used once (any process's answer for `ino` goes).
    pub(crate) fn take_handoff(&mut self, ino: Ino, pid: u32, now: Instant) -> Option<T> {
        let (at, by, first) = self.handoffs.remove(&ino)?;
        let fresh = now.saturating_duration_since(at) < Duration::from_millis(HANDOFF_MS);
        (fresh && by == pid).then_some(first)
    }

    /// A change of this mount that may move some file's attributes or data: nothing kept is
    /// used again, nor anything a fetch in flight brings.
    pub(crate) fn changed(&mut self) {
        if !self.entries.is_empty() {
            self.entries.clear();
        }
        if !self.handoffs.is_empty() {
            self.handoffs.clear();
        }
        self.epoch += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_live_for_the_timeout_from_their_fetch_and_die_with_a_change() {
        let ttl = Duration::from_millis(100);
        let mut c: OpenCache<u32> = OpenCache::new(ttl);
        let t0 = Instant::now();
        c.put(5, 50, t0, c.epoch());
        assert_eq!(c.get(5, t0 + ttl / 2), Some(50));
        assert_eq!(c.get(5, t0 + ttl), None, "used past the timeout");
        assert_eq!(c.get(6, t0), None);

        // A fetch that started before a change of this mount brings nothing to keep.
        let epoch = c.epoch();
        c.changed();
        assert_eq!(c.get(5, t0), None, "kept across a change");
        c.put(7, 70, t0, epoch);
        assert_eq!(c.get(7, t0), None, "kept a fetch that raced with a change");
        c.put(7, 71, t0, c.epoch());
        assert_eq!(c.get(7, t0), Some(71));

        // Off with a zero timeout.
        let mut off: OpenCache<u32> = OpenCache::new(Duration::ZERO);
        off.put(1, 1, t0, off.epoch());
        assert_eq!(off.get(1, t0), None);
    }

    #[test]
    fn a_lookups_answer_serves_one_open_by_its_process_soon_after_whatever_the_cache_time() {
        // The cache is off (the default): hand-offs still work.
        let mut c: OpenCache<u32> = OpenCache::new(Duration::ZERO);
        let t0 = Instant::now();
        let soon = t0 + Duration::from_millis(HANDOFF_MS / 2);
        c.hand_off(5, 100, 50, t0, c.epoch());
        assert_eq!(c.take_handoff(5, 100, soon), Some(50));
        assert_eq!(c.take_handoff(5, 100, soon), None, "used twice");

        // Another process's open, or one too late, asks the service (and the answer is gone).
        c.hand_off(5, 100, 51, t0, c.epoch());
        assert_eq!(c.take_handoff(5, 200, soon), None, "served another process");
        assert_eq!(c.take_handoff(5, 100, soon), None);
        c.hand_off(5, 100, 52, t0, c.epoch());
        assert_eq!(c.take_handoff(5, 100, t0 + Duration::from_millis(HANDOFF_MS)), None, "served too late");

        // A change of this mount between the lookup and the open, or during the lookup.
        c.hand_off(6, 100, 60, t0, c.epoch());
        c.changed();
        assert_eq!(c.take_handoff(6, 100, soon), None, "kept across a change");
        let epoch = c.epoch();
        c.changed();
        c.hand_off(6, 100, 61, t0, epoch);
        assert_eq!(c.take_handoff(6, 100, soon), None, "kept a lookup that raced with a change");
        assert_eq!(c.get(6, t0), None, "a hand-off is not the cache");
    }
}
