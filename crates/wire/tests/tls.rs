//! The transport in TLS: who gets through, what role the server sees, what each refusal says,
//! large calls through the encrypted outbox, and a credential replaced under a running server.

use async_trait::async_trait;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wire::pki::Authority;
use wire::rpc::{current_role, serve_with};
use wire::tls::{Role, TlsChoice, TlsContext};
use wire::{Connection, Handler, RpcError, Service, StorageOp, StorageReply, WireError};

/// Answers with the caller's role as a number (0: plaintext) and the request's data.
struct WhoAsks;

#[async_trait]
impl Handler for WhoAsks {
    type Req = StorageOp;
    type Reply = StorageReply;
    async fn handle(&self, _req: StorageOp, data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        let count = match current_role() {
            None => 0,
            Some(Role::Node) => 1,
            Some(Role::Admin) => 2,
            Some(Role::Client) => 3,
            Some(Role::Gateway) => 4,
        };
        (Ok(StorageReply::Deleted { count }), data)
    }
}

/// Two clusters' authorities and credentials in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ours: Authority,
    theirs: Authority,
}

impl Pki {
    fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().expect("tempdir"),
            ours: Authority::create("ours").expect("authority"),
            theirs: Authority::create("theirs").expect("authority"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A credential of our cluster.
    fn ours(&self, role: Role, name: &str) -> Arc<TlsContext> {
        let out = self.path(name);
        self.ours.issue(role, name, self.ours.cert_pem(), &out).expect("issue");
        TlsContext::load(&out).expect("load")
    }
}

async fn server(tls: Option<Arc<TlsContext>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(serve_with(listener, Arc::new(WhoAsks), Service::Storage, "c".into(), TlsChoice::Explicit(tls)));
    addr
}

async fn role_seen(addr: &str, tls: Option<&TlsContext>) -> Result<u32, RpcError> {
    let (conn, _) = Connection::connect_with(addr, Service::Storage, tls).await?;
    let (reply, _) =
        conn.call::<StorageOp, StorageReply>(&StorageOp::Stat, Bytes::new(), Duration::from_secs(10)).await?;
    match reply {
        StorageReply::Deleted { count } => Ok(count),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn refusal(r: Result<u32, RpcError>) -> String {
    match r {
        Ok(role) => panic!("the connection was let through (role {role})"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn only_credentials_of_the_cluster_get_through_and_the_server_sees_their_role() {
    let pki = Pki::new();
    let addr = server(Some(pki.ours(Role::Node, "node"))).await;
    assert_eq!(role_seen(&addr, Some(&pki.ours(Role::Node, "peer"))).await.expect("node"), 1);
    assert_eq!(role_seen(&addr, Some(&pki.ours(Role::Admin, "admin"))).await.expect("admin"), 2);
    assert_eq!(role_seen(&addr, Some(&pki.ours(Role::Client, "client"))).await.expect("client"), 3);
    assert_eq!(role_seen(&addr, Some(&pki.ours(Role::Gateway, "s3gw"))).await.expect("gateway"), 4);

    // Plaintext: the server answers with a TLS alert, and the client says so.
    let e = refusal(role_seen(&addr, None).await);
    assert!(e.contains("answers like a TLS server") && e.contains("credential"), "{e}");

    // Another cluster's credential: its client rejects our server's certificate.
    let other = pki.path("other");
    pki.theirs.issue(Role::Admin, "intruder", pki.theirs.cert_pem(), &other).expect("issue");
    let e = refusal(role_seen(&addr, Some(&TlsContext::load(&other).expect("load"))).await);
    assert!(e.contains("TLS handshake failed") && e.contains("another cluster"), "{e}");

    // Another cluster's certificate that trusts ours too: our server rejects its certificate.
    let sneaky = pki.path("sneaky");
    let both = format!("{}{}", pki.ours.cert_pem(), pki.theirs.cert_pem());
    pki.theirs.issue(Role::Admin, "sneaky", &both, &sneaky).expect("issue");
    let e = refusal(role_seen(&addr, Some(&TlsContext::load(&sneaky).expect("load"))).await);
    assert!(e.contains("TLS handshake failed") && e.contains("refused this process's certificate"), "{e}");
}

#[tokio::test]
async fn a_tls_client_is_told_when_the_server_is_plaintext_or_not_a_node() {
    let pki = Pki::new();
    let plain = server(None).await;
    let e = refusal(role_seen(&plain, Some(&pki.ours(Role::Admin, "admin"))).await);
    assert!(e.contains("TLS handshake failed") && e.contains("without TLS"), "{e}");
    assert_eq!(role_seen(&plain, None).await.expect("plaintext to plaintext"), 0);

    // A server holding a client certificate cannot pose as a node.
    let posing = server(Some(pki.ours(Role::Client, "posing"))).await;
    let e = refusal(role_seen(&posing, Some(&pki.ours(Role::Admin, "admin2"))).await);
    assert!(e.contains("not a node certificate"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_calls_in_flight_together_come_back_whole_through_tls() {
    let pki = Pki::new();
    let addr = server(Some(pki.ours(Role::Node, "node"))).await;
    let ctx = pki.ours(Role::Client, "client");
    let (conn, _) = Connection::connect_with(&addr, Service::Storage, Some(&ctx)).await.expect("connect");
    // Small calls (sent at once by the task that sends them, both ways) between large ones
    // (queued for the connection's writer task).
    let calls: Vec<_> = (0..96usize)
        .map(|i| {
            let conn = conn.clone();
            tokio::spawn(async move {
                let len = if i % 2 == 0 { (i * 7_919) % 60_000 } else { (i * 104_729) % (3 << 20) + i };
                let sent = Bytes::from((0..len).map(|j| (j.wrapping_mul(31) ^ i) as u8).collect::<Vec<u8>>());
                let (_, got) = conn
                    .call::<StorageOp, StorageReply>(&StorageOp::Stat, sent.clone(), Duration::from_secs(60))
                    .await
                    .expect("call");
                assert!(got == sent, "call {i}: {} bytes back for {}", got.len(), sent.len());
            })
        })
        .collect();
    for c in calls {
        c.await.expect("caller");
    }
    assert!(!conn.is_dead());
    // Dropping the connection closes the session: the server's side ends, and a new one works.
    drop(conn);
    assert_eq!(role_seen(&addr, Some(&ctx)).await.expect("again"), 3);
}

fn copy_credential(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for f in [wire::tls::CA_FILE, wire::tls::CERT_FILE, wire::tls::KEY_FILE] {
        std::fs::copy(from.join(f), to.join(f)).expect("copy");
    }
}

#[tokio::test]
async fn a_server_takes_a_replaced_credential_for_its_next_connections() {
    let pki = Pki::new();
    let serving = pki.path("serving");
    pki.ours.issue(Role::Node, "node", pki.ours.cert_pem(), &serving).expect("issue");
    let ctx = TlsContext::load(&serving).expect("load");
    ctx.watch();
    let addr = server(Some(ctx.clone())).await;
    let ours = pki.ours(Role::Admin, "admin");
    assert_eq!(role_seen(&addr, Some(&ours)).await.expect("before"), 2);
    let (kept, _) = Connection::connect_with(&addr, Service::Storage, Some(&ours)).await.expect("connect");

    // The server's credential is replaced by one of the other authority.
    let next = pki.path("next");
    pki.theirs.issue(Role::Node, "node", pki.theirs.cert_pem(), &next).expect("issue");
    copy_credential(&next, &serving);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if role_seen(&addr, Some(&ours)).await.is_err() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the replaced credential was never loaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let theirs_dir = pki.path("theirs-admin");
    pki.theirs.issue(Role::Admin, "admin", pki.theirs.cert_pem(), &theirs_dir).expect("issue");
    assert_eq!(role_seen(&addr, Some(&TlsContext::load(&theirs_dir).expect("load"))).await.expect("after"), 2);
    // The connection made before keeps working.
    kept.call::<StorageOp, StorageReply>(&StorageOp::Stat, Bytes::new(), Duration::from_secs(10)).await.expect("kept");

    // A half-written credential (a key that does not fit) leaves the loaded one in use.
    std::fs::copy(pki.path("admin").join(wire::tls::KEY_FILE), serving.join(wire::tls::KEY_FILE)).expect("copy");
    assert!(ctx.reload_if_changed().is_err());
    assert_eq!(role_seen(&addr, Some(&TlsContext::load(&theirs_dir).expect("load"))).await.expect("still"), 2);
}
