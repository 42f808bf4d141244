//! Trove's storage service: one process per storage node, keeping erasure-coded shards on the
//! node's drives and serving them over the wire protocol.
//!
//! This crate root owns the process-level concerns: the configuration, the node's identity
//! (`node.uuid` on the first drive) and [`run`], which opens the store, serves requests and
//! keeps the node registered with the metadata service. The shard files are the business of
//! [`store`] (layout in [`format`](mod@format)); the request handling and membership loop of
//! [`service`].
//!
//! To run a node in-process (tests, here and in other crates), use [`LocalNode::start`], or
//! open a [`ShardStore`], wrap it in a [`StorageService`] and call [`serve_on`]; no metadata
//! service is needed.

pub mod crypt;
mod direct;
pub mod format;
pub mod metered;
pub mod object;
pub mod service;
pub mod store;

pub use object::{ObjectConfig, ObjectShards};
pub use service::{serve_on, StorageService};
pub use store::{OpenError, ShardStore, StoreConfig};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Name of the file on the first drive holding the node's identity.
pub const NODE_UUID_FILE: &str = "node.uuid";

fn default_heartbeat_ms() -> u64 {
    1000
}

/// Configuration of a storage node (TOML).
///
/// ```toml
/// listen = "0.0.0.0:7101"
/// advertise = "10.0.0.5:7101"   # optional, defaults to listen
/// drives = ["/data/d0", "/data/d1"]
/// meta = "10.0.0.1:7001"
/// cluster = "prod"
/// reserve_bytes = 10_000_000_000  # optional, default 0
/// heartbeat_ms = 1000             # optional
/// pool = "flash"                  # optional, default: the default pool
/// ```
///
/// A node of an object pool has no drives: it keeps its shards in an S3-compatible bucket
/// (`[object]`, see [`ObjectConfig`]) and must name its pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Address to accept connections on ("0.0.0.0:7101"; port 0 picks a free port).
    pub listen: String,
    /// Address clients should connect to, as registered with the metadata service. Defaults to
    /// the bound listen address.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Drive directories; created if missing. The first one also holds the node's identity.
    /// None with `[object]`.
    #[serde(default)]
    pub drives: Vec<PathBuf>,
    /// Address of the metadata service; with several metadata servers, all of them,
    /// comma-separated ("10.0.0.1:7100,10.0.0.2:7100").
    pub meta: String,
    /// The cluster's name, exchanged in every connection's hello.
    pub cluster: String,
    /// Puts that would leave less than this many bytes free on a drive are refused.
    #[serde(default)]
    pub reserve_bytes: u64,
    /// Interval between heartbeats to the metadata service.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// The storage pool the node belongs to (nodes of one kind: flash, disk); empty or absent:
    /// the default pool. A pool no node named before is made when its first node registers.
    #[serde(default)]
    pub pool: String,
    /// The credential directory (`ca.pem`, `cert.pem`, `key.pem`: see `wire::tls`) this
    /// service serves and calls other services with, in mutual TLS. The `trove` binary
    /// refuses a config with neither this nor `plaintext = true`.
    #[serde(default)]
    pub tls: Option<PathBuf>,
    /// Serve and call other services in plaintext, unauthenticated: on trusted networks only.
    #[serde(default)]
    pub plaintext: bool,
    /// Where to serve metrics (`/metrics`), "HOST:PORT"; none: no metrics are recorded.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Keep the shards in an S3-compatible bucket instead of on drives (a node of an object
    /// pool; its identity is kept there too).
    #[serde(default)]
    pub object: Option<ObjectConfig>,
    /// Encryption at rest: every new shard is sealed with the drives' data keys, which the key
    /// file's key wraps (see [`crypt`]). Give every node of a pool the same setting to have an
    /// encrypted pool.
    #[serde(default)]
    pub encryption: Option<EncryptionConfig>,
}

/// `[encryption]` of a storage node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionConfig {
    /// The key-encryption key: a file of 64 hexadecimal digits (`trove encryption keygen`),
    /// readable by the node only.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Or an external KMS keeps it: the plug-in command that wraps and unwraps the drives'
    /// data keys (program and arguments; the interface is in [`crypt`]).
    #[serde(default)]
    pub kms_command: Option<Vec<String>>,
}

impl EncryptionConfig {
    /// Where the key-encryption key comes from; exactly one of the two must be given.
    pub fn source(&self) -> anyhow::Result<crypt::KeySource> {
        match (&self.key_file, &self.kms_command) {
            (Some(f), None) => Ok(crypt::KeySource::File(f.clone())),
            (None, Some(argv)) if !argv.is_empty() && !argv[0].is_empty() => Ok(crypt::KeySource::Kms(argv.clone())),
            (None, Some(_)) => bail!("[encryption] kms_command names no program"),
            (Some(_), Some(_)) => bail!("[encryption] takes key_file or kms_command, not both"),
            (None, None) => bail!("[encryption] needs key_file (a key file) or kms_command (a KMS plug-in)"),
        }
    }
}

impl StorageConfig {
    /// The metadata servers' addresses: `meta` is one address or several, comma-separated.
    pub fn meta_addrs(&self) -> Vec<String> {
        self.meta.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect()
    }

    /// Parses a TOML configuration and checks it.
    pub fn from_toml(text: &str) -> anyhow::Result<StorageConfig> {
        let config: StorageConfig = toml::from_str(text).context("invalid storage configuration")?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML configuration file.
    pub fn load(path: &Path) -> anyhow::Result<StorageConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(e) = &self.encryption {
            e.source()?;
        }
        if let Some(object) = &self.object {
            if !self.drives.is_empty() {
                bail!("a node with [object] keeps its shards in the bucket: remove `drives`");
            }
            if self.pool.is_empty() || self.pool == wire::DEFAULT_POOL_NAME {
                bail!("a node with [object] must name its object pool (pool = \"NAME\"), not the default pool");
            }
            object.validate()?;
            if self.encryption.is_some() {
                bail!("[encryption] is for nodes with drives; an object pool's shards are kept in its bucket, which the object store encrypts (its server-side encryption)");
            }
        } else if self.drives.is_empty() {
            bail!("no drives configured: `drives` needs at least one directory (or [object] for a node of an object pool)");
        }
        for (i, d) in self.drives.iter().enumerate() {
            if self.drives[..i].contains(d) {
                bail!("drive {} is listed twice", d.display());
            }
        }
        if self.listen.is_empty() {
            bail!("`listen` is empty");
        }
        if self.meta_addrs().is_empty() {
            bail!("`meta` (the metadata service addresses, comma-separated) is empty");
        }
        if self.heartbeat_ms == 0 {
            bail!("`heartbeat_ms` must be at least 1");
        }
        if !self.pool.is_empty() {
            wire::check_pool_name(&self.pool).map_err(|e| anyhow::anyhow!("`pool`: {e}"))?;
        }
        Ok(())
    }

    /// The store configuration part.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            drives: self.drives.clone(),
            reserve_bytes: self.reserve_bytes,
            keys: self.encryption.as_ref().and_then(|e| e.source().ok()),
        }
    }
}

/// Reads the node's identity from `<drive>/node.uuid`, creating it (crash-safely) on first start.
/// A present but unreadable file is an error, never silently replaced: a new uuid would make the
/// metadata service see a new node and the shards on these drives would be orphaned.
pub fn load_or_create_node_uuid(drive: &Path) -> anyhow::Result<u128> {
    let path = drive.join(NODE_UUID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let text = text.trim();
            match u128::from_str_radix(text, 16) {
                Ok(uuid) if uuid != 0 && text.len() == 32 => Ok(uuid),
                _ => bail!("{} does not hold a node uuid (32 hex digits): {text:?}", path.display()),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let uuid = loop {
                let u: u128 = rand::random();
                if u != 0 {
                    break u;
                }
            };
            let tmp = drive.join(format!("{NODE_UUID_FILE}.tmp"));
            let write = || -> std::io::Result<()> {
                let mut f = std::fs::File::create(&tmp)?;
                writeln!(f, "{uuid:032x}")?;
                f.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(drive)?.sync_all()
            };
            write().with_context(|| format!("cannot create {}", path.display()))?;
            tracing::info!("new node identity {uuid:032x} written to {}", path.display());
            Ok(uuid)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Runs a storage node until the process ends: opens the drives, serves the storage protocol
/// and keeps the node registered with the metadata service. Returns only on a startup error.
pub async fn run(config: StorageConfig) -> anyhow::Result<()> {
    run_until(config, std::future::pending()).await
}

/// [`run`], stopping (and releasing the drives) when `shutdown` completes.
pub async fn run_until(config: StorageConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    config.validate()?;
    let (service, uuid) = match &config.object {
        Some(object) => {
            let (shards, uuid) = ObjectShards::open(object).await?;
            (StorageService::new_object(Arc::new(shards)), uuid)
        }
        None => {
            let store_config = config.store_config();
            let first_drive = config.drives[0].clone();
            let (store, uuid) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
                let store = ShardStore::open(&store_config)?;
                let uuid = load_or_create_node_uuid(&first_drive)?;
                Ok((store, uuid))
            })
            .await
            .context("opening the drives panicked")??;
            (StorageService::new(Arc::new(store)), uuid)
        }
    };
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr().context("listener has no address")?;
    let advertise = config.advertise.clone().unwrap_or_else(|| bound.to_string());
    if config.advertise.is_none() && bound.ip().is_unspecified() {
        tracing::warn!("listening on {bound} without `advertise`: clients will be told to connect to {advertise}");
    }
    // Before the node says it listens, so that a taken metrics port fails the start.
    let exporter = match &config.metrics_listen {
        Some(listen) => Some(metrics::http::serve(listen, None).await?),
        None => None,
    };
    tracing::info!(target: "trove::ready", "storage node {uuid:032x} listening on {bound}, advertised as {advertise}");

    let service = Arc::new(service);
    service.set_meta_addrs(&config.meta_addrs());
    let _announcing = match exporter {
        Some(exporter) => {
            metered::publish_drives(&service);
            let at = metrics::advertised(exporter.addr, &advertise);
            exporter.detach();
            Some(AbortOnDrop(tokio::spawn(metered::announce(
                service.clone(),
                config.meta_addrs(),
                config.cluster.clone(),
                advertise.clone(),
                at,
            ))))
        }
        None => None,
    };
    let server = AbortOnDrop(tokio::spawn(serve_on(listener, service.clone(), config.cluster.clone())));
    let _reporting = AbortOnDrop(tokio::spawn(report_refusals(config.meta_addrs(), advertise.clone())));
    // One membership loop per metadata server: each one hears this node's heartbeats, so
    // whichever leads the cluster manager knows its liveness (registration is by uuid, so all
    // of them agree on its id).
    let mut memberships = tokio::task::JoinSet::new();
    for meta in config.meta_addrs() {
        memberships.spawn(service::membership(
            service.clone(),
            service::Membership {
                meta,
                cluster: config.cluster.clone(),
                uuid,
                addr: advertise.clone(),
                heartbeat: Duration::from_millis(config.heartbeat_ms),
                pool: config.pool.clone(),
                object: config.object.as_ref().map(ObjectConfig::target),
            },
        ));
    }
    // The loops never end; dropping the set at shutdown aborts them.
    let memberships = async move {
        while let Some(ended) = memberships.join_next().await {
            if let Ok(refused) = ended {
                return Some(refused);
            }
        }
        None
    };
    let refused = tokio::select! {
        () = shutdown => None,
        refused = memberships => refused,
    };
    // Stop accepting, let running operations finish, then drop the store so the drives are
    // unlocked when this returns (connections still open only get `Unavailable` from now on).
    let mut server = server;
    server.0.abort();
    let _ = (&mut server.0).await;
    service.shutdown().await;
    match refused {
        Some(e) => bail!("the metadata service refused this node: {}", e.message),
        None => Ok(()),
    }
}

/// Reports the connections this node refused at the TLS handshake to the event log, through
/// the first metadata server that takes the report, every
/// [`wire::rpc::REFUSAL_REPORT_INTERVAL`] at most.
async fn report_refusals(metas: Vec<String>, addr: String) {
    let peers: Vec<wire::Peer> = metas.iter().map(|m| wire::Peer::new(m.clone(), wire::Service::Meta)).collect();
    loop {
        tokio::time::sleep(wire::rpc::REFUSAL_REPORT_INTERVAL).await;
        let Some((refused, latest)) = wire::rpc::take_refusals() else { continue };
        let op = wire::MetaOp::ReportAuthFailures { front: format!("storage node {addr}"), refused, latest };
        let call = wire::MetaCall { request_id: 0, op };
        let mut last = String::new();
        let mut reported = false;
        for peer in &peers {
            match peer.call::<wire::MetaCall, wire::MetaReply>(&call, bytes::Bytes::new(), Duration::from_secs(5)).await
            {
                Ok(_) => {
                    reported = true;
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        if !reported {
            tracing::warn!("{refused} refused connection(s) could not be recorded in the event log: {last}");
        }
    }
}

/// A storage node running inside the current process, for tests (here and in other crates):
/// no metadata service, node id 0. Dropping it stops accepting connections.
pub struct LocalNode {
    /// The address it listens on (`127.0.0.1:<free port>`).
    pub addr: String,
    pub service: Arc<StorageService>,
    _server: AbortOnDrop,
}

impl LocalNode {
    /// Opens a store on `store_config` and serves it on a free local port, answering hellos
    /// with `cluster`.
    pub async fn start(store_config: StoreConfig, cluster: &str) -> anyhow::Result<LocalNode> {
        let store = tokio::task::spawn_blocking(move || ShardStore::open(&store_config))
            .await
            .context("opening the drives panicked")??;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let service = Arc::new(StorageService::new(Arc::new(store)));
        let server = tokio::spawn(serve_on(listener, service.clone(), cluster.to_string()));
        Ok(LocalNode { addr, service, _server: AbortOnDrop(server) })
    }

    /// Stops serving and releases the drives (after running operations finish).
    pub async fn stop(self) {
        self._server.0.abort();
        self.service.shutdown().await;
    }
}

/// Aborts a spawned task when dropped, so cancelling `run_until` does not leave a server behind.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
