//! Page-cache behaviour of shard reads, on a real disk: a shard read from the drive a second
//! time is read whole in the background. Its own test binary: it runs `fincore` (util-linux),
//! and a spawn copies the process's file descriptors for a moment, which other store tests
//! (drive locks, deletes) must not see.

mod common;

use common::*;
use std::path::Path;
use storage::{ShardStore, StoreConfig};

fn open(drives: &[&Path]) -> ShardStore {
    let config = StoreConfig { drives: drives.iter().map(|d| d.to_path_buf()).collect(), reserve_bytes: 0, keys: None };
    ShardStore::open(&config).expect("store opens")
}

/// Drops the page cache's copy of a file (clean pages only: the store syncs what it writes).
fn drop_cached(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

/// Bytes of a file the page cache holds, as util-linux's `fincore` counts them (it asks
/// `mincore`, which reads nothing: a read that must not wait would start the kernel's own
/// read-ahead of what it misses).
fn cached_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) runs");
    assert!(out.status.success(), "fincore: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("fincore prints a number")
}

#[test]
fn a_shard_read_twice_from_the_drive_is_read_whole_into_the_page_cache() {
    // On a disk, not a tmpfs: the test drops pages from the page cache.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(80, 0), 16 * B);
    store.put(&info, &data).unwrap();
    let path = store.shard_path(info.key).unwrap();
    let wait_until = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    // Out of the page cache (pages still under the kernel's own read-ahead are dropped once
    // it finishes: try until they are gone).
    wait_until("the page cache keeps the shard file", &|| {
        drop_cached(&path);
        cached_bytes(&path) == 0
    });
    // One read from the drive (it opens the file) brings only what it reads.
    let (_, _, _, bytes) = store.get_range(info.key, (3 * B) as u32, 4096).unwrap();
    assert!(bytes[..] == data[3 * B..3 * B + 4096]);
    assert!(cached_bytes(&path) < (4 * B) as u64, "one read brought {} bytes in", cached_bytes(&path));
    wait_until("the page cache keeps the shard file", &|| {
        drop_cached(&path);
        cached_bytes(&path) == 0
    });
    // The second read from the drive brings the whole shard in (in the background: wait).
    let (_, _, _, bytes) = store.get_range(info.key, (6 * B) as u32, 4096).unwrap();
    assert!(bytes[..] == data[6 * B..6 * B + 4096]);
    wait_until("the shard was not read whole", &|| cached_bytes(&path) >= data.len() as u64);
    let far = 12 * B;
    let (_, _, _, bytes) = store.get_range_now(info.key, far as u32, 4096).expect("cached").unwrap();
    assert!(bytes[..] == data[far..far + 4096]);
}
