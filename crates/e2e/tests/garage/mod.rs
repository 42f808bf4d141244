//! Test support: a real Garage S3 server (not Trove, not a mock) in a temporary directory, on
//! free loopback ports, with a key and a bucket made by the `garage` command line, stopped on
//! drop; and boto3 (through `bucket.py`) to look at and change the objects it holds. Garage is
//! installed by scripts/deps.sh; a missing `garage` fails the test with the command to run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long Garage may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running Garage server with one bucket.
pub struct Garage {
    pub dir: tempfile::TempDir,
    config: PathBuf,
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`, its S3 API.
    pub endpoint: String,
    pub bucket: String,
    pub key_id: String,
    pub secret: String,
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (scripts/deps.sh installs Garage)"))
}

fn run_ok(cmd: &mut Command) -> String {
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

/// The value after `label` on the line that holds it (`Key ID: GK...`).
fn field(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"))
}

impl Garage {
    /// Starts Garage, lays out its single node and makes `bucket` with a key allowed to use it.
    pub fn start(bucket: &str) -> Garage {
        let found = Command::new("sh").arg("-c").arg("command -v garage").output().is_ok_and(|o| o.status.success());
        assert!(found, "garage is needed by this test and is not installed: run scripts/deps.sh");
        let dir = tempfile::Builder::new().prefix("trove-garage-").tempdir().expect("temp dir");
        let (rpc, s3) = (free_port(), free_port());
        let secret: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        let config = dir.path().join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = {:?}\ndata_dir = {:?}\ndb_engine = \"sqlite\"\nreplication_factor = 1\nrpc_bind_addr = \"127.0.0.1:{rpc}\"\nrpc_public_addr = \"127.0.0.1:{rpc}\"\nrpc_secret = \"{secret}\"\n\n[s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"127.0.0.1:{s3}\"\nroot_domain = \".s3.garage.localhost\"\n",
                dir.path().join("meta").display().to_string(),
                dir.path().join("data").display().to_string()
            ),
        )
        .expect("write garage config");
        let log = std::fs::File::create(dir.path().join("garage.log")).expect("log file");
        let child = Command::new("garage")
            .arg("-c")
            .arg(&config)
            .arg("server")
            .env("RUST_LOG", "garage=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("garage server starts");
        let mut garage = Garage {
            dir,
            config,
            child: Some(child),
            endpoint: format!("http://127.0.0.1:{s3}"),
            bucket: bucket.to_string(),
            key_id: String::new(),
            secret: String::new(),
        };
        let started = Instant::now();
        let node = loop {
            let out = garage.cli().args(["node", "id", "-q"]).output().expect("garage runs");
            let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && id.len() >= 16 {
                break id[..16].to_string();
            }
            assert!(started.elapsed() < START_TIMEOUT, "garage did not start: {}", garage.log());
            std::thread::sleep(Duration::from_millis(200));
        };
        // `node id` reads the key file; the layout commands need the server's RPC port, which
        // may open later: `status` answers once it does.
        garage.wait_for(started, "garage's RPC", |g| g.cli().arg("status").output().expect("garage runs"));
        run_ok(garage.cli().args(["layout", "assign", "-z", "dc1", "-c", "1G", &node]));
        run_ok(garage.cli().args(["layout", "apply", "--version", "1"]));
        let key = run_ok(garage.cli().args(["key", "create", "trove-test"]));
        garage.key_id = field(&key, "Key ID:");
        garage.secret = field(&key, "Secret key:");
        run_ok(garage.cli().args(["bucket", "create", bucket]));
        run_ok(garage.cli().args(["bucket", "allow", "--read", "--write", "--owner", bucket, "--key", "trove-test"]));
        // The S3 API answers once the layout is in force.
        garage.wait_for(started, "garage's S3 API", |g| g.boto(&["list", bucket, ""]));
        garage
    }

    /// Runs `attempt` until it succeeds; fails the test, with `what` and Garage's log, when
    /// it has not by [`START_TIMEOUT`] after `started`.
    fn wait_for(&self, started: Instant, what: &str, attempt: impl Fn(&Garage) -> Output) {
        loop {
            let out = attempt(self);
            if out.status.success() {
                return;
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "{what} does not answer: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The `garage` command line on this server.
    pub fn cli(&self) -> Command {
        let mut cmd = Command::new("garage");
        cmd.arg("-c").arg(&self.config);
        cmd
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("garage.log")).unwrap_or_default()
    }

    /// `bucket.py ARGS` with this server's key (boto3).
    pub fn boto(&self, args: &[&str]) -> Output {
        let script = format!("{}/tests/garage/bucket.py", env!("CARGO_MANIFEST_DIR"));
        let mut cmd = Command::new("python3");
        for var in ["AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"] {
            cmd.env_remove(var);
        }
        cmd.arg(script)
            .args(args)
            .env("S3_ENDPOINT", &self.endpoint)
            .env("AWS_ACCESS_KEY_ID", &self.key_id)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
            .env("AWS_EC2_METADATA_DISABLED", "true");
        run(&mut cmd)
    }

    fn boto_ok(&self, args: &[&str]) -> String {
        let out = self.boto(args);
        assert!(out.status.success(), "bucket.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every object of the bucket below `prefix`: (key, size).
    pub fn list(&self, prefix: &str) -> Vec<(String, u64)> {
        self.boto_ok(&["list", &self.bucket, prefix])
            .lines()
            .filter_map(|l| l.rsplit_once(' ').map(|(k, s)| (k.to_string(), s.parse().expect("size"))))
            .collect()
    }

    /// The bytes of object `key`.
    pub fn get(&self, key: &str) -> Vec<u8> {
        let out = self.dir.path().join("got");
        self.boto_ok(&["get", &self.bucket, key, out.to_str().expect("utf-8")]);
        std::fs::read(&out).expect("read object")
    }

    /// Replaces object `key` with `data`.
    pub fn put(&self, key: &str, data: &[u8]) {
        let file = self.dir.path().join("put");
        std::fs::write(&file, data).expect("write");
        self.boto_ok(&["put", &self.bucket, key, file.to_str().expect("utf-8")]);
    }

    /// The `[object]` table of a storage node on this bucket under `prefix`, its secret in
    /// `secret_file`.
    pub fn object_table(&self, prefix: &str, secret_file: &Path) -> String {
        format!(
            "[object]\nendpoint = {:?}\nbucket = {:?}\nprefix = {prefix:?}\nregion = \"garage\"\naccess_key_id = {:?}\nsecret_access_key_file = {:?}\nallow_http = true\n",
            self.endpoint,
            self.bucket,
            self.key_id,
            secret_file.display().to_string()
        )
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
