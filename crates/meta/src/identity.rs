//! Tenants, users and S3 keys as the metadata service keeps them (`t`, `u` and `k` records,
//! see `wire::identity` for what they mean): each change is one transaction that checks what
//! must hold across records (unique names, uids and tenant groups; a user's tenant exists; a
//! key's user exists; nothing removed that another record still names), so concurrent changes
//! serialize and every metadata server sees the same identities.
//!
//! Deliberately absent: passwords and any login of people (a person's credential is their
//! cluster certificate or their S3 key), and group records of their own (a group is a gid, as
//! on a POSIX host; a tenant names its group).

use crate::keys::{self, prefix, S3KeyRec};
use crate::namespace;
use crate::store::{self, abort, fail, get, scan_all, TxResult};
use kv::KvTxn;
use wire::identity::{Identities, IdentityChange, S3KeyGrant, S3KeyInfo, Tenant, User};
use wire::FileKind;

/// Every record of `kind`, decoded.
async fn all<T: keys::Record>(txn: &mut dyn KvTxn, kind: u8) -> TxResult<Vec<(Vec<u8>, T)>> {
    let rows = scan_all(txn, &[kind], &[kind + 1]).await?;
    rows.into_iter().map(|(k, v)| Ok((k.clone(), keys::decode(&k, &v).map_err(abort)?))).collect()
}

/// Every tenant, user and key (no secrets), in name order.
pub async fn list(txn: &mut dyn KvTxn) -> TxResult<Identities> {
    let tenants = all::<Tenant>(txn, prefix::TENANT).await?.into_iter().map(|(_, t)| t).collect();
    let users = all::<User>(txn, prefix::USER).await?.into_iter().map(|(_, u)| u).collect();
    let keys = all::<S3KeyRec>(txn, prefix::S3_KEY)
        .await?
        .into_iter()
        .map(|(k, rec)| S3KeyInfo {
            access_key: String::from_utf8_lossy(&k[1..]).into_owned(),
            user: rec.user,
            created_ms: rec.created_ms,
        })
        .collect();
    Ok(Identities { tenants, users, keys })
}

/// The secret of `access_key` and whom it acts as.
pub async fn lookup_key(txn: &mut dyn KvTxn, access_key: &str) -> TxResult<Option<S3KeyGrant>> {
    let Some(rec) = get::<S3KeyRec>(txn, &keys::identity(prefix::S3_KEY, access_key)).await? else {
        return Ok(None);
    };
    let Some(user) = get::<User>(txn, &keys::identity(prefix::USER, &rec.user)).await? else {
        fail!(Internal, "S3 key {access_key} names user {:?}, who is not recorded", rec.user);
    };
    let tenant = match &user.tenant {
        Some(t) => match get::<Tenant>(txn, &keys::identity(prefix::TENANT, t)).await? {
            Some(t) => Some(t),
            None => fail!(Internal, "user {:?} names tenant {t:?}, which is not recorded", user.name),
        },
        None => None,
    };
    Ok(Some(S3KeyGrant { access_key: access_key.to_string(), secret_key: rec.secret_key, user, tenant }))
}

/// Applies `change`; answers every identity as changed.
pub async fn change(txn: &mut dyn KvTxn, now_ms: u64, change: &IdentityChange) -> TxResult<Identities> {
    change.check().map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
    match change {
        IdentityChange::AddTenant { name, gid, root, path } => {
            let key = keys::identity(prefix::TENANT, name);
            if get::<Tenant>(txn, &key).await?.is_some() {
                fail!(Exists, "tenant {name:?} exists already");
            }
            for (_, other) in all::<Tenant>(txn, prefix::TENANT).await? {
                if other.gid == *gid {
                    fail!(
                        Exists,
                        "group {gid} is tenant {:?}'s already: give each tenant a group of its own",
                        other.name
                    );
                }
                if other.root == *root {
                    fail!(Exists, "{path} is tenant {:?}'s root already", other.name);
                }
            }
            let dir = namespace::load(txn, *root).await?;
            if dir.attr.kind != FileKind::Dir {
                fail!(NotDir, "a tenant's root must be a directory; {path} is not one");
            }
            let tenant = Tenant { name: name.clone(), gid: *gid, root: *root, path: path.clone(), created_ms: now_ms };
            store::put(txn, &key, &tenant).await?;
        }
        IdentityChange::RemoveTenant { name } => {
            let key = keys::identity(prefix::TENANT, name);
            if get::<Tenant>(txn, &key).await?.is_none() {
                fail!(NotFound, "no tenant {name:?}");
            }
            let users: Vec<String> = all::<User>(txn, prefix::USER)
                .await?
                .into_iter()
                .filter(|(_, u)| u.tenant.as_deref() == Some(name.as_str()))
                .map(|(_, u)| u.name)
                .collect();
            if !users.is_empty() {
                fail!(NotEmpty, "tenant {name:?} still has users ({}): remove them first", users.join(", "));
            }
            txn.delete(&key).await?;
        }
        IdentityChange::AddUser { name, uid, gid, groups, tenant } => {
            let key = keys::identity(prefix::USER, name);
            if get::<User>(txn, &key).await?.is_some() {
                fail!(Exists, "user {name:?} exists already");
            }
            for (_, other) in all::<User>(txn, prefix::USER).await? {
                if other.uid == *uid {
                    fail!(Exists, "uid {uid} is user {:?}'s already", other.name);
                }
            }
            let mut groups = groups.clone();
            if let Some(t) = tenant {
                let Some(rec) = get::<Tenant>(txn, &keys::identity(prefix::TENANT, t)).await? else {
                    fail!(NotFound, "no tenant {t:?}: create it first (trove tenant create {t})");
                };
                // A tenant's users are in its group: that is what opens its directory to them.
                if *gid != rec.gid && !groups.contains(&rec.gid) {
                    groups.push(rec.gid);
                }
            }
            groups.sort_unstable();
            groups.dedup();
            groups.retain(|g| g != gid);
            let user =
                User { name: name.clone(), uid: *uid, gid: *gid, groups, tenant: tenant.clone(), created_ms: now_ms };
            store::put(txn, &key, &user).await?;
        }
        IdentityChange::RemoveUser { name } => {
            let key = keys::identity(prefix::USER, name);
            if get::<User>(txn, &key).await?.is_none() {
                fail!(NotFound, "no user {name:?}");
            }
            let held: Vec<String> = all::<S3KeyRec>(txn, prefix::S3_KEY)
                .await?
                .into_iter()
                .filter(|(_, k)| &k.user == name)
                .map(|(k, _)| String::from_utf8_lossy(&k[1..]).into_owned())
                .collect();
            if !held.is_empty() {
                fail!(NotEmpty, "user {name:?} still holds S3 keys ({}): remove them first", held.join(", "));
            }
            txn.delete(&key).await?;
        }
        IdentityChange::AddS3Key { user, access_key, secret_key } => {
            if get::<User>(txn, &keys::identity(prefix::USER, user)).await?.is_none() {
                fail!(NotFound, "no user {user:?}: add the user first (trove user add)");
            }
            let key = keys::identity(prefix::S3_KEY, access_key);
            if get::<S3KeyRec>(txn, &key).await?.is_some() {
                fail!(Exists, "access key {access_key} exists already");
            }
            let rec = S3KeyRec { user: user.clone(), secret_key: secret_key.clone(), created_ms: now_ms };
            store::put(txn, &key, &rec).await?;
        }
        IdentityChange::RemoveS3Key { access_key } => {
            let key = keys::identity(prefix::S3_KEY, access_key);
            if get::<S3KeyRec>(txn, &key).await?.is_none() {
                fail!(NotFound, "no access key {access_key}");
            }
            txn.delete(&key).await?;
        }
    }
    list(txn).await
}
