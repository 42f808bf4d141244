//! Tenants, users and S3 keys on a real cluster, through the real binary: `trove tenant`,
//! `trove user` and `trove s3-key` (admin only), an S3 gateway checking the cluster's keys
//! with its gateway credential, boto3 trying every way across tenants it can (guessed keys
//! and buckets, HEAD, LIST, copies, presigned URLs, multipart listings and upload ids: all
//! refused, nothing of the other tenant's seen) and inside one (POSIX modes set by canned
//! ACLs decide), the same files judged the same way through a FUSE mount by processes running
//! as the users' uids, and a removed key refused on the gateway within its cache time.
//!
//! Every program is required (scripts/deps.sh installs them); a missing one fails the test.

mod common;
mod gw;
mod mnt;

use common::{run, run_ok, TestCluster};
use gw::{need, python, Gateway};
use mnt::{fuse_missing, Mount};
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// `trove s3-key create --user USER --json`: "ACCESS:SECRET".
fn make_key(cluster: &TestCluster, user: &str) -> (String, String) {
    let out = run_ok(&["s3-key", "create", "--user", user, "--json", "--cluster", &cluster.dir_str()]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("s3-key create is JSON ({e}): {out}"));
    let access = v["access_key"].as_str().expect("access_key").to_string();
    let secret = v["secret_key"].as_str().expect("secret_key").to_string();
    (access, secret)
}

/// Runs `argv` as uid:gid with no supplementary groups but `groups` (setpriv); returns
/// (success, output).
fn as_user(uid: u32, gid: u32, groups: &str, argv: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([format!("--reuid={uid}"), format!("--regid={gid}")])
        .args(if groups.is_empty() { vec!["--clear-groups".to_string()] } else { vec![format!("--groups={groups}")] })
        .args(argv)
        .output()
        .expect("setpriv runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Runs the boto3 expression `call` (on client `s3`) with `key`: Ok(what it prints) or
/// Err(error code and message).
fn boto3(gw: &Gateway, key: &(String, String), call: &str) -> Result<String, String> {
    let out = python(gw)
        .env("AWS_ACCESS_KEY_ID", &key.0)
        .env("AWS_SECRET_ACCESS_KEY", &key.1)
        .arg("-c")
        .arg(format!(
            "import os,boto3,sys\n\
             from botocore.config import Config\n\
             from botocore.exceptions import ClientError\n\
             s3=boto3.client('s3',endpoint_url=os.environ['S3_ENDPOINT'],config=Config(retries={{'max_attempts':1}}))\n\
             try:\n  print({call})\n\
             except ClientError as e:\n  print(e.response['Error']['Code'], e.response['Error'].get('Message'));sys.exit(3)\n"
        ))
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match out.status.code() {
        Some(0) => Ok(text),
        Some(3) => Err(text),
        _ => panic!("python failed: {text} {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// The bucket names ListBuckets answers `key` with.
fn list_buckets(gw: &Gateway, key: &(String, String)) -> Result<String, String> {
    boto3(gw, key, "' '.join(b['Name'] for b in s3.list_buckets()['Buckets'])")
}

#[test]
fn tenants_are_separate_namespaces_on_every_protocol_and_users_are_judged_by_posix_modes() {
    need("python3");
    need("setpriv");
    need("curl");
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start(3, "2+1");
    let dir = cluster.dir_str();
    let c = ["--cluster", dir.as_str()];

    // Administration needs the admin credential.
    let client_cred = cluster.path().join("tls").join("client");
    let out = run(&[
        "--credentials",
        client_cred.to_str().expect("path"),
        "tenant",
        "create",
        "evil",
        "--gid",
        "9",
        "--cluster",
        &dir,
    ]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("needs the admin credential"), "{text}");
    assert!(
        run(&["ls", "/tenants/evil", "--cluster", &dir]).status.code() != Some(0),
        "a refused tenant leaves no directory"
    );

    let made = run_ok(&["tenant", "create", "acme", "--gid", "5001", "--quota-bytes", "64M", c[0], c[1]]);
    assert!(made.contains("/tenants/acme"), "{made}");
    run_ok(&["tenant", "create", "globex", "--gid", "5002", "--quota-bytes", "1M", c[0], c[1]]);
    // A second tenant on the same group is refused, and leaves no directory behind.
    let out = run(&["tenant", "create", "initech", "--gid", "5001", c[0], c[1]]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("group 5001 is tenant \"acme\"'s"), "{text}");
    let listed = run_ok(&["ls", "/tenants", c[0], c[1]]);
    assert!(!listed.contains("initech"), "{listed}");
    run_ok(&["user", "add", "alice", "--uid", "6001", "--tenant", "acme", c[0], c[1]]);
    run_ok(&["user", "add", "bob", "--uid", "6002", "--gid", "6002", "--tenant", "acme", c[0], c[1]]);
    run_ok(&["user", "add", "carol", "--uid", "6101", "--tenant", "globex", c[0], c[1]]);
    let users = run_ok(&["user", "list", c[0], c[1]]);
    assert!(
        users.contains("user bob: uid 6002 gid 6002 groups [5001] tenant acme"),
        "bob is put in acme's group: {users}"
    );
    let (alice, bob, carol) = (make_key(&cluster, "alice"), make_key(&cluster, "bob"), make_key(&cluster, "carol"));
    let keys = run_ok(&["s3-key", "list", c[0], c[1]]);
    assert!(keys.contains(&alice.0) && !keys.contains(&alice.1), "keys are listed without secrets: {keys}");
    let out = run(&["user", "remove", "alice", c[0], c[1]]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("still holds S3 keys"), "a user with keys stays");

    // A gateway holding only a client credential cannot check the cluster's keys, and says so.
    let weak = Gateway::s3(&cluster, "s3-client-cred", &[]);
    let why = list_buckets(&weak, &alice).expect_err("refused");
    assert!(why.starts_with("InvalidAccessKeyId") && why.contains("needs a gateway credential"), "{why}");
    drop(weak);

    let gateway_cred = cluster.path().join("tls").join("gateway");
    let gw = Gateway::s3_with_credential(&cluster, "s3-tenants", &gateway_cred, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3/tenants_check.py");
    let out = python(&gw)
        .env("ALICE", format!("{}:{}", alice.0, alice.1))
        .env("BOB", format!("{}:{}", bob.0, bob.1))
        .env("CAROL", format!("{}:{}", carol.0, carol.1))
        .arg(script)
        .output()
        .expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.starts_with("ok"), "tenants_check.py: {text}\ngateway log: {}", gw.log_text());
    println!("{text}");
    // The configured key keeps the gateway's own view: the root namespace, tenants' directories
    // included, as before tenants existed.
    let root_view = list_buckets(&gw, &(gw::ACCESS_KEY.to_string(), gw::SECRET_KEY.to_string())).expect("config key");
    assert!(root_view.split(' ').any(|b| b == "tenants"), "{root_view}");

    // Unsigned requests on a gateway with anonymous read access act as nobody: they read what
    // others may read in the root namespace, and never enter a tenant.
    // (This gateway is given the cluster's directory and finds its gateway credential there.)
    let open = Gateway::s3_on_dir(&cluster, "s3-anonymous", &["--anonymous", "read"]);
    assert_eq!(list_buckets(&open, &carol).as_deref(), Ok("data"), "cluster keys work on a gateway of a directory");
    // The tenant's quota holds its users' S3 writes.
    let big = "s3.put_object(Bucket='data', Key='big', Body=b'x' * (2 << 20))";
    let why = boto3(&open, &carol, big).expect_err("over globex's 1 MiB quota");
    assert!(why.starts_with("QuotaExceeded"), "{why}");
    run_ok(&["mkdir", "/public", c[0], c[1]]);
    let readme = cluster.path().join("readme.txt");
    std::fs::write(&readme, b"for everyone").expect("write");
    run_ok(&["put", readme.to_str().expect("path"), "/public/readme.txt", c[0], c[1]]);
    let curl = |url: String| {
        let out = Command::new("curl").args(["-s", "-w", "\n%{http_code}", &url]).output().expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let public = curl(format!("{}/public/readme.txt", open.url()));
    assert!(public.starts_with("for everyone") && public.ends_with("200"), "{public}");
    for path in ["tenants/acme/data/a/x.bin", "tenants/acme/acme-only/k"] {
        let answer = curl(format!("{}/{path}", open.url()));
        assert!(
            answer.ends_with("403") && answer.contains("AccessDenied") && !answer.contains("acme's secret"),
            "{path}: {answer}"
        );
    }
    let listing = curl(format!("{}/tenants?list-type=2&prefix=acme/", open.url()));
    assert!(!listing.contains("x.bin") && !listing.contains("acme-only"), "{listing}");
    drop(open);

    // The same files through a FUSE mount, judged by the kernel as the users' uids.
    let mount = Mount::start(&cluster, "tenants", &[]);
    let obj = mount.join("tenants/acme/data/a/x.bin");
    let meta = std::fs::metadata(&obj).expect("alice's object is in acme's directory");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (6001, 5001, 0o644),
        "owned by alice (primary group: the tenant's), as S3 wrote it"
    );
    let completed = std::fs::metadata(mount.join("tenants/acme/data/big.bin")).expect("the multipart object");
    assert_eq!((completed.uid(), completed.len()), (6001, 1000), "a completed upload is its initiator's");
    let tenant = std::fs::metadata(mount.join("tenants/acme")).expect("tenant dir");
    assert_eq!((tenant.uid(), tenant.gid(), tenant.mode() & 0o7777), (0, 5001, 0o1770));
    let acme_only = std::fs::metadata(mount.join("tenants/acme/acme-only")).expect("bucket");
    assert_eq!(acme_only.mode() & 0o777, 0o700, "a bucket made without an ACL is private");
    let path = obj.to_str().expect("path");
    // carol (globex) cannot enter acme at all; bob (acme's group) reads the public-read
    // bucket's object, but not alice's private one; alice reads both.
    let (ok, why) = as_user(6101, 6101, "5002", &["cat", path]);
    assert!(!ok && why.contains("Permission denied"), "carol through the mount: {why}");
    let (ok, why) = as_user(6101, 6101, "5002", &["ls", mount.join("tenants/acme").to_str().expect("path")]);
    assert!(!ok && why.contains("Permission denied"), "carol lists acme: {why}");
    let (ok, why) = as_user(6101, 6101, "5002", &["ls", mount.join("tenants").to_str().expect("path")]);
    assert!(!ok && why.contains("Permission denied"), "carol lists the tenants: {why}");
    let listed = std::fs::metadata(mount.join("tenants")).expect("tenants");
    assert_eq!(listed.mode() & 0o777, 0o711);
    let (ok, text) = as_user(6002, 6002, "5001", &["cat", path]);
    assert!(ok && text.starts_with("acme's secret bytes"), "bob through the mount: {text}");
    let diary = mount.join("tenants/acme/data/diary.txt");
    let (ok, why) = as_user(6002, 6002, "5001", &["cat", diary.to_str().expect("path")]);
    assert!(!ok && why.contains("Permission denied"), "bob reads alice's private object: {why}");
    let (ok, text) = as_user(6001, 6001, "5001", &["cat", diary.to_str().expect("path")]);
    assert!(ok && text == "private", "alice reads her own: {text}");
    // A file alice writes through the mount is hers on S3 too: its mode decides bob's S3 view.
    let written = mount.join("tenants/acme/data/m.txt");
    let (ok, why) =
        as_user(6001, 6001, "5001", &["sh", "-c", &format!("umask 077; echo mounted > {}", written.display())]);
    assert!(ok, "alice writes through the mount: {why}");
    mount.stop();
    let get = "s3.get_object(Bucket='data', Key='m.txt')['Body'].read().decode()";
    assert_eq!(boto3(&gw, &alice, get).as_deref(), Ok("mounted"));
    let why = boto3(&gw, &bob, get).expect_err("bob is refused a 0600 file");
    assert!(why.starts_with("AccessDenied"), "{why}");

    // Removing a key refuses it on the gateway within the key cache's time (10 s).
    run_ok(&["s3-key", "remove", &carol.0, c[0], c[1]]);
    let started = Instant::now();
    loop {
        match list_buckets(&gw, &carol) {
            Err(why) if why.starts_with("InvalidAccessKeyId") => break,
            other => {
                assert!(started.elapsed() < Duration::from_secs(15), "carol's removed key still works: {other:?}");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    assert!(list_buckets(&gw, &alice).is_ok(), "other keys keep working");

    // Every change is in the audit trail.
    let events = run_ok(&["events", c[0], c[1]]);
    for what in ["add tenant acme (group 5001, /tenants/acme)", "add user carol (uid 6101", "remove S3 key"] {
        assert!(events.contains(what), "no event {what:?} in:\n{events}");
    }
    assert!(!events.contains(&alice.1), "no secret in the event log");
}
