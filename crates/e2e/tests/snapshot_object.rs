//! Snapshots pushed to a real S3 server that is not Trove (Garage) and pulled into a second
//! cluster: `trove snapshot push` of a tree with files of several chunks, an empty file, a
//! file with a hole, a symbolic link, a second name of a file, extended attributes, modes,
//! owners and times; `trove snapshot pull` into another cluster with another chunk size
//! rebuilds it bit-exact, as does a second snapshot pushed after small changes, which uploads
//! only the changed chunks (bytes counted in the push's output and in the bucket). Refusals:
//! a name pushed twice, a pull into an existing path or of a name never pushed, wrong
//! credentials (named), and a piece damaged in the bucket (named, and nothing left behind).
//!
//! Garage is installed by scripts/deps.sh; a missing `garage` fails the test.

mod common;
mod garage;

use common::{content, run, run_ok, TestCluster};
use garage::Garage;
use std::collections::BTreeMap;
use std::process::Output;
use wire::{FileKind, SetAttr, Timestamp, XattrMode};

const CHUNK_BYTES: usize = 1 << 20;

/// `trove ARGS` with the S3 options of `garage` (secret in the environment, as users pass it).
fn s3_run(garage: &Garage, args: &[&str], secret: &str) -> Output {
    let mut cmd = common::trove();
    cmd.args(args)
        .args(["--endpoint", &garage.endpoint, "--region", "garage", "--allow-http"])
        .env("AWS_ACCESS_KEY_ID", &garage.key_id)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env_remove("AWS_ENDPOINT_URL");
    cmd.output().expect("trove runs")
}

fn s3_ok(garage: &Garage, args: &[&str]) -> String {
    let out = s3_run(garage, args, &garage.secret.clone());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "trove {args:?} failed:\n{text}");
    text
}

fn s3_fails(garage: &Garage, args: &[&str], secret: &str) -> String {
    let out = s3_run(garage, args, secret);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "trove {args:?} succeeded:\n{text}");
    text
}

/// The number after `label` in a push's output ("uploaded 3 new chunks (123 bytes").
fn number_after(text: &str, label: &str) -> u64 {
    let at = text.find(label).unwrap_or_else(|| panic!("no {label:?} in:\n{text}")) + label.len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in:\n{text}"))
}

/// Everything a tree holds, by path relative to its top: kind, mode, owner, mtime, size,
/// link target, extended attributes, the file's bytes, and for files with more names, the
/// sorted list of those names.
#[derive(Debug, PartialEq, Eq)]
struct Node {
    kind: FileKind,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: Timestamp,
    size: u64,
    target: Option<String>,
    xattrs: BTreeMap<String, Vec<u8>>,
    data: Option<Vec<u8>>,
    nlink: u32,
}

async fn tree(client: &client::Client, top: &str) -> BTreeMap<String, Node> {
    let root = client.resolve(top).await.unwrap_or_else(|e| panic!("{top}: {e}"));
    let mut out = BTreeMap::new();
    let mut todo = vec![(root, String::new())];
    while let Some((attr, path)) = todo.pop() {
        let mut xattrs = BTreeMap::new();
        for name in client.listxattr(attr.ino).await.expect("listxattr") {
            xattrs.insert(name.clone(), client.getxattr(attr.ino, &name).await.expect("getxattr"));
        }
        let (mut target, mut data) = (None, None);
        match attr.kind {
            FileKind::Dir => {
                for e in client.readdir(attr.ino).await.expect("readdir") {
                    let child = if path.is_empty() { e.name.clone() } else { format!("{path}/{}", e.name) };
                    todo.push((e.attr, child));
                }
            }
            FileKind::File => data = Some(client.read_file(&format!("{top}/{path}")).await.expect("read").to_vec()),
            FileKind::Symlink => target = Some(client.readlink(attr.ino).await.expect("readlink")),
            _ => {}
        }
        // A symbolic link's mode and times mean nothing (Linux shows 0777) and are not kept.
        let (mode, mtime) =
            if attr.kind == FileKind::Symlink { (0, Timestamp::default()) } else { (attr.mode, attr.mtime) };
        out.insert(
            path,
            Node {
                kind: attr.kind,
                mode,
                uid: attr.uid,
                gid: attr.gid,
                mtime,
                size: attr.size,
                target,
                xattrs,
                data,
                nlink: attr.nlink,
            },
        );
    }
    out
}

#[test]
fn a_snapshot_pushed_to_garage_is_pulled_bit_exact_into_another_cluster_and_a_second_push_sends_only_changes() {
    let garage = Garage::start("snaps");
    let a = TestCluster::start_with(3, "2+1", &["--chunk-bytes", &CHUNK_BYTES.to_string()]);
    let b = TestCluster::start(3, "2+1");
    let (ca, cb) = (a.dir_str(), b.dir_str());
    let url = "s3://snaps/backups/team-a";
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    // The tree: files of several chunks (the last one partial), an empty file, a file with a
    // hole of two whole chunks, a symbolic link, a second name of a file, attributes.
    let big = content(1, 3 * CHUNK_BYTES + 12_345);
    let small = content(2, 5_000);
    let holey_tail = content(3, 100);
    rt.block_on(async {
        let c = a.client().await;
        c.mkdir_p("/data/sub/deeper").await.expect("mkdir");
        c.write_file("/data/big", &big).await.expect("big");
        c.write_file("/data/sub/small", &small).await.expect("small");
        c.write_file("/data/sub/empty", b"").await.expect("empty");
        let mut h = c.create_path("/data/holey", 0o644).await.expect("holey");
        h.write_at(3 * CHUNK_BYTES as u64 + 7, &holey_tail).await.expect("write past a hole");
        h.close().await.expect("close");
        let data = c.resolve("/data").await.expect("data");
        let sub = c.resolve("/data/sub").await.expect("sub");
        c.symlink(sub.ino, "link", "../big").await.expect("symlink");
        let small_attr = c.resolve("/data/sub/small").await.expect("small");
        c.link(small_attr.ino, data.ino, "small-again").await.expect("hard link");
        c.setxattr(small_attr.ino, "user.label", b"cat\x00\xff", XattrMode::Upsert).await.expect("xattr");
        c.setattr(
            small_attr.ino,
            SetAttr {
                mode: Some(0o640),
                uid: Some(1234),
                gid: Some(567),
                mtime: Some(Timestamp { secs: 1_500_000_000, nanos: 42 }),
                ..SetAttr::default()
            },
        )
        .await
        .expect("setattr");
        c.setattr(
            sub.ino,
            SetAttr {
                mode: Some(0o750),
                mtime: Some(Timestamp { secs: 1_600_000_000, nanos: 7 }),
                ..SetAttr::default()
            },
        )
        .await
        .expect("setattr dir");
    });
    run_ok(&["snapshot", "create", "/data", "v1", "--cluster", &ca]);
    let out = s3_ok(&garage, &["snapshot", "push", "/data", "v1", "--to", url, "--cluster", &ca]);
    // big: 4 pieces, small: 1, holey: 1 (the chunk past the hole); the empty file has none.
    assert_eq!(number_after(&out, "uploaded "), 6, "{out}");
    let first_bytes = number_after(&out, "new chunks (");
    assert_eq!(first_bytes, (big.len() + small.len() + 7 + holey_tail.len()) as u64, "{out}");
    let objects = garage.list("backups/team-a/");
    let pieces: Vec<&(String, u64)> = objects.iter().filter(|(k, _)| k.starts_with("backups/team-a/chunks/")).collect();
    assert_eq!(pieces.len(), 6, "{objects:?}");
    assert_eq!(pieces.iter().map(|(_, s)| s).sum::<u64>(), first_bytes);
    assert!(objects.iter().any(|(k, _)| k == "backups/team-a/snapshots/v1/commit.json"), "{objects:?}");

    // The same name again is refused; nothing changes in the bucket.
    let again = s3_fails(&garage, &["snapshot", "push", "/data", "v1", "--to", url, "--cluster", &ca], &garage.secret);
    assert!(again.contains("already holds a snapshot named \"v1\""), "{again}");
    // Wrong credentials are named as such.
    let denied =
        s3_fails(&garage, &["snapshot", "pull", url, "v1", "--into", "/nope", "--cluster", &cb], "not-the-secret");
    assert!(
        denied.contains("refused the credentials")
            || denied.contains("SignatureDoesNotMatch")
            || denied.contains("403"),
        "{denied}"
    );

    // Small changes: one chunk of big rewritten, a new small file; the live tree also drops a
    // file, which v1 keeps.
    let mut big2 = big.clone();
    big2[CHUNK_BYTES + 10] ^= 0xff;
    let added = content(4, 777);
    rt.block_on(async {
        let c = a.client().await;
        let mut h = c.open_path("/data/big").await.expect("open big");
        h.write_at(CHUNK_BYTES as u64 + 10, &big2[CHUNK_BYTES + 10..CHUNK_BYTES + 11]).await.expect("rewrite a byte");
        h.close().await.expect("close");
        c.write_file("/data/added", &added).await.expect("added");
    });
    run_ok(&["rm", "/data/sub/empty", "--cluster", &ca]);
    run_ok(&["snapshot", "create", "/data", "v2", "--cluster", &ca]);
    let out2 = s3_ok(&garage, &["snapshot", "push", "/data", "v2", "--to", url, "--cluster", &ca]);
    assert_eq!(number_after(&out2, "uploaded "), 2, "only the changed chunk and the new file travel:\n{out2}");
    assert_eq!(number_after(&out2, "new chunks ("), (CHUNK_BYTES + added.len()) as u64, "{out2}");
    assert!(out2.contains("5 chunks were in the bucket already"), "{out2}");

    // Both pulled into the other cluster, every byte and attribute as the snapshots hold them.
    let no_parent =
        s3_fails(&garage, &["snapshot", "pull", url, "v1", "--into", "/restored/v1", "--cluster", &cb], &garage.secret);
    assert!(no_parent.contains("/restored"), "{no_parent}");
    run_ok(&["mkdir", "/restored", "--cluster", &cb]);
    let pulled = s3_ok(&garage, &["snapshot", "pull", url, "v1", "--into", "/restored/v1", "--cluster", &cb]);
    assert!(pulled.contains("every one checked"), "{pulled}");
    s3_ok(&garage, &["snapshot", "pull", url, "v2", "--into", "/restored/v2", "--cluster", &cb]);
    rt.block_on(async {
        let (c1, c2) = (a.client().await, b.client().await);
        for name in ["v1", "v2"] {
            let want = tree(&c1, &format!("/data/.snapshots/{name}")).await;
            let got = tree(&c2, &format!("/restored/{name}")).await;
            assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "{name}: the same paths");
            for (path, w) in &want {
                assert_eq!(Some(w), got.get(path), "{name}: {path:?}");
            }
        }
        let v1 = tree(&c2, "/restored/v1").await;
        assert_eq!(v1["big"].data.as_deref(), Some(&big[..]));
        assert_eq!(v1["sub/empty"].size, 0);
        assert_eq!(v1["sub/small"].nlink, 2, "the second name is a link again");
        assert_eq!(v1["sub/small"].xattrs["user.label"], b"cat\x00\xff");
        assert_eq!((v1["sub/small"].mode, v1["sub/small"].uid, v1["sub/small"].gid), (0o640, 1234, 567));
        assert_eq!(v1["sub/link"].target.as_deref(), Some("../big"));
        let holey = v1["holey"].data.as_deref().expect("holey");
        assert_eq!(holey.len(), 3 * CHUNK_BYTES + 7 + holey_tail.len());
        assert!(holey[..3 * CHUNK_BYTES + 7].iter().all(|&b| b == 0));
        let v2 = tree(&c2, "/restored/v2").await;
        assert_eq!(v2["big"].data.as_deref(), Some(&big2[..]));
        assert_eq!(v2["added"].data.as_deref(), Some(&added[..]));
        assert!(!v2.contains_key("sub/empty"));
    });

    // Refusals of pull: an existing path, a name never pushed.
    let exists =
        s3_fails(&garage, &["snapshot", "pull", url, "v1", "--into", "/restored/v1", "--cluster", &cb], &garage.secret);
    assert!(exists.contains("it exists"), "{exists}");
    let unknown =
        s3_fails(&garage, &["snapshot", "pull", url, "v9", "--into", "/restored/v9", "--cluster", &cb], &garage.secret);
    assert!(unknown.contains("holds no snapshot \"v9\""), "{unknown}");

    // A piece damaged in the store: the pull names it and leaves nothing at the target.
    let (key, _) = pieces.iter().find(|(_, size)| *size == small.len() as u64).expect("small's piece");
    let mut bad = garage.get(key);
    bad[100] ^= 1;
    garage.put(key, &bad);
    let damaged = s3_fails(
        &garage,
        &["snapshot", "pull", url, "v1", "--into", "/restored/v1-again", "--cluster", &cb],
        &garage.secret,
    );
    let sha = key.rsplit('/').next().expect("name");
    assert!(damaged.contains(sha) && damaged.contains("does not match its SHA-256"), "{damaged}");
    let listing = run_ok(&["ls", "/restored", "--cluster", &cb]);
    assert!(!listing.contains("v1-again"), "{listing}");
    let stat = run(&["stat", "/restored/v1-again", "--cluster", &cb]);
    assert!(!stat.status.success());
}
