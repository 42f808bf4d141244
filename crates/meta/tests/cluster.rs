//! The cluster manager and GC against the redb engine: placement map properties, node
//! registration and liveness, chunk allocation, capacity and status, garbage collection through
//! fake storage nodes, and the service over a real network connection.

mod common;

use common::*;
use meta::cluster::{compute_map, pg_for_chunk};
use meta::keys::{self, prefix};
use meta::{MetaOptions, MetaService};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;
use wire::{
    Connection, EcScheme, ErrorCode, MetaCall, MetaOp, MetaReply, MetaResult, NodeId, NodeState, PlacementMap, Service,
    ShardKey, ROOT_INO,
};

const PGS: u32 = 256;

/// Shard slots each node holds in the first `width` positions of every PG.
fn slot_counts(map: &PlacementMap, width: usize) -> HashMap<NodeId, usize> {
    let mut counts = HashMap::new();
    for pg in map.pool_pgs(0) {
        for node in pg.iter().take(width) {
            *counts.entry(*node).or_default() += 1;
        }
    }
    counts
}

#[test]
fn placement_is_deterministic_and_complete() {
    let members: Vec<NodeId> = (1..=9).collect();
    let map = compute_map(3, PGS, &members);
    let mut shuffled = members.clone();
    shuffled.reverse();
    assert_eq!(map, compute_map(3, PGS, &shuffled), "member order does not matter");
    assert_eq!(map.pool_pgs(0).len(), PGS as usize);
    for (pg, nodes) in map.pool_pgs(0).iter().enumerate() {
        let unique: HashSet<_> = nodes.iter().collect();
        assert_eq!(unique.len(), nodes.len(), "pg {pg} repeats a node: {nodes:?}");
        assert_eq!(nodes.len(), members.len(), "pg {pg} lists every member");
    }
    // Fixed across builds and machines: pin a few values.
    assert_eq!(pg_for_chunk(1, PGS), pg_for_chunk(1, PGS));
    let again = compute_map(3, PGS, &members);
    assert_eq!(map.pool_pgs(0)[17], again.pool_pgs(0)[17]);
}

#[test]
fn placement_spreads_shard_slots_evenly() {
    for (n, width) in [(6usize, 6usize), (7, 6), (8, 6), (10, 6), (12, 6), (16, 6), (12, 11), (20, 12)] {
        let members: Vec<NodeId> = (1..=n as NodeId).collect();
        let map = compute_map(1, PGS, &members);
        let counts = slot_counts(&map, width);
        let fair = (PGS as usize * width) as f64 / n as f64;
        for node in &members {
            let got = counts.get(node).copied().unwrap_or(0) as f64;
            assert!(
                (got - fair).abs() <= fair * 0.2,
                "{n} nodes, width {width}: node {node} holds {got} slots, fair is {fair:.1}; all: {counts:?}"
            );
        }
        // Every shard index is spread too (shard 0 is not always on the same few nodes).
        let mut firsts: HashMap<NodeId, usize> = HashMap::new();
        for pg in map.pool_pgs(0) {
            *firsts.entry(pg[0]).or_default() += 1;
        }
        assert_eq!(firsts.len(), n, "{n} nodes: every node leads some PG");
    }
}

#[test]
fn placement_moves_little_when_a_node_joins() {
    for (n, width) in [(6usize, 6usize), (7, 6), (8, 6), (10, 6), (12, 6), (16, 6), (24, 6), (16, 10), (12, 12)] {
        let before = compute_map(1, PGS, &(1..=n as NodeId).collect::<Vec<_>>());
        let after = compute_map(2, PGS, &(1..=n as NodeId + 1).collect::<Vec<_>>());
        let newcomer = n as NodeId + 1;
        let mut changed = 0usize;
        let mut taken = 0usize;
        for (old, new) in before.pool_pgs(0).iter().zip(after.pool_pgs(0)) {
            for slot in 0..width {
                if old[slot] != new[slot] {
                    changed += 1;
                }
                if new[slot] == newcomer {
                    taken += 1;
                }
            }
        }
        // Ideal: only the slots the newcomer takes change (its fair share). No function of the
        // member set alone reaches it (a displaced node must go somewhere); one rendezvous
        // order per PG would shift every slot after the newcomer's, (w + 1) / 2 times the ideal
        // on average. Per-slot rendezvous stays well under that, and near the ideal once the
        // cluster is wider than the scheme.
        let ideal = (PGS as usize * width) as f64 / (n + 1) as f64;
        let one_order = ideal * (width + 1) as f64 / 2.0;
        eprintln!(
            "{n} -> {} nodes, width {width}: {changed} slots changed, newcomer took {taken}, ideal {ideal:.0}",
            n + 1
        );
        assert!(changed >= taken);
        assert!(
            (changed as f64) <= one_order * 0.6,
            "{n} nodes: {changed} slots moved; one order would move {one_order:.0}"
        );
        if n >= width + 2 {
            assert!((changed as f64) <= ideal * 2.0, "{n} nodes: {changed} slots moved; ideal {ideal:.0}");
        }
        assert!((taken as f64 - ideal).abs() <= ideal * 0.25, "{n} nodes: newcomer took {taken}; fair {ideal:.0}");
    }
}

async fn nodes(svc: &MetaService, count: usize) -> Vec<NodeId> {
    let mut ids = Vec::new();
    for i in 0..count {
        ids.push(register(svc, 1000 + i as u128, &format!("127.0.0.1:{}", 20000 + i)).await);
    }
    ids
}

fn status_of(reply: MetaReply) -> wire::ClusterStatus {
    match reply {
        MetaReply::Status(status) => status,
        other => panic!("expected status, got {other:?}"),
    }
}

#[tokio::test]
async fn registration_is_stable_and_publishes_maps() {
    let env = env().await;
    let svc = &env.svc;
    let MetaReply::Node { id: first, map_version } = ok(
        svc,
        MetaOp::RegisterNode { uuid: 7, addr: "h1:1".into(), drives: vec![], pool: String::new(), object: None },
    )
    .await
    else {
        panic!("node")
    };
    assert_eq!((first, map_version), (1, 1));
    let MetaReply::Node { id: second, map_version } = ok(
        svc,
        MetaOp::RegisterNode { uuid: 8, addr: "h2:1".into(), drives: vec![], pool: String::new(), object: None },
    )
    .await
    else {
        panic!("node")
    };
    assert_eq!((second, map_version), (2, 2));
    // Re-registration with a new address: same id, no new map.
    let MetaReply::Node { id, map_version } = ok(
        svc,
        MetaOp::RegisterNode {
            uuid: 7,
            addr: "h1:2".into(),
            drives: vec![drive(10, 5)],
            pool: String::new(),
            object: None,
        },
    )
    .await
    else {
        panic!("node")
    };
    assert_eq!((id, map_version), (first, 2));
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: false }).await);
    assert_eq!(status.map_version, 2);
    let node = status.nodes.iter().find(|n| n.id == first).unwrap_or_else(|| panic!("node {first} missing"));
    assert_eq!((node.addr.as_str(), node.uuid, node.state), ("h1:2", 7, NodeState::Up));
    // Published maps are what compute_map gives, and old versions stay readable.
    let MetaReply::Map(v2) = ok(svc, MetaOp::GetMap { version: 0 }).await else { panic!("map") };
    assert_eq!(v2, compute_map(2, PGS, &[1, 2]));
    let MetaReply::Map(v1) = ok(svc, MetaOp::GetMap { version: 1 }).await else { panic!("map") };
    assert_eq!(v1, compute_map(1, PGS, &[1]));
    err(svc, MetaOp::GetMap { version: 3 }, ErrorCode::NotFound).await;
    err(
        svc,
        MetaOp::RegisterNode { uuid: 0, addr: "x:1".into(), drives: vec![], pool: String::new(), object: None },
        ErrorCode::Invalid,
    )
    .await;
    err(
        svc,
        MetaOp::RegisterNode { uuid: 9, addr: String::new(), drives: vec![], pool: String::new(), object: None },
        ErrorCode::Invalid,
    )
    .await;
    // Another metadata server on the same engine sees the same cluster.
    let other = MetaService::new(svc.engine().clone(), test_options()).await.unwrap_or_else(|e| panic!("{e}"));
    let MetaReply::Node { id, .. } = ok(
        &other,
        MetaOp::RegisterNode { uuid: 8, addr: "h2:1".into(), drives: vec![], pool: String::new(), object: None },
    )
    .await
    else {
        panic!("node")
    };
    assert_eq!(id, second);
}

#[tokio::test]
async fn heartbeats_and_liveness() {
    let env = env_with(MetaOptions { down_after_ms: 300, ..test_options() }).await;
    let svc = &env.svc;
    let ids = nodes(svc, 2).await;
    err(svc, MetaOp::Heartbeat { node: 99, drives: vec![] }, ErrorCode::NotMember).await;
    assert_eq!(
        ok(svc, MetaOp::Heartbeat { node: ids[0], drives: vec![] }).await,
        MetaReply::Heartbeat { map_version: 2, bytes_pending_delete: 0, pending_delete_within_ms: 1000 }
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    ok(svc, MetaOp::Heartbeat { node: ids[0], drives: vec![drive(100, 40)] }).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: false }).await);
    let state = |id: NodeId| status.nodes.iter().find(|n| n.id == id).map(|n| (n.state, n.heartbeat_age_ms));
    let (s0, age0) = state(ids[0]).unwrap_or_else(|| panic!("node"));
    let (s1, age1) = state(ids[1]).unwrap_or_else(|| panic!("node"));
    assert_eq!((s0, s1), (NodeState::Up, NodeState::Down));
    assert!(age0 < 300 && age1 >= 300, "ages {age0} {age1}");
    assert_eq!(status.nodes.iter().find(|n| n.id == ids[0]).map(|n| n.drives.clone()), Some(vec![drive(100, 40)]));
    ok(svc, MetaOp::Heartbeat { node: ids[1], drives: vec![] }).await;
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: false }).await);
    assert!(status.nodes.iter().all(|n| n.state == NodeState::Up));
}

/// `NodeStates` answers the node list only when its version differs from the caller's, and the
/// version moves when a node goes down or is drained (what clients poll instead of `Status`).
#[tokio::test]
async fn node_states_are_sent_only_when_their_version_changes() {
    let env = env_with(MetaOptions { down_after_ms: 300, ..test_options() }).await;
    let svc = &env.svc;
    let ids = nodes(svc, 3).await;
    let states = |reply: MetaReply| match reply {
        MetaReply::NodeStates { version, nodes } => (version, nodes),
        other => panic!("expected node states, got {other:?}"),
    };
    let (v1, all) = states(ok(svc, MetaOp::NodeStates { known: 0 }).await);
    assert_ne!(v1, 0);
    assert_eq!(all.len(), 3);
    assert!(all.iter().all(|n| n.state == NodeState::Up && ids.contains(&n.id)));
    assert_eq!(all.iter().find(|n| n.id == ids[0]).map(|n| n.addr.as_str()), Some("127.0.0.1:20000"));
    // Nothing changed: only the version comes back.
    assert_eq!(states(ok(svc, MetaOp::NodeStates { known: v1 }).await), (v1, vec![]));

    // The third node stops heartbeating: down, a new version, the list again.
    let beat = |id: NodeId| MetaOp::Heartbeat { node: id, drives: vec![] };
    tokio::time::sleep(Duration::from_millis(200)).await;
    ok(svc, beat(ids[0])).await;
    ok(svc, beat(ids[1])).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (v2, all) = states(ok(svc, MetaOp::NodeStates { known: v1 }).await);
    assert_ne!(v2, v1, "a node went down and the version stayed");
    let down: Vec<NodeId> = all.iter().filter(|n| n.state == NodeState::Down).map(|n| n.id).collect();
    assert_eq!(down, vec![ids[2]]);
    assert_eq!(states(ok(svc, MetaOp::NodeStates { known: v2 }).await).1, vec![]);

    // An operator's drain shows at once (not after the records' cache expires).
    ok(svc, beat(ids[0])).await;
    ok(svc, beat(ids[1])).await;
    ok(svc, MetaOp::SetNodeState { node: ids[1], state: NodeState::Draining, force: true }).await;
    let (v3, all) = states(ok(svc, MetaOp::NodeStates { known: v2 }).await);
    assert_ne!(v3, v2);
    assert_eq!(all.iter().find(|n| n.id == ids[1]).map(|n| n.state), Some(NodeState::Draining));
    // The version is a digest of the states: the same states give the same version.
    assert_eq!(wire::NodeBrief::version_of(&all), v3);
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(wire::NodeBrief::version_of(&reversed), v3);
}

#[tokio::test]
async fn alloc_narrows_the_scheme_to_the_nodes_there_are() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    let alloc = |count: u32, avoid: Vec<NodeId>| MetaOp::AllocChunks { ino: f.ino, count, avoid };
    let message = err(svc, alloc(1, vec![]), ErrorCode::Unavailable).await;
    assert!(message.contains("no storage node has joined"), "{message}");
    // Five nodes for a 4+2 file: written 3+2 (full parity, one data shard less).
    let five = nodes(svc, 5).await;
    let MetaReply::Alloc { chunks, map, ec } = ok(svc, alloc(4, vec![])).await else { panic!("alloc") };
    assert_eq!(ec, EcScheme { k: 3, m: 2 });
    assert_eq!(chunks.len(), 4);
    for (_, placement) in &chunks {
        assert_eq!(placement.map_version, map.version);
    }
    // Nodes the writer could not use are avoided: 2+2 on the other four; 1+1 on two; one
    // node left keeps no redundancy and is refused.
    let MetaReply::Alloc { chunks, map, ec } = ok(svc, alloc(8, vec![five[0]])).await else { panic!("alloc") };
    assert_eq!(ec, EcScheme { k: 2, m: 2 });
    for (_, placement) in &chunks {
        assert!(!map.pool_pgs(0)[placement.pg as usize][..4].contains(&five[0]));
    }
    let MetaReply::Alloc { ec, .. } = ok(svc, alloc(1, five[..3].to_vec())).await else { panic!("alloc") };
    assert_eq!(ec, EcScheme { k: 1, m: 1 });
    let message = err(svc, alloc(1, five[..4].to_vec()), ErrorCode::Unavailable).await;
    assert!(
        message.contains("only 1 of the 5 storage nodes can take writes") && message.contains("needs at least 2"),
        "{message}"
    );
    // A count of 0 asks which scheme a write would get, reserving nothing.
    let MetaReply::Alloc { chunks, ec, .. } = ok(svc, alloc(0, vec![])).await else { panic!("alloc") };
    assert!(chunks.is_empty());
    assert_eq!(ec, EcScheme { k: 3, m: 2 });
    nodes_from(svc, 5, 1).await;
    let MetaReply::Alloc { chunks, map, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 10, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    assert_eq!(chunks.len(), 10);
    assert_eq!(map.version, 6);
    let ids: HashSet<_> = chunks.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 10, "ids are unique");
    for (id, placement) in &chunks {
        assert_eq!(placement.map_version, 6);
        assert_eq!(placement.pg, pg_for_chunk(*id, PGS), "all nodes up: the hashed PG");
    }
    let MetaReply::Alloc { chunks: more, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 3, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    assert!(more.iter().all(|(id, _)| !ids.contains(id)));
    let d = mkdir(svc, ROOT_INO, "d").await;
    err(svc, MetaOp::AllocChunks { ino: d.ino, count: 1, avoid: vec![] }, ErrorCode::IsDir).await;
    err(svc, MetaOp::AllocChunks { ino: 123_456, count: 1, avoid: vec![] }, ErrorCode::NotFound).await;
    err(svc, MetaOp::AllocChunks { ino: f.ino, count: 100_000, avoid: vec![] }, ErrorCode::TooLarge).await;
    // A replicated file needs only 3 nodes.
    let g = create(svc, ROOT_INO, "g").await;
    ok(
        svc,
        MetaOp::SetLayout {
            ino: g.ino,
            ec: EcScheme { k: 1, m: 2 },
            chunk_bytes: 1 << 20,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
    )
    .await;
    ok(svc, MetaOp::AllocChunks { ino: g.ino, count: 1, avoid: vec![] }).await;
}

async fn nodes_from(svc: &MetaService, first: usize, count: usize) -> Vec<NodeId> {
    let mut ids = Vec::new();
    for i in first..first + count {
        ids.push(register(svc, 1000 + i as u128, &format!("127.0.0.1:{}", 20000 + i)).await);
    }
    ids
}

#[tokio::test]
async fn alloc_avoids_groups_with_down_nodes() {
    let env = env_with(MetaOptions { down_after_ms: 300, ..test_options() }).await;
    let svc = &env.svc;
    let ids = nodes(svc, 8).await;
    let f = create(svc, ROOT_INO, "f").await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    // Everyone but the last node heartbeats.
    let down = *ids.last().unwrap_or_else(|| panic!("no nodes"));
    for &id in &ids[..7] {
        ok(svc, MetaOp::Heartbeat { node: id, drives: vec![] }).await;
    }
    let MetaReply::Alloc { chunks, map, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 200, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let mut moved = 0;
    for (id, placement) in &chunks {
        let group = &map.pool_pgs(0)[placement.pg as usize][..6];
        assert!(!group.contains(&down), "chunk {id} placed on down node {down} in pg {}", placement.pg);
        if placement.pg != pg_for_chunk(*id, PGS) {
            moved += 1;
        }
    }
    assert!(moved > 0, "some chunks hash to a PG with the down node and were moved");
    // With only four nodes up, no group has six up at its head: the chunks are written 2+2
    // on groups whose first four nodes are up, never degraded.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let up = &ids[..4];
    for &id in up {
        ok(svc, MetaOp::Heartbeat { node: id, drives: vec![] }).await;
    }
    let MetaReply::Alloc { chunks, map, ec } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 20, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    assert_eq!(ec, EcScheme { k: 2, m: 2 });
    for (id, placement) in &chunks {
        let group = &map.pool_pgs(0)[placement.pg as usize][..4];
        assert!(group.iter().all(|n| up.contains(n)), "chunk {id} in pg {} on {group:?}", placement.pg);
    }
}

#[tokio::test]
async fn statfs_scales_capacity_by_the_default_scheme() {
    let env = env().await;
    let svc = &env.svc;
    for i in 0..6u128 {
        ok(
            svc,
            MetaOp::RegisterNode {
                uuid: 50 + i,
                addr: format!("n{i}:1"),
                drives: vec![drive(600, 300), drive(60, 30)],
                pool: String::new(),
                object: None,
            },
        )
        .await;
    }
    create(svc, ROOT_INO, "f").await;
    let MetaReply::StatFs(stat) = ok(svc, MetaOp::StatFs).await else { panic!("statfs") };
    assert_eq!((stat.bytes_total, stat.bytes_free), (6 * 660 * 4 / 6, 6 * 330 * 4 / 6));
    assert_eq!((stat.inodes_used, stat.name_bytes_max), (2, 255));
    // Heartbeats update the drive figures.
    ok(svc, MetaOp::Heartbeat { node: 1, drives: vec![drive(6000, 6000)] }).await;
    let MetaReply::StatFs(stat) = ok(svc, MetaOp::StatFs).await else { panic!("statfs") };
    assert_eq!(stat.bytes_total, (5 * 660 + 6000) * 4 / 6);
}

#[tokio::test]
async fn status_counts_degraded_and_unavailable_chunks() {
    let env = env_with(MetaOptions { down_after_ms: 300, ..test_options() }).await;
    let svc = &env.svc;
    let ids = nodes(svc, 6).await;
    let f = create(svc, ROOT_INO, "f").await;
    let ec = EcScheme::DEFAULT;
    let MetaReply::Alloc { chunks: alloc, map, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 3, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let cb = f.chunk_bytes;
    let mut records: Vec<_> =
        alloc.iter().enumerate().map(|(i, (id, placement))| chunk(i as u64, *id, cb, ec, *placement)).collect();
    records[1].missing = 0b1; // degraded from the start
    ok(svc, commit(f.ino, records.clone(), 3 * u64::from(cb))).await;
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: true }).await);
    assert_eq!((status.files, status.chunks, status.chunks_degraded, status.chunks_unavailable), (1, 3, 1, 0));
    assert_eq!(status.ec_schemes, vec![(ec, 3)]);
    assert!(status.engine.starts_with("redb "), "{}", status.engine);
    // Nodes go down: the nodes of shards 1 and 2 of chunk 1 (whose shard 0 is missing) stop
    // heartbeating, so chunk 1 has 3 unavailable shards (> m = 2), every chunk is degraded.
    let pg = &map.pool_pgs(0)[records[1].placement.pg as usize];
    let silent: HashSet<NodeId> = [pg[1], pg[2]].into_iter().collect();
    tokio::time::sleep(Duration::from_millis(350)).await;
    for id in ids.iter().filter(|id| !silent.contains(id)) {
        ok(svc, MetaOp::Heartbeat { node: *id, drives: vec![] }).await;
    }
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: true }).await);
    assert_eq!(
        (status.chunks_degraded, status.chunks_unavailable),
        (3, 1),
        "6 nodes, 2 down: every chunk has a shard there"
    );
    let without_scan = status_of(ok(svc, MetaOp::Status { scan_chunks: false }).await);
    assert_eq!((without_scan.chunks, without_scan.chunks_degraded), (3, 0));
}

/// A cluster of fake storage nodes registered with `svc`; returns them by node id.
async fn fake_cluster(svc: &MetaService, count: usize) -> HashMap<NodeId, std::sync::Arc<FakeStorage>> {
    let mut fakes = HashMap::new();
    for i in 0..count {
        let (storage, addr) = fake_storage().await;
        let id = register(svc, 5000 + i as u128, &addr).await;
        fakes.insert(id, storage);
    }
    fakes
}

/// Writes `count` chunks into a new file (as a client would after storing the shards).
async fn file_with_chunks(svc: &MetaService, name: &str, count: u32) -> (wire::Attr, Vec<wire::ChunkRecord>) {
    let f = create(svc, ROOT_INO, name).await;
    let MetaReply::Alloc { chunks, .. } = ok(svc, MetaOp::AllocChunks { ino: f.ino, count, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let cb = f.chunk_bytes;
    let records: Vec<_> =
        chunks.iter().enumerate().map(|(i, (id, placement))| chunk(i as u64, *id, cb, f.ec, *placement)).collect();
    ok(svc, commit(f.ino, records.clone(), u64::from(count) * u64::from(cb))).await;
    (f, records)
}

/// The shard keys of `chunk` that placement puts on each node.
fn expected_deletes(map: &PlacementMap, chunks: &[wire::ChunkRecord]) -> HashMap<NodeId, HashSet<ShardKey>> {
    let mut expected: HashMap<NodeId, HashSet<ShardKey>> = HashMap::new();
    for c in chunks {
        for shard in 0..c.ec.width() {
            let node = map.node_for(c.placement.pg, shard).unwrap_or_else(|| panic!("no node"));
            expected.entry(node).or_default().insert(ShardKey { chunk: c.id, index: shard as u8 });
        }
    }
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_deletes_shards_of_unreferenced_chunks() {
    let env = env().await;
    let svc = &env.svc;
    let fakes = fake_cluster(svc, 7).await;
    let (f, old) = file_with_chunks(svc, "f", 3).await;
    let MetaReply::Map(map) = ok(svc, MetaOp::GetMap { version: 0 }).await else { panic!("map") };
    // Nothing queued: GC does nothing.
    assert_eq!(svc.gc_once().await.map(|r| r.chunks_deleted).ok(), Some(0));
    // Overwrite chunk 1 (copy-on-write), then delete the file.
    let MetaReply::Alloc { chunks: fresh, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 1, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let replacement = chunk(1, fresh[0].0, f.chunk_bytes, f.ec, fresh[0].1);
    ok(svc, commit(f.ino, vec![replacement.clone()], 0)).await;
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.shards_deleted), (1, 6));
    let expected = expected_deletes(&map, &old[1..2]);
    for (id, fake) in &fakes {
        let got: HashSet<ShardKey> = fake.deleted.lock().iter().copied().collect();
        assert_eq!(got, expected.get(id).cloned().unwrap_or_default(), "node {id}");
    }
    // Shards of the still-referenced chunks were not touched.
    let all_deleted: HashSet<u64> =
        fakes.values().flat_map(|f| f.deleted.lock().iter().map(|k| k.chunk).collect::<Vec<_>>()).collect();
    assert!(!all_deleted.contains(&old[0].id) && !all_deleted.contains(&replacement.id));
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    assert_eq!(count_keys(svc, prefix::GC).await, 3);
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.chunks_pending), (3, 0));
    assert_eq!(count_keys(svc, prefix::GC).await, 0);
    let total: usize = fakes.values().map(|f| f.deleted.lock().len()).sum();
    assert_eq!(total, 4 * 6, "every shard of the 4 dead chunks deleted exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_waits_for_failing_and_down_nodes() {
    let env = env_with(MetaOptions { down_after_ms: 400, ..test_options() }).await;
    let svc = &env.svc;
    let fakes = fake_cluster(svc, 6).await;
    file_with_chunks(svc, "f", 2).await;
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    // One node fails its deletions: the entries stay, with the other shards marked done.
    let failing = *fakes.keys().min().unwrap_or_else(|| panic!("no nodes"));
    fakes[&failing].failing.store(true, Ordering::SeqCst);
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.chunks_pending, report.shards_deleted), (0, 2, 10));
    assert_eq!(count_keys(svc, prefix::GC).await, 2);
    // Retried on the next pass: only the missing shards are sent.
    fakes[&failing].failing.store(false, Ordering::SeqCst);
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.shards_deleted), (2, 2));
    let total: usize = fakes.values().map(|f| f.deleted.lock().len()).sum();
    assert_eq!(total, 12);
    // A down node is not contacted at all until it is back.
    let (_, records2) = file_with_chunks(svc, "g", 1).await;
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "g".into() }).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    let down = failing;
    for id in fakes.keys().filter(|&&id| id != down) {
        ok(svc, MetaOp::Heartbeat { node: *id, drives: vec![] }).await;
    }
    let before = fakes[&down].deleted.lock().len();
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.chunks_pending, report.shards_deleted), (0, 1, 5));
    assert_eq!(fakes[&down].deleted.lock().len(), before);
    ok(svc, MetaOp::Heartbeat { node: down, drives: vec![] }).await;
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.shards_deleted), (1, 1));
    assert!(fakes[&down].deleted.lock().iter().any(|k| k.chunk == records2[0].id));
}

#[tokio::test]
async fn gc_never_deletes_referenced_chunks() {
    let env = env().await;
    let svc = &env.svc;
    let fakes = fake_cluster(svc, 6).await;
    let (f, records) = file_with_chunks(svc, "f", 1).await;
    // Forge a queue entry for a live chunk (as a bug elsewhere might).
    let rec = keys::GcRec { ino: f.ino, chunk: records[0].clone(), queued_ms: 0, done: 0 };
    put_raw(svc, &keys::gc(records[0].id), &keys::encode(&rec)).await;
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_referenced, report.shards_deleted), (1, 0));
    assert!(fakes.values().all(|f| f.deleted.lock().is_empty()));
    assert_eq!(count_keys(svc, prefix::GC).await, 0);
    let (_, chunks) = match ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 1 }).await {
        MetaReply::Chunks { attr, chunks } => (attr, chunks),
        other => panic!("{other:?}"),
    };
    assert_eq!(chunks, records);
}

#[tokio::test]
async fn gc_respects_the_grace_period() {
    let env = env_with(MetaOptions { gc_grace_ms: 60_000, ..test_options() }).await;
    let svc = &env.svc;
    let fakes = fake_cluster(svc, 6).await;
    file_with_chunks(svc, "f", 1).await;
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_pending, report.shards_deleted), (1, 0));
    assert!(fakes.values().all(|f| f.deleted.lock().is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_the_network_with_background_gc() {
    let env = env_with(MetaOptions { gc_interval_ms: 50, ..test_options() }).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}")).to_string();
    let server = tokio::spawn(meta::serve(listener, env.svc.clone(), "test-cluster".into()));
    let (conn, hello) = Connection::connect(&addr, Service::Meta).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hello.cluster, "test-cluster");
    let rpc = |op: MetaOp| {
        let conn = conn.clone();
        async move {
            let call = MetaCall { request_id: rid(), op };
            match conn.call::<MetaCall, MetaReply>(&call, bytes::Bytes::new(), Duration::from_secs(10)).await {
                Ok((reply, _)) => Ok(reply),
                Err(wire::RpcError::Remote(e)) => Err(e),
                Err(other) => panic!("transport: {other}"),
            }
        }
    };
    let made: MetaResult =
        rpc(MetaOp::Mkdir { parent: ROOT_INO, name: "net".into(), mode: 0o755, uid: 0, gid: 0 }).await;
    let dir = attr_of(made.unwrap_or_else(|e| panic!("{e}")));
    let found = attr_of(rpc(MetaOp::Resolve { path: "/net".into() }).await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(found.ino, dir.ino);
    let e = rpc(MetaOp::Lookup { parent: ROOT_INO, name: "absent".into() }).await.err();
    assert_eq!(e.map(|e| e.code), Some(ErrorCode::NotFound));
    // Storage nodes register over the network; the background GC deletes unlinked data.
    let mut fakes = Vec::new();
    for i in 0..6u128 {
        let (fake, fake_addr) = fake_storage().await;
        let reply = rpc(MetaOp::RegisterNode {
            uuid: 900 + i,
            addr: fake_addr,
            drives: vec![],
            pool: String::new(),
            object: None,
        })
        .await;
        assert!(matches!(reply, Ok(MetaReply::Node { .. })), "{reply:?}");
        fakes.push(fake);
    }
    file_with_chunks(&env.svc, "data", 2).await;
    rpc(MetaOp::Unlink { parent: ROOT_INO, name: "data".into() }).await.unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let deleted: usize = fakes.iter().map(|f| f.deleted.lock().len()).sum();
        if deleted == 12 && count_keys(&env.svc, prefix::GC).await == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "background GC deleted {deleted} of 12 shards");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The wrong service is refused at the handshake.
    assert!(Connection::connect(&addr, Service::Storage).await.is_err());
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_from_a_config_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // Find a free port (released again before `run` binds it).
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port());
    let addr = format!("127.0.0.1:{}", port.unwrap_or_else(|e| panic!("{e}")));
    let text = format!(
        "listen = {addr:?}\ncluster = \"cfg\"\ndefault_ec = \"2+1\"\nchunk_bytes = 1048576\nengine = {{ redb = {:?} }}\n",
        dir.path().join("meta.redb")
    );
    let config = meta::MetaConfig::from_toml(&text).unwrap_or_else(|e| panic!("{e:#}"));
    let server = tokio::spawn(meta::run(config));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let conn = loop {
        match Connection::connect(&addr, Service::Meta).await {
            Ok((conn, hello)) => {
                assert_eq!(hello.cluster, "cfg");
                break conn;
            }
            Err(e) => {
                assert!(!server.is_finished(), "run ended early");
                assert!(std::time::Instant::now() < deadline, "server did not start: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let call = MetaCall { request_id: 0, op: MetaOp::GetAttr { ino: ROOT_INO } };
    let (reply, _) = conn
        .call::<MetaCall, MetaReply>(&call, bytes::Bytes::new(), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let root = attr_of(reply);
    assert_eq!((root.ec, root.chunk_bytes), (EcScheme { k: 2, m: 1 }, 1 << 20), "the root takes the configured layout");
    server.abort();
}

#[tokio::test]
async fn layouts_the_cluster_cannot_hold_are_refused_when_chosen() {
    let env = env().await;
    let svc = &env.svc;
    nodes(svc, 6).await;
    let d = mkdir(svc, ROOT_INO, "checkpoints").await;
    let layout =
        |ec: EcScheme, check: wire::LayoutCheck| MetaOp::SetLayout { ino: d.ino, ec, chunk_bytes: 1 << 20, check };
    let chosen = wire::LayoutCheck::Chosen;
    let message = err(svc, layout(EcScheme { k: 8, m: 2 }, chosen), ErrorCode::Invalid).await;
    assert!(message.contains("8+2 needs 10 storage nodes; the cluster has 6") && message.contains("4+2"), "{message}");
    assert_eq!(getattr(svc, d.ino).await.ec, EcScheme::DEFAULT, "nothing changed");
    let message = err(svc, layout(EcScheme { k: 1, m: 0 }, chosen), ErrorCode::Invalid).await;
    assert!(message.contains("keeps no parity"), "{message}");
    ok(svc, layout(EcScheme { k: 1, m: 0 }, wire::LayoutCheck::ChosenWithoutRedundancy)).await;
    ok(svc, layout(EcScheme { k: 4, m: 2 }, chosen)).await;
    // A layout copied from elsewhere is taken as it is (its chunks are written narrower).
    ok(svc, layout(EcScheme { k: 8, m: 2 }, wire::LayoutCheck::Copied)).await;
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: true }).await);
    assert_eq!(status.dirs_too_wide, vec![("/checkpoints".to_string(), EcScheme { k: 8, m: 2 })]);
    assert_eq!(status.dirs_too_wide_count, 1);
}

#[tokio::test]
async fn drains_the_nodes_left_cannot_hold_are_refused_unless_forced() {
    let env = env().await;
    let svc = &env.svc;
    let ids = nodes(svc, 7).await;
    let set = |node: NodeId, state: NodeState, force: bool| MetaOp::SetNodeState { node, state, force };
    // 7 nodes, 4+2 everywhere: one may go.
    ok(svc, set(ids[6], NodeState::Draining, false)).await;
    ok(svc, set(ids[6], NodeState::Up, false)).await;
    let d = mkdir(svc, ROOT_INO, "checkpoints").await;
    let top = mkdir(svc, d.ino, "wide").await;
    ok(
        svc,
        MetaOp::SetLayout {
            ino: top.ino,
            ec: EcScheme { k: 5, m: 2 },
            chunk_bytes: 1 << 20,
            check: wire::LayoutCheck::Chosen,
        },
    )
    .await;
    let message = err(svc, set(ids[5], NodeState::Draining, false), ErrorCode::NoSpace).await;
    assert!(
        message.contains(&format!("draining node {} leaves 6 storage nodes", ids[5]))
            && message.contains("/checkpoints/wide uses 5+2, which needs 7")
            && message.contains("--force"),
        "{message}"
    );
    let message = err(svc, set(ids[5], NodeState::Out, false), ErrorCode::NoSpace).await;
    assert!(message.starts_with(&format!("removing node {}", ids[5])), "{message}");
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: false }).await);
    assert!(status.nodes.iter().all(|n| n.state == NodeState::Up), "nothing changed");
    ok(svc, set(ids[5], NodeState::Draining, true)).await;
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: true }).await);
    assert_eq!(status.dirs_too_wide, vec![("/checkpoints/wide".to_string(), EcScheme { k: 5, m: 2 })]);
}

#[tokio::test]
async fn abandoned_chunks_go_to_gc_and_replacements_keep_the_data_version() {
    let env = env().await;
    let svc = &env.svc;
    nodes(svc, 6).await;
    let (f, records) = file_with_chunks(svc, "f", 2).await;
    let before = getattr(svc, f.ino).await;
    let MetaReply::Alloc { chunks, ec, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 2, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    // A partial upload given up: queued for GC; committing it afterwards is refused.
    let lost = chunk(1, chunks[0].0, f.chunk_bytes, ec, chunks[0].1);
    let gc_before = count_keys(svc, prefix::GC).await;
    ok(svc, MetaOp::AbandonChunks { ino: f.ino, chunks: vec![lost.clone()] }).await;
    assert_eq!(count_keys(svc, prefix::GC).await, gc_before + 1);
    ok(svc, MetaOp::AbandonChunks { ino: f.ino, chunks: vec![lost.clone()] }).await;
    assert_eq!(count_keys(svc, prefix::GC).await, gc_before + 1, "idempotent");
    err(svc, commit(f.ino, vec![lost], before.size), ErrorCode::Invalid).await;
    // A referenced chunk is never given up.
    ok(svc, MetaOp::AbandonChunks { ino: f.ino, chunks: vec![records[0].clone()] }).await;
    assert_eq!(count_keys(svc, prefix::GC).await, gc_before + 1);
    // Re-encoded narrower under a new id: replaced, the old one queued, the data version kept.
    let narrow_ec = EcScheme { k: 3, m: 2 };
    let narrow = chunk(0, chunks[1].0, f.chunk_bytes, narrow_ec, chunks[1].1);
    ok(svc, MetaOp::ReplaceChunk { ino: f.ino, expected: records[0].clone(), new: narrow.clone() }).await;
    let after = getattr(svc, f.ino).await;
    assert_eq!((after.data_version, after.size), (before.data_version, before.size));
    assert_eq!(count_keys(svc, prefix::GC).await, gc_before + 2);
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: true }).await);
    assert_eq!(status.chunks_narrow, 1);
    // The record changed: a replacement based on the old one is refused.
    let MetaReply::Alloc { chunks: more, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 1, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    let again = chunk(0, more[0].0, f.chunk_bytes, f.ec, more[0].1);
    err(svc, MetaOp::ReplaceChunk { ino: f.ino, expected: records[0].clone(), new: again.clone() }, ErrorCode::Changed)
        .await;
    // Never wider than the file's scheme.
    let wide = chunk(0, more[0].0, f.chunk_bytes, EcScheme { k: 5, m: 2 }, more[0].1);
    err(svc, MetaOp::ReplaceChunk { ino: f.ino, expected: narrow.clone(), new: wide }, ErrorCode::Invalid).await;
    ok(svc, MetaOp::ReplaceChunk { ino: f.ino, expected: narrow, new: again }).await;
    let status = status_of(ok(svc, MetaOp::Status { scan_chunks: true }).await);
    assert_eq!(status.chunks_narrow, 0);
}

/// Several storage nodes on one disk (a local cluster, or a host with one big volume) report
/// the same device: statfs counts its space once, not once per node.
#[tokio::test]
async fn statfs_counts_each_device_once() {
    let env = env().await;
    let svc = &env.svc;
    for i in 0..6u128 {
        // Nodes 1-4 share device 7; 5 and 6 have disks of their own, one of unknown device.
        let d = match i {
            0..=3 => drive_on(7, 1000, 600 - i as u64),
            4 => drive_on(8, 500, 100),
            _ => drive_on(0, 300, 30),
        };
        let op = MetaOp::RegisterNode {
            uuid: 90 + i,
            addr: format!("n{i}:1"),
            drives: vec![d],
            pool: String::new(),
            object: None,
        };
        ok(svc, op).await;
    }
    let MetaReply::StatFs(stat) = ok(svc, MetaOp::StatFs).await else { panic!("statfs") };
    // The shared disk once (its smallest free figure, the latest report being unknown).
    assert_eq!((stat.bytes_total, stat.bytes_free), ((1000 + 500 + 300) * 4 / 6, (597 + 100 + 30) * 4 / 6));
    assert_eq!(stat.bytes_pending_delete, 0);
}

/// Bytes that deleted and overwritten files hold until the GC deletes their shards are counted
/// exactly as chunks are queued and deleted (no scan): status shows them, statfs counts them as
/// free, and heartbeats tell the storage nodes (which tell a writer that finds them full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_pending_deletion_are_counted_until_deleted() {
    let env = env_with(MetaOptions { gc_grace_ms: 0, gc_interval_ms: 500, ..test_options() }).await;
    let svc = &env.svc;
    let fakes = fake_cluster(svc, 6).await;
    let pending = |svc: std::sync::Arc<MetaService>| async move {
        let MetaReply::Status(s) = ok(&svc, MetaOp::Status { scan_chunks: false }).await else { panic!("status") };
        let MetaReply::StatFs(f) = ok(&svc, MetaOp::StatFs).await else { panic!("statfs") };
        (s.bytes_pending_delete, s.pending_delete_within_ms, f.bytes_pending_delete)
    };
    let (f, records) = file_with_chunks(svc, "f", 2).await;
    let shard = u64::from(records[0].shard_len);
    assert_eq!(pending(svc.clone()).await, (0, 500, 0));
    // Overwriting a chunk queues the old one: its 6 shards.
    let MetaReply::Alloc { chunks: fresh, .. } =
        ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 1, avoid: vec![] }).await
    else {
        panic!("alloc")
    };
    ok(svc, commit(f.ino, vec![chunk(1, fresh[0].0, f.chunk_bytes, f.ec, fresh[0].1)], 0)).await;
    assert_eq!(pending(svc.clone()).await.0, 6 * shard);
    // Deleting the file queues its 2 chunks (12 shards) more; statfs counts them (scaled by
    // 4+2) as free.
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    assert_eq!(pending(svc.clone()).await, (18 * shard, 500, 18 * shard * 4 / 6));
    let MetaReply::Heartbeat { bytes_pending_delete, pending_delete_within_ms, .. } =
        ok(svc, MetaOp::Heartbeat { node: *fakes.keys().min().unwrap_or(&1), drives: vec![] }).await
    else {
        panic!("heartbeat")
    };
    assert_eq!((bytes_pending_delete, pending_delete_within_ms), (18 * shard, 500));
    // A node failing its deletions keeps its shards counted; the others are taken off.
    let failing = *fakes.keys().min().unwrap_or_else(|| panic!("no nodes"));
    fakes[&failing].failing.store(true, Ordering::SeqCst);
    svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    let held_by_failing: u64 = (0..3).map(|_| shard).sum::<u64>();
    assert_eq!(pending(svc.clone()).await.0, held_by_failing, "one shard of each of the 3 chunks is left");
    fakes[&failing].failing.store(false, Ordering::SeqCst);
    svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pending(svc.clone()).await, (0, 500, 0));
    assert_eq!(count_keys(svc, prefix::GC).await, 0);
}

async fn renew(svc: &MetaService) -> bool {
    svc.renew_lease_once().await.unwrap_or_else(|e| panic!("{e}"))
}

/// The cluster manager's lease: one holder at a time; a holder whose lease lapsed while no
/// other server took it keeps its term (its jobs keep what they learnt), one that takes it back
/// after another server led starts a new term.
#[tokio::test]
async fn the_lease_has_one_holder_and_a_lapse_nobody_filled_keeps_the_term() {
    let options = MetaOptions { lease_ms: 150, ..test_options() };
    let env = env_with(options.clone()).await;
    let (a, b) =
        (&env.svc, MetaService::new(env.svc.engine().clone(), options).await.unwrap_or_else(|e| panic!("{e}")));
    assert!(renew(a).await && a.is_leader());
    let first = a.lease_term();
    assert!(!renew(&b).await && !b.is_leader(), "one holder at a time");
    // A lapses; nobody takes it; A renews: the same term.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!a.is_leader(), "a lapsed lease is not believed in");
    assert!(renew(a).await && a.is_leader());
    assert_eq!(a.lease_term(), first, "no other server led meanwhile");
    // A lapses, B takes it (once the clock skew allowance passed too), B lapses, A takes it
    // back: a new term for A.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(renew(&b).await && b.is_leader());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(renew(a).await && a.is_leader());
    assert_ne!(a.lease_term(), first, "another server led meanwhile");
}

/// Another server takes the lease over only `clock_skew_max_ms` after its recorded end (the
/// holder's clock may be that much behind, and it believes in its whole lease), while the holder
/// stops believing in it when its lease ends by its own monotonic clock.
#[tokio::test]
async fn the_lease_is_taken_over_only_after_the_clock_skew_allowance() {
    let options = MetaOptions { lease_ms: 300, clock_skew_max_ms: 250, ..test_options() };
    let refused = MetaOptions { clock_skew_max_ms: 300, ..options.clone() }.validate();
    assert!(
        refused.is_err_and(|e| e.message.contains("clock_skew_max_ms")),
        "the allowance must be less than the lease"
    );
    let env = env_with(options.clone()).await;
    let (a, b) =
        (&env.svc, MetaService::new(env.svc.engine().clone(), options).await.unwrap_or_else(|e| panic!("{e}")));
    assert!(renew(a).await && a.is_leader());
    tokio::time::sleep(std::time::Duration::from_millis(350)).await;
    assert!(!a.is_leader(), "the holder's lease ended by its own clock");
    assert!(!renew(&b).await && !b.is_leader(), "within the allowance nobody takes the lease over");
    tokio::time::sleep(std::time::Duration::from_millis(350)).await;
    assert!(renew(&b).await && b.is_leader(), "after the allowance another server takes it");
    assert!(!renew(a).await && !a.is_leader());
}
