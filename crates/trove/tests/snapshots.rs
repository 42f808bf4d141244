//! Snapshots on a real cluster of `trove` processes with a FUSE mount: `trove snapshot create`
//! of a directory, its files read back bit for bit through the mount at
//! `.snapshots/NAME/` (hidden from the directory's listing) and through `trove get`, writes
//! there refused as read-only (EROFS), live changes invisible in the snapshot, `list` with the
//! bytes only the snapshot holds, `diff`, `restore` of a deleted file, and `delete` followed by
//! GC past its grace period leaving every live file readable.
//!
//! Every program is required (scripts/deps.sh installs them); a missing one fails the test.

mod common;
mod mnt;

use common::{content, run, run_ok, TestCluster};
use mnt::{fuse_missing, Mount};
use std::process::Command;
use std::time::Duration;

/// Runs a shell script; returns (success, stdout + stderr).
fn sh(script: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .expect("sh runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn snapshot(cluster: &TestCluster, args: &[&str]) -> String {
    let dir = cluster.dir_str();
    let mut all = vec!["snapshot"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--cluster", &dir]);
    run_ok(&all)
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn snapshots_are_browsed_through_the_mount_restored_and_deleted() {
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start_with(3, "2+1", &["--gc-grace-ms", "1000"]);
    let c = cluster.dir_str();
    let mount = Mount::start(&cluster, "snap", &[]);
    let data = mount.join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    let a = content(1, 3 << 20);
    let b = content(2, 700_000);
    let s = content(3, 10_000);
    std::fs::write(data.join("a"), &a).expect("write a");
    std::fs::write(data.join("b"), &b).expect("write b");
    std::fs::write(data.join("sub/s"), &s).expect("write s");

    let out = snapshot(&cluster, &["create", "/data", "mon"]);
    assert!(out.contains("mon"), "{out}");
    // A second snapshot of the same name is refused.
    let again = run(&["snapshot", "create", "/data", "mon", "--cluster", &c]);
    assert!(!again.status.success());

    // Live changes after the snapshot: overwrite, delete, create.
    let a2 = content(4, 1 << 20);
    std::fs::write(data.join("a"), &a2).expect("overwrite a");
    std::fs::remove_file(data.join("b")).expect("rm b");
    std::fs::write(data.join("c"), b"new").expect("write c");

    // Hidden from the listing, reachable by name, read bit for bit.
    let names: Vec<String> = std::fs::read_dir(&data)
        .expect("ls data")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n == ".snapshots"), "{names:?}");
    let snap = data.join(".snapshots/mon");
    let mut listed: Vec<String> = std::fs::read_dir(&snap)
        .expect("ls snapshot")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, vec!["a", "b", "sub"], "the tree as it was");
    assert!(read(&snap.join("a")) == a, "a as it was");
    assert!(
        read(&snap.join("b")) == b,
        "b, deleted live, still in the snapshot"
    );
    assert!(read(&snap.join("sub/s")) == s);
    assert!(
        read(&data.join("a")) == a2,
        "the live file has the new content"
    );
    // Through the client without the mount, too.
    let local = tempfile::tempdir().expect("tempdir");
    let got = local.path().join("b");
    run_ok(&[
        "get",
        "/data/.snapshots/mon/b",
        got.to_str().expect("utf-8"),
        "--cluster",
        &c,
    ]);
    assert!(read(&got) == b);

    // Writes are refused as read-only.
    let p = snap.display();
    for script in [
        format!("echo x > {p}/new"),
        format!("echo x >> {p}/a"),
        format!("rm {p}/a"),
        format!("mkdir {p}/d"),
        format!("mv {p}/a {p}/a2"),
        format!("truncate -s 0 {p}/b"),
    ] {
        let (ok, text) = sh(&format!("{script} 2>&1"));
        assert!(
            !ok && text.contains("Read-only file system"),
            "{script}: {text}"
        );
    }
    assert!(
        read(&snap.join("a")) == a,
        "unchanged by the refused writes"
    );

    // List: the bytes only the snapshot holds (b, and a's old chunks).
    let list = snapshot(&cluster, &["list", "/data", "--json"]);
    let list: serde_json::Value =
        serde_json::from_str(&list).unwrap_or_else(|e| panic!("{e}: {list}"));
    assert_eq!(list[0]["name"], "mon");
    let exclusive = list[0]["bytes_exclusive"]
        .as_u64()
        .expect("bytes_exclusive");
    assert!(
        exclusive >= (b.len() + a.len()) as u64,
        "exclusive {exclusive}"
    );

    // Diff against the live tree.
    let diff = snapshot(&cluster, &["diff", "/data", "mon"]);
    let lines: Vec<&str> = diff.lines().collect();
    assert_eq!(lines, vec!["M a", "- b", "+ c"], "{diff}");

    // Restore the deleted file: the same bytes, sharing the snapshot's chunks.
    snapshot(&cluster, &["restore", "/data", "mon", "b"]);
    assert!(read(&data.join("b")) == b, "b restored");

    // Delete the snapshot; GC past its grace period frees what only it held, and every live
    // file (the restored one included) still reads back.
    let shards_before = cluster.shard_files().len();
    snapshot(&cluster, &["delete", "/data", "mon"]);
    // Once the kernel's entry cache expires, the name resolves no more.
    let gone_by = std::time::Instant::now() + Duration::from_secs(15);
    while data.join(".snapshots").exists() {
        assert!(std::time::Instant::now() < gone_by, "no snapshot, yet .snapshots resolves");
        std::thread::sleep(Duration::from_millis(250));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while cluster.shard_files().len() >= shards_before {
        assert!(
            std::time::Instant::now() < deadline,
            "GC freed nothing after the snapshot was deleted"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(2));
    for (name, want) in [("a", &a2), ("b", &b), ("sub/s", &s)] {
        let got = local.path().join(name.replace('/', "_"));
        run_ok(&[
            "get",
            &format!("/data/{name}"),
            got.to_str().expect("utf-8"),
            "--cluster",
            &c,
        ]);
        assert!(&read(&got) == want, "{name} after GC");
    }
    mount.stop();
}
