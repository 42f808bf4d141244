//! Writes a starting corpus for every fuzz target into `<dir>/<target>/`, made with the
//! product's own encoders (valid frames, shard files, log records, requests, TFRecords and
//! JPEGs of several sizes), so the fuzzer starts from inputs that pass the outer checks instead
//! of having to discover magic numbers and checksums. `bench/fuzz.sh` runs it before fuzzing.

use bytes::BytesMut;
use std::path::{Path, PathBuf};
use wire::frame::{self, FrameKind};
use wire::{EcScheme, Hello, Service, ShardInfo, ShardKey, StorageOp};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    std::fs::write(dir.join(name), bytes).unwrap_or_else(|e| panic!("cannot write a seed into {}: {e}", dir.display()));
}

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: seeds <corpus directory>");
        std::process::exit(2);
    };
    let hello = Hello {
        magic: *b"TROV",
        version_min: 1,
        version_max: wire::PROTOCOL_VERSION,
        service: Service::Storage,
        cluster: "seed".into(),
    };
    let hello_body = postcard::to_allocvec(&hello).expect("encodable");
    let key = ShardKey { chunk: 0x1181, index: 1 };
    let get = postcard::to_allocvec(&StorageOp::GetShard { key, offset: 4096, len: 4096 }).expect("encodable");
    let data = vec![7u8; 70_000];
    let info = ShardInfo {
        key,
        ec: EcScheme { k: 4, m: 2 },
        len: data.len() as u32,
        block_crcs: storage::format::block_crcs(&data),
    };
    let put = postcard::to_allocvec(&StorageOp::PutShard { info: info.clone() }).expect("encodable");

    // Frames and message bodies.
    write(&dir, "wire_frame", "hello", &frame::encode(1, FrameKind::Hello, 0, &hello_body, 0));
    let mut request = frame::encode(wire::PROTOCOL_VERSION, FrameKind::Request, 9, &put, 5);
    request.extend_from_slice(b"shard");
    write(&dir, "wire_frame", "request-with-data", &request);
    // TLS records after the handshake (fuzz_targets/tls_records.rs): inner plaintexts to seal
    // (data; a key update then data; a close_notify alert), and one raw record header.
    let inner = |parts: &[&[u8]]| -> Vec<u8> {
        let mut out = vec![0u8];
        for p in parts {
            out.extend_from_slice(&(p.len() as u16).to_be_bytes());
            out.extend_from_slice(p);
        }
        out
    };
    write(&dir, "tls_records", "data", &inner(&[b"hello frames\x17", b"more\x17\0\0\0"]));
    write(&dir, "tls_records", "key-update", &inner(&[&[24, 0, 0, 1, 1, 22], b"after\x17"]));
    write(&dir, "tls_records", "close", &inner(&[b"data\x17", &[1, 0, 21], b"ignored\x17"]));
    write(&dir, "tls_records", "raw", &[1, 23, 3, 3, 0, 40, 1, 2, 3]);
    write(&dir, "wire_messages", "hello", &hello_body);
    write(&dir, "wire_messages", "get-shard", &get);
    write(&dir, "wire_messages", "put-shard", &put);

    // A whole shard file.
    let mut file = storage::format::encode_header(&info);
    file.extend_from_slice(&data);
    write(&dir, "shard_file", "shard-70000", &file);
    // The same shard sealed with the data key the target opens sealed files with, and a
    // keyring wrapped by the key-encryption key it opens keyrings with (0x42 bytes, both).
    let data_key = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &[0x42; 32]).expect("a 32-byte key"),
    );
    let (mut sealed, stored) = storage::format::encode_sealed(&info, &data, 1, &data_key, [9; 8]);
    sealed.extend_from_slice(&stored);
    write(&dir, "shard_file", "sealed-70000", &sealed);
    let drive = std::env::temp_dir().join(format!("trove-seed-keyring-{}", std::process::id()));
    std::fs::create_dir_all(&drive).expect("temp dir");
    let kek = storage::crypt::Kek::parse_hex(&"42".repeat(32)).expect("a valid key");
    storage::crypt::Keyring::open_or_create(&drive, &kek).expect("keyring");
    let keyring = std::fs::read(drive.join(storage::crypt::KEYRING_FILE)).expect("keyring file");
    write(&dir, "shard_file", "keyring", &keyring);
    let _ = std::fs::remove_dir_all(&drive);

    // Client disk cache files: a 4+2 chunk with a padded last shard, and a mirrored small one.
    for (name, len, k) in [("chunk-4", 200_000usize, 4u8), ("chunk-1", 70_000, 1)] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let shard_len = EcScheme { k, m: 2 }.shard_len(len as u32);
        let (image, _) = client::disk_cache::encode_file(0x77, len as u32, k, shard_len, &[bytes.into()]);
        write(&dir, "disk_cache_file", name, &image);
    }

    // Write-ahead log records after checkpoint 2: mode byte, applied (u64 LE), records.
    let mut wal = vec![0u8];
    wal.extend_from_slice(&2u64.to_le_bytes());
    let (k1, v1, k2) = (b"i/\x00\x00\x00\x01".to_vec(), b"inode record".to_vec(), b"d/\x01/name".to_vec());
    kv_redb::fuzzing::wal_encode(3, &[(k1, Some(v1)), (k2.clone(), None)], &mut wal);
    kv_redb::fuzzing::wal_encode(4, &[(k2, Some(b"42".to_vec()))], &mut wal);
    write(&dir, "kv_wal", "two-records", &wal);

    // S3 requests: method byte (0 GET, 1 PUT, 2 POST, 3 DELETE, 4 HEAD, 5 OPTIONS; / 8 % 3
    // picks the anonymous policy), target, headers, empty line, body.
    let requests: [(&str, u8, &str); 7] = [
        ("list-v2", 16, "b?list-type=2&prefix=a/&delimiter=/&max-keys=5\nhost: localhost:9000\n\n"),
        ("delete-objects", 18, "b?delete\ncontent-type: application/xml\n\n<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object><Object><Key>b/c</Key><VersionId>null</VersionId></Object></Delete>"),
        ("complete-upload", 18, "b/k?uploadId=abc\n\n<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part></CompleteMultipartUpload>"),
        ("cors", 17, "b?cors\n\n<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><MaxAgeSeconds>60</MaxAgeSeconds></CORSRule></CORSConfiguration>"),
        ("signed-get", 0, "b/k\nhost: localhost:9000\nx-amz-date: 20261127T120000Z\nx-amz-content-sha256: UNSIGNED-PAYLOAD\nauthorization: AWS4-HMAC-SHA256 Credential=AKIDFUZZ/20261127/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n\n"),
        ("presigned-get", 0, "b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDFUZZ%2F20261127%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261127T120000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=00\nhost: localhost:9000\n\n"),
        ("put-checksum", 17, "b/k\ncontent-md5: 1B2M2Y8AsgTpgAmY7PhCfg==\nx-amz-checksum-crc32c: AAAAAA==\nif-none-match: *\nx-amz-meta-a: b\n\nbody"),
    ];
    for (name, method, text) in requests {
        let mut input = vec![method];
        input.extend_from_slice(text.as_bytes());
        write(&dir, "s3_request", name, &input);
    }

    // Bucket policies: the resource key asked about, a newline, the policy's JSON.
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Sid":"NoDeletes","Effect":"Deny","Principal":"*","Action":["s3:DeleteObject"],"Resource":"arn:aws:s3:::data/*"},{"Effect":"Deny","Principal":{"AWS":["arn:aws:iam::acme:user/bob","carol","arn:aws:iam::acme:root"]},"Action":"s3:Get*","Resource":["arn:aws:s3:::data/a/?/*","arn:aws:s3:::data"]}]}"#;
    write(&dir, "bucket_policy", "deny-two", format!("a/b/c.bin\n{policy}").as_bytes());

    // TFRecords: a raw framed stream (mode 0), and payloads to be framed (mode 1).
    let image = vision::encode_jpeg(&vision::synth_image(1, 24, 16), 80).expect("encodes");
    let mut stream = BytesMut::new();
    bench::tfrecord::frame_into(&mut stream, &bench::tfrecord::image_example(&image, 7));
    bench::tfrecord::frame_into(&mut stream, &bench::tfrecord::example(b"raw", 3));
    let mut raw = vec![0u8, 13];
    raw.extend_from_slice(&stream);
    write(&dir, "tfrecord", "framed", &raw);
    let mut payloads = vec![1u8, 64];
    payloads.extend_from_slice(&bench::tfrecord::image_example(b"jpeg bytes", 1));
    write(&dir, "tfrecord", "payload", &payloads);

    // JPEGs: size bytes, seed, flags, then the file.
    for (i, (w, h, q)) in [(8, 8, 90), (33, 17, 75), (64, 48, 95), (200, 120, 60)].into_iter().enumerate() {
        let jpeg = vision::encode_jpeg(&vision::synth_image(i as u64, w, h), q).expect("encodes");
        let mut input = vec![16, 12, i as u8, i as u8];
        input.extend_from_slice(&jpeg);
        write(&dir, "jpeg", &format!("{w}x{h}"), &input);
    }
}
