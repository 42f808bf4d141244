//! Clones in the metadata service: a clone shares its source's chunk records (no byte copied),
//! later writes to either side do not show through the other, a clone can be made from a file
//! as a snapshot holds it, bad requests are refused with the cause named; and a seeded random
//! run of writes, clones (of live files and of snapshot files), deletes, snapshots, chunk moves
//! and GC passes, checked against a model: GC never deletes a chunk a live file or a snapshot
//! still holds, every record of one chunk says where it is, and once everything is deleted
//! every chunk is collected and no record of shared chunks is left.

mod common;

use common::*;
use meta::keys::prefix;
use meta::MetaService;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap, HashSet};
use wire::{ChunkRecord, ErrorCode, Ino, MetaOp, MetaReply, Placement, ROOT_INO};

async fn chunks_of(svc: &MetaService, ino: Ino) -> Vec<ChunkRecord> {
    match ok(svc, MetaOp::GetChunks { ino, first: 0, count: 1 << 20 }).await {
        MetaReply::Chunks { chunks, .. } => chunks,
        other => panic!("GetChunks: {other:?}"),
    }
}

async fn resolve(svc: &MetaService, path: &str) -> wire::Attr {
    match ok(svc, MetaOp::Resolve { path: path.into() }).await {
        MetaReply::Attr(attr) | MetaReply::Entry { attr, .. } => attr,
        other => panic!("Resolve {path}: {other:?}"),
    }
}

async fn clone(svc: &MetaService, src: Ino, parent: Ino, name: &str) -> wire::Attr {
    match ok(svc, MetaOp::CloneFile { src, parent, name: name.into() }).await {
        MetaReply::Entry { attr, .. } => attr,
        other => panic!("CloneFile: {other:?}"),
    }
}

/// Allocates `count` chunks for `ino` and commits them from index `first` on.
async fn write(svc: &MetaService, ino: Ino, first: u64, count: u32) -> Vec<ChunkRecord> {
    let MetaReply::Alloc { chunks, ec, .. } = ok(svc, MetaOp::AllocChunks { ino, count, avoid: vec![] }).await else {
        panic!("alloc")
    };
    let bytes = 1u32 << 20;
    let records: Vec<ChunkRecord> = chunks
        .iter()
        .enumerate()
        .map(|(i, (id, placement))| {
            // Chunks of 1 MiB at indexes of 4 MiB: the file ends where the last one does.
            chunk(first + i as u64, *id, bytes, ec, *placement)
        })
        .collect();
    let size = (first + u64::from(count) - 1) * (4 << 20) + u64::from(bytes);
    ok(svc, commit(ino, records.clone(), size)).await;
    records
}

async fn six_fake_nodes(svc: &MetaService) -> Vec<std::sync::Arc<FakeStorage>> {
    let mut fakes = Vec::new();
    for i in 0..6u128 {
        let (storage, addr) = fake_storage().await;
        register(svc, 7100 + i, &addr).await;
        fakes.push(storage);
    }
    fakes
}

fn deleted(fakes: &[std::sync::Arc<FakeStorage>]) -> HashSet<u64> {
    fakes.iter().flat_map(|f| f.deleted.lock().iter().map(|k| k.chunk).collect::<Vec<_>>()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_shares_every_chunk_and_each_side_changes_alone() {
    let env = env().await;
    let svc = &env.svc;
    let fakes = six_fake_nodes(svc).await;
    let dir = mkdir(svc, ROOT_INO, "d").await;
    let f = create(svc, dir.ino, "f").await;
    let written = write(svc, f.ino, 0, 3).await;
    let g = clone(svc, f.ino, dir.ino, "g").await;
    let src = getattr(svc, f.ino).await;
    assert_eq!((g.size, g.mode, g.uid, g.ec, g.mtime), (src.size, src.mode, src.uid, src.ec, src.mtime));
    assert_ne!(g.ino, f.ino);
    assert_eq!(chunks_of(svc, g.ino).await, written, "the clone holds the same chunk records");

    // A write to the clone makes a new chunk there only; a truncate of the source leaves the
    // clone whole.
    let new = write(svc, g.ino, 1, 1).await;
    assert_eq!(chunks_of(svc, f.ino).await, written, "the source does not see the clone's write");
    assert_eq!(chunks_of(svc, g.ino).await, vec![written[0].clone(), new[0].clone(), written[2].clone()]);
    ok(svc, MetaOp::SetAttr { ino: f.ino, set: wire::SetAttr { size: Some(0), ..Default::default() } }).await;
    assert!(chunks_of(svc, f.ino).await.is_empty());
    assert_eq!(chunks_of(svc, g.ino).await.len(), 3, "the clone does not see the source's truncate");
    // GC: the source's chunks 0 and 2 are the clone's; chunk 1 was the source's alone.
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.chunks_shared, report.chunks_referenced), (1, 2, 0), "{report:?}");
    assert_eq!(deleted(&fakes), HashSet::from([written[1].id]));

    // From a snapshot: the file as the snapshot holds it.
    let s = create(svc, dir.ino, "s").await;
    let before = write(svc, s.ino, 0, 1).await;
    svc.snapshot_create(dir.ino, "one").await.unwrap_or_else(|e| panic!("{e}"));
    write(svc, s.ino, 0, 1).await;
    let view = resolve(svc, "/d/.snapshots/one/s").await;
    let back = clone(svc, view.ino, dir.ino, "s-then").await;
    assert_eq!(chunks_of(svc, back.ino).await, before, "the clone of the snapshot's file");

    // Refusals, each naming its cause.
    let e = err(svc, MetaOp::CloneFile { src: dir.ino, parent: ROOT_INO, name: "x".into() }, ErrorCode::Invalid).await;
    assert!(e.contains("only regular files are cloned"), "{e}");
    let e = err(svc, MetaOp::CloneFile { src: g.ino, parent: dir.ino, name: "f".into() }, ErrorCode::Exists).await;
    assert!(e.contains("already exists"), "{e}");
    let snapdir = resolve(svc, "/d/.snapshots/one").await;
    err(svc, MetaOp::CloneFile { src: g.ino, parent: snapdir.ino, name: "x".into() }, ErrorCode::ReadOnly).await;
    err(svc, MetaOp::CloneFile { src: 999_999, parent: dir.ino, name: "x".into() }, ErrorCode::NotFound).await;
}

/// What the model knows: each live file's chunk ids by index, and each live snapshot's.
#[derive(Clone, Default)]
struct Model {
    files: BTreeMap<String, (Ino, BTreeMap<u64, u64>)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_never_deletes_a_chunk_that_a_file_or_snapshot_holds_in_a_random_run() {
    for seed in [3u64, 11, 29] {
        random_run(seed, 160).await;
    }
}

async fn random_run(seed: u64, steps: usize) {
    let env = env().await;
    let svc = &env.svc;
    let fakes = six_fake_nodes(svc).await;
    let dir = mkdir(svc, ROOT_INO, "m").await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut live = Model::default();
    let mut snaps: Vec<(String, Model)> = Vec::new();
    let mut every_chunk: HashSet<u64> = HashSet::new();
    let mut next_name = 0u32;
    // How often the cases that matter happened: (clones, clones from snapshots, moves, GC
    // entries dropped because a clone holds the chunk).
    let mut seen = (0u32, 0u32, 0u32, 0u64);
    for step in 0..steps {
        let names: Vec<String> = live.files.keys().cloned().collect();
        let pick = |rng: &mut StdRng| names.get(rng.gen_range(0..names.len().max(1))).cloned();
        match rng.gen_range(0..10) {
            0 | 1 => {
                let name = format!("f{next_name}");
                next_name += 1;
                let f = create(svc, dir.ino, &name).await;
                let written = write(svc, f.ino, 0, rng.gen_range(1..3)).await;
                every_chunk.extend(written.iter().map(|c| c.id));
                live.files.insert(name, (f.ino, written.iter().map(|c| (c.index, c.id)).collect()));
            }
            2 => {
                if let Some(name) = pick(&mut rng) {
                    let (ino, chunks) = live.files.get_mut(&name).expect("file");
                    let index = rng.gen_range(0..2u64);
                    let written = write(svc, *ino, index, 1).await;
                    every_chunk.insert(written[0].id);
                    chunks.insert(index, written[0].id);
                }
            }
            3 | 4 => {
                if let Some(name) = pick(&mut rng) {
                    let copy = format!("f{next_name}");
                    next_name += 1;
                    let (ino, chunks) = live.files[&name].clone();
                    let attr = clone(svc, ino, dir.ino, &copy).await;
                    live.files.insert(copy, (attr.ino, chunks));
                    seen.0 += 1;
                }
            }
            5 => {
                if let Some(name) = pick(&mut rng) {
                    ok(svc, MetaOp::Unlink { parent: dir.ino, name: name.clone() }).await;
                    live.files.remove(&name);
                }
            }
            6 => {
                if snaps.len() < 3 {
                    let name = format!("s{step}");
                    svc.snapshot_create(dir.ino, &name).await.unwrap_or_else(|e| panic!("{e}"));
                    snaps.push((name, live.clone()));
                } else {
                    let (name, _) = snaps.remove(rng.gen_range(0..snaps.len()));
                    svc.snapshot_delete(dir.ino, &name).await.unwrap_or_else(|e| panic!("{e}"));
                }
            }
            7 => {
                // A clone of a file as a snapshot holds it.
                if let Some((snap, model)) = snaps.get(rng.gen_range(0..snaps.len().max(1))) {
                    let files: Vec<&String> = model.files.keys().collect();
                    if let Some(name) = files.get(rng.gen_range(0..files.len().max(1))) {
                        let view = resolve(svc, &format!("/m/.snapshots/{snap}/{name}")).await;
                        let copy = format!("f{next_name}");
                        next_name += 1;
                        let attr = clone(svc, view.ino, dir.ino, &copy).await;
                        live.files.insert(copy, (attr.ino, model.files[*name].1.clone()));
                        seen.1 += 1;
                    }
                }
            }
            8 => {
                // The repair job moves a chunk (a new placement, same id): every record of it
                // follows.
                if let Some(name) = pick(&mut rng) {
                    let ino = live.files[&name].0;
                    if let Some(rec) = chunks_of(svc, ino).await.into_iter().next() {
                        let map_version = if rec.placement.map_version == 6 { 5 } else { 6 };
                        let placement = Placement { map_version, pg: rec.placement.pg };
                        ok(svc, MetaOp::MoveChunk { ino, expected: rec, placement, missing: 0 }).await;
                        seen.2 += 1;
                    }
                }
            }
            _ => {
                seen.3 += svc.gc_once().await.unwrap_or_else(|e| panic!("{e}")).chunks_shared;
            }
        }
        // Checked after every step: what the model says is held is there as the model says,
        // never deleted, and all records of one chunk agree on its placement.
        let gone = deleted(&fakes);
        let mut placed: HashMap<u64, Placement> = HashMap::new();
        let mut views: Vec<(String, Ino, &BTreeMap<u64, u64>)> =
            live.files.iter().map(|(n, (ino, c))| (format!("live {n}"), *ino, c)).collect();
        let mut resolved = Vec::new();
        for (snap, model) in &snaps {
            for (name, (_, chunks)) in &model.files {
                resolved.push((
                    format!("snapshot {snap} {name}"),
                    resolve(svc, &format!("/m/.snapshots/{snap}/{name}")).await.ino,
                    chunks,
                ));
            }
        }
        views.extend(resolved);
        for (what, ino, expected) in views {
            let records = chunks_of(svc, ino).await;
            let ids: BTreeMap<u64, u64> = records.iter().map(|c| (c.index, c.id)).collect();
            assert_eq!(&ids, expected, "seed {seed} step {step}: {what}");
            for rec in records {
                assert!(
                    !gone.contains(&rec.id),
                    "seed {seed} step {step}: chunk {} of {what} was deleted by GC",
                    rec.id
                );
                let first = *placed.entry(rec.id).or_insert(rec.placement);
                assert_eq!(
                    first, rec.placement,
                    "seed {seed} step {step}: records of chunk {} disagree on its placement ({what})",
                    rec.id
                );
            }
        }
    }
    assert!(
        seen.0 >= 5 && seen.1 >= 2 && seen.2 >= 5 && seen.3 >= 1,
        "seed {seed}: the run did too little (clones, clones from snapshots, moves, shared GC drops): {seen:?}"
    );
    // Everything deleted: every chunk is collected, and no record of shared chunks is left.
    for (name, _) in std::mem::take(&mut snaps) {
        svc.snapshot_delete(dir.ino, &name).await.unwrap_or_else(|e| panic!("{e}"));
    }
    for name in live.files.keys() {
        ok(svc, MetaOp::Unlink { parent: dir.ino, name: name.clone() }).await;
    }
    for _ in 0..3 {
        svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(count_keys(svc, prefix::GC).await, 0, "seed {seed}: the GC queue is empty");
    let gone = deleted(&fakes);
    let leaked: Vec<&u64> = every_chunk.iter().filter(|id| !gone.contains(id)).collect();
    assert!(leaked.is_empty(), "seed {seed}: chunks never collected: {leaked:?}");
    assert_eq!(count_keys(svc, prefix::SHARED).await, 0, "seed {seed}: records of shared chunks left");
}
