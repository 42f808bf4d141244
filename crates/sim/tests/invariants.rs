//! The metadata invariant checker finds what it exists to find: a healthy namespace passes,
//! and each kind of damage, written straight into the engine, is reported.

use meta::keys::{self, DentryRec, InodeRec};
use meta::{MetaOptions, MetaService};
use std::sync::Arc;
use wire::{Attr, FileKind, MetaCall, MetaOp, MetaReply, ROOT_INO};

async fn service() -> Arc<MetaService> {
    let engine: Arc<dyn kv::KvEngine> = Arc::new(kv_tests::memory::MemoryEngine::new());
    MetaService::new(engine, MetaOptions::default()).await.unwrap_or_else(|e| panic!("{e}"))
}

async fn attr(svc: &MetaService, op: MetaOp) -> Attr {
    match svc.call(MetaCall { request_id: 0, op }).await {
        Ok(MetaReply::Attr(a)) => a,
        Ok(MetaReply::Entry { attr, .. }) => attr,
        other => panic!("unexpected reply {other:?}"),
    }
}

async fn put(svc: &MetaService, key: Vec<u8>, value: Option<Vec<u8>>) {
    let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("{e}"));
    match value {
        Some(v) => txn.put(&key, &v).await,
        None => txn.delete(&key).await,
    }
    .unwrap_or_else(|e| panic!("{e}"));
    txn.commit().await.unwrap_or_else(|e| panic!("{e}"));
}

async fn inode(svc: &MetaService, ino: u64) -> InodeRec {
    let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("{e}"));
    let value = txn.get(&keys::inode(ino)).await.unwrap_or_else(|e| panic!("{e}")).expect("inode exists");
    keys::decode(&keys::inode(ino), &value).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn each_kind_of_damage_is_reported() {
    let svc = service().await;
    let dir = attr(&svc, MetaOp::Mkdir { parent: ROOT_INO, name: "d".into(), mode: 0o755, uid: 0, gid: 0 }).await;
    let file =
        attr(&svc, MetaOp::Create { parent: dir.ino, name: "f".into(), mode: 0o644, uid: 0, gid: 0, exclusive: true })
            .await;
    attr(&svc, MetaOp::Link { ino: file.ino, new_parent: ROOT_INO, new_name: "g".into() }).await;
    assert_eq!(sim::invariants::check(svc.engine().as_ref()).await, Vec::<String>::new(), "a healthy namespace");

    // A link count off by one.
    let mut rec = inode(&svc, file.ino).await;
    rec.attr.nlink = 3;
    put(&svc, keys::inode(file.ino), Some(keys::encode(&rec))).await;
    let found = sim::invariants::check(svc.engine().as_ref()).await;
    assert!(found.iter().any(|b| b.contains("has link count 3 but is named by 2 entries")), "{found:?}");
    rec.attr.nlink = 2;
    put(&svc, keys::inode(file.ino), Some(keys::encode(&rec))).await;

    // An entry naming an inode that does not exist.
    let ghost = DentryRec { ino: 999_999, kind: FileKind::File };
    put(&svc, keys::dentry(ROOT_INO, "ghost"), Some(keys::encode(&ghost))).await;
    let found = sim::invariants::check(svc.engine().as_ref()).await;
    assert!(found.iter().any(|b| b.contains("names inode 999999 that does not exist")), "{found:?}");
    put(&svc, keys::dentry(ROOT_INO, "ghost"), None).await;

    // A directory's entry gone: unreachable, and its parent's link count wrong.
    put(&svc, keys::dentry(ROOT_INO, "d"), None).await;
    let found = sim::invariants::check(svc.engine().as_ref()).await;
    assert!(found.iter().any(|b| b.contains(&format!("directory {} is named by 0 entries", dir.ino))), "{found:?}");
    assert!(found.iter().any(|b| b.contains("directory 1 has link count 3")), "{found:?}");
    put(&svc, keys::dentry(ROOT_INO, "d"), Some(keys::encode(&DentryRec { ino: dir.ino, kind: FileKind::Dir }))).await;

    // A chunk record of a file that is gone.
    let chunk = wire::ChunkRecord {
        index: 0,
        id: 77,
        len: 4096,
        ec: wire::EcScheme { k: 2, m: 1 },
        shard_len: 4096,
        placement: wire::Placement { map_version: 1, pg: 0 },
        table_crcs: vec![0],
        missing: 0,
    };
    put(&svc, keys::chunk(424_242, 0), Some(keys::encode(&chunk))).await;
    let found = sim::invariants::check(svc.engine().as_ref()).await;
    assert!(found.iter().any(|b| b.contains("belongs to inode 424242, which is no live file")), "{found:?}");
    put(&svc, keys::chunk(424_242, 0), None).await;

    // Two live sessions' exclusive locks over the same bytes; a lapsed session's lock does
    // not count.
    let far = meta::store::now_ms() + 60_000;
    let range = |kind| wire::LockRange { start: 0, end: 99, kind, pid: 1 };
    for session in [1u64, 2] {
        put(&svc, keys::lease(session), Some(keys::encode(&keys::LeaseRec { expires_ms: far }))).await;
    }
    put(&svc, keys::lease(3), Some(keys::encode(&keys::LeaseRec { expires_ms: 1 }))).await;
    let write = keys::LockRec { ranges: vec![range(wire::LockKind::Write)] };
    let read = keys::LockRec { ranges: vec![range(wire::LockKind::Read)] };
    put(&svc, keys::lock(file.ino, 1, 7), Some(keys::encode(&read))).await;
    put(&svc, keys::lock(file.ino, 3, 7), Some(keys::encode(&write))).await;
    assert_eq!(
        sim::invariants::check(svc.engine().as_ref()).await,
        Vec::<String>::new(),
        "a lapsed lock is no conflict"
    );
    put(&svc, keys::lock(file.ino, 2, 7), Some(keys::encode(&write))).await;
    let found = sim::invariants::check(svc.engine().as_ref()).await;
    assert!(found.iter().any(|b| b.contains("live conflicting locks of session 1 owner 7")), "{found:?}");
    put(&svc, keys::lock(file.ino, 2, 7), None).await;
    assert_eq!(sim::invariants::check(svc.engine().as_ref()).await, Vec::<String>::new(), "repaired");
}
