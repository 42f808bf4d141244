//! The job engine on a real local cluster: an idle cluster does no scans (the repair job reads
//! its work queue, not every chunk record, between map changes: counted at the metadata
//! service's own metrics), a chunk written with a node down is repaired through the queue once
//! the node is back, scrub finds bit rot with every node verifying its own shards (only the
//! damaged chunk crosses the network), and `trove job start repair|scrub` and `job status`
//! report their runs.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// The metadata service's `trove_ops_total{protocol="meta",op=OP}` from its exporter.
fn meta_ops(cluster: &TestCluster, op: &str) -> u64 {
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let addr = state["meta"]["metrics"].as_str().expect("the metadata service exports metrics").to_string();
    let text = http_get(&addr, "/metrics");
    let wanted = format!("op=\"{op}\"");
    text.lines()
        .filter(|l| l.starts_with("trove_ops_total{") && l.contains("protocol=\"meta\"") && l.contains(&wanted))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .map(|v| v as u64)
        .sum()
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the exporter");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}

fn job(c: &str, name: &str) -> serde_json::Value {
    let all: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", c, "job", "status", "--json"])).expect("JSON");
    all.as_array().expect("jobs").iter().find(|j| j["name"] == name).cloned().expect("listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_does_no_scans_and_degraded_chunks_are_repaired_through_the_queue() {
    let cluster = TestCluster::start_with(6, "4+2", &["--scrub-interval-ms", "0"]);
    let c = cluster.dir_str();
    let client = cluster.client().await;
    client.mkdir_p("/many").await.expect("mkdir");
    // Many chunk records: small files written in parallel.
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..150 {
                client.write_file(&format!("/many/f{t}-{i}"), &content(t * 1000 + i, 2000)).await.expect("write");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }

    // Idle: over 20 s the repair job reads no chunk record and no queue page over the network
    // (the lease holder probes one queue key in process); the nodes' heartbeats go on.
    std::thread::sleep(Duration::from_secs(4));
    let (scans, queue, chunks, beats) = (
        meta_ops(&cluster, "ScanChunks"),
        meta_ops(&cluster, "ScanQueue"),
        meta_ops(&cluster, "GetChunks"),
        meta_ops(&cluster, "Heartbeat"),
    );
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(meta_ops(&cluster, "ScanChunks"), scans, "an idle cluster walked its chunk records");
    assert_eq!(meta_ops(&cluster, "ScanQueue"), queue, "an idle cluster read its work queue over the network");
    assert_eq!(meta_ops(&cluster, "GetChunks"), chunks, "an idle cluster read chunk records");
    assert!(meta_ops(&cluster, "Heartbeat") > beats + 20, "the counters move (heartbeats)");

    // A node down: a write goes narrower (full parity on the nodes up), is queued, and is
    // widened by a queue pass once the node is back, without any walk of the chunk records.
    cluster.kill_node(6);
    cluster.wait_status(Duration::from_secs(30), "node 6 down", |s| {
        s["nodes"].as_array().is_some_and(|n| n.iter().any(|n| n["id"] == 6 && n["state"] == "down"))
    });
    let data = content(7, 9 << 20);
    client.write_file("/narrow.bin", &data).await.expect("write with a node down");
    let (_, recs) =
        client.chunk_records(client.resolve("/narrow.bin").await.expect("resolve").ino).await.expect("records");
    assert!(recs.iter().all(|r| r.ec.to_string() != "4+2"), "written narrower with a node down: {recs:?}");
    let scans = meta_ops(&cluster, "ScanChunks");
    cluster.restart_node(6);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, recs) =
            client.chunk_records(client.resolve("/narrow.bin").await.expect("resolve").ino).await.expect("records");
        if recs.iter().all(|r| r.ec.to_string() == "4+2" && r.missing == 0) {
            break;
        }
        assert!(Instant::now() < deadline, "not widened back: {recs:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(meta_ops(&cluster, "ScanChunks"), scans, "the repair went through the queue, not a walk");
    assert!(client.read_file("/narrow.bin").await.expect("read") == data.as_slice());
    let repair = job(&c, "repair");
    assert!(repair["chunks_moved"].as_u64().unwrap_or(0) >= 3, "{repair:#}");
    assert_eq!(repair["trigger"], "work queue", "{repair:#}");

    // Bit rot in one shard file: a scrub run (by hand) has every node verify its own shards
    // where they lie, and only the damaged chunk's shards cross the network to rewrite it.
    let layout: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", &c, "stat", "--layout", "--json", "/narrow.bin"])).expect("JSON");
    let id = layout["chunks"][0]["id"].as_str().expect("chunk id").to_string();
    let victim = cluster
        .shard_files()
        .into_iter()
        .find(|f| f.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{id}."))))
        .expect("a shard file of /narrow.bin's first chunk");
    let mut bytes = std::fs::read(&victim).expect("read shard file");
    let at = bytes.len() - 100;
    bytes[at] ^= 0x5a;
    std::fs::write(&victim, &bytes).expect("rot one byte");
    let reads_before = shard_reads_served(&cluster).await;
    let runs = job(&c, "scrub")["run"].as_u64().unwrap_or(0);
    run_ok(&["--cluster", &c, "job", "start", "scrub"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let scrubbed = loop {
        let j = job(&c, "scrub");
        if j["run"].as_u64() == Some(runs + 1) && j["state"] == "done" {
            break j;
        }
        assert!(Instant::now() < deadline, "scrub did not finish: {j:#}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let shards = cluster.shard_files().len() as u64;
    assert!(
        scrubbed["items_seen"].as_u64().unwrap_or(0) + 10 >= shards,
        "every shard verified ({shards} files): {scrubbed:#}"
    );
    assert_eq!(scrubbed["problems_found"], 1, "{scrubbed:#}");
    let reads = shard_reads_served(&cluster).await - reads_before;
    assert!(reads <= 6, "scrub moved {reads} shard reads over the network for one damaged shard among {shards}");
    let repaired = std::fs::read(&victim).expect("the damaged shard was rewritten in place");
    assert!(repaired != bytes, "the shard file was rewritten");
    let log = std::fs::read_to_string(cluster.path().join("logs").join("meta.log")).unwrap_or_default();
    assert!(
        log.contains("scrub: ") && log.contains(" on node "),
        "scrub names the damage: {}",
        log.lines().filter(|l| l.contains("scrub")).collect::<Vec<_>>().join("\n")
    );
    // Every file still reads back, the damaged chunk's included.
    for t in 0..8u64 {
        for i in 0..150u64 {
            assert!(
                client.read_file(&format!("/many/f{t}-{i}")).await.expect("read")
                    == content(t * 1000 + i, 2000).as_slice()
            );
        }
    }

    // By hand: a repair run walks every chunk record once (taking over an automatic run, if
    // one is still open).
    let scans = meta_ops(&cluster, "ScanChunks");
    let runs = job(&c, "repair")["run"].as_u64().unwrap_or(0);
    run_ok(&["--cluster", &c, "job", "start", "repair"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let j = job(&c, "repair");
        if j["run"].as_u64().unwrap_or(0) >= runs + 1 && j["state"] == "done" {
            assert_eq!(j["trigger"], "operator", "{j:#}");
            assert!(j["items_seen"].as_u64().unwrap_or(0) >= 1200, "{j:#}");
            break;
        }
        assert!(Instant::now() < deadline, "repair did not finish: {j:#}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(meta_ops(&cluster, "ScanChunks") > scans, "the repair run walked the chunk records");
    let text = run_ok(&["--cluster", &c, "job", "status"]);
    assert!(text.contains("scrub: done") && text.contains("repair: done") && text.contains("tier: idle"), "{text}");
}

/// Shard reads the storage nodes served so far (`GetShard` and `ReadRange`), from each node's
/// exporter.
async fn shard_reads_served(cluster: &TestCluster) -> u64 {
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let mut total = 0;
    for node in state["nodes"].as_array().expect("nodes") {
        let addr = node["metrics"].as_str().expect("every node exports metrics");
        let text = http_get(addr, "/metrics");
        for line in text.lines().filter(|l| l.starts_with("trove_ops_total{") && l.contains("protocol=\"storage\"")) {
            if line.contains("op=\"GetShard\"") || line.contains("op=\"ReadRange\"") {
                total += line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).expect("a count") as u64;
            }
        }
    }
    total
}
