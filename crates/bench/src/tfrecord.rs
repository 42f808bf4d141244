//! TFRecord files as TensorFlow writes them, so the training and scan benchmarks read the real
//! format (and so any TFRecord reader can read what `trove bench` generates).
//!
//! ```text
//! record:  u64 LE  data length N
//!          u32 LE  masked crc32c of the 8 length bytes
//!          N bytes data (here a serialized tf.train.Example)
//!          u32 LE  masked crc32c of the data
//! mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8   (wrapping, u32)
//! ```
//!
//! The data of each record is a `tf.train.Example` with the features DLIO writes: `image`
//! (bytes) and `size` (int64), encoded by hand (a few protobuf varints; no protobuf dependency).

use anyhow::{bail, Result};
use bytes::{BufMut, Bytes, BytesMut};

/// Framing bytes around each record's data: length, length CRC, data CRC.
pub const FRAME_OVERHEAD_BYTES: usize = 16;
/// Largest record accepted by the parser: protects against garbage lengths (a real ImageNet
/// record is ~115 KB, a CosmoFlow sample ~2.8 MB, a UNet3D sample under 1 GB).
pub const RECORD_BYTES_MAX: u64 = 1 << 30;

const MASK_DELTA: u32 = 0xa282_ead8;

/// TensorFlow's masked CRC: a CRC of data that itself contains CRCs stays well distributed.
pub fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    (c.rotate_right(15)).wrapping_add(MASK_DELTA)
}

/// Appends one framed record.
pub fn frame_into(out: &mut BytesMut, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.reserve(data.len() + FRAME_OVERHEAD_BYTES);
    out.put_slice(&len);
    out.put_u32_le(masked_crc(&len));
    out.put_slice(data);
    out.put_u32_le(masked_crc(data));
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_len_field(out: &mut Vec<u8>, field: u32, body: &[u8]) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// A `Feature` holding one bytes value: `Feature { bytes_list (1): BytesList { value (1) } }`.
fn bytes_feature(value: &[u8]) -> Vec<u8> {
    let mut list = Vec::with_capacity(value.len() + 8);
    put_len_field(&mut list, 1, value);
    let mut feature = Vec::with_capacity(value.len() + 12);
    put_len_field(&mut feature, 1, &list);
    feature
}

/// A `Feature` holding one int64: `Feature { int64_list (3): Int64List { value (1): packed } }`.
fn int64_feature(value: i64) -> Vec<u8> {
    let mut packed = Vec::new();
    put_varint(&mut packed, value as u64);
    let mut list = Vec::new();
    put_len_field(&mut list, 1, &packed);
    let mut feature = Vec::new();
    put_len_field(&mut feature, 3, &list);
    feature
}

/// `Example { features (1): Features { feature (1): map entries { key (1), value (2) } } }`.
fn example_of(features: &[(&[u8], Vec<u8>)]) -> Vec<u8> {
    let mut map = Vec::with_capacity(features.iter().map(|(k, v)| k.len() + v.len() + 16).sum());
    for (key, value) in features {
        let mut entry = Vec::with_capacity(key.len() + value.len() + 8);
        put_len_field(&mut entry, 1, key);
        put_len_field(&mut entry, 2, value);
        put_len_field(&mut map, 1, &entry);
    }
    let mut ex = Vec::with_capacity(map.len() + 8);
    put_len_field(&mut ex, 1, &map);
    ex
}

/// A serialized `tf.train.Example { features: { "image": bytes_list[image], "size":
/// int64_list[size] } }`.
pub fn example(image: &[u8], size: i64) -> Vec<u8> {
    example_of(&[(b"image", bytes_feature(image)), (b"size", int64_feature(size))])
}

/// Why a TFRecord stream is not valid.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The length field's CRC does not match: the stream is not at a record boundary or is damaged.
    LengthCrc { offset: u64 },
    /// The data CRC does not match.
    DataCrc { offset: u64 },
    /// A length beyond [`RECORD_BYTES_MAX`].
    TooLong { offset: u64, len: u64 },
    /// The stream ends inside a record.
    Truncated { offset: u64 },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::LengthCrc { offset } => write!(f, "TFRecord length checksum mismatch at byte {offset}"),
            FrameError::DataCrc { offset } => {
                write!(f, "TFRecord data checksum mismatch in the record at byte {offset}")
            }
            FrameError::TooLong { offset, len } => {
                write!(f, "TFRecord at byte {offset} claims {len} bytes (limit {RECORD_BYTES_MAX})")
            }
            FrameError::Truncated { offset } => write!(f, "TFRecord stream ends inside the record at byte {offset}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// An incremental TFRecord parser: feed it bytes as they arrive, it yields each complete
/// record's data length after checking both CRCs. Keeps at most one partial record buffered.
///
/// What it yields does not depend on how the stream is cut into pieces: every record before
/// the first damage is returned, and the damage is the answer to the feed that reaches it, or
/// (when that feed also completed records) to every later feed and to [`Parser::finish`].
#[derive(Default)]
pub struct Parser {
    buf: BytesMut,
    /// Stream offset of `buf[0]`.
    offset: u64,
    pub records: u64,
    pub data_bytes: u64,
    /// The damage found, once found: the stream is not read past it.
    failed: Option<FrameError>,
}

impl Parser {
    /// Adds bytes and returns the data of every record completed by them.
    pub fn feed(&mut self, chunk: &[u8]) -> std::result::Result<Vec<Bytes>, FrameError> {
        self.feed_bytes(Bytes::copy_from_slice(chunk))
    }

    /// Like [`Parser::feed`], without copying: records that lie whole inside `piece` are
    /// returned as slices of it; only a record split across pieces is assembled in a buffer.
    pub fn feed_bytes(&mut self, piece: Bytes) -> std::result::Result<Vec<Bytes>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut out = Vec::new();
        match self.take_records(piece, &mut out) {
            Ok(()) => Ok(out),
            Err(e) => {
                self.failed = Some(e.clone());
                // Records before the damage are valid: they go out first, the damage next time.
                if out.is_empty() {
                    Err(e)
                } else {
                    Ok(out)
                }
            }
        }
    }

    /// Appends to `out` the records `piece` completes; stops at the first damage.
    fn take_records(&mut self, mut piece: Bytes, out: &mut Vec<Bytes>) -> std::result::Result<(), FrameError> {
        // First finish a record left partial by the previous piece, copying only its bytes.
        while !self.buf.is_empty() && !piece.is_empty() {
            let need = if self.buf.len() < 12 {
                12 - self.buf.len()
            } else {
                self.record_len(&self.buf[..12])? - self.buf.len()
            };
            let take = need.min(piece.len());
            self.buf.extend_from_slice(&piece.split_to(take));
            if self.buf.len() >= 12 && self.buf.len() == self.record_len(&self.buf[..12])? {
                let record = self.buf.split().freeze();
                out.push(self.check(record)?);
            }
        }
        if !self.buf.is_empty() {
            return Ok(());
        }
        while piece.len() >= 12 {
            let total = self.record_len(&piece[..12])?;
            if piece.len() < total {
                break;
            }
            let record = piece.split_to(total);
            out.push(self.check(record)?);
        }
        self.buf.extend_from_slice(&piece);
        Ok(())
    }

    /// Total framed length of the record whose 12 header bytes are `head`, after checking the
    /// length's CRC and limit.
    fn record_len(&self, head: &[u8]) -> std::result::Result<usize, FrameError> {
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&head[..8]);
        let want_crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if masked_crc(&len_bytes) != want_crc {
            return Err(FrameError::LengthCrc { offset: self.offset });
        }
        let len = u64::from_le_bytes(len_bytes);
        if len > RECORD_BYTES_MAX {
            return Err(FrameError::TooLong { offset: self.offset, len });
        }
        Ok(12 + len as usize + 4)
    }

    /// Verifies a whole framed record's data CRC and returns its data.
    fn check(&mut self, record: Bytes) -> std::result::Result<Bytes, FrameError> {
        let total = record.len();
        let data = record.slice(12..total - 4);
        let crc = u32::from_le_bytes([record[total - 4], record[total - 3], record[total - 2], record[total - 1]]);
        if masked_crc(&data) != crc {
            return Err(FrameError::DataCrc { offset: self.offset });
        }
        self.offset += total as u64;
        self.records += 1;
        self.data_bytes += data.len() as u64;
        Ok(data)
    }

    /// Checks that the stream ended on a record boundary.
    pub fn finish(&self) -> std::result::Result<(), FrameError> {
        if let Some(e) = &self.failed {
            Err(e.clone())
        } else if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated { offset: self.offset })
        }
    }
}

/// A `tf.train.Example` as TensorFlow's ImageNet scripts write it: `image/encoded` (bytes),
/// `image/format` (bytes), `image/class/label` (int64).
pub fn image_example(image: &[u8], label: i64) -> Vec<u8> {
    example_of(&[
        (b"image/encoded", bytes_feature(image)),
        (b"image/format", bytes_feature(b"jpeg")),
        (b"image/class/label", int64_feature(label)),
    ])
}

/// Reads the image's length and the `size` value (when there is one) back out of an Example: one
/// of ours ([`example`]: `image` and `size`) or one laid out as TensorFlow's ImageNet pipeline
/// and `trove dataset pack` write them (`image/encoded`, with a label and no size). A minimal
/// protobuf walk, enough to prove the record is a well-formed Example with an image.
pub fn parse_example(data: &[u8]) -> Result<(usize, Option<i64>)> {
    fn varint(b: &[u8], pos: &mut usize) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = b.get(*pos) else { bail!("truncated varint") };
            *pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!("varint too long")
    }
    /// The length-delimited fields of a message: (field number, body).
    fn fields(b: &[u8]) -> Result<Vec<(u64, &[u8])>> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < b.len() {
            let key = varint(b, &mut pos)?;
            match key & 7 {
                2 => {
                    let len = varint(b, &mut pos)? as usize;
                    let end = pos
                        .checked_add(len)
                        .filter(|e| *e <= b.len())
                        .ok_or_else(|| anyhow::anyhow!("field overruns message"))?;
                    out.push((key >> 3, &b[pos..end]));
                    pos = end;
                }
                0 => {
                    varint(b, &mut pos)?;
                }
                t => bail!("unexpected wire type {t}"),
            }
        }
        Ok(out)
    }
    let mut image = None;
    let mut size = None;
    for (f, features) in fields(data)? {
        if f != 1 {
            continue;
        }
        for (f, entry) in fields(features)? {
            if f != 1 {
                continue;
            }
            let parts = fields(entry)?;
            let key = parts.iter().find(|(n, _)| *n == 1).map(|(_, k)| *k).unwrap_or_default();
            let Some(value) = parts.iter().find(|(n, _)| *n == 2).map(|(_, v)| *v) else { continue };
            for (kind, list) in fields(value)? {
                match (key, kind) {
                    (b"image" | b"image/encoded", 1) => {
                        if let Some((_, v)) = fields(list)?.into_iter().find(|(n, _)| *n == 1) {
                            image = Some(v.len());
                        }
                    }
                    (b"size", 3) => {
                        if let Some((_, packed)) = fields(list)?.into_iter().find(|(n, _)| *n == 1) {
                            let mut p = 0;
                            size = Some(varint(packed, &mut p)? as i64);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    match image {
        Some(i) => Ok((i, size)),
        None => bail!("record is not an Example with an image feature (`image` or `image/encoded`)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // TensorFlow's own test vectors (tensorflow/core/lib/hash/crc32c_test.cc): crc32c of 32
        // zero bytes is 0x8a9136aa; masking is a rotate and an add.
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        let c = 0x8a91_36aau32;
        assert_eq!(masked_crc(&[0u8; 32]), c.rotate_right(15).wrapping_add(0xa282_ead8));
    }

    /// Found by the `tfrecord` fuzz target: a feed that completed a record and then met damage
    /// answered only the damage, so whole and piecewise reads of one stream differed.
    #[test]
    fn records_before_damage_come_out_however_the_stream_is_cut() {
        let mut stream = BytesMut::new();
        frame_into(&mut stream, &example(b"good", 1));
        let good = stream.len();
        stream.extend_from_slice(&[0x5a; 20]);
        for piece in [1usize, 5, good, good + 3, stream.len()] {
            let mut p = Parser::default();
            let mut records = Vec::new();
            let mut failed = None;
            for c in stream.chunks(piece) {
                match p.feed(c) {
                    Ok(r) => records.extend(r),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            assert_eq!(records.len(), 1, "pieces of {piece}");
            let at_end = p.finish().expect_err("the damage is reported");
            assert_eq!(at_end, FrameError::LengthCrc { offset: good as u64 }, "pieces of {piece}");
            assert!(failed.is_none_or(|e| e == at_end), "pieces of {piece}");
            assert_eq!(p.feed(b"more").expect_err("nothing is read past damage"), at_end);
        }
    }

    #[test]
    fn round_trip_through_the_parser_in_any_pieces() {
        let mut stream = BytesMut::new();
        let mut want = Vec::new();
        for i in 0..20usize {
            let image: Vec<u8> = (0..i * 37).map(|j| (j * 7 + i) as u8).collect();
            let ex = example(&image, i as i64);
            frame_into(&mut stream, &ex);
            want.push((image.len(), Some(i as i64)));
        }
        let stream = stream.freeze();
        for piece in [1usize, 7, 100, 4096, stream.len()] {
            let mut p = Parser::default();
            let mut got = Vec::new();
            for c in stream.chunks(piece) {
                for rec in p.feed(c).expect("valid stream") {
                    got.push(parse_example(&rec).expect("example"));
                }
            }
            p.finish().expect("ends on a boundary");
            assert_eq!(got, want, "piece size {piece}");
            assert_eq!(p.records, 20);
        }
    }

    #[test]
    fn damage_is_detected() {
        let mut stream = BytesMut::new();
        frame_into(&mut stream, &example(b"abcdef", 1));
        let good = stream.freeze();
        let mut bad = good.to_vec();
        bad[14] ^= 1; // inside the data
        assert!(matches!(Parser::default().feed(&bad), Err(FrameError::DataCrc { offset: 0 })));
        let mut bad = good.to_vec();
        bad[0] ^= 1; // the length
        assert!(matches!(Parser::default().feed(&bad), Err(FrameError::LengthCrc { offset: 0 })));
        let mut p = Parser::default();
        assert!(p.feed(&good[..good.len() - 1]).expect("partial").is_empty());
        assert!(matches!(p.finish(), Err(FrameError::Truncated { offset: 0 })));
    }

    #[test]
    fn imagenet_layout_examples_parse() {
        let image = vec![0xabu8; 1234];
        assert_eq!(parse_example(&image_example(&image, 7)).expect("example"), (1234, None));
        assert!(parse_example(b"\x0a\x00").is_err(), "an Example without an image is refused");
    }
}
