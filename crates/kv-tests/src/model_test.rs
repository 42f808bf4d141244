//! A model-based randomized test that engines run in their own test suites: random operations
//! over a few interleaved transactions, each checked against a `BTreeMap` model.
//!
//! Reads must return the model's snapshot overlaid with the transaction's own writes; when the
//! snapshot is taken is the engine's to say ([`SnapshotAt`]). A commit must succeed exactly
//! when the transaction is still consistent with the latest state: the model replays the
//! transaction's reads (interleaved with its writes) against the current committed map, and
//! expects `Ok` when every read returns what it returned before and `Conflict` otherwise.
//! That is conflict detection by value with no false conflicts when transactions commit one at
//! a time, as here; transactions without writes commit. Engines that detect conflicts more
//! coarsely do not run this test. The engine is also reopened in the middle and at the end of
//! each round and must hold exactly the model's committed map.
//!
//! Reproducible: the seed is printed; `<env>_SEED=<seed>` replays it and `<env>_OPS=<n>` changes
//! the number of operations per round.

use kv::{KeyValue, KvEngine, KvError, KvTxn, END_OF_KEYSPACE};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Bound;

/// When a transaction's reads see the committed state from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotAt {
    /// At `begin` (the embedded engine).
    Begin,
    /// At its first read that goes to the database: a get of a key it has not written, or a
    /// non-empty scan (PostgreSQL's repeatable read).
    FirstRead,
}

/// What differs between engines.
#[derive(Clone, Copy, Debug)]
pub struct ModelTest {
    /// Prefix of the environment variables that replay a run, e.g. `"KV_REDB_MODEL"`.
    pub env: &'static str,
    pub snapshot_at: SnapshotAt,
}

/// Runs [`ROUNDS`] rounds with a random seed (or `<env>_SEED`). `open(round)` returns an engine
/// on round `round`'s store: empty the first time it is called for a round, the same store
/// (reopened) every later time.
pub async fn run<F, Fut>(test: ModelTest, mut open: F)
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Box<dyn KvEngine>>,
{
    let env = test.env;
    let seed = crate::env_number(&format!("{env}_SEED")).unwrap_or_else(|| rand::random::<u32>() as u64);
    let ops = crate::env_number(&format!("{env}_OPS")).unwrap_or(OPS_PER_ROUND_DEFAULT);
    println!("model seed: {seed} (replay with {env}_SEED={seed}), {ops} operations per round");
    for round in 0..ROUNDS {
        // Each round has its own seed, printed when it fails.
        run_round(&test, seed.wrapping_add(round), ops, round, &mut open).await;
    }
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Rounds per run, each on an empty engine of its own (`open(round)`).
pub const ROUNDS: u64 = 3;
const OPS_PER_ROUND_DEFAULT: usize = 2500;
const OPEN_TXNS_MAX: usize = 3;
/// How many recent operations a failure report shows.
const HISTORY_SHOWN: usize = 40;

/// A small key universe, dense enough for conflicts, with 0x00/0xff bytes and the empty key.
fn key_universe() -> Vec<Vec<u8>> {
    vec![
        vec![],
        vec![0x00],
        vec![0x00, 0x00],
        vec![0x00, 0xff],
        vec![0x01],
        b"a".to_vec(),
        b"a\x00".to_vec(),
        b"ab".to_vec(),
        b"b".to_vec(),
        vec![0x80],
        vec![0xff],
        vec![0xff, 0xff],
    ]
}

enum Step {
    Get { key: Vec<u8>, seen: Option<Vec<u8>> },
    Scan { start: Vec<u8>, end: Vec<u8>, limit: usize, seen: Vec<KeyValue> },
    Write { key: Vec<u8>, value: Option<Vec<u8>> },
}

struct ModelTxn {
    id: usize,
    txn: Box<dyn KvTxn>,
    /// The committed state reads see; `None` until taken (see [`SnapshotAt`]).
    snapshot: Option<Map>,
    writes: Writes,
    steps: Vec<Step>,
}

// The model below is written independently of the reference engine (`memory.rs`) on purpose:
// that engine is one of the engines it checks.
fn model_get(base: &Map, writes: &Writes, key: &[u8]) -> Option<Vec<u8>> {
    match writes.get(key) {
        Some(value) => value.clone(),
        None => base.get(key).cloned(),
    }
}

fn model_scan(base: &Map, writes: &Writes, start: &[u8], end: &[u8], limit: usize) -> Vec<KeyValue> {
    if start >= end {
        return Vec::new();
    }
    let bounds = (Bound::Included(start), Bound::Excluded(end));
    let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
        base.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
    for (key, value) in writes.range::<[u8], _>(bounds) {
        merged.insert(key.clone(), value.clone());
    }
    merged.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).take(limit).collect()
}

/// Whether replaying `steps` against `committed` returns the same results.
fn replays_unchanged(committed: &Map, steps: &[Step]) -> bool {
    let mut writes = Writes::new();
    steps.iter().all(|step| match step {
        Step::Get { key, seen } => model_get(committed, &writes, key) == *seen,
        Step::Scan { start, end, limit, seen } => model_scan(committed, &writes, start, end, *limit) == *seen,
        Step::Write { key, value } => {
            writes.insert(key.clone(), value.clone());
            true
        }
    })
}

struct Run {
    env: &'static str,
    snapshot_at: SnapshotAt,
    rng: StdRng,
    keys: Vec<Vec<u8>>,
    committed: Map,
    open: Vec<ModelTxn>,
    next_id: usize,
    history: Vec<String>,
}

impl Run {
    fn log(&mut self, entry: String) {
        self.history.push(entry);
    }

    fn fail(&self, seed: u64, message: String) -> ! {
        let shown = &self.history[self.history.len().saturating_sub(HISTORY_SHOWN)..];
        panic!(
            "seed {seed}: {message}\nlast operations:\n  {}\nreplay with {}_SEED={seed}",
            shown.join("\n  "),
            self.env
        );
    }

    fn key(&mut self) -> Vec<u8> {
        let i = self.rng.gen_range(0..self.keys.len());
        self.keys[i].clone()
    }

    fn value(&mut self) -> Vec<u8> {
        // Mostly short values (kept verbatim in read sets), some longer (kept as digests).
        let len = if self.rng.gen_bool(0.2) { self.rng.gen_range(65..400) } else { self.rng.gen_range(0..6) };
        let fill: u8 = self.rng.gen_range(0..4);
        vec![fill; len]
    }

    fn bound(&mut self) -> Vec<u8> {
        if self.rng.gen_bool(0.15) {
            END_OF_KEYSPACE.to_vec()
        } else {
            self.key()
        }
    }
}

async fn check_all(engine: &dyn KvEngine, run: &Run, seed: u64, when: &str) {
    let mut txn = engine.begin().await.unwrap_or_else(|err| run.fail(seed, format!("begin: {err}")));
    let all = txn
        .scan(&[], END_OF_KEYSPACE, usize::MAX)
        .await
        .unwrap_or_else(|err| run.fail(seed, format!("full scan: {err}")));
    let expected: Vec<KeyValue> = run.committed.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if all != expected {
        run.fail(seed, format!("{when}: committed state {all:?}, model {expected:?}"));
    }
}

async fn run_round<F, Fut>(test: &ModelTest, seed: u64, ops: usize, round: u64, open: &mut F)
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Box<dyn KvEngine>>,
{
    let mut engine = open(round).await;
    let mut run = Run {
        env: test.env,
        snapshot_at: test.snapshot_at,
        rng: StdRng::seed_from_u64(seed),
        keys: key_universe(),
        committed: Map::new(),
        open: Vec::new(),
        next_id: 0,
        history: Vec::new(),
    };
    for op in 0..ops {
        if op == ops / 2 {
            // Reopen mid-round: every open transaction is abandoned first.
            run.open.clear();
            run.log("reopen".into());
            drop(engine);
            engine = open(round).await;
            check_all(engine.as_ref(), &run, seed, "after reopening").await;
        }
        if run.open.is_empty() || (run.open.len() < OPEN_TXNS_MAX && run.rng.gen_bool(0.1)) {
            let txn = engine.begin().await.unwrap_or_else(|err| run.fail(seed, format!("begin: {err}")));
            let id = run.next_id;
            run.next_id += 1;
            run.open.push(ModelTxn {
                id,
                txn,
                snapshot: (run.snapshot_at == SnapshotAt::Begin).then(|| run.committed.clone()),
                writes: Writes::new(),
                steps: Vec::new(),
            });
            run.log(format!("t{id} begin"));
            continue;
        }
        let index = run.rng.gen_range(0..run.open.len());
        let choice = run.rng.gen_range(0..100);
        match choice {
            0..=24 => {
                let key = run.key();
                let t = &mut run.open[index];
                if t.snapshot.is_none() && !t.writes.contains_key(&key) {
                    t.snapshot = Some(run.committed.clone());
                }
                let result = t.txn.get(&key).await;
                let expected = model_get(t.snapshot.as_ref().unwrap_or(&run.committed), &t.writes, &key);
                let id = t.id;
                match result {
                    Ok(seen) if seen == expected => {
                        t.steps.push(Step::Get { key: key.clone(), seen });
                        run.log(format!("t{id} get {key:?} -> {expected:?}"));
                    }
                    other => run.fail(seed, format!("t{id} get {key:?}: got {other:?}, model {expected:?}")),
                }
            }
            25..=44 => {
                let (key, value) = (run.key(), run.value());
                let t = &mut run.open[index];
                let id = t.id;
                if let Err(err) = t.txn.put(&key, &value).await {
                    run.fail(seed, format!("t{id} put {key:?}: {err}"));
                }
                t.writes.insert(key.clone(), Some(value.clone()));
                t.steps.push(Step::Write { key: key.clone(), value: Some(value.clone()) });
                run.log(format!("t{id} put {key:?} = {} bytes of {:?}", value.len(), value.first()));
            }
            45..=54 => {
                let key = run.key();
                let t = &mut run.open[index];
                let id = t.id;
                if let Err(err) = t.txn.delete(&key).await {
                    run.fail(seed, format!("t{id} delete {key:?}: {err}"));
                }
                t.writes.insert(key.clone(), None);
                t.steps.push(Step::Write { key: key.clone(), value: None });
                run.log(format!("t{id} delete {key:?}"));
            }
            55..=79 => {
                let (start, end) = (run.bound(), run.bound());
                let limit = [0, 1, 2, 3, 5, usize::MAX][run.rng.gen_range(0..6)];
                let t = &mut run.open[index];
                let id = t.id;
                if t.snapshot.is_none() && limit > 0 && start < end {
                    t.snapshot = Some(run.committed.clone());
                }
                let expected =
                    model_scan(t.snapshot.as_ref().unwrap_or(&run.committed), &t.writes, &start, &end, limit);
                match t.txn.scan(&start, &end, limit).await {
                    Ok(seen) if seen == expected => {
                        t.steps.push(Step::Scan { start: start.clone(), end: end.clone(), limit, seen });
                        run.log(format!("t{id} scan {start:?}..{end:?} limit {limit} -> {} pairs", expected.len()));
                    }
                    other => run.fail(
                        seed,
                        format!("t{id} scan {start:?}..{end:?} limit {limit}: got {other:?}, model {expected:?}"),
                    ),
                }
            }
            80..=94 => {
                let t = run.open.swap_remove(index);
                let id = t.id;
                let should_commit = t.writes.is_empty() || replays_unchanged(&run.committed, &t.steps);
                let result = t.txn.commit().await;
                match (&result, should_commit) {
                    (Ok(()), true) => {
                        for (key, value) in t.writes {
                            match value {
                                Some(value) => run.committed.insert(key, value),
                                None => run.committed.remove(&key),
                            };
                        }
                        run.log(format!("t{id} commit -> ok"));
                    }
                    (Err(KvError::Conflict), false) => run.log(format!("t{id} commit -> conflict")),
                    _ => run.fail(
                        seed,
                        format!(
                            "t{id} commit: got {result:?}, model expected {}",
                            if should_commit { "Ok" } else { "Conflict" }
                        ),
                    ),
                }
            }
            _ => {
                let t = run.open.swap_remove(index);
                run.log(format!("t{} dropped", t.id));
            }
        }
        if op % 100 == 99 {
            check_all(engine.as_ref(), &run, seed, "periodic check").await;
        }
    }
    run.open.clear();
    drop(engine);
    let engine = open(round).await;
    check_all(engine.as_ref(), &run, seed, "after the final reopen").await;
    let count = |suffix: &str| run.history.iter().filter(|entry| entry.ends_with(suffix)).count();
    println!(
        "round seed {seed}: {} commits, {} conflicts, {} pairs at the end",
        count("commit -> ok"),
        count("commit -> conflict"),
        run.committed.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Flaw, MemoryEngine};

    /// The reference engine passes the model test too; a round's engine is shared by its
    /// "reopenings", which keep its data as a reopened file would.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_memory_engine_matches_the_model() {
        let engines: Vec<MemoryEngine> = (0..ROUNDS).map(|_| MemoryEngine::default()).collect();
        let test = ModelTest { env: "KV_MEMORY_MODEL", snapshot_at: SnapshotAt::Begin };
        run(test, |round| {
            let engine = engines[round as usize].clone();
            async move { Box::new(engine) as Box<dyn KvEngine> }
        })
        .await;
    }

    /// Each deliberate contract violation of the reference engine makes the test fail.
    #[test]
    fn every_flawed_engine_fails_the_model() {
        let flaws = [
            Flaw::NoValidation,
            Flaw::NoScanValidation,
            Flaw::NoSnapshot,
            Flaw::NoReadYourWrites,
            Flaw::ScanLimitOffByOne,
        ];
        for flaw in flaws {
            let outcome = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
                let engines: Vec<MemoryEngine> = (0..ROUNDS).map(|_| MemoryEngine::with_flaw(flaw)).collect();
                let test = ModelTest { env: "KV_MEMORY_MODEL", snapshot_at: SnapshotAt::Begin };
                runtime.block_on(run(test, move |round| {
                    let engine = engines[round as usize].clone();
                    async move { Box::new(engine) as Box<dyn KvEngine> }
                }));
            })
            .join();
            assert!(outcome.is_err(), "the model test passed an engine with {flaw:?}");
        }
    }
}
