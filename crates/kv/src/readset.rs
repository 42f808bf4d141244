//! The read set of an optimistic transaction, for engines that validate at commit by comparing
//! what each read saw with the latest state (the embedded and the PostgreSQL engines).
//!
//! - point reads: the key and what was seen (a [`Digest`] of the value, or absence);
//! - scans ([`ScanRead`]): the committed pairs the result showed, and the part of the range the
//!   result depended on: all of `[start, end)` when the scan returned fewer pairs than its
//!   limit, `[start, last returned key]` when it stopped at the limit. Keys the transaction had
//!   written before scanning are left out (`masked`): the result showed the buffered write
//!   whatever was committed under it.

use std::hash::{BuildHasher, RandomState};
use std::ops::Bound;

/// Values up to this size are kept verbatim in a read set; larger ones as a keyed hash.
pub const DIGEST_INLINE_BYTES_MAX: usize = 64;

/// What a read observed of one value, compared at validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digest {
    Inline(Vec<u8>),
    /// Length and two 64-bit SipHash values under the engine's random keys.
    Hashed {
        len: usize,
        hash: [u64; 2],
    },
}

/// Makes [`Digest`]s under keys of its own, random per engine, so that nobody can craft two
/// values with equal digests.
pub struct Digester {
    keys: [RandomState; 2],
}

impl Default for Digester {
    fn default() -> Self {
        Digester { keys: [RandomState::new(), RandomState::new()] }
    }
}

impl Digester {
    pub fn digest(&self, value: &[u8]) -> Digest {
        if value.len() <= DIGEST_INLINE_BYTES_MAX {
            Digest::Inline(value.to_vec())
        } else {
            let [first, second] = &self.keys;
            Digest::Hashed { len: value.len(), hash: [first.hash_one(value), second.hash_one(value)] }
        }
    }
}

/// A scan's dependency on committed data.
pub struct ScanRead {
    pub start: Vec<u8>,
    /// `Excluded(end)` when the scan saw its whole range, `Included(last key)` when it stopped
    /// at its limit.
    pub end: Bound<Vec<u8>>,
    /// Committed pairs in the range that the result showed, in key order.
    pub seen: Vec<(Vec<u8>, Digest)>,
    /// Keys in the range that the transaction had written before the scan (ascending): their
    /// committed state did not influence the result.
    pub masked: Vec<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_kept_and_large_ones_hashed_per_digester() {
        let (a, b) = (Digester::default(), Digester::default());
        assert_eq!(a.digest(b"short"), Digest::Inline(b"short".to_vec()));
        let big = vec![7u8; 1000];
        assert_eq!(a.digest(&big), a.digest(&big));
        assert!(matches!(a.digest(&big), Digest::Hashed { len: 1000, .. }));
        let mut other = big.clone();
        other[999] = 8;
        assert_ne!(a.digest(&big), a.digest(&other));
        assert_ne!(a.digest(&big), b.digest(&big), "keys are per digester");
    }
}
