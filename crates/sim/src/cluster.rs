//! The simulated cluster: the real metadata service (on the in-memory engine) and real storage
//! nodes (shard stores in a temporary directory), wired to the simulated network, with crash
//! and restart of storage nodes.
//!
//! A storage node runs what `storage::run` runs, minus the socket: its [`StorageService`]
//! answers requests from the network and its membership loop registers and heartbeats. A
//! crash stops both at once and drops the store; a restart reopens the same drive under the
//! same identity, as a restarted process would. Shard writes are whole files renamed into
//! place, so a crash keeps every shard whose put was answered (power loss, which would also
//! lose unsynced writes, is not simulated).

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
/// How often storage nodes heartbeat.
pub const HEARTBEAT: Duration = Duration::from_millis(500);

/// The shape of the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub storage_nodes: usize,
    pub ec: EcScheme,
    pub chunk_bytes: u32,
}

pub struct StorageNode {
    pub addr: String,
    uuid: u128,
    drive: PathBuf,
    /// `None` while crashed.
    pub service: Option<Arc<StorageService>>,
    membership: Option<tokio::task::JoinHandle<()>>,
}

pub struct Cluster {
    pub net: Arc<SimNet>,
    pub trace: Arc<Trace>,
    pub shape: Shape,
    pub meta_addr: String,
    pub meta: Arc<MetaService>,
    _background: meta::Background,
    pub nodes: Vec<StorageNode>,
    _dir: tempfile::TempDir,
}

/// The endpoint a process named `name` has on `net`.
pub fn endpoint(net: &Arc<SimNet>, name: &str) -> Endpoint {
    Endpoint { network: net.clone(), name: Arc::from(name) }
}

impl Cluster {
    /// Starts the metadata service and every storage node, and waits until all registered.
    pub async fn start(shape: Shape, net: Arc<SimNet>, trace: Arc<Trace>) -> anyhow::Result<Cluster> {
        let dir = tempfile::tempdir()?;
        let meta_addr = "10.0.0.1:7000".to_string();
        let options = MetaOptions {
            default_ec: shape.ec,
            chunk_bytes: shape.chunk_bytes,
            pg_count: 16,
            gc_grace_ms: 2000,
            gc_interval_ms: 500,
            // Nodes are not marked out: without the data mover, nothing would rebuild them.
            rebuild_after_ms: 24 * 3600 * 1000,
            ..MetaOptions::default()
        };
        let engine: Arc<dyn kv::KvEngine> = Arc::new(kv_tests::memory::MemoryEngine::new());
        let meta = MetaService::new(engine, options).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        meta.set_advertise(&meta_addr);
        meta.set_net(Net::Simulated(endpoint(&net, &meta_addr)));
        net.listen(&meta_addr, Service::Meta, CLUSTER, wire::world::answer(meta.clone()));
        let background = meta.spawn_background();
        let mut nodes = Vec::new();
        for i in 0..shape.storage_nodes {
            let drive = dir.path().join(format!("node{i}"));
            let addr = format!("10.0.1.{}:7100", i + 1);
            nodes.push(StorageNode { addr, uuid: 0x5100 + i as u128, drive, service: None, membership: None });
        }
        let mut cluster = Cluster { net, trace, shape, meta_addr, meta, _background: background, nodes, _dir: dir };
        for i in 0..shape.storage_nodes {
            cluster.start_node(i)?;
        }
        cluster.wait_registered().await?;
        Ok(cluster)
    }

    /// Starts storage node `i` (again, after a crash) on its drive.
    pub fn start_node(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        if node.service.is_some() {
            return Ok(());
        }
        let config = StoreConfig { drives: vec![node.drive.clone()], reserve_bytes: 0, keys: None };
        let store = ShardStore::open(&config)?;
        let service = Arc::new(StorageService::new(Arc::new(store)));
        service.simulate(endpoint(&self.net, &node.addr));
        service.set_meta_addrs(std::slice::from_ref(&self.meta_addr));
        self.net.listen(&node.addr, Service::Storage, CLUSTER, wire::world::answer(service.clone()));
        let membership = Membership {
            meta: self.meta_addr.clone(),
            cluster: CLUSTER.to_string(),
            uuid: node.uuid,
            addr: node.addr.clone(),
            heartbeat: HEARTBEAT,
            pool: String::new(),
            object: None,
        };
        let member = service.clone();
        node.membership = Some(tokio::spawn(async move {
            let refused = storage::service::membership(member, membership).await;
            panic!("the metadata service refused a simulated node: {refused}");
        }));
        node.service = Some(service);
        self.trace.note(format_args!("cluster: storage node {} up", node.addr));
        Ok(())
    }

    /// Storage node `i` dies: requests it was answering are lost, its store is closed.
    pub async fn crash_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Some(service) = node.service.take() else { return };
        self.net.crash(&node.addr);
        if let Some(task) = node.membership.take() {
            task.abort();
        }
        service.shutdown().await;
        self.trace.note(format_args!("cluster: storage node {} crashed", node.addr));
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].service.is_some()
    }

    /// Waits until the metadata service counts every storage node up.
    pub async fn wait_registered(&self) -> anyhow::Result<()> {
        for _ in 0..200 {
            let status =
                self.meta.call(wire::MetaCall { request_id: 0, op: wire::MetaOp::Status { scan_chunks: false } }).await;
            if let Ok(wire::MetaReply::Status(status)) = status {
                let up = status.nodes.iter().filter(|n| n.state == wire::NodeState::Up).count();
                if up == self.nodes.len() {
                    self.trace.note(format_args!("cluster: all {up} storage nodes registered"));
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the storage nodes did not all register within 20 simulated seconds")
    }
}
