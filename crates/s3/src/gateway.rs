//! The S3 operations over the client library: buckets, objects, listings and copies (multipart
//! uploads are in `multipart.rs`).
//!
//! Writes never expose a partial object: PUT, CopyObject and part uploads write a file under a
//! temporary name ([`client::tmp_name`]) in the object's own directory, so it inherits that
//! directory's layout, set its S3 metadata there, and rename it onto the key in one metadata
//! transaction. Concurrent PUTs of one key therefore leave exactly one complete object: the one
//! renamed last. A reader that opened the replaced file keeps reading it (its chunks are deleted
//! only after the GC grace period). No listing of any front end shows a temporary name, and a
//! write that fails, or whose request is dropped half-way (the client went away, the body
//! stopped arriving), removes its temporary file.

use crate::checksums::{self, base64_decode, Sum, Wanted};
use crate::conditions::{Publish, PublishError};
use crate::errors::{s3_error, OrS3, Target};
use crate::list::{self, Item, Query, KEYS_PER_PAGE_MAX};
use crate::names::{self, parse_key};
use crate::objmeta::{self, etag_for, s3_time, KeptHeaders, ObjectMeta, CONTENT_TYPE_DEFAULT, EMPTY_ETAG};
use crate::versions::{self, Versioned};
use crate::{acl, scope};
use bytes::Bytes;
use client::{Attr, Client, ErrorCode, FileKind, Ino, WireError};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use std::collections::HashMap;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use wire::identity::Access;

/// Largest object a single PUT may create, as S3 allows.
pub const PUT_BYTES_MAX: u64 = 5 << 30;
/// Pieces of an object being read that may wait in memory for the network.
const READ_PIECES_INFLIGHT_MAX: usize = 4;
/// Bytes read from the cluster per piece of a GET (at most; normally one chunk).
const READ_PIECE_BYTES_MAX: u64 = 8 << 20;
/// How often a write re-creates a key's directory that a concurrent DELETE pruned.
const DIR_RACE_RETRY_COUNT_MAX: u32 = 3;
/// Body pieces waiting for the MD5 thread at most (back-pressure on the request).
const HASH_PIECES_QUEUED_MAX: usize = 64;
/// Keys one DeleteObjects request may name, as in S3.
pub const DELETE_KEYS_MAX: usize = 1000;
/// Response header of CompleteMultipartUpload: how many bytes had to be copied because parts
/// could not be moved (0 when completion moved every part's chunks).
pub const COPIED_BYTES_HEADER: &str = "x-trove-copied-bytes";
/// Object metadata lookups a listing runs at once.
const LIST_LOOKUPS_INFLIGHT_MAX: usize = 16;

/// The S3 service: an [`s3s::S3`] implementation over a Trove client.
pub struct Gateway {
    pub(crate) client: Client,
    /// The region answered to GetBucketLocation (None: us-east-1).
    pub(crate) region: Option<String>,
    /// Multipart completions in progress, by upload id: one at a time per upload.
    pub(crate) completing: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Buckets' policies as last read (shared with the access check, see [`crate::policy`]).
    pub(crate) policies: Arc<crate::policy::PolicyCache>,
}

pub(crate) fn no_such_key(key: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::NoSuchKey, format!("no object with key {key:?}"))
}

fn no_such_bucket(bucket: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::NoSuchBucket, format!("no bucket {bucket:?}"))
}

pub(crate) fn conflict(message: String) -> S3Error {
    s3_error(&WireError::new(ErrorCode::Exists, message), Target::ObjectWrite)
}

/// A channel of read pieces as the byte stream s3s sends.
struct PieceStream(tokio::sync::mpsc::Receiver<Result<Bytes, WireError>>);

impl Stream for PieceStream {
    type Item = Result<Bytes, WireError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Streams `range` of the file `attr` describes: a task reads ahead (the client's sequential
/// read-ahead stays busy) while earlier pieces go out to the network.
pub(crate) fn read_stream(client: Client, attr: Attr, range: Range<u64>) -> StreamingBlob {
    let (tx, rx) = tokio::sync::mpsc::channel(READ_PIECES_INFLIGHT_MAX);
    let piece = u64::from(attr.chunk_bytes).clamp(64 << 10, READ_PIECE_BYTES_MAX);
    tokio::spawn(async move {
        let mut handle = match client.open_with_attr(attr) {
            Ok(h) => h,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        let mut pos = range.start;
        while pos < range.end {
            // Pieces aligned to chunks keep every read inside one chunk.
            let len = (piece - pos % piece).min(range.end - pos) as usize;
            match handle.read_at(pos, len).await {
                Ok(b) if b.is_empty() => {
                    let _ = tx
                        .send(Err(WireError::new(
                            ErrorCode::Io,
                            format!("object shrank while being read, at byte {pos}"),
                        )))
                        .await;
                    return;
                }
                Ok(b) => {
                    pos += b.len() as u64;
                    if tx.send(Ok(b)).await.is_err() {
                        return; // The client went away.
                    }
                }
                Err(e) => {
                    tracing::warn!("reading inode {} at {pos} failed: {e}", handle.ino());
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    StreamingBlob::wrap(PieceStream(rx))
}

/// The MD5 of a request body, computed on a blocking thread so that hashing overlaps
/// receiving the body and uploading it (on a small machine it is the largest CPU cost of a PUT).
struct Hasher {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    task: tokio::task::JoinHandle<([u8; 16], Checksum)>,
}

impl Hasher {
    /// Computes the MD5 and what `sums` computes (see [`checksums`]).
    fn new(mut sum: s3s::checksum::ChecksumHasher) -> Hasher {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(HASH_PIECES_QUEUED_MAX);
        let task = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(piece) = rx.blocking_recv() {
                md5.update(&piece);
                sum.update(&piece);
            }
            let mut digest = [0u8; 16];
            digest.copy_from_slice(&md5.finalize());
            (digest, sum.finalize())
        });
        Hasher { tx, task }
    }

    async fn update(&self, piece: Bytes) -> S3Result<()> {
        self.tx.send(piece).await.map_err(|_| s3_error!(InternalError, "the MD5 thread stopped"))
    }

    async fn finish(self) -> S3Result<([u8; 16], Checksum)> {
        drop(self.tx);
        self.task.await.map_err(|e| s3_error!(InternalError, "the MD5 thread failed: {e}"))
    }
}

/// A temporary file of a write in progress, removed unless the write published it.
struct TmpGuard {
    client: Client,
    parent: Ino,
    /// None once published (or removed).
    name: Option<String>,
}

impl TmpGuard {
    async fn remove(&mut self) {
        if let Some(name) = self.name.take() {
            remove_tmp(&self.client, self.parent, &name).await;
        }
    }
}

impl Drop for TmpGuard {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let (client, parent) = (self.client.clone(), self.parent);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { remove_tmp(&client, parent, &name).await });
            }
        }
    }
}

async fn remove_tmp(client: &Client, parent: Ino, name: &str) {
    if let Err(e) = client.unlink(parent, name).await {
        if e.code != ErrorCode::NotFound {
            tracing::warn!("cannot remove temporary file {name} in directory {parent}: {e}");
        }
    }
}

/// Where a new object's file goes.
#[derive(Clone, Copy)]
pub(crate) enum Dest<'a> {
    /// This directory (multipart parts).
    Dir(Ino),
    /// The directory of a key, created if missing; the object gets permission bits `mode`.
    Key { bucket: &'a str, dirs: &'a [&'a str], mode: u32 },
}

impl Dest<'_> {
    /// The permission bits of the file written.
    fn mode(&self) -> u32 {
        match self {
            Dest::Dir(_) => 0o644,
            Dest::Key { mode, .. } => *mode,
        }
    }
}

/// What a written object ended as.
pub(crate) struct Written {
    pub etag: String,
    pub attr: Attr,
    /// The additional checksum kept with it.
    pub sum: Sum,
}

/// How a write checks its body and lands on its key.
pub(crate) struct WriteSpec<'a> {
    pub expected_len: Option<u64>,
    pub content_md5: Option<&'a str>,
    pub wanted: &'a Wanted,
    pub meta: &'a ObjectMeta,
    pub size_max: u64,
    pub publish: Publish,
    /// Set for a write of a key in a versioned bucket.
    pub versioned: Option<&'a Versioned>,
}

/// Checks the conditional headers of a GET or HEAD against the object's ETag and mtime.
fn check_conditions(
    etag: &str,
    mtime: wire::Timestamp,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let secs = mtime.secs;
    let unix = |t: &Timestamp| time_secs(t);
    if let Some(cond) = if_match {
        if !matches!(cond, ETagCondition::Any) && cond.as_etag().map(|e| e.value()) != Some(etag) {
            return Err(s3_error!(PreconditionFailed, "If-Match: the object's ETag is {etag}"));
        }
    } else if let Some(t) = if_unmodified_since {
        if secs > unix(t) {
            return Err(s3_error!(PreconditionFailed, "the object was modified since that time"));
        }
    }
    if let Some(cond) = if_none_match {
        if matches!(cond, ETagCondition::Any) || cond.as_etag().map(|e| e.value()) == Some(etag) {
            return Err(S3Error::new(S3ErrorCode::NotModified));
        }
    } else if let Some(t) = if_modified_since {
        if secs <= unix(t) {
            return Err(S3Error::new(S3ErrorCode::NotModified));
        }
    }
    Ok(())
}

fn time_secs(t: &Timestamp) -> i64 {
    let mut buf = Vec::new();
    // Timestamps format as RFC 3339 / epoch seconds; the epoch form is the simplest to read back.
    if t.format(TimestampFormat::EpochSeconds, &mut buf).is_ok() {
        if let Ok(s) = std::str::from_utf8(&buf) {
            if let Ok(v) = s.split('.').next().unwrap_or("").parse::<i64>() {
                return v;
            }
        }
    }
    0
}

impl Gateway {
    /// A gateway over `client`; `region` is what GetBucketLocation answers.
    pub fn new(client: Client, region: Option<String>) -> Gateway {
        Gateway { client, region, completing: parking_lot::Mutex::new(HashMap::new()), policies: Arc::default() }
    }

    /// The directory of `bucket`.
    pub(crate) async fn bucket(&self, bucket: &str) -> S3Result<Attr> {
        match scope::resolve(&self.client, &names::bucket_path(bucket), Access::X).await {
            Ok(a) if a.kind == FileKind::Dir => Ok(a),
            Ok(_) => Err(no_such_bucket(bucket)),
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => Err(no_such_bucket(bucket)),
            Err(e) => Err(s3_error(&e, Target::Bucket)),
        }
    }

    /// Refuses unless the request's user owns `attr` (what changing a bucket's or object's
    /// settings needs, as chmod does).
    pub(crate) fn owned(&self, attr: &Attr, what: &str) -> S3Result<()> {
        match &scope::current().user {
            Some(u) if u.uid != attr.uid => Err(access_denied(&format!("does not own {what}"))),
            _ => Ok(()),
        }
    }

    /// The file (or, for a directory marker key, the directory) of an object, and whether the
    /// key is a directory marker.
    pub(crate) async fn object(&self, bucket: &str, key: &str) -> S3Result<(Attr, bool)> {
        let parsed = parse_key(key)?;
        let path = format!("/{bucket}/{}", parsed.rel_path());
        match scope::resolve(&self.client, &path, Access::R).await {
            Ok(a) => match (a.kind, parsed.name) {
                (FileKind::File, Some(_)) | (FileKind::Dir, None) => Ok((a, parsed.name.is_none())),
                _ => {
                    self.bucket(bucket).await?;
                    Err(no_such_key(key))
                }
            },
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => {
                self.bucket(bucket).await?;
                Err(no_such_key(key))
            }
            Err(e) => Err(s3_error(&e, Target::Object)),
        }
    }

    /// The directory `dirs` below `bucket`, created with its parents if missing.
    pub(crate) async fn ensure_dirs(&self, bucket: &str, dirs: &[&str]) -> S3Result<Ino> {
        let path = format!("/{bucket}/{}", dirs.join("/"));
        match scope::resolve(&self.client, &path, Access::WX).await {
            Ok(a) if a.kind == FileKind::Dir => return Ok(a.ino),
            Ok(_) => return Err(conflict(format!("{path} is an object, not a prefix"))),
            Err(e) if e.code == ErrorCode::NotFound => {}
            Err(e) if e.code == ErrorCode::NotDir => {
                self.bucket(bucket).await?;
                return Err(conflict(format!("a component of {path} is an object, not a prefix")));
            }
            Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
        }
        let scope = scope::current();
        let mut cur = self.bucket(bucket).await?;
        for d in dirs {
            if !scope.permits(&cur, Access::X) {
                return Err(access_denied(&format!("may not search the directory above {d:?} in {path}")));
            }
            let found = match self.client.lookup(cur.ino, d).await {
                Ok(a) => a,
                Err(e) if e.code == ErrorCode::NotFound && !scope.permits(&cur, Access::WX) => {
                    return Err(access_denied(&format!("may not create {d:?} in {path}")));
                }
                Err(e) if e.code == ErrorCode::NotFound => match scope::mkdir(&self.client, cur.ino, d, 0o755).await {
                    Ok(a) => a,
                    Err(e) if e.code == ErrorCode::Exists => {
                        self.client.lookup(cur.ino, d).await.or_s3(Target::ObjectWrite)?
                    }
                    Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
                },
                Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
            };
            if found.kind != FileKind::Dir {
                return Err(conflict(format!("{d:?} in {path} is an object, not a prefix")));
            }
            cur = found;
        }
        if !scope.permits(&cur, Access::WX) {
            return Err(access_denied(&format!("may not write into {path}")));
        }
        Ok(cur.ino)
    }

    /// Writes `body` as the new content of `name` in directory `parent`: into a temporary file,
    /// then renamed into place with its metadata (atomic replace).
    pub(crate) async fn write_object(
        &self,
        dest: Dest<'_>,
        name: &str,
        body: Option<StreamingBlob>,
        spec: WriteSpec<'_>,
    ) -> S3Result<Written> {
        let tmp = client::tmp_name();
        let (parent, created) = self.create_tmp(dest, &tmp).await?;
        // Removes the temporary file unless it was published, also when this future is dropped
        // half-way (hyper drops a request whose connection fails).
        let mut guard = TmpGuard { client: self.client.clone(), parent, name: Some(tmp.clone()) };
        let result = self.fill_and_publish(parent, &tmp, name, created, body, spec).await;
        match &result {
            Ok(_) => guard.name = None,
            Err(_) => guard.remove().await,
        }
        result
    }

    /// Creates the temporary file `tmp` in the destination directory; returns the directory.
    async fn create_tmp(&self, dest: Dest<'_>, tmp: &str) -> S3Result<(Ino, Attr)> {
        let mut attempt = 0;
        loop {
            let parent = match dest {
                Dest::Dir(ino) => ino,
                Dest::Key { bucket, dirs, .. } => self.ensure_dirs(bucket, dirs).await?,
            };
            match scope::create(&self.client, parent, tmp, dest.mode(), true).await {
                Ok(created) => return Ok((parent, created)),
                // A DELETE removed the directory it emptied between the two calls: make it again.
                Err(e)
                    if e.code == ErrorCode::NotFound
                        && matches!(dest, Dest::Key { .. })
                        && attempt < DIR_RACE_RETRY_COUNT_MAX =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
            }
        }
    }

    async fn fill_and_publish(
        &self,
        parent: Ino,
        tmp: &str,
        name: &str,
        created: Attr,
        body: Option<StreamingBlob>,
        spec: WriteSpec<'_>,
    ) -> S3Result<Written> {
        let (digest, computed, attr) =
            self.fill(created, body, spec.expected_len, spec.size_max, spec.wanted.hasher()).await?;
        if let Some(given) = spec.content_md5 {
            let Some(want) = base64_decode(given.trim()) else {
                return Err(s3_error!(InvalidDigest, "Content-MD5 {given:?} is not base64"));
            };
            if want != digest {
                return Err(s3_error!(BadDigest, "the Content-MD5 you specified did not match what we received"));
            }
        }
        let sum = spec.wanted.verify(&computed)?;
        let etag = names::hex(&digest);
        objmeta::store_etag(&self.client, attr.ino, &etag, attr.data_version).await.or_s3(Target::ObjectWrite)?;
        self.client
            .setxattr(
                attr.ino,
                checksums::XATTR_CHECKSUM,
                sum.to_xattr(attr.data_version).as_bytes(),
                wire::XattrMode::Upsert,
            )
            .await
            .or_s3(Target::ObjectWrite)?;
        spec.meta.store(&self.client, attr.ino).await.or_s3(Target::ObjectWrite)?;
        self.publish(parent, tmp, parent, name, spec.publish, spec.versioned).await.map_err(publish_error)?;
        Ok(Written { etag, attr, sum })
    }

    /// Streams `body` into the (empty) file `created`; returns its MD5, the checksums `sums`
    /// computes and final attributes.
    pub(crate) async fn fill(
        &self,
        created: Attr,
        body: Option<StreamingBlob>,
        expected_len: Option<u64>,
        size_max: u64,
        sums: s3s::checksum::ChecksumHasher,
    ) -> S3Result<([u8; 16], Checksum, Attr)> {
        let mut handle = self.client.open_with_attr(created).or_s3(Target::ObjectWrite)?;
        let md5 = Hasher::new(sums);
        let mut offset = 0u64;
        if let Some(mut body) = body {
            while let Some(piece) = body.next().await {
                let piece = piece.map_err(|e| crate::errors::body_error(&*e))?;
                if offset + piece.len() as u64 > size_max {
                    return Err(s3_error!(
                        EntityTooLarge,
                        "objects written in one request may be at most {size_max} bytes"
                    ));
                }
                md5.update(piece.clone()).await?;
                handle.write_at(offset, &piece).await.or_s3(Target::ObjectWrite)?;
                offset += piece.len() as u64;
            }
        }
        if let Some(want) = expected_len {
            if want != offset {
                return Err(s3_error!(IncompleteBody, "received {offset} bytes of the {want} announced"));
            }
        }
        handle.flush().await.or_s3(Target::ObjectWrite)?;
        let attr = handle.attr().clone();
        handle.close().await.or_s3(Target::ObjectWrite)?;
        let (digest, sums) = md5.finish().await?;
        Ok((digest, sums, attr))
    }

    /// Removes the object `key`; a missing one is not an error (S3 semantics). Directories
    /// left empty up to the bucket are removed too, so their prefix disappears as in S3. In a
    /// versioned bucket the object is kept as a noncurrent version behind a new delete marker,
    /// whose id is returned.
    async fn delete_key(&self, bucket: &str, key: &str) -> S3Result<Option<String>> {
        let parsed = parse_key(key)?;
        let bucket_attr = self.bucket(bucket).await?;
        let (dirs, name) = match parsed.name {
            Some(n) => (parsed.dirs.clone(), n),
            None => {
                let mut d = parsed.dirs.clone();
                let Some(last) = d.pop() else { return Ok(None) };
                (d, last)
            }
        };
        let parent = if dirs.is_empty() {
            Some(bucket_attr.clone())
        } else {
            match scope::resolve(&self.client, &format!("/{bucket}/{}", dirs.join("/")), Access::X).await {
                Ok(a) if a.kind == FileKind::Dir => Some(a),
                Ok(_) => None,
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => None,
                Err(e) => return Err(s3_error(&e, Target::Object)),
            }
        };
        let scope = scope::current();
        if let Some(dir) = &parent {
            if !scope.permits(dir, Access::WX) {
                return Err(access_denied(&format!("may not remove entries of the directory holding {key:?}")));
            }
            if scope.user.is_some() && dir.mode & 0o1000 != 0 {
                if let Ok(entry) = self.client.lookup(dir.ino, name).await {
                    if scope.sticky_refuses(dir, &entry) {
                        return Err(access_denied(&format!("{key:?} is another user's, in a sticky directory")));
                    }
                }
            }
        }
        let parent = parent.map(|a| a.ino);
        if let Some(v) = self.versioned_write_in(bucket, bucket_attr.ino, key).await? {
            let id = self.delete_with_marker(&v, parent, name).await?;
            if parent.is_some() {
                self.prune_empty_dirs(bucket, bucket_attr.ino, &dirs).await;
            }
            return Ok(Some(id));
        }
        let Some(parent) = parent else { return Ok(None) };
        let removed = if parsed.name.is_some() {
            self.client.unlink(parent, name).await
        } else {
            self.client.rmdir(parent, name).await
        };
        match removed {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::NotFound | ErrorCode::IsDir | ErrorCode::NotDir | ErrorCode::NotEmpty
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
        }
        self.prune_empty_dirs(bucket, bucket_attr.ino, &dirs).await;
        Ok(None)
    }

    /// Removes directories `dirs` of `bucket` that became empty, innermost first; stops at the
    /// first that is not.
    pub(crate) async fn prune_empty_dirs(&self, bucket: &str, bucket_ino: Ino, dirs: &[&str]) {
        for depth in (1..=dirs.len()).rev() {
            let up = if depth == 1 {
                bucket_ino
            } else {
                match scope::resolve_internal(&self.client, &format!("/{bucket}/{}", dirs[..depth - 1].join("/"))).await
                {
                    Ok(a) => a.ino,
                    Err(_) => break,
                }
            };
            if self.client.rmdir(up, dirs[depth - 1]).await.is_err() {
                break;
            }
        }
    }

    /// Lists one page; the shared part of ListObjects and ListObjectsV2.
    async fn list_page(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: &str,
        max_keys: Option<i32>,
    ) -> S3Result<(Vec<Object>, Vec<CommonPrefix>, bool, Option<String>)> {
        let bucket_attr = self.bucket(bucket).await?;
        if !scope::current().permits(&bucket_attr, Access::RX) {
            return Err(access_denied(&format!("may not list bucket {bucket:?}")));
        }
        let limit = max_keys.map(|m| m.clamp(0, KEYS_PER_PAGE_MAX as i32) as usize).unwrap_or(KEYS_PER_PAGE_MAX);
        let page = list::list(&self.client, bucket_attr.ino, &Query { prefix, delimiter, after, limit }).await?;
        let last = page.items.last().map(|i| i.key().to_string());
        let mut prefixes = Vec::new();
        let mut objects = Vec::new();
        for item in page.items {
            match item {
                Item::Prefix(p) => prefixes.push(CommonPrefix { prefix: Some(p) }),
                Item::Object { key, attr } => objects.push((key, attr)),
            }
        }
        let client = &self.client;
        let contents: Vec<Object> = futures::stream::iter(objects)
            .map(|(key, attr)| async move {
                let raw = objmeta::load_etag(client, attr.ino).await.or_s3(Target::Object)?;
                Ok::<_, S3Error>(Object {
                    e_tag: Some(ETag::Strong(etag_for(&attr, raw.as_deref()))),
                    key: Some(key),
                    last_modified: Some(s3_time(attr.mtime)),
                    size: Some(attr.size as i64),
                    storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
                    ..Default::default()
                })
            })
            .buffered(LIST_LOOKUPS_INFLIGHT_MAX)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<S3Result<_>>()?;
        Ok((contents, prefixes, page.truncated, last))
    }
}

impl Gateway {
    /// GetObjectAttributes: the ETag, size, checksum, storage class and (for a multipart
    /// object) the number of parts, each only when asked for.
    async fn object_attributes(&self, input: GetObjectAttributesInput) -> S3Result<GetObjectAttributesOutput> {
        let (attr, marker) = self.object(&input.bucket, &input.key).await?;
        let stored = if marker {
            Default::default()
        } else {
            objmeta::load(&self.client, attr.ino).await.or_s3(Target::Object)?
        };
        let etag = if marker { EMPTY_ETAG.to_string() } else { etag_for(&attr, stored.etag_raw.as_deref()) };
        // One header may list several attributes, comma-separated.
        let asked = |name: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|a| a.as_str().split(','))
                .any(|a| a.trim().eq_ignore_ascii_case(name))
        };
        let sum = stored.checksum_raw.as_deref().and_then(|raw| Sum::from_xattr(raw, attr.data_version));
        // A multipart ETag ends in `-<parts>`.
        let parts =
            etag.rsplit_once('-').and_then(|(_, n)| n.parse::<i32>().ok()).filter(|_| !etag.starts_with("trove-"));
        Ok(GetObjectAttributesOutput {
            e_tag: asked(ObjectAttributes::ETAG).then(|| ETag::Strong(etag.clone())),
            object_size: asked(ObjectAttributes::OBJECT_SIZE).then_some(if marker { 0 } else { attr.size as i64 }),
            storage_class: asked(ObjectAttributes::STORAGE_CLASS)
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            checksum: sum.filter(|_| asked(ObjectAttributes::CHECKSUM)).map(|s| {
                let (mut c, kind) = s.fields();
                c.checksum_type = Some(kind);
                c
            }),
            object_parts: parts
                .filter(|_| asked(ObjectAttributes::OBJECT_PARTS))
                .map(|n| GetObjectAttributesParts { total_parts_count: Some(n), ..Default::default() }),
            last_modified: Some(s3_time(attr.mtime)),
            ..Default::default()
        })
    }
}

/// A failed [`Gateway::publish`] as the S3 error of a write.
pub(crate) fn publish_error(e: PublishError) -> S3Error {
    match e {
        PublishError::Condition(c) => c.into(),
        PublishError::Wire(e) => s3_error(&e, Target::ObjectWrite),
    }
}

/// The checksum of `stored` if the request asked for it (`x-amz-checksum-mode: ENABLED`) and
/// one is kept for the file's current version.
pub(crate) fn wanted_sum(mode: Option<&ChecksumMode>, stored: &objmeta::StoredMeta, attr: &Attr) -> Option<Sum> {
    if !mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED)) {
        return None;
    }
    Sum::from_xattr(stored.checksum_raw.as_deref()?, attr.data_version)
}

fn url_encoded(on: bool, s: Option<String>) -> Option<String> {
    if on {
        s.map(|s| names::url_encode(&s))
    } else {
        s
    }
}

fn wants_url(e: Option<&EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == EncodingType::URL)
}

pub(crate) fn owner() -> Owner {
    let name = scope::current().owner_name();
    Owner { display_name: Some(name.clone()), id: Some(name) }
}

/// The owner S3 shows for a file: the request's user by name if it is theirs, else its uid.
fn owner_of(attr: &Attr) -> Owner {
    let scope = scope::current();
    let name = match &scope.user {
        Some(u) if u.uid == attr.uid => u.name.clone(),
        Some(_) => format!("uid:{}", attr.uid),
        None => scope.owner_name(),
    };
    Owner { display_name: Some(name.clone()), id: Some(name) }
}

/// AccessDenied, saying what the request's user may not do.
pub(crate) fn access_denied(what: &str) -> S3Error {
    let who = scope::current().user.as_ref().map_or_else(|| "this request".to_string(), |u| format!("user {}", u.name));
    S3Error::with_message(S3ErrorCode::AccessDenied, format!("{who} {what}"))
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(&self, _req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        let scope = scope::current();
        let entries = self.client.readdir(scope.root_ino).await.or_s3(Target::Bucket)?;
        let buckets = entries
            .into_iter()
            .filter(|e| e.attr.kind == FileKind::Dir && s3s::path::check_bucket_name(&e.name))
            .filter(|e| scope.permits(&e.attr, Access::RX))
            .map(|e| Bucket {
                name: Some(e.name),
                creation_date: Some(s3_time(e.attr.crtime)),
                bucket_region: self.region.clone(),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput { buckets: Some(buckets), owner: Some(owner()), ..Default::default() }))
    }

    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = req.input.bucket;
        let scope = scope::current();
        let mode = match &req.input.acl {
            Some(acl) => acl::bucket_mode(acl)?,
            None if scope.user.is_some() => acl::BUCKET_MODE_PRIVATE,
            None => 0o755,
        };
        if scope.user.is_some() {
            let root = self.client.getattr(scope.root_ino).await.or_s3(Target::Bucket)?;
            if !scope.permits(&root, Access::WX) {
                return Err(access_denied("may not create buckets here"));
            }
        }
        match scope::mkdir(&self.client, scope.root_ino, &bucket, mode).await {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::Exists => {
                return Err(S3Error::with_message(
                    S3ErrorCode::BucketAlreadyOwnedByYou,
                    format!("bucket {bucket:?} exists"),
                ));
            }
            Err(e) => return Err(s3_error(&e, Target::Bucket)),
        }
        Ok(S3Response::new(CreateBucketOutput { location: Some(format!("/{bucket}")) }))
    }

    async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        let dir = self.bucket(&bucket).await?;
        if self.has_stored_versions(&bucket).await? {
            return Err(s3_error!(
                BucketNotEmpty,
                "The bucket you tried to delete is not empty: it holds noncurrent versions or delete markers"
            ));
        }
        let scope = scope::current();
        if scope.user.is_some() {
            let root = self.client.getattr(scope.root_ino).await.or_s3(Target::Bucket)?;
            if !scope.permits(&root, Access::WX) || scope.sticky_refuses(&root, &dir) {
                return Err(access_denied(&format!("may not delete bucket {bucket:?} (it is not theirs)")));
            }
        }
        self.client.rmdir(scope.root_ino, &bucket).await.or_s3(Target::Bucket)?;
        // Multipart uploads of a deleted bucket go with it.
        self.remove_uploads_of(&bucket).await;
        self.remove_version_store(&bucket).await;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn get_bucket_acl(&self, req: S3Request<GetBucketAclInput>) -> S3Result<S3Response<GetBucketAclOutput>> {
        let dir = self.bucket(&req.input.bucket).await?;
        let owner = owner_of(&dir);
        let grants = acl::grants(&owner, dir.mode);
        Ok(S3Response::new(GetBucketAclOutput { grants: Some(grants), owner: Some(owner) }))
    }

    async fn put_bucket_acl(&self, req: S3Request<PutBucketAclInput>) -> S3Result<S3Response<PutBucketAclOutput>> {
        let input = req.input;
        let dir = self.bucket(&input.bucket).await?;
        let Some(canned) = &input.acl else {
            return Err(acl::canned_only());
        };
        let mode = acl::bucket_mode(canned)?;
        self.owned(&dir, &format!("bucket {:?}", input.bucket))?;
        let set = wire::SetAttr { mode: Some((dir.mode & !0o777) | mode), ..Default::default() };
        self.client.setattr(dir.ino, set).await.or_s3(Target::Bucket)?;
        Ok(S3Response::new(PutBucketAclOutput {}))
    }

    async fn get_object_acl(&self, req: S3Request<GetObjectAclInput>) -> S3Result<S3Response<GetObjectAclOutput>> {
        let (attr, _) = self.object(&req.input.bucket, &req.input.key).await?;
        let owner = owner_of(&attr);
        let grants = acl::grants(&owner, attr.mode);
        Ok(S3Response::new(GetObjectAclOutput { grants: Some(grants), owner: Some(owner), ..Default::default() }))
    }

    async fn put_object_acl(&self, req: S3Request<PutObjectAclInput>) -> S3Result<S3Response<PutObjectAclOutput>> {
        let input = req.input;
        let Some(canned) = &input.acl else {
            return Err(acl::canned_only());
        };
        let mode = acl::object_mode(Some(canned))?;
        let path = format!("/{}/{}", input.bucket, parse_key(&input.key)?.rel_path());
        let attr = match scope::resolve(&self.client, &path, Access::NONE).await {
            Ok(a) => a,
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => {
                self.bucket(&input.bucket).await?;
                return Err(no_such_key(&input.key));
            }
            Err(e) => return Err(s3_error(&e, Target::Object)),
        };
        self.owned(&attr, &format!("object {:?}", input.key))?;
        let set = wire::SetAttr { mode: Some((attr.mode & !0o777) | mode), ..Default::default() };
        self.client.setattr(attr.ino, set).await.or_s3(Target::ObjectWrite)?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        let bucket = &req.input.bucket;
        let dir = self.bucket(bucket).await?;
        self.owned(&dir, &format!("bucket {bucket:?}"))?;
        match self.client.getxattr(dir.ino, crate::policy::XATTR_POLICY).await {
            Ok(raw) => {
                Ok(S3Response::new(GetBucketPolicyOutput { policy: Some(String::from_utf8_lossy(&raw).into_owned()) }))
            }
            Err(e) if e.code == ErrorCode::NoAttr => {
                Err(S3Error::with_message(S3ErrorCode::NoSuchBucketPolicy, format!("bucket {bucket:?} has no policy")))
            }
            Err(e) => Err(s3_error(&e, Target::Bucket)),
        }
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        let input = req.input;
        let dir = self.bucket(&input.bucket).await?;
        self.owned(&dir, &format!("bucket {:?}", input.bucket))?;
        crate::policy::BucketPolicy::parse(&input.policy, &input.bucket)?;
        self.client
            .setxattr(dir.ino, crate::policy::XATTR_POLICY, input.policy.as_bytes(), wire::XattrMode::Upsert)
            .await
            .or_s3(Target::Bucket)?;
        self.policies.forget(scope::current().root_ino, &input.bucket);
        Ok(S3Response::new(PutBucketPolicyOutput {}))
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        let bucket = &req.input.bucket;
        let dir = self.bucket(bucket).await?;
        self.owned(&dir, &format!("bucket {bucket:?}"))?;
        match self.client.removexattr(dir.ino, crate::policy::XATTR_POLICY).await {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::NoAttr => {}
            Err(e) => return Err(s3_error(&e, Target::Bucket)),
        }
        self.policies.forget(scope::current().root_ino, bucket);
        Ok(S3Response::new(DeleteBucketPolicyOutput {}))
    }

    async fn put_bucket_cors(&self, req: S3Request<PutBucketCorsInput>) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let input = req.input;
        let dir = self.bucket(&input.bucket).await?;
        self.owned(&dir, &format!("bucket {:?}", input.bucket))?;
        let rules = crate::cors::from_request(&input.cors_configuration.cors_rules)?;
        let value = crate::cors::encode(&rules);
        self.client
            .setxattr(dir.ino, crate::cors::XATTR_CORS, value.as_bytes(), wire::XattrMode::Upsert)
            .await
            .or_s3(Target::Bucket)?;
        Ok(S3Response::new(PutBucketCorsOutput::default()))
    }

    async fn get_bucket_cors(&self, req: S3Request<GetBucketCorsInput>) -> S3Result<S3Response<GetBucketCorsOutput>> {
        match crate::cors::load(&self.client, &req.input.bucket).await? {
            Some(rules) => {
                Ok(S3Response::new(GetBucketCorsOutput { cors_rules: Some(crate::cors::to_response(&rules)) }))
            }
            None => Err(S3Error::with_message(
                S3ErrorCode::NoSuchCORSConfiguration,
                "The CORS configuration does not exist",
            )),
        }
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        let dir = self.bucket(&req.input.bucket).await?;
        self.owned(&dir, &format!("bucket {:?}", req.input.bucket))?;
        match self.client.removexattr(dir.ino, crate::cors::XATTR_CORS).await {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::NoAttr => {}
            Err(e) => return Err(s3_error(&e, Target::Bucket)),
        }
        Ok(S3Response::new(DeleteBucketCorsOutput::default()))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let input = req.input;
        let dir = self.bucket(&input.bucket).await?;
        self.owned(&dir, &format!("bucket {:?}", input.bucket))?;
        let config = input.versioning_configuration;
        if config.mfa_delete.as_ref().is_some_and(|m| m.as_str() == MFADelete::ENABLED) {
            return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
        }
        let status = match config.status.as_ref().map(|s| s.as_str()) {
            Some(BucketVersioningStatus::ENABLED) => "Enabled",
            Some(BucketVersioningStatus::SUSPENDED) => "Suspended",
            Some(other) => {
                return Err(s3_error!(MalformedXML, "versioning status {other:?} is neither Enabled nor Suspended"))
            }
            None => return Err(s3_error!(MalformedXML, "the versioning configuration has no Status")),
        };
        // As in S3, there is no way back to never-enabled: Suspended is recorded even for a
        // bucket that never had versioning, and then writes make null versions.
        self.client
            .setxattr(dir.ino, versions::XATTR_VERSIONING, status.as_bytes(), wire::XattrMode::Upsert)
            .await
            .or_s3(Target::Bucket)?;
        Ok(S3Response::new(PutBucketVersioningOutput {}))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let dir = self.bucket(&req.input.bucket).await?;
        let status = match self.versioning_of(dir.ino).await? {
            versions::Mode::Off => None,
            versions::Mode::Enabled => Some(BucketVersioningStatus::from_static(BucketVersioningStatus::ENABLED)),
            versions::Mode::Suspended => Some(BucketVersioningStatus::from_static(BucketVersioningStatus::SUSPENDED)),
        };
        Ok(S3Response::new(GetBucketVersioningOutput { status, ..Default::default() }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let dir = self.bucket(&req.input.bucket).await?;
        if !scope::current().permits(&dir, Access::RX) {
            return Err(access_denied(&format!("may not list bucket {:?}", req.input.bucket)));
        }
        Ok(S3Response::new(self.list_versions(req.input).await?))
    }

    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput { bucket_region: self.region.clone(), ..Default::default() }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.bucket(&req.input.bucket).await?;
        let location_constraint = self.region.clone().filter(|r| r != "us-east-1").map(BucketLocationConstraint::from);
        Ok(S3Response::new(GetBucketLocationOutput { location_constraint }))
    }

    async fn put_object(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        let trailer_names = req.headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()).map(str::to_string);
        let input = req.input;
        let parsed = parse_key(&input.key)?;
        let meta =
            ObjectMeta::from_request(input.content_type.as_ref(), input.metadata.as_ref())?.with_headers(KeptHeaders {
                cache_control: input.cache_control.as_ref(),
                content_disposition: input.content_disposition.as_ref(),
                content_encoding: input.content_encoding.as_ref(),
                content_language: input.content_language.as_ref(),
                expires: input.expires.as_ref(),
            });
        let wanted = Wanted::from_request(
            [
                input.checksum_crc32.as_ref(),
                input.checksum_crc32c.as_ref(),
                input.checksum_crc64nvme.as_ref(),
                input.checksum_sha1.as_ref(),
                input.checksum_sha256.as_ref(),
            ],
            input.checksum_algorithm.as_ref(),
            trailer_names.as_deref(),
            req.trailing_headers.clone(),
        )?;
        let expected_len = input.content_length.and_then(|n| u64::try_from(n).ok());
        if expected_len.is_some_and(|n| n > PUT_BYTES_MAX) {
            return Err(s3_error!(
                EntityTooLarge,
                "a single PUT may write at most {PUT_BYTES_MAX} bytes; use a multipart upload"
            ));
        }
        let Some(name) = parsed.name else {
            // A directory marker: the directory itself, no content.
            if expected_len.unwrap_or(0) != 0 {
                return Err(s3_error!(InvalidArgument, "a key ending in '/' names a directory and cannot hold data"));
            }
            let mut dirs = parsed.dirs.clone();
            let last = dirs.pop();
            let parent = self.ensure_dirs(&input.bucket, &dirs).await?;
            if let Some(last) = last {
                match scope::mkdir(&self.client, parent, last, 0o755).await {
                    Ok(_) => {}
                    Err(e) if e.code == ErrorCode::Exists => {
                        let a = self.client.lookup(parent, last).await.or_s3(Target::ObjectWrite)?;
                        if a.kind != FileKind::Dir {
                            return Err(conflict(format!("{} is an object, not a prefix", input.key)));
                        }
                    }
                    Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
                }
            }
            return Ok(S3Response::new(PutObjectOutput {
                e_tag: Some(ETag::Strong(EMPTY_ETAG.into())),
                ..Default::default()
            }));
        };
        let publish = self
            .write_condition(&input.bucket, &input.key, input.if_match.as_ref(), input.if_none_match.as_ref())
            .await?;
        let versioned = self.versioned_write(&input.bucket, &input.key).await?;
        let spec = WriteSpec {
            expected_len,
            content_md5: input.content_md5.as_deref(),
            wanted: &wanted,
            meta: &meta,
            size_max: PUT_BYTES_MAX,
            publish,
            versioned: versioned.as_ref(),
        };
        let mode = acl::object_mode(input.acl.as_ref())?;
        let written = self
            .write_object(Dest::Key { bucket: &input.bucket, dirs: &parsed.dirs, mode }, name, input.body, spec)
            .await?;
        let (sums, kind) = written.sum.fields();
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(written.etag)),
            size: Some(written.attr.size as i64),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            checksum_type: Some(kind),
            version_id: versions::shown_id(versioned.as_ref()),
            ..Default::default()
        }))
    }

    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let (attr, marker, asked) = self.object_to_read(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        let stored = if !marker {
            objmeta::load(&self.client, attr.ino).await.or_s3(Target::Object)?
        } else {
            Default::default()
        };
        let (etag, size) = if !marker {
            (etag_for(&attr, stored.etag_raw.as_deref()), attr.size)
        } else {
            (EMPTY_ETAG.to_string(), 0)
        };
        check_conditions(
            &etag,
            attr.mtime,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        if input.part_number.is_some_and(|p| p != 1) {
            return Err(s3_error!(InvalidArgument, "only part number 1 (the whole object) can be read by part"));
        }
        let range = match &input.range {
            Some(r) => Some(
                r.check(size).map_err(|_| s3_error!(InvalidRange, "the range is outside the object's {size} bytes"))?,
            ),
            None => None,
        };
        let span = range.clone().unwrap_or(0..size);
        // A checksum describes the whole object: none for a range, as in S3.
        let sum = if range.is_none() { wanted_sum(input.checksum_mode.as_ref(), &stored, &attr) } else { None };
        let (sums, kind) = sum.map(|s| s.fields()).unzip();
        let sums = sums.unwrap_or_default();
        let body = if !marker {
            read_stream(self.client.clone(), attr.clone(), span.clone())
        } else {
            StreamingBlob::from(s3s::Body::empty())
        };
        Ok(S3Response::new(GetObjectOutput {
            accept_ranges: Some("bytes".into()),
            body: Some(body),
            content_length: Some((span.end - span.start) as i64),
            content_range: range.map(|r| format!("bytes {}-{}/{size}", r.start, r.end.saturating_sub(1))),
            content_type: Some(stored.meta.content_type.clone().unwrap_or_else(|| CONTENT_TYPE_DEFAULT.into())),
            e_tag: Some(ETag::Strong(etag)),
            last_modified: Some(s3_time(attr.mtime)),
            metadata: stored.meta.metadata_map(),
            cache_control: stored.meta.header("cache-control"),
            content_disposition: stored.meta.header("content-disposition"),
            content_encoding: stored.meta.header("content-encoding"),
            content_language: stored.meta.header("content-language"),
            expires: stored.meta.expires(),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            checksum_type: kind,
            version_id: asked.or(stored.version_id),
            ..Default::default()
        }))
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let (attr, marker, asked) = self.object_to_read(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        let stored = if !marker {
            objmeta::load(&self.client, attr.ino).await.or_s3(Target::Object)?
        } else {
            Default::default()
        };
        let (etag, size) = if !marker {
            (etag_for(&attr, stored.etag_raw.as_deref()), attr.size)
        } else {
            (EMPTY_ETAG.to_string(), 0)
        };
        check_conditions(
            &etag,
            attr.mtime,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let (sums, kind) = wanted_sum(input.checksum_mode.as_ref(), &stored, &attr).map(|s| s.fields()).unzip();
        let sums = sums.unwrap_or_default();
        Ok(S3Response::new(HeadObjectOutput {
            accept_ranges: Some("bytes".into()),
            content_length: Some(size as i64),
            content_type: Some(stored.meta.content_type.clone().unwrap_or_else(|| CONTENT_TYPE_DEFAULT.into())),
            e_tag: Some(ETag::Strong(etag)),
            last_modified: Some(s3_time(attr.mtime)),
            metadata: stored.meta.metadata_map(),
            cache_control: stored.meta.header("cache-control"),
            content_disposition: stored.meta.header("content-disposition"),
            content_encoding: stored.meta.header("content-encoding"),
            content_language: stored.meta.header("content-language"),
            expires: stored.meta.expires(),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            checksum_type: kind,
            version_id: asked.or(stored.version_id),
            ..Default::default()
        }))
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = &req.input;
        if let Some(id) = &input.version_id {
            let was_marker = self.delete_version(&input.bucket, &input.key, id).await?;
            return Ok(S3Response::new(DeleteObjectOutput {
                delete_marker: Some(was_marker),
                version_id: Some(id.clone()),
                ..Default::default()
            }));
        }
        let marker = match &input.if_match {
            Some(cond) if self.versioned_write(&input.bucket, &input.key).await?.is_some() => {
                // Versioned: nothing is removed for good, so checking first is enough.
                let (attr, _) = self.object(&input.bucket, &input.key).await?;
                let raw = objmeta::load_etag(&self.client, attr.ino).await.or_s3(Target::Object)?;
                let etag = etag_for(&attr, raw.as_deref());
                if !crate::conditions::etag_matches(cond, &etag) {
                    return Err(s3_error!(
                        PreconditionFailed,
                        "At least one of the pre-conditions you specified did not hold: the object's ETag is {etag}"
                    ));
                }
                self.delete_key(&input.bucket, &input.key).await?
            }
            Some(cond) => {
                self.delete_if_match(&input.bucket, &input.key, cond).await?;
                None
            }
            None => self.delete_key(&input.bucket, &input.key).await?,
        };
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: marker.as_ref().map(|_| true),
            version_id: marker,
            ..Default::default()
        }))
    }

    async fn delete_objects(&self, req: S3Request<DeleteObjectsInput>) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        self.bucket(&input.bucket).await?;
        if input.delete.objects.len() > DELETE_KEYS_MAX {
            return Err(s3_error!(MalformedXML, "at most {DELETE_KEYS_MAX} keys may be deleted per request"));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for obj in input.delete.objects {
            let done = match &obj.version_id {
                Some(id) => self.delete_version(&input.bucket, &obj.key, id).await.map(|was_marker| DeletedObject {
                    delete_marker: Some(was_marker),
                    version_id: Some(id.clone()),
                    ..Default::default()
                }),
                None => self.delete_key(&input.bucket, &obj.key).await.map(|marker| DeletedObject {
                    delete_marker: marker.as_ref().map(|_| true),
                    delete_marker_version_id: marker,
                    ..Default::default()
                }),
            };
            match done {
                Ok(d) => {
                    if !quiet {
                        deleted.push(DeletedObject { key: Some(obj.key), ..d });
                    }
                }
                Err(e) => errors.push(s3s::dto::Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(obj.key),
                    message: e.message().map(str::to_string),
                    version_id: obj.version_id,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput { deleted: Some(deleted), errors: Some(errors), ..Default::default() }))
    }

    async fn copy_object(&self, req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let CopySource::Bucket { bucket: src_bucket, key: src_key, version_id: src_version } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "only bucket/key copy sources are supported"));
        };
        let (src, src_marker) = match src_version {
            Some(id) => (self.version(src_bucket, src_key, id).await?.attr, false),
            None => self.object(src_bucket, src_key).await?,
        };
        if src_marker {
            return Err(no_such_key(src_key));
        }
        let stored = objmeta::load(&self.client, src.ino).await.or_s3(Target::Object)?;
        let src_etag = etag_for(&src, stored.etag_raw.as_deref());
        check_conditions(
            &src_etag,
            src.mtime,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            None,
            None,
        )
        .map_err(|e| {
            if *e.code() == S3ErrorCode::NotModified {
                s3_error!(PreconditionFailed, "CopySourceIfNoneMatch")
            } else {
                e
            }
        })?;
        let replace = input.metadata_directive.as_ref().is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let meta = if replace {
            ObjectMeta::from_request(input.content_type.as_ref(), input.metadata.as_ref())?.with_headers(KeptHeaders {
                cache_control: input.cache_control.as_ref(),
                content_disposition: input.content_disposition.as_ref(),
                content_encoding: input.content_encoding.as_ref(),
                content_language: input.content_language.as_ref(),
                expires: input.expires.as_ref(),
            })
        } else {
            stored.meta.clone()
        };
        let parsed = parse_key(&input.key)?;
        let Some(name) = parsed.name else {
            return Err(s3_error!(
                InvalidArgument,
                "a key ending in '/' names a directory and cannot be a copy target"
            ));
        };
        let versioned = self.versioned_write(&input.bucket, &input.key).await?;
        // In a versioned bucket a copy onto itself makes a new version like any other write.
        let same = input.bucket == **src_bucket && input.key == **src_key && src_version.is_none();
        if same && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata"
            ));
        }
        if same && versioned.is_none() {
            meta.replace(&self.client, src.ino).await.or_s3(Target::ObjectWrite)?;
            return Ok(S3Response::new(CopyObjectOutput {
                copy_object_result: Some(CopyObjectResult {
                    e_tag: Some(ETag::Strong(src_etag)),
                    last_modified: Some(s3_time(src.mtime)),
                    ..Default::default()
                }),
                ..Default::default()
            }));
        }
        // The copy keeps the source's checksum algorithm unless the request names one.
        let algo = match &input.checksum_algorithm {
            Some(a) => checksums::Algo::parse(a.as_str())
                .ok_or_else(|| checksums::ChecksumError::UnknownAlgorithm(a.as_str().to_string()))?,
            None => stored
                .checksum_raw
                .as_deref()
                .and_then(|raw| Sum::from_xattr(raw, src.data_version))
                .map_or(checksums::Algo::Crc64Nvme, |s| s.algo),
        };
        let wanted = Wanted::compute(algo);
        let body = read_stream(self.client.clone(), src.clone(), 0..src.size);
        let spec = WriteSpec {
            expected_len: Some(src.size),
            content_md5: None,
            wanted: &wanted,
            meta: &meta,
            size_max: u64::MAX,
            publish: Publish::Replace,
            versioned: versioned.as_ref(),
        };
        let mode = acl::object_mode(input.acl.as_ref())?;
        let written = self
            .write_object(Dest::Key { bucket: &input.bucket, dirs: &parsed.dirs, mode }, name, Some(body), spec)
            .await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(written.etag)),
                last_modified: Some(s3_time(written.attr.mtime)),
                ..Default::default()
            }),
            copy_source_version_id: src_version.as_ref().map(|v| v.to_string()),
            version_id: versions::shown_id(versioned.as_ref()),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let token_key =
            match &input.continuation_token {
                Some(t) => Some(names::unhex(t).and_then(|b| String::from_utf8(b).ok()).ok_or_else(|| {
                    s3_error!(InvalidArgument, "the continuation token is not one this gateway issued")
                })?),
                None => None,
            };
        let after = match (&token_key, &input.start_after) {
            (Some(t), Some(s)) => t.max(s).clone(),
            (Some(t), None) => t.clone(),
            (None, Some(s)) => s.clone(),
            (None, None) => String::new(),
        };
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let (contents, prefixes, truncated, last) =
            self.list_page(&input.bucket, &prefix, delimiter.as_deref(), &after, input.max_keys).await?;
        let url = wants_url(input.encoding_type.as_ref());
        let key_count = (contents.len() + prefixes.len()) as i32;
        let contents = contents.into_iter().map(|mut o| {
            o.key = url_encoded(url, o.key.take());
            o
        });
        let prefixes = prefixes.into_iter().map(|p| CommonPrefix { prefix: url_encoded(url, p.prefix) });
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: url_encoded(url, Some(prefix)),
            delimiter: url_encoded(url, delimiter),
            max_keys: Some(input.max_keys.unwrap_or(KEYS_PER_PAGE_MAX as i32)),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            is_truncated: Some(truncated),
            next_continuation_token: if truncated { last.map(|k| names::hex(k.as_bytes())) } else { None },
            contents: Some(contents.collect()),
            common_prefixes: Some(prefixes.collect()),
            encoding_type: input.encoding_type,
            start_after: url_encoded(url, input.start_after),
            ..Default::default()
        }))
    }

    async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = input.marker.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let (contents, prefixes, truncated, last) =
            self.list_page(&input.bucket, &prefix, delimiter.as_deref(), &after, input.max_keys).await?;
        let url = wants_url(input.encoding_type.as_ref());
        let contents = contents.into_iter().map(|mut o| {
            o.key = url_encoded(url, o.key.take());
            o.owner = Some(owner());
            o
        });
        let prefixes = prefixes.into_iter().map(|p| CommonPrefix { prefix: url_encoded(url, p.prefix) });
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: url_encoded(url, Some(prefix)),
            marker: url_encoded(url, input.marker),
            delimiter: url_encoded(url, delimiter),
            max_keys: Some(input.max_keys.unwrap_or(KEYS_PER_PAGE_MAX as i32)),
            is_truncated: Some(truncated),
            next_marker: if truncated { url_encoded(url, last) } else { None },
            contents: Some(contents.collect()),
            common_prefixes: Some(prefixes.collect()),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.mpu_create(req.input).await.map(S3Response::new)
    }

    async fn upload_part(&self, req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        let trailer_names = req.headers.get("x-amz-trailer").and_then(|v| v.to_str().ok());
        self.mpu_upload_part(req.input, trailer_names, req.trailing_headers.clone()).await.map(S3Response::new)
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.mpu_upload_part_copy(req.input).await.map(S3Response::new)
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        self.object_attributes(req.input).await.map(S3Response::new)
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let (output, copied) = self.mpu_complete(req.input).await?;
        let mut resp = S3Response::new(output);
        resp.headers.insert(COPIED_BYTES_HEADER, http::HeaderValue::from(copied));
        Ok(resp)
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.mpu_abort(req.input).await.map(S3Response::new)
    }

    async fn list_parts(&self, req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
        self.mpu_list_parts(req.input).await.map(S3Response::new)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.mpu_list_uploads(req.input).await.map(S3Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_content_md5() {
        assert_eq!(base64_decode("1B2M2Y8AsgTpgAmY7PhCfg==").map(|d| names::hex(&d)), Some(EMPTY_ETAG.to_string()));
        assert_eq!(base64_decode("a*b"), None);
    }

    #[test]
    fn conditions_follow_http() {
        let t = wire::Timestamp { secs: 1000, nanos: 0 };
        let tag = |s: &str| ETagCondition::ETag(ETag::Strong(s.into()));
        assert!(check_conditions("abc", t, Some(&tag("abc")), None, None, None).is_ok());
        assert_eq!(
            *check_conditions("abc", t, Some(&tag("x")), None, None, None).expect_err("fails").code(),
            S3ErrorCode::PreconditionFailed
        );
        assert_eq!(
            *check_conditions("abc", t, None, Some(&tag("abc")), None, None).expect_err("fails").code(),
            S3ErrorCode::NotModified
        );
        assert!(
            check_conditions("abc", t, None, Some(&ETagCondition::ETag(ETag::Strong("x".into()))), None, None).is_ok()
        );
    }
}
