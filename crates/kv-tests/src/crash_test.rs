//! A crash test that engines run in their own test suites: a child process commits numbered
//! transactions and reports each acknowledged commit on stdout; the parent SIGKILLs it at a
//! random moment, opens the engine anew and checks that every acknowledged commit is present
//! and that every transaction is all-or-nothing. Several rounds continue on the same store, so
//! recovery is also tested on a store that was itself recovered.
//!
//! The child is the engine's test binary re-executed to run the same test, which calls
//! [`child`] first: with `<env>_CHILD` set, that runs the writers and returns true. Two writer
//! tasks commit concurrently, each in its own key space: transaction `i` of writer `w` puts
//! `w{w}/t/{i}/{j}` for `j < parts(i)` (one of them a 100 KB value every 16th transaction),
//! deletes `w{w}/t/{i-3}/0`, and sets `w{w}/last` to `i`. So after any crash, with `L` the value
//! of `w{w}/last`, exactly the pairs of transactions `0..=L` must exist, minus the deletions
//! those transactions made, and `L` must be at least the last acknowledged `i`.
//!
//! SIGKILL stops the process, not the machine: this checks atomicity and recovery of torn
//! commits and that an acknowledged commit is committed, not that fsync reaches the disk.
//!
//! Reproducible kill timing: the seed is printed; `<env>_SEED=<seed>` replays it.

use kv::{KvEngine, KvTxn, END_OF_KEYSPACE};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// What differs between engines.
pub struct CrashTest {
    /// Prefix of the environment variables: `<env>_SEED` replays a run, `<env>_CHILD` (set for
    /// the child) names the store.
    pub env: &'static str,
    /// The test function's name: the child is the test binary run with only this test.
    pub test_name: &'static str,
    /// The store, as `open` takes it (a file path, a schema name).
    pub target: String,
    /// More environment for the child (the address of a server, say).
    pub child_env: Vec<(String, String)>,
    /// Retry a commit that fails with a retryable error. The writers' keys are disjoint; an
    /// engine that tracks reads by page (PostgreSQL's serializable mode) still reports
    /// conflicts between them at times. Without it, any commit error fails the test.
    pub retry_conflicts: bool,
}

/// Engine-independent part of a crash test's child; true when this process is the child (the
/// test function should then return).
pub fn child<F, Fut>(env: &str, retry_conflicts: bool, open: F) -> bool
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Arc<dyn KvEngine>>,
{
    let Ok(target) = std::env::var(format!("{env}_CHILD")) else {
        return false;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async move {
        let engine = open(target).await;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                let mut txn = engine.begin().await.expect("begin");
                let first = parse_last(txn.get(&last_key(writer)).await.expect("get last")).map_or(0, |last| last + 1);
                drop(txn);
                for i in first.. {
                    if started.elapsed() > CHILD_RUN_MAX {
                        break;
                    }
                    commit_numbered(engine.as_ref(), writer, i, retry_conflicts).await;
                    let mut stdout = std::io::stdout().lock();
                    writeln!(stdout, "ack {writer} {i}").and_then(|()| stdout.flush()).expect("report an ack");
                }
            }));
        }
        for task in tasks {
            task.await.expect("writer task");
        }
    });
    true
}

/// The parent: [`ROUNDS`] rounds of start, kill, verify. `open(target)` opens the engine on the
/// store again after each kill.
pub fn run<F, Fut>(test: CrashTest, open: F)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Arc<dyn KvEngine>>,
{
    let env = test.env;
    let seed = crate::env_number(&format!("{env}_SEED")).unwrap_or_else(|| rand::random::<u32>() as u64);
    println!("crash seed: {seed} (replay with {env}_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let exe = std::env::current_exe().expect("test binary path");
    let mut acked: [Option<u64>; WRITERS] = [None; WRITERS];
    let mut previous = [None; WRITERS];

    for round in 0..ROUNDS {
        let context = format!("seed {seed} round {round}");
        let mut child = Command::new(&exe)
            .args(["--exact", test.test_name, "--nocapture", "--test-threads=1"])
            .env(format!("{env}_CHILD"), &test.target)
            .envs(test.child_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the child");
        let stdout = child.stdout.take().expect("child stdout");
        let (sender, acks) = mpsc::channel::<(usize, u64)>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut words = line.split_whitespace();
                if words.next() != Some("ack") {
                    continue; // the test harness's own output
                }
                let writer = words.next().and_then(|w| w.parse().ok()).expect("ack writer");
                let i = words.next().and_then(|i| i.parse().ok()).expect("ack number");
                if sender.send((writer, i)).is_err() {
                    break;
                }
            }
        });

        let first = acks.recv_timeout(Duration::from_secs(30));
        let delay = Duration::from_millis(rng.gen_range(0..300));
        if first.is_ok() {
            std::thread::sleep(delay);
        }
        let still_running = child.try_wait().expect("poll the child").is_none();
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("reap the child");
        reader.join().expect("stdout reader");
        let first = first.unwrap_or_else(|err| panic!("{context}: no commit acknowledged ({err}); child {status}"));
        assert!(still_running, "{context}: the child exited by itself before the kill: {status}");

        let mut count = 0;
        for (writer, i) in std::iter::once(first).chain(acks.try_iter()) {
            let slot = &mut acked[writer];
            assert!(slot.is_none_or(|previous| i > previous), "{context}: writer {writer} acknowledged {i} twice");
            *slot = Some(i);
            count += 1;
        }
        let lasts = runtime.block_on(async {
            let engine = open(test.target.clone()).await;
            verify(engine.as_ref(), &acked, &context).await
        });
        println!(
            "{context}: killed after {delay:?}, {count} acknowledged commits, last acknowledged {acked:?}, database at {lasts:?}"
        );
        for writer in 0..WRITERS {
            assert!(lasts[writer] >= previous[writer], "{context}: writer {writer} went back");
        }
        previous = lasts;
        // Unacknowledged but durable commits are fine: they count as the writer's progress.
        acked = lasts;
    }
}

/// Writer tasks of the child.
pub const WRITERS: usize = 2;
/// Kill-and-verify rounds.
pub const ROUNDS: usize = 6;
/// The child stops by itself after this long, in case nobody kills it.
const CHILD_RUN_MAX: Duration = Duration::from_secs(20);
const BIG_VALUE_BYTES: usize = 100_000;

fn parts(i: u64) -> u64 {
    1 + i % 4
}

fn pair_key(writer: usize, i: u64, j: u64) -> Vec<u8> {
    format!("w{writer}/t/{i:010}/{j}").into_bytes()
}

fn last_key(writer: usize) -> Vec<u8> {
    format!("w{writer}/last").into_bytes()
}

fn pair_value(writer: usize, i: u64, j: u64) -> Vec<u8> {
    if i.is_multiple_of(16) && j == 0 {
        vec![(i % 251) as u8; BIG_VALUE_BYTES]
    } else {
        format!("{writer}:{i}:{j}").into_bytes()
    }
}

fn parse_last(value: Option<Vec<u8>>) -> Option<u64> {
    value.map(|bytes| {
        let text = String::from_utf8(bytes).expect("w/last is UTF-8");
        text.parse().unwrap_or_else(|_| panic!("w/last is {text:?}"))
    })
}

/// Commits transaction `i` of `writer`; with `retry`, again after a retryable failure.
async fn commit_numbered(engine: &dyn KvEngine, writer: usize, i: u64, retry: bool) {
    for attempt in 1.. {
        match try_commit_numbered(engine, writer, i).await {
            Ok(()) => return,
            Err(err) if retry && err.is_retryable() && attempt < kv::RETRY_COUNT_MAX => {
                tokio::time::sleep(kv::retry_backoff(attempt)).await;
            }
            Err(err) => panic!("writer {writer}: commit {i} (attempt {attempt}): {err}"),
        }
    }
}

async fn try_commit_numbered(engine: &dyn KvEngine, writer: usize, i: u64) -> Result<(), kv::KvError> {
    let mut txn: Box<dyn KvTxn> = engine.begin().await?;
    for j in 0..parts(i) {
        txn.put(&pair_key(writer, i, j), &pair_value(writer, i, j)).await?;
    }
    if i >= 3 {
        txn.delete(&pair_key(writer, i - 3, 0)).await?;
    }
    txn.put(&last_key(writer), i.to_string().as_bytes()).await?;
    txn.commit().await
}

/// Checks the state of the database against the invariants; returns each writer's last `i`.
async fn verify(engine: &dyn KvEngine, acked: &[Option<u64>; WRITERS], context: &str) -> [Option<u64>; WRITERS] {
    let mut txn = engine.begin().await.expect("begin");
    let all: BTreeMap<Vec<u8>, Vec<u8>> =
        txn.scan(&[], END_OF_KEYSPACE, usize::MAX).await.expect("scan").into_iter().collect();
    let mut lasts = [None; WRITERS];
    let mut expected_count = 0;
    for writer in 0..WRITERS {
        let last = parse_last(all.get(&last_key(writer)).cloned());
        lasts[writer] = last;
        if let Some(acked) = acked[writer] {
            assert!(
                last.is_some_and(|last| last >= acked),
                "{context}: writer {writer}: commit {acked} was acknowledged but the database ends at {last:?}"
            );
        }
        let Some(last) = last else { continue };
        expected_count += 1;
        for i in 0..=last {
            for j in 0..parts(i) {
                let key = pair_key(writer, i, j);
                let deleted = j == 0 && i + 3 <= last;
                match (all.get(&key), deleted) {
                    (None, true) => {}
                    (Some(value), false) if *value == pair_value(writer, i, j) => expected_count += 1,
                    (found, _) => panic!(
                        "{context}: writer {writer} transaction {i} (last {last}): key {} is {:?}, expected {}",
                        String::from_utf8_lossy(&key),
                        found.map(|v| v.len()),
                        if deleted { "deleted" } else { "its value" }
                    ),
                }
            }
        }
    }
    assert_eq!(
        all.len(),
        expected_count,
        "{context}: the database holds pairs of uncommitted or torn transactions (lasts {lasts:?})"
    );
    lasts
}
