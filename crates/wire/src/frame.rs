//! Frame layout: how one message travels on a TCP connection.
//!
//! ```text
//! offset  size  field
//!      0     4  magic  b"TROV"
//!      4     2  protocol version, u16 little-endian
//!      6     1  kind: 0 = hello, 1 = request, 2 = response
//!      7     1  flags, reserved: must be 0
//!      8     8  request id, u64 LE (0 for hello); a response carries its request's id
//!     16     4  body length, u32 LE (postcard-encoded message)
//!     20     4  data length, u32 LE (raw bytes, e.g. a shard)
//!     24     4  crc32c of bytes 0..24 followed by the body
//!     28        body, then data
//! ```
//!
//! Invariants: lengths never exceed [`BODY_BYTES_MAX`] / [`DATA_BYTES_MAX`], checked before any
//! allocation; a header or body that fails its checksum is rejected and the connection closed.
//! The data section is not covered by the frame checksum: shard data carries its own
//! end-to-end checksums, verified by the reader against the metadata.
//!
//! Hello frames always use version 1 framing so that peers of any version can read each
//! other's hello and refuse with a clear message.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::pool::{self, PooledBuf};

/// The frame magic.
pub const MAGIC: [u8; 4] = *b"TROV";
/// Size of the fixed frame header.
pub const HEADER_BYTES: usize = 28;
/// Largest message body accepted.
pub const BODY_BYTES_MAX: u32 = 16 << 20;
/// Largest data section accepted.
pub const DATA_BYTES_MAX: u32 = 64 << 20;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Hello = 0,
    Request = 1,
    Response = 2,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub version: u16,
    pub kind: FrameKind,
    pub request_id: u64,
    pub body_len: u32,
    pub data_len: u32,
    pub crc: u32,
}

/// Why bytes are not a valid frame.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    #[error("not a Trove peer (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("reserved frame flags set ({0:#x})")]
    BadFlags(u8),
    #[error("frame body of {0} bytes exceeds the limit of {BODY_BYTES_MAX}")]
    BodyTooLarge(u32),
    #[error("frame data of {0} bytes exceeds the limit of {DATA_BYTES_MAX}")]
    DataTooLarge(u32),
    #[error("frame checksum mismatch (header or body corrupt)")]
    BadChecksum,
    #[error("frame truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
}

impl FrameHeader {
    /// Decodes and validates a header (not yet its checksum, which covers the body too).
    pub fn decode(buf: &[u8]) -> Result<FrameHeader, FrameError> {
        if buf.len() < HEADER_BYTES {
            return Err(FrameError::Truncated { need: HEADER_BYTES, have: buf.len() });
        }
        let magic = [buf[0], buf[1], buf[2], buf[3]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        let kind = match buf[6] {
            0 => FrameKind::Hello,
            1 => FrameKind::Request,
            2 => FrameKind::Response,
            k => return Err(FrameError::BadKind(k)),
        };
        if buf[7] != 0 {
            return Err(FrameError::BadFlags(buf[7]));
        }
        let request_id = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
        let body_len = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
        let data_len = u32::from_le_bytes(buf[20..24].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(buf[24..28].try_into().expect("4 bytes"));
        if body_len > BODY_BYTES_MAX {
            return Err(FrameError::BodyTooLarge(body_len));
        }
        if data_len > DATA_BYTES_MAX {
            return Err(FrameError::DataTooLarge(data_len));
        }
        Ok(FrameHeader { version, kind, request_id, body_len, data_len, crc })
    }

    /// Checks the header checksum over `header_bytes[..24]` and `body`.
    pub fn verify(&self, header_bytes: &[u8], body: &[u8]) -> Result<(), FrameError> {
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header_bytes[..24]), body);
        if crc != self.crc {
            return Err(FrameError::BadChecksum);
        }
        Ok(())
    }
}

/// Encodes a frame header plus body into one buffer (data is sent separately).
pub fn encode(version: u16, kind: FrameKind, request_id: u64, body: &[u8], data_len: usize) -> Vec<u8> {
    assert!(body.len() <= BODY_BYTES_MAX as usize, "frame body of {} bytes exceeds the limit", body.len());
    assert!(data_len <= DATA_BYTES_MAX as usize, "frame data of {data_len} bytes exceeds the limit");
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.push(kind as u8);
    out.push(0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&(data_len as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[..24]), body);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A whole frame read from a stream.
#[derive(Clone, Debug)]
pub struct Frame {
    pub header: FrameHeader,
    pub body: Bytes,
    pub data: Bytes,
}

/// Decodes one complete frame from a byte slice (used by the fuzz target and tests); returns
/// the frame and how many bytes it used.
pub fn decode_frame(buf: &[u8]) -> Result<(Frame, usize), FrameError> {
    let header = FrameHeader::decode(buf)?;
    let total = HEADER_BYTES + header.body_len as usize + header.data_len as usize;
    if buf.len() < total {
        return Err(FrameError::Truncated { need: total, have: buf.len() });
    }
    let body_end = HEADER_BYTES + header.body_len as usize;
    let body = &buf[HEADER_BYTES..body_end];
    header.verify(&buf[..HEADER_BYTES], body)?;
    let frame =
        Frame { header, body: Bytes::copy_from_slice(body), data: Bytes::copy_from_slice(&buf[body_end..total]) };
    Ok((frame, total))
}

/// Errors of reading a frame from a stream.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a frame starts.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>, ReadError> {
    let mut head = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(FrameError::Truncated { need: HEADER_BYTES, have: got }.into());
        }
        got += n;
    }
    let header = FrameHeader::decode(&head)?;
    let body = read_section(r, header.body_len as usize).await?;
    header.verify(&head, &body)?;
    let data = read_section(r, header.data_len as usize).await?;
    crate::traffic::received(HEADER_BYTES + body.len() + data.len());
    Ok(Some(Frame { header, body: body.freeze(), data: data.freeze() }))
}

/// Reads exactly `len` bytes into a buffer from the process's [`pool`], without zeroing it
/// first (shard data is most of what crosses the wire; zeroing it before overwriting it cost a
/// pass over every byte, and a new buffer per frame a page fault per 4 KiB received).
async fn read_section<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> std::io::Result<PooledBuf> {
    let mut buf = pool::take(len);
    while buf.len() < len {
        let want = (len - buf.len()) as u64;
        if (&mut *r).take(want).read_buf(buf.vec()).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut buf = encode(1, FrameKind::Request, 42, b"hello", 3);
        buf.extend_from_slice(b"xyz");
        let (frame, used) = decode_frame(&buf).expect("valid frame");
        assert_eq!(used, buf.len());
        assert_eq!(frame.header.request_id, 42);
        assert_eq!(&frame.body[..], b"hello");
        assert_eq!(&frame.data[..], b"xyz");
    }

    #[tokio::test]
    async fn a_data_section_is_read_into_the_buffer_of_one_dropped_before() {
        // A size no other test of this crate reads, so no other test takes the buffer between.
        let len = (5 << 20) + 12_345;
        let mut stream = Vec::new();
        for fill in [1u8, 2] {
            stream.extend_from_slice(&encode(1, FrameKind::Response, 9, b"body", len));
            stream.extend(std::iter::repeat_n(fill, len));
        }
        let mut r = &stream[..];
        let first = read_frame(&mut r).await.expect("first frame").expect("not the end");
        assert!(first.data.iter().all(|&b| b == 1));
        let at = first.data.as_ptr();
        drop(first);
        let second = read_frame(&mut r).await.expect("second frame").expect("not the end");
        assert_eq!(second.data.as_ptr(), at, "the first frame's buffer is reused");
        assert_eq!(second.data.len(), len);
        assert!(second.data.iter().all(|&b| b == 2), "every byte is the second frame's");
    }

    #[test]
    fn every_single_bit_flip_in_header_or_body_is_rejected() {
        let buf = encode(1, FrameKind::Response, 7, b"some body", 0);
        for bit in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_frame(&bad).is_err(), "flip of bit {bit} accepted");
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocation() {
        let mut buf = encode(1, FrameKind::Request, 1, b"", 0);
        buf[16..20].copy_from_slice(&(BODY_BYTES_MAX + 1).to_le_bytes());
        assert_eq!(FrameHeader::decode(&buf), Err(FrameError::BodyTooLarge(BODY_BYTES_MAX + 1)));
        buf[16..20].copy_from_slice(&0u32.to_le_bytes());
        buf[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(FrameHeader::decode(&buf), Err(FrameError::DataTooLarge(u32::MAX)));
    }

    #[test]
    fn truncated_input_is_an_error() {
        let buf = encode(1, FrameKind::Request, 1, b"abc", 0);
        for len in 0..buf.len() {
            assert!(decode_frame(&buf[..len]).is_err());
        }
    }
}
