//! Snapshots to and from an S3 bucket: `trove snapshot push PATH NAME --to s3://BUCKET/PREFIX`
//! uploads a snapshot (its tree and its data) to any S3-compatible store, and `trove snapshot
//! pull s3://BUCKET/PREFIX NAME --into PATH` rebuilds it, bit-exact, in another cluster (or
//! the same one): for disaster recovery and for bursting a dataset version into a cluster
//! elsewhere. This file owns the bucket format and both directions; the S3 client is the
//! object pools' (`storage::object`), with the same options (private CA, plain http only when
//! asked, bounded retries).
//!
//! # The bucket format (version 1)
//!
//! ```text
//! PREFIX/chunks/<sha256>                 a piece of file data: the valid bytes of one chunk,
//!                                        named by the SHA-256 of its bytes (64 hex digits)
//! PREFIX/snapshots/<NAME>/manifest.jsonl the tree, one JSON object a line (below)
//! PREFIX/snapshots/<NAME>/commit.json    written last: the manifest's SHA-256 and size, and
//!                                        what the snapshot holds
//! ```
//!
//! The manifest's first line is its header, `{"format":"trove-snapshot-manifest","version":1,
//! "name":…,"source_path":…,"created_ms":…}`; every other line is one entry of the tree, a
//! directory before anything in it (pre-order):
//!
//! ```text
//! {"path":"a/b","kind":"file","mode":420,"uid":0,"gid":0,"atime":[s,ns],"mtime":[s,ns],
//!  "size":N,"chunk_bytes":B,"pieces":[{"index":I,"len":L,"sha256":"…"},…],
//!  "xattrs":{"user.k":"<hex>"}}
//! kind: "dir" | "file" | "symlink" (with "target") | "link" (a further name of an earlier
//!       file, "target" is that file's path) | "fifo" | "socket" | "char" | "block" ("rdev")
//! ```
//!
//! The root is the entry with path `""`. A file's bytes are its pieces at `index *
//! chunk_bytes`, zeros between and after them up to `size` (holes stay holes).
//!
//! Invariants: a snapshot exists in the bucket only when its `commit.json` does, and that is
//! written after the manifest and every piece it names were stored (a push that fails leaves
//! no commit, and pull refuses a name without one); every object is checked when read back
//! (pieces against their name, the manifest against the commit's SHA-256 and size), so nothing
//! the store altered is restored. Pieces are shared by every snapshot under a prefix: a push
//! uploads only the pieces the bucket does not hold yet (it lists `chunks/` first), so a
//! second push after small changes sends only the changed chunks. A push reads every byte of
//! the snapshot, checked against the cluster's end-to-end checksums on the way. Deliberately
//! absent: deleting snapshots from the bucket and collecting unreferenced pieces (the bucket's
//! own lifecycle rules can), and skipping the read of chunks a previous push already sent
//! (that needs a cluster identity to tell one cluster's chunk ids from another's).
//!
//! Version history: 1, the first.

use crate::cmds::{human_bytes, ClusterOpt};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use client::Client;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use storage::object::ObjectConfig;
use wire::{Attr, FileKind, Ino, SetAttr, Timestamp, XattrMode};

/// The bucket format this code writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
const MANIFEST_FORMAT: &str = "trove-snapshot-manifest";
const COMMIT_FORMAT: &str = "trove-snapshot-commit";
/// Files read (push) or written (pull) at once; each holds at most one chunk in memory.
const FILES_IN_FLIGHT_MAX: usize = 8;
/// Longest manifest a pull accepts: 16 GiB (about 50 million entries).
const MANIFEST_BYTES_MAX: u64 = 16 << 30;
/// Deepest path a manifest may hold, in components.
const DEPTH_MAX: usize = 4096;

/// Where and how to reach the S3 store. The secret is never a flag: it comes from a file or
/// from `$AWS_SECRET_ACCESS_KEY`.
#[derive(clap::Args, Clone, Debug)]
pub struct S3Opt {
    /// The store's endpoint, `https://HOST[:PORT]` (path-style requests).
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub endpoint: Option<String>,
    /// The region requests are signed for.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub region: String,
    /// The access key id.
    #[arg(long, env = "AWS_ACCESS_KEY_ID", value_name = "ID", hide_env_values = true)]
    pub access_key_id: Option<String>,
    /// A file holding the secret access key; without it, $AWS_SECRET_ACCESS_KEY holds it.
    #[arg(long, value_name = "FILE")]
    pub secret_access_key_file: Option<PathBuf>,
    /// A PEM file of certificates to trust besides the system's (a private CA).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Allow a plain http:// endpoint (requests and data travel unencrypted).
    #[arg(long)]
    pub allow_http: bool,
}

/// `s3://BUCKET[/PREFIX]`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Url {
    bucket: String,
    prefix: String,
}

fn parse_url(url: &str) -> Result<Url> {
    let Some(rest) = url.strip_prefix("s3://") else {
        bail!("{url:?} is not an s3://BUCKET/PREFIX address");
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_end_matches('/');
    if bucket.is_empty() {
        bail!("{url:?} names no bucket (s3://BUCKET/PREFIX)");
    }
    if prefix.split('/').any(|p| p.is_empty() || p == "." || p == "..") && !prefix.is_empty() {
        bail!("the prefix of {url:?} has an empty, . or .. segment");
    }
    Ok(Url { bucket: bucket.to_string(), prefix: prefix.to_string() })
}

/// A snapshot name as the bucket keys it: a name as `trove snapshot create` takes, and one
/// object path segment.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.len() > wire::NAME_BYTES_MAX
        || name.chars().any(char::is_control)
    {
        bail!("{name:?} is not a snapshot name (1 to 255 bytes, no '/' or control characters, not . or ..)");
    }
    Ok(())
}

/// The bucket of one push or pull.
struct Bucket {
    config: ObjectConfig,
    s3: AmazonS3,
}

impl Bucket {
    fn open(url: &str, opt: &S3Opt) -> Result<Bucket> {
        let url = parse_url(url)?;
        let Some(endpoint) = opt.endpoint.clone() else {
            bail!("no S3 endpoint: pass --endpoint URL or set AWS_ENDPOINT_URL");
        };
        let Some(access_key_id) = opt.access_key_id.clone() else {
            bail!("no access key: pass --access-key-id or set AWS_ACCESS_KEY_ID");
        };
        let (file, env) = match &opt.secret_access_key_file {
            Some(f) => (Some(f.clone()), None),
            None => (None, Some("AWS_SECRET_ACCESS_KEY".to_string())),
        };
        let config = ObjectConfig {
            endpoint,
            bucket: url.bucket,
            prefix: url.prefix,
            region: opt.region.clone(),
            access_key_id,
            secret_access_key_file: file,
            secret_access_key_env: env,
            allow_http: opt.allow_http,
            ca_file: opt.ca_file.clone(),
            capacity_bytes: None,
        };
        let s3 = config.client().map_err(|e| anyhow!("{}", e.to_string().trim_start_matches("[object]: ")))?;
        Ok(Bucket { config, s3 })
    }

    fn path(&self, name: &str) -> ObjPath {
        self.config.path(name)
    }

    fn fail(&self, what: &str, e: &object_store::Error) -> anyhow::Error {
        anyhow!("{}: {}", self.config.location(), self.config.classify(what, e))
    }

    /// The object's bytes, or `None` when there is none.
    async fn get(&self, name: &str) -> Result<Option<Bytes>> {
        let path = self.path(name);
        match self.s3.get(&path).await {
            Ok(got) => Ok(Some(got.bytes().await.map_err(|e| self.fail(&format!("reading {path}"), &e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail(&format!("reading {path}"), &e)),
        }
    }

    async fn put(&self, name: &str, data: Bytes) -> Result<()> {
        let path = self.path(name);
        self.s3
            .put(&path, PutPayload::from(data))
            .await
            .map(|_| ())
            .map_err(|e| self.fail(&format!("writing {path}"), &e))
    }

    /// The names of the pieces the bucket holds.
    async fn pieces(&self) -> Result<HashSet<String>> {
        let prefix = self.path("chunks");
        let mut listing = self.s3.list(Some(&prefix));
        let mut names = HashSet::new();
        while let Some(item) = listing.next().await {
            let meta = item.map_err(|e| self.fail("listing the pieces", &e))?;
            if let Some(name) = meta.location.filename() {
                if is_sha256_hex(name) {
                    names.insert(name.to_string());
                }
            }
        }
        Ok(names)
    }

    fn where_(&self) -> String {
        self.config.location()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

fn is_sha256_hex(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn sha256(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn piece_name(sha: &str) -> String {
    format!("chunks/{sha}")
}

fn manifest_name(name: &str) -> String {
    format!("snapshots/{name}/manifest.jsonl")
}

fn commit_name(name: &str) -> String {
    format!("snapshots/{name}/commit.json")
}

// ---------------------------------------------------------------------------------------------
// The format's records.

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
struct Header {
    format: String,
    version: u32,
    name: String,
    source_path: String,
    created_ms: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Dir,
    File,
    Symlink,
    Link,
    Fifo,
    Socket,
    Char,
    Block,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
struct Piece {
    index: u64,
    len: u32,
    sha256: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Entry {
    path: String,
    kind: Kind,
    #[serde(default)]
    mode: u32,
    #[serde(default)]
    uid: u32,
    #[serde(default)]
    gid: u32,
    #[serde(default)]
    atime: (i64, u32),
    #[serde(default)]
    mtime: (i64, u32),
    #[serde(default, skip_serializing_if = "is_zero")]
    size: u64,
    #[serde(default, skip_serializing_if = "is_zero32")]
    chunk_bytes: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pieces: Vec<Piece>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero32")]
    rdev: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    xattrs: BTreeMap<String, String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero32(v: &u32) -> bool {
    *v == 0
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
struct Commit {
    format: String,
    version: u32,
    name: String,
    manifest_sha256: String,
    manifest_bytes: u64,
    entries: u64,
    files: u64,
    /// Bytes of file data (sizes summed, holes included).
    bytes: u64,
    pieces: u64,
    pushed_ms: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

fn ts(t: Timestamp) -> (i64, u32) {
    (t.secs, t.nanos)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

// ---------------------------------------------------------------------------------------------
// Push.

/// What a push did, counted as it went.
#[derive(Default)]
struct PushCount {
    read_bytes: AtomicU64,
    uploaded_pieces: AtomicU64,
    uploaded_bytes: AtomicU64,
    present_pieces: AtomicU64,
}

/// Walks the snapshot view at `root` (pre-order); files come back without their pieces, each
/// with its inode for reading.
async fn walk(client: &Client, root: &Attr, at: &str) -> Result<Vec<(Entry, Option<Ino>)>> {
    let mut out = Vec::new();
    let mut links: HashMap<Ino, String> = HashMap::new();
    let mut todo = vec![(root.clone(), String::new())];
    while let Some((attr, path)) = todo.pop() {
        let shown = |p: &str| if p.is_empty() { at.to_string() } else { format!("{at}/{p}") };
        let mut entry = Entry {
            path: path.clone(),
            kind: Kind::Dir,
            mode: attr.mode & 0o7777,
            uid: attr.uid,
            gid: attr.gid,
            atime: ts(attr.atime),
            mtime: ts(attr.mtime),
            size: 0,
            chunk_bytes: 0,
            pieces: Vec::new(),
            target: None,
            rdev: 0,
            xattrs: BTreeMap::new(),
        };
        let mut ino = None;
        match attr.kind {
            FileKind::Dir => {
                let mut children =
                    client.readdir(attr.ino).await.map_err(|e| anyhow!("cannot list {}: {e}", shown(&path)))?;
                children.sort_by(|a, b| b.name.cmp(&a.name));
                for child in children {
                    todo.push((child.attr.clone(), join(&path, &child.name)));
                }
            }
            FileKind::File => {
                if attr.nlink > 1 {
                    if let Some(first) = links.get(&attr.ino) {
                        entry.kind = Kind::Link;
                        entry.target = Some(first.clone());
                        out.push((entry, None));
                        continue;
                    }
                    links.insert(attr.ino, path.clone());
                }
                entry.kind = Kind::File;
                entry.size = attr.size;
                entry.chunk_bytes = attr.chunk_bytes;
                ino = Some(attr.ino);
            }
            FileKind::Symlink => {
                entry.kind = Kind::Symlink;
                entry.target = Some(
                    client
                        .readlink(attr.ino)
                        .await
                        .map_err(|e| anyhow!("cannot read the link {}: {e}", shown(&path)))?,
                );
            }
            FileKind::Fifo => entry.kind = Kind::Fifo,
            FileKind::Socket => entry.kind = Kind::Socket,
            FileKind::CharDevice | FileKind::BlockDevice => {
                entry.kind = if attr.kind == FileKind::CharDevice { Kind::Char } else { Kind::Block };
                entry.rdev = attr.rdev;
            }
        }
        for name in client
            .listxattr(attr.ino)
            .await
            .map_err(|e| anyhow!("cannot list the attributes of {}: {e}", shown(&path)))?
        {
            let value = client
                .getxattr(attr.ino, &name)
                .await
                .map_err(|e| anyhow!("cannot read attribute {name} of {}: {e}", shown(&path)))?;
            entry.xattrs.insert(name, hex(&value));
        }
        out.push((entry, ino));
    }
    Ok(out)
}

/// Reads the chunks of file `ino`, uploads those the bucket lacks, and answers its pieces.
async fn push_file(
    client: &Client,
    bucket: &Bucket,
    have: &tokio::sync::Mutex<HashSet<String>>,
    count: &PushCount,
    ino: Ino,
    shown: &str,
) -> Result<Vec<Piece>> {
    let (attr, records) =
        client.chunk_records(ino).await.map_err(|e| anyhow!("cannot read the chunk records of {shown}: {e}"))?;
    let mut handle = client.open(ino).await.map_err(|e| anyhow!("cannot open {shown}: {e}"))?;
    let chunk_bytes = u64::from(attr.chunk_bytes.max(1));
    let mut pieces = Vec::with_capacity(records.len());
    for record in records {
        let offset = record.index * chunk_bytes;
        if offset >= attr.size || record.len == 0 {
            continue;
        }
        let len = u64::from(record.len).min(attr.size - offset);
        let data =
            handle.read_at(offset, len as usize).await.map_err(|e| anyhow!("cannot read {shown} at {offset}: {e}"))?;
        if data.len() as u64 != len {
            bail!("{shown}: read {} bytes at {offset}, expected {len}", data.len());
        }
        count.read_bytes.fetch_add(len, Ordering::Relaxed);
        let sha = sha256(&data);
        let fresh = have.lock().await.insert(sha.clone());
        if fresh {
            if let Err(e) = bucket.put(&piece_name(&sha), data).await {
                have.lock().await.remove(&sha);
                return Err(e.context(format!("uploading a chunk of {shown}")));
            }
            count.uploaded_pieces.fetch_add(1, Ordering::Relaxed);
            count.uploaded_bytes.fetch_add(len, Ordering::Relaxed);
        } else {
            count.present_pieces.fetch_add(1, Ordering::Relaxed);
        }
        pieces.push(Piece { index: record.index, len: len as u32, sha256: sha });
    }
    Ok(pieces)
}

/// Uploads snapshot `name` of directory `remote`.
async fn push(client: &Client, remote: &str, name: &str, to: &str, opt: &S3Opt) -> Result<()> {
    check_name(name)?;
    let remote = remote.trim_end_matches('/');
    let remote = if remote.is_empty() { "/" } else { remote };
    let dir = client.resolve(remote).await.map_err(|e| anyhow!("{remote}: {e}"))?;
    if dir.kind != FileKind::Dir {
        bail!("{remote} is not a directory");
    }
    let info = client
        .snapshots(Some(dir.ino))
        .await?
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| anyhow!("{remote} has no snapshot {name:?} (see trove snapshot list {remote})"))?;
    let view_path = format!("{}/{}/{name}", remote.trim_end_matches('/'), meta::snapshot::SNAPSHOT_DIR_NAME);
    let root = client.resolve(&view_path).await.map_err(|e| anyhow!("{view_path}: {e}"))?;

    let bucket = Bucket::open(to, opt)?;
    if bucket.get(&commit_name(name)).await?.is_some() {
        bail!("{} already holds a snapshot named {name:?}; push under another name (take the snapshot again with another name) or use another prefix", bucket.where_());
    }
    let have = tokio::sync::Mutex::new(bucket.pieces().await?);
    let count = PushCount::default();

    let walked = walk(client, &root, &view_path).await?;
    let files = walked.iter().filter(|(_, ino)| ino.is_some()).count() as u64;
    let mut entries: Vec<Entry> = Vec::with_capacity(walked.len());
    let mut reads = Vec::new();
    for (i, (entry, ino)) in walked.into_iter().enumerate() {
        if let Some(ino) = ino {
            reads.push((i, ino, format!("{view_path}/{}", entry.path)));
        }
        entries.push(entry);
    }
    let results: Vec<(usize, Vec<Piece>)> = futures::stream::iter(reads)
        .map(|(i, ino, shown)| {
            let (bucket, have, count) = (&bucket, &have, &count);
            async move { push_file(client, bucket, have, count, ino, &shown).await.map(|p| (i, p)) }
        })
        .buffer_unordered(FILES_IN_FLIGHT_MAX)
        .try_collect()
        .await?;
    let mut pieces_total = 0u64;
    for (i, pieces) in results {
        pieces_total += pieces.len() as u64;
        entries[i].pieces = pieces;
    }

    let header = Header {
        format: MANIFEST_FORMAT.into(),
        version: FORMAT_VERSION,
        name: name.into(),
        source_path: remote.into(),
        created_ms: info.created_ms,
    };
    let mut manifest = serde_json::to_vec(&header)?;
    manifest.push(b'\n');
    let mut bytes = 0u64;
    for entry in &entries {
        bytes += entry.size;
        serde_json::to_writer(&mut manifest, entry)?;
        manifest.push(b'\n');
    }
    let commit = Commit {
        format: COMMIT_FORMAT.into(),
        version: FORMAT_VERSION,
        name: name.into(),
        manifest_sha256: sha256(&manifest),
        manifest_bytes: manifest.len() as u64,
        entries: entries.len() as u64,
        files,
        bytes,
        pieces: pieces_total,
        pushed_ms: now_ms(),
    };
    let manifest_bytes = manifest.len() as u64;
    bucket.put(&manifest_name(name), Bytes::from(manifest)).await?;
    bucket.put(&commit_name(name), Bytes::from(serde_json::to_vec_pretty(&commit)?)).await?;
    let uploaded = count.uploaded_bytes.load(Ordering::Relaxed);
    println!(
        "pushed snapshot {name} of {remote} to {}: {} entries, {files} files, {} of data in {pieces_total} chunks",
        bucket.where_(),
        entries.len(),
        human_bytes(bytes)
    );
    println!(
        "uploaded {} new chunks ({uploaded} bytes, {}); {} chunks were in the bucket already; read {} bytes; manifest {manifest_bytes} bytes",
        count.uploaded_pieces.load(Ordering::Relaxed),
        human_bytes(uploaded),
        count.present_pieces.load(Ordering::Relaxed),
        count.read_bytes.load(Ordering::Relaxed)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Pull.

/// Reads and checks snapshot `name`'s commit and manifest from the bucket.
async fn load(bucket: &Bucket, name: &str) -> Result<(Commit, Header, Vec<Entry>)> {
    let at = bucket.where_();
    let commit_obj = bucket.get(&commit_name(name)).await?.ok_or_else(|| {
        anyhow!("{at} holds no snapshot {name:?} (no {}; a push that did not finish leaves none)", commit_name(name))
    })?;
    let commit: Commit = serde_json::from_slice(&commit_obj)
        .map_err(|e| anyhow!("{at}: {} is not a snapshot commit: {e}", commit_name(name)))?;
    if commit.format != COMMIT_FORMAT || commit.name != name {
        bail!("{at}: {} is not the commit of snapshot {name:?}", commit_name(name));
    }
    if commit.version > FORMAT_VERSION {
        bail!("{at}: snapshot {name:?} was pushed in format version {}, newer than this trove reads ({FORMAT_VERSION}): upgrade trove", commit.version);
    }
    if commit.manifest_bytes > MANIFEST_BYTES_MAX {
        bail!(
            "{at}: snapshot {name:?} has a manifest of {} bytes, more than the {MANIFEST_BYTES_MAX} a pull reads",
            commit.manifest_bytes
        );
    }
    let manifest = bucket
        .get(&manifest_name(name))
        .await?
        .ok_or_else(|| anyhow!("{at}: {} is missing although the snapshot was committed", manifest_name(name)))?;
    if manifest.len() as u64 != commit.manifest_bytes || sha256(&manifest) != commit.manifest_sha256 {
        bail!(
            "{at}: {} does not match its commit (size or SHA-256 differ): it was changed or damaged in the store",
            manifest_name(name)
        );
    }
    let mut lines = manifest.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let header: Header = lines
        .next()
        .map(serde_json::from_slice)
        .transpose()
        .map_err(|e| anyhow!("{at}: the manifest's header: {e}"))?
        .ok_or_else(|| anyhow!("{at}: the manifest is empty"))?;
    if header.format != MANIFEST_FORMAT || header.version > FORMAT_VERSION {
        bail!("{at}: the manifest of {name:?} is not a trove snapshot manifest of version {FORMAT_VERSION} or older");
    }
    let mut entries = Vec::new();
    for (n, line) in lines.enumerate() {
        let entry: Entry = serde_json::from_slice(line).map_err(|e| anyhow!("{at}: manifest entry {}: {e}", n + 1))?;
        entries.push(entry);
    }
    check_entries(&entries).map_err(|e| anyhow!("{at}: the manifest of {name:?}: {e}"))?;
    Ok((commit, header, entries))
}

/// A manifest's entries make a tree a pull can build: the root first and a directory, every
/// path relative and clean, each parent a directory listed before it, no path twice, links to
/// files listed before them, and pieces that fit their file.
fn check_entries(entries: &[Entry]) -> Result<()> {
    let Some(root) = entries.first() else {
        bail!("it lists no entry");
    };
    if !root.path.is_empty() || root.kind != Kind::Dir {
        bail!("its first entry is not the root directory");
    }
    let mut kinds: HashMap<&str, Kind> = HashMap::from([("", Kind::Dir)]);
    for e in &entries[1..] {
        let parts: Vec<&str> = e.path.split('/').collect();
        if parts.len() > DEPTH_MAX
            || parts
                .iter()
                .any(|p| p.is_empty() || *p == "." || *p == ".." || p.len() > wire::NAME_BYTES_MAX || p.contains('\0'))
        {
            bail!("path {:?} is not a clean relative path", e.path);
        }
        let parent = e.path.rsplit_once('/').map_or("", |(p, _)| p);
        if kinds.get(parent) != Some(&Kind::Dir) {
            bail!("{:?} comes before its directory {parent:?} (or that is not a directory)", e.path);
        }
        match e.kind {
            Kind::Link => {
                let target = e.target.as_deref().unwrap_or_default();
                if kinds.get(target) != Some(&Kind::File) {
                    bail!("the link {:?} names {target:?}, not a file listed before it", e.path);
                }
            }
            Kind::Symlink if e.target.is_none() => bail!("the symbolic link {:?} has no target", e.path),
            Kind::File => {
                let chunk_bytes = u64::from(e.chunk_bytes);
                let mut last = None;
                for p in &e.pieces {
                    if chunk_bytes == 0
                        || u64::from(p.len) > chunk_bytes
                        || p.index
                            .checked_mul(chunk_bytes)
                            .and_then(|o| o.checked_add(u64::from(p.len)))
                            .is_none_or(|end| end > e.size)
                        || last.is_some_and(|l| l >= p.index)
                        || !is_sha256_hex(&p.sha256)
                    {
                        bail!(
                            "file {:?}: piece {} does not fit the file (size {}, chunk bytes {})",
                            e.path,
                            p.index,
                            e.size,
                            e.chunk_bytes
                        );
                    }
                    last = Some(p.index);
                }
            }
            _ => {}
        }
        if kinds.insert(e.path.as_str(), e.kind).is_some() {
            bail!("{:?} is listed twice", e.path);
        }
    }
    Ok(())
}

/// What a pull made.
#[derive(Default)]
struct PullCount {
    downloaded_bytes: AtomicU64,
    pieces: AtomicU64,
}

fn set_attr(e: &Entry) -> SetAttr {
    SetAttr {
        mode: Some(e.mode & 0o7777),
        uid: Some(e.uid),
        gid: Some(e.gid),
        size: None,
        atime: Some(Timestamp { secs: e.atime.0, nanos: e.atime.1 }),
        mtime: Some(Timestamp { secs: e.mtime.0, nanos: e.mtime.1 }),
        ctime: None,
    }
}

/// Writes file `e` (made already, inode `ino`) from its pieces.
async fn pull_file(client: &Client, bucket: &Bucket, count: &PullCount, e: &Entry, ino: Ino) -> Result<()> {
    let mut handle = client.open(ino).await.map_err(|err| anyhow!("cannot open {}: {err}", e.path))?;
    for p in &e.pieces {
        let data = bucket.get(&piece_name(&p.sha256)).await?.ok_or_else(|| {
            anyhow!("{}: chunk {} of {:?} is missing from the bucket", bucket.where_(), p.sha256, e.path)
        })?;
        if data.len() != p.len as usize || sha256(&data) != p.sha256 {
            bail!(
                "{}: chunk {} of {:?} does not match its SHA-256 (changed or damaged in the store)",
                bucket.where_(),
                p.sha256,
                e.path
            );
        }
        handle
            .write_at(p.index * u64::from(e.chunk_bytes), &data)
            .await
            .map_err(|err| anyhow!("cannot write {}: {err}", e.path))?;
        count.downloaded_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        count.pieces.fetch_add(1, Ordering::Relaxed);
    }
    if handle.size() != e.size {
        handle.truncate(e.size).await.map_err(|err| anyhow!("cannot size {}: {err}", e.path))?;
    }
    handle.close().await.map_err(|err| anyhow!("cannot store {}: {err}", e.path))?;
    Ok(())
}

/// Rebuilds snapshot `name` from the bucket at `from` as the new directory `into`.
async fn pull(client: &Client, from: &str, name: &str, into: &str, opt: &S3Opt) -> Result<()> {
    check_name(name)?;
    let bucket = Bucket::open(from, opt)?;
    let (commit, header, entries) = load(&bucket, name).await?;
    let into = into.trim_end_matches('/');
    if client.resolve(into).await.is_ok() {
        bail!("cannot pull into {into}: it exists (name a new directory)");
    }
    let (parent, final_name) = client.parent_of(into).await.map_err(|e| anyhow!("cannot pull into {into}: {e}"))?;
    let final_name = final_name.to_string();
    // Built under a temporary name (hidden from listings) and renamed into place at the end:
    // a pull that fails leaves nothing that looks like a restored tree.
    let tmp = client::tmp_name();
    let top =
        client.mkdir(parent, &tmp, 0o700).await.map_err(|e| anyhow!("cannot make a directory beside {into}: {e}"))?;
    let built = build(client, &bucket, &entries, top.ino).await;
    let count = match built {
        Ok(count) => count,
        Err(e) => {
            let _ = remove_tree(client, parent, &tmp).await;
            return Err(e.context(format!("pull of snapshot {name} into {into} failed; nothing was left at {into}")));
        }
    };
    if let Err(e) = client.rename_mode(parent, &tmp, parent, &final_name, wire::RenameMode::NoReplace).await {
        let _ = remove_tree(client, parent, &tmp).await;
        bail!("cannot move the pulled tree to {into}: {e}");
    }
    println!(
        "pulled snapshot {name} (of {}, taken {}) from {} into {into}: {} entries, {} files, {} of data; downloaded {} chunks ({} bytes), every one checked against its SHA-256",
        header.source_path,
        crate::quota::chrono_like(header.created_ms),
        bucket.where_(),
        commit.entries,
        commit.files,
        human_bytes(commit.bytes),
        count.pieces.load(Ordering::Relaxed),
        count.downloaded_bytes.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Makes every entry below directory `top` (the root entry's attributes go on `top`).
async fn build(client: &Client, bucket: &Bucket, entries: &[Entry], top: Ino) -> Result<PullCount> {
    let count = PullCount::default();
    let mut inos: HashMap<&str, Ino> = HashMap::from([("", top)]);
    let mut files = Vec::new();
    for e in &entries[1..] {
        let (dir, leaf) = e.path.rsplit_once('/').unwrap_or(("", e.path.as_str()));
        let parent = *inos.get(dir).ok_or_else(|| anyhow!("{:?} has no directory made before it", e.path))?;
        let failed = |err: wire::WireError| anyhow!("cannot make {}: {err}", e.path);
        let attr = match e.kind {
            Kind::Dir => client.mkdir_as(parent, leaf, 0o700, e.uid, e.gid).await.map_err(failed)?,
            Kind::File => {
                let attr = client.create_as(parent, leaf, 0o600, e.uid, e.gid, true).await.map_err(failed)?;
                files.push((e, attr.ino));
                attr
            }
            Kind::Symlink => client
                .symlink_as(parent, leaf, e.target.as_deref().unwrap_or_default(), e.uid, e.gid)
                .await
                .map_err(failed)?,
            Kind::Link => {
                let target = *inos
                    .get(e.target.as_deref().unwrap_or_default())
                    .ok_or_else(|| anyhow!("the link {:?} names no file made before it", e.path))?;
                client.link(target, parent, leaf).await.map_err(failed)?
            }
            Kind::Fifo | Kind::Socket | Kind::Char | Kind::Block => {
                let kind = match e.kind {
                    Kind::Fifo => FileKind::Fifo,
                    Kind::Socket => FileKind::Socket,
                    Kind::Char => FileKind::CharDevice,
                    _ => FileKind::BlockDevice,
                };
                client.mknod_as(parent, leaf, kind, e.mode & 0o7777, e.rdev, e.uid, e.gid).await.map_err(failed)?
            }
        };
        inos.insert(e.path.as_str(), attr.ino);
    }
    futures::stream::iter(files)
        .map(|(e, ino)| {
            let count = &count;
            async move { pull_file(client, bucket, count, e, ino).await }
        })
        .buffer_unordered(FILES_IN_FLIGHT_MAX)
        .try_collect::<Vec<()>>()
        .await?;
    // Extended attributes, then modes, owners and times, deepest first: a directory's times
    // are set after everything in it was made.
    for e in entries.iter().rev() {
        let Some(&ino) = inos.get(e.path.as_str()) else {
            continue;
        };
        for (key, value) in &e.xattrs {
            let value = unhex(value).ok_or_else(|| anyhow!("{}: attribute {key} is not hex", e.path))?;
            client
                .setxattr(ino, key, &value, XattrMode::Upsert)
                .await
                .map_err(|err| anyhow!("cannot set attribute {key} of {}: {err}", e.path))?;
        }
        if !matches!(e.kind, Kind::Link | Kind::Symlink) {
            client
                .setattr(ino, set_attr(e))
                .await
                .map_err(|err| anyhow!("cannot set the attributes of {}: {err}", e.path))?;
        }
    }
    Ok(count)
}

/// Removes the tree `name` in `parent` (a failed pull's), best effort.
async fn remove_tree(client: &Client, parent: Ino, name: &str) -> Result<()> {
    let top = client.lookup(parent, name).await?;
    let mut dirs = vec![(parent, name.to_string(), top.ino)];
    let mut order = Vec::new();
    while let Some((p, n, ino)) = dirs.pop() {
        for child in client.readdir(ino).await? {
            if child.attr.kind == FileKind::Dir {
                dirs.push((ino, child.name.clone(), child.attr.ino));
            } else {
                client.unlink(ino, &child.name).await?;
            }
        }
        order.push((p, n));
    }
    for (p, n) in order.iter().rev() {
        client.rmdir(*p, n).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The commands.

#[derive(clap::Args)]
pub struct PushArgs {
    /// The snapshotted directory, e.g. /datasets/v1.
    pub remote: String,
    /// The snapshot to push.
    pub name: String,
    /// Where: s3://BUCKET/PREFIX (snapshots pushed under one prefix share their unchanged data).
    #[arg(long, value_name = "S3_URL")]
    pub to: String,
    #[command(flatten)]
    pub s3: S3Opt,
    #[command(flatten)]
    pub cluster: ClusterOpt,
}

#[derive(clap::Args)]
pub struct PullArgs {
    /// Where the snapshot was pushed: s3://BUCKET/PREFIX.
    pub from: String,
    /// The snapshot's name.
    pub name: String,
    /// The new directory to rebuild it as (it must not exist).
    #[arg(long, value_name = "PATH")]
    pub into: String,
    #[command(flatten)]
    pub s3: S3Opt,
    #[command(flatten)]
    pub cluster: ClusterOpt,
}

pub async fn run_push(args: PushArgs, client: &Client) -> Result<()> {
    push(client, &args.remote, &args.name, &args.to, &args.s3)
        .await
        .with_context(|| format!("cannot push snapshot {} of {} to {}", args.name, args.remote, args.to))
}

pub async fn run_pull(args: PullArgs, client: &Client) -> Result<()> {
    pull(client, &args.from, &args.name, &args.into, &args.s3)
        .await
        .with_context(|| format!("cannot pull snapshot {} from {}", args.name, args.from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: Kind) -> Entry {
        Entry {
            path: path.into(),
            kind,
            mode: 0o755,
            uid: 0,
            gid: 0,
            atime: (0, 0),
            mtime: (0, 0),
            size: 0,
            chunk_bytes: 0,
            pieces: Vec::new(),
            target: None,
            rdev: 0,
            xattrs: BTreeMap::new(),
        }
    }

    #[test]
    fn urls_are_parsed_and_bad_ones_named() {
        assert_eq!(parse_url("s3://b/p/q/").unwrap(), Url { bucket: "b".into(), prefix: "p/q".into() });
        assert_eq!(parse_url("s3://b").unwrap(), Url { bucket: "b".into(), prefix: String::new() });
        for bad in ["b/p", "s3:///p", "s3://b/p//q", "s3://b/../q", "http://b/p"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hex_round_trips_and_rejects_odd_input() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&all)).unwrap(), all);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
        assert!(is_sha256_hex(&sha256(b"x")));
        assert!(!is_sha256_hex("ABC"));
    }

    #[test]
    fn entries_round_trip_through_json() {
        let mut e = entry("a/b", Kind::File);
        e.size = 10;
        e.chunk_bytes = 8;
        e.pieces = vec![Piece { index: 1, len: 2, sha256: sha256(b"ab") }];
        e.xattrs.insert("user.k".into(), hex(b"v"));
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), e);
        assert!(serde_json::from_str::<Entry>(r#"{"path":"x","kind":"file","evil":1}"#).is_err());
    }

    #[test]
    fn manifests_that_do_not_make_a_tree_are_refused() {
        let root = entry("", Kind::Dir);
        let ok = vec![root.clone(), entry("d", Kind::Dir), entry("d/f", Kind::File)];
        check_entries(&ok).unwrap();
        let mut link = entry("d/g", Kind::Link);
        link.target = Some("d/f".into());
        check_entries(&[ok.clone(), vec![link.clone()]].concat()).unwrap();

        let cases: Vec<(&str, Vec<Entry>)> = vec![
            ("no root", vec![entry("d", Kind::Dir)]),
            ("child before parent", vec![root.clone(), entry("d/f", Kind::File), entry("d", Kind::Dir)]),
            ("dotdot", vec![root.clone(), entry("..", Kind::Dir)]),
            ("absolute", vec![root.clone(), entry("/etc", Kind::Dir)]),
            ("twice", vec![root.clone(), entry("f", Kind::File), entry("f", Kind::File)]),
            ("under a file", vec![root.clone(), entry("f", Kind::File), entry("f/g", Kind::File)]),
            (
                "link to nothing",
                vec![root.clone(), {
                    let mut l = entry("l", Kind::Link);
                    l.target = Some("nope".into());
                    l
                }],
            ),
            (
                "piece past the end",
                vec![root.clone(), {
                    let mut f = entry("f", Kind::File);
                    f.size = 4;
                    f.chunk_bytes = 4;
                    f.pieces = vec![Piece { index: 1, len: 1, sha256: sha256(b"a") }];
                    f
                }],
            ),
            (
                "piece with a bad name",
                vec![root.clone(), {
                    let mut f = entry("f", Kind::File);
                    f.size = 4;
                    f.chunk_bytes = 4;
                    f.pieces = vec![Piece { index: 0, len: 1, sha256: "../../x".into() }];
                    f
                }],
            ),
        ];
        for (what, entries) in cases {
            assert!(check_entries(&entries).is_err(), "{what} was accepted");
        }
    }

    #[test]
    fn snapshot_names_are_one_segment() {
        check_name("v1.2-x").unwrap();
        for bad in ["", ".", "..", "a/b", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
