//! Test support: a real local cluster started through the `trove` binary, stopped on drop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `trove` binary under test.
pub fn trove() -> Command {
    Command::new(e2e::trove())
}

/// Runs `trove` with `args`, returning its output (whatever the exit status).
pub fn run(args: &[&str]) -> Output {
    trove().args(args).output().expect("trove binary runs")
}

/// Runs `trove` and panics with its stderr unless it succeeds.
pub fn run_ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "trove {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free loopback address.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// GETs `path` from a metrics exporter at `addr`, from a test's own thread.
pub fn get_blocking(addr: &str, path: &str) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(metrics::scrape::get(addr, path)).map_err(|e| e.to_string())
}

/// Every shard file below `dir` (files under a `shards` directory), sorted.
pub fn shard_files_in(dir: &Path) -> Vec<PathBuf> {
    files_in(dir, |p| p.components().any(|c| c.as_os_str() == "shards"))
}

/// Every file below `dir` that `keep` keeps, sorted.
pub fn files_in(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A local cluster of separate processes in a temporary directory.
pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub meta_addr: String,
}

impl TestCluster {
    pub fn start(nodes: usize, ec: &str) -> TestCluster {
        Self::start_with(nodes, ec, &[])
    }

    /// Starts with more `trove cluster start` options (e.g. `--rebuild-after-ms`).
    pub fn start_with(nodes: usize, ec: &str, extra: &[&str]) -> TestCluster {
        let dir = tempfile::Builder::new().prefix("trove-test-").tempdir().expect("temp dir");
        Self::start_in(dir, nodes, ec, extra)
    }

    /// Starts in the given directory (for example one on a small file system).
    pub fn start_in(dir: tempfile::TempDir, nodes: usize, ec: &str, extra: &[&str]) -> TestCluster {
        let d = dir.path().to_str().expect("utf-8 path").to_string();
        let n = nodes.to_string();
        let mut args = vec!["cluster", "start", "--dir", &d, "--nodes", &n, "--ec", ec];
        args.extend_from_slice(extra);
        run_ok(&args);
        let state: toml::Value =
            toml::from_str(&std::fs::read_to_string(dir.path().join("cluster.toml")).expect("state file"))
                .expect("toml");
        let meta_addr = state["meta"]["addr"].as_str().expect("meta addr").to_string();
        TestCluster { dir, meta_addr }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn dir_str(&self) -> String {
        self.dir.path().to_str().expect("utf-8 path").to_string()
    }

    pub fn kill_node(&self, node: usize) {
        run_ok(&["cluster", "kill-node", "--dir", &self.dir_str(), "--node", &node.to_string()]);
    }

    pub fn restart_node(&self, node: usize) {
        run_ok(&["cluster", "restart-node", "--dir", &self.dir_str(), "--node", &node.to_string()]);
    }

    /// Every shard file stored by every node.
    pub fn shard_files(&self) -> Vec<PathBuf> {
        shard_files_in(self.path())
    }

    /// `trove status --json` of the cluster.
    pub fn status(&self) -> serde_json::Value {
        let out = run_ok(&["--cluster", &self.dir_str(), "status", "--json"]);
        serde_json::from_str(&out).expect("status is JSON")
    }

    /// Waits until `done(status)` holds, polling `trove status --json`; panics after `within`
    /// with the last status.
    pub fn wait_status(
        &self,
        within: std::time::Duration,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(self.path().join("logs").join("meta.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                panic!(
                    "timed out waiting for {what}; last status: {status:#}\nmeta log tail:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }

    /// A client in this process, with the cluster's admin credential (plaintext for a cluster
    /// started with --plaintext).
    pub async fn client(&self) -> client::Client {
        let options = client::ClientOptions { tls: self.tls(), ..Default::default() };
        client::Client::connect_with(&self.meta_addr, options).await.expect("client connects")
    }

    /// The cluster's admin credential, as a client option.
    pub fn tls(&self) -> wire::tls::TlsChoice {
        let admin = self.path().join("tls").join("admin");
        let ctx = admin.exists().then(|| wire::tls::TlsContext::load(&admin).expect("the admin credential loads"));
        wire::tls::TlsChoice::Explicit(ctx)
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let _ = run(&["cluster", "stop", "--dir", &self.dir_str()]);
    }
}

/// Deterministic content for file `id`: a byte pattern that differs per file and position.
pub fn content(id: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Shard reads the cluster's storage nodes have served so far (`GetShard` and `ReadRange`, from
/// each node's metrics exporter). Counted where they are served, so the reads of the other
/// tests running in this process do not count.
pub async fn shard_reads_served(cluster: &TestCluster) -> u64 {
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("cluster state"))
            .expect("toml");
    let mut total = 0;
    for node in state["nodes"].as_array().expect("nodes") {
        let addr = node["metrics"].as_str().expect("every node exports metrics");
        let text = metrics::scrape::get(addr, "/metrics").await.expect("the node answers");
        for line in text.lines().filter(|l| l.starts_with("trove_ops_total{") && l.contains("protocol=\"storage\"")) {
            if line.contains("op=\"GetShard\"") || line.contains("op=\"ReadRange\"") {
                total += line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).expect("a count") as u64;
            }
        }
    }
    total
}
