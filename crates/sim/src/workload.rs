//! The workload and its checkers: clients writing, overwriting, truncating, cloning, renaming,
//! reading back and deleting files while the cluster suffers faults, each against a model of what its files
//! must hold.
//!
//! Each client works in a directory of its own, one operation at a time, so its model is
//! exact: an operation that succeeded changes the model to its result; one that failed leaves
//! the file uncertain between what it was and what it would have become (a failed write may
//! land in part, chunk by chunk). What must hold, checked on every read and again at the end
//! with the faults healed:
//! - no acknowledged write is lost: a file reads back as the model says, and at the end, on a
//!   healthy cluster, every file the model holds is readable;
//! - no read returns bytes that were never written: every byte read is one the model allows
//!   at that position;
//! - every chunk stays rebuildable: at the end, every shard a chunk's record does not mark
//!   missing is stored on some node, and at least `k` of its shards are.

use crate::trace::Trace;
use bytes::Bytes;
use client::Client;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wire::{ErrorCode, ShardKey, WireError, ROOT_INO};

/// Files per client directory.
pub const FILES_PER_CLIENT: usize = 6;
/// Largest file the workload writes.
pub const FILE_BYTES_MAX: usize = 300 << 10;

/// What the model knows of one file's contents.
#[derive(Clone, Debug)]
pub enum Content {
    Known(Vec<u8>),
    /// One of these (`None`: absent), or with `mixed`, at every position a byte of one of them.
    Uncertain {
        candidates: Vec<Option<Vec<u8>>>,
        mixed: bool,
    },
}

impl Content {
    fn candidates(&self) -> Vec<Option<Vec<u8>>> {
        match self {
            Content::Known(d) => vec![Some(d.clone())],
            Content::Uncertain { candidates, .. } => candidates.clone(),
        }
    }

    /// What a failed change from `before` to `after` may have left.
    fn after_failure(before: Option<&Content>, after: Option<Vec<u8>>, mixed: bool) -> Content {
        let mut candidates = match before {
            Some(c) => c.candidates(),
            None => vec![None],
        };
        let was_mixed = matches!(before, Some(Content::Uncertain { mixed: true, .. }));
        if !candidates.contains(&after) {
            candidates.push(after);
        }
        Content::Uncertain { candidates, mixed: mixed || was_mixed }
    }

    /// What a path holds if it held `before` (`None`: absent) or now `other`.
    fn merge(before: Option<&Content>, other: &Content) -> Content {
        let mut candidates = match before {
            Some(c) => c.candidates(),
            None => vec![None],
        };
        for c in other.candidates() {
            if !candidates.contains(&c) {
                candidates.push(c);
            }
        }
        let mixed =
            [before, Some(other)].into_iter().flatten().any(|c| matches!(c, Content::Uncertain { mixed: true, .. }));
        Content::Uncertain { candidates, mixed }
    }

    /// Checks that a read returned what the model allows.
    pub fn check(&self, read: &Bytes) -> Result<(), String> {
        let candidates = self.candidates();
        let whole = |c: &Option<Vec<u8>>| c.as_deref() == Some(&read[..]);
        if candidates.iter().any(whole) {
            return Ok(());
        }
        if let Content::Uncertain { mixed: true, .. } = self {
            // A write that failed part way may have committed some of its chunks (and the
            // size they reach): any length up to the longest candidate.
            let lengths_ok = candidates.iter().flatten().any(|c| c.len() >= read.len());
            let bytes_ok = read
                .iter()
                .enumerate()
                .all(|(i, b)| candidates.iter().flatten().any(|c| c.get(i).is_none_or(|x| x == b)));
            if lengths_ok && bytes_ok {
                return Ok(());
            }
        }
        let first_bad = candidates
            .iter()
            .flatten()
            .map(|c| c.iter().zip(read.iter()).position(|(a, b)| a != b).unwrap_or(c.len().min(read.len())))
            .max()
            .unwrap_or(0);
        let lens: Vec<usize> = candidates.iter().flatten().map(Vec::len).collect();
        Err(format!(
            "read {} bytes that the model does not allow (allowed lengths {lens:?}, absent allowed: {}); first difference at byte {first_bad}",
            read.len(),
            candidates.contains(&None)
        ))
    }

    fn may_be_absent(&self) -> bool {
        self.candidates().contains(&None)
    }
}

/// What the workload found wrong, shared by its tasks.
pub struct Verdicts {
    pub violations: Mutex<Vec<String>>,
    pub ops: AtomicU64,
    pub trace: Arc<Trace>,
}

impl Verdicts {
    pub fn violation(&self, what: String) {
        let what = self.trace.redacted(&what);
        self.trace.note(format_args!("VIOLATION {what}"));
        self.violations.lock().push(what);
    }
}

/// Bytes that differ from write to write: a seeded pattern.
fn pattern(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    rng.fill(&mut data[..]);
    data
}

fn dir_of(client: usize) -> String {
    format!("/c{client}")
}

fn path_of(client: usize, slot: usize) -> String {
    format!("/c{client}/f{slot}")
}

/// One client's model: path -> contents (absent paths are not in it).
pub type Model = BTreeMap<String, Content>;

/// Runs client `me`'s operations until `stop`; returns its model.
pub async fn client_loop(
    me: usize,
    client: Client,
    seed: u64,
    stop: Arc<AtomicBool>,
    verdicts: Arc<Verdicts>,
) -> Model {
    let mut rng = StdRng::seed_from_u64(seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(me as u64 + 1)));
    let mut model = Model::new();
    let trace = verdicts.trace.clone();
    let dir = dir_of(me);
    while let Err(e) = client.mkdir(ROOT_INO, &dir[1..], 0o755).await {
        if e.code == ErrorCode::Exists {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while !stop.load(Ordering::Relaxed) {
        verdicts.ops.fetch_add(1, Ordering::Relaxed);
        let slot = rng.gen_range(0..FILES_PER_CLIENT);
        let path = path_of(me, slot);
        let choice = rng.gen_range(0..100);
        match choice {
            0..=24 => {
                let len = rng.gen_range(0..=FILE_BYTES_MAX);
                let data = pattern(&mut rng, len);
                let result = client.write_file(&path, &data).await;
                trace.note(format_args!("client{me} write {path} {} bytes: {}", data.len(), outcome(&result)));
                let next = match result {
                    Ok(()) => Content::Known(data),
                    Err(_) => {
                        // Created (or truncated) before the write failed: maybe empty.
                        let emptied = Content::after_failure(model.get(&path), Some(Vec::new()), true);
                        Content::after_failure(Some(&emptied), Some(data), true)
                    }
                };
                model.insert(path, next);
            }
            25..=36 => {
                let Some(Content::Known(old)) = model.get(&path).cloned() else { continue };
                let offset = rng.gen_range(0..=old.len());
                let len = rng.gen_range(1..=(100 << 10));
                let data = pattern(&mut rng, len);
                let mut new = old.clone();
                new.resize(new.len().max(offset + data.len()), 0);
                new[offset..offset + data.len()].copy_from_slice(&data);
                let result = async {
                    let mut h = client.open_path(&path).await?;
                    h.write_at(offset as u64, &data).await?;
                    h.close().await
                }
                .await;
                trace.note(format_args!(
                    "client{me} overwrite {path} at {offset} {} bytes: {}",
                    data.len(),
                    outcome(&result)
                ));
                let next = match result {
                    Ok(()) => Content::Known(new),
                    Err(_) => Content::after_failure(model.get(&path), Some(new), true),
                };
                model.insert(path, next);
            }
            37..=61 => {
                let Some(expected) = model.get(&path).cloned() else { continue };
                let result = client.read_file(&path).await;
                trace.note(format_args!("client{me} read {path}: {}", outcome(&result)));
                if let Some(known) = judge_read(&verdicts, &path, &expected, result, false) {
                    model.insert(path, known);
                }
            }
            62..=71 => {
                let Some(Content::Known(data)) = model.get(&path).cloned() else { continue };
                let target = rng.gen_range(0..FILES_PER_CLIENT);
                let to = path_of(me, target);
                if model.contains_key(&to) {
                    continue;
                }
                let result = async {
                    let src = client.resolve(&path).await?;
                    let parent = client.resolve(&dir).await?;
                    client.clone_file(src.ino, parent.ino, &format!("f{target}")).await
                }
                .await;
                trace.note(format_args!("client{me} clone {path} to {to}: {}", outcome(&result)));
                match result {
                    Ok(_) => {
                        model.insert(to, Content::Known(data));
                    }
                    Err(_) => {
                        model.insert(to.clone(), Content::after_failure(None, Some(data), false));
                    }
                }
            }
            72..=79 => {
                let Some(moved) = model.get(&path).cloned() else { continue };
                let target = rng.gen_range(0..FILES_PER_CLIENT);
                let to = path_of(me, target);
                if to == path {
                    continue;
                }
                let result = async {
                    let parent = client.resolve(&dir).await?;
                    client.rename(parent.ino, &format!("f{slot}"), parent.ino, &format!("f{target}")).await
                }
                .await;
                trace.note(format_args!("client{me} rename {path} to {to}: {}", outcome(&result)));
                match result {
                    Ok(()) => {
                        model.remove(&path);
                        model.insert(to, moved);
                    }
                    Err(_) => {
                        // Applied or not: the source is there or gone, the target is the
                        // source or what it was.
                        let gone = Content::after_failure(Some(&moved), None, false);
                        let target_now = Content::merge(model.get(&to), &moved);
                        model.insert(path, gone);
                        model.insert(to, target_now);
                    }
                }
            }
            80..=87 => {
                let Some(Content::Known(old)) = model.get(&path).cloned() else { continue };
                let size = rng.gen_range(0..=FILE_BYTES_MAX);
                let mut new = old.clone();
                new.resize(size, 0);
                let result = async {
                    let attr = client.resolve(&path).await?;
                    client.setattr(attr.ino, wire::SetAttr { size: Some(size as u64), ..Default::default() }).await
                }
                .await;
                trace.note(format_args!(
                    "client{me} truncate {path} from {} to {size}: {}",
                    old.len(),
                    outcome(&result)
                ));
                let next = match result {
                    Ok(_) => Content::Known(new),
                    Err(_) => Content::after_failure(model.get(&path), Some(new), false),
                };
                model.insert(path, next);
            }
            _ => {
                let Some(before) = model.get(&path).cloned() else { continue };
                let result = async {
                    let parent = client.resolve(&dir).await?;
                    client.unlink(parent.ino, &format!("f{slot}")).await
                }
                .await;
                trace.note(format_args!("client{me} unlink {path}: {}", outcome(&result)));
                match result {
                    Ok(()) => {
                        model.remove(&path);
                    }
                    Err(e) if e.code == ErrorCode::NotFound && before.may_be_absent() => {
                        model.remove(&path);
                    }
                    Err(_) => {
                        model.insert(path, Content::after_failure(Some(&before), None, false));
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..50))).await;
    }
    model
}

fn outcome<T>(result: &Result<T, WireError>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("{:?}: {}", e.code, e.message),
    }
}

/// Judges a read of `path` against the model; returns what the file is now known to hold.
/// `healthy`: the cluster has no faults, so failing to read is a violation too.
pub fn judge_read(
    verdicts: &Verdicts,
    path: &str,
    expected: &Content,
    result: Result<Bytes, WireError>,
    healthy: bool,
) -> Option<Content> {
    match result {
        Ok(read) => match expected.check(&read) {
            Ok(()) => Some(Content::Known(read.to_vec())),
            Err(why) => {
                verdicts.violation(format!("{path}: {why}"));
                None
            }
        },
        Err(e) if e.code == ErrorCode::NotFound && expected.may_be_absent() => None,
        Err(e) if e.code == ErrorCode::NotFound => {
            verdicts.violation(format!("{path}: an acknowledged file is gone: {}", e.message));
            None
        }
        Err(e) if healthy => {
            verdicts.violation(format!(
                "{path}: unreadable on a healthy cluster (an acknowledged write lost?): {:?}: {}",
                e.code, e.message
            ));
            None
        }
        Err(_) => None,
    }
}

/// The end: on the healed cluster, every file of every model reads as allowed, and every
/// chunk of those files has its shards.
pub async fn final_check(
    client: &Client,
    models: &[Model],
    stores: Vec<(Arc<storage::StorageService>, BTreeSet<ShardKey>)>,
    verdicts: &Verdicts,
) {
    let mut stored: BTreeSet<ShardKey> = BTreeSet::new();
    for (service, placed) in &stores {
        let mut after = None;
        loop {
            let op = wire::StorageOp::ListShards { after, limit: 4096 };
            let (reply, _) = wire::Handler::handle(&**service, op, Bytes::new()).await;
            match reply {
                Ok(wire::StorageReply::Keys(keys)) if !keys.is_empty() => {
                    after = keys.last().copied();
                    stored.extend(keys);
                }
                Ok(_) => break,
                Err(e) => {
                    verdicts.violation(format!("listing the shards of a storage node failed: {e}"));
                    break;
                }
            }
        }
        // Every stored shard must be whole: scrub had its chance to rewrite what rotted.
        let mut after = None;
        loop {
            let op = wire::StorageOp::Scrub { after, limit: storage::store::SCRUB_KEYS_MAX };
            let (reply, _) = wire::Handler::handle(&**service, op, Bytes::new()).await;
            match reply {
                Ok(wire::StorageReply::Scrubbed { bad, last, more, .. }) => {
                    for (key, why) in bad {
                        if placed.contains(&key) {
                            verdicts.violation(format!("shard {key} is damaged on a healthy cluster: {why}"));
                        } else {
                            // An old copy no record places (a moved shard's): data of no file.
                            verdicts.trace.note(format_args!("final: unplaced shard {key} is damaged: {why}"));
                        }
                    }
                    if !more {
                        break;
                    }
                    after = last;
                }
                other => {
                    verdicts.violation(format!("scrubbing a storage node failed: {other:?}"));
                    break;
                }
            }
        }
    }
    for model in models {
        for (path, expected) in model {
            let result = client.read_file(path).await;
            verdicts.trace.note(format_args!("final read {path}: {}", outcome(&result)));
            if judge_read(verdicts, path, expected, result, true).is_none() {
                continue;
            }
            let records = match client.resolve(path).await {
                Ok(attr) => client.chunk_records(attr.ino).await,
                Err(e) => Err(e),
            };
            let records = match records {
                Ok((_, records)) => records,
                Err(e) => {
                    verdicts.violation(format!("{path}: chunk records unreadable on a healthy cluster: {e}"));
                    continue;
                }
            };
            for rec in records {
                let width = rec.ec.width();
                let present =
                    (0..width).filter(|&i| stored.contains(&ShardKey { chunk: rec.id, index: i as u8 })).count();
                for i in 0..width {
                    let recorded = rec.missing & (1 << i) == 0;
                    if recorded && !stored.contains(&ShardKey { chunk: rec.id, index: i as u8 }) {
                        verdicts.violation(format!(
                            "{path}: chunk {:016x} (index {}) shard {i} is recorded as stored but no node has it",
                            rec.id, rec.index
                        ));
                    }
                }
                if present < rec.ec.k as usize {
                    verdicts.violation(format!(
                        "{path}: chunk {:016x} (index {}) has {present} shards, fewer than k = {}: not rebuildable",
                        rec.id, rec.index, rec.ec.k
                    ));
                }
            }
        }
    }
}
