//! Trove's metadata service: the namespace (inodes, entries, attributes, chunk records), the
//! cluster manager (storage nodes, liveness, placement map) and chunk garbage collection.
//!
//! **Architecture invariant:** the service keeps no durable state outside the key-value engine.
//! In memory it has only heartbeat times, reserved id batches and caches of immutable records,
//! so several metadata servers may serve one engine and any of them may restart at any time.
//! Every operation is one engine transaction; mutations carrying a request id record their
//! reply in that transaction, so a client may retry anything, even after `MaybeCommitted`.
//!
//! Module map: [`keys`] (key schema and value formats, documented in ARCHITECTURE.md), [`store`]
//! (transactions, error mapping, id allocation), [`namespace`], [`cluster`], [`pools`] (storage
//! pools), [`policies`] (file pool policies), [`quota`] (directory tree quotas), [`trash`] (deleted files kept for a while), [`snapshot`] (namespace versioning and snapshots), [`gc`], [`locks`] (byte-range locks under leases), and [`server`] (configuration, network serving, background
//! tasks). [`MetaService`] here routes each call to its owner.

pub mod audit;
pub mod clone;
pub mod cluster;
pub mod events;
pub mod gc;
pub mod identity;
pub mod ingest;
pub mod jobs;
pub mod keys;
pub mod locks;
pub mod metered;
pub mod namespace;
pub mod policies;
pub mod pools;
pub mod processes;
pub mod quota;
pub mod retain;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod trash;
pub mod watch;

pub use server::{run, serve, Background, EngineConfig, MetaConfig};

use async_trait::async_trait;
use bytes::Bytes;
use cluster::{Cluster, ClusterOptions};
use gc::{Gc, GcReport};
use kv::{KvEngine, TxnError};
use namespace::Ctx;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::IdPool;
use wire::{EcScheme, MetaCall, MetaOp, MetaReply, MetaResult, Timestamp, WireError, CHUNK_BYTES_DEFAULT};

/// Most calls one [`MetaService::call_batch`] applies.
pub const BATCH_CALLS_MAX: usize = 4096;

/// Settings of a [`MetaService`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaOptions {
    /// The scheme of the root directory when it is created (inherited below it), and the one
    /// capacity is reported in.
    pub default_ec: EcScheme,
    /// The chunk size of the root directory when it is created.
    pub chunk_bytes: u32,
    /// Placement groups of each new placement map.
    pub pg_count: u32,
    /// A node not heard from for this long is down.
    pub down_after_ms: u64,
    /// How long the reply of a mutation is kept for retries of the same request id.
    pub request_ttl_ms: u64,
    /// How long a replaced or deleted chunk stays readable before GC deletes its shards.
    pub gc_grace_ms: u64,
    /// Pause between GC passes of the background task.
    pub gc_interval_ms: u64,
    /// Inode numbers and chunk ids reserved per counter transaction.
    pub id_batch: u64,
    /// A node down for longer than this is marked out, and its shards are rebuilt elsewhere.
    pub rebuild_after_ms: u64,
    /// Length of the cluster manager's lease (renewed every quarter of it).
    pub lease_ms: u64,
    /// Most milliseconds two metadata servers' wall clocks may differ (NTP keeps real ones
    /// within a few). Leases recorded by one server are judged expired by another only this
    /// long after their recorded end: the cluster manager's lease, and the client sessions'
    /// leases that keep their locks.
    pub clock_skew_max_ms: u64,
    /// Days a deleted regular file is kept in the trash (`/.trash`) before it is purged; 0
    /// (the default): deletes are immediate.
    pub trash_days: u32,
}

impl Default for MetaOptions {
    fn default() -> Self {
        MetaOptions {
            default_ec: EcScheme::DEFAULT,
            chunk_bytes: CHUNK_BYTES_DEFAULT,
            pg_count: 256,
            down_after_ms: 4000,
            request_ttl_ms: 10 * 60 * 1000,
            gc_grace_ms: 30_000,
            gc_interval_ms: 1000,
            id_batch: 1024,
            rebuild_after_ms: 120_000,
            lease_ms: 5000,
            clock_skew_max_ms: 500,
            trash_days: 0,
        }
    }
}

impl MetaOptions {
    /// Checks the options make sense.
    pub fn validate(&self) -> Result<(), WireError> {
        namespace::check_layout(self.default_ec, self.chunk_bytes)?;
        if self.pg_count == 0 || self.pg_count > cluster::PG_COUNT_MAX {
            return Err(wire::werr!(
                Invalid,
                "pg_count {} must be between 1 and {}",
                self.pg_count,
                cluster::PG_COUNT_MAX
            ));
        }
        if self.down_after_ms == 0 {
            return Err(wire::werr!(Invalid, "down_after_ms must be positive"));
        }
        if self.lease_ms < 100 {
            return Err(wire::werr!(Invalid, "lease_ms must be at least 100"));
        }
        if self.clock_skew_max_ms >= self.lease_ms {
            return Err(wire::werr!(
                Invalid,
                "clock_skew_max_ms ({}) must be less than lease_ms ({})",
                self.clock_skew_max_ms,
                self.lease_ms
            ));
        }
        Ok(())
    }
}

/// The metadata service: answers [`MetaCall`]s in process or, through [`serve`], over the
/// network.
pub struct MetaService {
    engine: Arc<dyn KvEngine>,
    options: MetaOptions,
    inos: IdPool,
    cluster: Cluster,
    gc: Gc,
    /// Random id of this server process, as the holder of the cluster manager's lease.
    server_id: u128,
    /// The address other processes reach this server at (shown as the leader in status).
    advertise: parking_lot::Mutex<String>,
    /// Until when this server holds the lease, by the monotonic clock (`None`: not the
    /// leader). Monotonic: a step of the wall clock neither extends nor cuts it.
    lease_until: parking_lot::Mutex<Option<tokio::time::Instant>>,
    /// Counts the terms of this server's leadership: a new one each time it takes the lease
    /// from another server or from none, not when it renews a lapsed lease no one else took.
    lease_term: AtomicU64,
    /// A chunk with missing shards was committed through this server since the flag was last
    /// taken (the data mover repairs such chunks; this tells it not to wait).
    degraded_written: std::sync::atomic::AtomicBool,
    /// Processes that announced their metrics exporters (in memory).
    processes: processes::Processes,
}

impl MetaService {
    /// Opens the service on an engine, creating the root directory on first start.
    pub async fn new(engine: Arc<dyn KvEngine>, options: MetaOptions) -> Result<Arc<MetaService>, WireError> {
        options.validate()?;
        // Every transaction keeps the versions of namespace records that snapshots need.
        let engine: Arc<dyn KvEngine> = Arc::new(snapshot::VersionedEngine::new(engine));
        namespace::ensure_root(engine.as_ref(), options.default_ec, options.chunk_bytes).await?;
        let cluster = Cluster::new(ClusterOptions {
            default_ec: options.default_ec,
            chunk_bytes: options.chunk_bytes,
            pg_count: options.pg_count,
            down_after: Duration::from_millis(options.down_after_ms),
            id_batch: options.id_batch,
            gc_grace: Duration::from_millis(options.gc_grace_ms),
            gc_interval: Duration::from_millis(options.gc_interval_ms),
        });
        Ok(Arc::new(MetaService {
            inos: IdPool::new(keys::counter::INO, wire::ROOT_INO + 1, options.id_batch),
            gc: Gc::new(options.gc_grace_ms),
            engine,
            options,
            cluster,
            server_id: rand_id(),
            advertise: parking_lot::Mutex::new(String::new()),
            lease_until: parking_lot::Mutex::new(None),
            lease_term: AtomicU64::new(0),
            degraded_written: std::sync::atomic::AtomicBool::new(false),
            processes: processes::Processes::default(),
        }))
    }

    pub fn engine(&self) -> &Arc<dyn KvEngine> {
        &self.engine
    }

    pub fn options(&self) -> &MetaOptions {
        &self.options
    }

    /// Whether a chunk was written degraded through this server since the last call.
    pub fn take_degraded_written(&self) -> bool {
        self.degraded_written.swap(false, Ordering::AcqRel)
    }

    /// Answers one call.
    pub async fn call(&self, call: MetaCall) -> MetaResult {
        let engine = self.engine.as_ref();
        // Reads through `.snapshots` answered as of the snapshot, writes there refused.
        let call = match snapshot::view_call(engine, call.op).await {
            Ok(answer) => return answer,
            Err(op) => MetaCall { request_id: call.request_id, op },
        };
        if let MetaOp::CommitChunks { chunks, .. } = &call.op {
            if chunks.iter().any(|c| c.missing != 0) {
                self.degraded_written.store(true, Ordering::Release);
            }
        }
        match call.op {
            MetaOp::StatFs => self.cluster.statfs(engine).await,
            MetaOp::AllocChunks { ino, count, avoid } => {
                self.cluster.alloc_chunks(engine, ino, count, &avoid, None).await
            }
            MetaOp::AllocChunksIn { ino, count, avoid, pool, ec } => {
                self.cluster.alloc_chunks(engine, ino, count, &avoid, Some((pool, ec))).await
            }
            MetaOp::GetMap { version } => Ok(MetaReply::Map((*self.cluster.map(engine, version).await?).clone())),
            MetaOp::RegisterNode { uuid, addr, drives, pool, object } => {
                self.cluster.register(engine, uuid, addr, drives, pool, object).await
            }
            MetaOp::Heartbeat { node, drives } => self.cluster.heartbeat(engine, node, drives).await,
            MetaOp::Status { scan_chunks } => self.cluster.status(engine, scan_chunks).await,
            MetaOp::NodeStates { known } => self.cluster.node_states(engine, known).await,
            MetaOp::ScanChunks { after, limit } => self.cluster.scan_chunks(engine, after, limit).await,
            MetaOp::ScanHeldChunks { after, limit } => snapshot::scan_held_chunks(engine, after, limit).await,
            MetaOp::HeldChunk { ino, index, id } => snapshot::held_chunk(engine, ino, index, id).await,
            MetaOp::MoveChunk { ino, expected, placement, missing } => {
                self.cluster.move_chunk(engine, ino, expected, placement, missing).await
            }
            MetaOp::SetNodeState { node, state, force } => {
                self.cluster.set_node_state(engine, node, state, force).await
            }
            MetaOp::Announce { process } => self.processes.announce(process).map(|()| MetaReply::Ok),
            MetaOp::ReportAuthFailures { front, refused, latest } => {
                let cut = |s: String| s.chars().take(wire::AUDIT_TEXT_BYTES_MAX / 4).collect::<String>();
                let (front, latest) = (cut(front), cut(latest));
                let event = events::NewEvent {
                    severity: wire::Severity::Warning,
                    kind: wire::events::kind::AUTH_FAILURE,
                    node: None,
                    subject: front.clone(),
                    message: format!("{front}: {refused} request(s) refused authentication; the latest: {latest}"),
                };
                self.record_events(vec![event]).await.map(|_| MetaReply::Ok)
            }
            MetaOp::Processes => Ok(MetaReply::Processes(self.processes.list())),
            MetaOp::Events { after, limit, newest } => {
                let (events, next) = events::read(engine, after, limit, newest).await?;
                Ok(MetaReply::Events { events, next })
            }
            MetaOp::SnapshotCreate { root, name, retain_until_ms } => {
                let tracked = self.tracked(call.request_id);
                let rec = snapshot::create(engine, root, &name, store::now_ms(), retain_until_ms, tracked).await?;
                Ok(MetaReply::Snapshots(vec![snapshot::info(rec, 0)]))
            }
            MetaOp::SnapshotRetain { root, name, until_ms } => {
                let tracked = self.tracked(call.request_id);
                let rec = snapshot::retain(engine, root, &name, until_ms, tracked).await?;
                Ok(MetaReply::Snapshots(vec![snapshot::info(rec, 0)]))
            }
            MetaOp::SnapshotList { root } => Ok(MetaReply::Snapshots(
                self.snapshot_list(root).await?.into_iter().map(|e| snapshot::info(e.rec, e.bytes_exclusive)).collect(),
            )),
            MetaOp::SnapshotDelete { root, name } => {
                let tracked = self.tracked(call.request_id);
                let rec = snapshot::delete(engine, root, &name, store::now_ms(), tracked).await?;
                Ok(MetaReply::Snapshots(vec![snapshot::info(rec, 0)]))
            }
            MetaOp::SnapshotDiff { root, a, b } => {
                let (changes, cut) = self.snapshot_diff(root, &a, b.as_deref()).await?;
                let changes = changes
                    .into_iter()
                    .map(|(path, change)| wire::SnapshotChange { path, change: change.into() })
                    .collect();
                Ok(MetaReply::SnapshotDiff { changes, cut })
            }
            MetaOp::SnapshotRestore { root, name, path } => {
                let r = self.snapshot_restore(root, &name, &path).await?;
                Ok(MetaReply::Restored { files: r.files, dirs: r.dirs, skipped: r.skipped })
            }
            op if locks::is_lock_op(&op) => {
                let tracked = self.tracked(call.request_id);
                let skew_ms = self.options.clock_skew_max_ms;
                locks::apply(engine, op, (tracked.request_id, tracked.expires_ms), skew_ms).await
            }
            op => {
                if let MetaOp::SetLayout { ino, ec, check, .. } = &op {
                    self.cluster.check_layout_fits(engine, *ino, *ec, *check).await?;
                }
                let mut replies = self.call_batch(vec![MetaCall { request_id: call.request_id, op }]).await?;
                replies.pop().ok_or_else(|| wire::werr!(Internal, "a call produced no reply"))
            }
        }
    }

    /// Applies several namespace calls in ONE transaction, in order: all of them or none. The
    /// first failing call aborts the batch; its error message says which call it was. For bulk
    /// loading (dataset import, tests), where thousands of creates in one directory would
    /// otherwise each conflict on the directory's inode.
    ///
    /// A single tracked mutation that fails has its failure recorded (see
    /// [`namespace::record_failure`]), so that it is answered the same way however often it
    /// arrives; the calls of a failed batch are not (none of them was applied, and a retry of
    /// the batch applies all of them or none).
    pub async fn call_batch(&self, calls: Vec<MetaCall>) -> Result<Vec<MetaReply>, WireError> {
        if calls.len() > BATCH_CALLS_MAX {
            return Err(wire::werr!(
                TooLarge,
                "{} calls in one batch exceed the limit of {BATCH_CALLS_MAX}",
                calls.len()
            ));
        }
        if let Some(call) = calls.iter().find(|c| !namespace::is_namespace_op(&c.op)) {
            return Err(wire::werr!(Invalid, "{:?} cannot be part of a batch", call.op));
        }
        if let Some(call) = calls.iter().find(|c| snapshot::writes_view(&c.op)) {
            return Err(wire::werr!(ReadOnly, "{}: snapshots are read-only", call.op.name()));
        }
        // Inode numbers come from memory (refilled by their own transaction) before the
        // transaction starts, so a retried transaction body has no side effect.
        let trash = self.options.trash_days > 0;
        // With the trash on, an unlink may have to make the trash directory.
        let needs_ino = |op: &MetaOp| namespace::needs_ino(op) || (trash && matches!(op, MetaOp::Unlink { .. }));
        let wanted = calls.iter().filter(|c| needs_ino(&c.op)).count() as u64;
        let mut inos = self.inos.take(self.engine.as_ref(), wanted).await?.into_iter();
        let (now, now_ms) = (Timestamp::now(), store::now_ms());
        let work: Arc<Vec<(MetaCall, Ctx)>> = Arc::new(
            calls
                .into_iter()
                .map(|call| {
                    let new_ino = if needs_ino(&call.op) { inos.next() } else { None };
                    let ctx = Ctx { now, now_ms, new_ino, request_ttl_ms: self.options.request_ttl_ms, trash };
                    (call, ctx)
                })
                .collect(),
        );
        let many = work.len() > 1;
        // Set when the one call of an unbatched request failed on its own (not the engine).
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let single = work.first().filter(|_| !many).map(|(call, ctx)| (call.request_id, call.op.clone(), ctx.now_ms));
        let result = store::transact(self.engine.as_ref(), {
            let failed = failed.clone();
            move |txn| {
                let (work, failed) = (work.clone(), failed.clone());
                Box::pin(async move {
                    failed.store(false, Ordering::Relaxed);
                    let mut replies = Vec::with_capacity(work.len());
                    for (i, (call, ctx)) in work.iter().enumerate() {
                        match namespace::apply_call(txn, call.request_id, &call.op, ctx).await {
                            Ok(reply) => replies.push(reply),
                            Err(TxnError::Abort(mut err)) if many => {
                                err.message = format!("call {i} of the batch: {}", err.message);
                                return Err(TxnError::Abort(err));
                            }
                            Err(err) => {
                                failed.store(matches!(err, TxnError::Abort(_)), Ordering::Relaxed);
                                return Err(err);
                            }
                        }
                    }
                    Ok(replies)
                })
            }
        })
        .await;
        match (result, single) {
            (Err(err), Some((request_id, op, now_ms)))
                if failed.load(Ordering::Relaxed) && namespace::is_tracked(request_id, &op) =>
            {
                let expires_ms = now_ms.saturating_add(self.options.request_ttl_ms);
                namespace::record_failure(self.engine.as_ref(), request_id, err, expires_ms)
                    .await
                    .map(|reply| vec![reply])
            }
            (result, _) => result,
        }
    }

    /// The processes that announced their exporters, with this server's own entry.
    pub fn processes(&self) -> &processes::Processes {
        &self.processes
    }

    /// Answers a call that came over the network: as [`MetaService::call`], and an
    /// administrative one is recorded in the event log with its caller and outcome (see
    /// [`audit`]).
    ///
    /// On a TLS connection the caller's certificate decides what it may ask: only nodes
    /// register and report as storage nodes, and only nodes and administrators administer
    /// (see [`wire::tls::Role`]). A plaintext connection may ask everything.
    pub async fn call_from_network(&self, req: MetaCall) -> MetaResult {
        let role = wire::rpc::current_role();
        let node_only = matches!(req.op, wire::MetaOp::RegisterNode { .. } | wire::MetaOp::Heartbeat { .. });
        if node_only && role.is_some_and(|r| r != wire::tls::Role::Node) {
            return Err(WireError::new(
                wire::ErrorCode::PermissionDenied,
                format!(
                    "only storage nodes register and send heartbeats; this caller holds a {} credential",
                    role.map_or("", |r| r.name())
                ),
            ));
        }
        if matches!(req.op, wire::MetaOp::LookupS3Key { .. }) && role.is_some_and(|r| !r.may_read_s3_secrets()) {
            return Err(WireError::new(
                wire::ErrorCode::PermissionDenied,
                format!(
                    "S3 key secrets are for S3 gateways (a gateway, admin or node credential); this caller holds a {} credential",
                    role.map_or("", |r| r.name())
                ),
            ));
        }
        let Some(what) = audit::describe(self.engine.as_ref(), &req.op).await else {
            return self.call(req).await;
        };
        let node = match &req.op {
            wire::MetaOp::SetNodeState { node, .. } => Some(*node),
            _ => None,
        };
        let result = match role {
            Some(r) if !r.may_administer() => Err(WireError::new(
                wire::ErrorCode::PermissionDenied,
                format!("{what} needs the admin credential; this caller holds a {} credential", r.name()),
            )),
            _ => self.call(req).await,
        };
        audit::record(self, what, node, &result).await;
        result
    }

    /// Appends events to the cluster's event log.
    pub async fn record_events(&self, new: Vec<events::NewEvent>) -> Result<Vec<wire::Event>, WireError> {
        events::append(self.engine.as_ref(), new).await
    }

    /// Sets the address shown for this server when it leads.
    pub fn set_advertise(&self, addr: &str) {
        *self.advertise.lock() = addr.to_string();
    }

    /// Reaches other services (the storage nodes, for GC) over `net`: a simulator's network
    /// instead of TCP.
    pub fn set_net(&self, net: wire::world::Net) {
        self.gc.set_net(net);
    }

    /// Whether this server holds the cluster manager's lease now. Only the holder runs GC,
    /// marks dead nodes out, and (in the `trove` binary) rebuild, drain, rebalance and scrub.
    pub fn is_leader(&self) -> bool {
        self.lease_until.lock().is_some_and(|until| tokio::time::Instant::now() < until)
    }

    /// The term of this server's leadership (see `lease_term`): jobs and watches may carry
    /// their state across a lapse of the lease within one term, as no other server led.
    pub fn lease_term(&self) -> u64 {
        self.lease_term.load(Ordering::Acquire)
    }

    /// Takes or renews the lease; returns whether this server holds it.
    pub async fn renew_lease_once(&self) -> Result<bool, WireError> {
        let started = tokio::time::Instant::now();
        let addr = self.advertise.lock().clone();
        let (lease_ms, skew_ms) = (self.options.lease_ms, self.options.clock_skew_max_ms);
        let held = self.cluster.renew_lease(self.engine.as_ref(), self.server_id, &addr, lease_ms, skew_ms).await;
        match held {
            Ok(Some(continued)) => {
                if !continued {
                    self.lease_term.fetch_add(1, Ordering::AcqRel);
                }
                // Counted from before the transaction: never believes in more than it holds.
                let was = self.lease_until.lock().replace(started + Duration::from_millis(lease_ms));
                if was.is_none_or(|was| was <= started) {
                    if continued && was.is_some() {
                        tracing::info!("this metadata server ({addr}) leads the cluster manager again (its lease had lapsed; no other server took it)");
                    } else {
                        tracing::info!("this metadata server ({addr}) now leads the cluster manager");
                    }
                }
                Ok(true)
            }
            Ok(None) => {
                if self.lease_until.lock().take().is_some_and(|was| was > started) {
                    tracing::warn!("this metadata server lost the cluster manager's lease");
                }
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Gives the lease up (clean shutdown), so another server takes over at once.
    pub async fn release_lease(&self) -> Result<(), WireError> {
        *self.lease_until.lock() = None;
        self.cluster.release_lease(self.engine.as_ref(), self.server_id).await
    }

    /// Marks out the nodes down for longer than `rebuild_after_ms` (lease holder only).
    pub async fn mark_dead_out_once(&self) -> Result<Vec<wire::NodeId>, WireError> {
        self.cluster.mark_dead_out(self.engine.as_ref(), Duration::from_millis(self.options.rebuild_after_ms)).await
    }

    /// Runs one garbage collection pass over the whole queue.
    pub async fn gc_once(&self) -> Result<GcReport, WireError> {
        self.gc.run_once(self.engine.as_ref(), &self.cluster).await
    }

    /// Purges the files that have been in the trash longer than `trash_days` (none when the
    /// trash is off); returns how many.
    pub async fn purge_trash_once(&self) -> Result<u64, WireError> {
        if self.options.trash_days == 0 {
            return Ok(0);
        }
        let before_ms = store::now_ms().saturating_sub(u64::from(self.options.trash_days) * trash::DAY_MS);
        let mut purged = 0u64;
        loop {
            let replies = self
                .call_batch(vec![MetaCall { request_id: 0, op: MetaOp::PurgeTrash { id: String::new(), before_ms } }])
                .await?;
            let count = match replies.first() {
                Some(MetaReply::Trash(gone)) => gone.len(),
                _ => 0,
            };
            purged += count as u64;
            if count < trash::PURGE_ENTRIES_MAX {
                return Ok(purged);
            }
        }
    }

    /// Takes snapshot `name` of directory `root` (O(1), atomic).
    pub async fn snapshot_create(&self, root: wire::Ino, name: &str) -> Result<keys::SnapshotRec, WireError> {
        snapshot::create(self.engine.as_ref(), root, name, store::now_ms(), 0, snapshot::Tracked::default()).await
    }

    /// How a snapshot call with `request_id` records its reply (see [`snapshot::Tracked`]).
    fn tracked(&self, request_id: u128) -> snapshot::Tracked {
        snapshot::Tracked { request_id, expires_ms: store::now_ms().saturating_add(self.options.request_ttl_ms) }
    }

    /// The snapshots of `root` (all for `None`), with the bytes only each holds.
    pub async fn snapshot_list(&self, root: Option<wire::Ino>) -> Result<Vec<snapshot::SnapshotEntry>, WireError> {
        snapshot::list(self.engine.as_ref(), root).await
    }

    /// Deletes snapshot `name` of `root`; the chunks only it held go to GC.
    pub async fn snapshot_delete(&self, root: wire::Ino, name: &str) -> Result<keys::SnapshotRec, WireError> {
        snapshot::delete(self.engine.as_ref(), root, name, store::now_ms(), snapshot::Tracked::default()).await
    }

    /// The epoch snapshot `name` of `root` reads; `None` (no name) is the live tree.
    pub async fn snapshot_epoch(&self, root: wire::Ino, name: Option<&str>) -> Result<u64, WireError> {
        let Some(name) = name else {
            return Ok(snapshot::LIVE);
        };
        let name = name.to_string();
        store::transact(self.engine.as_ref(), move |txn| {
            let name = name.clone();
            Box::pin(async move { Ok(snapshot::find(txn, root, &name).await?.epoch) })
        })
        .await
    }

    /// Paths added, removed or changed under `root` from snapshot `a` to snapshot `b` (`None`:
    /// the live tree); the flag says the list was cut at `snapshot::DIFF_ENTRIES_MAX`.
    pub async fn snapshot_diff(
        &self,
        root: wire::Ino,
        a: &str,
        b: Option<&str>,
    ) -> Result<(Vec<(String, snapshot::Change)>, bool), WireError> {
        let ea = self.snapshot_epoch(root, Some(a)).await?;
        let eb = self.snapshot_epoch(root, b).await?;
        snapshot::diff(self.engine.as_ref(), root, ea, eb).await
    }

    /// Brings `rel` (relative to `root`; empty: the whole tree) back from snapshot `name`.
    pub async fn snapshot_restore(
        &self,
        root: wire::Ino,
        name: &str,
        rel: &str,
    ) -> Result<snapshot::RestoreReport, WireError> {
        let ctx = Ctx {
            now: Timestamp::now(),
            now_ms: store::now_ms(),
            new_ino: None,
            request_ttl_ms: self.options.request_ttl_ms,
            trash: self.options.trash_days > 0,
        };
        snapshot::restore(self.engine.as_ref(), &self.inos, &ctx, root, name, rel).await
    }

    /// Removes expired idempotency records; returns how many.
    pub async fn sweep_requests_once(&self) -> Result<u64, WireError> {
        namespace::sweep_requests(self.engine.as_ref(), store::now_ms()).await
    }
}

/// A random 128-bit id (the OS-seeded generator; the simulation's under the simulator).
fn rand_id() -> u128 {
    wire::world::random()
}

#[async_trait]
impl wire::Handler for MetaService {
    type Req = MetaCall;
    type Reply = MetaReply;

    async fn handle(&self, req: MetaCall, _data: Bytes) -> (MetaResult, Bytes) {
        (self.call_from_network(req).await, Bytes::new())
    }
}
