//! Multipart uploads, stored so that completing one does not copy its data again.
//!
//! An upload is a hidden directory `/.trove-s3/uploads/<bucket>/<upload id>/` (the id is 32
//! random hex digits). Its extended attributes hold the key, the Content-Type and user metadata
//! given at creation; each part is a file named by its number (`00001`), written like a PUT
//! (temporary name, then renamed, so a re-sent part replaces the old one atomically) with its
//! MD5 as ETag.
//!
//! Completion moves data at the metadata level: `MetaOp::AppendFile` re-indexes a part's chunk
//! records onto the end of an assembly file and removes the part, in one transaction; no shard
//! is read or written. That works while the assembly ends on a chunk boundary, so the
//! upload's chunk size is chosen when its first part arrives: the largest size dividing both
//! that part's length and the directory's chunk size (4 MiB parts or 8 MiB parts keep 4 MiB
//! chunks; the 5 MiB parts of rclone and 15 MiB parts of s3cmd get 1 MiB chunks), never below
//! 64 KiB. Parts of other sizes still complete correctly: from the first part that would
//! leave the assembly off a chunk boundary on, data is copied instead (the response header
//! `x-trove-copied-bytes` says how much; 0 for every common client).
//!
//! Completion first writes a plan (part numbers, sizes, ETags) to `.plan` in the upload
//! directory, so a completion interrupted by a crash can be retried: parts already moved are
//! gone from the directory and the plan says where the remaining ones go. Completions of one
//! upload are serialized within a gateway process; two gateways completing the same upload
//! at once is not supported.

use crate::checksums::{self, Algo, Sum, Wanted, XATTR_CHECKSUM, XATTR_UPLOAD_CHECKSUM};
use crate::conditions::{Publish, PublishError};
use crate::errors::{s3_error, OrS3, Target};
use crate::gateway::{access_denied, conflict, no_such_key, publish_error, read_stream, Dest, Gateway, WriteSpec};
use crate::names::{self, parse_key};
use crate::objmeta::{self, etag_for, s3_time, KeptHeaders, ObjectMeta};
use client::{Attr, ErrorCode, FileKind, Ino, WireError};
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use std::sync::Arc;
use wire::identity::Access;
use wire::{MetaOp, MetaReply, Timestamp, XattrMode};

/// Most parts an upload may have, as in S3.
pub const PARTS_MAX: i32 = 10_000;
/// Smallest size of every part but the last, as in S3.
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Largest part, as in S3.
pub const PART_BYTES_MAX: u64 = 5 << 30;
/// Smallest chunk size an upload may choose (one checksum block).
const CHUNK_BYTES_MIN: u64 = wire::SHARD_BLOCK_BYTES as u64;
/// How often completion re-creates the key's directory that a concurrent DELETE pruned.
const RENAME_RACE_RETRY_COUNT_MAX: u32 = 3;
/// Parts or uploads listed per page at most.
const LIST_ENTRIES_MAX: i32 = 1000;
/// Bytes copied per step when a part cannot be moved.
const COPY_PIECE_BYTES_MAX: u64 = 8 << 20;

/// Extended attribute of an upload directory: the object key.
const XATTR_UPLOAD_KEY: &str = "user.s3.upload.key";
/// Extended attribute of an upload directory: the chunk size its parts use, decided by the
/// first part.
const XATTR_UPLOAD_CHUNK: &str = "user.s3.upload.chunk-bytes";
/// The file the parts are assembled into.
const ASSEMBLY: &str = ".assembly";
/// The completion plan.
const PLAN: &str = ".plan";

fn no_such_upload(id: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::NoSuchUpload,
        format!("no multipart upload {id:?} (it may have been completed or aborted)"),
    )
}

fn part_name(n: i32) -> String {
    format!("{n:05}")
}

fn check_upload_id(id: &str) -> S3Result<()> {
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(no_such_upload(id))
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The chunk size for an upload whose first part is `part_bytes` long, in a directory whose
/// chunk size is `dir_chunk_bytes`: the largest divisor of both, if it is a usable chunk size.
pub fn upload_chunk_bytes(part_bytes: Option<u64>, dir_chunk_bytes: u32) -> u32 {
    let base = u64::from(dir_chunk_bytes);
    match part_bytes {
        Some(n) if n > 0 => {
            let g = gcd(n, base);
            if g >= CHUNK_BYTES_MIN && g.is_multiple_of(4096) {
                g as u32
            } else {
                dir_chunk_bytes
            }
        }
        _ => dir_chunk_bytes,
    }
}

/// One part of a completion plan.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Planned {
    number: i32,
    size: u64,
    etag: String,
    /// The part's additional checksum, `<ALGORITHM>:<base64>` (None: it has none).
    sum: Option<String>,
}

impl Planned {
    fn sum(&self) -> Option<Sum> {
        let (algo, value) = self.sum.as_deref()?.split_once(':')?;
        Some(Sum { algo: Algo::parse(algo)?, composite_parts: None, value: value.to_string() })
    }
}

fn plan_text(plan: &[Planned]) -> String {
    plan.iter().map(|p| format!("{} {} {} {}\n", p.number, p.size, p.etag, p.sum.as_deref().unwrap_or("-"))).collect()
}

fn parse_plan(text: &str) -> Option<Vec<Planned>> {
    text.lines()
        .map(|l| {
            let mut it = l.split(' ');
            Some(Planned {
                number: it.next()?.parse().ok()?,
                size: it.next()?.parse().ok()?,
                etag: it.next()?.to_string(),
                // Plans written before checksums were kept have three fields.
                sum: it.next().filter(|s| *s != "-").map(str::to_string),
            })
        })
        .collect()
}

/// The value a completion request gives for a part's checksum of `algo`, if any.
fn requested_part_sum(p: &CompletedPart, algo: Algo) -> Option<&String> {
    match algo {
        Algo::Crc32 => p.checksum_crc32.as_ref(),
        Algo::Crc32c => p.checksum_crc32c.as_ref(),
        Algo::Crc64Nvme => p.checksum_crc64nvme.as_ref(),
        Algo::Sha1 => p.checksum_sha1.as_ref(),
        Algo::Sha256 => p.checksum_sha256.as_ref(),
    }
}

/// An upload's checksum choice as kept in [`XATTR_UPLOAD_CHECKSUM`]: the algorithm and whether
/// the object's checksum is to be a full-object one. Uploads that named none get a
/// full-object CRC64NVME, as in S3.
fn parse_upload_checksum(raw: Option<&[u8]>) -> (Algo, bool) {
    let text = raw.map(String::from_utf8_lossy).unwrap_or_default();
    let mut it = text.split(' ');
    match it.next().and_then(Algo::parse) {
        Some(algo) => (algo, it.next() == Some("FULL_OBJECT") || algo == Algo::Crc64Nvme),
        None => (Algo::Crc64Nvme, true),
    }
}

/// The byte range of an `x-amz-copy-source-range` (`bytes=<first>-<last>`, both inclusive)
/// in an object of `size` bytes.
fn parse_copy_range(r: &str, size: u64) -> S3Result<std::ops::Range<u64>> {
    let bad = || {
        S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("Range specified is not valid for source object of size: {size}"),
        )
    };
    let (first, last) = r.trim().strip_prefix("bytes=").and_then(|v| v.split_once('-')).ok_or_else(bad)?;
    let first: u64 = first.trim().parse().map_err(|_| bad())?;
    let last: u64 = last.trim().parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(bad());
    }
    Ok(first..last + 1)
}

/// The S3 ETag of a multipart object: MD5 of the parts' binary MD5s, then `-` and the count.
fn multipart_etag(plan: &[Planned]) -> S3Result<String> {
    let mut md5 = Md5::new();
    for p in plan {
        let digest =
            names::unhex(&p.etag).ok_or_else(|| s3_error!(InvalidPart, "part {} has no MD5 ETag", p.number))?;
        md5.update(&digest);
    }
    Ok(format!("{}-{}", names::hex(&md5.finalize()), plan.len()))
}

impl Gateway {
    /// The directory of upload `id`, checked to belong to `key`.
    async fn upload_dir(&self, bucket: &str, key: &str, id: &str) -> S3Result<Attr> {
        check_upload_id(id)?;
        let dir = match self.client.resolve(&format!("{}/{id}", names::uploads_path(bucket))).await {
            Ok(a) if a.kind == FileKind::Dir => a,
            Ok(_) => return Err(no_such_upload(id)),
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => {
                self.bucket(bucket).await?;
                return Err(no_such_upload(id));
            }
            Err(e) => return Err(s3_error(&e, Target::Upload)),
        };
        let stored = self.client.getxattr(dir.ino, XATTR_UPLOAD_KEY).await.or_s3(Target::Upload)?;
        if stored != key.as_bytes() {
            return Err(no_such_upload(id));
        }
        // An upload is its initiator's (the owner of its directory).
        if crate::scope::current().user.as_ref().is_some_and(|u| u.uid != dir.uid) {
            return Err(access_denied(&format!("may not use upload {id}, which another user started")));
        }
        Ok(dir)
    }

    pub(crate) async fn mpu_create(&self, input: CreateMultipartUploadInput) -> S3Result<CreateMultipartUploadOutput> {
        let parsed = parse_key(&input.key)?;
        if parsed.name.is_none() {
            return Err(s3_error!(InvalidArgument, "a key ending in '/' names a directory and cannot hold data"));
        }
        let meta =
            ObjectMeta::from_request(input.content_type.as_ref(), input.metadata.as_ref())?.with_headers(KeptHeaders {
                cache_control: input.cache_control.as_ref(),
                content_disposition: input.content_disposition.as_ref(),
                content_encoding: input.content_encoding.as_ref(),
                content_language: input.content_language.as_ref(),
                expires: input.expires.as_ref(),
            });
        let algo = match &input.checksum_algorithm {
            Some(a) => Some(
                Algo::parse(a.as_str())
                    .ok_or_else(|| checksums::ChecksumError::UnknownAlgorithm(a.as_str().to_string()))?,
            ),
            None => None,
        };
        let full_object = input.checksum_type.as_ref().is_some_and(|t| t.as_str() == ChecksumType::FULL_OBJECT);
        if full_object && algo.is_some_and(|a| !a.is_crc()) {
            return Err(s3_error!(InvalidRequest, "the FULL_OBJECT checksum type needs CRC32, CRC32C or CRC64NVME"));
        }
        let bucket = self.bucket(&input.bucket).await?;
        // Parts take the layout of the directory the object will land in (or its nearest
        // existing ancestor), so the completed object has it.
        let layout =
            match crate::scope::resolve_internal(&self.client, &format!("/{}/{}", input.bucket, parsed.dir_path()))
                .await
            {
                Ok(a) if a.kind == FileKind::Dir => a,
                _ => bucket.clone(),
            };
        let uploads = self.client.mkdir_p(&names::uploads_path(&input.bucket)).await.or_s3(Target::ObjectWrite)?;
        let id = names::hex(&rand::random::<[u8; 16]>());
        if !crate::scope::current().permits(&bucket, Access::WX) {
            return Err(access_denied(&format!("may not write into bucket {:?}", input.bucket)));
        }
        let dir = crate::scope::mkdir(&self.client, uploads.ino, &id, 0o700).await.or_s3(Target::ObjectWrite)?;
        let setup = async {
            self.client.set_layout(dir.ino, layout.ec, layout.chunk_bytes, wire::LayoutCheck::Copied).await?;
            self.client.setxattr(dir.ino, XATTR_UPLOAD_KEY, input.key.as_bytes(), XattrMode::Create).await?;
            if let Some(a) = algo {
                let kind = if full_object { "FULL_OBJECT" } else { "COMPOSITE" };
                let value = format!("{} {kind}", a.name());
                self.client.setxattr(dir.ino, XATTR_UPLOAD_CHECKSUM, value.as_bytes(), XattrMode::Create).await?;
            }
            meta.store(&self.client, dir.ino).await
        };
        if let Err(e) = setup.await {
            let _ = self.client.rmdir(uploads.ino, &id).await;
            return Err(s3_error(&e, Target::ObjectWrite));
        }
        Ok(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            checksum_algorithm: input.checksum_algorithm,
            checksum_type: algo.map(|a| {
                ChecksumType::from_static(if full_object || a == Algo::Crc64Nvme {
                    ChecksumType::FULL_OBJECT
                } else {
                    ChecksumType::COMPOSITE
                })
            }),
            ..Default::default()
        })
    }

    /// The chunk size of an upload's parts, deciding it (and the upload directory's layout) if
    /// this is the first part to arrive.
    async fn upload_layout(&self, dir: &Attr, part_bytes: Option<u64>) -> Result<(), WireError> {
        let chunk = match self.client.getxattr(dir.ino, XATTR_UPLOAD_CHUNK).await {
            Ok(v) => String::from_utf8_lossy(&v).parse::<u32>().ok(),
            Err(e) if e.code == ErrorCode::NoAttr => None,
            Err(e) => return Err(e),
        };
        let chunk = match chunk {
            Some(c) => c,
            None => {
                let mine = upload_chunk_bytes(part_bytes, dir.chunk_bytes);
                match self
                    .client
                    .setxattr(dir.ino, XATTR_UPLOAD_CHUNK, mine.to_string().as_bytes(), XattrMode::Create)
                    .await
                {
                    Ok(()) => mine,
                    // Another part decided first: use its choice.
                    Err(e) if e.code == ErrorCode::Exists => {
                        let v = self.client.getxattr(dir.ino, XATTR_UPLOAD_CHUNK).await?;
                        String::from_utf8_lossy(&v).parse::<u32>().unwrap_or(dir.chunk_bytes)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        if chunk != dir.chunk_bytes {
            self.client.set_layout(dir.ino, dir.ec, chunk, wire::LayoutCheck::Copied).await?;
        }
        Ok(())
    }

    /// The checksum algorithm of an upload's parts (see [`parse_upload_checksum`]).
    async fn upload_checksum(&self, dir: &Attr) -> S3Result<(Algo, bool)> {
        let raw = match self.client.getxattr(dir.ino, XATTR_UPLOAD_CHECKSUM).await {
            Ok(v) => Some(v),
            Err(e) if e.code == ErrorCode::NoAttr => None,
            Err(e) => return Err(s3_error(&e, Target::Upload)),
        };
        Ok(parse_upload_checksum(raw.as_deref()))
    }

    pub(crate) async fn mpu_upload_part(
        &self,
        input: UploadPartInput,
        trailer_names: Option<&str>,
        trailing: Option<s3s::TrailingHeaders>,
    ) -> S3Result<UploadPartOutput> {
        if !(1..=PARTS_MAX).contains(&input.part_number) {
            return Err(s3_error!(InvalidArgument, "part numbers run from 1 to {PARTS_MAX}"));
        }
        let dir = self.upload_dir(&input.bucket, &input.key, &input.upload_id).await?;
        let (upload_algo, _) = self.upload_checksum(&dir).await?;
        let algorithm =
            input.checksum_algorithm.clone().unwrap_or_else(|| ChecksumAlgorithm::from(upload_algo.name().to_string()));
        let wanted = Wanted::from_request(
            [
                input.checksum_crc32.as_ref(),
                input.checksum_crc32c.as_ref(),
                input.checksum_crc64nvme.as_ref(),
                input.checksum_sha1.as_ref(),
                input.checksum_sha256.as_ref(),
            ],
            Some(&algorithm),
            trailer_names,
            trailing,
        )?
        // What completion combines.
        .keeping(upload_algo);
        let expected_len = input.content_length.and_then(|n| u64::try_from(n).ok());
        if expected_len.is_some_and(|n| n > PART_BYTES_MAX) {
            return Err(s3_error!(EntityTooLarge, "a part may be at most {PART_BYTES_MAX} bytes"));
        }
        self.upload_layout(&dir, expected_len).await.or_s3(Target::Upload)?;
        let spec = WriteSpec {
            expected_len,
            content_md5: input.content_md5.as_deref(),
            wanted: &wanted,
            meta: &ObjectMeta::default(),
            size_max: PART_BYTES_MAX,
            publish: Publish::Replace,
            versioned: None,
        };
        let written = self.write_object(Dest::Dir(dir.ino), &part_name(input.part_number), input.body, spec).await?;
        let (sums, _) = written.sum.fields();
        Ok(UploadPartOutput {
            e_tag: Some(ETag::Strong(written.etag)),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            ..Default::default()
        })
    }

    /// UploadPartCopy: a range of an existing object (or all of it) as a part.
    pub(crate) async fn mpu_upload_part_copy(&self, input: UploadPartCopyInput) -> S3Result<UploadPartCopyOutput> {
        if !(1..=PARTS_MAX).contains(&input.part_number) {
            return Err(s3_error!(InvalidArgument, "part numbers run from 1 to {PARTS_MAX}"));
        }
        let CopySource::Bucket { bucket: src_bucket, key: src_key, .. } = &input.copy_source else {
            return Err(s3_error!(NotImplemented, "only bucket/key copy sources are supported"));
        };
        let dir = self.upload_dir(&input.bucket, &input.key, &input.upload_id).await?;
        let (src, marker) = self.object(src_bucket, src_key).await?;
        if marker {
            return Err(no_such_key(src_key));
        }
        let raw = objmeta::load_etag(&self.client, src.ino).await.or_s3(Target::Object)?;
        let src_etag = etag_for(&src, raw.as_deref());
        if let Some(cond) = &input.copy_source_if_match {
            if !crate::conditions::etag_matches(cond, &src_etag) {
                return Err(s3_error!(
                    PreconditionFailed,
                    "x-amz-copy-source-if-match: the source's ETag is {src_etag}"
                ));
            }
        }
        if let Some(cond) = &input.copy_source_if_none_match {
            if crate::conditions::etag_matches(cond, &src_etag) {
                return Err(s3_error!(
                    PreconditionFailed,
                    "x-amz-copy-source-if-none-match: the source's ETag is {src_etag}"
                ));
            }
        }
        let range = match &input.copy_source_range {
            Some(r) => parse_copy_range(r, src.size)?,
            None => 0..src.size,
        };
        let len = range.end - range.start;
        if len > PART_BYTES_MAX {
            return Err(s3_error!(EntityTooLarge, "a part may be at most {PART_BYTES_MAX} bytes"));
        }
        self.upload_layout(&dir, Some(len)).await.or_s3(Target::Upload)?;
        let (algo, _) = self.upload_checksum(&dir).await?;
        let wanted = Wanted::compute(algo);
        let body = read_stream(self.client.clone(), src.clone(), range);
        let spec = WriteSpec {
            expected_len: Some(len),
            content_md5: None,
            wanted: &wanted,
            meta: &ObjectMeta::default(),
            size_max: PART_BYTES_MAX,
            publish: Publish::Replace,
            versioned: None,
        };
        let written = self.write_object(Dest::Dir(dir.ino), &part_name(input.part_number), Some(body), spec).await?;
        let (sums, _) = written.sum.fields();
        Ok(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(written.etag)),
                last_modified: Some(s3_time(written.attr.mtime)),
                checksum_crc32: sums.checksum_crc32,
                checksum_crc32c: sums.checksum_crc32c,
                checksum_crc64nvme: sums.checksum_crc64nvme,
                checksum_sha1: sums.checksum_sha1,
                checksum_sha256: sums.checksum_sha256,
            }),
            ..Default::default()
        })
    }

    pub(crate) async fn mpu_list_parts(&self, input: ListPartsInput) -> S3Result<ListPartsOutput> {
        let dir = self.upload_dir(&input.bucket, &input.key, &input.upload_id).await?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = input.max_parts.unwrap_or(LIST_ENTRIES_MAX).clamp(0, LIST_ENTRIES_MAX) as usize;
        let mut parts: Vec<(i32, Attr)> = self
            .client
            .readdir(dir.ino)
            .await
            .or_s3(Target::Upload)?
            .into_iter()
            .filter(|e| e.attr.kind == FileKind::File)
            .filter_map(|e| Some((e.name.parse::<i32>().ok()?, e.attr)))
            .filter(|(n, _)| *n > marker)
            .collect();
        parts.sort_by_key(|(n, _)| *n);
        let truncated = parts.len() > max;
        parts.truncate(max);
        let mut out = Vec::with_capacity(parts.len());
        for (n, attr) in &parts {
            let raw = objmeta::load_etag(&self.client, attr.ino).await.or_s3(Target::Upload)?;
            out.push(Part {
                e_tag: Some(ETag::Strong(etag_for(attr, raw.as_deref()))),
                last_modified: Some(s3_time(attr.mtime)),
                part_number: Some(*n),
                size: Some(attr.size as i64),
                ..Default::default()
            });
        }
        Ok(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated { parts.last().map(|(n, _)| *n) } else { None },
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            parts: Some(out),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            ..Default::default()
        })
    }

    pub(crate) async fn mpu_list_uploads(
        &self,
        input: ListMultipartUploadsInput,
    ) -> S3Result<ListMultipartUploadsOutput> {
        let bucket = self.bucket(&input.bucket).await?;
        if !crate::scope::current().permits(&bucket, Access::RX) {
            return Err(access_denied(&format!("may not list bucket {:?}", input.bucket)));
        }
        let entries = match self.client.resolve(&names::uploads_path(&input.bucket)).await {
            Ok(a) if a.kind == FileKind::Dir => self.client.readdir(a.ino).await.or_s3(Target::Upload)?,
            Ok(_) => Vec::new(),
            Err(e) if e.code == ErrorCode::NotFound => Vec::new(),
            Err(e) => return Err(s3_error(&e, Target::Upload)),
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let mut uploads: Vec<(String, String, Attr)> = Vec::new();
        for e in entries.into_iter().filter(|e| e.attr.kind == FileKind::Dir) {
            let key = match self.client.getxattr(e.attr.ino, XATTR_UPLOAD_KEY).await {
                Ok(k) => String::from_utf8_lossy(&k).into_owned(),
                Err(_) => continue, // Being created or removed.
            };
            if key.starts_with(&prefix) {
                uploads.push((key, e.name, e.attr));
            }
        }
        uploads.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.upload_id_marker.clone().unwrap_or_default();
        uploads.retain(|(k, id, _)| {
            !key_marker.is_empty() && (k.as_str(), id.as_str()) > (key_marker.as_str(), id_marker.as_str())
                || key_marker.is_empty()
        });
        let max = input.max_uploads.unwrap_or(LIST_ENTRIES_MAX).clamp(0, LIST_ENTRIES_MAX) as usize;
        let truncated = uploads.len() > max;
        uploads.truncate(max);
        let last = uploads.last().map(|(k, id, _)| (k.clone(), id.clone()));
        Ok(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: if truncated { last.as_ref().map(|l| l.0.clone()) } else { None },
            next_upload_id_marker: if truncated { last.map(|l| l.1) } else { None },
            uploads: Some(
                uploads
                    .into_iter()
                    .map(|(key, id, attr)| MultipartUpload {
                        initiated: Some(s3_time(attr.crtime)),
                        key: Some(key),
                        upload_id: Some(id),
                        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        })
    }

    pub(crate) async fn mpu_abort(&self, input: AbortMultipartUploadInput) -> S3Result<AbortMultipartUploadOutput> {
        let dir = self.upload_dir(&input.bucket, &input.key, &input.upload_id).await?;
        let lock = self.completion_lock(&input.upload_id);
        let _guard = lock.lock().await;
        self.remove_upload(&input.bucket, &input.upload_id, dir.ino).await.or_s3(Target::Upload)?;
        Ok(AbortMultipartUploadOutput::default())
    }

    fn completion_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.completing.lock();
        // Forget locks nobody holds, so the table stays as small as the completions running.
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry(id.to_string()).or_default().clone()
    }

    /// Deletes an upload directory and everything in it.
    async fn remove_upload(&self, bucket: &str, id: &str, dir: Ino) -> Result<(), WireError> {
        for e in self.client.readdir(dir).await? {
            match self.client.unlink(dir, &e.name).await {
                Ok(()) => {}
                Err(err) if err.code == ErrorCode::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        let uploads = self.client.resolve(&names::uploads_path(bucket)).await?;
        match self.client.rmdir(uploads.ino, id).await {
            Ok(()) => Ok(()),
            Err(e) if e.code == ErrorCode::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes every upload of a bucket (after the bucket itself was deleted).
    pub(crate) async fn remove_uploads_of(&self, bucket: &str) {
        let Ok(uploads) = self.client.resolve(&names::uploads_path(bucket)).await else { return };
        for e in self.client.readdir(uploads.ino).await.unwrap_or_default() {
            if let Err(err) = self.remove_upload(bucket, &e.name, e.attr.ino).await {
                tracing::warn!("cannot remove upload {} of deleted bucket {bucket}: {err}", e.name);
            }
        }
        let root = format!("/{}/{}", names::STATE_DIR, names::UPLOADS_DIR);
        if let Ok(root) = crate::scope::resolve_internal(&self.client, &root).await {
            let _ = self.client.rmdir(root.ino, bucket).await;
        }
    }

    /// The plan of a completion: the one an interrupted completion left, or a new one built
    /// from the parts present (checked against the request) and written down.
    async fn completion_plan(
        &self,
        dir: &Attr,
        dir_path: &str,
        requested: &[CompletedPart],
        algo: Algo,
    ) -> S3Result<Vec<Planned>> {
        let mut wanted = Vec::with_capacity(requested.len());
        for p in requested {
            let (Some(n), Some(etag)) = (p.part_number, p.e_tag.as_ref()) else {
                return Err(s3_error!(InvalidPart, "every part needs a part number and an ETag"));
            };
            if wanted.last().is_some_and(|(last, _)| *last >= n) {
                return Err(s3_error!(InvalidPartOrder, "parts must be listed in ascending order of part number"));
            }
            wanted.push((n, etag.value().trim_matches('"').to_string()));
        }
        if wanted.is_empty() {
            return Err(s3_error!(MalformedXML, "a completion must list at least one part"));
        }
        match self.client.lookup(dir.ino, PLAN).await {
            Ok(_) => {
                let text = self.client.read_file(&format!("{dir_path}/{PLAN}")).await.or_s3(Target::Upload)?;
                let plan = parse_plan(&String::from_utf8_lossy(&text))
                    .ok_or_else(|| s3_error!(InternalError, "the saved completion plan of this upload is damaged"))?;
                let same = plan.len() == wanted.len()
                    && plan.iter().zip(&wanted).all(|(p, (n, e))| p.number == *n && &p.etag == e);
                if !same {
                    return Err(s3_error!(
                        InvalidPart,
                        "an interrupted completion of this upload listed other parts; retry it with the same list"
                    ));
                }
                return Ok(plan);
            }
            Err(e) if e.code == ErrorCode::NotFound => {}
            Err(e) => return Err(s3_error(&e, Target::Upload)),
        }
        let mut plan = Vec::with_capacity(wanted.len());
        for (i, (n, etag)) in wanted.iter().enumerate() {
            let attr = match self.client.lookup(dir.ino, &part_name(*n)).await {
                Ok(a) => a,
                Err(e) if e.code == ErrorCode::NotFound => {
                    return Err(s3_error!(InvalidPart, "part {n} was not uploaded"))
                }
                Err(e) => return Err(s3_error(&e, Target::Upload)),
            };
            let raw = objmeta::load_etag(&self.client, attr.ino).await.or_s3(Target::Upload)?;
            let have = etag_for(&attr, raw.as_deref());
            if &have != etag {
                return Err(s3_error!(InvalidPart, "part {n} has ETag {have}, not {etag}"));
            }
            let sum = match self.client.getxattr(attr.ino, XATTR_CHECKSUM).await {
                Ok(raw) => Sum::from_xattr(&raw, attr.data_version),
                Err(e) if e.code == ErrorCode::NoAttr => None,
                Err(e) => return Err(s3_error(&e, Target::Upload)),
            };
            if let Some(given) = requested_part_sum(&requested[i], algo) {
                if sum.as_ref().is_none_or(|s| s.algo != algo || s.value != given.trim()) {
                    return Err(s3_error!(InvalidPart, "part {n}'s {} is not the one given", algo.name()));
                }
            }
            if i + 1 < wanted.len() && attr.size < PART_BYTES_MIN {
                return Err(s3_error!(
                    EntityTooSmall,
                    "part {n} is {} bytes; every part but the last must be at least {PART_BYTES_MIN}",
                    attr.size
                ));
            }
            let sum = sum.map(|s| format!("{}:{}", s.algo.name(), s.value));
            plan.push(Planned { number: *n, size: attr.size, etag: have, sum });
        }
        self.client
            .write_file(&format!("{dir_path}/{PLAN}"), plan_text(&plan).as_bytes())
            .await
            .or_s3(Target::Upload)?;
        Ok(plan)
    }

    /// Completes an upload; also returns how many bytes had to be copied (0 when every part
    /// could be moved).
    pub(crate) async fn mpu_complete(
        &self,
        input: CompleteMultipartUploadInput,
    ) -> S3Result<(CompleteMultipartUploadOutput, u64)> {
        let parsed = parse_key(&input.key)?;
        let Some(name) = parsed.name else { return Err(no_such_key(&input.key)) };
        let lock = self.completion_lock(&input.upload_id);
        let _guard = lock.lock().await;
        let dir = self.upload_dir(&input.bucket, &input.key, &input.upload_id).await?;
        let publish = self
            .write_condition(&input.bucket, &input.key, input.if_match.as_ref(), input.if_none_match.as_ref())
            .await?;
        let dir_path = format!("{}/{}", names::uploads_path(&input.bucket), input.upload_id);
        let versioned = self.versioned_write(&input.bucket, &input.key).await?;
        let (etag, sum, copied) =
            self.complete_in(&input, &parsed.dirs, name, &dir, &dir_path, publish, versioned.as_ref()).await?;
        if let Err(e) = self.remove_upload(&input.bucket, &input.upload_id, dir.ino).await {
            tracing::warn!("upload {} completed but its directory could not be removed: {e}", input.upload_id);
        }
        tracing::debug!(
            "completed upload {} of {}/{}: {copied} bytes copied",
            input.upload_id,
            input.bucket,
            input.key
        );
        let (sums, kind) = sum.map(|s| s.fields()).unzip();
        let sums = sums.unwrap_or_default();
        let output = CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(ETag::Strong(etag)),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            checksum_type: kind,
            version_id: crate::versions::shown_id(versioned.as_ref()),
            ..Default::default()
        };
        Ok((output, copied))
    }

    /// Assembles the parts and moves the result onto the key as `publish` allows; returns the
    /// ETag, the checksum and how many bytes had to be copied.
    async fn complete_in(
        &self,
        input: &CompleteMultipartUploadInput,
        dirs: &[&str],
        name: &str,
        dir: &Attr,
        dir_path: &str,
        publish: Publish,
        versioned: Option<&crate::versions::Versioned>,
    ) -> S3Result<(String, Option<Sum>, u64)> {
        let requested = input.multipart_upload.as_ref().and_then(|m| m.parts.clone()).unwrap_or_default();
        let (algo, full_object) = self.upload_checksum(dir).await?;
        let plan = self.completion_plan(dir, dir_path, &requested, algo).await?;
        let etag = multipart_etag(&plan)?;
        let part_sums: Vec<(Option<Sum>, u64)> = plan.iter().map(|p| (p.sum(), p.size)).collect();
        let sum = checksums::multipart_sum(algo, full_object, &part_sums);
        // A whole-object value given with the completion must be the one the parts make.
        let given = match algo {
            Algo::Crc32 => input.checksum_crc32.as_ref(),
            Algo::Crc32c => input.checksum_crc32c.as_ref(),
            Algo::Crc64Nvme => input.checksum_crc64nvme.as_ref(),
            Algo::Sha1 => input.checksum_sha1.as_ref(),
            Algo::Sha256 => input.checksum_sha256.as_ref(),
        };
        if let Some(given) = given {
            if sum.as_ref().is_none_or(|s| s.wire_value() != given.trim()) {
                return Err(checksums::ChecksumError::Mismatch(algo).into());
            }
        }
        let mut assembly =
            crate::scope::create(&self.client, dir.ino, ASSEMBLY, 0o644, false).await.or_s3(Target::Upload)?;
        let chunk_bytes = u64::from(assembly.chunk_bytes);
        let mut offset = 0u64;
        let mut copied = 0u64;
        for p in &plan {
            let part = match self.client.lookup(dir.ino, &part_name(p.number)).await {
                Ok(a) => a,
                // Moved by an earlier, interrupted completion.
                Err(e) if e.code == ErrorCode::NotFound => {
                    offset += p.size;
                    continue;
                }
                Err(e) => return Err(s3_error(&e, Target::Upload)),
            };
            let movable = assembly.size == offset
                && offset.is_multiple_of(chunk_bytes)
                && part.chunk_bytes == assembly.chunk_bytes
                && part.ec == assembly.ec
                && part.size == p.size;
            if movable {
                let op = MetaOp::AppendFile {
                    target: assembly.ino,
                    parent: dir.ino,
                    name: part_name(p.number),
                    mtime: Timestamp::now(),
                };
                assembly = match self.client.meta(op).await.or_s3(Target::Upload)? {
                    MetaReply::Attr(a) => a,
                    other => return Err(s3_error!(InternalError, "unexpected reply to AppendFile: {other:?}")),
                };
            } else {
                assembly = self.copy_part(&assembly, &part, offset).await.or_s3(Target::Upload)?;
                copied += part.size;
                match self.client.unlink(dir.ino, &part_name(p.number)).await {
                    Ok(()) => {}
                    Err(e) if e.code == ErrorCode::NotFound => {}
                    Err(e) => return Err(s3_error(&e, Target::Upload)),
                }
            }
            offset += p.size;
        }
        if assembly.size != offset {
            return Err(s3_error!(InternalError, "assembled {} bytes where the parts hold {offset}", assembly.size));
        }
        objmeta::store_etag(&self.client, assembly.ino, &etag, assembly.data_version).await.or_s3(Target::Upload)?;
        if let Some(sum) = &sum {
            let value = sum.to_xattr(assembly.data_version);
            self.client
                .setxattr(assembly.ino, XATTR_CHECKSUM, value.as_bytes(), XattrMode::Upsert)
                .await
                .or_s3(Target::Upload)?;
        }
        let meta = objmeta::load(&self.client, dir.ino).await.or_s3(Target::Upload)?.meta;
        meta.store(&self.client, assembly.ino).await.or_s3(Target::Upload)?;
        let mut attempt = 0;
        loop {
            let parent = self.ensure_dirs(&input.bucket, dirs).await?;
            match self.publish(dir.ino, ASSEMBLY, parent, name, publish, versioned).await {
                Ok(()) => return Ok((etag, sum, copied)),
                Err(PublishError::Wire(e)) if matches!(e.code, ErrorCode::IsDir | ErrorCode::NotEmpty) => {
                    return Err(conflict(format!("{} is a prefix holding other objects", input.key)))
                }
                // A DELETE removed the directory it emptied in between: make it again.
                Err(PublishError::Wire(e))
                    if e.code == ErrorCode::NotFound && attempt < RENAME_RACE_RETRY_COUNT_MAX =>
                {
                    attempt += 1
                }
                Err(e) => return Err(publish_error(e)),
            }
        }
    }

    /// Copies a part's bytes into the assembly at `offset` (when its chunks cannot be moved).
    async fn copy_part(&self, assembly: &Attr, part: &Attr, offset: u64) -> Result<Attr, WireError> {
        let mut from = self.client.open_with_attr(part.clone())?;
        let mut to = self.client.open(assembly.ino).await?;
        let mut pos = 0u64;
        while pos < part.size {
            let data = from.read_at(pos, (part.size - pos).min(COPY_PIECE_BYTES_MAX) as usize).await?;
            if data.is_empty() {
                return Err(WireError::new(ErrorCode::Io, format!("part file {} shrank while being copied", part.ino)));
            }
            to.write_at(offset + pos, &data).await?;
            pos += data.len() as u64;
        }
        to.flush().await?;
        let attr = to.attr().clone();
        to.close().await?;
        Ok(attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_chunk_size_divides_common_part_sizes() {
        let mib = 1u64 << 20;
        assert_eq!(upload_chunk_bytes(Some(8 * mib), 4 << 20), 4 << 20);
        assert_eq!(upload_chunk_bytes(Some(5 * mib), 4 << 20), 1 << 20);
        assert_eq!(upload_chunk_bytes(Some(15 * mib), 4 << 20), 1 << 20);
        assert_eq!(upload_chunk_bytes(Some(16 * mib), 4 << 20), 4 << 20);
        assert_eq!(upload_chunk_bytes(Some(5 * mib + 1), 4 << 20), 4 << 20);
        assert_eq!(upload_chunk_bytes(None, 4 << 20), 4 << 20);
        assert_eq!(upload_chunk_bytes(Some(12 * mib), 8 << 20), 4 << 20);
    }

    #[test]
    fn multipart_etag_follows_s3() {
        // Two parts whose MD5s are those of "" and "a": md5(md5("") ++ md5("a")) - 2.
        let plan = vec![
            Planned { number: 1, size: 0, etag: "d41d8cd98f00b204e9800998ecf8427e".into(), sum: None },
            Planned { number: 2, size: 1, etag: "0cc175b9c0f1b6a831c399e269772661".into(), sum: None },
        ];
        let etag = multipart_etag(&plan).expect("hex etags");
        assert!(etag.ends_with("-2") && etag.len() == 34, "{etag}");
        assert_eq!(parse_plan(&plan_text(&plan)), Some(plan));
    }

    #[test]
    fn copy_source_ranges_are_inclusive_and_inside_the_object() {
        assert_eq!(parse_copy_range("bytes=0-9", 10).expect("valid"), 0..10);
        assert_eq!(parse_copy_range("bytes=5-5", 10).expect("valid"), 5..6);
        for bad in ["bytes=0-10", "bytes=5-4", "0-4", "bytes=-4", "bytes=a-b", "bytes=3-"] {
            assert!(parse_copy_range(bad, 10).is_err(), "{bad}");
        }
    }

    #[test]
    fn plans_keep_part_checksums_and_read_old_plans() {
        let plan = vec![
            Planned { number: 1, size: 5, etag: "e1".into(), sum: Some("CRC32:AAAAAA==".into()) },
            Planned { number: 2, size: 6, etag: "e2".into(), sum: None },
        ];
        assert_eq!(parse_plan(&plan_text(&plan)), Some(plan.clone()));
        assert_eq!(plan[0].sum().map(|s| s.algo), Some(Algo::Crc32));
        let old = parse_plan("1 5 e1\n").expect("old plan");
        assert_eq!(old[0].sum, None);
    }

    #[test]
    fn uploads_without_an_algorithm_get_a_full_object_crc64nvme() {
        assert_eq!(parse_upload_checksum(None), (Algo::Crc64Nvme, true));
        assert_eq!(parse_upload_checksum(Some(b"CRC32 COMPOSITE")), (Algo::Crc32, false));
        assert_eq!(parse_upload_checksum(Some(b"CRC32C FULL_OBJECT")), (Algo::Crc32c, true));
        assert_eq!(parse_upload_checksum(Some(b"SHA256 COMPOSITE")), (Algo::Sha256, false));
    }
}
