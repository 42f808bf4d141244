//! The one mapping from Trove's error codes ([`wire::ErrorCode`]) to S3 error codes, and the
//! messages every S3 error answer carries.
//!
//! Every client error the gateway returns that started as a cluster error goes through
//! [`s3_error`], so a code means the same thing in every operation. What a "not found" means
//! depends on what was being looked up, which the caller says with [`Target`]. Errors of the
//! HTTP layer (bodies that stall or are too large, connections over the limit, unknown access
//! keys) are made here too; an answer that s3s produced with a code and no message gets
//! [`default_message`] (an error without one shows as "Unknown" in boto3).

use crate::conn::{is_stalled, Refusal};
use s3s::{S3Error, S3ErrorCode};
use std::time::Duration;
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
        (ErrorCode::PermissionDenied | ErrorCode::ReadOnly, _) => S3ErrorCode::AccessDenied,
        (ErrorCode::TooLarge, _) => S3ErrorCode::EntityTooLarge,
        (ErrorCode::NotSupported, _) => S3ErrorCode::NotImplemented,
        // All worth retrying: nodes down, the engine busy, a conditional record that moved.
        (ErrorCode::Unavailable | ErrorCode::Conflict | ErrorCode::MaybeCommitted | ErrorCode::Changed, _) => {
            S3ErrorCode::ServiceUnavailable
        }
        // AWS has no quota code; MinIO answers a bucket quota with 400 XMinioAdminBucketQuotaExceeded.
        // Trove says what it is: 403 QuotaExceeded with the message naming the quota.
        (ErrorCode::QuotaExceeded, _) => {
            let mut err = S3Error::with_message(S3ErrorCode::Custom("QuotaExceeded".into()), e.message.clone());
            err.set_status_code(http::StatusCode::FORBIDDEN);
            return err;
        }
        (ErrorCode::CrossDevice, _) => S3ErrorCode::InvalidRequest,
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

/// AWS's message for `code` (its own wording where it has one), for answers that carry a code
/// and nothing else; `bucket` is the bucket the request named, if any.
pub fn default_message(code: &S3ErrorCode, bucket: Option<&str>) -> String {
    let text = match code {
        S3ErrorCode::AccessDenied => "Access Denied.",
        S3ErrorCode::AuthorizationHeaderMalformed => "The authorization header that you provided is not valid.",
        S3ErrorCode::BadDigest => "The Content-MD5 or checksum value that you specified did not match what the server received.",
        S3ErrorCode::BucketAlreadyOwnedByYou => "Your previous request to create the named bucket succeeded and you already own it.",
        S3ErrorCode::BucketNotEmpty => "The bucket that you tried to delete is not empty.",
        S3ErrorCode::EntityTooLarge => "Your proposed upload exceeds the maximum allowed object size.",
        S3ErrorCode::EntityTooSmall => "Your proposed upload is smaller than the minimum allowed object size.",
        S3ErrorCode::IncompleteBody => "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        S3ErrorCode::InternalError => "An internal error occurred. Try again.",
        S3ErrorCode::InvalidAccessKeyId => "The access key ID that you provided does not exist in our records.",
        S3ErrorCode::InvalidArgument => "Invalid argument.",
        S3ErrorCode::InvalidBucketName => {
            return format!(
                "The specified bucket is not valid{}: bucket names are 3 to 63 lower-case letters, digits, dots and hyphens, beginning and ending with a letter or digit.",
                bucket.map(|b| format!(" ({b:?})")).unwrap_or_default()
            )
        }
        S3ErrorCode::InvalidDigest => "The Content-MD5 or checksum value that you specified is not valid.",
        S3ErrorCode::InvalidPart => "One or more of the specified parts could not be found, or its ETag did not match the uploaded part's ETag.",
        S3ErrorCode::InvalidPartOrder => "The list of parts was not in ascending order of part number.",
        S3ErrorCode::InvalidRange => "The requested range cannot be satisfied.",
        S3ErrorCode::InvalidRequest => "The request is not valid.",
        S3ErrorCode::InvalidURI => "The specified URI could not be parsed.",
        S3ErrorCode::KeyTooLongError => "Your key is too long.",
        S3ErrorCode::MalformedXML => "The XML that you provided was not well formed or did not validate against the published schema.",
        S3ErrorCode::MaxMessageLengthExceeded => "Your request was too large.",
        S3ErrorCode::MetadataTooLarge => "Your metadata headers exceed the maximum allowed metadata size.",
        S3ErrorCode::MethodNotAllowed => "The specified method is not allowed against this resource.",
        S3ErrorCode::MissingContentLength => "You must provide the Content-Length HTTP header.",
        S3ErrorCode::MissingSecurityHeader => "Your request is missing a required header.",
        S3ErrorCode::NoSuchBucket => "The specified bucket does not exist.",
        S3ErrorCode::NoSuchKey => "The specified key does not exist.",
        S3ErrorCode::NoSuchUpload => "The specified multipart upload does not exist: the upload ID is not valid, or the upload was aborted or completed.",
        S3ErrorCode::NotImplemented => "This operation or a header that you provided implies functionality that is not implemented.",
        S3ErrorCode::NotSignedUp => "The access key ID that you provided does not exist in our records.",
        S3ErrorCode::PreconditionFailed => "At least one of the preconditions that you specified did not hold.",
        S3ErrorCode::RequestTimeout => "Your socket connection to the server was not read from or written to within the timeout period.",
        S3ErrorCode::RequestTimeTooSkewed => "The difference between the request time and the server's time is too large.",
        S3ErrorCode::ServiceUnavailable => "The service is unable to handle the request now. Try again.",
        S3ErrorCode::SignatureDoesNotMatch => "The request signature that the server calculated does not match the signature that you provided. Check your secret access key and signing method.",
        S3ErrorCode::SlowDown => "Please reduce your request rate.",
        other => return format!("The request failed with {}.", other.as_str()),
    };
    text.to_string()
}

/// The answer to a request whose body stopped arriving for `stall` (`body_idle_timeout_ms`).
pub fn request_timeout(stall: Duration) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::RequestTimeout,
        format!(
            "Your socket connection to the server was not read from or written to within the timeout period: no bytes of the request body arrived for {} ms (body_idle_timeout_ms).",
            stall.as_millis()
        ),
    )
}

/// The error for a request body that could not be read to its end (`e` is why).
pub fn body_error(e: &(dyn std::error::Error + 'static)) -> S3Error {
    match stalled_after(e) {
        Some(stall) => request_timeout(stall),
        None => S3Error::with_message(
            S3ErrorCode::IncompleteBody,
            format!("The request body ended before the bytes announced by Content-Length arrived: {e}"),
        ),
    }
}

fn stalled_after(e: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    if !is_stalled(e) {
        return None;
    }
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(s) = err.downcast_ref::<crate::conn::BodyStalled>() {
            return Some(s.after);
        }
        cur = err.source();
    }
    None
}

/// The answer to a request whose body (XML or other non-object data) exceeds `limit` bytes.
pub fn body_too_large(limit: usize) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::MaxMessageLengthExceeded,
        format!("Your request was too large: the body of this request may be at most {limit} bytes."),
    )
}

/// The answer to a connection over a limit.
pub fn slow_down(refusal: Refusal, per_client_max: usize, total_max: usize) -> S3Error {
    let why = match refusal {
        Refusal::Client { open } => {
            format!("this client has {open} connections open, the most one client may have (connections_per_client_max = {per_client_max})")
        }
        Refusal::Total { open } => {
            format!("the gateway serves {open} connections, the most it takes (connections_max = {total_max})")
        }
    };
    S3Error::with_message(S3ErrorCode::SlowDown, format!("Please reduce your request rate: {why}."))
}

/// The answer to a signature made with an access key the gateway does not know.
pub fn unknown_access_key(key: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::InvalidAccessKeyId,
        format!("The access key ID that you provided ({key:?}) does not exist in our records."),
    )
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
        assert_eq!(code(ErrorCode::MaybeCommitted, Target::Object), S3ErrorCode::ServiceUnavailable);
    }

    #[test]
    fn every_code_gets_a_message() {
        for c in [
            S3ErrorCode::SignatureDoesNotMatch,
            S3ErrorCode::MalformedXML,
            S3ErrorCode::InvalidAccessKeyId,
            S3ErrorCode::Custom("KeyConflict".into()),
        ] {
            let m = default_message(&c, None);
            assert!(m.len() > 10 && !m.contains("Unknown"), "{c:?}: {m}");
        }
        assert!(default_message(&S3ErrorCode::InvalidBucketName, Some("ab")).contains("(\"ab\")"));
        let stalled = crate::conn::BodyStalled { after: Duration::from_millis(1500) };
        let e = body_error(&stalled);
        assert_eq!(
            (e.code().clone(), e.status_code()),
            (S3ErrorCode::RequestTimeout, Some(http::StatusCode::BAD_REQUEST))
        );
        assert!(e.message().unwrap_or_default().contains("1500 ms"));
        let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed");
        assert_eq!(*body_error(&io).code(), S3ErrorCode::IncompleteBody);
        let refused = slow_down(Refusal::Client { open: 4 }, 4, 100);
        assert_eq!(refused.status_code(), Some(http::StatusCode::SERVICE_UNAVAILABLE));
        assert!(refused.message().unwrap_or_default().contains("connections_per_client_max = 4"));
    }
}
