//! S3's additional checksums (`x-amz-checksum-crc32`, `-crc32c`, `-crc64nvme`, `-sha1`,
//! `-sha256`): which one a request asks for (a header, a trailer of an `aws-chunked` body, or
//! only `x-amz-checksum-algorithm`), checking the value the client sent against the bytes
//! received, and keeping the result beside the object so GET and HEAD can answer it.
//!
//! Recent AWS SDKs (boto3 ≥ 1.36, awscli v2) send a CRC32 or CRC64NVME of every upload by
//! default, usually in the body's trailer; a mismatch is refused with 400 BadDigest and nothing
//! is stored. An upload without any checksum gets a CRC64NVME computed, as S3 does.
//!
//! The hashing itself is `s3s`'s ([`s3s::checksum::ChecksumHasher`], over the `crc-fast`,
//! `sha1` and `sha2` crates it already builds). The checksum is the extended attribute
//! `user.s3.checksum` = `<ALGORITHM> <TYPE> <base64 value> <data_version>`; like the ETag it is
//! only believed while the file's data version is the one recorded (a write through the mount
//! or NFS makes it stale, and then none is answered).
//!
//! A completed multipart upload gets a full-object CRC (CRC32, CRC32C, CRC64NVME: the parts'
//! CRCs combined, no data read again) or, for SHA1/SHA256 or when the upload asked for it, S3's
//! composite checksum (the checksum of the parts' checksums, suffixed `-<parts>`).

use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::{Checksum, ChecksumAlgorithm, ChecksumType};
use s3s::{S3Error, S3ErrorCode, TrailingHeaders};

/// Extended attribute holding an object's (or a part's) checksum.
pub const XATTR_CHECKSUM: &str = "user.s3.checksum";
/// Extended attribute of an upload directory: the algorithm and type asked for at creation.
pub const XATTR_UPLOAD_CHECKSUM: &str = "user.s3.upload.checksum";

/// One of S3's checksum algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algo {
    pub const ALL: [Algo; 5] = [Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme, Algo::Sha1, Algo::Sha256];

    /// The name S3 uses (`x-amz-checksum-algorithm`, XML).
    pub fn name(self) -> &'static str {
        match self {
            Algo::Crc32 => "CRC32",
            Algo::Crc32c => "CRC32C",
            Algo::Crc64Nvme => "CRC64NVME",
            Algo::Sha1 => "SHA1",
            Algo::Sha256 => "SHA256",
        }
    }

    /// The header carrying a value of this algorithm.
    pub fn header(self) -> &'static str {
        match self {
            Algo::Crc32 => "x-amz-checksum-crc32",
            Algo::Crc32c => "x-amz-checksum-crc32c",
            Algo::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algo::Sha1 => "x-amz-checksum-sha1",
            Algo::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Length of a digest in bytes.
    pub fn digest_bytes(self) -> usize {
        match self {
            Algo::Crc32 | Algo::Crc32c => 4,
            Algo::Crc64Nvme => 8,
            Algo::Sha1 => 20,
            Algo::Sha256 => 32,
        }
    }

    /// The algorithm named `s` (any case).
    pub fn parse(s: &str) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether full-object checksums of multipart uploads can be had by combining parts.
    pub fn is_crc(self) -> bool {
        matches!(self, Algo::Crc32 | Algo::Crc32c | Algo::Crc64Nvme)
    }

    fn crc_algorithm(self) -> Option<crc_fast::CrcAlgorithm> {
        match self {
            Algo::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            Algo::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            Algo::Crc64Nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            Algo::Sha1 | Algo::Sha256 => None,
        }
    }

    /// A hasher computing this algorithm only.
    pub fn hasher(self) -> ChecksumHasher {
        let mut h = ChecksumHasher::default();
        match self {
            Algo::Crc32 => h.crc32 = Some(Crc32::new()),
            Algo::Crc32c => h.crc32c = Some(Crc32c::new()),
            Algo::Crc64Nvme => h.crc64nvme = Some(Crc64Nvme::new()),
            Algo::Sha1 => h.sha1 = Some(Sha1::new()),
            Algo::Sha256 => h.sha256 = Some(Sha256::new()),
        }
        h
    }

    /// This algorithm's value in `sums`.
    fn pick(self, sums: &Checksum) -> Option<&String> {
        match self {
            Algo::Crc32 => sums.checksum_crc32.as_ref(),
            Algo::Crc32c => sums.checksum_crc32c.as_ref(),
            Algo::Crc64Nvme => sums.checksum_crc64nvme.as_ref(),
            Algo::Sha1 => sums.checksum_sha1.as_ref(),
            Algo::Sha256 => sums.checksum_sha256.as_ref(),
        }
    }

    /// The digest of `data` with this algorithm.
    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Algo::Crc32 => Crc32::checksum(data).to_vec(),
            Algo::Crc32c => Crc32c::checksum(data).to_vec(),
            Algo::Crc64Nvme => Crc64Nvme::checksum(data).to_vec(),
            Algo::Sha1 => Sha1::checksum(data).as_ref().to_vec(),
            Algo::Sha256 => Sha256::checksum(data).as_ref().to_vec(),
        }
    }
}

/// Why a checksum of a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ChecksumError {
    /// The value is not base64 of the algorithm's digest length.
    Invalid(Algo),
    /// More than one `x-amz-checksum-*` value.
    Several,
    /// `x-amz-checksum-algorithm` (or the trailer) names no algorithm S3 knows.
    UnknownAlgorithm(String),
    /// The value does not match the bytes received.
    Mismatch(Algo),
}

impl From<ChecksumError> for S3Error {
    fn from(e: ChecksumError) -> S3Error {
        match e {
            ChecksumError::Invalid(a) => S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!("Value for {} header is invalid.", a.header()),
            ),
            ChecksumError::Several => S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
            ),
            ChecksumError::UnknownAlgorithm(s) => S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!("Checksum algorithm {s:?} is not one of CRC32, CRC32C, CRC64NVME, SHA1, SHA256."),
            ),
            ChecksumError::Mismatch(a) => S3Error::with_message(
                S3ErrorCode::BadDigest,
                format!("The {} you specified did not match the calculated checksum.", a.name()),
            ),
        }
    }
}

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let b = [group[0], group.get(1).copied().unwrap_or(0), group.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional); None if malformed.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0u32;
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Checks that `value` is base64 of a digest of `algo`.
fn check_value(algo: Algo, value: &str) -> Result<(), ChecksumError> {
    match base64_decode(value.trim()) {
        Some(d) if d.len() == algo.digest_bytes() => Ok(()),
        _ => Err(ChecksumError::Invalid(algo)),
    }
}

/// The checksum a write checks (the one the client sent) and the one it keeps (the same, but
/// for a part, the upload's).
pub struct Wanted {
    pub algo: Algo,
    /// The algorithm kept with the written file.
    pub keep: Algo,
    /// The value sent in a header.
    given: Option<String>,
    /// Where the value arrives when it is a trailer of the body.
    trailer: Option<TrailingHeaders>,
}

impl Wanted {
    /// What a request asks for: `values` are its `x-amz-checksum-*` headers (in [`Algo::ALL`]
    /// order), `algorithm` its `x-amz-checksum-algorithm`, `trailer_names` its `x-amz-trailer`.
    /// Without any of them, CRC64NVME is computed (and nothing checked), as S3 does.
    pub fn from_request(
        values: [Option<&String>; 5],
        algorithm: Option<&ChecksumAlgorithm>,
        trailer_names: Option<&str>,
        trailing: Option<TrailingHeaders>,
    ) -> Result<Wanted, ChecksumError> {
        let mut given = Algo::ALL.into_iter().zip(values).filter_map(|(a, v)| v.map(|v| (a, v)));
        let first = given.next();
        if given.next().is_some() {
            return Err(ChecksumError::Several);
        }
        if let Some((algo, value)) = first {
            check_value(algo, value)?;
            return Ok(Wanted { algo, keep: algo, given: Some(value.trim().to_string()), trailer: None });
        }
        let in_trailer = trailer_names.into_iter().flat_map(|t| t.split(',')).find_map(|name| {
            let name = name.trim();
            name.to_ascii_lowercase()
                .strip_prefix("x-amz-checksum-")
                .map(|a| Algo::parse(a).ok_or_else(|| name.to_string()))
        });
        match in_trailer {
            Some(Ok(algo)) => return Ok(Wanted { algo, keep: algo, given: None, trailer: trailing }),
            Some(Err(name)) => return Err(ChecksumError::UnknownAlgorithm(name)),
            None => {}
        }
        let algo = match algorithm {
            Some(a) => {
                Algo::parse(a.as_str()).ok_or_else(|| ChecksumError::UnknownAlgorithm(a.as_str().to_string()))?
            }
            None => Algo::Crc64Nvme,
        };
        Ok(Wanted { algo, keep: algo, given: None, trailer: None })
    }

    /// Only computes `algo` (copies: the source's bytes need no check).
    pub fn compute(algo: Algo) -> Wanted {
        Wanted { algo, keep: algo, given: None, trailer: None }
    }

    /// Keeps `keep` rather than the algorithm checked (a part keeps its upload's).
    pub fn keeping(mut self, keep: Algo) -> Wanted {
        self.keep = keep;
        self
    }

    /// A hasher computing what is checked and what is kept.
    pub fn hasher(&self) -> ChecksumHasher {
        let mut h = self.algo.hasher();
        let k = self.keep.hasher();
        h.crc32 = h.crc32.or(k.crc32);
        h.crc32c = h.crc32c.or(k.crc32c);
        h.crc64nvme = h.crc64nvme.or(k.crc64nvme);
        h.sha1 = h.sha1.or(k.sha1);
        h.sha256 = h.sha256.or(k.sha256);
        h
    }

    /// Checks what the body hashed to (`computed`, after the whole body was read) against the
    /// value the client sent; returns the checksum to keep.
    pub fn verify(&self, computed: &Checksum) -> Result<Sum, ChecksumError> {
        let (Some(value), Some(kept)) = (self.algo.pick(computed), self.keep.pick(computed)) else {
            return Err(ChecksumError::Mismatch(self.algo));
        };
        let sent = match (&self.given, &self.trailer) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(t)) => t
                .read(|h| h.get(self.algo.header()).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string()))
                .flatten(),
            (None, None) => None,
        };
        if let Some(sent) = sent {
            check_value(self.algo, &sent)?;
            if sent != *value {
                return Err(ChecksumError::Mismatch(self.algo));
            }
        }
        Ok(Sum { algo: self.keep, composite_parts: None, value: kept.clone() })
    }
}

/// A stored checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sum {
    pub algo: Algo,
    /// For a composite multipart checksum: the number of parts (the value is then suffixed
    /// `-<parts>` on the wire).
    pub composite_parts: Option<usize>,
    /// Base64 of the digest.
    pub value: String,
}

impl Sum {
    /// The xattr value for this checksum of data version `data_version`.
    pub fn to_xattr(&self, data_version: u64) -> String {
        let kind = if self.composite_parts.is_some() { "COMPOSITE" } else { "FULL_OBJECT" };
        format!("{} {kind} {} {data_version}", self.algo.name(), self.wire_value())
    }

    /// Parses an xattr value; None if malformed or recorded for another data version.
    pub fn from_xattr(raw: &[u8], data_version: u64) -> Option<Sum> {
        let text = std::str::from_utf8(raw).ok()?;
        let mut it = text.split(' ');
        let (algo, kind, value, version) = (it.next()?, it.next()?, it.next()?, it.next()?);
        if version.parse::<u64>().ok()? != data_version || it.next().is_some() {
            return None;
        }
        let algo = Algo::parse(algo)?;
        let (value, composite_parts) = match kind {
            "FULL_OBJECT" => (value.to_string(), None),
            "COMPOSITE" => {
                let (v, n) = value.rsplit_once('-')?;
                (v.to_string(), Some(n.parse().ok()?))
            }
            _ => return None,
        };
        Some(Sum { algo, composite_parts, value })
    }

    /// The value as S3 answers it.
    pub fn wire_value(&self) -> String {
        match self.composite_parts {
            Some(n) => format!("{}-{n}", self.value),
            None => self.value.clone(),
        }
    }

    /// The checksum fields of a response.
    pub fn fields(&self) -> (Checksum, ChecksumType) {
        let mut c = Checksum::default();
        let v = Some(self.wire_value());
        match self.algo {
            Algo::Crc32 => c.checksum_crc32 = v,
            Algo::Crc32c => c.checksum_crc32c = v,
            Algo::Crc64Nvme => c.checksum_crc64nvme = v,
            Algo::Sha1 => c.checksum_sha1 = v,
            Algo::Sha256 => c.checksum_sha256 = v,
        }
        let kind = if self.composite_parts.is_some() { ChecksumType::COMPOSITE } else { ChecksumType::FULL_OBJECT };
        (c, ChecksumType::from_static(kind))
    }
}

/// The checksum of a multipart object from its parts' checksums and sizes (in order): a
/// full-object CRC when `full_object` and the algorithm is a CRC, otherwise S3's composite
/// checksum. None when a part has no checksum of `algo`.
pub fn multipart_sum(algo: Algo, full_object: bool, parts: &[(Option<Sum>, u64)]) -> Option<Sum> {
    let mut digests = Vec::with_capacity(parts.len());
    for (sum, size) in parts {
        let sum = sum.as_ref().filter(|s| s.algo == algo && s.composite_parts.is_none())?;
        let d = base64_decode(&sum.value).filter(|d| d.len() == algo.digest_bytes())?;
        digests.push((d, *size));
    }
    match algo.crc_algorithm().filter(|_| full_object) {
        Some(crc) => {
            let mut acc: Option<u64> = None;
            for (d, size) in &digests {
                let v = d.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
                acc = Some(match acc {
                    None => v,
                    Some(a) => crc_fast::checksum_combine(crc, a, v, *size),
                });
            }
            // An upload of no parts cannot be completed; be safe anyway.
            let v = acc.unwrap_or(0);
            let bytes = v.to_be_bytes();
            let value = base64_encode(&bytes[8 - algo.digest_bytes()..]);
            Some(Sum { algo, composite_parts: None, value })
        }
        None => {
            let joined: Vec<u8> = digests.iter().flat_map(|(d, _)| d.iter().copied()).collect();
            Some(Sum { algo, composite_parts: Some(parts.len()), value: base64_encode(&algo.digest(&joined)) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_checks_what_was_sent_and_keeps_the_uploads_algorithm() {
        let sent = computed(Algo::Crc32, b"part").checksum_crc32.expect("crc32");
        let w = Wanted::from_request([Some(&sent), None, None, None, None], None, None, None)
            .expect("valid")
            .keeping(Algo::Crc64Nvme);
        let mut h = w.hasher();
        h.update(b"part");
        let sum = w.verify(&h.finalize()).expect("matches");
        assert_eq!(sum.algo, Algo::Crc64Nvme);
        assert_eq!(Some(sum.value), computed(Algo::Crc64Nvme, b"part").checksum_crc64nvme);
    }

    fn computed(algo: Algo, data: &[u8]) -> Checksum {
        let mut h = algo.hasher();
        h.update(data);
        h.finalize()
    }

    #[test]
    fn base64_round_trips() {
        for n in 0..10 {
            let data: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(base64_decode(&base64_encode(&data)), Some(data));
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
    }

    #[test]
    fn one_header_is_checked_against_the_body() {
        let good = computed(Algo::Crc32, b"hello").checksum_crc32.expect("crc32");
        let w = Wanted::from_request([Some(&good), None, None, None, None], None, None, None).expect("valid");
        assert_eq!(w.algo, Algo::Crc32);
        assert!(w.verify(&computed(Algo::Crc32, b"hello")).is_ok());
        assert_eq!(w.verify(&computed(Algo::Crc32, b"hellp")), Err(ChecksumError::Mismatch(Algo::Crc32)));
        let bad = "not base64!".to_string();
        assert!(matches!(
            Wanted::from_request([None, None, None, None, Some(&bad)], None, None, None),
            Err(ChecksumError::Invalid(Algo::Sha256))
        ));
        let short = "AAAA".to_string();
        assert!(Wanted::from_request([None, None, Some(&short), None, None], None, None, None).is_err());
        assert!(matches!(
            Wanted::from_request([Some(&good), Some(&good), None, None, None], None, None, None),
            Err(ChecksumError::Several)
        ));
    }

    #[test]
    fn the_algorithm_comes_from_the_trailer_or_the_algorithm_header() {
        let w = Wanted::from_request([None; 5], None, Some("x-amz-checksum-crc32c"), None).expect("trailer");
        assert_eq!(w.algo, Algo::Crc32c);
        let sha1 = ChecksumAlgorithm::from_static(ChecksumAlgorithm::SHA1);
        assert_eq!(Wanted::from_request([None; 5], Some(&sha1), None, None).expect("algorithm").algo, Algo::Sha1);
        assert_eq!(Wanted::from_request([None; 5], None, None, None).expect("default").algo, Algo::Crc64Nvme);
        assert!(Wanted::from_request([None; 5], None, Some("x-amz-checksum-md4"), None).is_err());
    }

    #[test]
    fn stored_sums_are_tied_to_their_version() {
        let s = Sum { algo: Algo::Sha256, composite_parts: Some(3), value: "abc=".into() };
        let raw = s.to_xattr(7);
        assert_eq!(Sum::from_xattr(raw.as_bytes(), 7), Some(s.clone()));
        assert_eq!(Sum::from_xattr(raw.as_bytes(), 8), None);
        assert_eq!(s.wire_value(), "abc=-3");
        assert_eq!(Sum::from_xattr(b"garbage", 7), None);
    }

    #[test]
    fn multipart_crcs_combine_to_the_whole_objects_crc() {
        let (a, b) = (vec![1u8; 1000], vec![2u8; 777]);
        let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        for algo in [Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme] {
            let part = |d: &[u8]| Some(Wanted::compute(algo).verify(&computed(algo, d)).expect("sum"));
            let combined = multipart_sum(algo, true, &[(part(&a), 1000), (part(&b), 777)]).expect("combined");
            let want = Wanted::compute(algo).verify(&computed(algo, &whole)).expect("whole");
            assert_eq!(combined, want, "{algo:?}");
        }
        let part = |d: &[u8]| Some(Wanted::compute(Algo::Sha256).verify(&computed(Algo::Sha256, d)).expect("sum"));
        let composite = multipart_sum(Algo::Sha256, true, &[(part(&a), 1000), (part(&b), 777)]).expect("composite");
        assert_eq!(composite.composite_parts, Some(2));
        assert!(multipart_sum(Algo::Sha256, false, &[(None, 5)]).is_none());
    }
}
