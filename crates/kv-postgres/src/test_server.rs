//! The PostgreSQL server that tests run against (feature `test-server`; for tests only).
//!
//! [`url`] returns `TROVE_TEST_POSTGRES_URL` when it is set (point it at a throwaway database:
//! tests create schemas in it and never drop them). Otherwise the first call starts a server for
//! this test process with `scripts/postgres.sh start --watch <pid> --fast`, which installs
//! PostgreSQL if missing; the script's watchdog stops the server and removes its directory once
//! the process has exited, however it exits. When no server can be had, it panics with the
//! script's output: a test that needs PostgreSQL never passes silently without it.
//!
//! [`PrivateServer`] is a server of one's own, for tests that stop and restart it.
//! [`fresh_schema`] names a new, unused schema, so each test case gets empty tables.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable naming an existing server to test against.
pub const URL_ENV: &str = "TROVE_TEST_POSTGRES_URL";

/// `scripts/postgres.sh` in this source tree.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh")
}

/// The URL of the server shared by this test process (see the module documentation).
pub fn url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var(URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_string(),
        _ => start_server(&["--fast"]).url,
    })
}

/// A started server: its URL and its directory.
pub struct Started {
    pub url: String,
    pub dir: Option<PathBuf>,
}

fn start_server(extra: &[&str]) -> Started {
    let pid = std::process::id().to_string();
    let mut args = vec!["start", "--watch", pid.as_str()];
    args.extend_from_slice(extra);
    run_script(&args)
}

fn run_script(args: &[&str]) -> Started {
    let script = script();
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!(
            "PostgreSQL is needed by this test and could not be started ({} {} exited with {}); set {URL_ENV} to use an existing server.\n{stderr}",
            script.display(),
            args.join(" "),
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let url = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with("postgres://"))
        .unwrap_or_else(|| panic!("{} printed no URL.\nstdout: {stdout}\nstderr: {stderr}", script.display()))
        .to_string();
    let dir = stderr
        .lines()
        .find_map(|line| line.strip_prefix("postgres.sh: server of "))
        .and_then(|rest| rest.split(" listening").next())
        .map(PathBuf::from);
    Started { url, dir }
}

/// A server of this test's own, stopped and removed on drop (and by the script's watchdog if
/// the process dies first). Durable (fsync on), since tests using it restart it.
pub struct PrivateServer {
    pub url: String,
    pub dir: PathBuf,
}

impl PrivateServer {
    /// Starts one; panics with the reason when it cannot.
    pub fn start() -> PrivateServer {
        let started = start_server(&[]);
        let dir = started.dir.unwrap_or_else(|| panic!("scripts/postgres.sh did not name its directory"));
        PrivateServer { url: started.url, dir }
    }

    /// Stops the server (fast shutdown); the data stays.
    pub fn stop(&self) {
        self.control("stop");
    }

    /// Restarts a stopped or running server on the same port.
    pub fn restart(&self) {
        self.control("restart");
    }

    fn control(&self, action: &str) {
        let script = script();
        let output = Command::new("bash")
            .arg(&script)
            .arg(action)
            .arg(&self.dir)
            .output()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
        assert!(
            output.status.success(),
            "{} {action} {} failed: {}",
            script.display(),
            self.dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(script()).arg("remove").arg(&self.dir).output();
    }
}

/// A schema name no other test (of this or another process) uses.
pub fn fresh_schema(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.subsec_nanos()).unwrap_or(0);
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .map(|c| c.to_ascii_lowercase())
        .take(24)
        .collect();
    format!("t_{tag}_{}_{nanos}_{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Options with a fresh schema (see [`fresh_schema`]).
pub fn fresh_options(tag: &str) -> crate::PostgresOptions {
    crate::PostgresOptions { schema: Some(fresh_schema(tag)), ..crate::PostgresOptions::default() }
}

/// An engine on the shared server with empty tables of its own.
pub async fn fresh_engine(tag: &str) -> crate::PostgresEngine {
    crate::PostgresEngine::connect(url(), fresh_options(tag))
        .await
        .unwrap_or_else(|err| panic!("connect to the test PostgreSQL server: {err}"))
}
