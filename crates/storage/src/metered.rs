//! What a storage node records into the process's metrics: every request it answers (count,
//! errors and latency per `StorageOp`, protocol `storage`; shard bytes read and written), its
//! drives' capacity and health at scrape time, and, when it exports, its announcement to the
//! metadata services so that `trove stats` and the dashboard find it.
//!
//! The service is wrapped rather than edited: the handler below answers through
//! `StorageService`'s own `handle_now`, `handle_blocking` and `handle` and records around them.

use crate::service::StorageService;
use async_trait::async_trait;
use bytes::Bytes;
use metrics::gauges::Sample;
use metrics::names;
use metrics::ops::OpTable;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use wire::{BlockingAnswer, Handler, MetaCall, MetaOp, ProcessInfo, Service, StorageOp, StorageReply, WireError};

/// How often a node that exports says so to every metadata service.
pub const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(10);

/// The `storage` protocol's operations.
pub fn table() -> &'static OpTable {
    static TABLE: OnceLock<&'static OpTable> = OnceLock::new();
    TABLE.get_or_init(|| metrics::ops::table("storage", &StorageOp::NAMES))
}

/// The storage service as served over the network, recording each request.
pub struct MeteredStorage(pub Arc<StorageService>);

fn record(
    op: usize,
    started: Option<std::time::Instant>,
    result: &Result<StorageReply, WireError>,
    data_in: usize,
    data_out: usize,
) {
    let t = table();
    t.done(op, started, result.is_ok());
    if result.is_ok() {
        if data_in > 0 {
            t.write_bytes(data_in as u64);
        }
        if data_out > 0 {
            t.read_bytes(data_out as u64);
        }
    }
}

#[async_trait]
impl Handler for MeteredStorage {
    type Req = StorageOp;
    type Reply = StorageReply;

    fn handle_now(&self, req: &StorageOp) -> Option<(Result<StorageReply, WireError>, Bytes)> {
        let started = table().start();
        let answer = self.0.handle_now(req)?;
        record(req.index(), started, &answer.0, 0, answer.1.len());
        Some(answer)
    }

    fn handle_blocking(&self, req: &StorageOp) -> Option<BlockingAnswer<StorageReply>> {
        let started = table().start();
        let op = req.index();
        let work = self.0.handle_blocking(req)?;
        Some(Box::new(move || {
            let (result, out) = work();
            record(op, started, &result, 0, out.len());
            (result, out)
        }))
    }

    async fn handle(&self, req: StorageOp, data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        let started = table().start();
        let op = req.index();
        let data_in = data.len();
        let (result, out) = self.0.handle(req, data).await;
        record(op, started, &result, data_in, out.len());
        (result, out)
    }
}

/// Publishes the drives of `service` at every scrape.
pub fn publish_drives(service: &Arc<StorageService>) {
    let weak: Weak<StorageService> = Arc::downgrade(service);
    metrics::gauges::register_source(move |out| {
        let Some(service) = weak.upgrade() else {
            return;
        };
        for d in service.drives_now() {
            out.push(Sample::new(names::DRIVE_BYTES, &[("drive", &d.path), ("kind", "total")], d.bytes_total as f64));
            out.push(Sample::new(names::DRIVE_BYTES, &[("drive", &d.path), ("kind", "free")], d.bytes_free as f64));
            out.push(Sample::new(names::DRIVE_SHARDS, &[("drive", &d.path)], d.shards as f64));
            out.push(Sample::new(
                names::DRIVE_ERROR,
                &[("drive", &d.path)],
                if d.error.is_empty() { 0.0 } else { 1.0 },
            ));
        }
    });
}

/// Tells every metadata service in `metas` where this node's exporter is, every
/// [`ANNOUNCE_INTERVAL`], once the node has an id. Runs until dropped.
pub async fn announce(
    service: Arc<StorageService>,
    metas: Vec<String>,
    cluster: String,
    addr: String,
    exporter: String,
) {
    let peers: Vec<wire::Peer> = metas.iter().map(|m| wire::Peer::new(m.clone(), Service::Meta)).collect();
    // Known by its address until the metadata service gives it an id.
    metrics::set_identity(metrics::Identity { role: "storage".into(), id: addr.clone(), cluster: cluster.clone() });
    loop {
        let node = service.node_id();
        if node != 0 {
            metrics::set_identity(metrics::Identity {
                role: "storage".into(),
                id: node.to_string(),
                cluster: cluster.clone(),
            });
            let process = ProcessInfo {
                role: "storage".into(),
                id: node.to_string(),
                addr: addr.clone(),
                metrics: exporter.clone(),
                host: metrics::hostname(),
                pid: std::process::id(),
                started_ms: metrics::started_ms(),
                version: env!("CARGO_PKG_VERSION").into(),
                seen_ms_ago: 0,
            };
            let call = MetaCall { request_id: 0, op: MetaOp::Announce { process } };
            for peer in &peers {
                if let Err(e) =
                    peer.call::<MetaCall, wire::MetaReply>(&call, Bytes::new(), Duration::from_secs(5)).await
                {
                    tracing::debug!("announcing the metrics exporter to {} failed: {e}", peer.addr());
                }
            }
        }
        tokio::time::sleep(if node == 0 { Duration::from_millis(500) } else { ANNOUNCE_INTERVAL }).await;
    }
}
