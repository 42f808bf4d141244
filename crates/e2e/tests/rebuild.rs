//! Self-healing on a real local cluster of separate processes: rebuild after a node is lost
//! for longer than the grace period, drain and add with rebalance, scrub repairing a damaged
//! shard on disk, a rolling restart of every process under load without a failed client
//! operation, and the chunks only a snapshot holds rebuilt and drained like live ones. (The same behaviours across network namespaces are in `multihost.rs`.)

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sizes covering empty, tiny, sub-block, one chunk plus one byte, and multi-chunk files.
const SIZES: [usize; 6] = [0, 1, 4095, 1 << 20, (4 << 20) + 1, 9 << 20];

/// Fast failure detection and rebuild for tests (nodes heartbeat every second: down after
/// two and a half missed); scrub off unless a test turns it on.
const FAST: [&str; 8] =
    ["--down-after-ms", "2500", "--rebuild-after-ms", "3000", "--gc-grace-ms", "1000", "--scrub-interval-ms", "0"];

async fn write_files(client: &client::Client, prefix: &str, count: usize) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for i in 0..count {
        let data = content(i as u64 + prefix.len() as u64 * 1000, SIZES[i % SIZES.len()]);
        let path = format!("/{prefix}{i}");
        client.write_file(&path, &data).await.unwrap_or_else(|e| panic!("write {path}: {e}"));
        files.push((path, data));
    }
    files
}

async fn verify(client: &client::Client, files: &[(String, Vec<u8>)], when: &str) {
    for (path, data) in files {
        let got = client.read_file(path).await.unwrap_or_else(|e| panic!("{when}: read {path}: {e}"));
        assert!(got[..] == data[..], "{when}: {path} differs ({} vs {} bytes)", got.len(), data.len());
    }
}

fn node_state(status: &serde_json::Value, id: u64) -> String {
    status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == id)
        .map(|n| n["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

fn settled(status: &serde_json::Value) -> bool {
    status["chunks_degraded"] == 0
        && status["chunks_misplaced"] == 0
        && status["chunks_unavailable"] == 0
        && status["chunks_narrow"] == 0
}

fn shards_in(dir: &std::path::Path) -> usize {
    shard_files_in(dir).len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_node_is_rebuilt_then_two_more_losses_lose_nothing() {
    let cluster = TestCluster::start_with(8, "4+2", &FAST);
    let client = cluster.client().await;
    let files = write_files(&client, "a", 18).await;

    // A reader runs through the loss and the rebuild: no read may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (client, files, stop, reads, failures) =
            (client.clone(), files.clone(), stop.clone(), reads.clone(), failures.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for (path, data) in &files {
                    match client.read_file(path).await {
                        Ok(got) if got[..] == data[..] => {}
                        Ok(_) => panic!("{path}: wrong bytes during rebuild"),
                        Err(e) => {
                            eprintln!("read {path} failed: {e}");
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    cluster.kill_node(2);
    // Written while node 2 is down: stored degraded, repaired by the rebuild as well.
    let degraded = write_files(&client, "b", 6).await;
    let status = cluster.wait_status(Duration::from_secs(60), "node 2 out and every chunk rebuilt", |s| {
        node_state(s, 2) == "out" && settled(s)
    });
    assert_eq!(status["nodes"].as_array().map(|n| n.iter().filter(|n| n["state"] == "up").count()), Some(7));
    // The status table marks the figures of a node that is out as its last report.
    let table = common::run_ok(&["--cluster", &cluster.dir_str(), "status"]);
    let row = table.lines().find(|l| l.split_whitespace().next() == Some("2")).expect("node 2's row");
    assert!(row.contains(" out ") && row.contains('*'), "{table}");
    assert!(table.contains("* as last reported"), "{table}");
    let up_row = table.lines().find(|l| l.split_whitespace().next() == Some("1")).expect("node 1's row");
    assert!(!up_row.contains('*'), "{table}");
    stop.store(true, Ordering::Relaxed);
    reader.await.expect("reader");
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert_eq!(failures.load(Ordering::Relaxed), 0, "reads failed during loss and rebuild");

    // Full redundancy is back: two more nodes may go.
    cluster.kill_node(5);
    cluster.kill_node(7);
    let fresh = cluster.client().await;
    verify(&fresh, &files, "after rebuild and 2 more losses").await;
    verify(&fresh, &degraded, "files written degraded, after rebuild and 2 more losses").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_then_add_keep_every_byte() {
    let cluster = TestCluster::start_with(7, "4+2", &FAST);
    let client = cluster.client().await;
    let files = write_files(&client, "d", 18).await;
    let node3 = cluster.path().join("node-3");
    assert!(shards_in(&node3) > 0, "node 3 holds shards before the drain");

    let out = run_ok(&["--cluster", &cluster.dir_str(), "node", "drain", "3"]);
    assert!(out.contains("draining"), "{out}");
    // Reads keep working while it drains.
    verify(&client, &files, "while draining").await;
    cluster.wait_status(Duration::from_secs(60), "node 3 drained and out", |s| node_state(s, 3) == "out" && settled(s));
    // Its old shards are deleted after the grace period.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while shards_in(&node3) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(shards_in(&node3), 0, "a drained node keeps no shards");
    // Still running, it is refused when it registers again: it would need emptying first.
    let log_path = cluster.path().join("logs").join("node-3.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log_path).unwrap_or_default().contains("was removed from the cluster") {
        assert!(std::time::Instant::now() < deadline, "node 3 was not told it was removed");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(node_state(&cluster.status(), 3), "out", "a removed node does not rejoin by itself");
    cluster.kill_node(3);
    verify(&cluster.client().await, &files, "after drain, node 3 stopped").await;

    // Add a node: the mover rebalances onto it.
    run_ok(&["cluster", "add-node", "--dir", &cluster.dir_str()]);
    cluster
        .wait_status(Duration::from_secs(60), "node 8 up and rebalanced", |s| node_state(s, 8) == "up" && settled(s));
    assert!(shards_in(&cluster.path().join("node-8")) > 0, "the new node received shards");
    // Two losses after the rebalance still lose nothing.
    cluster.kill_node(1);
    cluster.kill_node(8);
    verify(&cluster.client().await, &files, "after add, rebalance and 2 losses").await;

    // A removed node cannot come back by itself.
    let err = run(&["--cluster", &cluster.dir_str(), "node", "undrain", "3"]);
    assert!(!err.status.success());
    assert!(
        String::from_utf8_lossy(&err.stderr).contains("out of the cluster"),
        "{}",
        String::from_utf8_lossy(&err.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrub_repairs_a_damaged_shard_on_disk() {
    let cluster = TestCluster::start_with(6, "4+2", &["--scrub-interval-ms", "500", "--gc-grace-ms", "1000"]);
    let client = cluster.client().await;
    let data = content(7, 3 << 20);
    client.write_file("/scrubbed", &data).await.expect("write");
    let shards = cluster.shard_files();
    assert_eq!(shards.len(), 6, "{shards:?}");
    let victim = &shards[0];
    let original = std::fs::read(victim).expect("read shard");
    let mut damaged = original.clone();
    let at = damaged.len() - 100;
    damaged[at] ^= 0x5a;
    std::fs::write(victim, &damaged).expect("damage shard");

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if std::fs::read(victim).ok().as_deref() == Some(&original[..]) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "scrub did not repair {}", victim.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(cluster.path().join("logs").join("meta.log")).unwrap_or_default();
    assert!(log.contains("scrub: chunk"), "the repair is logged");
    assert_eq!(client.read_file("/scrubbed").await.expect("read")[..], data[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_of_every_process_fails_no_client_operation() {
    let cluster = TestCluster::start_with(6, "4+2", &["--down-after-ms", "2500", "--scrub-interval-ms", "0"]);
    let client = cluster.client().await;
    let base = write_files(&client, "r", 6).await;

    let stop = Arc::new(AtomicBool::new(false));
    let (ops, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (client, base, stop, ops, failures) =
            (client.clone(), base.clone(), stop.clone(), ops.clone(), failures.clone());
        tokio::spawn(async move {
            let mut written = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = format!("/load{i}");
                let data = content(1000 + i, (1 << 20) | ((i as usize * 4099) % 65536));
                let result = async {
                    client.write_file(&path, &data).await?;
                    let back = client.read_file(&path).await?;
                    let (old, old_data) = &base[i as usize % base.len()];
                    let again = client.read_file(old).await?;
                    Ok::<bool, client::WireError>(back[..] == data[..] && again[..] == old_data[..])
                }
                .await;
                match result {
                    Ok(true) => written.push((path, data)),
                    Ok(false) => panic!("wrong bytes during the rolling restart"),
                    Err(e) => {
                        eprintln!("operation {i} failed: {e}");
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                ops.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            written
        })
    };

    // The procedure of a rolling restart: one process at a time, the next only once the
    // cluster is healthy again (chunks written while a node was away are repaired first).
    let dir = cluster.dir_str();
    for node in 1..=6 {
        cluster.kill_node(node);
        std::thread::sleep(Duration::from_millis(300));
        cluster.restart_node(node);
        cluster.wait_status(Duration::from_secs(60), &format!("healthy after restarting node {node}"), |s| {
            settled(s) && s["nodes"].as_array().is_some_and(|n| n.iter().all(|n| n["state"] == "up"))
        });
        eprintln!("node {node} restarted; {} operations so far", ops.load(Ordering::Relaxed));
    }
    run_ok(&["cluster", "restart-meta", "--dir", &dir]);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let written = load.await.expect("load task");
    assert!(
        ops.load(Ordering::Relaxed) >= 7,
        "the load ran through the restarts ({} operations)",
        ops.load(Ordering::Relaxed)
    );
    assert_eq!(failures.load(Ordering::Relaxed), 0, "client operations failed during the rolling restart");
    // Everything written during the restarts reads back, and redundancy returns.
    let fresh = cluster.client().await;
    verify(&fresh, &written, "after the rolling restart").await;
    cluster.wait_status(Duration::from_secs(60), "no degraded chunks after the restarts", settled);
}

/// The nodes holding shards of `path`'s chunks, by `trove stat --layout --json`.
fn nodes_of(cluster: &TestCluster, path: &str) -> std::collections::BTreeSet<u64> {
    let out = run_ok(&["--cluster", &cluster.dir_str(), "stat", "--layout", "--json", path]);
    let layout: serde_json::Value = serde_json::from_str(&out).expect("layout is JSON");
    let mut nodes = std::collections::BTreeSet::new();
    for chunk in layout["chunks"].as_array().expect("chunks") {
        for shard in chunk["shards"].as_array().expect("shards") {
            nodes.insert(shard["node"].as_u64().expect("node id"));
        }
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_only_a_snapshot_holds_are_rebuilt_and_drained_too() {
    let cluster = TestCluster::start_with(8, "4+2", &FAST);
    let dir = cluster.dir_str();
    let client = cluster.client().await;
    client.mkdir_p("/snap").await.expect("mkdir");
    let mut kept = Vec::new();
    for i in 0..3u64 {
        let path = format!("/snap/f{i}");
        let data = content(500 + i, (9 << 20) + i as usize);
        client.write_file(&path, &data).await.expect("write");
        kept.push((format!("/snap/.snapshots/s1/f{i}"), data));
    }
    run_ok(&["snapshot", "create", "/snap", "s1", "--cluster", &dir]);
    // Rewritten: the snapshot's chunks are held by it alone.
    for i in 0..3u64 {
        client.write_file(&format!("/snap/f{i}"), &content(600 + i, 1 << 20)).await.expect("rewrite");
    }
    let held_on = |node: u64| kept.iter().any(|(path, _)| nodes_of(&cluster, path).contains(&node));
    let wait_off = |node: u64, what: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while held_on(node) {
            let status = cluster.status();
            assert!(
                std::time::Instant::now() < deadline,
                "the snapshot's chunks still have shards on node {node} after {what}: {:?}; jobs: {}",
                kept.iter().map(|(p, _)| nodes_of(&cluster, p)).collect::<Vec<_>>(),
                run_ok(&["--cluster", &dir, "job", "status"]) + &status.to_string()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let (lost, drained) = (2u64, 3u64);
    assert!(held_on(lost) && held_on(drained), "nodes {lost} and {drained} hold shards of the snapshot's chunks");

    // A node lost: once it is out, the snapshot's chunks are rebuilt elsewhere.
    cluster.kill_node(lost as usize);
    cluster.wait_status(Duration::from_secs(60), "the lost node out", |s| node_state(s, lost) == "out" && settled(s));
    wait_off(lost, "the rebuild");
    // A node drained: the snapshot's chunks leave it before it goes out.
    run_ok(&["--cluster", &dir, "node", "drain", &drained.to_string()]);
    cluster.wait_status(Duration::from_secs(60), "the drained node out", |s| {
        node_state(s, drained) == "out" && settled(s)
    });
    wait_off(drained, "the drain");

    // Full redundancy: two more nodes lost, and the snapshot still reads bit-exact.
    cluster.kill_node(drained as usize);
    cluster.kill_node(5);
    cluster.kill_node(6);
    for (path, data) in &kept {
        let got = client.read_file(path).await.unwrap_or_else(|e| panic!("read {path} with three nodes gone: {e}"));
        assert!(got[..] == data[..], "{path} differs");
    }
}
