//! Metrics on every role, read the way operators read them: a local cluster (the metadata
//! service and six storage nodes, exporters given by `trove cluster start`), a mount and an S3
//! gateway started with `--metrics-listen`, a known workload, and a real Prometheus server
//! (Debian's `prometheus`) scraping every process; the counters are checked through
//! Prometheus's HTTP API against what the workload did. Also `trove stats` (its JSON and its
//! table, `--top`) during a workload, and the exporters' own answers.

mod common;
mod gw;
mod mnt;

use common::*;
use gw::{need, Gateway};
use mnt::{fuse_missing, Mount};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: f64 = 1024.0 * 1024.0;

/// A Prometheus server scraping `targets` (job name, addresses) every second, stopped on drop.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[(&str, Vec<String>)]) -> Prometheus {
        need("prometheus");
        let dir = tempfile::Builder::new().prefix("trove-prom-").tempdir().expect("temp dir");
        let mut config = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n");
        for (job, addrs) in targets {
            let list: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            ));
        }
        std::fs::write(dir.path().join("prometheus.yml"), &config).expect("config");
        let addr = free_addr();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let p = Prometheus { child, addr, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if get_blocking(&p.addr, "/-/ready").is_ok() {
                return p;
            }
            assert!(Instant::now() < deadline, "prometheus did not get ready: {}", p.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The value of an instant query whose result is one number.
    fn scalar(&self, query: &str) -> Option<f64> {
        let body = get_blocking(&self.addr, &format!("/api/v1/query?query={}", encode(query))).ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        let first = result.first()?;
        first["value"][1].as_str()?.parse().ok()
    }

    /// How many series an instant query returns.
    fn count(&self, query: &str) -> usize {
        get_blocking(&self.addr, &format!("/api/v1/query?query={}", encode(query)))
            .ok()
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| v["data"]["result"].as_array().map(Vec::len))
            .unwrap_or(0)
    }

    /// Waits until `query` is within `tolerance` (a fraction) of `want`; returns what it was.
    fn expect_near(&self, query: &str, want: f64, tolerance: f64) -> f64 {
        self.wait_for(query, |v| (v - want).abs() <= want * tolerance).unwrap_or_else(|last| {
            panic!("{query}: Prometheus says {last:?}, the workload did {want} (within {}%)", tolerance * 100.0)
        })
    }

    /// Waits until `query` is at least `floor`; returns what it was. A counter seen in one
    /// scrape may still lag the workload by up to a scrape interval, so a lower bound is
    /// waited for, never read once.
    fn expect_at_least(&self, query: &str, floor: f64) -> f64 {
        self.wait_for(query, |v| v >= floor)
            .unwrap_or_else(|last| panic!("{query}: Prometheus says {last:?}, the workload needs at least {floor}"))
    }

    /// Polls `query` for up to 30 s until its value satisfies `ok`; the last value seen if it
    /// never did.
    fn wait_for(&self, query: &str, ok: impl Fn(f64) -> bool) -> Result<f64, Option<f64>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = None;
        while Instant::now() < deadline {
            last = self.scalar(query);
            if let Some(v) = last.filter(|v| ok(*v)) {
                return Ok(v);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(last)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The exporter addresses `trove cluster start` recorded for the metadata service and nodes.
fn cluster_exporters(cluster: &TestCluster) -> (String, Vec<String>) {
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let meta = state["meta"]["metrics"].as_str().expect("the metadata service exports").to_string();
    let nodes = state["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["metrics"].as_str().expect("every node exports").to_string())
        .collect();
    (meta, nodes)
}

fn dd(args: &[&str]) {
    let out = Command::new("dd").args(args).output().expect("dd runs");
    assert!(out.status.success(), "dd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Puts and gets objects with boto3: `count` objects of `bytes` each, written then read back.
fn s3_put_get(gw: &Gateway, bucket: &str, count: usize, bytes: usize) {
    let script = format!(
        r#"
import boto3, os, hashlib
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
s3.create_bucket(Bucket="{bucket}")
for i in range({count}):
    body = hashlib.sha256(str(i).encode()).digest() * ({bytes} // 32)
    s3.put_object(Bucket="{bucket}", Key=f"obj/{{i}}.bin", Body=body)
for i in range({count}):
    got = s3.get_object(Bucket="{bucket}", Key=f"obj/{{i}}.bin")["Body"].read()
    assert len(got) == {bytes}, len(got)
"#
    );
    gw::run_ok(gw::python(gw).arg("-c").arg(script));
}

#[test]
fn prometheus_scrapes_every_process_and_the_counters_match_the_workload() {
    if fuse_missing() {
        return;
    }
    need("python3");
    let cluster = TestCluster::start(6, "4+2");
    let (meta_exporter, node_exporters) = cluster_exporters(&cluster);
    let mount_exporter = free_addr();
    let s3_exporter = free_addr();
    let mount = Mount::start(&cluster, "metrics", &["--metrics-listen", &mount_exporter]);
    let gw = Gateway::s3(&cluster, "s3-metrics", &["--metrics-listen", &s3_exporter]);
    let prom = Prometheus::start(&[
        ("trove-meta", vec![meta_exporter.clone()]),
        ("trove-storage", node_exporters.clone()),
        ("trove-mount", vec![mount_exporter.clone()]),
        ("trove-s3", vec![s3_exporter.clone()]),
    ]);
    // Every process is scraped: 1 + 6 + 1 + 1 targets up.
    let deadline = Instant::now() + Duration::from_secs(30);
    while prom.scalar("sum(up)") != Some(9.0) {
        assert!(Instant::now() < deadline, "not every target is up: {:?}; {}", prom.scalar("sum(up)"), prom.log());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(prom.count("trove_process_info"), 9, "every process says who it is");
    let before = |q: &str| prom.scalar(q).unwrap_or(0.0);
    let meta_creates_before = before(r#"sum(trove_ops_total{protocol="meta",op="Create"})"#);
    let put_shards_before = before(r#"sum(trove_ops_total{protocol="storage",op="PutShard"})"#);
    let shard_bytes_before = before(r#"sum(trove_bytes_total{protocol="storage",direction="write"})"#);

    // Through the mount: 4 files of 16 MiB written and read back with O_DIRECT (so every byte
    // is a FUSE request of 1 MiB), and 50 empty files created and removed.
    std::fs::create_dir(mount.join("m")).expect("mkdir");
    for i in 0..4 {
        let f = mount.join(&format!("m/f{i}.bin"));
        let f = f.to_str().expect("utf-8");
        dd(&["if=/dev/urandom", &format!("of={f}"), "bs=1M", "count=16", "oflag=direct", "status=none"]);
    }
    for i in 0..4 {
        let f = mount.join(&format!("m/f{i}.bin"));
        let f = f.to_str().expect("utf-8");
        dd(&[&format!("if={f}"), "of=/dev/null", "bs=1M", "iflag=direct", "status=none"]);
    }
    for i in 0..50 {
        std::fs::write(mount.join(&format!("m/e{i}")), b"").expect("create");
    }
    for i in 0..50 {
        std::fs::remove_file(mount.join(&format!("m/e{i}"))).expect("remove");
    }
    // Through S3: 3 objects of 5 MiB put and got.
    s3_put_get(&gw, "metrics", 3, 5 << 20);

    // FUSE: every byte written and read, in 1 MiB requests.
    prom.expect_near(r#"sum(trove_bytes_total{protocol="fuse",direction="write"})"#, 64.0 * MIB, 0.01);
    prom.expect_near(r#"sum(trove_bytes_total{protocol="fuse",direction="read"})"#, 64.0 * MIB, 0.01);
    prom.expect_near(r#"sum(trove_ops_total{protocol="fuse",op="write"})"#, 64.0, 0.03);
    let reads = prom.expect_near(r#"sum(trove_ops_total{protocol="fuse",op="read"})"#, 64.0, 0.08);
    // The mount's client library wrote the same bytes.
    prom.expect_near(
        r#"sum(trove_bytes_total{job="trove-mount",protocol="client",direction="write"})"#,
        64.0 * MIB,
        0.01,
    );
    // S3: three PUTs and three GETs of 5 MiB.
    prom.expect_near(r#"sum(trove_ops_total{protocol="s3",op="PutObject"})"#, 3.0, 0.0);
    prom.expect_near(r#"sum(trove_ops_total{protocol="s3",op="GetObject"})"#, 3.0, 0.0);
    prom.expect_near(r#"sum(trove_bytes_total{protocol="s3",direction="write"})"#, 15.0 * MIB, 0.01);
    prom.expect_near(r#"sum(trove_bytes_total{protocol="s3",direction="read"})"#, 15.0 * MIB, 0.01);
    // Metadata: 54 files created through the mount (4 + 50) and 3 temporary files by the
    // gateway's PUTs; 50 removed.
    prom.expect_near(
        &format!(r#"sum(trove_ops_total{{protocol="meta",op="Create"}}) - {meta_creates_before}"#),
        57.0,
        0.03,
    );
    prom.expect_near(r#"sum(trove_ops_total{protocol="fuse",op="unlink"})"#, 50.0, 0.0);
    prom.expect_near(r#"sum(trove_ops_total{protocol="meta",op="Unlink"})"#, 50.0, 0.03);
    // Storage: every chunk as 4 data and 2 parity shards on distinct nodes. 64 MiB in 4 MiB
    // chunks (16 x 6 shards of 1 MiB) and 3 objects of 5 MiB (a 4 MiB chunk and a 1 MiB one:
    // 2 x 6 shards each): 132 puts of 1.5 times the data.
    prom.expect_near(
        &format!(r#"sum(trove_ops_total{{protocol="storage",op="PutShard"}}) - {put_shards_before}"#),
        132.0,
        0.03,
    );
    prom.expect_near(
        &format!(r#"sum(trove_bytes_total{{protocol="storage",direction="write"}}) - {shard_bytes_before}"#),
        1.5 * 79.0 * MIB,
        0.03,
    );
    // Every node took its share: no node holds no shard of 16 chunks spread over 6 nodes.
    prom.expect_near(r#"count(trove_bytes_total{protocol="storage",direction="write"} > 0)"#, 6.0, 0.0);
    // Commits of the metadata engine, and the transport's bytes, are there too.
    prom.expect_at_least(r#"sum(trove_kv_commits_total{result="ok"})"#, 107.0);
    prom.expect_at_least(r#"sum(trove_net_bytes_total{job="trove-storage",direction="in"})"#, 1.5 * 79.0 * MIB);
    // Latency histograms answer quantile queries.
    let p99 = prom.scalar(
        r#"histogram_quantile(0.99, sum by (le) (trove_op_duration_seconds_bucket{protocol="fuse",op="read"}))"#,
    );
    assert!(p99.is_some_and(|v| v > 0.0 && v < 10.0), "fuse read p99 {p99:?}");
    // The lease holder publishes the cluster's figures.
    prom.expect_near(r#"max(trove_cluster_nodes{state="up"})"#, 6.0, 0.0);
    prom.expect_near(r#"sum(trove_meta_leader)"#, 1.0, 0.0);
    prom.expect_near(r#"max(trove_cluster_files)"#, 7.0, 0.0);
    eprintln!("fuse reads: {reads} requests for 64 MiB");
    drop(prom);
    drop(gw);
    mount.stop();
}

#[test]
fn trove_stats_shows_every_process_and_the_busiest_objects() {
    need("python3");
    let cluster = TestCluster::start(6, "4+2");
    let s3_exporter = free_addr();
    let gw = Gateway::s3(&cluster, "s3-stats", &["--metrics-listen", &s3_exporter]);
    s3_put_get(&gw, "stats", 2, 4 << 20);
    // One object written and read, over and over, while stats measures (written too: the
    // gateway's client serves repeated reads of one object from its chunk cache, and the
    // storage nodes behind it must have work to show).
    let url = gw.url();
    let reader = std::thread::spawn(move || {
        let script = r#"
import boto3, os, time
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
body = os.urandom(4 << 20)
end = time.time() + 8
while time.time() < end:
    s3.put_object(Bucket="stats", Key="obj/1.bin", Body=body)
    s3.get_object(Bucket="stats", Key="obj/1.bin")["Body"].read()
"#;
        let mut cmd = Command::new("python3");
        cmd.env("S3_ENDPOINT", url)
            .env("AWS_ACCESS_KEY_ID", gw::ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", gw::SECRET_KEY)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .arg("-c")
            .arg(script);
        gw::run_ok(&mut cmd)
    });
    // Announcements come every 10 s: the gateway's first is at its start.
    std::thread::sleep(Duration::from_secs(2));
    let out = run_ok(&["stats", "--cluster", &cluster.dir_str(), "--once", "--json", "--top", "--interval", "3"]);
    let r: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let processes = r["processes"].as_array().expect("processes");
    let roles: Vec<&str> = processes.iter().filter_map(|p| p["role"].as_str()).collect();
    assert_eq!(roles.iter().filter(|r| **r == "storage").count(), 6, "{roles:?}");
    assert!(roles.contains(&"meta") && roles.contains(&"s3"), "{roles:?}");
    let s3 = processes.iter().find(|p| p["role"] == "s3").expect("the gateway");
    let gets = s3["rates"]["ops"]["s3"].as_f64().expect("s3 operations");
    assert!(gets > 1.0, "the gateway served {gets} operations/s");
    let read = s3["rates"]["read_bytes"]["s3"].as_f64().expect("s3 bytes");
    assert!(read > 4.0 * MIB, "the gateway served {read} bytes/s");
    let storage_ops: f64 =
        processes.iter().filter(|p| p["role"] == "storage").filter_map(|p| p["rates"]["ops"]["storage"].as_f64()).sum();
    assert!(storage_ops > 0.0, "no storage operations behind the gateway's");
    assert!(r["total"]["latency_p99_s"].as_f64().is_some_and(|v| v > 0.0), "{}", r["total"]);
    let files = r["top"]["files"].as_array().expect("top files");
    assert_eq!(files.first().and_then(|f| f["key"].as_str()), Some("stats/obj/1.bin"), "{files:?}");
    let clients = r["top"]["clients"].as_array().expect("top clients");
    assert!(clients.iter().any(|c| c["key"].as_str() == Some(&format!("s3 key {}", gw::ACCESS_KEY))), "{clients:?}");
    // The table: a row per process and a total.
    let table = run_ok(&["stats", "--cluster", &cluster.dir_str(), "--once", "--interval", "1", "--top"]);
    assert!(table.contains("ROLE") && table.contains("P99 ms") && table.contains("Busiest files"), "{table}");
    assert_eq!(table.lines().filter(|l| l.starts_with("storage")).count(), 6, "{table}");
    assert!(table.lines().any(|l| l.starts_with("total")), "{table}");
    reader.join().expect("reader");
    // A cluster without exporters says how to get them.
    let quiet = TestCluster::start_with(2, "1+1", &["--no-metrics"]);
    let out = run(&["stats", "--cluster", &quiet.dir_str(), "--once"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--metrics-listen"), "{err}");
}

#[test]
fn exporters_answer_with_the_text_format_and_refuse_a_taken_port() {
    let cluster = TestCluster::start(2, "1+1");
    let (meta_exporter, nodes) = cluster_exporters(&cluster);
    // A node says who it is by its id once registered (at most half a second later).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = get_blocking(&nodes[0], "/metrics").expect("a node answers");
    while !text.contains("trove_process_info{role=\"storage\",id=\"1\"") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        text = get_blocking(&nodes[0], "/metrics").expect("a node answers");
    }
    for name in [
        "process_cpu_seconds_total",
        "trove_drive_bytes",
        "trove_process_info{role=\"storage\",id=\"1\"",
        "trove_net_bytes_total",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let meta = get_blocking(&meta_exporter, "/metrics").expect("the metadata service answers");
    assert!(meta.contains("trove_kv_commit_duration_seconds_bucket"), "{meta}");
    assert!(meta.contains("trove_ops_total{protocol=\"meta\",op=\"Heartbeat\"}"), "{meta}");
    // promtool, Prometheus's own checker, accepts what every exporter writes.
    need("promtool");
    for addr in [&meta_exporter, &nodes[0]] {
        let text = get_blocking(addr, "/metrics").expect("answers");
        let mut check = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool runs");
        use std::io::Write;
        check.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
        let out = check.wait_with_output().expect("promtool ends");
        // promtool lints style too (it exits 3 for lint findings); format errors exit 1.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() != Some(1) && !stderr.contains("error while linting"),
            "promtool on {addr}: {stderr}{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // The shipped alert rules and scrape configuration are valid.
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    let rules =
        Command::new("promtool").arg("check").arg("rules").arg(deploy.join("alerts.yml")).output().expect("promtool");
    assert!(rules.status.success(), "{}", String::from_utf8_lossy(&rules.stdout));
    let config = Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(deploy.join("prometheus.yml"))
        .output()
        .expect("promtool");
    assert!(
        config.status.success(),
        "{}{}",
        String::from_utf8_lossy(&config.stdout),
        String::from_utf8_lossy(&config.stderr)
    );
    // A mount asked to export on a port that is taken says so and does not start.
    if !fuse_missing() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr").to_string();
        let point = tempfile::tempdir().expect("mount point");
        let out = trove()
            .args(["mount", "--cluster", &cluster.dir_str(), "--metrics-listen", &addr])
            .arg(point.path())
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&addr) && err.contains("in use"), "{err}");
    }
}

/// The Grafana dashboard and the alert rules in `deploy/` query only metrics Trove publishes
/// (a renamed metric would silently empty a panel or silence an alert).
#[test]
fn deploy_files_query_only_published_metrics() {
    let published: Vec<String> = metrics::names::ALL
        .iter()
        .flat_map(|(name, kind, _)| match *kind {
            "counter" => vec![format!("{name}_total")],
            "histogram" => vec![format!("{name}_bucket"), format!("{name}_sum"), format!("{name}_count")],
            _ => vec![name.to_string()],
        })
        .collect();
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let grafana = std::fs::read_to_string(deploy.join("grafana/trove.json")).expect("grafana dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&grafana).expect("the dashboard is JSON");
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(String::from))
        .collect();
    assert!(queries.len() >= 15, "{queries:?}");
    let alerts = std::fs::read_to_string(deploy.join("prometheus/alerts.yml")).expect("alert rules");
    queries.extend(alerts.lines().filter_map(|l| l.trim().strip_prefix("expr:")).map(String::from));
    let mut checked = 0;
    for q in &queries {
        let mut rest = q.as_str();
        while let Some(at) = rest.find(|c: char| c.is_ascii_lowercase()) {
            rest = &rest[at..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            let word = &rest[..end];
            if (word.starts_with("trove_") || word.starts_with("process_")) && !rest[end..].starts_with('=') {
                assert!(published.iter().any(|p| p == word), "{word} in {q:?} is not a published metric");
                checked += 1;
            }
            rest = &rest[end..];
        }
    }
    assert!(checked >= 25, "only {checked} metric names found in the deploy files");
}
