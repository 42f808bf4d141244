//! Running out of space: a full file system and the configured reserve both answer `NoSpace`
//! naming the drive and sizes, leave no temp file behind and never touch stored shards.
//!
//! The full-disk case needs a small file system to fill: when running as root it mounts a 4 MiB
//! tmpfs. Without that it is skipped (and says so on stderr); the reserve cases always run.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use storage::{ShardStore, StoreConfig};
use wire::{ErrorCode, ShardInfo};

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Held by each test for its whole run. The tests spawn `mount` and `umount`, and a spawn copies
/// the process's file descriptors until the child execs: a copy of a deleted shard file's
/// descriptor keeps its space taken, and a copy of a drive's lock file keeps its `flock`, for
/// that moment. One test at a time, what a test sees is what its own store did.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Puts shards of `len` bytes until one is refused; returns the stored ones and the error.
fn fill(store: &ShardStore, len: usize) -> (Vec<(ShardInfo, bytes::Bytes)>, wire::WireError) {
    let mut stored = Vec::new();
    for chunk in 0..10_000u64 {
        let (info, data) = shard(key(chunk, 0), len);
        match store.put(&info, &data) {
            Ok(()) => stored.push((info, data)),
            Err(e) => return (stored, e),
        }
    }
    panic!("the drive never filled up");
}

fn check_intact(store: &ShardStore, stored: &[(ShardInfo, bytes::Bytes)]) {
    for (info, data) in stored {
        let (got, _, bytes) = store.get(info.key, 0, 0).expect("earlier shard readable");
        assert_eq!(&got, info);
        assert!(bytes == *data, "earlier shard changed");
    }
}

#[test]
fn full_disk_answers_no_space_and_keeps_earlier_shards() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let Some(mnt) = Tmpfs::mount(&dir.path().join("mnt"), "4m") else {
        eprintln!("full-disk test SKIPPED: cannot mount a tmpfs (not root?); the reserve tests still run");
        return;
    };
    eprintln!("full-disk test RAN on a 4 MiB tmpfs");
    let drive = mnt.0.join("drive");
    let store = ShardStore::open(&StoreConfig { drives: vec![drive.clone()], reserve_bytes: 0, keys: None }).unwrap();
    let (stored, err) = fill(&store, 3 * B + 100);
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    assert!(err.message.contains(&drive.display().to_string()), "error does not name the drive: {err}");
    assert!(err.message.contains("bytes"), "error does not give sizes: {err}");
    assert!(stored.len() >= 10, "only {} shards fit in 4 MiB", stored.len());
    assert!(temp_files(&drive).is_empty(), "temp file left after ENOSPC");
    check_intact(&store, &stored);
    assert_eq!(store.stat()[0].shards, stored.len() as u64);

    // Space comes back when shards are deleted.
    store.delete(&[stored[0].0.key, stored[1].0.key]).unwrap();
    let (info, data) = shard(key(99_999, 0), 3 * B + 100);
    store.put(&info, &data).expect("put fits after deletes");
    check_intact(&store, &stored[2..]);
    drop(store);
    // And everything is still there after a reopen.
    let store = ShardStore::open(&StoreConfig { drives: vec![drive], reserve_bytes: 0, keys: None }).unwrap();
    check_intact(&store, &stored[2..]);
}

#[test]
fn reserve_is_kept_free_on_a_small_file_system() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let Some(mnt) = Tmpfs::mount(&dir.path().join("mnt"), "4m") else {
        eprintln!("precise reserve test SKIPPED: cannot mount a tmpfs (not root?)");
        return;
    };
    eprintln!("precise reserve test RAN on a 4 MiB tmpfs");
    let drive = mnt.0.join("drive");
    let reserve_bytes = 2 << 20;
    let store = ShardStore::open(&StoreConfig { drives: vec![drive.clone()], reserve_bytes, keys: None }).unwrap();
    let (stored, err) = fill(&store, B);
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    assert!(err.message.contains("reserve"), "{err}");
    let free = store.stat()[0].bytes_free;
    assert!(free >= reserve_bytes, "reserve not kept: {free} bytes free");
    assert!(free < reserve_bytes + 2 * B as u64 + 4096, "refused too early: {free} bytes free");
    assert!(temp_files(&drive).is_empty());
    check_intact(&store, &stored);
}

#[test]
fn reserve_refuses_puts_and_keeps_earlier_shards() {
    let _serial = serial();
    // Runs anywhere: a reserve larger than any disk refuses every put before writing.
    let dir = tempfile::tempdir().unwrap();
    let drive = dir.path().join("drive");
    let store = ShardStore::open(&StoreConfig { drives: vec![drive.clone()], reserve_bytes: 0, keys: None }).unwrap();
    let mut stored = Vec::new();
    for chunk in 0..5u64 {
        let (info, data) = shard(key(chunk, 1), 1000 * chunk as usize);
        store.put(&info, &data).unwrap();
        stored.push((info, data));
    }
    drop(store);
    let store = ShardStore::open(&StoreConfig { drives: vec![drive.clone()], reserve_bytes: u64::MAX / 2, keys: None })
        .unwrap();
    let (info, data) = shard(key(77, 0), 5000);
    let err = store.put(&info, &data).expect_err("put refused");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    assert!(err.message.contains(&drive.display().to_string()) && err.message.contains("reserve"), "{err}");
    assert!(temp_files(&drive).is_empty());
    assert_eq!(code(store.get(info.key, 0, 0)), ErrorCode::NotFound);
    check_intact(&store, &stored);
    // An identical re-put of a stored shard is still answered: nothing new is written.
    store.put(&stored[3].0, &stored[3].1).expect("re-put needs no space");
}
