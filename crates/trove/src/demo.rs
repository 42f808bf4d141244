//! `trove demo`: the whole system at work on one machine, on the embedded metadata engine.
//!
//! It starts a 6-node 4+2 cluster of real processes, writes a synthetic dataset of mixed file
//! sizes, reads it back verifying every byte, then kills one and then two storage nodes
//! (SIGKILL) and reads everything again, reporting each phase's throughput next to the local
//! file system's for the same bytes. It exits 0 only if every byte matched in every phase.

use crate::cluster::{self, EngineKind, StartArgs};
use crate::data;
use anyhow::{bail, Context, Result};
use clap::Args;
use client::Client;
use futures::stream::{self, StreamExt};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct DemoArgs {
    /// Print the summary as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// Dataset size in MiB (at least this much is written).
    #[arg(long, default_value_t = 2048)]
    pub size_mib: u64,
    /// Directory for the cluster and the local comparison copy (default: a new temporary
    /// directory, removed at the end).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seed of the synthetic content.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Files written or read at once.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
}

/// Bytes per read or write call.
const IO_BYTES: usize = 4 << 20;

/// One file of the dataset.
#[derive(Clone)]
struct FileSpec {
    id: u64,
    path: String,
    size: u64,
}

/// Mixed sizes like a training set: empty and tiny files, small records, the edge sizes
/// around chunk boundaries, and large shards; at least `target` bytes in all.
fn dataset(target: u64) -> Vec<FileSpec> {
    let mut sizes: Vec<u64> = Vec::new();
    sizes.extend([0, 0, 1, 1, 4095, 4095, 4096, 4097]);
    let mut x = 0x1234_5678_u64;
    for _ in 0..1000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        sizes.push((x >> 33) % (128 << 10));
    }
    let mib = 1u64 << 20;
    for _ in 0..(target / 4 / mib) {
        sizes.push(mib);
    }
    for _ in 0..(target / 4 / (4 * mib + 1)) {
        sizes.push(4 * mib + 1);
    }
    while sizes.iter().sum::<u64>() < target {
        sizes.push(64 * mib);
    }
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, size)| FileSpec { id: i as u64, path: format!("/demo/d{:02}/f{:05}", i % 16, i), size })
        .collect()
}

/// The result of one phase.
#[derive(Clone, Debug, serde::Serialize)]
struct Phase {
    name: String,
    nodes_down: usize,
    bytes: u64,
    seconds: f64,
    mib_s: f64,
    files_verified: u64,
    errors: Vec<String>,
}

fn phase(name: &str, nodes_down: usize, bytes: u64, started: Instant, verified: u64, errors: Vec<String>) -> Phase {
    let seconds = started.elapsed().as_secs_f64();
    Phase {
        name: name.into(),
        nodes_down,
        bytes,
        seconds,
        mib_s: bytes as f64 / (1 << 20) as f64 / seconds.max(1e-9),
        files_verified: verified,
        errors,
    }
}

/// Drops the page cache so reads come from disk; returns false when not permitted.
fn drop_caches() -> bool {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let temp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("trove-demo-")
                .tempdir()
                .context("cannot create a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let say = |s: String| {
        if !args.json {
            println!("{s}");
        } else {
            eprintln!("{s}");
        }
    };
    let files = dataset(args.size_mib << 20);
    let bytes_total: u64 = files.iter().map(|f| f.size).sum();
    say(format!(
        "Trove demo: {} files, {:.2} GiB, on a 6-node 4+2 cluster in {}",
        files.len(),
        bytes_total as f64 / (1u64 << 30) as f64,
        dir.display()
    ));

    // The local file system, for the same bytes.
    let local_dir = dir.join("local-copy");
    std::fs::create_dir_all(&local_dir)?;
    let t = Instant::now();
    let bar = crate::cmds::progress(bytes_total, "local write");
    let errs = local_write(&local_dir, &files, args.seed, args.parallel, &bar).await;
    bar.finish_and_clear();
    let local_write = phase("local write", 0, bytes_total, t, 0, errs);
    let dropped = drop_caches();
    let t = Instant::now();
    let bar = crate::cmds::progress(bytes_total, "local read");
    let (ok, errs) = local_read(&local_dir, &files, args.seed, args.parallel, &bar).await;
    bar.finish_and_clear();
    let local_read = phase("local read", 0, bytes_total, t, ok, errs);
    std::fs::remove_dir_all(&local_dir).ok();

    let cluster_dir = dir.join("cluster");
    let start = StartArgs {
        dir: cluster_dir.clone(),
        nodes: Some(6),
        pools: Vec::new(),
        ec: wire::EcScheme::DEFAULT,
        chunk_bytes: wire::CHUNK_BYTES_DEFAULT,
        engine: EngineKind::Redb,
        postgres_url: None,
        down_after_ms: None,
        rebuild_after_ms: None,
        gc_grace_ms: None,
        scrub_interval_ms: None,
        tier_schedule: None,
        tier_bytes_per_s: None,
        trash_days: None,
        ingest_interval_ms: None,
        reserve_bytes: 0,
        plaintext: false,
        encrypt: false,
        no_metrics: true,
    };
    let mut started = cluster::start(&start, args.json).await.context("cannot start the demo cluster")?;
    say(format!("cluster up: metadata at {}, 6 storage nodes", started.state.meta.addr));
    let result = async {
        let client = Client::connect(&started.state.meta.addr).await?;
        let mut phases = vec![local_write.clone(), local_read.clone()];

        let t = Instant::now();
        let bar = crate::cmds::progress(bytes_total, "trove write");
        let errs = trove_write(&client, &files, args.seed, args.parallel, &bar).await;
        bar.finish_and_clear();
        phases.push(phase("trove write", 0, bytes_total, t, 0, errs));

        for (down, name) in
            [(0usize, "trove read"), (1, "trove read, 1 node killed"), (2, "trove read, 2 nodes killed")]
        {
            if down > 0 {
                cluster::kill_node(&started.state, down)?;
                say(format!("killed storage node {down} (SIGKILL)"));
            }
            drop_caches();
            // A fresh client, so nothing is served from the previous phase's memory.
            let client = Client::connect(&started.state.meta.addr).await?;
            let t = Instant::now();
            let bar = crate::cmds::progress(bytes_total, name);
            let (ok, errs) = trove_read(&client, &files, args.seed, args.parallel, &bar).await;
            bar.finish_and_clear();
            phases.push(phase(name, down, bytes_total, t, ok, errs));
        }
        Ok::<_, anyhow::Error>(phases)
    }
    .await;
    cluster::stop(&started.state);
    for c in &mut started.children {
        let _ = c.wait();
    }
    let phases = result?;
    if args.dir.is_none() {
        std::fs::remove_dir_all(&cluster_dir).ok();
    }

    let get = |name: &str| phases.iter().find(|p| p.name == name).cloned();
    let write = get("trove write").expect("phase ran");
    let read = get("trove read").expect("phase ran");
    let read1 = get("trove read, 1 node killed").expect("phase ran");
    let read2 = get("trove read, 2 nodes killed").expect("phase ran");
    let read_phases = [&read, &read1, &read2];
    let files_verified = read_phases.iter().map(|p| p.files_verified).min().unwrap_or(0);
    let all_ok = phases.iter().all(|p| p.errors.is_empty()) && files_verified == files.len() as u64;

    if args.json {
        let v = serde_json::json!({
            "ok": all_ok,
            "files_total": files.len(),
            "files_verified": files_verified,
            "bytes_total": bytes_total,
            "nodes": 6,
            "ec": "4+2",
            "nodes_killed_max": 2,
            "write_mib_s": write.mib_s,
            "read_mib_s": read.mib_s,
            "read_degraded_mib_s": read1.mib_s,
            "read_degraded2_mib_s": read2.mib_s,
            "local_write_mib_s": local_write.mib_s,
            "local_read_mib_s": local_read.mib_s,
            "caches_dropped": dropped,
            "phases": phases,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!();
        println!("{:<30} {:>10} {:>10} {:>12} {:>10}", "phase", "GiB", "seconds", "MiB/s", "verified");
        for p in &phases {
            let verified = if p.name.contains("write") {
                "-".to_string()
            } else {
                format!("{}/{}", p.files_verified, files.len())
            };
            println!(
                "{:<30} {:>10.2} {:>10.2} {:>12.0} {:>10}",
                p.name,
                p.bytes as f64 / (1u64 << 30) as f64,
                p.seconds,
                p.mib_s,
                verified
            );
        }
        println!();
        println!(
            "page cache {} before each read phase",
            if dropped { "dropped" } else { "NOT dropped (not permitted): reads may be served from memory" }
        );
        println!("trove read / local read: {:.0}%", 100.0 * read.mib_s / local_read.mib_s.max(1e-9));
    }
    for p in &phases {
        for e in p.errors.iter().take(5) {
            eprintln!("{}: {e}", p.name);
        }
    }
    if !all_ok {
        bail!("demo failed: not every file was written and verified in every phase");
    }
    if !args.json {
        println!("demo passed: every byte of every file verified with 0, 1 and 2 nodes killed");
    }
    Ok(())
}

async fn local_write(dir: &Path, files: &[FileSpec], seed: u64, parallel: usize, bar: &ProgressBar) -> Vec<String> {
    let errors = stream::iter(files.iter().cloned())
        .map(|f| {
            let path = dir.join(f.path.trim_start_matches('/'));
            let bar = bar.clone();
            tokio::task::spawn_blocking(move || -> Result<(), String> {
                use std::io::Write;
                if let Some(p) = path.parent() {
                    std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
                }
                let mut out = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let mut buf = vec![0u8; IO_BYTES];
                let mut off = 0u64;
                while off < f.size {
                    let n = (f.size - off).min(IO_BYTES as u64) as usize;
                    data::fill(seed, f.id, off, &mut buf[..n]);
                    out.write_all(&buf[..n]).map_err(|e| format!("{}: {e}", path.display()))?;
                    off += n as u64;
                    bar.inc(n as u64);
                }
                out.sync_all().map_err(|e| format!("{}: {e}", path.display()))
            })
        })
        .buffer_unordered(parallel)
        .filter_map(|r| async move {
            match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(e) => Some(e.to_string()),
            }
        })
        .collect::<Vec<_>>()
        .await;
    errors
}

async fn local_read(
    dir: &Path,
    files: &[FileSpec],
    seed: u64,
    parallel: usize,
    bar: &ProgressBar,
) -> (u64, Vec<String>) {
    let verified = Arc::new(AtomicU64::new(0));
    let errors = stream::iter(files.iter().cloned())
        .map(|f| {
            let path = dir.join(f.path.trim_start_matches('/'));
            let bar = bar.clone();
            let verified = verified.clone();
            tokio::task::spawn_blocking(move || -> Result<(), String> {
                use std::io::Read;
                let mut file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let mut buf = vec![0u8; IO_BYTES];
                let mut scratch = Vec::new();
                let mut off = 0u64;
                loop {
                    let n = file.read(&mut buf).map_err(|e| format!("{}: {e}", path.display()))?;
                    if n == 0 {
                        break;
                    }
                    if let Some(at) = data::first_mismatch(seed, f.id, off, &buf[..n], &mut scratch) {
                        return Err(format!("{}: wrong byte at offset {at}", path.display()));
                    }
                    off += n as u64;
                    bar.inc(n as u64);
                }
                if off != f.size {
                    return Err(format!("{}: {off} bytes, expected {}", path.display(), f.size));
                }
                verified.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
        })
        .buffer_unordered(parallel)
        .filter_map(|r| async move {
            match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(e) => Some(e.to_string()),
            }
        })
        .collect::<Vec<_>>()
        .await;
    (verified.load(Ordering::Relaxed), errors)
}

async fn trove_write(
    client: &Client,
    files: &[FileSpec],
    seed: u64,
    parallel: usize,
    bar: &ProgressBar,
) -> Vec<String> {
    let mut dirs: Vec<String> =
        files.iter().map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default()).collect();
    dirs.sort();
    dirs.dedup();
    for d in &dirs {
        if let Err(e) = client.mkdir_p(d).await {
            return vec![format!("mkdir {d}: {e}")];
        }
    }
    stream::iter(files.iter().cloned())
        .map(|f| {
            let client = client.clone();
            let bar = bar.clone();
            tokio::spawn(async move {
                let mut h = client.create_path(&f.path, 0o644).await.map_err(|e| format!("{}: {e}", f.path))?;
                let mut buf = vec![0u8; IO_BYTES];
                let mut off = 0u64;
                while off < f.size {
                    let n = (f.size - off).min(IO_BYTES as u64) as usize;
                    data::fill(seed, f.id, off, &mut buf[..n]);
                    h.write_at(off, &buf[..n]).await.map_err(|e| format!("{}: {e}", f.path))?;
                    off += n as u64;
                    bar.inc(n as u64);
                }
                h.close().await.map_err(|e| format!("{}: {e}", f.path))
            })
        })
        .buffer_unordered(parallel)
        .filter_map(|r| async move {
            match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(e) => Some(e.to_string()),
            }
        })
        .collect::<Vec<_>>()
        .await
}

async fn trove_read(
    client: &Client,
    files: &[FileSpec],
    seed: u64,
    parallel: usize,
    bar: &ProgressBar,
) -> (u64, Vec<String>) {
    let verified = Arc::new(AtomicU64::new(0));
    let errors = stream::iter(files.iter().cloned())
        .map(|f| {
            let client = client.clone();
            let bar = bar.clone();
            let verified = verified.clone();
            tokio::spawn(async move {
                let mut h = client.open_path(&f.path).await.map_err(|e| format!("{}: {e}", f.path))?;
                if h.size() != f.size {
                    return Err(format!("{}: size {} expected {}", f.path, h.size(), f.size));
                }
                let mut scratch = Vec::new();
                let mut off = 0u64;
                while off < f.size {
                    let got = h.read_at(off, IO_BYTES).await.map_err(|e| format!("{}: {e}", f.path))?;
                    if got.is_empty() {
                        return Err(format!("{}: short read at {off}", f.path));
                    }
                    if let Some(at) = data::first_mismatch(seed, f.id, off, &got, &mut scratch) {
                        return Err(format!("{}: wrong byte at offset {at}", f.path));
                    }
                    off += got.len() as u64;
                    bar.inc(got.len() as u64);
                }
                verified.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
        })
        .buffer_unordered(parallel)
        .filter_map(|r| async move {
            match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(e) => Some(e.to_string()),
            }
        })
        .collect::<Vec<_>>()
        .await;
    (verified.load(Ordering::Relaxed), errors)
}
