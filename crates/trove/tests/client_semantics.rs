//! File semantics of the client library on a real cluster: overwrites (copy-on-write), chunks
//! rewritten before their first version was committed, truncation and extension, sparse files
//! past 4 GiB, and close-to-open visibility between two clients.

mod common;

use common::{content, TestCluster};

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_truncate_sparse_and_visibility() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let b = cluster.client().await;

    // The same chunk written twice through one handle before any commit.
    let mut h = a.create_path("/twice", 0o644).await.expect("create");
    h.write_at(0, &content(1, 4 * MIB)).await.expect("first");
    h.write_at(0, &content(2, 4 * MIB)).await.expect("second");
    h.close().await.expect("close");
    assert!(b.read_file("/twice").await.expect("read")[..] == content(2, 4 * MIB)[..]);

    // A partial overwrite in the middle of a committed multi-chunk file.
    let mut expect = content(3, 9 * MIB + 5);
    a.write_file("/mid", &expect).await.expect("write");
    let patch = content(4, 3 * MIB);
    let mut h = a.open_path("/mid").await.expect("open");
    h.write_at(3 * MIB as u64 + 17, &patch).await.expect("patch");
    h.close().await.expect("close");
    expect[3 * MIB + 17..6 * MIB + 17].copy_from_slice(&patch);
    assert!(b.read_file("/mid").await.expect("read")[..] == expect[..]);

    // Truncate into a chunk, then extend: the cut bytes read back as zeros.
    let mut h = a.open_path("/mid").await.expect("open");
    h.truncate(5 * MIB as u64 + 3).await.expect("shrink");
    h.truncate(7 * MIB as u64).await.expect("extend");
    h.close().await.expect("close");
    let got = b.read_file("/mid").await.expect("read");
    assert_eq!(got.len(), 7 * MIB);
    assert!(got[..5 * MIB + 3] == expect[..5 * MIB + 3]);
    assert!(got[5 * MIB + 3..].iter().all(|&x| x == 0), "extension reads zeros");

    // A sparse file larger than 4 GiB: holes read as zeros, the tail as written.
    let far = (5u64 << 30) + 12345;
    let mut h = a.create_path("/sparse", 0o644).await.expect("create");
    h.write_at(far, b"tail").await.expect("far write");
    h.close().await.expect("close");
    let mut r = b.open_path("/sparse").await.expect("open");
    assert_eq!(r.size(), far + 4);
    assert!(r.read_at(1 << 32, 4096).await.expect("hole")[..].iter().all(|&x| x == 0));
    assert_eq!(&r.read_at(far, 10).await.expect("tail")[..], b"tail");

    // Close-to-open: a reader that opened before a new version sees the old one; reopening
    // shows the new one.
    a.write_file("/cto", &content(5, 2 * MIB)).await.expect("v1");
    let mut old = b.open_path("/cto").await.expect("open v1");
    let first = old.read_at(0, 2 * MIB).await.expect("read v1");
    a.write_file("/cto", &content(6, 2 * MIB)).await.expect("v2");
    assert!(first[..] == content(5, 2 * MIB)[..]);
    assert!(b.read_file("/cto").await.expect("read v2")[..] == content(6, 2 * MIB)[..]);
}
