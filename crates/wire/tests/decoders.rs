//! The decoders' properties on random and mutated inputs, run in every test pass (the fuzz
//! targets in `fuzz/` explore the same properties with coverage guidance): never panic, and
//! whatever decodes re-encodes to the same value.

use rand::{Rng, SeedableRng};
use wire::*;

fn seed() -> u64 {
    std::env::var("WIRE_DECODER_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random)
}

fn check<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(data: &[u8]) -> bool {
    match postcard::from_bytes::<T>(data) {
        Ok(v) => {
            let bytes = postcard::to_allocvec(&v).expect("encodable");
            let back: T = postcard::from_bytes(&bytes).expect("re-decodes");
            assert_eq!(v, back);
            true
        }
        Err(_) => false,
    }
}

fn samples() -> Vec<Vec<u8>> {
    let attr = Attr {
        ino: 5,
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 2,
        size: 1 << 40,
        nlink: 1,
        rdev: 0,
        atime: Timestamp { secs: 1, nanos: 2 },
        mtime: Timestamp::default(),
        ctime: Timestamp::default(),
        crtime: Timestamp::default(),
        data_version: 9,
        ec: EcScheme::DEFAULT,
        chunk_bytes: CHUNK_BYTES_DEFAULT,
        pool: 2,
    };
    let rec = ChunkRecord {
        index: 3,
        id: 77,
        len: 4096,
        ec: EcScheme::DEFAULT,
        shard_len: 1024,
        placement: Placement { map_version: 2, pg: 17 },
        table_crcs: vec![1, 2, 3, 4, 5, 6],
        missing: 0b10,
    };
    vec![
        postcard::to_allocvec(&MetaCall {
            request_id: 42,
            op: MetaOp::Create { parent: 1, name: "a".into(), mode: 0o644, uid: 0, gid: 0, exclusive: true },
        })
        .unwrap(),
        postcard::to_allocvec(&MetaCall {
            request_id: 0,
            op: MetaOp::CommitChunks {
                ino: 5,
                chunks: vec![rec.clone()],
                size: 9,
                set_size: false,
                mtime: Timestamp::default(),
            },
        })
        .unwrap(),
        postcard::to_allocvec(&MetaResult::Ok(MetaReply::Chunks { attr: attr.clone(), chunks: vec![rec] })).unwrap(),
        postcard::to_allocvec(&MetaResult::Ok(MetaReply::Entries {
            entries: vec![DirEntry { name: "x".into(), attr }],
            more: true,
        }))
        .unwrap(),
        postcard::to_allocvec(&MetaResult::Err(werr!(NotFound, "no such file"))).unwrap(),
        postcard::to_allocvec(&StorageOp::PutShard {
            info: ShardInfo {
                key: ShardKey { chunk: 1, index: 2 },
                ec: EcScheme::DEFAULT,
                len: 10,
                block_crcs: vec![7],
            },
        })
        .unwrap(),
        postcard::to_allocvec(&StorageResult::Ok(StorageReply::Keys(vec![ShardKey { chunk: 3, index: 0 }]))).unwrap(),
    ]
}

#[test]
fn random_and_mutated_bodies_never_panic_and_roundtrip() {
    let seed = seed();
    println!("seed {seed} (set WIRE_DECODER_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let samples = samples();
    let mut decoded = 0;
    for round in 0..20_000 {
        let data: Vec<u8> = if round % 2 == 0 {
            let len = rng.gen_range(0..256);
            (0..len).map(|_| rng.gen()).collect()
        } else {
            let mut d = samples[rng.gen_range(0..samples.len())].clone();
            for _ in 0..rng.gen_range(1..4) {
                if d.is_empty() {
                    break;
                }
                match rng.gen_range(0..3) {
                    0 => {
                        let i = rng.gen_range(0..d.len());
                        d[i] = rng.gen();
                    }
                    1 => d.truncate(rng.gen_range(0..d.len())),
                    _ => {
                        let i = rng.gen_range(0..=d.len());
                        d.insert(i, rng.gen());
                    }
                }
            }
            d
        };
        for ok in [
            check::<Hello>(&data),
            check::<MetaCall>(&data),
            check::<MetaResult>(&data),
            check::<StorageOp>(&data),
            check::<StorageResult>(&data),
        ] {
            decoded += usize::from(ok);
        }
    }
    // Mutations of valid messages must decode sometimes, or the test exercises nothing.
    assert!(decoded > 100, "only {decoded} inputs decoded");
}

#[test]
fn random_and_mutated_frames_never_panic_and_roundtrip() {
    let seed = seed();
    println!("seed {seed} (set WIRE_DECODER_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut good = frame::encode(1, frame::FrameKind::Request, 9, &samples()[0], 5);
    good.extend_from_slice(b"12345");
    for round in 0..20_000 {
        let data: Vec<u8> = if round % 2 == 0 {
            let len = rng.gen_range(0..64);
            let mut d: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if d.len() >= 4 && rng.gen_bool(0.5) {
                d[..4].copy_from_slice(&frame::MAGIC);
            }
            d
        } else {
            let mut d = good.clone();
            let i = rng.gen_range(0..d.len());
            d[i] = rng.gen();
            d
        };
        if let Ok((f, used)) = frame::decode_frame(&data) {
            let mut again = frame::encode(f.header.version, f.header.kind, f.header.request_id, &f.body, f.data.len());
            again.extend_from_slice(&f.data);
            assert_eq!(&again[..], &data[..used]);
        }
    }
}

#[tokio::test]
async fn wrong_service_and_incompatible_version_are_refused_with_clear_errors() {
    struct Echo;
    #[async_trait::async_trait]
    impl Handler for Echo {
        type Req = StorageOp;
        type Reply = StorageReply;
        async fn handle(&self, _req: StorageOp, data: bytes::Bytes) -> (Result<StorageReply, WireError>, bytes::Bytes) {
            (Ok(StorageReply::Ok), data)
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(rpc::serve(listener, std::sync::Arc::new(Echo), Service::Storage, "c".into()));

    let (conn, hello) = Connection::connect(&addr, Service::Storage).await.expect("connects");
    assert_eq!(hello.cluster, "c");
    let (reply, data) = conn
        .call::<StorageOp, StorageReply>(
            &StorageOp::Stat,
            bytes::Bytes::from_static(b"abc"),
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(reply, StorageReply::Ok);
    assert_eq!(&data[..], b"abc");

    let err = Connection::connect(&addr, Service::Meta).await.err().expect("wrong service refused");
    assert!(err.to_string().contains("expected the Meta service"), "{err}");

    // A peer that speaks only a future version gets our version range in the refusal.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let hello = Hello {
        magic: *b"TROV",
        version_min: PROTOCOL_VERSION + 7,
        version_max: PROTOCOL_VERSION + 7,
        service: Service::Storage,
        cluster: String::new(),
    };
    s.write_all(&frame::encode(1, frame::FrameKind::Hello, 0, &postcard::to_allocvec(&hello).unwrap(), 0))
        .await
        .unwrap();
    let f = frame::read_frame(&mut s).await.unwrap().expect("server answers with its hello");
    let theirs: Hello = postcard::from_bytes(&f.body).unwrap();
    assert_eq!((theirs.version_min, theirs.version_max), (PROTOCOL_VERSION_MIN, PROTOCOL_VERSION));
    let mut rest = Vec::new();
    let n = s.read_to_end(&mut rest).await.unwrap_or(0);
    assert_eq!(n, 0, "server closes the connection after refusing");

    // Garbage instead of a hello: the server closes the connection, nothing else happens.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
}

/// A peer that resets the connection during the handshake (a process restarting) is
/// unreachable, not a protocol error: callers retry it or fail over.
#[tokio::test]
async fn reset_during_handshake_is_unreachable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // Linger 0: closing sends RST instead of FIN. (Deprecated because a non-zero linger
            // blocks the thread that drops the socket; a zero one closes at once.)
            #[allow(deprecated)]
            stream.set_linger(Some(std::time::Duration::ZERO)).ok();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            drop(stream);
        }
    });
    for _ in 0..5 {
        let err = Connection::connect(&addr, Service::Storage).await.err().expect("no hello: refused");
        assert!(err.is_unreachable(), "{err:?}");
    }
}
