//! fio-like bandwidth, IOPS and latency (`trove bench io`), and the `tf-like` preset that
//! reproduces the Isilon paper's fio job: per emulated GPU, 30 files read sequentially in 1 MiB
//! requests at 83 IOPS, reporting how many GPUs the storage serves while keeping that rate.
//!
//! Each job has `queue_depth` workers, each a stream of requests with its own file handles (a
//! client file handle serves one request at a time, like a descriptor used by one thread).
//! Sequential streams each own whole files, so every handle sees a sequential stream and the
//! client's read-ahead works as it would for an application; random workers pick any file of
//! their job and any aligned offset. Runs are time based: operations completing during the ramp
//! are not counted.

use crate::stats::Histogram;
use crate::target::{drop_caches, Reader, Target, Writer};
use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes per write while laying out files.
pub const LAYOUT_WRITE_BYTES: usize = 4 << 20;
/// Most jobs and most workers per job.
pub const JOBS_MAX: usize = 4096;
pub const QUEUE_DEPTH_MAX: usize = 1024;
/// The Isilon paper's fio job: per GPU 30 files, 1 MiB requests, 83 IOPS, iodepth 32.
pub const TF_LIKE_FILES_PER_GPU: usize = 30;
pub const TF_LIKE_BLOCK_BYTES: usize = 1 << 20;
pub const TF_LIKE_RATE_IOPS: f64 = 83.0;
pub const TF_LIKE_QUEUE_DEPTH: usize = 32;
/// A GPU is served while its job reaches this fraction of the target rate.
pub const TF_LIKE_KEEP_FRACTION: f64 = 0.95;

/// Access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    SeqRead,
    SeqWrite,
    RandRead,
    RandWrite,
}

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern> {
        Ok(match s {
            "read" | "seqread" => Pattern::SeqRead,
            "write" | "seqwrite" => Pattern::SeqWrite,
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            other => bail!("unknown pattern {other:?} (read, write, randread, randwrite)"),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Pattern::SeqRead => "read",
            Pattern::SeqWrite => "write",
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
        }
    }
    fn is_read(self) -> bool {
        matches!(self, Pattern::SeqRead | Pattern::RandRead)
    }
    fn is_seq(self) -> bool {
        matches!(self, Pattern::SeqRead | Pattern::SeqWrite)
    }
}

/// One io run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IoConfig {
    pub pattern: Pattern,
    pub block_bytes: usize,
    pub jobs: usize,
    pub queue_depth: usize,
    pub files_per_job: usize,
    pub file_bytes: u64,
    pub runtime: Duration,
    pub ramp: Duration,
    /// fio's `rate_iops`, per job.
    pub rate_iops_per_job: Option<f64>,
    /// Sync after every N writes (0: only when the run ends). fio's `fsync=N`.
    pub fsync_every: u64,
    /// Directory inside the target for the data files.
    pub dir: String,
    pub drop_caches: bool,
    pub seed: u64,
    /// Also take the per-stage latency breakdown of the Trove client and storage nodes
    /// serving the target (see [`Breakdown`]).
    #[serde(default)]
    pub latency_breakdown: bool,
}

/// Where the time of one request went, from the Trove client's and storage nodes' stage
/// totals over the run (`client::StageReport`) divided by the requests the run made.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Breakdown {
    /// Requests the run made, the ramp included (the stage totals include it too).
    pub requests: u64,
    /// Mean latency of a request as the benchmark saw it.
    pub request_mean_us: f64,
    /// Mean time inside the read system call (directory targets: without this harness's own
    /// hand-off to a thread).
    pub syscall_mean_us: Option<f64>,
    pub stages: Vec<BreakdownRow>,
    /// Storage nodes that did not report their stages.
    pub nodes_unreached: u32,
}

/// One stage of a [`Breakdown`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BreakdownRow {
    /// `local` (the process of the client: the mount, or this benchmark with the native
    /// client), `storage` (summed over the nodes) or `derived` (computed from the others).
    pub side: String,
    pub stage: String,
    /// How often the stage was passed per request.
    pub per_request: f64,
    /// Mean duration of one pass.
    pub mean_us: f64,
    /// Time in the stage per request (`per_request * mean_us`).
    pub us_per_request: f64,
}

impl Breakdown {
    fn new(
        stages: &client::StageReport,
        requests: u64,
        request_mean_us: f64,
        syscall_mean_us: Option<f64>,
    ) -> Breakdown {
        let n = requests.max(1) as f64;
        let row = |side: &str, t: &client::StageTotal| BreakdownRow {
            side: side.to_string(),
            stage: t.stage.clone(),
            per_request: t.count as f64 / n,
            mean_us: t.total_ns as f64 / 1e3 / t.count.max(1) as f64,
            us_per_request: t.total_ns as f64 / 1e3 / n,
        };
        let mut rows: Vec<BreakdownRow> = stages
            .local
            .iter()
            .map(|t| row("local", t))
            .chain(stages.storage.iter().map(|t| row("storage", t)))
            .collect();
        let per_request = |stage: &str| rows.iter().find(|r| r.stage == stage).map(|r| r.us_per_request);
        let mut derived = Vec::new();
        // The kernel's part of a FUSE request: what the application waited for minus what the
        // mount spent on it, from receiving the request to handing back the reply.
        if let (Some(app), Some(handoff), Some(read), Some(reply)) =
            (syscall_mean_us, per_request("fuse.handoff"), per_request("mount.read"), per_request("fuse.reply"))
        {
            derived.push(("fuse.kernel", app - handoff - read - reply));
        }
        // The network and both transports' own work: a storage call as the client saw it minus
        // the server's part (hand-off to the handler, the handling, writing the reply).
        if let (Some(call), Some(handle)) = (per_request("client.storage_call"), per_request("storage.handle")) {
            let server = handle
                + per_request("rpc.server.handoff").unwrap_or(0.0)
                + per_request("rpc.server.reply").unwrap_or(0.0);
            derived.push(("wire", call - server));
        }
        for (stage, us) in derived {
            rows.push(BreakdownRow {
                side: "derived".into(),
                stage: stage.into(),
                per_request: 1.0,
                mean_us: us,
                us_per_request: us,
            });
        }
        Breakdown { requests, request_mean_us, syscall_mean_us, stages: rows, nodes_unreached: stages.nodes_unreached }
    }
}

/// What one io run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoResult {
    pub target: String,
    pub pattern: String,
    pub block_bytes: usize,
    pub jobs: usize,
    pub queue_depth: usize,
    pub files_per_job: usize,
    pub rate_iops_per_job: Option<f64>,
    pub runtime_s: f64,
    pub ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bytes_per_s: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    pub lat_max_us: f64,
    /// IOPS each job reached (for rate-limited runs: who kept the rate).
    pub job_iops: Vec<f64>,
    pub caches_dropped: bool,
    pub caches_note: String,
    /// What else may have served reads besides the storage (client caches).
    pub notes: Vec<String>,
    /// The per-stage latency breakdown, when asked for and the target has stages.
    #[serde(default)]
    pub breakdown: Option<Breakdown>,
}

/// What a Trove client keeps, which random reads may hit (see the client's `chunk_cache.rs`).
pub const TROVE_RANDOM_READ_NOTE: &str = "the Trove client keeps whole chunks in one cache for all its files (1 GiB by \
default), fetches a chunk whole once random reads come back to it, and reads ahead when a read lands near the previous one, \
so random reads over a working set that fits the cache are mostly served from the client's memory";

fn job_file(dir: &str, job: usize, file: usize) -> String {
    format!("{dir}/job{job:04}/f{file:03}")
}

/// Creates the files of jobs `0..jobs` that are missing or have the wrong size.
pub async fn layout(target: Arc<dyn Target>, cfg: &IoConfig, jobs: usize, show: bool) -> Result<()> {
    let mut todo = Vec::new();
    for j in 0..jobs {
        target.mkdir_all(&format!("{}/job{j:04}", cfg.dir)).await?;
        for f in 0..cfg.files_per_job {
            let path = job_file(&cfg.dir, j, f);
            if target.size_of(&path).await? != Some(cfg.file_bytes) {
                todo.push(path);
            }
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    let bar = progress(show, todo.len() as u64 * cfg.file_bytes, "laying out files", true);
    let mut block = vec![0u8; LAYOUT_WRITE_BYTES];
    crate::train::fill_random(cfg.seed, &mut block);
    let block = Bytes::from(block);
    let todo = Arc::new(todo);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (target, todo, next, block, bar, size) =
            (target.clone(), todo.clone(), next.clone(), block.clone(), bar.clone(), cfg.file_bytes);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(path) = todo.get(i) else { return Ok::<_, anyhow::Error>(()) };
                let mut w = target.create(path).await?;
                let mut off = 0u64;
                while off < size {
                    let n = (size - off).min(block.len() as u64) as usize;
                    w.write_at(off, block.slice(..n)).await?;
                    off += n as u64;
                    bar.inc(n as u64);
                }
                w.close().await?;
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| anyhow!("layout task failed: {e}"))??;
    }
    bar.finish_and_clear();
    Ok(())
}

fn progress(show: bool, len: u64, what: &str, bytes: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    let t = if bytes {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}"
    } else {
        "{msg} [{bar:30}] {elapsed}/{len}s"
    };
    b.set_style(ProgressStyle::with_template(t).unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> "));
    b.set_message(what.to_string());
    b
}

/// Counters of one job, shared by its workers.
#[derive(Default)]
struct JobCounters {
    ops: AtomicU64,
    bytes: AtomicU64,
    tickets: AtomicU64,
    /// Every request, the ramp's included.
    all_ops: AtomicU64,
    /// Their total latency in nanoseconds.
    all_ns: AtomicU64,
}

/// A worker's open files.
enum Handle {
    R(Box<dyn Reader>),
    W(Box<dyn Writer>),
}

/// Runs one io configuration with `cfg.jobs` jobs; the files must be laid out (reads) or are
/// created (writes).
pub async fn run(target: Arc<dyn Target>, cfg: &IoConfig, show: bool) -> Result<IoResult> {
    if cfg.jobs == 0 || cfg.jobs > JOBS_MAX || cfg.queue_depth == 0 || cfg.queue_depth > QUEUE_DEPTH_MAX {
        bail!("jobs must be 1..={JOBS_MAX} and queue depth 1..={QUEUE_DEPTH_MAX}");
    }
    if cfg.block_bytes == 0 || cfg.file_bytes < cfg.block_bytes as u64 || cfg.files_per_job == 0 {
        bail!("each file must hold at least one block");
    }
    if cfg.pattern.is_read() || cfg.pattern == Pattern::RandWrite {
        layout(target.clone(), cfg, cfg.jobs, show).await?;
    } else {
        for j in 0..cfg.jobs {
            target.mkdir_all(&format!("{}/job{j:04}", cfg.dir)).await?;
        }
    }
    let (caches_dropped, caches_note) = if !cfg.drop_caches {
        (false, "page cache NOT dropped (disabled)".to_string())
    } else {
        match drop_caches() {
            Ok(()) => (true, "page cache dropped before the run".to_string()),
            Err(why) => (false, format!("page cache NOT dropped: {why}")),
        }
    };
    let stages_before = if cfg.latency_breakdown { target.stages().await? } else { None };
    let syscalls_before = crate::target::syscall_read_totals();
    let start = Instant::now();
    // `runtime == 0` on a sequential pattern: size based, one pass over every file, timed from
    // start to finish (like dd), so nothing is read twice and no cache serves a second pass.
    let once = cfg.runtime.is_zero() && cfg.pattern.is_seq();
    let ramp_end = if once { start } else { start + cfg.ramp };
    let end = if once { start + Duration::from_secs(24 * 3600) } else { ramp_end + cfg.runtime };
    let blocks_per_file = cfg.file_bytes / cfg.block_bytes as u64;
    // Sequential streams own whole files, so at most one stream per file.
    let streams = if cfg.pattern.is_seq() { cfg.queue_depth.min(cfg.files_per_job) } else { cfg.queue_depth };
    let bar =
        progress(show, (cfg.ramp + cfg.runtime).as_secs(), &format!("{} {} jobs", cfg.pattern.name(), cfg.jobs), false);
    let ticker = {
        let bar = bar.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                bar.set_position(start.elapsed().as_secs());
            }
        })
    };
    let block = {
        let mut b = vec![0u8; cfg.block_bytes];
        crate::train::fill_random(cfg.seed ^ 0x5eed, &mut b);
        Bytes::from(b)
    };
    let mut tasks = Vec::new();
    let mut counters = Vec::new();
    for j in 0..cfg.jobs {
        let jc = Arc::new(JobCounters::default());
        counters.push(jc.clone());
        for s in 0..streams {
            let (target, cfg, jc, block) = (target.clone(), cfg.clone(), jc.clone(), block.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ ((j as u64) << 32) ^ s as u64);
                let mut hist = Histogram::default();
                let mut handles: HashMap<usize, Handle> = HashMap::new();
                // Sequential position: (index into this stream's files, block within the file).
                let my_files: Vec<usize> = (s..cfg.files_per_job).step_by(streams).collect();
                let (mut fi, mut bi) = (0usize, 0u64);
                let mut last_pass_done = false;
                let mut writes = 0u64;
                let rate_start = ramp_end.min(Instant::now());
                loop {
                    if let Some(rate) = cfg.rate_iops_per_job {
                        let k = jc.tickets.fetch_add(1, Ordering::Relaxed);
                        let at = start + Duration::from_secs_f64(k as f64 / rate.max(1e-6));
                        if at >= end {
                            break;
                        }
                        tokio::time::sleep_until(at.max(rate_start).into()).await;
                    }
                    if Instant::now() >= end {
                        break;
                    }
                    let (file, blk) = if cfg.pattern.is_seq() {
                        let f = my_files[fi];
                        let b = bi;
                        if b == 0 && cfg.pattern == Pattern::SeqWrite {
                            // A new pass over a file rewrites it through a new handle, as a
                            // writer creating the file again would: each pass is committed
                            // on its own when its handle closes.
                            if let Some(Handle::W(w)) = handles.remove(&f) {
                                w.close().await?;
                            }
                        }
                        if b == 0 && cfg.pattern == Pattern::SeqRead {
                            // Each pass reads through a fresh handle: a handle's chunk cache
                            // (the client's, like a page cache) must not serve the next pass.
                            handles.remove(&f);
                        }
                        bi += 1;
                        if bi >= blocks_per_file {
                            bi = 0;
                            if once && fi + 1 == my_files.len() {
                                last_pass_done = true;
                            }
                            fi = (fi + 1) % my_files.len();
                        }
                        (f, b)
                    } else {
                        (rng.gen_range(0..cfg.files_per_job), rng.gen_range(0..blocks_per_file))
                    };
                    let offset = blk * cfg.block_bytes as u64;
                    let path = job_file(&cfg.dir, j, file);
                    if let std::collections::hash_map::Entry::Vacant(e) = handles.entry(file) {
                        let h = if cfg.pattern.is_read() {
                            Handle::R(target.open(&path).await?)
                        } else if cfg.pattern == Pattern::RandWrite {
                            Handle::W(target.open_write(&path).await?)
                        } else {
                            Handle::W(target.create(&path).await?)
                        };
                        e.insert(h);
                    }
                    let t0 = Instant::now();
                    let n = match handles.get_mut(&file) {
                        Some(Handle::R(r)) => r.read_at(offset, cfg.block_bytes).await?.len(),
                        Some(Handle::W(w)) => {
                            w.write_at(offset, block.clone()).await?;
                            writes += 1;
                            if cfg.fsync_every > 0 && writes.is_multiple_of(cfg.fsync_every) {
                                w.sync().await?;
                            }
                            cfg.block_bytes
                        }
                        None => bail!("internal: no handle for {path}"),
                    };
                    let done = Instant::now();
                    jc.all_ops.fetch_add(1, Ordering::Relaxed);
                    jc.all_ns.fetch_add((done - t0).as_nanos() as u64, Ordering::Relaxed);
                    if done >= ramp_end && done <= end {
                        hist.record(done - t0);
                        jc.ops.fetch_add(1, Ordering::Relaxed);
                        jc.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    if last_pass_done {
                        break;
                    }
                }
                for (_, h) in handles {
                    if let Handle::W(w) = h {
                        w.close().await?;
                    }
                }
                Ok::<_, anyhow::Error>(hist)
            }));
        }
    }
    let mut hist = Histogram::default();
    for t in tasks {
        hist.merge(&t.await.map_err(|e| anyhow!("io worker failed: {e}"))??);
    }
    ticker.abort();
    bar.finish_and_clear();
    let secs = if once { start.elapsed().as_secs_f64() } else { cfg.runtime.as_secs_f64() };
    let breakdown = match (&stages_before, if stages_before.is_some() { target.stages().await? } else { None }) {
        (Some(before), Some(after)) => {
            let requests: u64 = counters.iter().map(|c| c.all_ops.load(Ordering::Relaxed)).sum();
            let total_ns: u64 = counters.iter().map(|c| c.all_ns.load(Ordering::Relaxed)).sum();
            let (calls, call_ns) = crate::target::syscall_read_totals();
            let calls = calls - syscalls_before.0;
            let syscall_mean_us = (calls > 0).then(|| (call_ns - syscalls_before.1) as f64 / 1e3 / calls as f64);
            Some(Breakdown::new(
                &after.since(before),
                requests,
                total_ns as f64 / 1e3 / requests.max(1) as f64,
                syscall_mean_us,
            ))
        }
        _ => None,
    };
    let ops: u64 = counters.iter().map(|c| c.ops.load(Ordering::Relaxed)).sum();
    let bytes: u64 = counters.iter().map(|c| c.bytes.load(Ordering::Relaxed)).sum();
    Ok(IoResult {
        target: target.describe(),
        pattern: cfg.pattern.name().to_string(),
        block_bytes: cfg.block_bytes,
        jobs: cfg.jobs,
        queue_depth: streams,
        files_per_job: cfg.files_per_job,
        rate_iops_per_job: cfg.rate_iops_per_job,
        runtime_s: secs,
        ops,
        bytes,
        iops: ops as f64 / secs,
        bytes_per_s: bytes as f64 / secs,
        lat_mean_us: hist.mean_us(),
        lat_p50_us: hist.percentile_us(0.50),
        lat_p99_us: hist.percentile_us(0.99),
        lat_p999_us: hist.percentile_us(0.999),
        lat_max_us: hist.max_us(),
        job_iops: counters.iter().map(|c| c.ops.load(Ordering::Relaxed) as f64 / secs).collect(),
        caches_dropped,
        caches_note,
        notes: if target.kind() == "trove" && cfg.pattern == Pattern::RandRead {
            vec![TROVE_RANDOM_READ_NOTE.to_string()]
        } else {
            Vec::new()
        },
        breakdown,
    })
}

/// How many GPUs the `tf-like` job serves.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TfLikeReport {
    pub target: String,
    pub rate_iops_per_gpu: f64,
    pub keep_fraction: f64,
    /// Every trial: GPUs, whether every GPU kept the rate, and the run.
    pub trials: Vec<(usize, bool, IoResult)>,
    pub gpus_served: Option<usize>,
    pub capped: bool,
}

/// Runs the Isilon paper's fio job with growing numbers of GPUs until one no longer gets its
/// 83 IOPS; every GPU must reach `TF_LIKE_KEEP_FRACTION` of the rate.
pub async fn tf_like(target: Arc<dyn Target>, base: &IoConfig, gpus_max: usize, show: bool) -> Result<TfLikeReport> {
    let cfg = IoConfig {
        pattern: Pattern::SeqRead,
        block_bytes: TF_LIKE_BLOCK_BYTES,
        queue_depth: TF_LIKE_QUEUE_DEPTH,
        files_per_job: TF_LIKE_FILES_PER_GPU,
        rate_iops_per_job: Some(base.rate_iops_per_job.unwrap_or(TF_LIKE_RATE_IOPS)),
        ..base.clone()
    };
    let rate = cfg.rate_iops_per_job.unwrap_or(TF_LIKE_RATE_IOPS);
    let trials = std::sync::Mutex::new(Vec::new());
    let outcome = crate::sweep::find_max(1, gpus_max.max(1), |n| {
        let (target, trials) = (target.clone(), &trials);
        let cfg = IoConfig { jobs: n, ..cfg.clone() };
        async move {
            let r = run(target, &cfg, show).await?;
            let kept = r.job_iops.iter().all(|&i| i >= rate * TF_LIKE_KEEP_FRACTION);
            if show {
                let worst = r.job_iops.iter().cloned().fold(f64::MAX, f64::min);
                eprintln!(
                    "  {n:>4} GPUs: {:.0} MB/s, slowest GPU {worst:.1} IOPS: {}",
                    r.bytes_per_s / 1e6,
                    if kept { "kept" } else { "MISSED" }
                );
            }
            trials.lock().map_err(|_| anyhow!("lock poisoned"))?.push((n, kept, r));
            Ok(kept)
        }
    })
    .await?;
    Ok(TfLikeReport {
        target: target.describe(),
        rate_iops_per_gpu: rate,
        keep_fraction: TF_LIKE_KEEP_FRACTION,
        trials: trials.into_inner().map_err(|_| anyhow!("lock poisoned"))?,
        gpus_served: outcome.best,
        capped: outcome.capped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse() {
        assert_eq!(Pattern::parse("read").expect("p"), Pattern::SeqRead);
        assert_eq!(Pattern::parse("randwrite").expect("p"), Pattern::RandWrite);
        assert!(Pattern::parse("trim").is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rate_limited_sequential_reads_on_a_directory() {
        let dir = tempfile::tempdir().expect("tmp");
        let target: Arc<dyn Target> = Arc::new(crate::DirTarget::new(dir.path(), false).expect("target"));
        let cfg = IoConfig {
            pattern: Pattern::SeqRead,
            block_bytes: 64 << 10,
            jobs: 2,
            queue_depth: 4,
            files_per_job: 4,
            file_bytes: 1 << 20,
            runtime: Duration::from_millis(1000),
            ramp: Duration::from_millis(100),
            rate_iops_per_job: Some(100.0),
            fsync_every: 0,
            dir: "io".into(),
            drop_caches: false,
            seed: 1,
            latency_breakdown: false,
        };
        let r = run(target, &cfg, false).await.expect("run");
        assert_eq!(r.job_iops.len(), 2);
        for iops in &r.job_iops {
            assert!((80.0..=120.0).contains(iops), "rate limit not kept: {iops}");
        }
        assert_eq!(r.bytes, r.ops * (64 << 10));
        assert!(r.lat_p50_us <= r.lat_p99_us && r.lat_p99_us <= r.lat_p999_us);
    }
}
