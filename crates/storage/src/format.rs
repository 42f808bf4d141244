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
//! Shard file format v2 is v1 sealed for encryption at rest ([`crate::crypt`]): the same
//! fields at the same offsets up to byte 28, then
//!
//! ```text
//!     28     4  crc32c of the (plaintext) block crc table, as in v1
//!     32     4  id of the drive's data key that sealed the file, u32
//!     36     8  nonce prefix, random per file
//!     44     4  crc32c of bytes 0..44
//!     48  4n+16 the block crc table, sealed (AES-256-GCM, nonce = prefix ‖ 0xffffffff), and its tag
//! 64+4n         per block: the block sealed (nonce = prefix ‖ block index u32), then its 16-byte
//!               tag; the file ends after the last block's tag
//! ```
//!
//! Every sealed part's associated data is the 48 header bytes, so nothing can be moved between
//! files or positions, nor the header edited, without failing authentication. Block crcs are
//! still checked after opening: they are what ties the plaintext end to end to the writer.
//!
//! Why this shape: the fixed header is checked by its own crc before any length in it is
//! trusted, so a corrupt file can never make the reader allocate or seek absurdly. The table crc
//! is the same value the metadata service keeps per shard (`ChunkRecord::table_crcs`), tying the
//! stored blocks end to end to what the writer computed. Per-block crcs let a ranged read verify
//! only the blocks it returns.

use crate::crypt::{ShardSeal, TAG_BYTES};
use ring::aead::LessSafeKey;
use std::fmt;
use wire::{EcScheme, ShardInfo, ShardKey, SHARD_BLOCK_BYTES};

/// The first four bytes of every shard file.
pub const MAGIC: [u8; 4] = *b"TRSH";
/// The format version of plaintext shard files.
pub const FORMAT_VERSION: u16 = 1;
/// The format version of sealed (encrypted) shard files.
pub const FORMAT_VERSION_SEALED: u16 = 2;
/// Size of the fixed part of a version 1 header, before the block crc table.
pub const FIXED_HEADER_BYTES: usize = 36;
/// Size of the fixed part of a version 2 header.
pub const SEALED_HEADER_BYTES: usize = 48;
/// The largest fixed header of any version.
pub const HEADER_BYTES_MAX: usize = SEALED_HEADER_BYTES;
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
    #[error(
        "unsupported shard format version {0} (this build reads versions {FORMAT_VERSION} and {FORMAT_VERSION_SEALED})"
    )]
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
    /// Not damage: the file is sealed with a data key this node does not hold.
    #[error("sealed with data key {key_id}, which this node does not hold (no [encryption] key, or another one)")]
    NoKey { key_id: u32 },
    #[error("the sealed block crc table fails authentication (damaged, or sealed with another key)")]
    TableAuth,
    #[error("sealed block {block} (bytes {start}..{end} of the data) fails authentication (damaged, or moved)")]
    BlockAuth { block: u32, start: u64, end: u64 },
}

/// How a version 2 file is sealed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealing {
    /// The drive's data key that sealed it.
    pub key_id: u32,
    pub nonce_prefix: [u8; 8],
    /// The header's 48 bytes: every sealed part's associated data.
    pub header: [u8; SEALED_HEADER_BYTES],
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
    /// Version 2: how the file is sealed; `None` for a plaintext (version 1) file.
    pub sealing: Option<Sealing>,
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

/// Encodes a sealed (version 2) shard file: the header with its sealed block crc table, and
/// the sealed data, with data key `key_id` (`key`) and the file's random `nonce_prefix`. The
/// caller has checked `info` with [`check_info`] and `data` against it.
pub fn encode_sealed(
    info: &ShardInfo,
    data: &[u8],
    key_id: u32,
    key: &LessSafeKey,
    nonce_prefix: [u8; 8],
) -> (Vec<u8>, Vec<u8>) {
    let plain = encode_header(info);
    let mut header = [0u8; SEALED_HEADER_BYTES];
    header[..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&FORMAT_VERSION_SEALED.to_le_bytes());
    header[6..32].copy_from_slice(&plain[6..32]);
    header[32..36].copy_from_slice(&key_id.to_le_bytes());
    header[36..44].copy_from_slice(&nonce_prefix);
    let crc = crc32c::crc32c(&header[..44]);
    header[44..48].copy_from_slice(&crc.to_le_bytes());
    let seal = ShardSeal { key, nonce_prefix, header: &header };
    let mut head = header.to_vec();
    head.extend_from_slice(&seal.seal_table(&plain[FIXED_HEADER_BYTES..]));
    (head, seal.seal_data(data, BLOCK_BYTES as usize))
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
        let sealing = match version {
            FORMAT_VERSION => {
                if crc32c::crc32c(&buf[..32]) != u32_at(buf, 32) {
                    return Err(FormatError::HeaderChecksum);
                }
                None
            }
            FORMAT_VERSION_SEALED => {
                if buf.len() < SEALED_HEADER_BYTES {
                    return Err(FormatError::Truncated { need: SEALED_HEADER_BYTES as u64, have: buf.len() as u64 });
                }
                if crc32c::crc32c(&buf[..44]) != u32_at(buf, 44) {
                    return Err(FormatError::HeaderChecksum);
                }
                let mut nonce_prefix = [0u8; 8];
                nonce_prefix.copy_from_slice(&buf[36..44]);
                let mut header = [0u8; SEALED_HEADER_BYTES];
                header.copy_from_slice(&buf[..SEALED_HEADER_BYTES]);
                Some(Sealing { key_id: u32_at(buf, 32), nonce_prefix, header })
            }
            other => return Err(FormatError::BadVersion(other)),
        };
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
        Ok(ShardHeader { key, ec, len, blocks, table_crc: u32_at(buf, 28), sealing })
    }

    /// Bytes of the fixed header (36 plaintext, 48 sealed).
    pub fn fixed_bytes(&self) -> usize {
        if self.sealing.is_some() {
            SEALED_HEADER_BYTES
        } else {
            FIXED_HEADER_BYTES
        }
    }

    /// Bytes each sealed part carries besides its content (its tag; 0 plaintext).
    fn tag_bytes(&self) -> usize {
        if self.sealing.is_some() {
            TAG_BYTES
        } else {
            0
        }
    }

    /// Bytes of the block crc table as stored (sealed: with its tag).
    pub fn table_bytes(&self) -> usize {
        4 * self.blocks as usize + self.tag_bytes()
    }

    /// Offset of the first data byte in the file.
    pub fn data_offset(&self) -> u64 {
        (self.fixed_bytes() + self.table_bytes()) as u64
    }

    /// Bytes of the data as stored (sealed: each block's tag after it).
    pub fn stored_len(&self) -> u64 {
        u64::from(self.len) + (self.blocks as usize * self.tag_bytes()) as u64
    }

    /// The exact size of a valid file with this header.
    pub fn file_bytes(&self) -> u64 {
        self.data_offset() + self.stored_len()
    }

    /// Where whole blocks holding data bytes `start .. stop` are stored (`start` a block
    /// boundary, `stop` one or the end of the data): their offset from the start of the
    /// stored data, and their stored length.
    pub fn stored_span(&self, start: u32, stop: u32) -> (u64, usize) {
        let unit = u64::from(BLOCK_BYTES) + self.tag_bytes() as u64;
        let first = u64::from(start / BLOCK_BYTES);
        let plain = stop.saturating_sub(start) as usize;
        (first * unit, plain + plain.div_ceil(BLOCK_BYTES as usize) * self.tag_bytes())
    }

    /// Decodes the block crc table from `buf` (exactly the stored table bytes or more) and
    /// checks it against the header's table crc; a sealed table is opened with `key` first.
    pub fn decode_table(&self, buf: &[u8], key: Option<&LessSafeKey>) -> Result<Vec<u32>, FormatError> {
        let need = self.table_bytes();
        if buf.len() < need {
            return Err(FormatError::Truncated {
                need: self.data_offset(),
                have: (self.fixed_bytes() + buf.len()) as u64,
            });
        }
        let opened;
        let table = match &self.sealing {
            None => &buf[..need],
            Some(sealing) => {
                let key = key.ok_or(FormatError::NoKey { key_id: sealing.key_id })?;
                let seal = ShardSeal { key, nonce_prefix: sealing.nonce_prefix, header: &sealing.header };
                opened = seal.open_table(&buf[..need]).ok_or(FormatError::TableAuth)?;
                &opened[..]
            }
        };
        if crc32c::crc32c(table) != self.table_crc {
            return Err(FormatError::TableChecksum);
        }
        Ok(table.chunks_exact(4).map(|c| u32_at(c, 0)).collect())
    }

    /// Opens whole stored blocks in place, the first being block `first` (plaintext files:
    /// nothing to do); returns the plaintext's length, at the start of `stored`.
    pub fn open_blocks(&self, key: Option<&LessSafeKey>, first: u32, stored: &mut [u8]) -> Result<usize, FormatError> {
        let Some(sealing) = &self.sealing else { return Ok(stored.len()) };
        let key = key.ok_or(FormatError::NoKey { key_id: sealing.key_id })?;
        let seal = ShardSeal { key, nonce_prefix: sealing.nonce_prefix, header: &sealing.header };
        seal.open_blocks(first, stored, BLOCK_BYTES as usize).map_err(|block| {
            let start = u64::from(block) * u64::from(BLOCK_BYTES);
            let end = (start + u64::from(BLOCK_BYTES)).min(u64::from(self.len));
            FormatError::BlockAuth { block, start, end }
        })
    }

    /// The [`ShardInfo`] this header and its table describe.
    pub fn info(&self, block_crcs: Vec<u32>) -> ShardInfo {
        ShardInfo { key: self.key, ec: self.ec, len: self.len, block_crcs }
    }
}

/// Decodes the header and block crc table from the start of a shard file (`buf` may hold more,
/// e.g. the whole file), opening a sealed table with `key`. This is the fuzzing entry point: it
/// must never panic.
pub fn decode_header(buf: &[u8], key: Option<&LessSafeKey>) -> Result<(ShardHeader, Vec<u32>), FormatError> {
    let header = ShardHeader::decode(buf)?;
    let table = header.decode_table(buf.get(header.fixed_bytes()..).unwrap_or(&[]), key)?;
    Ok((header, table))
}

/// Validates a whole shard file held in memory: header, table, exact length and every block
/// (a sealed file opened with `key`); returns its info and plaintext data. Used by tests and
/// the fuzz target; the store validates incrementally from disk instead.
pub fn verify_file(buf: &[u8], key: Option<&LessSafeKey>) -> Result<(ShardInfo, Vec<u8>), FormatError> {
    let (header, table) = decode_header(buf, key)?;
    if buf.len() as u64 != header.file_bytes() {
        return Err(FormatError::Length { expected: header.file_bytes(), have: buf.len() as u64 });
    }
    let mut data = buf[header.data_offset() as usize..].to_vec();
    let plain = header.open_blocks(key, 0, &mut data)?;
    data.truncate(plain);
    verify_blocks(&data, 0, &table)?;
    Ok((header.info(table), data))
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
            assert_eq!(verify_file(&file, None).map(|(i, _)| i), Ok(info.clone()), "len {len}");
            let (h, table) = decode_header(&file, None).expect("valid header");
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
                assert!(verify_file(&bad, None).is_err(), "change at {pos} accepted");
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
        assert_eq!(decode_header(&file, None), Err(FormatError::TooLarge(u32::MAX)));
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
            if let Ok((header, table)) = decode_header(&buf, None) {
                let encoded = encode_header(&header.info(table));
                assert_eq!(&encoded[..], &buf[..encoded.len()]);
            }
            let _ = verify_file(&buf, None);
        }
    }

    fn data_key(byte: u8) -> LessSafeKey {
        LessSafeKey::new(ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &[byte; 32]).expect("key"))
    }

    fn sealed(len: usize, seed: u64, key: &LessSafeKey) -> (ShardInfo, Vec<u8>, Vec<u8>) {
        let (info, plain_file) = shard(len, seed);
        let data = plain_file[plain_file.len() - len..].to_vec();
        let (mut file, stored) = encode_sealed(&info, &data, 7, key, [seed as u8; 8]);
        file.extend_from_slice(&stored);
        (info, file, data)
    }

    #[test]
    fn sealed_files_roundtrip_and_show_no_plaintext() {
        let key = data_key(1);
        for len in [0usize, 1, 65535, 65536, 65537, 3 * 65536 + 7] {
            let (info, file, data) = sealed(len, len as u64 + 1, &key);
            let blocks = info.block_crcs.len();
            assert_eq!(file.len(), SEALED_HEADER_BYTES + 4 * blocks + 16 + len + 16 * blocks, "len {len}");
            assert_eq!(verify_file(&file, Some(&key)), Ok((info.clone(), data.clone())), "len {len}");
            let (h, table) = decode_header(&file, Some(&key)).expect("header");
            assert_eq!((h.key, h.len, h.table_crc), (info.key, info.len, table_crc(&table)));
            assert_eq!(h.sealing.map(|s| s.key_id), Some(7));
            // Without the key: not damage, but a missing key; with another: refused.
            assert_eq!(decode_header(&file, None).err(), Some(FormatError::NoKey { key_id: 7 }));
            assert_eq!(decode_header(&file, Some(&data_key(2))).err(), Some(FormatError::TableAuth));
            // Samples of the plaintext, 32 bytes each, are nowhere in the file.
            for at in (0..len.saturating_sub(32)).step_by(len / 16 + 1) {
                let sample = &data[at..at + 32];
                assert!(!file.windows(32).any(|w| w == sample), "len {len}: plaintext at {at} shows");
            }
        }
    }

    #[test]
    fn sealed_layout_matches_the_documented_table() {
        let key = data_key(3);
        let (info, file, _) = sealed(70_000, 9, &key);
        assert_eq!(&file[0..4], b"TRSH");
        assert_eq!(&file[4..6], &2u16.to_le_bytes());
        assert_eq!(&file[8..16], &info.key.chunk.to_le_bytes());
        assert_eq!(&file[20..24], &70_000u32.to_le_bytes());
        assert_eq!(&file[24..28], &2u32.to_le_bytes());
        assert_eq!(&file[28..32], &table_crc(&info.block_crcs).to_le_bytes());
        assert_eq!(&file[32..36], &7u32.to_le_bytes());
        assert_eq!(&file[36..44], &[9u8; 8]);
        assert_eq!(&file[44..48], &crc32c::crc32c(&file[..44]).to_le_bytes());
        let (h, _) = decode_header(&file, Some(&key)).expect("header");
        assert_eq!(h.data_offset(), 48 + 8 + 16);
        assert_eq!(h.stored_span(65536, 70_000), (65536 + 16, 4464 + 16));
    }

    #[test]
    fn every_single_byte_change_of_a_small_sealed_file_is_detected() {
        let key = data_key(4);
        let (_, file, _) = sealed(300, 5, &key);
        for pos in 0..file.len() {
            let mut bad = file.clone();
            bad[pos] ^= 0x01;
            assert!(verify_file(&bad, Some(&key)).is_err(), "change at {pos} accepted");
        }
    }

    /// Model: ranges of blocks read from a sealed file and opened are the plaintext file's.
    #[test]
    fn sealed_block_ranges_open_to_the_plaintext() {
        let key = data_key(5);
        let len = 5 * BLOCK_BYTES as usize + 1234;
        let (info, file, data) = sealed(len, 21, &key);
        let (h, _) = decode_header(&file, Some(&key)).expect("header");
        let stored = &file[h.data_offset() as usize..];
        let bs = BLOCK_BYTES as usize;
        let mut rng = rand::rngs::StdRng::seed_from_u64(22);
        for _ in 0..100 {
            let first = rng.gen_range(0..info.block_crcs.len());
            let last = rng.gen_range(first..info.block_crcs.len());
            let (start, stop) = ((first * bs) as u32, (((last + 1) * bs).min(len)) as u32);
            let (at, n) = h.stored_span(start, stop);
            let mut buf = stored[at as usize..at as usize + n].to_vec();
            let plain = h.open_blocks(Some(&key), first as u32, &mut buf).expect("opens");
            assert_eq!(&buf[..plain], &data[start as usize..stop as usize]);
            verify_blocks(&buf[..plain], first as u32, &info.block_crcs).expect("crcs hold");
        }
        // Two blocks swapped: refused.
        let unit = bs + TAG_BYTES;
        let mut swapped = stored[..2 * unit].to_vec();
        swapped.rotate_left(unit);
        assert!(matches!(h.open_blocks(Some(&key), 0, &mut swapped), Err(FormatError::BlockAuth { block: 0, .. })));
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
