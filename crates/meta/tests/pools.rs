//! Storage pools in the metadata service: nodes joining named pools, per-pool placement maps,
//! files placed in their directory's pool, per-pool checks of schemes and drains, pool records
//! and their errors.

mod common;

use common::*;
use std::collections::BTreeSet;
use wire::{
    pg_global, pg_local, pg_pool, EcScheme, ErrorCode, MetaOp, MetaReply, NodeId, PoolId, PoolInfo, PoolKind, ROOT_INO,
};

async fn register_in(svc: &meta::MetaService, uuid: u128, pool: &str) -> NodeId {
    let op = MetaOp::RegisterNode {
        uuid,
        addr: format!("h{uuid}:1"),
        drives: vec![drive(1 << 40, 1 << 39)],
        pool: pool.to_string(),
        object: None,
    };
    match ok(svc, op).await {
        MetaReply::Node { id, .. } => id,
        other => panic!("RegisterNode: {other:?}"),
    }
}

async fn pools(svc: &meta::MetaService) -> Vec<PoolInfo> {
    match ok(svc, MetaOp::ListPools).await {
        MetaReply::Pools(pools) => pools,
        other => panic!("ListPools: {other:?}"),
    }
}

async fn pool_id(svc: &meta::MetaService, name: &str) -> PoolId {
    pools(svc).await.into_iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no pool {name}")).id
}

/// Allocates one chunk for `ino`; returns the placement group and its first `width` nodes.
async fn alloc(svc: &meta::MetaService, ino: u64) -> (u32, Vec<NodeId>, EcScheme) {
    let MetaReply::Alloc { chunks, map, ec } = ok(svc, MetaOp::AllocChunks { ino, count: 1, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let pg = chunks[0].1.pg;
    let nodes = map.group(pg).expect("the group exists").iter().take(ec.width()).copied().collect();
    (pg, nodes, ec)
}

#[tokio::test]
async fn nodes_join_named_pools_and_files_are_placed_in_their_directorys_pool() {
    let env = env().await;
    let svc = &env.svc;
    let mut flash = BTreeSet::new();
    let mut hdd = BTreeSet::new();
    for uuid in 1..=6 {
        flash.insert(register_in(svc, uuid, "flash").await);
    }
    for uuid in 7..=12 {
        hdd.insert(register_in(svc, uuid, "hdd").await);
    }
    // The default pool exists from the start; each named pool was made by its first node.
    let names: Vec<(PoolId, String)> = pools(svc).await.into_iter().map(|p| (p.id, p.name)).collect();
    assert_eq!(names, vec![(0, "default".to_string()), (1, "flash".to_string()), (2, "hdd".to_string())]);
    let (flash_id, hdd_id) = (pool_id(svc, "flash").await, pool_id(svc, "hdd").await);

    // Each pool's groups hold its own members only; the default pool has none.
    let MetaReply::Map(map) = ok(svc, MetaOp::GetMap { version: 0 }).await else { panic!("map") };
    assert!(map.pool_pgs(0).is_empty());
    for (id, members) in [(flash_id, &flash), (hdd_id, &hdd)] {
        assert_eq!(map.pool_pgs(id).len(), 256);
        for group in map.pool_pgs(id) {
            assert_eq!(group.iter().copied().collect::<BTreeSet<_>>(), *members);
        }
    }

    // The root directory is in the default pool, which has no nodes: a write there is refused
    // naming the pool and what to do.
    let file = create(svc, ROOT_INO, "f").await;
    assert_eq!(file.pool, 0);
    let message =
        err(svc, MetaOp::AllocChunks { ino: file.ino, count: 1, avoid: vec![] }, ErrorCode::Unavailable).await;
    assert!(
        message.contains("pool \"default\" has no storage nodes") && message.contains("trove mkdir --pool"),
        "{message}"
    );

    // Put in flash: it takes flash's default scheme, and chunks go to flash's nodes.
    let attr = attr_of(ok(svc, MetaOp::SetPool { ino: file.ino, pool: "flash".into() }).await);
    assert_eq!((attr.pool, attr.ec), (flash_id, EcScheme::DEFAULT));
    for _ in 0..20 {
        let (pg, nodes, ec) = alloc(svc, file.ino).await;
        assert_eq!((pg_pool(pg), ec), (flash_id, EcScheme::DEFAULT));
        assert!(pg_local(pg) < 256);
        assert!(nodes.iter().all(|n| flash.contains(n)), "{nodes:?}");
    }

    // A directory in hdd: files made in it inherit the pool, and their chunks go there.
    let cold = mkdir(svc, ROOT_INO, "cold").await;
    attr_of(ok(svc, MetaOp::SetPool { ino: cold.ino, pool: "hdd".into() }).await);
    let below = create(svc, cold.ino, "g").await;
    assert_eq!(below.pool, hdd_id);
    let (pg, nodes, _) = alloc(svc, below.ino).await;
    assert_eq!(pg_pool(pg), hdd_id);
    assert!(nodes.iter().all(|n| hdd.contains(n)), "{nodes:?}");
    // A subdirectory inherits it too.
    let sub = mkdir(svc, cold.ino, "sub").await;
    assert_eq!(sub.pool, hdd_id);

    // A scheme is checked against the nodes of the directory's pool.
    let layout =
        |ino, ec: EcScheme| MetaOp::SetLayout { ino, ec, chunk_bytes: 1 << 20, check: wire::LayoutCheck::Chosen };
    let message = err(svc, layout(cold.ino, EcScheme { k: 5, m: 2 }), ErrorCode::Invalid).await;
    assert!(message.contains("5+2 needs 7 storage nodes; pool \"hdd\" has 6"), "{message}");
    ok(svc, layout(cold.ino, EcScheme { k: 3, m: 3 })).await;

    // Status reports every pool with its nodes.
    let status = match ok(svc, MetaOp::Status { scan_chunks: false }).await {
        MetaReply::Status(s) => s,
        other => panic!("{other:?}"),
    };
    let figures: Vec<(String, u32)> = status.pools.iter().map(|p| (p.pool.name.clone(), p.nodes)).collect();
    assert_eq!(figures, vec![("default".into(), 0), ("flash".into(), 6), ("hdd".into(), 6)]);
    assert!(status.nodes.iter().all(|n| (n.pool == flash_id) == flash.contains(&n.id)));

    // Draining a node is judged by what is left in its own pool.
    let drained = *hdd.iter().next().expect("hdd node");
    let message = err(
        svc,
        MetaOp::SetNodeState { node: drained, state: wire::NodeState::Draining, force: false },
        ErrorCode::NoSpace,
    )
    .await;
    assert!(message.contains("leaves 5 storage nodes of pool \"hdd\"") && message.contains("3+3"), "{message}");

    // A node whose configuration names another pool moves there: a new map without it in its
    // old pool.
    let moved = register_in(svc, 12, "flash").await;
    let MetaReply::Map(map) = ok(svc, MetaOp::GetMap { version: 0 }).await else { panic!("map") };
    assert!(map.members(flash_id).contains(&moved));
    assert!(!map.members(hdd_id).contains(&moved));
    assert_eq!(map.members(hdd_id).len(), 5);
}

#[tokio::test]
async fn pools_are_made_changed_and_refused_with_reasons() {
    let env = env().await;
    let svc = &env.svc;
    let made = match ok(
        svc,
        MetaOp::CreatePool { name: "ssd".into(), kind: PoolKind::Nodes, default_ec: EcScheme { k: 2, m: 1 } },
    )
    .await
    {
        MetaReply::Pools(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(made.len(), 1);
    assert_eq!((made[0].name.as_str(), made[0].default_ec), ("ssd", EcScheme { k: 2, m: 1 }));
    let message = err(
        svc,
        MetaOp::CreatePool { name: "ssd".into(), kind: PoolKind::Nodes, default_ec: EcScheme::DEFAULT },
        ErrorCode::Exists,
    )
    .await;
    assert!(message.contains("\"ssd\" exists"), "{message}");
    let message = err(
        svc,
        MetaOp::CreatePool { name: "no space".into(), kind: PoolKind::Nodes, default_ec: EcScheme::DEFAULT },
        ErrorCode::Invalid,
    )
    .await;
    assert!(message.contains("may hold only"), "{message}");
    let message = err(
        svc,
        MetaOp::CreatePool { name: "wide".into(), kind: PoolKind::Nodes, default_ec: EcScheme { k: 30, m: 3 } },
        ErrorCode::Invalid,
    )
    .await;
    assert!(message.contains("K + M <= 32"), "{message}");

    // Changing the default scheme is kept; an unknown pool is named with the pools there are.
    ok(svc, MetaOp::SetPoolOptions { name: "ssd".into(), default_ec: Some(EcScheme { k: 3, m: 1 }) }).await;
    assert_eq!(pools(svc).await[1].default_ec, EcScheme { k: 3, m: 1 });
    let message = err(svc, MetaOp::SetPoolOptions { name: "tape".into(), default_ec: None }, ErrorCode::NotFound).await;
    assert!(message.contains("no pool named \"tape\"") && message.contains("default, ssd"), "{message}");

    // A directory put in a pool takes the pool's default scheme.
    let dir = mkdir(svc, ROOT_INO, "d").await;
    let attr = attr_of(ok(svc, MetaOp::SetPool { ino: dir.ino, pool: "ssd".into() }).await);
    assert_eq!(attr.ec, EcScheme { k: 3, m: 1 });
    let message = err(svc, MetaOp::SetPool { ino: dir.ino, pool: "tape".into() }, ErrorCode::NotFound).await;
    assert!(message.contains("no pool named \"tape\""), "{message}");

    // A file with data changes pool only by having its chunks moved.
    register_in(svc, 1, "").await;
    register_in(svc, 2, "").await;
    let file = create(svc, ROOT_INO, "f").await;
    ok(
        svc,
        MetaOp::SetLayout {
            ino: file.ino,
            ec: EcScheme { k: 1, m: 1 },
            chunk_bytes: 1 << 20,
            check: wire::LayoutCheck::Chosen,
        },
    )
    .await;
    let MetaReply::Alloc { chunks, .. } = ok(svc, MetaOp::AllocChunks { ino: file.ino, count: 1, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let (id, placement) = chunks[0];
    ok(svc, commit(file.ino, vec![chunk(0, id, 4096, EcScheme { k: 1, m: 1 }, placement)], 4096)).await;
    let message = err(svc, MetaOp::SetPool { ino: file.ino, pool: "ssd".into() }, ErrorCode::Invalid).await;
    assert!(message.contains("already has data") && message.contains("policy"), "{message}");

    // A storage node cannot name a malformed pool.
    let message = err(
        svc,
        MetaOp::RegisterNode { uuid: 9, addr: "h9:1".into(), drives: vec![], pool: "a/b".into(), object: None },
        ErrorCode::Invalid,
    )
    .await;
    assert!(message.contains("pool name"), "{message}");
    assert_eq!(pg_global(0, 5), 5);
}

#[tokio::test]
async fn object_pools_are_made_by_their_first_node_and_keep_one_kind_of_node() {
    let env = env().await;
    let svc = &env.svc;
    let target = |prefix: &str| wire::ObjectTarget {
        endpoint: "http://s3.test:3900".into(),
        bucket: "cold".into(),
        prefix: prefix.into(),
    };
    let object_node = |uuid: u128, pool: &str, prefix: &str| MetaOp::RegisterNode {
        uuid,
        addr: format!("h{uuid}:1"),
        drives: vec![drive(1 << 40, 1 << 39)],
        pool: pool.to_string(),
        object: Some(target(prefix)),
    };
    // The first node makes an object pool storing one copy; the record names the bucket.
    ok(svc, object_node(1, "cold", "n1")).await;
    ok(svc, object_node(2, "cold", "n2")).await;
    let cold = pools(svc).await.into_iter().find(|p| p.name == "cold").expect("pool cold");
    assert_eq!(cold.kind, PoolKind::Object { endpoint: "http://s3.test:3900".into(), bucket: "cold".into() });
    assert_eq!(cold.default_ec, EcScheme { k: 1, m: 0 });
    // A node with drives cannot join it, nor a node on another bucket; an object node cannot
    // join the default pool or a pool of drives.
    let message = err(
        svc,
        MetaOp::RegisterNode { uuid: 3, addr: "h3:1".into(), drives: vec![], pool: "cold".into(), object: None },
        ErrorCode::Invalid,
    )
    .await;
    assert!(message.contains("bucket \"cold\" at http://s3.test:3900") && message.contains("cannot join"), "{message}");
    let other = MetaOp::RegisterNode {
        uuid: 4,
        addr: "h4:1".into(),
        drives: vec![],
        pool: "cold".into(),
        object: Some(wire::ObjectTarget {
            endpoint: "http://s3.test:3900".into(),
            bucket: "other".into(),
            prefix: String::new(),
        }),
    };
    assert!(err(svc, other, ErrorCode::Invalid).await.contains("bucket \"other\""));
    assert!(err(svc, object_node(5, "", "x"), ErrorCode::Invalid).await.contains("not the default pool"));
    register_in(svc, 6, "hdd").await;
    assert!(err(svc, object_node(7, "hdd", "x"), ErrorCode::Invalid).await.contains("storage nodes' drives"));
    // A pool made empty by `trove pool create` takes the kind of its first node.
    ok(svc, MetaOp::CreatePool { name: "archive".into(), kind: PoolKind::Nodes, default_ec: EcScheme { k: 1, m: 1 } })
        .await;
    ok(svc, object_node(8, "archive", "a")).await;
    let archive = pools(svc).await.into_iter().find(|p| p.name == "archive").expect("pool archive");
    assert_eq!((archive.kind.name(), archive.default_ec), ("object", EcScheme { k: 1, m: 1 }));
    // Files in the object pool are placed on its nodes.
    let dir = mkdir(svc, ROOT_INO, "c").await;
    ok(svc, MetaOp::SetPool { ino: dir.ino, pool: "cold".into() }).await;
    let file = create(svc, dir.ino, "f").await;
    let (pg, nodes, ec) = alloc(svc, file.ino).await;
    assert_eq!((pg_pool(pg), ec), (cold.id, EcScheme { k: 1, m: 0 }));
    assert!(nodes.iter().all(|n| *n == 1 || *n == 2), "{nodes:?}");
}
