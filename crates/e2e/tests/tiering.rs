//! Tiering by file pool policies on a real local cluster (a `flash` pool and an `hdd` pool of
//! other nodes, 4+2 each): the tier job, run by its schedule and by hand, moves files whose
//! last access is older than the policy's age to `hdd`, `stat --layout` shows every chunk
//! there, the files read bit-exact through the mount during the moves and through the mount,
//! the S3 and NFS gateways and `trove get` after them, and files read again (their atime moved
//! by the read, batched by the client) go back to `flash` at the next run. Pausing keeps the
//! job's place, resuming goes on from it, a storage node killed during a move loses nothing, and a metadata server
//! restarted mid-run resumes the run from its record's cursor. With an object pool on a real S3
//! server that is not Trove (Garage), files age from flash to hdd to the bucket; one read
//! without moving its atime stays in the bucket and is served from it, one read through S3 and
//! NFS is recalled to flash by the next run.

mod common;
mod garage;
mod gw;
mod mnt;

use common::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// `trove job status --json`, the job named `name`.
fn job(c: &str, name: &str) -> serde_json::Value {
    let all: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", c, "job", "status", "--json"])).expect("JSON");
    all.as_array().expect("jobs").iter().find(|j| j["name"] == name).cloned().expect("the job is listed")
}

/// Waits until job `name`'s run `run` (or a later one) is done; returns its record.
fn wait_done(cluster: &TestCluster, name: &str, run: u64, within: Duration) -> serde_json::Value {
    let c = cluster.dir_str();
    let deadline = Instant::now() + within;
    loop {
        let j = job(&c, name);
        if j["run"].as_u64().unwrap_or(0) >= run && j["state"] == "done" {
            return j;
        }
        assert!(j["state"] != "failed", "job {name} failed: {j:#}");
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(cluster.path().join("logs").join("meta.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "job {name} run {run} not done in {within:?}: {j:#}\nmeta log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pools of the chunks of `path`, and the file's own pool, from `stat --layout`.
fn pools_of(c: &str, path: &str) -> (BTreeSet<String>, String) {
    let v: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", c, "stat", "--layout", "--json", path])).expect("JSON");
    let chunks =
        v["chunks"].as_array().expect("chunks").iter().map(|c| c["pool"].as_str().unwrap_or("?").to_string()).collect();
    (chunks, v["pool"].as_str().unwrap_or("?").to_string())
}

fn in_pool(c: &str, path: &str, pool: &str) -> bool {
    let (chunks, file) = pools_of(c, path);
    chunks.iter().all(|p| p == pool) && file == pool
}

fn get_matches(c: &str, remote: &str, data: &[u8], scratch: &std::path::Path) {
    let out = scratch.join(format!("got-{}", remote.replace('/', "_")));
    run_ok(&["--cluster", c, "get", remote, out.to_str().expect("utf-8")]);
    assert!(
        std::fs::read(&out).expect("read back") == data,
        "{remote} read through trove get differs from what was written"
    );
}

/// The policies of these tests: files under /data not read for `age` go to hdd; everything
/// else (and a file read again) belongs in flash.
/// `path` read through an NFS gateway exporting the root, with libnfs's `nfs-cat`.
fn nfs_cat(cluster: &TestCluster, path: &str) -> Vec<u8> {
    gw::need("nfs-cat");
    let nfs = gw::Gateway::nfs(cluster, "nfs-tier", "/", &[]);
    let url = format!("nfs://127.0.0.1{path}?nfsport={0}&mountport={0}&version=3", nfs.port());
    let out = gw::run(std::process::Command::new("nfs-cat").arg(&url));
    assert!(out.status.success(), "nfs-cat {url}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn add_policies(c: &str, age: &str) {
    run_ok(&["--cluster", c, "policy", "add", "cold", "--pool", "hdd", "--path", "/data/**", "--accessed-before", age]);
    run_ok(&["--cluster", c, "policy", "add", "hot", "--pool", "flash"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_job_moves_files_by_last_access_and_back_when_they_are_read() {
    assert!(!mnt::fuse_missing(), "this test needs FUSE (/dev/fuse and fusermount3): run scripts/deps.sh");
    gw::need("aws");
    let cluster = TestCluster::start_with(
        0,
        "4+2",
        &[
            "--pool",
            "flash=6",
            "--pool",
            "hdd=6",
            "--tier-schedule",
            "every 3s",
            "--tier-bytes-per-s",
            "16777216",
            "--gc-grace-ms",
            "2000",
        ],
    );
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");
    let big = content(1, (40 << 20) + 5);
    let small = content(2, 1000);
    let other = content(3, (5 << 20) + 1);
    for (name, data) in [("big", &big), ("small", &small), ("other", &other)] {
        std::fs::write(scratch.path().join(name), data).expect("write");
    }
    run_ok(&["--cluster", &c, "mkdir", "/data"]);
    run_ok(&["--cluster", &c, "mkdir", "/other"]);
    let local = |n: &str| scratch.path().join(n).to_str().expect("utf-8").to_string();
    run_ok(&["--cluster", &c, "put", &local("big"), "/data/big.bin"]);
    run_ok(&["--cluster", &c, "put", &local("small"), "/data/small.bin"]);
    run_ok(&["--cluster", &c, "put", &local("other"), "/other/o.bin"]);
    for path in ["/data/big.bin", "/data/small.bin", "/other/o.bin"] {
        assert!(in_pool(&c, path, "flash"), "{path} starts in flash: {:?}", pools_of(&c, path));
    }
    // The lease holder records the schedule once it leads.
    let deadline = Instant::now() + Duration::from_secs(20);
    while job(&c, "tier")["schedule"] != "every 3 s" {
        assert!(Instant::now() < deadline, "the schedule is not shown: {:#}", job(&c, "tier"));
        std::thread::sleep(Duration::from_millis(200));
    }

    // A mount that leaves atimes alone reads the files while they move (an ordinary read
    // would move their atime, and the next run would bring them back).
    let quiet = mnt::Mount::start(&cluster, "noatime", &["--noatime", "--direct-io"]);
    add_policies(&c, "20s");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut during = 0;
    let moved = loop {
        let j = job(&c, "tier");
        let got = std::fs::read(quiet.join("data/big.bin")).expect("read through the mount");
        assert!(got == big, "/data/big.bin read through the mount while the tier job runs");
        let (chunks, _) = pools_of(&c, "/data/big.bin");
        if chunks.contains("hdd") && chunks.contains("flash") {
            during += 1;
        }
        if in_pool(&c, "/data/big.bin", "hdd") && in_pool(&c, "/data/small.bin", "hdd") && j["state"] == "done" {
            break j;
        }
        assert!(Instant::now() < deadline, "/data did not move to hdd: {:?}; job {j:#}", pools_of(&c, "/data/big.bin"));
        std::thread::sleep(Duration::from_millis(100));
    };
    // The schedule ran it; a file under /other is no business of the cold policy.
    assert_eq!(moved["trigger"], "schedule", "{moved:#}");
    assert!(
        moved["files_moved"].as_u64().unwrap_or(0) >= 2
            && moved["bytes_moved"].as_u64().unwrap_or(0) >= big.len() as u64,
        "{moved:#}"
    );
    assert!(in_pool(&c, "/other/o.bin", "flash"), "/other/o.bin stays in flash: {:?}", pools_of(&c, "/other/o.bin"));
    assert!(during >= 1, "no read saw /data/big.bin half moved (the move took too little time to be read during it)");

    // Bit-exact from hdd through the mount, S3 and trove get; those reads move the atimes
    // (batched by each client), and the next scheduled run brings the files back to flash.
    let client = cluster.client().await;
    let atime_before = client.resolve("/data/big.bin").await.expect("resolve").atime;
    assert!(std::fs::read(quiet.join("data/big.bin")).expect("mount read") == big, "/data/big.bin from hdd");
    let gateway = gw::Gateway::s3(&cluster, "s3-tier", &[]);
    let home = tempfile::tempdir().expect("aws home");
    let s3_out = scratch.path().join("s3-big");
    gw::run_ok(gw::aws(&gateway, home.path()).args(["s3", "cp", "s3://data/big.bin"]).arg(&s3_out));
    assert!(std::fs::read(&s3_out).expect("s3 copy") == big, "/data/big.bin through S3, from hdd");
    assert!(nfs_cat(&cluster, "/data/big.bin") == big, "/data/big.bin through NFS, from hdd");
    let reading = mnt::Mount::start(&cluster, "atime", &[]);
    assert!(std::fs::read(reading.join("data/small.bin")).expect("mount read") == small, "/data/small.bin from hdd");
    std::thread::sleep(client::ATIME_FLUSH_INTERVAL + Duration::from_millis(700));
    let atime_after = client.resolve("/data/big.bin").await.expect("resolve").atime;
    assert!(atime_after > atime_before, "reading through S3 moved the atime ({atime_before:?} -> {atime_after:?})");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(in_pool(&c, "/data/big.bin", "flash") && in_pool(&c, "/data/small.bin", "flash")) {
        assert!(
            Instant::now() < deadline,
            "the files read did not go back to flash: {:?} {:?}; job {:#}",
            pools_of(&c, "/data/big.bin"),
            pools_of(&c, "/data/small.bin"),
            job(&c, "tier")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(std::fs::read(quiet.join("data/big.bin")).expect("mount read") == big, "/data/big.bin back in flash");
    get_matches(&c, "/data/small.bin", &small, scratch.path());

    // Moved chunks' old shards go with the GC; everything is back in flash.
    let status = cluster
        .wait_status(Duration::from_secs(60), "old copies deleted", |s| s["bytes_pending_delete"].as_u64() == Some(0));
    let chunks: Vec<u64> =
        status["pools"].as_array().expect("pools").iter().map(|p| p["chunks"].as_u64().unwrap_or(0)).collect();
    assert_eq!(chunks, vec![0, 11 + 1 + 2, 0], "chunks per pool (default, flash, hdd)");
    drop(gateway);
    reading.stop();
    quiet.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_run_pauses_resumes_survives_a_node_loss_and_a_metadata_restart() {
    let cluster = TestCluster::start_with(
        0,
        "4+2",
        &["--pool", "flash=6", "--pool", "hdd=7", "--tier-schedule", "off", "--tier-bytes-per-s", "4194304"],
    );
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");
    run_ok(&["--cluster", &c, "mkdir", "/data"]);
    let files: Vec<(String, Vec<u8>)> =
        (0..12).map(|i| (format!("/data/f{i:02}.bin"), content(10 + i, (3 << 20) + i as usize))).collect();
    for (path, data) in &files {
        let local = scratch.path().join("f");
        std::fs::write(&local, data).expect("write");
        run_ok(&["--cluster", &c, "put", local.to_str().expect("utf-8"), path]);
    }
    add_policies(&c, "1s");
    std::thread::sleep(Duration::from_secs(2));

    // Scheduled runs are off: only the operator starts one. Bad actions say why.
    let tier = job(&c, "tier");
    assert_eq!((tier["schedule"].as_str(), tier["state"].as_str()), (Some("off"), Some("idle")), "{tier:#}");
    let out = run(&["--cluster", &c, "job", "pause", "tier"]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("only a running job can be paused"),
        "{out:?}"
    );
    let out = run(&["--cluster", &c, "job", "start", "nosuch"]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("the jobs are tier, repair, scrub"),
        "{out:?}"
    );
    run_ok(&["--cluster", &c, "job", "start", "tier"]);

    // At 4 MiB/s, 36 MiB of data (54 MiB with parity) takes many seconds: pause after a few
    // files, check it stands still, resume.
    let deadline = Instant::now() + Duration::from_secs(60);
    while job(&c, "tier")["files_moved"].as_u64().unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "no progress: {:#}", job(&c, "tier"));
        std::thread::sleep(Duration::from_millis(200));
    }
    run_ok(&["--cluster", &c, "job", "pause", "tier"]);
    std::thread::sleep(Duration::from_secs(3));
    let paused = job(&c, "tier");
    assert_eq!(paused["state"], "paused", "{paused:#}");
    std::thread::sleep(Duration::from_secs(3));
    let still = job(&c, "tier");
    assert_eq!(still["files_moved"], paused["files_moved"], "a paused job moves nothing");
    assert!(!still["cursor"].as_str().unwrap_or("").is_empty(), "the job keeps its place: {still:#}");
    let text = run_ok(&["--cluster", &c, "job", "status"]);
    assert!(text.contains("tier: paused") && text.contains("files moved") && text.contains("ETA"), "{text}");
    run_ok(&["--cluster", &c, "job", "resume", "tier"]);

    // A storage node of hdd dies during the move: the run goes on (narrower chunks where it
    // must), nothing is lost.
    std::thread::sleep(Duration::from_secs(1));
    cluster.kill_node(13);
    // The metadata server restarts mid-run: the run resumes from its cursor.
    let before_restart = job(&c, "tier");
    run_ok(&["cluster", "restart-meta", "--dir", &c]);
    let done = wait_done(&cluster, "tier", 1, Duration::from_secs(180));
    assert_eq!(done["run"], 1, "the same run went on after the restart: {done:#}");
    let log = std::fs::read_to_string(cluster.path().join("logs").join("meta.log")).unwrap_or_default();
    assert!(
        log.contains("goes on here after"),
        "the restarted server took the run up from its cursor (before the restart: {before_restart:#}): {}",
        log.lines().filter(|l| l.contains("job tier")).collect::<Vec<_>>().join("\n")
    );
    assert!(
        done["items_seen"].as_u64().unwrap_or(0) <= files.len() as u64 + 3,
        "files before the cursor are not judged again: {done:#}"
    );
    for (path, data) in &files {
        assert!(in_pool(&c, path, "hdd"), "{path}: {:?}", pools_of(&c, path));
        get_matches(&c, path, data, scratch.path());
    }
    cluster.restart_node(13);
    for (path, data) in &files {
        get_matches(&c, path, data, scratch.path());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_age_from_flash_to_hdd_to_an_object_pool_and_are_recalled_when_read() {
    assert!(!mnt::fuse_missing(), "this test needs FUSE (/dev/fuse and fusermount3): run scripts/deps.sh");
    gw::need("aws");
    let garage = garage::Garage::start("trove-tier");
    let cluster = TestCluster::start_with(
        0,
        "2+1",
        &["--pool", "flash=3", "--pool", "hdd=3", "--tier-schedule", "every 2s", "--gc-grace-ms", "2000"],
    );
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");
    let secret = scratch.path().join("s3.secret");
    std::fs::write(&secret, format!("{}\n", garage.secret)).expect("write secret");
    for prefix in ["n1", "n2"] {
        let table = scratch.path().join(format!("{prefix}.toml"));
        std::fs::write(&table, garage.object_table(prefix, &secret)).expect("write object table");
        run_ok(&["cluster", "add-node", "--dir", &c, "--pool", "cold", "--object", table.to_str().expect("utf-8")]);
    }
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("/data/a.bin", content(21, (6 << 20) + 3)),
        ("/data/b.bin", content(22, 3 << 20)),
        ("/data/c.bin", content(23, 1000)),
    ];
    run_ok(&["--cluster", &c, "mkdir", "/data"]);
    for (path, data) in &files {
        let local = scratch.path().join("f");
        std::fs::write(&local, data).expect("write");
        run_ok(&["--cluster", &c, "put", local.to_str().expect("utf-8"), path]);
        assert!(in_pool(&c, path, "flash"), "{path} starts in flash: {:?}", pools_of(&c, path));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while job(&c, "tier")["schedule"] != "every 2 s" {
        assert!(Instant::now() < deadline, "the schedule is not shown: {:#}", job(&c, "tier"));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Not read for 5 s: hdd; for 14 s: the bucket, two copies; read again: flash.
    run_ok(&[
        "--cluster",
        &c,
        "policy",
        "add",
        "archive",
        "--pool",
        "cold",
        "--ec",
        "1+1",
        "--path",
        "/data/**",
        "--accessed-before",
        "14s",
    ]);
    run_ok(&[
        "--cluster",
        &c,
        "policy",
        "add",
        "cool",
        "--pool",
        "hdd",
        "--path",
        "/data/**",
        "--accessed-before",
        "5s",
    ]);
    run_ok(&["--cluster", &c, "policy", "add", "hot", "--pool", "flash"]);

    // Read bit-exact through a mount that leaves atimes alone, all the way to the bucket; each
    // file is seen in hdd on the way.
    let quiet = mnt::Mount::start(&cluster, "noatime", &["--noatime", "--direct-io"]);
    let mut seen_in_hdd = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut all_cold = true;
        for (path, data) in &files {
            assert!(
                std::fs::read(quiet.join(&path[1..])).expect("read through the mount") == *data,
                "{path} read while it ages"
            );
            if in_pool(&c, path, "hdd") {
                seen_in_hdd.insert(path.to_string());
            }
            all_cold &= in_pool(&c, path, "cold");
        }
        if all_cold {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not in the bucket: {:?}; job {:#}",
            files.iter().map(|(p, _)| pools_of(&c, p)).collect::<Vec<_>>(),
            job(&c, "tier")
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    assert_eq!(seen_in_hdd.len(), files.len(), "every file passed through hdd: {seen_in_hdd:?}");
    // Their shards are objects in Garage, under the two nodes' prefixes.
    let objects: Vec<(String, u64)> = ["n1/", "n2/"].iter().flat_map(|p| garage.list(p)).collect();
    for (path, _) in &files {
        let layout: serde_json::Value =
            serde_json::from_str(&run_ok(&["--cluster", &c, "stat", "--layout", "--json", path])).expect("JSON");
        for chunk in layout["chunks"].as_array().expect("chunks") {
            let id = chunk["id"].as_str().expect("chunk id");
            let n = objects.iter().filter(|(k, _)| k.contains(&format!("/shards/{id}."))).count();
            assert_eq!(n, 2, "{path}: chunk {id} has its two copies in the bucket: {chunk}");
        }
    }

    // Without recall: read through the quiet mount, b.bin stays in the bucket across runs and
    // is served from there.
    for _ in 0..3 {
        assert!(std::fs::read(quiet.join("data/b.bin")).expect("mount read") == files[1].1, "b.bin from the bucket");
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        in_pool(&c, "/data/b.bin", "cold"),
        "b.bin, read without its atime moving, stays: {:?}",
        pools_of(&c, "/data/b.bin")
    );

    // With recall: a.bin read through the S3 gateway (its atime moves) goes back to flash.
    let gateway = gw::Gateway::s3(&cluster, "s3-recall", &[]);
    let home = tempfile::tempdir().expect("aws home");
    let s3_out = scratch.path().join("s3-a");
    gw::run_ok(gw::aws(&gateway, home.path()).args(["s3", "cp", "s3://data/a.bin"]).arg(&s3_out));
    assert!(std::fs::read(&s3_out).expect("s3 copy") == files[0].1, "a.bin through S3, from the bucket");
    assert!(nfs_cat(&cluster, "/data/a.bin") == files[0].1, "a.bin through NFS, from the bucket");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !in_pool(&c, "/data/a.bin", "flash") {
        assert!(
            Instant::now() < deadline,
            "a.bin, read, was not recalled: {:?}; job {:#}",
            pools_of(&c, "/data/a.bin"),
            job(&c, "tier")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(in_pool(&c, "/data/b.bin", "cold"), "b.bin stays in the bucket: {:?}", pools_of(&c, "/data/b.bin"));
    assert!(std::fs::read(quiet.join("data/a.bin")).expect("mount read") == files[0].1, "a.bin back in flash");
    get_matches(&c, "/data/a.bin", &files[0].1, scratch.path());
    drop(gateway);
    quiet.stop();
}
