//! The storage service: answers `StorageOp` requests from the shard store, and keeps the node
//! a member of the cluster (registration and heartbeats to the metadata service).
//!
//! The store's file I/O blocks, so requests run it on tokio's blocking pool, at most
//! [`BLOCKING_OPS_PER_DRIVE_MAX`] at once per drive (a semaphore per drive), so a burst of
//! requests queues here instead of starting hundreds of threads that all fight over the same
//! disks, and a slow drive holds up only its own. Reads first try without blocking, on the
//! task that read the request off the connection (`Handler::handle_now`): a shard file read
//! lately is still open and its blocks are usually in the page cache (`RWF_NOWAIT`), and then
//! the answer costs no task and no hand-off to another thread. A read that would wait for the
//! drive goes from there straight to the pool when the drive's queue has room
//! (`Handler::handle_blocking`), and the pool's thread sends the answer: one hand-off instead
//! of three (to a task, to the pool, back to the task). Only reads that would queue, and
//! every other request, get a task of their own. Every connection has many
//! requests in flight (see `wire::rpc`), so nothing is serialised per connection. Shard bytes
//! move as `Bytes` from the request frame to the file and from the file into the reply frame
//! without further copies.

use crate::object::ObjectShards;
use crate::store::ShardStore;
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use wire::stages::{self, Stage};
use wire::{
    werr, BlockingAnswer, Connection, DriveInfo, ErrorCode, Handler, MetaCall, MetaOp, MetaReply, NodeId, RpcError,
    Service, ShardKey, StorageOp, StorageReply, WireError,
};

/// Blocking store operations allowed at once per drive; more wait for a permit. Enough to keep
/// an NVMe queue busy, few enough not to thrash a spinning disk with seeks.
pub const BLOCKING_OPS_PER_DRIVE_MAX: usize = 16;
/// How long one call to the metadata service may take before it counts as failed.
pub const META_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// First and longest wait between registration attempts (doubling, with jitter).
const REGISTER_BACKOFF_FIRST: Duration = Duration::from_millis(100);
const REGISTER_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Answers storage requests for one node. Shared by every connection.
pub struct StorageService {
    /// `None` after [`StorageService::shutdown`]: connections may outlive the server (a client
    /// that never hangs up), and must not keep the drives open and locked.
    store: RwLock<Option<Arc<ShardStore>>>,
    /// A node of an object pool keeps its shards in a bucket instead (then `store` is `None`
    /// from the start); `None` after shutdown as well.
    object: RwLock<Option<Arc<ObjectShards>>>,
    /// The node id the metadata service assigned; 0 until registered.
    node: AtomicU32,
    /// Blocking store operations allowed at once, per drive.
    drives: Vec<Arc<Semaphore>>,
    /// Bytes of shards the cluster's GC is waiting to delete, at most how long until it has (from
    /// heartbeat replies, which may be a second or two old), and when a put that found the
    /// drives full last started asking for them (see [`StorageService::explain_no_space`]).
    pending_delete: parking_lot::Mutex<(u64, u64, Option<tokio::time::Instant>)>,
    /// The metadata services, asked for the pending figure when a put finds the drives full.
    metas: parking_lot::Mutex<Vec<Arc<wire::Peer>>>,
    /// Held while asking, so that a burst of full puts asks once.
    asking: tokio::sync::Mutex<()>,
    /// Set under the simulator ([`StorageService::simulate`]): its network, and store
    /// operations run inline on the calling task instead of on the blocking pool.
    simulated: std::sync::OnceLock<wire::world::Endpoint>,
}

/// A shard read's answer as the reply carries it.
fn shard_reply(r: Result<(wire::ShardInfo, u32, Bytes), WireError>) -> (Result<StorageReply, WireError>, Bytes) {
    match r {
        Ok((info, offset, bytes)) => (Ok(StorageReply::Shard { info, offset }), bytes),
        Err(e) => (Err(e), Bytes::new()),
    }
}

/// A ranged read's answer as the reply carries it.
fn range_reply(r: Result<(wire::ShardInfo, u32, u32, Bytes), WireError>) -> (Result<StorageReply, WireError>, Bytes) {
    match r {
        Ok((info, head_crc, tail_crc, bytes)) => (Ok(StorageReply::Range { info, head_crc, tail_crc }), bytes),
        Err(e) => (Err(e), Bytes::new()),
    }
}

/// How long a put that found the drives full waits for that figure.
const PENDING_DELETE_ASK_TIMEOUT: Duration = Duration::from_secs(1);

impl StorageService {
    pub fn new(store: Arc<ShardStore>) -> StorageService {
        let drives = (0..store.drive_paths().len().max(1))
            .map(|_| Arc::new(Semaphore::new(BLOCKING_OPS_PER_DRIVE_MAX)))
            .collect();
        StorageService {
            store: RwLock::new(Some(store)),
            object: RwLock::new(None),
            node: AtomicU32::new(0),
            drives,
            pending_delete: parking_lot::Mutex::new((0, 0, None)),
            metas: parking_lot::Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
            simulated: std::sync::OnceLock::new(),
        }
    }

    /// A service over an object backend: requests are answered with S3 requests (async, no
    /// blocking pool; the backend bounds the requests in flight).
    pub fn new_object(object: Arc<ObjectShards>) -> StorageService {
        StorageService {
            store: RwLock::new(None),
            object: RwLock::new(Some(object)),
            node: AtomicU32::new(0),
            drives: vec![Arc::new(Semaphore::new(BLOCKING_OPS_PER_DRIVE_MAX))],
            pending_delete: parking_lot::Mutex::new((0, 0, None)),
            metas: parking_lot::Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
            simulated: std::sync::OnceLock::new(),
        }
    }

    /// The object backend, on a node of an object pool (until shutdown).
    pub fn object(&self) -> Option<Arc<ObjectShards>> {
        self.object.read().clone()
    }

    /// Capacity and health of the drives, or of the object store as one drive, without
    /// waiting for the blocking pool (statvfs of the drives blocks briefly).
    pub fn drives_now(&self) -> Vec<DriveInfo> {
        if let Some(object) = self.object() {
            return object.stat();
        }
        self.store().map(|s| s.stat()).unwrap_or_default()
    }

    /// Answers a request from the object backend.
    async fn handle_object(
        &self,
        object: &ObjectShards,
        req: StorageOp,
        data: Bytes,
    ) -> (Result<StorageReply, WireError>, Bytes) {
        let none = Bytes::new();
        match req {
            StorageOp::PutShard { info } => match object.put(&info, data).await {
                Ok(()) => (Ok(StorageReply::Ok), none),
                Err(e) => (Err(self.explain_no_space(e).await), none),
            },
            StorageOp::GetShard { key, offset, len } => {
                let handling = Instant::now();
                let r = object.get(key, offset, len).await;
                stages::record(Stage::StorageHandle, handling);
                shard_reply(r)
            }
            StorageOp::ReadRange { key, offset, len } => {
                let handling = Instant::now();
                let r = object.get_range(key, offset, len).await;
                stages::record(Stage::StorageHandle, handling);
                range_reply(r)
            }
            StorageOp::DeleteShards { keys } => {
                (object.delete(&keys).await.map(|count| StorageReply::Deleted { count }), none)
            }
            StorageOp::ListShards { after, limit } => (Ok(StorageReply::Keys(object.list(after, limit))), none),
            StorageOp::Stages => (Ok(StorageReply::Stages(stages::snapshot())), none),
            StorageOp::Scrub { after, limit } => {
                // Each object read whole from the store and verified here, on the node that
                // fronts it: nothing crosses the cluster's network.
                let keys = object.list(after, limit.min(crate::store::SCRUB_KEYS_MAX));
                let mut tally = crate::store::ScrubTally::default();
                for &key in &keys {
                    tally.note(key, object.get(key, 0, 0).await.map(|(_, _, data)| data.len()));
                }
                (Ok(tally.reply(&keys, limit)), none)
            }
            StorageOp::Stat => (Ok(StorageReply::Stat { node: self.node_id(), drives: object.stat() }), none),
        }
    }

    /// Records what the metadata service said is pending deletion (bytes, within ms).
    pub fn set_pending_delete(&self, bytes: u64, within_ms: u64) {
        let mut pending = self.pending_delete.lock();
        (pending.0, pending.1) = (bytes, within_ms);
    }

    /// The metadata services to ask for the pending figure (see [`Self::explain_no_space`]).
    pub fn set_meta_addrs(&self, addrs: &[String]) {
        let net = self.net();
        *self.metas.lock() = addrs
            .iter()
            .map(|a| Arc::new(wire::Peer::on(net.clone(), a.clone(), Service::Meta, Default::default())))
            .collect();
    }

    /// Runs this service under the simulator: other services are reached over `endpoint`'s
    /// network, and store operations run inline on the task that asks (one thread, so the
    /// order of events depends on the seed alone). Call before [`Self::set_meta_addrs`].
    pub fn simulate(&self, endpoint: wire::world::Endpoint) {
        let _ = self.simulated.set(endpoint);
    }

    /// The network other services are reached over.
    fn net(&self) -> wire::world::Net {
        match self.simulated.get() {
            Some(endpoint) => wire::world::Net::Simulated(endpoint.clone()),
            None => wire::world::Net::Tcp,
        }
    }

    /// The pending figure as of now: asked for, unless an ask that started after this call
    /// arrived has answered meanwhile (a burst of full puts asks once, and no put is answered
    /// with a figure from before it arrived, which a delete just before it would make wrong).
    async fn fresh_pending_delete(&self) -> (u64, u64) {
        let arrived = tokio::time::Instant::now();
        let _asking = self.asking.lock().await;
        let known = *self.pending_delete.lock();
        if known.2.is_some_and(|started| started >= arrived) {
            return (known.0, known.1);
        }
        let started = tokio::time::Instant::now();
        let metas = self.metas.lock().clone();
        let call = MetaCall { request_id: 0, op: MetaOp::Status { scan_chunks: false } };
        for peer in metas {
            let asked = peer.call::<MetaCall, MetaReply>(&call, Bytes::new(), PENDING_DELETE_ASK_TIMEOUT);
            if let Ok(Ok((MetaReply::Status(s), _))) = tokio::time::timeout(PENDING_DELETE_ASK_TIMEOUT, asked).await {
                let (bytes, within_ms) = (s.bytes_pending_delete, s.pending_delete_within_ms);
                *self.pending_delete.lock() = (bytes, within_ms, Some(started));
                return (bytes, within_ms);
            }
        }
        // No metadata service answered: the heartbeats' figure (the puts queued behind this
        // ask take it too rather than wait again).
        self.pending_delete.lock().2 = Some(started);
        (known.0, known.1)
    }

    /// A full drive's error, telling the writer when space that deletions freed comes back:
    /// deleted files' shards stay until the GC's grace period has passed, so right after a
    /// delete the drives can be full although `df` already counts that space as free.
    pub async fn explain_no_space(&self, mut e: WireError) -> WireError {
        if e.code != ErrorCode::NoSpace {
            return e;
        }
        let (bytes, within_ms) = self.fresh_pending_delete().await;
        if bytes > 0 {
            e.message.push_str(&format!(
                " (deleted files still hold {} on the cluster's drives, freed within {} s: retry then)",
                human_bytes(bytes),
                within_ms.div_ceil(1000)
            ));
        }
        e
    }

    /// The store, unless the service has shut down.
    pub fn store(&self) -> Option<Arc<ShardStore>> {
        self.store.read().clone()
    }

    fn live_store(&self) -> Result<Arc<ShardStore>, WireError> {
        self.store().ok_or_else(|| werr!(Unavailable, "the storage service is shutting down"))
    }

    /// Stops answering: waits for running operations to finish, then releases the store (and
    /// with it the drive locks, once no one else holds it). Later requests get `Unavailable`.
    pub async fn shutdown(&self) {
        for drive in &self.drives {
            if let Ok(all) = drive.acquire_many(BLOCKING_OPS_PER_DRIVE_MAX as u32).await {
                drive.close();
                drop(all);
            }
        }
        self.store.write().take();
        if let Some(object) = self.object.write().take() {
            object.close();
        }
    }

    /// The node id reported in `Stat` (0 until the node has registered).
    pub fn node_id(&self) -> NodeId {
        self.node.load(Ordering::Relaxed)
    }

    pub fn set_node_id(&self, id: NodeId) {
        self.node.store(id, Ordering::Relaxed);
    }

    /// Runs a blocking store operation on the blocking pool, queued with the others of drive
    /// `drive`.
    async fn run_blocking<T, F>(&self, drive: usize, f: F) -> Result<T, WireError>
    where
        T: Send + 'static,
        F: FnOnce(&ShardStore) -> Result<T, WireError> + Send + 'static,
    {
        let queue = &self.drives[drive.min(self.drives.len() - 1)];
        let _permit = queue.acquire().await.map_err(|_| werr!(Unavailable, "the storage service is shutting down"))?;
        let store = self.live_store()?;
        if self.simulated.get().is_some() {
            return f(&store);
        }
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(r) => r,
            Err(e) => Err(werr!(Internal, "storage operation failed: {e}")),
        }
    }

    /// A read of `key` on the drive's queue of the blocking pool (the transport has already
    /// tried to answer it at once, `handle_now`).
    async fn read<T, B>(&self, key: ShardKey, blocking: B, handling: Instant) -> Result<T, WireError>
    where
        T: Send + 'static,
        B: FnOnce(&ShardStore) -> Result<T, WireError> + Send + 'static,
    {
        let drive = self.live_store()?.drive_of(key).unwrap_or(0);
        self.run_blocking(drive, move |s| {
            stages::record(Stage::StorageQueue, handling);
            blocking(s)
        })
        .await
    }

    /// The planted flaw [`wire::world::Flaw::AckBeforeDurable`]: answers the put at once and
    /// stores the shard a while later, unless the service stopped (crashed) meanwhile.
    fn put_later(&self, info: wire::ShardInfo, data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        // Weak: a crash (shutdown) drops the store, and the late write with it.
        let store = self.store().map(|s| Arc::downgrade(&s));
        let delay = Duration::from_millis(wire::world::random::<u64>() % 2000);
        wire::world::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(store) = store.and_then(|s| s.upgrade()) {
                let _ = store.put(&info, &data);
            }
        });
        (Ok(StorageReply::Ok), Bytes::new())
    }

    /// Capacity and health of the drives, for `Stat`, registration and heartbeats.
    pub async fn drive_info(&self) -> Vec<DriveInfo> {
        if let Some(object) = self.object() {
            return object.stat();
        }
        self.run_blocking(0, |s| Ok(s.stat())).await.unwrap_or_default()
    }
}

#[async_trait]
impl Handler for StorageService {
    type Req = StorageOp;
    type Reply = StorageReply;

    fn handle_now(&self, req: &StorageOp) -> Option<(Result<StorageReply, WireError>, Bytes)> {
        // Whether a read would wait is the page cache's say, which no seed decides: under the
        // simulator every request takes the one path.
        if self.simulated.get().is_some() {
            return None;
        }
        let handling = Instant::now();
        let store = self.store()?;
        let answer = match *req {
            StorageOp::GetShard { key, offset, len } => shard_reply(store.get_now(key, offset, len)?),
            StorageOp::ReadRange { key, offset, len } => range_reply(store.get_range_now(key, offset, len)?),
            _ => return None,
        };
        stages::record(Stage::StorageHandle, handling);
        Some(answer)
    }

    fn handle_blocking(&self, req: &StorageOp) -> Option<BlockingAnswer<StorageReply>> {
        // Under the simulator every request takes the one path (`handle`), which runs the
        // store inline; an object pool's node has no store.
        if self.simulated.get().is_some() {
            return None;
        }
        let handling = Instant::now();
        let store = self.store()?;
        let (StorageOp::GetShard { key, offset, len } | StorageOp::ReadRange { key, offset, len }) = *req else {
            return None;
        };
        let ranged = matches!(req, StorageOp::ReadRange { .. });
        let drive = store.drive_of(key).unwrap_or(0);
        // A read that would have to queue behind the drive's other work takes `handle`'s way,
        // which waits for its turn without holding a thread.
        let permit = self.drives[drive.min(self.drives.len() - 1)].clone().try_acquire_owned().ok()?;
        Some(Box::new(move || {
            stages::record(Stage::StorageQueue, handling);
            let answer = if ranged {
                range_reply(store.get_range(key, offset, len))
            } else {
                shard_reply(store.get(key, offset, len))
            };
            // The store first: once shutdown holds every permit, no read holds the store.
            drop(store);
            drop(permit);
            stages::record(Stage::StorageHandle, handling);
            answer
        }))
    }

    async fn handle(&self, req: StorageOp, data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        if let Some(object) = self.object() {
            return self.handle_object(&object, req, data).await;
        }
        match req {
            StorageOp::PutShard { info } => {
                let drive = match self.live_store() {
                    Ok(s) => s.drive_for_put(info.key),
                    Err(e) => return (Err(e), Bytes::new()),
                };
                if wire::world::flawed(wire::world::Flaw::AckBeforeDurable) {
                    return self.put_later(info, data);
                }
                let r = match self.run_blocking(drive, move |s| s.put(&info, &data)).await {
                    Ok(()) => Ok(StorageReply::Ok),
                    Err(e) => Err(self.explain_no_space(e).await),
                };
                (r, Bytes::new())
            }
            StorageOp::GetShard { key, offset, len } => {
                let handling = Instant::now();
                let r = self.read(key, move |s| s.get(key, offset, len), handling).await;
                stages::record(Stage::StorageHandle, handling);
                shard_reply(r)
            }
            StorageOp::DeleteShards { keys } => {
                let drive = match (self.live_store(), keys.first()) {
                    (Ok(s), Some(&key)) => s.drive_of(key).unwrap_or(0),
                    _ => 0,
                };
                let r = self.run_blocking(drive, move |s| s.delete(&keys)).await;
                (r.map(|count| StorageReply::Deleted { count }), Bytes::new())
            }
            StorageOp::ListShards { after, limit } => {
                // An in-memory index walk: cheap enough to answer inline.
                (self.live_store().map(|s| StorageReply::Keys(s.list(after, limit))), Bytes::new())
            }
            StorageOp::ReadRange { key, offset, len } => {
                let handling = Instant::now();
                let r = self.read(key, move |s| s.get_range(key, offset, len), handling).await;
                stages::record(Stage::StorageHandle, handling);
                range_reply(r)
            }
            StorageOp::Stages => (Ok(StorageReply::Stages(stages::snapshot())), Bytes::new()),
            StorageOp::Scrub { after, limit } => {
                // Queued behind the first drive's reads and writes like any blocking work.
                let r = self.run_blocking(0, move |s| Ok(s.scrub(after, limit))).await;
                (r, Bytes::new())
            }
            StorageOp::Stat => {
                let drives = self.drive_info().await;
                (Ok(StorageReply::Stat { node: self.node_id(), drives }), Bytes::new())
            }
        }
    }
}

/// Serves the storage protocol on `listener` until the task is dropped. This is what `run`
/// uses; tests call it directly to run a node in-process without a metadata service.
pub async fn serve_on(listener: TcpListener, service: Arc<StorageService>, cluster: String) {
    let metered = Arc::new(crate::metered::MeteredStorage(service));
    wire::rpc::serve(listener, metered, Service::Storage, cluster).await
}

/// Bytes as people read them: "1.5 GiB".
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A random id for an idempotent metadata call (0 means "untracked", so never 0).
fn request_id() -> u128 {
    loop {
        let id: u128 = wire::world::random();
        if id != 0 {
            return id;
        }
    }
}

/// A lazily (re)connecting link to the metadata service, like `wire::Peer`, that also checks
/// the cluster name in the service's hello: a node registering with another cluster's metadata
/// service would be handed that cluster's shards. (`Peer` does not expose the hello.) A link
/// to the wrong cluster is kept, not redialled, so a misconfigured node does not pile up
/// connections while it retries.
struct MetaLink {
    net: wire::world::Net,
    addr: String,
    cluster: String,
    /// The live connection and the cluster its server named.
    conn: Option<(Connection, String)>,
}

impl MetaLink {
    fn new(net: wire::world::Net, addr: String, cluster: String) -> MetaLink {
        MetaLink { net, addr, cluster, conn: None }
    }

    async fn call(&mut self, call: &MetaCall) -> Result<MetaReply, RpcError> {
        let (conn, theirs) = match &self.conn {
            Some((c, theirs)) if !c.is_dead() => (c.clone(), theirs.clone()),
            _ => {
                let tls = wire::tls::installed();
                let (c, hello) = Connection::connect_on(&self.net, &self.addr, Service::Meta, tls.as_deref()).await?;
                self.conn = Some((c.clone(), hello.cluster.clone()));
                (c, hello.cluster)
            }
        };
        if !theirs.is_empty() && theirs != self.cluster {
            return Err(RpcError::Protocol {
                addr: self.addr.clone(),
                reason: format!(
                    "the metadata service belongs to cluster {theirs:?}; this node is configured for {:?}",
                    self.cluster
                ),
            });
        }
        conn.call::<MetaCall, MetaReply>(call, Bytes::new(), META_CALL_TIMEOUT).await.map(|(r, _)| r)
    }
}

/// Registers with the metadata service, retrying with backoff until it answers with a node id.
async fn register(link: &mut MetaLink, service: &StorageService, m: &Membership) -> Result<NodeId, WireError> {
    let (uuid, addr, pool) = (m.uuid, m.addr.as_str(), m.pool.as_str());
    // One id for every retry of this registration: if an earlier attempt was applied but its
    // answer lost, the service returns that answer instead of applying it again.
    let id = request_id();
    let mut backoff = REGISTER_BACKOFF_FIRST;
    let mut attempts = 0u32;
    let mut last_warn: Option<tokio::time::Instant> = None;
    loop {
        attempts += 1;
        let drives = service.drive_info().await;
        let call = MetaCall {
            request_id: id,
            op: MetaOp::RegisterNode {
                uuid,
                addr: addr.to_string(),
                drives,
                pool: pool.to_string(),
                object: m.object.clone(),
            },
        };
        let error = match link.call(&call).await {
            Ok(MetaReply::Node { id, map_version }) => {
                tracing::info!("registered with {} as node {id} (placement map version {map_version})", link.addr);
                return Ok(id);
            }
            Ok(other) => format!("unexpected answer {other:?}"),
            // The configuration is refused (a pool of another kind, a bad name): retrying
            // cannot help, and the node stops with the reason.
            Err(RpcError::Remote(e)) if e.code == ErrorCode::Invalid => return Err(e),
            Err(e) => e.to_string(),
        };
        // Loud at first, then once a minute: a node started before its metadata service is
        // normal and should not flood the log.
        if attempts <= 3 || last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            last_warn = Some(tokio::time::Instant::now());
            tracing::warn!("cannot register with the metadata service at {} (attempt {attempts}): {error}", link.addr);
        }
        let jitter = Duration::from_millis(wire::world::random::<u64>() % (backoff.as_millis() as u64 / 2 + 1));
        tokio::time::sleep(backoff + jitter).await;
        backoff = (backoff * 2).min(REGISTER_BACKOFF_MAX);
    }
}

/// What the membership loop needs to know about this node.
pub struct Membership {
    pub meta: String,
    pub cluster: String,
    pub uuid: u128,
    pub addr: String,
    pub heartbeat: Duration,
    /// The pool the node belongs to (empty: the default pool).
    pub pool: String,
    /// Where a node of an object pool keeps its shards.
    pub object: Option<wire::ObjectTarget>,
}

/// Registers, then heartbeats forever; re-registers when the metadata service no longer knows
/// the node. Keeps going while the metadata service is unreachable.
/// Returns only when the metadata service refuses the node's configuration.
pub async fn membership(service: Arc<StorageService>, m: Membership) -> WireError {
    let mut link = MetaLink::new(service.net(), m.meta.clone(), m.cluster.clone());
    loop {
        let node = match register(&mut link, &service, &m).await {
            Ok(node) => node,
            Err(e) => return e,
        };
        service.set_node_id(node);
        let mut ticker = tokio::time::interval(m.heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            ticker.tick().await;
            let drives = service.drive_info().await;
            // Heartbeats are idempotent and frequent, so they are not tracked (request id 0).
            let call = MetaCall { request_id: 0, op: MetaOp::Heartbeat { node, drives } };
            match link.call(&call).await {
                Ok(MetaReply::Heartbeat { bytes_pending_delete, pending_delete_within_ms, .. }) => {
                    service.set_pending_delete(bytes_pending_delete, pending_delete_within_ms);
                    if let Some(t) = failing_since.take() {
                        tracing::info!(
                            "metadata service at {} answers heartbeats again after {:?}",
                            m.meta,
                            t.elapsed()
                        );
                    }
                }
                Ok(other) => {
                    tracing::warn!("unexpected heartbeat answer from {}: {other:?}", m.meta)
                }
                Err(RpcError::Remote(e)) if e.code == ErrorCode::NotMember => {
                    tracing::warn!("metadata service says node {node} is not a member ({e}); registering again");
                    break;
                }
                Err(e) => {
                    if failing_since.is_none() {
                        tracing::warn!("heartbeat to {} failed: {e}; will keep trying", m.meta);
                        failing_since = Some(tokio::time::Instant::now());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_drive_tells_the_writer_what_deletions_will_free() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = crate::StoreConfig { drives: vec![dir.path().join("d")], reserve_bytes: 0, keys: None };
        let service = StorageService::new(Arc::new(ShardStore::open(&config).expect("store opens")));
        let full = || werr!(NoSpace, "put chunk 1 shard 0: drive /d is full");
        // Nothing pending (and no metadata service to ask): the error is left as it is.
        assert_eq!(service.explain_no_space(full()).await.message, full().message);
        service.set_pending_delete(3 << 29, 31_000);
        let e = service.explain_no_space(full()).await;
        assert_eq!(e.code, ErrorCode::NoSpace);
        assert!(
            e.message.starts_with(&full().message)
                && e.message.contains("still hold 1.5 GiB")
                && e.message.contains("within 31 s"),
            "{}",
            e.message
        );
        // Other errors are not touched.
        assert_eq!(service.explain_no_space(werr!(Io, "disk on fire")).await.message, "disk on fire");
        assert_eq!(human_bytes(1000), "1000 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    /// A read that waits for the drive is answered by blocking work of its own when the
    /// drive's queue has room, with what `handle` answers; a full queue, a write, and a
    /// service shut down take `handle`'s way (or none).
    #[tokio::test]
    async fn reads_go_to_the_pool_on_their_own_only_while_the_drive_has_room() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = crate::StoreConfig { drives: vec![dir.path().join("d")], reserve_bytes: 0, keys: None };
        let service = StorageService::new(Arc::new(ShardStore::open(&config).expect("store opens")));
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let key = ShardKey { chunk: 9, index: 1 };
        let info = wire::ShardInfo {
            key,
            ec: wire::EcScheme::DEFAULT,
            len: data.len() as u32,
            block_crcs: crate::format::block_crcs(&data),
        };
        let put = StorageOp::PutShard { info };
        assert!(service.handle_blocking(&put).is_none(), "a write must wait its turn on `handle`");
        let (r, _) = service.handle(put, Bytes::from(data.clone())).await;
        assert_eq!(r, Ok(StorageReply::Ok));
        for req in [
            StorageOp::GetShard { key, offset: 0, len: 0 },
            StorageOp::GetShard { key, offset: 70_000, len: 5 },
            StorageOp::ReadRange { key, offset: 12_345, len: 4_000 },
            StorageOp::GetShard { key: ShardKey { chunk: 10, index: 0 }, offset: 0, len: 0 },
        ] {
            let work = service.handle_blocking(&req).expect("a drive with room takes the read");
            let (got, got_data) = tokio::task::spawn_blocking(work).await.expect("work");
            let (want, want_data) = service.handle(req.clone(), Bytes::new()).await;
            assert_eq!(got, want, "{req:?}");
            assert!(got_data == want_data, "{req:?}: other bytes");
        }
        // Every permit of the drive taken: the read queues on `handle`'s way.
        let read = StorageOp::GetShard { key, offset: 0, len: 0 };
        let all = service.drives[0].acquire_many(BLOCKING_OPS_PER_DRIVE_MAX as u32).await.expect("permits");
        assert!(service.handle_blocking(&read).is_none(), "a read past the drive's queue must wait");
        drop(all);
        // Work handed out holds a permit (shutdown waits for it) and the store.
        let work = service.handle_blocking(&read).expect("room again");
        assert_eq!(service.drives[0].available_permits(), BLOCKING_OPS_PER_DRIVE_MAX - 1);
        drop(work);
        assert_eq!(service.drives[0].available_permits(), BLOCKING_OPS_PER_DRIVE_MAX);
        service.shutdown().await;
        assert!(service.handle_blocking(&read).is_none());
    }
}
