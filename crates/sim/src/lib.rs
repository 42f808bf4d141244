//! The deterministic simulator of a whole Trove cluster.
//!
//! One seed drives one run: the real metadata service (`meta`, on the in-memory engine), real
//! storage nodes (`storage`, shard stores in a temporary directory) and real clients (`client`)
//! run on one thread, in a Tokio runtime whose clock is paused: when every task waits, time
//! jumps to the next timer, so a minute of cluster life takes a fraction of a second. The
//! services reach the clock, chance and the network through `wire::world`, which this crate
//! replaces: the wall clock follows the virtual one, chance comes from the seed, and every RPC
//! goes through [`net::SimNet`], which loses, delays, duplicates and cuts messages from its own
//! seeded generator. A chaos task crashes and restarts storage nodes and cuts links. The
//! workload ([`workload`]) checks every read against a model, and at the end, with the faults
//! healed, checks that nothing acknowledged was lost and every chunk is rebuildable; the
//! metadata's own invariants ([`invariants`]) are checked on a snapshot after every act of
//! chaos and at the end.
//!
//! Same seed, same run: the [`trace::Trace`] of two runs of one seed is identical byte for
//! byte (a test holds it to that), so a failing seed replays its failure.
//!
//! The data mover (`jobs`) runs in the metadata servers: a storage node down long enough is
//! marked out and rebuilt elsewhere, and the chaos adds a new node in its place; scrub runs
//! every [`SCRUB_EVERY`] and rewrites what rotted.
//!
//! The disks ([`disk`]) fail, fill up, rot and lose power; the operator drains nodes (which are
//! then removed and replaced); every host's wall clock is skewed within
//! [`Config::clock_skew_ms_max`].
//!
//! Clients also create, unlink and look up a few names in a directory they share, and the
//! history of what they saw must be linearizable ([`linear`]).
//!
//! By default the names are in two directories and clients rename them too, within and across
//! the directories. Deliberately absent: linearizability of file data.

pub mod cluster;
pub mod disk;
pub mod engine;
pub mod invariants;
pub mod linear;
pub mod locks;
pub mod net;
pub mod trace;
pub mod workload;

use crate::cluster::{endpoint, Cluster, Shape};
use crate::disk::Health;
use crate::engine::EngineFaults;
use crate::net::{Faults, NetStats, SimNet};
use crate::trace::Trace;
use crate::workload::Verdicts;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wire::world::{Flaw, Net, Simulation};
use wire::EcScheme;

/// How long, after healing, the data mover has to repair every chunk.
pub const REPAIR_WAIT_S: u64 = 300;

/// How often the data mover scrubs (reads and verifies every shard).
pub const SCRUB_EVERY: Duration = Duration::from_secs(10);

/// The wall-clock time every simulation starts at (2026-01-01T00:00:00Z).
pub const EPOCH_UNIX_S: u64 = 1_767_225_600;

/// What one run simulates.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub shape: Shape,
    pub clients: usize,
    /// Simulated time the workload runs under faults (then the faults heal for the final check).
    pub duration: Duration,
    pub faults: Faults,
    pub engine_faults: EngineFaults,
    /// Whether metadata servers and storage nodes crash and restart, links are cut and disks
    /// fail, fill up and rot.
    pub chaos: bool,
    /// Whether the chaos also fails, fills, rots and cuts the power of disks (and scrub runs to
    /// repair rot) and drains nodes. Off, the chaos draws its acts as it did before disks were
    /// simulated: the seeds of the regression tests found before then replay what they found.
    pub disk_chaos: bool,
    /// Most milliseconds any host's wall clock is off the true one, either way.
    pub clock_skew_ms_max: u64,
    /// The metadata servers' allowance for skewed clocks (`MetaOptions::clock_skew_max_ms`);
    /// `None`: twice `clock_skew_ms_max`, which covers any two hosts. Set lower only to show
    /// what the allowance prevents.
    pub meta_clock_skew_max_ms: Option<u64>,
    /// What clients also share: names in directories all of them work on, their history checked
    /// for linearizability.
    pub shared: linear::Shared,
    /// Bugs planted in the services' code for this run.
    pub flaws: Vec<Flaw>,
    /// Print the trace as it is written.
    pub echo: bool,
}

impl Config {
    /// The default run of `seed`: 2 metadata servers on an engine that sometimes stalls, 4
    /// storage nodes at 2+1, 2 clients, 30 simulated seconds of lossy network, crashes and cuts.
    pub fn new(seed: u64) -> Config {
        Config {
            seed,
            shape: Shape { meta_servers: 2, storage_nodes: 4, ec: EcScheme { k: 2, m: 1 }, chunk_bytes: 64 << 10 },
            clients: 2,
            duration: Duration::from_secs(30),
            faults: Faults { drop_per_mille: 10, duplicate_per_mille: 10, delay_max_ms: 20 },
            engine_faults: EngineFaults { commit_ms_max: 2, stall_per_mille: 10, stall_ms_max: 4000 },
            chaos: true,
            disk_chaos: true,
            clock_skew_ms_max: 250,
            meta_clock_skew_max_ms: None,
            shared: linear::Shared::TwoDirs,
            flaws: Vec::new(),
            echo: false,
        }
    }

    /// The run of `seed` as the simulator drew it before disks and clocks were simulated (the
    /// regression seeds found then were found with this).
    pub fn without_disks(seed: u64) -> Config {
        Config { disk_chaos: false, clock_skew_ms_max: 0, shared: linear::Shared::Off, ..Config::new(seed) }
    }
}

/// What one run found.
pub struct Outcome {
    pub seed: u64,
    pub violations: Vec<String>,
    pub trace: Arc<Trace>,
    /// Workload operations started.
    pub ops: u64,
    pub simulated: Duration,
    pub net: NetStats,
}

/// Runs one seed to its end.
pub fn run(config: &Config) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
    runtime.block_on(simulate(config))
}

async fn simulate(config: &Config) -> anyhow::Result<Outcome> {
    let epoch = UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S);
    let _world = Simulation::install_flawed(config.seed, epoch, &config.flaws);
    let _jitter = Jitter::seed(config.seed ^ 0x6a69_7474_6572);
    let trace = Trace::new(config.echo);
    trace.note(format_args!("seed {} flaws {:?}", config.seed, config.flaws));
    let net = SimNet::new(config.seed ^ 0x6e65_7477_6f72_6b00, trace.clone());
    let _closing = Closing(net.clone());
    let engine_seed = config.seed ^ 0x656e_6769_6e65;
    let scrub_every = config.disk_chaos.then_some(SCRUB_EVERY);
    // Two hosts' clocks are at most twice the skew of one apart.
    let skews = (config.clock_skew_ms_max, config.meta_clock_skew_max_ms.unwrap_or(2 * config.clock_skew_ms_max));
    let mut cluster = Cluster::start(config.shape, net.clone(), trace.clone(), engine_seed, skews, scrub_every).await?;
    let verdicts =
        Arc::new(Verdicts { violations: Mutex::new(Vec::new()), ops: AtomicU64::new(0), trace: trace.clone() });

    net.set_faults(config.faults);
    cluster.engine.set_faults(config.engine_faults);
    let leases = tokio::spawn(watch_leases(cluster.lease_holders(), verdicts.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    let mut lockers = Vec::new();
    let holders = Arc::new(locks::Holders::default());
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut sharers = Vec::new();
    for i in 0..config.clients {
        let name = format!("10.0.2.{}:0", i + 1);
        let host: Arc<str> = Arc::from(name.as_str());
        cluster::skew(&trace, &name, config.clock_skew_ms_max);
        let client = wire::world::on_host(host.clone(), connect(&net, &cluster, &name)).await?;
        let lock_file = wire::world::on_host(host.clone(), shared_file(&client, "/lock")).await;
        let work = workload::client_loop(i, client.clone(), config.seed, stop.clone(), verdicts.clone());
        workers.push(tokio::spawn(wire::world::on_host(host.clone(), work)));
        let mut dirs = Vec::new();
        for name in config.shared.dirs() {
            dirs.extend(wire::world::on_host(host.clone(), shared_dir(&client, name)).await);
        }
        if !dirs.is_empty() && dirs.len() == config.shared.dirs().len() {
            let (stop, history) = (stop.clone(), history.clone());
            let sharing =
                linear::shared_loop(i, client.clone(), config.shared, dirs, config.seed, stop, history, trace.clone());
            sharers.push(tokio::spawn(wire::world::on_host(host.clone(), sharing)));
        }
        if let Some(ino) = lock_file {
            let (holders, stop, verdicts) = (holders.clone(), stop.clone(), verdicts.clone());
            let locking = locks::lock_loop(i, client, ino, config.seed, holders, stop, verdicts);
            lockers.push(tokio::spawn(wire::world::on_host(host, locking)));
        }
    }
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x6368_616f_7300);
    let until = tokio::time::Instant::now() + config.duration;
    let mut chaos = Chaos::default();
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..3000))).await;
        if config.chaos {
            chaos.act(&mut cluster, &mut rng, config).await;
        }
        check_metadata(&cluster, &verdicts).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut models = Vec::new();
    for worker in workers {
        models.push(worker.await?);
    }
    for locker in lockers {
        locker.await?;
    }
    for sharer in sharers {
        sharer.await?;
    }
    for broken in linear::check(&history.lock()) {
        verdicts.violation(format!("linearizability: {broken}"));
    }

    trace.note(format_args!("heal: faults off, links restored, disks replaced, every node up"));
    net.set_faults(Faults::NONE);
    cluster.engine.set_faults(EngineFaults::NONE);
    net.heal();
    chaos.heal_disks(&mut cluster).await;
    for i in 0..cluster.metas.len() {
        cluster.start_meta(i).await?;
    }
    for i in 0..cluster.nodes.len() {
        if !chaos.retired.contains(&i) {
            cluster.start_node(i)?;
        }
    }
    cluster.wait_registered().await?;
    // Heartbeats, GC passes and the data mover's repairs on the healthy cluster.
    let mut settled = false;
    for _ in 0..REPAIR_WAIT_S {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if cluster.status().await.is_some_and(|s| s.chunks_degraded == 0 && s.chunks_unavailable == 0) {
            settled = true;
            break;
        }
    }
    if !settled {
        let status = cluster.status().await;
        verdicts.violation(format!(
            "repair: chunks still degraded {REPAIR_WAIT_S} simulated s after healing: {:?}",
            status.map(|s| (s.chunks_degraded, s.chunks_unavailable))
        ));
    }
    // A rotted shard is invisible to the chunk records: scrub must find and rewrite it.
    if let Some(rot) = &chaos.rot {
        let mut repaired = false;
        for _ in 0..REPAIR_WAIT_S {
            if rot.settled(&cluster).await {
                repaired = true;
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if !repaired {
            verdicts.violation(format!(
                "scrub: the shard rotted at {} s is still damaged {REPAIR_WAIT_S} simulated s after healing",
                rot.at_ms / 1000
            ));
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let checker = connect(&net, &cluster, "10.0.3.1:0").await?;
    let mut stores = Vec::new();
    for node in &cluster.nodes {
        if let Some(service) = &node.service {
            stores.push((service.clone(), cluster.placed_on(&node.addr).await));
        }
    }
    workload::final_check(&checker, &models, stores, &verdicts).await;
    check_metadata(&cluster, &verdicts).await;
    leases.abort();
    trace.note(format_args!("end: {} violation(s)", verdicts.violations.lock().len()));
    let violations = verdicts.violations.lock().clone();
    Ok(Outcome {
        seed: config.seed,
        violations,
        ops: verdicts.ops.load(Ordering::Relaxed),
        simulated: Duration::from_millis(trace.elapsed_ms()),
        net: net.stats(),
        trace,
    })
}

/// The inode of the file at `path` that every client shares, created by whoever comes first;
/// `None` if the namespace cannot be reached (the lock workload then does not run).
async fn shared_file(client: &client::Client, path: &str) -> Option<wire::Ino> {
    for _ in 0..20 {
        match client.create(wire::ROOT_INO, &path[1..], 0o644, false).await {
            Ok(attr) => return Some(attr.ino),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    None
}

/// The inode of the directory `name` under the root that every client shares, made by whoever
/// comes first; `None` if the namespace cannot be reached (the shared workload then does not
/// run).
async fn shared_dir(client: &client::Client, name: &str) -> Option<wire::Ino> {
    for _ in 0..20 {
        match client.mkdir(wire::ROOT_INO, name, 0o755).await {
            Ok(attr) => return Some(attr.ino),
            Err(_) => {
                if let Ok(attr) = client.lookup(wire::ROOT_INO, name).await {
                    return Some(attr.ino);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    None
}

/// Checks the metadata's invariants on a snapshot of its engine.
async fn check_metadata(cluster: &Cluster, verdicts: &Verdicts) {
    for broken in invariants::check(cluster.engine.as_ref()).await {
        verdicts.violation(format!("metadata: {broken}"));
    }
}

/// The metadata engine's retry jitter (`kv::retry_backoff`) drawn from the seed while a run
/// lasts: `kv` knows nothing of `wire::world`, so it has its own switch.
struct Jitter;

impl Jitter {
    fn seed(seed: u64) -> Jitter {
        kv::seed_retry_jitter(Some(seed));
        Jitter
    }
}

impl Drop for Jitter {
    fn drop(&mut self) {
        kv::seed_retry_jitter(None);
    }
}

/// Closes the network when a run ends, however it ends ([`SimNet::close`]).
struct Closing(Arc<SimNet>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A client on the simulated network, named `name`.
async fn connect(net: &Arc<SimNet>, cluster: &Cluster, name: &str) -> anyhow::Result<client::Client> {
    client::Client::connect_with(&cluster.meta_addrs(), client_options(net, name))
        .await
        .map_err(|e| anyhow::anyhow!("client {name}: {e}"))
}

/// The options of a client named `name` on `net`: timeouts short enough that faults cost
/// simulated seconds, not minutes.
pub(crate) fn client_options(net: &Arc<SimNet>, name: &str) -> client::ClientOptions {
    client::ClientOptions {
        meta_deadline: Duration::from_secs(10),
        storage_timeout: Duration::from_secs(2),
        node_retry_after: Duration::from_secs(1),
        write_retry_deadline: Duration::from_secs(5),
        atime: false,
        tls: wire::tls::TlsChoice::Explicit(None),
        net: Net::Simulated(endpoint(net, name)),
        ..client::ClientOptions::default()
    }
}

/// What the chaos remembers between its acts.
#[derive(Default)]
struct Chaos {
    /// The last shard rotted, until scrub rewrites it.
    rot: Option<Rot>,
    /// The storage node being drained, until it is marked out.
    draining: Option<usize>,
    /// Storage nodes drained and removed: stopped for good.
    retired: std::collections::BTreeSet<usize>,
}

/// A byte flipped in a shard file.
struct Rot {
    /// The storage node and the shard.
    node: String,
    key: wire::ShardKey,
    path: std::path::PathBuf,
    offset: u64,
    /// The byte it held.
    byte: u8,
    at_ms: u64,
}

impl Rot {
    /// Whether the rot is dealt with: the file holds the byte it held (scrub rewrote it) or is
    /// gone, or no chunk record places the shard on the node any more (its file was deleted,
    /// the chunk moved, or the node removed: an old copy that is nobody's data).
    async fn settled(&self, cluster: &Cluster) -> bool {
        use std::os::unix::fs::FileExt;
        let whole = match std::fs::File::open(&self.path) {
            Err(_) => true,
            Ok(file) => {
                let mut byte = [0u8];
                file.read_exact_at(&mut byte, self.offset).map_or(true, |()| byte[0] == self.byte)
            }
        };
        whole || !cluster.placed_on(&self.node).await.contains(&self.key)
    }
}

impl Chaos {
    /// One act of chaos: a storage node or metadata server crashes (a node may lose power) or
    /// comes back, a link is cut or all healed, a node's disk fails, fills up or comes back, a
    /// shard rots, a host's clock steps, or the operator drains a node. Losses are budgeted: a
    /// node down, a node whose disk is failing or full, a rotted shard and a draining node each
    /// count as one, there are never more than
    /// `m`, and a new one happens only once the last is repaired, so every chunk stays
    /// readable. At least one metadata server stays up.
    async fn act(&mut self, cluster: &mut Cluster, rng: &mut StdRng, config: &Config) {
        let clients = config.clients;
        let status = cluster.status().await;
        // A node marked out is replaced by a new one, as an operator would.
        if let Some(status) = &status {
            let members = status.nodes.iter().filter(|n| n.state != wire::NodeState::Out).count();
            if members < cluster.shape.storage_nodes {
                match cluster.add_node() {
                    Ok(i) => cluster.trace.note(format_args!("chaos: storage node {} added", cluster.nodes[i].addr)),
                    Err(e) => cluster.trace.note(format_args!("chaos: adding a storage node failed: {e}")),
                }
            }
        }
        if let Some(rot) = &self.rot {
            if rot.settled(cluster).await {
                cluster.trace.note(format_args!("chaos: the rotted shard is whole again, or no file needs it"));
                self.rot = None;
            }
        }
        // A drained node is marked out once nothing is left on it: the operator stops it.
        if let (Some(i), Some(status)) = (self.draining, &status) {
            let addr = &cluster.nodes[i].addr;
            if status.nodes.iter().any(|n| &n.addr == addr && n.state == wire::NodeState::Out) {
                cluster.trace.note(format_args!("chaos: storage node {addr} is drained and removed"));
                cluster.crash_node(i, false).await;
                self.retired.insert(i);
                self.draining = None;
            }
        }
        let repaired = status.as_ref().is_some_and(|s| s.chunks_degraded == 0 && s.chunks_unavailable == 0);
        let down: Vec<usize> =
            (0..cluster.nodes.len()).filter(|&i| !cluster.is_up(i) && !self.retired.contains(&i)).collect();
        let sick: Vec<usize> = (0..cluster.nodes.len())
            .filter(|&i| cluster.is_up(i) && cluster.disk.health(cluster.drive(i)) != Health::Healthy)
            .collect();
        let losses = down.len() + sick.len() + usize::from(self.rot.is_some()) + usize::from(self.draining.is_some());
        let may_lose = losses < cluster.shape.ec.m as usize && repaired;
        let up: Vec<usize> = (0..cluster.nodes.len())
            .filter(|&i| cluster.is_up(i) && !sick.contains(&i) && self.draining != Some(i))
            .collect();
        let metas_down: Vec<usize> = (0..cluster.metas.len()).filter(|&i| cluster.metas[i].service.is_none()).collect();
        let acts = if config.disk_chaos { 11 } else { 6 };
        match rng.gen_range(0..acts) {
            0 if may_lose && !up.is_empty() => {
                let victim = up[rng.gen_range(0..up.len())];
                let power_loss = config.disk_chaos && rng.gen_bool(0.5);
                cluster.crash_node(victim, power_loss).await;
            }
            1 if !down.is_empty() => {
                let back = down[rng.gen_range(0..down.len())];
                // Brought back with whatever disk it had, repaired.
                cluster.disk.set_health(cluster.drive(back), Health::Healthy);
                if let Err(e) = cluster.start_node(back) {
                    cluster.trace.note(format_args!("cluster: restarting storage node {back} failed: {e}"));
                }
            }
            2 if metas_down.len() + 1 < cluster.metas.len() => {
                let victim = rng.gen_range(0..cluster.metas.len());
                cluster.crash_meta(victim);
            }
            3 if !metas_down.is_empty() => {
                let back = metas_down[rng.gen_range(0..metas_down.len())];
                if let Err(e) = cluster.start_meta(back).await {
                    cluster.trace.note(format_args!("cluster: restarting metadata server {back} failed: {e}"));
                }
            }
            4 => {
                let node = &cluster.nodes[rng.gen_range(0..cluster.nodes.len())].addr;
                let other = match rng.gen_range(0..2) {
                    0 => cluster.metas[rng.gen_range(0..cluster.metas.len())].addr.clone(),
                    _ => format!("10.0.2.{}:0", rng.gen_range(1..=clients.max(1))),
                };
                cluster.trace.note(format_args!("chaos: cut {node} <-> {other}"));
                cluster.net.cut(node, &other);
            }
            6 if may_lose && !up.is_empty() => {
                let victim = up[rng.gen_range(0..up.len())];
                let health = if rng.gen_bool(0.5) { Health::Failing } else { Health::Full };
                cluster.disk.set_health(cluster.drive(victim), health);
            }
            7 if !sick.is_empty() => {
                let i = sick[rng.gen_range(0..sick.len())];
                if cluster.disk.health(cluster.drive(i)) == Health::Failing {
                    // A failing drive is replaced under a stopped node (the store remembers
                    // a drive that failed until it restarts).
                    cluster.crash_node(i, false).await;
                    cluster.disk.set_health(cluster.drive(i), Health::Healthy);
                    if let Err(e) = cluster.start_node(i) {
                        cluster.trace.note(format_args!("cluster: restarting storage node {i} failed: {e}"));
                    }
                } else {
                    cluster.disk.set_health(cluster.drive(i), Health::Healthy);
                }
            }
            8 if may_lose && !up.is_empty() => {
                let i = up[rng.gen_range(0..up.len())];
                self.rot(cluster, rng, i).await;
            }
            10 if may_lose && !up.is_empty() => {
                let i = up[rng.gen_range(0..up.len())];
                self.drain(cluster, status.as_ref(), i).await;
            }
            9 if cluster.clock_skew_ms_max > 0 => {
                let host = match rng.gen_range(0..2) {
                    0 => &cluster.metas[rng.gen_range(0..cluster.metas.len())].addr,
                    _ => &cluster.nodes[rng.gen_range(0..cluster.nodes.len())].addr,
                };
                cluster::skew(&cluster.trace, host, cluster.clock_skew_ms_max);
            }
            // Also what an act whose condition does not hold falls to.
            _ => {
                cluster.trace.note(format_args!("chaos: heal every link"));
                cluster.net.heal();
            }
        }
    }

    /// The operator drains node `i`: its data moves to the others while it serves.
    async fn drain(&mut self, cluster: &Cluster, status: Option<&wire::ClusterStatus>, i: usize) {
        let addr = &cluster.nodes[i].addr;
        let id = status.and_then(|s| s.nodes.iter().find(|n| &n.addr == addr)).map(|n| n.id);
        let (Some(id), Some(meta)) = (id, cluster.live_meta()) else { return };
        let op = wire::MetaOp::SetNodeState { node: id, state: wire::NodeState::Draining, force: false };
        match meta.call(wire::MetaCall { request_id: wire::world::random(), op }).await {
            Ok(_) => {
                cluster.trace.note(format_args!("chaos: the operator drains storage node {addr}"));
                self.draining = Some(i);
            }
            Err(e) => cluster.trace.note(format_args!("chaos: draining {addr} was refused: {e}")),
        }
    }

    /// Flips a byte in a random shard file of node `i`, one that a chunk record places there (a
    /// shard no record places, such as the leftover of a write that never committed or the old
    /// copy of a moved shard, is nobody's data).
    async fn rot(&mut self, cluster: &Cluster, rng: &mut StdRng, i: usize) {
        let Some(store) = cluster.nodes[i].service.as_ref().and_then(|s| s.store()) else { return };
        let placed = cluster.placed_on(&cluster.nodes[i].addr).await;
        let mut keys = store.list(None, storage::store::LIST_KEYS_MAX);
        keys.retain(|k| placed.contains(k));
        if keys.is_empty() {
            return;
        }
        let key = keys[rng.gen_range(0..keys.len())];
        let Some(path) = store.shard_path(key) else { return };
        let Ok(len) = std::fs::metadata(&path).map(|m| m.len()) else { return };
        let offset = rng.gen_range(0..len.max(1));
        match cluster.disk.rot(&path, offset) {
            Ok(byte) => {
                cluster
                    .trace
                    .note(format_args!("chaos: shard {key} on {} rots at byte {offset}", cluster.nodes[i].addr));
                let at_ms = cluster.trace.elapsed_ms();
                self.rot = Some(Rot { node: cluster.nodes[i].addr.clone(), key, path, offset, byte, at_ms });
            }
            Err(e) => cluster.trace.note(format_args!("chaos: rotting {key} failed: {e}")),
        }
    }

    /// Before the final check: every disk healthy, a node whose drive failed restarted on a
    /// new one (the others are restarted by the heal that follows).
    async fn heal_disks(&mut self, cluster: &mut Cluster) {
        for i in 0..cluster.nodes.len() {
            match cluster.disk.health(cluster.drive(i)) {
                Health::Healthy => {}
                Health::Full => cluster.disk.set_health(cluster.drive(i), Health::Healthy),
                Health::Failing => {
                    cluster.crash_node(i, false).await;
                    cluster.disk.set_health(cluster.drive(i), Health::Healthy);
                }
            }
        }
    }
}

/// How often the lease checker looks at who leads.
const LEASE_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Lease exclusion: at no moment do two metadata servers both believe they lead the cluster
/// manager (each runs GC and marks nodes out; two at once could undo each other).
async fn watch_leases(holders: cluster::LeaseHolders, verdicts: Arc<Verdicts>) {
    let mut reported = false;
    loop {
        tokio::time::sleep(LEASE_CHECK_INTERVAL).await;
        let leaders = holders.leaders();
        if leaders.len() > 1 && !reported {
            verdicts.violation(format!("lease: {} metadata servers lead at once: {leaders:?}", leaders.len()));
            reported = true;
        }
    }
}

/// The time the simulation's wall clock started at.
pub fn epoch() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S)
}
