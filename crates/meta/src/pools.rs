//! Storage pools: named sets of storage nodes, each with its own placement groups and default
//! erasure scheme (PowerScale's node pools, Ceph's device classes).
//!
//! A pool is a record under `O` ‖ pool id. The default pool (id 0) is written at the cluster's
//! first start (and at the first start of a cluster made before pools) so that every pool has a
//! record; nodes that name no pool, and every file and chunk written before pools, are in it.
//! A node naming a pool that does not exist creates it (the first node of its kind), with the
//! cluster's default scheme; operators create and change pools with `trove pool`.
//!
//! A chunk's pool is not stored beside its record: it is the upper 16 bits of its placement
//! group number (`wire::pg_pool`), so that a record says where its chunk is by itself and
//! records from before pools (pool 0) keep their meaning.

use crate::keys::{self, PoolRec, PoolRecKind};
use crate::store::{self, abort, fail, get, TxResult};
use kv::KvTxn;
use wire::{EcScheme, PoolId, PoolKind, DEFAULT_POOL, POOL_ID_MAX};

/// Most pools a cluster may have.
pub const POOLS_MAX: usize = 256;

/// Writes the default pool's record unless it exists.
pub async fn ensure_default(txn: &mut dyn KvTxn, default_ec: EcScheme) -> TxResult<()> {
    let key = keys::pool(DEFAULT_POOL);
    if txn.get(&key).await?.is_none() {
        store::put(txn, &key, &PoolRec::default_pool(default_ec)).await?;
    }
    Ok(())
}

/// Every pool, by id.
pub async fn read_all(txn: &mut dyn KvTxn) -> TxResult<Vec<PoolRec>> {
    let prefix = [keys::prefix::POOL];
    let pairs = store::scan_all(txn, &prefix, &kv::prefix_end(&prefix)).await?;
    pairs.iter().map(|(key, value)| keys::decode(key, value).map_err(abort)).collect()
}

/// The pool named `name` (empty: the default pool), if there is one.
pub async fn find(txn: &mut dyn KvTxn, name: &str) -> TxResult<Option<PoolRec>> {
    if name.is_empty() {
        return get::<PoolRec>(txn, &keys::pool(DEFAULT_POOL)).await;
    }
    Ok(read_all(txn).await?.into_iter().find(|p| p.name == name))
}

/// The pool named `name`; `NotFound` naming the pools there are otherwise.
pub async fn by_name(txn: &mut dyn KvTxn, name: &str) -> TxResult<PoolRec> {
    if let Some(pool) = find(txn, name).await? {
        return Ok(pool);
    }
    let names: Vec<String> = read_all(txn).await?.into_iter().map(|p| p.name).collect();
    fail!(NotFound, "no pool named {name:?}; the pools are {} (create one with `trove pool create`)", names.join(", "))
}

/// The pool with id `id`; `Internal` when it is missing (records name only pools that exist).
pub async fn by_id(txn: &mut dyn KvTxn, id: PoolId) -> TxResult<PoolRec> {
    match get::<PoolRec>(txn, &keys::pool(id)).await? {
        Some(pool) => Ok(pool),
        None => fail!(Internal, "pool {id} has no record"),
    }
}

/// Creates pool `name`; `Exists` if the name is taken.
pub async fn create(txn: &mut dyn KvTxn, name: &str, kind: PoolKind, default_ec: EcScheme) -> TxResult<PoolRec> {
    wire::check_pool_name(name).map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
    default_ec.validate().map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
    let pools = read_all(txn).await?;
    if pools.iter().any(|p| p.name == name) {
        fail!(Exists, "a pool named {name:?} exists already");
    }
    if pools.len() >= POOLS_MAX {
        fail!(TooLarge, "the cluster has {} pools, the most it may have", pools.len());
    }
    let counter = keys::counter(keys::counter::POOL);
    let id = store::get_u64(txn, &counter, 1).await?;
    let Ok(id) = PoolId::try_from(id) else {
        fail!(Internal, "pool id {id} is out of range");
    };
    if id > POOL_ID_MAX {
        fail!(TooLarge, "pool ids are exhausted ({POOL_ID_MAX} pools were made)");
    }
    txn.put(&counter, &keys::encode_u64(u64::from(id) + 1)).await?;
    let rec = PoolRec {
        id,
        name: name.to_string(),
        kind: match kind {
            PoolKind::Nodes => PoolRecKind::Nodes,
            PoolKind::Object { endpoint, bucket } => PoolRecKind::Object { endpoint, bucket },
        },
        default_ec,
    };
    store::put(txn, &keys::pool(id), &rec).await?;
    Ok(rec)
}

/// Changes pool `name`'s default scheme. Pools are not renamed: storage nodes join a pool by
/// its name in their configuration, and a node restarted with a name no pool has any more
/// would make a new pool and move its data there.
pub async fn set_options(txn: &mut dyn KvTxn, name: &str, default_ec: Option<EcScheme>) -> TxResult<PoolRec> {
    let mut pool = by_name(txn, name).await?;
    if let Some(ec) = default_ec {
        ec.validate().map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
        pool.default_ec = ec;
    }
    store::put(txn, &keys::pool(pool.id), &pool).await?;
    Ok(pool)
}
