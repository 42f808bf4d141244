//! Directory tree quotas in the metadata service against the redb engine: a quota set on a
//! tree with content counts it, nested quotas count in every enclosing one, a directory with its
//! own quota moves between trees with its usage, other trees are refused with `CrossDevice`,
//! hard links stay in one tree, and removing a quota or its directory leaves the figures above
//! exact.

mod common;

use common::*;
use meta::MetaService;
use wire::{ErrorCode, Ino, MetaOp, MetaReply, QuotaInfo, QuotaLimits, RenameMode, SetAttr, ROOT_INO};

fn limits(bytes_hard: u64, inodes_hard: u64) -> QuotaLimits {
    QuotaLimits { bytes_hard, inodes_hard, ..QuotaLimits::default() }
}

async fn set(svc: &MetaService, ino: Ino, l: Option<QuotaLimits>) -> MetaReply {
    ok(svc, MetaOp::SetQuota { ino, limits: l }).await
}

async fn usage(svc: &MetaService, ino: Ino) -> (u64, u64) {
    match ok(svc, MetaOp::GetQuota { ino, nearest: false }).await {
        MetaReply::Quotas(q) => {
            let q: &QuotaInfo = q.first().unwrap_or_else(|| panic!("directory {ino} has no quota"));
            (q.bytes_used, q.inodes_used)
        }
        other => panic!("GetQuota answered {other:?}"),
    }
}

async fn resize(svc: &MetaService, ino: Ino, size: u64) {
    ok(svc, MetaOp::SetAttr { ino, set: SetAttr { size: Some(size), ..SetAttr::default() } }).await;
}

fn rename(parent: Ino, name: &str, new_parent: Ino, new_name: &str) -> MetaOp {
    MetaOp::Rename { parent, name: name.into(), new_parent, new_name: new_name.into(), mode: RenameMode::Replace }
}

#[tokio::test]
async fn nested_quotas_count_exactly_through_sets_moves_and_removals() {
    let env = env().await;
    let svc = &env.svc;
    let top = mkdir(svc, ROOT_INO, "top").await.ino;
    let sub = mkdir(svc, top, "sub").await.ino;
    let f = create(svc, sub, "f").await.ino;
    resize(svc, f, 1000).await;
    let g = create(svc, top, "g").await.ino;
    resize(svc, g, 50).await;

    // Set on a tree with content: counted once, now.
    set(svc, top, Some(limits(10_000, 100))).await;
    assert_eq!(usage(svc, top).await, (1050, 3));
    // A nested quota: its tree counts in both.
    set(svc, sub, Some(limits(2000, 0))).await;
    assert_eq!(usage(svc, sub).await, (1000, 1));
    resize(svc, f, 1500).await;
    assert_eq!((usage(svc, sub).await, usage(svc, top).await), ((1500, 1), (1550, 3)));
    // The inner hard limit refuses, naming its directory; nothing changes.
    let why = err(
        svc,
        MetaOp::SetAttr { ino: f, set: SetAttr { size: Some(2001), ..SetAttr::default() } },
        ErrorCode::QuotaExceeded,
    )
    .await;
    assert!(why.contains("/top/sub") && why.contains("hard limit of 2000"), "{why}");
    assert_eq!(usage(svc, top).await, (1550, 3));
    // The outer one too.
    let why = err(
        svc,
        MetaOp::SetAttr { ino: g, set: SetAttr { size: Some(9000), ..SetAttr::default() } },
        ErrorCode::QuotaExceeded,
    )
    .await;
    assert!(why.contains("\"/top\""), "{why}");

    // A directory with its own quota moves out with its usage; one without is refused.
    let other = mkdir(svc, ROOT_INO, "other").await.ino;
    ok(svc, rename(top, "sub", other, "sub")).await;
    assert_eq!(usage(svc, top).await, (50, 1));
    assert_eq!(usage(svc, sub).await, (1500, 1));
    let plain = mkdir(svc, other, "plain").await.ino;
    create(svc, plain, "x").await;
    err(svc, rename(other, "plain", top, "plain"), ErrorCode::CrossDevice).await;
    // An empty directory moves (one inode).
    let empty = mkdir(svc, other, "empty").await.ino;
    ok(svc, rename(other, "empty", top, "empty")).await;
    assert_eq!(usage(svc, top).await, (50, 2));
    let inside = create(svc, empty, "inside").await.ino;
    resize(svc, inside, 7).await;
    assert_eq!(usage(svc, top).await, (57, 3));
    // Back in: the nested quota's usage and its directory count again.
    ok(svc, rename(other, "sub", top, "sub")).await;
    assert_eq!(usage(svc, top).await, (1557, 5));

    // A hard link cannot join two trees.
    err(svc, MetaOp::Link { ino: g, new_parent: other, new_name: "g2".into() }, ErrorCode::CrossDevice).await;

    // Removing the inner quota leaves the outer exact, and its tree now counts directly.
    set(svc, sub, None).await;
    resize(svc, f, 100).await;
    assert_eq!(usage(svc, top).await, (157, 5));
    // An emptied quota'd directory removed takes its quota along.
    set(svc, empty, Some(limits(0, 10))).await;
    ok(svc, MetaOp::Unlink { parent: empty, name: "inside".into() }).await;
    ok(svc, MetaOp::Rmdir { parent: top, name: "empty".into() }).await;
    assert_eq!(usage(svc, top).await, (150, 3));
    match ok(svc, MetaOp::ListQuotas).await {
        MetaReply::Quotas(all) => assert_eq!(all.iter().map(|q| q.path.as_str()).collect::<Vec<_>>(), vec!["/top"]),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_quota_needs_every_link_of_a_file_inside_its_tree() {
    let env = env().await;
    let svc = &env.svc;
    let a = mkdir(svc, ROOT_INO, "a").await.ino;
    let f = create(svc, ROOT_INO, "f").await.ino;
    ok(svc, MetaOp::Link { ino: f, new_parent: a, new_name: "f".into() }).await;
    let why = err(svc, MetaOp::SetQuota { ino: a, limits: Some(limits(1, 0)) }, ErrorCode::Invalid).await;
    assert!(why.contains("links"), "{why}");
    // Both links inside: counted once.
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    ok(svc, MetaOp::Link { ino: f, new_parent: a, new_name: "f2".into() }).await;
    set(svc, a, Some(limits(0, 5))).await;
    assert_eq!(usage(svc, a).await, (0, 1));
    err(svc, MetaOp::SetQuota { ino: a, limits: Some(QuotaLimits::default()) }, ErrorCode::Invalid).await;
}
