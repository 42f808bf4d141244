//! The one mapping from Trove's error codes ([`wire::ErrorCode`]) to S3 error codes.
//!
//! Every client error the gateway returns that started as a cluster error goes through
//! [`s3_error`], so a code means the same thing in every operation. What a "not found" means
//! depends on what was being looked up, which the caller says with [`Target`].

use s3s::{S3Error, S3ErrorCode};
use wire::{ErrorCode, WireError};

/// What the failed call was about, which decides the S3 code of "not found" and of name
/// conflicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A bucket (its directory).
    Bucket,
    /// Reading an object: a missing path, or a path through a file, is NoSuchKey.
    Object,
    /// Writing an object: a missing directory means the bucket went away; a file where a
    /// directory is needed (or the reverse) is a key conflict.
    ObjectWrite,
    /// A multipart upload.
    Upload,
}

/// The S3 error for a cluster error.
pub fn s3_error(e: &WireError, target: Target) -> S3Error {
    let code = match (e.code, target) {
        (ErrorCode::NotFound, Target::Bucket | Target::ObjectWrite) => S3ErrorCode::NoSuchBucket,
        (ErrorCode::NotFound | ErrorCode::NotDir | ErrorCode::IsDir, Target::Object) => S3ErrorCode::NoSuchKey,
        (ErrorCode::NotFound, Target::Upload) => S3ErrorCode::NoSuchUpload,
        (ErrorCode::NotDir | ErrorCode::IsDir | ErrorCode::Exists, Target::ObjectWrite) => {
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("KeyConflict".into()),
                format!("the key conflicts with an existing object or prefix (a file system cannot hold both 'a' and 'a/b'): {}", e.message),
            );
            err.set_status_code(http::StatusCode::CONFLICT);
            return err;
        }
        (ErrorCode::Exists, Target::Bucket) => S3ErrorCode::BucketAlreadyOwnedByYou,
        (ErrorCode::NotEmpty, Target::Bucket) => S3ErrorCode::BucketNotEmpty,
        (ErrorCode::NameTooLong, _) => S3ErrorCode::KeyTooLongError,
        (ErrorCode::Invalid | ErrorCode::NotDir | ErrorCode::IsDir | ErrorCode::Exists | ErrorCode::NotEmpty, _) => {
            S3ErrorCode::InvalidArgument
        }
        (ErrorCode::NoAttr, _) => S3ErrorCode::NoSuchKey,
        (ErrorCode::PermissionDenied, _) => S3ErrorCode::AccessDenied,
        (ErrorCode::TooLarge, _) => S3ErrorCode::EntityTooLarge,
        (ErrorCode::NotSupported, _) => S3ErrorCode::NotImplemented,
        (ErrorCode::Unavailable | ErrorCode::Conflict, _) => S3ErrorCode::ServiceUnavailable,
        (ErrorCode::NoSpace, _) => {
            let mut err = S3Error::with_message(S3ErrorCode::Custom("StorageFull".into()), e.message.clone());
            err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            return err;
        }
        _ => S3ErrorCode::InternalError,
    };
    if code == S3ErrorCode::InternalError {
        tracing::warn!("cluster error answered as InternalError: {:?}: {}", e.code, e.message);
    }
    S3Error::with_message(code, e.message.clone())
}

/// Shorthand: maps a client result's error with [`s3_error`].
pub trait OrS3<T> {
    fn or_s3(self, target: Target) -> s3s::S3Result<T>;
}

impl<T> OrS3<T> for Result<T, WireError> {
    fn or_s3(self, target: Target) -> s3s::S3Result<T> {
        self.map_err(|e| s3_error(&e, target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(c: ErrorCode, t: Target) -> S3ErrorCode {
        s3_error(&WireError::new(c, "x"), t).code().clone()
    }

    #[test]
    fn codes_map_by_target() {
        assert_eq!(code(ErrorCode::NotFound, Target::Bucket), S3ErrorCode::NoSuchBucket);
        assert_eq!(code(ErrorCode::NotFound, Target::Object), S3ErrorCode::NoSuchKey);
        assert_eq!(code(ErrorCode::NotDir, Target::Object), S3ErrorCode::NoSuchKey);
        assert_eq!(code(ErrorCode::NotFound, Target::Upload), S3ErrorCode::NoSuchUpload);
        assert_eq!(code(ErrorCode::Exists, Target::Bucket), S3ErrorCode::BucketAlreadyOwnedByYou);
        assert_eq!(code(ErrorCode::NotEmpty, Target::Bucket), S3ErrorCode::BucketNotEmpty);
        assert_eq!(code(ErrorCode::NameTooLong, Target::Object), S3ErrorCode::KeyTooLongError);
        assert_eq!(code(ErrorCode::Unavailable, Target::Object), S3ErrorCode::ServiceUnavailable);
        assert_eq!(code(ErrorCode::Corrupt, Target::Object), S3ErrorCode::InternalError);
        assert_eq!(code(ErrorCode::IsDir, Target::ObjectWrite), S3ErrorCode::Custom("KeyConflict".into()));
        let full = s3_error(&WireError::new(ErrorCode::NoSpace, "full"), Target::ObjectWrite);
        assert_eq!(full.status_code(), Some(http::StatusCode::INSUFFICIENT_STORAGE));
    }
}
