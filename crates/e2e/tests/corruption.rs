//! Shards damaged on disk are never returned as data: the client rebuilds from parity while at
//! most `m` shards of a chunk are bad, and fails with an error when more are.

mod common;

use client::ErrorCode;
use common::{content, TestCluster};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Flips one byte near the end of a shard file (inside the data, past the header).
fn corrupt(path: &PathBuf) {
    let mut bytes = std::fs::read(path).expect("read shard");
    let at = bytes.len() - 1 - (bytes.len() / 3);
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).expect("write shard");
}

/// Groups shard files by chunk id (file stem).
fn by_chunk(files: Vec<PathBuf>) -> BTreeMap<String, Vec<PathBuf>> {
    let mut map: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if f.extension().and_then(|e| e.to_str()).map(|e| e.chars().all(|c| c.is_ascii_digit())).unwrap_or(false) {
            map.entry(stem).or_default().push(f);
        }
    }
    map
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_shards_are_rebuilt_or_refused_never_returned() {
    let cluster = TestCluster::start(6, "4+2");
    let client = cluster.client().await;
    let data = content(7, 3 << 20);
    client.write_file("/victim", &data).await.expect("write");
    let chunks = by_chunk(cluster.shard_files());
    assert_eq!(chunks.len(), 1, "one chunk: {chunks:?}");
    let shards: Vec<PathBuf> = chunks.values().next().expect("chunk").clone();
    assert_eq!(shards.len(), 6, "six shards");

    // Two bad shards (a data shard and a parity shard): still exact.
    let mut sorted = shards.clone();
    sorted.sort_by_key(|p| p.extension().map(|e| e.to_os_string()));
    corrupt(&sorted[0]);
    corrupt(&sorted[5]);
    let fresh = cluster.client().await;
    assert!(fresh.read_file("/victim").await.expect("rebuilt from parity")[..] == data[..]);

    // Small ranged reads of a damaged shard also fall back to a verified rebuild.
    let mut h = fresh.open_path("/victim").await.expect("open");
    let piece = h.read_at(4096, 4096).await.expect("ranged read");
    assert!(piece[..] == data[4096..8192]);

    // A third bad shard: more than m; the read fails instead of returning damaged bytes.
    corrupt(&sorted[1]);
    let fresh = cluster.client().await;
    let err = fresh.read_file("/victim").await.expect_err("3 of 6 shards corrupt must fail");
    assert!(matches!(err.code, ErrorCode::Corrupt | ErrorCode::Unavailable), "{err}");
    assert!(err.message.contains("chunk"), "names the chunk: {err}");
}
