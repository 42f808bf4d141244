//! S3 object metadata kept as extended attributes of the file, so that every front end sees
//! the same thing (`getfattr -d -m user.s3` on the mount shows it):
//!
//! | xattr                     | value                                                         |
//! |---------------------------|---------------------------------------------------------------|
//! | `user.s3.etag`            | `<etag> <data_version>`: the ETag and the file version it is for |
//! | `user.s3.content-type`    | the Content-Type given at upload                              |
//! | `user.s3.meta.<name>`     | user metadata `x-amz-meta-<name>`                              |
//! | `user.s3.header.<name>`   | `Cache-Control`, `Content-Disposition`, `Content-Encoding`,   |
//! |                           | `Content-Language`, `Expires` (lower case) as given           |
//! | `user.s3.checksum`        | the additional checksum (see [`crate::checksums`])            |
//!
//! The ETag is only believed while the file's `data_version` is the one recorded beside it: a
//! file written or changed through the mount or NFS gets a synthetic ETag derived from its inode
//! and version (`trove-<ino>-<version>`, never mistaken for an MD5 by clients that check
//! MD5s), which still changes whenever the content does.

use client::{Attr, Client, ErrorCode, WireError};
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// Extended attribute holding the ETag and the data version it was computed for.
pub const XATTR_ETAG: &str = "user.s3.etag";
/// Extended attribute holding the Content-Type.
pub const XATTR_CONTENT_TYPE: &str = "user.s3.content-type";
/// Prefix of the extended attributes holding user metadata.
pub const XATTR_META_PREFIX: &str = "user.s3.meta.";
/// Prefix of the extended attributes holding the standard headers S3 keeps.
pub const XATTR_HEADER_PREFIX: &str = "user.s3.header.";
/// The standard headers kept with an object, as their xattr names end.
pub const KEPT_HEADERS: [&str; 5] =
    ["cache-control", "content-disposition", "content-encoding", "content-language", "expires"];
/// Most bytes of user metadata (names and values) per object, as S3 allows.
pub const USER_META_BYTES_MAX: usize = 2048;
/// The Content-Type of objects stored without one, as S3 answers.
pub const CONTENT_TYPE_DEFAULT: &str = "binary/octet-stream";
/// The ETag of an empty object (MD5 of nothing).
pub const EMPTY_ETAG: &str = "d41d8cd98f00b204e9800998ecf8427e";

/// Content-Type and user metadata of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    pub content_type: Option<String>,
    pub user: BTreeMap<String, String>,
    /// Kept standard headers by name (one of [`KEPT_HEADERS`]).
    pub headers: BTreeMap<&'static str, String>,
}

/// The standard headers of a request S3 keeps with an object.
#[derive(Clone, Copy, Default)]
pub struct KeptHeaders<'a> {
    pub cache_control: Option<&'a String>,
    pub content_disposition: Option<&'a String>,
    pub content_encoding: Option<&'a String>,
    pub content_language: Option<&'a String>,
    pub expires: Option<&'a s3s::dto::Timestamp>,
}

impl ObjectMeta {
    /// Metadata from a request's headers, checked against S3's size limit.
    pub fn from_request(
        content_type: Option<&String>,
        metadata: Option<&HashMap<String, String>>,
    ) -> S3Result<ObjectMeta> {
        let mut user = BTreeMap::new();
        let mut bytes = 0usize;
        for (k, v) in metadata.into_iter().flatten() {
            bytes += k.len() + v.len();
            user.insert(k.to_ascii_lowercase(), v.clone());
        }
        if bytes > USER_META_BYTES_MAX {
            return Err(S3Error::with_message(
                S3ErrorCode::MetadataTooLarge,
                format!("{bytes} bytes of user metadata exceed the limit of {USER_META_BYTES_MAX}"),
            ));
        }
        Ok(ObjectMeta { content_type: content_type.cloned(), user, headers: BTreeMap::new() })
    }

    /// Adds the standard headers S3 keeps. `aws-chunked` in Content-Encoding describes the
    /// request's body only and is not kept.
    pub fn with_headers(mut self, h: KeptHeaders<'_>) -> ObjectMeta {
        let encoding = h.content_encoding.map(|e| {
            e.split(',').map(str::trim).filter(|t| !t.eq_ignore_ascii_case("aws-chunked")).collect::<Vec<_>>().join(",")
        });
        let expires = h.expires.and_then(|t| {
            let mut buf = Vec::new();
            t.format(s3s::dto::TimestampFormat::HttpDate, &mut buf).ok()?;
            String::from_utf8(buf).ok()
        });
        let values =
            [h.cache_control.cloned(), h.content_disposition.cloned(), encoding, h.content_language.cloned(), expires];
        for (name, value) in KEPT_HEADERS.into_iter().zip(values) {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                self.headers.insert(name, v);
            }
        }
        self
    }

    /// A kept header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).cloned()
    }

    /// The kept Expires as a timestamp (None if absent or unreadable).
    pub fn expires(&self) -> Option<s3s::dto::Timestamp> {
        let v = self.headers.get("expires")?;
        s3s::dto::Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, v).ok()
    }

    /// Writes the metadata as extended attributes of `ino`.
    pub async fn store(&self, client: &Client, ino: u64) -> Result<(), WireError> {
        if let Some(ct) = &self.content_type {
            client.setxattr(ino, XATTR_CONTENT_TYPE, ct.as_bytes(), wire::XattrMode::Upsert).await?;
        }
        for (k, v) in &self.user {
            client.setxattr(ino, &format!("{XATTR_META_PREFIX}{k}"), v.as_bytes(), wire::XattrMode::Upsert).await?;
        }
        for (k, v) in &self.headers {
            client.setxattr(ino, &format!("{XATTR_HEADER_PREFIX}{k}"), v.as_bytes(), wire::XattrMode::Upsert).await?;
        }
        Ok(())
    }

    /// Replaces whatever S3 metadata `ino` has with this (for CopyObject with REPLACE).
    pub async fn replace(&self, client: &Client, ino: u64) -> Result<(), WireError> {
        for name in client.listxattr(ino).await? {
            if name == XATTR_CONTENT_TYPE
                || name.starts_with(XATTR_META_PREFIX)
                || name.starts_with(XATTR_HEADER_PREFIX)
            {
                match client.removexattr(ino, &name).await {
                    Ok(()) => {}
                    Err(e) if e.code == ErrorCode::NoAttr => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.store(client, ino).await
    }

    /// User metadata as the S3 types want it (None when there is none).
    pub fn metadata_map(&self) -> Option<HashMap<String, String>> {
        if self.user.is_empty() {
            None
        } else {
            Some(self.user.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        }
    }
}

/// Everything the gateway stores about an object besides its bytes.
#[derive(Clone, Debug, Default)]
pub struct StoredMeta {
    pub meta: ObjectMeta,
    /// The raw `user.s3.etag` value, if any.
    pub etag_raw: Option<Vec<u8>>,
    /// The raw `user.s3.checksum` value, if any.
    pub checksum_raw: Option<Vec<u8>>,
    /// The version id (`user.s3.version-id`) of a version made while versioning was on.
    pub version_id: Option<String>,
}

/// Reads the S3 extended attributes of `ino`.
pub async fn load(client: &Client, ino: u64) -> Result<StoredMeta, WireError> {
    let mut out = StoredMeta::default();
    for name in client.listxattr(ino).await? {
        if !name.starts_with("user.s3.") {
            continue;
        }
        let value = match client.getxattr(ino, &name).await {
            Ok(v) => v,
            // Removed between the listing and the read.
            Err(e) if e.code == ErrorCode::NoAttr => continue,
            Err(e) => return Err(e),
        };
        if name == XATTR_ETAG {
            out.etag_raw = Some(value);
        } else if name == XATTR_CONTENT_TYPE {
            out.meta.content_type = Some(String::from_utf8_lossy(&value).into_owned());
        } else if name == crate::checksums::XATTR_CHECKSUM {
            out.checksum_raw = Some(value);
        } else if name == crate::versions::XATTR_VERSION_ID {
            out.version_id = Some(String::from_utf8_lossy(&value).into_owned());
        } else if let Some(k) = name.strip_prefix(XATTR_META_PREFIX) {
            out.meta.user.insert(k.to_string(), String::from_utf8_lossy(&value).into_owned());
        } else if let Some(k) = name.strip_prefix(XATTR_HEADER_PREFIX) {
            if let Some(known) = KEPT_HEADERS.into_iter().find(|h| *h == k) {
                out.meta.headers.insert(known, String::from_utf8_lossy(&value).into_owned());
            }
        }
    }
    Ok(out)
}

/// Reads only the stored ETag value of `ino` (one metadata call; listings use it).
pub async fn load_etag(client: &Client, ino: u64) -> Result<Option<Vec<u8>>, WireError> {
    match client.getxattr(ino, XATTR_ETAG).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == ErrorCode::NoAttr || e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records `etag` as the ETag of `ino` at data version `data_version`.
pub async fn store_etag(client: &Client, ino: u64, etag: &str, data_version: u64) -> Result<(), WireError> {
    client.setxattr(ino, XATTR_ETAG, format!("{etag} {data_version}").as_bytes(), wire::XattrMode::Upsert).await
}

/// The ETag of a file: the stored one if it was computed for the file's current version,
/// otherwise a synthetic one that changes with every version.
pub fn etag_for(attr: &Attr, raw: Option<&[u8]>) -> String {
    if let Some(raw) = raw.and_then(|r| std::str::from_utf8(r).ok()) {
        if let Some((etag, version)) = raw.split_once(' ') {
            if version.parse::<u64>().ok() == Some(attr.data_version) && !etag.is_empty() {
                return etag.to_string();
            }
        }
    }
    if attr.size == 0 {
        return EMPTY_ETAG.to_string();
    }
    format!("trove-{:x}-{:x}", attr.ino, attr.data_version)
}

/// A wire timestamp as a system time (times before 1970 become 1970).
pub fn system_time(t: wire::Timestamp) -> SystemTime {
    let secs = u64::try_from(t.secs).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::new(secs, t.nanos.min(999_999_999))
}

/// A wire timestamp as an S3 timestamp.
pub fn s3_time(t: wire::Timestamp) -> s3s::dto::Timestamp {
    s3s::dto::Timestamp::from(system_time(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: u64, version: u64, size: u64) -> Attr {
        Attr {
            ino,
            kind: wire::FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            size,
            nlink: 1,
            rdev: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            crtime: Default::default(),
            data_version: version,
            ec: wire::EcScheme::DEFAULT,
            chunk_bytes: wire::CHUNK_BYTES_DEFAULT,
            pool: wire::DEFAULT_POOL,
        }
    }

    #[test]
    fn stored_etag_is_used_only_for_its_version() {
        let raw = b"0123456789abcdef0123456789abcdef 7";
        assert_eq!(etag_for(&attr(5, 7, 10), Some(raw)), "0123456789abcdef0123456789abcdef");
        assert_eq!(etag_for(&attr(5, 8, 10), Some(raw)), "trove-5-8");
        assert_eq!(etag_for(&attr(5, 8, 10), None), "trove-5-8");
        assert_eq!(etag_for(&attr(5, 8, 0), None), EMPTY_ETAG);
        assert_eq!(etag_for(&attr(5, 8, 10), Some(b"garbage")), "trove-5-8");
    }

    #[test]
    fn user_metadata_is_limited() {
        let mut m = HashMap::new();
        m.insert("Color".to_string(), "blue".to_string());
        let meta = ObjectMeta::from_request(Some(&"text/plain".to_string()), Some(&m)).expect("small");
        assert_eq!(meta.user.get("color").map(String::as_str), Some("blue"));
        m.insert("big".to_string(), "x".repeat(USER_META_BYTES_MAX));
        assert!(ObjectMeta::from_request(None, Some(&m)).is_err());
    }

    #[test]
    fn kept_headers_drop_the_bodys_aws_chunked_encoding() {
        let (cache, enc) = ("max-age=60".to_string(), "gzip,aws-chunked".to_string());
        let meta = ObjectMeta::default().with_headers(KeptHeaders {
            cache_control: Some(&cache),
            content_encoding: Some(&enc),
            ..Default::default()
        });
        assert_eq!(meta.header("cache-control").as_deref(), Some("max-age=60"));
        assert_eq!(meta.header("content-encoding").as_deref(), Some("gzip"));
        let only_chunked = "aws-chunked".to_string();
        let meta = ObjectMeta::default()
            .with_headers(KeptHeaders { content_encoding: Some(&only_chunked), ..Default::default() });
        assert_eq!(meta.header("content-encoding"), None);
        assert_eq!(meta.expires(), None);
    }
}
