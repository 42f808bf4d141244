//! `trove bench ...`: the command line of the validation suite (the `bench` crate). Parses
//! arguments, builds the targets (the cluster named by `--cluster`, and/or directories given
//! with `--dir`), joins a multi-client run when launched by mpirun/srun, runs the benchmark on
//! each target in turn, and prints a table, JSON, or a report directory.

use anyhow::{anyhow, bail, Result};
use bench::report::{self, Report};
use bench::target::Target;
use bench::world::World;
use bench::{io, meta, parse_bytes, scan, size, space, train, DirTarget, TroveTarget};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

impl BenchArgs {
    /// The `--cluster` given after the benchmark's name.
    pub fn cluster(&self) -> &crate::cmds::ClusterOpt {
        match &self.cmd {
            BenchCmd::Io(a) => &a.common.cluster,
            BenchCmd::Meta(a) => &a.common.cluster,
            BenchCmd::Train(a) => &a.common.cluster,
            BenchCmd::Scan(a) => &a.common.cluster,
            BenchCmd::Size(a) => &a.common.cluster,
        }
    }

    /// The benchmark's `--metrics-listen`.
    fn metrics(&self) -> &crate::telemetry::MetricsOpt {
        match &self.cmd {
            BenchCmd::Io(a) => &a.common.metrics,
            BenchCmd::Meta(a) => &a.common.metrics,
            BenchCmd::Train(a) => &a.common.metrics,
            BenchCmd::Scan(a) => &a.common.metrics,
            BenchCmd::Size(a) => &a.common.metrics,
        }
    }
}

/// Options every benchmark takes.
#[derive(Args, Clone)]
pub struct Common {
    #[command(flatten)]
    cluster: crate::cmds::ClusterOpt,
    /// Run against this directory (a local disk or any mounted file system); repeatable. Runs
    /// against the cluster too when --cluster is given.
    #[arg(long = "dir", global = true)]
    dirs: Vec<PathBuf>,
    /// Directory inside the cluster's namespace that the benchmark uses.
    #[arg(long, default_value = "/bench", global = true)]
    root: String,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Write a report (Markdown and SVG charts) into this directory.
    #[arg(long, global = true)]
    report: Option<PathBuf>,
    /// Shared directory where every rank writes its results (needed with several ranks).
    #[arg(long, global = true)]
    results_dir: Option<PathBuf>,
    /// Address rank 0 listens on for the other ranks (HOST:PORT).
    #[arg(long, global = true)]
    coordinator: Option<String>,
    /// Do not drop the page cache between write and read phases.
    #[arg(long, global = true)]
    no_drop_caches: bool,
    /// No progress display.
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
    /// The client library's metrics of this benchmark process (role `client` in `trove stats`).
    #[command(flatten)]
    metrics: crate::telemetry::MetricsOpt,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// fio-like bandwidth, IOPS and latency; `--preset tf-like` finds how many GPUs are served.
    Io(Box<IoArgs>),
    /// mdtest-like create/stat/read/remove rates of files and directories.
    Meta(MetaArgs),
    /// MLPerf-Storage-style accelerator emulation (ResNet-50, UNet3D, CosmoFlow) and checkpoints.
    Train(Box<TrainArgs>),
    /// Storage-only TFRecord reads, scaling readers until throughput tops out.
    Scan(ScanArgs),
    /// Sizing guidance: storage nodes needed for a number of GPUs.
    Size(SizeArgs),
}

#[derive(Args)]
struct IoArgs {
    #[command(flatten)]
    common: Common,
    /// read, write, randread or randwrite; repeatable (run in order).
    #[arg(long = "pattern", default_values_t = vec!["read".to_string()])]
    patterns: Vec<String>,
    /// Request size (default 1M for sequential, 4k for random patterns).
    #[arg(long)]
    bs: Option<String>,
    /// Concurrent jobs (fio's numjobs), each with its own files.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Requests in flight per job.
    #[arg(long = "qd", default_value_t = 4)]
    queue_depth: usize,
    /// Files per job (default: the queue depth).
    #[arg(long)]
    files_per_job: Option<usize>,
    /// Size of each data file (K, M, G suffixes).
    #[arg(long, default_value = "64M")]
    file_size: String,
    /// Measured seconds; 0 with a sequential pattern means one pass over every file, timed
    /// from start to finish (size based, like dd).
    #[arg(long, default_value_t = 10.0)]
    runtime: f64,
    /// Seconds before measuring starts.
    #[arg(long, default_value_t = 2.0)]
    ramp: f64,
    /// Rate limit per job (fio's rate_iops).
    #[arg(long)]
    rate_iops: Option<f64>,
    /// O_DIRECT on directory targets (bypass the page cache).
    #[arg(long)]
    direct: bool,
    /// fsync after every N writes (default: 1 for randwrite, 0 = at the end, for write).
    #[arg(long)]
    fsync_every: Option<u64>,
    /// `tf-like`: the Isilon paper's fio job (per GPU 30 files, 1 MiB reads at 83 IOPS).
    #[arg(long)]
    preset: Option<String>,
    /// Most GPUs the tf-like sweep tries.
    #[arg(long, default_value_t = 64)]
    gpus_max: usize,
    /// Keep the data files afterwards.
    #[arg(long)]
    keep: bool,
    /// Also print where a request's time went, stage by stage (FUSE, mount, client, record
    /// lookup, wire, storage queueing, disk, verification), from the stage totals of the Trove
    /// client serving each target (a directory on a Trove mount: the mount's) and its storage
    /// nodes.
    #[arg(long)]
    latency_breakdown: bool,
}

#[derive(Args)]
struct MetaArgs {
    #[command(flatten)]
    common: Common,
    /// Concurrent tasks (mdtest's ranks).
    #[arg(long, default_value_t = 4)]
    tasks: usize,
    /// Files and directories per task.
    #[arg(long, default_value_t = 1000)]
    items: usize,
    /// Times each phase is repeated (mdtest -i); every iteration's rate is reported.
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// Each task in its own directory (mdtest -u); default: one shared directory.
    #[arg(long)]
    unique: bool,
    /// Bytes written into each file and read back.
    #[arg(long, default_value_t = 0)]
    file_bytes: usize,
    /// Only the file phases, no directory create/stat/remove (mdtest -F).
    #[arg(long)]
    files_only: bool,
}

#[derive(Args)]
struct TrainArgs {
    #[command(flatten)]
    common: Common,
    /// resnet50, unet3d or cosmoflow.
    #[arg(long, default_value = "resnet50")]
    workload: String,
    /// h100, a100 or v100.
    #[arg(long, default_value = "h100")]
    accelerator: String,
    /// Emulated accelerators in this process (the start of a sweep).
    #[arg(long, default_value_t = 1)]
    accelerators: usize,
    /// Find the most accelerators that pass.
    #[arg(long)]
    sweep: bool,
    /// Most accelerators the sweep tries.
    #[arg(long, default_value_t = 64)]
    max_accelerators: usize,
    /// Data files to generate (default: enough for the sweep, or --dataset-gib).
    #[arg(long)]
    files: Option<u64>,
    /// Dataset size; make it larger than client RAM for honest results.
    #[arg(long)]
    dataset_gib: Option<f64>,
    /// Epochs (passes over the dataset); the run's AU is the mean over them.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Reader threads per accelerator (default: the workload's reference value).
    #[arg(long)]
    read_threads: Option<usize>,
    /// Batches prefetched per accelerator.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Bytes per read request (K, M suffixes).
    #[arg(long, default_value = "1M")]
    transfer_size: String,
    /// Forward-only: no barrier between accelerators after each step.
    #[arg(long)]
    inference: bool,
    /// Seed of the generated data and of the order files are read in.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Files written at once while generating the dataset.
    #[arg(long, default_value_t = 4)]
    gen_jobs: usize,
    /// Regenerate the dataset even if a matching one exists.
    #[arg(long)]
    regenerate: bool,
    /// Only generate the dataset.
    #[arg(long)]
    generate_only: bool,
    /// Train on the data files already in --data-path (every file with the workload's
    /// extension, e.g. `trove dataset pack --format tfrecord` shards) instead of generating a
    /// dataset; nothing there is written or removed.
    #[arg(long, conflicts_with_all = ["regenerate", "generate_only", "files", "dataset_gib"])]
    existing: bool,
    /// Dataset directory inside each target (default: train-WORKLOAD).
    #[arg(long)]
    data_path: Option<String>,
    /// Fewest steps per epoch a configuration must have to be measured.
    #[arg(long, default_value_t = 5)]
    min_steps: usize,
    /// Run the checkpoint workload instead: llama3-8b, llama3-70b, llama3-405b or llama3-1t.
    #[arg(long)]
    checkpoint: Option<String>,
    /// Divide the checkpoint preset's size by this.
    #[arg(long, default_value_t = 1000)]
    scale: u64,
    /// Checkpoints written (and read back) in the checkpoint workload.
    #[arg(long, default_value_t = 2)]
    checkpoints: usize,
    /// Files per checkpoint, written in parallel (one per emulated rank).
    #[arg(long, default_value_t = 8)]
    checkpoint_files: usize,
}

#[derive(Args)]
struct ScanArgs {
    #[command(flatten)]
    common: Common,
    /// Directory of TFRecord shards inside each target (default: train-resnet50).
    #[arg(long, default_value = "train-resnet50")]
    data_path: String,
    /// Generate this many ResNet-50 shards first if the directory has none.
    #[arg(long, default_value_t = 16)]
    generate_files: u64,
    /// Most concurrent readers tried.
    #[arg(long, default_value_t = 32)]
    readers_max: usize,
    /// Seconds per reader count.
    #[arg(long, default_value_t = 8.0)]
    duration: f64,
    /// Bytes per read request (K, M suffixes).
    #[arg(long, default_value = "1M")]
    read_size: String,
}

#[derive(Args)]
struct SizeArgs {
    #[command(flatten)]
    common: Common,
    /// A row of the demand table (see --list).
    #[arg(long, default_value = "h100-resnet50")]
    workload: String,
    /// GPUs to size the cluster for.
    #[arg(long, default_value_t = 8)]
    gpus: usize,
    /// Per-node read throughput in MB/s (otherwise measured with --measure).
    #[arg(long)]
    node_mbps: Option<f64>,
    /// Measure per-node throughput: a sequential read run on the target divided by its nodes.
    #[arg(long)]
    measure: bool,
    /// Dataset size in GiB (decides whether caches can hold it).
    #[arg(long)]
    dataset_gib: Option<f64>,
    /// Cache (client RAM plus storage cache) available to the dataset.
    #[arg(long)]
    cache_gib: Option<f64>,
    /// Print the demand table.
    #[arg(long)]
    list: bool,
}

/// The host as it was when the command started (its load average is what the run competed with).
static HOST_AT_START: std::sync::OnceLock<bench::world::HostInfo> = std::sync::OnceLock::new();

fn new_report(title: &str, command: &str) -> Report {
    Report::new(title, command, HOST_AT_START.get().cloned().unwrap_or_else(bench::world::HostInfo::collect))
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// The targets named on the command line: the cluster first (if any), then each directory.
async fn targets(cluster: &Option<String>, common: &Common, direct: bool) -> Result<Vec<Arc<dyn Target>>> {
    let mut out: Vec<Arc<dyn Target>> = Vec::new();
    if let Some(c) = cluster {
        let addr = crate::cluster::meta_addr_of(c)?;
        let client = crate::cmds::connect(Some(c.clone())).await?;
        out.push(Arc::new(TroveTarget::new(client, &addr, &common.root).await?));
    }
    for d in &common.dirs {
        let t = DirTarget::new(d, false)?;
        let direct_ok = direct && t.direct_supported();
        if direct && !direct_ok {
            eprintln!("trove bench: {} does not support O_DIRECT; measuring through the page cache", d.display());
        }
        out.push(Arc::new(DirTarget::new(d, direct_ok)?));
    }
    if out.is_empty() {
        bail!("nothing to measure: give --cluster (or TROVE_CLUSTER) and/or --dir PATH");
    }
    Ok(out)
}

fn secs(s: f64) -> Result<Duration> {
    if !(s >= 0.0 && s.is_finite()) {
        bail!("{s} is not a number of seconds");
    }
    Ok(Duration::from_secs_f64(s))
}

/// Prints JSON or the text, and writes the report when asked.
fn emit(common: &Common, json: &serde_json::Value, text: &str, report: Option<Report>) -> Result<()> {
    if common.json {
        println!("{}", serde_json::to_string_pretty(json)?);
    } else {
        print!("{text}");
    }
    if let (Some(dir), Some(r)) = (&common.report, report) {
        r.write(dir)?;
        std::fs::write(dir.join("results.json"), serde_json::to_vec_pretty(json)?)?;
        eprintln!("report written to {}", dir.display());
    }
    Ok(())
}

pub async fn run(args: BenchArgs, cluster: Option<String>) -> Result<()> {
    HOST_AT_START.get_or_init(bench::world::HostInfo::collect);
    let exporter = crate::telemetry::bind(args.metrics())?;
    if let (Some(_), Some(cluster)) = (&exporter, &cluster) {
        let client = crate::cmds::connect(Some(cluster.clone())).await?;
        let id = format!("bench pid {}", std::process::id());
        crate::telemetry::serve_front(exporter, &client, "client", &id, "", "")?;
    }
    match args.cmd {
        BenchCmd::Io(a) => run_io(*a, cluster).await,
        BenchCmd::Meta(a) => run_meta(a, cluster).await,
        BenchCmd::Train(a) => run_train(*a, cluster).await,
        BenchCmd::Scan(a) => run_scan(a, cluster).await,
        BenchCmd::Size(a) => run_size(a, cluster).await,
    }
}

async fn join(common: &Common) -> Result<Arc<World>> {
    Ok(Arc::new(World::join(common.results_dir.as_deref(), common.coordinator.as_deref()).await?))
}

/// Sums io results of the ranks into one (throughputs add; latency percentiles are the worst
/// rank's, an upper bound, since histograms are not exchanged).
fn merge_io(parts: Vec<io::IoResult>) -> Option<io::IoResult> {
    let mut it = parts.into_iter();
    let mut m = it.next()?;
    for p in it {
        m.jobs += p.jobs;
        m.ops += p.ops;
        m.bytes += p.bytes;
        m.iops += p.iops;
        m.bytes_per_s += p.bytes_per_s;
        m.lat_mean_us = m.lat_mean_us.max(p.lat_mean_us);
        m.lat_p50_us = m.lat_p50_us.max(p.lat_p50_us);
        m.lat_p99_us = m.lat_p99_us.max(p.lat_p99_us);
        m.lat_p999_us = m.lat_p999_us.max(p.lat_p999_us);
        m.lat_max_us = m.lat_max_us.max(p.lat_max_us);
        m.job_iops.extend(p.job_iops);
    }
    Some(m)
}

async fn run_io(a: IoArgs, cluster: Option<String>) -> Result<()> {
    let world = join(&a.common).await?;
    let show = world.rank == 0 && !a.common.quiet;
    let file_bytes = parse_bytes(&a.file_size)?;
    let mut results = Vec::new();
    let mut tf_reports = Vec::new();
    for target in targets(&cluster, &a.common, a.direct || a.preset.is_some()).await? {
        let dir = format!("io/rank{}", world.rank);
        if let Some(preset) = &a.preset {
            if preset != "tf-like" {
                bail!("unknown preset {preset:?} (tf-like)");
            }
            if world.size > 1 {
                bail!("--preset tf-like sweeps GPUs from one client; run it without mpirun");
            }
            let base = io::IoConfig {
                pattern: io::Pattern::SeqRead,
                block_bytes: io::TF_LIKE_BLOCK_BYTES,
                jobs: 1,
                queue_depth: io::TF_LIKE_QUEUE_DEPTH,
                files_per_job: io::TF_LIKE_FILES_PER_GPU,
                file_bytes: if a.file_size == "64M" { 16 << 20 } else { file_bytes },
                runtime: secs(a.runtime)?,
                ramp: secs(a.ramp)?,
                rate_iops_per_job: Some(a.rate_iops.unwrap_or(io::TF_LIKE_RATE_IOPS)),
                fsync_every: 0,
                dir: dir.clone(),
                drop_caches: !a.common.no_drop_caches,
                seed: 1,
                latency_breakdown: false,
            };
            tf_reports.push(io::tf_like(target.clone(), &base, a.gpus_max, show).await?);
        } else {
            for p in &a.patterns {
                let pattern = io::Pattern::parse(p)?;
                let random = matches!(pattern, io::Pattern::RandRead | io::Pattern::RandWrite);
                let bs = parse_bytes(a.bs.as_deref().unwrap_or(if random { "4k" } else { "1M" }))? as usize;
                let cfg = io::IoConfig {
                    pattern,
                    block_bytes: bs,
                    jobs: a.jobs,
                    queue_depth: a.queue_depth,
                    files_per_job: a.files_per_job.unwrap_or(a.queue_depth),
                    file_bytes,
                    runtime: secs(a.runtime)?,
                    ramp: secs(a.ramp)?,
                    rate_iops_per_job: a.rate_iops,
                    fsync_every: a.fsync_every.unwrap_or(if pattern == io::Pattern::RandWrite { 1 } else { 0 }),
                    dir: dir.clone(),
                    drop_caches: !a.common.no_drop_caches,
                    seed: 1 + world.rank as u64,
                    latency_breakdown: a.latency_breakdown,
                };
                world.barrier().await?;
                let r = io::run(target.clone(), &cfg, show).await?;
                let merged = world
                    .gather_results(&format!("io-{}-{}", target.kind(), pattern.name()), &serde_json::to_value(&r)?)
                    .await?;
                if let Some(all) = merged {
                    let parts: Vec<io::IoResult> =
                        all.into_iter().map(serde_json::from_value).collect::<Result<_, _>>()?;
                    results.extend(merge_io(parts));
                }
            }
        }
        if !a.keep {
            target.remove_all(&dir).await?;
        }
    }
    if world.rank != 0 {
        return Ok(());
    }
    let mut text = String::new();
    let mut rep = new_report("trove bench io", &command_line());
    if !results.is_empty() {
        text.push_str(&report::io_text(&results));
        report::io_report(&mut rep, &results);
    }
    for t in &tf_reports {
        text.push_str(&report::tf_like_text(t));
        report::tf_like_report(&mut rep, t);
    }
    let json = serde_json::json!({ "host": HOST_AT_START.get(), "io": results, "tf_like": tf_reports });
    emit(&a.common, &json, &text, Some(rep))
}

async fn run_meta(a: MetaArgs, cluster: Option<String>) -> Result<()> {
    let world = join(&a.common).await?;
    let mut reports = Vec::new();
    for target in targets(&cluster, &a.common, false).await? {
        let cfg = meta::MetaConfig {
            tasks: a.tasks,
            items: a.items,
            iterations: a.iterations,
            unique_dir: a.unique,
            file_bytes: a.file_bytes,
            files_only: a.files_only,
            dir: "meta".to_string(),
        };
        if world.rank == 0 && !a.common.quiet {
            eprintln!("meta on {} ...", target.describe());
        }
        let r = meta::run(target.clone(), &cfg, world.clone()).await?;
        world.gather_results(&format!("meta-{}", target.kind()), &serde_json::to_value(&r)?).await?;
        reports.push(r);
    }
    if world.rank != 0 {
        return Ok(());
    }
    let mut rep = new_report("trove bench meta", &command_line());
    let mut text = String::new();
    for r in &reports {
        text.push_str(&report::meta_text(r));
        rep.sections.push(format!("### {}\n", r.target));
        report::meta_report(&mut rep, r);
    }
    if reports.len() > 1 {
        // One chart file per target would collide; keep the charts apart by target index.
        for (i, (name, _)) in rep.charts.iter_mut().enumerate() {
            *name = format!("{}-{i}.svg", name.trim_end_matches(".svg"));
        }
        let mut k = 0;
        for s in rep.sections.iter_mut() {
            if s.starts_with("![") {
                *s = s.replace("meta_ops.svg", &format!("meta_ops-{k}.svg"));
                k += 1;
            }
        }
    }
    emit(&a.common, &serde_json::json!({ "host": HOST_AT_START.get(), "meta": reports }), &text, Some(rep))
}

async fn run_train(a: TrainArgs, cluster: Option<String>) -> Result<()> {
    let world = join(&a.common).await?;
    let show = world.rank == 0 && !a.common.quiet;
    let drop = !a.common.no_drop_caches;
    if let Some(model) = &a.checkpoint {
        if a.scale == 0 {
            bail!("--scale must be at least 1");
        }
        let bytes = train::checkpoint_preset(model)? / a.scale;
        let mut reports = Vec::new();
        for target in targets(&cluster, &a.common, false).await? {
            let cfg = train::CheckpointConfig {
                model: model.clone(),
                checkpoint_bytes: bytes,
                scale: a.scale,
                checkpoints: a.checkpoints,
                files: a.checkpoint_files,
                io_bytes: 4 << 20,
                dir: format!("checkpoints/rank{}", world.rank),
                drop_caches: drop,
            };
            let r = train::checkpoint(target, &cfg, show).await?;
            world.gather_results(&format!("checkpoint-{}", reports.len()), &serde_json::to_value(&r)?).await?;
            reports.push(r);
        }
        if world.rank != 0 {
            return Ok(());
        }
        let text: String = reports.iter().map(report::checkpoint_text).collect();
        let mut rep = new_report("trove bench train --checkpoint", &command_line());
        rep.sections.push(format!("## Results\n\n```\n{text}```\n"));
        return emit(
            &a.common,
            &serde_json::json!({ "host": HOST_AT_START.get(), "checkpoint": reports }),
            &text,
            Some(rep),
        );
    }
    let spec = train::workload(&a.workload, &a.accelerator)?;
    let max = if a.sweep { a.max_accelerators } else { a.accelerators };
    let files = match (a.files, a.dataset_gib) {
        (Some(f), _) => Some(f),
        (None, Some(_)) => None,
        // Enough files that the largest configuration still gets min_steps steps per epoch.
        (None, None) => {
            let samples = (max * world.size * spec.batch_size * a.min_steps) as u64;
            Some(samples.div_ceil(spec.samples_per_file).max((max * world.size) as u64))
        }
    };
    let cfg = train::TrainConfig {
        spec: spec.clone(),
        data_dir: a.data_path.clone().unwrap_or_else(|| format!("train-{}", a.workload)),
        files,
        dataset_bytes: a.dataset_gib.map(|g| (g * (1u64 << 30) as f64) as u64),
        epochs: a.epochs.max(1),
        read_threads: a.read_threads.unwrap_or(spec.read_threads),
        prefetch_batches: a.prefetch,
        transfer_bytes: parse_bytes(&a.transfer_size)? as usize,
        inference: a.inference,
        seed: a.seed,
        gen_jobs: a.gen_jobs,
        regenerate: a.regenerate,
        existing: a.existing,
        min_steps: a.min_steps,
        drop_caches: drop,
    };
    let mut reports = Vec::new();
    let all = targets(&cluster, &a.common, false).await?;
    // A dataset trained on in place is neither sized nor shared between targets.
    let all = if a.existing { all } else { plan_datasets(all, &cfg, &world).await? };
    for target in all {
        if show {
            eprintln!(
                "{} × {} {} on {} ...",
                if a.sweep { "sweep of".to_string() } else { a.accelerators.to_string() },
                a.accelerator,
                a.workload,
                target.describe()
            );
        }
        if a.generate_only {
            let (ds, generated) = train::ensure_dataset(target.clone(), &cfg, &world, show).await?;
            if world.rank == 0 {
                println!(
                    "{}: {} files, {:.2} GB{}",
                    target.describe(),
                    ds.files,
                    ds.total_bytes as f64 / 1e9,
                    if generated { " generated" } else { " already there" }
                );
            }
            continue;
        }
        let r = train::train(
            target.clone(),
            &cfg,
            a.accelerators,
            a.sweep.then_some(a.max_accelerators),
            world.clone(),
            show,
        )
        .await?;
        world.gather_results(&format!("train-{}", reports.len()), &serde_json::to_value(&r)?).await?;
        reports.push(r);
    }
    if world.rank != 0 || a.generate_only {
        return Ok(());
    }
    let mut rep = new_report(&format!("trove bench train: {} on {}", a.workload, a.accelerator), &command_line());
    rep.sections.push(format!(
        "Workload: {} on {} — batch {}, {} s compute per batch, {} B samples, {} per file, {} read threads, {} batches prefetched, {} epochs, pass at AU ≥ {:.0}%. AU = compute / wall time, first step excluded (DLIO's arithmetic).\n",
        spec.workload,
        spec.accelerator,
        spec.batch_size,
        spec.compute_s,
        spec.record_bytes,
        spec.samples_per_file,
        cfg.read_threads,
        cfg.prefetch_batches,
        cfg.epochs,
        spec.au_min * 100.0
    ));
    report::train_report(&mut rep, &reports);
    let json = serde_json::json!({ "host": HOST_AT_START.get(), "config": cfg, "train": reports });
    emit(&a.common, &json, &report::train_text(&reports), Some(rep))
}

/// Decides, before anything is written, where `cfg`'s dataset is generated: once per storage
/// (a target on the same storage as an earlier one, such as a mount of the cluster being
/// measured, reads the dataset generated there), and only if every target and every file
/// system has room for what the run writes (see `bench::space`). Returns the targets to run,
/// those sharing another's dataset rooted where it is.
async fn plan_datasets(
    targets: Vec<Arc<dyn Target>>,
    cfg: &train::TrainConfig,
    world: &World,
) -> Result<Vec<Arc<dyn Target>>> {
    let ds = train::plan_dataset(cfg)?;
    let mut out = Vec::with_capacity(targets.len());
    let mut needs = Vec::new();
    let mut generated_on: Vec<(Arc<dyn Target>, space::Storage)> = Vec::new();
    for target in targets {
        let storage = target.storage().await?;
        if let Some((owner, at)) = generated_on.iter().find(|(_, s)| s.store == storage.store) {
            let reader = target.at_root(&at.root)?;
            if world.rank == 0 {
                eprintln!(
                    "trove bench: {} is on the same storage as {} ({}): it reads the dataset written there ({}) instead of writing another copy",
                    target.describe(),
                    owner.describe(),
                    storage.store,
                    reader.describe()
                );
            }
            needs.push(space::Need { target: target.describe(), bytes: 0, storage });
            out.push(reader);
            continue;
        }
        let bytes = train::bytes_to_generate(&*target, cfg, &ds).await;
        needs.push(space::Need { target: target.describe(), bytes, storage: storage.clone() });
        generated_on.push((target.clone(), storage));
        out.push(target);
    }
    let what = format!("the {} dataset ({} files, {})", ds.workload, ds.files, space::gb(ds.total_bytes));
    space::check(&what, &needs)?;
    if world.rank == 0 {
        for n in needs.iter().filter(|n| n.bytes > 0) {
            eprintln!(
                "trove bench: {what} is written to {} ({} free there)",
                n.target,
                space::gb(n.storage.bytes_free)
            );
        }
    }
    Ok(out)
}

async fn run_scan(a: ScanArgs, cluster: Option<String>) -> Result<()> {
    let world = join(&a.common).await?;
    let show = world.rank == 0 && !a.common.quiet;
    let mut reports = Vec::new();
    for target in targets(&cluster, &a.common, false).await? {
        if scan::find_shards(&*target, &a.data_path).await?.is_empty() {
            let spec = train::workload("resnet50", "h100")?;
            let cfg = train::TrainConfig {
                spec,
                data_dir: a.data_path.clone(),
                files: Some(a.generate_files.max(1)),
                dataset_bytes: None,
                epochs: 1,
                read_threads: 1,
                prefetch_batches: 1,
                transfer_bytes: 1 << 20,
                inference: false,
                seed: 42,
                gen_jobs: 4,
                regenerate: false,
                existing: false,
                min_steps: 1,
                drop_caches: false,
            };
            train::ensure_dataset(target.clone(), &cfg, &world, show).await?;
        }
        world.barrier().await?;
        let cfg = scan::ScanConfig {
            data_dir: a.data_path.clone(),
            readers_max: a.readers_max,
            duration: secs(a.duration)?,
            read_bytes: parse_bytes(&a.read_size)? as usize,
            drop_caches: !a.common.no_drop_caches,
        };
        let r = scan::run(target.clone(), &cfg, show).await?;
        if let Some(all) = world.gather_results(&format!("scan-{}", reports.len()), &serde_json::to_value(&r)?).await? {
            let mut parts: Vec<scan::ScanReport> =
                all.into_iter().map(serde_json::from_value).collect::<Result<_, _>>()?;
            let mut m = parts.remove(0);
            // Ranks scale together only loosely (no barrier per level); sum what each level drew.
            for p in parts {
                for (l, o) in m.levels.iter_mut().zip(p.levels) {
                    l.bytes_per_s += o.bytes_per_s;
                    l.records_per_s += o.records_per_s;
                    l.files_completed += o.files_completed;
                }
            }
            if let Some(best) = m.levels.iter().max_by(|x, y| x.bytes_per_s.total_cmp(&y.bytes_per_s)) {
                m.peak_bytes_per_s = best.bytes_per_s;
                m.peak_readers = best.readers;
            }
            reports.push(m);
        }
    }
    if world.rank != 0 {
        return Ok(());
    }
    let mut rep = new_report("trove bench scan", &command_line());
    let text: String = reports.iter().map(report::scan_text).collect();
    for r in &reports {
        report::scan_report(&mut rep, r);
    }
    emit(&a.common, &serde_json::json!({ "host": HOST_AT_START.get(), "scan": reports }), &text, Some(rep))
}

async fn run_size(a: SizeArgs, cluster: Option<String>) -> Result<()> {
    if a.list {
        let rows: Vec<Vec<String>> = size::demand_table()
            .iter()
            .map(|d| vec![d.name.clone(), format!("{:.1}", d.bytes_per_s_per_gpu / 1e6), d.source.clone()])
            .collect();
        print!("{}", report::table(&["workload", "MB/s per GPU", "source"], &rows));
        return Ok(());
    }
    let demand = size::demand(&a.workload)?;
    let gib = |g: f64| (g * (1u64 << 30) as f64) as u64;
    let (node_bps, source, measured) = match (a.node_mbps, a.measure) {
        (Some(m), _) => (m * 1e6, "given".to_string(), None),
        (None, true) => {
            let target = targets(&cluster, &a.common, true)
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("no target to measure"))?;
            let nodes = target.node_count().await?;
            let cfg = io::IoConfig {
                pattern: io::Pattern::SeqRead,
                block_bytes: 1 << 20,
                jobs: 4,
                queue_depth: 4,
                files_per_job: 4,
                file_bytes: 64 << 20,
                runtime: Duration::from_secs(10),
                ramp: Duration::from_secs(2),
                rate_iops_per_job: None,
                fsync_every: 0,
                dir: "size-probe".into(),
                drop_caches: !a.common.no_drop_caches,
                seed: 3,
                latency_breakdown: false,
            };
            let r = io::run(target.clone(), &cfg, !a.common.quiet).await?;
            target.remove_all("size-probe").await?;
            (
                r.bytes_per_s / nodes as f64,
                format!("measured: {:.0} MB/s over {nodes} nodes", r.bytes_per_s / 1e6),
                Some(r),
            )
        }
        (None, false) => bail!("give --node-mbps, or --measure with --cluster or --dir"),
    };
    let s = size::size(&demand, a.gpus, node_bps, &source, a.dataset_gib.map(gib), a.cache_gib.map(gib))?;
    let text = report::size_text(&s);
    let mut rep = new_report("trove bench size", &command_line());
    rep.sections.push(format!("## Sizing\n\n```\n{text}```\n\nDemand source: {}.\n", demand.source));
    emit(&a.common, &serde_json::json!({ "sizing": s, "measurement": measured }), &text, Some(rep))
}
