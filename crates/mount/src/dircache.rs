//! Directory attributes the mount keeps for the attribute timeout, to answer GETATTR itself.
//!
//! Why: after every create, unlink, mkdir or rename in a directory the kernel drops its cached
//! attributes of the directory, and the next path walk through it asks for them again (it
//! needs the mode to check search permission). Asking the metadata service would add a round
//! trip to every create and remove. Instead the service answers each change with the
//! directory's attributes after it (post-operation attributes, as NFS does), and GETATTR of a
//! directory is answered from here while they are younger than the attribute timeout: the same
//! staleness bound the kernel's own cache has for other clients' changes, and exact for this
//! mount's own.
//!
//! Order: attributes fetched by a read (LOOKUP, GETATTR, READDIRPLUS) are stamped with when
//! the read *started*, and never replace an entry stamped later, so a read that raced with a
//! change of this mount cannot bring back the attributes from before the change. What this
//! mount changes but is not told the result of (a rename moves a directory and changes two, an
//! xattr change moves a ctime) is forgotten by the caller once the change is made, leaving a
//! mark that keeps out reads started before it.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use wire::{Attr, FileKind, Ino};

/// Most directories kept; when full, the cache starts over (it only saves round trips).
const ENTRIES_MAX: usize = 1 << 16;

pub(crate) struct DirCache {
    ttl: Duration,
    /// Attributes (or `None`: forgotten) and when they were known.
    entries: HashMap<Ino, (Option<Attr>, Instant)>,
    /// Nothing known before this is kept (the last `clear`).
    cleared_at: Instant,
}

impl DirCache {
    pub(crate) fn new(ttl: Duration) -> DirCache {
        DirCache { ttl, entries: HashMap::new(), cleared_at: Instant::now() }
    }

    /// Keeps `attr` (if a directory's) as known at `at`, unless something later is known.
    pub(crate) fn put(&mut self, attr: &Attr, at: Instant) {
        if attr.kind != FileKind::Dir || self.ttl.is_zero() || at < self.cleared_at {
            return;
        }
        self.keep(attr.ino, Some(attr.clone()), at);
    }

    fn keep(&mut self, ino: Ino, attr: Option<Attr>, at: Instant) {
        if let Some((_, known)) = self.entries.get(&ino) {
            if *known > at {
                return;
            }
        } else if self.entries.len() >= ENTRIES_MAX {
            self.clear(at);
        }
        self.entries.insert(ino, (attr, at));
    }

    /// The attributes of directory `ino` and how much longer they may be used, if still fresh.
    pub(crate) fn get(&self, ino: Ino, now: Instant) -> Option<(Attr, Duration)> {
        let (attr, at) = self.entries.get(&ino)?;
        let left = self.ttl.checked_sub(now.saturating_duration_since(*at))?;
        (!left.is_zero()).then(|| attr.clone().map(|a| (a, left)))?
    }

    /// Forgets `ino` as of `at`: reads started before then are not kept either.
    pub(crate) fn forget(&mut self, ino: Ino, at: Instant) {
        self.keep(ino, None, at);
    }

    /// Forgets everything as of `at`.
    pub(crate) fn clear(&mut self, at: Instant) {
        self.entries.clear();
        self.cleared_at = self.cleared_at.max(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(ino: Ino, nlink: u32) -> Attr {
        Attr { ino, nlink, ..crate::attr::test_attr(FileKind::Dir) }
    }

    #[test]
    fn fresh_entries_are_served_with_the_time_left() {
        let mut c = DirCache::new(Duration::from_secs(1));
        let t0 = Instant::now();
        c.put(&dir(5, 2), t0);
        let (a, left) = c.get(5, t0 + Duration::from_millis(300)).unwrap();
        assert_eq!(a.nlink, 2);
        assert_eq!(left, Duration::from_millis(700));
        assert!(c.get(5, t0 + Duration::from_secs(1)).is_none());
        assert!(c.get(6, t0).is_none());
    }

    #[test]
    fn an_older_read_does_not_replace_a_newer_change() {
        let mut c = DirCache::new(Duration::from_secs(1));
        let t0 = Instant::now();
        c.put(&dir(5, 3), t0 + Duration::from_millis(10)); // post-operation attributes
        c.put(&dir(5, 2), t0); // a read that started before the change
        assert_eq!(c.get(5, t0 + Duration::from_millis(20)).unwrap().0.nlink, 3);
        c.put(&dir(5, 4), t0 + Duration::from_millis(30));
        assert_eq!(c.get(5, t0 + Duration::from_millis(40)).unwrap().0.nlink, 4);
    }

    #[test]
    fn files_are_not_kept_and_forgetting_works() {
        let mut c = DirCache::new(Duration::from_secs(1));
        let t0 = Instant::now();
        c.put(&Attr { ino: 7, ..crate::attr::test_attr(FileKind::File) }, t0);
        assert!(c.get(7, t0).is_none());
        c.put(&dir(8, 2), t0);
        c.put(&dir(9, 2), t0);
        let t1 = t0 + Duration::from_millis(5);
        c.forget(8, t1);
        assert!(c.get(8, t1).is_none() && c.get(9, t1).is_some());
        // A read that started before the forgetting does not bring the entry back; a later one does.
        c.put(&dir(8, 2), t0 + Duration::from_millis(1));
        assert!(c.get(8, t1).is_none());
        c.put(&dir(8, 3), t1 + Duration::from_millis(1));
        assert_eq!(c.get(8, t1 + Duration::from_millis(2)).unwrap().0.nlink, 3);
        let t2 = t1 + Duration::from_millis(10);
        c.clear(t2);
        assert!(c.get(9, t2).is_none());
        c.put(&dir(9, 2), t2 - Duration::from_millis(1));
        assert!(c.get(9, t2).is_none());
        c.put(&dir(9, 2), t2);
        assert!(c.get(9, t2).is_some());
    }

    #[test]
    fn a_zero_timeout_keeps_nothing() {
        let mut c = DirCache::new(Duration::ZERO);
        let t0 = Instant::now();
        c.put(&dir(5, 2), t0);
        assert!(c.get(5, t0).is_none());
    }
}
