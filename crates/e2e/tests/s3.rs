//! The S3 gateway with real S3 clients: awscli, boto3, rclone and s3cmd against `trove s3`
//! started from the real binary on a real cluster, and the same objects read back through the
//! native client, NFS and the FUSE mount (and written there, read through S3).
//!
//! The external programs are required (scripts/deps.sh installs them); a missing one fails the
//! test rather than skipping it.

mod common;
mod gw;

use common::{content, TestCluster};
use gw::{aws, need, python, read_tree, run, run_ok, sample_tree, write_tree, Gateway, ACCESS_KEY, SECRET_KEY};
use std::path::Path;
use std::process::Command;

fn suite_file(name: &str) -> String {
    format!("{}/tests/s3/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs the boto3 check script `name` (in tests/s3/) against `gw`, and `tls` as its HTTPS
/// endpoint if given; fails with the script's output and the gateway's log unless every check
/// passed.
fn run_checks(gw: &Gateway, name: &str, tls: Option<&Gateway>) {
    let mut cmd = python(gw);
    cmd.arg(suite_file(name));
    if let Some(tls) = tls {
        cmd.env("S3_TLS_ENDPOINT", format!("https://{}", tls.addr));
    }
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}\ngateway log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gw.log_text()
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
fn awscli_cp_sync_ls_rm_and_a_200_mib_multipart_upload() {
    need("aws");
    let cluster = TestCluster::start(6, "4+2");
    let gw = Gateway::s3(&cluster, "s3-aws", &[]);
    let home = tempfile::tempdir().expect("home");
    let local = home.path().join("up");
    let mut tree = sample_tree(10);
    tree.sort();
    write_tree(&local, &tree);
    let big = content(77, 200 << 20);
    std::fs::write(home.path().join("big.bin"), &big).expect("write big file");

    run_ok(aws(&gw, home.path()).args(["s3", "mb", "s3://awsbkt"]));
    // 200 MiB: awscli uploads 25 parts of 8 MiB in parallel.
    run_ok(aws(&gw, home.path()).args(["s3", "cp"]).arg(home.path().join("big.bin")).arg("s3://awsbkt/big/big.bin"));
    let head =
        run_ok(aws(&gw, home.path()).args(["s3api", "head-object", "--bucket", "awsbkt", "--key", "big/big.bin"]));
    assert!(head.contains("-25\\\""), "a 25-part multipart ETag: {head}");
    run_ok(aws(&gw, home.path()).args(["s3", "sync"]).arg(&local).arg("s3://awsbkt/tree/"));

    let ls = run_ok(aws(&gw, home.path()).args(["s3", "ls", "--recursive", "s3://awsbkt/"]));
    for (rel, data) in &tree {
        let line = ls
            .lines()
            .find(|l| l.ends_with(&format!("tree/{rel}")))
            .unwrap_or_else(|| panic!("{rel} missing from:\n{ls}"));
        assert!(line.contains(&format!(" {} tree/", data.len())), "size of {rel}: {line}");
    }
    assert!(ls.contains(&format!("{} big/big.bin", big.len())), "{ls}");
    let top = run_ok(aws(&gw, home.path()).args(["s3", "ls", "s3://awsbkt/"]));
    assert!(top.contains("PRE big/") && top.contains("PRE tree/"), "{top}");

    // Download with awscli's parallel ranged GETs; the native client sees the same bytes.
    run_ok(aws(&gw, home.path()).args(["s3", "cp", "s3://awsbkt/big/big.bin"]).arg(home.path().join("big.back")));
    assert!(std::fs::read(home.path().join("big.back")).expect("read back") == big, "200 MiB object differs");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let native =
        rt.block_on(async { cluster.client().await.read_file("/awsbkt/big/big.bin").await.expect("native read") });
    assert!(native == big, "native client reads other bytes");

    let back = home.path().join("down");
    run_ok(aws(&gw, home.path()).args(["s3", "sync", "s3://awsbkt/tree/"]).arg(&back));
    assert_eq!(read_tree(&back), tree, "sync down differs from what was synced up");

    run_ok(aws(&gw, home.path()).args(["s3", "rm", "--recursive", "s3://awsbkt/tree/"]));
    let ls = run(aws(&gw, home.path()).args(["s3", "ls", "--recursive", "s3://awsbkt/tree/"]));
    assert!(String::from_utf8_lossy(&ls.stdout).trim().is_empty(), "objects left after rm");
    run_ok(aws(&gw, home.path()).args(["s3", "rm", "s3://awsbkt/big/big.bin"]));
    run_ok(aws(&gw, home.path()).args(["s3", "rb", "s3://awsbkt"]));
    let buckets = run_ok(aws(&gw, home.path()).args(["s3", "ls"]));
    assert!(!buckets.contains("awsbkt"), "{buckets}");
}

/// A self-signed certificate for localhost, made with openssl.
fn self_signed(dir: &Path) -> (String, String) {
    let cert = dir.join("cert.pem").to_string_lossy().into_owned();
    let key = dir.join("key.pem").to_string_lossy().into_owned();
    run_ok(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &cert,
        "-days",
        "2",
        "-subj",
        "/CN=localhost",
    ]));
    (cert, key)
}

#[test]
fn boto3_script_covers_the_api_auth_and_bad_requests() {
    need("python3");
    need("openssl");
    let probe = run(Command::new("python3").args(["-c", "import boto3"]));
    assert!(probe.status.success(), "boto3 is needed by this test: run scripts/deps.sh");
    let cluster = TestCluster::start(6, "4+2");
    let gw = Gateway::s3(&cluster, "s3-boto3", &[]);
    let certs = tempfile::tempdir().expect("cert dir");
    let (cert, key) = self_signed(certs.path());
    let tls = Gateway::s3(&cluster, "s3-tls", &["--tls-cert", &cert, "--tls-key", &key, "--anonymous", "read"]);
    run_checks(&gw, "boto3_check.py", Some(&tls));
}

#[test]
fn boto3_conditional_writes_checksums_part_copies_and_kept_headers() {
    need("python3");
    let probe = run(Command::new("python3").args(["-c", "import boto3, awscrt"]));
    assert!(probe.status.success(), "boto3 and awscrt are needed by this test: run scripts/deps.sh");
    let cluster = TestCluster::start(6, "4+2");
    need("openssl");
    let gw = Gateway::s3(&cluster, "s3-compat", &[]);
    let certs = tempfile::tempdir().expect("cert dir");
    let (cert, key) = self_signed(certs.path());
    let tls = Gateway::s3(&cluster, "s3-compat-tls", &["--tls-cert", &cert, "--tls-key", &key]);
    run_checks(&gw, "compat_check.py", Some(&tls));
}

#[test]
fn versioned_buckets_keep_every_version_for_boto3_awscli_and_the_namespace() {
    need("aws");
    let cluster = TestCluster::start(6, "4+2");
    let gw = Gateway::s3(&cluster, "s3-versions", &[]);
    run_checks(&gw, "versioning_check.py", None);

    // awscli: enable, write twice, read the old version back by id.
    let home = tempfile::tempdir().expect("home");
    let (old, new) = (content(51, (1 << 20) + 3), content(52, 70_000));
    std::fs::write(home.path().join("old"), &old).expect("write");
    std::fs::write(home.path().join("new"), &new).expect("write");
    run_ok(aws(&gw, home.path()).args(["s3", "mb", "s3://kept"]));
    run_ok(aws(&gw, home.path()).args([
        "s3api",
        "put-bucket-versioning",
        "--bucket",
        "kept",
        "--versioning-configuration",
        "Status=Enabled",
    ]));
    let put = |file: &str| -> String {
        let out = run_ok(
            aws(&gw, home.path())
                .args(["s3api", "put-object", "--bucket", "kept", "--key", "d/f.bin", "--body"])
                .arg(home.path().join(file)),
        );
        let json: serde_json::Value = serde_json::from_str(&out).expect("put-object prints JSON");
        json["VersionId"].as_str().expect("a version id").to_string()
    };
    let (old_id, new_id) = (put("old"), put("new"));
    run_ok(
        aws(&gw, home.path())
            .args(["s3api", "get-object", "--bucket", "kept", "--key", "d/f.bin", "--version-id", &old_id])
            .arg(home.path().join("back")),
    );
    assert!(std::fs::read(home.path().join("back")).expect("read") == old, "the old version reads back");
    let listed = run_ok(aws(&gw, home.path()).args(["s3api", "list-object-versions", "--bucket", "kept"]));
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
    let ids: Vec<(&str, bool)> = listed["Versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["VersionId"].as_str().unwrap_or_default(), v["IsLatest"].as_bool().unwrap_or_default()))
        .collect();
    assert_eq!(ids, [(new_id.as_str(), true), (old_id.as_str(), false)]);

    // The namespace: the key's file is the current version; the old one is in the hidden
    // version store, whole, with its id and S3 metadata; a delete marker hides the file.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(cluster.client());
    rt.block_on(async {
        assert!(client.read_file("/kept/d/f.bin").await.expect("read") == new);
        let store =
            client.readdir(client.resolve("/.trove-s3/versions/kept").await.expect("store").ino).await.expect("ls");
        assert_eq!(store.len(), 1, "one key dir: {store:?}");
        let key_dir = store[0].attr.ino;
        assert_eq!(client.getxattr(key_dir, "user.s3.key").await.expect("key"), b"d/f.bin");
        let kept = client.readdir(key_dir).await.expect("ls");
        assert_eq!(kept.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), [old_id.as_str()]);
        assert!(
            client.read_file(&format!("/.trove-s3/versions/kept/{}/{old_id}", store[0].name)).await.expect("read")
                == old
        );
    });
    run_ok(aws(&gw, home.path()).args(["s3", "rm", "s3://kept/d/f.bin"]));
    rt.block_on(async {
        let gone = client.resolve("/kept/d/f.bin").await.expect_err("hidden by the marker");
        assert_eq!(gone.code, client::ErrorCode::NotFound);
    });
    let failed = aws_refused(
        aws(&gw, home.path()).args(["s3api", "head-object", "--bucket", "kept", "--key", "d/f.bin"]),
        "404",
    );
    assert!(failed.contains("Not Found"), "{failed}");
    run_ok(aws(&gw, home.path()).args([
        "s3api",
        "head-object",
        "--bucket",
        "kept",
        "--key",
        "d/f.bin",
        "--version-id",
        &new_id,
    ]));
}

#[test]
fn refused_authentications_are_reported_to_the_event_log() {
    need("aws");
    need("curl");
    let cluster = TestCluster::start(4, "2+1");
    let gw = Gateway::s3(&cluster, "s3-auth", &[]);
    let home = tempfile::tempdir().expect("home");
    run_ok(aws(&gw, home.path()).args(["s3", "mb", "s3://guarded"]));
    // A wrong secret, an unknown key, and no signature at all (anonymous access is off).
    aws_refused(
        aws(&gw, home.path()).env("AWS_SECRET_ACCESS_KEY", "not-the-secret").args(["s3", "ls", "s3://guarded"]),
        "SignatureDoesNotMatch",
    );
    aws_refused(
        aws(&gw, home.path()).env("AWS_ACCESS_KEY_ID", "AKIDINTRUDER").args(["s3", "ls", "s3://guarded"]),
        "InvalidAccessKeyId",
    );
    let status = run_ok(
        Command::new("curl").args(["-s", "-o", "/dev/null", "-w", "%{http_code}"]).arg(format!("{}/guarded", gw.url())),
    );
    assert_eq!(status, "403");
    // One event for the three, within the report interval.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let event = loop {
        let out = common::run_ok(&["events", "--cluster", &cluster.dir_str(), "--json", "-n", "200"]);
        let found: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("an event per line"))
            .filter(|e| e["kind"] == "auth_failure")
            .collect();
        let refused: u64 = found
            .iter()
            .filter_map(|e| e["message"].as_str()?.split(": ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .sum();
        if refused >= 3 {
            break found.last().cloned().expect("an event");
        }
        assert!(std::time::Instant::now() < deadline, "refusals not reported: {found:#?}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let message = event["message"].as_str().unwrap_or_default();
    assert_eq!(event["severity"], "Warning");
    assert!(message.starts_with(&format!("S3 gateway {}: ", gw.addr)), "{message}");
    assert!(
        message.contains("AccessDenied for GET /guarded from 127.0.0.1:") && message.contains("(unsigned)"),
        "{message}"
    );
}

/// Runs awscli expecting it to fail with S3 error `code`; returns its stderr.
fn aws_refused(cmd: &mut Command, code: &str) -> String {
    let out = run(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{cmd:?} succeeded where {code} was expected");
    assert!(stderr.contains(code), "{cmd:?}: expected {code}, got:\n{stderr}");
    stderr
}

#[test]
fn awscli_conditional_put_checksums_and_upload_part_copy() {
    need("aws");
    let cluster = TestCluster::start(6, "4+2");
    let gw = Gateway::s3(&cluster, "s3-aws-compat", &[]);
    let home = tempfile::tempdir().expect("home");
    let file = home.path().join("hello.txt");
    std::fs::write(&file, b"hello world").expect("write file");
    let file = file.to_string_lossy().into_owned();
    let api = |args: &[&str]| {
        let mut cmd = aws(&gw, home.path());
        cmd.arg("s3api").args(args);
        cmd
    };
    run_ok(&mut api(&["create-bucket", "--bucket", "cli"]));

    // Create-only PUT: the second one is refused and the first object stays.
    run_ok(&mut api(&[
        "put-object",
        "--bucket",
        "cli",
        "--key",
        "_delta_log/0.json",
        "--body",
        &file,
        "--if-none-match",
        "*",
    ]));
    aws_refused(
        &mut api(&[
            "put-object",
            "--bucket",
            "cli",
            "--key",
            "_delta_log/0.json",
            "--body",
            &file,
            "--if-none-match",
            "*",
        ]),
        "PreconditionFailed",
    );
    aws_refused(
        &mut api(&[
            "delete-object",
            "--bucket",
            "cli",
            "--key",
            "_delta_log/0.json",
            "--if-match",
            "\"0123456789abcdef0123456789abcdef\"",
        ]),
        "PreconditionFailed",
    );
    run_ok(&mut api(&["head-object", "--bucket", "cli", "--key", "_delta_log/0.json"]));

    // Checksums given by value: the right ones are kept and answered, a wrong one is refused.
    let crc32 = "DUoRhQ==";
    let sha256 = "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=";
    run_ok(&mut api(&[
        "put-object",
        "--bucket",
        "cli",
        "--key",
        "crc.txt",
        "--body",
        &file,
        "--checksum-crc32",
        crc32,
    ]));
    let head = run_ok(&mut api(&["head-object", "--bucket", "cli", "--key", "crc.txt", "--checksum-mode", "ENABLED"]));
    assert!(head.contains(crc32), "CRC32 not answered: {head}");
    run_ok(&mut api(&[
        "put-object",
        "--bucket",
        "cli",
        "--key",
        "sha.txt",
        "--body",
        &file,
        "--checksum-algorithm",
        "SHA256",
    ]));
    let head = run_ok(&mut api(&["head-object", "--bucket", "cli", "--key", "sha.txt", "--checksum-mode", "ENABLED"]));
    assert!(head.contains(sha256), "SHA256 not answered: {head}");
    aws_refused(
        &mut api(&[
            "put-object",
            "--bucket",
            "cli",
            "--key",
            "bad.txt",
            "--body",
            &file,
            "--checksum-sha256",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ]),
        "BadDigest",
    );
    aws_refused(&mut api(&["head-object", "--bucket", "cli", "--key", "bad.txt"]), "404");

    // UploadPartCopy: a range of one object and all of another make a new one.
    let big = content(5, 6 << 20);
    std::fs::write(home.path().join("big.bin"), &big).expect("write big");
    let big_path = home.path().join("big.bin").to_string_lossy().into_owned();
    run_ok(&mut api(&["put-object", "--bucket", "cli", "--key", "big.bin", "--body", &big_path]));
    let id = run_ok(&mut api(&[
        "create-multipart-upload",
        "--bucket",
        "cli",
        "--key",
        "joined.bin",
        "--query",
        "UploadId",
        "--output",
        "text",
    ]));
    let id = id.trim();
    let e1 = run_ok(&mut api(&[
        "upload-part-copy",
        "--bucket",
        "cli",
        "--key",
        "joined.bin",
        "--upload-id",
        id,
        "--part-number",
        "1",
        "--copy-source",
        "cli/big.bin",
        "--copy-source-range",
        "bytes=0-5242879",
        "--query",
        "CopyPartResult.ETag",
        "--output",
        "text",
    ]));
    let e2 = run_ok(&mut api(&[
        "upload-part-copy",
        "--bucket",
        "cli",
        "--key",
        "joined.bin",
        "--upload-id",
        id,
        "--part-number",
        "2",
        "--copy-source",
        "cli/crc.txt",
        "--query",
        "CopyPartResult.ETag",
        "--output",
        "text",
    ]));
    let parts =
        format!(r#"{{"Parts":[{{"PartNumber":1,"ETag":{}}},{{"PartNumber":2,"ETag":{}}}]}}"#, e1.trim(), e2.trim());
    run_ok(&mut api(&[
        "complete-multipart-upload",
        "--bucket",
        "cli",
        "--key",
        "joined.bin",
        "--upload-id",
        id,
        "--multipart-upload",
        &parts,
    ]));
    let back = home.path().join("joined.back");
    run_ok(aws(&gw, home.path()).args(["s3", "cp", "s3://cli/joined.bin"]).arg(&back));
    let mut want = big[..5 << 20].to_vec();
    want.extend_from_slice(b"hello world");
    assert!(std::fs::read(&back).expect("read back") == want, "the object made of copied parts differs");
}

#[test]
fn rclone_sync_then_check() {
    need("rclone");
    let cluster = TestCluster::start(6, "4+2");
    let gw = Gateway::s3(&cluster, "s3-rclone", &[]);
    let dir = tempfile::tempdir().expect("dir");
    let local = dir.path().join("src");
    let mut tree = sample_tree(20);
    // Above the cutoff below: uploaded in 5 MiB parts (the upload then uses 1 MiB chunks).
    tree.push(("multi/part.bin".into(), content(21, (12 << 20) + 5)));
    write_tree(&local, &tree);
    let rclone = |args: &[&str]| {
        let mut cmd = Command::new("rclone");
        // A CA bundle from the environment makes rclone refuse plain-HTTP endpoints.
        cmd.env_remove("AWS_CA_BUNDLE")
            .env("RCLONE_CONFIG", dir.path().join("rclone.conf"))
            .env("RCLONE_CONFIG_TROVE_TYPE", "s3")
            .env("RCLONE_CONFIG_TROVE_PROVIDER", "Other")
            .env("RCLONE_CONFIG_TROVE_ACCESS_KEY_ID", ACCESS_KEY)
            .env("RCLONE_CONFIG_TROVE_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("RCLONE_CONFIG_TROVE_ENDPOINT", gw.url())
            .env("RCLONE_CONFIG_TROVE_REGION", "us-east-1")
            .args(["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", "--retries", "1", "--low-level-retries", "1"])
            .args(args);
        cmd
    };
    let src = local.to_string_lossy().into_owned();
    run_ok(&mut rclone(&["mkdir", "trove:rcl"]));
    run_ok(&mut rclone(&["sync", &src, "trove:rcl/data"]));
    // check compares sizes and MD5s (for the multipart object, the MD5 rclone keeps in metadata).
    run_ok(&mut rclone(&["check", &src, "trove:rcl/data"]));
    // A change on one side is noticed, and a second sync repairs it.
    std::fs::write(local.join("a/file 1+x.bin"), b"changed").expect("change a file");
    let check = run(&mut rclone(&["check", &src, "trove:rcl/data"]));
    assert!(!check.status.success(), "rclone check missed a changed file");
    run_ok(&mut rclone(&["sync", &src, "trove:rcl/data"]));
    run_ok(&mut rclone(&["check", "--download", &src, "trove:rcl/data"]));
    let back = dir.path().join("back");
    run_ok(&mut rclone(&["copy", "trove:rcl/data", &back.to_string_lossy()]));
    assert_eq!(read_tree(&back), read_tree(&local));
}

#[test]
fn s3cmd_put_get_ls_del() {
    need("s3cmd");
    let cluster = TestCluster::start(6, "4+2");
    // This gateway takes its keys from a config file.
    let gw = Gateway::s3_config(
        &cluster,
        "s3-s3cmd",
        &format!("region = \"us-east-1\"\nanonymous = \"off\"\n[[keys]]\naccess_key = \"other\"\nsecret_key = \"other-secret\"\n[[keys]]\naccess_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n"),
    );
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("s3cfg");
    std::fs::write(
        &cfg,
        format!(
            "[default]\naccess_key = {ACCESS_KEY}\nsecret_key = {SECRET_KEY}\nhost_base = {a}\nhost_bucket = {a}\nuse_https = False\n\
             signature_v2 = False\nbucket_location = us-east-1\ncheck_ssl_certificate = False\n",
            a = gw.addr
        ),
    )
    .expect("s3cfg");
    let s3cmd = |args: &[&str]| {
        let mut cmd = Command::new("s3cmd");
        cmd.arg("-c").arg(&cfg).args(args);
        cmd
    };
    let small = dir.path().join("small.txt");
    std::fs::write(&small, b"hello from s3cmd").expect("write");
    let big = dir.path().join("big.bin");
    let big_data = content(31, (11 << 20) + 7);
    std::fs::write(&big, &big_data).expect("write");
    run_ok(&mut s3cmd(&["mb", "s3://s3cmd-bkt"]));
    run_ok(&mut s3cmd(&["put", &small.to_string_lossy(), "s3://s3cmd-bkt/docs/small.txt"]));
    // 11 MiB in 5 MiB parts.
    run_ok(&mut s3cmd(&["put", "--multipart-chunk-size-mb=5", &big.to_string_lossy(), "s3://s3cmd-bkt/big.bin"]));
    let ls = run_ok(&mut s3cmd(&["ls", "-r", "s3://s3cmd-bkt"]));
    assert!(ls.contains("s3://s3cmd-bkt/docs/small.txt") && ls.contains("s3://s3cmd-bkt/big.bin"), "{ls}");
    let info = run_ok(&mut s3cmd(&["info", "s3://s3cmd-bkt/docs/small.txt"]));
    assert!(info.contains("16") || info.contains("File size"), "{info}");
    let got = dir.path().join("got.bin");
    run_ok(&mut s3cmd(&["get", "--force", "s3://s3cmd-bkt/big.bin", &got.to_string_lossy()]));
    assert!(std::fs::read(&got).expect("read") == big_data, "s3cmd get returned other bytes");
    let got_small = dir.path().join("got.txt");
    run_ok(&mut s3cmd(&["get", "--force", "s3://s3cmd-bkt/docs/small.txt", &got_small.to_string_lossy()]));
    assert_eq!(std::fs::read(&got_small).expect("read"), b"hello from s3cmd");
    run_ok(&mut s3cmd(&["del", "s3://s3cmd-bkt/docs/small.txt", "s3://s3cmd-bkt/big.bin"]));
    let ls = run_ok(&mut s3cmd(&["ls", "-r", "s3://s3cmd-bkt"]));
    assert!(ls.trim().is_empty(), "{ls}");
    run_ok(&mut s3cmd(&["rb", "s3://s3cmd-bkt"]));
}

#[test]
fn objects_and_files_are_one_namespace() {
    need("aws");
    need("nfs-cat");
    let cluster = TestCluster::start(6, "4+2");
    let gw = Gateway::s3(&cluster, "s3-cross", &[]);
    let home = tempfile::tempdir().expect("home");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(cluster.client());

    // PUT through S3 (a single PUT and a multipart one).
    let small = content(41, (3 << 20) + 11);
    let large = content(42, 40 << 20);
    std::fs::write(home.path().join("small"), &small).expect("write");
    std::fs::write(home.path().join("large"), &large).expect("write");
    run_ok(aws(&gw, home.path()).args(["s3", "mb", "s3://shared"]));
    run_ok(aws(&gw, home.path()).args(["s3", "cp"]).arg(home.path().join("small")).arg("s3://shared/in/small.bin"));
    run_ok(
        aws(&gw, home.path())
            .args(["s3", "cp", "--metadata", "team=vision"])
            .arg(home.path().join("large"))
            .arg("s3://shared/in/large.bin"),
    );

    // ... read through the native client: same bytes and sizes, the S3 metadata as xattrs.
    rt.block_on(async {
        for (path, want) in [("/shared/in/small.bin", &small), ("/shared/in/large.bin", &large)] {
            let attr = client.resolve(path).await.expect("resolve");
            assert_eq!(attr.size, want.len() as u64, "{path}");
            assert!(client.read_file(path).await.expect("read") == *want, "{path} differs");
        }
        let large_attr = client.resolve("/shared/in/large.bin").await.expect("resolve");
        assert_eq!(client.getxattr(large_attr.ino, "user.s3.meta.team").await.expect("xattr"), b"vision");
    });

    // ... and through NFS.
    let nfs = Gateway::nfs(&cluster, "nfs-cross", "/", &[]);
    let url = |p: &str| format!("nfs://127.0.0.1{p}?nfsport={0}&mountport={0}&version=3", nfs.port());
    let out = run(Command::new("nfs-cat").arg(url("/shared/in/large.bin")));
    assert!(out.status.success(), "nfs-cat failed: {}\n{}", String::from_utf8_lossy(&out.stderr), nfs.log_text());
    assert!(out.stdout == large, "NFS reads other bytes ({} of {})", out.stdout.len(), large.len());

    // Write through the native client and through NFS; GET through S3.
    let native = content(43, (5 << 20) + 99);
    rt.block_on(async {
        client.mkdir_p("/shared/out").await.expect("mkdir");
        client.write_file("/shared/out/native.bin", &native).await.expect("write")
    });
    let via_nfs = content(44, (2 << 20) + 5);
    std::fs::write(home.path().join("nfs-src"), &via_nfs).expect("write");
    run_ok(Command::new("nfs-cp").arg(home.path().join("nfs-src")).arg(url("/shared/out/via-nfs.bin")));
    for (key, want) in [("out/native.bin", &native), ("out/via-nfs.bin", &via_nfs)] {
        let dest = home.path().join(key.replace('/', "_"));
        run_ok(aws(&gw, home.path()).args(["s3", "cp", &format!("s3://shared/{key}")]).arg(&dest));
        assert!(std::fs::read(&dest).expect("read") == *want, "S3 GET of {key} differs");
    }
    let ls = run_ok(aws(&gw, home.path()).args(["s3", "ls", "--recursive", "s3://shared/out/"]));
    assert!(
        ls.contains(&format!("{} out/native.bin", native.len()))
            && ls.contains(&format!("{} out/via-nfs.bin", via_nfs.len())),
        "{ls}"
    );

    // Through the FUSE mount too (crates/mount), where FUSE works on this machine.
    if Path::new("/dev/fuse").exists() {
        let mnt = tempfile::Builder::new().prefix("trove-s3-mnt-").tempdir().expect("mount point");
        let mut mount = common::trove()
            .args(["mount", &cluster.dir_str()])
            .arg(mnt.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("trove mount starts");
        let file = mnt.path().join("shared/in/large.bin");
        let started = std::time::Instant::now();
        while !file.exists() && started.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let read = std::fs::read(&file);
        let wrote = std::fs::write(mnt.path().join("shared/out/via-mount.bin"), &small);
        let _ = run(common::trove().args(["umount"]).arg(mnt.path()));
        let _ = mount.kill();
        let _ = mount.wait();
        assert!(read.expect("read through the mount") == large, "the mount reads other bytes");
        wrote.expect("write through the mount");
        let dest = home.path().join("via-mount.back");
        run_ok(aws(&gw, home.path()).args(["s3", "cp", "s3://shared/out/via-mount.bin"]).arg(&dest));
        assert!(std::fs::read(&dest).expect("read") == small, "S3 GET of a file written through the mount differs");
    } else {
        eprintln!("NOTE: /dev/fuse is absent; the mount part of this test did not run");
    }
}
