//! How S3 names map onto the namespace, and which S3 names cannot.
//!
//! A bucket is a directory directly under the root; an object key is a path below it, `/`
//! separating directories. `photos/2024/cat.jpg` in bucket `data` is the file
//! `/data/photos/2024/cat.jpg`, and the directories `photos` and `photos/2024` exist because
//! of it. A key ending in `/` (`photos/`) is a directory marker: PUT with an empty body creates
//! the directory, HEAD and GET of it answer with an empty object, listings never show it as an
//! object.
//!
//! Keys that no file name can express are refused before anything is touched, with an S3
//! error that names the problem: empty components (`a//b`, a leading `/`), `.` and `..`
//! components, NUL bytes (InvalidArgument), components longer than a file name may be or keys
//! longer than S3 allows (KeyTooLongError). Names beginning with [`client::TMP_PREFIX`] (files
//! being written, which no listing shows) and the top-level name [`STATE_DIR`] are reserved.

use s3s::{S3Error, S3ErrorCode, S3Result};

/// Longest key S3 accepts, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;
/// Longest key component: a file name.
pub const COMPONENT_BYTES_MAX: usize = wire::NAME_BYTES_MAX;
/// The temporary-name prefix of gateways before the repository-wide one
/// ([`client::TMP_PREFIX`]): still reserved, and skipped and swept by listings, so files such a
/// gateway left behind never show as objects.
pub const LEGACY_TMP_PREFIX: &str = ".trove-s3-tmp.";
/// The gateway's own hidden directory under the root (not a valid bucket name, so never listed
/// as a bucket): `/.trove-s3/uploads/<bucket>/<upload id>/` holds multipart uploads.
pub const STATE_DIR: &str = ".trove-s3";
/// Subdirectory of [`STATE_DIR`] holding multipart uploads, one directory per bucket.
pub const UPLOADS_DIR: &str = "uploads";

/// An object key split into directory components and a final name.
#[derive(Debug, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The directories the key passes through, outermost first.
    pub dirs: Vec<&'a str>,
    /// The final component; `None` for a directory marker (a key ending in `/`).
    pub name: Option<&'a str>,
}

impl ParsedKey<'_> {
    /// The path of the object (or of the marked directory) below its bucket, without a
    /// leading or trailing `/`.
    pub fn rel_path(&self) -> String {
        let mut parts = self.dirs.clone();
        if let Some(n) = self.name {
            parts.push(n);
        }
        parts.join("/")
    }

    /// The path of the directory holding the object, below its bucket.
    pub fn dir_path(&self) -> String {
        self.dirs.join("/")
    }
}

fn invalid(key: &str, why: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, format!("object key {key:?} cannot be stored: {why}"))
}

/// Splits and checks a key.
pub fn parse_key(key: &str) -> S3Result<ParsedKey<'_>> {
    if key.is_empty() {
        return Err(invalid(key, "it is empty"));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(S3Error::with_message(
            S3ErrorCode::KeyTooLongError,
            format!("object key of {} bytes exceeds the limit of {KEY_BYTES_MAX}", key.len()),
        ));
    }
    if key.contains('\0') {
        return Err(invalid(key, "it contains a NUL byte"));
    }
    let (body, marker) = match key.strip_suffix('/') {
        Some(b) => (b, true),
        None => (key, false),
    };
    if body.is_empty() {
        return Err(invalid(key, "it names no file or directory"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in body.split('/') {
        if part.is_empty() {
            return Err(invalid(key, "it has an empty path component (a leading '/' or '//')"));
        }
        if part == "." || part == ".." {
            return Err(invalid(key, "'.' and '..' cannot be path components"));
        }
        if part.len() > COMPONENT_BYTES_MAX {
            return Err(S3Error::with_message(
                S3ErrorCode::KeyTooLongError,
                format!(
                    "object key {key:?} has a component of {} bytes; the limit is {COMPONENT_BYTES_MAX}",
                    part.len()
                ),
            ));
        }
        if is_tmp(part) {
            return Err(invalid(
                key,
                &format!(
                    "names beginning with {:?} are reserved for files being written",
                    if part.starts_with(LEGACY_TMP_PREFIX) { LEGACY_TMP_PREFIX } else { client::TMP_PREFIX }
                ),
            ));
        }
        if parts.is_empty() && part == STATE_DIR {
            return Err(invalid(
                key,
                &format!("the top-level name {STATE_DIR:?} is reserved for the gateway's multipart uploads"),
            ));
        }
        parts.push(part);
    }
    let name = if marker { None } else { parts.pop() };
    Ok(ParsedKey { dirs: parts, name })
}

/// Whether `name` is the temporary name of a write in progress (of this or an older gateway).
pub fn is_tmp(name: &str) -> bool {
    client::is_tmp_name(name) || name.starts_with(LEGACY_TMP_PREFIX)
}

/// The path of a bucket's directory from the namespace's root (see [`crate::scope`]).
pub fn bucket_path(bucket: &str) -> String {
    format!("/{bucket}")
}

/// The absolute path of the directory holding a bucket's multipart uploads, in the namespace of
/// the request being answered.
pub fn uploads_path(bucket: &str) -> String {
    crate::scope::current().path(&format!("/{STATE_DIR}/{UPLOADS_DIR}/{bucket}"))
}

/// Lower-case hexadecimal of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The bytes of a lower-case or upper-case hexadecimal string; `None` if it is not one.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok())).collect()
}

/// Percent-encodes a key for responses with `encoding-type=url`: everything but unreserved
/// characters and `/`.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(key: &str) -> S3ErrorCode {
        match parse_key(key) {
            Ok(k) => panic!("{key:?} was accepted as {k:?}"),
            Err(e) => e.code().clone(),
        }
    }

    #[test]
    fn keys_become_paths() {
        let k = parse_key("a/b/c.txt").expect("valid");
        assert_eq!((k.dirs, k.name), (vec!["a", "b"], Some("c.txt")));
        let k = parse_key("top").expect("valid");
        assert_eq!((k.dirs.len(), k.name), (0, Some("top")));
        let k = parse_key("dir/sub/").expect("valid marker");
        assert_eq!((k.dirs, k.name), (vec!["dir", "sub"], None));
        assert_eq!(parse_key("x/y z/ü.bin").expect("valid").rel_path(), "x/y z/ü.bin");
    }

    #[test]
    fn keys_that_are_no_paths_are_refused() {
        for bad in [
            "",
            "/a",
            "a//b",
            "a/./b",
            "a/../b",
            "..",
            ".",
            "a\0b",
            "/",
            "//",
            ".trove-s3-tmp.x",
            "d/.trove-s3-tmp.1",
            ".trove-tmp.x",
            "d/.trove-tmp.1",
            ".trove-s3/x",
        ] {
            assert_eq!(code(bad), S3ErrorCode::InvalidArgument, "{bad:?}");
        }
        let message = |key: &str| parse_key(key).expect_err("refused").message().unwrap_or_default().to_string();
        assert!(message(".trove-s3/x").contains("\".trove-s3\" is reserved"), "{}", message(".trove-s3/x"));
        assert!(message("d/.trove-tmp.1").contains("\".trove-tmp.\" are reserved"), "{}", message("d/.trove-tmp.1"));
        assert!(parse_key("d/.trove-tm").is_ok() && parse_key("d/x.trove-tmp.1").is_ok());
        assert_eq!(code(&"x".repeat(256)), S3ErrorCode::KeyTooLongError);
        assert_eq!(code(&format!("a/{}", "x".repeat(1030))), S3ErrorCode::KeyTooLongError);
        assert!(parse_key(&"x".repeat(255)).is_ok());
        assert!(parse_key("sub/.trove-s3").is_ok());
    }

    #[test]
    fn hex_and_url_encoding() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00ab10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(url_encode("a b/c+d%"), "a%20b/c%2Bd%25");
    }
}
