//! Storage pools from the command line: `trove pool list|create|set`, and where data is:
//! `trove stat --layout FILE` (each chunk's pool, scheme, placement group and nodes, as
//! PowerScale's `isi get -DD` shows a file's blocks) and `trove du --by-pool PATH` (bytes per
//! pool below a path).

use crate::cmds::{human_bytes, shown, ClusterOpt};
use anyhow::{anyhow, bail, Result};
use client::{Client, FileKind};
use std::collections::BTreeMap;
use std::io::Write;
use wire::{ChunkRecord, EcScheme, NodeState, PlacementMap, PoolId, PoolInfo};

#[derive(clap::Subcommand)]
pub enum PoolCmd {
    /// Lists the storage pools with their nodes, capacity and default scheme.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Creates a pool of storage nodes; nodes join it with `pool = "NAME"` in their
    /// configuration (a node naming a pool that does not exist also creates it).
    Create {
        /// The pool's name: ASCII letters, digits, '.', '_' and '-'.
        name: String,
        /// The pool's default erasure scheme (default: the cluster's).
        #[arg(long)]
        ec: Option<EcScheme>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Changes a pool's default erasure scheme (what directories put in it with `trove mkdir
    /// --pool`, and files a policy moves there, are coded in).
    Set {
        /// The pool's name, as `trove pool list` shows it.
        name: String,
        /// The new default erasure scheme.
        #[arg(long)]
        ec: EcScheme,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

impl PoolCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            PoolCmd::List { cluster, .. } | PoolCmd::Create { cluster, .. } | PoolCmd::Set { cluster, .. } => cluster,
        }
    }
}

pub async fn run(cmd: PoolCmd, client: &Client) -> Result<()> {
    match cmd {
        PoolCmd::List { json, .. } => list(client, json).await,
        PoolCmd::Create { name, ec, .. } => {
            let ec = match ec {
                Some(ec) => ec,
                None => {
                    client
                        .status(false)
                        .await
                        .map_err(|e| anyhow!("cannot read the cluster's default scheme: {e}"))?
                        .default_ec
                }
            };
            let op = wire::MetaOp::CreatePool { name: name.clone(), kind: wire::PoolKind::Nodes, default_ec: ec };
            match client.meta(op).await {
                Ok(_) => {
                    println!("pool {name} created (default scheme {ec}); storage nodes join it with pool = {name:?} in their configuration");
                    Ok(())
                }
                Err(e) => bail!("cannot create pool {name}: {e}"),
            }
        }
        PoolCmd::Set { name, ec, .. } => {
            let op = wire::MetaOp::SetPoolOptions { name: name.clone(), default_ec: Some(ec) };
            match client.meta(op).await {
                Ok(_) => {
                    println!("pool {name}: default scheme {ec} (for directories put in it from now on, and files policies move there)");
                    Ok(())
                }
                Err(e) => bail!("cannot change pool {name}: {e}"),
            }
        }
    }
}

async fn list(client: &Client, json: bool) -> Result<()> {
    let status = client.status(false).await.map_err(|e| anyhow!("cannot get the pools: {e}"))?;
    if json {
        let pools: Vec<serde_json::Value> = status.pools.iter().map(pool_json).collect();
        println!("{}", serde_json::to_string_pretty(&pools)?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>4}  {:<16} {:<6} {:<8} {:>10} {:>10} {:>10}",
        "id", "name", "kind", "scheme", "nodes (up)", "capacity", "free"
    )?;
    for p in &status.pools {
        writeln!(
            out,
            "{:>4}  {:<16} {:<6} {:<8} {:>10} {:>10} {:>10}",
            p.pool.id,
            shown(&p.pool.name),
            p.pool.kind.name(),
            p.pool.default_ec.to_string(),
            format!("{} ({})", p.nodes, p.nodes_up),
            human_bytes(p.bytes_total),
            human_bytes(p.bytes_free)
        )?;
    }
    for p in &status.pools {
        if let wire::PoolKind::Object { endpoint, bucket } = &p.pool.kind {
            writeln!(out, "pool {}: objects in bucket {} at {endpoint}", shown(&p.pool.name), shown(bucket))?;
        }
    }
    Ok(())
}

/// One pool's figures as `status --json` and `pool list --json` show them.
pub fn pool_json(p: &wire::PoolStatus) -> serde_json::Value {
    let (endpoint, bucket) = match &p.pool.kind {
        wire::PoolKind::Object { endpoint, bucket } => (Some(endpoint), Some(bucket)),
        wire::PoolKind::Nodes => (None, None),
    };
    serde_json::json!({
        "endpoint": endpoint, "bucket": bucket,
        "id": p.pool.id, "name": p.pool.name, "kind": p.pool.kind.name(),
        "default_ec": p.pool.default_ec.to_string(),
        "nodes": p.nodes, "nodes_up": p.nodes_up,
        "bytes_total": p.bytes_total, "bytes_free": p.bytes_free,
        "chunks": p.chunks, "bytes_stored": p.bytes_stored,
        "ec_schemes": p.schemes.iter().map(|(ec, n)| serde_json::json!({"ec": ec.to_string(), "chunks": n})).collect::<Vec<_>>(),
    })
}

/// Pool names by id, for listings (`pool N` for one that vanished meanwhile).
fn pool_names(pools: &[PoolInfo]) -> impl Fn(PoolId) -> String + '_ {
    move |id| pools.iter().find(|p| p.id == id).map_or_else(|| format!("pool {id}"), |p| p.name.clone())
}

/// Raw bytes a chunk's stored shards take on their nodes.
fn stored_bytes(rec: &ChunkRecord) -> u64 {
    (rec.ec.width() as u64 - u64::from(rec.missing.count_ones())) * u64::from(rec.shard_len)
}

/// `trove stat --layout FILE`: the file's attributes, then each chunk: its pool, scheme,
/// placement (map version and group) and the node of each shard, with the nodes' states.
pub async fn stat_layout(client: &Client, remote: &str, json: bool) -> Result<()> {
    let attr = client.resolve(remote).await.map_err(|e| anyhow!("cannot stat {}: {e}", shown(remote)))?;
    let pools = client.pools().await.map_err(|e| anyhow!("cannot read the pools: {e}"))?;
    let name_of = pool_names(&pools);
    if attr.kind != FileKind::File {
        if json {
            let v = serde_json::json!({"path": remote, "kind": attr.kind.name(), "pool": name_of(attr.pool), "ec": attr.ec.to_string(), "chunks": []});
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            crate::cmds::stat(client, remote).await?;
            println!("  pool: {} (new files below inherit it)", name_of(attr.pool));
        }
        return Ok(());
    }
    let (attr, chunks) = client
        .chunk_records(attr.ino)
        .await
        .map_err(|e| anyhow!("cannot read the chunks of {}: {e}", shown(remote)))?;
    let states: BTreeMap<wire::NodeId, NodeState> = client
        .status(false)
        .await
        .map_err(|e| anyhow!("cannot read the node states: {e}"))?
        .nodes
        .iter()
        .map(|n| (n.id, n.state))
        .collect();
    let mut maps: BTreeMap<u32, std::sync::Arc<PlacementMap>> = BTreeMap::new();
    let mut rows = Vec::with_capacity(chunks.len());
    for rec in &chunks {
        let version = rec.placement.map_version;
        if !maps.contains_key(&version) {
            let map =
                client.placement_map(version).await.map_err(|e| anyhow!("cannot read placement map {version}: {e}"))?;
            maps.insert(version, map);
        }
        let map = &maps[&version];
        let shards: Vec<(usize, Option<wire::NodeId>, &'static str)> = (0..rec.ec.width())
            .map(|i| {
                let node = map.node_for(rec.placement.pg, i);
                let missing = i < 64 && rec.missing & (1 << i) != 0;
                let state = match (missing, node.and_then(|n| states.get(&n))) {
                    (true, _) => "missing",
                    (false, Some(NodeState::Up)) => "up",
                    (false, Some(NodeState::Draining)) => "draining",
                    (false, Some(NodeState::Down)) => "down",
                    (false, Some(NodeState::Out)) => "out",
                    (false, None) => "unknown",
                };
                (i, node, state)
            })
            .collect();
        rows.push((rec, shards));
    }
    if json {
        let chunks: Vec<serde_json::Value> = rows
            .iter()
            .map(|(rec, shards)| {
                let pool = wire::pg_pool(rec.placement.pg);
                serde_json::json!({
                    "index": rec.index, "id": format!("{:016x}", rec.id), "len": rec.len,
                    "pool": name_of(pool), "pool_id": pool, "ec": rec.ec.to_string(),
                    "map_version": rec.placement.map_version, "pg": wire::pg_local(rec.placement.pg),
                    "bytes_stored": stored_bytes(rec),
                    "shards": shards.iter().map(|(i, node, state)| serde_json::json!({"index": i, "node": node, "state": state})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let v = serde_json::json!({
            "path": remote, "ino": attr.ino, "size": attr.size, "kind": attr.kind.name(),
            "pool": name_of(attr.pool), "ec": attr.ec.to_string(), "chunk_bytes": attr.chunk_bytes,
            "data_version": attr.data_version, "chunks": chunks,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "  path: {}", shown(remote))?;
    writeln!(out, "  inode: {}  size: {}  data version: {}", attr.ino, attr.size, attr.data_version)?;
    writeln!(
        out,
        "  layout: pool {}  erasure {}  chunk {} bytes (new data of the file)",
        name_of(attr.pool),
        attr.ec,
        attr.chunk_bytes
    )?;
    writeln!(out, "  chunks: {}", chunks.len())?;
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "{:>8}  {:<16}  {:<12} {:<6} {:>4} {:>6} {:>10}  shards (index:node state)",
        "index", "chunk", "pool", "scheme", "map", "group", "bytes"
    )?;
    for (rec, shards) in &rows {
        let shards: Vec<String> = shards
            .iter()
            .map(|(i, node, state)| match node {
                Some(n) if *state == "up" => format!("{i}:{n}"),
                Some(n) => format!("{i}:{n}({state})"),
                None => format!("{i}:-({state})"),
            })
            .collect();
        writeln!(
            out,
            "{:>8}  {:016x}  {:<12} {:<6} {:>4} {:>6} {:>10}  {}",
            rec.index,
            rec.id,
            shown(&name_of(wire::pg_pool(rec.placement.pg))),
            rec.ec.to_string(),
            rec.placement.map_version,
            wire::pg_local(rec.placement.pg),
            rec.len,
            shards.join(" ")
        )?;
    }
    Ok(())
}

/// What `du --by-pool` counts for one pool.
#[derive(Default)]
struct PoolUse {
    /// Files with at least one chunk in the pool.
    files: u64,
    chunks: u64,
    /// Bytes of file data held by those chunks.
    bytes: u64,
    /// Raw bytes of their stored shards.
    bytes_stored: u64,
}

/// `trove du --by-pool PATH`: walks the tree below `PATH` and sums, per pool, the files with
/// data there, their chunks, the bytes of data and the raw bytes stored.
pub async fn du_by_pool(client: &Client, remote: &str, json: bool) -> Result<()> {
    let top = client.resolve(remote).await.map_err(|e| anyhow!("cannot read {}: {e}", shown(remote)))?;
    let pools = client.pools().await.map_err(|e| anyhow!("cannot read the pools: {e}"))?;
    let name_of = pool_names(&pools);
    let mut by_pool: BTreeMap<PoolId, PoolUse> = BTreeMap::new();
    let (mut files, mut dirs) = (0u64, 0u64);
    // A file with several names is counted once, as du(1) does.
    let mut counted: std::collections::HashSet<wire::Ino> = std::collections::HashSet::new();
    let mut stack = vec![top.clone()];
    while let Some(attr) = stack.pop() {
        match attr.kind {
            FileKind::Dir => {
                dirs += 1;
                let entries = client
                    .readdir(attr.ino)
                    .await
                    .map_err(|e| anyhow!("cannot list a directory below {}: {e}", shown(remote)))?;
                stack.extend(entries.into_iter().map(|e| e.attr));
            }
            FileKind::File => {
                if !counted.insert(attr.ino) {
                    continue;
                }
                files += 1;
                let chunks = match client.chunk_records(attr.ino).await {
                    Ok((_, chunks)) => chunks,
                    // Removed while the walk ran: it holds nothing any more.
                    Err(e) if e.code == client::ErrorCode::NotFound => continue,
                    Err(e) => bail!("cannot read the chunks of inode {} below {}: {e}", attr.ino, shown(remote)),
                };
                let mut seen: Vec<PoolId> = Vec::new();
                for rec in &chunks {
                    let pool = wire::pg_pool(rec.placement.pg);
                    let used = by_pool.entry(pool).or_default();
                    if !seen.contains(&pool) {
                        seen.push(pool);
                        used.files += 1;
                    }
                    used.chunks += 1;
                    used.bytes += u64::from(rec.len);
                    used.bytes_stored += stored_bytes(rec);
                }
            }
            _ => {}
        }
    }
    if json {
        let pools: Vec<serde_json::Value> = by_pool
            .iter()
            .map(|(id, u)| serde_json::json!({"pool": name_of(*id), "pool_id": id, "files": u.files, "chunks": u.chunks, "bytes": u.bytes, "bytes_stored": u.bytes_stored}))
            .collect();
        let v = serde_json::json!({"path": remote, "files": files, "directories": dirs, "pools": pools});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}: {files} files in {dirs} directories", shown(remote))?;
    writeln!(out, "{:<16} {:>8} {:>10} {:>12} {:>12}", "pool", "files", "chunks", "data", "stored")?;
    for (id, u) in &by_pool {
        writeln!(
            out,
            "{:<16} {:>8} {:>10} {:>12} {:>12}",
            shown(&name_of(*id)),
            u.files,
            u.chunks,
            human_bytes(u.bytes),
            human_bytes(u.bytes_stored)
        )?;
    }
    Ok(())
}
