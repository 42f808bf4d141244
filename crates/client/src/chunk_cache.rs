//! The client's cache of whole chunks, one for all its files and opens, keyed by what a chunk
//! is rather than where it sits: its id and length. Chunks are copy-on-write (every version of
//! a chunk gets a fresh id, never reused) and a truncation that cuts into a chunk only lowers
//! its record's `len`, so the bytes under one key never change: a hit needs no revalidation,
//! a file opened again (a loader's next epoch, a second process, a gateway's next request)
//! finds what an earlier open read, and a file rewritten elsewhere simply names other keys.
//!
//! Bounded in bytes (`ClientOptions::cache_bytes_max`, `trove mount --chunk-cache-mib`): past
//! the limit the oldest chunks go, by their last use (a chunk on probation, below, by when it
//! was cached: a writer's chunks never read give way to a reader's). What enters:
//! - chunks read whole (sequential reads and their read-ahead), always;
//! - a chunk a handle wrote and committed, and a chunk fetched for a reader whose bytes the
//!   kernel's page cache is about to keep (a small file opened through the mount and read
//!   whole, a loader's sample), only on probation
//!   ([`ChunkCache::put_once`]): in a first-in first-out queue of at most [`ONCE_SHARE_DIVISOR`]th
//!   of the cache, whose lookups do not move it, and which lets its oldest go first, so a pass
//!   over more samples than memory holds neither copies every one of them into memory a second
//!   time nor pushes out what the cache holds (2Q's probation queue; the first pass over a
//!   1 GiB cache cost a page fault per 4 KiB it filled; a checkpoint written through the
//!   mount would push out the training data read before it, and the write buffers it holds go
//!   back to be reused only when let go). A chunk read again is put by a read
//!   that missed the page cache ([`ChunkCache::put`]), which takes it off probation: 2Q's
//!   memory of keys let go is not needed, as the mount sends such reads through `put`;
//! - for small random reads, which fetch only the bytes asked for, the chunk whole in the
//!   background once it has been asked for twice (as JuiceFS fetches a randomly read block
//!   whole, `--prefetch`), at most [`FILLS_MAX`] at a time. When that would evict another
//!   chunk, only if the chunk is wanted more than the least recently used one was hit (counts
//!   halved every [`AGE_EVENTS_MAX`] events, TinyLFU's admission): random reads over more data
//!   than the cache holds keep most of what it has instead of replacing it chunk by chunk, each
//!   replacement a whole-chunk fetch for one small read.
//!
//! Cached chunks are `Bytes` handed out by reference: an evicted chunk's memory lives on only
//! while a reply still holds a slice of it.

use crate::chunkio::Chunk;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use wire::ChunkId;

/// What a cached chunk is: its id and its length (bytes of the chunk a record covers).
pub(crate) type Key = (ChunkId, u32);

/// Whole-chunk fetches for random reads in flight at once, per client.
pub(crate) const FILLS_MAX: usize = 2;
/// Events (lookups of cached chunks and misses of small reads) after which every count is
/// halved, so that what was wanted long ago weighs less than what is wanted now.
pub(crate) const AGE_EVENTS_MAX: u32 = 1 << 14;
/// Chunks whose wants are counted at most; past it the counts start over.
const WANTED_MAX: usize = 1 << 16;
/// Stale recency entries kept beyond twice the live ones before the list is compacted.
const STALE_ENTRIES_SLACK: usize = 64;
/// The probation queue ([`ChunkCache::put_once`]) holds at most this fraction of the cache's
/// bytes (one chunk at least).
pub(crate) const ONCE_SHARE_DIVISOR: u64 = 8;

/// How the cache has done since the client started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkCacheStats {
    /// Bytes cached now.
    pub cached_bytes: u64,
    /// Chunks cached now.
    pub chunks: u64,
    /// Lookups that found their chunk.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Whole-chunk fetches started for small random reads.
    pub fills: u64,
    /// Chunks let go for others.
    pub evictions: u64,
}

/// The cache of one client (see the module text).
pub(crate) struct ChunkCache {
    bytes_max: u64,
    state: Mutex<State>,
    fills_inflight: Arc<AtomicUsize>,
    hits: AtomicU64,
    misses: AtomicU64,
    fills: AtomicU64,
    evictions: AtomicU64,
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Recency, least recent first: (stamp, key); an entry whose stamp has moved on is stale.
    order: VecDeque<(u64, Key)>,
    next_stamp: u64,
    used_bytes: u64,
    /// Misses of small reads by chunk not cached (admission counts).
    wanted: HashMap<Key, u32>,
    events: u32,
    /// The probation queue, oldest first: (stamp, key), stale like `order`'s when its entry's
    /// stamp moved on or it left probation.
    once: VecDeque<(u64, Key)>,
    once_bytes: u64,
}

struct Entry {
    data: Chunk,
    bytes: u64,
    stamp: u64,
    /// Lookups that found it (halved with the wants).
    hits: u32,
    /// On probation (`State::once`), not in the recency list.
    once: bool,
}

/// A whole-chunk fetch for random reads allowed to run: keeps its place among the
/// [`FILLS_MAX`] until dropped.
pub(crate) struct FillSlot(Arc<AtomicUsize>);

/// A fill [`ChunkCache::want`] allows: its slot, and whether the chunk it brings may enter the
/// memory cache (false: only the disk cache below takes it).
pub(crate) struct Fill {
    pub(crate) slot: FillSlot,
    pub(crate) to_memory: bool,
}

impl Drop for FillSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ChunkCache {
    pub(crate) fn new(bytes_max: u64) -> ChunkCache {
        ChunkCache {
            bytes_max,
            state: Mutex::new(State::default()),
            fills_inflight: Arc::new(AtomicUsize::new(0)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fills: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The chunk under `key`, if cached; a hit makes it the most recently used.
    pub(crate) fn get(&self, key: Key) -> Option<Chunk> {
        let mut st = self.state.lock();
        let stamp = st.next_stamp;
        let found = st.entries.get_mut(&key).map(|e| {
            e.hits = e.hits.saturating_add(1);
            if !e.once {
                e.stamp = stamp;
            }
            (e.once, e.data.clone())
        });
        let found = match found {
            Some((once, data)) => {
                if !once {
                    st.next_stamp += 1;
                    st.order.push_back((stamp, key));
                    st.compact();
                }
                st.tick();
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(data)
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        found
    }

    /// Whether `key` is cached (no recency change, not counted).
    pub(crate) fn contains(&self, key: Key) -> bool {
        self.state.lock().entries.contains_key(&key)
    }

    /// Caches `data` under `key`, letting the oldest chunks go past the limit. A
    /// chunk larger than the whole cache is not kept. A chunk on probation is taken off it.
    pub(crate) fn put(&self, key: Key, data: Chunk) {
        let bytes = data.len() as u64;
        if bytes > self.bytes_max {
            return;
        }
        let mut st = self.state.lock();
        st.insert(key, data, false);
        self.evict_past_limit(&mut st);
        st.compact();
    }

    /// Caches `data` under `key` on probation (see the module text): a chunk one reader asked
    /// for and the kernel's page cache will hold, or one a handle just wrote. Nothing is done
    /// for a key already cached.
    pub(crate) fn put_once(&self, key: Key, data: Chunk) {
        let bytes = data.len() as u64;
        if bytes > self.bytes_max {
            return;
        }
        let mut st = self.state.lock();
        if st.entries.contains_key(&key) {
            return;
        }
        st.insert(key, data, true);
        let once_max = self.bytes_max / ONCE_SHARE_DIVISOR;
        while st.once_bytes > once_max && st.once.len() > 1 {
            let Some(victim) = st.oldest_once() else { break };
            self.let_go(&mut st, victim);
        }
        self.evict_past_limit(&mut st);
        st.compact();
    }

    /// Lets chunks go until the cache is within its limit, the oldest first: of the least
    /// recently used chunk and the oldest on probation, whichever was last cached or hit
    /// earlier (a chunk on probation ages from when it was cached, as its hits do not renew it).
    /// So what a writer left on probation long ago gives way to what readers use now.
    fn evict_past_limit(&self, st: &mut State) {
        while st.used_bytes > self.bytes_max {
            let Some(victim) = st.oldest() else { break };
            self.let_go(st, victim);
        }
    }

    /// Removes `victim`.
    fn let_go(&self, st: &mut State, victim: Key) {
        let Some(e) = st.entries.remove(&victim) else { return };
        st.used_bytes -= e.bytes;
        if e.once {
            st.once_bytes -= e.bytes;
        }
        self.evictions.fetch_add(1, Ordering::Relaxed);
    }

    /// A small read of chunk `key` (of `bytes` bytes) missed: counts it, and says whether to
    /// fetch the chunk whole now (see the module text); the slot returned is held until that
    /// fetch ends. With `spill` (a disk cache below that lacks the chunk), a chunk this cache
    /// would not admit is still fetched, for the disk cache alone.
    pub(crate) fn want(&self, key: Key, bytes: u64, spill: bool) -> Option<Fill> {
        if bytes == 0 || (bytes > self.bytes_max && !spill) {
            return None;
        }
        let mut st = self.state.lock();
        if st.entries.contains_key(&key) {
            return None;
        }
        if st.wanted.len() >= WANTED_MAX && !st.wanted.contains_key(&key) {
            st.wanted.clear();
        }
        let wants = {
            let w = st.wanted.entry(key).or_insert(0);
            *w = w.saturating_add(1);
            *w
        };
        st.tick();
        if wants < 2 {
            return None;
        }
        let mut to_memory = bytes <= self.bytes_max;
        if to_memory && st.used_bytes + bytes > self.bytes_max {
            // Full: only a chunk wanted more than the least recently used one was hit.
            let victim_hits = st.least_recent_peek().and_then(|v| st.entries.get(&v)).map_or(u32::MAX, |e| e.hits);
            to_memory = wants > victim_hits;
        }
        if !to_memory && !spill {
            return None;
        }
        let inflight = self.fills_inflight.fetch_add(1, Ordering::AcqRel);
        if inflight >= FILLS_MAX {
            self.fills_inflight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // Counted again only if the fill fails and it is missed again.
        st.wanted.remove(&key);
        self.fills.fetch_add(1, Ordering::Relaxed);
        Some(Fill { slot: FillSlot(self.fills_inflight.clone()), to_memory })
    }

    /// Bytes cached now.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.state.lock().used_bytes
    }

    pub(crate) fn stats(&self) -> ChunkCacheStats {
        let (cached_bytes, chunks) = {
            let st = self.state.lock();
            (st.used_bytes, st.entries.len() as u64)
        };
        ChunkCacheStats {
            cached_bytes,
            chunks,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

impl State {
    /// Puts `data` under `key`, on probation (`once`) or as the most recently used chunk,
    /// replacing what the key held (the same bytes: a key's never change).
    fn insert(&mut self, key: Key, data: Chunk, once: bool) {
        let bytes = data.len() as u64;
        self.wanted.remove(&key);
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let old = self.entries.insert(key, Entry { data, bytes, stamp, hits: 0, once });
        if let Some(old) = old {
            self.used_bytes -= old.bytes;
            if old.once {
                self.once_bytes -= old.bytes;
            }
        }
        self.used_bytes += bytes;
        if once {
            self.once_bytes += bytes;
            self.once.push_back((stamp, key));
        } else {
            self.order.push_back((stamp, key));
        }
    }

    /// The key of whichever was cached or hit earlier, the least recently used chunk or the
    /// oldest on probation, taken off its list.
    fn oldest(&mut self) -> Option<Key> {
        let recent = self.least_recent_peek().and_then(|k| self.entries.get(&k)).map(|e| e.stamp);
        let once = self.oldest_once_peek().and_then(|k| self.entries.get(&k)).map(|e| e.stamp);
        match (recent, once) {
            (Some(r), Some(o)) if o < r => self.oldest_once(),
            (Some(_), _) => self.least_recent(),
            (None, _) => self.oldest_once(),
        }
    }

    /// Removes stale entries from the front of the probation queue; the key of the oldest
    /// chunk on it, left in place.
    fn oldest_once_peek(&mut self) -> Option<Key> {
        while let Some(&(stamp, key)) = self.once.front() {
            if self.entries.get(&key).is_some_and(|e| e.once && e.stamp == stamp) {
                return Some(key);
            }
            self.once.pop_front();
        }
        None
    }

    /// The key of the oldest chunk on probation, taken off the queue.
    fn oldest_once(&mut self) -> Option<Key> {
        let key = self.oldest_once_peek()?;
        self.once.pop_front();
        Some(key)
    }

    /// Removes stale entries from the front of the recency list; the key of the least
    /// recently used chunk, left in place.
    fn least_recent_peek(&mut self) -> Option<Key> {
        while let Some(&(stamp, key)) = self.order.front() {
            if self.entries.get(&key).is_some_and(|e| !e.once && e.stamp == stamp) {
                return Some(key);
            }
            self.order.pop_front();
        }
        None
    }

    /// The key of the least recently used chunk, taken off the recency list.
    fn least_recent(&mut self) -> Option<Key> {
        let key = self.least_recent_peek()?;
        self.order.pop_front();
        Some(key)
    }

    /// Rebuilds the recency list when stale entries outnumber the live ones.
    fn compact(&mut self) {
        if self.order.len() + self.once.len() <= 2 * self.entries.len() + STALE_ENTRIES_SLACK {
            return;
        }
        let (mut live, mut once) = (Vec::new(), Vec::new());
        for (k, e) in &self.entries {
            if e.once { &mut once } else { &mut live }.push((e.stamp, *k));
        }
        live.sort_unstable();
        once.sort_unstable();
        self.order = live.into();
        self.once = once.into();
    }

    /// Counts an event; every [`AGE_EVENTS_MAX`] of them halves every count.
    fn tick(&mut self) {
        self.events += 1;
        if self.events < AGE_EVENTS_MAX {
            return;
        }
        self.events = 0;
        self.wanted.retain(|_, w| {
            *w /= 2;
            *w > 0
        });
        for e in self.entries.values_mut() {
            e.hits /= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn chunk(bytes: usize, fill: u8) -> Chunk {
        Chunk::from(Bytes::from(vec![fill; bytes]))
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_bytes_stay_within_the_limit() {
        let cache = ChunkCache::new(3 << 20);
        for id in 1..=3 {
            cache.put((id, 1 << 20), chunk(1 << 20, id as u8));
        }
        assert!(cache.get((1, 1 << 20)).is_some(), "1 used again: 2 is now the least recent");
        cache.put((4, 1 << 20), chunk(1 << 20, 4));
        assert!(!cache.contains((2, 1 << 20)));
        assert!([1, 3, 4].iter().all(|&id| cache.contains((id, 1 << 20))));
        assert_eq!(cache.used_bytes(), 3 << 20);
        let s = cache.stats();
        assert_eq!((s.chunks, s.hits, s.evictions), (3, 1, 1));
        // What a key holds is what was put under it; another length is another chunk.
        assert_eq!(cache.get((4, 1 << 20)).expect("cached").slice_padded(0, 1), Bytes::from_static(&[4]));
        assert!(cache.get((4, 4096)).is_none());
        // Too large for the whole cache: not kept, nothing let go for it.
        cache.put((5, 4 << 20), chunk(4 << 20, 5));
        assert!(!cache.contains((5, 4 << 20)));
        assert_eq!(cache.stats().chunks, 3);
    }

    #[test]
    fn many_hits_keep_the_recency_list_small() {
        let cache = ChunkCache::new(u64::MAX);
        for id in 0..4 {
            cache.put((id, 10), chunk(10, 0));
        }
        for i in 0..100_000u64 {
            assert!(cache.get((i % 4, 10)).is_some());
        }
        let st = cache.state.lock();
        assert!(st.order.len() <= 2 * 4 + STALE_ENTRIES_SLACK + 1, "{}", st.order.len());
    }

    #[test]
    fn a_random_read_fills_its_chunk_on_the_second_miss_with_few_fills_at_once() {
        let cache = ChunkCache::new(64 << 20);
        let bytes = 4 << 20;
        assert!(cache.want((1, bytes as u32), bytes, false).is_none(), "one read of a chunk fetches only its bytes");
        let first = cache.want((1, bytes as u32), bytes, false).expect("the second fetches the chunk");
        assert!(cache.want((2, bytes as u32), bytes, false).is_none());
        let second = cache.want((2, bytes as u32), bytes, false).expect("a second fill at once");
        assert!(cache.want((3, bytes as u32), bytes, false).is_none());
        assert!(cache.want((3, bytes as u32), bytes, false).is_none(), "at most FILLS_MAX at once");
        drop(first);
        assert!(cache.want((3, bytes as u32), bytes, false).is_some(), "a slot is free again");
        drop(second);
        // A cached chunk is never filled again.
        cache.put((4, bytes as u32), chunk(bytes as usize, 0));
        assert!(cache.want((4, bytes as u32), bytes, false).is_none());
        assert!(cache.want((4, bytes as u32), bytes, false).is_none());
        assert_eq!(cache.stats().fills, 3);
    }

    #[test]
    fn a_full_cache_admits_a_chunk_only_if_it_is_wanted_more_than_the_least_recent_was_hit() {
        let bytes: u64 = 1 << 20;
        let cache = ChunkCache::new(2 * bytes);
        cache.put((1, bytes as u32), chunk(bytes as usize, 1));
        cache.put((2, bytes as u32), chunk(bytes as usize, 2));
        for _ in 0..3 {
            cache.get((1, bytes as u32));
            cache.get((2, bytes as u32));
        }
        // Both hit 3 times; chunk 9 is wanted 2, 3, then 4 times.
        assert!(cache.want((9, bytes as u32), bytes, false).is_none());
        assert!(cache.want((9, bytes as u32), bytes, false).is_none(), "wanted twice, the victim hit 3 times");
        assert!(cache.want((9, bytes as u32), bytes, false).is_none(), "wanted 3 times: not more than 3");
        assert!(cache.want((9, bytes as u32), bytes, false).is_some(), "wanted 4 times");
    }

    #[test]
    fn with_a_disk_cache_below_a_chunk_the_memory_refuses_is_filled_for_the_disk_alone() {
        let bytes: u64 = 1 << 20;
        let cache = ChunkCache::new(bytes);
        cache.put((1, bytes as u32), chunk(bytes as usize, 1));
        for _ in 0..3 {
            cache.get((1, bytes as u32));
        }
        assert!(cache.want((9, bytes as u32), bytes, true).is_none(), "one miss still fetches only its bytes");
        let fill = cache.want((9, bytes as u32), bytes, true).expect("the second miss fills for the disk");
        assert!(!fill.to_memory, "the memory keeps what it hits more");
        drop(fill);
        // A chunk larger than the whole memory cache goes to the disk only.
        let big = 4 * bytes;
        assert!(cache.want((10, big as u32), big, false).is_none());
        assert!(cache.want((10, big as u32), big, true).is_none());
        let fill = cache.want((10, big as u32), big, true).expect("filled for the disk");
        assert!(!fill.to_memory);
        // Room in memory: both.
        let roomy = ChunkCache::new(4 * bytes);
        assert!(roomy.want((3, bytes as u32), bytes, true).is_none());
        assert!(roomy.want((3, bytes as u32), bytes, true).expect("filled").to_memory);
    }

    #[test]
    fn counts_age_so_old_hits_do_not_hold_the_cache_for_ever() {
        let bytes: u64 = 1 << 20;
        let cache = ChunkCache::new(bytes);
        cache.put((1, bytes as u32), chunk(bytes as usize, 1));
        for _ in 0..1000 {
            cache.get((1, bytes as u32));
        }
        assert!(cache.want((7, bytes as u32), bytes, false).is_none());
        assert!(cache.want((7, bytes as u32), bytes, false).is_none(), "wanted twice against a thousand hits");
        // Ages go by (other chunks' lookups and misses): the thousand hits halve each time.
        for _ in 0..(AGE_EVENTS_MAX * 10) {
            cache.state.lock().tick();
        }
        assert_eq!(cache.state.lock().entries.get(&(1, bytes as u32)).map(|e| e.hits), Some(0));
        let mut admitted = false;
        for _ in 0..2 {
            admitted |= cache.want((7, bytes as u32), bytes, false).is_some();
        }
        assert!(admitted, "an old favourite gives way to what is wanted now");
    }

    #[test]
    fn chunks_on_probation_keep_to_their_share_and_push_out_nothing() {
        const MIB: u64 = 1 << 20;
        let cache = ChunkCache::new(8 * MIB);
        for id in 1..=4 {
            cache.put((id, MIB as u32), chunk(MIB as usize, id as u8));
        }
        // A pass over 100 samples of 256 KiB, each read once: at most an eighth of the cache
        // (4 of them) on probation, oldest let go first, the cached chunks untouched.
        let sample = 256 << 10;
        for id in 100..200 {
            cache.put_once((id, sample), chunk(sample as usize, 0));
            assert!(cache.get((id, sample)).is_some(), "the reader finds its sample");
            let st = cache.state.lock();
            assert!(st.once_bytes <= MIB, "{} bytes on probation", st.once_bytes);
        }
        assert!((1..=4).all(|id| cache.contains((id, MIB as u32))), "probation pushed a cached chunk out");
        assert!((196..200).all(|id| cache.contains((id, sample))));
        assert!(!cache.contains((195, sample)));
        assert_eq!(cache.used_bytes(), 5 * MIB);
        assert_eq!(cache.stats().evictions, 96);
        // A lookup does not move a chunk on probation: the oldest still goes first.
        assert!(cache.get((196, sample)).is_some());
        cache.put_once((300, sample), chunk(sample as usize, 0));
        assert!(!cache.contains((196, sample)) && cache.contains((197, sample)));
        // Past the whole limit, the oldest go first: the chunks cached before the pass before
        // anything on probation.
        for id in 5..=8 {
            cache.put((id, MIB as u32), chunk(MIB as usize, id as u8));
        }
        assert!(!cache.contains((1, MIB as u32)));
        assert!((197..200).all(|id| cache.contains((id, sample))) && cache.contains((300, sample)));
        assert!(cache.used_bytes() <= 8 * MIB);
    }

    #[test]
    fn chunks_left_on_probation_long_ago_give_way_to_what_readers_use_now() {
        const MIB: u64 = 1 << 20;
        let cache = ChunkCache::new(8 * MIB);
        // A writer's chunk on probation (an eighth of the cache), never read.
        cache.put_once((1, MIB as u32), chunk(MIB as usize, 1));
        // A reader passing over exactly as much as the cache holds, twice: the second pass is
        // served whole from memory, as it would be with nothing on probation.
        for pass in 0..2 {
            for id in 10..18 {
                if cache.get((id, MIB as u32)).is_none() {
                    assert_eq!(pass, 0, "chunk {id} was let go before the second pass");
                    cache.put((id, MIB as u32), chunk(MIB as usize, id as u8));
                }
            }
        }
        assert!(!cache.contains((1, MIB as u32)), "the old chunk on probation stayed");
        assert_eq!(cache.used_bytes(), 8 * MIB);
        // A chunk just put on probation is younger than the reader's chunks: they go first.
        cache.put_once((2, MIB as u32), chunk(MIB as usize, 2));
        assert!(cache.contains((2, MIB as u32)) && !cache.contains((10, MIB as u32)));
    }

    #[test]
    fn a_chunk_put_again_leaves_probation_and_the_queue_stays_small() {
        let cache = ChunkCache::new(8 << 20);
        let bytes = 1 << 20;
        for id in 10..40 {
            cache.put_once((id, 1 << 20), chunk(bytes, 0));
        }
        // A sample read again (a read the page cache missed) is put as any chunk: it leaves
        // probation and stays past later samples.
        cache.put((39, 1 << 20), chunk(bytes, 0));
        assert_eq!(cache.state.lock().once_bytes, 0);
        for id in 40..50 {
            cache.put_once((id, 1 << 20), chunk(bytes, 0));
        }
        assert!(cache.contains((39, 1 << 20)));
        // Put on probation while cached: nothing changes.
        cache.put_once((39, 1 << 20), chunk(bytes, 0));
        assert!(cache.state.lock().entries.get(&(39, 1 << 20)).is_some_and(|e| !e.once));
        // A long pass leaves no more stale queue entries than the compaction allows.
        let tiny = ChunkCache::new(8);
        for id in 0..100_000 {
            tiny.put_once((id, 1), chunk(1, 0));
        }
        let st = tiny.state.lock();
        assert_eq!(st.entries.len(), 1, "one byte of probation holds one chunk");
        assert!(st.once.len() <= 2 + STALE_ENTRIES_SLACK);
    }
}
