//! Erasure coding of chunks into shards (Reed-Solomon k+m, or replication when k = 1) and the
//! per-block checksums that protect every shard from the writer to the reader.
//!
//! A chunk of `len` bytes becomes `k` data shards of `shard_len` bytes each (the chunk split in
//! order, the last one zero-padded) and `m` parity shards. Any `k` of the `k + m` shards
//! rebuild the chunk. The codec is pure computation: no I/O, no knowledge of where shards live.
//!
//! Checksums: each shard is cut into blocks of [`wire::SHARD_BLOCK_BYTES`]; each block gets a
//! crc32c, and the crc32c of that table ([`table_crc`]) is what the metadata records. A reader
//! that checks a block against its table, and the table against the metadata, has verified
//! that the bytes are exactly what the writer computed.

use bytes::{Bytes, BytesMut};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use std::cell::RefCell;
use wire::{EcScheme, SHARD_BLOCK_BYTES};

/// Errors of decoding shards back into a chunk.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer than `k` shards are available.
    #[error("only {have} of the {need} shards needed are available")]
    TooFewShards { have: usize, need: usize },
    /// A shard has the wrong length (a bug or a corrupt record).
    #[error("shard {index} is {len} bytes, expected {expected}")]
    BadShardLength { index: usize, len: usize, expected: usize },
    /// The codec refused (should not happen for validated schemes).
    #[error("erasure codec failed: {0}")]
    Codec(String),
}

thread_local! {
    static ENCODER: RefCell<Option<ReedSolomonEncoder>> = const { RefCell::new(None) };
    static DECODER: RefCell<Option<ReedSolomonDecoder>> = const { RefCell::new(None) };
}

/// Splits `chunk` into the `k + m` shards of `ec`. Every shard is `ec.shard_len(chunk.len())`
/// bytes. Data shards share `chunk`'s memory when no padding is needed.
pub fn encode(ec: EcScheme, chunk: &Bytes) -> Vec<Bytes> {
    assert!(chunk.len() <= u32::MAX as usize, "chunk too large");
    let k = usize::from(ec.k);
    let m = usize::from(ec.m);
    let shard_len = ec.shard_len(chunk.len() as u32) as usize;
    let mut shards = Vec::with_capacity(k + m);
    if chunk.len() == k * shard_len {
        for i in 0..k {
            shards.push(chunk.slice(i * shard_len..(i + 1) * shard_len));
        }
    } else {
        let mut padded = BytesMut::zeroed(k * shard_len);
        padded[..chunk.len()].copy_from_slice(chunk);
        let padded = padded.freeze();
        for i in 0..k {
            shards.push(padded.slice(i * shard_len..(i + 1) * shard_len));
        }
    }
    if m == 0 {
        return shards;
    }
    if k == 1 {
        // Replication: every "parity" shard is a copy of the data.
        let copy = shards[0].clone();
        shards.extend(std::iter::repeat_n(copy, m));
        return shards;
    }
    let parity = ENCODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let encoder = match slot.as_mut() {
            Some(e) => {
                e.reset(k, m, shard_len).expect("validated scheme and even shard length");
                e
            }
            None => {
                slot.insert(ReedSolomonEncoder::new(k, m, shard_len).expect("validated scheme and even shard length"))
            }
        };
        for s in &shards {
            encoder.add_original_shard(s).expect("shard count and length match");
        }
        let result = encoder.encode().expect("all original shards added");
        // Parity goes into reused buffers: a fresh one costs a page fault per 4 KiB.
        result
            .recovery_iter()
            .map(|shard| {
                let mut buf = wire::pool::take(shard.len());
                buf.vec().extend_from_slice(shard);
                buf.freeze()
            })
            .collect::<Vec<_>>()
    });
    shards.extend(parity);
    shards
}

/// Rebuilds the chunk's first `len` bytes from the available shards (`shards[i]` is shard `i`,
/// `None` when missing or failed). Uses data shards directly when all are present.
pub fn decode(ec: EcScheme, len: u32, shards: &[Option<Bytes>]) -> Result<Bytes, DecodeError> {
    let k = usize::from(ec.k);
    let data = reconstruct_data(ec, len, shards)?;
    if k == 1 {
        return Ok(data[0].slice(..len as usize));
    }
    let mut out = BytesMut::with_capacity(len as usize);
    for s in &data {
        let take = (len as usize - out.len()).min(s.len());
        out.extend_from_slice(&s[..take]);
        if out.len() == len as usize {
            break;
        }
    }
    Ok(out.freeze())
}

/// Returns the `k` data shards, reconstructing missing ones from parity.
pub fn reconstruct_data(ec: EcScheme, len: u32, shards: &[Option<Bytes>]) -> Result<Vec<Bytes>, DecodeError> {
    let k = usize::from(ec.k);
    let m = usize::from(ec.m);
    let shard_len = ec.shard_len(len) as usize;
    for (index, s) in shards.iter().enumerate() {
        if let Some(s) = s {
            if s.len() != shard_len {
                return Err(DecodeError::BadShardLength { index, len: s.len(), expected: shard_len });
            }
        }
    }
    let have = shards.iter().take(k + m).filter(|s| s.is_some()).count();
    if have < k {
        return Err(DecodeError::TooFewShards { have, need: k });
    }
    if shards.iter().take(k).all(Option::is_some) {
        return Ok(shards.iter().take(k).map(|s| s.clone().expect("checked present")).collect());
    }
    if k == 1 {
        let copy = shards.iter().take(1 + m).flatten().next().expect("have >= 1").clone();
        return Ok(vec![copy]);
    }
    let restored = DECODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let decoder = match slot.as_mut() {
            Some(d) => {
                d.reset(k, m, shard_len).map_err(|e| DecodeError::Codec(e.to_string()))?;
                d
            }
            None => {
                slot.insert(ReedSolomonDecoder::new(k, m, shard_len).map_err(|e| DecodeError::Codec(e.to_string()))?)
            }
        };
        for (i, s) in shards.iter().enumerate().take(k) {
            if let Some(s) = s {
                decoder.add_original_shard(i, s).map_err(|e| DecodeError::Codec(e.to_string()))?;
            }
        }
        for (i, s) in shards.iter().enumerate().skip(k).take(m) {
            if let Some(s) = s {
                decoder.add_recovery_shard(i - k, s).map_err(|e| DecodeError::Codec(e.to_string()))?;
            }
        }
        let result = decoder.decode().map_err(|e| DecodeError::Codec(e.to_string()))?;
        let restored: Vec<(usize, Bytes)> =
            result.restored_original_iter().map(|(i, s)| (i, Bytes::copy_from_slice(s))).collect();
        Ok::<_, DecodeError>(restored)
    })?;
    let mut data: Vec<Option<Bytes>> = shards.iter().take(k).cloned().collect();
    for (i, s) in restored {
        data[i] = Some(s);
    }
    data.into_iter()
        .enumerate()
        .map(|(i, s)| s.ok_or_else(|| DecodeError::Codec(format!("codec did not restore data shard {i}"))))
        .collect()
}

/// The crc32c of each [`SHARD_BLOCK_BYTES`] block of `shard` (the last block may be short).
pub fn block_crcs(shard: &[u8]) -> Vec<u32> {
    shard.chunks(SHARD_BLOCK_BYTES as usize).map(crc32c::crc32c).collect()
}

/// The checksum of a block checksum table, as recorded in the chunk's metadata.
pub fn table_crc(table: &[u32]) -> u32 {
    let mut crc = 0;
    for c in table {
        crc = crc32c::crc32c_append(crc, &c.to_le_bytes());
    }
    crc
}

/// Number of blocks of a shard of `shard_len` bytes.
pub fn block_count(shard_len: u32) -> u32 {
    shard_len.div_ceil(SHARD_BLOCK_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn schemes() -> Vec<EcScheme> {
        vec![
            EcScheme { k: 4, m: 2 },
            EcScheme { k: 1, m: 2 },
            EcScheme { k: 8, m: 2 },
            EcScheme { k: 3, m: 0 },
            EcScheme { k: 6, m: 3 },
        ]
    }

    #[test]
    fn any_k_of_k_plus_m_shards_rebuild_the_chunk() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for ec in schemes() {
            for len in [0usize, 1, 2, 3, 4095, 65536, 100_001, 1 << 20] {
                let chunk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                let chunk = Bytes::from(chunk);
                let shards = encode(ec, &chunk);
                assert_eq!(shards.len(), ec.width());
                let w = ec.width();
                // Every subset of missing shards of size <= m.
                for mask in 0u32..(1 << w) {
                    if mask.count_ones() as usize > usize::from(ec.m) {
                        continue;
                    }
                    let avail: Vec<Option<Bytes>> =
                        (0..w).map(|i| if mask & (1 << i) != 0 { None } else { Some(shards[i].clone()) }).collect();
                    let back = decode(ec, len as u32, &avail).expect("decodable");
                    assert_eq!(back, chunk, "{ec} len {len} missing mask {mask:b}");
                }
            }
        }
    }

    #[test]
    fn more_than_m_missing_is_an_error_not_wrong_bytes() {
        let ec = EcScheme { k: 4, m: 2 };
        let chunk = Bytes::from(vec![9u8; 10_000]);
        let shards = encode(ec, &chunk);
        let avail: Vec<Option<Bytes>> =
            shards.iter().enumerate().map(|(i, s)| if i < 3 { None } else { Some(s.clone()) }).collect();
        assert_eq!(decode(ec, 10_000, &avail), Err(DecodeError::TooFewShards { have: 3, need: 4 }));
    }

    #[test]
    fn wrong_length_shard_is_rejected() {
        let ec = EcScheme { k: 4, m: 2 };
        let chunk = Bytes::from(vec![1u8; 1000]);
        let mut avail: Vec<Option<Bytes>> = encode(ec, &chunk).into_iter().map(Some).collect();
        avail[1] = Some(Bytes::from_static(b"short"));
        assert!(matches!(decode(ec, 1000, &avail), Err(DecodeError::BadShardLength { index: 1, .. })));
    }

    #[test]
    fn block_table_checksums_change_with_any_block() {
        let shard = vec![0u8; 3 * SHARD_BLOCK_BYTES as usize + 10];
        let table = block_crcs(&shard);
        assert_eq!(table.len(), 4);
        assert_eq!(block_count(shard.len() as u32), 4);
        let mut other = shard.clone();
        other[2 * SHARD_BLOCK_BYTES as usize + 5] = 1;
        let table2 = block_crcs(&other);
        assert_ne!(table[2], table2[2]);
        assert_ne!(table_crc(&table), table_crc(&table2));
    }
}
