//! MLPerf-Storage-style accelerator emulation (`trove bench train`): each emulated accelerator
//! reads its batches through a real loader (read threads, prefetch, record parsing with CRC
//! checks) and then sleeps the time its model would compute; whatever time it spends waiting for
//! data lowers its accelerator utilisation (AU). Also the dataset generator (TFRecord and npz,
//! as DLIO writes them), the accelerator sweep, and the checkpoint workload.
//!
//! The arithmetic follows DLIO (MLPerf Storage's engine), so results compare with it: per
//! accelerator and epoch, AU = Σ compute time of steps 2..n / (epoch wall time − duration of
//! step 1); per epoch, AU is averaged and samples/s summed over accelerators; the run's AU is the
//! mean over epochs, and it passes at the workload's threshold (90%, CosmoFlow 70%).

use crate::target::{drop_caches, Target};
use crate::tfrecord;
use crate::world::World;
use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes a generator buffers before handing them to the target.
pub const GEN_WRITE_BYTES: usize = 8 << 20;
/// Smallest sample the generator produces when a size distribution dips low.
pub const SAMPLE_BYTES_MIN: u64 = 4096;
/// Most accelerators one process emulates.
pub const ACCELERATORS_MAX: usize = 1024;
/// Name of the dataset description written next to the generated files.
pub const MANIFEST_FILE: &str = "dataset.json";

/// Storage format of a workload's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Tfrecord,
    Npz,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Tfrecord => "tfrecord",
            Format::Npz => "npz",
        }
    }
}

/// One workload on one accelerator type: what MLPerf Storage emulates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub workload: String,
    pub accelerator: String,
    pub format: Format,
    /// Mean bytes of a sample's payload.
    pub record_bytes: u64,
    /// Standard deviation of the sample size (0: all equal).
    pub record_stdev_bytes: u64,
    pub samples_per_file: u64,
    pub batch_size: usize,
    /// Emulated compute time of one batch, seconds.
    pub compute_s: f64,
    /// AU a run must reach to pass (0.90, or 0.70 for CosmoFlow).
    pub au_min: f64,
    /// Reader threads per accelerator in the reference configuration.
    pub read_threads: usize,
    /// Training files in the reference configuration (the real dataset's shape).
    pub reference_files: u64,
}

impl WorkloadSpec {
    /// Read bandwidth one accelerator needs to stay at the AU threshold, bytes/s:
    /// threshold × batch × sample bytes / compute time (MLPerf's H100 ResNet-50 ≈ 0.18 GB/s).
    pub fn demand_bytes_per_s(&self) -> f64 {
        self.au_min * self.batch_size as f64 * self.record_bytes as f64 / self.compute_s
    }
}

/// The workloads and their per-accelerator parameters.
///
/// H100 and A100 numbers are MLPerf Storage v1.0's (as shipped in dlio_benchmark 2.0.0,
/// `dlio_benchmark/configs/workload/{resnet50,unet3d,cosmoflow}_{h100,a100}.yaml`, and in the
/// project's DESIGN.md). V100: UNet3D batch 4 at 1.3604 s is MLPerf Storage v0.5's configuration
/// (v0.5 emulated V100s only; the same numbers are DLIO 2.0.0's `unet3d_v100.yaml`); v0.5 had no
/// ResNet-50 or CosmoFlow, so their V100 numbers come from DLIO 2.0.0's `resnet50_v100.yaml`
/// (batch 64, 0.195 s) and `cosmoflow_v100.yaml` (batch 1, 0.00936 s).
pub fn workload(name: &str, accelerator: &str) -> Result<WorkloadSpec> {
    let acc = accelerator.to_ascii_lowercase();
    let (format, record_bytes, record_stdev_bytes, samples_per_file, read_threads, reference_files, au_min) = match name
    {
        "resnet50" => (Format::Tfrecord, 114_660, 0, 1251, 8, 1024, 0.90),
        "unet3d" => (Format::Npz, 146_600_628, 68_341_808, 1, 4, 168, 0.90),
        "cosmoflow" => (Format::Tfrecord, 2_828_486, 71_311, 1, 4, 524_288, 0.70),
        other => bail!("unknown workload {other:?} (resnet50, unet3d, cosmoflow)"),
    };
    let (batch_size, compute_s) = match (name, acc.as_str()) {
        ("resnet50", "h100") => (400, 0.224),
        ("resnet50", "a100") => (400, 0.435),
        ("resnet50", "v100") => (64, 0.195),
        ("unet3d", "h100") => (7, 0.323),
        ("unet3d", "a100") => (7, 0.636),
        ("unet3d", "v100") => (4, 1.3604),
        ("cosmoflow", "h100") => (1, 0.0035),
        ("cosmoflow", "a100") => (1, 0.00551),
        ("cosmoflow", "v100") => (1, 0.00936),
        (_, other) => bail!("unknown accelerator {other:?} (h100, a100, v100)"),
    };
    Ok(WorkloadSpec {
        workload: name.to_string(),
        accelerator: acc,
        format,
        record_bytes,
        record_stdev_bytes,
        samples_per_file,
        batch_size,
        compute_s,
        au_min,
        read_threads,
        reference_files,
    })
}

/// Settings of a training run (everything but the number of accelerators, which a sweep varies).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainConfig {
    pub spec: WorkloadSpec,
    /// Dataset directory inside the target.
    pub data_dir: String,
    /// Number of data files (overrides `dataset_bytes`).
    pub files: Option<u64>,
    /// Dataset size to generate; sized beyond client RAM for honest runs.
    pub dataset_bytes: Option<u64>,
    pub epochs: usize,
    pub read_threads: usize,
    /// Batches the loader keeps ready ahead of the accelerator (DLIO's prefetch_size).
    pub prefetch_batches: usize,
    /// Bytes per read request.
    pub transfer_bytes: usize,
    /// Forward-only (inference): no barrier between accelerators after each step.
    pub inference: bool,
    pub seed: u64,
    /// Concurrent file writers while generating.
    pub gen_jobs: usize,
    /// Regenerate even if a matching dataset exists.
    pub regenerate: bool,
    /// Train on the data files already in `data_dir` (e.g. `trove dataset pack` shards)
    /// instead of generating a dataset; nothing is written or removed there.
    pub existing: bool,
    /// A configuration with fewer steps per epoch than this is not measured (too short to mean
    /// anything once the first step is excluded).
    pub min_steps: usize,
    /// Drop the page cache before the first epoch (when permitted).
    pub drop_caches: bool,
}

/// The generated dataset, as recorded in its manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub workload: String,
    pub format: Format,
    pub files: u64,
    pub samples_per_file: u64,
    pub record_bytes: u64,
    pub record_stdev_bytes: u64,
    pub seed: u64,
    pub total_bytes: u64,
    /// The files of a dataset found in place (`TrainConfig::existing`), relative to its
    /// directory, in order; empty for a generated dataset, whose names follow from `files`.
    /// Absent from manifests written before it existed (read as empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

impl Dataset {
    pub fn file_name(&self, i: u64) -> String {
        if let Some(name) = self.names.get(i as usize) {
            return name.clone();
        }
        format!("train/img_{:07}_of_{:07}.{}", i, self.files, self.format.extension())
    }
    pub fn total_samples(&self) -> u64 {
        self.files * self.samples_per_file
    }
}

/// Fills `buf` with pseudo-random bytes (xorshift64*): incompressible and cheap, several GB/s.
pub fn fill_random(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.copy_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    let rest = chunks.into_remainder();
    let tail = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
    let n = rest.len();
    rest.copy_from_slice(&tail[..n]);
}

/// Size of sample `s` of file `f`: the mean, or a normal draw when the workload has a spread.
fn sample_bytes(ds: &Dataset, f: u64, s: u64) -> u64 {
    if ds.record_stdev_bytes == 0 {
        return ds.record_bytes;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(ds.seed ^ f.wrapping_mul(0x100_0000_01b3) ^ s);
    // Box-Muller: two uniforms to one standard normal.
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen::<f64>();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    let v = ds.record_bytes as f64 + z * ds.record_stdev_bytes as f64;
    (v.max(SAMPLE_BYTES_MIN as f64)) as u64
}

/// The dataset a configuration describes (file count from `files` or `dataset_bytes`).
pub fn plan_dataset(cfg: &TrainConfig) -> Result<Dataset> {
    let spec = &cfg.spec;
    let file_bytes = spec.record_bytes * spec.samples_per_file;
    let files = match (cfg.files, cfg.dataset_bytes) {
        (Some(f), _) => f,
        (None, Some(b)) => b.div_ceil(file_bytes).max(1),
        (None, None) => bail!("say how much data to use: --files N or --dataset-gib G"),
    };
    if files == 0 {
        bail!("a dataset needs at least one file");
    }
    Ok(Dataset {
        workload: spec.workload.clone(),
        format: spec.format,
        files,
        samples_per_file: spec.samples_per_file,
        record_bytes: spec.record_bytes,
        record_stdev_bytes: spec.record_stdev_bytes,
        seed: cfg.seed,
        total_bytes: files * file_bytes,
        names: Vec::new(),
    })
}

/// The dataset already in `cfg.data_dir` (`TrainConfig::existing`): every file with the
/// workload's extension there, in name order, with its samples counted from the index beside it
/// (`NAME.idx`, one line per record, as `trove dataset pack` and DALI's tfrecord2idx write it)
/// or, without one, by reading and checking every record. Steps per epoch assume every file
/// holds as many samples as the smallest.
pub async fn scan_existing(target: &dyn Target, cfg: &TrainConfig) -> Result<Dataset> {
    let dir = &cfg.data_dir;
    let format = cfg.spec.format;
    let ext = format!(".{}", format.extension());
    let entries = target.list(dir).await.with_context(|| format!("listing the existing dataset {dir}"))?;
    let mut names: Vec<String> = entries.iter().filter(|n| n.ends_with(&ext)).cloned().collect();
    names.sort();
    if names.is_empty() {
        bail!(
            "{dir} holds no {ext} files to train on (--existing reads a dataset in place, such as `trove dataset pack --format {}` writes)",
            format.extension()
        );
    }
    let (mut samples_min, mut samples, mut bytes) = (u64::MAX, 0u64, 0u64);
    for name in &names {
        let path = format!("{dir}/{name}");
        let size = target.size_of(&path).await?.ok_or_else(|| anyhow!("{path} vanished while it was counted"))?;
        let count = match format {
            Format::Npz => 1,
            Format::Tfrecord if entries.iter().any(|e| *e == format!("{name}.idx")) => {
                let idx = format!("{path}.idx");
                let mut r = target.open(&idx).await?;
                let len = r.size() as usize;
                let text = r.read_at(0, len).await?;
                std::str::from_utf8(&text)
                    .map_err(|_| anyhow!("{idx} is not a text index"))?
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .count() as u64
            }
            Format::Tfrecord => count_records(target, &path, cfg.transfer_bytes.max(4096)).await?,
        };
        if count == 0 {
            bail!("{path} holds no records");
        }
        samples_min = samples_min.min(count);
        samples += count;
        bytes += size;
    }
    Ok(Dataset {
        workload: cfg.spec.workload.clone(),
        format,
        files: names.len() as u64,
        samples_per_file: samples_min,
        record_bytes: bytes / samples.max(1),
        record_stdev_bytes: 0,
        seed: cfg.seed,
        total_bytes: bytes,
        names,
    })
}

/// Records in a TFRecord file, every frame's CRCs checked.
async fn count_records(target: &dyn Target, path: &str, transfer: usize) -> Result<u64> {
    let mut r = target.open(path).await?;
    let size = r.size();
    let (mut offset, mut records) = (0u64, 0u64);
    let mut parser = tfrecord::Parser::default();
    while offset < size {
        let piece = r.read_at(offset, transfer).await?;
        if piece.is_empty() {
            bail!("{path}: unexpected end of file at {offset} of {size}");
        }
        offset += piece.len() as u64;
        records += parser.feed_bytes(piece).map_err(|e| anyhow!("{path}: {e}"))?.len() as u64;
    }
    parser.finish().map_err(|e| anyhow!("{path}: {e}"))?;
    Ok(records)
}

/// Produces the bytes of data file `f` in pieces of about [`GEN_WRITE_BYTES`], so a large
/// TFRecord file never sits whole in memory.
pub struct FileGen<'a> {
    ds: &'a Dataset,
    f: u64,
    next_sample: u64,
    image: Vec<u8>,
    /// An npz is built whole (one sample per file) and then handed out in pieces.
    npz: Option<(Bytes, usize)>,
}

impl<'a> FileGen<'a> {
    pub fn new(ds: &'a Dataset, f: u64) -> FileGen<'a> {
        FileGen { ds, f, next_sample: 0, image: Vec::new(), npz: None }
    }

    /// The next piece of the file, or `None` at its end.
    pub fn next_piece(&mut self) -> Result<Option<Bytes>> {
        let ds = self.ds;
        match ds.format {
            Format::Tfrecord => {
                let mut out = BytesMut::new();
                while self.next_sample < ds.samples_per_file && out.len() < GEN_WRITE_BYTES {
                    let s = self.next_sample;
                    let n = sample_bytes(ds, self.f, s) as usize;
                    self.image.resize(n, 0);
                    fill_random(ds.seed ^ (self.f << 24) ^ s, &mut self.image);
                    tfrecord::frame_into(&mut out, &tfrecord::example(&self.image, n as i64));
                    self.next_sample += 1;
                }
                Ok(if out.is_empty() { None } else { Some(out.freeze()) })
            }
            Format::Npz => {
                if self.npz.is_none() {
                    let n = sample_bytes(ds, self.f, 0) as usize;
                    let seed = ds.seed ^ (self.f << 24);
                    self.npz = Some((Bytes::from(crate::npz::sample_npz(n, |x| fill_random(seed, x))?), 0));
                }
                let Some((data, off)) = &mut self.npz else { return Ok(None) };
                if *off >= data.len() {
                    return Ok(None);
                }
                let end = (*off + GEN_WRITE_BYTES).min(data.len());
                let piece = data.slice(*off..end);
                *off = end;
                Ok(Some(piece))
            }
        }
    }
}

/// Writes data file `f` to the target; returns its size.
pub async fn write_file(target: &dyn Target, ds: &Dataset, dir: &str, f: u64) -> Result<u64> {
    let path = format!("{dir}/{}", ds.file_name(f));
    let mut w = target.create(&path).await?;
    let mut offset = 0u64;
    let mut gen = FileGen::new(ds, f);
    // Generating is CPU work; doing it between awaits on the runtime's threads is fine at the
    // sizes generated here (a few MB per piece, GB/s per core).
    while let Some(piece) = gen.next_piece()? {
        let n = piece.len() as u64;
        w.write_at(offset, piece).await?;
        offset += n;
    }
    w.close().await.with_context(|| format!("closing {path}"))?;
    Ok(offset)
}

fn bar(len: u64, what: &str, show: bool, bytes: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    let template = if bytes {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} [{bar:30}] {pos}/{len} eta {eta}"
    };
    b.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}

/// Generates the dataset unless a matching one is there (its manifest equal to the plan). With
/// several ranks, each writes every size-th file. Returns the dataset and whether it was written.
pub async fn ensure_dataset(
    target: Arc<dyn Target>,
    cfg: &TrainConfig,
    world: &World,
    show: bool,
) -> Result<(Dataset, bool)> {
    if cfg.existing {
        return Ok((scan_existing(&*target, cfg).await?, false));
    }
    let ds = plan_dataset(cfg)?;
    let manifest = format!("{}/{MANIFEST_FILE}", cfg.data_dir);
    let existing = read_manifest(&*target, &manifest).await;
    let fresh = !cfg.regenerate && existing.as_ref() == Some(&ds);
    world.barrier().await?;
    if fresh {
        return Ok((ds, false));
    }
    if world.rank == 0 {
        // Only a directory of generated data is cleared: the manifest goes first, so a
        // generation cut short is never taken for a complete one.
        crate::target::claim_dir(&*target, &cfg.data_dir, &[MANIFEST_FILE]).await?;
        if existing.is_some() {
            target.remove_file(&manifest).await?;
        }
        target.remove_all(&format!("{}/train", cfg.data_dir)).await?;
        target.mkdir_all(&format!("{}/train", cfg.data_dir)).await?;
    }
    world.barrier().await?;
    let mine: Vec<u64> = (0..ds.files).filter(|f| f % world.size as u64 == world.rank as u64).collect();
    let progress = bar(
        ds.total_bytes / world.size as u64,
        &format!("generating {} {}", ds.files, ds.format.extension()),
        show,
        true,
    );
    let next = Arc::new(AtomicUsize::new(0));
    let mine = Arc::new(mine);
    let mut tasks = Vec::new();
    for _ in 0..cfg.gen_jobs.max(1) {
        let (target, ds, next, mine, dir, progress) =
            (target.clone(), ds.clone(), next.clone(), mine.clone(), cfg.data_dir.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&f) = mine.get(i) else { return Ok::<_, anyhow::Error>(()) };
                let n = write_file(&*target, &ds, &dir, f).await?;
                progress.inc(n);
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| anyhow!("generator task failed: {e}"))??;
    }
    progress.finish_and_clear();
    world.barrier().await?;
    if world.rank == 0 {
        let mut w = target.create(&manifest).await?;
        w.write_at(0, Bytes::from(serde_json::to_vec_pretty(&ds)?)).await?;
        w.sync().await?;
        w.close().await?;
    }
    world.barrier().await?;
    Ok((ds, true))
}

/// The dataset already in `cfg.data_dir` of `target`, as its manifest describes it.
pub async fn existing_dataset(target: &dyn Target, cfg: &TrainConfig) -> Option<Dataset> {
    read_manifest(target, &format!("{}/{MANIFEST_FILE}", cfg.data_dir)).await
}

/// What generating `cfg`'s dataset on `target` writes, in bytes: nothing when a matching
/// dataset is there (and not to be regenerated), else the dataset less the one it replaces
/// (removed first).
pub async fn bytes_to_generate(target: &dyn Target, cfg: &TrainConfig, ds: &Dataset) -> u64 {
    match existing_dataset(target, cfg).await {
        Some(existing) if !cfg.regenerate && existing == *ds => 0,
        Some(existing) => ds.total_bytes.saturating_sub(existing.total_bytes),
        None => ds.total_bytes,
    }
}

async fn read_manifest(target: &dyn Target, path: &str) -> Option<Dataset> {
    let mut r = target.open(path).await.ok()?;
    let size = r.size() as usize;
    let data = r.read_at(0, size).await.ok()?;
    serde_json::from_slice(&data).ok()
}

/// Steps every accelerator can take per epoch when `accelerators` share the files round robin:
/// the one with the fewest files decides, so all take the same number of steps (a barrier per
/// step needs that). Equals DLIO's floor(samples / batch / accelerators) when files divide evenly.
pub fn steps_per_epoch(files: u64, samples_per_file: u64, batch_size: usize, accelerators: usize) -> u64 {
    if accelerators == 0 || batch_size == 0 {
        return 0;
    }
    let fewest_files = files / accelerators as u64;
    fewest_files * samples_per_file / batch_size as u64
}

/// Measurements of one accelerator in one epoch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccelEpoch {
    pub steps: u64,
    /// Σ compute time of every step but the first, seconds.
    pub compute_after_first_s: f64,
    /// Duration of the first step (load + compute), seconds: excluded like DLIO does, since it
    /// includes starting the loader.
    pub first_step_s: f64,
    /// Epoch wall time, seconds (start of the epoch to the end of the last step's barrier).
    pub wall_s: f64,
    /// Time spent waiting for batches, seconds.
    pub load_wait_s: f64,
    pub samples: u64,
    /// Payload bytes of the samples consumed.
    pub bytes: u64,
}

impl AccelEpoch {
    /// DLIO's AU: compute of steps 2..n over the epoch's wall time less the first step.
    pub fn au(&self) -> f64 {
        let t = self.wall_s - self.first_step_s;
        if self.compute_after_first_s <= 0.0 || t <= 0.0 {
            return 0.0;
        }
        self.compute_after_first_s / t
    }
    pub fn samples_per_s(&self) -> f64 {
        if self.wall_s <= 0.0 {
            return 0.0;
        }
        self.samples as f64 / self.wall_s
    }
    pub fn bytes_per_s(&self) -> f64 {
        if self.wall_s <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 / self.wall_s
    }
}

/// One epoch over all accelerators.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochSummary {
    pub epoch: usize,
    /// Mean AU over accelerators (0..1).
    pub au: f64,
    /// Samples/s summed over accelerators.
    pub samples_per_s: f64,
    pub bytes_per_s: f64,
}

/// The result of a training run with a given number of accelerators.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainResult {
    pub target: String,
    pub workload: String,
    pub accelerator: String,
    pub accelerators: usize,
    pub steps_per_epoch: u64,
    pub epochs: Vec<EpochSummary>,
    /// Mean AU over epochs.
    pub au: f64,
    pub au_min: f64,
    pub pass: bool,
    pub epoch0_samples_per_s: f64,
    pub overall_samples_per_s: f64,
    pub epoch0_bytes_per_s: f64,
    pub overall_bytes_per_s: f64,
    /// Per accelerator, per epoch (for merging across ranks and for the record).
    pub per_accelerator: Vec<Vec<AccelEpoch>>,
}

/// Aggregates per-accelerator measurements the way DLIO does: per epoch the AU is averaged and
/// the throughput summed over accelerators; the run's figures are means over epochs.
pub fn summarize(spec: &WorkloadSpec, target: &str, per_accelerator: Vec<Vec<AccelEpoch>>) -> TrainResult {
    let epochs_n = per_accelerator.iter().map(|a| a.len()).min().unwrap_or(0);
    let mut epochs = Vec::with_capacity(epochs_n);
    for e in 0..epochs_n {
        let accs: Vec<&AccelEpoch> = per_accelerator.iter().map(|a| &a[e]).collect();
        let n = accs.len().max(1) as f64;
        epochs.push(EpochSummary {
            epoch: e,
            au: accs.iter().map(|a| a.au()).sum::<f64>() / n,
            samples_per_s: accs.iter().map(|a| a.samples_per_s()).sum(),
            bytes_per_s: accs.iter().map(|a| a.bytes_per_s()).sum(),
        });
    }
    let mean = |f: &dyn Fn(&EpochSummary) -> f64| -> f64 {
        if epochs.is_empty() {
            0.0
        } else {
            epochs.iter().map(f).sum::<f64>() / epochs.len() as f64
        }
    };
    let au = mean(&|e| e.au);
    TrainResult {
        target: target.to_string(),
        workload: spec.workload.clone(),
        accelerator: spec.accelerator.clone(),
        accelerators: per_accelerator.len(),
        steps_per_epoch: per_accelerator.first().and_then(|a| a.first()).map(|e| e.steps).unwrap_or(0),
        au,
        au_min: spec.au_min,
        // A small tolerance for float noise only: 0.8999999 is a pass at 90%.
        pass: !epochs.is_empty() && au + 1e-9 >= spec.au_min,
        epoch0_samples_per_s: epochs.first().map(|e| e.samples_per_s).unwrap_or(0.0),
        overall_samples_per_s: mean(&|e| e.samples_per_s),
        epoch0_bytes_per_s: epochs.first().map(|e| e.bytes_per_s).unwrap_or(0.0),
        overall_bytes_per_s: mean(&|e| e.bytes_per_s),
        epochs,
        per_accelerator,
    }
}

/// Payload sizes of the samples parsed from one read request.
type Samples = Vec<u64>;

/// A batch ready for the accelerator: its sample count and payload bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Batch {
    samples: u64,
    bytes: u64,
}

/// Starts the loader of one accelerator for one epoch, shaped like TensorFlow's and PyTorch's
/// pipelines: `read_threads` tasks take the accelerator's files in turn, read each sequentially
/// in `transfer_bytes` requests and parse and verify every record; a batcher assembles
/// `batch_size` samples into a batch and keeps up to `prefetch_batches` batches ready. The
/// accelerator takes one batch per step, so it wakes once per step, not once per sample.
fn start_loader(
    target: Arc<dyn Target>,
    files: Vec<String>,
    format: crate::train::Format,
    cfg: &TrainConfig,
    steps: u64,
) -> tokio::sync::mpsc::Receiver<Result<Batch>> {
    let (batch_tx, batch_rx) = tokio::sync::mpsc::channel::<Result<Batch>>(cfg.prefetch_batches.max(1));
    // Samples in flight between the readers and the batcher: one batch's worth of read requests.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Samples>>(cfg.read_threads.max(1) * 2);
    let files = Arc::new(files);
    let next = Arc::new(AtomicUsize::new(0));
    let transfer = cfg.transfer_bytes.max(4096);
    for _ in 0..cfg.read_threads.max(1) {
        let (target, files, next, tx) = (target.clone(), files.clone(), next.clone(), tx.clone());
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { return };
                if let Err(e) = read_samples(&*target, path, format, transfer, &tx).await {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let batch_size = cfg.spec.batch_size.max(1) as u64;
    tokio::spawn(async move {
        let mut cur = Batch::default();
        let mut sent = 0u64;
        while sent < steps {
            match rx.recv().await {
                Some(Ok(samples)) => {
                    for bytes in samples {
                        cur.samples += 1;
                        cur.bytes += bytes;
                        if cur.samples == batch_size {
                            if batch_tx.send(Ok(std::mem::take(&mut cur))).await.is_err() {
                                return;
                            }
                            sent += 1;
                            if sent == steps {
                                return;
                            }
                        }
                    }
                }
                Some(Err(e)) => {
                    let _ = batch_tx.send(Err(e)).await;
                    return;
                }
                // Readers done: the accelerator sees the channel close if it wants more.
                None => return,
            }
        }
    });
    batch_rx
}

/// Reads one data file and sends its samples; stops quietly when the receiver is gone.
async fn read_samples(
    target: &dyn Target,
    path: &str,
    format: Format,
    transfer: usize,
    tx: &tokio::sync::mpsc::Sender<Result<Samples>>,
) -> Result<()> {
    let mut r = target.open(path).await?;
    let size = r.size();
    let mut offset = 0u64;
    let mut parser = tfrecord::Parser::default();
    let mut head = Vec::new();
    while offset < size {
        let piece = r.read_at(offset, transfer).await?;
        if piece.is_empty() {
            bail!("{path}: unexpected end of file at {offset} of {size}");
        }
        offset += piece.len() as u64;
        match format {
            Format::Tfrecord => {
                let records = parser.feed_bytes(piece.clone()).map_err(|e| anyhow!("{path}: {e}"))?;
                let mut samples = Vec::with_capacity(records.len());
                for record in records {
                    samples.push(tfrecord::parse_example(&record).with_context(|| path.to_string())?.0 as u64);
                }
                if !samples.is_empty() && tx.send(Ok(samples)).await.is_err() {
                    return Ok(());
                }
            }
            Format::Npz => {
                if head.len() < 64 {
                    head.extend_from_slice(&piece[..piece.len().min(64 - head.len())]);
                }
            }
        }
    }
    match format {
        Format::Tfrecord => parser.finish().map_err(|e| anyhow!("{path}: {e}"))?,
        Format::Npz => {
            // One sample per file: check the archive starts with a zip local header naming the
            // array, as numpy.load would before reading it.
            if head.len() < 30 || head[..4] != [0x50, 0x4b, 0x03, 0x04] {
                bail!("{path} is not an npz (no zip local header)");
            }
            let _ = tx.send(Ok(vec![size])).await;
        }
    }
    Ok(())
}

/// Where one process's accelerators wait for each other (and, through the leader, for other
/// ranks) after every training step.
struct StepBarrier {
    local: tokio::sync::Barrier,
    world: Arc<World>,
}

impl StepBarrier {
    async fn wait(&self) -> Result<()> {
        let r = self.local.wait().await;
        if self.world.size > 1 {
            if r.is_leader() {
                self.world.barrier().await?;
            }
            self.local.wait().await;
        }
        Ok(())
    }
}

/// Sleeps `d` precisely: a thread sleep overshoots by tens of microseconds, while the async
/// timer rounds up to whole milliseconds (25% of CosmoFlow's 3.5 ms step on H100).
async fn compute(d: Duration) {
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(d)).await;
}

/// Files of accelerator `g` of `n` in an epoch: the dataset's files shuffled with the epoch's
/// seed, dealt round robin.
fn files_of(ds: &Dataset, dir: &str, seed: u64, epoch: usize, g: usize, n: usize) -> Vec<String> {
    let mut order: Vec<u64> = (0..ds.files).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (epoch as u64).wrapping_mul(0x9e37_79b9));
    order.shuffle(&mut rng);
    order.into_iter().skip(g).step_by(n).map(|f| format!("{dir}/{}", ds.file_name(f))).collect()
}

/// Runs `local` accelerators in this process (of `local × world.size` in all) for the
/// configured epochs; returns every accelerator of every rank, gathered.
pub async fn run_training(
    target: Arc<dyn Target>,
    cfg: &TrainConfig,
    ds: &Dataset,
    local: usize,
    world: Arc<World>,
    show: bool,
) -> Result<TrainResult> {
    if local == 0 || local > ACCELERATORS_MAX {
        bail!("accelerators per process must be 1..={ACCELERATORS_MAX}, not {local}");
    }
    let total = local * world.size;
    let steps = steps_per_epoch(ds.files, ds.samples_per_file, cfg.spec.batch_size, total);
    if steps < cfg.min_steps.max(2) as u64 {
        let remedy = if cfg.existing {
            "use a larger dataset (`trove dataset expand`)"
        } else {
            "use more files or --dataset-gib"
        };
        bail!(
            "{total} accelerators get only {steps} steps per epoch of {} samples from {} files (need {}): {remedy}",
            cfg.spec.batch_size,
            ds.files,
            cfg.min_steps.max(2)
        );
    }
    let barrier = Arc::new(StepBarrier { local: tokio::sync::Barrier::new(local), world: world.clone() });
    let progress = bar(
        steps * cfg.epochs as u64,
        &format!("{total} × {} {}", cfg.spec.accelerator, cfg.spec.workload),
        show,
        false,
    );
    let steps_done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for l in 0..local {
        let g = world.rank * local + l;
        let (target, cfg, ds, barrier, progress, steps_done) =
            (target.clone(), cfg.clone(), ds.clone(), barrier.clone(), progress.clone(), steps_done.clone());
        tasks.push(tokio::spawn(async move {
            let mut epochs = Vec::with_capacity(cfg.epochs);
            let compute_time = Duration::from_secs_f64(cfg.spec.compute_s);
            for epoch in 0..cfg.epochs {
                // Everyone starts the epoch together (DLIO's barrier before each epoch).
                barrier.wait().await?;
                let files = files_of(&ds, &cfg.data_dir, cfg.seed, epoch, g, total);
                let start = Instant::now();
                let mut rx = start_loader(target.clone(), files, ds.format, &cfg, steps);
                let mut st = AccelEpoch { steps, ..Default::default() };
                for step in 0..steps {
                    let t0 = Instant::now();
                    match rx.recv().await {
                        Some(Ok(batch)) => {
                            st.samples += batch.samples;
                            st.bytes += batch.bytes;
                        }
                        Some(Err(e)) => return Err(e),
                        None => bail!("accelerator {g}: the loader ran dry at step {step} of {steps}"),
                    }
                    st.load_wait_s += t0.elapsed().as_secs_f64();
                    compute(compute_time).await;
                    if step == 0 {
                        st.first_step_s = t0.elapsed().as_secs_f64();
                    } else {
                        st.compute_after_first_s += cfg.spec.compute_s;
                    }
                    if !cfg.inference {
                        barrier.wait().await?;
                    }
                    if g == 0 {
                        progress.set_position(steps_done.fetch_add(1, Ordering::Relaxed) + 1);
                    }
                }
                drop(rx);
                st.wall_s = start.elapsed().as_secs_f64();
                epochs.push(st);
            }
            Ok::<_, anyhow::Error>(epochs)
        }));
    }
    let mut mine = Vec::with_capacity(local);
    for t in tasks {
        mine.push(t.await.map_err(|e| anyhow!("accelerator task failed: {e}"))??);
    }
    progress.finish_and_clear();
    // Every rank learns every accelerator's numbers, so a sweep decides the same everywhere.
    let all = world.all_gather(&serde_json::to_value(&mine)?).await?;
    let mut per_accelerator = Vec::with_capacity(total);
    for v in all {
        let part: Vec<Vec<AccelEpoch>> = serde_json::from_value(v).context("a rank sent malformed training results")?;
        per_accelerator.extend(part);
    }
    Ok(summarize(&cfg.spec, &target.describe(), per_accelerator))
}

/// The outcome of `trove bench train` on one target.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TrainReport {
    pub target: String,
    pub dataset: Option<Dataset>,
    pub generated: bool,
    /// Whether the page cache was dropped before measuring, and why not if not.
    pub caches_dropped: bool,
    pub caches_note: String,
    /// Whether the dataset is larger than this client's RAM (otherwise epochs after the first
    /// may be served from the page cache: a dataset must exceed RAM for an honest test).
    pub dataset_exceeds_ram: bool,
    /// Every configuration measured, in the order run.
    pub runs: Vec<TrainResult>,
    /// With `--sweep`: the most accelerators that passed, and whether the sweep hit its cap.
    pub sweep_best: Option<usize>,
    pub sweep_capped: bool,
}

/// Runs `train` on one target: ensures the dataset, drops caches, then runs either the given
/// number of accelerators or a sweep over 1..=`sweep_max` accelerators per process.
pub async fn train(
    target: Arc<dyn Target>,
    cfg: &TrainConfig,
    accelerators: usize,
    sweep_max: Option<usize>,
    world: Arc<World>,
    show: bool,
) -> Result<TrainReport> {
    let (ds, generated) = ensure_dataset(target.clone(), cfg, &world, show).await?;
    let host = crate::world::HostInfo::collect();
    let mut report = TrainReport {
        target: target.describe(),
        dataset_exceeds_ram: ds.total_bytes > host.mem_total_bytes,
        dataset: Some(ds.clone()),
        generated,
        ..Default::default()
    };
    // Dropped before every configuration, so each one's epoch 0 reads from storage.
    let drop_now = || -> (bool, String) {
        if !cfg.drop_caches {
            return (false, "page cache NOT dropped (disabled by --no-drop-caches)".to_string());
        }
        match drop_caches() {
            Ok(()) => (true, "page cache dropped before each configuration".to_string()),
            Err(why) => (false, format!("page cache NOT dropped: {why}")),
        }
    };
    (report.caches_dropped, report.caches_note) = drop_now();
    world.barrier().await?;
    match sweep_max {
        None => {
            report.runs.push(run_training(target.clone(), cfg, &ds, accelerators, world.clone(), show).await?);
        }
        Some(max) => {
            // The most accelerators the data supports at the minimum step count.
            let mut cap = max.min(ACCELERATORS_MAX);
            while cap > 1
                && steps_per_epoch(ds.files, ds.samples_per_file, cfg.spec.batch_size, cap * world.size)
                    < cfg.min_steps.max(2) as u64
            {
                cap -= 1;
            }
            let runs = std::sync::Mutex::new(Vec::new());
            let first = std::sync::atomic::AtomicBool::new(true);
            let outcome = crate::sweep::find_max(accelerators.max(1).min(cap), cap, |n| {
                let (target, world, runs) = (target.clone(), world.clone(), &runs);
                let ds = ds.clone();
                // The first configuration runs right after the drop above.
                if !first.swap(false, Ordering::Relaxed) {
                    drop_now();
                }
                async move {
                    world.barrier().await?;
                    let r = run_training(target, cfg, &ds, n, world, show).await?;
                    let pass = r.pass;
                    if show {
                        eprintln!(
                            "  {:>4} accelerators: AU {:5.1}% {} ({:.0} samples/s)",
                            r.accelerators,
                            r.au * 100.0,
                            if pass { "pass" } else { "FAIL" },
                            r.overall_samples_per_s
                        );
                    }
                    runs.lock().map_err(|_| anyhow!("sweep results lock poisoned"))?.push(r);
                    Ok(pass)
                }
            })
            .await?;
            report.runs = runs.into_inner().map_err(|_| anyhow!("sweep results lock poisoned"))?;
            report.sweep_best = outcome.best.map(|b| b * world.size);
            report.sweep_capped = outcome.capped;
        }
    }
    Ok(report)
}

/// Checkpoint sizes of MLPerf Storage v2.0's checkpointing workload (Llama 3), bytes, from its
/// README's table (mlcommons/storage, v2.0: 8B 105 GB, 70B 912 GB, 405B 5.29 TB, 1T 18 TB; quoted
/// from that table, decimal units).
pub fn checkpoint_preset(name: &str) -> Result<u64> {
    Ok(match name {
        "llama3-8b" => 105_000_000_000,
        "llama3-70b" => 912_000_000_000,
        "llama3-405b" => 5_290_000_000_000,
        "llama3-1t" => 18_000_000_000_000,
        other => bail!("unknown checkpoint preset {other:?} (llama3-8b, llama3-70b, llama3-405b, llama3-1t)"),
    })
}

/// Settings of the checkpoint workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointConfig {
    pub model: String,
    /// Bytes of one checkpoint (already divided by the scale factor).
    pub checkpoint_bytes: u64,
    pub scale: u64,
    pub checkpoints: usize,
    /// Files per checkpoint, written and read in parallel (one per emulated rank).
    pub files: usize,
    pub io_bytes: usize,
    pub dir: String,
    pub drop_caches: bool,
}

/// Results of the checkpoint workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckpointReport {
    pub target: String,
    pub model: String,
    pub checkpoint_bytes: u64,
    pub scale: u64,
    pub checkpoints: usize,
    pub files: usize,
    /// Per checkpoint: seconds to write (including fsync), and to read back.
    pub write_s: Vec<f64>,
    pub read_s: Vec<f64>,
    pub write_bytes_per_s: f64,
    pub read_bytes_per_s: f64,
    pub caches_dropped: bool,
    pub caches_note: String,
}

/// Writes `checkpoints` checkpoints (each `files` files written in parallel, fsynced), drops the
/// page cache, then reads each back.
pub async fn checkpoint(target: Arc<dyn Target>, cfg: &CheckpointConfig, show: bool) -> Result<CheckpointReport> {
    let mut report = CheckpointReport {
        target: target.describe(),
        model: cfg.model.clone(),
        checkpoint_bytes: cfg.checkpoint_bytes,
        scale: cfg.scale,
        checkpoints: cfg.checkpoints,
        files: cfg.files.max(1),
        ..Default::default()
    };
    let files = cfg.files.max(1);
    let per_file = cfg.checkpoint_bytes.div_ceil(files as u64);
    let io = cfg.io_bytes.max(4096);
    crate::target::claim_dir(&*target, &cfg.dir, &[]).await?;
    target.remove_all(&cfg.dir).await?;
    let progress = bar(cfg.checkpoint_bytes * cfg.checkpoints as u64 * 2, "checkpoints", show, true);
    let mut block = vec![0u8; io];
    fill_random(7, &mut block);
    let block = Bytes::from(block);
    for c in 0..cfg.checkpoints {
        let dir = format!("{}/ckpt-{c:04}", cfg.dir);
        target.mkdir_all(&dir).await?;
        let t = Instant::now();
        let mut tasks = Vec::new();
        for f in 0..files {
            let (target, block, path, progress) =
                (target.clone(), block.clone(), format!("{dir}/rank-{f:05}.pt"), progress.clone());
            tasks.push(tokio::spawn(async move {
                let mut w = target.create(&path).await?;
                let mut off = 0u64;
                while off < per_file {
                    let n = (per_file - off).min(io as u64) as usize;
                    w.write_at(off, block.slice(..n)).await?;
                    off += n as u64;
                    progress.inc(n as u64);
                }
                w.sync().await?;
                w.close().await?;
                Ok::<_, anyhow::Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| anyhow!("checkpoint writer failed: {e}"))??;
        }
        report.write_s.push(t.elapsed().as_secs_f64());
    }
    (report.caches_dropped, report.caches_note) = if cfg.drop_caches {
        match drop_caches() {
            Ok(()) => (true, "page cache dropped between writing and reading".to_string()),
            Err(why) => (false, format!("page cache NOT dropped: {why}")),
        }
    } else {
        (false, "page cache NOT dropped (disabled)".to_string())
    };
    for c in 0..cfg.checkpoints {
        let dir = format!("{}/ckpt-{c:04}", cfg.dir);
        let t = Instant::now();
        let mut tasks = Vec::new();
        for f in 0..files {
            let (target, path, progress) = (target.clone(), format!("{dir}/rank-{f:05}.pt"), progress.clone());
            tasks.push(tokio::spawn(async move {
                let mut r = target.open(&path).await?;
                let size = r.size();
                let mut off = 0u64;
                while off < size {
                    let got = r.read_at(off, io).await?;
                    if got.is_empty() {
                        bail!("{path}: short read at {off} of {size}");
                    }
                    off += got.len() as u64;
                    progress.inc(got.len() as u64);
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| anyhow!("checkpoint reader failed: {e}"))??;
        }
        report.read_s.push(t.elapsed().as_secs_f64());
    }
    progress.finish_and_clear();
    let bytes = cfg.checkpoint_bytes as f64 * cfg.checkpoints as f64;
    report.write_bytes_per_s = bytes / report.write_s.iter().sum::<f64>().max(1e-9);
    report.read_bytes_per_s = bytes / report.read_s.iter().sum::<f64>().max(1e-9);
    target.remove_all(&cfg.dir).await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(steps: u64, compute_each: f64, first: f64, wall: f64) -> AccelEpoch {
        AccelEpoch {
            steps,
            compute_after_first_s: compute_each * (steps - 1) as f64,
            first_step_s: first,
            wall_s: wall,
            load_wait_s: 0.0,
            samples: steps * 10,
            bytes: steps * 10 * 1000,
        }
    }

    #[test]
    fn au_excludes_the_first_step() {
        // 11 steps of 0.2 s compute; the first step took 1.0 s (loader start), the other 10
        // took 0.25 s each: AU = 10 × 0.2 / (3.5 − 1.0) = 0.8.
        let e = epoch(11, 0.2, 1.0, 3.5);
        assert!((e.au() - 0.8).abs() < 1e-12, "{}", e.au());
        // No stall at all: AU is exactly 1.
        let e = epoch(11, 0.2, 0.2, 2.2);
        assert!((e.au() - 1.0).abs() < 1e-12);
        assert_eq!(AccelEpoch::default().au(), 0.0);
        assert!((epoch(11, 0.2, 0.2, 2.2).samples_per_s() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn summary_averages_au_and_sums_throughput_like_dlio() {
        let spec = workload("resnet50", "h100").expect("spec");
        // Two accelerators, two epochs. Epoch 0: AU 0.8 and 1.0; epoch 1: 1.0 and 1.0.
        let a = vec![epoch(11, 0.2, 1.0, 3.5), epoch(11, 0.2, 0.2, 2.2)];
        let b = vec![epoch(11, 0.2, 0.2, 2.2), epoch(11, 0.2, 0.2, 2.2)];
        let r = summarize(&spec, "t", vec![a, b]);
        assert_eq!(r.accelerators, 2);
        assert_eq!(r.epochs.len(), 2);
        assert!((r.epochs[0].au - 0.9).abs() < 1e-12);
        assert!((r.epochs[1].au - 1.0).abs() < 1e-12);
        assert!((r.au - 0.95).abs() < 1e-12);
        assert!(r.pass, "95% passes the 90% bar");
        // Epoch 0 throughput: 110 / 3.5 + 110 / 2.2 samples/s.
        assert!((r.epoch0_samples_per_s - (110.0 / 3.5 + 50.0)).abs() < 1e-9);
        assert!((r.overall_samples_per_s - ((110.0 / 3.5 + 50.0) + 100.0) / 2.0).abs() < 1e-9);
        assert!((r.epoch0_bytes_per_s - r.epoch0_samples_per_s * 1000.0).abs() < 1e-6);
    }

    #[test]
    fn pass_thresholds_per_workload() {
        let spec = workload("resnet50", "h100").expect("spec");
        let slow = vec![vec![epoch(11, 0.2, 1.0, 3.5)]]; // AU 0.8
        assert!(!summarize(&spec, "t", slow.clone()).pass);
        let cosmo = workload("cosmoflow", "h100").expect("spec");
        assert_eq!(cosmo.au_min, 0.70);
        assert!(summarize(&cosmo, "t", slow).pass, "80% passes CosmoFlow's 70% bar");
        assert!(!summarize(&spec, "t", vec![]).pass, "no measurement never passes");
    }

    #[test]
    fn workload_table_and_demand() {
        let r = workload("resnet50", "h100").expect("spec");
        assert_eq!((r.batch_size, r.compute_s, r.record_bytes, r.samples_per_file), (400, 0.224, 114_660, 1251));
        // MLPerf Storage quotes ~0.18 GB/s per H100 for ResNet-50 and ~2.9 GB/s for UNet3D.
        assert!((r.demand_bytes_per_s() / 1e9 - 0.184).abs() < 0.01, "{}", r.demand_bytes_per_s());
        let u = workload("unet3d", "h100").expect("spec");
        assert!((u.demand_bytes_per_s() / 1e9 - 2.86).abs() < 0.05, "{}", u.demand_bytes_per_s());
        assert_eq!(workload("unet3d", "v100").expect("spec").batch_size, 4);
        assert_eq!(workload("cosmoflow", "A100").expect("spec").compute_s, 0.00551);
        assert!(workload("bert", "h100").is_err());
        assert!(workload("resnet50", "tpu").is_err());
    }

    #[test]
    fn steps_match_dlio_when_files_divide_evenly() {
        // DLIO: floor(64 × 1251 / 400 / 2) = 100.
        assert_eq!(steps_per_epoch(64, 1251, 400, 2), 100);
        // Uneven: 3 accelerators over 64 files; the one with 21 files decides.
        assert_eq!(steps_per_epoch(64, 1251, 400, 3), 21 * 1251 / 400);
        assert_eq!(steps_per_epoch(4, 1, 7, 8), 0);
    }

    #[test]
    fn files_are_dealt_disjointly_and_completely() {
        let ds = Dataset {
            workload: "resnet50".into(),
            format: Format::Tfrecord,
            files: 10,
            samples_per_file: 1,
            record_bytes: 1,
            record_stdev_bytes: 0,
            seed: 1,
            total_bytes: 10,
            names: Vec::new(),
        };
        let mut all: Vec<String> = (0..3).flat_map(|g| files_of(&ds, "d", 5, 0, g, 3)).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 10);
        assert_ne!(files_of(&ds, "d", 5, 0, 0, 3), files_of(&ds, "d", 5, 1, 0, 3), "epochs reshuffle");
    }

    #[test]
    fn generated_files_parse_back() {
        let ds = Dataset {
            workload: "cosmoflow".into(),
            format: Format::Tfrecord,
            files: 1,
            samples_per_file: 5,
            record_bytes: 10_000,
            record_stdev_bytes: 1000,
            seed: 3,
            total_bytes: 50_000,
            names: Vec::new(),
        };
        let mut bytes = Vec::new();
        let mut gen = FileGen::new(&ds, 0);
        while let Some(piece) = gen.next_piece().expect("generate") {
            bytes.extend_from_slice(&piece);
        }
        let mut p = tfrecord::Parser::default();
        let recs = p.feed(&bytes).expect("parse");
        p.finish().expect("boundary");
        assert_eq!(recs.len(), 5);
        for (s, r) in recs.iter().enumerate() {
            let (image, size) = tfrecord::parse_example(r).expect("example");
            assert_eq!(image as u64, sample_bytes(&ds, 0, s as u64));
            assert_eq!(size, Some(image as i64));
        }
    }

    /// A dataset found in place: its files in name order, samples counted from an index where
    /// one is beside the file and by reading it where not; damaged or empty sets are refused
    /// with the file named.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_existing_dataset_is_counted_in_place() {
        let dir = tempfile::tempdir().expect("tmp");
        let target: Arc<dyn Target> = Arc::new(crate::DirTarget::new(dir.path(), false).expect("target"));
        let cfg = TrainConfig {
            spec: workload("resnet50", "v100").expect("spec"),
            data_dir: "mine".into(),
            files: None,
            dataset_bytes: None,
            epochs: 1,
            read_threads: 1,
            prefetch_batches: 1,
            transfer_bytes: 4096,
            inference: false,
            seed: 1,
            gen_jobs: 1,
            regenerate: false,
            existing: true,
            min_steps: 1,
            drop_caches: false,
        };
        target.mkdir_all("mine").await.expect("mkdir");
        let empty = scan_existing(&*target, &cfg).await.expect_err("no files");
        assert!(empty.to_string().contains("holds no .tfrecord files"), "{empty}");
        // Three shards of 5, 7 and 6 records; the second with an index beside it.
        for (name, records) in [("b.tfrecord", 5u64), ("a.tfrecord", 7), ("c.tfrecord", 6)] {
            let ds = Dataset {
                workload: "resnet50".into(),
                format: Format::Tfrecord,
                files: 1,
                samples_per_file: records,
                record_bytes: 1000,
                record_stdev_bytes: 0,
                seed: 1,
                total_bytes: records * 1000,
                names: Vec::new(),
            };
            let mut bytes = Vec::new();
            let mut gen = FileGen::new(&ds, 0);
            while let Some(piece) = gen.next_piece().expect("generate") {
                bytes.extend_from_slice(&piece);
            }
            let mut w = target.create(&format!("mine/{name}")).await.expect("create");
            w.write_at(0, Bytes::from(bytes)).await.expect("write");
            w.close().await.expect("close");
        }
        let mut w = target.create("mine/a.tfrecord.idx").await.expect("create");
        w.write_at(0, Bytes::from((0..7).map(|i| format!("{} 1016\n", i * 1016)).collect::<String>()))
            .await
            .expect("write");
        w.close().await.expect("close");
        let ds = scan_existing(&*target, &cfg).await.expect("scan");
        assert_eq!(ds.names, ["a.tfrecord", "b.tfrecord", "c.tfrecord"]);
        assert_eq!((ds.files, ds.samples_per_file), (3, 5), "the smallest file decides");
        assert_eq!(ds.file_name(1), "b.tfrecord");
        // A file cut short is refused by name (it has no index, so it is read).
        let path = dir.path().join("mine/c.tfrecord");
        let len = std::fs::metadata(&path).expect("stat").len();
        std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(len - 10).expect("truncate");
        let err = scan_existing(&*target, &cfg).await.expect_err("cut file");
        assert!(format!("{err:#}").contains("c.tfrecord"), "{err:#}");
    }
}
