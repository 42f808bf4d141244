//! Helpers shared by the metadata service's integration tests: a service on a redb engine in a
//! temporary directory (or on PostgreSQL: `env_postgres`), short-hand calls, and a fake storage
//! node that records deletions.
#![allow(dead_code)]

use bytes::Bytes;
use kv::KvEngine;
use meta::{MetaOptions, MetaService};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tempfile::TempDir;
use tokio::net::TcpListener;
use wire::{
    Attr, ChunkId, ChunkRecord, DriveInfo, EcScheme, ErrorCode, FileKind, Ino, MetaCall, MetaOp, MetaReply, MetaResult,
    Placement, Service, ShardKey, StorageOp, StorageReply, Timestamp, WireError,
};

/// A service on a fresh redb file; the directory lives as long as this.
pub struct Env {
    pub dir: TempDir,
    pub svc: Arc<MetaService>,
}

pub mod cases;

pub fn test_options() -> MetaOptions {
    MetaOptions { gc_grace_ms: 0, clock_skew_max_ms: 100, ..MetaOptions::default() }
}

pub async fn open_engine(dir: &TempDir) -> Arc<dyn KvEngine> {
    let engine = kv_redb::RedbEngine::open(dir.path().join("meta.redb")).unwrap_or_else(|e| panic!("open redb: {e}"));
    Arc::new(engine)
}

pub async fn env() -> Env {
    env_with(test_options()).await
}

/// A service on empty tables of a fresh schema of the PostgreSQL test server
/// (`kv_postgres::test_server`: `TROVE_TEST_POSTGRES_URL`, or a server this test binary starts).
/// `dir` is an unused temporary directory.
pub async fn env_postgres() -> Env {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let engine: Arc<dyn KvEngine> = Arc::new(kv_postgres::test_server::fresh_engine("meta").await);
    let svc = MetaService::new(engine, test_options())
        .await
        .unwrap_or_else(|e| panic!("MetaService::new on PostgreSQL: {e}"));
    Env { dir, svc }
}

pub async fn env_with(options: MetaOptions) -> Env {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let engine = open_engine(&dir).await;
    let svc = MetaService::new(engine, options).await.unwrap_or_else(|e| panic!("MetaService::new: {e}"));
    Env { dir, svc }
}

/// A fresh non-zero request id.
pub fn rid() -> u128 {
    rand::random::<u128>() | 1
}

/// Calls with a fresh request id.
pub async fn call(svc: &MetaService, op: MetaOp) -> MetaResult {
    svc.call(MetaCall { request_id: rid(), op }).await
}

/// Calls and expects success.
pub async fn ok(svc: &MetaService, op: MetaOp) -> MetaReply {
    let shown = format!("{op:?}");
    call(svc, op).await.unwrap_or_else(|e| panic!("{shown}: {:?} {}", e.code, e.message))
}

/// Calls and expects failure with `code`; returns the message.
pub async fn err(svc: &MetaService, op: MetaOp, code: ErrorCode) -> String {
    let shown = format!("{op:?}");
    match call(svc, op).await {
        Ok(reply) => panic!("{shown}: expected {code:?}, got {reply:?}"),
        Err(WireError { code: got, message }) => {
            assert_eq!(got, code, "{shown}: {message}");
            message
        }
    }
}

pub fn attr_of(reply: MetaReply) -> Attr {
    match reply {
        MetaReply::Attr(attr) | MetaReply::Entry { attr, .. } => attr,
        other => panic!("expected an Attr or Entry reply, got {other:?}"),
    }
}

pub async fn create(svc: &MetaService, parent: Ino, name: &str) -> Attr {
    let op = MetaOp::Create { parent, name: name.into(), mode: 0o644, uid: 1, gid: 2, exclusive: true };
    attr_of(ok(svc, op).await)
}

pub async fn mkdir(svc: &MetaService, parent: Ino, name: &str) -> Attr {
    attr_of(ok(svc, MetaOp::Mkdir { parent, name: name.into(), mode: 0o755, uid: 1, gid: 2 }).await)
}

pub async fn getattr(svc: &MetaService, ino: Ino) -> Attr {
    attr_of(ok(svc, MetaOp::GetAttr { ino }).await)
}

pub async fn lookup(svc: &MetaService, parent: Ino, name: &str) -> MetaResult {
    call(svc, MetaOp::Lookup { parent, name: name.into() }).await
}

/// Every entry name of a directory, through paged ReadDir.
pub async fn list(svc: &MetaService, ino: Ino) -> Vec<String> {
    let mut names = Vec::new();
    let mut after = String::new();
    loop {
        match ok(svc, MetaOp::ReadDir { ino, after: after.clone(), limit: 1024 }).await {
            MetaReply::Entries { entries, more } => {
                names.extend(entries.iter().map(|e| e.name.clone()));
                match entries.last() {
                    Some(last) if more => after = last.name.clone(),
                    _ => return names,
                }
            }
            other => panic!("ReadDir: {other:?}"),
        }
    }
}

/// A chunk record as a client would commit it after writing its shards.
pub fn chunk(index: u64, id: ChunkId, len: u32, ec: EcScheme, placement: Placement) -> ChunkRecord {
    ChunkRecord {
        index,
        id,
        len,
        ec,
        shard_len: ec.shard_len(len),
        placement,
        table_crcs: vec![0; ec.width()],
        missing: 0,
    }
}

pub fn commit(ino: Ino, chunks: Vec<ChunkRecord>, size: u64) -> MetaOp {
    MetaOp::CommitChunks { ino, chunks, size, set_size: false, mtime: Timestamp::now() }
}

/// Number of keys under a one-byte prefix, read straight from the engine.
pub async fn count_keys(svc: &MetaService, prefix: u8) -> usize {
    let engine = svc.engine().clone();
    let mut txn = engine.begin().await.unwrap_or_else(|e| panic!("begin: {e}"));
    let start = [prefix];
    let pairs = txn.scan(&start, &kv::prefix_end(&start), usize::MAX).await.unwrap_or_else(|e| panic!("scan: {e}"));
    pairs.len()
}

/// Writes one raw key straight into the engine.
pub async fn put_raw(svc: &MetaService, key: &[u8], value: &[u8]) {
    let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("begin: {e}"));
    txn.put(key, value).await.unwrap_or_else(|e| panic!("put: {e}"));
    txn.commit().await.unwrap_or_else(|e| panic!("commit: {e}"));
}

pub fn drive(bytes_total: u64, bytes_free: u64) -> DriveInfo {
    drive_on(0, bytes_total, bytes_free)
}

/// A drive on file system `device` (0: unknown).
pub fn drive_on(device: u64, bytes_total: u64, bytes_free: u64) -> DriveInfo {
    DriveInfo { path: "/d0".into(), bytes_total, bytes_free, shards: 0, error: String::new(), device }
}

/// A storage node that only records `DeleteShards` calls (and can be told to fail them).
#[derive(Default)]
pub struct FakeStorage {
    pub deleted: Mutex<Vec<ShardKey>>,
    pub failing: AtomicBool,
}

#[async_trait::async_trait]
impl wire::Handler for FakeStorage {
    type Req = StorageOp;
    type Reply = StorageReply;

    async fn handle(&self, req: StorageOp, _data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        let reply = match req {
            _ if self.failing.load(Ordering::SeqCst) => Err(wire::werr!(Io, "drive failed")),
            StorageOp::DeleteShards { keys } => {
                let count = keys.len() as u32;
                self.deleted.lock().extend(keys);
                Ok(StorageReply::Deleted { count })
            }
            other => Err(wire::werr!(NotSupported, "fake storage: {other:?}")),
        };
        (reply, Bytes::new())
    }
}

/// Starts a fake storage node; returns it and its address.
pub async fn fake_storage() -> (Arc<FakeStorage>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("addr: {e}")).to_string();
    let storage = Arc::new(FakeStorage::default());
    tokio::spawn(wire::rpc::serve(listener, storage.clone(), Service::Storage, String::new()));
    (storage, addr)
}

/// Registers a node; returns its id.
pub async fn register(svc: &MetaService, uuid: u128, addr: &str) -> u32 {
    let op = MetaOp::RegisterNode {
        uuid,
        addr: addr.into(),
        drives: vec![drive(1 << 40, 1 << 39)],
        pool: String::new(),
        object: None,
    };
    match ok(svc, op).await {
        MetaReply::Node { id, .. } => id,
        other => panic!("RegisterNode: {other:?}"),
    }
}

pub fn is_kind(attr: &Attr, kind: FileKind) -> bool {
    attr.kind == kind
}
