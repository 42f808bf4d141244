//! The registry of error codes that cross the wire, and the error every remote call returns.
//!
//! Codes are stable numbers: a code is never reused for another meaning. Front ends map them to
//! their own vocabulary in one place each (FUSE: [`ErrorCode::errno`]; S3: the gateway's mapping).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Stable error codes. The numeric value is part of the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No such file, directory, shard or node.
    NotFound = 1,
    /// The name already exists.
    Exists = 2,
    NotDir = 3,
    IsDir = 4,
    /// The directory is not empty.
    NotEmpty = 5,
    /// The request makes no sense (bad name, moving a directory under itself, ...).
    Invalid = 6,
    /// A drive or the cluster is full.
    NoSpace = 7,
    /// A drive failed to read or write.
    Io = 8,
    /// Stored data failed its checksum.
    Corrupt = 9,
    /// Too few nodes are reachable to serve the data.
    Unavailable = 10,
    PermissionDenied = 11,
    NameTooLong = 12,
    /// The metadata engine kept conflicting; the operation was not applied.
    Conflict = 13,
    /// The peer speaks an incompatible protocol version.
    VersionMismatch = 14,
    /// A message or value exceeds a limit.
    TooLarge = 15,
    /// The extended attribute does not exist.
    NoAttr = 16,
    NotSupported = 17,
    /// A bug or an unexpected state; the message says more.
    Internal = 18,
    /// The metadata engine may or may not have applied the operation.
    MaybeCommitted = 19,
    /// The node is not (or no longer) part of the cluster.
    NotMember = 20,
    /// The record an operation was conditional on has changed meanwhile (it was not applied).
    Changed = 21,
    /// A quota of a directory tree would be exceeded (bytes or inodes, hard limit, or a soft
    /// limit past its grace period); the operation was not applied.
    QuotaExceeded = 22,
    /// The operation would move something between trees it cannot move between (a link or a
    /// rename across quota trees that cannot carry its usage); `mv` copies instead.
    CrossDevice = 23,
    /// The target is read-only: a snapshot (browsed under `.snapshots`) or something in one.
    ReadOnly = 24,
}

impl ErrorCode {
    /// The Linux errno for this code, for the FUSE front end.
    pub fn errno(self) -> i32 {
        match self {
            ErrorCode::NotFound => 2,                              // ENOENT
            ErrorCode::Exists => 17,                               // EEXIST
            ErrorCode::NotDir => 20,                               // ENOTDIR
            ErrorCode::IsDir => 21,                                // EISDIR
            ErrorCode::NotEmpty => 39,                             // ENOTEMPTY
            ErrorCode::Invalid => 22,                              // EINVAL
            ErrorCode::NoSpace => 28,                              // ENOSPC
            ErrorCode::Io | ErrorCode::Corrupt => 5,               // EIO
            ErrorCode::Unavailable => 5,                           // EIO
            ErrorCode::PermissionDenied => 13,                     // EACCES
            ErrorCode::NameTooLong => 36,                          // ENAMETOOLONG
            ErrorCode::Conflict | ErrorCode::MaybeCommitted => 11, // EAGAIN
            ErrorCode::VersionMismatch => 71,                      // EPROTO
            ErrorCode::TooLarge => 27,                             // EFBIG
            ErrorCode::NoAttr => 61,                               // ENODATA
            ErrorCode::NotSupported => 95,                         // EOPNOTSUPP
            ErrorCode::Internal => 5,                              // EIO
            ErrorCode::NotMember => 5,                             // EIO
            ErrorCode::Changed => 11,                              // EAGAIN
            ErrorCode::QuotaExceeded => 122,                       // EDQUOT
            ErrorCode::CrossDevice => 18,                          // EXDEV
            ErrorCode::ReadOnly => 30,                             // EROFS
        }
    }
}

/// An error reported by a remote service: a stable code and a message for humans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
}

impl WireError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        WireError { code, message: message.into() }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Shorthand for building a [`WireError`]: `werr!(NotFound, "no file {name:?}")`.
#[macro_export]
macro_rules! werr {
    ($code:ident, $($arg:tt)*) => {
        $crate::WireError::new($crate::ErrorCode::$code, format!($($arg)*))
    };
}
