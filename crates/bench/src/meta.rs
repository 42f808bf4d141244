//! mdtest-like metadata rates (`trove bench meta`): tasks create, stat and remove directories,
//! then create (optionally writing a few bytes), stat, read and remove files, each in its own
//! directory (`--unique`, mdtest -u) or all in one shared directory; every phase is timed from a
//! barrier to the last task's end, and each iteration's rate is summarised as max/min/mean/stddev
//! ops/s as mdtest prints them.
//!
//! With several ranks (mpirun/srun), every rank runs its tasks and phases start together; a
//! phase's rate is all ranks' operations over the span from the earliest start to the latest end
//! (wall clocks, so hosts should be time-synchronised).
//!
//! On a directory target every task is an OS thread making the system calls itself, as mdtest's
//! ranks do: a hand-off to a blocking pool per operation would cost more than a local file
//! system's create or unlink and so understate it (by half for ext4 unlinks on a 2-core machine).

use crate::stats::Summary;
use crate::target::Target;
use crate::world::World;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{SystemTime, UNIX_EPOCH};

/// Most tasks per process, and items per task.
pub const TASKS_MAX: usize = 4096;
pub const ITEMS_MAX: usize = 10_000_000;

/// The phases, in the order they run.
pub const PHASES: [&str; 7] =
    ["dir create", "dir stat", "dir remove", "file create", "file stat", "file read", "file remove"];
/// Where the file phases start in [`PHASES`].
const FIRST_FILE_PHASE: usize = 3;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MetaConfig {
    /// Tasks in this process (mdtest's ranks within one client).
    pub tasks: usize,
    /// Items (files, directories) per task.
    pub items: usize,
    pub iterations: usize,
    /// Each task in its own directory (mdtest -u); otherwise one shared directory.
    pub unique_dir: bool,
    /// Bytes written into each file at create and read back (mdtest -w/-e).
    pub file_bytes: usize,
    /// Only the file phases (mdtest -F).
    #[serde(default)]
    pub files_only: bool,
    pub dir: String,
}

/// One phase of one iteration on one rank.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct PhaseTiming {
    pub start_unix_s: f64,
    pub end_unix_s: f64,
    pub ops: u64,
}

/// Rates of one phase over the iterations.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PhaseResult {
    pub phase: String,
    /// Ops/s of each iteration.
    pub rates: Vec<f64>,
    pub summary: Summary,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MetaReport {
    pub target: String,
    pub ranks: usize,
    pub tasks_per_rank: usize,
    pub items_per_task: usize,
    pub iterations: usize,
    pub unique_dir: bool,
    pub file_bytes: usize,
    /// The phases that ran, in [`PHASES`] order.
    pub phases: Vec<PhaseResult>,
}

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Merges per-rank timings of one phase and iteration into a rate.
pub fn merged_rate(parts: &[PhaseTiming]) -> f64 {
    let start = parts.iter().map(|p| p.start_unix_s).fold(f64::MAX, f64::min);
    let end = parts.iter().map(|p| p.end_unix_s).fold(f64::MIN, f64::max);
    let ops: u64 = parts.iter().map(|p| p.ops).sum();
    if parts.is_empty() || end <= start {
        return 0.0;
    }
    ops as f64 / (end - start)
}

impl MetaConfig {
    /// The indices into [`PHASES`] of the phases this configuration runs, in order.
    fn phases(&self) -> std::ops::Range<usize> {
        let first = if self.files_only { FIRST_FILE_PHASE } else { 0 };
        first..PHASES.len()
    }
}

fn task_dir(cfg: &MetaConfig, iter: usize, rank: usize, task: usize) -> String {
    if cfg.unique_dir {
        format!("{}/iter{iter}/rank{rank}.task{task}", cfg.dir)
    } else {
        format!("{}/iter{iter}/shared", cfg.dir)
    }
}

/// `path` of the benchmark's namespace under a directory target's `root`.
fn local_path(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_matches('/'))
}

/// Phase `p` on a local directory: one OS thread per task (`dirs[t]` is task `t`'s directory),
/// all released together by a barrier; the phase spans from the first task's start to the last
/// one's end.
fn local_phase(p: usize, dirs: &[PathBuf], rank: usize, items: usize, payload: &[u8]) -> Result<PhaseTiming> {
    let gate = Barrier::new(dirs.len());
    let spans = std::thread::scope(|scope| {
        let threads: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(t, dir)| {
                let gate = &gate;
                scope.spawn(move || {
                    gate.wait();
                    let start = now_s();
                    (0..items).try_for_each(|k| local_item(p, dir, &format!("{rank}.{t}.{k}"), payload))?;
                    Ok::<_, anyhow::Error>((start, now_s()))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().map_err(|_| anyhow!("a metadata task panicked"))?)
            .collect::<Result<Vec<_>>>()
    })?;
    let start = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
    let end = spans.iter().map(|s| s.1).fold(f64::MIN, f64::max);
    Ok(PhaseTiming { start_unix_s: start, end_unix_s: end, ops: (dirs.len() * items) as u64 })
}

/// One operation of phase `p` on item `id` in `dir`: the system calls the cluster target's
/// methods stand for (mkdir, stat, rmdir; create+write+close, stat, open+fstat+read+close, unlink).
fn local_item(p: usize, dir: &Path, id: &str, payload: &[u8]) -> Result<()> {
    let d = dir.join(format!("dir.{id}"));
    let f = dir.join(format!("file.{id}"));
    let what = |op: &str, path: &Path| format!("{op} {}", path.display());
    match p {
        0 => std::fs::create_dir(&d).with_context(|| what("mkdir", &d))?,
        1 => {
            std::fs::metadata(&d).with_context(|| what("stat", &d))?;
        }
        2 => std::fs::remove_dir(&d).with_context(|| what("rmdir", &d))?,
        3 => {
            let mut file = std::fs::File::create(&f).with_context(|| what("create", &f))?;
            if !payload.is_empty() {
                file.write_all(payload).with_context(|| what("write", &f))?;
            }
        }
        4 => {
            std::fs::metadata(&f).with_context(|| what("stat", &f))?;
        }
        5 => {
            let mut file = std::fs::File::open(&f).with_context(|| what("open", &f))?;
            let size = file.metadata().with_context(|| what("stat", &f))?.len();
            if !payload.is_empty() {
                let mut got = vec![0u8; payload.len()];
                file.read_exact(&mut got).with_context(|| what("read", &f))?;
            }
            if size != payload.len() as u64 {
                anyhow::bail!("{}: {size} bytes, expected {}", f.display(), payload.len());
            }
        }
        _ => std::fs::remove_file(&f).with_context(|| what("unlink", &f))?,
    }
    Ok(())
}

/// Runs every phase on every iteration.
pub async fn run(target: Arc<dyn Target>, cfg: &MetaConfig, world: Arc<World>) -> Result<MetaReport> {
    if cfg.tasks == 0 || cfg.tasks > TASKS_MAX || cfg.items == 0 || cfg.items > ITEMS_MAX || cfg.iterations == 0 {
        anyhow::bail!("need 1..={TASKS_MAX} tasks, 1..={ITEMS_MAX} items and at least one iteration");
    }
    // timings[iteration][phase] for this rank.
    let mut timings: Vec<Vec<PhaseTiming>> = Vec::new();
    let payload = Bytes::from(vec![0x5au8; cfg.file_bytes]);
    if world.rank == 0 {
        crate::target::claim_dir(&*target, &cfg.dir, &[]).await?;
    }
    for iter in 0..cfg.iterations {
        if world.rank == 0 {
            target.remove_all(&format!("{}/iter{iter}", cfg.dir)).await?;
            target.mkdir_all(&format!("{}/iter{iter}", cfg.dir)).await?;
            if !cfg.unique_dir {
                target.mkdir_all(&format!("{}/iter{iter}/shared", cfg.dir)).await?;
            }
        }
        world.barrier().await?;
        if cfg.unique_dir {
            for t in 0..cfg.tasks {
                target.mkdir_all(&task_dir(cfg, iter, world.rank, t)).await?;
            }
        }
        let mut per_phase = Vec::new();
        for p in cfg.phases() {
            world.barrier().await?;
            if let Some(root) = target.local_root().filter(|_| target.kind() == "dir") {
                let dirs: Vec<PathBuf> =
                    (0..cfg.tasks).map(|t| local_path(&root, &task_dir(cfg, iter, world.rank, t))).collect();
                let (rank, items, payload) = (world.rank, cfg.items, payload.clone());
                let timing = tokio::task::spawn_blocking(move || local_phase(p, &dirs, rank, items, &payload))
                    .await
                    .map_err(|e| anyhow!("metadata phase failed: {e}"))??;
                per_phase.push(timing);
                continue;
            }
            let start = now_s();
            let mut tasks = Vec::new();
            for t in 0..cfg.tasks {
                let (target, dir, payload, rank) =
                    (target.clone(), task_dir(cfg, iter, world.rank, t), payload.clone(), world.rank);
                let items = cfg.items;
                tasks.push(tokio::spawn(async move {
                    for k in 0..items {
                        let d = format!("{dir}/dir.{rank}.{t}.{k}");
                        let f = format!("{dir}/file.{rank}.{t}.{k}");
                        match p {
                            0 => target.mkdir(&d).await?,
                            1 => {
                                target.size_of(&d).await?.ok_or_else(|| anyhow!("{d} vanished"))?;
                            }
                            2 => target.remove_dir(&d).await?,
                            3 => {
                                let mut w = target.create(&f).await?;
                                if !payload.is_empty() {
                                    w.write_at(0, payload.clone()).await?;
                                }
                                w.close().await?;
                            }
                            4 => {
                                target.size_of(&f).await?.ok_or_else(|| anyhow!("{f} vanished"))?;
                            }
                            5 => {
                                let mut r = target.open(&f).await?;
                                if !payload.is_empty() {
                                    let got = r.read_at(0, payload.len()).await?;
                                    if got.len() != payload.len() {
                                        anyhow::bail!("{f}: read {} of {} bytes", got.len(), payload.len());
                                    }
                                }
                            }
                            _ => target.remove_file(&f).await?,
                        }
                    }
                    Ok::<_, anyhow::Error>(())
                }));
            }
            for t in tasks {
                t.await.map_err(|e| anyhow!("metadata task failed: {e}"))??;
            }
            per_phase.push(PhaseTiming {
                start_unix_s: start,
                end_unix_s: now_s(),
                ops: (cfg.tasks * cfg.items) as u64,
            });
        }
        timings.push(per_phase);
    }
    world.barrier().await?;
    if world.rank == 0 {
        target.remove_all(&cfg.dir).await?;
    }
    let all = world.all_gather(&serde_json::to_value(&timings)?).await?;
    let all: Vec<Vec<Vec<PhaseTiming>>> = all
        .into_iter()
        .map(serde_json::from_value)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow!("malformed rank timings: {e}"))?;
    let mut phases = Vec::new();
    for (ran, p) in cfg.phases().enumerate() {
        let name = PHASES[p];
        let rates: Vec<f64> = (0..cfg.iterations)
            .map(|i| {
                let parts: Vec<PhaseTiming> =
                    all.iter().filter_map(|r| r.get(i).and_then(|it| it.get(ran)).copied()).collect();
                merged_rate(&parts)
            })
            .collect();
        phases.push(PhaseResult { phase: name.to_string(), summary: Summary::of(&rates), rates });
    }
    Ok(MetaReport {
        target: target.describe(),
        ranks: world.size,
        tasks_per_rank: cfg.tasks,
        items_per_task: cfg.items,
        iterations: cfg.iterations,
        unique_dir: cfg.unique_dir,
        file_bytes: cfg.file_bytes,
        phases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_merge_over_the_whole_span() {
        let parts = [
            PhaseTiming { start_unix_s: 10.0, end_unix_s: 12.0, ops: 100 },
            PhaseTiming { start_unix_s: 10.5, end_unix_s: 14.0, ops: 100 },
        ];
        assert_eq!(merged_rate(&parts), 50.0);
        assert_eq!(merged_rate(&[]), 0.0);
    }

    #[test]
    fn a_local_task_fails_naming_the_call_and_path() {
        let dir = tempfile::tempdir().expect("tmp");
        let dirs = vec![dir.path().to_path_buf(), dir.path().join("missing")];
        // Phase 4 stats files that were never created; the second task's directory is missing.
        let err = local_phase(4, &dirs, 0, 3, &[]).expect_err("nothing to stat");
        let text = format!("{err:#}");
        assert!(text.starts_with("stat ") && text.contains("file.0."), "{text}");
        let created = local_phase(3, &dirs[..1], 0, 3, b"xyz").expect("create");
        assert_eq!(created.ops, 3);
        assert!(created.end_unix_s >= created.start_unix_s);
        assert_eq!(std::fs::read(dir.path().join("file.0.0.2")).expect("written"), b"xyz");
        local_phase(5, &dirs[..1], 0, 3, b"xyz").expect("read back");
        local_phase(5, &dirs[..1], 0, 3, b"abcd").expect_err("size differs from the payload");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_phase_runs_on_a_directory() {
        let dir = tempfile::tempdir().expect("tmp");
        let target: Arc<dyn Target> = Arc::new(crate::DirTarget::new(dir.path(), false).expect("target"));
        for unique_dir in [true, false] {
            let cfg = MetaConfig {
                tasks: 3,
                items: 20,
                iterations: 2,
                unique_dir,
                file_bytes: 100,
                files_only: false,
                dir: "md".into(),
            };
            let r = run(target.clone(), &cfg, Arc::new(World::single())).await.expect("run");
            assert_eq!(r.phases.len(), PHASES.len());
            let files = run(target.clone(), &MetaConfig { files_only: true, ..cfg }, Arc::new(World::single()))
                .await
                .expect("run");
            let names: Vec<&str> = files.phases.iter().map(|p| p.phase.as_str()).collect();
            assert_eq!(names, ["file create", "file stat", "file read", "file remove"]);
            assert!(files.phases.iter().all(|p| p.summary.min > 0.0), "{:?}", files.phases);
            for p in &r.phases {
                assert_eq!(p.rates.len(), 2);
                assert!(p.summary.min > 0.0, "{}: {:?}", p.phase, p.rates);
            }
        }
        assert!(!dir.path().join("md").exists(), "cleaned up");
    }
}
