//! The storage service over real TCP: every `StorageOp` through `wire::Connection` against an
//! in-process node, and `run`'s membership with a fake metadata service (registration retried
//! until the service appears, heartbeats, re-registration on `NotMember`, a stable node uuid,
//! refusing another cluster's metadata service).

mod common;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::{serve_on, LocalNode, ShardStore, StorageConfig, StorageService, StoreConfig};
use wire::{
    werr, Connection, ErrorCode, Handler, MetaCall, MetaOp, MetaReply, RpcError, Service, ShardKey, StorageOp,
    StorageReply, WireError,
};

const T: Duration = Duration::from_secs(10);

async fn call(conn: &Connection, op: StorageOp, data: Bytes) -> Result<(StorageReply, Bytes), RpcError> {
    conn.call::<StorageOp, StorageReply>(&op, data, T).await
}

fn remote_code(r: Result<(StorageReply, Bytes), RpcError>) -> ErrorCode {
    match r {
        Err(RpcError::Remote(e)) => e.code,
        other => panic!("expected a remote error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_delete_list_stat_over_the_network() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig { drives: vec![dir.path().into()], reserve_bytes: 0, keys: None };
    let local = LocalNode::start(config.clone(), "testcluster").await.unwrap();
    let addr = local.addr.clone();
    let (conn, hello) = Connection::connect(&addr, Service::Storage).await.unwrap();
    assert_eq!(hello.cluster, "testcluster");

    let sizes = [0usize, 1, 999, B, 2 * B + 5, 40 * B];
    for (i, &len) in sizes.iter().enumerate() {
        let (info, data) = shard(key(i as u64, 1), len);
        let (reply, _) = call(&conn, StorageOp::PutShard { info: info.clone() }, data.clone()).await.unwrap();
        assert_eq!(reply, StorageReply::Ok);
        let (reply, got) =
            call(&conn, StorageOp::GetShard { key: info.key, offset: 0, len: 0 }, Bytes::new()).await.unwrap();
        assert_eq!(reply, StorageReply::Shard { info: info.clone(), offset: 0 });
        assert!(got == data);
        if len > B {
            let (reply, got) =
                call(&conn, StorageOp::GetShard { key: info.key, offset: B as u32 + 3, len: 10 }, Bytes::new())
                    .await
                    .unwrap();
            assert_eq!(reply, StorageReply::Shard { info: info.clone(), offset: B as u32 });
            assert!(got[..] == data[B..2 * B], "ranged get returns the covering block");
        }
    }
    // Idempotent and conflicting re-puts, damaged upload, missing shard.
    let (info, data) = shard(key(3, 1), B);
    assert_eq!(
        call(&conn, StorageOp::PutShard { info: info.clone() }, data.clone()).await.unwrap().0,
        StorageReply::Ok
    );
    let (other, other_data) = shard(key(3, 1), 10);
    assert_eq!(remote_code(call(&conn, StorageOp::PutShard { info: other }, other_data).await), ErrorCode::Exists);
    let (info, data) = shard(key(100, 0), 3000);
    let mut damaged = data.to_vec();
    damaged[1234] ^= 4;
    assert_eq!(
        remote_code(call(&conn, StorageOp::PutShard { info: info.clone() }, damaged.into()).await),
        ErrorCode::Corrupt
    );
    let get_missing = StorageOp::GetShard { key: info.key, offset: 0, len: 0 };
    assert_eq!(remote_code(call(&conn, get_missing, Bytes::new()).await), ErrorCode::NotFound);

    // Many requests in flight on one connection.
    let mut tasks = Vec::new();
    for i in 0..64u64 {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let (info, data) = shard(key(1000 + i, 0), (i as usize * 4099) % (3 * B));
            call(&conn, StorageOp::PutShard { info: info.clone() }, data.clone()).await.unwrap();
            let (_, got) =
                call(&conn, StorageOp::GetShard { key: info.key, offset: 0, len: 0 }, Bytes::new()).await.unwrap();
            assert!(got == data);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    // List in pages.
    let mut listed: Vec<ShardKey> = Vec::new();
    let mut after = None;
    loop {
        let (reply, _) = call(&conn, StorageOp::ListShards { after, limit: 10 }, Bytes::new()).await.unwrap();
        let StorageReply::Keys(keys) = reply else { panic!("unexpected {reply:?}") };
        let Some(&last) = keys.last() else { break };
        listed.extend(keys);
        after = Some(last);
    }
    assert_eq!(listed.len(), sizes.len() + 64);
    assert!(listed.windows(2).all(|w| w[0] < w[1]));

    let keys = vec![key(0, 1), key(1, 1), key(555, 5)];
    let (reply, _) = call(&conn, StorageOp::DeleteShards { keys: keys.clone() }, Bytes::new()).await.unwrap();
    assert_eq!(reply, StorageReply::Deleted { count: 2 });
    let (reply, _) = call(&conn, StorageOp::DeleteShards { keys }, Bytes::new()).await.unwrap();
    assert_eq!(reply, StorageReply::Deleted { count: 0 });

    let (reply, _) = call(&conn, StorageOp::Stat, Bytes::new()).await.unwrap();
    let StorageReply::Stat { node, drives } = reply else { panic!("unexpected {reply:?}") };
    assert_eq!(node, 0, "not registered");
    assert_eq!(drives.len(), 1);
    assert_eq!(drives[0].shards, (sizes.len() + 64 - 2) as u64);
    assert_eq!(drives[0].path, dir.path().display().to_string());
    assert!(drives[0].bytes_total > 0 && drives[0].error.is_empty());

    // A client that dialled the storage port for the metadata service gets a clear error.
    let err = Connection::connect(&addr, Service::Meta).await.err().expect("wrong service refused");
    assert!(err.to_string().contains("Storage"), "{err}");

    // Stopping releases the drive even while a client keeps its connection open.
    local.stop().await;
    let list = StorageOp::ListShards { after: None, limit: 1 };
    assert_eq!(remote_code(call(&conn, list, Bytes::new()).await), ErrorCode::Unavailable);
    ShardStore::open(&config).expect("drive released after stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_runs_a_node_from_an_open_store() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        ShardStore::open(&StoreConfig { drives: vec![dir.path().into()], reserve_bytes: 0, keys: None }).unwrap();
    let service = Arc::new(StorageService::new(Arc::new(store)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve_on(listener, service, "c".into()));
    let (conn, _) = Connection::connect(&addr, Service::Storage).await.unwrap();
    let (info, data) = shard(key(1, 0), 10);
    assert_eq!(call(&conn, StorageOp::PutShard { info }, data).await.unwrap().0, StorageReply::Ok);
    server.abort();
}

/// A metadata service that records registrations and heartbeats, and answers `NotMember` to
/// one heartbeat when asked to.
#[derive(Default)]
struct FakeMeta {
    registrations: Mutex<Vec<(u128, u128, String, usize)>>,
    heartbeats: AtomicU32,
    not_member_at: AtomicU32,
}

#[async_trait]
impl Handler for FakeMeta {
    type Req = MetaCall;
    type Reply = MetaReply;

    async fn handle(&self, call: MetaCall, _data: Bytes) -> (Result<MetaReply, WireError>, Bytes) {
        let reply = match call.op {
            MetaOp::RegisterNode { uuid, addr, drives, .. } => {
                assert_ne!(call.request_id, 0, "registration must be idempotent-tracked");
                self.registrations.lock().push((call.request_id, uuid, addr, drives.len()));
                Ok(MetaReply::Node { id: 7, map_version: 3 })
            }
            MetaOp::Heartbeat { node, drives } => {
                assert_eq!(node, 7);
                assert_eq!(drives.len(), 2);
                let n = self.heartbeats.fetch_add(1, Ordering::SeqCst) + 1;
                if n == self.not_member_at.load(Ordering::SeqCst) {
                    Err(werr!(NotMember, "node 7 was removed"))
                } else {
                    Ok(MetaReply::Heartbeat { map_version: 3, bytes_pending_delete: 0, pending_delete_within_ms: 0 })
                }
            }
            other => Err(werr!(NotSupported, "fake meta: {other:?}")),
        };
        (reply, Bytes::new())
    }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn config(dir: &std::path::Path, meta: &str, cluster: &str) -> StorageConfig {
    StorageConfig::from_toml(&format!(
        "listen = \"127.0.0.1:0\"\ndrives = [\"{}\", \"{}\"]\nmeta = \"{meta}\"\ncluster = \"{cluster}\"\nheartbeat_ms = 30\n",
        dir.join("d0").display(),
        dir.join("d1").display()
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_registers_when_meta_appears_heartbeats_and_reregisters() {
    let dir = tempfile::tempdir().unwrap();
    let meta_addr = free_port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(storage::run_until(config(dir.path(), &meta_addr, "c1"), async {
        let _ = stop_rx.await;
    }));

    // The metadata service starts late: the node keeps retrying.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let meta = Arc::new(FakeMeta::default());
    meta.not_member_at.store(4, Ordering::SeqCst);
    let listener = tokio::net::TcpListener::bind(&meta_addr).await.unwrap();
    let meta_server = tokio::spawn(wire::rpc::serve(listener, meta.clone(), Service::Meta, "c1".into()));

    wait_for("registration", || !meta.registrations.lock().is_empty()).await;
    wait_for("re-registration after NotMember", || meta.registrations.lock().len() >= 2).await;
    wait_for("heartbeats after re-registration", || meta.heartbeats.load(Ordering::SeqCst) >= 6).await;
    let regs = meta.registrations.lock().clone();
    assert_eq!(regs[0].1, regs[1].1, "same uuid on re-registration");
    assert_ne!(regs[0].0, regs[1].0, "a new registration uses a new request id");
    assert_eq!(regs[0].3, 2, "registration carries both drives");
    let uuid = regs[0].1;
    let stored = std::fs::read_to_string(dir.path().join("d0/node.uuid")).unwrap();
    assert_eq!(u128::from_str_radix(stored.trim(), 16).unwrap(), uuid);

    // The advertised address serves storage and knows its node id.
    let (conn, hello) = Connection::connect(&regs[0].2, Service::Storage).await.unwrap();
    assert_eq!(hello.cluster, "c1");
    let (reply, _) = call(&conn, StorageOp::Stat, Bytes::new()).await.unwrap();
    assert!(matches!(reply, StorageReply::Stat { node: 7, ref drives } if drives.len() == 2), "{reply:?}");
    drop(conn);

    // Heartbeats continue through a metadata outage.
    meta_server.abort();
    let _ = meta_server.await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop_tx.send(()).unwrap();
    node.await.unwrap().expect("run_until returns cleanly");

    // A restart on the same drives keeps the identity.
    let meta2 = Arc::new(FakeMeta::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let meta2_addr = listener.local_addr().unwrap().to_string();
    let meta2_server = tokio::spawn(wire::rpc::serve(listener, meta2.clone(), Service::Meta, "c1".into()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(storage::run_until(config(dir.path(), &meta2_addr, "c1"), async {
        let _ = stop_rx.await;
    }));
    wait_for("registration after restart", || !meta2.registrations.lock().is_empty()).await;
    assert_eq!(meta2.registrations.lock()[0].1, uuid);
    stop_tx.send(()).unwrap();
    node.await.unwrap().unwrap();
    meta2_server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_another_clusters_metadata_service() {
    let dir = tempfile::tempdir().unwrap();
    let meta = Arc::new(FakeMeta::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let meta_addr = listener.local_addr().unwrap().to_string();
    let meta_server = tokio::spawn(wire::rpc::serve(listener, meta.clone(), Service::Meta, "other".into()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(storage::run_until(config(dir.path(), &meta_addr, "mine"), async {
        let _ = stop_rx.await;
    }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(meta.registrations.lock().is_empty(), "registered with another cluster");
    stop_tx.send(()).unwrap();
    node.await.unwrap().unwrap();
    meta_server.abort();
}

#[tokio::test]
async fn run_fails_clearly_on_a_bad_drive() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let mut config = config(dir.path(), "127.0.0.1:1", "c");
    config.drives[1] = file.join("d1");
    let err = storage::run(config).await.expect_err("bad drive refused");
    assert!(format!("{err:#}").contains(&file.join("d1").display().to_string()), "{err:#}");
}

#[test]
fn config_parses_with_defaults_and_rejects_mistakes() {
    let c =
        StorageConfig::from_toml("listen = \"0.0.0.0:7101\"\ndrives = [\"/d0\"]\nmeta = \"m:7001\"\ncluster = \"x\"\n")
            .unwrap();
    assert_eq!(c.heartbeat_ms, 1000);
    assert_eq!(c.reserve_bytes, 0);
    assert_eq!(c.advertise, None);
    let full = "listen = \"0.0.0.0:7101\"\nadvertise = \"10.0.0.5:7101\"\ndrives = [\"/d0\", \"/d1\"]\nmeta = \"m:7001\"\ncluster = \"x\"\nreserve_bytes = 1_000_000\nheartbeat_ms = 250\n";
    let c = StorageConfig::from_toml(full).unwrap();
    assert_eq!(c.advertise.as_deref(), Some("10.0.0.5:7101"));
    assert_eq!((c.reserve_bytes, c.heartbeat_ms, c.drives.len()), (1_000_000, 250, 2));
    assert!(StorageConfig::from_toml(&format!("{full}typo_field = 1\n")).is_err());
    assert!(StorageConfig::from_toml("listen = \"a\"\ndrives = []\nmeta = \"m\"\ncluster = \"x\"\n").is_err());
    assert!(
        StorageConfig::from_toml("listen = \"a\"\ndrives = [\"/d\", \"/d\"]\nmeta = \"m\"\ncluster = \"x\"\n").is_err()
    );
}
