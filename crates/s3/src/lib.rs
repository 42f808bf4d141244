//! Trove's S3 gateway: the S3 API (the `s3s` crate) served over the client library, so objects
//! and files are one namespace: what S3 writes, the mount and NFS read at once, and the reverse.
//!
//! # Mapping
//!
//! - A **bucket** is a directory directly under the root: bucket `data` is `/data`. ListBuckets
//!   shows the top-level directories whose names are valid bucket names; CreateBucket and
//!   DeleteBucket make and remove them (DeleteBucket only when empty, as in S3).
//! - An **object key** is a path below its bucket, `/` separating directories:
//!   `photos/2024/cat.jpg` is `/data/photos/2024/cat.jpg`. PUT creates the directories a key
//!   needs; DELETE removes the ones it leaves empty. Keys no file name can express are refused
//!   with InvalidArgument or KeyTooLongError (see [`names`]), and a key that needs a directory
//!   where a file is (or the reverse: `a` and `a/b` both as objects) with 409 KeyConflict.
//! - **Metadata** (ETag, Content-Type, `x-amz-meta-*`, the kept standard headers, the
//!   additional checksum) are extended attributes `user.s3.*` of
//!   the file (see [`objmeta`]); ETags follow S3 (MD5 of the content for PUT and copy,
//!   MD5-of-MD5s-N for multipart).
//! - **Multipart uploads** live in the hidden `/.trove-s3/uploads/` until completed; completion
//!   moves the parts' chunk records onto the object without copying data (see [`multipart`]).
//! - **Versioning** (PutBucketVersioning): a versioned bucket keeps every version a write or
//!   delete replaces, in the hidden `/.trove-s3/versions/`, behind the current file at the key;
//!   GET, HEAD, DELETE and CopyObject take a `versionId`, DELETE leaves a delete marker, and
//!   ListObjectVersions lists them (see [`versions`]).
//! - **Conditional requests** (`If-Match`, `If-None-Match: *` on PUT, DELETE and
//!   CompleteMultipartUpload) are atomic against concurrent writers (see `conditions.rs`); the
//!   **additional checksums** are checked, kept and answered (see [`checksums`]).
//!
//! Writes are atomic: an object appears complete, with its metadata, or not at all (temporary
//! file renamed into place), and concurrent PUTs of one key leave one of them whole.
//!
//! Requests are authenticated with AWS Signature V4 (headers or presigned URLs) against the
//! access keys of the configuration; anonymous requests are refused unless the configuration
//! allows them (read-only or read-write). TLS (rustls) is optional.
//!
//! # Bad input
//!
//! Every connection is bounded: the request head must arrive within `header_timeout_ms` (which
//! also closes idle keep-alive connections), a body or response that stalls for
//! `body_idle_timeout_ms` is cut (400 RequestTimeout; nothing is stored), one client address
//! may hold `connections_per_client_max` connections and the gateway `connections_max` (the
//! excess is answered 503 SlowDown), and bodies that are not object data are read only up to
//! [`XML_BODY_BYTES_MAX`] (400 MaxMessageLengthExceeded). Client mistakes are 4xx answers with
//! S3's code and a message, logged at DEBUG at most (see `conn.rs`, `front.rs`, `quiet.rs`).

pub mod acl;
pub mod checksums;
mod conditions;
pub mod conn;
pub mod cors;
pub mod errors;
mod front;
pub mod gateway;
pub mod list;
pub mod metered;
pub mod multipart;
pub mod names;
pub mod objmeta;
pub mod policy;
pub mod principals;
mod quiet;
pub mod scope;
mod server;
pub mod versions;

pub use gateway::Gateway;
pub use server::{
    serve, service, Anonymous, Config, KeyPair, Listening, TlsConfig, BODY_IDLE_TIMEOUT_MS_DEFAULT,
    CONNECTIONS_MAX_DEFAULT, CONNECTIONS_PER_CLIENT_MAX_DEFAULT, HEADER_TIMEOUT_MS_DEFAULT, XML_BODY_BYTES_MAX,
};
