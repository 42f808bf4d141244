//! CRC-32C arithmetic beyond computing a checksum: combining the checksums of two byte strings
//! into the checksum of their concatenation, fast.
//!
//! A ranged read sends only the bytes asked for plus the checksums of the rest of the blocks
//! they touch; the reader checks `crc(head ‖ bytes ‖ tail)` against each block's entry in the
//! writer's table by combining. The `crc32c` crate's own combine rebuilds 32×32 bit matrices on
//! every call (tens of microseconds for a 64 KiB block, more than the checksum itself); this is
//! zlib's newer method: multiplications modulo the polynomial with a table of x^(2^k),
//! well under a microsecond.

/// The CRC-32C (Castagnoli) polynomial, bit-reflected.
const POLY: u32 = 0x82f6_3b78;

/// a(x) * b(x) modulo the polynomial, on reflected polynomials (bit 31 is x^0).
const fn mult_mod(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        if m == 0 {
            break;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(2^k) modulo the polynomial, for k in 0..32.
const X2N: [u32; 32] = {
    let mut table = [0u32; 32];
    let mut p: u32 = 1 << 30; // x^1
    table[0] = p;
    let mut k = 1;
    while k < 32 {
        p = mult_mod(p, p);
        table[k] = p;
        k += 1;
    }
    table
};

/// x^(n * 2^k) modulo the polynomial.
fn x2n_mod(mut n: u64, mut k: usize) -> u32 {
    let mut p: u32 = 1 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = mult_mod(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC-32C of `A ‖ B` from `crc_a` = CRC-32C of A, `crc_b` = CRC-32C of B and the length
/// of B in bytes (as `crc32c::crc32c_combine`, faster).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    if len_b == 0 {
        return crc_a;
    }
    mult_mod(x2n_mod(len_b as u64, 3), crc_a) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combining_matches_checksumming_the_concatenation() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for (split, end) in
            [(0, 0), (0, 10), (10, 10), (1, 2), (4096, 65536), (65535, 65536), (3, 199_999), (100_000, 200_000)]
        {
            let (a, b) = (&data[..split], &data[split..end]);
            let want = crc32c::crc32c(&data[..end]);
            assert_eq!(crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len()), want, "split {split} end {end}");
            assert_eq!(crc32c::crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len()), want);
        }
    }
}
