//! Tenants, users and S3 keys in the metadata service against the redb engine: the rules that
//! hold across records (unique names, uids and tenant groups; a user's tenant and a key's user
//! exist; nothing removed that another record names), a key's lookup naming its user and
//! tenant, secrets never listed, and `ResolveAs` checking POSIX permissions on every directory
//! it walks and on what it names, as a kernel does.

mod common;

use common::*;
use meta::MetaService;
use wire::identity::{Access, Caller, Identities, IdentityChange};
use wire::{ErrorCode, MetaOp, MetaReply, SetAttr, ROOT_INO};

async fn change(svc: &MetaService, c: IdentityChange) -> Identities {
    match ok(svc, MetaOp::ChangeIdentity { change: c }).await {
        MetaReply::Identities(i) => i,
        other => panic!("ChangeIdentity answered {other:?}"),
    }
}

async fn refused(svc: &MetaService, c: IdentityChange, code: ErrorCode) -> String {
    err(svc, MetaOp::ChangeIdentity { change: c }, code).await
}

fn user(name: &str, uid: u32, gid: u32, tenant: Option<&str>) -> IdentityChange {
    IdentityChange::AddUser { name: name.into(), uid, gid, groups: vec![], tenant: tenant.map(str::to_string) }
}

fn key(user: &str, access_key: &str) -> IdentityChange {
    IdentityChange::AddS3Key {
        user: user.into(),
        access_key: access_key.into(),
        secret_key: format!("secret-of-{access_key}-0123456789"),
    }
}

#[tokio::test]
async fn identities_keep_their_rules_across_records() {
    let env = env().await;
    let svc = &env.svc;
    let tenants = mkdir(svc, ROOT_INO, "tenants").await.ino;
    let acme = mkdir(svc, tenants, "acme").await.ino;
    let globex = mkdir(svc, tenants, "globex").await.ino;
    let file = create(svc, tenants, "f").await.ino;

    let add_acme =
        IdentityChange::AddTenant { name: "acme".into(), gid: 5001, root: acme, path: "/tenants/acme".into() };
    change(svc, add_acme.clone()).await;
    assert!(refused(svc, add_acme, ErrorCode::Exists).await.contains("exists already"));
    let same_gid =
        IdentityChange::AddTenant { name: "globex".into(), gid: 5001, root: globex, path: "/tenants/globex".into() };
    assert!(refused(svc, same_gid, ErrorCode::Exists).await.contains("group 5001 is tenant \"acme\"'s"));
    let same_root =
        IdentityChange::AddTenant { name: "globex".into(), gid: 5002, root: acme, path: "/tenants/acme".into() };
    assert!(refused(svc, same_root, ErrorCode::Exists).await.contains("root already"));
    let on_file = IdentityChange::AddTenant { name: "globex".into(), gid: 5002, root: file, path: "/tenants/f".into() };
    refused(svc, on_file, ErrorCode::NotDir).await;
    change(
        svc,
        IdentityChange::AddTenant { name: "globex".into(), gid: 5002, root: globex, path: "/tenants/globex".into() },
    )
    .await;

    // A tenant's user is put in the tenant's group; uids and names are unique.
    let all = change(svc, user("alice", 6001, 6001, Some("acme"))).await;
    let alice = all.users.iter().find(|u| u.name == "alice").expect("alice listed");
    assert_eq!((alice.gid, alice.groups.clone()), (6001, vec![5001]));
    assert!(refused(svc, user("alice", 6009, 1, None), ErrorCode::Exists).await.contains("exists already"));
    assert!(refused(svc, user("mallory", 6001, 1, None), ErrorCode::Exists)
        .await
        .contains("uid 6001 is user \"alice\"'s"));
    assert!(refused(svc, user("x", 7000, 1, Some("initech")), ErrorCode::NotFound)
        .await
        .contains("no tenant \"initech\""));
    refused(svc, user("root", 0, 0, None), ErrorCode::Invalid).await;

    // Keys need their user; secrets are never listed; a lookup names user and tenant.
    assert!(refused(svc, key("nobody", "AKNOBODY"), ErrorCode::NotFound).await.contains("no user"));
    let all = change(svc, key("alice", "AKALICE")).await;
    assert_eq!(all.keys.len(), 1);
    assert!(!format!("{all:?}").contains("secret-of"), "a listing holds no secret");
    refused(svc, key("alice", "AKALICE"), ErrorCode::Exists).await;
    match ok(svc, MetaOp::LookupS3Key { access_key: "AKALICE".into() }).await {
        MetaReply::S3Key(Some(g)) => {
            assert_eq!(g.secret_key, "secret-of-AKALICE-0123456789");
            assert_eq!(g.user.uid, 6001);
            assert_eq!(g.tenant.map(|t| (t.name, t.root)), Some(("acme".to_string(), acme)));
        }
        other => panic!("lookup answered {other:?}"),
    }
    assert_eq!(ok(svc, MetaOp::LookupS3Key { access_key: "AKOTHER".into() }).await, MetaReply::S3Key(None));

    // Nothing is removed that another record names.
    assert!(refused(svc, IdentityChange::RemoveTenant { name: "acme".into() }, ErrorCode::NotEmpty)
        .await
        .contains("alice"));
    assert!(refused(svc, IdentityChange::RemoveUser { name: "alice".into() }, ErrorCode::NotEmpty)
        .await
        .contains("AKALICE"));
    change(svc, IdentityChange::RemoveS3Key { access_key: "AKALICE".into() }).await;
    assert_eq!(ok(svc, MetaOp::LookupS3Key { access_key: "AKALICE".into() }).await, MetaReply::S3Key(None));
    change(svc, IdentityChange::RemoveUser { name: "alice".into() }).await;
    let all = change(svc, IdentityChange::RemoveTenant { name: "acme".into() }).await;
    assert_eq!(all.tenants.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["globex"]);
    assert!(all.users.is_empty() && all.keys.is_empty());
}

async fn chmod(svc: &MetaService, ino: wire::Ino, mode: u32, uid: u32, gid: u32) {
    ok(
        svc,
        MetaOp::SetAttr {
            ino,
            set: SetAttr { mode: Some(mode), uid: Some(uid), gid: Some(gid), ..SetAttr::default() },
        },
    )
    .await;
}

fn resolve_as(path: &str, uid: u32, gid: u32, groups: Vec<u32>, want: Access) -> MetaOp {
    MetaOp::ResolveAs { path: path.into(), caller: Caller { uid, gid, groups }, want: want.bits() }
}

#[tokio::test]
async fn resolving_as_a_caller_checks_every_directory_and_the_target() {
    let env = env().await;
    let svc = &env.svc;
    let t = mkdir(svc, ROOT_INO, "t").await.ino;
    let acme = mkdir(svc, t, "acme").await.ino;
    let bucket = mkdir(svc, acme, "b").await.ino;
    let obj = create(svc, bucket, "o").await.ino;
    chmod(svc, acme, 0o1770, 0, 5001).await;
    chmod(svc, bucket, 0o700, 6001, 6001).await;
    chmod(svc, obj, 0o640, 6001, 6001).await;

    // The owner reads; a member of the tenant's group searches the tenant but not the
    // private bucket; someone outside the group does not enter the tenant at all.
    ok(svc, resolve_as("/t/acme/b/o", 6001, 6001, vec![5001], Access::R)).await;
    let why = err(svc, resolve_as("/t/acme/b/o", 6002, 6002, vec![5001], Access::R), ErrorCode::PermissionDenied).await;
    assert!(why.contains("may not search \"/t/acme/b\""), "{why}");
    let why = err(svc, resolve_as("/t/acme/b/o", 7001, 7001, vec![5002], Access::R), ErrorCode::PermissionDenied).await;
    assert!(why.contains("may not search \"/t/acme\""), "{why}");
    // Missing entries behind a closed directory are not told apart from present ones.
    err(svc, resolve_as("/t/acme/nothing", 7001, 7001, vec![], Access::R), ErrorCode::PermissionDenied).await;
    // The target's own bits decide the access asked: the owner may not write a 0440 file.
    chmod(svc, obj, 0o440, 6001, 6001).await;
    err(svc, resolve_as("/t/acme/b/o", 6001, 6001, vec![5001], Access::W), ErrorCode::PermissionDenied).await;
    // Opening the bucket to the group lets the tenant's other users in, by the group class.
    chmod(svc, bucket, 0o750, 6001, 5001).await;
    chmod(svc, obj, 0o640, 6001, 5001).await;
    ok(svc, resolve_as("/t/acme/b/o", 6002, 6002, vec![5001], Access::R)).await;
    err(svc, resolve_as("/t/acme/b", 6002, 6002, vec![5001], Access::WX), ErrorCode::PermissionDenied).await;
}
