//! The cluster manager: storage node membership and liveness, the versioned placement map, chunk
//! allocation, capacity, and cluster status.
//!
//! Durable state (node records, uuid index, placement map versions) lives in the key-value
//! engine like everything else, so any metadata server sharing the engine sees the same cluster.
//! Liveness is deliberately kept in memory only: a heartbeat every second per node must not cost
//! a transaction, and "when did I last hear from it" is a per-observer fact anyway.
//!
//! Placement: a chunk id hashes to a placement group (PG); a published map lists, for each PG,
//! the nodes holding shard 0, 1, 2, ... of its chunks. Maps are computed, not configured:
//! [`compute_map`] is a pure function of the PG count and the member node ids, using rendezvous
//! (highest-random-weight) hashing *per shard slot*. Hashing each slot separately, rather than
//! ordering a PG's nodes once by one score, keeps shard positions stable when a node joins: the
//! new node takes over the slots it wins and the other nodes keep theirs, whereas with one
//! ordering every node after the newcomer's position would shift to the next shard index, and
//! a later rebalance would move all of those shards instead of one.

use crate::keys::{self, NodeRec, PoolRec};
use crate::namespace;
use crate::pools;
use crate::store::{self, abort, fail, get, transact, IdPool, TxResult};
use kv::{KvEngine, KvTxn};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wire::{
    ChunkId, ClusterStatus, DriveInfo, EcScheme, Ino, MetaReply, NodeBrief, NodeId, NodeInfo, NodeState, Placement,
    PlacementMap, PoolId, PoolPgs, PoolStatus, StatFs, Timestamp, WireError, NAME_BYTES_MAX, SHARDS_MAX,
};

/// Most chunk ids one `AllocChunks` reserves.
pub const ALLOC_CHUNKS_MAX: u32 = 1024;
/// Most placement groups a pool may have in a map (the lower 16 bits of a group number; the
/// upper 16 name its pool).
pub const PG_COUNT_MAX: u32 = wire::POOL_PGS_MAX;
/// Longest node address accepted at registration.
pub const NODE_ADDR_BYTES_MAX: usize = 256;
/// Most drives a node may report.
pub const NODE_DRIVES_MAX: usize = 256;
/// Most directories `Status` lists by path whose scheme the cluster cannot hold.
pub const DIRS_TOO_WIDE_LISTED_MAX: usize = 16;
/// Block size reported by `StatFs`.
pub const STATFS_BLOCK_BYTES: u32 = 4096;
/// How long the figure of bytes pending deletion that heartbeats carry may be reused before it
/// is read again (one read per interval, however many nodes heartbeat).
const PENDING_DELETE_REFRESH: Duration = Duration::from_secs(1);

/// What the cluster manager knows only in memory about a node.
struct Liveness {
    last_seen: Instant,
    /// Drives from the latest heartbeat.
    drives: Vec<DriveInfo>,
}

/// Settings of the cluster manager.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub default_ec: EcScheme,
    pub chunk_bytes: u32,
    pub pg_count: u32,
    pub down_after: Duration,
    pub id_batch: u64,
    /// The GC's grace period and the pause between its passes: together, at most how long a
    /// deletion waits (while the nodes are reachable).
    pub gc_grace: Duration,
    pub gc_interval: Duration,
}

/// The cluster manager's in-memory state; everything durable is in the engine.
pub struct Cluster {
    options: ClusterOptions,
    /// Nodes never heard from by this server count as heard at its start, so a restarted
    /// metadata server does not declare every node down before their next heartbeat.
    started: Instant,
    live: Mutex<HashMap<NodeId, Liveness>>,
    maps: MapCache,
    chunk_ids: IdPool,
    /// The smallest parity of any directory or file, and when it was found (see
    /// [`Cluster::mark_dead_out`]; the walk over every inode is not repeated on every check).
    min_parity: Mutex<Option<(u8, String, Instant)>>,
    /// When marking dead nodes out was last held back (logged once per
    /// [`HELD_BACK_LOG_INTERVAL`]).
    held_back_logged: Mutex<Option<Instant>>,
    /// Bytes pending deletion as last read, and when.
    pending_delete: Mutex<Option<(Instant, u64)>>,
    /// Node records as last read from the engine, and when: what `NodeStates` answers from, so
    /// that many clients polling cost no transaction each (see [`NODE_RECORDS_TTL`]).
    node_records: Mutex<Option<(Instant, Arc<Vec<NodeRec>>)>>,
}

/// How long the smallest parity in use is trusted before it is looked up again.
const MIN_PARITY_TTL: Duration = Duration::from_secs(60);
/// How often a cluster that keeps too many nodes down says again why it marks none out.
const HELD_BACK_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// How long node records read from the engine answer `NodeStates` before they are read again.
/// This server's own changes (registration, drain, removal) drop them at once; another
/// server's, sharing the engine, show within this bound.
pub const NODE_RECORDS_TTL: Duration = Duration::from_millis(500);

impl Cluster {
    pub fn new(options: ClusterOptions) -> Cluster {
        let chunk_ids = IdPool::new(keys::counter::CHUNK, 1, options.id_batch);
        Cluster {
            options,
            started: Instant::now(),
            live: Mutex::new(HashMap::new()),
            maps: MapCache::default(),
            chunk_ids,
            min_parity: Mutex::new(None),
            held_back_logged: Mutex::new(None),
            pending_delete: Mutex::new(None),
            node_records: Mutex::new(None),
        }
    }

    /// At most how long until the GC has freed what is queued now.
    fn pending_delete_within_ms(&self) -> u64 {
        u64::try_from((self.options.gc_grace + self.options.gc_interval).as_millis()).unwrap_or(u64::MAX)
    }

    /// Bytes of shards queued for deletion, read at most once per [`PENDING_DELETE_REFRESH`].
    async fn pending_delete_bytes(&self, engine: &dyn KvEngine) -> Result<u64, WireError> {
        if let Some((at, bytes)) = *self.pending_delete.lock() {
            if at.elapsed() < PENDING_DELETE_REFRESH {
                return Ok(bytes);
            }
        }
        let stats = transact(engine, |txn| Box::pin(async move { store::read_stats(txn).await })).await?;
        *self.pending_delete.lock() = Some((Instant::now(), stats.pending_delete_bytes));
        Ok(stats.pending_delete_bytes)
    }

    /// The storage nodes' addresses and states as this server sees them now, and their version
    /// (`wire::NodeBrief::version_of`); the nodes only when the version is not `known`. No
    /// transaction while the node records read last are younger than [`NODE_RECORDS_TTL`].
    pub async fn node_states(&self, engine: &dyn KvEngine, known: u64) -> Result<MetaReply, WireError> {
        let fresh = self
            .node_records
            .lock()
            .as_ref()
            .filter(|(at, _)| at.elapsed() < NODE_RECORDS_TTL)
            .map(|(_, recs)| recs.clone());
        let records = match fresh {
            Some(recs) => recs,
            None => {
                let read_at = Instant::now();
                let recs = Arc::new(self.nodes(engine).await?);
                *self.node_records.lock() = Some((read_at, recs.clone()));
                recs
            }
        };
        let nodes: Vec<NodeBrief> = records
            .iter()
            .map(|rec| NodeBrief { id: rec.id, addr: rec.addr.clone(), state: self.node_state(rec).0 })
            .collect();
        let version = NodeBrief::version_of(&nodes);
        Ok(MetaReply::NodeStates { version, nodes: if version == known { Vec::new() } else { nodes } })
    }

    /// Drops the node records `NodeStates` answers from: this server just changed them.
    fn node_records_changed(&self) {
        *self.node_records.lock() = None;
    }

    /// A node's state as seen now, and milliseconds since it was last heard from.
    pub fn node_state(&self, rec: &NodeRec) -> (NodeState, u64) {
        let last_seen = self.live.lock().get(&rec.id).map_or(self.started, |l| l.last_seen);
        let age = last_seen.elapsed();
        let state = match rec.state {
            // A draining node that stopped heartbeating serves nothing: it is down (and marked
            // out after the rebuild grace like any other).
            NodeState::Up | NodeState::Down | NodeState::Draining if age > self.options.down_after => NodeState::Down,
            NodeState::Up | NodeState::Down => NodeState::Up,
            other => other,
        };
        (state, u64::try_from(age.as_millis()).unwrap_or(u64::MAX))
    }

    /// Whether a node can serve its shards now (up, or draining but still serving).
    pub fn serves(&self, rec: &NodeRec) -> bool {
        matches!(self.node_state(rec).0, NodeState::Up | NodeState::Draining)
    }

    /// Drives of a node: from its latest heartbeat to this server, else from registration.
    fn drives(&self, rec: &NodeRec) -> Vec<DriveInfo> {
        self.live
            .lock()
            .get(&rec.id)
            .map_or_else(|| rec.drives.iter().map(keys::StoredDrive::info).collect(), |l| l.drives.clone())
    }

    fn saw(&self, id: NodeId, drives: Vec<DriveInfo>) {
        self.live.lock().insert(id, Liveness { last_seen: Instant::now(), drives });
    }

    /// Every node record.
    pub async fn nodes(&self, engine: &dyn KvEngine) -> Result<Vec<NodeRec>, WireError> {
        transact(engine, |txn| Box::pin(async move { read_nodes(txn).await })).await
    }

    /// Registers a storage node by uuid: a known uuid gets its id back (its address and drives
    /// are updated); a new one gets the next id, and a new placement map including it is
    /// published in the same transaction. The node joins the pool named `pool` (empty: the
    /// default pool), made for it if no pool has that name; a known node naming another pool
    /// than before moves there (a new map without it in its old pool, whose chunks the mover
    /// then moves off it).
    pub async fn register(
        &self,
        engine: &dyn KvEngine,
        uuid: u128,
        addr: String,
        drives: Vec<DriveInfo>,
        pool: String,
        object: Option<wire::ObjectTarget>,
    ) -> Result<MetaReply, WireError> {
        if uuid == 0 {
            return Err(wire::werr!(Invalid, "node uuid 0 is not valid"));
        }
        if addr.is_empty() || addr.len() > NODE_ADDR_BYTES_MAX {
            return Err(wire::werr!(
                Invalid,
                "node address {addr:?} is empty or longer than {NODE_ADDR_BYTES_MAX} bytes"
            ));
        }
        check_drives(&drives)?;
        if !pool.is_empty() {
            wire::check_pool_name(&pool).map_err(|e| wire::werr!(Invalid, "{e}"))?;
        }
        if let Some(t) = &object {
            if pool.is_empty() || pool == wire::DEFAULT_POOL_NAME {
                return Err(wire::werr!(
                    Invalid,
                    "a node keeping its shards in an object store (bucket {:?} at {}) must name a pool of its own (pool = \"NAME\"), not the default pool",
                    t.bucket,
                    t.endpoint
                ));
            }
            if t.endpoint.len() + t.bucket.len() + t.prefix.len() > NODE_ADDR_BYTES_MAX * 4 {
                return Err(wire::werr!(Invalid, "the object store's endpoint, bucket and prefix are too long"));
            }
        }
        let node_kind = Arc::new(keys::PoolRecKind::of_node(object.as_ref()));
        let pg_count = self.options.pg_count;
        let default_ec = self.options.default_ec;
        let (addr_in, drives_in, pool_in) = (Arc::new(addr), Arc::new(drives), Arc::new(pool));
        let (id, map_version, new_map, made_pool) = transact(engine, {
            let (addr, drives, pool) = (addr_in.clone(), drives_in.clone(), pool_in.clone());
            move |txn| {
                let (addr, drives, pool) = (addr.clone(), drives.clone(), pool.clone());
                let node_kind = node_kind.clone();
                Box::pin(async move {
                    let uuid_key = keys::node_uuid(uuid);
                    let map_key = keys::counter(keys::counter::MAP);
                    let (mut pool, made_pool) = match pools::find(txn, &pool).await? {
                        Some(found) => (found, false),
                        None => {
                            // An object store is durable by itself: an object pool made by its
                            // first node stores one copy (1+0); more nodes on other prefixes
                            // or buckets and a scheme with parity add Trove's own repair.
                            let (kind, ec) = match &*node_kind {
                                keys::PoolRecKind::Nodes => (wire::PoolKind::Nodes, default_ec),
                                keys::PoolRecKind::Object { endpoint, bucket } => (
                                    wire::PoolKind::Object { endpoint: endpoint.clone(), bucket: bucket.clone() },
                                    EcScheme { k: 1, m: 0 },
                                ),
                            };
                            (pools::create(txn, &pool, kind, ec).await?, true)
                        }
                    };
                    if pool.kind != *node_kind {
                        // A pool no node is in yet (made by `trove pool create`) takes the kind
                        // of the first node that joins it.
                        let others = read_nodes(txn)
                            .await?
                            .iter()
                            .any(|n| n.pool == pool.id && n.uuid != uuid && n.state != NodeState::Out);
                        if others || pool.id == wire::DEFAULT_POOL {
                            fail!(
                                Invalid,
                                "pool {:?} keeps its chunks on {}; this node keeps its shards on {}, so it cannot join it (name another pool in its configuration)",
                                pool.name,
                                pool.kind.describe(),
                                node_kind.describe()
                            );
                        }
                        pool.kind = (*node_kind).clone();
                        store::put(txn, &keys::pool(pool.id), &pool).await?;
                    }
                    if let Some(value) = txn.get(&uuid_key).await? {
                        let id = node_id(
                            &uuid_key,
                            keys::decode_u64(&uuid_key, &value).map_err(abort)?,
                        )?;
                        let node_key = keys::node(id);
                        let Some(mut rec) = get::<NodeRec>(txn, &node_key).await? else {
                            fail!(
                                Internal,
                                "node uuid {uuid:032x} maps to id {id}, which has no record"
                            );
                        };
                        if rec.state == NodeState::Out {
                            fail!(
                                NotMember,
                                "node {id} (uuid {uuid:032x}) was removed from the cluster and its data rebuilt elsewhere; to add this machine again, empty its drives (or delete their {} file) and start it as a new node",
                                "node.uuid"
                            );
                        }
                        let stored: Vec<keys::StoredDrive> = drives.iter().map(Into::into).collect();
                        let moved = rec.pool != pool.id;
                        if rec.addr != *addr || rec.drives != stored || moved {
                            rec.addr = addr.to_string();
                            rec.drives = stored;
                            rec.pool = pool.id;
                            store::put(txn, &node_key, &rec).await?;
                        }
                        if moved && is_member(rec.state) {
                            let map = publish_map(txn, pg_count).await?;
                            return Ok((id, u64::from(map.version), Some(map), made_pool.then_some(pool.name)));
                        }
                        let version = store::get_u64(txn, &map_key, 0).await?;
                        return Ok((id, version, None, made_pool.then_some(pool.name)));
                    }
                    let counter_key = keys::counter(keys::counter::NODE);
                    let id = node_id(&counter_key, store::get_u64(txn, &counter_key, 1).await?)?;
                    txn.put(&counter_key, &keys::encode_u64(u64::from(id) + 1))
                        .await?;
                    let rec = NodeRec {
                        id,
                        uuid,
                        addr: addr.to_string(),
                        state: NodeState::Up,
                        drives: drives.iter().map(Into::into).collect(),
                        registered: Timestamp::now(),
                        pool: pool.id,
                    };
                    store::put(txn, &keys::node(id), &rec).await?;
                    txn.put(&uuid_key, &keys::encode_u64(u64::from(id))).await?;
                    // The member set changed: publish the next map version.
                    let map = publish_map(txn, pg_count).await?;
                    let version = map.version;
                    Ok((id, u64::from(version), Some(map), made_pool.then_some(pool.name)))
                })
            }
        })
        .await?;
        if let Some(name) = made_pool {
            tracing::info!("pool {name:?} made for node {id} ({addr_in}), its first node");
        }
        if let Some(map) = new_map {
            tracing::info!(
                "node {id} ({}) joined pool {:?}; placement map version {map_version} published",
                addr_in,
                if pool_in.is_empty() { wire::DEFAULT_POOL_NAME } else { pool_in.as_str() }
            );
            self.maps.insert(map);
        }
        self.node_records_changed();
        self.saw(id, drives_in.to_vec());
        Ok(MetaReply::Node { id, map_version: map_version as u32 })
    }

    /// Records a heartbeat; `NotMember` for a node that is not registered (or was removed).
    pub async fn heartbeat(
        &self,
        engine: &dyn KvEngine,
        node: NodeId,
        drives: Vec<DriveInfo>,
    ) -> Result<MetaReply, WireError> {
        check_drives(&drives)?;
        let map_version = transact(engine, move |txn| {
            Box::pin(async move {
                match get::<NodeRec>(txn, &keys::node(node)).await? {
                    Some(rec) if rec.state != NodeState::Out => {}
                    _ => fail!(NotMember, "node {node} is not a member of this cluster; register it again"),
                }
                store::get_u64(txn, &keys::counter(keys::counter::MAP), 0).await
            })
        })
        .await?;
        self.saw(node, drives);
        Ok(MetaReply::Heartbeat {
            map_version: map_version as u32,
            bytes_pending_delete: self.pending_delete_bytes(engine).await?,
            pending_delete_within_ms: self.pending_delete_within_ms(),
        })
    }

    /// A placement map by version; 0 means the newest.
    pub async fn map(&self, engine: &dyn KvEngine, version: u32) -> Result<Arc<PlacementMap>, WireError> {
        if version != 0 {
            if let Some(map) = self.maps.get(version) {
                return Ok(map);
            }
        }
        let map = transact(engine, |txn| {
            let maps = self.maps.clone();
            Box::pin(async move {
                let version = match version {
                    0 => store::get_u64(txn, &keys::counter(keys::counter::MAP), 0).await? as u32,
                    v => v,
                };
                maps.get_in(txn, version).await
            })
        })
        .await?;
        map.ok_or_else(|| wire::werr!(NotFound, "no placement map version {version}"))
    }

    /// Reserves `count` chunk ids for file `ino` and picks the scheme and placement group they
    /// are written with: the file's scheme when some group's first `k + m` nodes are all up
    /// (and not in `avoid`), else the widest narrower scheme that such a group can hold (see
    /// [`narrowed`]), so that writes keep full redundancy on the nodes there are instead of
    /// waiting for the others or storing chunks with shards missing. Each chunk starts from the
    /// group its id hashes to and takes the next group that can hold the scheme.
    pub async fn alloc_chunks(
        &self,
        engine: &dyn KvEngine,
        ino: Ino,
        count: u32,
        avoid: &[NodeId],
        target: Option<(String, Option<EcScheme>)>,
    ) -> Result<MetaReply, WireError> {
        if count > ALLOC_CHUNKS_MAX {
            return Err(wire::werr!(
                TooLarge,
                "{count} chunks in one allocation exceed the limit of {ALLOC_CHUNKS_MAX}"
            ));
        }
        let target = Arc::new(target);
        let (ec, pool, in_pool, map, nodes) = transact(engine, |txn| {
            let maps = self.maps.clone();
            let target = target.clone();
            Box::pin(async move {
                let rec = namespace::load_file(txn, ino).await?;
                let all = pools::read_all(txn).await?;
                let (pool, ec) = match target.as_ref() {
                    // A job moving the file: the pool and scheme it moves to.
                    Some((name, ec)) => {
                        let pool = pools::by_name(txn, name).await?;
                        let ec = ec.unwrap_or(pool.default_ec);
                        ec.validate().map_err(|e| store::abort(wire::werr!(Invalid, "{e}")))?;
                        (pool, ec)
                    }
                    None => {
                        let Some(pool) = all.iter().find(|p| p.id == rec.attr.pool).cloned() else {
                            fail!(Internal, "file {ino} is in pool {}, which has no record", rec.attr.pool);
                        };
                        (pool, rec.attr.ec)
                    }
                };
                let in_pool = of_pool(&pool, all.len());
                let version = store::get_u64(txn, &keys::counter(keys::counter::MAP), 0).await? as u32;
                let map = maps.get_in(txn, version).await?;
                Ok((ec, pool, in_pool, map, read_nodes(txn).await?))
            })
        })
        .await?;
        let Some(map) = map else {
            return Err(wire::werr!(Unavailable, "no storage node has joined the cluster yet"));
        };
        let pgs = map.pool_pgs(pool.id);
        if pgs.is_empty() {
            return Err(wire::werr!(
                Unavailable,
                "pool {:?} has no storage nodes in service, and file {ino} is placed in it (start nodes with pool = {:?} in their configuration, or put the file's directory in another pool with `trove mkdir --pool`)",
                pool.name,
                pool.name
            ));
        }
        let up: HashSet<NodeId> = nodes
            .iter()
            .filter(|n| self.node_state(n).0 == NodeState::Up && !avoid.contains(&n.id))
            .map(|n| n.id)
            .collect();
        let Some((scheme, fits)) = choose_scheme(ec, pgs, &up) else {
            let members = pgs.first().map_or(0, Vec::len);
            let avoided = if avoid.is_empty() {
                String::new()
            } else {
                format!(", not counting nodes {avoid:?} that the writer could not use")
            };
            return Err(wire::werr!(
                Unavailable,
                "only {} of the {members} storage nodes{in_pool} can take writes now{avoided}; {ec} needs at least {} to store a chunk with any redundancy",
                pgs.first().map_or(0, |g| g.iter().filter(|n| up.contains(n)).count()),
                narrowest_width(ec)
            ));
        };
        if scheme != ec {
            tracing::debug!("file {ino}: writing {scheme} instead of {ec} (nodes up: {up:?})");
        }
        let ids = self.chunk_ids.take(engine, u64::from(count)).await?;
        let pg_count = pgs.len() as u32;
        let chunks = ids
            .into_iter()
            .map(|id| {
                let start = pg_for_chunk(id, pg_count);
                let local =
                    (0..pg_count).map(|step| (start + step) % pg_count).find(|&pg| fits[pg as usize]).unwrap_or(start);
                (id, Placement { map_version: map.version, pg: wire::pg_global(pool.id, local) })
            })
            .collect();
        Ok(MetaReply::Alloc { chunks, map: (*map).clone(), ec: scheme })
    }

    /// Refuses a chosen layout `ec` that the cluster's storage nodes cannot hold (wider than
    /// its members; a node that is down still counts, it is expected back), and one without
    /// parity unless chosen so on purpose. A copied layout is taken as it is.
    pub async fn check_layout_fits(
        &self,
        engine: &dyn KvEngine,
        ino: Ino,
        ec: EcScheme,
        check: wire::LayoutCheck,
    ) -> Result<(), WireError> {
        if check == wire::LayoutCheck::Copied {
            return Ok(());
        }
        if ec.m == 0 && check != wire::LayoutCheck::ChosenWithoutRedundancy {
            return Err(wire::werr!(
                Invalid,
                "{ec} keeps no parity: losing any one node loses data; say so explicitly to use it (trove mkdir --no-redundancy)"
            ));
        }
        let (pool, pool_count, nodes) = transact(engine, |txn| {
            Box::pin(async move {
                let rec = namespace::load(txn, ino).await?;
                let all = pools::read_all(txn).await?;
                let pool = all.iter().find(|p| p.id == rec.attr.pool).cloned();
                Ok((pool, all.len(), read_nodes(txn).await?))
            })
        })
        .await?;
        let Some(pool) = pool else {
            return Err(wire::werr!(Internal, "inode {ino}'s pool has no record"));
        };
        let members = nodes.iter().filter(|n| is_member(n.state) && n.pool == pool.id).count();
        if ec.width() > members {
            return Err(wire::werr!(
                Invalid,
                "{ec} needs {} storage nodes; {} has {members}{}",
                ec.width(),
                if pool_count <= 1 { "the cluster".to_string() } else { format!("pool {:?}", pool.name) },
                match fitting_example(ec, members) {
                    Some(fit) => format!(" (a scheme that fits: {fit})"),
                    None => String::new(),
                }
            ));
        }
        Ok(())
    }

    /// Capacity from the nodes' drives, each file system counted once (several nodes on one
    /// disk report the same device), scaled to what the default scheme can store. Free space
    /// counts the bytes that deleted files still hold until the GC frees them.
    pub async fn statfs(&self, engine: &dyn KvEngine) -> Result<MetaReply, WireError> {
        let (nodes, stats) = transact(engine, |txn| {
            Box::pin(async move { Ok((read_nodes(txn).await?, store::read_stats(txn).await?)) })
        })
        .await?;
        let drives: Vec<DriveInfo> =
            nodes.iter().filter(|n| n.state != NodeState::Out).flat_map(|n| self.drives(n)).collect();
        let (total, free) = wire::capacity_once_per_device(&drives);
        let pending = u128::from(stats.pending_delete_bytes);
        let ec = self.options.default_ec;
        let usable = |raw: u128| (raw * u128::from(ec.k) / ec.width() as u128) as u64;
        // What is pending is on those drives and will be free: never more free than total.
        let free_soon = (u128::from(free) + pending).min(u128::from(total));
        Ok(MetaReply::StatFs(StatFs {
            bytes_total: usable(u128::from(total)),
            bytes_free: usable(free_soon),
            inodes_used: stats.inodes,
            block_bytes: STATFS_BLOCK_BYTES,
            name_bytes_max: NAME_BYTES_MAX as u32,
            bytes_pending_delete: usable(free_soon - u128::from(free)),
        }))
    }

    /// Cluster status; with `scan_chunks`, walks every chunk record to count degraded and
    /// unavailable chunks. The walk reads one page per transaction (a single transaction over
    /// millions of records would grow too old on distributed engines), so its counts are a
    /// sum over slightly different moments.
    pub async fn status(&self, engine: &dyn KvEngine, scan_chunks: bool) -> Result<MetaReply, WireError> {
        let (nodes, stats, map_version, leader, pool_recs) = transact(engine, |txn| {
            Box::pin(async move {
                let nodes = read_nodes(txn).await?;
                let stats = store::read_stats(txn).await?;
                let version = store::get_u64(txn, &keys::counter(keys::counter::MAP), 0).await?;
                let leader = get::<keys::LeaderRec>(txn, &keys::leader_lease())
                    .await?
                    .filter(|rec| rec.expires_ms > store::now_ms())
                    .map(|rec| rec.addr);
                Ok((nodes, stats, version as u32, leader, pools::read_all(txn).await?))
            })
        })
        .await?;
        let infos: Vec<NodeInfo> = nodes
            .iter()
            .map(|rec| {
                let (state, heartbeat_age_ms) = self.node_state(rec);
                NodeInfo {
                    id: rec.id,
                    uuid: rec.uuid,
                    addr: rec.addr.clone(),
                    state,
                    drives: self.drives(rec),
                    heartbeat_age_ms,
                    pool: rec.pool,
                }
            })
            .collect();
        let pools = pool_recs
            .iter()
            .map(|pool| {
                let members: Vec<&NodeInfo> =
                    infos.iter().filter(|n| n.pool == pool.id && n.state != NodeState::Out).collect();
                let drives: Vec<DriveInfo> = members.iter().flat_map(|n| n.drives.iter().cloned()).collect();
                let (bytes_total, bytes_free) = wire::capacity_once_per_device(&drives);
                PoolStatus {
                    pool: pool.info(),
                    nodes: members.len() as u32,
                    nodes_up: members.iter().filter(|n| n.state == NodeState::Up).count() as u32,
                    bytes_total,
                    bytes_free,
                    chunks: 0,
                    bytes_stored: 0,
                    schemes: Vec::new(),
                }
            })
            .collect();
        let mut status = ClusterStatus {
            nodes: infos,
            map_version,
            default_ec: self.options.default_ec,
            chunk_bytes: self.options.chunk_bytes,
            files: stats.files,
            chunks: stats.chunks,
            chunks_degraded: 0,
            chunks_unavailable: 0,
            chunks_misplaced: 0,
            leader,
            ec_schemes: Vec::new(),
            engine: engine.describe(),
            chunks_narrow: 0,
            dirs_too_wide: Vec::new(),
            dirs_too_wide_count: 0,
            bytes_pending_delete: stats.pending_delete_bytes,
            pending_delete_within_ms: self.pending_delete_within_ms(),
            pools,
        };
        if scan_chunks {
            let serving: HashSet<NodeId> = nodes.iter().filter(|n| self.serves(n)).map(|n| n.id).collect();
            self.scan_chunk_health(engine, &serving, &mut status).await?;
            let mut members: HashMap<PoolId, usize> = HashMap::new();
            for node in nodes.iter().filter(|n| is_member(n.state)) {
                *members.entry(node.pool).or_default() += 1;
            }
            let schemes = namespace::scheme_use(engine, None, &members, DIRS_TOO_WIDE_LISTED_MAX).await?;
            status.dirs_too_wide = schemes.too_wide.into_iter().map(|dir| (dir.path, dir.ec)).collect();
            status.dirs_too_wide_count = schemes.too_wide_count;
        }
        Ok(MetaReply::Status(status))
    }

    /// Operator change of a node's state (see `MetaOp::SetNodeState`). Publishes a new map when
    /// the node starts or stops taking new data.
    pub async fn set_node_state(
        &self,
        engine: &dyn KvEngine,
        node: NodeId,
        state: NodeState,
        force: bool,
    ) -> Result<MetaReply, WireError> {
        if state == NodeState::Down {
            return Err(wire::werr!(Invalid, "a node is down when it stops heartbeating; it cannot be set down"));
        }
        if matches!(state, NodeState::Draining | NodeState::Out) && !force {
            self.check_leaving(engine, node, state).await?;
        }
        let pg_count = self.options.pg_count;
        // Dropped before and after: a `NodeStates` while the change commits may read either.
        self.node_records_changed();
        let published = transact(engine, move |txn| {
            Box::pin(async move {
                let key = keys::node(node);
                let Some(mut rec) = get::<NodeRec>(txn, &key).await? else {
                    fail!(NotFound, "no storage node {node}");
                };
                if rec.state == state {
                    return Ok(None);
                }
                if rec.state == NodeState::Out {
                    fail!(Invalid, "node {node} is out of the cluster; start its storage service to add it again");
                }
                let was_member = is_member(rec.state);
                rec.state = state;
                store::put(txn, &key, &rec).await?;
                if was_member != is_member(state) {
                    return Ok(Some(publish_map(txn, pg_count).await?));
                }
                Ok(None)
            })
        })
        .await?;
        self.node_records_changed();
        match published {
            Some(map) => {
                tracing::info!("node {node} is now {state}; placement map version {} published", map.version);
                self.maps.insert(map);
            }
            None => tracing::info!("node {node} is now {state}"),
        }
        Ok(MetaReply::Ok)
    }

    /// Refuses to drain or remove `node` when the nodes left could not hold a scheme that a
    /// directory or file uses: its chunks would have to be re-encoded narrower (and new writes
    /// there would be), which an operator must ask for knowingly (`force`).
    async fn check_leaving(&self, engine: &dyn KvEngine, node: NodeId, state: NodeState) -> Result<(), WireError> {
        let nodes = self.nodes(engine).await?;
        let Some(rec) = nodes.iter().find(|n| n.id == node) else {
            return Err(wire::werr!(NotFound, "no storage node {node}"));
        };
        if !is_member(rec.state) {
            // Already leaving (draining to out, or out): no more capacity is lost.
            return Ok(());
        }
        let left = nodes.iter().filter(|n| n.id != node && is_member(n.state) && n.pool == rec.pool).count();
        let Some(widest) = namespace::widest_scheme(engine, Some(rec.pool)).await? else {
            return Ok(());
        };
        if widest.ec.width() <= left {
            return Ok(());
        }
        let pool = rec.pool;
        let all = transact(engine, |txn| Box::pin(async move { pools::read_all(txn).await })).await?;
        let in_pool = all.iter().find(|p| p.id == pool).map_or_else(String::new, |p| of_pool(p, all.len()));
        let verb = if state == NodeState::Draining { "draining" } else { "removing" };
        Err(wire::werr!(
            NoSpace,
            "{verb} node {node} leaves {left} storage node{}{in_pool}; {} uses {}, which needs {}: add a node first, or pass --force to re-encode such chunks narrower ({}) until nodes are added",
            if left == 1 { "" } else { "s" },
            widest.path,
            widest.ec,
            widest.ec.width(),
            narrowed(widest.ec, left).map_or_else(|| "impossible: too few nodes".to_string(), |n| format!("{n} on {left} nodes"))
        ))
    }

    /// Marks out every node that has been down (as this server sees it) for longer than
    /// `after`, publishing a new map without them, so that rebuild moves their shards to the
    /// remaining nodes. Run by the lease holder only. Returns the nodes marked out.
    ///
    /// Held back while more nodes are down than the smallest parity in use can lose: their
    /// chunks could not be rebuilt, and a node marked out is never taken back, so marking them
    /// out would turn an outage into data loss. They stay down (reads rebuild around what they
    /// can) until they return or an operator removes them (`trove node remove --force`).
    pub async fn mark_dead_out(&self, engine: &dyn KvEngine, after: Duration) -> Result<Vec<NodeId>, WireError> {
        let nodes = self.nodes(engine).await?;
        let down: Vec<NodeId> = nodes
            .iter()
            .filter(|rec| is_member(rec.state) || rec.state == NodeState::Draining)
            .filter(|rec| self.node_state(rec).0 == NodeState::Down)
            .map(|rec| rec.id)
            .collect();
        let dead: Vec<NodeId> = nodes
            .iter()
            .filter(|rec| is_member(rec.state) || rec.state == NodeState::Draining)
            .filter(|rec| {
                let (state, age_ms) = self.node_state(rec);
                state == NodeState::Down && age_ms > u64::try_from(after.as_millis()).unwrap_or(u64::MAX)
            })
            .map(|rec| rec.id)
            .collect();
        if dead.is_empty() {
            return Ok(dead);
        }
        let (parity, example) = self.min_parity(engine).await?;
        if down.len() > usize::from(parity) {
            let mut logged = self.held_back_logged.lock();
            if logged.is_none_or(|at| at.elapsed() >= HELD_BACK_LOG_INTERVAL) {
                *logged = Some(Instant::now());
                tracing::warn!(
                    "storage nodes {down:?} are down; {example} can lose at most {parity} shards of a chunk, so their data could not be rebuilt: not marking any out. Bring them back, or remove them knowingly with `trove node remove ID --force`"
                );
            }
            return Ok(Vec::new());
        }
        for &node in &dead {
            tracing::warn!(
                "node {node} has been down for more than {} ms: marking it out to rebuild its shards",
                after.as_millis()
            );
            // A dead node is gone whether or not its chunks fit the nodes left: the mover
            // re-encodes them narrower rather than leave them degraded.
            self.set_node_state(engine, node, NodeState::Out, true).await?;
        }
        Ok(dead)
    }

    /// The smallest parity of any directory or file (with an example for messages), cached for
    /// [`MIN_PARITY_TTL`]. `u8::MAX` when nothing is stored.
    async fn min_parity(&self, engine: &dyn KvEngine) -> Result<(u8, String), WireError> {
        if let Some((parity, example, at)) = self.min_parity.lock().clone() {
            if at.elapsed() < MIN_PARITY_TTL {
                return Ok((parity, example));
            }
        }
        let found = namespace::least_parity(engine).await?;
        let (parity, example) =
            found.map_or((u8::MAX, String::new()), |at| (at.ec.m, format!("{} ({})", at.path, at.ec)));
        *self.min_parity.lock() = Some((parity, example.clone(), Instant::now()));
        Ok((parity, example))
    }

    /// Tries to take or renew the cluster manager's lease for `holder`; returns `None` when
    /// another server holds it, else `Some(continued)`: `holder` holds the lease until
    /// `now + lease_ms`, and `continued` says whether the record named `holder` already (no
    /// other server held the lease since, even if it had lapsed). Another server's lease is
    /// taken over only `clock_skew_max_ms` after its recorded end, by this server's clock: its
    /// holder, whose clock may be that much behind, believes in it until then at the latest.
    pub async fn renew_lease(
        &self,
        engine: &dyn KvEngine,
        holder: u128,
        addr: &str,
        lease_ms: u64,
        clock_skew_max_ms: u64,
    ) -> Result<Option<bool>, WireError> {
        let addr = Arc::new(addr.to_string());
        transact(engine, move |txn| {
            let addr = addr.clone();
            Box::pin(async move {
                let key = keys::leader_lease();
                let now = store::now_ms();
                let current = get::<keys::LeaderRec>(txn, &key).await?;
                // The planted flaw (simulator only) takes over a lease with half of it left.
                let early_ms = if wire::world::flawed(wire::world::Flaw::LeaseBeforeExpiry) { lease_ms / 2 } else { 0 };
                if let Some(rec) = &current {
                    if rec.holder != holder && rec.expires_ms + clock_skew_max_ms > now + early_ms {
                        return Ok(None);
                    }
                }
                let continued = current.is_some_and(|rec| rec.holder == holder);
                let rec = keys::LeaderRec { holder, addr: addr.to_string(), expires_ms: now + lease_ms };
                store::put(txn, &key, &rec).await?;
                Ok(Some(continued))
            })
        })
        .await
    }

    /// Gives the lease up (clean shutdown), if `holder` has it.
    pub async fn release_lease(&self, engine: &dyn KvEngine, holder: u128) -> Result<(), WireError> {
        transact(engine, move |txn| {
            Box::pin(async move {
                let key = keys::leader_lease();
                if get::<keys::LeaderRec>(txn, &key).await?.is_some_and(|rec| rec.holder == holder) {
                    txn.delete(&key).await?;
                }
                Ok(())
            })
        })
        .await
    }

    /// A page of chunk records after `after`, for rebuild, drain, rebalance and scrub.
    pub async fn scan_chunks(
        &self,
        engine: &dyn KvEngine,
        after: Option<(Ino, u64)>,
        limit: u32,
    ) -> Result<MetaReply, WireError> {
        let limit = (limit as usize).clamp(1, store::SCAN_PAGE_ENTRIES_MAX);
        let from = match after {
            Some((ino, index)) => store::after(&keys::chunk(ino, index)),
            None => vec![keys::prefix::CHUNK],
        };
        let end = kv::prefix_end(&[keys::prefix::CHUNK]);
        transact(engine, move |txn| {
            let (from, end) = (from.clone(), end.clone());
            Box::pin(async move {
                let page = txn.scan(&from, &end, limit).await?;
                let more = page.len() == limit;
                let mut chunks = Vec::with_capacity(page.len());
                metrics::gauges::add(
                    metrics::names::META_CHUNK_RECORDS_WALKED,
                    &[("walk", "chunks")],
                    page.len() as f64,
                );
                // The page is in file order: each file's inode is read once.
                let mut file: Option<(Ino, EcScheme, PoolId)> = None;
                for (key, value) in page {
                    let Some((ino, _)) = keys::parse_chunk(&key) else {
                        fail!(Internal, "malformed chunk key {}", keys::describe(&key));
                    };
                    let rec: wire::ChunkRecord = keys::decode(&key, &value).map_err(abort)?;
                    let (file_ec, file_pool) = match file {
                        Some((known, ec, pool)) if known == ino => (ec, pool),
                        _ => {
                            let (ec, pool) = get::<keys::InodeRec>(txn, &keys::inode(ino))
                                .await?
                                .map_or((rec.ec, wire::pg_pool(rec.placement.pg)), |inode| {
                                    (inode.attr.ec, inode.attr.pool)
                                });
                            file = Some((ino, ec, pool));
                            (ec, pool)
                        }
                    };
                    chunks.push(wire::ScannedChunk { ino, rec, file_ec, file_pool });
                }
                Ok(MetaReply::ChunkPage { chunks, more })
            })
        })
        .await
    }

    /// Re-places one chunk after its shards were copied or rebuilt (see `MetaOp::MoveChunk`).
    pub async fn move_chunk(
        &self,
        engine: &dyn KvEngine,
        ino: Ino,
        expected: wire::ChunkRecord,
        placement: Placement,
        missing: u64,
    ) -> Result<MetaReply, WireError> {
        let map = self.map(engine, placement.map_version).await?;
        if map.group(placement.pg).is_none() {
            return Err(wire::werr!(
                Invalid,
                "placement group {} does not exist in map version {}",
                placement.pg,
                placement.map_version
            ));
        }
        let expected = Arc::new(expected);
        transact(engine, move |txn| {
            let expected = expected.clone();
            Box::pin(async move {
                let live = crate::snapshot::move_chunk_records(txn, ino, &expected, placement, missing).await?;
                if live && missing != 0 {
                    crate::jobs::queue(txn, ino, expected.index, expected.id).await?;
                }
                Ok(MetaReply::Ok)
            })
        })
        .await
    }

    async fn scan_chunk_health(
        &self,
        engine: &dyn KvEngine,
        serving: &HashSet<NodeId>,
        status: &mut ClusterStatus,
    ) -> Result<(), WireError> {
        let mut tally = Tally::default();
        let mut after = None;
        loop {
            let limit = store::SCAN_PAGE_ENTRIES_MAX as u32;
            let MetaReply::ChunkPage { chunks: page, more } = self.scan_chunks(engine, after, limit).await? else {
                return Err(wire::werr!(Internal, "a chunk scan answered something else"));
            };
            for found in &page {
                self.tally_chunk(engine, serving, status, &mut tally, found).await;
            }
            match page.last() {
                Some(last) if more => after = Some((last.ino, last.rec.index)),
                _ => break,
            }
        }
        // Chunks only snapshots hold are stored, and can be degraded, like live ones: each
        // counted once (several versions or clones may hold one).
        let mut held_seen: HashSet<wire::ChunkId> = HashSet::new();
        let mut cursor = None;
        loop {
            let MetaReply::HeldChunkPage { chunks: page, next } =
                crate::snapshot::scan_held_chunks(engine, cursor, store::SCAN_PAGE_ENTRIES_MAX as u32).await?
            else {
                return Err(wire::werr!(Internal, "a held-chunk scan answered something else"));
            };
            for found in &page {
                if held_seen.insert(found.rec.id) {
                    self.tally_chunk(engine, serving, status, &mut tally, found).await;
                }
            }
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let Tally { chunks, schemes, mut per_pool } = tally;
        // The walk is an exact count; prefer it over the statistics counters.
        status.chunks = chunks;
        let sorted = |schemes: HashMap<EcScheme, u64>| {
            let mut schemes: Vec<(EcScheme, u64)> = schemes.into_iter().collect();
            schemes.sort_by_key(|(ec, _)| (ec.k, ec.m));
            schemes
        };
        status.ec_schemes = sorted(schemes);
        for pool in &mut status.pools {
            if let Some((chunks, bytes, schemes)) = per_pool.remove(&pool.pool.id) {
                pool.chunks = chunks;
                pool.bytes_stored = bytes;
                pool.schemes = sorted(schemes);
            }
        }
        Ok(())
    }

    /// Counts one chunk of a health walk: its pool's figures, and whether it is narrow,
    /// degraded, unavailable or misplaced.
    async fn tally_chunk(
        &self,
        engine: &dyn KvEngine,
        serving: &HashSet<NodeId>,
        status: &mut ClusterStatus,
        tally: &mut Tally,
        found: &wire::ScannedChunk,
    ) {
        let chunk = &found.rec;
        tally.chunks += 1;
        *tally.schemes.entry(chunk.ec).or_default() += 1;
        let pool = tally.per_pool.entry(wire::pg_pool(chunk.placement.pg)).or_default();
        pool.0 += 1;
        let stored = chunk.ec.width() as u64 - u64::from(chunk.missing.count_ones());
        pool.1 += stored * u64::from(chunk.shard_len);
        *pool.2.entry(chunk.ec).or_default() += 1;
        if chunk.ec.narrower_than(found.file_ec.for_chunk(chunk.len)) {
            status.chunks_narrow += 1;
        }
        let map = self.map(engine, chunk.placement.map_version).await.ok();
        let unavailable = (0..chunk.ec.width())
            .filter(|&i| {
                let missing = i < 64 && chunk.missing & (1 << i) != 0;
                let node = map.as_ref().and_then(|m| m.node_for(chunk.placement.pg, i));
                missing || !node.is_some_and(|n| serving.contains(&n))
            })
            .count();
        if unavailable > 0 {
            status.chunks_degraded += 1;
        }
        if unavailable > usize::from(chunk.ec.m) {
            status.chunks_unavailable += 1;
        }
        if chunk.placement.map_version != status.map_version {
            status.chunks_misplaced += 1;
        }
    }
}

/// Published placement maps by version. Maps are immutable once published, so a cached
/// version never goes stale. Shared (`Arc`) so transaction bodies can hold it.
#[derive(Clone, Default)]
struct MapCache(Arc<Mutex<HashMap<u32, Arc<PlacementMap>>>>);

impl MapCache {
    fn get(&self, version: u32) -> Option<Arc<PlacementMap>> {
        self.0.lock().get(&version).cloned()
    }

    fn insert(&self, map: PlacementMap) -> Arc<PlacementMap> {
        let map = Arc::new(map);
        self.0.lock().insert(map.version, map.clone());
        map
    }

    /// Reads a map version inside a transaction, through the cache; `None` for version 0 or an
    /// unknown version.
    async fn get_in(&self, txn: &mut dyn KvTxn, version: u32) -> TxResult<Option<Arc<PlacementMap>>> {
        if version == 0 {
            return Ok(None);
        }
        if let Some(map) = self.get(version) {
            return Ok(Some(map));
        }
        // What a transaction reads was committed, and published maps never change: caching
        // it is right even if this transaction is retried or aborted.
        Ok(get::<PlacementMap>(txn, &keys::map(version)).await?.map(|map| self.insert(map)))
    }
}

fn check_drives(drives: &[DriveInfo]) -> Result<(), WireError> {
    if drives.len() > NODE_DRIVES_MAX {
        return Err(wire::werr!(TooLarge, "{} drives exceed the limit of {NODE_DRIVES_MAX} per node", drives.len()));
    }
    Ok(())
}

fn node_id(key: &[u8], value: u64) -> TxResult<NodeId> {
    match NodeId::try_from(value) {
        Ok(id) => Ok(id),
        Err(_) => fail!(Internal, "key {} holds node id {value}, out of range", keys::describe(key)),
    }
}

/// " of pool \"NAME\"" for messages about `pool` when the cluster has more than one pool, else
/// nothing (a cluster of one pool speaks of its nodes as it did before pools).
fn of_pool(pool: &PoolRec, pool_count: usize) -> String {
    if pool_count <= 1 {
        String::new()
    } else {
        format!(" of pool {:?}", pool.name)
    }
}

/// Reads every node record.
async fn read_nodes(txn: &mut dyn KvTxn) -> TxResult<Vec<NodeRec>> {
    let prefix = [keys::prefix::NODE];
    let pairs = store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await?;
    pairs.iter().map(|(key, value)| keys::decode(key, value).map_err(abort)).collect()
}

/// Whether a node takes new data: it is in placement maps. Draining nodes still serve what they
/// hold but are left out of new maps, which is what moves their data off.
pub fn is_member(state: NodeState) -> bool {
    matches!(state, NodeState::Up | NodeState::Down)
}

/// Computes and stores the next placement map version from the current node records: the
/// groups of every pool, each from its own member nodes.
async fn publish_map(txn: &mut dyn KvTxn, pg_count: u32) -> TxResult<PlacementMap> {
    let map_key = keys::counter(keys::counter::MAP);
    let mut members: Vec<(PoolId, NodeId)> =
        read_nodes(txn).await?.iter().filter(|n| is_member(n.state)).map(|n| (n.pool, n.id)).collect();
    members.sort_unstable();
    let version = store::get_u64(txn, &map_key, 0).await? + 1;
    let Ok(version) = u32::try_from(version) else {
        fail!(Internal, "placement map versions are exhausted");
    };
    let mut by_pool: Vec<(PoolId, Vec<NodeId>)> = Vec::new();
    for (pool, node) in members {
        match by_pool.last_mut() {
            Some((last, nodes)) if *last == pool => nodes.push(node),
            _ => by_pool.push((pool, vec![node])),
        }
    }
    let map = compute_pools_map(version, pg_count, &by_pool);
    store::put(txn, &keys::map(version), &map).await?;
    txn.put(&map_key, &keys::encode_u64(u64::from(version))).await?;
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Schemes that fit the nodes there are.

/// The scheme to write a chunk of scheme `ec` with when only `nodes` nodes can take its
/// shards: `ec` itself if they suffice; else fewer data shards with all `m` parity shards
/// (full redundancy, more overhead); with fewer than `m + 1` nodes, one data shard and as many
/// copies as the nodes allow (replication with less redundancy). `None` when no redundancy is
/// possible (fewer than two nodes) for a scheme that has parity. A scheme without parity
/// (chosen explicitly) narrows to fewer data shards.
pub fn narrowed(ec: EcScheme, nodes: usize) -> Option<EcScheme> {
    let (k, m) = (usize::from(ec.k), usize::from(ec.m));
    if nodes >= k + m {
        return Some(ec);
    }
    let (k, m) = if m == 0 {
        (nodes, 0)
    } else if nodes > m {
        (nodes - m, m)
    } else if nodes >= 2 {
        (1, nodes - 1)
    } else {
        return None;
    };
    if k == 0 {
        return None;
    }
    Some(EcScheme { k: k as u8, m: m as u8 })
}

/// The fewest nodes a chunk of scheme `ec` can be written on (with some redundancy if `ec`
/// has parity).
pub fn narrowest_width(ec: EcScheme) -> usize {
    if ec.m == 0 {
        1
    } else {
        2
    }
}

/// A scheme of the same kind as `ec` (same parity where possible) that fits `nodes` nodes,
/// for error messages.
fn fitting_example(ec: EcScheme, nodes: usize) -> Option<EcScheme> {
    narrowed(ec, nodes).filter(|fit| *fit != ec)
}

/// Chooses the scheme to write `ec` chunks with in a pool whose placement groups are `pgs`
/// when the nodes in `up` can take shards: the widest [`narrowed`] scheme whose width some
/// group has all up at its head. Returns it with, per group (by local number), whether the
/// group can hold it; `None` if no group can hold any scheme with redundancy.
pub fn choose_scheme(ec: EcScheme, pgs: &[Vec<NodeId>], up: &HashSet<NodeId>) -> Option<(EcScheme, Vec<bool>)> {
    let width = ec.width();
    let leading: Vec<usize> =
        pgs.iter().map(|pg| pg.iter().take(width).take_while(|n| up.contains(n)).count()).collect();
    let best = leading.iter().copied().max()?;
    let scheme = narrowed(ec, best)?;
    let fits = leading.iter().map(|&l| l >= scheme.width()).collect();
    Some((scheme, fits))
}

// ---------------------------------------------------------------------------------------------
// Placement.

/// A 64-bit finalizer (SplitMix64): fixed here, not `std`'s hasher, because placement must be
/// identical on every machine and every Rust version forever.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous score of `node` for shard slot `slot` of placement group `pg`.
fn slot_score(pg: u32, slot: u32, node: NodeId) -> u64 {
    mix64(mix64((u64::from(pg) << 32) | u64::from(slot)) ^ u64::from(node))
}

/// The placement group a chunk id starts from.
pub fn pg_for_chunk(id: ChunkId, pg_count: u32) -> u32 {
    (mix64(id ^ 0x5047_5047_5047_5047) % u64::from(pg_count.max(1))) as u32
}

/// Computes a placement map of the default pool only, from its members (see
/// [`compute_pool_pgs`]).
pub fn compute_map(version: u32, pg_count: u32, members: &[NodeId]) -> PlacementMap {
    compute_pools_map(version, pg_count, &[(wire::DEFAULT_POOL, members.to_vec())])
}

/// Computes a placement map from each pool's members; pools without members get no groups.
pub fn compute_pools_map(version: u32, pg_count: u32, pools: &[(PoolId, Vec<NodeId>)]) -> PlacementMap {
    let mut pools: Vec<PoolPgs> = pools
        .iter()
        .filter(|(_, members)| !members.is_empty())
        .map(|(pool, members)| PoolPgs { pool: *pool, pgs: compute_pool_pgs(*pool, pg_count, members) })
        .collect();
    pools.sort_by_key(|p| p.pool);
    PlacementMap { version, pools }
}

/// Computes the placement groups of one pool: for each PG, slot 0 goes to the member with the
/// highest score for (pg, slot 0), slot 1 to the highest-scoring remaining member for (pg,
/// slot 1), and so on for the first [`SHARDS_MAX`] slots; members beyond those (spares for
/// rebuild) follow in order of one more score. Scores hash the group's global number, so
/// pools sharing no nodes are placed independently, and the default pool's groups are what
/// they were before pools. Deterministic, never repeats a node within a PG, spreads slots
/// evenly, and when a node joins, the slots it wins change plus knock-on moves (see the
/// module comment).
pub fn compute_pool_pgs(pool: PoolId, pg_count: u32, members: &[NodeId]) -> Vec<Vec<NodeId>> {
    let mut nodes: Vec<NodeId> = members.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    (0..pg_count.min(PG_COUNT_MAX))
        .map(|local| {
            let pg = wire::pg_global(pool, local);
            let mut remaining = nodes.clone();
            let mut order = Vec::with_capacity(nodes.len());
            for slot in 0..SHARDS_MAX.min(nodes.len()) as u32 {
                let best = (0..remaining.len()).max_by_key(|&i| (slot_score(pg, slot, remaining[i]), remaining[i]));
                if let Some(best) = best {
                    order.push(remaining.swap_remove(best));
                }
            }
            remaining.sort_by_key(|&n| std::cmp::Reverse((slot_score(pg, u32::MAX, n), n)));
            order.extend(remaining);
            order
        })
        .collect()
}

/// What a health walk has counted so far: chunks, chunks per scheme, and per pool (chunks,
/// bytes stored, chunks per scheme).
#[derive(Default)]
struct Tally {
    chunks: u64,
    schemes: HashMap<EcScheme, u64>,
    per_pool: HashMap<PoolId, (u64, u64, HashMap<EcScheme, u64>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_keeps_parity_before_data() {
        let ec = EcScheme { k: 4, m: 2 };
        let n = |nodes| narrowed(ec, nodes).map(|e| e.to_string());
        assert_eq!(n(7).as_deref(), Some("4+2"));
        assert_eq!(n(6).as_deref(), Some("4+2"));
        assert_eq!(n(5).as_deref(), Some("3+2"));
        assert_eq!(n(4).as_deref(), Some("2+2"));
        assert_eq!(n(3).as_deref(), Some("1+2"));
        assert_eq!(n(2).as_deref(), Some("1+1"));
        assert_eq!(n(1), None);
        assert_eq!(n(0), None);
        let plain = EcScheme { k: 3, m: 0 };
        assert_eq!(narrowed(plain, 2), Some(EcScheme { k: 2, m: 0 }));
        assert_eq!(narrowed(plain, 0), None);
        assert_eq!(narrowed(EcScheme { k: 1, m: 2 }, 2), Some(EcScheme { k: 1, m: 1 }));
    }

    #[test]
    fn the_scheme_chosen_fits_groups_whose_head_is_up() {
        let map = compute_map(1, 256, &[1, 2, 3, 4, 5, 6]);
        let ec = EcScheme { k: 4, m: 2 };
        let all: HashSet<NodeId> = (1..=6).collect();
        let (scheme, fits) = choose_scheme(ec, map.pool_pgs(0), &all).expect("fits");
        assert_eq!(scheme, ec);
        assert!(fits.iter().all(|f| *f));
        // Two nodes down: 2+2 on the four others, in the groups that list them first.
        let four: HashSet<NodeId> = [1, 3, 4, 6].into_iter().collect();
        let (scheme, fits) = choose_scheme(ec, map.pool_pgs(0), &four).expect("fits");
        assert_eq!(scheme, EcScheme { k: 2, m: 2 });
        assert!(fits.iter().any(|f| *f));
        for (pg, fit) in map.pool_pgs(0).iter().zip(&fits) {
            assert_eq!(*fit, pg[..4].iter().all(|n| four.contains(n)), "group {pg:?}");
        }
        // One node left: no redundancy possible.
        let one: HashSet<NodeId> = [2].into_iter().collect();
        assert!(choose_scheme(ec, map.pool_pgs(0), &one).is_none());
    }

    #[test]
    fn small_maps_are_complete() {
        let map = compute_map(1, 4, &[3, 1, 2]);
        for pg in map.pool_pgs(0) {
            let mut sorted = pg.clone();
            sorted.sort();
            assert_eq!(sorted, vec![1, 2, 3]);
        }
        assert!(compute_map(1, 2, &[]).pools.is_empty());
    }

    #[test]
    fn pools_are_placed_on_their_own_members_only() {
        let map = compute_pools_map(3, 16, &[(0, vec![1, 2, 3]), (2, vec![4, 5, 6, 7]), (5, vec![])]);
        assert_eq!(map.pools.len(), 2);
        assert_eq!(map.pool_pgs(0), compute_map(3, 16, &[1, 2, 3]).pool_pgs(0));
        for local in 0..16 {
            let group = map.group(wire::pg_global(2, local)).expect("pool 2's group");
            let mut sorted = group.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![4, 5, 6, 7]);
        }
        assert!(map.group(wire::pg_global(5, 0)).is_none());
        // The same members in another pool are ordered differently (independent placement).
        let other = compute_pools_map(3, 16, &[(1, vec![1, 2, 3])]);
        assert_ne!(other.pool_pgs(1), map.pool_pgs(0));
    }

    #[test]
    fn many_members_list_spares_after_the_slots() {
        let members: Vec<NodeId> = (1..=40).collect();
        let map = compute_map(1, 8, &members);
        for pg in map.pool_pgs(0) {
            assert_eq!(pg.len(), 40);
            let unique: HashSet<_> = pg.iter().collect();
            assert_eq!(unique.len(), 40);
        }
    }
}
