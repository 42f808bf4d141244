//! Trove's client library: the API boundary every front end (CLI, FUSE mount, S3 and NFS
//! gateways, benchmarks) uses.
//!
//! It owns two things:
//! - namespace calls to the metadata service, each with a request id so that a call retried
//!   after a lost connection is applied once ([`Client`]);
//! - file I/O ([`FileHandle`]): files are cut into chunks, each chunk erasure-coded into shards
//!   that go to distinct storage nodes in parallel; reads fetch shards from all involved nodes
//!   at once, verify every block against checksums recorded in the metadata, and rebuild from
//!   parity when nodes are down or data fails its checksum.
//!
//! Architecture invariant: the client never returns bytes that failed verification. When too
//! few valid shards can be had, the read fails with an error naming the chunk and the nodes.

mod atime;
mod chunk_cache;
pub mod chunkio;
pub mod disk_cache;
mod file;
pub mod metered;
mod posix;
mod reader;
mod stages;

pub use atime::{relatime_due, ATIME_FLUSH_INTERVAL};
pub use chunk_cache::ChunkCacheStats;
pub use disk_cache::{DiskCacheError, DiskCacheOptions, DiskCacheStats, DISK_CACHE_BYTES_MAX_DEFAULT};
pub use file::{FileHandle, FirstChunks};
pub use reader::{Keep, ReadSide};
pub use stages::{StageReport, STAGES_XATTR};
pub use wire::stages::StageTotal;
/// TLS credentials for [`ClientOptions::tls`], so front ends need not depend on `wire`.
pub use wire::tls;
pub use wire::{Attr, DirEntry, EcScheme, ErrorCode, FileKind, Ino, SetAttr, StatFs, WireError, ROOT_INO};

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wire::{ClusterStatus, MetaCall, MetaOp, MetaReply, NodeId, Peer, PlacementMap, RpcError, Service};

/// A metadata operation's name (`Lookup`, `GetAttr`, ...): what the client logs at trace level
/// under the target `trove::meta_call` for every call it sends, so that round trips can be
/// counted from outside (`TROVE_LOG=trove::meta_call=trace`). Formatted only when enabled.
struct OpName<'a>(&'a MetaOp);

impl std::fmt::Display for OpName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = format!("{:?}", self.0);
        let end = text.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(text.len());
        f.write_str(&text[..end])
    }
}

/// Errors returned by the client: a stable code and a message naming what failed.
pub type Error = WireError;
/// Result of client operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Files being written under a temporary name, renamed onto their final name only once complete
/// (`trove put`, the S3 gateway's PUT, copy and part uploads), carry this prefix, so a failed or
/// interrupted write never shows as a file that looks finished.
pub const TMP_PREFIX: &str = wire::TMP_NAME_PREFIX;

/// A fresh temporary name for a file being written in some directory (see [`TMP_PREFIX`]).
pub fn tmp_name() -> String {
    format!("{TMP_PREFIX}{:016x}", wire::world::random::<u64>())
}

/// Whether `name` is a temporary name of a write in progress (see [`TMP_PREFIX`]).
pub fn is_tmp_name(name: &str) -> bool {
    name.starts_with(TMP_PREFIX)
}

/// How often reads and writes refresh the storage nodes' states from the metadata service (a
/// version check: the states themselves cross the network only when they changed).
pub const NODE_REFRESH_INTERVAL: Duration = Duration::from_secs(2);

/// Tunables of a client.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long a metadata call keeps retrying while the service is unreachable.
    pub meta_deadline: Duration,
    /// Timeout of one storage request.
    pub storage_timeout: Duration,
    /// Most chunks read ahead of a sequential reader.
    pub readahead_chunks_max: usize,
    /// Bytes of whole chunks the client keeps in memory for every file and open together
    /// (`chunk_cache.rs`): past it, the least recently used are let go. Zero: none, every read
    /// goes to the storage nodes.
    pub cache_bytes_max: u64,
    /// Whole chunks kept on a local disk under the memory cache (`disk_cache.rs`): chunks read
    /// whole or fetched for random reads that came back, verified against their records when
    /// read again. `None` (the default): memory only.
    pub disk_cache: Option<DiskCacheOptions>,
    /// Most chunks a writer has uploading at once (back-pressure).
    pub write_chunks_inflight_max: usize,
    /// After a node fails to answer, how long reads route around it before trying it again.
    pub node_retry_after: Duration,
    /// How long a chunk upload waits for storage nodes when none of them answers at all
    /// (nodes that fail while others answer are written around at once instead).
    pub write_retry_deadline: Duration,
    /// Whether reads record access times (relatime, batched; see `atime.rs`). Off: like a
    /// `noatime` mount, reads leave atimes alone.
    pub atime: bool,
    /// The TLS credential the client reaches the cluster with: by default the one installed
    /// for the process (`wire::tls::install`), none meaning plaintext.
    pub tls: wire::tls::TlsChoice,
    /// The network the cluster is reached over: TCP, or a simulator's.
    pub net: wire::world::Net,
}

/// The default of `ClientOptions::cache_bytes_max`: 1 GiB, 256 chunks of 4 MiB.
pub const CACHE_BYTES_MAX_DEFAULT: u64 = 1 << 30;

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            meta_deadline: Duration::from_secs(30),
            storage_timeout: Duration::from_secs(20),
            readahead_chunks_max: 8,
            cache_bytes_max: CACHE_BYTES_MAX_DEFAULT,
            disk_cache: None,
            write_chunks_inflight_max: 6,
            node_retry_after: Duration::from_secs(2),
            write_retry_deadline: Duration::from_secs(20),
            atime: true,
            tls: wire::tls::TlsChoice::Installed,
            net: wire::world::Net::Tcp,
        }
    }
}

/// A connection to one Trove cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) options: ClientOptions,
    /// Whole chunks by id, for every file and open.
    pub(crate) chunk_cache: chunk_cache::ChunkCache,
    /// Whole chunks on a local disk, under `chunk_cache` (`ClientOptions::disk_cache`).
    pub(crate) disk_cache: Option<disk_cache::DiskCache>,
    /// The metadata servers (several share one engine); calls go to `meta_current` and move to
    /// the next one when it is unreachable.
    metas: Vec<Peer>,
    meta_current: std::sync::atomic::AtomicUsize,
    client_id: u64,
    next_seq: AtomicU64,
    nodes: RwLock<HashMap<NodeId, Arc<NodeHandle>>>,
    maps: RwLock<HashMap<u32, Arc<PlacementMap>>>,
    last_node_refresh: parking_lot::Mutex<Option<Instant>>,
    /// The node states as last fetched (`MetaOp::NodeStates`), and their version: a refresh
    /// fetches the nodes only when the version changed, and applies the states every time.
    node_states: parking_lot::Mutex<(u64, Vec<(NodeId, wire::NodeState)>)>,
    /// Told of every directory change a namespace call of this client made.
    dir_observer: std::sync::OnceLock<DirObserver>,
    /// Reads whose access times are still to be recorded (`atime.rs`).
    atimes: parking_lot::Mutex<atime::Pending>,
}

type DirObserver = Box<dyn Fn(&DirChange) + Send + Sync>;

/// A directory change made by one of this client's namespace calls, with the directory's
/// attributes after it (the metadata service's post-operation attributes): what a cache of
/// directory attributes needs to stay exact for this client's own changes. See
/// [`Client::observe_dir_changes`].
#[derive(Clone, Debug)]
pub struct DirChange {
    /// The directory's attributes after the change.
    pub dir: Attr,
    /// The inode whose entry was removed (unlink, rmdir), if one was.
    pub removed: Option<Ino>,
}

/// A storage node as the client sees it: how to reach it and whether it failed lately.
pub(crate) struct NodeHandle {
    pub(crate) peer: Peer,
    /// When the node last failed to answer; reads avoid it for `node_retry_after`.
    pub(crate) failed_at: parking_lot::Mutex<Option<Instant>>,
    /// When the node last refused a shard for lack of space; writes avoid it for
    /// [`NODE_FULL_RETRY_AFTER`].
    pub(crate) full_at: parking_lot::Mutex<Option<Instant>>,
}

/// How long writers keep off a storage node that said it is full.
pub const NODE_FULL_RETRY_AFTER: Duration = Duration::from_secs(10);

impl NodeHandle {
    fn new(addr: String, options: &ClientOptions) -> NodeHandle {
        NodeHandle {
            peer: Peer::on(options.net.clone(), addr, Service::Storage, options.tls.clone()),
            failed_at: parking_lot::Mutex::new(None),
            full_at: parking_lot::Mutex::new(None),
        }
    }

    pub(crate) fn recently_failed(&self, retry_after: Duration) -> bool {
        matches!(*self.failed_at.lock(), Some(t) if t.elapsed() < retry_after)
    }

    fn recently_full(&self) -> bool {
        matches!(*self.full_at.lock(), Some(t) if t.elapsed() < NODE_FULL_RETRY_AFTER)
    }
}

/// Converts a transport error into the client's error, keeping remote codes.
pub fn rpc_error(e: RpcError) -> Error {
    match e {
        RpcError::Remote(w) => w,
        RpcError::Version { .. } => WireError::new(ErrorCode::VersionMismatch, e.to_string()),
        RpcError::Protocol { .. } => WireError::new(ErrorCode::Internal, e.to_string()),
        other => WireError::new(ErrorCode::Unavailable, other.to_string()),
    }
}

/// The error for a reply of the wrong kind.
pub fn unexpected(reply: &MetaReply) -> Error {
    WireError::new(ErrorCode::Internal, format!("unexpected reply from the metadata service: {reply:?}"))
}

impl Client {
    /// Connects to the metadata service at `meta_addr` ("host:port"; with several metadata
    /// servers, all of them, comma-separated: calls fail over between them).
    pub async fn connect(meta_addr: &str) -> Result<Client> {
        Self::connect_with(meta_addr, ClientOptions::default()).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(meta_addr: &str, options: ClientOptions) -> Result<Client> {
        let metas: Vec<Peer> = meta_addr
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| Peer::on(options.net.clone(), a, Service::Meta, options.tls.clone()))
            .collect();
        if metas.is_empty() {
            return Err(WireError::new(ErrorCode::Invalid, format!("no metadata service address in {meta_addr:?}")));
        }
        // The first server that answers; the others are tried when it fails.
        let mut first_ok = None;
        let mut errors = Vec::new();
        for (i, peer) in metas.iter().enumerate() {
            match peer.connection().await {
                Ok(_) => {
                    first_ok = Some(i);
                    break;
                }
                Err(e) => errors.push(e),
            }
        }
        let Some(current) = first_ok else {
            let e = errors
                .pop()
                .map(rpc_error)
                .unwrap_or_else(|| WireError::new(ErrorCode::Unavailable, "no metadata service"));
            return Err(e);
        };
        let disk_cache = match &options.disk_cache {
            Some(o) => {
                let cluster = metas[current].cluster().unwrap_or_default().to_string();
                // Opening makes directories and may wait a moment for the lock: off the
                // async threads.
                let opts = o.clone();
                let opened = tokio::task::spawn_blocking(move || disk_cache::DiskCache::open(&opts, &cluster))
                    .await
                    .map_err(|e| WireError::new(ErrorCode::Internal, format!("opening the disk cache: {e}")))?;
                match opened {
                    Ok(c) => Some(c),
                    Err(e) if o.required => return Err(WireError::new(ErrorCode::Invalid, e.to_string())),
                    Err(e) => {
                        tracing::warn!("{e}; going on with the memory cache alone");
                        None
                    }
                }
            }
            None => None,
        };
        let client = Client {
            inner: Arc::new(Inner {
                chunk_cache: chunk_cache::ChunkCache::new(options.cache_bytes_max),
                disk_cache,
                options,
                metas,
                meta_current: std::sync::atomic::AtomicUsize::new(current),
                client_id: wire::world::random::<u64>() | 1,
                next_seq: AtomicU64::new(1),
                nodes: RwLock::new(HashMap::new()),
                maps: RwLock::new(HashMap::new()),
                last_node_refresh: parking_lot::Mutex::new(None),
                node_states: parking_lot::Mutex::new((0, Vec::new())),
                dir_observer: std::sync::OnceLock::new(),
                atimes: parking_lot::Mutex::new(atime::Pending::default()),
            }),
        };
        client.refresh_nodes().await?;
        Ok(client)
    }

    /// The client's options.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Bytes of whole chunks this client keeps cached now (at most
    /// `ClientOptions::cache_bytes_max`).
    pub fn cached_bytes(&self) -> u64 {
        self.inner.chunk_cache.used_bytes()
    }

    /// How the client's chunk cache has done since it connected.
    pub fn chunk_cache_stats(&self) -> ChunkCacheStats {
        self.inner.chunk_cache.stats()
    }

    /// How the client's disk cache has done since it connected; `None` without one.
    pub fn disk_cache_stats(&self) -> Option<DiskCacheStats> {
        self.inner.disk_cache.as_ref().map(disk_cache::DiskCache::stats)
    }

    /// The directory of the client's disk cache (the cluster's, below the configured one);
    /// `None` without one.
    pub fn disk_cache_dir(&self) -> Option<&std::path::Path> {
        self.inner.disk_cache.as_ref().map(disk_cache::DiskCache::root)
    }

    /// Sends one metadata operation. Mutations get a request id, so retrying after a lost
    /// connection cannot apply them twice; the call is retried until `meta_deadline`.
    pub async fn meta(&self, op: MetaOp) -> Result<MetaReply> {
        tracing::trace!(target: "trove::meta_call", "{}", OpName(&op));
        let request_id = if is_mutation(&op) {
            (u128::from(self.inner.client_id) << 64) | u128::from(self.inner.next_seq.fetch_add(1, Ordering::Relaxed))
        } else {
            0
        };
        let op_slot = metered::META_FIRST + op.index();
        let metered_start = metered::table().start();
        let call = MetaCall { request_id, op };
        let started = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            let current = self.inner.meta_current.load(Ordering::Relaxed) % self.inner.metas.len();
            let peer = &self.inner.metas[current];
            match peer.call::<MetaCall, MetaReply>(&call, bytes::Bytes::new(), Duration::from_secs(30)).await {
                Ok((reply, _)) => {
                    self.report_dir_change(&reply);
                    metered::done(op_slot, metered_start, true, 0, 0);
                    return Ok(reply);
                }
                Err(e)
                    if (e.is_unreachable()
                        || matches!(&e, RpcError::Remote(w) if w.code == ErrorCode::MaybeCommitted))
                        && started.elapsed() < self.inner.options.meta_deadline =>
                {
                    // Same request id: a mutation that did apply is answered from its record.
                    let next = (current + 1) % self.inner.metas.len();
                    let _ =
                        self.inner.meta_current.compare_exchange(current, next, Ordering::Relaxed, Ordering::Relaxed);
                    tracing::debug!(
                        "metadata call to {} failed, retrying on {}: {e}",
                        peer.addr(),
                        self.inner.metas[next].addr()
                    );
                    if next == 0 || self.inner.metas.len() == 1 {
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_millis(500));
                    }
                }
                Err(RpcError::Remote(w))
                    if w.code == ErrorCode::Conflict && started.elapsed() < self.inner.options.meta_deadline =>
                {
                    tokio::time::sleep(delay).await;
                }
                Err(e) => {
                    metered::done(op_slot, metered_start, false, 0, 0);
                    return Err(rpc_error(e));
                }
            }
        }
    }

    /// Calls `observer` with every directory change this client (and its clones) makes from now
    /// on, before the call that made it returns. Renames are not reported (they answer no
    /// attributes): a cache must drop what they may have changed itself. Set once; later calls
    /// are ignored and return false.
    pub fn observe_dir_changes(&self, observer: impl Fn(&DirChange) + Send + Sync + 'static) -> bool {
        self.inner.dir_observer.set(Box::new(observer)).is_ok()
    }

    fn report_dir_change(&self, reply: &MetaReply) {
        let Some(observer) = self.inner.dir_observer.get() else { return };
        match reply {
            MetaReply::Entry { dir, .. } => observer(&DirChange { dir: dir.clone(), removed: None }),
            MetaReply::Removed { ino, dir } => observer(&DirChange { dir: dir.clone(), removed: Some(*ino) }),
            _ => {}
        }
    }

    async fn meta_attr(&self, op: MetaOp) -> Result<Attr> {
        match self.meta(op).await? {
            MetaReply::Attr(a) | MetaReply::Entry { attr: a, .. } => Ok(a),
            other => Err(unexpected(&other)),
        }
    }

    async fn meta_ok(&self, op: MetaOp) -> Result<()> {
        match self.meta(op).await? {
            MetaReply::Ok | MetaReply::Attr(_) | MetaReply::Removed { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Resolves a slash-separated path ("/a/b", "a/b" and "" = root).
    pub async fn resolve(&self, path: &str) -> Result<Attr> {
        self.meta_attr(MetaOp::Resolve { path: path.to_string() }).await
    }

    pub async fn lookup(&self, parent: Ino, name: &str) -> Result<Attr> {
        self.meta_attr(MetaOp::Lookup { parent, name: name.to_string() }).await
    }

    pub async fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.meta_attr(MetaOp::GetAttr { ino }).await
    }

    pub async fn setattr(&self, ino: Ino, set: SetAttr) -> Result<Attr> {
        self.meta_attr(MetaOp::SetAttr { ino, set }).await
    }

    /// Creates a regular file (or, with `exclusive == false`, returns the existing one).
    pub async fn create(&self, parent: Ino, name: &str, mode: u32, exclusive: bool) -> Result<Attr> {
        let (uid, gid) = ids();
        self.meta_attr(MetaOp::Create { parent, name: name.to_string(), mode, uid, gid, exclusive }).await
    }

    pub async fn mkdir(&self, parent: Ino, name: &str, mode: u32) -> Result<Attr> {
        let (uid, gid) = ids();
        self.meta_attr(MetaOp::Mkdir { parent, name: name.to_string(), mode, uid, gid }).await
    }

    /// Resolves `path` checking POSIX permissions as `caller`: search on every directory on
    /// the way and `want` on what it names (`PermissionDenied` names where it failed).
    pub async fn resolve_as(
        &self,
        path: &str,
        caller: &wire::identity::Caller,
        want: wire::identity::Access,
    ) -> Result<Attr> {
        self.meta_attr(MetaOp::ResolveAs { path: path.to_string(), caller: caller.clone(), want: want.bits() }).await
    }

    /// Changes the cluster's tenants, users or S3 keys (needs the admin credential).
    pub async fn change_identity(&self, change: wire::identity::IdentityChange) -> Result<wire::identity::Identities> {
        match self.meta(MetaOp::ChangeIdentity { change }).await? {
            MetaReply::Identities(i) => Ok(i),
            other => Err(unexpected(&other)),
        }
    }

    /// The cluster's tenants, users and S3 keys (without secrets).
    pub async fn identities(&self) -> Result<wire::identity::Identities> {
        match self.meta(MetaOp::ListIdentities).await? {
            MetaReply::Identities(i) => Ok(i),
            other => Err(unexpected(&other)),
        }
    }

    /// An S3 access key's secret and whom it acts as (`None`: no such key); refused to client
    /// credentials.
    pub async fn lookup_s3_key(&self, access_key: &str) -> Result<Option<wire::identity::S3KeyGrant>> {
        match self.meta(MetaOp::LookupS3Key { access_key: access_key.to_string() }).await? {
            MetaReply::S3Key(k) => Ok(k.map(|k| *k)),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn symlink(&self, parent: Ino, name: &str, target: &str) -> Result<Attr> {
        let (uid, gid) = ids();
        self.meta_attr(MetaOp::Symlink { parent, name: name.to_string(), target: target.to_string(), uid, gid }).await
    }

    pub async fn readlink(&self, ino: Ino) -> Result<String> {
        match self.meta(MetaOp::ReadLink { ino }).await? {
            MetaReply::Target(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn link(&self, ino: Ino, new_parent: Ino, new_name: &str) -> Result<Attr> {
        self.meta_attr(MetaOp::Link { ino, new_parent, new_name: new_name.to_string() }).await
    }

    pub async fn unlink(&self, parent: Ino, name: &str) -> Result<()> {
        self.meta_ok(MetaOp::Unlink { parent, name: name.to_string() }).await
    }

    pub async fn rmdir(&self, parent: Ino, name: &str) -> Result<()> {
        self.meta_ok(MetaOp::Rmdir { parent, name: name.to_string() }).await
    }

    pub async fn rename(&self, parent: Ino, name: &str, new_parent: Ino, new_name: &str) -> Result<()> {
        self.meta_ok(MetaOp::Rename {
            parent,
            name: name.to_string(),
            new_parent,
            new_name: new_name.to_string(),
            mode: wire::RenameMode::Replace,
        })
        .await
    }

    /// One page of a directory listing: entries after `after`, and whether more follow.
    ///
    /// Files being written under a temporary name ([`is_tmp_name`]) are left out, so no front
    /// end (the mount, NFS, S3, the CLI) ever lists a write in progress; they stay reachable by
    /// their exact name ([`Client::lookup`]). A page may therefore hold fewer than `limit`
    /// entries while more follow; it is empty only at the end of the directory. Callers
    /// continue after the last name returned, as without hiding.
    pub async fn readdir_page(&self, ino: Ino, after: &str, limit: u32) -> Result<(Vec<DirEntry>, bool)> {
        visible_page(after, |cursor| async move { self.readdir_page_with_tmp(ino, &cursor, limit).await }).await
    }

    /// One page of a directory listing including temporary names: for the few callers that
    /// manage writes in progress themselves (sweeping those a crashed writer left behind).
    pub async fn readdir_page_with_tmp(&self, ino: Ino, after: &str, limit: u32) -> Result<(Vec<DirEntry>, bool)> {
        match self.meta(MetaOp::ReadDir { ino, after: after.to_string(), limit }).await? {
            MetaReply::Entries { entries, more } => Ok((entries, more)),
            other => Err(unexpected(&other)),
        }
    }

    /// The whole directory listing, fetched page by page (without temporary names, like
    /// [`Client::readdir_page`]).
    pub async fn readdir(&self, ino: Ino) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        let mut after = String::new();
        loop {
            let (page, more) = self.readdir_page(ino, &after, 1024).await?;
            if let Some(last) = page.last() {
                after = last.name.clone();
            }
            let empty = page.is_empty();
            all.extend(page);
            if !more || empty {
                return Ok(all);
            }
        }
    }

    pub async fn statfs(&self) -> Result<StatFs> {
        match self.meta(MetaOp::StatFs).await? {
            MetaReply::StatFs(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Cluster status; `scan_chunks` also counts degraded chunks (walks every chunk record).
    pub async fn status(&self, scan_chunks: bool) -> Result<ClusterStatus> {
        match self.meta(MetaOp::Status { scan_chunks }).await? {
            MetaReply::Status(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets the erasure scheme and chunk size new files under directory `ino` inherit.
    /// The scheme is checked as `check` says (see [`wire::LayoutCheck`]).
    pub async fn set_layout(&self, ino: Ino, ec: EcScheme, chunk_bytes: u32, check: wire::LayoutCheck) -> Result<()> {
        self.meta_ok(MetaOp::SetLayout { ino, ec, chunk_bytes, check }).await
    }

    /// Puts directory `ino` (or an empty file) in pool `pool`, with the pool's default scheme;
    /// new files below a directory inherit both.
    pub async fn set_pool(&self, ino: Ino, pool: &str) -> Result<Attr> {
        self.meta_attr(MetaOp::SetPool { ino, pool: pool.to_string() }).await
    }

    /// A regular file's attributes and every chunk record it has, in index order (in pages of
    /// at most 1,024 records, one call each).
    pub async fn chunk_records(&self, ino: Ino) -> Result<(Attr, Vec<wire::ChunkRecord>)> {
        const PAGE: u64 = 1024;
        let mut records = Vec::new();
        let mut first = 0u64;
        loop {
            let (attr, chunks) = match self.meta(MetaOp::GetChunks { ino, first, count: PAGE }).await? {
                MetaReply::Chunks { attr, chunks } => (attr, chunks),
                other => return Err(unexpected(&other)),
            };
            records.extend(chunks);
            first += PAGE;
            let indices = attr.size.div_ceil(u64::from(attr.chunk_bytes.max(1)));
            if first >= indices {
                return Ok((attr, records));
            }
        }
    }

    /// Sets (or with `None` removes) the quota of directory `ino`; answered with the quota as
    /// set, with its usage.
    pub async fn set_quota(&self, ino: Ino, limits: Option<wire::QuotaLimits>) -> Result<Option<wire::QuotaInfo>> {
        match self.meta(MetaOp::SetQuota { ino, limits }).await? {
            MetaReply::Quotas(mut q) => Ok(q.pop()),
            other => Err(unexpected(&other)),
        }
    }

    /// The quota of directory `ino`, or with `nearest` the quota of the nearest directory at
    /// or above it that has one.
    pub async fn quota(&self, ino: Ino, nearest: bool) -> Result<Option<wire::QuotaInfo>> {
        match self.meta(MetaOp::GetQuota { ino, nearest }).await? {
            MetaReply::Quotas(mut q) => Ok(q.pop()),
            other => Err(unexpected(&other)),
        }
    }

    /// Every quota of the cluster.
    pub async fn quotas(&self) -> Result<Vec<wire::QuotaInfo>> {
        match self.meta(MetaOp::ListQuotas).await? {
            MetaReply::Quotas(q) => Ok(q),
            other => Err(unexpected(&other)),
        }
    }

    /// Takes snapshot `name` of directory `root` (O(1), atomic), locked (WORM) until
    /// `retain_until_ms` (wall clock; 0: not locked).
    pub async fn snapshot_create(&self, root: Ino, name: &str, retain_until_ms: u64) -> Result<wire::SnapshotInfo> {
        match self.meta(MetaOp::SnapshotCreate { root, name: name.to_string(), retain_until_ms }).await? {
            MetaReply::Snapshots(mut s) if !s.is_empty() => Ok(s.remove(0)),
            other => Err(unexpected(&other)),
        }
    }

    /// The snapshots of directory `root` (of every directory for `None`).
    pub async fn snapshots(&self, root: Option<Ino>) -> Result<Vec<wire::SnapshotInfo>> {
        match self.meta(MetaOp::SnapshotList { root }).await? {
            MetaReply::Snapshots(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Locks snapshot `name` of `root` (WORM) until `until_ms`; a date before its current one is
    /// refused.
    pub async fn snapshot_retain(&self, root: Ino, name: &str, until_ms: u64) -> Result<wire::SnapshotInfo> {
        match self.meta(MetaOp::SnapshotRetain { root, name: name.to_string(), until_ms }).await? {
            MetaReply::Snapshots(mut s) if !s.is_empty() => Ok(s.remove(0)),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes snapshot `name` of `root` (refused while it is retained).
    pub async fn snapshot_delete(&self, root: Ino, name: &str) -> Result<wire::SnapshotInfo> {
        match self.meta(MetaOp::SnapshotDelete { root, name: name.to_string() }).await? {
            MetaReply::Snapshots(mut s) if !s.is_empty() => Ok(s.remove(0)),
            other => Err(unexpected(&other)),
        }
    }

    /// Paths added, removed or changed under `root` from snapshot `a` to snapshot `b` (`None`:
    /// the live tree), and whether the list was cut at its limit.
    pub async fn snapshot_diff(
        &self,
        root: Ino,
        a: &str,
        b: Option<&str>,
    ) -> Result<(Vec<wire::SnapshotChange>, bool)> {
        match self.meta(MetaOp::SnapshotDiff { root, a: a.to_string(), b: b.map(str::to_string) }).await? {
            MetaReply::SnapshotDiff { changes, cut } => Ok((changes, cut)),
            other => Err(unexpected(&other)),
        }
    }

    /// Brings `path` (relative to `root`; empty: the whole tree) back from snapshot `name`;
    /// answers (files restored, directories made, entries skipped).
    pub async fn snapshot_restore(&self, root: Ino, name: &str, path: &str) -> Result<(u64, u64, u64)> {
        match self.meta(MetaOp::SnapshotRestore { root, name: name.to_string(), path: path.to_string() }).await? {
            MetaReply::Restored { files, dirs, skipped } => Ok((files, dirs, skipped)),
            other => Err(unexpected(&other)),
        }
    }

    /// Makes `name` in `parent` a clone of regular file `src` (a live file or a file of a
    /// snapshot): the same contents sharing every chunk, no byte copied.
    pub async fn clone_file(&self, src: Ino, parent: Ino, name: &str) -> Result<Attr> {
        self.meta_attr(MetaOp::CloneFile { src, parent, name: name.to_string() }).await
    }

    /// The files in the trash, oldest first.
    pub async fn trash(&self) -> Result<Vec<wire::TrashEntry>> {
        match self.meta(MetaOp::ListTrash).await? {
            MetaReply::Trash(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    /// Puts trashed file `id` back where it was deleted from, or at path `to`.
    pub async fn restore_trash(&self, id: &str, to: Option<&str>) -> Result<Attr> {
        self.meta_attr(MetaOp::RestoreTrash { id: id.to_string(), to: to.map(str::to_string) }).await
    }

    /// Deletes trashed file `id` for good, or (empty `id`) those deleted before `before_ms`
    /// (a call deletes at most a page of them: repeat while it returns some).
    pub async fn purge_trash(&self, id: &str, before_ms: u64) -> Result<Vec<wire::TrashEntry>> {
        match self.meta(MetaOp::PurgeTrash { id: id.to_string(), before_ms }).await? {
            MetaReply::Trash(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    /// The file pool policies, in order.
    pub async fn policies(&self) -> Result<Vec<wire::FilePolicy>> {
        match self.meta(MetaOp::ListPolicies).await? {
            MetaReply::Policies(policies) => Ok(policies),
            other => Err(unexpected(&other)),
        }
    }

    /// Every storage pool.
    pub async fn pools(&self) -> Result<Vec<wire::PoolInfo>> {
        match self.meta(MetaOp::ListPools).await? {
            MetaReply::Pools(pools) => Ok(pools),
            other => Err(unexpected(&other)),
        }
    }

    /// The placement map of `version` (0: the newest, asked for every time), for tools that
    /// show where chunks are.
    pub async fn placement_map(&self, version: u32) -> Result<Arc<PlacementMap>> {
        if version != 0 {
            return self.map(version).await;
        }
        match self.meta(MetaOp::GetMap { version: 0 }).await? {
            MetaReply::Map(map) => {
                self.remember_map(map.clone());
                Ok(Arc::new(map))
            }
            other => Err(unexpected(&other)),
        }
    }

    pub async fn setxattr(&self, ino: Ino, name: &str, value: &[u8], mode: wire::XattrMode) -> Result<()> {
        self.meta_ok(MetaOp::SetXattr { ino, name: name.to_string(), value: value.to_vec(), mode }).await
    }

    pub async fn getxattr(&self, ino: Ino, name: &str) -> Result<Vec<u8>> {
        match self.meta(MetaOp::GetXattr { ino, name: name.to_string() }).await? {
            MetaReply::Value(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn listxattr(&self, ino: Ino) -> Result<Vec<String>> {
        match self.meta(MetaOp::ListXattr { ino }).await? {
            MetaReply::Names(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn removexattr(&self, ino: Ino, name: &str) -> Result<()> {
        self.meta_ok(MetaOp::RemoveXattr { ino, name: name.to_string() }).await
    }

    /// Splits a path into its parent directory's inode and the final name.
    pub async fn parent_of<'p>(&self, path: &'p str) -> Result<(Ino, &'p str)> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() {
            return Err(WireError::new(ErrorCode::Invalid, format!("path {path:?} names no file")));
        }
        let parent = self.resolve(dir).await?;
        if parent.kind != FileKind::Dir {
            return Err(WireError::new(ErrorCode::NotDir, format!("{dir:?} is not a directory")));
        }
        Ok((parent.ino, name))
    }

    /// Creates a directory and any missing parents; existing directories are fine.
    pub async fn mkdir_p(&self, path: &str) -> Result<Attr> {
        let mut cur = self.getattr(ROOT_INO).await?;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            cur = match self.lookup(cur.ino, part).await {
                Ok(a) => a,
                Err(e) if e.code == ErrorCode::NotFound => match self.mkdir(cur.ino, part, 0o755).await {
                    Ok(a) => a,
                    Err(e) if e.code == ErrorCode::Exists => self.lookup(cur.ino, part).await?,
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            };
            if cur.kind != FileKind::Dir {
                return Err(WireError::new(ErrorCode::NotDir, format!("{part:?} in {path:?} is not a directory")));
            }
        }
        Ok(cur)
    }

    /// Opens a file by inode for reading and writing.
    pub async fn open(&self, ino: Ino) -> Result<FileHandle> {
        FileHandle::open(self.clone(), ino).await
    }

    /// Creates (or truncates) the file at `path` and returns a handle to write it.
    pub async fn create_path(&self, path: &str, mode: u32) -> Result<FileHandle> {
        let (parent, name) = self.parent_of(path).await?;
        let attr = self.create(parent, name, mode, false).await?;
        if attr.kind != FileKind::File {
            return Err(WireError::new(ErrorCode::IsDir, format!("{path:?} is not a regular file")));
        }
        let mut handle = self.open(attr.ino).await?;
        if attr.size != 0 {
            handle.truncate(0).await?;
        }
        Ok(handle)
    }

    /// Opens the existing file at `path`.
    pub async fn open_path(&self, path: &str) -> Result<FileHandle> {
        let attr = self.resolve(path).await?;
        match attr.kind {
            FileKind::File => self.open(attr.ino).await,
            FileKind::Dir => Err(WireError::new(ErrorCode::IsDir, format!("{path:?} is a directory"))),
            _ => Err(WireError::new(ErrorCode::Invalid, format!("{path:?} is not a regular file"))),
        }
    }

    /// Reads a whole file into memory.
    pub async fn read_file(&self, path: &str) -> Result<bytes::Bytes> {
        let mut h = self.open_path(path).await?;
        let size = h.size();
        h.read_at(0, size as usize).await
    }

    /// Writes a whole file (creating or replacing its contents) and makes it durable.
    pub async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let mut h = self.create_path(path, 0o644).await?;
        h.write_at(0, data).await?;
        h.close().await
    }

    /// Writes a whole file under a temporary name in its directory and renames it over `path`,
    /// so readers see the old file or the new one whole, never a part; with `mtime`, the file
    /// carries that modification time (set before the rename). A failed write leaves nothing.
    pub async fn write_file_atomic(&self, path: &str, data: &[u8], mtime: Option<wire::Timestamp>) -> Result<()> {
        let (parent, name) = self.parent_of(path).await?;
        let tmp = tmp_name();
        let attr = self.create(parent, &tmp, 0o644, true).await?;
        let written = async {
            let mut h = self.open(attr.ino).await?;
            h.write_at(0, data).await?;
            h.close().await?;
            if let Some(mtime) = mtime {
                self.setattr(attr.ino, SetAttr { mtime: Some(mtime), ..SetAttr::default() }).await?;
            }
            self.rename(parent, &tmp, parent, name).await
        }
        .await;
        if written.is_err() {
            let _ = self.unlink(parent, &tmp).await;
        }
        written
    }

    /// Reloads the storage node list from the metadata service.
    pub async fn refresh_nodes(&self) -> Result<()> {
        self.refresh_nodes_with(false).await
    }

    /// Like [`Client::refresh_nodes`], also forgetting recent failures of the nodes the cluster
    /// manager sees up (for a retry after an operation failed: a node that restarted answers).
    pub(crate) async fn refresh_nodes_forgiving(&self) -> Result<()> {
        self.refresh_nodes_with(true).await
    }

    /// Asks the metadata service for the node states, sending the version this client holds:
    /// the nodes come back only when it changed (a cheap call otherwise, answered from memory).
    /// The states, new or not, are then applied as every refresh applies them.
    async fn refresh_nodes_with(&self, forgive_up: bool) -> Result<()> {
        let known = self.inner.node_states.lock().0;
        let (version, fetched) = match self.meta(MetaOp::NodeStates { known }).await? {
            MetaReply::NodeStates { version, nodes } => (version, nodes),
            other => return Err(unexpected(&other)),
        };
        let states: Vec<(NodeId, wire::NodeState)> = {
            let mut held = self.inner.node_states.lock();
            if version != known {
                held.0 = version;
                held.1 = fetched.iter().map(|n| (n.id, n.state)).collect();
            }
            held.1.clone()
        };
        let mut nodes = self.inner.nodes.write();
        for n in &fetched {
            let stale = nodes.get(&n.id).map(|h| h.peer.addr() != n.addr).unwrap_or(true);
            if stale {
                nodes.insert(n.id, Arc::new(NodeHandle::new(n.addr.clone(), &self.inner.options)));
            }
        }
        for (id, state) in states {
            // Nodes the cluster manager sees as down are routed around like nodes that just
            // failed to answer: a read does not first wait for a connection to time out.
            if let Some(h) = nodes.get(&id) {
                match state {
                    wire::NodeState::Down | wire::NodeState::Out => *h.failed_at.lock() = Some(Instant::now()),
                    wire::NodeState::Up | wire::NodeState::Draining if forgive_up => *h.failed_at.lock() = None,
                    _ => {}
                }
            }
        }
        *self.inner.last_node_refresh.lock() = Some(Instant::now());
        Ok(())
    }

    /// Refreshes node states in the background when the last refresh is older than
    /// [`NODE_REFRESH_INTERVAL`]; never waits.
    pub(crate) fn maybe_refresh_nodes(&self) {
        {
            let mut last = self.inner.last_node_refresh.lock();
            if last.is_some_and(|t| t.elapsed() < NODE_REFRESH_INTERVAL) {
                return;
            }
            // Claimed now, so concurrent callers do not all start a refresh.
            *last = Some(Instant::now());
        }
        let client = self.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = client.refresh_nodes().await {
                    tracing::debug!("refreshing node states failed: {e}");
                }
            });
        }
    }

    /// Storage nodes a writer should keep off now: they failed to answer moments ago, or said
    /// they are full. Allocations avoid them.
    pub(crate) fn nodes_to_avoid(&self) -> Vec<NodeId> {
        let retry_after = self.inner.options.node_retry_after;
        let mut avoid: Vec<NodeId> = self
            .inner
            .nodes
            .read()
            .iter()
            .filter(|(_, h)| h.recently_failed(retry_after) || h.recently_full())
            .map(|(id, _)| *id)
            .collect();
        // In node order, not the map's: the list reaches the metadata service and its errors.
        avoid.sort_unstable();
        avoid
    }

    /// The handle of a storage node, refreshing the node list once if it is unknown.
    pub(crate) async fn node(&self, id: NodeId) -> Result<Arc<NodeHandle>> {
        if let Some(h) = self.inner.nodes.read().get(&id) {
            return Ok(h.clone());
        }
        self.refresh_nodes().await?;
        self.inner.nodes.read().get(&id).cloned().ok_or_else(|| {
            WireError::new(ErrorCode::NotFound, format!("storage node {id} is not known to the cluster"))
        })
    }

    /// A placement map version (cached forever: versions are immutable).
    pub async fn map(&self, version: u32) -> Result<Arc<PlacementMap>> {
        if let Some(m) = self.inner.maps.read().get(&version) {
            return Ok(m.clone());
        }
        let map = match self.meta(MetaOp::GetMap { version }).await? {
            MetaReply::Map(m) => Arc::new(m),
            other => return Err(unexpected(&other)),
        };
        self.inner.maps.write().insert(version, map.clone());
        Ok(map)
    }

    pub(crate) fn remember_map(&self, map: PlacementMap) {
        self.inner.maps.write().entry(map.version).or_insert_with(|| Arc::new(map));
    }
}

fn is_mutation(op: &MetaOp) -> bool {
    !matches!(
        op,
        MetaOp::Lookup { .. }
            | MetaOp::LookupChunks { .. }
            | MetaOp::Resolve { .. }
            | MetaOp::GetAttr { .. }
            | MetaOp::ReadLink { .. }
            | MetaOp::ReadDir { .. }
            | MetaOp::GetXattr { .. }
            | MetaOp::ListXattr { .. }
            | MetaOp::StatFs
            | MetaOp::GetChunks { .. }
            | MetaOp::GetMap { .. }
            | MetaOp::Status { .. }
            | MetaOp::ScanChunks { .. }
            | MetaOp::NodeStates { .. }
            | MetaOp::ListPools
            | MetaOp::ListPolicies
            | MetaOp::ListIngestRules
            | MetaOp::ListIdentities
            | MetaOp::LookupS3Key { .. }
            | MetaOp::ResolveAs { .. }
            | MetaOp::Announce { .. }
            | MetaOp::Processes
            | MetaOp::Events { .. }
            | MetaOp::SnapshotList { .. }
            | MetaOp::SnapshotDiff { .. }
    )
}

/// A page of the listing `fetch` reads (entries after a name, and whether more follow) with
/// temporary names left out: see [`Client::readdir_page`].
async fn visible_page<F, Fut>(after: &str, mut fetch: F) -> Result<(Vec<DirEntry>, bool)>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<DirEntry>, bool)>>,
{
    let mut cursor = after.to_string();
    loop {
        let (entries, more) = fetch(cursor).await?;
        let last = entries.last().map(|e| e.name.clone());
        let visible: Vec<DirEntry> = entries.into_iter().filter(|e| !is_tmp_name(&e.name)).collect();
        match last {
            // Every entry of this page was hidden: an empty page would read as the end of the
            // directory, so read on from where the service stopped.
            Some(last) if visible.is_empty() && more => cursor = last,
            _ => return Ok((visible, more)),
        }
    }
}

/// The uid and gid new files get when created through the library directly.
fn ids() -> (u32, u32) {
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_are_the_variant_names() {
        let lookup = MetaOp::Lookup { parent: 1, name: "a b{c".into() };
        assert_eq!(OpName(&lookup).to_string(), "Lookup");
        assert_eq!(OpName(&MetaOp::StatFs).to_string(), "StatFs");
    }

    /// Pages through `names` (sorted) the way the metadata service does, `limit` per page,
    /// through [`visible_page`], as a caller continuing after the last name returned does.
    fn list_visible(names: &[&str], limit: usize) -> (Vec<String>, usize) {
        let dir: Vec<DirEntry> = names
            .iter()
            .enumerate()
            .map(|(i, n)| DirEntry {
                name: n.to_string(),
                attr: Attr {
                    ino: i as u64 + 2,
                    kind: FileKind::File,
                    mode: 0o644,
                    uid: 0,
                    gid: 0,
                    size: 0,
                    nlink: 1,
                    rdev: 0,
                    atime: wire::Timestamp::default(),
                    mtime: wire::Timestamp::default(),
                    ctime: wire::Timestamp::default(),
                    crtime: wire::Timestamp::default(),
                    data_version: 0,
                    ec: EcScheme { k: 1, m: 0 },
                    chunk_bytes: 1 << 20,
                    pool: wire::DEFAULT_POOL,
                },
            })
            .collect();
        let calls = std::cell::Cell::new(0usize);
        let fetch = |after: String| {
            calls.set(calls.get() + 1);
            let rest: Vec<DirEntry> = dir.iter().filter(|e| e.name > after).cloned().collect();
            let more = rest.len() > limit;
            async move { Ok((rest.into_iter().take(limit).collect::<Vec<_>>(), more)) }
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let mut seen = Vec::new();
        let mut after = String::new();
        rt.block_on(async {
            loop {
                let (page, more) = visible_page(&after, &fetch).await.expect("listing");
                if let Some(last) = page.last() {
                    after = last.name.clone();
                }
                let empty = page.is_empty();
                seen.extend(page.into_iter().map(|e| e.name));
                assert!(!empty || !more, "an empty page must be the end");
                if !more {
                    break;
                }
            }
        });
        (seen, calls.get())
    }

    #[test]
    fn listings_hide_temporary_names_without_ending_early() {
        let t = |n: u32| format!("{TMP_PREFIX}{n:04}");
        let tmp: Vec<String> = (0..10).map(t).collect();
        // Temporary names sort first ('.'), so whole pages of them come before real names.
        let mut names: Vec<&str> = tmp.iter().map(String::as_str).collect();
        names.extend(["a", "b", "c"]);
        names.sort();
        for limit in 1..=4 {
            assert_eq!(list_visible(&names, limit).0, ["a", "b", "c"], "limit {limit}");
        }
        // Hidden names at the end: the listing still ends, with `more` false.
        let tail = [".a", ".b", &tmp[0], &tmp[1], &tmp[2]];
        assert_eq!(list_visible(&tail, 2).0, [".a", ".b"]);
        // Only hidden names: an empty listing.
        let only: Vec<&str> = tmp.iter().map(String::as_str).collect();
        let (seen, calls) = list_visible(&only, 3);
        assert!(seen.is_empty());
        assert_eq!(calls, 4, "10 hidden names in pages of 3 take 4 reads");
        assert!(is_tmp_name(&tmp_name()) && !is_tmp_name(".trove-tm"));
    }
}
