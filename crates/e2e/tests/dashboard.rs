//! The dashboard in a real browser: a local cluster with a mount and an S3 gateway under load,
//! the metadata service's dashboard opened in headless Chromium (Debian's `chromium`), its
//! rendered page read back (`--dump-dom`) and photographed (`--screenshot`) while the cluster
//! is healthy, then again with a storage node killed: the page must say what the cluster says
//! (nodes up and down, the node's `node_down` event, the health verdict). Set
//! `TROVE_DASHBOARD_SCREENSHOTS=DIR` to keep the pictures (the README's come from here).
//!
//! Also the event log through `trove events`, with the same node going down and up, and the
//! audit trail of administrative commands in it.

mod common;
mod gw;
mod mnt;

use common::*;
use gw::{need, Gateway};
use mnt::{fuse_missing, Mount};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 1900;

/// Runs headless Chromium on `url` with `what` (`--dump-dom`, or `--screenshot=FILE`), with a
/// fresh profile and nothing that reaches beyond this machine; returns its standard output.
fn chromium(url: &str, what: &str) -> String {
    need("chromium");
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // Let the page's script fetch and draw before the page is read.
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={WIDTH},{HEIGHT}"))
        .arg(what)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium {what} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Takes a screenshot of `url` into `name` (in TROVE_DASHBOARD_SCREENSHOTS or `scratch`) and
/// checks it is a PNG of the window's size.
fn screenshot(url: &str, scratch: &Path, name: &str) -> PathBuf {
    let dir =
        std::env::var_os("TROVE_DASHBOARD_SCREENSHOTS").map(PathBuf::from).unwrap_or_else(|| scratch.to_path_buf());
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    chromium(url, &format!("--screenshot={}", path.display()));
    let png = std::fs::read(&path).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().expect("IHDR"));
    let height = u32::from_be_bytes(png[20..24].try_into().expect("IHDR"));
    assert_eq!((width, height), (WIDTH, HEIGHT));
    assert!(png.len() > 50_000, "a {}-byte screenshot is too plain to show the dashboard", png.len());
    path
}

/// The rendered page, once its script has drawn it.
fn rendered(url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dom = chromium(url, "--dump-dom");
        if dom.contains("data-loaded=\"yes\"") {
            return dom;
        }
        assert!(Instant::now() < deadline, "the dashboard never drew itself:\n{dom}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Percent of the file system under `dir` in use, as `df` counts it: blocks not free to an
/// unprivileged writer over all blocks.
fn disk_used_percent(dir: &Path) -> f64 {
    let st = rustix::fs::statvfs(dir).expect("statvfs of the cluster directory");
    100.0 * st.f_blocks.saturating_sub(st.f_bavail) as f64 / st.f_blocks.max(1) as f64
}

/// The verdict on a cluster with every node up and nothing degraded: healthy, unless the disk
/// under the test's drives is itself 85% full or more (they share the host's file system), in
/// which case the one reason given must be that figure and the disk must bear it out.
fn expect_healthy(dom: &str, cluster_dir: &Path) {
    if dom.contains("<div id=\"health\" class=\"badge healthy\">healthy</div>") {
        return;
    }
    let used = disk_used_percent(cluster_dir);
    let start = dom.find("<section id=\"reasons\"").unwrap_or_else(|| panic!("no reasons given:\n{dom}"));
    let reasons = &dom[start..start + dom[start..].find("</section>").unwrap_or(dom.len() - start)];
    let only_capacity = reasons.matches("<div class=").count() == 1 && reasons.contains("% of the raw capacity used");
    assert!(
        dom.contains("<div id=\"health\" class=\"badge degraded\">degraded</div>") && only_capacity && used >= 84.0,
        "not healthy, and not for the disk under the drives ({used:.1}% used):\n{dom}"
    );
    eprintln!("the host disk is {used:.1}% used: the dashboard rightly calls the cluster degraded for it");
}

/// The `<tr>` of storage node `id` in the rendered nodes table.
fn node_row(dom: &str, id: u32) -> String {
    let start = dom.find(&format!("<tr data-node=\"{id}\"")).unwrap_or_else(|| panic!("no row of node {id}:\n{dom}"));
    let end = dom[start..].find("</tr>").map_or(dom.len(), |e| start + e);
    dom[start..end].to_string()
}

/// Events of the cluster as `trove events --json` prints them.
fn events(cluster: &TestCluster) -> Vec<serde_json::Value> {
    run_ok(&["events", "--cluster", &cluster.dir_str(), "--json", "-n", "200"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event per line"))
        .collect()
}

fn wait_event(cluster: &TestCluster, kind: &str, node: u32) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(e) = events(cluster).into_iter().rev().find(|e| e["kind"] == kind && e["node"] == node) {
            return e;
        }
        assert!(Instant::now() < deadline, "no {kind} event of node {node}: {:#?}", events(cluster));
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_dashboard_shows_a_healthy_cluster_and_one_with_a_node_down() {
    if fuse_missing() {
        return;
    }
    need("python3");
    // Replaced chunks are deleted 3 s after the load rewrites them rather than 30 s: the load
    // would otherwise hold gigabytes of the host's disk and push its use past what the
    // dashboard calls healthy.
    let cluster = TestCluster::start_with(6, "4+2", &["--gc-grace-ms", "3000"]);
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let url = format!("http://{}/", state["meta"]["metrics"].as_str().expect("the metadata service exports"));
    let mount = Mount::start(&cluster, "dash", &["--metrics-listen", &free_addr()]);
    let gw = Gateway::s3(&cluster, "s3-dash", &["--metrics-listen", &free_addr()]);
    let scratch = tempfile::tempdir().expect("scratch");

    // Load: files written and read back through the mount, objects through S3, until stopped.
    let stop = Arc::new(AtomicBool::new(false));
    let dir = mount.join("load");
    std::fs::create_dir(&dir).expect("mkdir");
    // Files written once: while a node is down their chunks stay degraded (the load's files
    // are rewritten, narrower, around the missing node).
    std::fs::create_dir(mount.join("static")).expect("mkdir");
    for i in 0..4 {
        std::fs::write(mount.join(&format!("static/s{i}")), content(1000 + i, 8 << 20)).expect("write");
    }
    let mount_load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let f = dir.join(format!("f{}", i % 4));
                std::fs::write(&f, content(i, 8 << 20)).expect("write through the mount");
                let back = std::fs::read(&f).expect("read through the mount");
                assert_eq!(back.len(), 8 << 20);
                i += 1;
            }
        })
    };
    let s3_load = {
        let stop = stop.clone();
        let url = gw.url();
        std::thread::spawn(move || {
            let script = r#"
import boto3, os, sys
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
if "dash" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket="dash")
body = os.urandom(2 << 20)
for i in range(int(sys.argv[1])):
    s3.put_object(Bucket="dash", Key=f"o{i % 8}", Body=body)
    s3.get_object(Bucket="dash", Key=f"o{i % 8}")["Body"].read()
"#;
            while !stop.load(Ordering::Relaxed) {
                let mut cmd = Command::new("python3");
                cmd.env("S3_ENDPOINT", &url)
                    .env("AWS_ACCESS_KEY_ID", gw::ACCESS_KEY)
                    .env("AWS_SECRET_ACCESS_KEY", gw::SECRET_KEY)
                    .env("AWS_DEFAULT_REGION", "us-east-1")
                    .args(["-c", script, "20"]);
                gw::run_ok(&mut cmd);
            }
        })
    };
    // A minute of samples for the charts.
    std::thread::sleep(Duration::from_secs(30));

    let dom = rendered(&url);
    expect_healthy(&dom, cluster.path());
    for id in 1..=6 {
        assert!(node_row(&dom, id).contains("data-state=\"up\""), "node {id} not up:\n{}", node_row(&dom, id));
    }
    assert!(
        dom.contains("data-role=\"mount\"") && dom.contains("data-role=\"s3\""),
        "the front ends are missing:\n{dom}"
    );
    assert!(dom.contains("data-kind=\"node_joined\""), "no events shown:\n{dom}");
    assert!(dom.contains("<polyline"), "no chart drawn:\n{dom}");
    assert!(dom.contains("fuse write") && dom.contains("s3 read"), "the throughput chart lacks the protocols:\n{dom}");
    screenshot(&url, scratch.path(), "dashboard-healthy.png");

    cluster.kill_node(3);
    let down = wait_event(&cluster, "node_down", 3);
    assert_eq!(down["severity"], "Warning");
    assert!(down["message"].as_str().is_some_and(|m| m.contains("storage node 3")), "{down}");
    // Reads go on from parity meanwhile; give the charts a few samples of it.
    std::thread::sleep(Duration::from_secs(10));
    let dom = rendered(&url);
    assert!(dom.contains("<div id=\"health\" class=\"badge degraded\">degraded</div>"), "not degraded:\n{dom}");
    assert!(dom.contains("1 storage node(s) down: 3"), "the reason is not given:\n{dom}");
    assert!(node_row(&dom, 3).contains("data-state=\"down\""), "node 3 not down:\n{}", node_row(&dom, 3));
    assert!(dom.contains("chunk(s) degraded"), "the chunks with a shard on node 3 are not counted:\n{dom}");
    assert!(dom.contains("data-kind=\"node_down\""), "the node_down event is not shown:\n{dom}");
    screenshot(&url, scratch.path(), "dashboard-node-down.png");

    stop.store(true, Ordering::Relaxed);
    mount_load.join().expect("mount load");
    s3_load.join().expect("s3 load");
    cluster.restart_node(3);
    let up = wait_event(&cluster, "node_up", 3);
    assert!(up["seq"].as_u64() > down["seq"].as_u64());
    drop(gw);
    mount.stop();
}

#[test]
fn administrative_commands_are_recorded_with_their_caller_and_outcome() {
    let cluster = TestCluster::start(4, "2+1");
    let dir = cluster.dir_str();
    run_ok(&["--cluster", &dir, "mkdir", "/projects"]);
    run_ok(&["quota", "set", "/projects", "--bytes", "1G", "--cluster", &dir]);
    run_ok(&["snapshot", "create", "/projects", "before", "--cluster", &dir]);
    let refused = common::run(&["--cluster", &dir, "node", "drain", "9"]);
    assert!(!refused.status.success(), "draining a node that does not exist succeeded");
    // Reads and file operations are not administration.
    run_ok(&["--cluster", &dir, "ls", "/projects"]);
    let admin: Vec<serde_json::Value> = events(&cluster).into_iter().filter(|e| e["kind"] == "admin").collect();
    let said: Vec<(&str, &str)> = admin
        .iter()
        .map(|e| (e["severity"].as_str().unwrap_or_default(), e["message"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(said.len(), 3, "{admin:#?}");
    assert!(
        said[0].0 == "Info" && said[0].1.starts_with("set the quota of /projects (bytes hard 1073741824"),
        "{said:?}"
    );
    assert!(
        said[1].0 == "Info" && said[1].1.starts_with("create snapshot before of /projects, asked from 127.0.0.1:"),
        "{said:?}"
    );
    assert!(said.iter().take(2).all(|(_, m)| m.ends_with(": done")), "{said:?}");
    assert!(
        said[2].0 == "Warning"
            && said[2].1.starts_with("set storage node 9 Draining, asked from 127.0.0.1:")
            && said[2].1.contains(": refused: "),
        "{said:?}"
    );
    assert_eq!(admin[2]["node"], 9);
    let table = run_ok(&["events", "--cluster", &dir]);
    assert!(table.lines().any(|l| l.contains("admin") && l.contains("create snapshot before of /projects")), "{table}");
}

#[test]
fn events_record_nodes_once_and_survive_a_metadata_restart() {
    let cluster = TestCluster::start(4, "2+1");
    let joined = wait_event(&cluster, "node_joined", 4);
    assert_eq!(joined["severity"], "Info");
    cluster.kill_node(2);
    wait_event(&cluster, "node_down", 2);
    // The metadata service restarts: the log is in the engine, and the new server takes the
    // node's state from it instead of reporting the same change again.
    run_ok(&["cluster", "restart-meta", "--dir", &cluster.dir_str()]);
    std::thread::sleep(Duration::from_secs(10));
    let all = events(&cluster);
    let downs = all.iter().filter(|e| e["kind"] == "node_down" && e["node"] == 2).count();
    let joins = all.iter().filter(|e| e["kind"] == "node_joined").count();
    assert_eq!((downs, joins), (1, 4), "{all:#?}");
    cluster.restart_node(2);
    wait_event(&cluster, "node_up", 2);
    // Sequence numbers have no gaps, and the table form names each event.
    let all = events(&cluster);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64 + 1), "{all:#?}");
    }
    let table = run_ok(&["events", "--cluster", &cluster.dir_str()]);
    assert!(
        table.lines().any(|l| l.contains("warning") && l.contains("node_down") && l.contains("storage node 2")),
        "{table}"
    );
    // The lease holder counts them too.
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let exporter = state["meta"]["metrics"].as_str().expect("exporter").to_string();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let text = runtime.block_on(metrics::scrape::get(&exporter, "/metrics")).expect("metrics");
    assert!(text.contains("trove_events_total{kind=\"node_up\",severity=\"info\"} 1"), "{text}");
}
