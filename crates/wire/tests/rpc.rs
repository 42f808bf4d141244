//! The transport under load: many calls in flight on one connection, with data sections large
//! enough that frames do not fit into the socket at once (written partly by the sending task,
//! the rest by the connection's writer task), come back whole, in their own replies.

use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use wire::{Connection, Handler, Service, StorageOp, StorageReply, WireError};

/// Answers every request with its own data, after a pause that depends on it, so replies come
/// back out of order.
struct Echo;

#[async_trait]
impl Handler for Echo {
    type Req = StorageOp;
    type Reply = StorageReply;
    async fn handle(&self, _req: StorageOp, data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        tokio::time::sleep(Duration::from_micros(u64::from(data.first().copied().unwrap_or(0)) * 20)).await;
        (Ok(StorageReply::Deleted { count: data.len() as u32 }), data)
    }
}

fn payload(i: usize) -> Bytes {
    // Sizes from a few bytes to 3 MiB: several socket buffers' worth.
    let len = (i * 7919) % (3 << 20) + i % 5;
    Bytes::from((0..len).map(|j| (j.wrapping_mul(31) ^ i) as u8).collect::<Vec<u8>>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_calls_on_one_connection_come_back_whole() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(wire::rpc::serve(listener, Arc::new(Echo), Service::Storage, "test".into()));
    let (conn, _) = Connection::connect(&addr, Service::Storage).await.expect("connect");
    let calls = (0..96).map(|i| {
        let conn: Connection = conn.clone();
        tokio::spawn(async move {
            let sent = payload(i);
            let (reply, got) = conn
                .call::<StorageOp, StorageReply>(&StorageOp::Stat, sent.clone(), Duration::from_secs(60))
                .await
                .expect("call");
            assert_eq!(reply, StorageReply::Deleted { count: sent.len() as u32 });
            assert!(got == sent, "call {i}: {} bytes came back for {} sent, or different ones", got.len(), sent.len());
        })
    });
    for c in futures_join(calls.collect()).await {
        c.expect("caller task");
    }
    assert!(!conn.is_dead());
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) -> Vec<Result<(), tokio::task::JoinError>> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await);
    }
    out
}

/// Answers `GetShard` with blocking work on the blocking pool (`handle_blocking`): each waits
/// until `together` of them run at once (or gives up after a while), then echoes a payload
/// named by the request's offset. Everything else takes `handle`'s way.
struct Blocking {
    running: Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>,
    together: usize,
}

#[async_trait]
impl Handler for Blocking {
    type Req = StorageOp;
    type Reply = StorageReply;
    async fn handle(&self, req: StorageOp, _data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        match req {
            StorageOp::Stat => (Ok(StorageReply::Deleted { count: 0 }), Bytes::new()),
            other => {
                (Err(WireError::new(wire::ErrorCode::Internal, format!("{other:?} reached handle"))), Bytes::new())
            }
        }
    }

    fn handle_blocking(&self, req: &StorageOp) -> Option<wire::BlockingAnswer<StorageReply>> {
        let StorageOp::GetShard { offset, .. } = *req else {
            return None;
        };
        let running = self.running.clone();
        let together = self.together;
        Some(Box::new(move || {
            let (count, arrived) = &*running;
            let mut n = count.lock().expect("lock");
            *n += 1;
            arrived.notify_all();
            let (n, _) = arrived.wait_timeout_while(n, Duration::from_secs(10), |n| *n < together).expect("lock");
            let all_at_once = *n >= together;
            drop(n);
            let data = payload(offset as usize);
            (Ok(StorageReply::Deleted { count: u32::from(all_at_once) }), data)
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_answers_of_one_connection_run_at_once_and_come_back_whole() {
    let together = 12;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let running = Arc::new((std::sync::Mutex::new(0), std::sync::Condvar::new()));
    let handler = Arc::new(Blocking { running, together });
    tokio::spawn(wire::rpc::serve(listener, handler, Service::Storage, "test".into()));
    let (conn, _) = Connection::connect(&addr, Service::Storage).await.expect("connect");
    let key = wire::ShardKey { chunk: 1, index: 0 };
    let calls = (0..together).map(|i| {
        let conn: Connection = conn.clone();
        tokio::spawn(async move {
            // Payloads up to 3 MiB: the blocking threads' sends fill the socket, and the
            // connection's writer task sends the rest.
            let offset = (i * 100_003) as u32;
            let (reply, got) = conn
                .call::<StorageOp, StorageReply>(
                    &StorageOp::GetShard { key, offset, len: 0 },
                    Bytes::new(),
                    Duration::from_secs(60),
                )
                .await
                .expect("call");
            assert_eq!(reply, StorageReply::Deleted { count: 1 }, "call {i} did not run with the others");
            assert!(got == payload(offset as usize), "call {i}: {} bytes came back, or different ones", got.len());
        })
    });
    for c in futures_join(calls.collect()).await {
        c.expect("caller task");
    }
    // What the handler does not answer with blocking work still reaches `handle`.
    let (reply, _) = conn
        .call::<StorageOp, StorageReply>(&StorageOp::Stat, Bytes::new(), Duration::from_secs(10))
        .await
        .expect("stat");
    assert_eq!(reply, StorageReply::Deleted { count: 0 });
    assert!(!conn.is_dead());
}

/// Answers `Stat` at once, panics on `DeleteShards`, and makes every other request wait until
/// it is told to go (a `Notify`, whose waiter is registered at each poll).
struct Waits {
    go: Arc<tokio::sync::Notify>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl Handler for Waits {
    type Req = StorageOp;
    type Reply = StorageReply;
    async fn handle(&self, req: StorageOp, data: Bytes) -> (Result<StorageReply, WireError>, Bytes) {
        match req {
            StorageOp::Stat => (Ok(StorageReply::Deleted { count: 0 }), data),
            StorageOp::DeleteShards { .. } => panic!("a handler's bug"),
            _ => {
                let notified = self.go.notified();
                tokio::pin!(notified);
                // Registered before it is counted, so that a `notify_waiters` after the count
                // reaches it.
                notified.as_mut().enable();
                self.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                notified.await;
                (Ok(StorageReply::Deleted { count: 1 }), data)
            }
        }
    }
}

/// Answers that wait are woken and sent while the connection answers others at once, and a
/// handler that panics fails its request with an error instead of leaving it unanswered,
/// while the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_answers_are_sent_when_woken_and_a_panicking_handler_fails_only_its_request() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let go = Arc::new(tokio::sync::Notify::new());
    let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handler = Arc::new(Waits { go: go.clone(), waiting: waiting.clone() });
    tokio::spawn(wire::rpc::serve(listener, handler, Service::Storage, "test".into()));
    let (conn, _) = Connection::connect(&addr, Service::Storage).await.expect("connect");
    let key = wire::ShardKey { chunk: 1, index: 0 };
    let waiters: Vec<_> = (0..8u8)
        .map(|i| {
            let conn: Connection = conn.clone();
            tokio::spawn(async move {
                conn.call::<StorageOp, StorageReply>(
                    &StorageOp::GetShard { key, offset: 0, len: 0 },
                    Bytes::from(vec![i; 100]),
                    Duration::from_secs(20),
                )
                .await
            })
        })
        .collect();
    let start = std::time::Instant::now();
    while waiting.load(std::sync::atomic::Ordering::SeqCst) < 8 {
        assert!(start.elapsed() < Duration::from_secs(10), "the requests did not all arrive");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // While they wait, the connection still answers at once.
    let (reply, back) = conn
        .call::<StorageOp, StorageReply>(&StorageOp::Stat, Bytes::from_static(b"now"), Duration::from_secs(10))
        .await
        .expect("stat while others wait");
    assert_eq!((reply, &back[..]), (StorageReply::Deleted { count: 0 }, &b"now"[..]));
    let e = conn
        .call::<StorageOp, StorageReply>(
            &StorageOp::DeleteShards { keys: vec![key] },
            Bytes::new(),
            Duration::from_secs(10),
        )
        .await
        .expect_err("a panicking handler's request fails");
    assert!(e.to_string().contains("failed answering this request"), "{e}");
    go.notify_waiters();
    for (i, w) in waiters.into_iter().enumerate() {
        let (reply, back) = w.await.expect("caller task").expect("a waiting request is answered once told to go");
        assert_eq!(reply, StorageReply::Deleted { count: 1 });
        assert_eq!(&back[..], &vec![i as u8; 100][..]);
    }
    assert!(!conn.is_dead());
}
