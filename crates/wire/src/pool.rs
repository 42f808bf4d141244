//! Reused buffers for the large byte runs a process receives, reads and makes: the data
//! sections of frames (shards, mostly), shard reads from a drive and parity shards (the shared
//! pool), and a writer's chunk buffers (a client's own [`Pool`]).
//!
//! Why: a buffer of 128 KiB or more comes from the allocator as freshly mapped pages, and what
//! is freed goes back to the kernel, so a process that takes one such buffer per reply pays a
//! page fault and a page clear for every 4 KiB it receives before a byte is copied into it. A
//! client reading 2 GiB of shards took about one fault per page received, nearly all of them in
//! the receive of frame data sections; a storage node took one per page read from its drives.
//! The pool keeps freed buffers, their pages still mapped, and hands them out again.
//!
//! A [`PooledBuf`] is a `Vec<u8>` that goes back to its pool when dropped; frozen into
//! [`Bytes`] it goes back when the last clone or slice of it is dropped.
//!
//! Invariants: a buffer handed out by [`Pool::take`] has length 0, so nothing a previous user
//! wrote can be read out of it before it is written again ([`Pool::take_filled`] is for a
//! system call's buffer, whose caller keeps only the bytes the call wrote); a pool holds at
//! most its `pooled_bytes_max`; buffers under [`POOLED_BYTES_MIN`] are not kept (the allocator reuses small blocks without
//! new pages); a buffer is handed out for a request of `len` bytes only when its capacity is
//! at most a quarter larger, so memory wasted on fit is bounded.
//! Deliberately absent: giving memory back when idle; a pool keeps what its peak took, up to its
//! limit.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use bytes::Bytes;
use parking_lot::Mutex;

/// Smallest buffer the pool keeps.
pub const POOLED_BYTES_MIN: usize = 64 << 10;
/// Most bytes the process's shared pool keeps.
pub const SHARED_POOL_BYTES_MAX: usize = 64 << 20;

/// The process's shared pool.
static SHARED: Pool = Pool::new(SHARED_POOL_BYTES_MAX);

/// Freed buffers, found by size and let go oldest first.
pub struct Pool {
    free: Mutex<Free>,
    pooled_bytes_max: usize,
}

/// The kept buffers, each under a stamp counting up as they are given back, in two indexes of
/// the same set: by (capacity, stamp) for the best fit, by stamp for the oldest. Both are
/// ordered maps, so taking and giving back cost a logarithm of the buffers kept, not a scan.
struct Free {
    by_fit: BTreeMap<(usize, u64), Vec<u8>>,
    by_age: BTreeMap<u64, usize>,
    next_stamp: u64,
    bytes: usize,
}

impl Free {
    fn remove(&mut self, capacity: usize, stamp: u64) -> Option<Vec<u8>> {
        self.by_age.remove(&stamp);
        let buf = self.by_fit.remove(&(capacity, stamp))?;
        self.bytes -= buf.capacity();
        Some(buf)
    }
}

impl Pool {
    /// An empty pool that keeps at most `pooled_bytes_max` bytes.
    pub const fn new(pooled_bytes_max: usize) -> Pool {
        Pool {
            free: parking_lot::const_mutex(Free {
                by_fit: BTreeMap::new(),
                by_age: BTreeMap::new(),
                next_stamp: 0,
                bytes: 0,
            }),
            pooled_bytes_max,
        }
    }

    /// An empty buffer with room for at least `len` bytes, reused when one fits. A reused one
    /// may have room for up to a quarter more: whoever fills it bounds the fill to `len` (a
    /// read into all of its spare capacity takes bytes past the range asked for).
    pub fn take(&'static self, len: usize) -> PooledBuf {
        let mut buf = self.take_any(len);
        if buf.buf.capacity() == 0 {
            buf.buf = Vec::with_capacity(len);
        }
        buf.buf.clear();
        buf
    }

    /// A buffer of `len` bytes whose content is unspecified: what a previous user of the
    /// buffer left there, or zeros. For a caller that overwrites them (a system call that reads
    /// into initialized memory) and keeps only what it wrote. A new buffer is zeroed lazily by
    /// the kernel, so a read that fails at once touches none of its pages.
    pub fn take_filled(&'static self, len: usize) -> PooledBuf {
        let mut buf = self.take_any(len);
        if buf.buf.capacity() == 0 && len > 0 {
            buf.buf = vec![0u8; len];
        } else if buf.buf.len() >= len {
            buf.buf.truncate(len);
        } else {
            buf.buf.resize(len, 0);
        }
        buf
    }

    /// A kept buffer as its previous user left it, or a new one with no capacity.
    fn take_any(&'static self, len: usize) -> PooledBuf {
        let reused = if len >= POOLED_BYTES_MIN { self.reuse(len) } else { None };
        PooledBuf { buf: reused.unwrap_or_default(), pool: self }
    }

    /// The smallest kept buffer of at least `len` and at most `len + len / 4` bytes (of those,
    /// the one kept longest).
    fn reuse(&self, len: usize) -> Option<Vec<u8>> {
        let fit_max = len.saturating_add(len / 4);
        let mut free = self.free.lock();
        let (&(capacity, stamp), _) = free.by_fit.range((len, 0)..=(fit_max, u64::MAX)).next()?;
        free.remove(capacity, stamp)
    }

    /// Keeps `buf` for reuse, dropping the oldest kept buffers to stay within the limit.
    fn give_back(&self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if cap < POOLED_BYTES_MIN || cap > self.pooled_bytes_max {
            return;
        }
        let mut free = self.free.lock();
        while free.bytes + cap > self.pooled_bytes_max {
            let Some((&stamp, &capacity)) = free.by_age.iter().next() else { break };
            free.remove(capacity, stamp);
        }
        let stamp = free.next_stamp;
        free.next_stamp += 1;
        free.bytes += cap;
        free.by_age.insert(stamp, cap);
        free.by_fit.insert((cap, stamp), buf);
    }

    /// Bytes kept now.
    pub fn pooled_bytes(&self) -> usize {
        self.free.lock().bytes
    }
}

/// An empty buffer with room for at least `len` bytes from the process's shared pool.
pub fn take(len: usize) -> PooledBuf {
    SHARED.take(len)
}

/// `len` bytes of unspecified content from the process's shared pool ([`Pool::take_filled`]).
pub fn take_filled(len: usize) -> PooledBuf {
    SHARED.take_filled(len)
}

/// A buffer that goes back to its pool when dropped. Derefs to the bytes written so far; write
/// through [`PooledBuf::vec`].
pub struct PooledBuf {
    buf: Vec<u8>,
    pool: &'static Pool,
}

impl PooledBuf {
    /// The buffer itself, to fill (it is a `BufMut`) or truncate.
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Shares the bytes; the buffer goes back to its pool when the last clone or slice is
    /// dropped. A buffer too small to be kept becomes plain `Bytes` (no owner to allocate).
    pub fn freeze(mut self) -> Bytes {
        if self.buf.capacity() < POOLED_BYTES_MIN {
            return Bytes::from(std::mem::take(&mut self.buf));
        }
        Bytes::from_owner(self)
    }

    /// [`PooledBuf::freeze`], unless the bytes fill less than half of the buffer: then they are
    /// copied out and the buffer goes back at once, so a short run (a small file's chunk) kept
    /// for long does not pin a buffer sized for a long one.
    pub fn freeze_compact(self) -> Bytes {
        if self.buf.len() < self.buf.capacity() / 2 {
            return Bytes::copy_from_slice(&self.buf);
        }
        self.freeze()
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(bytes_max: usize) -> &'static Pool {
        Box::leak(Box::new(Pool::new(bytes_max)))
    }

    #[test]
    fn a_freed_buffer_is_handed_out_again_empty() {
        let pool = pool(8 << 20);
        let mut a = pool.take(256 << 10);
        a.vec().extend_from_slice(&[7u8; 256 << 10]);
        let at = a.as_ptr();
        drop(a);
        assert_eq!(pool.pooled_bytes(), 256 << 10);
        let b = pool.take(256 << 10);
        assert_eq!(b.as_ptr(), at, "the kept buffer is reused");
        assert!(b.is_empty(), "nothing of the previous user can be read");
        assert_eq!(pool.pooled_bytes(), 0);
    }

    #[test]
    fn a_filled_buffer_has_the_length_asked_for_and_only_new_buffers_are_zeroed() {
        let pool = pool(8 << 20);
        let fresh = pool.take_filled(200 << 10);
        assert_eq!(fresh.len(), 200 << 10);
        assert!(fresh.iter().all(|&b| b == 0));
        drop(fresh);
        // A buffer its previous user filled is handed out as it is, cut to length...
        let mut a = pool.take(256 << 10);
        a.vec().resize(256 << 10, 9);
        drop(a);
        let b = pool.take_filled(220 << 10);
        assert_eq!(b.len(), 220 << 10);
        drop(b);
        // ...and one shorter than asked for is extended with zeros.
        let c = pool.take_filled(240 << 10);
        assert_eq!(c.len(), 240 << 10);
        assert!(c[..220 << 10].iter().all(|&b| b == 9) && c[220 << 10..].iter().all(|&b| b == 0));
    }

    #[test]
    fn frozen_bytes_go_back_when_the_last_slice_is_dropped() {
        let pool = pool(8 << 20);
        let mut a = pool.take(100 << 10);
        a.vec().resize(100 << 10, 1);
        let bytes = a.freeze();
        let part = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(pool.pooled_bytes(), 0, "a slice still holds it");
        assert_eq!(&part[..], &[1u8; 10]);
        drop(part);
        assert_eq!(pool.pooled_bytes(), 100 << 10);
    }

    #[test]
    fn a_short_run_frozen_compact_lets_its_buffer_go_at_once() {
        let pool = pool(8 << 20);
        let mut short = pool.take(256 << 10);
        short.vec().extend_from_slice(&[3u8; 5000]);
        let kept = short.freeze_compact();
        assert_eq!(pool.pooled_bytes(), 256 << 10, "the short run pins its buffer");
        assert_eq!(&kept[..], &[3u8; 5000][..]);
        let mut long = pool.take(256 << 10);
        long.vec().resize(200 << 10, 4);
        let shared = long.freeze_compact();
        assert_eq!(pool.pooled_bytes(), 0, "a long run was copied");
        drop(shared);
        assert_eq!(pool.pooled_bytes(), 256 << 10);
    }

    #[test]
    fn only_buffers_that_fit_are_reused() {
        let pool = pool(8 << 20);
        drop(pool.take(256 << 10));
        // Too small for 300 KiB, too large for 128 KiB: both get new buffers.
        let big = pool.take(300 << 10);
        assert!(big.buf.capacity() >= 300 << 10);
        let small = pool.take(128 << 10);
        assert!(small.buf.capacity() < 256 << 10);
        assert_eq!(pool.pooled_bytes(), 256 << 10);
        // A request up to a quarter smaller takes it.
        assert_eq!(pool.take(210 << 10).buf.capacity(), 256 << 10);
    }

    #[test]
    fn takes_and_gives_back_match_a_scan_of_the_kept_buffers_oldest_first() {
        // The model: the kept capacities oldest first; a take is the smallest fit (the oldest
        // of equals), a give-back drops the oldest past the limit.
        let limit = 4 << 20;
        let pool = pool(limit);
        let mut model: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        let mut held: Vec<PooledBuf> = Vec::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |below: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % below as u64) as usize
        };
        for _ in 0..20_000 {
            if held.is_empty() || next(2) == 0 {
                let len = [64 << 10, 100 << 10, 128 << 10, 200 << 10, 1 << 20, 1_100_000][next(6)];
                let fit = model
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| (len..=len + len / 4).contains(&c))
                    .min_by_key(|(_, &c)| c)
                    .map(|(i, _)| i);
                let buf = pool.take(len);
                match fit {
                    Some(i) => assert_eq!(buf.buf.capacity(), model.remove(i).expect("in the model")),
                    None => assert_eq!(buf.buf.capacity(), len, "a new buffer when none fits"),
                }
                held.push(buf);
            } else {
                let buf = held.swap_remove(next(held.len()));
                let cap = buf.buf.capacity();
                drop(buf);
                if cap >= POOLED_BYTES_MIN && cap <= limit {
                    while model.iter().sum::<usize>() + cap > limit {
                        model.pop_front();
                    }
                    model.push_back(cap);
                }
            }
            assert_eq!(pool.pooled_bytes(), model.iter().sum::<usize>());
        }
    }

    #[test]
    fn small_buffers_are_not_kept_and_the_pool_stays_within_its_limit() {
        let pool = pool(1 << 20);
        drop(pool.take(POOLED_BYTES_MIN - 1));
        assert_eq!(pool.pooled_bytes(), 0);
        let held: Vec<PooledBuf> = (0..10).map(|_| pool.take(256 << 10)).collect();
        drop(held);
        assert_eq!(pool.pooled_bytes(), 1 << 20, "four of ten kept");
        drop(pool.take(2 << 20));
        assert_eq!(pool.pooled_bytes(), 1 << 20, "a buffer larger than the limit is not kept");
    }
}
