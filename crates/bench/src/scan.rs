//! Storage-only reads of TFRecord shards (`trove bench scan`), like the Isilon paper's
//! `storage_benchmark_tensorflow.py`: no preprocessing, no accelerator, every record parsed and
//! both its CRCs verified, bytes counted. Asynchronous readers (no synchronisation between
//! them) are scaled 1, 2, 4, ... until two doublings in a row add under 10%: the upper limit an
//! inference-like (asynchronous) application can draw from the storage. Within one reader count
//! each shard is read at most once (a level ends early when the shards run out), so no level is
//! served by a cache of its own reads; the page cache is dropped before each level when allowed.

use crate::target::{drop_caches, Target};
use crate::tfrecord::Parser;
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most concurrent readers.
pub const READERS_MAX: usize = 4096;
/// Throughput must grow by this fraction when readers double, or the doubling counts as flat.
pub const GROWTH_MIN: f64 = 0.10;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScanConfig {
    /// Directory of `.tfrecord` files inside the target (searched one level down too).
    pub data_dir: String,
    pub readers_max: usize,
    /// Time per reader count.
    pub duration: Duration,
    pub read_bytes: usize,
    pub drop_caches: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScanLevel {
    pub readers: usize,
    pub bytes_per_s: f64,
    pub records_per_s: f64,
    pub files_completed: u64,
    pub caches_dropped: bool,
    /// The level ended because every shard had been read (more shards would measure longer).
    pub exhausted: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScanReport {
    pub target: String,
    pub files: usize,
    pub levels: Vec<ScanLevel>,
    pub peak_bytes_per_s: f64,
    pub peak_readers: usize,
    pub caches_note: String,
}

/// The `.tfrecord` files under `dir` (directly, or in a `train/` subdirectory).
pub async fn find_shards(target: &dyn Target, dir: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for sub in ["", "/train"] {
        let d = format!("{dir}{sub}");
        if let Ok(names) = target.list(&d).await {
            out.extend(names.into_iter().filter(|n| n.ends_with(".tfrecord")).map(|n| format!("{d}/{n}")));
        }
    }
    out.sort();
    Ok(out)
}

/// Whether throughput grew enough from `prev` to `now` to try more readers.
pub fn still_growing(prev: f64, now: f64) -> bool {
    now > prev * (1.0 + GROWTH_MIN)
}

/// Reads with `readers` asynchronous readers for `duration`; each takes the next file (round
/// robin over the shard list) and parses it whole.
async fn level(
    target: Arc<dyn Target>,
    files: Arc<Vec<String>>,
    readers: usize,
    cfg: &ScanConfig,
) -> Result<ScanLevel> {
    let bytes = Arc::new(AtomicU64::new(0));
    let records = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + cfg.duration;
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let (target, files, bytes, records, completed, next) =
            (target.clone(), files.clone(), bytes.clone(), records.clone(), completed.clone(), next.clone());
        let read_bytes = cfg.read_bytes.max(4096);
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                // Each file at most once per reader count: a re-read could come from the page
                // cache (or any cache) and would not measure the storage.
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(path) = files.get(i) else { break };
                let mut r = target.open(path).await?;
                let size = r.size();
                let mut parser = Parser::default();
                let mut off = 0u64;
                while off < size {
                    if Instant::now() >= end {
                        return Ok::<_, anyhow::Error>(());
                    }
                    let piece = r.read_at(off, read_bytes).await?;
                    if piece.is_empty() {
                        bail!("{path}: short read at {off} of {size}");
                    }
                    off += piece.len() as u64;
                    for rec in parser.feed_bytes(piece.clone()).map_err(|e| anyhow!("{path}: {e}"))? {
                        // Counted per complete, verified record: what TensorFlow would deliver.
                        bytes.fetch_add(rec.len() as u64, Ordering::Relaxed);
                        records.fetch_add(1, Ordering::Relaxed);
                    }
                }
                parser.finish().map_err(|e| anyhow!("{path}: {e}"))?;
                completed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| anyhow!("scan reader failed: {e}"))??;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let exhausted = Instant::now() < end;
    Ok(ScanLevel {
        exhausted,
        readers,
        bytes_per_s: bytes.load(Ordering::Relaxed) as f64 / secs,
        records_per_s: records.load(Ordering::Relaxed) as f64 / secs,
        files_completed: completed.load(Ordering::Relaxed),
        caches_dropped: false,
    })
}

/// Scales readers 1, 2, 4, ... up to `readers_max` until throughput tops out.
pub async fn run(target: Arc<dyn Target>, cfg: &ScanConfig, show: bool) -> Result<ScanReport> {
    let files = find_shards(&*target, &cfg.data_dir).await?;
    if files.is_empty() {
        bail!(
            "no .tfrecord files in {} (generate some with `trove bench train --workload resnet50 --generate-only`)",
            cfg.data_dir
        );
    }
    let files = Arc::new(files);
    let mut report = ScanReport { target: target.describe(), files: files.len(), ..Default::default() };
    let mut readers = 1usize;
    let mut flat = 0;
    let mut notes = Vec::new();
    loop {
        let dropped = if cfg.drop_caches {
            match drop_caches() {
                Ok(()) => true,
                Err(why) => {
                    notes.push(why);
                    false
                }
            }
        } else {
            false
        };
        let mut l = level(target.clone(), files.clone(), readers, cfg).await?;
        l.caches_dropped = dropped;
        if show {
            eprintln!("  {readers:>4} readers: {:.0} MB/s, {:.0} records/s", l.bytes_per_s / 1e6, l.records_per_s);
        }
        let prev = report.peak_bytes_per_s;
        if l.bytes_per_s > report.peak_bytes_per_s {
            report.peak_bytes_per_s = l.bytes_per_s;
            report.peak_readers = readers;
        }
        let now = l.bytes_per_s;
        report.levels.push(l);
        // Topped out after two doublings in a row that added less than GROWTH_MIN: one flat
        // step can be noise on a shared machine.
        flat = if readers > 1 && !still_growing(prev, now) { flat + 1 } else { 0 };
        if readers >= cfg.readers_max.min(READERS_MAX) || flat >= 2 {
            break;
        }
        readers = (readers * 2).min(cfg.readers_max.min(READERS_MAX));
    }
    notes.dedup();
    report.caches_note = if !cfg.drop_caches {
        "page cache NOT dropped (disabled)".to_string()
    } else if notes.is_empty() {
        "page cache dropped before every reader count".to_string()
    } else {
        format!("page cache NOT dropped: {}", notes.join("; "))
    };
    Ok(report)
}

/// A scan config with defaults for tests and presets.
pub fn default_config(data_dir: &str) -> ScanConfig {
    ScanConfig {
        data_dir: data_dir.to_string(),
        readers_max: 64,
        duration: Duration::from_secs(10),
        read_bytes: 1 << 20,
        drop_caches: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_rule() {
        assert!(still_growing(100.0, 120.0));
        assert!(!still_growing(100.0, 105.0));
        assert!(!still_growing(100.0, 90.0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scans_generated_shards() {
        let dir = tempfile::tempdir().expect("tmp");
        let target: Arc<dyn Target> = Arc::new(crate::DirTarget::new(dir.path(), false).expect("target"));
        let ds = crate::train::Dataset {
            workload: "resnet50".into(),
            format: crate::train::Format::Tfrecord,
            files: 3,
            samples_per_file: 20,
            record_bytes: 5000,
            record_stdev_bytes: 0,
            seed: 1,
            total_bytes: 300_000,
            names: Vec::new(),
        };
        target.mkdir_all("data/train").await.expect("mkdir");
        for f in 0..3 {
            crate::train::write_file(&*target, &ds, "data", f).await.expect("write");
        }
        let cfg = ScanConfig {
            readers_max: 2,
            duration: Duration::from_millis(300),
            drop_caches: false,
            ..default_config("data")
        };
        let r = run(target, &cfg, false).await.expect("scan");
        assert_eq!(r.files, 3);
        assert!(!r.levels.is_empty() && r.levels.len() <= 2);
        assert!(r.peak_bytes_per_s > 0.0);
        assert!(r.levels[0].files_completed >= 1);
    }
}
