//! Bucket versioning: every write and delete of a key in a versioned bucket keeps what it
//! replaces, as S3 does, so a dataset can be read as it was and a mistaken overwrite or delete
//! undone.
//!
//! # Layout
//!
//! - A bucket's state is the extended attribute `user.s3.versioning` of its directory:
//!   `Enabled` or `Suspended`; absent for a bucket whose versioning was never turned on (then
//!   nothing here happens and objects have the version id `null`).
//! - The **current version** of a key is its file at the key, as for any object, so the mount
//!   and NFS see it. Its id is the attribute `user.s3.version-id`; a file without one (written
//!   before versioning was enabled, while it was suspended, or through the mount) is `null`.
//! - **Noncurrent versions and delete markers** are files in the hidden version store
//!   `/.trove-s3/versions/<bucket>/<key dir>/<version id>`, where the key dir is named by the
//!   MD5 of the key (hex) and carries the key in `user.s3.key`. A replaced version is moved
//!   there whole (a rename: no data is copied, and its S3 metadata goes with it); a delete
//!   marker is an empty file with `user.s3.delete-marker`, its mtime the time of the delete.
//! - **Version ids** are 24 hex digits: the nanoseconds since 1970 when the version was made,
//!   then 32 random bits, so ids sort in the order versions were made, newest last.
//!
//! # Invariants
//!
//! - At most one version of a key is `null`.
//! - If a key's newest version is an object, it is the file at the key: deleting the current
//!   version (by id), or the delete marker that hid the newest object, moves the next newest
//!   object back to the key.
//! - A write replaces the current version with one exchange of names (`RENAME_EXCHANGE`), so
//!   the key is never absent; the replaced file is then moved into the store. Of two concurrent
//!   writes each keeps the version it replaced, so no version is lost.
//!
//! # Deliberately absent
//!
//! Writes and deletes through the mount or NFS replace and remove files without keeping
//! versions (those protocols have no versions to show); snapshots cover them. Lifecycle rules
//! that expire noncurrent versions, MFA delete and object lock are not implemented. Noncurrent
//! versions live outside the bucket's directory, so a directory quota on the bucket does not
//! count them. A page of ListObjectVersions reads the names and keys of all of the bucket's key
//! dirs (one attribute each) besides the page's own objects: it costs in proportion to the keys
//! with noncurrent versions.

use crate::errors::{s3_error, OrS3, Target};
use crate::gateway::Gateway;
use crate::list::{self, Item, Query, KEYS_PER_PAGE_MAX};
use crate::names::{self, parse_key};
use crate::objmeta::{self, etag_for, s3_time};
use client::{Attr, ErrorCode, FileKind, Ino, WireError};
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use std::collections::BTreeMap;
use wire::{RenameMode, XattrMode};

/// Attribute of a bucket's directory: its versioning state.
pub const XATTR_VERSIONING: &str = "user.s3.versioning";
/// Attribute of an object's file: its version id (absent: `null`).
pub const XATTR_VERSION_ID: &str = "user.s3.version-id";
/// Attribute of a file in the version store that is a delete marker.
pub const XATTR_DELETE_MARKER: &str = "user.s3.delete-marker";
/// Attribute of a key dir in the version store: the key whose versions it holds.
pub const XATTR_KEY: &str = "user.s3.key";
/// Subdirectory of [`names::STATE_DIR`] holding the version stores, one per bucket.
pub const VERSIONS_DIR: &str = "versions";
/// The version id of an object written while versioning was off or suspended.
pub const NULL_VERSION: &str = "null";

/// A bucket's versioning state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Never enabled: writes replace, deletes remove.
    Off,
    Enabled,
    Suspended,
}

/// A write of a key in a bucket whose versioning is on or suspended: where what it replaces
/// goes, and the id the new version gets.
#[derive(Clone, Debug)]
pub(crate) struct Versioned {
    pub bucket: String,
    pub key: String,
    pub mode: Mode,
    /// The new version's id ([`NULL_VERSION`] while suspended).
    pub id: String,
}

/// The absolute path of a bucket's version store, in the namespace of the request being
/// answered.
pub fn versions_path(bucket: &str) -> String {
    crate::scope::current().path(&format!("/{}/{VERSIONS_DIR}/{bucket}", names::STATE_DIR))
}

/// The name of the key dir holding `key`'s versions.
pub fn key_dir_name(key: &str) -> String {
    names::hex(&Md5::digest(key.as_bytes()))
}

/// A new version id: the time in nanoseconds, then 32 random bits (see the module's text).
pub fn new_version_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("{nanos:016x}{:08x}", rand::random::<u32>())
}

/// Whether `id` can be a version id of ours (S3 answers a malformed one with 400).
pub fn valid_version_id(id: &str) -> bool {
    id == NULL_VERSION || (id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn invalid_version(id: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, format!("Invalid version id specified: {id:?}"))
}

fn no_such_version(key: &str, id: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::NoSuchVersion,
        format!("The specified version does not exist: version {id} of {key}"),
    )
}

/// The version id recorded on `ino` ([`NULL_VERSION`] if none).
async fn version_of(client: &client::Client, ino: Ino) -> Result<String, WireError> {
    match client.getxattr(ino, XATTR_VERSION_ID).await {
        Ok(v) => Ok(String::from_utf8_lossy(&v).into_owned()),
        Err(e) if e.code == ErrorCode::NoAttr => Ok(NULL_VERSION.to_string()),
        Err(e) => Err(e),
    }
}

async fn is_delete_marker(client: &client::Client, ino: Ino) -> Result<bool, WireError> {
    match client.getxattr(ino, XATTR_DELETE_MARKER).await {
        Ok(_) => Ok(true),
        Err(e) if e.code == ErrorCode::NoAttr => Ok(false),
        Err(e) => Err(e),
    }
}

/// One version of a key as a reader sees it.
#[derive(Debug)]
pub(crate) struct Version {
    pub id: String,
    pub attr: Attr,
    pub delete_marker: bool,
}

impl Gateway {
    /// The versioning state of `bucket` (whose directory is `bucket_ino`).
    pub(crate) async fn versioning_of(&self, bucket_ino: Ino) -> S3Result<Mode> {
        match self.client.getxattr(bucket_ino, XATTR_VERSIONING).await {
            Ok(v) if v == b"Enabled" => Ok(Mode::Enabled),
            Ok(v) if v == b"Suspended" => Ok(Mode::Suspended),
            Ok(_) | Err(WireError { code: ErrorCode::NoAttr, .. }) => Ok(Mode::Off),
            Err(e) => Err(s3_error(&e, Target::Bucket)),
        }
    }

    /// What a write of `key` in `bucket` keeps: `None` when versioning was never enabled.
    pub(crate) async fn versioned_write(&self, bucket: &str, key: &str) -> S3Result<Option<Versioned>> {
        if key.ends_with('/') {
            return Ok(None);
        }
        let bucket_attr = self.bucket(bucket).await?;
        self.versioned_write_in(bucket, bucket_attr.ino, key).await
    }

    /// [`Gateway::versioned_write`] for a caller that has the bucket's directory already.
    pub(crate) async fn versioned_write_in(
        &self,
        bucket: &str,
        bucket_ino: Ino,
        key: &str,
    ) -> S3Result<Option<Versioned>> {
        if key.ends_with('/') {
            // Directory markers are directories, not versions of anything.
            return Ok(None);
        }
        let mode = self.versioning_of(bucket_ino).await?;
        let id = match mode {
            Mode::Off => return Ok(None),
            Mode::Enabled => new_version_id(),
            Mode::Suspended => NULL_VERSION.to_string(),
        };
        Ok(Some(Versioned { bucket: bucket.to_string(), key: key.to_string(), mode, id }))
    }

    /// The key dir of `key`, created (with its store) when `create`; `None` if absent.
    async fn key_dir(&self, bucket: &str, key: &str, create: bool) -> S3Result<Option<Ino>> {
        let store = match self.client.resolve(&versions_path(bucket)).await {
            Ok(a) => a.ino,
            Err(e) if e.code == ErrorCode::NotFound && create => {
                self.client.mkdir_p(&versions_path(bucket)).await.or_s3(Target::ObjectWrite)?.ino
            }
            Err(e) if e.code == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(s3_error(&e, Target::Object)),
        };
        let name = key_dir_name(key);
        let dir = match self.client.lookup(store, &name).await {
            Ok(a) => a,
            Err(e) if e.code == ErrorCode::NotFound && create => match self.client.mkdir(store, &name, 0o755).await {
                Ok(a) => {
                    self.client
                        .setxattr(a.ino, XATTR_KEY, key.as_bytes(), XattrMode::Upsert)
                        .await
                        .or_s3(Target::ObjectWrite)?;
                    a
                }
                Err(e) if e.code == ErrorCode::Exists => {
                    self.client.lookup(store, &name).await.or_s3(Target::Object)?
                }
                Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
            },
            Err(e) if e.code == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(s3_error(&e, Target::Object)),
        };
        match self.client.getxattr(dir.ino, XATTR_KEY).await {
            Ok(k) if k == key.as_bytes() => Ok(Some(dir.ino)),
            // Made by a writer that has not labelled it yet.
            Err(e) if e.code == ErrorCode::NoAttr => {
                self.client.setxattr(dir.ino, XATTR_KEY, key.as_bytes(), XattrMode::Upsert).await.or_s3(Target::Object)?;
                Ok(Some(dir.ino))
            }
            Ok(other) => Err(s3_error!(
                InternalError,
                "the version store of {key:?} is held by key {:?} (an MD5 collision); versions of this key cannot be kept",
                String::from_utf8_lossy(&other)
            )),
            Err(e) => Err(s3_error(&e, Target::Object)),
        }
    }

    /// Moves the file `name` in `parent` (a version just replaced or deleted) into the store
    /// under its own id; a `null` version is dropped instead while versioning is suspended (a
    /// key has one null version).
    pub(crate) async fn keep_version(&self, parent: Ino, name: &str, v: &Versioned) -> S3Result<()> {
        let attr = self.client.lookup(parent, name).await.or_s3(Target::ObjectWrite)?;
        let id = version_of(&self.client, attr.ino).await.or_s3(Target::ObjectWrite)?;
        if id == NULL_VERSION && v.mode == Mode::Suspended {
            return match self.client.unlink(parent, name).await {
                Ok(()) => Ok(()),
                Err(e) if e.code == ErrorCode::NotFound => Ok(()),
                Err(e) => Err(s3_error(&e, Target::ObjectWrite)),
            };
        }
        let dir = self.key_dir(&v.bucket, &v.key, true).await?.expect("created");
        // Plain rename: an older null version in the store is replaced by this one.
        self.client.rename(parent, name, dir, &id).await.or_s3(Target::ObjectWrite)
    }

    /// Drops the null version from the store (a null version was just made current or a null
    /// delete marker is about to be written).
    async fn drop_stored_null(&self, bucket: &str, key: &str) -> S3Result<()> {
        if let Some(dir) = self.key_dir(bucket, key, false).await? {
            match self.client.unlink(dir, NULL_VERSION).await {
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
            }
        }
        Ok(())
    }

    /// Labels the finished file `from_name` in `from_parent` with the new version's id (a
    /// suspended bucket's `null` version carries none).
    pub(crate) async fn label_version(
        &self,
        from_parent: Ino,
        from_name: &str,
        v: &Versioned,
    ) -> Result<(), WireError> {
        if v.mode == Mode::Enabled {
            let new = self.client.lookup(from_parent, from_name).await?;
            self.client.setxattr(new.ino, XATTR_VERSION_ID, v.id.as_bytes(), XattrMode::Upsert).await?;
        }
        Ok(())
    }

    /// After a write took its key in a suspended bucket: it is now the key's null version, so
    /// a null version in the store goes (a key has one). A failure is logged, not returned: the
    /// write happened.
    pub(crate) async fn after_version_published(&self, v: Option<&Versioned>) {
        if let Some(v) = v.filter(|v| v.mode == Mode::Suspended) {
            if let Err(e) = self.drop_stored_null(&v.bucket, &v.key).await {
                tracing::warn!("the older null version of {} could not be removed: {e}", v.key);
            }
        }
    }

    /// DELETE without a version id in a versioned bucket: the current version (if any) goes
    /// into the store and a delete marker becomes the newest version. Returns the marker's id.
    pub(crate) async fn delete_with_marker(&self, v: &Versioned, parent: Option<Ino>, name: &str) -> S3Result<String> {
        if let Some(parent) = parent {
            let aside = client::tmp_name();
            match self.client.rename_mode(parent, name, parent, &aside, RenameMode::NoReplace).await {
                Ok(()) => self.keep_version(parent, &aside, v).await?,
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::IsDir | ErrorCode::NotDir) => {}
                Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
            }
        }
        let dir = self.key_dir(&v.bucket, &v.key, true).await?.expect("created");
        let tmp = client::tmp_name();
        let marker = self.client.create(dir, &tmp, 0o644, true).await.or_s3(Target::ObjectWrite)?;
        let labelled = async {
            self.client.setxattr(marker.ino, XATTR_DELETE_MARKER, b"1", XattrMode::Upsert).await?;
            if v.mode == Mode::Enabled {
                self.client.setxattr(marker.ino, XATTR_VERSION_ID, v.id.as_bytes(), XattrMode::Upsert).await?;
            }
            self.client.rename(dir, &tmp, dir, &v.id).await
        }
        .await;
        if let Err(e) = labelled {
            let _ = self.client.unlink(dir, &tmp).await;
            return Err(s3_error(&e, Target::ObjectWrite));
        }
        Ok(v.id.clone())
    }

    /// The stored (noncurrent) versions of `key`, newest first.
    async fn stored_versions(&self, bucket: &str, key: &str) -> S3Result<Vec<Version>> {
        match self.key_dir(bucket, key, false).await? {
            Some(dir) => self.stored_versions_in(dir).await,
            None => Ok(Vec::new()),
        }
    }

    /// The versions in key dir `dir`, newest first.
    async fn stored_versions_in(&self, dir: Ino) -> S3Result<Vec<Version>> {
        let mut out = Vec::new();
        for entry in self.client.readdir(dir).await.or_s3(Target::Object)? {
            if entry.attr.kind != FileKind::File || !valid_version_id(&entry.name) {
                continue;
            }
            let delete_marker = is_delete_marker(&self.client, entry.attr.ino).await.or_s3(Target::Object)?;
            out.push(Version { id: entry.name, attr: entry.attr, delete_marker });
        }
        sort_newest_first(&mut out);
        Ok(out)
    }

    /// The current version of `key` (the file at the key) with its id, if there is one.
    async fn current_version(&self, bucket: &str, key: &str) -> S3Result<Option<Version>> {
        match self.object(bucket, key).await {
            Ok((attr, false)) => {
                let id = version_of(&self.client, attr.ino).await.or_s3(Target::Object)?;
                Ok(Some(Version { id, attr, delete_marker: false }))
            }
            Ok((_, true)) => Ok(None),
            Err(e) if *e.code() == S3ErrorCode::NoSuchKey => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Version `id` of `key`: the current one or a stored one. A delete marker is refused as
    /// S3 refuses it (405 with `x-amz-delete-marker`), a missing version with NoSuchVersion.
    pub(crate) async fn version(&self, bucket: &str, key: &str, id: &str) -> S3Result<Version> {
        if !valid_version_id(id) {
            return Err(invalid_version(id));
        }
        parse_key(key)?;
        self.bucket(bucket).await?;
        if let Some(current) = self.current_version(bucket, key).await? {
            if current.id == id {
                return Ok(current);
            }
        }
        let Some(dir) = self.key_dir(bucket, key, false).await? else { return Err(no_such_version(key, id)) };
        let attr = match self.client.lookup(dir, id).await {
            Ok(a) => a,
            Err(e) if e.code == ErrorCode::NotFound => return Err(no_such_version(key, id)),
            Err(e) => return Err(s3_error(&e, Target::Object)),
        };
        // A kept version keeps its file's owner and mode: it is read as that file would be.
        if !crate::scope::current().permits(&attr, wire::identity::Access::R) {
            return Err(crate::gateway::access_denied(&format!("may not read version {id} of {key:?}")));
        }
        if is_delete_marker(&self.client, attr.ino).await.or_s3(Target::Object)? {
            let mut e = S3Error::with_message(
                S3ErrorCode::MethodNotAllowed,
                format!("The specified method is not allowed against this resource: version {id} of {key} is a delete marker"),
            );
            e.set_headers(delete_marker_headers(id));
            return Err(e);
        }
        Ok(Version { id: id.to_string(), attr, delete_marker: false })
    }

    /// What a GET or HEAD reads: version `id` when one is asked for, else the object at the
    /// key; with the id asked for. A missing key says whether a delete marker hides it.
    pub(crate) async fn object_to_read(
        &self,
        bucket: &str,
        key: &str,
        id: Option<&str>,
    ) -> S3Result<(Attr, bool, Option<String>)> {
        match id {
            Some(id) => {
                let v = self.version(bucket, key, id).await?;
                Ok((v.attr, false, Some(v.id)))
            }
            None => match self.object(bucket, key).await {
                Ok((attr, marker)) => Ok((attr, marker, None)),
                Err(e) => Err(self.explain_missing(bucket, key, e).await),
            },
        }
    }

    /// A GET or HEAD of `key` found nothing: if its newest version is a delete marker, the
    /// NoSuchKey answer says so (`x-amz-delete-marker`, `x-amz-version-id`), as S3's does.
    pub(crate) async fn explain_missing(&self, bucket: &str, key: &str, mut err: S3Error) -> S3Error {
        if *err.code() != S3ErrorCode::NoSuchKey {
            return err;
        }
        if let Ok(stored) = self.stored_versions(bucket, key).await {
            if let Some(newest) = stored.first().filter(|v| v.delete_marker) {
                err.set_headers(delete_marker_headers(&newest.id));
            }
        }
        err
    }

    /// DELETE of version `id` of `key`: removes it for good. Returns whether it was a delete
    /// marker. If the key's newest version is then an object, it becomes current.
    pub(crate) async fn delete_version(&self, bucket: &str, key: &str, id: &str) -> S3Result<bool> {
        if !valid_version_id(id) {
            return Err(invalid_version(id));
        }
        let parsed = parse_key(key)?;
        let Some(name) = parsed.name else { return Err(invalid_version(id)) };
        let bucket_attr = self.bucket(bucket).await?;
        // Removing a version for good is a delete in the bucket.
        if !crate::scope::current().permits(&bucket_attr, wire::identity::Access::WX) {
            return Err(crate::gateway::access_denied(&format!("may not delete versions in bucket {bucket:?}")));
        }
        let mut was_marker = false;
        let mut removed_current = false;
        if let Some(current) = self.current_version(bucket, key).await? {
            if current.id == id {
                let parent = self.ensure_dirs(bucket, &parsed.dirs).await?;
                // Aside first, then checked: a write that replaced it meanwhile is not removed.
                let aside = client::tmp_name();
                match self.client.rename_mode(parent, name, parent, &aside, RenameMode::NoReplace).await {
                    Ok(()) => {
                        let moved = self.client.lookup(parent, &aside).await.or_s3(Target::ObjectWrite)?;
                        let moved_id = version_of(&self.client, moved.ino).await.or_s3(Target::ObjectWrite)?;
                        if moved_id == id {
                            self.client.unlink(parent, &aside).await.or_s3(Target::ObjectWrite)?;
                            removed_current = true;
                        } else if let Err(e) =
                            self.client.rename_mode(parent, &aside, parent, name, RenameMode::NoReplace).await
                        {
                            tracing::warn!("cannot put version {moved_id} of {key} back: {e}");
                        }
                    }
                    Err(e) if e.code == ErrorCode::NotFound => {}
                    Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
                }
            }
        }
        if !removed_current {
            if let Some(dir) = self.key_dir(bucket, key, false).await? {
                match self.client.lookup(dir, id).await {
                    Ok(a) => {
                        was_marker = is_delete_marker(&self.client, a.ino).await.or_s3(Target::Object)?;
                        match self.client.unlink(dir, id).await {
                            Ok(()) => {}
                            Err(e) if e.code == ErrorCode::NotFound => {}
                            Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
                        }
                    }
                    // Deleting a version that does not exist succeeds, as in S3.
                    Err(e) if e.code == ErrorCode::NotFound => {}
                    Err(e) => return Err(s3_error(&e, Target::Object)),
                }
            }
        }
        if !self.promote_newest(bucket, key, name, &parsed.dirs).await? {
            // The key's directories go when nothing else holds them, as after a plain DELETE.
            self.prune_empty_dirs(bucket, bucket_attr.ino, &parsed.dirs).await;
        }
        Ok(was_marker)
    }

    /// Keeps the invariant that a newest version that is an object is at the key (`name` in
    /// directories `dirs`): if nothing is there and the newest stored version is an object, it
    /// moves back. Removes a key dir left empty. Returns whether an object is at the key.
    async fn promote_newest(&self, bucket: &str, key: &str, name: &str, dirs: &[&str]) -> S3Result<bool> {
        let mut at_key = self.current_version(bucket, key).await?.is_some();
        let Some(dir) = self.key_dir(bucket, key, false).await? else { return Ok(at_key) };
        if !at_key {
            let stored = self.stored_versions_in(dir).await?;
            if let Some(newest) = stored.first().filter(|v| !v.delete_marker) {
                let parent = self.ensure_dirs(bucket, dirs).await?;
                match self.client.rename_mode(dir, &newest.id, parent, name, RenameMode::NoReplace).await {
                    // Or a write got there first: it is newer anyway.
                    Ok(()) => at_key = true,
                    Err(e) if e.code == ErrorCode::Exists => at_key = true,
                    Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
                }
            }
        }
        if let Ok(store) = self.client.resolve(&versions_path(bucket)).await {
            // Fails while versions remain, which is the point.
            let _ = self.client.rmdir(store.ino, &key_dir_name(key)).await;
        }
        Ok(at_key)
    }

    /// Whether the bucket's version store holds anything.
    pub(crate) async fn has_stored_versions(&self, bucket: &str) -> S3Result<bool> {
        match self.client.resolve(&versions_path(bucket)).await {
            Ok(store) => Ok(!self.client.readdir_page(store.ino, "", 1).await.or_s3(Target::Bucket)?.0.is_empty()),
            Err(e) if e.code == ErrorCode::NotFound => Ok(false),
            Err(e) => Err(s3_error(&e, Target::Bucket)),
        }
    }

    /// Removes a deleted bucket's (empty) version store.
    pub(crate) async fn remove_version_store(&self, bucket: &str) {
        if let Ok(parent) =
            crate::scope::resolve_internal(&self.client, &format!("/{}/{VERSIONS_DIR}", names::STATE_DIR)).await
        {
            let _ = self.client.rmdir(parent.ino, bucket).await;
        }
    }

    /// ListObjectVersions.
    pub(crate) async fn list_versions(&self, input: ListObjectVersionsInput) -> S3Result<ListObjectVersionsOutput> {
        let bucket = &input.bucket;
        let bucket_attr = self.bucket(bucket).await?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let limit = input.max_keys.map(|m| m.clamp(0, KEYS_PER_PAGE_MAX as i32) as usize).unwrap_or(KEYS_PER_PAGE_MAX);
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.version_id_marker.clone().filter(|id| !id.is_empty() && !key_marker.is_empty());
        if let Some(id) = &id_marker {
            if !valid_version_id(id) {
                return Err(invalid_version(id));
            }
        }
        // Keys with stored versions, with their key dirs.
        let mut stored_keys: BTreeMap<String, Ino> = BTreeMap::new();
        if let Ok(store) = self.client.resolve(&versions_path(bucket)).await {
            for entry in self.client.readdir(store.ino).await.or_s3(Target::Object)? {
                if entry.attr.kind != FileKind::Dir {
                    continue;
                }
                if let Ok(k) = self.client.getxattr(entry.attr.ino, XATTR_KEY).await {
                    let k = String::from_utf8_lossy(&k).into_owned();
                    if k.starts_with(&prefix) {
                        stored_keys.insert(k, entry.attr.ino);
                    }
                }
            }
        }
        // Current objects after the key marker; a page that resumes inside the marker's own
        // versions (a version id marker) starts with that key, current object and all.
        let page = list::list(
            &self.client,
            bucket_attr.ino,
            &Query { prefix: &prefix, delimiter: delimiter.as_deref(), after: &key_marker, limit: limit + 1 },
        )
        .await?;
        // Keys past the last current object of a truncated page are not known to be complete.
        let horizon = if page.truncated { page.items.last().map(|i| i.key().to_string()) } else { None };
        let mut rows: BTreeMap<String, Row> = BTreeMap::new();
        if id_marker.is_some() && key_marker.starts_with(&prefix) {
            let current = self.current_version(bucket, &key_marker).await?.map(|v| v.attr);
            rows.insert(key_marker.clone(), Row::Key { current });
        }
        for item in page.items {
            match item {
                Item::Object { key, attr } => {
                    rows.insert(key, Row::Key { current: Some(attr) });
                }
                Item::Prefix(p) => {
                    rows.insert(p, Row::Prefix);
                }
            }
        }
        for k in stored_keys.keys().cloned() {
            // A key under a common prefix is listed as the prefix.
            let grouped = delimiter
                .as_ref()
                .and_then(|d| k[prefix.len()..].find(d.as_str()).map(|i| k[..prefix.len() + i + d.len()].to_string()));
            let name = grouped.as_deref().unwrap_or(&k);
            if name < key_marker.as_str() || horizon.as_ref().is_some_and(|h| name > h.as_str()) {
                continue;
            }
            match grouped {
                Some(p) => rows.entry(p).or_insert(Row::Prefix),
                None => rows.entry(k).or_insert(Row::Key { current: None }),
            };
        }
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        let mut prefixes = Vec::new();
        let mut count = 0usize;
        let mut truncated = horizon.is_some();
        let mut next: Option<(String, Option<String>)> = None;
        'rows: for (key, row) in rows {
            if key.as_str() < key_marker.as_str() || (id_marker.is_none() && key == key_marker) {
                continue;
            }
            let current = match row {
                Row::Prefix => {
                    if count == limit {
                        truncated = true;
                        break;
                    }
                    prefixes.push(CommonPrefix { prefix: Some(key.clone()) });
                    count += 1;
                    next = Some((key, None));
                    continue;
                }
                Row::Key { current } => current,
            };
            let mut all = Vec::new();
            if let Some(attr) = current {
                let id = version_of(&self.client, attr.ino).await.or_s3(Target::Object)?;
                all.push(Version { id, attr, delete_marker: false });
            }
            if let Some(&dir) = stored_keys.get(&key) {
                all.extend(self.stored_versions_in(dir).await?);
            }
            let mut skipping = key == key_marker && id_marker.is_some();
            for (i, v) in all.into_iter().enumerate() {
                if skipping {
                    if Some(&v.id) == id_marker.as_ref() {
                        skipping = false;
                    }
                    continue;
                }
                if count == limit {
                    truncated = true;
                    break 'rows;
                }
                let latest = i == 0;
                if v.delete_marker {
                    markers.push(DeleteMarkerEntry {
                        is_latest: Some(latest),
                        key: Some(key.clone()),
                        last_modified: Some(s3_time(v.attr.mtime)),
                        owner: Some(crate::gateway::owner()),
                        version_id: Some(v.id.clone()),
                    });
                } else {
                    let raw = objmeta::load_etag(&self.client, v.attr.ino).await.or_s3(Target::Object)?;
                    versions.push(ObjectVersion {
                        e_tag: Some(ETag::Strong(etag_for(&v.attr, raw.as_deref()))),
                        is_latest: Some(latest),
                        key: Some(key.clone()),
                        last_modified: Some(s3_time(v.attr.mtime)),
                        owner: Some(crate::gateway::owner()),
                        size: Some(v.attr.size as i64),
                        storage_class: Some(ObjectVersionStorageClass::from_static(
                            ObjectVersionStorageClass::STANDARD,
                        )),
                        version_id: Some(v.id.clone()),
                        ..Default::default()
                    });
                }
                count += 1;
                next = Some((key.clone(), Some(v.id)));
            }
        }
        let (next_key_marker, next_version_id_marker) = match (truncated, next) {
            (true, Some((k, id))) => (Some(k), id),
            _ => (None, None),
        };
        Ok(ListObjectVersionsOutput {
            common_prefixes: Some(prefixes),
            delete_markers: Some(markers),
            delimiter: input.delimiter,
            encoding_type: input.encoding_type,
            is_truncated: Some(truncated),
            key_marker: input.key_marker,
            max_keys: Some(limit as i32),
            name: Some(input.bucket.clone()),
            next_key_marker,
            next_version_id_marker,
            prefix: input.prefix,
            version_id_marker: input.version_id_marker,
            versions: Some(versions),
            ..Default::default()
        })
    }
}

/// A row of a version listing: a key (with its current object, if any) or a common prefix.
enum Row {
    Key { current: Option<Attr> },
    Prefix,
}

/// Newest first: by id (time-ordered), the null version by its mtime among them.
fn sort_newest_first(versions: &mut [Version]) {
    versions.sort_by(|a, b| sort_key(b).cmp(&sort_key(a)));
}

/// What orders versions: the creation time in nanoseconds, then the id.
fn sort_key(v: &Version) -> (u128, &str) {
    let nanos = if v.id == NULL_VERSION {
        let t = v.attr.mtime;
        u128::try_from(t.secs).unwrap_or(0) * 1_000_000_000 + u128::from(t.nanos)
    } else {
        u64::from_str_radix(&v.id[..16], 16).map_or(0, u128::from)
    };
    (nanos, &v.id)
}

fn delete_marker_headers(id: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("x-amz-delete-marker", http::HeaderValue::from_static("true"));
    if let Ok(v) = http::HeaderValue::from_str(id) {
        h.insert("x-amz-version-id", v);
    }
    h
}

/// `None` when the bucket's versioning was never turned on (the x-amz-version-id header is
/// then left out, as S3 leaves it out).
pub(crate) fn shown_id(v: Option<&Versioned>) -> Option<String> {
    v.filter(|v| v.mode == Mode::Enabled).map(|v| v.id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_sort_in_creation_order_and_are_recognised() {
        let a = new_version_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_version_id();
        assert!(a < b, "{a} {b}");
        assert!(valid_version_id(&a) && valid_version_id(NULL_VERSION));
        assert!(!valid_version_id("") && !valid_version_id("../x") && !valid_version_id(&a[..20]));
    }

    #[test]
    fn key_dirs_are_file_names() {
        let name = key_dir_name(&"k/".repeat(500));
        assert_eq!(name.len(), 32);
        assert!(name.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(key_dir_name("a"), key_dir_name("b"));
    }
}
