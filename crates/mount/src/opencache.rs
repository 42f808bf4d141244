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

use std::collections::HashMap;
use std::time::{Duration, Instant};
use wire::Ino;

/// Most files kept; when full, the cache starts over (it only saves round trips).
const ENTRIES_MAX: usize = 1 << 16;

/// Kept answers (for the mount, `client::FirstChunks`) by inode.
pub(crate) struct OpenCache<T> {
    ttl: Duration,
    entries: HashMap<Ino, (Instant, T)>,
    /// Moves with every [`OpenCache::changed`]: a fetch that started before is not kept.
    epoch: u64,
}

impl<T: Clone> OpenCache<T> {
    pub(crate) fn new(ttl: Duration) -> OpenCache<T> {
        OpenCache { ttl, entries: HashMap::new(), epoch: 0 }
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

    /// A change of this mount that may move some file's attributes or data: nothing kept is
    /// used again, nor anything a fetch in flight brings.
    pub(crate) fn changed(&mut self) {
        if !self.entries.is_empty() {
            self.entries.clear();
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
}
