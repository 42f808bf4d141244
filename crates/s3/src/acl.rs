//! S3 canned ACLs as POSIX permission bits, so that S3 and the mount judge the same files the
//! same way: an ACL is not kept beside a file, it *is* the file's mode.
//!
//! | canned ACL | bucket (directory) | object (file) |
//! |---|---|---|
//! | `private` | 0700 | 0600 |
//! | `public-read`, `authenticated-read` | 0755 | 0644 |
//! | `public-read-write` | 0777 | 0666 |
//!
//! "Public" reaches no further than the namespace: a tenant's buckets are visible only to
//! requests of that tenant's users (and anonymous requests never reach a tenant), so
//! `public-read` means every user of the tenant, as `authenticated-read` does. The owner is the
//! file's uid. Objects written without an ACL get 0644 (a umask of 022), buckets made by a
//! tenant's user without one get 0700 (S3's default, private). Grants to named accounts and
//! the other canned ACLs (`bucket-owner-*`, `log-delivery-write`, `aws-exec-read`) are refused
//! with NotImplemented: POSIX bits cannot say them.

use s3s::dto::{BucketCannedACL, Grant, Grantee, ObjectCannedACL, Permission, Type};
use s3s::{s3_error, S3Result};

/// A private bucket's mode.
pub const BUCKET_MODE_PRIVATE: u32 = 0o700;
/// The mode of an object written without an ACL.
pub const OBJECT_MODE_DEFAULT: u32 = 0o644;
/// The group of everyone in S3's ACL vocabulary.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

/// The answer to an ACL given as grants (an XML body or `x-amz-grant-*`) rather than canned.
pub fn canned_only() -> s3s::S3Error {
    s3_error!(NotImplemented, "only canned ACLs (x-amz-acl) are supported: Trove keeps ACLs as POSIX modes")
}

/// The mode of a bucket made (or set) with canned ACL `acl`.
pub fn bucket_mode(acl: &BucketCannedACL) -> S3Result<u32> {
    Ok(match acl.as_str() {
        BucketCannedACL::PRIVATE => 0o700,
        BucketCannedACL::PUBLIC_READ | BucketCannedACL::AUTHENTICATED_READ => 0o755,
        BucketCannedACL::PUBLIC_READ_WRITE => 0o777,
        other => {
            return Err(s3_error!(
                NotImplemented,
                "canned ACL {other:?} is not supported: Trove keeps ACLs as POSIX modes (private, public-read, public-read-write, authenticated-read)"
            ))
        }
    })
}

/// The mode of an object written with canned ACL `acl` (the default without one).
pub fn object_mode(acl: Option<&ObjectCannedACL>) -> S3Result<u32> {
    let Some(acl) = acl else { return Ok(OBJECT_MODE_DEFAULT) };
    Ok(match acl.as_str() {
        ObjectCannedACL::PRIVATE => 0o600,
        ObjectCannedACL::PUBLIC_READ | ObjectCannedACL::AUTHENTICATED_READ => 0o644,
        ObjectCannedACL::PUBLIC_READ_WRITE => 0o666,
        other => {
            return Err(s3_error!(
                NotImplemented,
                "canned ACL {other:?} is not supported: Trove keeps ACLs as POSIX modes (private, public-read, public-read-write, authenticated-read)"
            ))
        }
    })
}

/// The grants a mode means, for GetBucketAcl and GetObjectAcl: the owner's full control, and
/// what others may do.
pub fn grants(owner: &s3s::dto::Owner, mode: u32) -> Vec<Grant> {
    let mut out = vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name.clone(),
            id: owner.id.clone(),
            type_: Type::from_static(Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    let everyone = |p: &'static str| Grant {
        grantee: Some(Grantee {
            display_name: None,
            id: None,
            type_: Type::from_static(Type::GROUP),
            email_address: None,
            uri: Some(ALL_USERS.to_string()),
        }),
        permission: Some(Permission::from_static(p)),
    };
    if mode & 0o004 != 0 {
        out.push(everyone(Permission::READ));
    }
    if mode & 0o002 != 0 {
        out.push(everyone(Permission::WRITE));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_acls_are_modes_and_read_back_as_grants() {
        assert_eq!(bucket_mode(&BucketCannedACL::from_static(BucketCannedACL::PRIVATE)).ok(), Some(0o700));
        assert_eq!(bucket_mode(&BucketCannedACL::from_static(BucketCannedACL::PUBLIC_READ)).ok(), Some(0o755));
        assert_eq!(object_mode(None).ok(), Some(0o644));
        assert_eq!(object_mode(Some(&ObjectCannedACL::from_static(ObjectCannedACL::PRIVATE))).ok(), Some(0o600));
        assert!(object_mode(Some(&ObjectCannedACL::from_static(ObjectCannedACL::BUCKET_OWNER_READ))).is_err());
        let owner = s3s::dto::Owner { display_name: Some("alice".into()), id: Some("alice".into()) };
        assert_eq!(grants(&owner, 0o700).len(), 1);
        let public = grants(&owner, 0o755);
        assert_eq!(public.len(), 2);
        assert_eq!(public[1].permission.as_ref().map(|p| p.as_str()), Some(Permission::READ));
        assert_eq!(grants(&owner, 0o777).len(), 3);
    }
}
