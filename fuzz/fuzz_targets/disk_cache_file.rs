//! Fuzz target for the client's disk cache files (`client::disk_cache`, format version 1):
//! arbitrary bytes as a cache file, checked against the record they claim to be (the header's
//! id, length, k and shard length, with the table crcs of the tables the bytes hold, so that
//! acceptance is reachable), must never panic or allocate beyond the input, and anything
//! accepted must re-encode to the same bytes.

#![no_main]

use bytes::Bytes;
use client::disk_cache::{encode_file, verify_file};
use libfuzzer_sys::fuzz_target;
use wire::{ChunkRecord, EcScheme, Placement};

fuzz_target!(|data: &[u8]| {
    let Some(head) = data.get(..32) else { return };
    let u32_at = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let (k, len, shard_len) = (head[6], u32_at(16), u32_at(20));
    let id = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    let blocks = shard_len.div_ceil(65536) as usize;
    let tables = data.get(32..32usize.saturating_add(4 * usize::from(k) * blocks));
    let table_crcs: Vec<u32> = match tables {
        Some(raw) if blocks > 0 => raw
            .chunks(4 * blocks)
            .map(|t| {
                erasure::table_crc(
                    &t.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>(),
                )
            })
            .collect(),
        _ => vec![0; usize::from(k)],
    };
    let rec = ChunkRecord {
        index: 0,
        id,
        len,
        ec: EcScheme { k, m: 0 },
        shard_len,
        placement: Placement { map_version: 1, pg: 0 },
        table_crcs,
        missing: 0,
    };
    if let Ok(bytes) = verify_file(data, &rec) {
        assert_eq!(bytes.len(), len as usize);
        let (image, crcs) = encode_file(id, len, k, shard_len, &[Bytes::from(bytes)]);
        assert_eq!(&image[..], data, "an accepted file re-encodes to itself");
        assert_eq!(crcs[..], rec.table_crcs[..usize::from(k)]);
    }
});
