//! Deterministic synthetic file contents: every byte of file `f` at offset `o` is a pure
//! function of (seed, f, o), so a reader verifies data by regenerating it instead of keeping a
//! copy, and any mismatch names its exact offset.

/// Fills `buf` with the content of file `file` starting at `offset` (a multiple of 8).
pub fn fill(seed: u64, file: u64, offset: u64, buf: &mut [u8]) {
    assert!(offset.is_multiple_of(8), "offsets are 8-byte aligned");
    let base = seed ^ file.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut word = offset / 8;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&mix(base.wrapping_add(word)).to_le_bytes());
        word += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let bytes = mix(base.wrapping_add(word)).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&bytes[..n]);
    }
}

/// splitmix64's finaliser: a fast, well-mixed bijection.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Compares `got` with the expected content; returns the offset of the first wrong byte.
pub fn first_mismatch(seed: u64, file: u64, offset: u64, got: &[u8], scratch: &mut Vec<u8>) -> Option<u64> {
    scratch.resize(got.len(), 0);
    fill(seed, file, offset, scratch);
    if scratch[..] == got[..] {
        return None;
    }
    let i = scratch.iter().zip(got).position(|(a, b)| a != b).unwrap_or(0);
    Some(offset + i as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_deterministic_and_position_dependent() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill(1, 2, 0, &mut a);
        fill(1, 2, 0, &mut b);
        assert_eq!(a, b);
        // A read at an offset sees the same bytes as the whole-file generation.
        let mut part = vec![0u8; 1000];
        fill(1, 2, 1024, &mut part);
        assert_eq!(&a[1024..2024], &part[..]);
        fill(1, 3, 0, &mut b);
        assert_ne!(a, b, "different files differ");
        let mut scratch = Vec::new();
        assert_eq!(first_mismatch(1, 2, 0, &a, &mut scratch), None);
        a[77] ^= 1;
        assert_eq!(first_mismatch(1, 2, 0, &a, &mut scratch), Some(77));
    }
}
