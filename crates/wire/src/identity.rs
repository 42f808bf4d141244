//! Who uses the cluster: tenants, users and the S3 access keys bound to them.
//!
//! A **tenant** is a separate namespace: a directory of its own (by default
//! `/tenants/<name>`, owned by root and the tenant's group, mode 0770) that its users' S3
//! requests see as the whole file system, with the tenant's quota on it. A **user** has a
//! uid, a primary gid and supplementary groups, as on a POSIX host, and belongs to one tenant
//! (or none: a user of the cluster's root namespace). An **S3 key** is bound to one user, so
//! an S3 request acts as that user in that user's tenant, and the same POSIX permissions
//! decide what it may do as decide what the user may do through a mount.
//!
//! The types and their checks live here, beside the messages that carry them: the metadata
//! service checks a change when it is asked, and the command line and the S3 gateway read the
//! same meaning from it.

use serde::{Deserialize, Serialize};

/// Longest tenant or user name, in bytes.
pub const IDENTITY_NAME_BYTES_MAX: usize = 64;
/// Most supplementary groups a user may have (NGROUPS of NFS's AUTH_SYS).
pub const USER_GROUPS_MAX: usize = 16;
/// Shortest secret key, in bytes (AWS's are 40).
pub const SECRET_KEY_BYTES_MIN: usize = 16;
/// Longest access key or secret key, in bytes.
pub const S3_KEY_BYTES_MAX: usize = 128;
/// The parent directory of tenants' namespaces that `trove tenant create` uses by default.
pub const TENANTS_DIR: &str = "/tenants";

/// A tenant: a namespace of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    pub name: String,
    /// The group every user of the tenant is in; the tenant's directory belongs to it.
    pub gid: u32,
    /// The tenant's root directory.
    pub root: crate::Ino,
    /// Its path when the tenant was made (for people; the directory is found by `root`).
    pub path: String,
    pub created_ms: u64,
}

/// A user known to the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    pub uid: u32,
    /// Primary group.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The tenant the user belongs to; `None`: the cluster's root namespace.
    pub tenant: Option<String>,
    pub created_ms: u64,
}

impl User {
    /// The user as a caller whose permissions are checked.
    pub fn caller(&self) -> Caller {
        Caller { uid: self.uid, gid: self.gid, groups: self.groups.clone() }
    }
}

/// Whom an operation acts as: the identity POSIX permissions are checked against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Caller {
    /// Whether the caller is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// An S3 access key as listed: never with its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3KeyInfo {
    pub access_key: String,
    pub user: String,
    pub created_ms: u64,
}

/// What the S3 gateway learns of an access key: its secret and whom it acts as.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3KeyGrant {
    pub access_key: String,
    pub secret_key: String,
    pub user: User,
    /// The user's tenant; `None` for a user of the root namespace.
    pub tenant: Option<Tenant>,
}

impl std::fmt::Debug for S3KeyGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3KeyGrant")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .field("user", &self.user.name)
            .field("tenant", &self.tenant.as_ref().map(|t| &t.name))
            .finish()
    }
}

/// Everything the cluster knows of identities, as listed (no secrets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identities {
    pub tenants: Vec<Tenant>,
    pub users: Vec<User>,
    pub keys: Vec<S3KeyInfo>,
}

/// A change of the identities; each is one transaction of the metadata service.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdentityChange {
    /// Records tenant `name` with its group and its root directory (made beforehand).
    AddTenant { name: String, gid: u32, root: crate::Ino, path: String },
    /// Forgets a tenant that has no users left (its directory stays).
    RemoveTenant { name: String },
    /// Records a user; its uid and name must be unused, its tenant must exist, and a user of a
    /// tenant is put in the tenant's group.
    AddUser { name: String, uid: u32, gid: u32, groups: Vec<u32>, tenant: Option<String> },
    /// Forgets a user that holds no S3 key (its files keep its uid).
    RemoveUser { name: String },
    /// Binds a new access key and its secret to `user`.
    AddS3Key { user: String, access_key: String, secret_key: String },
    /// Forgets an access key: requests signed with it are refused.
    RemoveS3Key { access_key: String },
}

impl std::fmt::Debug for IdentityChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdentityChange::AddS3Key { user, access_key, .. } => f
                .debug_struct("AddS3Key")
                .field("user", user)
                .field("access_key", access_key)
                .field("secret_key", &"<hidden>")
                .finish(),
            IdentityChange::AddTenant { name, gid, root, path } => f
                .debug_struct("AddTenant")
                .field("name", name)
                .field("gid", gid)
                .field("root", root)
                .field("path", path)
                .finish(),
            IdentityChange::RemoveTenant { name } => f.debug_struct("RemoveTenant").field("name", name).finish(),
            IdentityChange::AddUser { name, uid, gid, groups, tenant } => f
                .debug_struct("AddUser")
                .field("name", name)
                .field("uid", uid)
                .field("gid", gid)
                .field("groups", groups)
                .field("tenant", tenant)
                .finish(),
            IdentityChange::RemoveUser { name } => f.debug_struct("RemoveUser").field("name", name).finish(),
            IdentityChange::RemoveS3Key { access_key } => {
                f.debug_struct("RemoveS3Key").field("access_key", access_key).finish()
            }
        }
    }
}

impl IdentityChange {
    /// Checks what can be checked without the stored identities.
    pub fn check(&self) -> Result<(), String> {
        match self {
            IdentityChange::AddTenant { name, gid, .. } => {
                check_name("tenant", name)?;
                if *gid == 0 {
                    return Err(format!("tenant {name:?} cannot have group 0 (root's group)"));
                }
                Ok(())
            }
            IdentityChange::RemoveTenant { name } => check_name("tenant", name),
            IdentityChange::AddUser { name, uid, groups, tenant, .. } => {
                check_name("user", name)?;
                if *uid == 0 {
                    return Err(format!("user {name:?} cannot have uid 0: root is nobody's S3 identity"));
                }
                if groups.len() > USER_GROUPS_MAX {
                    return Err(format!(
                        "user {name:?} has {} supplementary groups; at most {USER_GROUPS_MAX}",
                        groups.len()
                    ));
                }
                if let Some(t) = tenant {
                    check_name("tenant", t)?;
                }
                Ok(())
            }
            IdentityChange::RemoveUser { name } => check_name("user", name),
            IdentityChange::AddS3Key { user, access_key, secret_key } => {
                check_name("user", user)?;
                check_access_key(access_key)?;
                if secret_key.len() < SECRET_KEY_BYTES_MIN || secret_key.len() > S3_KEY_BYTES_MAX {
                    return Err(format!(
                        "a secret key has {SECRET_KEY_BYTES_MIN} to {S3_KEY_BYTES_MAX} bytes; this one has {}",
                        secret_key.len()
                    ));
                }
                if !secret_key.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err("a secret key is printable ASCII without spaces".into());
                }
                Ok(())
            }
            IdentityChange::RemoveS3Key { access_key } => check_access_key(access_key),
        }
    }
}

/// Checks a tenant or user name: 1 to 64 bytes of lower-case letters, digits, `-`, `_` and
/// `.`, starting with a letter (it names a directory and appears in messages).
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.');
    if name.is_empty()
        || name.len() > IDENTITY_NAME_BYTES_MAX
        || !name.starts_with(|c: char| c.is_ascii_lowercase())
        || !name.chars().all(ok_char)
    {
        return Err(format!(
            "{what} name {name:?} is not usable: 1 to {IDENTITY_NAME_BYTES_MAX} lower-case letters, digits, '-', '_' or '.', starting with a letter"
        ));
    }
    Ok(())
}

/// Checks an access key: 3 to 128 upper-case letters and digits (as AWS's).
pub fn check_access_key(key: &str) -> Result<(), String> {
    if key.len() < 3
        || key.len() > S3_KEY_BYTES_MAX
        || !key.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        return Err(format!("access key {key:?} is not usable: 3 to {S3_KEY_BYTES_MAX} upper-case letters and digits"));
    }
    Ok(())
}

/// What POSIX permission bits ask of a caller: read, write, search/execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
}

impl Access {
    /// Nothing asked of the target itself (search on the way there is still checked).
    pub const NONE: Access = Access { read: false, write: false, exec: false };
    pub const R: Access = Access { read: true, write: false, exec: false };
    pub const W: Access = Access { read: false, write: true, exec: false };
    pub const X: Access = Access { read: false, write: false, exec: true };
    pub const RX: Access = Access { read: true, write: false, exec: true };
    pub const WX: Access = Access { read: false, write: true, exec: true };

    /// As the bits of a mode's class: 4 read, 2 write, 1 execute.
    pub fn bits(self) -> u8 {
        u8::from(self.read) * 4 + u8::from(self.write) * 2 + u8::from(self.exec)
    }

    /// From [`Access::bits`].
    pub fn from_bits(bits: u8) -> Access {
        Access { read: bits & 4 != 0, write: bits & 2 != 0, exec: bits & 1 != 0 }
    }

    /// The bits asked, as `rwx` letters.
    pub fn letters(self) -> String {
        [(self.read, 'r'), (self.write, 'w'), (self.exec, 'x')].iter().filter(|(on, _)| *on).map(|(_, c)| *c).collect()
    }
}

/// Whether `caller` may access a file of `mode` owned by `uid`:`gid` as `want` asks, by the
/// POSIX rule: the owner's bits if the caller owns it, else the group's if the caller is in
/// its group, else the others' (never a union of classes).
pub fn permits(caller: &Caller, uid: u32, gid: u32, mode: u32, want: Access) -> bool {
    let class = if caller.uid == uid {
        (mode >> 6) & 7
    } else if caller.in_group(gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    (!want.read || class & 4 != 0) && (!want.write || class & 2 != 0) && (!want.exec || class & 1 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32, gid: u32, groups: Vec<u32>) -> Caller {
        Caller { uid, gid, groups }
    }

    #[test]
    fn permissions_follow_the_posix_class_of_the_caller() {
        let alice = user(1000, 500, vec![600]);
        // Owner: the owner's bits only, even when the others' would allow more.
        assert!(permits(&alice, 1000, 1, 0o600, Access::R));
        assert!(!permits(&alice, 1000, 1, 0o077, Access::R), "owner class decides alone");
        // Group, primary or supplementary.
        assert!(permits(&alice, 1, 500, 0o040, Access::R));
        assert!(permits(&alice, 1, 600, 0o060, Access::W));
        assert!(!permits(&alice, 1, 600, 0o407, Access::R), "group class decides alone");
        // Others.
        assert!(permits(&alice, 1, 1, 0o005, Access::RX));
        assert!(!permits(&alice, 1, 1, 0o004, Access::RX));
        assert!(!permits(&alice, 1, 1, 0o770, Access::X));
        assert_eq!(Access::WX.letters(), "wx");
        for bits in 0..8 {
            assert_eq!(Access::from_bits(bits).bits(), bits);
        }
    }

    #[test]
    fn changes_are_checked_before_they_reach_the_store() {
        let ok = IdentityChange::AddUser { name: "alice".into(), uid: 1000, gid: 1000, groups: vec![], tenant: None };
        assert!(ok.check().is_ok());
        for bad in [
            IdentityChange::AddUser { name: "Alice".into(), uid: 1000, gid: 1, groups: vec![], tenant: None },
            IdentityChange::AddUser { name: "a".into(), uid: 0, gid: 1, groups: vec![], tenant: None },
            IdentityChange::AddUser { name: "a".into(), uid: 1, gid: 1, groups: vec![7; 17], tenant: None },
            IdentityChange::AddUser { name: "a".into(), uid: 1, gid: 1, groups: vec![], tenant: Some("../x".into()) },
            IdentityChange::AddTenant { name: "acme".into(), gid: 0, root: 2, path: "/t".into() },
            IdentityChange::AddTenant { name: "".into(), gid: 5, root: 2, path: "/t".into() },
            IdentityChange::AddS3Key { user: "a".into(), access_key: "lower".into(), secret_key: "x".repeat(40) },
            IdentityChange::AddS3Key { user: "a".into(), access_key: "AKID".into(), secret_key: "short".into() },
            IdentityChange::AddS3Key {
                user: "a".into(),
                access_key: "AKID".into(),
                secret_key: "with space ".repeat(4),
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?} was accepted");
        }
        let key =
            IdentityChange::AddS3Key { user: "a".into(), access_key: "AKID".into(), secret_key: "s3cr3t".repeat(8) };
        assert!(key.check().is_ok());
        assert!(!format!("{key:?}").contains("s3cr3t"), "secrets stay out of debug output");
    }
}
