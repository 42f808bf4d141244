//! Directory tree quotas and the trash on real clusters: writes over a hard limit refused
//! through the FUSE mount (`dd`: "Disk quota exceeded"), the S3 gateway (boto3:
//! `QuotaExceeded`) and the NFS gateway (libnfs `nfs-cp`: NFS3ERR_DQUOT); inode limits; soft
//! limits and their grace period; usage exactly what the files hold after writes, overwrites,
//! truncates, deletes and renames; `df` in a quota'd tree; and the trash: deletes through the
//! mount and S3 kept, listed, restored bit for bit and purged, and immediate deletes when it is
//! off.
//!
//! Every program is required (scripts/deps.sh installs them); a missing one fails the test.

mod common;
mod gw;
mod mnt;

use common::{content, run, run_ok, TestCluster};
use gw::{need, python, Gateway};
use mnt::{fuse_missing, Mount};
use nfsserve::nfs::{nfsstat3, sattr3};
use nfsserve::vfs::NFSFileSystem;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// `trove quota get PATH --json` of the cluster.
fn quota(cluster: &TestCluster, path: &str) -> serde_json::Value {
    let out = run_ok(&["quota", "get", path, "--json", "--cluster", &cluster.dir_str()]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("quota get is JSON ({e}): {out}"))
}

fn used(cluster: &TestCluster, path: &str) -> (u64, u64) {
    let q = quota(cluster, path);
    (q["bytes_used"].as_u64().expect("bytes_used"), q["inodes_used"].as_u64().expect("inodes_used"))
}

fn set_quota(cluster: &TestCluster, path: &str, args: &[&str]) -> String {
    let dir = cluster.dir_str();
    let mut all = vec!["quota", "set", path];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--cluster", &dir]);
    run_ok(&all)
}

/// Runs a shell script; returns (success, stdout + stderr).
fn sh(script: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(script).output().expect("sh runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn sh_ok(script: &str) -> String {
    let (ok, text) = sh(script);
    assert!(ok, "{script} failed: {text}");
    text
}

/// The sum of the sizes of the regular files below `dir` and the number of entries below it.
fn tree_usage(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut inodes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let meta = e.metadata().expect("stat");
            inodes += 1;
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.is_file() {
                bytes += meta.len();
            }
        }
    }
    (bytes, inodes)
}

const MIB: u64 = 1 << 20;

#[test]
fn quotas_on_the_mount_refuse_writes_and_creates_and_count_exactly() {
    if fuse_missing() {
        return;
    }
    need("dd");
    need("df");
    let cluster = TestCluster::start(3, "2+1");
    let mount = Mount::start(&cluster, "quota", &[]);
    let m = mount.path().to_str().expect("utf-8").to_string();
    sh_ok(&format!("mkdir -p {m}/q/sub {m}/other"));
    let set = set_quota(&cluster, "/q", &["--bytes", "10M", "--inodes", "8"]);
    assert!(set.contains("/q"), "{set}");
    // Only the subdirectory so far.
    assert_eq!(used(&cluster, "/q"), (0, 1));

    // Writes up to the limit pass; the one that would cross it fails with EDQUOT.
    sh_ok(&format!("dd if=/dev/urandom of={m}/q/a bs=1M count=6 2>&1"));
    assert_eq!(used(&cluster, "/q"), (6 * MIB, 2));
    let (ok, text) = sh(&format!("dd if=/dev/urandom of={m}/q/b bs=1M count=6 2>&1"));
    assert!(!ok && text.contains("Disk quota exceeded"), "dd over the hard limit: {text}");
    let (bytes, inodes) = used(&cluster, "/q");
    assert!(bytes <= 10 * MIB, "usage past the hard limit: {bytes}");
    assert_eq!((bytes, inodes), tree_usage(&mount.join("q")), "usage is what the tree holds");
    // df below the quota shows the quota; at the root the cluster.
    let df = sh_ok(&format!("df -B1 --output=size,used {m}/q | tail -1"));
    let fields: Vec<u64> = df.split_whitespace().map(|f| f.parse().expect("df number")).collect();
    assert_eq!(fields[0], 10 * MIB, "df size in the quota'd tree: {df}");
    assert_eq!(fields[1], bytes.div_ceil(4096) * 4096, "df used in the quota'd tree: {df}");
    let root = sh_ok(&format!("df -B1 --output=size {m} | tail -1"));
    assert_ne!(root.trim().parse::<u64>().expect("df number"), 10 * MIB, "df at the root shows the cluster");

    // Truncates, overwrites, renames within the tree and out of it, deletes: exact each time.
    sh_ok(&format!("truncate -s 0 {m}/q/b"));
    assert_eq!(used(&cluster, "/q"), (6 * MIB, 3));
    sh_ok(&format!("dd if=/dev/urandom of={m}/q/a bs=1M count=3 2>&1"));
    assert_eq!(used(&cluster, "/q"), (3 * MIB, 3));
    sh_ok(&format!("truncate -s 5000000 {m}/q/b"));
    assert_eq!(used(&cluster, "/q"), (3 * MIB + 5_000_000, 3));
    sh_ok(&format!("mv {m}/q/a {m}/q/sub/a"));
    assert_eq!(used(&cluster, "/q"), (3 * MIB + 5_000_000, 3));
    sh_ok(&format!("mv {m}/q/sub/a {m}/other/a"));
    assert_eq!(used(&cluster, "/q"), (5_000_000, 2));
    sh_ok(&format!("rm {m}/q/b"));
    assert_eq!(used(&cluster, "/q"), (0, 1));
    // A file moved in is counted, and refused when it does not fit.
    sh_ok(&format!("dd if=/dev/urandom of={m}/other/big bs=1M count=11 2>&1"));
    let (ok, text) = sh(&format!("mv {m}/other/big {m}/q/big 2>&1"));
    assert!(!ok && text.contains("quota"), "moving 11 MiB into a 10 MiB quota: {text}");
    sh_ok(&format!("mv {m}/other/a {m}/q/a"));
    assert_eq!(used(&cluster, "/q"), (3 * MIB, 2));

    // The inode limit (8) refuses creates: 6 more fit, the 7th is refused.
    let (ok, text) = sh(&format!("cd {m}/q && for i in 1 2 3 4 5 6 7; do touch f$i || exit 1; done 2>&1"));
    assert!(!ok && text.contains("Disk quota exceeded"), "creates over the inode limit: {text}");
    assert_eq!(used(&cluster, "/q"), (3 * MIB, 8));
    assert!(!mount.join("q/f7").exists(), "the refused create left an entry");
    let (ok, text) = sh(&format!("mkdir {m}/q/d 2>&1"));
    assert!(!ok && text.contains("Disk quota exceeded"), "mkdir over the inode limit: {text}");
    assert_eq!(tree_usage(&mount.join("q")), (3 * MIB, 8));

    // Raising the limit lets writes through again; the figures were kept all along.
    set_quota(&cluster, "/q", &["--bytes", "20M", "--inodes", "100"]);
    sh_ok(&format!("dd if=/dev/urandom of={m}/q/c bs=1M count=12 2>&1"));
    assert_eq!(used(&cluster, "/q"), (15 * MIB, 9));
    let list = run_ok(&["quota", "list", "--cluster", &cluster.dir_str()]);
    assert!(list.contains("/q"), "{list}");
}

#[test]
fn soft_limits_hold_for_their_grace_period_then_refuse() {
    if fuse_missing() {
        return;
    }
    need("dd");
    let cluster = TestCluster::start(3, "2+1");
    let mount = Mount::start(&cluster, "soft", &[]);
    let m = mount.path().to_str().expect("utf-8").to_string();
    sh_ok(&format!("mkdir {m}/s"));
    set_quota(&cluster, "/s", &["--bytes-soft", "1M", "--grace", "3s"]);
    // Over the soft limit: allowed, and the grace period starts.
    sh_ok(&format!("dd if=/dev/urandom of={m}/s/a bs=1M count=2 2>&1"));
    let q = quota(&cluster, "/s");
    let since = q["bytes_over_soft_since_ms"].as_u64().expect("since");
    assert!(since > 0, "grace started: {q}");
    let started = Instant::now();
    sh_ok(&format!("dd if=/dev/urandom of={m}/s/b bs=64K count=1 2>&1"));
    assert!(started.elapsed() < Duration::from_secs(3), "the second write took the whole grace period");
    std::thread::sleep(Duration::from_millis(3500));
    let (ok, text) = sh(&format!("dd if=/dev/urandom of={m}/s/c bs=64K count=1 2>&1"));
    assert!(!ok && text.contains("Disk quota exceeded"), "write after the grace period: {text}");
    // Back under the soft limit, writes pass and the grace period is reset.
    sh_ok(&format!("rm {m}/s/a"));
    sh_ok(&format!("dd if=/dev/urandom of={m}/s/d bs=64K count=1 2>&1"));
    assert_eq!(quota(&cluster, "/s")["bytes_over_soft_since_ms"].as_u64(), Some(0));
    assert_eq!(used(&cluster, "/s").0, tree_usage(&mount.join("s")).0);
}

const BOTO3_QUOTA: &str = r#"
import os, sys, boto3, botocore
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
s3.create_bucket(Bucket="quotab")
print("created")
sys.stdout.flush()
sys.stdin.readline()  # the test sets the quota
s3.put_object(Bucket="quotab", Key="one", Body=os.urandom(3 << 20))
try:
    s3.put_object(Bucket="quotab", Key="two", Body=os.urandom(3 << 20))
    print("second put succeeded")
    sys.exit(1)
except botocore.exceptions.ClientError as e:
    err = e.response["Error"]
    print("code", err["Code"], "status", e.response["ResponseMetadata"]["HTTPStatusCode"], "message", err["Message"])
try:
    s3.head_object(Bucket="quotab", Key="two")
    print("refused object exists")
    sys.exit(1)
except botocore.exceptions.ClientError as e:
    print("head", e.response["Error"]["Code"])
"#;

#[test]
fn s3_puts_over_a_quota_are_refused() {
    need("python3");
    let cluster = TestCluster::start(3, "2+1");
    let gw = Gateway::s3(&cluster, "s3-quota", &[]);
    let mut child = python(&gw)
        .arg("-c")
        .arg(BOTO3_QUOTA)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("read");
    assert_eq!(line.trim(), "created", "boto3 created the bucket");
    set_quota(&cluster, "/quotab", &["--bytes", "5M"]);
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"go\n").expect("write");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read");
    let out = child.wait_with_output().expect("python exits");
    assert!(
        out.status.success(),
        "boto3: {rest}\n{}\ngateway log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gw.log_text()
    );
    assert!(rest.contains("code QuotaExceeded status 403") && rest.contains("quota"), "{rest}");
    assert!(rest.contains("head 404"), "{rest}");
    // Exactly the one object (temporary upload files removed).
    assert_eq!(used(&cluster, "/quotab"), (3 * MIB, 1));
}

#[test]
fn nfs_writes_over_a_quota_are_refused() {
    need("nfs-cp");
    let cluster = TestCluster::start(3, "2+1");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(cluster.client());
    rt.block_on(async { client.mkdir_p("/n").await.expect("mkdir") });
    set_quota(&cluster, "/n", &["--bytes", "5M"]);
    let gw = Gateway::nfs(&cluster, "nfs-quota", "/", &[]);
    let url = |path: &str| format!("nfs://127.0.0.1{path}?nfsport={0}&mountport={0}&version=3", gw.port());
    let dir = tempfile::tempdir().expect("dir");
    let one = content(1, 3 << 20);
    std::fs::write(dir.path().join("one"), &one).expect("write");
    gw::run_ok(Command::new("nfs-cp").arg(dir.path().join("one")).arg(url("/n/one")));
    let out = gw::run(Command::new("nfs-cp").arg(dir.path().join("one")).arg(url("/n/two")));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // nfs-cp reports only that the write failed; the status it got is the gateway's for the
    // same WRITE, called on its file system directly: NFS3ERR_DQUOT.
    assert!(!out.status.success() && text.contains("Failed to write"), "nfs-cp over the quota: {text}");
    let status = rt.block_on(async {
        let fs = nfsgw::TroveNfs::new(client.clone(), nfsgw::Export { path: "/n".into(), read_only: false }, 0)
            .await
            .expect("file system");
        let (f, _) = fs.create(fs.root_dir(), &"three".as_bytes().into(), sattr3::default()).await.expect("create");
        fs.write(f, 0, &content(3, 3 << 20)).await.err()
    });
    assert!(matches!(status, Some(nfsstat3::NFS3ERR_DQUOT)), "the gateway's WRITE over the quota: {status:?}");
    let (bytes, _) = used(&cluster, "/n");
    let held: u64 = rt.block_on(async {
        let mut sum = 0;
        for e in client.readdir(client.resolve("/n").await.expect("resolve").ino).await.expect("readdir") {
            sum += e.attr.size;
        }
        sum
    });
    assert_eq!(bytes, held, "usage is what the files hold");
    assert!(bytes <= 5 * MIB);
    assert!(rt.block_on(client.read_file("/n/one")).expect("read") == one);
}

const BOTO3_TRASH: &str = r#"
import os, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
s3.create_bucket(Bucket="trashb")
s3.put_object(Bucket="trashb", Key="dir/obj", Body=open(os.environ["OBJ"], "rb").read())
s3.delete_object(Bucket="trashb", Key="dir/obj")
print("deleted")
"#;

#[test]
fn trash_keeps_deletes_from_the_mount_and_s3_until_purged() {
    if fuse_missing() {
        return;
    }
    need("python3");
    let cluster = TestCluster::start_with(3, "2+1", &["--trash-days", "1", "--gc-grace-ms", "300"]);
    let dir = cluster.dir_str();
    let mount = Mount::start(&cluster, "trash", &[]);
    let m = mount.path().to_str().expect("utf-8").to_string();
    let scratch = tempfile::tempdir().expect("dir");
    let a = content(7, (5 << 20) + 321);
    let obj = content(8, 777_777);
    std::fs::write(scratch.path().join("a"), &a).expect("write");
    std::fs::write(scratch.path().join("obj"), &obj).expect("write");
    let baseline = cluster.shard_files().len();
    sh_ok(&format!("mkdir {m}/proj && cp {} {m}/proj/a && rm {m}/proj/a", scratch.path().join("a").display()));
    assert!(!mount.join("proj/a").exists());
    let gw = Gateway::s3(&cluster, "s3-trash", &[]);
    let out = run_py(python(&gw).env("OBJ", scratch.path().join("obj")).arg("-c").arg(BOTO3_TRASH));
    assert!(out.contains("deleted"), "{out}");

    // A write given up (its temporary file removed) is not a delete: nothing goes to the trash.
    set_quota(&cluster, "/proj", &["--bytes", "1M"]);
    let failed = run(&["put", &scratch.path().join("a").to_string_lossy(), "/proj/big", "--cluster", &dir]);
    assert!(!failed.status.success() && String::from_utf8_lossy(&failed.stderr).contains("quota"));
    run_ok(&["quota", "rm", "/proj", "--cluster", &dir]);

    let list = run_ok(&["trash", "list", "--json", "--cluster", &dir]);
    let entries: Vec<serde_json::Value> = serde_json::from_str(&list).expect("JSON");
    assert_eq!(entries.len(), 2, "{list}");
    let paths: Vec<&str> = entries.iter().filter_map(|e| e["path"].as_str()).collect();
    assert!(paths.contains(&"/proj/a") && paths.contains(&"/trashb/dir/obj"), "{list}");
    let id_of =
        |path: &str| entries.iter().find(|e| e["path"] == path).and_then(|e| e["id"].as_str()).expect("id").to_string();
    let text = run_ok(&["trash", "list", "--cluster", &dir]);
    assert!(text.contains("/proj/a") && text.contains(&a.len().to_string()), "{text}");

    // Restore brings the bytes back, bit for bit, at the path they were deleted from.
    run_ok(&["trash", "restore", &id_of("/proj/a"), "--cluster", &dir]);
    assert!(std::fs::read(mount.join("proj/a")).expect("read restored") == a, "restored bytes differ");
    run_ok(&["trash", "restore", &id_of("/trashb/dir/obj"), "--to", "/proj/obj", "--cluster", &dir]);
    assert!(std::fs::read(mount.join("proj/obj")).expect("read restored") == obj, "restored object differs");
    let again = run(&["trash", "restore", &id_of("/proj/a"), "--cluster", &dir]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("nothing in the trash"));

    // Purge frees the data: the shards go once the GC's grace period is over.
    sh_ok(&format!("rm {m}/proj/a {m}/proj/obj"));
    let purged = run_ok(&["trash", "purge", "--all", "--cluster", &dir]);
    assert!(purged.contains("purged 2"), "{purged}");
    assert!(run_ok(&["trash", "list", "--cluster", &dir]).contains("the trash is empty"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.shard_files().len() > baseline {
        assert!(
            Instant::now() < deadline,
            "purged files' shards were not deleted: {} > {baseline}",
            cluster.shard_files().len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn with_the_trash_off_deletes_are_immediate() {
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start_with(3, "2+1", &["--gc-grace-ms", "300"]);
    let mount = Mount::start(&cluster, "notrash", &[]);
    let m = mount.path().to_str().expect("utf-8").to_string();
    let baseline = cluster.shard_files().len();
    sh_ok(&format!("dd if=/dev/urandom of={m}/x bs=1M count=3 2>&1 && rm {m}/x"));
    assert!(run_ok(&["trash", "list", "--cluster", &cluster.dir_str()]).contains("the trash is empty"));
    assert!(!mount.join(".trash").exists(), "a trash directory appeared with the trash off");
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.shard_files().len() > baseline {
        assert!(Instant::now() < deadline, "deleted file's shards were not deleted");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn run_py(cmd: &mut Command) -> String {
    let out = cmd.output().expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python failed: {text}");
    text
}
