//! The simulated cluster: real metadata servers (sharing one engine, [`crate::engine`]) and
//! real storage nodes (shard stores in a temporary directory), wired to the simulated network,
//! with crash and restart of either.
//!
//! A metadata server runs what `meta::run` runs, minus the socket: its service answers the
//! network, and its background tasks renew the cluster manager's lease, mark dead nodes out and
//! collect garbage while it leads. A crash drops the service and its tasks without releasing
//! the lease; a restart is a new process (a new server id) on the same engine.
//!
//! A storage node runs what `storage::run` runs, minus the socket: its [`StorageService`]
//! answers requests from the network and its membership loop registers and heartbeats. A
//! crash stops both at once and drops the store; a restart reopens the same drive under the
//! same identity, as a restarted process would. A crash may be a power loss, which also
//! undoes the renames no directory sync made durable ([`crate::disk`]).
//!
//! Every process is a host on the simulated network, named by its address: its tasks run for
//! it (`wire::world::on_host`), and its wall clock is off the true one by up to the
//! configured skew, drawn anew each time it starts.

use crate::disk::SimDisk;
use crate::engine::SlowEngine;
use crate::net::SimNet;
use crate::trace::Trace;
use meta::{MetaOptions, MetaService};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use storage::service::Membership;
use storage::{ShardStore, StorageService, StoreConfig};
use wire::world::{Endpoint, Net};
use wire::{EcScheme, Service};

/// The cluster's name in hellos.
pub const CLUSTER: &str = "sim";
/// How long a storage node may be down before it is marked out and rebuilt elsewhere.
pub const REBUILD_AFTER: Duration = Duration::from_secs(6);
/// How often storage nodes heartbeat.
pub const HEARTBEAT: Duration = Duration::from_millis(500);

/// The shape of the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub meta_servers: usize,
    pub storage_nodes: usize,
    pub ec: EcScheme,
    pub chunk_bytes: u32,
}

pub struct MetaServer {
    pub addr: String,
    /// `None` while crashed.
    pub service: Option<Arc<MetaService>>,
    background: Option<meta::Background>,
    /// The data mover (`jobs`), which works while this server leads.
    mover: Option<jobs::Guard>,
}

pub struct StorageNode {
    pub addr: String,
    uuid: u128,
    drive: PathBuf,
    /// `None` while crashed.
    pub service: Option<Arc<StorageService>>,
    /// Its membership loop with each metadata server.
    membership: Vec<tokio::task::JoinHandle<()>>,
}

pub struct Cluster {
    pub net: Arc<SimNet>,
    pub trace: Arc<Trace>,
    pub shape: Shape,
    /// The metadata engine every metadata server shares.
    pub engine: Arc<SlowEngine>,
    options: MetaOptions,
    pub metas: Vec<MetaServer>,
    pub nodes: Vec<StorageNode>,
    /// The storage nodes' disks.
    pub disk: Arc<SimDisk>,
    /// Most milliseconds a host's wall clock is off the true one, either way.
    pub clock_skew_ms_max: u64,
    /// How often the data mover scrubs, if it does.
    scrub_every: Option<Duration>,
    holders: LeaseHolders,
    _dir: tempfile::TempDir,
}

/// The live metadata servers, by address, as the lease checker sees them.
#[derive(Clone, Default)]
pub struct LeaseHolders(Arc<parking_lot::Mutex<std::collections::BTreeMap<String, Arc<MetaService>>>>);

impl LeaseHolders {
    /// The addresses of the live servers that believe they hold the lease now.
    pub fn leaders(&self) -> Vec<String> {
        self.0.lock().iter().filter(|(_, m)| m.is_leader()).map(|(a, _)| a.clone()).collect()
    }
}

/// The endpoint a process named `name` has on `net`.
pub fn endpoint(net: &Arc<SimNet>, name: &str) -> Endpoint {
    Endpoint { network: net.clone(), name: Arc::from(name) }
}

impl Cluster {
    /// Starts the metadata servers and every storage node, and waits until all registered.
    pub async fn start(
        shape: Shape,
        net: Arc<SimNet>,
        trace: Arc<Trace>,
        seed: u64,
        (clock_skew_ms_max, meta_clock_skew_max_ms): (u64, u64),
        scrub_every: Option<Duration>,
    ) -> anyhow::Result<Cluster> {
        // In memory where the machine offers it: shard files are still written, renamed and
        // synced for real, without waiting for a disk (a crash here is a process's, not a
        // power loss).
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm)? } else { tempfile::tempdir()? };
        trace.redact(dir.path());
        let options = MetaOptions {
            default_ec: shape.ec,
            chunk_bytes: shape.chunk_bytes,
            pg_count: 16,
            gc_grace_ms: 2000,
            gc_interval_ms: 500,
            // A node down this long is marked out and its shards rebuilt elsewhere.
            rebuild_after_ms: REBUILD_AFTER.as_millis() as u64,
            clock_skew_max_ms: meta_clock_skew_max_ms,
            ..MetaOptions::default()
        };
        let metas = (0..shape.meta_servers)
            .map(|i| MetaServer {
                addr: format!("10.0.0.{}:7000", i + 1),
                service: None,
                background: None,
                mover: None,
            })
            .collect();
        let mut nodes = Vec::new();
        for i in 0..shape.storage_nodes {
            let drive = dir.path().join(format!("node{i}"));
            let addr = format!("10.0.1.{}:7100", i + 1);
            nodes.push(StorageNode { addr, uuid: 0x5100 + i as u128, drive, service: None, membership: Vec::new() });
        }
        let engine = SlowEngine::new(seed, trace.clone());
        let holders = LeaseHolders::default();
        let disk = SimDisk::new(trace.clone());
        wire::world::install_disk(disk.clone());
        let mut cluster = Cluster {
            net,
            trace,
            shape,
            engine,
            options,
            metas,
            nodes,
            disk,
            clock_skew_ms_max,
            scrub_every,
            holders,
            _dir: dir,
        };
        for i in 0..shape.meta_servers {
            cluster.start_meta(i).await?;
        }
        for i in 0..shape.storage_nodes {
            cluster.start_node(i)?;
        }
        cluster.wait_registered().await?;
        Ok(cluster)
    }

    /// The metadata servers' addresses, comma-separated, as clients are given them.
    pub fn meta_addrs(&self) -> String {
        self.metas.iter().map(|m| m.addr.as_str()).collect::<Vec<_>>().join(",")
    }

    /// Who can say whether they lead, for the lease checker (sees restarts and crashes).
    pub fn lease_holders(&self) -> LeaseHolders {
        self.holders.clone()
    }

    /// A metadata server that is up.
    pub fn live_meta(&self) -> Option<&Arc<MetaService>> {
        self.metas.iter().find_map(|m| m.service.as_ref())
    }

    /// Starts metadata server `i` (again, after a crash: a new process on the same engine).
    pub async fn start_meta(&mut self, i: usize) -> anyhow::Result<()> {
        let server = &mut self.metas[i];
        if server.service.is_some() {
            return Ok(());
        }
        let engine: Arc<dyn kv::KvEngine> = self.engine.clone();
        let host: Arc<str> = Arc::from(server.addr.as_str());
        skew(&self.trace, &server.addr, self.clock_skew_ms_max);
        let meta = wire::world::on_host(host.clone(), MetaService::new(engine, self.options.clone()))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        meta.set_advertise(&server.addr);
        meta.set_net(Net::Simulated(endpoint(&self.net, &server.addr)));
        self.net.listen(&server.addr, Service::Meta, CLUSTER, wire::world::answer(meta.clone()));
        server.background = Some(wire::world::on_host_sync(host.clone(), || meta.spawn_background()));
        let settings = jobs::Settings {
            bytes_per_s: 1 << 30,
            scrub_interval: self.scrub_every,
            grace: Duration::from_millis(self.options.gc_grace_ms),
            tier_schedule: jobs::schedule::Schedule::Off,
            tier_impact: jobs::tier::Impact {
                bytes_per_s: 1 << 30,
                window_bytes_per_s: 1 << 30,
                window: None,
                chunks_max: 16,
            },
            ingest_interval: None,
        };
        let options = crate::client_options(&self.net, &server.addr);
        let mover = || jobs::spawn_with(meta.clone(), server.addr.clone(), settings, options);
        server.mover = Some(wire::world::on_host_sync(host, mover));
        self.holders.0.lock().insert(server.addr.clone(), meta.clone());
        server.service = Some(meta);
        self.trace.note(format_args!("cluster: metadata server {} up", server.addr));
        Ok(())
    }

    /// Metadata server `i` dies, its lease unreleased.
    pub fn crash_meta(&mut self, i: usize) {
        let server = &mut self.metas[i];
        if server.service.take().is_none() {
            return;
        }
        self.net.crash(&server.addr);
        server.background = None;
        server.mover = None;
        self.holders.0.lock().remove(&server.addr);
        self.trace.note(format_args!("cluster: metadata server {} crashed", server.addr));
    }

    /// Adds a new storage node (empty drive, new identity), as an operator replaces one that
    /// was marked out; returns its index.
    pub fn add_node(&mut self) -> anyhow::Result<usize> {
        let i = self.nodes.len();
        let drive = self._dir.path().join(format!("node{i}"));
        let addr = format!("10.0.1.{}:7100", i + 1);
        self.nodes.push(StorageNode { addr, uuid: 0x5100 + i as u128, drive, service: None, membership: Vec::new() });
        self.start_node(i)?;
        Ok(i)
    }

    /// The cluster's status from a live metadata server, with the chunks counted.
    pub async fn status(&self) -> Option<wire::ClusterStatus> {
        let meta = self.live_meta()?;
        match meta.call(wire::MetaCall { request_id: 0, op: wire::MetaOp::Status { scan_chunks: true } }).await {
            Ok(wire::MetaReply::Status(status)) => Some(status),
            _ => None,
        }
    }

    /// The shards the live chunk records place on the storage node at `addr` (not those
    /// recorded missing): what a file's data depends on there. Empty if no metadata server
    /// answers.
    pub async fn placed_on(&self, addr: &str) -> std::collections::BTreeSet<wire::ShardKey> {
        let mut placed = std::collections::BTreeSet::new();
        let Some(meta) = self.live_meta() else { return placed };
        let call = |op| meta.call(wire::MetaCall { request_id: 0, op });
        let Ok(wire::MetaReply::Status(status)) = call(wire::MetaOp::Status { scan_chunks: false }).await else {
            return placed;
        };
        let Some(node) = status.nodes.iter().find(|n| n.addr == addr).map(|n| n.id) else { return placed };
        let mut maps: std::collections::BTreeMap<u32, wire::PlacementMap> = std::collections::BTreeMap::new();
        let mut after = None;
        loop {
            let Ok(wire::MetaReply::ChunkPage { chunks, more }) =
                call(wire::MetaOp::ScanChunks { after, limit: 1024 }).await
            else {
                return placed;
            };
            for chunk in &chunks {
                let version = chunk.rec.placement.map_version;
                if !maps.contains_key(&version) {
                    match call(wire::MetaOp::GetMap { version }).await {
                        Ok(wire::MetaReply::Map(map)) => maps.insert(version, map),
                        _ => return placed,
                    };
                }
                let map = &maps[&version];
                for i in 0..chunk.rec.ec.width() {
                    let recorded = chunk.rec.missing & (1 << i) == 0;
                    if recorded && map.node_for(chunk.rec.placement.pg, i) == Some(node) {
                        placed.insert(wire::ShardKey { chunk: chunk.rec.id, index: i as u8 });
                    }
                }
            }
            match chunks.last() {
                Some(last) if more => after = Some((last.ino, last.rec.index)),
                _ => return placed,
            }
        }
    }

    /// Starts storage node `i` (again, after a crash) on its drive.
    pub fn start_node(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        if node.service.is_some() {
            return Ok(());
        }
        self.disk.add_drive(&node.drive);
        skew(&self.trace, &node.addr, self.clock_skew_ms_max);
        let config = StoreConfig { drives: vec![node.drive.clone()], reserve_bytes: 0, keys: None };
        let store = ShardStore::open(&config)?;
        let service = Arc::new(StorageService::new(Arc::new(store)));
        service.simulate(endpoint(&self.net, &node.addr));
        let metas: Vec<String> = self.metas.iter().map(|m| m.addr.clone()).collect();
        service.set_meta_addrs(&metas);
        self.net.listen(&node.addr, Service::Storage, CLUSTER, wire::world::answer(service.clone()));
        for meta in metas {
            let membership = Membership {
                meta,
                cluster: CLUSTER.to_string(),
                uuid: node.uuid,
                addr: node.addr.clone(),
                heartbeat: HEARTBEAT,
                pool: String::new(),
                object: None,
            };
            let member = service.clone();
            let host: Arc<str> = Arc::from(node.addr.as_str());
            node.membership.push(tokio::spawn(wire::world::on_host(host, async move {
                let refused = storage::service::membership(member, membership).await;
                panic!("the metadata service refused a simulated node: {refused}");
            })));
        }
        node.service = Some(service);
        self.trace.note(format_args!("cluster: storage node {} up", node.addr));
        Ok(())
    }

    /// Storage node `i` dies: requests it was answering are lost, its store is closed. With
    /// `power_loss`, its disk also loses what was not yet durable.
    pub async fn crash_node(&mut self, i: usize, power_loss: bool) {
        let node = &mut self.nodes[i];
        let Some(service) = node.service.take() else { return };
        self.net.crash(&node.addr);
        for task in node.membership.drain(..) {
            task.abort();
        }
        service.shutdown().await;
        let how = if power_loss { "lost power" } else { "crashed" };
        self.trace.note(format_args!("cluster: storage node {} {how}", node.addr));
        if power_loss {
            self.disk.power_loss(&node.drive);
        }
    }

    /// The directory of storage node `i`'s drive.
    pub fn drive(&self, i: usize) -> &std::path::Path {
        &self.nodes[i].drive
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].service.is_some()
    }

    /// Waits until a metadata server counts every storage node up (but those marked out).
    pub async fn wait_registered(&self) -> anyhow::Result<()> {
        for _ in 0..200 {
            if let Some(meta) = self.live_meta() {
                let op = wire::MetaOp::Status { scan_chunks: false };
                if let Ok(wire::MetaReply::Status(status)) = meta.call(wire::MetaCall { request_id: 0, op }).await {
                    let up = status.nodes.iter().filter(|n| n.state == wire::NodeState::Up).count();
                    // A node being drained serves and heartbeats as one up does.
                    let draining = status.nodes.iter().filter(|n| n.state == wire::NodeState::Draining).count();
                    let out = status.nodes.iter().filter(|n| n.state == wire::NodeState::Out).count();
                    if up + draining + out == self.nodes.len() {
                        self.trace.note(format_args!("cluster: all {up} storage nodes registered"));
                        return Ok(());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the storage nodes did not all register within 20 simulated seconds")
    }
}

/// Sets `host`'s wall clock off the true one by a draw within `max_ms` either way.
pub fn skew(trace: &Trace, host: &str, max_ms: u64) {
    if max_ms == 0 {
        return;
    }
    let skew_ms = (wire::world::random::<u64>() % (2 * max_ms + 1)) as i64 - max_ms as i64;
    wire::world::skew_clock(host, skew_ms);
    trace.note(format_args!("clock: {host} is {skew_ms:+} ms off"));
}
