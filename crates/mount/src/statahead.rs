//! Directory listings fetched ahead of LOOKUPs (what Lustre calls statahead).
//!
//! Why: a program that stats or opens many files of one directory by name (mdtest's stat
//! phase, a dataset indexer calling `os.stat` per file, `rm -r`) makes the kernel send one
//! LOOKUP per name once its entries have expired, each a round trip to the metadata service.
//! When the service finds [`MISSES_TO_FETCH`] names of one directory within the entry timeout
//! (names it does not find are not counted: creating a file looks its name up first), the mount
//! fetches the directory's listing with attributes (pages of [`crate::dir::READDIR_PAGE_ENTRIES`],
//! in the background) and answers the following LOOKUPs of names in it without a round trip.
//! A listing that answered fewer LOOKUPs than one per 16 of its entries (a few files opened
//! at random in a large directory) is not fetched again for 8 entry timeouts.
//!
//! What it answers is what the kernel would hold had it looked each name up when the listing
//! was fetched: an entry is used only until the entry timeout after the fetch *started*, with
//! the time left as its entry and attribute timeout, so other clients' changes show within the
//! same bound as through the kernel's own caches. Only positive entries of non-directories are
//! kept (a name missing from a listing still goes to the service; directories' attributes move
//! with every change inside them and are kept by `dircache.rs`).
//!
//! This mount's own changes must show at once. A change that can move a kept file's
//! attributes (a write, truncate, chmod, link, rename, xattr change, create, a commit at
//! close) calls [`Statahead::changed`], which drops every listing and every fetch in flight: listings are cheap to refetch, and a stale size handed to the kernel is not. An
//! unlink only drops the removed name from its directory's listing (and from the listing a
//! fetch in flight brings back), unless the unlinked inode has other names kept (their link
//! count moved).

use std::collections::HashMap;
use std::time::{Duration, Instant};
use wire::{Attr, DirEntry, FileKind, Ino};

/// LOOKUPs of one directory that go to the service within the entry timeout before its listing
/// is fetched.
pub(crate) const MISSES_TO_FETCH: u32 = 8;
/// Most entries fetched for one directory's listing; a larger directory keeps its first ones.
pub(crate) const LISTING_ENTRIES_MAX: usize = 16_384;
/// A listing that answered fewer LOOKUPs than one per this many of its entries before it
/// expired is not fetched again for [`QUIET_TIMEOUTS`] entry timeouts.
const HITS_PER_ENTRIES_MIN: usize = 16;
const QUIET_TIMEOUTS: u32 = 8;
/// Most directories whose LOOKUPs are counted; beyond, those without a listing are forgotten.
const DIRS_MAX: usize = 4096;
/// Most entries kept over all directories; beyond, every listing is dropped.
const KEPT_ENTRIES_MAX: usize = 65_536;

pub(crate) struct Statahead {
    ttl: Duration,
    dirs: HashMap<Ino, Dir>,
    /// Entries in all kept listings.
    kept: usize,
    /// Inodes with more than one link, and how many kept entries name them.
    linked: HashMap<Ino, u32>,
    /// Moves with every [`Statahead::changed`]: a fetch that started before is not kept.
    epoch: u64,
    /// Numbers fetches.
    next_fetch: u64,
}

#[derive(Default)]
struct Dir {
    /// LOOKUPs sent to the service since `since`.
    misses: u32,
    since: Option<Instant>,
    /// The fetch in flight, if any.
    fetching: Option<u64>,
    /// Names this mount unlinked while it was in flight: not kept from what it brings back.
    removed: Vec<String>,
    /// No fetch before then: the last listing answered too few LOOKUPs to pay for itself.
    quiet_until: Option<Instant>,
    listing: Option<Listing>,
}

struct Listing {
    /// When the fetch started.
    at: Instant,
    entries: HashMap<String, Attr>,
    /// LOOKUPs it answered.
    hits: usize,
}

/// Identifies a fetch: where it started.
#[derive(Debug, PartialEq, Clone, Copy)]
pub(crate) struct Ticket {
    dir: Ino,
    epoch: u64,
    id: u64,
    at: Instant,
}

impl Ticket {
    /// The directory to fetch.
    pub(crate) fn dir(&self) -> Ino {
        self.dir
    }
}

impl Statahead {
    /// `ttl` is the mount's entry timeout; zero turns statahead off.
    pub(crate) fn new(ttl: Duration) -> Statahead {
        Statahead { ttl, dirs: HashMap::new(), kept: 0, linked: HashMap::new(), epoch: 0, next_fetch: 0 }
    }

    /// A LOOKUP of `name` in `dir` at `now`: answered from a listing, or not.
    pub(crate) fn lookup(&mut self, dir: Ino, name: &str, now: Instant) -> Option<(Attr, Duration)> {
        let ttl = self.ttl;
        let d = self.dirs.get_mut(&dir)?;
        let l = d.listing.as_mut()?;
        if let Some(left) = ttl.checked_sub(now.saturating_duration_since(l.at)).filter(|left| !left.is_zero()) {
            // A name the listing does not have goes to the service; no refetch until the
            // listing expires.
            let a = l.entries.get(name)?;
            l.hits += 1;
            return Some((a.clone(), left));
        }
        let old = d.listing.take().expect("a listing is kept");
        if old.hits * HITS_PER_ENTRIES_MIN < old.entries.len() {
            // Lookups spread over a directory much larger than they are many (a shuffled
            // dataset opened file by file): fetching it again would cost more than it saves.
            d.quiet_until = Some(now + QUIET_TIMEOUTS * ttl);
        }
        self.forget_entries(&old.entries);
        None
    }

    /// The service found a name in `dir` that no listing answered for, in a LOOKUP that
    /// started at `at`: returns a ticket when the directory's listing should now be fetched
    /// (call [`Statahead::fetched`] or [`Statahead::fetch_failed`] with it). Names not found
    /// are not counted: creating files makes the kernel look up each new name first, and
    /// fetching the listing of a directory being filled would be wasted.
    pub(crate) fn found(&mut self, dir: Ino, at: Instant) -> Option<Ticket> {
        if self.ttl.is_zero() {
            return None;
        }
        let ttl = self.ttl;
        let (epoch, id) = (self.epoch, self.next_fetch);
        if self.dirs.len() >= DIRS_MAX && !self.dirs.contains_key(&dir) {
            self.dirs.retain(|_, d| d.listing.is_some() || d.fetching.is_some());
            if self.dirs.len() >= DIRS_MAX {
                self.drop_listings();
                self.dirs.clear();
            }
        }
        let d = self.dirs.entry(dir).or_default();
        if d.since.is_none_or(|s| at.saturating_duration_since(s) > ttl) {
            d.since = Some(at);
            d.misses = 0;
        }
        d.misses += 1;
        let quiet = d.quiet_until.is_some_and(|until| at < until);
        if d.misses < MISSES_TO_FETCH || d.fetching.is_some() || d.listing.is_some() || quiet {
            return None;
        }
        d.fetching = Some(id);
        d.removed.clear();
        d.misses = 0;
        self.next_fetch += 1;
        Some(Ticket { dir, epoch, id, at })
    }

    /// Keeps the listing a fetch returned, less what this mount unlinked meanwhile, unless it
    /// changed something else since the fetch started.
    pub(crate) fn fetched(&mut self, ticket: Ticket, entries: Vec<DirEntry>) {
        let epoch = self.epoch;
        let Some(d) = self.dirs.get_mut(&ticket.dir) else { return };
        if d.fetching != Some(ticket.id) {
            return;
        }
        d.fetching = None;
        let removed = std::mem::take(&mut d.removed);
        if ticket.epoch != epoch {
            return;
        }
        let mut entries: HashMap<String, Attr> =
            entries.into_iter().filter(|e| e.attr.kind != FileKind::Dir).map(|e| (e.name, e.attr)).collect();
        for name in &removed {
            entries.remove(name);
        }
        for a in entries.values().filter(|a| a.nlink > 1) {
            *self.linked.entry(a.ino).or_default() += 1;
        }
        self.kept += entries.len();
        if let Some(old) = d.listing.replace(Listing { at: ticket.at, entries, hits: 0 }) {
            self.forget_entries(&old.entries);
        }
        if self.kept > KEPT_ENTRIES_MAX {
            self.drop_listings();
        }
    }

    /// A fetch failed: the directory may be fetched again.
    pub(crate) fn fetch_failed(&mut self, ticket: Ticket) {
        if let Some(d) = self.dirs.get_mut(&ticket.dir) {
            if d.fetching == Some(ticket.id) {
                d.fetching = None;
                d.removed.clear();
            }
        }
    }

    /// This mount changed something that can move a kept file's attributes. Called before and
    /// after every write, so it costs only a counter while nothing is kept: the new epoch
    /// already keeps out what the fetches in flight bring back.
    pub(crate) fn changed(&mut self) {
        self.epoch += 1;
        if self.kept > 0 {
            self.drop_listings();
        }
    }

    /// This mount unlinked `name` from `dir`.
    pub(crate) fn removed(&mut self, dir: Ino, name: &str) {
        let Some(d) = self.dirs.get_mut(&dir) else { return };
        if d.fetching.is_some() {
            d.removed.push(name.to_string());
        }
        if let Some(a) = d.listing.as_mut().and_then(|l| l.entries.remove(name)) {
            self.forget_entry(&a);
            if a.nlink > 1 {
                self.changed();
            }
        }
    }

    /// This mount removed a name of inode `ino` (told by the service's answer).
    pub(crate) fn unlinked(&mut self, ino: Ino) {
        if self.linked.contains_key(&ino) {
            self.changed();
        }
    }

    fn forget_entries(&mut self, entries: &HashMap<String, Attr>) {
        for a in entries.values() {
            self.forget_entry(a);
        }
    }

    fn forget_entry(&mut self, a: &Attr) {
        self.kept -= 1;
        if a.nlink > 1 {
            if let Some(n) = self.linked.get_mut(&a.ino) {
                *n -= 1;
                if *n == 0 {
                    self.linked.remove(&a.ino);
                }
            }
        }
    }

    fn drop_listings(&mut self) {
        // Directories with no LOOKUPs counted lately are forgotten, so the map stays small.
        self.dirs.retain(|_, d| {
            d.listing = None;
            d.fetching = None;
            d.removed.clear();
            d.misses > 0
        });
        self.kept = 0;
        self.linked.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(1);

    fn attr(ino: Ino, kind: FileKind, nlink: u32) -> Attr {
        Attr { ino, nlink, ..crate::attr::test_attr(kind) }
    }

    fn entry(name: &str, ino: Ino) -> DirEntry {
        DirEntry { name: name.into(), attr: attr(ino, FileKind::File, 1) }
    }

    /// Reports names found by the service until the cache asks for a fetch, and returns its
    /// ticket.
    fn ticket(s: &mut Statahead, dir: Ino, now: Instant) -> Ticket {
        for i in 0..MISSES_TO_FETCH {
            assert_eq!(s.lookup(dir, &format!("m{i}"), now), None);
            if let Some(t) = s.found(dir, now) {
                return t;
            }
        }
        panic!("no fetch after {MISSES_TO_FETCH} misses");
    }

    fn hit(s: &mut Statahead, dir: Ino, name: &str, now: Instant) -> bool {
        s.lookup(dir, name, now).is_some()
    }

    #[test]
    fn a_listing_answers_lookups_until_the_timeout_after_its_fetch_started() {
        let mut s = Statahead::new(TTL);
        let t0 = Instant::now();
        let t = ticket(&mut s, 7, t0);
        // Only one fetch at a time.
        assert_eq!(s.found(7, t0), None);
        s.fetched(
            t,
            vec![entry("a", 10), entry("b", 11), DirEntry { name: "d".into(), attr: attr(12, FileKind::Dir, 2) }],
        );
        let later = t0 + Duration::from_millis(400);
        let (a, left) = s.lookup(7, "a", later).expect("listed");
        assert_eq!(a.ino, 10);
        assert_eq!(left, Duration::from_millis(600));
        // Directories are not kept; names not listed go to the service, without a new fetch
        // while the listing is fresh.
        assert!(!hit(&mut s, 7, "d", later));
        assert!(!hit(&mut s, 7, "new", later));
        for _ in 0..2 * MISSES_TO_FETCH {
            assert_eq!(s.found(7, later), None);
        }
        // Other directories are not answered from it.
        assert!(!hit(&mut s, 8, "a", later));
        // Expired: the service again, and a new fetch only after more misses.
        assert!(!hit(&mut s, 7, "a", t0 + TTL));
        assert!(matches!(ticket(&mut s, 7, t0 + TTL), Ticket { dir: 7, .. }));
    }

    #[test]
    fn misses_spread_wider_than_the_timeout_never_fetch() {
        let mut s = Statahead::new(TTL);
        let t0 = Instant::now();
        for i in 0..4 * MISSES_TO_FETCH {
            let now = t0 + TTL.mul_f64(f64::from(i) / f64::from(MISSES_TO_FETCH - 2));
            assert_eq!(s.found(7, now), None, "miss {i}");
        }
    }

    #[test]
    fn a_change_of_this_mount_drops_listings_and_fetches_in_flight() {
        let mut s = Statahead::new(TTL);
        let t0 = Instant::now();
        let t = ticket(&mut s, 7, t0);
        s.fetched(t, vec![entry("a", 10)]);
        let in_flight = ticket(&mut s, 8, t0);
        s.changed();
        assert!(!hit(&mut s, 7, "a", t0));
        s.fetched(in_flight, vec![entry("b", 11)]);
        assert!(!hit(&mut s, 8, "b", t0), "a fetch started before the change is not kept");
        // Also when nothing was kept at the change.
        let mut s = Statahead::new(TTL);
        let in_flight = ticket(&mut s, 8, t0);
        s.changed();
        s.fetched(in_flight, vec![entry("b", 11)]);
        assert!(!hit(&mut s, 8, "b", t0), "a fetch in flight at a change with nothing kept is not kept");
        assert!(matches!(ticket(&mut s, 8, t0), Ticket { dir: 8, .. }), "and the directory may be fetched again");
        // A failed fetch lets the directory be fetched again.
        let t = ticket(&mut s, 9, t0);
        s.fetch_failed(t);
        assert!(matches!(ticket(&mut s, 9, t0), Ticket { dir: 9, .. }));
    }

    #[test]
    fn an_unlink_drops_its_name_and_fetches_started_before_it() {
        let mut s = Statahead::new(TTL);
        let t0 = Instant::now();
        let t = ticket(&mut s, 7, t0);
        s.fetched(t, vec![entry("a", 10), entry("b", 11)]);
        s.removed(7, "a");
        assert!(!hit(&mut s, 7, "a", t0));
        assert!(hit(&mut s, 7, "b", t0), "other names stay");

        let mut s = Statahead::new(TTL);
        let t = ticket(&mut s, 7, t0);
        s.removed(7, "a");
        s.fetched(t, vec![entry("a", 10), entry("b", 11)]);
        assert!(!hit(&mut s, 7, "a", t0), "a name unlinked while the listing was fetched is not kept");
        assert!(hit(&mut s, 7, "b", t0));
    }

    #[test]
    fn unlinking_one_of_several_links_drops_everything() {
        let t0 = Instant::now();
        let linked = |name: &str| DirEntry { name: name.into(), attr: attr(10, FileKind::File, 2) };
        let mut s = Statahead::new(TTL);
        let t = ticket(&mut s, 7, t0);
        s.fetched(t, vec![linked("a"), linked("b"), entry("c", 11)]);
        s.removed(7, "a");
        assert!(!hit(&mut s, 7, "b", t0), "b's link count moved");
        assert!(!hit(&mut s, 7, "c", t0));

        // A name not kept whose inode has kept names elsewhere: told by its inode number.
        let mut s = Statahead::new(TTL);
        let t = ticket(&mut s, 7, t0);
        s.fetched(t, vec![linked("b"), entry("c", 11)]);
        s.removed(9, "x");
        s.unlinked(12);
        assert!(hit(&mut s, 7, "b", t0), "an unrelated inode changes nothing");
        s.unlinked(10);
        assert!(!hit(&mut s, 7, "b", t0));
        assert!(!hit(&mut s, 7, "c", t0));
    }

    #[test]
    fn a_listing_that_answered_few_lookups_is_not_fetched_again_for_a_while() {
        let mut s = Statahead::new(TTL);
        let t0 = Instant::now();
        let t = ticket(&mut s, 7, t0);
        let many: Vec<DirEntry> =
            (0..HITS_PER_ENTRIES_MIN as u64 * 10).map(|i| entry(&format!("f{i}"), 100 + i)).collect();
        s.fetched(t, many.clone());
        for i in 0..9 {
            assert!(hit(&mut s, 7, &format!("f{i}"), t0));
        }
        // Expired after 9 hits for 160 entries: quiet for QUIET_TIMEOUTS timeouts.
        let expired = t0 + TTL;
        assert!(!hit(&mut s, 7, "f50", expired));
        for _ in 0..4 * MISSES_TO_FETCH {
            assert_eq!(s.found(7, expired), None);
        }
        let later = expired + QUIET_TIMEOUTS * TTL;
        let t = ticket(&mut s, 7, later);
        s.fetched(t, many);
        // Enough hits: fetched again as soon as more misses come.
        for i in 0..10 {
            assert!(hit(&mut s, 7, &format!("f{i}"), later));
        }
        let expired = later + TTL;
        assert!(!hit(&mut s, 7, "f50", expired));
        assert!(matches!(ticket(&mut s, 7, expired), Ticket { dir: 7, .. }));
    }

    #[test]
    fn the_directories_counted_stay_few() {
        let mut s = Statahead::new(TTL);
        let t0 = Instant::now();
        let t = ticket(&mut s, 7, t0);
        s.fetched(t, vec![entry("a", 10)]);
        for dir in 100..100 + 3 * DIRS_MAX as u64 {
            assert_eq!(s.found(dir, t0), None);
            assert!(s.dirs.len() <= DIRS_MAX);
        }
        assert!(hit(&mut s, 7, "a", t0), "a directory with a listing is kept while others come and go");
    }

    #[test]
    fn a_zero_timeout_turns_it_off() {
        let mut s = Statahead::new(Duration::ZERO);
        let t0 = Instant::now();
        for _ in 0..2 * MISSES_TO_FETCH {
            assert_eq!(s.found(7, t0), None);
        }
    }
}
