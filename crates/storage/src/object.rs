//! The object backend: a storage node whose shards live in an S3-compatible bucket instead of
//! on drives (a node of an object pool, `[object]` in its configuration).
//!
//! Everything above the storage service stays as it is: the client writes and reads shards
//! through the storage protocol, and the node stores each shard as one object in exactly the
//! shard file format of [`crate::format`] (header, block crc table, data), so every block is
//! verified on every read here and again by the client against the chunk record: the checksums
//! stay end to end whatever the bucket does. This module owns the mapping of shards to objects:
//!
//! ```text
//! <prefix>node.uuid                        the node's identity, 32 hex digits + newline
//! <prefix>shards/<cccccccccccccccc>.<i>    one object per shard, named as shard files are
//! ```
//!
//! Crash safety is the S3 way: a PUT is atomic (an object appears whole or not at all), so no
//! temp objects are needed, and nothing is acknowledged before the store answered the PUT.
//! Deletes are idempotent (S3 deletes of missing objects succeed). Reads of part of a shard are
//! ranged GETs: the header and table (whose size the object's size gives) and the blocks asked
//! for, in one request when they are near the start, else two at once; a header and table
//! verified once are kept (bounded, [`HEADERS_KEPT_MAX`]) so later ranged reads of the shard
//! cost one GET of the blocks, which are verified every time.
//!
//! In memory the backend keeps the ordered index of its shards and their object sizes, built by
//! listing the prefix at open (as the drive store scans its drives): `ListShards` for GC and
//! scrub, and the shard count and bytes for `Stat`, need no request. One node per prefix: two
//! nodes on one prefix would not see each other's puts.
//!
//! Capacity: an object store has no fixed size. The node reports `capacity_bytes` (a quota,
//! default [`CAPACITY_BYTES_DEFAULT`], 1 PiB) as its total and that minus the bytes of the
//! objects it holds as free, and refuses puts beyond it with `NoSpace`, so capacity alerts and
//! `trove status` mean "the quota is nearly used".
//!
//! Credentials: the secret key is read from a file or an environment variable at open and
//! handed to the S3 client only; it is never part of the configuration, of an error, of a log
//! line or of anything sent to the metadata service (which learns the endpoint, bucket and
//! prefix). The access key id is not logged either.

use crate::format::{self, FormatError, ShardHeader, FIXED_HEADER_BYTES};
use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wire::{werr, DriveInfo, ShardInfo, ShardKey, WireError};

/// Capacity a node of an object pool reports when its configuration sets none: 1 PiB.
pub const CAPACITY_BYTES_DEFAULT: u64 = 1 << 50;
/// Verified headers and block tables kept for ranged reads.
pub const HEADERS_KEPT_MAX: usize = 4096;
/// Requests to the object store in flight at once per node; more wait.
pub const REQUESTS_MAX: usize = 64;
/// Connecting to the endpoint may take this long before the attempt counts as failed.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// One request (a 64 MiB shard included) may take this long.
pub const REQUEST_TIMEOUT_MS: u64 = 120_000;
/// Failed requests (connection errors, 5xx) are retried this often, within
/// [`RETRY_TIMEOUT_MS`]; a refused request (403, 404) is not retried.
pub const RETRIES_MAX: usize = 3;
pub const RETRY_TIMEOUT_MS: u64 = 15_000;
/// Ranged reads that start within this many bytes of the data's start fetch the header and
/// the blocks in one request.
const ONE_REQUEST_GAP_BYTES: u64 = 1 << 20;
/// Per-key lock stripes serialising puts and deletes of the same key.
const STRIPES: usize = 256;
/// Name of the identity object under the prefix.
pub const NODE_UUID_OBJECT: &str = "node.uuid";

fn default_region() -> String {
    "us-east-1".to_string()
}

/// The `[object]` table of a storage node's configuration:
///
/// ```toml
/// [object]
/// endpoint = "https://s3.example.com"   # http:// only with allow_http = true
/// bucket = "trove-cold"
/// prefix = "node-a"                      # optional: objects go under node-a/
/// region = "garage"                      # optional, default us-east-1
/// access_key_id = "GK..."
/// secret_access_key_file = "/etc/trove/s3.secret"   # or secret_access_key_env = "VAR"
/// allow_http = false                     # optional
/// capacity_bytes = 100_000_000_000_000   # optional quota, default 1 PiB
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectConfig {
    /// The S3 endpoint's URL, `https://HOST[:PORT]` (path-style requests).
    pub endpoint: String,
    pub bucket: String,
    /// Where under the bucket this node's objects go ("" for the bucket's root); several nodes
    /// may share a bucket under different prefixes.
    #[serde(default)]
    pub prefix: String,
    #[serde(default = "default_region")]
    pub region: String,
    pub access_key_id: String,
    /// A file holding the secret access key (surrounding whitespace ignored).
    #[serde(default)]
    pub secret_access_key_file: Option<PathBuf>,
    /// An environment variable holding the secret access key.
    #[serde(default)]
    pub secret_access_key_env: Option<String>,
    /// Allow a plain `http://` endpoint (TLS otherwise).
    #[serde(default)]
    pub allow_http: bool,
    /// A PEM file of certificates trusted besides the system's roots: a private CA, or the
    /// endpoint's own self-signed certificate.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The quota this node reports and keeps to (default 1 PiB).
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
}

/// Never prints the access key id (nor, as it has none, the secret).
impl std::fmt::Debug for ObjectConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectConfig")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("access_key_id", &"<hidden>")
            .field("allow_http", &self.allow_http)
            .field("ca_file", &self.ca_file)
            .field("capacity_bytes", &self.capacity_bytes)
            .finish_non_exhaustive()
    }
}

/// Why an object backend cannot be opened or configured; each names the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectOpenError {
    #[error("[object]: {0}")]
    Config(String),
    #[error("[object]: the secret access key: {0}")]
    Secret(String),
    #[error("cannot reach the object store at {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    #[error("bucket {bucket:?} does not exist at {endpoint} (create it, or fix `bucket`)")]
    NoSuchBucket { endpoint: String, bucket: String },
    #[error("the object store at {endpoint} refused the credentials of [object] for bucket {bucket:?} ({reason})")]
    Credentials { endpoint: String, bucket: String, reason: String },
    #[error("the object store at {endpoint} failed {what}: {reason}")]
    Store { endpoint: String, what: String, reason: String },
}

impl ObjectConfig {
    /// Checks what serde cannot (no request is made).
    pub fn validate(&self) -> Result<(), ObjectOpenError> {
        let bad = |m: String| Err(ObjectOpenError::Config(m));
        let lower = self.endpoint.to_ascii_lowercase();
        if lower.starts_with("http://") {
            if !self.allow_http {
                return bad(format!(
                    "endpoint {:?} is plain http; use https, or set allow_http = true to send requests unencrypted",
                    self.endpoint
                ));
            }
        } else if !lower.starts_with("https://") {
            return bad(format!(
                "endpoint {:?} must be a URL starting with https:// (or http:// with allow_http = true)",
                self.endpoint
            ));
        }
        if self.bucket.is_empty()
            || self.bucket.len() > 63
            || !self.bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            return bad(format!(
                "bucket {:?} is not a valid bucket name (3 to 63 lower-case letters, digits, '-' and '.')",
                self.bucket
            ));
        }
        if (!self.prefix.is_empty() && ObjPath::parse(self.prefix.trim_end_matches('/')).is_err())
            || self.prefix.starts_with('/')
            || self.prefix.contains("//")
        {
            return bad(format!(
                "prefix {:?} must be path segments separated by '/', with no empty segment",
                self.prefix
            ));
        }
        if self.access_key_id.is_empty() {
            return bad("access_key_id is empty".into());
        }
        match (&self.secret_access_key_file, &self.secret_access_key_env) {
            (Some(_), Some(_)) => bad("give the secret in secret_access_key_file or secret_access_key_env, not both".into()),
            (None, None) => bad("no secret: set secret_access_key_file (a file holding it) or secret_access_key_env (a variable holding it)".into()),
            _ => Ok(()),
        }?;
        if self.capacity_bytes == Some(0) {
            return bad("capacity_bytes must be more than 0".into());
        }
        Ok(())
    }

    /// The prefix as a path segment string ("" or "a/b"), without slashes around it.
    fn prefix_trimmed(&self) -> &str {
        self.prefix.trim_matches('/')
    }

    /// The object path of `name` under the prefix.
    pub fn path(&self, name: &str) -> ObjPath {
        match self.prefix_trimmed() {
            "" => ObjPath::from(name),
            p => ObjPath::from(format!("{p}/{name}")),
        }
    }

    /// Where the node's objects are, for people: `s3://bucket/prefix/ at endpoint`.
    pub fn location(&self) -> String {
        let prefix = match self.prefix_trimmed() {
            "" => String::new(),
            p => format!("{p}/"),
        };
        format!("s3://{}/{prefix} at {}", self.bucket, self.endpoint)
    }

    /// What the metadata service is told about the store (never the credentials).
    pub fn target(&self) -> wire::ObjectTarget {
        wire::ObjectTarget {
            endpoint: self.endpoint.clone(),
            bucket: self.bucket.clone(),
            prefix: self.prefix_trimmed().to_string(),
        }
    }

    /// The certificates of `ca_file` (none when it is not set).
    fn read_ca(&self) -> Result<Vec<object_store::Certificate>, ObjectOpenError> {
        let Some(file) = &self.ca_file else {
            return Ok(Vec::new());
        };
        let bad = |why: String| ObjectOpenError::Config(format!("ca_file {}: {why}", file.display()));
        let pem = std::fs::read(file).map_err(|e| bad(format!("cannot read it: {e}")))?;
        let certs =
            object_store::Certificate::from_pem_bundle(&pem).map_err(|e| bad(format!("not PEM certificates: {e}")))?;
        if certs.is_empty() {
            return Err(bad("holds no PEM certificate".into()));
        }
        Ok(certs)
    }

    /// An S3 client for the configured store (validated, secret read, private CA trusted,
    /// bounded retries and timeouts). No request is made.
    pub fn client(&self) -> Result<AmazonS3, ObjectOpenError> {
        self.validate()?;
        let secret = self.read_secret()?;
        let mut options = ClientOptions::new()
            .with_allow_http(self.allow_http)
            .with_connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .with_timeout(Duration::from_millis(REQUEST_TIMEOUT_MS));
        for cert in self.read_ca()? {
            options = options.with_root_certificate(cert);
        }
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: RETRIES_MAX,
            retry_timeout: Duration::from_millis(RETRY_TIMEOUT_MS),
        };
        AmazonS3Builder::new()
            .with_endpoint(self.endpoint.trim_end_matches('/'))
            .with_bucket_name(&self.bucket)
            .with_region(&self.region)
            .with_access_key_id(&self.access_key_id)
            .with_secret_access_key(secret)
            .with_allow_http(self.allow_http)
            .with_virtual_hosted_style_request(false)
            .with_retry(retry)
            .with_client_options(options)
            .build()
            .map_err(|e| ObjectOpenError::Config(e.to_string()))
    }

    /// The error of a failed request to the store, by its cause: a missing bucket, refused
    /// credentials, an unreachable endpoint, or else what the store said.
    pub fn classify(&self, what: &str, e: &object_store::Error) -> ObjectOpenError {
        let text = error_text(e);
        let endpoint = self.endpoint.clone();
        let bucket = self.bucket.clone();
        if text.contains("NoSuchBucket") {
            return ObjectOpenError::NoSuchBucket { endpoint, bucket };
        }
        for code in ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden", "401 Unauthorized"]
        {
            if text.contains(code) {
                return ObjectOpenError::Credentials { endpoint, bucket, reason: code.to_string() };
            }
        }
        if matches!(e, object_store::Error::Generic { .. })
            && (text.contains("error sending request")
                || text.contains("connect")
                || text.contains("dns")
                || text.contains("timed out")
                || text.contains("operation timed out"))
        {
            return ObjectOpenError::Unreachable { endpoint, reason: self.reason(&text) };
        }
        ObjectOpenError::Store { endpoint, what: what.to_string(), reason: self.reason(&text) }
    }

    /// An error text as it may be shown: one line, bounded, and without the access key id (some
    /// stores quote it in their error bodies).
    pub fn reason(&self, text: &str) -> String {
        short_reason(text).replace(&self.access_key_id, "<access key id>")
    }

    fn read_secret(&self) -> Result<String, ObjectOpenError> {
        let secret = match (&self.secret_access_key_file, &self.secret_access_key_env) {
            (Some(file), _) => std::fs::read_to_string(file)
                .map_err(|e| ObjectOpenError::Secret(format!("cannot read {}: {e}", file.display())))?,
            (None, Some(var)) => {
                std::env::var(var).map_err(|e| ObjectOpenError::Secret(format!("environment variable {var}: {e}")))?
            }
            (None, None) => return Err(ObjectOpenError::Secret("none configured".into())),
        };
        let secret = secret.trim().to_string();
        if secret.is_empty() {
            return Err(ObjectOpenError::Secret("it is empty".into()));
        }
        Ok(secret)
    }
}

/// The shards of one storage node in an object store.
pub struct ObjectShards {
    config: ObjectConfig,
    s3: AmazonS3,
    /// Every shard and the size of its object.
    index: RwLock<BTreeMap<ShardKey, u64>>,
    /// Sum of the sizes in `index`.
    stored_bytes: AtomicU64,
    capacity_bytes: u64,
    /// Verified headers and block tables of shards read lately.
    headers: Mutex<HashMap<ShardKey, Arc<(ShardHeader, Vec<u32>)>>>,
    /// Puts and deletes of one key hold its stripe (check what exists, then write).
    stripes: Vec<tokio::sync::Mutex<()>>,
    requests: tokio::sync::Semaphore,
}

/// Whole blocks of a shard, not yet verified.
struct Blocks {
    header: ShardHeader,
    table: Vec<u32>,
    first: u32,
    start: u32,
    end: u32,
    data: Bytes,
}

impl ObjectShards {
    /// Connects to the store, checks the bucket and the credentials by listing the node's
    /// shards, and returns the backend with its index and the node's identity (read from
    /// `<prefix>node.uuid`, written there on the first start). Fails with the cause named
    /// (unreachable endpoint, missing bucket, refused credentials) instead of retrying forever.
    pub async fn open(config: &ObjectConfig) -> Result<(ObjectShards, u128), ObjectOpenError> {
        let s3 = config.client()?;
        let shards = ObjectShards {
            config: config.clone(),
            s3,
            index: RwLock::new(BTreeMap::new()),
            stored_bytes: AtomicU64::new(0),
            capacity_bytes: config.capacity_bytes.unwrap_or(CAPACITY_BYTES_DEFAULT),
            headers: Mutex::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            requests: tokio::sync::Semaphore::new(REQUESTS_MAX),
        };
        let prefix = config.path("shards");
        let mut listing = shards.s3.list(Some(&prefix));
        let mut index = BTreeMap::new();
        let mut bytes = 0u64;
        while let Some(item) = listing.next().await {
            let meta = item.map_err(|e| shards.open_error("listing the shards", &e))?;
            let Some(name) = meta.location.filename() else {
                continue;
            };
            match parse_object_name(name) {
                Some(key) => {
                    index.insert(key, meta.size);
                    bytes += meta.size;
                }
                None => tracing::warn!("{}: object {} is not a shard; ignored", config.location(), meta.location),
            }
        }
        let uuid = shards.load_or_create_uuid().await?;
        tracing::info!("object store open: {} shards ({bytes} bytes) in {}", index.len(), config.location());
        shards.stored_bytes.store(bytes, Ordering::Relaxed);
        *shards.index.write() = index;
        Ok((shards, uuid))
    }

    /// The error of a failed request at open, by its cause.
    fn open_error(&self, what: &str, e: &object_store::Error) -> ObjectOpenError {
        self.config.classify(what, e)
    }

    /// An error text as it may be shown (see [`ObjectConfig::reason`]).
    fn reason(&self, text: &str) -> String {
        self.config.reason(text)
    }

    async fn load_or_create_uuid(&self) -> Result<u128, ObjectOpenError> {
        let path = self.config.path(NODE_UUID_OBJECT);
        match self.s3.get(&path).await {
            Ok(got) => {
                let body = got.bytes().await.map_err(|e| self.open_error("reading node.uuid", &e))?;
                let text = String::from_utf8_lossy(&body);
                let text = text.trim();
                match u128::from_str_radix(text, 16) {
                    Ok(uuid) if uuid != 0 && text.len() == 32 => Ok(uuid),
                    _ => Err(ObjectOpenError::Store {
                        endpoint: self.config.endpoint.clone(),
                        what: format!("holding the node identity {path}"),
                        reason: format!("it does not hold a node uuid (32 hex digits): {text:?}"),
                    }),
                }
            }
            Err(object_store::Error::NotFound { .. }) => {
                let uuid = loop {
                    let u: u128 = rand::random();
                    if u != 0 {
                        break u;
                    }
                };
                self.s3
                    .put(&path, PutPayload::from(format!("{uuid:032x}\n")))
                    .await
                    .map_err(|e| self.open_error("writing node.uuid", &e))?;
                tracing::info!("new node identity {uuid:032x} written to {}{NODE_UUID_OBJECT}", self.config.location());
                Ok(uuid)
            }
            Err(e) => Err(self.open_error("reading node.uuid", &e)),
        }
    }

    /// The configuration the backend was opened with.
    pub fn config(&self) -> &ObjectConfig {
        &self.config
    }

    /// Number of shards stored.
    pub fn shard_count(&self) -> usize {
        self.index.read().len()
    }

    fn stripe(&self, key: ShardKey) -> &tokio::sync::Mutex<()> {
        let h = key.chunk.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(key.index);
        &self.stripes[(h % STRIPES as u64) as usize]
    }

    fn shard_path(&self, key: ShardKey) -> ObjPath {
        self.config.path(&format!("shards/{}", object_name(key)))
    }

    /// A failed request as the storage protocol reports it, naming the object.
    fn request_error(&self, what: &str, key: ShardKey, e: &object_store::Error) -> WireError {
        let text = error_text(e);
        let code = if matches!(e, object_store::Error::NotFound { .. }) {
            wire::ErrorCode::NotFound
        } else {
            wire::ErrorCode::Io
        };
        WireError {
            code,
            message: format!(
                "{what} {key}: object {} in {}: {}",
                self.shard_path(key),
                self.config.location(),
                self.reason(&text)
            ),
        }
    }

    /// Stores a shard as one object. `data` must match `info` (length and every block crc); a
    /// shard that already exists with the same header is accepted again (a retry, after its
    /// stored data is checked), with a different one refused with `Exists`, and a damaged one
    /// replaced (the PUT swaps it atomically).
    pub async fn put(&self, info: &ShardInfo, data: Bytes) -> Result<(), WireError> {
        let key = info.key;
        format::check_info(info).map_err(|e| werr!(Invalid, "put {key}: {e}"))?;
        if data.len() != info.len as usize {
            return Err(werr!(Invalid, "put {key}: {} data bytes sent, the header says {}", data.len(), info.len));
        }
        format::verify_blocks(&data, 0, &info.block_crcs)
            .map_err(|e| werr!(Corrupt, "put {key}: received data is damaged: {e}"))?;
        let _stripe = self.stripe(key).lock().await;
        let _permit = self.permit().await?;
        let existing = self.index.read().get(&key).copied();
        if let Some(size) = existing {
            match self.s3.get(&self.shard_path(key)).await {
                Ok(got) => {
                    let body = got.bytes().await.map_err(|e| self.request_error("put", key, &e))?;
                    match format::verify_file(&body, None).map(|(info, _)| info) {
                        Ok(stored) if stored.key != key => tracing::warn!(
                            "{key}: replacing damaged object: it holds {}",
                            stored.key
                        ),
                        Ok(stored)
                            if stored.ec == info.ec
                                && stored.len == info.len
                                && stored.block_crcs == info.block_crcs =>
                        {
                            return Ok(())
                        }
                        Ok(stored) => {
                            return Err(werr!(
                                Exists,
                                "{key} already exists with different content (stored: {} bytes {} table crc {:08x}; sent: {} bytes {} table crc {:08x}); shards are never overwritten",
                                stored.len,
                                stored.ec,
                                format::table_crc(&stored.block_crcs),
                                info.len,
                                info.ec,
                                format::table_crc(&info.block_crcs)
                            ))
                        }
                        Err(e) => {
                            tracing::warn!("{key}: replacing damaged object: {e}")
                        }
                    }
                }
                Err(object_store::Error::NotFound { .. }) => {
                    tracing::warn!("{key}: object vanished; writing it again")
                }
                Err(e) => return Err(self.request_error("put", key, &e)),
            }
            self.forget(key, size);
        }
        let header = Bytes::from(format::encode_header(info));
        let object_bytes = header.len() as u64 + data.len() as u64;
        let stored = self.stored_bytes.load(Ordering::Relaxed);
        if stored.saturating_add(object_bytes) > self.capacity_bytes {
            return Err(werr!(
                NoSpace,
                "put {key} ({object_bytes} bytes): {} holds {stored} bytes of its quota of {} (capacity_bytes)",
                self.config.location(),
                self.capacity_bytes
            ));
        }
        self.s3
            .put(&self.shard_path(key), PutPayload::from_iter([header, data]))
            .await
            .map_err(|e| self.request_error("put", key, &e))?;
        self.headers.lock().remove(&key);
        if self.index.write().insert(key, object_bytes).is_none() {
            self.stored_bytes.fetch_add(object_bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    fn forget(&self, key: ShardKey, size: u64) {
        self.headers.lock().remove(&key);
        if self.index.write().remove(&key).is_some() {
            self.stored_bytes.fetch_sub(size, Ordering::Relaxed);
        }
    }

    async fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, WireError> {
        self.requests.acquire().await.map_err(|_| werr!(Unavailable, "the storage service is shutting down"))
    }

    /// Stops taking requests (those running finish).
    pub fn close(&self) {
        self.requests.close();
    }

    /// Reads the whole blocks covering `len` bytes at `offset` of `key` (not yet verified).
    async fn read_blocks(&self, key: ShardKey, offset: u32, len: u32) -> Result<Blocks, WireError> {
        let size =
            self.index.read().get(&key).copied().ok_or_else(|| werr!(NotFound, "{key} is not stored on this node"))?;
        // The object's size gives the header's: size = 36 + 4n + data, n = ceil(data / block).
        let block = u64::from(format::BLOCK_BYTES);
        let table_bytes = 4 * size.saturating_sub(FIXED_HEADER_BYTES as u64).div_ceil(block + 4);
        let data_offset = FIXED_HEADER_BYTES as u64 + table_bytes;
        let data_len = size.saturating_sub(data_offset);
        if u64::from(offset) > data_len {
            return Err(werr!(Invalid, "{key}: offset {offset} is past the end of the shard ({data_len} bytes)"));
        }
        let first = offset / format::BLOCK_BYTES;
        let start = u64::from(first) * block;
        let end = if len == 0 { data_len } else { u64::from(offset).saturating_add(u64::from(len)).min(data_len) };
        let stop = (end.div_ceil(block) * block).min(data_len).max(start);
        let path = self.shard_path(key);
        let cached = self.headers.lock().get(&key).cloned();
        let _permit = self.permit().await?;
        let fail = |e: object_store::Error| {
            if matches!(e, object_store::Error::NotFound { .. }) {
                self.forget(key, size);
            }
            self.request_error("read", key, &e)
        };
        let (head, data) = match &cached {
            Some(_) if stop > start => {
                let data = self.s3.get_range(&path, data_offset + start..data_offset + stop).await.map_err(fail)?;
                (None, data)
            }
            Some(_) => (None, Bytes::new()),
            None if start <= ONE_REQUEST_GAP_BYTES => {
                let all = self.s3.get_range(&path, 0..data_offset + stop).await.map_err(fail)?;
                if (all.len() as u64) < data_offset + stop {
                    return Err(
                        self.corrupt(key, &FormatError::Truncated { need: data_offset + stop, have: all.len() as u64 })
                    );
                }
                (Some(all.slice(..data_offset as usize)), all.slice((data_offset + start) as usize..))
            }
            None if stop == start => {
                let head = self.s3.get_range(&path, 0..data_offset).await.map_err(fail)?;
                (Some(head), Bytes::new())
            }
            None => {
                let mut parts = self
                    .s3
                    .get_ranges(&path, &[0..data_offset, data_offset + start..data_offset + stop])
                    .await
                    .map_err(fail)?;
                let data = parts.pop().unwrap_or_default();
                (parts.pop(), data)
            }
        };
        let (header, table) = match (head, cached) {
            (None, Some(h)) => (h.0, h.1.clone()),
            (None, None) => {
                return Err(werr!(Internal, "{key}: no header was read"));
            }
            (Some(head), _) => {
                let header = ShardHeader::decode(&head).map_err(|e| self.corrupt(key, &e))?;
                if header.key != key {
                    return Err(werr!(Corrupt, "{key}: object {path} is corrupt: it holds {}", header.key));
                }
                if header.file_bytes() != size {
                    return Err(self.corrupt(key, &FormatError::Length { expected: header.file_bytes(), have: size }));
                }
                let table = header
                    .decode_table(head.get(FIXED_HEADER_BYTES..).unwrap_or(&[]), None)
                    .map_err(|e| self.corrupt(key, &e))?;
                let mut headers = self.headers.lock();
                if headers.len() >= HEADERS_KEPT_MAX {
                    headers.clear();
                }
                headers.insert(key, Arc::new((header, table.clone())));
                (header, table)
            }
        };
        if data.len() as u64 != stop - start {
            return Err(self.corrupt(key, &FormatError::Truncated { need: stop - start, have: data.len() as u64 }));
        }
        Ok(Blocks { header, table, first, start: start as u32, end: end as u32, data })
    }

    /// The error for a shard object that fails its checks, logged here where it is found; its
    /// header is not kept (a repair replaces the object).
    fn corrupt(&self, key: ShardKey, e: &FormatError) -> WireError {
        self.headers.lock().remove(&key);
        let err =
            werr!(Corrupt, "{key}: object {} in {} is corrupt: {e}", self.shard_path(key), self.config.location());
        tracing::warn!("{err}");
        err
    }

    /// As [`crate::ShardStore::get`]: the shard's info, the (block-aligned) offset of the first
    /// byte returned, and the verified blocks.
    pub async fn get(&self, key: ShardKey, offset: u32, len: u32) -> Result<(ShardInfo, u32, Bytes), WireError> {
        let blocks = self.read_blocks(key, offset, len).await?;
        format::verify_blocks(&blocks.data, blocks.first, &blocks.table).map_err(|e| self.corrupt(key, &e))?;
        Ok((blocks.header.info(blocks.table), blocks.start, blocks.data))
    }

    /// As [`crate::ShardStore::get_range`]: exactly the bytes asked for, with the crc32c of
    /// the rest of the first and last blocks.
    pub async fn get_range(
        &self,
        key: ShardKey,
        offset: u32,
        len: u32,
    ) -> Result<(ShardInfo, u32, u32, Bytes), WireError> {
        let blocks = self.read_blocks(key, offset, len).await?;
        let (cut_start, cut_end) = ((offset - blocks.start) as usize, (blocks.end - blocks.start) as usize);
        let (head, tail) = format::verify_blocks_cut(&blocks.data, blocks.first, &blocks.table, cut_start, cut_end)
            .map_err(|e| self.corrupt(key, &e))?;
        let data = blocks.data.slice(cut_start..cut_end);
        Ok((blocks.header.info(blocks.table), head, tail, data))
    }

    /// Deletes shards; keys that are not stored are ignored (deletes are retried and
    /// replayed). Returns how many were removed.
    pub async fn delete(&self, keys: &[ShardKey]) -> Result<u32, WireError> {
        let mut removed = 0;
        for &key in keys {
            let _stripe = self.stripe(key).lock().await;
            let Some(size) = self.index.read().get(&key).copied() else {
                continue;
            };
            let _permit = self.permit().await?;
            match self.s3.delete(&self.shard_path(key)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.request_error("delete", key, &e)),
            }
            self.forget(key, size);
            removed += 1;
        }
        Ok(removed)
    }

    /// Keys strictly after `after`, in order, at most `limit` (capped at
    /// [`crate::store::LIST_KEYS_MAX`]).
    pub fn list(&self, after: Option<ShardKey>, limit: u32) -> Vec<ShardKey> {
        let limit = limit.min(crate::store::LIST_KEYS_MAX) as usize;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.index.read().range((lower, Bound::Unbounded)).take(limit).map(|(k, _)| *k).collect()
    }

    /// The store as one drive: its location, the quota as capacity, the shards held. Makes no
    /// request.
    pub fn stat(&self) -> Vec<DriveInfo> {
        let stored = self.stored_bytes.load(Ordering::Relaxed);
        let location = self.config.location();
        vec![DriveInfo {
            path: location.clone(),
            bytes_total: self.capacity_bytes,
            bytes_free: self.capacity_bytes.saturating_sub(stored),
            shards: self.index.read().len() as u64,
            error: String::new(),
            device: wire::device_id(&location, 0, 0),
        }]
    }
}

/// `<chunk id, 16 hex>.<index>`, as shard files are named.
fn object_name(key: ShardKey) -> String {
    format!("{:016x}.{}", key.chunk, key.index)
}

fn parse_object_name(name: &str) -> Option<ShardKey> {
    let (chunk, index) = name.split_once('.')?;
    if chunk.len() != 16 || !chunk.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let key = ShardKey { chunk: u64::from_str_radix(chunk, 16).ok()?, index: index.parse().ok()? };
    (object_name(key) == name).then_some(key)
}

/// An error with its sources, on one line.
fn error_text(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// An error text cut to a length a person reads in one line (S3 error bodies are XML).
fn short_reason(text: &str) -> String {
    const REASON_CHARS_MAX: usize = 400;
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= REASON_CHARS_MAX {
        return one_line;
    }
    one_line.chars().take(REASON_CHARS_MAX).collect::<String>() + "..."
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ObjectConfig {
        ObjectConfig {
            endpoint: "http://127.0.0.1:3900".into(),
            bucket: "cold".into(),
            prefix: "n1".into(),
            region: "garage".into(),
            access_key_id: "GKsecretish".into(),
            secret_access_key_file: Some("/nonexistent".into()),
            secret_access_key_env: None,
            allow_http: true,
            ca_file: None,
            capacity_bytes: None,
        }
    }

    #[test]
    fn a_ca_file_that_is_missing_or_holds_no_certificate_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let with = |file: &std::path::Path| ObjectConfig { ca_file: Some(file.to_path_buf()), ..config() };
        assert!(config().read_ca().expect("no ca_file").is_empty());
        let missing = dir.path().join("missing.pem");
        let e = with(&missing).read_ca().unwrap_err().to_string();
        assert!(e.contains("ca_file") && e.contains("missing.pem") && e.contains("cannot read"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").expect("write");
        let e = with(&empty).read_ca().unwrap_err().to_string();
        assert!(e.contains("empty.pem") && e.contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn object_names_roundtrip() {
        for key in [
            ShardKey { chunk: 0, index: 0 },
            ShardKey { chunk: u64::MAX, index: 31 },
            ShardKey { chunk: 0x1234, index: 10 },
        ] {
            assert_eq!(parse_object_name(&object_name(key)), Some(key));
        }
        for bad in ["x", "0000000000000001", "0000000000000001.01", "000000000000001.1", "0000000000000001.x", ".tmp.a"]
        {
            assert_eq!(parse_object_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn configurations_are_checked_and_never_show_the_key() {
        let good = config();
        good.validate().expect("valid");
        assert_eq!(good.path("shards/x").as_ref(), "n1/shards/x");
        assert_eq!(good.location(), "s3://cold/n1/ at http://127.0.0.1:3900");
        assert!(!format!("{good:?}").contains("GKsecretish"));
        let no_http = ObjectConfig { allow_http: false, ..config() };
        assert!(no_http.validate().unwrap_err().to_string().contains("allow_http"));
        let both = ObjectConfig { secret_access_key_env: Some("X".into()), ..config() };
        assert!(both.validate().unwrap_err().to_string().contains("not both"));
        let none = ObjectConfig { secret_access_key_file: None, ..config() };
        assert!(none.validate().unwrap_err().to_string().contains("no secret"));
        let bucket = ObjectConfig { bucket: "Bad_Bucket".into(), ..config() };
        assert!(bucket.validate().unwrap_err().to_string().contains("bucket"));
        let prefix = ObjectConfig { prefix: "a//b".into(), ..config() };
        assert!(prefix.validate().unwrap_err().to_string().contains("prefix"));
        let root = ObjectConfig { prefix: String::new(), ..config() };
        assert_eq!(root.path("node.uuid").as_ref(), "node.uuid");
    }
}
