//! Multi-host tests: a lab of network namespaces (see `hosts/mod.rs`) with one PostgreSQL host,
//! two metadata hosts sharing its database, and eight storage hosts, each with its own IP
//! address; the test process is the client, over the lab's bridge. Needs root and iproute2.
//!
//! Storage nodes heartbeat to every metadata host (`MetaList::All`, the lab's default), which
//! metadata failover needs. The tests that start a lab run one at a time (`LAB_TESTS`): on a
//! small machine several 11-host labs with client load at once starve heartbeats, and a node
//! missing its heartbeats is marked down (and, with a short `rebuild_after_ms`, out).
//!
//! Also checks that the example deployment in `deploy/` parses with the real config types.

mod common;
mod hosts;

use common::content;
use hosts::{Lab, LabOptions};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// The tests that start a lab run one at a time (see the module comment).
static LAB_TESTS: Mutex<()> = Mutex::new(());

fn one_lab_at_a_time() -> MutexGuard<'static, ()> {
    LAB_TESTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// (path, content id, size) of a file whose bytes are `content(id, size)`.
type FileSpec = (String, u64, usize);

/// Files under `dir` with sizes around block (64 KiB), shard and chunk (4 MiB) boundaries.
fn dataset_in(dir: &str) -> Vec<FileSpec> {
    let sizes = [
        0,
        1,
        2,
        100,
        4095,
        4096,
        4097,
        64 * 1024 + 1,
        200 * 1024,
        MIB,
        MIB + 1,
        3 * MIB + 5,
        4 * MIB - 1,
        4 * MIB,
        4 * MIB + 1,
        8 * MIB,
        9 * MIB,
        9 * MIB + 7,
        12 * MIB + 3,
        0,
    ];
    sizes.iter().enumerate().map(|(i, &size)| (format!("{dir}/f{i:02}-{size}"), 1000 + i as u64, size)).collect()
}

fn dataset() -> Vec<FileSpec> {
    dataset_in("/smoke")
}

async fn write_all(lab: &Lab, client: &client::Client, files: &[FileSpec], what: &str) {
    let t = Instant::now();
    for (path, id, size) in files {
        if let Some(dir) = path.rsplit_once('/').map(|(d, _)| d).filter(|d| !d.is_empty()) {
            if let Err(e) = client.mkdir_p(dir).await {
                lab.fail(&format!("{what}: mkdir -p {dir}: {e}"));
            }
        }
        if let Err(e) = client.write_file(path, &content(*id, *size)).await {
            lab.fail(&format!("{what}: writing {path} ({size} bytes) failed: {e}"));
        }
    }
    let bytes: usize = files.iter().map(|f| f.2).sum();
    lab.log(&format!(
        "{what}: wrote {} files, {:.1} MiB in {:.2}s",
        files.len(),
        bytes as f64 / MIB as f64,
        t.elapsed().as_secs_f64()
    ));
}

async fn check_all(lab: &Lab, client: &client::Client, files: &[FileSpec], what: &str) {
    let t = Instant::now();
    for (path, id, size) in files {
        let got = match client.read_file(path).await {
            Ok(b) => b,
            Err(e) => lab.fail(&format!("{what}: reading {path} ({size} bytes) failed: {e}")),
        };
        if got.len() != *size {
            lab.fail(&format!("{what}: {path}: read {} bytes, wrote {size}", got.len()));
        }
        if got[..] != content(*id, *size)[..] {
            let at = got.iter().zip(content(*id, *size)).position(|(a, b)| *a != b).unwrap_or(0);
            lab.fail(&format!("{what}: {path}: content differs from what was written (first difference at byte {at})"));
        }
    }
    let bytes: usize = files.iter().map(|f| f.2).sum();
    lab.log(&format!(
        "{what}: {} files, {:.1} MiB bit-exact in {:.2}s",
        files.len(),
        bytes as f64 / MIB as f64,
        t.elapsed().as_secs_f64()
    ));
}

fn status_counts(lab: &Lab, meta: usize) -> (u64, u64, usize) {
    let s = lab.status(meta).unwrap_or_else(|e| lab.fail(&e));
    let up = s["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["state"] == "up").count());
    (s["chunks_degraded"].as_u64().unwrap_or(u64::MAX), s["chunks_unavailable"].as_u64().unwrap_or(u64::MAX), up)
}

// ---------------------------------------------------------------------------------------------
// Status polling.

/// No degraded, misplaced or unavailable chunk.
fn settled(s: &serde_json::Value) -> bool {
    s["chunks_degraded"] == 0 && s["chunks_misplaced"] == 0 && s["chunks_unavailable"] == 0 && s["chunks_narrow"] == 0
}

/// The state of the node at `addr` in a status document ("unregistered" when absent).
fn state_of(s: &serde_json::Value, addr: &str) -> String {
    Lab::node_of(s, addr).and_then(|n| n["state"].as_str()).unwrap_or("unregistered").to_string()
}

/// One line: map version, chunk counts, node states, leader.
fn summary(s: &serde_json::Value) -> String {
    let mut states = std::collections::BTreeMap::<String, usize>::new();
    for n in s["nodes"].as_array().into_iter().flatten() {
        *states.entry(n["state"].as_str().unwrap_or("?").to_string()).or_default() += 1;
    }
    let states: Vec<String> = states.iter().map(|(k, v)| format!("{v} {k}")).collect();
    format!(
        "map v{} chunks {} degraded {} misplaced {} unavailable {} nodes [{}] leader {}",
        s["map_version"],
        s["chunks"],
        s["chunks_degraded"],
        s["chunks_misplaced"],
        s["chunks_unavailable"],
        states.join(", "),
        s["leader"].as_str().unwrap_or("-")
    )
}

/// Polls `trove status --json` through each metadata host of `metas` until `done` holds for
/// every one of them, logging each change of the summary; fails after `timeout` with the last
/// status. Returns how long it took and the last status of the first host.
fn wait_status(
    lab: &Lab,
    metas: &[usize],
    timeout: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> (Duration, serde_json::Value) {
    let t = Instant::now();
    let mut last_line = String::new();
    let mut last_err = String::new();
    loop {
        let mut all = true;
        let mut first = serde_json::Value::Null;
        for &m in metas {
            match lab.status(m) {
                Ok(s) => {
                    let line = format!("{}: {}", lab.meta(m).name, summary(&s));
                    if m == metas[0] && line != last_line {
                        lab.log(&format!("  [{what} +{:.1}s] {line}", t.elapsed().as_secs_f64()));
                        last_line = line;
                    }
                    if !done(&s) {
                        all = false;
                        last_err = format!("{}: {}", lab.meta(m).name, summary(&s));
                    }
                    if m == metas[0] {
                        first = s;
                    }
                }
                Err(e) => {
                    all = false;
                    last_err = e;
                }
            }
        }
        if all {
            lab.log(&format!("{what}: after {:.1}s", t.elapsed().as_secs_f64()));
            return (t.elapsed(), first);
        }
        if t.elapsed() >= timeout {
            lab.fail(&format!("{what}: not reached after {timeout:?}; last: {last_err}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

// ---------------------------------------------------------------------------------------------
// Client load.

/// Longest one client operation may take before it counts as failed (longer than the client's
/// own `meta_deadline` and storage timeout).
const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// Sizes the writers cycle through: empty, tiny, sub-block, a block plus one, more than a
/// chunk, and several chunks.
const WRITE_SIZES: [usize; 8] = [0, 1, 4097, 64 * 1024 + 1, 300_000, MIB + 3, 4 * MIB + 1, 2 * MIB];
/// Pause of each load task between two operations.
const LOAD_PAUSE: Duration = Duration::from_millis(30);

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    creates: AtomicU64,
    renames: AtomicU64,
    lists: AtomicU64,
    failures: AtomicU64,
    max_latency_ms: AtomicU64,
}

struct Shared {
    c: Counters,
    started: Instant,
    /// Every failure: "+12.3s write /x: error".
    errors: Mutex<Vec<String>>,
    /// Writes the client acknowledged, to verify at the end.
    acked: Mutex<Vec<FileSpec>>,
}

impl Shared {
    /// Counts one finished operation; a failure is recorded (and printed at once).
    fn done<T>(
        &self,
        what: &str,
        started: Instant,
        outcome: Result<Result<T, client::WireError>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        let ms = started.elapsed().as_millis() as u64;
        self.c.max_latency_ms.fetch_max(ms, Ordering::Relaxed);
        let err = match outcome {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(e)) => format!("{e}"),
            Err(_) => format!("no answer within {OP_TIMEOUT:?}"),
        };
        self.fail(&format!("{what} ({ms} ms): {err}"));
        None
    }

    fn fail(&self, msg: &str) {
        let line = format!("+{:.1}s {msg}", self.started.elapsed().as_secs_f64());
        eprintln!("LOAD FAILURE {line}");
        self.c.failures.fetch_add(1, Ordering::Relaxed);
        self.errors.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }

    fn acked(&self) -> Vec<FileSpec> {
        self.acked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn ops(&self) -> u64 {
        let c = &self.c;
        [&c.reads, &c.writes, &c.creates, &c.renames, &c.lists].iter().map(|a| a.load(Ordering::Relaxed)).sum::<u64>()
            + self.failures()
    }

    fn failures(&self) -> u64 {
        self.c.failures.load(Ordering::Relaxed)
    }

    fn report(&self) -> String {
        let c = &self.c;
        let acked = self.acked();
        let bytes: usize = acked.iter().map(|f| f.2).sum();
        format!(
            "{} ops in {:.1}s: {} writes ({} acknowledged, {:.1} MiB), {} reads, {} creates, {} renames, {} lists; {} failed; slowest {} ms",
            self.ops(),
            self.started.elapsed().as_secs_f64(),
            c.writes.load(Ordering::Relaxed),
            acked.len(),
            bytes as f64 / MIB as f64,
            c.reads.load(Ordering::Relaxed),
            c.creates.load(Ordering::Relaxed),
            c.renames.load(Ordering::Relaxed),
            c.lists.load(Ordering::Relaxed),
            self.failures(),
            c.max_latency_ms.load(Ordering::Relaxed)
        )
    }

    fn errors(&self) -> String {
        let errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        let shown: Vec<&str> = errors.iter().take(30).map(String::as_str).collect();
        format!(
            "{}{}",
            shown.join("\n"),
            if errors.len() > 30 { format!("\n... and {} more", errors.len() - 30) } else { String::new() }
        )
    }
}

/// What a load runs: `writers` tasks writing new files of known content under `dir`,
/// `readers` tasks verifying `base` files and acknowledged writes, and with `namespace` one task
/// creating (exclusively), renaming and listing entries of `dir/ns`, checking each listing
/// against what it did.
struct LoadSpec {
    dir: String,
    writers: usize,
    readers: usize,
    namespace: bool,
}

/// Client load running on tokio tasks until `stop`.
struct Load {
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    async fn start(lab: &Lab, client: &client::Client, base: &[FileSpec], spec: LoadSpec) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            c: Counters::default(),
            started: Instant::now(),
            errors: Mutex::new(Vec::new()),
            acked: Mutex::new(Vec::new()),
        });
        if let Err(e) = client.mkdir_p(&spec.dir).await {
            lab.fail(&format!("load: mkdir -p {}: {e}", spec.dir));
        }
        let mut tasks = Vec::new();
        let salt = u64::from(spec.dir.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))) << 24;
        for t in 0..spec.writers {
            let (client, shared, stop, dir) = (client.clone(), shared.clone(), stop.clone(), spec.dir.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let size = WRITE_SIZES[(i + 3 * t) % WRITE_SIZES.len()];
                    let id = salt + ((t as u64) << 20) + i as u64;
                    let path = format!("{dir}/w{t}-{i:05}");
                    let data = content(id, size);
                    let started = Instant::now();
                    let outcome = tokio::time::timeout(OP_TIMEOUT, client.write_file(&path, &data)).await;
                    if shared.done(&format!("write {path} ({size} bytes)"), started, outcome).is_some() {
                        shared.c.writes.fetch_add(1, Ordering::Relaxed);
                        shared.acked.lock().unwrap_or_else(|e| e.into_inner()).push((path, id, size));
                    }
                    i += 1;
                    tokio::time::sleep(LOAD_PAUSE).await;
                }
            }));
        }
        for r in 0..spec.readers {
            let (client, shared, stop, base) = (client.clone(), shared.clone(), stop.clone(), base.to_vec());
            tasks.push(tokio::spawn(async move {
                let mut i = r * 7;
                while !stop.load(Ordering::Relaxed) {
                    // Base files and files acknowledged during the load, alternately.
                    let acked = shared.acked();
                    let (path, id, size) = if i % 2 == 1 && !acked.is_empty() {
                        acked[(i * 7919) % acked.len()].clone()
                    } else {
                        base[(i / 2) % base.len()].clone()
                    };
                    let started = Instant::now();
                    let outcome = tokio::time::timeout(OP_TIMEOUT, client.read_file(&path)).await;
                    if let Some(got) = shared.done(&format!("read {path} ({size} bytes)"), started, outcome) {
                        if got.len() != size || got[..] != content(id, size)[..] {
                            shared
                                .fail(&format!("read {path}: {} bytes that differ from the {size} written", got.len()));
                        } else {
                            shared.c.reads.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    i += 1;
                    tokio::time::sleep(LOAD_PAUSE).await;
                }
            }));
        }
        if spec.namespace {
            let nsdir = format!("{}/ns", spec.dir);
            let parent = match client.mkdir_p(&nsdir).await {
                Ok(a) => a.ino,
                Err(e) => lab.fail(&format!("load: mkdir -p {nsdir}: {e}")),
            };
            let (client, shared, stop) = (client.clone(), shared.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                // What the directory holds, as far as this task knows (`None` after a failed
                // operation, until the next listing).
                let mut expected: Option<BTreeSet<String>> = Some(BTreeSet::new());
                let mut last_created: Option<String> = None;
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    match i % 4 {
                        0 | 1 => {
                            let name = format!("c{i:05}");
                            let outcome =
                                tokio::time::timeout(OP_TIMEOUT, client.create(parent, &name, 0o644, true)).await;
                            if shared.done(&format!("create (exclusive) {nsdir}/{name}"), started, outcome).is_some() {
                                shared.c.creates.fetch_add(1, Ordering::Relaxed);
                                if let Some(e) = expected.as_mut() {
                                    e.insert(name.clone());
                                }
                                last_created = Some(name);
                            } else {
                                expected = None;
                            }
                        }
                        2 => {
                            if let Some(old) = last_created.take() {
                                let new = format!("r{i:05}");
                                let outcome =
                                    tokio::time::timeout(OP_TIMEOUT, client.rename(parent, &old, parent, &new)).await;
                                if shared.done(&format!("rename {nsdir}/{old} to {new}"), started, outcome).is_some() {
                                    shared.c.renames.fetch_add(1, Ordering::Relaxed);
                                    if let Some(e) = expected.as_mut() {
                                        e.remove(&old);
                                        e.insert(new);
                                    }
                                } else {
                                    expected = None;
                                }
                            }
                        }
                        _ => {
                            let outcome = tokio::time::timeout(OP_TIMEOUT, client.readdir(parent)).await;
                            if let Some(entries) = shared.done(&format!("list {nsdir}"), started, outcome) {
                                shared.c.lists.fetch_add(1, Ordering::Relaxed);
                                let names: BTreeSet<String> =
                                    entries.into_iter().map(|e| e.name).filter(|n| n != "." && n != "..").collect();
                                if let Some(want) = &expected {
                                    if *want != names {
                                        let missing: Vec<&String> = want.difference(&names).collect();
                                        let extra: Vec<&String> = names.difference(want).collect();
                                        shared
                                            .fail(&format!("list {nsdir}: missing {missing:?}, unexpected {extra:?}"));
                                    }
                                }
                                expected = Some(names);
                            }
                        }
                    }
                    i += 1;
                    tokio::time::sleep(LOAD_PAUSE).await;
                }
            }));
        }
        Load { stop, shared, tasks }
    }

    /// Stops the tasks (each finishes its operation) and returns what they did.
    async fn stop(self, lab: &Lab) -> Arc<Shared> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            if let Err(e) = t.await {
                lab.fail(&format!("a load task panicked: {e}"));
            }
        }
        self.shared
    }
}

/// Fails unless the load failed no operation, and did some.
fn require_no_failure(lab: &Lab, load: &Shared, what: &str) {
    lab.log(&format!("{what}: load: {}", load.report()));
    if load.failures() > 0 {
        lab.fail(&format!(
            "{what}: {} client operations failed (every failure counts, transient or not):\n{}",
            load.failures(),
            load.errors()
        ));
    }
}

/// Waits (load running) until the load has done `n` more operations than `from`; fails if it
/// stalls.
fn wait_progress(lab: &Lab, load: &Load, n: u64, timeout: Duration, what: &str) {
    let from = load.shared.ops();
    let t = Instant::now();
    while load.shared.ops() < from + n {
        if t.elapsed() >= timeout {
            lab.fail(&format!(
                "{what}: the load made {} operations in {timeout:?} (wanted {n}): stalled; {}",
                load.shared.ops() - from,
                load.shared.report()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 8 storage + 2 metadata + 1 PostgreSQL hosts: write through the first metadata host, read
/// through the second, lose one storage host to SIGKILL and another to a cut link, read
/// everything again, heal both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_storage_two_meta_hosts_survive_kill_and_partition() {
    let _serial = one_lab_at_a_time();
    let lab = Lab::start(LabOptions::default());
    let states = lab.node_states(0).unwrap_or_else(|e| lab.fail(&e));
    assert!(states.iter().all(|s| s.as_deref() == Some("up")), "status after start: {states:?}");
    let status = lab.status(1).unwrap_or_else(|e| lab.fail(&e));
    assert!(
        status["engine"].as_str().is_some_and(|e| e.contains("postgres")),
        "the second metadata host runs on PostgreSQL: {status:#}"
    );
    assert_eq!(
        status["nodes"].as_array().map(Vec::len),
        Some(8),
        "the second metadata host sees all 8 nodes: {status:#}"
    );

    // Write through metadata host 1.
    let files = dataset();
    let writer = lab.client(0).await;
    let t = Instant::now();
    if let Err(e) = writer.mkdir_p("/smoke").await {
        lab.fail(&format!("mkdir /smoke through meta1: {e}"));
    }
    for (path, id, size) in &files {
        if let Err(e) = writer.write_file(path, &content(*id, *size)).await {
            lab.fail(&format!("writing {path} ({size} bytes) through meta1 failed: {e}"));
        }
    }
    let bytes: usize = files.iter().map(|f| f.2).sum();
    lab.log(&format!(
        "wrote {} files, {:.1} MiB through meta1 in {:.2}s",
        files.len(),
        bytes as f64 / MIB as f64,
        t.elapsed().as_secs_f64()
    ));

    // Read through metadata host 2: one namespace on one database.
    let reader = lab.client(1).await;
    check_all(&lab, &reader, &files, "through meta2").await;
    let ls = lab.cli(1, &["ls", "/smoke"], Duration::from_secs(20)).unwrap_or_else(|e| lab.fail(&e));
    let listing = String::from_utf8_lossy(&ls.stdout);
    assert!(ls.status.success(), "trove ls through meta2: {}", String::from_utf8_lossy(&ls.stderr));
    for (path, _, _) in &files {
        let name = path.rsplit('/').next().unwrap_or_default();
        assert!(
            listing.lines().any(|l| l.split_whitespace().any(|w| w == name)),
            "`trove ls /smoke` through meta2 lacks {name}:\n{listing}"
        );
    }
    let (degraded, unavailable, up) = status_counts(&lab, 0);
    assert_eq!((degraded, unavailable, up), (0, 0, 8), "healthy cluster: (degraded, unavailable, nodes up)");

    // Lose two storage hosts: one to power loss, one to a network partition.
    let (killed, cut) = (2, 5);
    lab.storage(killed).kill();
    lab.storage(cut).cut();
    lab.log(&format!("killed {}, cut {}", lab.storage(killed).name, lab.storage(cut).name));
    lab.wait_nodes(&[killed, cut], "down", Duration::from_secs(15));
    assert!(!lab.storage(cut).running_pids().is_empty(), "the partitioned host keeps running");
    let (degraded, unavailable, up) = status_counts(&lab, 0);
    assert_eq!(up, 6, "6 of 8 nodes up with two hosts lost");
    assert!(degraded > 0, "chunks on the lost hosts count as degraded");
    assert_eq!(unavailable, 0, "4+2 loses no chunk to two lost hosts");

    // Fresh clients: no connection or cache from before; every read goes to the survivors.
    check_all(&lab, &lab.client(1).await, &files, "2 hosts lost, through meta2").await;
    check_all(&lab, &lab.client(0).await, &files, "2 hosts lost, through meta1").await;

    // Heal: restart the killed host with its data, bring the cut link back.
    lab.storage(killed).start();
    lab.storage(cut).restore();
    lab.wait_nodes(&[killed, cut], "up", Duration::from_secs(30));
    let (degraded, unavailable, up) = status_counts(&lab, 0);
    assert_eq!((degraded, unavailable, up), (0, 0, 8), "healed cluster: (degraded, unavailable, nodes up)");
    check_all(&lab, &lab.client(1).await, &files, "healed, through meta2").await;

    // And it takes writes again, visible through the other metadata host.
    let after = ("/smoke/after-heal".to_string(), 77, 5 * MIB + 3);
    if let Err(e) = lab.client(1).await.write_file(&after.0, &content(after.1, after.2)).await {
        lab.fail(&format!("write after healing through meta2: {e}"));
    }
    check_all(&lab, &writer, &[after], "written through meta2, read through meta1").await;
    lab.log("done");
}

/// Shard files under `dir` (a storage host's drive).
fn shard_files(dir: &Path) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.components().any(|c| c.as_os_str() == "shards") {
                count += 1;
            }
        }
    }
    count
}

/// How long chunks written degraded may stay unrepaired once writes stop: the mover passes at
/// least every 10 s (`trove::mover::PASS_INTERVAL_MAX`), plus the time of a pass.
const RESETTLE_MAX: Duration = Duration::from_secs(20);

/// Node ids, addresses and states are looked up through both metadata hosts.
const BOTH: [usize; 2] = [0, 1];

/// Issue evidence 1: a client given both metadata hosts reads and writes without a single
/// failure while one storage host loses power and another its network, both are marked out after
/// `rebuild_after_ms` and their shards rebuilt on the others; then every acknowledged write
/// reads back bit-exact, also after two further hosts are lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_survives_two_lost_hosts_then_rebuild_then_two_more() {
    let _serial = one_lab_at_a_time();
    let lab = Lab::start(LabOptions {
        down_after_ms: 1500,
        meta_extra: "rebuild_after_ms = 3000\ngc_grace_ms = 1000\nscrub_interval_ms = 0\n".into(),
        ..LabOptions::default()
    });
    let client = lab.client_all().await;
    let base = dataset_in("/base");
    write_all(&lab, &client, &base, "base dataset").await;
    let load =
        Load::start(&lab, &client, &base, LoadSpec { dir: "/load".into(), writers: 2, readers: 2, namespace: false })
            .await;
    wait_progress(&lab, &load, 20, Duration::from_secs(30), "load before the losses");

    let (killed, cut) = (1, 4);
    let lost = [lab.storage(killed).addr(), lab.storage(cut).addr()];
    let t = Instant::now();
    lab.storage(killed).kill();
    lab.storage(cut).cut();
    lab.log(&format!(
        "killed {}, cut {} ({} operations so far)",
        lab.storage(killed).name,
        lab.storage(cut).name,
        load.shared.ops()
    ));
    wait_status(&lab, &BOTH, Duration::from_secs(30), "lost hosts not up", |s| {
        lost.iter().all(|a| state_of(s, a) != "up")
    });
    let down_s = t.elapsed().as_secs_f64();
    wait_status(&lab, &BOTH, Duration::from_secs(60), "lost hosts out", |s| {
        lost.iter().all(|a| state_of(s, a) == "out")
    });
    let out_s = t.elapsed().as_secs_f64();
    let (_, status) =
        wait_status(&lab, &BOTH, Duration::from_secs(90), "rebuilt: lost hosts out, 0 degraded, 0 misplaced", |s| {
            lost.iter().all(|a| state_of(s, a) == "out") && settled(s)
        });
    let settled_s = t.elapsed().as_secs_f64();
    lab.log(&format!(
        "after the loss: down {down_s:.1}s, out {out_s:.1}s, rebuilt and settled {settled_s:.1}s; {}",
        summary(&status)
    ));
    let up = status["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["state"] == "up").count());
    if up != 6 {
        lab.fail(&format!("after the rebuild {up} nodes are up, expected 6: {status:#}"));
    }
    wait_progress(&lab, &load, 10, Duration::from_secs(30), "load after the rebuild");
    let load = load.stop(&lab).await;
    require_no_failure(&lab, &load, "2 hosts lost, rebuilt");
    let acked = load.acked();
    if acked.len() < 10 {
        lab.fail(&format!("only {} writes acknowledged during the loss and rebuild: {}", acked.len(), load.report()));
    }
    // Writes still in flight at the settle (started on the older map, one shard lost with the
    // hosts) commit degraded after it; the mover repairs them in its next pass. Two more losses
    // are survivable only once that is done.
    // Waited for longer than that (so that the rest of the test still runs), judged at the end.
    let (resettle, status) = wait_status(&lab, &BOTH, Duration::from_secs(60), "settled again after the load", settled);
    lab.log(&format!("settled again {:.1}s after the load stopped: {}", resettle.as_secs_f64(), summary(&status)));
    let fresh = lab.client_all().await;
    check_all(&lab, &fresh, &base, "after rebuild: base").await;
    check_all(&lab, &fresh, &acked, "after rebuild: acknowledged writes").await;

    // Full redundancy is back: two more hosts may go.
    let (killed2, cut2) = (6, 2);
    let lost2 = [lab.storage(killed2).addr(), lab.storage(cut2).addr()];
    lab.storage(killed2).kill();
    lab.storage(cut2).cut();
    lab.log(&format!("killed {}, cut {}", lab.storage(killed2).name, lab.storage(cut2).name));
    wait_status(&lab, &BOTH, Duration::from_secs(30), "2 more hosts not up", |s| {
        lost2.iter().all(|a| state_of(s, a) != "up")
    });
    let fresh = lab.client_all().await;
    check_all(&lab, &fresh, &base, "4 hosts lost (2 rebuilt): base").await;
    check_all(&lab, &fresh, &acked, "4 hosts lost (2 rebuilt): acknowledged writes").await;
    let status = lab.status(0).unwrap_or_else(|e| lab.fail(&e));
    if status["chunks_unavailable"] != 0 {
        lab.fail(&format!("chunks unavailable with 4 hosts lost, 2 of them rebuilt: {}", summary(&status)));
    }
    lab.log(&format!("done: {}", summary(&status)));
    if resettle > RESETTLE_MAX {
        lab.fail(&format!(
            "chunks committed degraded by writes in flight during the rebuild were repaired only {:.1}s after the load stopped \
             (the mover passes at least every 10s; allowed {RESETTLE_MAX:?}): until then two more lost hosts lose acknowledged writes",
            resettle.as_secs_f64()
        ));
    }
}

/// Issue evidence 2: `trove node drain` moves a node's data off while it serves and marks it
/// out; `trove node add` joins a brand-new host that receives shards by rebalance; a light load
/// fails nothing meanwhile, and everything reads back bit-exact, also with two hosts killed
/// afterwards (the new one among them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_and_add_keep_data_exact() {
    let _serial = one_lab_at_a_time();
    let mut lab = Lab::start(LabOptions {
        meta_extra: "gc_grace_ms = 1000\nscrub_interval_ms = 0\n".into(),
        ..LabOptions::default()
    });
    let client = lab.client_all().await;
    let base = dataset_in("/base");
    write_all(&lab, &client, &base, "base dataset").await;
    let load =
        Load::start(&lab, &client, &base, LoadSpec { dir: "/load".into(), writers: 1, readers: 1, namespace: false })
            .await;
    wait_progress(&lab, &load, 10, Duration::from_secs(30), "load before the drain");

    let drained = 2;
    let drained_addr = lab.storage(drained).addr();
    let id = lab.node_id(0, drained).unwrap_or_else(|e| lab.fail(&e));
    let shards_of =
        |s: &serde_json::Value, addr: &str| Lab::node_of(s, addr).and_then(|n| n["shards"].as_u64()).unwrap_or(0);
    // The status counts a node's shards as its last heartbeat reported them: wait a few
    // heartbeats for the writes above to show.
    let counted_by = Instant::now() + Duration::from_secs(10);
    let before = loop {
        let before = shards_of(&lab.status(0).unwrap_or_else(|e| lab.fail(&e)), &drained_addr);
        if before > 0 {
            break before;
        }
        if Instant::now() >= counted_by {
            lab.fail(&format!("{} (node {id}) holds no shards before the drain", lab.storage(drained).name));
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let t = Instant::now();
    let out = lab.cli(0, &["node", "drain", &id.to_string()], Duration::from_secs(20)).unwrap_or_else(|e| lab.fail(&e));
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("draining") {
        lab.fail(&format!("trove node drain {id}: {}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    lab.log(&format!("draining {} (node {id}, {before} shards)", lab.storage(drained).name));
    let (_, status) =
        wait_status(&lab, &BOTH, Duration::from_secs(90), "drained node out, 0 degraded, 0 misplaced", |s| {
            state_of(s, &drained_addr) == "out" && settled(s)
        });
    lab.log(&format!("drained in {:.1}s: {}", t.elapsed().as_secs_f64(), summary(&status)));
    // Its old shards are deleted after the grace period (gc_grace_ms = 1000).
    let drive = lab.storage(drained).dir().join("drive0");
    let deadline = Instant::now() + Duration::from_secs(10);
    while shard_files(&drive) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let left_on_drained = shard_files(&drive);
    if left_on_drained > 0 {
        lab.fail(&format!(
            "{} keeps {left_on_drained} shard files in {} 10s after it was drained and out",
            lab.storage(drained).name,
            drive.display()
        ));
    }
    let fresh = lab.client_all().await;
    check_all(&lab, &fresh, &base, "after the drain: base").await;
    check_all(&lab, &fresh, &load.shared.acked(), "after the drain: acknowledged writes").await;

    let t = Instant::now();
    let added = lab.add_storage();
    let added_addr = lab.storage(added).addr();
    lab.wait_nodes(&[added], "up", Duration::from_secs(30));
    lab.log(&format!("{} up after {:.1}s", lab.storage(added).name, t.elapsed().as_secs_f64()));
    let (_, status) =
        wait_status(&lab, &BOTH, Duration::from_secs(90), "added node up, 0 degraded, 0 misplaced", |s| {
            state_of(s, &added_addr) == "up" && settled(s)
        });
    lab.log(&format!("rebalanced in {:.1}s: {}", t.elapsed().as_secs_f64(), summary(&status)));
    // Shard counts come with heartbeats: they may lag the moves by one.
    let (_, status) = wait_status(&lab, &[0], Duration::from_secs(15), "added node reports shards", |s| {
        shards_of(s, &added_addr) > 0
    });
    lab.log(&format!(
        "{} holds {} shards; drained {} reports {}",
        lab.storage(added).name,
        shards_of(&status, &added_addr),
        lab.storage(drained).name,
        shards_of(&status, &drained_addr)
    ));
    wait_progress(&lab, &load, 10, Duration::from_secs(30), "load after the add");
    let load = load.stop(&lab).await;
    require_no_failure(&lab, &load, "drain and add");
    let acked = load.acked();
    let fresh = lab.client_all().await;
    check_all(&lab, &fresh, &base, "after the add: base").await;
    check_all(&lab, &fresh, &acked, "after the add: acknowledged writes").await;

    // Redundancy is complete on the new layout: the new host and another may go.
    let other = 5;
    lab.storage(added).kill();
    lab.storage(other).kill();
    lab.log(&format!("killed {} and {}", lab.storage(added).name, lab.storage(other).name));
    let fresh = lab.client_all().await;
    check_all(&lab, &fresh, &base, "2 hosts killed after the add: base").await;
    check_all(&lab, &fresh, &acked, "2 hosts killed after the add: acknowledged writes").await;
    lab.log("done");
}

/// Issue evidence 3: SIGKILL of the metadata host that both holds the cluster manager's lease and
/// serves the client, under a load of reads, writes, exclusive creates, renames and listings:
/// no operation fails (the client retries on the other host with the same request ids), the
/// survivor takes the lease within about `lease_ms`, and every acknowledged write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_server_killed_mid_load_fails_no_operation() {
    let _serial = one_lab_at_a_time();
    const LEASE_MS: u64 = 3000;
    let lab = Lab::start(LabOptions {
        meta_extra: format!("lease_ms = {LEASE_MS}\nscrub_interval_ms = 0\n"),
        ..LabOptions::default()
    });
    let (_, status) = wait_status(&lab, &BOTH, Duration::from_secs(20), "a lease holder", |s| s["leader"].is_string());
    let leader = status["leader"].as_str().unwrap_or_default().to_string();
    let Some(victim) = BOTH.into_iter().find(|&m| lab.meta(m).addr() == leader) else {
        lab.fail(&format!("the leader {leader:?} is no metadata host of the lab: {status:#}"));
    };
    let survivor = 1 - victim;
    let survivor_addr = lab.meta(survivor).addr();
    // The lease holder first: the client uses it until it fails.
    let client = lab.client_of(&[victim, survivor], client::ClientOptions::default()).await;
    let base = dataset_in("/base");
    write_all(&lab, &client, &base, "base dataset").await;
    let load =
        Load::start(&lab, &client, &base, LoadSpec { dir: "/load".into(), writers: 2, readers: 1, namespace: true })
            .await;
    wait_progress(&lab, &load, 40, Duration::from_secs(30), "load before the kill");

    let t = Instant::now();
    lab.meta(victim).kill();
    lab.log(&format!(
        "SIGKILLed {} (lease holder, the client's metadata server) after {} operations",
        lab.meta(victim).name,
        load.shared.ops()
    ));
    wait_status(&lab, &[survivor], Duration::from_secs(30), "survivor holds the lease", |s| {
        s["leader"].as_str() == Some(survivor_addr.as_str())
    });
    let takeover = t.elapsed();
    lab.log(&format!(
        "{} took the lease {:.1}s after the kill (lease_ms {LEASE_MS})",
        lab.meta(survivor).name,
        takeover.as_secs_f64()
    ));
    if takeover > Duration::from_millis(LEASE_MS + 2000) {
        lab.fail(&format!(
            "{} took the lease only {takeover:?} after the holder died (lease_ms {LEASE_MS})",
            lab.meta(survivor).name
        ));
    }
    wait_progress(&lab, &load, 40, Duration::from_secs(30), "load after the kill");
    let states = lab.node_states(survivor).unwrap_or_else(|e| lab.fail(&e));
    if !states.iter().all(|s| s.as_deref() == Some("up")) {
        lab.fail(&format!("{} sees storage nodes {states:?} after the failover", lab.meta(survivor).name));
    }
    let errors_before_restart = load.shared.failures();

    let t = Instant::now();
    lab.meta(victim).start();
    lab.wait_meta(victim, Duration::from_secs(30));
    // A fresh server counts unheard nodes as up for down_after_ms: wait for real heartbeats.
    let all: Vec<usize> = (0..lab.storages().len()).collect();
    lab.wait_nodes_back(&all, Instant::now(), Duration::from_secs(30));
    lab.log(&format!(
        "{} restarted, answers and sees every node up after {:.1}s",
        lab.meta(victim).name,
        t.elapsed().as_secs_f64()
    ));
    let status = lab.status(victim).unwrap_or_else(|e| lab.fail(&e));
    if status["leader"].as_str() != Some(survivor_addr.as_str()) {
        lab.fail(&format!(
            "after its restart {} reports leader {}, expected {survivor_addr} to keep the lease",
            lab.meta(victim).name,
            status["leader"]
        ));
    }
    wait_progress(&lab, &load, 20, Duration::from_secs(30), "load after the restart");
    let load = load.stop(&lab).await;
    lab.log(&format!("failures before the restart: {errors_before_restart}"));
    require_no_failure(&lab, &load, "metadata lease holder killed");
    let fresh = lab.client_of(&[victim, survivor], client::ClientOptions::default()).await;
    check_all(&lab, &fresh, &base, "base, through the restarted host").await;
    check_all(&lab, &fresh, &load.acked(), "acknowledged writes, through the restarted host").await;
    lab.log("done");
}

/// The job engine across a metadata failover: a tier run started by hand (re-coding /data from
/// 4+2 to 6+2 in the default pool, slowed to 4 MiB/s) is under way when the metadata host that
/// holds the lease, and so runs the jobs, is SIGKILLed; the survivor takes the lease, takes the
/// same run up from the cursor in its record (no file before the cursor judged again), and ends
/// it; every file is in 6+2 and reads back bit-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_run_goes_on_after_its_lease_holder_dies() {
    let _serial = one_lab_at_a_time();
    const LEASE_MS: u64 = 3000;
    let lab = Lab::start(LabOptions {
        meta_extra: format!(
            "lease_ms = {LEASE_MS}\nscrub_interval_ms = 0\ntier_schedule = \"off\"\ntier_bytes_per_s = 4194304\n"
        ),
        ..LabOptions::default()
    });
    let (_, status) = wait_status(&lab, &BOTH, Duration::from_secs(20), "a lease holder", |s| s["leader"].is_string());
    let leader = status["leader"].as_str().unwrap_or_default().to_string();
    let Some(victim) = BOTH.into_iter().find(|&m| lab.meta(m).addr() == leader) else {
        lab.fail(&format!("the leader {leader:?} is no metadata host of the lab: {status:#}"));
    };
    let survivor = 1 - victim;
    let client = lab.client_of(&[survivor], client::ClientOptions::default()).await;
    let files: Vec<FileSpec> = (0..16).map(|i| (format!("/data/f{i:02}.bin"), 500 + i as u64, 3 * MIB + i)).collect();
    write_all(&lab, &client, &files, "16 files of 3 MiB in 4+2").await;
    let cli_ok = |meta: usize, args: &[&str]| {
        let out = lab.cli(meta, args, Duration::from_secs(20)).unwrap_or_else(|e| lab.fail(&e));
        if !out.status.success() {
            lab.fail(&format!("trove {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tier = |meta: usize| -> serde_json::Value {
        let all: serde_json::Value = serde_json::from_str(&cli_ok(meta, &["job", "status", "--json"]))
            .unwrap_or_else(|e| lab.fail(&format!("job status --json: {e}")));
        all.as_array()
            .and_then(|a| a.iter().find(|j| j["name"] == "tier"))
            .cloned()
            .unwrap_or_else(|| lab.fail(&format!("no tier job in {all:#}")))
    };
    cli_ok(survivor, &["policy", "add", "wide", "--pool", "default", "--ec", "6+2", "--path", "/data/**"]);
    cli_ok(survivor, &["job", "start", "tier"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tier(survivor)["files_moved"].as_u64().unwrap_or(0) < 3 {
        if Instant::now() > deadline {
            lab.fail(&format!("the tier run made no progress: {:#}", tier(survivor)));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = tier(survivor);
    lab.meta(victim).kill();
    lab.log(&format!(
        "SIGKILLed {} (lease holder) with the tier run at {} files moved",
        lab.meta(victim).name,
        before["files_moved"]
    ));
    let survivor_addr = lab.meta(survivor).addr();
    wait_status(&lab, &[survivor], Duration::from_secs(30), "survivor holds the lease", |s| {
        s["leader"].as_str() == Some(survivor_addr.as_str())
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = loop {
        let j = tier(survivor);
        if j["state"] == "done" {
            break j;
        }
        if j["state"] == "failed" || Instant::now() > deadline {
            lab.fail(&format!("the tier run did not end after the failover: {j:#}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    if done["run"] != before["run"] {
        lab.fail(&format!(
            "a new run ({}) instead of the one under way ({}) went on: {done:#}",
            done["run"], before["run"]
        ));
    }
    let log = lab.meta(survivor).log_tail(100_000);
    if !log.contains("goes on here after") {
        lab.fail(&format!(
            "{} did not take the run up from its cursor:\n{}",
            lab.meta(survivor).name,
            log.lines().filter(|l| l.contains("job tier")).collect::<Vec<_>>().join("\n")
        ));
    }
    if done["items_seen"].as_u64().unwrap_or(u64::MAX) > files.len() as u64 + 3 {
        lab.fail(&format!("files before the cursor were judged again: {done:#}"));
    }
    lab.log(&format!(
        "the run ended on {}: {} files moved, {} items seen",
        lab.meta(survivor).name,
        done["files_moved"],
        done["items_seen"]
    ));
    for (path, _, _) in &files {
        let ino = client.resolve(path).await.unwrap_or_else(|e| lab.fail(&format!("{path}: {e}"))).ino;
        let (_, recs) = client.chunk_records(ino).await.unwrap_or_else(|e| lab.fail(&format!("{path}: {e}")));
        if let Some(r) = recs.iter().find(|r| r.ec.to_string() != "6+2" || r.missing != 0) {
            lab.fail(&format!("{path}: chunk {} in {} with missing {:#x} after the run", r.index, r.ec, r.missing));
        }
    }
    let fresh = lab.client_of(&[survivor], client::ClientOptions::default()).await;
    check_all(&lab, &fresh, &files, "after the failover mid-run").await;
    lab.log("done");
}

/// Issue evidence 4: under load, every storage host is restarted one at a time, then every
/// metadata host, then PostgreSQL (`pg_ctl restart -m fast`, which ends every connection of the
/// metadata servers); no client operation may fail in any phase, every acknowledged write reads
/// back, and the chunks written degraded are repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_of_every_host_fails_no_operation() {
    let _serial = one_lab_at_a_time();
    let lab = Lab::start(LabOptions {
        meta_extra: "gc_grace_ms = 1000\nscrub_interval_ms = 0\n".into(),
        ..LabOptions::default()
    });
    let client = lab.client_all().await;
    let base = dataset_in("/base");
    write_all(&lab, &client, &base, "base dataset").await;
    let load =
        Load::start(&lab, &client, &base, LoadSpec { dir: "/load".into(), writers: 2, readers: 1, namespace: true })
            .await;
    wait_progress(&lab, &load, 20, Duration::from_secs(30), "load before the restarts");
    let all: Vec<usize> = (0..lab.storages().len()).collect();
    // (phase, failures, operations, seconds, errors)
    let mut phases: Vec<(String, u64, u64, f64, String)> = Vec::new();
    let phase_start = |load: &Load| {
        (load.shared.failures(), load.shared.ops(), Instant::now(), load.shared.errors.lock().map_or(0, |e| e.len()))
    };
    let phase_end = |load: &Load,
                     name: &str,
                     start: (u64, u64, Instant, usize),
                     phases: &mut Vec<(String, u64, u64, f64, String)>| {
        let errors = load.shared.errors.lock().map(|e| e[start.3..].join("\n")).unwrap_or_default();
        let row = (
            name.to_string(),
            load.shared.failures() - start.0,
            load.shared.ops() - start.1,
            start.2.elapsed().as_secs_f64(),
            errors,
        );
        lab.log(&format!("phase {}: {} failed of {} operations in {:.1}s", row.0, row.1, row.2, row.3));
        phases.push(row);
    };

    let start = phase_start(&load);
    for i in 0..lab.storages().len() {
        let t = Instant::now();
        lab.storage(i).kill();
        std::thread::sleep(Duration::from_secs(1));
        let since = Instant::now();
        lab.storage(i).start();
        lab.wait_nodes_back(&[i], since, Duration::from_secs(30));
        lab.log(&format!(
            "restarted {}: back after {:.1}s; {} operations, {} failed",
            lab.storage(i).name,
            t.elapsed().as_secs_f64(),
            load.shared.ops(),
            load.shared.failures()
        ));
    }
    wait_progress(&lab, &load, 10, Duration::from_secs(30), "load after the storage restarts");
    phase_end(&load, "storage hosts", start, &mut phases);

    let start = phase_start(&load);
    for m in 0..lab.metas().len() {
        let t = Instant::now();
        lab.meta(m).kill();
        std::thread::sleep(Duration::from_secs(1));
        lab.meta(m).start();
        lab.wait_meta(m, Duration::from_secs(30));
        // The restarted server learns liveness from heartbeats (until then it counts every node
        // up for down_after_ms): the next one goes only once they arrive.
        lab.wait_nodes_back(&all, Instant::now(), Duration::from_secs(30));
        lab.log(&format!(
            "restarted {}: back after {:.1}s; {} operations, {} failed",
            lab.meta(m).name,
            t.elapsed().as_secs_f64(),
            load.shared.ops(),
            load.shared.failures()
        ));
    }
    wait_status(&lab, &BOTH, Duration::from_secs(30), "a lease holder after the metadata restarts", |s| {
        s["leader"].is_string()
    });
    wait_progress(&lab, &load, 10, Duration::from_secs(30), "load after the metadata restarts");
    phase_end(&load, "metadata hosts", start, &mut phases);

    let start = phase_start(&load);
    let t = Instant::now();
    lab.postgres().start();
    lab.log(&format!("PostgreSQL restarted (pg_ctl restart -m fast) in {:.1}s", t.elapsed().as_secs_f64()));
    for m in BOTH {
        lab.wait_meta(m, Duration::from_secs(30));
    }
    wait_progress(&lab, &load, 20, Duration::from_secs(60), "load after the PostgreSQL restart");
    phase_end(&load, "PostgreSQL", start, &mut phases);

    let load = load.stop(&lab).await;
    lab.log(&format!("load: {}", load.report()));
    let fresh = lab.client_all().await;
    check_all(&lab, &fresh, &base, "after the rolling restart: base").await;
    check_all(&lab, &fresh, &load.acked(), "after the rolling restart: acknowledged writes").await;
    wait_status(&lab, &BOTH, Duration::from_secs(60), "0 degraded, 0 misplaced after the restarts", settled);
    let failed: Vec<String> = phases
        .iter()
        .filter(|p| p.1 > 0)
        .map(|(name, failures, ops, secs, errors)| {
            format!("{name}: {failures} of {ops} operations failed in {secs:.1}s:\n{errors}")
        })
        .collect();
    if !failed.is_empty() {
        lab.fail(&format!(
            "client operations failed during the rolling restart (every failure counts):\n{}",
            failed.join("\n")
        ));
    }
    lab.log("done");
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every example configuration in deploy/examples parses with the real configuration types.
#[test]
fn deploy_example_configs_parse() {
    let dir = deploy_dir().join("examples");
    let mut seen = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let role = name.split(['-', '.']).next().unwrap_or_default();
        match role {
            "meta" => {
                let c = meta::MetaConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert!(
                    matches!(c.engine, meta::EngineConfig::Postgres(_)),
                    "{name}: the multi-host example keeps metadata in PostgreSQL"
                );
            }
            "storage" => {
                let c = storage::StorageConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert!(c.advertise.is_some(), "{name}: a multi-host storage node advertises its address");
            }
            "s3" => {
                let c: s3gw::Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            "nfs" => {
                let c: nfsgw::Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!c.exports.is_empty(), "{name}: no exports");
            }
            other => panic!("{name}: unknown role {other:?} (name example configs meta*, storage*, s3*, nfs*)"),
        }
        seen.push(role.to_string());
    }
    for role in ["meta", "storage", "s3"] {
        assert!(seen.iter().any(|r| r == role), "deploy/examples has no {role} config");
    }
}

/// The systemd units run subcommands and flags the binary has.
#[test]
fn deploy_systemd_units_use_real_flags() {
    let dir = deploy_dir().join("systemd");
    let global = common::run(&["--help"]);
    let mut units = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "service") {
            continue;
        }
        units += 1;
        let unit = path.display();
        let text = std::fs::read_to_string(&path).expect("unit file");
        let execs: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("ExecStart=")
                    .or_else(|| l.strip_prefix("ExecStop="))
                    .or_else(|| l.strip_prefix("ExecStopPost="))
            })
            .map(|cmd| cmd.trim_start_matches('-'))
            .collect();
        assert!(text.lines().any(|l| l.starts_with("ExecStart=")), "{unit}: no ExecStart");
        for exec in execs {
            let words: Vec<&str> = exec.split_whitespace().collect();
            assert_eq!(words.first(), Some(&"/usr/local/bin/trove"), "{unit}: `{exec}` runs the trove binary");
            let sub = words[1..]
                .iter()
                .find(|w| !w.starts_with('-'))
                .unwrap_or_else(|| panic!("{unit}: no subcommand in `{exec}`"));
            let help = common::run(&[sub, "--help"]);
            assert!(
                help.status.success(),
                "{unit}: `trove {sub} --help` fails: {}",
                String::from_utf8_lossy(&help.stderr)
            );
            let help_text =
                format!("{}{}", String::from_utf8_lossy(&help.stdout), String::from_utf8_lossy(&global.stdout));
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                let flag = flag.split('=').next().unwrap_or(flag);
                assert!(help_text.contains(flag), "{unit}: `trove {sub}` has no {flag}");
            }
        }
        for key in [
            "[Unit]",
            "[Service]",
            "[Install]",
            "Type=simple",
            "Restart=on-failure",
            "LimitNOFILE=",
            "After=network-online.target",
        ] {
            assert!(text.contains(key), "{unit}: missing {key}");
        }
    }
    assert!(units >= 4, "deploy/systemd has {units} unit files");
}

/// The example client environment file sets the variables trove-mount@.service uses.
#[test]
fn deploy_mount_env_matches_unit() {
    let env = std::fs::read_to_string(deploy_dir().join("examples/trove-mount.env")).expect("trove-mount.env");
    let unit =
        std::fs::read_to_string(deploy_dir().join("systemd/trove-mount@.service")).expect("trove-mount@.service");
    for var in ["TROVE_CLUSTER", "TROVE_MOUNT_OPTIONS"] {
        assert!(env.lines().any(|l| l.starts_with(&format!("{var}="))), "trove-mount.env does not set {var}");
        assert!(unit.contains(var), "trove-mount@.service does not use {var}");
    }
    let opts = env.lines().find_map(|l| l.strip_prefix("TROVE_MOUNT_OPTIONS=")).unwrap_or_default();
    let help = common::run_ok(&["mount", "--help"]);
    for flag in opts.split_whitespace().filter(|w| w.starts_with("--")) {
        assert!(help.contains(flag), "trove-mount.env: `trove mount` has no {flag}");
    }
}
