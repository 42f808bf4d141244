//! A multi-host lab on one machine: every host (PostgreSQL, metadata servers, storage nodes) is a
//! Linux network namespace with its own IPv4 address, joined to the others by a veth pair into a
//! bridge; the test process reaches them over the bridge from the root namespace (the bridge has
//! the subnet's `.1`). Services are the real `trove` binary run with `ip netns exec`.
//!
//! ```text
//!   test process (root namespace, 10.A.B.1 on bridge tvb<tag>)
//!        │
//!   ─────┴──── bridge ────┬───────────┬────────────┬─────────── ...
//!                    pg 10.A.B.2   meta1 .11    storage1 .101  ...
//! ```
//!
//! Names carry the test process's pid and a per-process counter (`tvlab-<tag>-<host>`, bridge
//! `tvb<tag>`, subnet `10.A.B.0/24` free at creation), so several labs of one test binary can run
//! at once. Everything is torn down on drop, also while unwinding from a panic (and then the log
//! tails of every host are printed); a detached watchdog tears it down if the test process dies
//! without unwinding (SIGKILL), and `Lab::start` first removes what a dead earlier run left.
//!
//! Every link is mutual TLS: the lab makes its authority with `trove cluster init-ca`, each
//! host gets a node credential from `trove cluster issue`, and the test process's commands and
//! clients use the admin credential.
//!
//! Needs root and iproute2 (`ip netns`); PostgreSQL comes from `scripts/postgres.sh`.
//!
//! Storage hosts can be added to a running lab ([`Lab::add_storage`]: `trove node add`).
//!
//! Knobs (environment): `TROVE_LAB_STORAGE_META` = `all` or `N` overrides which metadata
//! servers storage nodes are given ([`MetaList`]); `TROVE_LAB_KEEP=1` keeps the lab's directory
//! (configs, drives, logs) after the test; `TROVE_LOG` is passed to the services (default info).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const META_PORT: u16 = 7100;
pub const STORAGE_PORT: u16 = 7101;
pub const PG_PORT: u16 = 5432;

/// Prefix of every network namespace a lab creates.
const NS_PREFIX: &str = "tvlab-";
/// Prefix of every lab bridge (an interface name has at most 15 bytes).
const BRIDGE_PREFIX: &str = "tvb";
/// Lines of each host's log shown when something fails.
const LOG_TAIL_LINES: usize = 25;
/// How long one `trove status` call may take before it counts as failed.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Labs are set up one at a time within a process (subnet choice, stale sweep).
static SETUP: Mutex<()> = Mutex::new(());
static LAB_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Which metadata servers storage nodes are given in their `meta` setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaList {
    /// Every metadata host, comma-separated.
    All,
    /// The first `n` metadata hosts (`First(1)`: a single address).
    First(usize),
}

impl MetaList {
    /// `TROVE_LAB_STORAGE_META` (`all` or a number) when set, else `default`.
    pub fn from_env_or(default: MetaList) -> MetaList {
        match std::env::var("TROVE_LAB_STORAGE_META") {
            Ok(v) if v.trim().eq_ignore_ascii_case("all") => MetaList::All,
            Ok(v) if !v.trim().is_empty() => MetaList::First(
                v.trim().parse().unwrap_or_else(|_| panic!("TROVE_LAB_STORAGE_META={v:?}: expected `all` or a number")),
            ),
            _ => default,
        }
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct LabOptions {
    pub storage_hosts: usize,
    pub meta_hosts: usize,
    /// The root directory's erasure scheme ("4+2").
    pub ec: String,
    /// The cluster name (checked in every connection's hello).
    pub cluster: String,
    pub down_after_ms: u64,
    pub heartbeat_ms: u64,
    /// Which metadata servers storage nodes talk to.
    pub storage_meta: MetaList,
    /// How long the whole cluster may take to come up.
    pub ready_timeout: Duration,
    /// Extra TOML lines appended to every meta.toml / storage.toml (settings the lab does not
    /// set itself).
    pub meta_extra: String,
    pub storage_extra: String,
    /// PostgreSQL without fsync and with asynchronous commit: faster, but killing the
    /// PostgreSQL host then loses the last commits, which Trove had been told were durable.
    pub postgres_fast: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            storage_hosts: 8,
            meta_hosts: 2,
            ec: "4+2".into(),
            cluster: "trove-lab".into(),
            down_after_ms: 2000,
            heartbeat_ms: 500,
            storage_meta: MetaList::from_env_or(MetaList::All),
            ready_timeout: Duration::from_secs(30),
            meta_extra: String::new(),
            storage_extra: String::new(),
            postgres_fast: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Postgres,
    Meta,
    Storage,
}

/// One host: a network namespace, its link into the bridge, its directory and its processes.
pub struct Host {
    pub name: String,
    pub role: Role,
    ns: String,
    /// The root namespace's end of the host's veth pair (a bridge port).
    veth: String,
    ip: Ipv4Addr,
    /// Configs, drives and the log of this host.
    dir: PathBuf,
    log: PathBuf,
    config: Option<PathBuf>,
    /// PostgreSQL's cluster directory (outside `dir`: the `postgres` user must reach it).
    pg_dir: Option<PathBuf>,
    procs: Mutex<Vec<Child>>,
}

impl Host {
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The address its service listens on (IP:port).
    pub fn addr(&self) -> String {
        let port = match self.role {
            Role::Postgres => PG_PORT,
            Role::Meta => META_PORT,
            Role::Storage => STORAGE_PORT,
        };
        format!("{}:{port}", self.ip)
    }

    pub fn netns(&self) -> &str {
        &self.ns
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts the `trove` binary with `args` inside this host's namespace, output appended to the
    /// host's log. Returns its pid; `kill` ends it.
    pub fn spawn(&self, args: &[&str]) -> u32 {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log.display()));
        let _ = writeln!(&log, "==== {}: trove {}", self.name, args.join(" "));
        let err = log.try_clone().expect("dup log file");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, e2e::trove()])
            .args(args)
            .env("TROVE_LOG", std::env::var("TROVE_LOG").unwrap_or_else(|_| "info".into()))
            // Plain log files, without terminal colour codes.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot run `ip netns exec {} trove {args:?}`: {e}", self.name, self.ns));
        let pid = child.id();
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).push(child);
        pid
    }

    /// Runs a program to completion inside this host's namespace.
    pub fn exec(&self, program: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}: cannot run {program} in {}: {e}", self.name, self.ns))
    }

    /// Starts the host's service again with the same configuration and data (after `kill`).
    /// Does not wait for it: see [`Lab::wait_nodes`] and [`Lab::wait_meta`].
    pub fn start(&self) {
        match self.role {
            Role::Postgres => {
                let dir = self.pg_dir.as_ref().expect("postgres dir");
                let out = Command::new("bash")
                    .arg(postgres_script())
                    .arg("restart")
                    .arg(dir)
                    .output()
                    .expect("run scripts/postgres.sh");
                assert!(
                    out.status.success(),
                    "{}: scripts/postgres.sh restart failed: {}\n{}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr),
                    self.log_tail(LOG_TAIL_LINES)
                );
            }
            Role::Meta | Role::Storage => {
                assert!(self.running_pids().is_empty(), "{}: start() while its service is running", self.name);
                let config = self.config.as_ref().expect("config").to_str().expect("utf-8 path").to_string();
                let role = if self.role == Role::Meta { "meta" } else { "storage" };
                self.spawn(&[role, "--config", &config]);
            }
        }
    }

    /// Pids of the processes this handle started that are still running (reaps the others).
    pub fn running_pids(&self) -> Vec<u32> {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        procs.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        procs.iter().map(Child::id).collect()
    }

    /// Power loss: SIGKILLs every process of the host (the ones started here and anything else
    /// in its namespace, e.g. PostgreSQL's server and backends) and waits until they are gone.
    /// The link stays up; connections to the host are refused until `start`.
    pub fn kill(&self) {
        {
            let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            for c in procs.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            procs.clear();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = netns_pids(&self.ns);
            if pids.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "{}: processes {pids:?} survive SIGKILL", self.name);
            for pid in pids {
                kill_pid(pid);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(dir) = &self.pg_dir {
            // The killed postmaster is nobody's child here and may stay a zombie (where pid 1
            // does not reap), which PostgreSQL takes for a running server when it checks the
            // pids in its lock files: the server is gone, so are its lock files.
            let _ = std::fs::remove_file(dir.join("data").join("postmaster.pid"));
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with(".s.PGSQL.") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Partition: takes the host's link down (its bridge port), so nothing reaches it and it
    /// reaches nothing, while its processes keep running.
    pub fn cut(&self) {
        ip(&["link", "set", &self.veth, "down"]);
    }

    /// Heals a `cut`: the link goes up again.
    pub fn restore(&self) {
        ip(&["link", "set", &self.veth, "up"]);
    }

    /// The last `lines` lines of the host's log(s).
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        // The PostgreSQL host runs no trove process: its log is the server's.
        let logs = match &self.pg_dir {
            Some(d) => vec![d.join("server.log")],
            None => vec![self.log.clone()],
        };
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_else(|e| format!("(cannot read: {e})\n"));
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            let _ = writeln!(
                out,
                "---- {} ({}), last {} of {} lines:",
                self.name,
                log.display(),
                all.len() - from,
                all.len()
            );
            for l in &all[from..] {
                let _ = writeln!(out, "    {l}");
            }
        }
        out
    }

    fn stop_quietly(&self) {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        for c in procs.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        procs.clear();
    }
}

/// A started lab; dropping it tears everything down.
pub struct Lab {
    pub opts: LabOptions,
    tag: String,
    bridge: String,
    /// `10.A.B.0/24`: (A, B).
    subnet: (u8, u8),
    postgres: Host,
    metas: Vec<Host>,
    storages: Vec<Host>,
    pg_url: String,
    /// Watchdog processes: one for the hosts of `start`, one more per host added later.
    watchdogs: Vec<Child>,
    created: Instant,
    /// The logs went into a panic message already (by `fail`).
    logs_shown: AtomicBool,
    /// Last field: removed after everything above is dropped.
    dir: Option<tempfile::TempDir>,
}

impl Lab {
    /// Builds the network, then starts PostgreSQL, the metadata servers and the storage nodes,
    /// and waits until every storage node is up. Panics (after printing the logs) if the lab
    /// cannot be built or the cluster does not come up.
    pub fn start(opts: LabOptions) -> Lab {
        assert!(opts.meta_hosts >= 1 && opts.meta_hosts <= 99, "1..=99 metadata hosts");
        assert!(opts.storage_hosts >= 1 && opts.storage_hosts <= 99, "1..=99 storage hosts");
        preflight();
        let setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let counter = LAB_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{}", base36(u64::from(pid), 5), base36(u64::from(counter), 2));
        sweep_stale(&tag);
        let subnet = pick_subnet(pid, counter);
        let dir = tempfile::Builder::new().prefix(&format!("trove-lab-{tag}-")).tempdir().expect("lab temp dir");
        let base = |n: u8| Ipv4Addr::new(10, subnet.0, subnet.1, n);
        let host = |name: String, role: Role, role_char: char, index: usize, ip: Ipv4Addr| {
            let hdir = dir.path().join(&name);
            std::fs::create_dir_all(&hdir).expect("host dir");
            Host {
                ns: format!("{NS_PREFIX}{tag}-{name}"),
                veth: format!("tv{tag}{role_char}{index:02}"),
                ip,
                log: hdir.join(format!("{name}.log")),
                dir: hdir,
                config: None,
                pg_dir: (role == Role::Postgres).then(|| pg_dir_of(&tag)),
                procs: Mutex::new(Vec::new()),
                name,
                role,
            }
        };
        let postgres = host("pg".into(), Role::Postgres, 'p', 0, base(2));
        let metas: Vec<Host> =
            (1..=opts.meta_hosts).map(|i| host(format!("meta{i}"), Role::Meta, 'm', i, base(10 + i as u8))).collect();
        let storages: Vec<Host> = (1..=opts.storage_hosts)
            .map(|i| host(format!("storage{i}"), Role::Storage, 's', i, base(100 + i as u8)))
            .collect();
        let mut lab = Lab {
            opts,
            bridge: format!("{BRIDGE_PREFIX}{tag}"),
            tag,
            subnet,
            postgres,
            metas,
            storages,
            pg_url: String::new(),
            watchdogs: Vec::new(),
            created: Instant::now(),
            logs_shown: AtomicBool::new(false),
            dir: Some(dir),
        };
        // From here on a panic unwinds through `lab`, whose drop removes what exists so far.
        lab.start_watchdog();
        lab.build_network();
        drop(setup);
        lab.log(&format!(
            "network up in {:.1}s: bridge {} 10.{}.{}.0/24, {} namespaces",
            lab.created.elapsed().as_secs_f64(),
            lab.bridge,
            subnet.0,
            subnet.1,
            lab.hosts().count()
        ));
        lab.make_authority();
        lab.start_postgres();
        lab.start_metas();
        lab.start_storages();
        lab.wait_ready();
        lab.log(&format!("cluster ready in {:.1}s", lab.created.elapsed().as_secs_f64()));
        lab
    }

    pub fn postgres(&self) -> &Host {
        &self.postgres
    }

    /// Metadata host `i`, 0-based.
    pub fn meta(&self, i: usize) -> &Host {
        &self.metas[i]
    }

    /// Storage host `i`, 0-based.
    pub fn storage(&self, i: usize) -> &Host {
        &self.storages[i]
    }

    pub fn metas(&self) -> &[Host] {
        &self.metas
    }

    pub fn storages(&self) -> &[Host] {
        &self.storages
    }

    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        std::iter::once(&self.postgres).chain(&self.metas).chain(&self.storages)
    }

    /// The metadata database's URL (reachable from every host and from the test process).
    pub fn postgres_url(&self) -> &str {
        &self.pg_url
    }

    /// The metadata addresses storage nodes are configured with (comma-separated).
    pub fn storage_meta_list(&self) -> String {
        self.storage_metas().iter().map(|h| h.addr()).collect::<Vec<_>>().join(",")
    }

    /// The metadata hosts storage nodes heartbeat to: only these know which nodes are up.
    pub fn storage_metas(&self) -> &[Host] {
        match self.opts.storage_meta {
            MetaList::All => &self.metas,
            MetaList::First(n) => &self.metas[..n.clamp(1, self.metas.len())],
        }
    }

    /// The lab's directory (configs, drives, logs).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("lab dir").path()
    }

    /// A client library connection through metadata host `meta`.
    pub async fn client(&self, meta: usize) -> client::Client {
        self.client_with(meta, client::ClientOptions::default()).await
    }

    pub async fn client_with(&self, meta: usize, options: client::ClientOptions) -> client::Client {
        let addr = self.meta(meta).addr();
        match client::Client::connect_with(&addr, self.with_admin(options)).await {
            Ok(c) => c,
            Err(e) => panic!("client cannot connect to {} ({addr}): {e}\n{}", self.meta(meta).name, self.logs()),
        }
    }

    /// Every metadata host's address, comma-separated, in the order of `which` (a client tries
    /// them in this order and fails over to the next).
    pub fn meta_addrs(&self, which: &[usize]) -> String {
        which.iter().map(|&i| self.meta(i).addr()).collect::<Vec<_>>().join(",")
    }

    /// A client library connection given the metadata hosts `which`, in that order (it uses the
    /// first that answers and fails over between them).
    pub async fn client_of(&self, which: &[usize], options: client::ClientOptions) -> client::Client {
        let addrs = self.meta_addrs(which);
        match client::Client::connect_with(&addrs, self.with_admin(options)).await {
            Ok(c) => c,
            Err(e) => self.fail(&format!("client cannot connect to metadata hosts {addrs}: {e}")),
        }
    }

    /// A client given every metadata host (meta1 first).
    pub async fn client_all(&self) -> client::Client {
        let all: Vec<usize> = (0..self.metas.len()).collect();
        self.client_of(&all, client::ClientOptions::default()).await
    }

    /// Adds a storage host to the running lab: a new namespace with the next free address on the
    /// bridge, a storage.toml naming every metadata host of `storage_meta`, started with
    /// `trove node add --config` (a later `start` runs it as `trove storage`). Returns its
    /// 0-based index; does not wait for it (see [`Lab::wait_nodes`]).
    pub fn add_storage(&mut self) -> usize {
        let index = self.storages.len() + 1;
        assert!(index <= 99, "at most 99 storage hosts");
        let name = format!("storage{index}");
        let hdir = self.dir().join(&name);
        std::fs::create_dir_all(&hdir).expect("host dir");
        let mut host = Host {
            ns: format!("{NS_PREFIX}{}-{name}", self.tag),
            veth: format!("tv{}s{index:02}", self.tag),
            ip: Ipv4Addr::new(10, self.subnet.0, self.subnet.1, 100 + index as u8),
            log: hdir.join(format!("{name}.log")),
            dir: hdir,
            config: None,
            pg_dir: None,
            procs: Mutex::new(Vec::new()),
            name,
            role: Role::Storage,
        };
        host.config = Some(self.write_storage_config(&host));
        // Known to the lab's drop and to a watchdog before anything of it exists.
        self.spawn_watchdog(&[(host.ns.clone(), host.veth.clone())]);
        self.storages.push(host);
        let i = self.storages.len() - 1;
        {
            let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
            self.plug(&self.storages[i]);
        }
        let h = &self.storages[i];
        let config = h.config.as_ref().expect("config").to_str().expect("utf-8 path").to_string();
        h.spawn(&["node", "add", "--config", &config]);
        self.log(&format!("added {} at {} (trove node add)", h.name, h.addr()));
        i
    }

    /// The node id of storage host `i` as `trove status --json` through `meta` reports it (by
    /// its advertised address).
    pub fn node_id(&self, meta: usize, i: usize) -> Result<u64, String> {
        let status = self.status(meta)?;
        let addr = self.storages[i].addr();
        Self::node_of(&status, &addr)
            .and_then(|n| n["id"].as_u64())
            .ok_or_else(|| format!("{} ({addr}) is not registered: {status}", self.storages[i].name))
    }

    /// The entry of the node at `addr` in a `trove status --json` document.
    pub fn node_of<'s>(status: &'s serde_json::Value, addr: &str) -> Option<&'s serde_json::Value> {
        status["nodes"].as_array()?.iter().find(|n| n["addr"].as_str() == Some(addr))
    }

    /// Waits until storage hosts `which` are up with a heartbeat received after `since` (their
    /// restart), as seen by every metadata host the nodes heartbeat to. Unlike
    /// `wait_nodes(.., "up", ..)` this does not return for a node that has not been seen down
    /// yet. `since` must also be later than the metadata servers' start: a server reports a
    /// node it has not heard from yet as up, with the time since its own start as the age.
    pub fn wait_nodes_back(&self, which: &[usize], since: Instant, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let mut done = true;
            for m in 0..self.storage_metas().len() {
                // Taken before asking: a heartbeat younger than this at status time came after
                // `since`.
                let since_ms = since.elapsed().as_millis() as u64;
                match self.status(m) {
                    Ok(status) => {
                        for &i in which {
                            let addr = self.storages[i].addr();
                            let node = Self::node_of(&status, &addr);
                            let state = node.and_then(|n| n["state"].as_str()).unwrap_or("unregistered");
                            let age = node.and_then(|n| n["heartbeat_age_ms"].as_u64()).unwrap_or(u64::MAX);
                            if state != "up" || age >= since_ms {
                                done = false;
                                last = format!(
                                    "{} sees {}={state}, heartbeat {age} ms ago, restarted {since_ms} ms ago",
                                    self.meta(m).name,
                                    self.storages[i].name
                                );
                            }
                        }
                    }
                    Err(e) => {
                        done = false;
                        last = e;
                    }
                }
            }
            if done {
                return;
            }
            if Instant::now() >= deadline {
                let names: Vec<&str> = which.iter().map(|&i| self.storages[i].name.as_str()).collect();
                self.fail(&format!("storage hosts {names:?} not back after {timeout:?}: {last}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs the `trove` CLI in the test process (root namespace) against metadata host `meta`.
    pub fn cli(&self, meta: usize, args: &[&str], timeout: Duration) -> Result<Output, String> {
        let addr = self.meta(meta).addr();
        let mut cmd = Command::new(e2e::trove());
        cmd.arg("--credentials").arg(self.admin_credential()).arg("--cluster").arg(&addr).args(args);
        run_with_timeout(cmd, timeout).map_err(|e| format!("trove --cluster {addr} {}: {e}", args.join(" ")))
    }

    /// `trove status --json` through metadata host `meta`.
    pub fn status(&self, meta: usize) -> Result<serde_json::Value, String> {
        let out = self.cli(meta, &["status", "--json"], STATUS_TIMEOUT)?;
        if !out.status.success() {
            return Err(format!(
                "trove status through {}: {}",
                self.meta(meta).name,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("status JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// State of each storage host as `trove status --json` through `meta` reports it (by its
    /// advertised address; `None` when it is not registered).
    pub fn node_states(&self, meta: usize) -> Result<Vec<Option<String>>, String> {
        let status = self.status(meta)?;
        let nodes = status["nodes"].as_array().ok_or_else(|| format!("no `nodes` in status: {status}"))?;
        Ok(self
            .storages
            .iter()
            .map(|h| {
                let addr = h.addr();
                nodes
                    .iter()
                    .find(|n| n["addr"].as_str() == Some(addr.as_str()))
                    .and_then(|n| n["state"].as_str().map(str::to_string))
            })
            .collect())
    }

    /// Waits until every storage node is registered and up as seen by every metadata host the
    /// nodes heartbeat to, with no node registered twice.
    pub fn wait_ready(&self) {
        let all: Vec<usize> = (0..self.storages.len()).collect();
        self.wait_nodes(&all, "up", self.opts.ready_timeout);
        for m in 0..self.storage_metas().len() {
            let status = self.status(m).unwrap_or_else(|e| self.fail(&e));
            let n = status["nodes"].as_array().map_or(0, Vec::len);
            if n != self.storages.len() {
                self.fail(&format!(
                    "{} lists {n} storage nodes, the lab has {}: {status:#}",
                    self.meta(m).name,
                    self.storages.len()
                ));
            }
        }
    }

    /// Waits until storage hosts `which` (0-based) are in `state` ("up", "down") as seen by every
    /// metadata host the nodes heartbeat to. Panics with the last status and the logs on timeout.
    pub fn wait_nodes(&self, which: &[usize], state: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let metas = self.storage_metas().len();
        let mut last = String::new();
        loop {
            let mut done = true;
            for m in 0..metas {
                match self.node_states(m) {
                    Ok(states) => {
                        let wrong: Vec<String> = which
                            .iter()
                            .filter(|&&i| states[i].as_deref() != Some(state))
                            .map(|&i| {
                                format!("{}={}", self.storages[i].name, states[i].as_deref().unwrap_or("unregistered"))
                            })
                            .collect();
                        if !wrong.is_empty() {
                            done = false;
                            last = format!("{} sees {}", self.meta(m).name, wrong.join(", "));
                        }
                    }
                    Err(e) => {
                        done = false;
                        last = e;
                    }
                }
            }
            if done {
                return;
            }
            if Instant::now() >= deadline {
                let names: Vec<&str> = which.iter().map(|&i| self.storages[i].name.as_str()).collect();
                self.fail(&format!("storage hosts {names:?} not {state} after {timeout:?}: {last}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until metadata host `i` answers `trove status`.
    pub fn wait_meta(&self, i: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let err = match self.status(i) {
                Ok(_) => return,
                Err(e) => e,
            };
            let host = self.meta(i);
            if host.running_pids().is_empty() {
                self.fail(&format!("{} exited: {err}", host.name));
            }
            if Instant::now() >= deadline {
                self.fail(&format!("{} does not answer after {timeout:?}: {err}", host.name));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The log tails of every host.
    pub fn logs(&self) -> String {
        let mut out = format!("==== lab {} logs (directory {})\n", self.tag, self.dir().display());
        for h in self.hosts() {
            out.push_str(&h.log_tail(LOG_TAIL_LINES));
        }
        out
    }

    /// Panics with `msg` and every host's log tail.
    pub fn fail(&self, msg: &str) -> ! {
        self.logs_shown.store(true, Ordering::Relaxed);
        panic!("{msg}\n{}", self.logs())
    }

    /// Progress line on stderr (shown with --nocapture, and for failing tests).
    pub fn log(&self, msg: &str) {
        eprintln!("[lab {} +{:6.2}s] {msg}", self.tag, self.created.elapsed().as_secs_f64());
    }

    fn cidr(&self) -> String {
        format!("10.{}.{}.0/24", self.subnet.0, self.subnet.1)
    }

    fn start_watchdog(&mut self) {
        let hosts: Vec<(String, String)> = self.hosts().map(|h| (h.ns.clone(), h.veth.clone())).collect();
        self.spawn_watchdog(&hosts);
    }

    fn spawn_watchdog(&mut self, hosts: &[(String, String)]) {
        // Tears the lab down once this process is gone, however it ended; detached (own
        // session) so that a Ctrl-C to the test's process group does not take it along.
        let script = r#"
            while kill -0 "$0" 2>/dev/null; do sleep 1; done
            dir="$1"; br="$2"; shift 2
            while [ $# -gt 0 ]; do
              ns="$1"; veth="$2"; shift 2
              for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
              ip link del "$veth" 2>/dev/null
              ip netns del "$ns" 2>/dev/null
            done
            ip link del "$br" 2>/dev/null
            rm -rf "$dir"
        "#;
        let mut cmd = Command::new("setsid");
        cmd.args(["bash", "-c", script]).arg(std::process::id().to_string()).arg(self.dir()).arg(&self.bridge);
        for (ns, veth) in hosts {
            cmd.arg(ns).arg(veth);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the lab watchdog (setsid bash): {e}"));
        self.watchdogs.push(child);
    }

    fn build_network(&self) {
        let gw = format!("10.{}.{}.1/24", self.subnet.0, self.subnet.1);
        ip(&["link", "add", &self.bridge, "type", "bridge"]);
        ip(&["addr", "add", &gw, "dev", &self.bridge]);
        ip(&["link", "set", &self.bridge, "up"]);
        for h in self.hosts() {
            self.plug(h);
        }
    }

    /// Creates host `h`'s namespace and joins it to the bridge with its address.
    fn plug(&self, h: &Host) {
        let peer = format!("tq{}", &h.veth[2..]);
        let addr = format!("{}/24", h.ip);
        ip(&["netns", "add", &h.ns]);
        ip(&["link", "add", &h.veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &h.ns]);
        ip(&["-n", &h.ns, "link", "set", &peer, "name", "eth0"]);
        ip(&["-n", &h.ns, "addr", "add", &addr, "dev", "eth0"]);
        ip(&["-n", &h.ns, "link", "set", "lo", "up"]);
        ip(&["-n", &h.ns, "link", "set", "eth0", "up"]);
        ip(&["link", "set", &h.veth, "master", &self.bridge]);
        ip(&["link", "set", &h.veth, "up"]);
    }

    fn start_postgres(&mut self) {
        let pg = &self.postgres;
        let dir = pg.pg_dir.clone().expect("pg dir");
        let out = Command::new("bash")
            .arg(postgres_script())
            .arg("start")
            .arg("--dir")
            .arg(&dir)
            .args(["--netns", &pg.ns, "--listen", &pg.ip.to_string(), "--port", &PG_PORT.to_string()])
            .args(["--trust", &self.cidr(), "--db", "trove"])
            .args(self.opts.postgres_fast.then_some("--fast"))
            .args(["--watch", &std::process::id().to_string()])
            .output()
            .unwrap_or_else(|e| panic!("cannot run scripts/postgres.sh: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            self.fail(&format!("PostgreSQL host: scripts/postgres.sh start failed ({}):\n{stderr}", out.status));
        }
        let url = String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| l.starts_with("postgres://"))
            .map(str::to_string);
        self.pg_url = url.unwrap_or_else(|| self.fail(&format!("scripts/postgres.sh printed no URL:\n{stderr}")));
        self.log(&format!("PostgreSQL up at {}", self.pg_url));
    }

    /// The lab's cluster authority (`trove cluster init-ca`) in its directory, whose admin
    /// credential the test process's commands and clients use.
    fn make_authority(&self) {
        let dir = self.dir().to_str().expect("utf-8 path").to_string();
        let out = Command::new(e2e::trove())
            .args(["cluster", "init-ca", "--dir", &dir, "--name", &self.opts.cluster])
            .output()
            .expect("trove runs");
        if !out.status.success() {
            self.fail(&format!("trove cluster init-ca failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }

    /// Issues host `h`'s node credential (`trove cluster issue`) into its directory; returns
    /// the config line naming it.
    fn node_credential(&self, h: &Host) -> String {
        let out_dir = h.dir.join("tls");
        let out = Command::new(e2e::trove())
            .args(["cluster", "issue", "--dir", self.dir().to_str().expect("utf-8 path"), "--role", "node"])
            .args(["--name", &h.name, "--out", out_dir.to_str().expect("utf-8 path")])
            .output()
            .expect("trove runs");
        if !out.status.success() {
            self.fail(&format!("trove cluster issue for {} failed: {}", h.name, String::from_utf8_lossy(&out.stderr)));
        }
        format!("tls = {:?}\n", out_dir.to_str().expect("utf-8 path"))
    }

    /// The admin credential of the lab's authority.
    pub fn admin_credential(&self) -> PathBuf {
        self.dir().join("tls").join("admin")
    }

    /// `options` with the lab's admin credential.
    fn with_admin(&self, options: client::ClientOptions) -> client::ClientOptions {
        let ctx = wire::tls::TlsContext::load(&self.admin_credential())
            .unwrap_or_else(|e| self.fail(&format!("the lab's admin credential: {e}")));
        client::ClientOptions { tls: wire::tls::TlsChoice::Explicit(Some(ctx)), ..options }
    }

    fn start_metas(&mut self) {
        for i in 0..self.metas.len() {
            let mut cfg = format!(
                "# metadata host {name} of lab {tag}\nlisten = \"0.0.0.0:{META_PORT}\"\ncluster = {cluster:?}\ndefault_ec = {ec:?}\ndown_after_ms = {down}\n{tls}engine = {{ postgres = {url:?} }}\n",
                name = self.metas[i].name,
                tag = self.tag,
                cluster = self.opts.cluster,
                ec = self.opts.ec,
                down = self.opts.down_after_ms,
                url = self.pg_url,
                tls = self.node_credential(&self.metas[i]),
            );
            // Where other hosts reach it (it listens on 0.0.0.0), when this build has the setting.
            let advertise = format!("advertise = \"{}\"\n", self.metas[i].addr());
            if meta::MetaConfig::from_toml(&format!("{cfg}{advertise}")).is_ok() {
                cfg.push_str(&advertise);
            }
            cfg.push_str(&self.opts.meta_extra);
            if let Err(e) = meta::MetaConfig::from_toml(&cfg) {
                self.fail(&format!("the lab's meta.toml does not parse: {e:#}\n{cfg}"));
            }
            let path = self.metas[i].dir.join("meta.toml");
            std::fs::write(&path, cfg).expect("write meta.toml");
            self.metas[i].config = Some(path);
            self.metas[i].start();
            // One at a time: the first one creates the tables.
            self.wait_meta(i, Duration::from_secs(30));
        }
        self.log(&format!("{} metadata servers answer", self.metas.len()));
    }

    fn start_storages(&mut self) {
        for i in 0..self.storages.len() {
            let path = self.write_storage_config(&self.storages[i]);
            self.storages[i].config = Some(path);
            self.storages[i].start();
        }
        self.log(&format!("{} storage nodes started (meta = {:?})", self.storages.len(), self.storage_meta_list()));
    }

    /// Writes storage host `h`'s storage.toml (one drive, every metadata host of
    /// `storage_meta`) and returns its path.
    fn write_storage_config(&self, h: &Host) -> PathBuf {
        let meta = self.storage_meta_list();
        {
            let drive = h.dir.join("drive0");
            std::fs::create_dir_all(&drive).expect("drive dir");
            let cfg = format!(
                "# storage host {name} of lab {tag}\nlisten = \"0.0.0.0:{STORAGE_PORT}\"\nadvertise = \"{ip}:{STORAGE_PORT}\"\ndrives = [{drive:?}]\nmeta = {meta:?}\ncluster = {cluster:?}\nheartbeat_ms = {hb}\n{tls}",
                name = h.name,
                tag = self.tag,
                ip = h.ip,
                drive = drive.to_str().expect("utf-8 path"),
                cluster = self.opts.cluster,
                hb = self.opts.heartbeat_ms,
                tls = self.node_credential(h),
            ) + &self.opts.storage_extra;
            if let Err(e) = storage::StorageConfig::from_toml(&cfg) {
                self.fail(&format!("the lab's storage.toml does not parse: {e:#}\n{cfg}"));
            }
            let path = h.dir.join("storage.toml");
            std::fs::write(&path, cfg).expect("write storage.toml");
            path
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.logs_shown.load(Ordering::Relaxed) {
            eprintln!("{}", self.logs());
        }
        for h in std::iter::once(&self.postgres).chain(&self.metas).chain(&self.storages) {
            h.stop_quietly();
        }
        if let Some(dir) = &self.postgres.pg_dir {
            let _ = Command::new("bash").arg(postgres_script()).arg("remove").arg(dir).output();
        }
        for h in std::iter::once(&self.postgres).chain(&self.metas).chain(&self.storages) {
            remove_netns(&h.ns, &h.veth);
        }
        let _ = quiet_ip(&["link", "del", &self.bridge]);
        for mut w in self.watchdogs.drain(..) {
            let _ = w.kill();
            let _ = w.wait();
        }
        if std::env::var("TROVE_LAB_KEEP").is_ok_and(|v| v == "1") {
            if let Some(dir) = self.dir.take() {
                eprintln!("[lab {}] kept {}", self.tag, dir.keep().display());
            }
        }
    }
}

/// Checks what the lab needs, with a message saying what is missing.
fn preflight() {
    let uid = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
    });
    assert_eq!(uid.as_deref(), Some("0"), "the multi-host lab needs root (network namespaces, veth, bridges)");
    let out = Command::new("ip").args(["netns", "list"]).output();
    assert!(
        out.as_ref().is_ok_and(|o| o.status.success()),
        "the multi-host lab needs iproute2's `ip netns` (apt-get install iproute2): {out:?}"
    );
}

fn postgres_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh")
}

fn pg_dir_of(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{NS_PREFIX}{tag}-pg"))
}

/// Runs `ip ARGS`, panicking with its error.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| panic!("cannot run ip: {e}"));
    assert!(out.status.success(), "`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
}

/// Runs `ip ARGS`, returning its stdout, or `None` when it fails.
fn quiet_ip(args: &[&str]) -> Option<String> {
    let out = Command::new("ip").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn netns_pids(ns: &str) -> Vec<u32> {
    quiet_ip(&["netns", "pids", ns]).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

fn kill_pid(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Kills whatever runs in namespace `ns`, deletes its veth pair (by the root end `veth`) and the
/// namespace. The pair is deleted explicitly: a namespace whose sockets still hold references
/// (TCP connections of a cut host, orphaned and retransmitting) lives on, invisible, for
/// minutes after `ip netns del`, and its veth pair with it.
fn remove_netns(ns: &str, veth: &str) {
    for _ in 0..50 {
        let pids = netns_pids(ns);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            kill_pid(pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !veth.is_empty() {
        let _ = quiet_ip(&["link", "del", veth]);
    }
    let _ = quiet_ip(&["netns", "del", ns]);
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn base36(mut n: u64, width: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    while out.len() < width {
        out.push(b'0');
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}

/// The pid encoded in a lab tag (its first 5 characters).
fn pid_of_tag(tag: &str) -> Option<u32> {
    u32::from_str_radix(tag.get(..5)?, 36).ok()
}

/// Removes what a lab with tag `ours` (same pid and counter: a crashed earlier process with
/// this pid) or a lab of a process that no longer runs left behind.
fn sweep_stale(ours: &str) {
    let stale = |tag: &str| tag == ours || pid_of_tag(tag).is_some_and(|pid| pid != std::process::id() && !alive(pid));
    for line in quiet_ip(&["netns", "list"]).unwrap_or_default().lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
        if stale(rest.get(..7).unwrap_or("")) {
            remove_netns(name, "");
        }
    }
    for line in quiet_ip(&["-o", "link", "show"]).unwrap_or_default().lines() {
        // "12: tvb0abcd00: <BROADCAST,..." or "13: tv0abcd00s01@if12: <BROADCAST,..."
        let Some(name) = line.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or_default()) else {
            continue;
        };
        let tag = if let Some(tag) = name.strip_prefix(BRIDGE_PREFIX).filter(|t| t.len() == 7) {
            tag
        } else if let Some(rest) =
            name.strip_prefix("tv").filter(|r| r.len() == 10 && r[7..8].chars().all(|c| "pms".contains(c)))
        {
            &rest[..7]
        } else {
            continue;
        };
        if stale(tag) {
            let _ = quiet_ip(&["link", "del", name]);
        }
    }
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
            if name.ends_with("-pg") && stale(rest.get(..7).unwrap_or("")) {
                let _ = Command::new("bash").arg(postgres_script()).arg("remove").arg(e.path()).output();
            }
        }
    }
}

/// A `10.A.B.0/24` no interface or route of this machine uses yet.
fn pick_subnet(pid: u32, counter: u32) -> (u8, u8) {
    let used = format!(
        "{}\n{}",
        quiet_ip(&["-4", "-o", "addr", "show"]).unwrap_or_default(),
        quiet_ip(&["-4", "route", "show", "table", "all"]).unwrap_or_default()
    );
    let start = (pid % 100) * 256 + counter % 256;
    for step in 0..25_600 {
        let n = (start + step) % 25_600;
        let (a, b) = (100 + (n / 256) as u8, (n % 256) as u8);
        let prefix = format!("10.{a}.{b}.");
        if !used.contains(&prefix) {
            return (a, b);
        }
    }
    panic!("no free 10.x.y.0/24 subnet for the lab");
}

/// Runs `cmd` with its output captured, killing it after `timeout`.
fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run: {e}"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("wait: {e}")),
        Err(_) => {
            kill_pid(pid);
            let _ = rx.recv_timeout(Duration::from_secs(5));
            Err(format!("no answer within {timeout:?} (killed)"))
        }
    }
}
