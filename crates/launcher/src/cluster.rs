//! A local cluster: one metadata process and N storage processes on loopback, each a real
//! `trove` process with its own config, data directory and log, managed through a state file
//! (`cluster.toml`) in the cluster directory.
//!
//! Layout of a cluster directory:
//! ```text
//! DIR/cluster.toml          addresses, pids, scheme (this module's state)
//! DIR/meta/meta.toml        metadata service config;  DIR/meta/meta.redb its engine (redb),
//!                           DIR/meta/meta.redb.wal the engine's write-ahead log
//! DIR/node-I/storage.toml   storage node I's config;  DIR/node-I/drive0 its drive
//! DIR/logs/*.log            each process's output
//! DIR/tls/, DIR/meta/tls/, DIR/node-I/tls/
//!                           the authority and credentials (see `credentials`), unless
//!                           started with --plaintext
//! ```

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wire::{EcScheme, NodeState};

/// Name of the state file in a cluster directory.
pub const STATE_FILE: &str = "cluster.toml";
/// How long `start` waits for every node to register.
const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Starts a local cluster (or restarts a stopped one) in the background.
    Start(StartArgs),
    /// Stops every process of a local cluster (data is kept).
    Stop {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
    },
    /// Kills one storage node with SIGKILL (fault injection).
    KillNode {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
        /// Node number as printed by `cluster start` (1..N).
        #[arg(long)]
        node: usize,
    },
    /// Starts a killed or stopped storage node again.
    RestartNode {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
        /// Node number as printed by `cluster start` (1..N).
        #[arg(long)]
        node: usize,
    },
    /// Restarts the metadata service (SIGTERM, wait for it to exit, start it again): clients
    /// retry through the gap.
    RestartMeta {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
    },
    /// Adds one more storage node to a running local cluster (data is rebalanced onto it).
    AddNode {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
        /// The storage pool the node joins (default: the default pool); a pool no node named
        /// before is made for it.
        #[arg(long)]
        pool: Option<String>,
        /// A file holding an `[object]` table (endpoint, bucket, prefix, region,
        /// access_key_id, secret_access_key_file or _env, allow_http): the node keeps its
        /// shards in that S3 bucket instead of on a drive (a node of an object pool; needs
        /// --pool).
        #[arg(long, value_name = "FILE")]
        object: Option<PathBuf>,
    },
    /// Makes a cluster authority for a cluster of hosts (deploy/examples): DIR/tls/ca (keep it
    /// private), DIR/tls/trust.pem, and an admin and a client credential (DIR/tls/admin,
    /// DIR/tls/client). `cluster issue --dir DIR` then issues each host's credential.
    InitCa {
        /// The directory to make the authority in.
        #[arg(long)]
        dir: PathBuf,
        /// The cluster's name, written into the authority's certificate.
        #[arg(long)]
        name: String,
    },
    /// Issues a credential (ca.pem, cert.pem, key.pem) from a local cluster's authority, for a
    /// process on another machine: a mount or gateway (`client`: files, no administration),
    /// an administrator (`admin`), or a service (`node`). Use it with `--credentials DIR`.
    Issue {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
        /// What the credential may do: client, admin or node.
        #[arg(long, value_parser = parse_role)]
        role: wire::tls::Role,
        /// The holder's name, written into the certificate.
        #[arg(long)]
        name: String,
        /// The directory to write the credential into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Replaces a running local cluster's authority and every credential it issued, without
    /// stopping anything: the new authority is trusted beside the old one, every credential
    /// is issued again, then the old one is trusted no more. Credentials issued with `issue`
    /// to other machines must be issued again.
    RotateCa {
        /// The cluster's directory (as given to `cluster start`).
        #[arg(long)]
        dir: PathBuf,
        /// How long each step waits for the processes to load the change (ms).
        #[arg(long, default_value_t = 3000)]
        step_ms: u64,
    },
}

/// Parses `--role`.
fn parse_role(text: &str) -> Result<wire::tls::Role, String> {
    wire::tls::Role::parse(text).ok_or_else(|| format!("{text:?} is not a role: client, gateway, admin or node"))
}

#[derive(Args, Clone)]
pub struct StartArgs {
    /// Directory for the cluster's configs, data and logs.
    #[arg(long)]
    pub dir: PathBuf,
    /// Number of storage nodes in the default pool (default: 6, or none when --pool is given).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Storage nodes of a named pool, NAME=COUNT (e.g. --pool flash=6 --pool hdd=6); nodes are
    /// numbered in the order given, after those of the default pool. The root directory is put
    /// in the first pool given, so new files go there.
    #[arg(long = "pool", value_name = "NAME=COUNT", value_parser = parse_pool_arg)]
    pub pools: Vec<(String, usize)>,
    /// Default erasure scheme, K+M.
    #[arg(long, default_value = "4+2")]
    pub ec: EcScheme,
    /// Chunk size in bytes.
    #[arg(long, default_value_t = wire::CHUNK_BYTES_DEFAULT)]
    pub chunk_bytes: u32,
    /// Where the metadata lives: redb (a file in DIR/meta) or postgres (see --postgres-url).
    #[arg(long, value_enum, default_value_t = EngineKind::Redb)]
    pub engine: EngineKind,
    /// PostgreSQL connection URL for `--engine postgres`, e.g. postgres://user@host:5432/db.
    /// Use a database of its own per cluster: its tables hold the whole namespace.
    #[arg(long)]
    pub postgres_url: Option<String>,
    /// A storage node not heard from for this long is down (metadata `down_after_ms`).
    #[arg(long)]
    pub down_after_ms: Option<u64>,
    /// A node down this long is marked out and its shards are rebuilt (`rebuild_after_ms`).
    #[arg(long)]
    pub rebuild_after_ms: Option<u64>,
    /// How long replaced or moved shards stay readable before deletion (`gc_grace_ms`).
    #[arg(long)]
    pub gc_grace_ms: Option<u64>,
    /// Pause between scrub passes, 0 to disable (`scrub_interval_ms`).
    #[arg(long)]
    pub scrub_interval_ms: Option<u64>,
    /// When the tiering job runs by itself: "daily HH:MM" (UTC), "every N" (s, m, h) or "off"
    /// (`tier_schedule`; default daily 22:00).
    #[arg(long)]
    pub tier_schedule: Option<String>,
    /// Most bytes per second the tiering job writes (`tier_bytes_per_s`).
    #[arg(long)]
    pub tier_bytes_per_s: Option<u64>,
    /// Days deleted files are kept in the trash, 0 (default) for none (`trash_days`).
    #[arg(long)]
    pub trash_days: Option<u64>,
    /// Pause between passes of the ingest job in ms, 0 for only by hand
    /// (`ingest_interval_ms`; default 10000).
    #[arg(long)]
    pub ingest_interval_ms: Option<u64>,
    /// Free bytes each storage node keeps on its drive: shards that would leave less are
    /// refused with "no space" (storage `reserve_bytes`; nodes of one local cluster share a
    /// disk, so this bounds what they may fill).
    #[arg(long, default_value_t = 0)]
    pub reserve_bytes: u64,
    /// Run without TLS and authentication on the cluster's own links (every process then
    /// accepts anyone who reaches its port): for trusted networks only. By default a new
    /// cluster gets an authority and every process a credential (DIR/tls).
    #[arg(long)]
    pub plaintext: bool,
    /// Encrypt every shard the storage nodes write (encryption at rest, AES-256-GCM): the
    /// key-encryption key is made in DIR/keys/kek and named in every node's `[encryption]`.
    #[arg(long)]
    pub encrypt: bool,
    /// Start the roles without metrics exporters (by default each gets a port of its own,
    /// recorded in cluster.toml, for `trove stats`, the dashboard and Prometheus).
    #[arg(long)]
    pub no_metrics: bool,
}

/// Parses `--pool NAME=COUNT`.
fn parse_pool_arg(text: &str) -> Result<(String, usize), String> {
    let (name, count) =
        text.split_once('=').ok_or_else(|| format!("--pool {text:?} is not of the form NAME=COUNT (e.g. flash=6)"))?;
    wire::check_pool_name(name)?;
    let count = count.parse::<usize>().map_err(|_| format!("--pool {text:?}: {count:?} is not a number of nodes"))?;
    if count == 0 {
        return Err(format!("--pool {text:?}: a pool needs at least one node"));
    }
    Ok((name.to_string(), count))
}

impl StartArgs {
    /// The storage nodes to start, in order: the pool each joins ("" for the default pool).
    pub fn node_pools(&self) -> Vec<String> {
        let default = self.nodes.unwrap_or(if self.pools.is_empty() { 6 } else { 0 });
        let mut out = vec![String::new(); default];
        for (name, count) in &self.pools {
            out.extend(std::iter::repeat_n(name.clone(), *count));
        }
        out
    }
}

/// The metadata engine of a new local cluster.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Redb,
    Postgres,
}

/// One process of the cluster as recorded in the state file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proc {
    pub addr: String,
    pub config: PathBuf,
    pub log: PathBuf,
    pub pid: u32,
    /// The storage pool of a storage node (empty: the default pool).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pool: String,
    /// When the process started, in clock ticks since boot (`/proc/PID/stat`), so that a pid the
    /// kernel gave to another program after ours exited is not taken for ours: pids wrap
    /// around within minutes on a busy machine. 0 in state files written before it was kept
    /// (the pid alone is trusted then).
    #[serde(default)]
    pub started: u64,
    /// Where its metrics exporter listens (the metadata service's also serves the dashboard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

impl Proc {
    fn new(addr: String, config: PathBuf, log: PathBuf, child: &std::process::Child) -> Proc {
        let mut proc = Proc { addr, config, log, pid: 0, started: 0, metrics: None, pool: String::new() };
        proc.set_child(child);
        proc
    }

    /// A role [`spawn_bound`] started.
    fn spawned(spawned: &Spawned, log: PathBuf) -> Proc {
        let mut proc = Proc::new(spawned.addr.clone(), spawned.config.clone(), log, &spawned.child);
        proc.metrics = spawned.metrics.clone();
        proc
    }

    /// Records `child` as this role's process.
    fn set_child(&mut self, child: &std::process::Child) {
        self.pid = child.id();
        self.started = process_start(self.pid).map_or(0, |(_, started)| started);
    }

    /// Whether the recorded process is running (not exited, not a zombie, and not another
    /// program that got its pid since).
    pub fn running(&self) -> bool {
        match process_start(self.pid) {
            Some((running, started)) => running && (self.started == 0 || started == self.started),
            None => false,
        }
    }

    /// Sends `sig` to the recorded process if it is still the one running.
    fn signal(&self, sig: rustix::process::Signal) {
        if self.running() {
            signal(self.pid, sig);
        }
    }
}

/// The state file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub cluster: String,
    pub ec: String,
    pub meta: Proc,
    pub nodes: Vec<Proc>,
    /// The storage nodes' `reserve_bytes` (nodes added later get it too).
    #[serde(default)]
    pub reserve_bytes: u64,
}

impl State {
    pub fn load(dir: &Path) -> Result<State> {
        let path = dir.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("{} is not a Trove cluster directory (cannot read {})", dir.display(), path.display())
        })?;
        toml::from_str(&text).with_context(|| format!("{} is damaged", path.display()))
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(STATE_FILE);
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        std::fs::write(&tmp, toml::to_string_pretty(self)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
}

/// The metadata address for `--cluster`: a HOST:PORT as is, or a local cluster directory.
pub fn meta_addr_of(cluster: &str) -> Result<String> {
    let path = Path::new(cluster);
    if path.join(STATE_FILE).exists() {
        return Ok(State::load(path)?.meta.addr);
    }
    if cluster.contains(':') {
        return Ok(cluster.to_string());
    }
    bail!("--cluster {cluster:?} is neither HOST:PORT nor a directory containing {STATE_FILE}")
}

/// Picks `n` distinct loopback ports that are free now, below the kernel's ephemeral range
/// when there is room: outgoing connections take their local ports from that range, so a
/// port chosen there can be taken by any client between choosing it and the role binding it
/// (and again while a killed node is down, before it is restarted on the same port).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let (low, _) = ephemeral_range().unwrap_or((32768, 60999));
    let below = 1024u16.max(low.saturating_sub(12_000))..low;
    let mut held = Vec::new();
    if below.len() >= 4 * n {
        let span = below.len() as u32;
        let first = rand_u32() % span;
        for i in 0..span {
            if held.len() == n {
                break;
            }
            let port = below.start + ((first + i) % span) as u16;
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                held.push(l);
            }
        }
    }
    while held.len() < n {
        held.push(std::net::TcpListener::bind("127.0.0.1:0").context("cannot find free loopback ports")?);
    }
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// The kernel's range of local ports for outgoing connections.
fn ephemeral_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// How a freshly spawned role's start ended.
enum Bound {
    Listening,
    /// It exited because its port was taken; the log line saying so.
    PortTaken(String),
}

/// How many ports a role is tried on before `start` gives up.
const BIND_ATTEMPTS: usize = 5;

/// A role started by [`spawn_bound`]: its address, its metrics exporter's, its config.
struct Spawned {
    addr: String,
    metrics: Option<String>,
    config: PathBuf,
    child: std::process::Child,
}

/// Spawns `role` on a free loopback port (and its metrics exporter on another, with
/// `metrics`), `configure` writing its config for the addresses and returning the config's
/// path. A port taken by another process between choosing and binding is replaced by a new
/// one; any other exit at start is an error quoting the log.
async fn spawn_bound(
    role: &str,
    log: &Path,
    metrics: bool,
    mut configure: impl FnMut(&str, Option<&str>) -> Result<PathBuf>,
) -> Result<Spawned> {
    let mut last = String::new();
    for _ in 0..BIND_ATTEMPTS {
        let ports = free_ports(2)?;
        let addr = format!("127.0.0.1:{}", ports[0]);
        let exporter = metrics.then(|| format!("127.0.0.1:{}", ports[1]));
        let config = configure(&addr, exporter.as_deref())?;
        let from = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        let mut child = spawn_role(role, &config, log)?;
        match wait_bound(&mut child, role, log, from).await? {
            Bound::Listening => return Ok(Spawned { addr, metrics: exporter, config, child }),
            Bound::PortTaken(line) => last = line,
        }
    }
    bail!("the {role} process found no free port in {BIND_ATTEMPTS} attempts; last: {last}")
}

/// The config line that starts a role's exporter, if it has one.
fn metrics_line(metrics: Option<&str>) -> String {
    metrics.map(|m| format!("metrics_listen = {m:?}\n")).unwrap_or_default()
}

/// Waits until `child` logs (after byte `from` of `log`) that it listens, or exits.
async fn wait_bound(child: &mut std::process::Child, role: &str, log: &Path, from: u64) -> Result<Bound> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let written = log_since(log, from);
        if written.contains("listening on") {
            return Ok(Bound::Listening);
        }
        if child.try_wait()?.is_some() {
            let written = log_since(log, from);
            let line = last_line_of(&written);
            if written.contains("cannot listen on") && written.contains("in use") {
                return Ok(Bound::PortTaken(line));
            }
            bail!("the {role} process exited at start: {line} (see {})", log.display());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the {role} process did not listen within {} s (see {})", START_TIMEOUT.as_secs(), log.display());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What `log` holds after byte `from` (lossily decoded).
fn log_since(log: &Path, from: u64) -> String {
    let bytes = std::fs::read(log).unwrap_or_default();
    String::from_utf8_lossy(bytes.get(from as usize..).unwrap_or_default()).into_owned()
}

/// The last non-empty line of `text`, for error messages.
fn last_line_of(text: &str) -> String {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)").to_string()
}

/// Whether the process with this pid is alive (not a zombie), and when it started (clock ticks
/// since boot); `None` when there is no such process.
fn process_start(pid: u32) -> Option<(bool, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// The state and start time of a `/proc/PID/stat` line: after the parenthesised command name
/// (which may hold spaces and parentheses) come the state letter (field 3) and, 19 fields on,
/// the start time (field 22).
fn parse_stat(stat: &str) -> Option<(bool, u64)> {
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some((!matches!(state, "Z" | "X"), started))
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Starts one `trove` role process detached from the terminal, its output going to `log`.
pub fn spawn_role(role: &str, config: &Path, log: &Path) -> Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the trove executable")?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(exe)
        .arg(role)
        .arg("--config")
        .arg(config)
        .env("TROVE_LOG", std::env::var("TROVE_LOG").unwrap_or_else(|_| "info".into()))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start the {role} process"))?;
    Ok(child)
}

/// The config line choosing a process's transport: its credential, or plaintext.
fn transport_line(tls: Option<&Path>) -> String {
    match tls {
        Some(dir) => format!("tls = {:?}\n", dir.display().to_string()),
        None => "plaintext = true\n".to_string(),
    }
}

/// Issues the node credential of the process whose directory is `proc_dir` (`name` in its
/// certificate) when the cluster in `dir` has TLS; returns the credential's directory.
fn node_credential(dir: &Path, proc_dir: &Path, name: &str) -> Result<Option<PathBuf>> {
    if !crate::credentials::has_tls(dir) {
        return Ok(None);
    }
    let out = proc_dir.join(crate::credentials::TLS_DIR);
    crate::credentials::issue(dir, wire::tls::Role::Node, name, &out)?;
    Ok(Some(out))
}

/// The key file of a local cluster with encryption at rest (`DIR/keys/kek`), if it has one.
pub fn key_file_of(dir: &Path) -> Option<PathBuf> {
    let path = dir.join("keys").join("kek");
    path.exists().then_some(path)
}

/// A config written before services had to choose their transport ran in plaintext: it says
/// so now, so that the cluster starts again as it ran.
fn keep_plaintext(config: &Path) -> Result<()> {
    let text = std::fs::read_to_string(config).with_context(|| format!("cannot read {}", config.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not TOML", config.display()))?;
    if table.contains_key("tls") || table.contains_key("plaintext") {
        return Ok(());
    }
    // Top-level keys go before the first table.
    let at = text.find("\n[").map_or(text.len(), |i| i + 1);
    let updated = format!("{}plaintext = true\n{}", &text[..at], &text[at..]);
    std::fs::write(config, updated).with_context(|| format!("cannot write {}", config.display()))
}

#[allow(clippy::too_many_arguments)]
fn meta_config(
    dir: &Path,
    addr: &str,
    metrics: Option<&str>,
    cluster: &str,
    ec: EcScheme,
    chunk_bytes: u32,
    args: &StartArgs,
    tls: Option<&Path>,
) -> String {
    let engine_line = match (args.engine, &args.postgres_url) {
        (EngineKind::Postgres, Some(url)) => format!("postgres = {url:?}"),
        _ => format!("redb = {:?}", dir.join("meta").join("meta.redb").display().to_string()),
    };
    let mut extra = String::new();
    for (key, value) in [
        ("down_after_ms", args.down_after_ms),
        ("rebuild_after_ms", args.rebuild_after_ms),
        ("gc_grace_ms", args.gc_grace_ms),
        ("scrub_interval_ms", args.scrub_interval_ms),
        ("trash_days", args.trash_days),
        ("ingest_interval_ms", args.ingest_interval_ms),
    ] {
        if let Some(value) = value {
            extra.push_str(&format!("{key} = {value}\n"));
        }
    }
    if let Some(schedule) = &args.tier_schedule {
        extra.push_str(&format!("tier_schedule = {schedule:?}\n"));
    }
    if let Some(rate) = args.tier_bytes_per_s {
        extra.push_str(&format!("tier_bytes_per_s = {rate}\n"));
    }
    let metrics = metrics_line(metrics);
    let transport = transport_line(tls);
    format!("listen = {addr:?}\n{metrics}cluster = {cluster:?}\ndefault_ec = \"{ec}\"\nchunk_bytes = {chunk_bytes}\n{transport}{extra}\n[engine]\n{engine_line}\n")
}

/// A storage node's configuration: a drive in its directory, or with `object` (an `[object]`
/// table) its shards in a bucket.
#[allow(clippy::too_many_arguments)]
fn storage_config(
    dir: &Path,
    index: usize,
    addr: &str,
    metrics: Option<&str>,
    meta: &str,
    cluster: &str,
    reserve_bytes: u64,
    pool: &str,
    object: Option<&str>,
    tls: Option<&Path>,
) -> String {
    // Encryption at rest is for nodes with drives; the cluster's key file, when it has one.
    let encryption = match (object, key_file_of(dir)) {
        (None, Some(kek)) => format!("\n[encryption]\nkey_file = {:?}\n", kek.display().to_string()),
        _ => String::new(),
    };
    let drive = dir.join(format!("node-{index}")).join("drive0");
    let pool = if pool.is_empty() { String::new() } else { format!("pool = {pool:?}\n") };
    let (drives, object) = match object {
        Some(table) => (String::new(), format!("\n{table}\n")),
        None => (format!("drives = [{:?}]\n", drive.display().to_string()), String::new()),
    };
    format!(
        "listen = {addr:?}\n{}meta = {meta:?}\ncluster = {cluster:?}\n{drives}reserve_bytes = {reserve_bytes}\n{pool}{}{object}{encryption}",
        metrics_line(metrics),
        transport_line(tls)
    )
}

/// A started local cluster and the child processes this process owns (the demo and tests
/// keep them to reap them; `trove cluster start` leaves them running detached).
pub struct Started {
    pub dir: PathBuf,
    pub state: State,
    pub children: Vec<std::process::Child>,
}

/// Creates (or restarts) a local cluster and waits until every node is up.
pub async fn start(args: &StartArgs, quiet: bool) -> Result<Started> {
    let dir = &args.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let mut children = Vec::new();
    let state = if dir.join(STATE_FILE).exists() {
        let mut state = State::load(&dir)?;
        if state.meta.running() || state.nodes.iter().any(Proc::running) {
            bail!("the cluster in {} is already running (metadata at {})", dir.display(), state.meta.addr);
        }
        if !crate::credentials::has_tls(&dir) {
            for config in std::iter::once(&state.meta.config).chain(state.nodes.iter().map(|n| &n.config)) {
                keep_plaintext(config)?;
            }
        }
        crate::credentials::install_for_command(dir.to_str(), None)?;
        let child = spawn_role("meta", &state.meta.config, &state.meta.log)?;
        state.meta.set_child(&child);
        children.push(child);
        for n in &mut state.nodes {
            let child = spawn_role("storage", &n.config, &n.log)?;
            n.set_child(&child);
            children.push(child);
        }
        state
    } else {
        match (args.engine, &args.postgres_url) {
            (EngineKind::Postgres, None) => bail!("--engine postgres needs --postgres-url"),
            (EngineKind::Redb, Some(_)) => bail!("--postgres-url is only for --engine postgres"),
            _ => {}
        }
        let node_pools = args.node_pools();
        let in_first = |pool: &str| node_pools.iter().filter(|p| p.as_str() == pool).count();
        let first = node_pools.first().cloned().unwrap_or_default();
        if in_first(&first) < args.ec.width() {
            let which = if first.is_empty() { "--nodes is".to_string() } else { format!("pool {first} has") };
            bail!(
                "erasure scheme {} needs at least {} storage nodes; {which} {}",
                args.ec,
                args.ec.width(),
                in_first(&first)
            );
        }
        let cluster = format!("trove-{:08x}", rand_u32());
        for sub in ["meta", "logs"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        if !args.plaintext {
            crate::credentials::create(&dir, &cluster)?;
        }
        if args.encrypt {
            let keys = dir.join("keys");
            std::fs::create_dir_all(&keys).with_context(|| format!("cannot create {}", keys.display()))?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700))?;
            storage::crypt::Kek::generate_file(&keys.join("kek"))?;
        }
        crate::credentials::install_for_command(dir.to_str(), None)?;
        let meta_tls = node_credential(&dir, &dir.join("meta"), "meta")?;
        let meta_cfg = dir.join("meta").join("meta.toml");
        let meta_log = dir.join("logs").join("meta.log");
        let spawned = spawn_bound("meta", &meta_log, !args.no_metrics, |addr, metrics| {
            let text = meta_config(&dir, addr, metrics, &cluster, args.ec, args.chunk_bytes, args, meta_tls.as_deref());
            std::fs::write(&meta_cfg, text)?;
            Ok(meta_cfg.clone())
        })
        .await?;
        let meta_addr = spawned.addr.clone();
        let meta = Proc::spawned(&spawned, meta_log);
        children.push(spawned.child);
        let mut nodes = Vec::new();
        for (i, pool) in (1..).zip(&node_pools) {
            let node_dir = dir.join(format!("node-{i}"));
            std::fs::create_dir_all(node_dir.join("drive0"))?;
            let cfg = node_dir.join("storage.toml");
            let log = dir.join("logs").join(format!("node-{i}.log"));
            let tls = node_credential(&dir, &node_dir, &format!("node-{i}"))?;
            let spawned = spawn_bound("storage", &log, !args.no_metrics, |addr, metrics| {
                std::fs::write(
                    &cfg,
                    storage_config(
                        &dir,
                        i,
                        addr,
                        metrics,
                        &meta_addr,
                        &cluster,
                        args.reserve_bytes,
                        pool,
                        None,
                        tls.as_deref(),
                    ),
                )?;
                Ok(cfg.clone())
            })
            .await?;
            let mut proc = Proc::spawned(&spawned, log);
            proc.pool = pool.clone();
            nodes.push(proc);
            children.push(spawned.child);
            // One at a time, so the metadata service numbers the nodes 1..N in this order and
            // `kill-node --node I` means node I of `trove status`.
            let partial = State {
                cluster: cluster.clone(),
                ec: args.ec.to_string(),
                meta: meta.clone(),
                nodes: nodes.clone(),
                reserve_bytes: args.reserve_bytes,
            };
            wait_up(&partial, i, quiet).await?;
        }
        if !first.is_empty() {
            // New files go to the first pool given: the root directory is put in it.
            put_root_in_pool(&meta.addr, &first).await?;
        }
        State { cluster, ec: args.ec.to_string(), meta, nodes, reserve_bytes: args.reserve_bytes }
    };
    state.save(&dir)?;
    let started = Started { dir: dir.clone(), state, children };
    wait_up(&started.state, started.state.nodes.len(), quiet).await?;
    Ok(started)
}

/// Puts the root directory in `pool`, keeping its scheme (the cluster's default scheme).
async fn put_root_in_pool(meta: &str, pool: &str) -> Result<()> {
    let client =
        client::Client::connect(meta).await.map_err(|e| anyhow!("cannot reach the metadata service at {meta}: {e}"))?;
    let root = client.getattr(wire::ROOT_INO).await.map_err(|e| anyhow!("cannot read the root directory: {e}"))?;
    client
        .set_pool(wire::ROOT_INO, pool)
        .await
        .map_err(|e| anyhow!("cannot put the root directory in pool {pool}: {e}"))?;
    client
        .set_layout(wire::ROOT_INO, root.ec, root.chunk_bytes, wire::LayoutCheck::Chosen)
        .await
        .map_err(|e| anyhow!("cannot keep {} for the root directory in pool {pool}: {e}", root.ec))
}

/// Waits until the metadata service answers and `want` nodes are up.
pub async fn wait_up(state: &State, want: usize, quiet: bool) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut last = String::from("metadata service not answering yet");
    while Instant::now() < deadline {
        if !state.meta.running() {
            bail!("the metadata process exited; see {}", state.meta.log.display());
        }
        if let Ok(client) = client::Client::connect_with(
            &state.meta.addr,
            client::ClientOptions { meta_deadline: Duration::from_secs(1), ..Default::default() },
        )
        .await
        {
            match client.status(false).await {
                Ok(s) => {
                    let up = s.nodes.iter().filter(|n| n.state == NodeState::Up).count();
                    // Nodes removed from the cluster may still run; they are not waited for.
                    let out = s.nodes.iter().filter(|n| n.state == NodeState::Out).count();
                    if up >= want.saturating_sub(out) {
                        return Ok(());
                    }
                    last = format!("{up} of {want} storage nodes up");
                }
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !quiet {
        eprintln!("logs are in {}", state.meta.log.parent().map(|p| p.display().to_string()).unwrap_or_default());
    }
    // Name the nodes that are not running, with the last thing each logged.
    for (i, n) in state.nodes.iter().enumerate() {
        if !n.running() {
            last.push_str(&format!(
                "; storage node {} (pid {}) is not running: {}",
                i + 1,
                n.pid,
                last_line_of(&log_since(&n.log, 0))
            ));
        }
    }
    bail!("cluster did not come up within {} s: {last}", START_TIMEOUT.as_secs())
}

/// Stops every process: SIGTERM, then SIGKILL after a grace period.
pub fn stop(state: &State) {
    let procs: Vec<&Proc> = std::iter::once(&state.meta).chain(state.nodes.iter()).collect();
    for p in &procs {
        p.signal(rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && procs.iter().any(|p| p.running()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in &procs {
        p.signal(rustix::process::Signal::KILL);
    }
}

/// SIGKILLs storage node `node` (1-based).
pub fn kill_node(state: &State, node: usize) -> Result<()> {
    let n = node_proc(state, node)?;
    if !n.running() {
        bail!("storage node {node} (pid {}) is not running", n.pid);
    }
    n.signal(rustix::process::Signal::KILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while n.running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn node_proc(state: &State, node: usize) -> Result<&Proc> {
    if node == 0 || node > state.nodes.len() {
        bail!("no storage node {node}: the cluster has nodes 1..={}", state.nodes.len());
    }
    Ok(&state.nodes[node - 1])
}

/// Starts storage node `node` (1-based) again; returns the child.
pub fn restart_node(dir: &Path, state: &mut State, node: usize) -> Result<std::process::Child> {
    let n = node_proc(state, node)?.clone();
    if n.running() {
        bail!("storage node {node} (pid {}) is still running", n.pid);
    }
    let child = spawn_role("storage", &n.config, &n.log)?;
    state.nodes[node - 1].set_child(&child);
    state.save(dir)?;
    Ok(child)
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (t.subsec_nanos() ^ std::process::id().rotate_left(16)) | 1
}

pub async fn run(cmd: ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Start(args) => {
            let started = start(&args, false).await?;
            let s = &started.state;
            println!("Trove cluster {} is running in {}", s.cluster, started.dir.display());
            println!("  metadata service: {} (pid {})", s.meta.addr, s.meta.pid);
            for (i, n) in s.nodes.iter().enumerate() {
                let pool = if n.pool.is_empty() { String::new() } else { format!(", pool {}", n.pool) };
                println!("  storage node {}: {} (pid {}{pool})", i + 1, n.addr, n.pid);
            }
            if let Some(m) = &s.meta.metrics {
                println!("  dashboard: http://{m}/   (metrics of every role: `trove stats`)");
            }
            println!("  default erasure scheme: {}", s.ec);
            if let Some((first, _)) = args.pools.first() {
                println!("  new files go to pool {first} (the root directory's pool; see `trove pool list`)");
            }
            println!();
            println!(
                "Use it with:  trove --cluster {} status   (or export TROVE_CLUSTER={})",
                started.dir.display(),
                started.dir.display()
            );
            println!("Stop it with: trove cluster stop --dir {}", started.dir.display());
            // The children keep running detached; dropping `Child` does not kill them.
            Ok(())
        }
        ClusterCmd::Stop { dir } => {
            let state = State::load(&dir)?;
            stop(&state);
            println!("stopped the cluster in {}", dir.display());
            Ok(())
        }
        ClusterCmd::KillNode { dir, node } => {
            let state = State::load(&dir)?;
            kill_node(&state, node)?;
            println!("killed storage node {node} (pid {})", state.nodes[node - 1].pid);
            Ok(())
        }
        ClusterCmd::RestartMeta { dir } => {
            crate::credentials::install_for_command(dir.to_str(), None)?;
            let began = Instant::now();
            let mut state = State::load(&dir)?;
            state.meta.signal(rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while state.meta.running() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if state.meta.running() {
                state.meta.signal(rustix::process::Signal::KILL);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let stopped = began.elapsed();
            let child = spawn_role("meta", &state.meta.config, &state.meta.log)?;
            state.meta.set_child(&child);
            state.save(&dir)?;
            println!(
                "restarted the metadata service (pid {}; the old one was gone after {} ms, the new one started {} ms later)",
                child.id(),
                stopped.as_millis(),
                (began.elapsed() - stopped).as_millis()
            );
            let running = state.nodes.iter().filter(|n| n.running()).count();
            wait_up(&state, running, true).await
        }
        ClusterCmd::AddNode { dir, pool, object } => {
            let pool = pool.unwrap_or_default();
            if !pool.is_empty() {
                wire::check_pool_name(&pool).map_err(|e| anyhow!("--pool: {e}"))?;
            }
            let object = match object {
                Some(file) => {
                    if pool.is_empty() {
                        bail!("--object needs --pool: a node of an object pool names its pool");
                    }
                    let text =
                        std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
                    // Checked here so that a mistake is told before a process is started.
                    let table: toml::Table =
                        toml::from_str(&text).with_context(|| format!("{} is not TOML", file.display()))?;
                    let Some(inner) = table.get("object") else {
                        bail!("{} has no [object] table", file.display());
                    };
                    let config: storage::ObjectConfig =
                        inner.clone().try_into().with_context(|| format!("[object] in {}", file.display()))?;
                    config.validate()?;
                    Some(text)
                }
                None => None,
            };
            let mut state = State::load(&dir)?;
            let dir = dir.canonicalize()?;
            crate::credentials::install_for_command(dir.to_str(), None)?;
            let i = state.nodes.len() + 1;
            let node_dir = dir.join(format!("node-{i}"));
            if object.is_some() {
                std::fs::create_dir_all(&node_dir)?;
            } else {
                std::fs::create_dir_all(node_dir.join("drive0"))?;
            }
            let cfg = node_dir.join("storage.toml");
            let log = dir.join("logs").join(format!("node-{i}.log"));
            let tls = node_credential(&dir, &node_dir, &format!("node-{i}"))?;
            // A node added to a cluster whose roles export metrics exports them too.
            let export = state.meta.metrics.is_some();
            let spawned = spawn_bound("storage", &log, export, |addr, metrics| {
                std::fs::write(
                    &cfg,
                    storage_config(
                        &dir,
                        i,
                        addr,
                        metrics,
                        &state.meta.addr,
                        &state.cluster,
                        state.reserve_bytes,
                        &pool,
                        object.as_deref(),
                        tls.as_deref(),
                    ),
                )?;
                Ok(cfg.clone())
            })
            .await?;
            let pid = spawned.child.id();
            let mut proc = Proc::spawned(&spawned, log);
            proc.pool = pool;
            state.nodes.push(proc);
            state.save(&dir)?;
            println!("added storage node {i} (pid {pid})");
            wait_added(&state, i).await.map_err(|e| anyhow!("node {i} started but {e}"))?;
            Ok(())
        }
        ClusterCmd::InitCa { dir, name } => {
            if crate::credentials::has_tls(&dir) {
                bail!("{} already holds an authority", dir.display());
            }
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            crate::credentials::create(&dir, &name)?;
            println!(
                "made an authority for cluster {name} in {}; issue credentials with `trove cluster issue --dir {}`",
                crate::credentials::authority_dir(&dir).display(),
                dir.display()
            );
            Ok(())
        }
        ClusterCmd::Issue { dir, role, name, out } => {
            if !crate::credentials::has_tls(&dir) {
                bail!("the cluster in {} runs without TLS: it has no authority to issue from", dir.display());
            }
            crate::credentials::issue(&dir, role, &name, &out)?;
            println!("issued a {} credential for {name} into {}", role.name(), out.display());
            Ok(())
        }
        ClusterCmd::RotateCa { dir, step_ms } => {
            crate::credentials::rotate(&dir, Duration::from_millis(step_ms)).await?;
            println!("the cluster in {} has a new authority; every credential in it was issued again", dir.display());
            Ok(())
        }
        ClusterCmd::RestartNode { dir, node } => {
            crate::credentials::install_for_command(dir.to_str(), None)?;
            let mut state = State::load(&dir)?;
            let child = restart_node(&dir, &mut state, node)?;
            println!("restarted storage node {node} (pid {})", child.id());
            wait_node_up(&state, node).await.map_err(|e| anyhow!("node {node} restarted but {e}"))?;
            Ok(())
        }
    }
}

/// Waits until node `node`, just added, is up with the others running; fails with what it
/// logged last when it exits instead (the metadata service refused it, say).
async fn wait_added(state: &State, node: usize) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let proc = node_proc(state, node)?;
    loop {
        // Counted before looking at the new node: one that exits in between is then still
        // waited for, and found gone on the next round.
        let running = state.nodes.iter().filter(|n| n.running()).count();
        if !proc.running() {
            bail!("it exited: {}", last_line_of(&log_since(&proc.log, 0)));
        }
        let answered = client::Client::connect_with(
            &state.meta.addr,
            client::ClientOptions { meta_deadline: Duration::from_secs(1), ..Default::default() },
        )
        .await;
        if let Ok(client) = answered {
            if let Ok(s) = client.status(false).await {
                let up = s.nodes.iter().filter(|n| n.state == NodeState::Up).count();
                let out = s.nodes.iter().filter(|n| n.state == NodeState::Out).count();
                if up >= running.saturating_sub(out) {
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            bail!("it is not up after {} s (see {})", START_TIMEOUT.as_secs(), proc.log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every node except those not running is up again.
pub async fn wait_node_up(state: &State, _node: usize) -> Result<()> {
    let running = state.nodes.iter().filter(|n| n.running()).count();
    wait_up(state, running, true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A storage config written before the transport had to be chosen starts again in
    /// plaintext, as it ran; one that chose is left alone.
    #[test]
    fn configs_from_before_tls_keep_running_in_plaintext() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("storage.toml");
        let old = "listen = \"127.0.0.1:1\"\nmeta = \"127.0.0.1:2\"\ncluster = \"c\"\n\n[object]\nbucket = \"b\"\n";
        std::fs::write(&path, old).expect("write");
        keep_plaintext(&path).expect("migrates");
        let text = std::fs::read_to_string(&path).expect("read");
        let table: toml::Table = toml::from_str(&text).expect("still TOML");
        assert_eq!(table.get("plaintext").and_then(toml::Value::as_bool), Some(true), "{text}");
        assert!(table["object"].get("plaintext").is_none(), "the key went into a table: {text}");
        keep_plaintext(&path).expect("again");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), text, "a second pass changes nothing");
        let chose = "listen = \"x\"\ntls = \"/etc/trove/tls\"\n";
        std::fs::write(&path, chose).expect("write");
        keep_plaintext(&path).expect("no change");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), chose);
    }

    #[test]
    fn a_process_is_known_by_its_pid_and_its_start_time() {
        // Fields 3 (state) and 22 (start time) of a stat line, with a command name holding
        // spaces and a parenthesis.
        let line = "4242 (trove (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 7 3 0 0 20 0 9 0 123456 999 99 rest";
        assert_eq!(parse_stat(line), Some((true, 123456)));
        assert_eq!(parse_stat(&line.replace(") S ", ") Z ")), Some((false, 123456)));
        assert_eq!(parse_stat("garbage"), None);
        // This process: running, and a record of it with another start time is not it.
        let child = std::process::Command::new("sleep").arg("5").spawn().expect("sleep runs");
        let mut proc = Proc::new("a".into(), "c".into(), "l".into(), &child);
        assert!(proc.started > 0 && proc.running());
        proc.started += 1;
        assert!(!proc.running(), "a pid reused by another program is not taken for ours");
        proc.started -= 1;
        proc.signal(rustix::process::Signal::KILL);
        let mut child = child;
        child.wait().expect("reaped");
        assert!(!proc.running());
    }

    #[test]
    fn free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let (low, high) = ephemeral_range().expect("Linux names its ephemeral range");
        let ports = free_ports(8).unwrap();
        let mut sorted = ports.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "{ports:?}");
        for &p in &ports {
            assert!(!(low..=high).contains(&p), "port {p} is in the ephemeral range {low}-{high}");
            // A process forked by a concurrent test holds the listeners free_ports used until it
            // execs (they are close-on-exec): allow it a moment.
            let deadline = Instant::now() + Duration::from_secs(2);
            while let Err(e) = std::net::TcpListener::bind(("127.0.0.1", p)) {
                assert!(Instant::now() < deadline, "port {p} of {ports:?}: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Runs `script` as a stand-in for a role process, its output going to a log.
    async fn bound_of(script: &str) -> Result<Bound> {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("role.log");
        // What an earlier run left in the log must not count.
        std::fs::write(&log, "old run: listening on 127.0.0.1:1\n").unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        let out = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        let mut child = Command::new("sh").arg("-c").arg(script).stdout(out).spawn().unwrap();
        let bound = wait_bound(&mut child, "test", &log, from).await;
        let _ = child.kill();
        let _ = child.wait();
        bound
    }

    #[tokio::test]
    async fn a_start_is_told_apart_by_what_the_process_logs() {
        let listening = bound_of("echo 'INFO trove::ready: storage node 1 listening on 127.0.0.1:2'; sleep 30").await;
        assert!(matches!(listening, Ok(Bound::Listening)));

        let taken =
            bound_of("echo 'trove: cannot listen on 127.0.0.1:2: Address already in use (os error 98)'; exit 1").await;
        match taken {
            Ok(Bound::PortTaken(line)) => assert!(line.contains("127.0.0.1:2"), "{line}"),
            _ => panic!("a taken port is not told apart"),
        }

        let failed = bound_of("echo 'trove: drive /d: in use by another storage process'; exit 1").await;
        let message = format!("{:#}", failed.err().expect("any other exit is an error"));
        assert!(message.contains("exited at start") && message.contains("drive /d"), "{message}");
    }
}
