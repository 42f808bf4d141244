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
//! (transactions, error mapping, id allocation), [`namespace`], [`cluster`], [`gc`], [`locks`]
//! (byte-range locks under leases), and [`server`] (configuration, network serving, background
//! tasks). [`MetaService`] here routes each call to its owner.

pub mod cluster;
pub mod gc;
pub mod keys;
pub mod locks;
pub mod namespace;
pub mod server;
pub mod store;

pub use server::{run, serve, Background, EngineConfig, MetaConfig};

use async_trait::async_trait;
use bytes::Bytes;
use cluster::{Cluster, ClusterOptions};
use gc::{Gc, GcReport};
use kv::{KvEngine, TxnError};
use namespace::Ctx;
use std::sync::Arc;
use std::time::Duration;
use store::IdPool;
use wire::{
    EcScheme, MetaCall, MetaOp, MetaReply, MetaResult, Timestamp, WireError, CHUNK_BYTES_DEFAULT,
};

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
}

impl MetaService {
    /// Opens the service on an engine, creating the root directory on first start.
    pub async fn new(
        engine: Arc<dyn KvEngine>,
        options: MetaOptions,
    ) -> Result<Arc<MetaService>, WireError> {
        options.validate()?;
        namespace::ensure_root(engine.as_ref(), options.default_ec, options.chunk_bytes).await?;
        let cluster = Cluster::new(ClusterOptions {
            default_ec: options.default_ec,
            chunk_bytes: options.chunk_bytes,
            pg_count: options.pg_count,
            down_after: Duration::from_millis(options.down_after_ms),
            id_batch: options.id_batch,
        });
        Ok(Arc::new(MetaService {
            inos: IdPool::new(keys::counter::INO, wire::ROOT_INO + 1, options.id_batch),
            gc: Gc::new(options.gc_grace_ms),
            engine,
            options,
            cluster,
        }))
    }

    pub fn engine(&self) -> &Arc<dyn KvEngine> {
        &self.engine
    }

    pub fn options(&self) -> &MetaOptions {
        &self.options
    }

    /// Answers one call.
    pub async fn call(&self, call: MetaCall) -> MetaResult {
        let engine = self.engine.as_ref();
        match call.op {
            MetaOp::StatFs => self.cluster.statfs(engine).await,
            MetaOp::AllocChunks { ino, count } => {
                self.cluster.alloc_chunks(engine, ino, count).await
            }
            MetaOp::GetMap { version } => Ok(MetaReply::Map(
                (*self.cluster.map(engine, version).await?).clone(),
            )),
            MetaOp::RegisterNode { uuid, addr, drives } => {
                self.cluster.register(engine, uuid, addr, drives).await
            }
            MetaOp::Heartbeat { node, drives } => {
                self.cluster.heartbeat(engine, node, drives).await
            }
            MetaOp::Status { scan_chunks } => self.cluster.status(engine, scan_chunks).await,
            op if locks::is_lock_op(&op) => locks::apply(engine, op).await,
            op => {
                let mut replies = self
                    .call_batch(vec![MetaCall {
                        request_id: call.request_id,
                        op,
                    }])
                    .await?;
                replies
                    .pop()
                    .ok_or_else(|| wire::werr!(Internal, "a call produced no reply"))
            }
        }
    }

    /// Applies several namespace calls in ONE transaction, in order: all of them or none. The
    /// first failing call aborts the batch; its error message says which call it was. For bulk
    /// loading (dataset import, tests), where thousands of creates in one directory would
    /// otherwise each conflict on the directory's inode.
    pub async fn call_batch(&self, calls: Vec<MetaCall>) -> Result<Vec<MetaReply>, WireError> {
        if calls.len() > BATCH_CALLS_MAX {
            return Err(wire::werr!(
                TooLarge,
                "{} calls in one batch exceed the limit of {BATCH_CALLS_MAX}",
                calls.len()
            ));
        }
        if let Some(call) = calls.iter().find(|c| !namespace::is_namespace_op(&c.op)) {
            return Err(wire::werr!(
                Invalid,
                "{:?} cannot be part of a batch",
                call.op
            ));
        }
        // Inode numbers come from memory (refilled by their own transaction) before the
        // transaction starts, so a retried transaction body has no side effect.
        let wanted = calls.iter().filter(|c| namespace::needs_ino(&c.op)).count() as u64;
        let mut inos = self
            .inos
            .take(self.engine.as_ref(), wanted)
            .await?
            .into_iter();
        let (now, now_ms) = (Timestamp::now(), store::now_ms());
        let work: Arc<Vec<(MetaCall, Ctx)>> = Arc::new(
            calls
                .into_iter()
                .map(|call| {
                    let new_ino = if namespace::needs_ino(&call.op) {
                        inos.next()
                    } else {
                        None
                    };
                    let ctx = Ctx {
                        now,
                        now_ms,
                        new_ino,
                        request_ttl_ms: self.options.request_ttl_ms,
                    };
                    (call, ctx)
                })
                .collect(),
        );
        let many = work.len() > 1;
        store::transact(self.engine.as_ref(), move |txn| {
            let work = work.clone();
            Box::pin(async move {
                let mut replies = Vec::with_capacity(work.len());
                for (i, (call, ctx)) in work.iter().enumerate() {
                    match namespace::apply_call(txn, call.request_id, &call.op, ctx).await {
                        Ok(reply) => replies.push(reply),
                        Err(TxnError::Abort(mut err)) if many => {
                            err.message = format!("call {i} of the batch: {}", err.message);
                            return Err(TxnError::Abort(err));
                        }
                        Err(err) => return Err(err),
                    }
                }
                Ok(replies)
            })
        })
        .await
    }

    /// Runs one garbage collection pass over the whole queue.
    pub async fn gc_once(&self) -> Result<GcReport, WireError> {
        self.gc.run_once(self.engine.as_ref(), &self.cluster).await
    }

    /// Removes expired idempotency records; returns how many.
    pub async fn sweep_requests_once(&self) -> Result<u64, WireError> {
        namespace::sweep_requests(self.engine.as_ref(), store::now_ms()).await
    }
}

#[async_trait]
impl wire::Handler for MetaService {
    type Req = MetaCall;
    type Reply = MetaReply;

    async fn handle(&self, req: MetaCall, _data: Bytes) -> (MetaResult, Bytes) {
        (self.call(req).await, Bytes::new())
    }
}
