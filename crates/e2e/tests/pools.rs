//! Storage pools on a real local cluster: a `flash` pool and an `hdd` pool of other nodes (4+2
//! each), files placed by their directory's pool, shards on disk only on the pool's nodes,
//! `stat --layout` and `du --by-pool`, per-pool checks of schemes and drains, and a pool made
//! and filled while the cluster runs.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;

/// `trove stat --layout --json` of `path`.
fn layout(cluster: &TestCluster, path: &str) -> serde_json::Value {
    let out = run_ok(&["--cluster", &cluster.dir_str(), "stat", "--layout", "--json", path]);
    serde_json::from_str(&out).expect("layout is JSON")
}

/// The pools and nodes each chunk of `path` is on, from `stat --layout`.
fn chunk_places(cluster: &TestCluster, path: &str) -> Vec<(String, String, BTreeSet<u64>)> {
    layout(cluster, path)["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| {
            let nodes = c["shards"].as_array().expect("shards").iter().filter_map(|s| s["node"].as_u64()).collect();
            (c["pool"].as_str().expect("pool").to_string(), c["id"].as_str().expect("id").to_string(), nodes)
        })
        .collect()
}

/// Which local node numbers (the `node-N` directories) hold a shard file of chunk `id` (hex).
fn nodes_holding(root: &Path, id: &str) -> BTreeSet<u64> {
    shard_files_in(root)
        .iter()
        .filter(|f| f.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{id}."))))
        .filter_map(|f| {
            f.components()
                .find_map(|c| c.as_os_str().to_str().and_then(|s| s.strip_prefix("node-")).and_then(|n| n.parse().ok()))
        })
        .collect()
}

fn put(cluster: &TestCluster, local: &Path, remote: &str) {
    run_ok(&["--cluster", &cluster.dir_str(), "put", local.to_str().expect("utf-8"), remote]);
}

fn get_matches(cluster: &TestCluster, remote: &str, data: &[u8], scratch: &Path) {
    let out = scratch.join("got");
    run_ok(&["--cluster", &cluster.dir_str(), "get", remote, out.to_str().expect("utf-8")]);
    assert!(std::fs::read(&out).expect("read back") == data, "{remote} differs from what was put");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_live_on_the_nodes_of_their_directorys_pool() {
    let cluster = TestCluster::start_with(0, "4+2", &["--pool", "flash=6", "--pool", "hdd=6"]);
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");
    let flash: BTreeSet<u64> = (1..=6).collect();
    let hdd: BTreeSet<u64> = (7..=12).collect();

    // Status lists each pool with its nodes; every node says its pool.
    let status = cluster.status();
    let pools: Vec<(String, u64)> = status["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| (p["name"].as_str().unwrap_or("").to_string(), p["nodes"].as_u64().unwrap_or(99)))
        .collect();
    assert_eq!(pools, vec![("default".into(), 0), ("flash".into(), 6), ("hdd".into(), 6)]);
    for n in status["nodes"].as_array().expect("nodes") {
        let id = n["id"].as_u64().expect("id");
        assert_eq!(n["pool"], if flash.contains(&id) { "flash" } else { "hdd" }, "node {id}");
    }

    // The root directory is in flash (the first pool given); /cold is put in hdd.
    let hot = content(1, (9 << 20) + 17);
    let cold = content(2, (6 << 20) + 3);
    let (hot_file, cold_file) = (scratch.path().join("hot"), scratch.path().join("cold"));
    std::fs::write(&hot_file, &hot).expect("write");
    std::fs::write(&cold_file, &cold).expect("write");
    put(&cluster, &hot_file, "/hot.bin");
    run_ok(&["--cluster", &c, "mkdir", "--pool", "hdd", "/cold"]);
    put(&cluster, &cold_file, "/cold/c.bin");

    // stat --layout names each chunk's pool and nodes; the shard files are on those nodes'
    // drives and nowhere else.
    let hot_places = chunk_places(&cluster, "/hot.bin");
    assert_eq!(hot_places.len(), 3);
    for (pool, id, nodes) in &hot_places {
        assert_eq!(pool, "flash");
        assert_eq!(nodes.len(), 6);
        assert!(nodes.is_subset(&flash), "chunk {id} of /hot.bin on {nodes:?}");
        assert_eq!(nodes_holding(cluster.path(), id), *nodes, "shard files of chunk {id}");
    }
    let cold_places = chunk_places(&cluster, "/cold/c.bin");
    assert_eq!(cold_places.len(), 2);
    for (pool, id, nodes) in &cold_places {
        assert_eq!(pool, "hdd");
        assert!(nodes.is_subset(&hdd), "chunk {id} of /cold/c.bin on {nodes:?}");
        assert_eq!(nodes_holding(cluster.path(), id), *nodes, "shard files of chunk {id}");
    }
    let text = run_ok(&["--cluster", &c, "stat", "--layout", "/cold/c.bin"]);
    assert!(text.contains("layout: pool hdd  erasure 4+2") && text.contains(" hdd "), "{text}");
    let dir = run_ok(&["--cluster", &c, "stat", "/cold"]);
    assert!(dir.contains("pool hdd"), "{dir}");

    // du --by-pool sums per pool.
    let du: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", &c, "du", "--by-pool", "--json", "/"])).expect("JSON");
    let per_pool: Vec<(String, u64, u64)> = du["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| {
            (
                p["pool"].as_str().unwrap_or("").to_string(),
                p["files"].as_u64().unwrap_or(0),
                p["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(per_pool, vec![("flash".into(), 1, hot.len() as u64), ("hdd".into(), 1, cold.len() as u64)]);
    // A status walk counts each pool's chunks and stored bytes (4+2: 1.5 times the data).
    let status = cluster.status();
    let chunks: Vec<u64> =
        status["pools"].as_array().expect("pools").iter().map(|p| p["chunks"].as_u64().unwrap_or(0)).collect();
    assert_eq!(chunks, vec![0, 3, 2]);
    let hdd_stored = status["pools"][2]["bytes_stored"].as_u64().expect("stored");
    assert!(
        hdd_stored >= cold.len() as u64 * 3 / 2 && hdd_stored < cold.len() as u64 * 3 / 2 + (1 << 16),
        "{hdd_stored}"
    );

    get_matches(&cluster, "/hot.bin", &hot, scratch.path());
    get_matches(&cluster, "/cold/c.bin", &cold, scratch.path());

    // Schemes and drains are judged by the pool's own nodes.
    let out = run(&["--cluster", &c, "mkdir", "--pool", "hdd", "--ec", "5+2", "/wide"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("5+2 needs 7 storage nodes; pool \"hdd\" has 6"), "{stderr}");
    assert!(!run(&["--cluster", &c, "stat", "/wide"]).status.success(), "a refused mkdir leaves nothing");
    let out = run(&["--cluster", &c, "node", "drain", "7"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("of pool \"hdd\""), "{stderr}");
    let out = run(&["--cluster", &c, "mkdir", "--pool", "tape", "/t"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("no pool named \"tape\"") && stderr.contains("default, flash, hdd"),
        "{stderr}"
    );

    // A pool made while the cluster runs, filled by nodes that join it.
    run_ok(&["--cluster", &c, "pool", "create", "ssd", "--ec", "2+1"]);
    for _ in 0..3 {
        run_ok(&["cluster", "add-node", "--dir", &c, "--pool", "ssd"]);
    }
    let ssd: BTreeSet<u64> = (13..=15).collect();
    run_ok(&["--cluster", &c, "mkdir", "--pool", "ssd", "/fast"]);
    let fast = content(3, 5 << 20);
    let fast_file = scratch.path().join("fast");
    std::fs::write(&fast_file, &fast).expect("write");
    put(&cluster, &fast_file, "/fast/f.bin");
    let layout = layout(&cluster, "/fast/f.bin");
    assert_eq!((layout["pool"].as_str(), layout["ec"].as_str()), (Some("ssd"), Some("2+1")));
    for chunk in layout["chunks"].as_array().expect("chunks") {
        assert_eq!(chunk["ec"], "2+1");
        let nodes: BTreeSet<u64> =
            chunk["shards"].as_array().expect("shards").iter().filter_map(|s| s["node"].as_u64()).collect();
        assert!(nodes.is_subset(&ssd), "{nodes:?}");
    }
    get_matches(&cluster, "/fast/f.bin", &fast, scratch.path());
    let listed: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", &c, "pool", "list", "--json"])).expect("JSON");
    let names: Vec<(&str, u64, &str)> = listed
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| {
            (p["name"].as_str().unwrap_or(""), p["nodes"].as_u64().unwrap_or(0), p["default_ec"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(names, vec![("default", 0, "4+2"), ("flash", 6, "4+2"), ("hdd", 6, "4+2"), ("ssd", 3, "2+1")]);
}
