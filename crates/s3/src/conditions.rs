//! Conditional writes and deletes (`If-Match`, `If-None-Match: *`) made atomic against
//! concurrent writers, as lakehouse table formats (Delta Lake, Iceberg) rely on for commits.
//!
//! Every write ends by moving a finished temporary file onto its key (see `gateway.rs`); the
//! condition is enforced by how that move is made, with the metadata service's renameat2
//! modes (no protocol change):
//!
//! - **`If-None-Match: *`** (create only): the move is a `RenameMode::NoReplace` rename, which
//!   the metadata service refuses in the same transaction if anything is at the key. Of two
//!   concurrent creators exactly one succeeds; the other gets 412 PreconditionFailed.
//! - **`If-Match: <etag>`** (replace only that version): the ETag is checked before the body is
//!   read (412 if it differs, 404 NoSuchKey if there is no object), which pins the file (inode
//!   and data version) the client meant. The move is then a `RenameMode::Exchange`: the new
//!   object takes the key and the file that held it comes back under the temporary name. If
//!   that file is not the pinned one (another writer got in between), the exchange is undone
//!   and the request fails with 409 ConditionalRequestConflict, as S3 answers a lost race;
//!   for that instant a reader may see the new object.
//! - **`DELETE` with `If-Match`**: the object is first renamed aside to a temporary name (a
//!   single transaction), its ETag checked there, and then removed, or put back (NoReplace)
//!   with 412 if the ETag differs. A write that lands on the key meanwhile wins over the
//!   put-back, as it would have replaced the object anyway.
//!
//! In a versioned bucket (`versions.rs`) the same move keeps what it displaces: an
//! unconditional write exchanges too, and the file that comes back under the temporary name is
//! moved into the version store instead of being removed.
//!
//! GET and HEAD conditions (`If-Match`, `If-None-Match`, `If-(Un)Modified-Since`) need no
//! atomicity and are `check_conditions` in `gateway.rs`.

use crate::errors::{s3_error, OrS3, Target};
use crate::gateway::{no_such_key, Gateway};
use crate::names::parse_key;
use crate::objmeta::{self, etag_for};
use crate::versions::Versioned;

/// How often a versioned write retries the exchange that replaces the current version when the
/// key keeps appearing and disappearing under it.
const PUBLISH_RACE_RETRY_COUNT_MAX: u32 = 8;
use client::{ErrorCode, FileKind, Ino};
use s3s::dto::ETagCondition;
use s3s::{S3Error, S3ErrorCode, S3Result};
use wire::RenameMode;

/// How a finished write may take its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// Replace whatever is there (no condition).
    Replace,
    /// Only if nothing is at the key (`If-None-Match: *`).
    CreateOnly,
    /// Only if the key still holds this file at this data version (`If-Match`).
    IfStill { ino: Ino, data_version: u64 },
}

/// Why a conditional write or delete does not happen.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ConditionError {
    /// The object's ETag is not the one given, or it exists where none may.
    Failed(String),
    /// Another write changed the object while this one was checked (S3's lost race).
    Conflict,
    /// `If-None-Match` with a value other than `*` on a write.
    OnlyAny,
}

impl From<ConditionError> for S3Error {
    fn from(e: ConditionError) -> S3Error {
        match e {
            ConditionError::Failed(why) => S3Error::with_message(
                S3ErrorCode::PreconditionFailed,
                format!("At least one of the pre-conditions you specified did not hold: {why}"),
            ),
            ConditionError::Conflict => S3Error::with_message(
                S3ErrorCode::ConditionalRequestConflict,
                "A conflicting operation occurred. If using PutObject you can retry the request.",
            ),
            ConditionError::OnlyAny => {
                S3Error::with_message(S3ErrorCode::NotImplemented, "If-None-Match on a write supports only '*'")
            }
        }
    }
}

/// Whether `cond` accepts ETag `etag`.
pub(crate) fn etag_matches(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}

impl Gateway {
    /// Decides how a write of `key` may land, checking `If-Match` against the object now
    /// (before any data is received).
    pub(crate) async fn write_condition(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<Publish> {
        let create_only = match if_none_match {
            None => false,
            Some(ETagCondition::Any) => true,
            Some(ETagCondition::ETag(_)) => return Err(ConditionError::OnlyAny.into()),
        };
        if let Some(cond) = if_match {
            let (attr, marker) = self.object(bucket, key).await?;
            if marker {
                return Err(ConditionError::Failed(format!("{key} is a prefix")).into());
            }
            let raw = objmeta::load_etag(&self.client, attr.ino).await.or_s3(Target::Object)?;
            let etag = etag_for(&attr, raw.as_deref());
            if !etag_matches(cond, &etag) {
                return Err(ConditionError::Failed(format!("the object's ETag is {etag}")).into());
            }
            if create_only {
                return Err(ConditionError::Failed(format!("{key} exists")).into());
            }
            return Ok(Publish::IfStill { ino: attr.ino, data_version: attr.data_version });
        }
        if create_only {
            // Checked again atomically at the end; this spares receiving a body for nothing.
            match self.object(bucket, key).await {
                Ok(_) => return Err(ConditionError::Failed(format!("{key} exists")).into()),
                Err(e) if *e.code() == S3ErrorCode::NoSuchKey => {}
                Err(e) => return Err(e),
            }
            return Ok(Publish::CreateOnly);
        }
        Ok(Publish::Replace)
    }

    /// Moves the finished file `from_name` in `from_parent` onto `name` in `parent` as `how`
    /// allows; in a versioned bucket (`versioned`) what it replaces is kept (see
    /// `versions.rs`). On `Err` the file is still at `from_name` (its owner removes it).
    pub(crate) async fn publish(
        &self,
        from_parent: Ino,
        from_name: &str,
        parent: Ino,
        name: &str,
        how: Publish,
        versioned: Option<&Versioned>,
    ) -> Result<(), PublishError> {
        if let Some(v) = versioned {
            self.label_version(from_parent, from_name, v).await.map_err(PublishError::Wire)?;
        }
        match how {
            // Unversioned, the replaced file simply goes.
            Publish::Replace if versioned.is_none() => {
                return self.client.rename(from_parent, from_name, parent, name).await.map_err(PublishError::Wire)
            }
            Publish::CreateOnly => {
                return match self.client.rename_mode(from_parent, from_name, parent, name, RenameMode::NoReplace).await
                {
                    Ok(()) => {
                        self.after_version_published(versioned).await;
                        Ok(())
                    }
                    Err(e) if e.code == ErrorCode::Exists => {
                        Err(PublishError::Condition(ConditionError::Failed(format!("{name} exists"))))
                    }
                    Err(e) => Err(PublishError::Wire(e)),
                };
            }
            // Versioned: the replaced file comes back by exchange, to be kept.
            Publish::Replace => {
                let mut attempt = 0;
                loop {
                    match self.client.rename_mode(from_parent, from_name, parent, name, RenameMode::Exchange).await {
                        Ok(()) => break,
                        // Nothing at the key: the new version simply takes it.
                        Err(e) if e.code == ErrorCode::NotFound => {
                            match self
                                .client
                                .rename_mode(from_parent, from_name, parent, name, RenameMode::NoReplace)
                                .await
                            {
                                Ok(()) => {
                                    self.after_version_published(versioned).await;
                                    return Ok(());
                                }
                                Err(e) if e.code == ErrorCode::Exists && attempt < PUBLISH_RACE_RETRY_COUNT_MAX => {
                                    attempt += 1
                                }
                                Err(e) => return Err(PublishError::Wire(e)),
                            }
                        }
                        Err(e) => return Err(PublishError::Wire(e)),
                    }
                }
            }
            Publish::IfStill { ino, data_version } => {
                match self.client.rename_mode(from_parent, from_name, parent, name, RenameMode::Exchange).await {
                    Ok(()) => {}
                    // The object went away since it was checked.
                    Err(e) if e.code == ErrorCode::NotFound => {
                        return Err(PublishError::Condition(ConditionError::Conflict))
                    }
                    Err(e) => return Err(PublishError::Wire(e)),
                }
                // The file that held the key is now at `from_name`.
                let old = self.client.lookup(from_parent, from_name).await;
                if !matches!(&old, Ok(a) if a.ino == ino && a.data_version == data_version) {
                    // Lost a race: give the key back to the writer that won it.
                    if let Err(e) =
                        self.client.rename_mode(from_parent, from_name, parent, name, RenameMode::Exchange).await
                    {
                        tracing::warn!("cannot undo a conditional write of {name} in {parent} that lost a race: {e}");
                    }
                    return Err(PublishError::Condition(ConditionError::Conflict));
                }
            }
        }
        // The replaced file is at `from_name`: kept as a version, or removed.
        match versioned {
            Some(v) => {
                if let Err(e) = self.keep_version(from_parent, from_name, v).await {
                    // The new version is in place; the old one stays at the temporary name,
                    // where the listing's sweep finds it. Said rather than failing a write that
                    // happened.
                    tracing::warn!("the version of {} that {} replaced could not be kept: {e}", v.key, v.id);
                }
            }
            None => {
                if let Err(e) = self.client.unlink(from_parent, from_name).await {
                    if e.code != ErrorCode::NotFound {
                        tracing::warn!("cannot remove the replaced object {from_name} in {from_parent}: {e}");
                    }
                }
            }
        }
        self.after_version_published(versioned).await;
        Ok(())
    }

    /// DELETE with `If-Match`: removes `key` only while its ETag is accepted by `cond`.
    pub(crate) async fn delete_if_match(&self, bucket: &str, key: &str, cond: &ETagCondition) -> S3Result<()> {
        let parsed = parse_key(key)?;
        let Some(name) = parsed.name else {
            return Err(ConditionError::Failed(format!("{key} is a prefix")).into());
        };
        let bucket_attr = self.bucket(bucket).await?;
        let parent = if parsed.dirs.is_empty() {
            bucket_attr.ino
        } else {
            match crate::scope::resolve(
                &self.client,
                &format!("/{bucket}/{}", parsed.dirs.join("/")),
                wire::identity::Access::X,
            )
            .await
            {
                Ok(a) if a.kind == FileKind::Dir => a.ino,
                Ok(_) => return Err(no_such_key(key)),
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => return Err(no_such_key(key)),
                Err(e) => return Err(s3_error(&e, Target::Object)),
            }
        };
        match self.client.lookup(parent, name).await {
            Ok(a) if a.kind == FileKind::File => {}
            Ok(_) => return Err(no_such_key(key)),
            Err(e) if e.code == ErrorCode::NotFound => return Err(no_such_key(key)),
            Err(e) => return Err(s3_error(&e, Target::Object)),
        }
        let aside = client::tmp_name();
        match self.client.rename_mode(parent, name, parent, &aside, RenameMode::NoReplace).await {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::NotFound => return Err(no_such_key(key)),
            Err(e) => return Err(s3_error(&e, Target::ObjectWrite)),
        }
        let checked = async {
            let attr = self.client.lookup(parent, &aside).await?;
            let raw = objmeta::load_etag(&self.client, attr.ino).await?;
            Ok::<_, client::WireError>(etag_for(&attr, raw.as_deref()))
        }
        .await;
        match checked {
            Ok(etag) if etag_matches(cond, &etag) => {
                self.client.unlink(parent, &aside).await.or_s3(Target::ObjectWrite)?;
                Ok(())
            }
            other => {
                match self.client.rename_mode(parent, &aside, parent, name, RenameMode::NoReplace).await {
                    Ok(()) => {}
                    // A write took the key meanwhile: it replaces this object anyway.
                    Err(e) if e.code == ErrorCode::Exists => {
                        let _ = self.client.unlink(parent, &aside).await;
                    }
                    Err(e) => {
                        tracing::warn!("cannot put {key} back after a failed If-Match delete: {e}")
                    }
                }
                match other {
                    Ok(etag) => Err(ConditionError::Failed(format!("the object's ETag is {etag}")).into()),
                    Err(e) => Err(s3_error(&e, Target::Object)),
                }
            }
        }
    }
}

/// Why [`Gateway::publish`] did not move a file.
#[derive(Debug)]
pub(crate) enum PublishError {
    Condition(ConditionError),
    Wire(client::WireError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;

    #[test]
    fn etag_conditions_match_values_or_anything() {
        assert!(etag_matches(&ETagCondition::Any, "abc"));
        assert!(etag_matches(&ETagCondition::ETag(ETag::Strong("abc".into())), "abc"));
        assert!(!etag_matches(&ETagCondition::ETag(ETag::Strong("abd".into())), "abc"));
    }

    #[test]
    fn condition_errors_have_s3s_codes() {
        let e: S3Error = ConditionError::Failed("x".into()).into();
        assert_eq!(*e.code(), S3ErrorCode::PreconditionFailed);
        let e: S3Error = ConditionError::Conflict.into();
        assert_eq!(*e.code(), S3ErrorCode::ConditionalRequestConflict);
        let e: S3Error = ConditionError::OnlyAny.into();
        assert_eq!(*e.code(), S3ErrorCode::NotImplemented);
    }
}
