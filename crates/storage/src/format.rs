//! The shard file format: how one shard is laid out on a drive, and the pure (no I/O) code that
//! encodes and validates it. Kept apart from the store so the decoder can be fuzzed and tested
//! on plain byte slices, and so the format has exactly one definition.
//!
//! Shard file format v1 (all integers little-endian; the same table, with invariants and version
//! history, is in ARCHITECTURE.md, "Storage drives and shard files"):
//!
//! ```text
//! offset  size  field
//!      0     4  magic b"TRSH"
//!      4     2  format version (1), u16
//!      6     1  k (data shards of the chunk's erasure scheme)
//!      7     1  m (parity shards)
//!      8     8  chunk id, u64
//!     16     1  shard index (< k + m)
//!     17     3  reserved, must be 0
//!     20     4  data length in bytes, u32 (<= SHARD_BYTES_MAX)
//!     24     4  block count n, u32 = ceil(data length / SHARD_BLOCK_BYTES)
//!     28     4  crc32c of the block crc table (bytes 36 .. 36+4n)
//!     32     4  crc32c of bytes 0..32
//!     36    4n  block crc table: crc32c of each 64 KiB data block (the last may be short), u32
//!   36+4n       data (data length bytes); the file ends exactly here
//! ```
//!
//! Why this shape: the fixed header is checked by its own crc before any length in it is
//! trusted, so a corrupt file can never make the reader allocate or seek absurdly. The table crc
//! is the same value the metadata service keeps per shard (`ChunkRecord::table_crcs`), tying the
//! stored blocks end to end to what the writer computed. Per-block crcs let a ranged read verify
//! only the blocks it returns.

use std::fmt;
use wire::{EcScheme, ShardInfo, ShardKey, SHARD_BLOCK_BYTES};

/// The first four bytes of every shard file.
pub const MAGIC: [u8; 4] = *b"TRSH";
/// The format version this build writes (and the only one it reads).
pub const FORMAT_VERSION: u16 = 1;
/// Size of the fixed part of the header, before the block crc table.
pub const FIXED_HEADER_BYTES: usize = 36;
/// Largest shard accepted: a shard must fit in one frame's data section, since `GetShard` may
/// return all of it at once.
pub const SHARD_BYTES_MAX: u32 = wire::frame::DATA_BYTES_MAX;
/// Size of a checksummed block (the last block of a shard may be shorter).
pub const BLOCK_BYTES: u32 = SHARD_BLOCK_BYTES;

/// Why bytes are not a valid shard file. Every variant means "do not serve this file".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: u64, have: u64 },
    #[error("bad magic {0:02x?} (not a shard file)")]
    BadMagic([u8; 4]),
    #[error("unsupported shard format version {0} (this build reads version {FORMAT_VERSION})")]
    BadVersion(u16),
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("reserved header bytes are not zero")]
    Reserved,
    #[error("invalid erasure scheme {k}+{m} or shard index {index}")]
    BadScheme { k: u8, m: u8, index: u8 },
    #[error("data length {0} exceeds the limit of {SHARD_BYTES_MAX} bytes")]
    TooLarge(u32),
    #[error("block count {blocks} does not match data length {len}")]
    BlockCount { len: u32, blocks: u32 },
    #[error("block checksum table fails its checksum")]
    TableChecksum,
    #[error("file is {have} bytes; its header says {expected}")]
    Length { expected: u64, have: u64 },
    #[error("block {block} (bytes {start}..{end} of the data) fails its checksum")]
    BlockChecksum { block: u32, start: u64, end: u64 },
}

/// The decoded fixed header of a shard file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    pub key: ShardKey,
    pub ec: EcScheme,
    /// Data length in bytes.
    pub len: u32,
    /// Number of blocks (entries in the crc table).
    pub blocks: u32,
    /// crc32c of the block crc table.
    pub table_crc: u32,
}

impl fmt::Display for ShardHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} bytes, {})", self.key, self.len, self.ec)
    }
}

/// Number of blocks a shard of `len` bytes has (0 for an empty shard).
pub fn block_count(len: u32) -> u32 {
    len.div_ceil(BLOCK_BYTES)
}

/// The crc32c of each block of `data`.
pub fn block_crcs(data: &[u8]) -> Vec<u32> {
    data.chunks(BLOCK_BYTES as usize).map(crc32c::crc32c).collect()
}

/// The crc32c of a block crc table as stored (each entry u32 LE, concatenated). This is also
/// the value the metadata service records per shard in `ChunkRecord::table_crcs`.
pub fn table_crc(block_crcs: &[u32]) -> u32 {
    block_crcs.iter().fold(0, |crc, b| crc32c::crc32c_append(crc, &b.to_le_bytes()))
}

/// Whether `key` and `ec` describe a shard this format can hold.
fn scheme_ok(ec: EcScheme, index: u8) -> bool {
    ec.validate().is_ok() && usize::from(index) < ec.width()
}

/// Checks a shard description before it is stored: a sane scheme and index, a length within
/// limits, and a crc table of the right size. Does not look at data.
pub fn check_info(info: &ShardInfo) -> Result<(), FormatError> {
    if !scheme_ok(info.ec, info.key.index) {
        return Err(FormatError::BadScheme { k: info.ec.k, m: info.ec.m, index: info.key.index });
    }
    if info.len > SHARD_BYTES_MAX {
        return Err(FormatError::TooLarge(info.len));
    }
    let blocks = u32::try_from(info.block_crcs.len()).unwrap_or(u32::MAX);
    if blocks != block_count(info.len) {
        return Err(FormatError::BlockCount { len: info.len, blocks });
    }
    Ok(())
}

/// Encodes the header and block crc table of a shard (everything before the data). The caller
/// has checked `info` with [`check_info`].
pub fn encode_header(info: &ShardInfo) -> Vec<u8> {
    let blocks = info.block_crcs.len();
    let mut out = Vec::with_capacity(FIXED_HEADER_BYTES + 4 * blocks);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.push(info.ec.k);
    out.push(info.ec.m);
    out.extend_from_slice(&info.key.chunk.to_le_bytes());
    out.push(info.key.index);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&info.len.to_le_bytes());
    out.extend_from_slice(&(blocks as u32).to_le_bytes());
    out.extend_from_slice(&table_crc(&info.block_crcs).to_le_bytes());
    let header_crc = crc32c::crc32c(&out[..32]);
    out.extend_from_slice(&header_crc.to_le_bytes());
    for crc in &info.block_crcs {
        out.extend_from_slice(&crc.to_le_bytes());
    }
    out
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

impl ShardHeader {
    /// Decodes and validates the fixed header from the first [`FIXED_HEADER_BYTES`] of `buf`.
    /// Lengths are trusted only after the header checksum passed, so the result is safe to
    /// size reads and allocations with.
    pub fn decode(buf: &[u8]) -> Result<ShardHeader, FormatError> {
        if buf.len() < FIXED_HEADER_BYTES {
            return Err(FormatError::Truncated { need: FIXED_HEADER_BYTES as u64, have: buf.len() as u64 });
        }
        let magic = [buf[0], buf[1], buf[2], buf[3]];
        if magic != MAGIC {
            return Err(FormatError::BadMagic(magic));
        }
        // The version is read before the checksum: a later version may place its checksum
        // elsewhere, and "unsupported version" is the useful message then.
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        if version != FORMAT_VERSION {
            return Err(FormatError::BadVersion(version));
        }
        if crc32c::crc32c(&buf[..32]) != u32_at(buf, 32) {
            return Err(FormatError::HeaderChecksum);
        }
        if buf[17..20] != [0, 0, 0] {
            return Err(FormatError::Reserved);
        }
        let ec = EcScheme { k: buf[6], m: buf[7] };
        let mut chunk = [0u8; 8];
        chunk.copy_from_slice(&buf[8..16]);
        let key = ShardKey { chunk: u64::from_le_bytes(chunk), index: buf[16] };
        if !scheme_ok(ec, key.index) {
            return Err(FormatError::BadScheme { k: ec.k, m: ec.m, index: key.index });
        }
        let len = u32_at(buf, 20);
        if len > SHARD_BYTES_MAX {
            return Err(FormatError::TooLarge(len));
        }
        let blocks = u32_at(buf, 24);
        if blocks != block_count(len) {
            return Err(FormatError::BlockCount { len, blocks });
        }
        Ok(ShardHeader { key, ec, len, blocks, table_crc: u32_at(buf, 28) })
    }

    /// Bytes of the block crc table.
    pub fn table_bytes(&self) -> usize {
        4 * self.blocks as usize
    }

    /// Offset of the first data byte in the file.
    pub fn data_offset(&self) -> u64 {
        (FIXED_HEADER_BYTES + self.table_bytes()) as u64
    }

    /// The exact size of a valid file with this header.
    pub fn file_bytes(&self) -> u64 {
        self.data_offset() + u64::from(self.len)
    }

    /// Decodes the block crc table from `buf` (exactly the table bytes or more) and checks it
    /// against the header's table crc.
    pub fn decode_table(&self, buf: &[u8]) -> Result<Vec<u32>, FormatError> {
        let need = self.table_bytes();
        if buf.len() < need {
            return Err(FormatError::Truncated {
                need: self.data_offset(),
                have: (FIXED_HEADER_BYTES + buf.len()) as u64,
            });
        }
        let table = &buf[..need];
        if crc32c::crc32c(table) != self.table_crc {
            return Err(FormatError::TableChecksum);
        }
        Ok(table.chunks_exact(4).map(|c| u32_at(c, 0)).collect())
    }

    /// The [`ShardInfo`] this header and its table describe.
    pub fn info(&self, block_crcs: Vec<u32>) -> ShardInfo {
        ShardInfo { key: self.key, ec: self.ec, len: self.len, block_crcs }
    }
}

/// Decodes the header and block crc table from the start of a shard file (`buf` may hold more,
/// e.g. the whole file). This is the fuzzing entry point: it must never panic.
pub fn decode_header(buf: &[u8]) -> Result<(ShardHeader, Vec<u32>), FormatError> {
    let header = ShardHeader::decode(buf)?;
    let table = header.decode_table(&buf[FIXED_HEADER_BYTES..])?;
    Ok((header, table))
}

/// Validates a whole shard file held in memory: header, table, exact length and every block.
/// Used by tests and the fuzz target; the store validates incrementally from disk instead.
pub fn verify_file(buf: &[u8]) -> Result<ShardInfo, FormatError> {
    let (header, table) = decode_header(buf)?;
    if buf.len() as u64 != header.file_bytes() {
        return Err(FormatError::Length { expected: header.file_bytes(), have: buf.len() as u64 });
    }
    let data = &buf[header.data_offset() as usize..];
    verify_blocks(data, 0, &table)?;
    Ok(header.info(table))
}

/// Checks consecutive blocks of `data`, the first being block `first`, against `table`.
pub fn verify_blocks(data: &[u8], first: u32, table: &[u32]) -> Result<(), FormatError> {
    for (i, block) in data.chunks(BLOCK_BYTES as usize).enumerate() {
        let b = first as usize + i;
        let start = b as u64 * u64::from(BLOCK_BYTES);
        let bad = FormatError::BlockChecksum { block: b as u32, start, end: start + block.len() as u64 };
        match table.get(b) {
            Some(&crc) if crc == crc32c::crc32c(block) => {}
            _ => return Err(bad),
        }
    }
    Ok(())
}

/// Verifies whole blocks as [`verify_blocks`] does, for a reader that receives only
/// `data[cut_start..cut_end]`: returns the crc32c of the first block's bytes before `cut_start`
/// and of the last block's bytes from `cut_end` on, computed in the same single pass. With
/// them the reader checks `crc32c(head ‖ its bytes ‖ tail)` of each block against the table.
/// `cut_start` must lie in the first block and `cut_end` in the last (or at its end).
pub fn verify_blocks_cut(
    data: &[u8],
    first: u32,
    table: &[u32],
    cut_start: usize,
    cut_end: usize,
) -> Result<(u32, u32), FormatError> {
    let bs = BLOCK_BYTES as usize;
    let blocks = data.len().div_ceil(bs);
    let (mut head, mut tail) = (0, 0);
    for (i, block) in data.chunks(bs).enumerate() {
        let b = first as usize + i;
        let base = i * bs;
        let s = if i == 0 { cut_start.saturating_sub(base).min(block.len()) } else { 0 };
        let e = if i + 1 == blocks { cut_end.saturating_sub(base).clamp(s, block.len()) } else { block.len() };
        let before = crc32c::crc32c(&block[..s]);
        let with_body = crc32c::crc32c_append(before, &block[s..e]);
        let after = crc32c::crc32c(&block[e..]);
        if i == 0 {
            head = before;
        }
        if i + 1 == blocks {
            tail = after;
        }
        let start = b as u64 * u64::from(BLOCK_BYTES);
        let whole = wire::crc::crc32c_combine(with_body, after, block.len() - e);
        match table.get(b) {
            Some(&crc) if crc == whole => {}
            _ => return Err(FormatError::BlockChecksum { block: b as u32, start, end: start + block.len() as u64 }),
        }
    }
    Ok((head, tail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, RngCore, SeedableRng};

    fn shard(len: usize, seed: u64) -> (ShardInfo, Vec<u8>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut data = vec![0u8; len];
        rng.fill_bytes(&mut data);
        let info = ShardInfo {
            key: ShardKey { chunk: rng.gen(), index: 3 },
            ec: EcScheme::DEFAULT,
            len: len as u32,
            block_crcs: block_crcs(&data),
        };
        let mut file = encode_header(&info);
        file.extend_from_slice(&data);
        (info, file)
    }

    #[test]
    fn roundtrip_various_lengths() {
        for len in [0usize, 1, 2, 3, 65535, 65536, 65537, 3 * 65536 + 7] {
            let (info, file) = shard(len, len as u64);
            assert_eq!(check_info(&info), Ok(()));
            assert_eq!(file.len(), FIXED_HEADER_BYTES + 4 * info.block_crcs.len() + len);
            assert_eq!(verify_file(&file), Ok(info.clone()), "len {len}");
            let (h, table) = decode_header(&file).expect("valid header");
            assert_eq!(h.table_crc, table_crc(&table));
            assert_eq!(h.key, info.key);
        }
    }

    #[test]
    fn layout_matches_the_documented_table() {
        let (info, file) = shard(70_000, 9);
        assert_eq!(&file[0..4], b"TRSH");
        assert_eq!(&file[4..6], &1u16.to_le_bytes());
        assert_eq!((file[6], file[7]), (4, 2));
        assert_eq!(&file[8..16], &info.key.chunk.to_le_bytes());
        assert_eq!(file[16], 3);
        assert_eq!(&file[17..20], &[0, 0, 0]);
        assert_eq!(&file[20..24], &70_000u32.to_le_bytes());
        assert_eq!(&file[24..28], &2u32.to_le_bytes());
        assert_eq!(&file[28..32], &crc32c::crc32c(&file[36..44]).to_le_bytes());
        assert_eq!(&file[32..36], &crc32c::crc32c(&file[..32]).to_le_bytes());
        assert_eq!(&file[36..40], &crc32c::crc32c(&file[44..44 + 65536]).to_le_bytes());
    }

    #[test]
    fn every_single_byte_change_of_a_small_file_is_detected() {
        let (_, file) = shard(300, 1);
        for pos in 0..file.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut bad = file.clone();
                bad[pos] ^= x;
                assert!(verify_file(&bad).is_err(), "change at {pos} accepted");
            }
        }
    }

    #[test]
    fn absurd_lengths_are_refused_before_use() {
        let (_, mut file) = shard(10, 2);
        file[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        file[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32c::crc32c(&file[..32]);
        file[32..36].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_header(&file), Err(FormatError::TooLarge(u32::MAX)));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (_, valid) = shard(200_000, 3);
        for i in 0..20_000 {
            let mut buf = if i % 2 == 0 {
                let len = rng.gen_range(0..200);
                let mut b = vec![0u8; len];
                rng.fill_bytes(&mut b);
                b
            } else {
                // Mutations of a valid file get past the magic and version checks more often.
                let mut b = valid[..rng.gen_range(0..valid.len().min(600))].to_vec();
                for _ in 0..rng.gen_range(1..4) {
                    if !b.is_empty() {
                        let at = rng.gen_range(0..b.len());
                        b[at] = rng.gen();
                    }
                }
                b
            };
            if i % 3 == 0 && buf.len() >= 36 {
                // Re-seal the header so the semantic checks behind the crc run too.
                let crc = crc32c::crc32c(&buf[..32]);
                buf[32..36].copy_from_slice(&crc.to_le_bytes());
            }
            // Whatever is accepted must be exactly what the encoder would write.
            if let Ok((header, table)) = decode_header(&buf) {
                let encoded = encode_header(&header.info(table));
                assert_eq!(&encoded[..], &buf[..encoded.len()]);
            }
            let _ = verify_file(&buf);
        }
    }

    #[test]
    fn cut_reads_return_the_crcs_around_the_bytes() {
        let len = 3 * BLOCK_BYTES as usize + 5000;
        let (info, file) = shard(len, 11);
        let data = &file[file.len() - len..];
        let table = info.block_crcs.clone();
        let bs = BLOCK_BYTES as usize;
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        for _ in 0..200 {
            let offset = rng.gen_range(0..data.len());
            let end = rng.gen_range(offset + 1..=data.len());
            let first = offset / bs;
            let start = first * bs;
            let stop = (end.div_ceil(bs) * bs).min(data.len());
            let blocks = &data[start..stop];
            let (head, tail) = verify_blocks_cut(blocks, first as u32, &table, offset - start, end - start)
                .expect("valid blocks verify");
            assert_eq!(head, crc32c::crc32c(&data[start..offset]));
            let last_end = ((end - 1) / bs * bs + bs).min(data.len());
            assert_eq!(tail, crc32c::crc32c(&data[end..last_end]));
            // Damage inside or outside the cut is found either way.
            let mut bad = blocks.to_vec();
            let at = rng.gen_range(0..bad.len());
            bad[at] ^= 1;
            assert!(verify_blocks_cut(&bad, first as u32, &table, offset - start, end - start).is_err());
        }
    }
}
