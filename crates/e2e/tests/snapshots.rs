//! Snapshots on a real cluster of `trove` processes with a FUSE mount: `trove snapshot create`
//! of a directory, its files read back bit for bit through the mount at
//! `.snapshots/NAME/` (hidden from the directory's listing) and through `trove get`, writes
//! there refused as read-only (EROFS), live changes invisible in the snapshot and its files
//! whole after the live copies are deleted and GC ran past its grace, `list` with the
//! bytes only the snapshot holds, `diff`, `restore` of a deleted file, and `delete` followed by
//! GC past its grace period leaving every live file readable. `trove clone` of a tree (live,
//! and from a snapshot) shares the data, a write on either side does not show through the
//! other, and a clone reads back whole after its source is deleted and GC ran past its grace.
//!
//! A snapshot locked with a retention date (WORM) refuses every change and its deletion
//! through every front end: `trove snapshot delete` and an earlier date (both naming the
//! date), the mount (EROFS), S3 (boto3 put, delete and copy over it) and NFS (libnfs `nfs-cp`,
//! and the gateway's own WRITE answering NFS3ERR_ROFS); its bytes stay as they were. A live
//! tree locked with `trove retain` refuses every change through `trove`, the mount, S3 and NFS
//! (EACCES, AccessDenied, NFS3ERR_ACCES, naming the date) until its date, and no longer after.
//!
//! Every program is required (scripts/deps.sh installs them); a missing one fails the test.

mod common;
mod gw;
mod mnt;

use common::{content, run, run_ok, TestCluster};
use mnt::{fuse_missing, Mount};
use std::process::Command;
use std::time::Duration;

/// Runs a shell script; returns (success, stdout + stderr).
fn sh(script: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(script).output().expect("sh runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
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
    assert!(!fuse_missing(), "this test needs FUSE (/dev/fuse and fusermount3): run scripts/deps.sh");
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
    // GC past its grace period with the live copies gone: a file written after the snapshot and
    // deleted is collected (so GC did run), while what only the snapshot holds stays.
    let scratch = content(5, 1 << 20);
    std::fs::write(data.join("scratch"), &scratch).expect("write scratch");
    let shards_with_scratch = cluster.shard_files().len();
    std::fs::remove_file(data.join("scratch")).expect("rm scratch");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while cluster.shard_files().len() >= shards_with_scratch {
        assert!(std::time::Instant::now() < deadline, "GC never collected a deleted file");
        std::thread::sleep(Duration::from_millis(250));
    }

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
    assert!(read(&snap.join("b")) == b, "b, deleted live, still in the snapshot");
    assert!(read(&snap.join("sub/s")) == s);
    assert!(read(&data.join("a")) == a2, "the live file has the new content");
    // Through the client without the mount, too.
    let local = tempfile::tempdir().expect("tempdir");
    let got = local.path().join("b");
    run_ok(&["get", "/data/.snapshots/mon/b", got.to_str().expect("utf-8"), "--cluster", &c]);
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
        assert!(!ok && text.contains("Read-only file system"), "{script}: {text}");
    }
    assert!(read(&snap.join("a")) == a, "unchanged by the refused writes");

    // List: the bytes only the snapshot holds (b, and a's old chunks).
    let list = snapshot(&cluster, &["list", "/data", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap_or_else(|e| panic!("{e}: {list}"));
    assert_eq!(list[0]["name"], "mon");
    let exclusive = list[0]["bytes_exclusive"].as_u64().expect("bytes_exclusive");
    assert!(exclusive >= (b.len() + a.len()) as u64, "exclusive {exclusive}");

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
        assert!(std::time::Instant::now() < deadline, "GC freed nothing after the snapshot was deleted");
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(2));
    for (name, want) in [("a", &a2), ("b", &b), ("sub/s", &s)] {
        let got = local.path().join(name.replace('/', "_"));
        run_ok(&["get", &format!("/data/{name}"), got.to_str().expect("utf-8"), "--cluster", &c]);
        assert!(&read(&got) == want, "{name} after GC");
    }
    mount.stop();
}

/// Shard files in the cluster's drives.
fn shard_count(cluster: &TestCluster) -> usize {
    common::shard_files_in(cluster.path()).len()
}

#[test]
fn clones_share_data_and_stay_apart_both_ways() {
    assert!(!fuse_missing(), "this test needs FUSE (/dev/fuse and fusermount3): run scripts/deps.sh");
    let cluster = TestCluster::start_with(3, "2+1", &["--gc-grace-ms", "1000"]);
    let c = cluster.dir_str();
    let mount = Mount::start(&cluster, "clone", &[]);
    let src = mount.join("ds");
    std::fs::create_dir_all(src.join("train")).expect("mkdir");
    let big = content(10, (9 << 20) + 5);
    let small = content(11, 3000);
    std::fs::write(src.join("train/big"), &big).expect("write big");
    std::fs::write(src.join("small"), &small).expect("write small");
    std::os::unix::fs::symlink("train/big", src.join("link")).expect("symlink");

    // No data is copied: the shard count stays, the clone reads the same bytes.
    let shards = shard_count(&cluster);
    let out = run_ok(&["clone", "/ds", "/exp", "--cluster", &c]);
    assert!(out.contains("2 files") && out.contains("none copied") && out.contains("1 symbolic link"), "{out}");
    assert_eq!(shard_count(&cluster), shards, "a clone writes no shard");
    let exp = mount.join("exp");
    assert!(read(&exp.join("train/big")) == big && read(&exp.join("small")) == small);
    assert_eq!(std::fs::read_link(exp.join("link")).expect("readlink").to_str(), Some("train/big"));

    // A write to the clone does not show in the source, nor one to the source in the clone.
    let changed = content(12, 1 << 20);
    std::fs::write(exp.join("small"), &changed).expect("write clone");
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(src.join("train/big")).expect("open source");
        f.seek(SeekFrom::Start(4 << 20)).expect("seek");
        f.write_all(b"overwritten").expect("write source");
    }
    assert!(read(&src.join("small")) == small, "the source's small is untouched");
    assert!(read(&exp.join("small")) == changed);
    assert!(read(&exp.join("train/big")) == big, "the clone's big is untouched");
    assert!(read(&src.join("train/big"))[4 << 20..(4 << 20) + 11] == *b"overwritten");

    // From a snapshot: the tree as it was, after the source changed.
    snapshot(&cluster, &["create", "/ds", "v1"]);
    std::fs::remove_file(src.join("small")).expect("rm small");
    run_ok(&["clone", "/ds/.snapshots/v1", "/v1-copy", "--cluster", &c]);
    assert!(read(&mount.join("v1-copy/small")) == small, "the snapshot's small, deleted live since");

    // The source deleted, its snapshot too, and GC past its grace: the clones read back whole.
    snapshot(&cluster, &["delete", "/ds", "v1"]);
    let (ok, text) = sh(&format!("rm -r {}", src.display()));
    assert!(ok, "{text}");
    std::thread::sleep(Duration::from_secs(4));
    assert!(read(&exp.join("train/big")) == big && read(&exp.join("small")) == changed);
    assert!(read(&mount.join("v1-copy/small")) == small);
    let local = tempfile::tempdir().expect("tempdir");
    let got = local.path().join("big");
    run_ok(&["get", "/v1-copy/train/big", got.to_str().expect("utf-8"), "--cluster", &c]);
    assert!(read(&got)[4 << 20..(4 << 20) + 11] == *b"overwritten");

    // Bad input: an existing destination, a missing source.
    let exists = run(&["clone", "/exp", "/v1-copy", "--cluster", &c]);
    assert!(!exists.status.success() && String::from_utf8_lossy(&exists.stderr).contains("exists"));
    let missing = run(&["clone", "/nope", "/x", "--cluster", &c]);
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("no entry \"nope\""));
}

const BOTO3_WORM: &str = r#"
import os, sys, boto3, botocore
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
attempts = [
    ("put", lambda: s3.put_object(Bucket="worm", Key=".snapshots/keep/f", Body=b"changed")),
    ("put-new", lambda: s3.put_object(Bucket="worm", Key=".snapshots/keep/new", Body=b"x")),
    ("delete", lambda: s3.delete_object(Bucket="worm", Key=".snapshots/keep/f")),
    ("copy", lambda: s3.copy_object(Bucket="worm", Key=".snapshots/keep/f", CopySource={"Bucket": "worm", "Key": "g"})),
]
for name, attempt in attempts:
    try:
        attempt()
        print(name, "accepted")
    except botocore.exceptions.ClientError as e:
        print(name, "refused", e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
print("body", s3.get_object(Bucket="worm", Key=".snapshots/keep/f")["Body"].read().hex())
"#;

#[test]
fn a_retained_snapshot_refuses_every_change_and_its_deletion_through_every_front_end() {
    assert!(!fuse_missing(), "this test needs FUSE (/dev/fuse and fusermount3): run scripts/deps.sh");
    gw::need("python3");
    gw::need("nfs-cp");
    let cluster = TestCluster::start(3, "2+1");
    let c = cluster.dir_str();
    let mount = Mount::start(&cluster, "worm", &[]);
    let top = mount.join("worm");
    std::fs::create_dir_all(&top).expect("mkdir");
    let f = content(7, 300_000);
    std::fs::write(top.join("f"), &f).expect("write f");
    std::fs::write(top.join("g"), b"other").expect("write g");

    let out = snapshot(&cluster, &["create", "/worm", "keep", "--retain", "1h"]);
    assert!(out.contains("locked until"), "{out}");
    let listed: serde_json::Value =
        serde_json::from_str(&snapshot(&cluster, &["list", "/worm", "--json"])).expect("json");
    let until = listed[0]["retain_until_ms"].as_u64().expect("retain_until_ms");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
    assert!(until > now + 3_500_000 && until < now + 3_700_000, "{listed}");

    // trove itself: no delete, no earlier date; a later one is taken.
    let del = run(&["snapshot", "delete", "/worm", "keep", "--cluster", &c]);
    let text = String::from_utf8_lossy(&del.stderr);
    assert!(!del.status.success() && text.contains("retained until") && text.contains("WORM"), "{text}");
    let earlier = run(&["snapshot", "retain", "/worm", "keep", "--for", "1m", "--cluster", &c]);
    let text = String::from_utf8_lossy(&earlier.stderr);
    assert!(!earlier.status.success() && text.contains("never moved earlier"), "{text}");
    let later = snapshot(&cluster, &["retain", "/worm", "keep", "--for", "2h"]);
    assert!(later.contains("locked until"), "{later}");
    let rm = run(&["rm", "/worm/.snapshots/keep/f", "--cluster", &c]);
    assert!(!rm.status.success(), "trove rm in the snapshot");

    // The mount.
    let p = top.join(".snapshots/keep");
    let p = p.display();
    for script in [format!("echo x > {p}/f"), format!("rm {p}/f"), format!("mv {p}/f {p}/f2"), format!("touch {p}/new")]
    {
        let (ok, text) = sh(&format!("{script} 2>&1"));
        assert!(!ok && text.contains("Read-only file system"), "{script}: {text}");
    }

    // S3.
    let s3 = gw::Gateway::s3(&cluster, "s3-worm", &[]);
    let out = gw::python(&s3).arg("-c").arg(BOTO3_WORM).output().expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "boto3: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    for attempt in ["put", "put-new", "delete", "copy"] {
        assert!(text.lines().any(|l| l.starts_with(&format!("{attempt} refused"))), "S3 {attempt}: {text}");
    }
    let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
    assert!(text.contains(&format!("body {hex}")), "S3 reads the snapshot's bytes unchanged");

    // NFS: nfs-cp fails; the gateway's own WRITE says why (NFS3ERR_ROFS).
    let nfs = gw::Gateway::nfs(&cluster, "nfs-worm", "/", &[]);
    let scratch = tempfile::tempdir().expect("dir");
    std::fs::write(scratch.path().join("x"), b"changed").expect("write");
    let url = format!("nfs://127.0.0.1/worm/.snapshots/keep/f?nfsport={0}&mountport={0}&version=3", nfs.port());
    let out = gw::run(Command::new("nfs-cp").arg(scratch.path().join("x")).arg(&url));
    assert!(!out.status.success(), "nfs-cp into the snapshot: {}", String::from_utf8_lossy(&out.stderr));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let status = rt.block_on(async {
        use nfsserve::vfs::NFSFileSystem;
        let client = cluster.client().await;
        let fs =
            nfsgw::TroveNfs::new(client, nfsgw::Export { path: "/worm/.snapshots/keep".into(), read_only: false }, 0)
                .await
                .expect("file system");
        let file = fs.lookup(fs.root_dir(), &"f".as_bytes().into()).await.expect("lookup");
        let write = fs.write(file, 0, b"changed").await.err();
        let remove = fs.remove(fs.root_dir(), &"f".as_bytes().into()).await.err();
        (write, remove)
    });
    assert!(
        matches!(status, (Some(nfsserve::nfs::nfsstat3::NFS3ERR_ROFS), Some(nfsserve::nfs::nfsstat3::NFS3ERR_ROFS))),
        "{status:?}"
    );

    // Everything as it was; the live tree is not locked.
    assert!(read(&top.join(".snapshots/keep/f")) == f);
    std::fs::remove_file(top.join("f")).expect("the live file is not locked");
    assert!(read(&top.join(".snapshots/keep/f")) == f);
    let names: Vec<String> = serde_json::from_str::<serde_json::Value>(&snapshot(&cluster, &["list", "--json"]))
        .expect("json")
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names, vec!["keep".to_string()]);
}

const BOTO3_RETAINED: &str = r#"
import os, sys, boto3, botocore
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
attempts = [
    ("put", lambda: s3.put_object(Bucket="locked", Key="a", Body=b"changed")),
    ("put-new", lambda: s3.put_object(Bucket="locked", Key="sub/new", Body=b"x")),
    ("delete", lambda: s3.delete_object(Bucket="locked", Key="sub/b")),
    ("copy", lambda: s3.copy_object(Bucket="locked", Key="a", CopySource={"Bucket": "free", "Key": "c"})),
]
for name, attempt in attempts:
    try:
        attempt()
        print(name, "accepted")
    except botocore.exceptions.ClientError as e:
        print(name, "refused", e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
print("body", s3.get_object(Bucket="locked", Key="a")["Body"].read().hex())
s3.put_object(Bucket="free", Key="d", Body=b"free")
print("free put ok")
"#;

#[test]
fn a_retained_tree_refuses_every_change_through_every_front_end_until_its_date() {
    assert!(!fuse_missing(), "this test needs FUSE (/dev/fuse and fusermount3): run scripts/deps.sh");
    gw::need("python3");
    gw::need("nfs-cp");
    let cluster = TestCluster::start_with(3, "2+1", &["--trash-days", "1"]);
    let c = cluster.dir_str();
    let mount = Mount::start(&cluster, "retain", &[]);
    let locked = mount.join("locked");
    std::fs::create_dir_all(locked.join("sub")).expect("mkdir");
    std::fs::create_dir_all(mount.join("free")).expect("mkdir");
    let a = content(11, 200_000);
    std::fs::write(locked.join("a"), &a).expect("write a");
    std::fs::write(locked.join("sub/b"), b"bee").expect("write b");
    std::fs::write(mount.join("free/c"), b"sea").expect("write c");

    let out = run_ok(&["retain", "/locked", "--for", "1h", "--cluster", &c]);
    assert!(out.contains("locked until") && out.contains("(4 files and directories)"), "{out}");

    // trove itself: no removal, no new file, no earlier date (for the tree or a part of it).
    let refused = |args: &[&str]| {
        let out = run(args);
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} succeeded");
        text
    };
    let text = refused(&["rm", "/locked/a", "--cluster", &c]);
    assert!(text.contains("directory \"/locked\" is retained until") && text.contains("WORM"), "{text}");
    let scratch = tempfile::tempdir().expect("dir");
    std::fs::write(scratch.path().join("x"), b"changed").expect("write");
    let x = scratch.path().join("x");
    let x = x.to_str().expect("utf-8");
    refused(&["put", x, "/locked/sub/new", "--cluster", &c]);
    refused(&["put", x, "/locked/a", "--cluster", &c]);
    let text = refused(&["retain", "/locked", "--for", "1m", "--cluster", &c]);
    assert!(text.contains("never moved earlier"), "{text}");
    let text = refused(&["retain", "/locked/sub", "--for", "1m", "--cluster", &c]);
    assert!(text.contains("never moved earlier"), "{text}");
    let later = run_ok(&["retain", "/locked", "--for", "2h", "--cluster", &c]);
    assert!(later.contains("locked until"), "{later}");

    // The mount: every kind of change is refused at once.
    let free = mount.join("free");
    let (l, f) = (locked.display(), free.display());
    for script in [
        format!("echo x > {l}/a"),
        format!("rm {l}/a"),
        format!("mv {l}/a {l}/a2"),
        format!("mv {l}/sub {f}/sub"),
        format!("mv {f}/c {l}/c"),
        format!("ln {l}/a {f}/hard"),
        format!("touch {l}/new"),
        format!("mkdir {l}/d"),
        format!("chmod 600 {l}/a"),
        format!("truncate -s 0 {l}/sub/b"),
        format!("rm -r {l}"),
    ] {
        let (ok, text) = sh(&format!("{script} 2>&1"));
        assert!(!ok && text.contains("Permission denied"), "{script}: {text}");
    }
    // A write into the file itself fails at the latest when it is made durable.
    let (ok, text) = sh(&format!("dd if=/dev/zero of={l}/a bs=4k count=1 conv=notrunc,fsync 2>&1"));
    assert!(!ok, "dd into a retained file: {text}");

    // S3.
    let s3 = gw::Gateway::s3(&cluster, "s3-retain", &[]);
    let out = gw::python(&s3).arg("-c").arg(BOTO3_RETAINED).output().expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "boto3: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    for attempt in ["put", "put-new", "delete", "copy"] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{attempt} refused 403 AccessDenied"))),
            "S3 {attempt}: {text}"
        );
    }
    let hex: String = a.iter().map(|b| format!("{b:02x}")).collect();
    assert!(text.contains(&format!("body {hex}")) && text.contains("free put ok"), "{text}");

    // NFS.
    let nfs = gw::Gateway::nfs(&cluster, "nfs-retain", "/", &[]);
    let url = format!("nfs://127.0.0.1/locked/a?nfsport={0}&mountport={0}&version=3", nfs.port());
    let out = gw::run(Command::new("nfs-cp").arg(x).arg(&url));
    assert!(!out.status.success(), "nfs-cp over a retained file: {}", String::from_utf8_lossy(&out.stderr));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let status = rt.block_on(async {
        use nfsserve::vfs::NFSFileSystem;
        let client = cluster.client().await;
        let fs = nfsgw::TroveNfs::new(client, nfsgw::Export { path: "/locked".into(), read_only: false }, 0)
            .await
            .expect("file system");
        let remove = fs.remove(fs.root_dir(), &"a".as_bytes().into()).await.err();
        let mkdir = fs.mkdir(fs.root_dir(), &"n".as_bytes().into()).await.err();
        (remove, mkdir)
    });
    assert!(
        matches!(status, (Some(nfsserve::nfs::nfsstat3::NFS3ERR_ACCES), Some(nfsserve::nfs::nfsstat3::NFS3ERR_ACCES))),
        "{status:?}"
    );

    // Everything as it was, and readable; a snapshot of the locked tree can still be taken.
    assert!(read(&locked.join("a")) == a);
    assert!(read(&locked.join("sub/b")) == b"bee");
    snapshot(&cluster, &["create", "/locked", "while-locked"]);
    // Nothing comes back into it from a snapshot, a file or the whole tree.
    for what in [&["a"][..], &[][..]] {
        let mut args = vec!["snapshot", "restore", "/locked", "while-locked"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["--cluster", &c]);
        let text = refused(&args);
        assert!(text.contains("retained until"), "restore {what:?}: {text}");
    }
    std::fs::write(mount.join("free/e"), b"free").expect("outside the tree nothing is locked");
    // Nor does anything come into it from the trash.
    std::fs::remove_file(mount.join("free/e")).expect("rm e");
    let list: serde_json::Value =
        serde_json::from_str(&run_ok(&["trash", "list", "--json", "--cluster", &c])).expect("JSON");
    let id = list
        .as_array()
        .expect("trash")
        .iter()
        .find(|e| e["path"] == "/free/e")
        .and_then(|e| e["id"].as_str())
        .expect("e in the trash")
        .to_string();
    let text = refused(&["trash", "restore", &id, "--to", "/locked/e", "--cluster", &c]);
    assert!(text.contains("retained until"), "{text}");
    run_ok(&["trash", "restore", &id, "--cluster", &c]);
    assert!(read(&mount.join("free/e")) == b"free");

    // Once its date has passed, a tree is an ordinary one again.
    std::fs::create_dir_all(mount.join("brief")).expect("mkdir");
    std::fs::write(mount.join("brief/f"), b"short").expect("write");
    run_ok(&["retain", "/brief", "--for", "3s", "--cluster", &c]);
    let (ok, text) = sh(&format!("rm {} 2>&1", mount.join("brief/f").display()));
    assert!(!ok && text.contains("Permission denied"), "{text}");
    std::thread::sleep(Duration::from_secs(4));
    std::fs::remove_file(mount.join("brief/f")).expect("the retention ran out");
    mount.stop();
}
