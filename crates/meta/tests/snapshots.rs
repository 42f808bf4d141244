//! Snapshots in the metadata service, on the in-memory engine and on redb: a snapshot reads
//! exactly the tree as it was (every attribute, entry and chunk record) whatever changes
//! after it, costs a constant number of keys to take, keeps GC off the chunks it references
//! until it is deleted, and diff and restore work from it; and a seeded model-based test of
//! random namespace operations interleaved with snapshot creates, deletes and restores,
//! checked against an in-memory model of the live tree and of every snapshot's tree.

mod common;

use common::*;
use meta::keys::{self, prefix};
use meta::snapshot::{self, Change, LIVE};
use meta::{MetaOptions, MetaService};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use wire::{
    ChunkRecord, EcScheme, FileKind, Ino, MetaCall, MetaOp, MetaReply, Placement, RenameMode, SetAttr, ROOT_INO,
};

const P: Placement = Placement { map_version: 1, pg: 0 };

/// One path of a tree as read through the snapshot functions.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    attr: wire::Attr,
    chunks: Vec<ChunkRecord>,
}

/// Every path below `root` (relative, `/`-separated) as of `epoch`, read in one transaction.
async fn tree_at(svc: &MetaService, root: Ino, epoch: u64) -> BTreeMap<String, Seen> {
    let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("begin: {e}"));
    let txn = txn.as_mut();
    let mut out = BTreeMap::new();
    let mut todo = vec![(String::new(), root)];
    while let Some((path, dir)) = todo.pop() {
        let entries = snapshot::entries_at(txn, dir, epoch).await.unwrap_or_else(|e| panic!("entries_at: {e:?}"));
        for (name, entry) in entries {
            let child = if path.is_empty() { name } else { format!("{path}/{name}") };
            let attr = snapshot::attr_at(txn, entry.ino, epoch)
                .await
                .unwrap_or_else(|e| panic!("attr_at: {e:?}"))
                .unwrap_or_else(|| panic!("{child}: entry without inode as of {epoch}"));
            let chunks =
                snapshot::chunks_at(txn, entry.ino, epoch).await.unwrap_or_else(|e| panic!("chunks_at: {e:?}"));
            if entry.kind == FileKind::Dir {
                todo.push((child.clone(), entry.ino));
            }
            out.insert(child, Seen { attr, chunks });
        }
    }
    out
}

async fn write(svc: &MetaService, ino: Ino, index: u64, id: u64, len: u32, cb: u64) {
    let c = chunk(index, id, len, EcScheme::DEFAULT, P);
    ok(svc, commit(ino, vec![c], index * cb + u64::from(len))).await;
}

async fn set_size(svc: &MetaService, ino: Ino, size: u64) {
    ok(svc, MetaOp::SetAttr { ino, set: SetAttr { size: Some(size), ..SetAttr::default() } }).await;
}

async fn unlink(svc: &MetaService, parent: Ino, name: &str) {
    ok(svc, MetaOp::Unlink { parent, name: name.into() }).await;
}

fn memory_env() -> impl std::future::Future<Output = Arc<MetaService>> {
    async {
        let engine: Arc<dyn kv::KvEngine> = Arc::new(kv_tests::memory::MemoryEngine::new());
        MetaService::new(engine, test_options()).await.unwrap_or_else(|e| panic!("MetaService::new: {e}"))
    }
}

async fn snapshot_reads_the_tree_as_it_was(svc: &MetaService) {
    let top = mkdir(svc, ROOT_INO, "top").await;
    let sub = mkdir(svc, top.ino, "sub").await;
    let a = create(svc, top.ino, "a").await;
    let b = create(svc, sub.ino, "b").await;
    let cb = u64::from(a.chunk_bytes);
    write(svc, a.ino, 0, 10, 1000, cb).await;
    write(svc, a.ino, 1, 11, 500, cb).await;
    write(svc, b.ino, 0, 12, 7, cb).await;
    ok(
        svc,
        MetaOp::SetXattr { ino: a.ino, name: "user.k".into(), value: b"v1".to_vec(), mode: wire::XattrMode::Upsert },
    )
    .await;
    let before = tree_at(svc, top.ino, LIVE).await;
    assert_eq!(before.len(), 3);

    let s1 = svc.snapshot_create(top.ino, "s1").await.unwrap_or_else(|e| panic!("create: {e}"));
    assert_eq!(tree_at(svc, top.ino, s1.epoch).await, before, "nothing changed yet");

    // Change everything: overwrite, truncate, rename, unlink, mkdir, setattr, xattr.
    write(svc, a.ino, 0, 20, 4000, cb).await;
    set_size(svc, a.ino, 100).await;
    ok(svc, MetaOp::SetAttr { ino: b.ino, set: SetAttr { mode: Some(0o600), ..SetAttr::default() } }).await;
    ok(
        svc,
        MetaOp::Rename {
            parent: sub.ino,
            name: "b".into(),
            new_parent: top.ino,
            new_name: "b2".into(),
            mode: RenameMode::Replace,
        },
    )
    .await;
    mkdir(svc, sub.ino, "new").await;
    create(svc, top.ino, "c").await;
    ok(
        svc,
        MetaOp::SetXattr { ino: a.ino, name: "user.k".into(), value: b"v2".to_vec(), mode: wire::XattrMode::Upsert },
    )
    .await;
    let after = tree_at(svc, top.ino, LIVE).await;
    assert_ne!(after, before);
    assert_eq!(tree_at(svc, top.ino, s1.epoch).await, before, "the snapshot does not move");
    {
        let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("{e}"));
        let x = snapshot::xattrs_at(txn.as_mut(), a.ino, s1.epoch).await.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(x, vec![(b"user.k".to_vec(), b"v1".to_vec())]);
    }

    // A second snapshot, then more changes: each snapshot keeps its own view.
    let s2 = svc.snapshot_create(top.ino, "s2").await.unwrap_or_else(|e| panic!("create: {e}"));
    unlink(svc, top.ino, "a").await;
    unlink(svc, top.ino, "b2").await;
    assert_eq!(tree_at(svc, top.ino, s1.epoch).await, before);
    assert_eq!(tree_at(svc, top.ino, s2.epoch).await, after);

    // Diff: s1 -> s2, s2 -> live.
    let (d, cut) = svc.snapshot_diff(top.ino, "s1", Some("s2")).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!cut);
    assert_eq!(
        d,
        vec![
            ("a".to_string(), Change::Changed),
            ("b2".to_string(), Change::Added),
            ("c".to_string(), Change::Added),
            ("sub/b".to_string(), Change::Removed),
            ("sub/new".to_string(), Change::Added),
        ]
    );
    let (d, _) = svc.snapshot_diff(top.ino, "s2", None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d, vec![("a".to_string(), Change::Removed), ("b2".to_string(), Change::Removed)]);

    // List, names unique per directory, delete.
    let listed = svc.snapshot_list(Some(top.ino)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.iter().map(|s| s.rec.name.as_str()).collect::<Vec<_>>(), vec!["s1", "s2"]);
    let err = svc.snapshot_create(top.ino, "s1").await.expect_err("duplicate name");
    assert_eq!(err.code, wire::ErrorCode::Exists);
    svc.snapshot_delete(top.ino, "s1").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tree_at(svc, top.ino, s2.epoch).await, after, "deleting s1 leaves s2 whole");
    svc.snapshot_delete(top.ino, "s2").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(count_keys(svc, prefix::VERSION).await, 0, "no snapshot, no versions");
    assert!(svc.snapshot_list(None).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
}

#[tokio::test]
async fn snapshot_reads_the_tree_as_it_was_on_redb() {
    let env = env().await;
    snapshot_reads_the_tree_as_it_was(&env.svc).await;
}

#[tokio::test]
async fn snapshot_reads_the_tree_as_it_was_in_memory() {
    let svc = memory_env().await;
    snapshot_reads_the_tree_as_it_was(&svc).await;
}

#[tokio::test]
async fn creating_a_snapshot_writes_two_keys_whatever_the_tree() {
    let env = env().await;
    let svc = &env.svc;
    let d = mkdir(svc, ROOT_INO, "d").await;
    for i in 0..300 {
        create(svc, d.ino, &format!("f{i}")).await;
    }
    let before = (count_keys(svc, prefix::SNAPSHOT).await, count_keys(svc, prefix::VERSION).await);
    svc.snapshot_create(d.ino, "one").await.unwrap_or_else(|e| panic!("{e}"));
    let after = (count_keys(svc, prefix::SNAPSHOT).await, count_keys(svc, prefix::VERSION).await);
    assert_eq!((before, after), ((0, 0), (2, 0)), "the state and the record, no copy");
    // The first change of a record keeps one version; the next changes in the epoch none.
    let f = attr_of(lookup(svc, d.ino, "f0").await.unwrap_or_else(|e| panic!("{e}")));
    for mode in [0o600, 0o640, 0o644] {
        ok(svc, MetaOp::SetAttr { ino: f.ino, set: SetAttr { mode: Some(mode), ..SetAttr::default() } }).await;
    }
    assert_eq!(count_keys(svc, prefix::VERSION).await, 1);
    let err = svc.snapshot_create(f.ino, "x").await.expect_err("a file has no snapshots");
    assert_eq!(err.code, wire::ErrorCode::NotDir);
}

/// Files written, snapshotted, deleted live; GC past its grace period deletes none of their
/// shards while the snapshot lives, and every one once it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_keeps_the_chunks_of_a_snapshot_until_it_is_deleted() {
    let env = env_with(MetaOptions { gc_grace_ms: 0, ..test_options() }).await;
    let svc = &env.svc;
    let mut fakes = HashMap::new();
    for i in 0..6u128 {
        let (storage, addr) = fake_storage().await;
        fakes.insert(register(svc, 7000 + i, &addr).await, storage);
    }
    let dir = mkdir(svc, ROOT_INO, "data").await;
    let mut files = Vec::new();
    for n in 0..3 {
        let f = create(svc, dir.ino, &format!("f{n}")).await;
        let MetaReply::Alloc { chunks, .. } =
            ok(svc, MetaOp::AllocChunks { ino: f.ino, count: 2, avoid: vec![] }).await
        else {
            panic!("alloc")
        };
        let records: Vec<_> = chunks
            .iter()
            .enumerate()
            .map(|(i, (id, placement))| chunk(i as u64, *id, f.chunk_bytes, f.ec, *placement))
            .collect();
        ok(svc, commit(f.ino, records.clone(), 2 * u64::from(f.chunk_bytes))).await;
        files.push((f, records));
    }
    let snap = tree_at(svc, dir.ino, LIVE).await;
    let s = svc.snapshot_create(dir.ino, "keep").await.unwrap_or_else(|e| panic!("{e}"));
    let listed = svc.snapshot_list(None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed[0].bytes_exclusive, 0, "everything is shared with the live tree");
    for n in 0..3 {
        unlink(svc, dir.ino, &format!("f{n}")).await;
    }
    assert_eq!(count_keys(svc, prefix::GC).await, 6);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.chunks_referenced, report.shards_deleted), (0, 0, 0));
    assert_eq!(count_keys(svc, prefix::GC).await, 6, "still queued, untouched");
    assert!(fakes.values().all(|f| f.deleted.lock().is_empty()));
    assert_eq!(tree_at(svc, dir.ino, s.epoch).await, snap, "the snapshot reads every chunk back");
    let listed = svc.snapshot_list(None).await.unwrap_or_else(|e| panic!("{e}"));
    let shard = files[0].1[0].shard_len as u64;
    let width = files[0].1[0].ec.width() as u64;
    assert_eq!(listed[0].bytes_exclusive, 6 * width * shard, "only the snapshot holds them now");

    // Restoring a file takes its chunks out of the GC queue.
    let report = svc.snapshot_restore(dir.ino, "keep", "f1").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.files, 1);
    assert_eq!(count_keys(svc, prefix::GC).await, 4);
    let live = tree_at(svc, dir.ino, LIVE).await;
    assert_eq!(live.get("f1").map(|s| &s.chunks), snap.get("f1").map(|s| &s.chunks));

    svc.snapshot_delete(dir.ino, "keep").await.unwrap_or_else(|e| panic!("{e}"));
    let report = svc.gc_once().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.chunks_deleted, report.chunks_referenced), (4, 0));
    let deleted: HashSet<u64> =
        fakes.values().flat_map(|f| f.deleted.lock().iter().map(|k| k.chunk).collect::<Vec<_>>()).collect();
    let restored: HashSet<u64> = files[1].1.iter().map(|c| c.id).collect();
    let gone: HashSet<u64> =
        files.iter().flat_map(|(_, r)| r.iter().map(|c| c.id)).filter(|id| !restored.contains(id)).collect();
    assert_eq!(deleted, gone, "the chunks of the deleted files, not those of the restored one");
}

#[tokio::test]
async fn restore_brings_files_and_directories_back() {
    let env = env().await;
    let svc = &env.svc;
    let top = mkdir(svc, ROOT_INO, "top").await;
    let sub = mkdir(svc, top.ino, "sub").await;
    let a = create(svc, sub.ino, "a").await;
    let b = create(svc, top.ino, "b").await;
    let cb = u64::from(a.chunk_bytes);
    write(svc, a.ino, 0, 100, 10, cb).await;
    write(svc, b.ino, 0, 101, 20, cb).await;
    let before = tree_at(svc, top.ino, LIVE).await;
    svc.snapshot_create(top.ino, "s").await.unwrap_or_else(|e| panic!("{e}"));
    write(svc, b.ino, 0, 102, 30, cb).await;
    unlink(svc, sub.ino, "a").await;
    ok(svc, MetaOp::Rmdir { parent: top.ino, name: "sub".into() }).await;
    // One file: its content and attributes come back, same inode.
    svc.snapshot_restore(top.ino, "s", "b").await.unwrap_or_else(|e| panic!("{e}"));
    let now = tree_at(svc, top.ino, LIVE).await;
    let (x, y) = (&now["b"], &before["b"]);
    assert_eq!((x.attr.ino, x.attr.size, &x.chunks), (y.attr.ino, y.attr.size, &y.chunks));
    // A file whose directory is gone: refused until the directory is back.
    let err = svc.snapshot_restore(top.ino, "s", "sub/a").await.expect_err("no live sub");
    assert_eq!(err.code, wire::ErrorCode::NotFound);
    // The whole tree.
    let report = svc.snapshot_restore(top.ino, "s", "").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.files, report.dirs, report.skipped), (2, 1, 0));
    let now = tree_at(svc, top.ino, LIVE).await;
    assert_eq!(now.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    assert_eq!(now["sub/a"].chunks, before["sub/a"].chunks);
    assert_eq!(now["sub/a"].attr.ino, a.ino, "the same inode, sharing its chunks");
    let MetaReply::StatFs(stat) = ok(svc, MetaOp::StatFs).await else { panic!("statfs") };
    assert_eq!(stat.inodes_used, 5, "root, top, sub, a, b");
}

// ---------------------------------------------------------------------------------------------
// The model-based test.

#[derive(Clone, Debug, PartialEq, Eq)]
struct MFile {
    mode: u32,
    size: u64,
    /// index -> (chunk id, len)
    chunks: BTreeMap<u64, (u64, u32)>,
    nlink: u32,
}

/// The model of one tree: directories by path, file entries by path, files by inode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    dirs: BTreeMap<String, (Ino, u32)>,
    links: BTreeMap<String, Ino>,
    files: BTreeMap<Ino, MFile>,
}

impl Model {
    /// What the model says each path should read as: (kind, ino or 0 for dirs, mode, size,
    /// nlink, chunks).
    fn view(&self) -> BTreeMap<String, (FileKind, Ino, u32, u64, u32, Vec<(u64, u64, u32)>)> {
        let mut out = BTreeMap::new();
        for (p, (ino, mode)) in &self.dirs {
            out.insert(p.clone(), (FileKind::Dir, *ino, *mode, 0, 0, vec![]));
        }
        for (p, ino) in &self.links {
            let f = &self.files[ino];
            let chunks = f.chunks.iter().map(|(i, (id, len))| (*i, *id, *len)).collect();
            out.insert(p.clone(), (FileKind::File, *ino, f.mode, f.size, f.nlink, chunks));
        }
        out
    }

    fn parent_of(path: &str) -> (&str, &str) {
        match path.rfind('/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => ("", path),
        }
    }

    fn taken(&self, path: &str) -> bool {
        self.dirs.contains_key(path) || self.links.contains_key(path)
    }
}

fn seen_view(tree: &BTreeMap<String, Seen>) -> BTreeMap<String, (FileKind, Ino, u32, u64, u32, Vec<(u64, u64, u32)>)> {
    tree.iter()
        .map(|(p, s)| {
            let a = &s.attr;
            let v = if a.kind == FileKind::Dir {
                (FileKind::Dir, a.ino, a.mode, 0, 0, vec![])
            } else {
                (a.kind, a.ino, a.mode, a.size, a.nlink, s.chunks.iter().map(|c| (c.index, c.id, c.len)).collect())
            };
            (p.clone(), v)
        })
        .collect()
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

async fn dir_ino(svc: &MetaService, model: &Model, path: &str) -> Ino {
    if path.is_empty() {
        return ROOT_INO;
    }
    let _ = svc;
    model.dirs[path].0
}

/// Runs `steps` random operations with seed `seed`, checking the live tree and every
/// snapshot's tree against the model after each one.
async fn model_run(svc: &MetaService, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut live = Model::default();
    let mut snaps: BTreeMap<String, (u64, Model)> = BTreeMap::new();
    let mut next_chunk = 1_000u64;
    let mut snap_counter = 0u32;
    let cb = u64::from(getattr(svc, ROOT_INO).await.chunk_bytes);
    for step in 0..steps {
        let dirs: Vec<String> = std::iter::once(String::new()).chain(live.dirs.keys().cloned()).collect();
        let dir = dirs[rng.gen_range(0..dirs.len())].clone();
        let name = NAMES[rng.gen_range(0..NAMES.len())];
        let path = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
        let parent = dir_ino(svc, &live, &dir).await;
        let files: Vec<String> = live.links.keys().cloned().collect();
        let pick = |rng: &mut StdRng| (!files.is_empty()).then(|| files[rng.gen_range(0..files.len())].clone());
        let what = rng.gen_range(0..100);
        let desc;
        match what {
            0..=14 if !live.taken(&path) => {
                let a = create(svc, parent, name).await;
                live.links.insert(path.clone(), a.ino);
                live.files.insert(a.ino, MFile { mode: 0o644, size: 0, chunks: BTreeMap::new(), nlink: 1 });
                desc = format!("create {path}");
            }
            15..=24 if !live.taken(&path) && path.matches('/').count() < 3 => {
                let a = mkdir(svc, parent, name).await;
                live.dirs.insert(path.clone(), (a.ino, 0o755));
                desc = format!("mkdir {path}");
            }
            25..=44 => {
                let Some(f) = pick(&mut rng) else { continue };
                let ino = live.links[&f];
                let index = rng.gen_range(0..3u64);
                let len = rng.gen_range(1..=4096u32);
                next_chunk += 1;
                write(svc, ino, index, next_chunk, len, cb).await;
                let m = live.files.get_mut(&ino).unwrap_or_else(|| panic!("model"));
                m.chunks.insert(index, (next_chunk, len));
                m.size = m.size.max(index * cb + u64::from(len));
                desc = format!("write {f} [{index}] = {next_chunk}");
            }
            45..=52 => {
                let Some(f) = pick(&mut rng) else { continue };
                let ino = live.links[&f];
                let m = live.files.get_mut(&ino).unwrap_or_else(|| panic!("model"));
                let size = rng.gen_range(0..=m.size);
                set_size(svc, ino, size).await;
                m.size = size;
                m.chunks.retain(|&i, _| i * cb < size);
                for (i, (_, len)) in m.chunks.iter_mut() {
                    *len = (*len).min((size - i * cb).min(u64::from(u32::MAX)) as u32);
                }
                desc = format!("truncate {f} to {size}");
            }
            53..=60 => {
                let Some(f) = pick(&mut rng) else { continue };
                if live.taken(&path) {
                    continue;
                }
                let (fdir, fname) = Model::parent_of(&f);
                let from = dir_ino(svc, &live, fdir).await;
                ok(
                    svc,
                    MetaOp::Rename {
                        parent: from,
                        name: fname.into(),
                        new_parent: parent,
                        new_name: name.into(),
                        mode: RenameMode::NoReplace,
                    },
                )
                .await;
                let ino = live.links.remove(&f).unwrap_or_else(|| panic!("model"));
                live.links.insert(path.clone(), ino);
                desc = format!("rename {f} -> {path}");
            }
            61..=68 => {
                let Some(f) = pick(&mut rng) else { continue };
                let (fdir, fname) = Model::parent_of(&f);
                let from = dir_ino(svc, &live, fdir).await;
                unlink(svc, from, fname).await;
                let ino = live.links.remove(&f).unwrap_or_else(|| panic!("model"));
                let m = live.files.get_mut(&ino).unwrap_or_else(|| panic!("model"));
                m.nlink -= 1;
                if m.nlink == 0 {
                    live.files.remove(&ino);
                }
                desc = format!("unlink {f}");
            }
            69..=72 => {
                let empty: Vec<String> = live
                    .dirs
                    .keys()
                    .filter(|d| !live.dirs.keys().chain(live.links.keys()).any(|p| p.starts_with(&format!("{d}/"))))
                    .cloned()
                    .collect();
                if empty.is_empty() {
                    continue;
                }
                let d = empty[rng.gen_range(0..empty.len())].clone();
                let (pdir, dname) = Model::parent_of(&d);
                let p = dir_ino(svc, &live, pdir).await;
                ok(svc, MetaOp::Rmdir { parent: p, name: dname.into() }).await;
                live.dirs.remove(&d);
                desc = format!("rmdir {d}");
            }
            73..=78 => {
                let Some(f) = pick(&mut rng) else { continue };
                let ino = live.links[&f];
                let mode = [0o600, 0o640, 0o644, 0o755][rng.gen_range(0..4)];
                ok(svc, MetaOp::SetAttr { ino, set: SetAttr { mode: Some(mode), ..SetAttr::default() } }).await;
                live.files.get_mut(&ino).unwrap_or_else(|| panic!("model")).mode = mode;
                desc = format!("chmod {f} {mode:o}");
            }
            79..=86 if snaps.len() < 6 => {
                snap_counter += 1;
                let name = format!("s{snap_counter}");
                let rec = svc.snapshot_create(ROOT_INO, &name).await.unwrap_or_else(|e| panic!("create: {e}"));
                snaps.insert(name.clone(), (rec.epoch, live.clone()));
                desc = format!("snapshot {name}");
            }
            87..=92 if !snaps.is_empty() => {
                let names: Vec<String> = snaps.keys().cloned().collect();
                let name = names[rng.gen_range(0..names.len())].clone();
                svc.snapshot_delete(ROOT_INO, &name).await.unwrap_or_else(|e| panic!("delete: {e}"));
                snaps.remove(&name);
                desc = format!("delete snapshot {name}");
            }
            93..=99 if !snaps.is_empty() => {
                let names: Vec<String> = snaps.keys().cloned().collect();
                let name = names[rng.gen_range(0..names.len())].clone();
                let model = snaps[&name].1.clone();
                let report = svc.snapshot_restore(ROOT_INO, &name, "").await.unwrap_or_else(|e| panic!("restore: {e}"));
                let skipped = restore_model(&mut live, &model, svc).await;
                assert_eq!(report.skipped, skipped, "step {step}: skipped entries of restore {name}");
                desc = format!("restore {name}");
            }
            _ => continue,
        }
        let got = seen_view(&tree_at(svc, ROOT_INO, LIVE).await);
        assert_eq!(got, live.view(), "seed {seed} step {step} ({desc}): live tree");
        for (name, (epoch, model)) in &snaps {
            let got = seen_view(&tree_at(svc, ROOT_INO, *epoch).await);
            assert_eq!(got, model.view(), "seed {seed} step {step} ({desc}): snapshot {name}");
        }
    }
}

/// Applies a whole-tree restore of `snap` to the live model as the service does it: walking
/// the snapshot's directories from the root, files in name order; returns the entries skipped.
async fn restore_model(live: &mut Model, snap: &Model, svc: &MetaService) -> u64 {
    let mut skipped = 0;
    // Paths whose subtree is skipped (a non-directory holds the directory's name).
    let mut dead: Vec<String> = Vec::new();
    // Live directory inode for each snapshot directory path (the live one may be another inode).
    let mut order: Vec<(String, bool)> =
        snap.dirs.keys().map(|p| (p.clone(), true)).chain(snap.links.keys().map(|p| (p.clone(), false))).collect();
    // Parents before children: by depth, then path.
    order.sort_by_key(|(p, _)| (p.matches('/').count(), p.clone()));
    for (path, is_dir) in order {
        if dead.iter().any(|d| path.starts_with(&format!("{d}/"))) {
            continue;
        }
        if is_dir {
            if live.links.contains_key(&path) {
                skipped += 1;
                dead.push(path);
            } else if !live.dirs.contains_key(&path) {
                let (pdir, name) = Model::parent_of(&path);
                let pino = if pdir.is_empty() { ROOT_INO } else { live.dirs[pdir].0 };
                let attr = attr_of(lookup(svc, pino, name).await.unwrap_or_else(|e| panic!("made {path}: {e}")));
                live.dirs.insert(path.clone(), (attr.ino, snap.dirs[&path].1));
            }
            continue;
        }
        let ino = snap.links[&path];
        if live.dirs.contains_key(&path) || live.links.get(&path).is_some_and(|&l| l != ino) {
            skipped += 1;
            continue;
        }
        let had = live.links.contains_key(&path);
        let mut f = snap.files[&ino].clone();
        f.nlink = match live.files.get(&ino) {
            Some(l) => l.nlink + u32::from(!had),
            None => 1,
        };
        live.files.insert(ino, f);
        live.links.insert(path, ino);
    }
    // Every link counts once, wherever it is.
    let mut counts: HashMap<Ino, u32> = HashMap::new();
    for ino in live.links.values() {
        *counts.entry(*ino).or_default() += 1;
    }
    for (ino, f) in live.files.iter_mut() {
        f.nlink = counts.get(ino).copied().unwrap_or(0);
    }
    skipped
}

#[tokio::test]
async fn model_based_random_operations_in_memory() {
    for seed in 1..=6 {
        let svc = memory_env().await;
        model_run(&svc, seed, 300).await;
    }
}

#[tokio::test]
async fn model_based_random_operations_on_redb() {
    for seed in 101..=103 {
        let env = env().await;
        model_run(&env.svc, seed, 250).await;
    }
}

#[test]
fn version_keys_are_documented_in_the_key_schema() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../ARCHITECTURE.md")).unwrap_or_default();
    for key in ["| `M` |", "| `M` ‖ id |", "| `Y` ‖ key ‖ 0x00 ‖ epoch |"] {
        assert!(doc.contains(key), "ARCHITECTURE.md lacks the row {key}");
    }
    let _ = keys::snapshot_state();
}

/// `.snapshots` is reachable by name under a snapshotted directory, hidden from its listing;
/// lookups, listings, attributes and chunk lists below it answer as of the snapshot, and
/// every write there is refused as read-only.
#[tokio::test]
async fn snapshots_are_browsed_read_only_under_dot_snapshots() {
    let env = env().await;
    let svc = &env.svc;
    let top = mkdir(svc, ROOT_INO, "top").await;
    let sub = mkdir(svc, top.ino, "sub").await;
    let f = create(svc, sub.ino, "f").await;
    let cb = u64::from(f.chunk_bytes);
    write(svc, f.ino, 0, 500, 123, cb).await;
    let missing = lookup(svc, top.ino, ".snapshots").await.expect_err("no snapshot yet");
    assert_eq!(missing.code, wire::ErrorCode::NotFound);
    svc.snapshot_create(top.ino, "monday").await.unwrap_or_else(|e| panic!("{e}"));
    write(svc, f.ino, 0, 501, 9, cb).await;
    unlink(svc, sub.ino, "f").await;
    create(svc, sub.ino, "g").await;

    assert_eq!(list(svc, top.ino).await, vec!["sub"], "hidden from the listing");
    let dot = attr_of(lookup(svc, top.ino, ".snapshots").await.unwrap_or_else(|e| panic!("{e}")));
    assert!(snapshot::is_view(dot.ino) && dot.kind == FileKind::Dir);
    assert_eq!(list(svc, dot.ino).await, vec!["monday"]);
    let monday = attr_of(lookup(svc, dot.ino, "monday").await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(list(svc, monday.ino).await, vec!["sub"]);
    let vsub = attr_of(lookup(svc, monday.ino, "sub").await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(list(svc, vsub.ino).await, vec!["f"], "as it was: f, not g");
    let vf = attr_of(lookup(svc, vsub.ino, "f").await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!((vf.size, vf.mode), (123, 0o644), "the size and mode as they were");
    assert_eq!(getattr(svc, vf.ino).await, vf);
    let MetaReply::Chunks { chunks, .. } = ok(svc, MetaOp::GetChunks { ino: vf.ino, first: 0, count: 10 }).await else {
        panic!("chunks")
    };
    assert_eq!(chunks.iter().map(|c| (c.id, c.len)).collect::<Vec<_>>(), vec![(500, 123)]);
    // A lookup that takes the records along answers as of the snapshot too; a directory's
    // answer is its attributes alone.
    let op = MetaOp::LookupChunks { parent: vsub.ino, name: "f".into(), count: 4 };
    let MetaReply::Chunks { attr, chunks: with_lookup } = ok(svc, op).await else { panic!("chunks") };
    assert_eq!((attr, with_lookup), (vf.clone(), chunks));
    let op = MetaOp::LookupChunks { parent: monday.ino, name: "sub".into(), count: 4 };
    assert_eq!(ok(svc, op).await, MetaReply::Attr(vsub.clone()));
    let by_path = attr_of(ok(svc, MetaOp::Resolve { path: "/top/.snapshots/monday/sub/f".into() }).await);
    assert_eq!(by_path, vf);

    // Writes of every kind are refused as read-only.
    let refused = [
        MetaOp::Create { parent: vsub.ino, name: "x".into(), mode: 0o644, uid: 0, gid: 0, exclusive: true },
        MetaOp::Mkdir { parent: monday.ino, name: "x".into(), mode: 0o755, uid: 0, gid: 0 },
        MetaOp::Unlink { parent: vsub.ino, name: "f".into() },
        MetaOp::Rmdir { parent: monday.ino, name: "sub".into() },
        MetaOp::SetAttr { ino: vf.ino, set: SetAttr { size: Some(0), ..SetAttr::default() } },
        MetaOp::Rename {
            parent: vsub.ino,
            name: "f".into(),
            new_parent: top.ino,
            new_name: "f".into(),
            mode: RenameMode::Replace,
        },
        MetaOp::AllocChunks { ino: vf.ino, count: 1, avoid: vec![] },
        commit(vf.ino, vec![chunk(0, 900, 1, EcScheme::DEFAULT, P)], 1),
        MetaOp::SetXattr { ino: vf.ino, name: "user.a".into(), value: vec![1], mode: wire::XattrMode::Upsert },
        MetaOp::Mkdir { parent: top.ino, name: ".snapshots".into(), mode: 0o755, uid: 0, gid: 0 },
    ];
    for op in refused {
        err(svc, op, wire::ErrorCode::ReadOnly).await;
    }
    // Deleted: the view is gone.
    svc.snapshot_delete(top.ino, "monday").await.unwrap_or_else(|e| panic!("{e}"));
    let e = call(svc, MetaOp::GetAttr { ino: vf.ino }).await.expect_err("gone");
    assert_eq!(e.code, wire::ErrorCode::NotFound);
}

async fn held_page(svc: &MetaService) -> Vec<(Ino, ChunkRecord)> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        // Pages of one version: the cursor carries across them.
        match ok(svc, MetaOp::ScanHeldChunks { after: after.clone(), limit: 1 }).await {
            MetaReply::HeldChunkPage { chunks, next } => {
                out.extend(chunks.into_iter().map(|c| (c.ino, c.rec)));
                match next {
                    Some(next) => after = Some(next),
                    None => return out,
                }
            }
            other => panic!("ScanHeldChunks: {other:?}"),
        }
    }
}

#[tokio::test]
async fn chunks_only_snapshots_hold_are_found_and_moved_in_every_record() {
    let env = env().await;
    let svc = &env.svc;
    for i in 0..7u128 {
        register(svc, 9000 + i, &format!("127.0.0.1:{}", 1000 + i)).await;
    }
    let at = |map_version| Placement { map_version, pg: 0 };
    let f = create(svc, ROOT_INO, "f").await;
    let g = create(svc, ROOT_INO, "g").await;
    let x = chunk(0, 101, 1 << 20, EcScheme::DEFAULT, at(6));
    ok(svc, commit(f.ino, vec![x.clone()], 1 << 20)).await;
    ok(svc, commit(g.ino, vec![chunk(0, 201, 1 << 20, EcScheme::DEFAULT, at(6))], 1 << 20)).await;
    assert!(held_page(svc).await.is_empty(), "no snapshot, nothing held");

    svc.snapshot_create(ROOT_INO, "s").await.unwrap_or_else(|e| panic!("{e}"));
    let versions = count_keys(svc, prefix::VERSION).await;
    // Moving a live chunk keeps no version: the snapshot and the live file read the same
    // chunk, now at its new place.
    ok(
        svc,
        MetaOp::MoveChunk {
            ino: g.ino,
            expected: chunk(0, 201, 1 << 20, EcScheme::DEFAULT, at(6)),
            placement: at(7),
            missing: 0,
        },
    )
    .await;
    assert_eq!(count_keys(svc, prefix::VERSION).await, versions, "a move is not a change a snapshot keeps");
    let s = svc.snapshot_list(None).await.unwrap_or_else(|e| panic!("{e}"))[0].rec.epoch;
    let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("begin: {e}"));
    let as_of = snapshot::chunks_at(txn.as_mut(), g.ino, s).await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(as_of[0].placement, at(7), "the snapshot's record of a moved live chunk");
    drop(txn);

    // f's chunk is rewritten: chunk 101 is held by the snapshot only, and found as such (g's,
    // still live, is not).
    ok(svc, commit(f.ino, vec![chunk(0, 102, 1 << 20, EcScheme::DEFAULT, at(7))], 1 << 20)).await;
    assert_eq!(held_page(svc).await, vec![(f.ino, x.clone())]);
    // A walking status counts it with the live chunks (its health is the cluster's too).
    match ok(svc, MetaOp::Status { scan_chunks: true }).await {
        MetaReply::Status(status) => {
            assert_eq!(status.chunks, 3, "f's and g's live chunks and the one only the snapshot holds")
        }
        other => panic!("Status: {other:?}"),
    }
    let held = |id| MetaOp::HeldChunk { ino: f.ino, index: 0, id };
    match ok(svc, held(101)).await {
        MetaReply::HeldChunkPage { chunks, .. } => {
            assert_eq!(chunks.iter().map(|c| c.rec.clone()).collect::<Vec<_>>(), vec![x.clone()])
        }
        other => panic!("HeldChunk: {other:?}"),
    }
    match ok(svc, held(102)).await {
        MetaReply::HeldChunkPage { chunks, .. } => {
            assert_eq!(chunks.len(), 1, "a live chunk is where its live record says")
        }
        other => panic!("HeldChunk: {other:?}"),
    }
    match ok(svc, held(999)).await {
        MetaReply::HeldChunkPage { chunks, .. } => assert!(chunks.is_empty(), "nothing holds chunk 999"),
        other => panic!("HeldChunk: {other:?}"),
    }

    // The repair job moves it: the snapshot's record says where its shards are now; a move
    // from a stale record is refused.
    let stale = err(
        svc,
        MetaOp::MoveChunk {
            ino: f.ino,
            expected: chunk(0, 101, 1 << 20, EcScheme::DEFAULT, at(5)),
            placement: at(7),
            missing: 0,
        },
        wire::ErrorCode::Changed,
    )
    .await;
    assert!(stale.contains("changed while it was being moved"), "{stale}");
    ok(svc, MetaOp::MoveChunk { ino: f.ino, expected: x.clone(), placement: at(7), missing: 1 << 3 }).await;
    let moved = ChunkRecord { placement: at(7), missing: 1 << 3, ..x.clone() };
    assert_eq!(held_page(svc).await, vec![(f.ino, moved.clone())]);
    let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("begin: {e}"));
    let as_of = snapshot::chunks_at(txn.as_mut(), f.ino, s).await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(as_of, vec![moved.clone()], "the snapshot reads chunk 101 where it is now");
    let live = snapshot::chunks_at(txn.as_mut(), f.ino, LIVE).await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(live[0].id, 102, "the live record is untouched");
    // Its GC entry (it waits there for the snapshot to go) deletes it where it is now.
    let gc: keys::GcRec = meta::store::get(txn.as_mut(), &keys::gc(101))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"))
        .unwrap_or_else(|| panic!("chunk 101 is queued for GC"));
    assert_eq!(gc.chunk, moved);
}

/// The snapshot a `Snapshots` reply of one holds.
fn one_snapshot(reply: MetaReply) -> wire::SnapshotInfo {
    match reply {
        MetaReply::Snapshots(mut s) if s.len() == 1 => s.remove(0),
        other => panic!("expected one snapshot, got {other:?}"),
    }
}

#[tokio::test]
async fn retried_snapshot_calls_apply_once_and_a_retained_snapshot_cannot_be_deleted_early() {
    let env = env().await;
    let svc = &env.svc;
    let dir = mkdir(svc, ROOT_INO, "d").await;
    let now = meta::store::now_ms();

    // A create retried with its request id (its answer was lost) is answered as before, not
    // refused as a duplicate name; a new request of the same name is refused.
    let create = MetaCall {
        request_id: rid(),
        op: MetaOp::SnapshotCreate { root: dir.ino, name: "s".into(), retain_until_ms: 0 },
    };
    let first = one_snapshot(svc.call(create.clone()).await.unwrap_or_else(|e| panic!("{e}")));
    let again = one_snapshot(svc.call(create).await.unwrap_or_else(|e| panic!("retry: {e}")));
    assert_eq!(first, again);
    err(svc, MetaOp::SnapshotCreate { root: dir.ino, name: "s".into(), retain_until_ms: 0 }, wire::ErrorCode::Exists)
        .await;
    assert_eq!(svc.snapshot_list(None).await.unwrap_or_else(|e| panic!("{e}")).len(), 1);

    // Locked until an hour from now: deletes are refused, naming the date; the date moves
    // later but never earlier.
    let until = now + 3_600_000;
    let locked =
        one_snapshot(ok(svc, MetaOp::SnapshotRetain { root: dir.ino, name: "s".into(), until_ms: until }).await);
    assert_eq!(locked.retain_until_ms, until);
    let msg =
        err(svc, MetaOp::SnapshotDelete { root: dir.ino, name: "s".into() }, wire::ErrorCode::PermissionDenied).await;
    assert!(msg.contains("retained until") && msg.contains("WORM"), "{msg}");
    let msg = err(
        svc,
        MetaOp::SnapshotRetain { root: dir.ino, name: "s".into(), until_ms: now },
        wire::ErrorCode::PermissionDenied,
    )
    .await;
    assert!(msg.contains("never moved earlier"), "{msg}");
    let later =
        one_snapshot(ok(svc, MetaOp::SnapshotRetain { root: dir.ino, name: "s".into(), until_ms: until + 1 }).await);
    assert_eq!(later.retain_until_ms, until + 1);
    let listed = svc.snapshot_list(Some(dir.ino)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed[0].rec.retain_until_ms, until + 1, "the lock is stored");
    assert!(svc.snapshot_delete(dir.ino, "s").await.is_err());

    // Locked from its creation; a lock that has run out no longer stops a delete, and a
    // retried delete is answered as before instead of "no such snapshot".
    let short = one_snapshot(
        ok(svc, MetaOp::SnapshotCreate { root: dir.ino, name: "short".into(), retain_until_ms: now + 300 }).await,
    );
    assert_eq!(short.retain_until_ms, now + 300);
    err(svc, MetaOp::SnapshotDelete { root: dir.ino, name: "short".into() }, wire::ErrorCode::PermissionDenied).await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let delete = MetaCall { request_id: rid(), op: MetaOp::SnapshotDelete { root: dir.ino, name: "short".into() } };
    let gone = one_snapshot(svc.call(delete.clone()).await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(gone.name, "short");
    assert_eq!(one_snapshot(svc.call(delete).await.unwrap_or_else(|e| panic!("retry: {e}"))), gone);
    err(svc, MetaOp::SnapshotDelete { root: dir.ino, name: "short".into() }, wire::ErrorCode::NotFound).await;
    let names: Vec<String> =
        svc.snapshot_list(None).await.unwrap_or_else(|e| panic!("{e}")).into_iter().map(|s| s.rec.name).collect();
    assert_eq!(names, vec!["s".to_string()]);
}
