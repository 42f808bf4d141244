//! Test support for the gateway tests: `trove s3` and `trove nfs` processes started from the
//! real binary, and the external programs the tests drive them with. A missing program fails
//! the test with the command that installs it (scripts/deps.sh): these tests never skip.

#![allow(dead_code)]

use crate::common::{trove, TestCluster};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The access key every test gateway accepts.
pub const ACCESS_KEY: &str = "trove-test-key";
/// Its secret.
pub const SECRET_KEY: &str = "trove-test-secret-0123456789";
/// How long a gateway may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `trove s3` or `trove nfs`, stopped (SIGTERM) on drop.
pub struct Gateway {
    child: Option<Child>,
    /// HOST:PORT it listens on.
    pub addr: String,
    pub log: PathBuf,
}

impl Gateway {
    /// `trove s3` on a free loopback port with the test key, plus `extra` arguments.
    pub fn s3(cluster: &TestCluster, name: &str, extra: &[&str]) -> Gateway {
        // Gateways reach the cluster as other machines' would: with a client credential.
        Gateway::s3_with_credential(cluster, name, &cluster.path().join("tls").join("client"), extra)
    }

    /// `trove s3` configured by a TOML file holding `config` (keys, anonymous access, ...).
    pub fn s3_config(cluster: &TestCluster, name: &str, config: &str) -> Gateway {
        let path = cluster.path().join(format!("{name}.toml"));
        std::fs::write(&path, config).expect("write gateway config");
        let path = path.to_string_lossy().into_owned();
        Gateway::start(
            cluster,
            name,
            &["s3", "--cluster", &cluster.meta_addr, "--listen", "127.0.0.1:0", "--config", &path],
            "://",
        )
    }

    /// `trove nfs` exporting `export` on a free loopback port, plus `extra` arguments.
    pub fn nfs(cluster: &TestCluster, name: &str, export: &str, extra: &[&str]) -> Gateway {
        let mut args = vec!["nfs", "--cluster", &cluster.meta_addr, "--listen", "127.0.0.1:0", "--export", export];
        args.extend_from_slice(extra);
        Gateway::start(cluster, name, &args, "listening on ")
    }

    /// `trove s3` as [`Gateway::s3`], reaching the cluster with the credential in `credential`
    /// (the cluster's S3 keys need a gateway credential).
    pub fn s3_with_credential(cluster: &TestCluster, name: &str, credential: &Path, extra: &[&str]) -> Gateway {
        Gateway::s3_at(cluster, &cluster.meta_addr, name, credential, extra)
    }

    /// `trove s3` given the local cluster's directory as its cluster and no credential: it
    /// takes the directory's own (its gateway credential), as an operator's would.
    pub fn s3_on_dir(cluster: &TestCluster, name: &str, extra: &[&str]) -> Gateway {
        Gateway::s3_at(cluster, &cluster.dir_str(), name, Path::new("/nonexistent"), extra)
    }

    /// `trove s3` with the test key, its cluster given as `at`, reaching it with `credential`
    /// (none where that is no directory).
    fn s3_at(cluster: &TestCluster, at: &str, name: &str, credential: &Path, extra: &[&str]) -> Gateway {
        let mut args = vec![
            "s3",
            "--cluster",
            at,
            "--listen",
            "127.0.0.1:0",
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            SECRET_KEY,
        ];
        args.extend_from_slice(extra);
        Gateway::start_as(cluster, name, &args, "://", credential)
    }

    fn start(cluster: &TestCluster, name: &str, args: &[&str], marker: &str) -> Gateway {
        // Gateways reach the cluster as other machines' would: with a client credential (files,
        // no administration) and its metadata address.
        let client = cluster.path().join("tls").join("client");
        Gateway::start_as(cluster, name, args, marker, &client)
    }

    fn start_as(cluster: &TestCluster, name: &str, args: &[&str], marker: &str, credential: &Path) -> Gateway {
        let log = cluster.path().join(format!("{name}.log"));
        let mut cmd = trove();
        if credential.exists() {
            cmd.env("TROVE_CREDENTIALS", credential);
        }
        let mut child = cmd
            .args(args)
            .env("TROVE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("trove gateway starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut first = String::new();
            let _ = BufReader::new(stdout).read_line(&mut first);
            let _ = tx.send(first);
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("gateway {args:?} did not start: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
        };
        let Some(rest) = line.split_once(marker).map(|(_, r)| r) else {
            let _ = child.kill();
            panic!("gateway {args:?} printed {line:?}: {}", std::fs::read_to_string(&log).unwrap_or_default());
        };
        let addr = rest.split_whitespace().next().unwrap_or_default().to_string();
        Gateway { child: Some(child), addr, log }
    }

    /// The gateway's endpoint URL (S3).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port (NFS URLs name it for clients without a portmapper).
    pub fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap_or_default()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The gateway's process id (to read its memory use from /proc).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Fails the test unless `program` can be run (no silent skips).
pub fn need(program: &str) {
    let found =
        Command::new("sh").arg("-c").arg(format!("command -v {program}")).output().is_ok_and(|o| o.status.success());
    assert!(found, "{program} is needed by this test and is not installed: run scripts/deps.sh");
}

/// Runs a command, returning its output.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs a command and panics with its output unless it succeeds; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `aws` (awscli) against the gateway, with the test key and no ambient AWS configuration
/// (`home` holds its empty config files).
pub fn aws(gw: &Gateway, home: &Path) -> Command {
    let mut cmd = Command::new("aws");
    for var in ["AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"] {
        cmd.env_remove(var);
    }
    cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", home.join("aws-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("aws-credentials"))
        .args(["--endpoint-url", &gw.url()]);
    cmd
}

/// Python 3 with the test key in the environment.
pub fn python(gw: &Gateway) -> Command {
    let mut cmd = Command::new("python3");
    for var in ["AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"] {
        cmd.env_remove(var);
    }
    cmd.env("S3_ENDPOINT", gw.url())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    cmd
}

/// Writes `files` (relative path, content) below `dir`.
pub fn write_tree(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (rel, data) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(&p, data).expect("write");
    }
}

/// Every regular file below `dir`, as (relative path, content), sorted.
pub fn read_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("readdir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).expect("below").to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).expect("read")));
            }
        }
    }
    out.sort();
    out
}

/// A small tree of files of assorted sizes (empty, tiny, around a chunk, a few chunks),
/// nested three deep, with names that need URL encoding.
pub fn sample_tree(seed: u64) -> Vec<(String, Vec<u8>)> {
    let sizes = [0usize, 1, 100, 4095, 65_536, 1 << 20, (4 << 20) + 3, 9 << 20];
    let mut files = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let dir = match i % 3 {
            0 => "",
            1 => "a/",
            _ => "a/b c/",
        };
        files.push((format!("{dir}file {i}+x.bin"), crate::common::content(seed + i as u64, *size)));
    }
    files.push(("a-sibling.txt".into(), b"sorts between a and a/".to_vec()));
    files
}
