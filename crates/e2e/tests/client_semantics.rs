//! File semantics of the client library on a real cluster: overwrites (copy-on-write), chunks
//! rewritten before their first version was committed, random writes against a model,
//! truncation and extension, sparse files past 4 GiB, and close-to-open visibility between two
//! clients.

mod common;

use common::{content, files_in, shard_reads_served, TestCluster};

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_truncate_sparse_and_visibility() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let b = cluster.client().await;

    // The same chunk written twice through one handle before any commit.
    let mut h = a.create_path("/twice", 0o644).await.expect("create");
    h.write_at(0, &content(1, 4 * MIB)).await.expect("first");
    h.write_at(0, &content(2, 4 * MIB)).await.expect("second");
    h.close().await.expect("close");
    assert!(b.read_file("/twice").await.expect("read")[..] == content(2, 4 * MIB)[..]);

    // A partial overwrite in the middle of a committed multi-chunk file.
    let mut expect = content(3, 9 * MIB + 5);
    a.write_file("/mid", &expect).await.expect("write");
    let patch = content(4, 3 * MIB);
    let mut h = a.open_path("/mid").await.expect("open");
    h.write_at(3 * MIB as u64 + 17, &patch).await.expect("patch");
    h.close().await.expect("close");
    expect[3 * MIB + 17..6 * MIB + 17].copy_from_slice(&patch);
    assert!(b.read_file("/mid").await.expect("read")[..] == expect[..]);

    // Truncate into a chunk, then extend: the cut bytes read back as zeros.
    let mut h = a.open_path("/mid").await.expect("open");
    h.truncate(5 * MIB as u64 + 3).await.expect("shrink");
    h.truncate(7 * MIB as u64).await.expect("extend");
    h.close().await.expect("close");
    let got = b.read_file("/mid").await.expect("read");
    assert_eq!(got.len(), 7 * MIB);
    assert!(got[..5 * MIB + 3] == expect[..5 * MIB + 3]);
    assert!(got[5 * MIB + 3..].iter().all(|&x| x == 0), "extension reads zeros");

    // A sparse file larger than 4 GiB: holes read as zeros, the tail as written.
    let far = (5u64 << 30) + 12345;
    let mut h = a.create_path("/sparse", 0o644).await.expect("create");
    h.write_at(far, b"tail").await.expect("far write");
    h.close().await.expect("close");
    let mut r = b.open_path("/sparse").await.expect("open");
    assert_eq!(r.size(), far + 4);
    assert!(r.read_at(1 << 32, 4096).await.expect("hole")[..].iter().all(|&x| x == 0));
    assert_eq!(&r.read_at(far, 10).await.expect("tail")[..], b"tail");

    // Close-to-open: a reader that opened before a new version sees the old one; reopening
    // shows the new one.
    a.write_file("/cto", &content(5, 2 * MIB)).await.expect("v1");
    let mut old = b.open_path("/cto").await.expect("open v1");
    let first = old.read_at(0, 2 * MIB).await.expect("read v1");
    a.write_file("/cto", &content(6, 2 * MIB)).await.expect("v2");
    assert!(first[..] == content(5, 2 * MIB)[..]);
    assert!(b.read_file("/cto").await.expect("read v2")[..] == content(6, 2 * MIB)[..]);
}

/// Writes at random through one handle, against a byte vector as the model: appends, gaps past
/// what a chunk holds so far (a hole that reads as zeros), overwrites inside it, and writes
/// that overwrite its end and run past it, across chunk boundaries. The file read back by
/// another client after the close, and by the writer's handle before it, is the model's.
/// (It found a chunk rewritten after its upload, while an earlier chunk was still buffered,
/// meeting its held-back first version in one commit, which the close then failed with.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_writes_through_one_handle_match_a_model() {
    use rand::{Rng, SeedableRng};
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let b = cluster.client().await;
    let chunk = a.resolve("/").await.expect("root").chunk_bytes as usize;
    for seed in 0..8u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let path = format!("/random-{seed}");
        let mut model: Vec<u8> = Vec::new();
        let mut h = a.create_path(&path, 0o644).await.expect("create");
        for step in 0..60u64 {
            let span = 3 * chunk;
            let offset = match rng.gen_range(0..4) {
                // At the end (a sequential writer), a little past it (a gap), or inside.
                0 => model.len(),
                1 => (model.len() + rng.gen_range(1..64 << 10)).min(span),
                _ => rng.gen_range(0..span),
            };
            let len = rng.gen_range(1..(256 << 10)).min(span + 1 - offset.min(span)).max(1);
            let bytes = content(seed * 1000 + step, len);
            h.write_at(offset as u64, &bytes).await.expect("write");
            if model.len() < offset + len {
                model.resize(offset + len, 0);
            }
            model[offset..offset + len].copy_from_slice(&bytes);
        }
        let seen = h.read_at(0, model.len()).await.expect("read before close");
        assert!(seen[..] == model[..], "seed {seed}: the writer's handle reads other bytes before the close");
        h.close().await.expect("close");
        let got = b.read_file(&path).await.expect("read");
        assert_eq!(got.len(), model.len(), "seed {seed}: size");
        if let Some(at) = got.iter().zip(&model).position(|(x, y)| x != y) {
            panic!("seed {seed}: first differing byte at {at}");
        }
    }
}

/// Small chunks are mirrored with the file's parity (1+2 for 4+2): a small file is read with
/// one storage request, survives as many lost nodes as its scheme promises, and is not taken
/// for a chunk written narrow that the mover should widen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chunks_are_mirrored_and_read_with_one_request() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let small = content(7, 100 << 10);
    let big = content(8, 4 * MIB + (50 << 10));
    a.write_file("/small", &small).await.expect("write small");
    a.write_file("/big", &big).await.expect("write big");
    let records = |path: &'static str| {
        let a = a.clone();
        async move {
            let attr = a.resolve(path).await.expect("resolve");
            match a.meta(wire::MetaOp::GetChunks { ino: attr.ino, first: 0, count: 16 }).await.expect("GetChunks") {
                wire::MetaReply::Chunks { chunks, .. } => chunks,
                other => panic!("GetChunks answered {other:?}"),
            }
        }
    };
    let mirrored = wire::EcScheme { k: 1, m: 2 };
    let s = records("/small").await;
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].ec, s[0].shard_len as usize, s[0].missing),
        (mirrored, 100 << 10, 0),
        "a small file is three copies"
    );
    let b = records("/big").await;
    assert_eq!(
        b.iter().map(|r| r.ec).collect::<Vec<_>>(),
        vec![wire::EcScheme::DEFAULT, mirrored],
        "a large file's small tail chunk is mirrored"
    );

    // One request reads the small file (a fresh client: nothing cached).
    let reader = cluster.client().await;
    let before = shard_reads_served(&cluster).await;
    assert!(reader.read_file("/small").await.expect("read")[..] == small[..]);
    assert_eq!(shard_reads_served(&cluster).await - before, 1, "one storage request for a small file");

    // Nothing to widen: the status counts no narrow chunk.
    assert_eq!(cluster.status()["chunks_narrow"], 0, "{:#}", cluster.status());

    // Two of its three copies lost: still readable, like any 4+2 chunk.
    let map = match reader.meta(wire::MetaOp::GetMap { version: s[0].placement.map_version }).await.expect("GetMap") {
        wire::MetaReply::Map(map) => map,
        other => panic!("GetMap answered {other:?}"),
    };
    for slot in 0..2 {
        let node = map.node_for(s[0].placement.pg, slot).expect("node of slot") as usize;
        cluster.kill_node(node);
    }
    let survivor = cluster.client().await;
    assert!(survivor.read_file("/small").await.expect("read with two copies lost")[..] == small[..]);
    assert!(survivor.read_file("/big").await.expect("read big with two nodes lost")[..] == big[..]);
}

/// A rewrite from a chunk's start in pieces smaller than a chunk (the mount's writes are at
/// most 1 MiB) fetches nothing from the cluster when it covers the chunk; where it does not,
/// the stored bytes it leaves are fetched when needed (a gap, a read past the written bytes,
/// the upload) and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_from_a_chunks_start_fetch_only_the_bytes_they_leave() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let chunk = a.resolve("/").await.expect("root").chunk_bytes as usize;
    let len = 3 * chunk + 5;
    a.write_file("/re", &content(10, len)).await.expect("write");

    // Every chunk rewritten whole in 1 MiB pieces, by a client that holds nothing of the file.
    let b = cluster.client().await;
    let mut new = content(11, len);
    let before = shard_reads_served(&cluster).await;
    let mut h = b.open_path("/re").await.expect("open");
    for (i, piece) in new.chunks(MIB).enumerate() {
        h.write_at((i * MIB) as u64, piece).await.expect("rewrite");
    }
    h.close().await.expect("close");
    assert_eq!(shard_reads_served(&cluster).await, before, "a rewrite of whole chunks read from the cluster");
    assert!(cluster.client().await.read_file("/re").await.expect("read")[..] == new[..]);

    // Rewrites that leave stored bytes behind.
    let c = cluster.client().await;
    let mut h = c.open_path("/re").await.expect("open");
    fn patch(new: &mut [u8], at: usize, id: u64, n: usize) -> (u64, Vec<u8>) {
        let bytes = content(id, n);
        new[at..at + n].copy_from_slice(&bytes);
        (at as u64, bytes)
    }
    // Chunk 0: its start, then a write past a gap, which the stored bytes fill.
    let (at, bytes) = patch(&mut new, 0, 12, MIB);
    h.write_at(at, &bytes).await.expect("chunk 0 start");
    let (at, bytes) = patch(&mut new, 2 * MIB + 1, 13, 1000);
    h.write_at(at, &bytes).await.expect("chunk 0 past a gap");
    // Chunk 1: its start, then a read past the written bytes sees the stored ones.
    let (at, bytes) = patch(&mut new, chunk, 14, 100 << 10);
    h.write_at(at, &bytes).await.expect("chunk 1 start");
    let read_at = chunk + (200 << 10);
    assert!(h.read_at(read_at as u64, 100).await.expect("read")[..] == new[read_at..read_at + 100]);
    // Chunk 2: its start only; the rest comes with the upload at close.
    let (at, bytes) = patch(&mut new, 2 * chunk, 15, 10);
    h.write_at(at, &bytes).await.expect("chunk 2 start");
    h.close().await.expect("close");
    assert!(cluster.client().await.read_file("/re").await.expect("read")[..] == new[..]);
}

/// The client's chunk cache is one for every file and open, bounded in bytes (the least
/// recently used let go, and what was let go reads back right), and keyed by chunk id: a file
/// opened again is served from it with no storage request, while one rewritten, or truncated
/// into a chunk and extended, by another client is never served from what was cached before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chunk_cache_is_shared_by_opens_bounded_and_never_stale() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let chunk = a.resolve("/").await.expect("root").chunk_bytes as usize;
    const FILES: u64 = 8;
    for id in 0..FILES {
        a.write_file(&format!("/f{id}"), &content(100 + id, 2 * chunk)).await.expect("write");
    }
    // Room for 3 chunks of the 16.
    let budget = 3 * chunk as u64;
    let b = client_with_cache(&cluster, budget).await;
    for id in 0..FILES {
        let mut h = b.open_path(&format!("/f{id}")).await.expect("open");
        let mut got = Vec::new();
        for at in (0..2 * chunk).step_by(chunk) {
            got.extend_from_slice(&h.read_at(at as u64, chunk).await.expect("read"));
            assert!(b.cached_bytes() <= budget, "{} bytes cached in file {id}, budget {budget}", b.cached_bytes());
        }
        assert!(got == content(100 + id, 2 * chunk), "file {id} read back wrong");
        h.close().await.expect("close");
    }
    assert!(b.cached_bytes() > 0, "closed files' chunks stay cached");
    assert!(b.chunk_cache_stats().evictions >= 13, "{:?}", b.chunk_cache_stats());

    // The last file, opened again: every byte from the cache.
    let before = shard_reads_served(&cluster).await;
    assert!(b.read_file("/f7").await.expect("read again")[..] == content(107, 2 * chunk)[..]);
    assert_eq!(shard_reads_served(&cluster).await - before, 0, "a reopened file was read from the cluster");
    // The first file's chunks were let go for the others': fetched again, right.
    let before = shard_reads_served(&cluster).await;
    assert!(b.read_file("/f0").await.expect("read let go")[..] == content(100, 2 * chunk)[..]);
    assert!(shard_reads_served(&cluster).await > before, "the first file's chunks were let go");

    // Rewritten by another client: the reopen reads the new version.
    b.read_file("/f7").await.expect("cache /f7 again");
    a.write_file("/f7", &content(200, 2 * chunk)).await.expect("rewrite");
    assert!(b.read_file("/f7").await.expect("read rewritten")[..] == content(200, 2 * chunk)[..]);
    // Truncated into its second chunk and extended by another client: that chunk keeps its id
    // with a shorter length, and the cut bytes read as zeros.
    let mut h = a.open_path("/f7").await.expect("open");
    h.truncate(chunk as u64 + 3).await.expect("shrink");
    h.truncate(2 * chunk as u64).await.expect("extend");
    h.close().await.expect("close");
    let got = b.read_file("/f7").await.expect("read truncated");
    assert_eq!(got.len(), 2 * chunk);
    assert!(got[..chunk + 3] == content(200, 2 * chunk)[..chunk + 3]);
    assert!(got[chunk + 3..].iter().all(|&x| x == 0), "the cut bytes read back from the cache");
}

/// Small random reads fetch only their bytes; a chunk read at random a second time is then
/// fetched whole in the background, and later reads of it are served from the cache with no
/// storage request, as the mount's random readers are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_fill_the_cache_with_the_chunks_they_come_back_to() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let chunk = a.resolve("/").await.expect("root").chunk_bytes as usize;
    let data = content(300, 2 * chunk);
    a.write_file("/r", &data).await.expect("write");
    let b = cluster.client().await;
    let h = b.open_path("/r").await.expect("open");
    let reader = h.read_side();
    let size = h.size();
    let read = |at: usize| {
        let reader = reader.clone();
        async move { reader.read_at(at as u64, 4096, size).await.expect("read") }
    };
    let before = shard_reads_served(&cluster).await;
    assert!(read(100_000).await[..] == data[100_000..100_000 + 4096]);
    assert_eq!(shard_reads_served(&cluster).await - before, 1, "a small read fetches only its bytes, from one node");
    assert_eq!(b.chunk_cache_stats().fills, 0, "one read of a chunk fills nothing");
    let at = chunk / 2 + 12_345;
    assert!(read(at).await[..] == data[at..at + 4096]);
    assert_eq!(b.chunk_cache_stats().fills, 1, "the second read of the chunk fills it");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while b.cached_bytes() < chunk as u64 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(b.cached_bytes(), chunk as u64, "the chunk arrived whole");
    let before = shard_reads_served(&cluster).await;
    // (Far apart: reads near each other would make a sequential stream, with read-ahead.)
    for at in [0, chunk / 4 + 777, chunk - 4096] {
        assert!(read(at).await[..] == data[at..at + 4096], "read at {at}");
    }
    assert_eq!(
        shard_reads_served(&cluster).await - before,
        0,
        "reads of a filled chunk went to the cluster: {:?}",
        b.chunk_cache_stats()
    );
    // The other chunk was not filled by them.
    let at = chunk + 5;
    assert!(read(at).await[..] == data[at..at + 4096]);
    assert_eq!(b.cached_bytes(), chunk as u64);
}

/// A small file's chunk fetched at its open for a reader whose bytes the kernel keeps
/// (`Keep::Once`: the mount's loader samples) is cached on probation only: a pass over many
/// samples holds at most an eighth of the cache and pushes out nothing cached before, and a
/// sample read again without the prefetch (its pages dropped by the kernel) is cached as any
/// chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_read_once_are_cached_on_probation_without_pushing_out_the_cache() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let sample = 64 << 10;
    for id in 0..40u64 {
        a.write_file(&format!("/s{id}"), &content(400 + id, sample)).await.expect("write sample");
    }
    a.write_file("/kept", &content(399, 2 * sample)).await.expect("write");
    // Room for 16 samples; probation holds 2.
    let budget = 16 * sample as u64;
    let b = client_with_cache(&cluster, budget).await;
    assert!(b.read_file("/kept").await.expect("read")[..] == content(399, 2 * sample)[..]);
    let kept = b.cached_bytes();
    assert_eq!(kept, 2 * sample as u64, "a file read whole is cached");
    let read_sample = |id: u64| {
        let b = b.clone();
        async move {
            // As the mount opens a sample: the records of its first chunks come with the
            // lookup, so its fetch starts at once.
            let ino = b.resolve(&format!("/s{id}")).await.expect("resolve").ino;
            let first = b.getattr_for_open(ino).await.expect("getattr for open");
            let h = b.open_with_first_chunks(first).expect("open");
            let reader = h.read_side();
            reader.prefetch_start(client::Keep::Once);
            let got = reader.read_at(0, sample, h.size()).await.expect("read");
            assert!(got[..] == content(400 + id, sample)[..], "sample {id} read back wrong");
            h.close().await.expect("close");
        }
    };
    for id in 0..30 {
        read_sample(id).await;
        assert!(b.cached_bytes() <= kept + budget / 8, "{} bytes cached after sample {id}", b.cached_bytes());
    }
    let before = shard_reads_served(&cluster).await;
    assert!(b.read_file("/kept").await.expect("read again")[..] == content(399, 2 * sample)[..]);
    assert_eq!(shard_reads_served(&cluster).await - before, 0, "the pass pushed a cached file out");
    // Sample 0 was let go long ago. Read again as the mount reads a file whose pages the
    // kernel was asked to keep but dropped (no prefetch at the open), it is cached as any chunk
    // and stays past later samples.
    let before = shard_reads_served(&cluster).await;
    let h = b.open_path("/s0").await.expect("open");
    assert!(h.read_side().read_at(0, sample, h.size()).await.expect("read")[..] == content(400, sample)[..]);
    h.close().await.expect("close");
    assert!(shard_reads_served(&cluster).await > before, "sample 0 was still cached");
    for id in 30..40 {
        read_sample(id).await;
    }
    let before = shard_reads_served(&cluster).await;
    read_sample(0).await;
    assert_eq!(
        shard_reads_served(&cluster).await - before,
        0,
        "a sample read again was let go: {:?}",
        b.chunk_cache_stats()
    );
}

/// Chunks a client writes are cached on probation only: a write larger than the cache (a
/// checkpoint) pushes out nothing readers cached before it, holds at most an eighth of the
/// cache, and reads back right, its short tail chunk included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_write_is_cached_on_probation_without_pushing_out_the_cache() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let chunk = a.resolve("/").await.expect("root").chunk_bytes as usize;
    a.write_file("/kept", &content(500, 2 * chunk)).await.expect("write");
    // Room for 8 chunks; probation holds 1.
    let budget = 8 * chunk as u64;
    let b = client_with_cache(&cluster, budget).await;
    assert!(b.read_file("/kept").await.expect("read")[..] == content(500, 2 * chunk)[..]);
    let kept = b.cached_bytes();
    assert_eq!(kept, 2 * chunk as u64, "a file read whole is cached");

    let big = content(501, 12 * chunk + 1000);
    let mut h = b.create_path("/checkpoint", 0o644).await.expect("create");
    for piece in big.chunks(1 << 20) {
        h.write_at(h.size(), piece).await.expect("write");
        assert!(b.cached_bytes() <= kept + budget / 8, "{} bytes cached while writing", b.cached_bytes());
    }
    h.close().await.expect("close");
    assert!(b.cached_bytes() <= kept + budget / 8, "{} bytes cached after the write", b.cached_bytes());
    let before = shard_reads_served(&cluster).await;
    assert!(b.read_file("/kept").await.expect("read again")[..] == content(500, 2 * chunk)[..]);
    assert_eq!(shard_reads_served(&cluster).await - before, 0, "the write pushed a cached file out");
    assert!(b.read_file("/checkpoint").await.expect("read back")[..] == big[..], "the write read back wrong");
    assert!(cluster.client().await.read_file("/checkpoint").await.expect("read back")[..] == big[..]);
    // A small file after it: its short chunk is its own, whatever buffer carried it.
    b.write_file("/small", &content(502, 5000)).await.expect("write small");
    assert!(cluster.client().await.read_file("/small").await.expect("read small")[..] == content(502, 5000)[..]);
}

/// Chunks read whole go to the disk cache; a client started again on it reads them with no
/// storage request, whole and at random; a damaged file is never served (the bytes come from
/// the cluster, the file is removed); another client's rewrite names other chunks; and one
/// directory serves one client at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_cache_serves_a_restarted_client_and_never_a_damaged_or_stale_chunk() {
    let cluster = TestCluster::start(6, "4+2");
    let a = cluster.client().await;
    let chunk = a.resolve("/").await.expect("root").chunk_bytes as usize;
    let big = content(400, 2 * chunk + 1000);
    let small = content(401, 128 << 10);
    a.write_file("/big", &big).await.expect("write big");
    a.write_file("/small", &small).await.expect("write small");
    let dir = tempfile::tempdir().expect("cache dir");
    let disk = client::DiskCacheOptions { dir: dir.path().to_path_buf(), bytes_max: 1 << 30, required: true };
    // No memory cache: every read the disk cache does not answer goes to the cluster.
    let options = || client::ClientOptions {
        tls: cluster.tls(),
        cache_bytes_max: 0,
        disk_cache: Some(disk.clone()),
        ..client::ClientOptions::default()
    };
    let wait_for_chunks = |c: &client::Client, want: u64| {
        let c = c.clone();
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while c.disk_cache_stats().expect("a disk cache").chunks < want {
                assert!(std::time::Instant::now() < deadline, "{:?}", c.disk_cache_stats());
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    };
    {
        let b = client::Client::connect_with(&cluster.meta_addr, options()).await.expect("client connects");
        assert!(b.read_file("/big").await.expect("read big")[..] == big[..]);
        assert!(b.read_file("/small").await.expect("read small")[..] == small[..]);
        wait_for_chunks(&b, 4).await;
        assert!(b.disk_cache_dir().expect("its directory").starts_with(dir.path()), "{:?}", b.disk_cache_dir());
        // The same directory is one client's at a time.
        let second = client::Client::connect_with(&cluster.meta_addr, options()).await;
        let refused = second.err().expect("a second client on the directory is refused");
        assert!(refused.message.contains("in use by another process"), "{refused}");
    }
    // Every file of the disk cache, its lock file aside.
    let files = files_in(dir.path(), |p| p.file_name().is_some_and(|n| n != "lock"));
    assert_eq!(files.len(), 4, "one file per chunk: {files:?}");

    // Started again: the cache lists its files, and reads cost no storage request.
    let c = client::Client::connect_with(&cluster.meta_addr, options()).await.expect("client connects");
    wait_for_chunks(&c, 4).await;
    let before = shard_reads_served(&cluster).await;
    assert!(c.read_file("/big").await.expect("read big")[..] == big[..]);
    assert!(c.read_file("/small").await.expect("read small")[..] == small[..]);
    let h = c.open_path("/big").await.expect("open");
    for at in [5usize, chunk / 3, chunk + 77_777, 2 * chunk + 10] {
        let got = h.read_side().read_at(at as u64, 4096, h.size()).await.expect("random read");
        let end = (at + 4096).min(big.len());
        assert!(got[..] == big[at..end], "random read at {at}");
    }
    assert_eq!(shard_reads_served(&cluster).await - before, 0, "a restarted client read from the cluster");
    assert!(c.disk_cache_stats().expect("stats").hits >= 6, "{:?}", c.disk_cache_stats());
    drop(h);
    drop(c);

    // A flipped bit in the middle of a cache file: the right bytes, from the cluster.
    let victim = files.iter().max_by_key(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).expect("a file");
    let mut raw = std::fs::read(victim).expect("cache file");
    let mid = raw.len() / 2;
    raw[mid] ^= 0x10;
    std::fs::write(victim, &raw).expect("damage");
    let d = client::Client::connect_with(&cluster.meta_addr, options()).await.expect("client connects");
    wait_for_chunks(&d, 4).await;
    let before = shard_reads_served(&cluster).await;
    assert!(d.read_file("/big").await.expect("read big")[..] == big[..], "damaged bytes were served");
    assert!(shard_reads_served(&cluster).await > before, "the damaged chunk came from the cluster");
    assert_eq!(d.disk_cache_stats().expect("stats").damaged, 1, "{:?}", d.disk_cache_stats());

    // Rewritten by another client: new chunks, read from the cluster, never the cached ones.
    let newer = content(402, 2 * chunk + 1000);
    a.write_file("/big", &newer).await.expect("rewrite");
    assert!(d.read_file("/big").await.expect("read rewritten")[..] == newer[..]);
}

/// A client of `cluster` whose memory cache holds at most `budget` bytes.
async fn client_with_cache(cluster: &TestCluster, budget: u64) -> client::Client {
    let options =
        client::ClientOptions { tls: cluster.tls(), cache_bytes_max: budget, ..client::ClientOptions::default() };
    client::Client::connect_with(&cluster.meta_addr, options).await.expect("client connects")
}
