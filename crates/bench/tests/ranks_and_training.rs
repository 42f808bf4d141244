//! Multi-rank coordination (all-gather, barrier, results merged through the results directory)
//! with several ranks in one process, and a whole training sweep through the library on a
//! local directory.

use bench::target::Target;
use bench::world::World;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_gather_through_the_coordinator_and_results_dir() {
    let dir = tempfile::tempdir().expect("tmp");
    let size = 3;
    let mut tasks = Vec::new();
    for rank in 0..size {
        let d = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let w = World::join_as(rank, size, "test", Some(&d), Some("127.0.0.1:0")).await.expect("join");
            let all = w.all_gather(&serde_json::json!(rank * 10)).await.expect("gather");
            assert_eq!(all, vec![serde_json::json!(0), serde_json::json!(10), serde_json::json!(20)]);
            w.barrier().await.expect("barrier");
            let merged = w.gather_results("t", &serde_json::json!({ "rank": rank })).await.expect("results");
            (rank, merged)
        }));
    }
    for t in tasks {
        let (rank, merged) = t.await.expect("task");
        if rank == 0 {
            let all = merged.expect("rank 0 merges");
            assert_eq!(all.len(), size);
            for (r, v) in all.iter().enumerate() {
                assert_eq!(v["rank"], r);
            }
        } else {
            assert!(merged.is_none());
        }
    }
    assert!(dir.path().join("t-rank-2.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cosmoflow_sweep_on_a_directory() {
    let dir = tempfile::tempdir().expect("tmp");
    let target: Arc<dyn Target> = Arc::new(bench::DirTarget::new(dir.path(), false).expect("target"));
    // Small samples keep the test fast; the emulation is the same.
    let cfg = cosmoflow("data", 40, 200_000, 10_000, 1);
    let world = Arc::new(World::single());
    let r = bench::train::train(target.clone(), &cfg, 1, Some(4), world.clone(), false).await.expect("train");
    assert!(r.generated);
    assert!(!r.runs.is_empty());
    let best = r.sweep_best.expect("a local directory feeds at least one emulated accelerator");
    assert!((1..=4).contains(&best));
    for run in &r.runs {
        assert!(run.au > 0.0 && run.au <= 1.0 + 1e-9, "AU {}", run.au);
        assert_eq!(run.epochs.len(), 2);
        assert_eq!(run.steps_per_epoch, 40 / run.accelerators as u64);
        assert!(run.overall_samples_per_s > 0.0);
    }
    // A second run finds the dataset and does not regenerate it.
    let again = bench::train::train(target, &cfg, 2, None, world, false).await.expect("train");
    assert!(!again.generated);
    assert_eq!(again.runs[0].accelerators, 2);
}

/// `--existing`: a dataset made elsewhere (here: shards another run generated, renamed and
/// moved) is trained on in place, and left exactly as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_on_an_existing_dataset_leaves_it_as_it_was() {
    let dir = tempfile::tempdir().expect("tmp");
    let target: Arc<dyn Target> = Arc::new(bench::DirTarget::new(dir.path(), false).expect("target"));
    let mut cfg = cosmoflow("gen", 12, 50_000, 0, 3);
    let world = Arc::new(World::single());
    bench::train::ensure_dataset(target.clone(), &cfg, &world, false).await.expect("generate");
    // The user's own set: shard files with their own names, no manifest.
    std::fs::create_dir(dir.path().join("mine")).expect("mkdir");
    for (i, e) in std::fs::read_dir(dir.path().join("gen/train")).expect("list").enumerate() {
        let e = e.expect("entry");
        std::fs::rename(e.path(), dir.path().join(format!("mine/part-{i:03}.tfrecord"))).expect("move");
    }
    std::fs::write(dir.path().join("mine/README"), b"not data").expect("write");
    let before = contents(&dir.path().join("mine"));
    cfg.data_dir = "mine".into();
    cfg.files = None;
    cfg.existing = true;
    let r = bench::train::train(target.clone(), &cfg, 2, None, world.clone(), false).await.expect("train");
    assert!(!r.generated);
    let ds = r.dataset.as_ref().expect("dataset");
    assert_eq!((ds.files, ds.samples_per_file, ds.names.len()), (12, 1, 12));
    let run = &r.runs[0];
    assert_eq!(run.steps_per_epoch, 6, "12 one-sample files over 2 accelerators of batch 1");
    assert_eq!(run.epochs.len(), 2);
    assert!(run.au > 0.0 && run.au <= 1.0 + 1e-9, "AU {}", run.au);
    let after = contents(&dir.path().join("mine"));
    assert!(before == after, "the existing dataset is unchanged (no manifest, nothing removed)");
}

/// Every file of `dir` with its bytes, by name.
fn contents(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| {
            let e = e.expect("entry");
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("read"))
        })
        .collect();
    files.sort();
    files
}

/// CosmoFlow on H100 over `files` files of `record_bytes` (give or take `stdev_bytes`) in
/// `data_dir`, 2 epochs, 2 readers; generated unless `existing` is set after.
fn cosmoflow(data_dir: &str, files: u64, record_bytes: u64, stdev_bytes: u64, seed: u64) -> bench::train::TrainConfig {
    let mut spec = bench::train::workload("cosmoflow", "h100").expect("spec");
    spec.record_bytes = record_bytes;
    spec.record_stdev_bytes = stdev_bytes;
    bench::train::TrainConfig {
        spec,
        data_dir: data_dir.into(),
        files: Some(files),
        dataset_bytes: None,
        epochs: 2,
        read_threads: 2,
        prefetch_batches: 2,
        transfer_bytes: 1 << 20,
        inference: false,
        seed,
        gen_jobs: 2,
        regenerate: false,
        existing: false,
        min_steps: 5,
        drop_caches: false,
    }
}
