//! Multi-client runs: which rank this process is (from `mpirun`'s or `srun`'s environment; the
//! suite has no launcher of its own), a small coordinator for barriers and all-gathers between
//! ranks, the shared results directory through which rank 0 merges every rank's results, and
//! the host facts recorded with every run.
//!
//! The coordinator is rank 0 listening on TCP; the other ranks find its address in the results
//! directory (which every rank must see: the same host, or a shared file system) and connect.
//! Each message is a length-prefixed JSON value; rank 0 answers an all-gather only once every
//! rank has sent its part, which makes every all-gather a barrier too.

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// Largest coordinator message (a rank's results); anything bigger is a bug or a stranger.
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;
/// How long ranks wait for each other to start, and rank 0 for every result file.
pub const JOIN_TIMEOUT_S: u64 = 300;
/// Largest world size accepted from the environment.
pub const WORLD_SIZE_MAX: usize = 65_536;
/// The file in the results directory that names the coordinator's address.
const COORDINATOR_FILE: &str = "coordinator.addr";

/// Rank and size from the launcher's environment: Open MPI, then PMI (MPICH, Intel MPI, Slurm's
/// PMI), then Slurm itself; `(0, 1, "none")` when not launched by any of them.
pub fn rank_from_env(get: impl Fn(&str) -> Option<String>) -> Result<(usize, usize, &'static str)> {
    let pairs = [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"),
        ("PMI_RANK", "PMI_SIZE", "pmi"),
        ("SLURM_PROCID", "SLURM_NTASKS", "slurm"),
    ];
    for (r, s, who) in pairs {
        if let (Some(rank), Some(size)) = (get(r), get(s)) {
            let rank: usize = rank.trim().parse().map_err(|_| anyhow!("{r}={rank:?} is not a rank"))?;
            let size: usize = size.trim().parse().map_err(|_| anyhow!("{s}={size:?} is not a size"))?;
            if size == 0 || size > WORLD_SIZE_MAX || rank >= size {
                bail!("{r}={rank} and {s}={size} are inconsistent");
            }
            return Ok((rank, size, who));
        }
    }
    Ok((0, 1, "none"))
}

enum Links {
    /// Rank 0: one stream per other rank, indexed by rank (index 0 unused).
    Root(Vec<Option<TcpStream>>),
    /// Any other rank: the stream to rank 0.
    Leaf(TcpStream),
}

/// This process's place among the ranks of a run.
pub struct World {
    pub rank: usize,
    pub size: usize,
    pub launcher: &'static str,
    results_dir: Option<PathBuf>,
    links: Option<Mutex<Links>>,
}

impl World {
    /// A single-process world.
    pub fn single() -> World {
        World { rank: 0, size: 1, launcher: "none", results_dir: None, links: None }
    }

    /// Joins the run described by the environment. With more than one rank, `results_dir`
    /// (shared by every rank) is required; `coordinator` overrides the address rank 0 listens
    /// on (default: all interfaces, any port, advertised as this host's name).
    pub async fn join(results_dir: Option<&Path>, coordinator: Option<&str>) -> Result<World> {
        let (rank, size, launcher) = rank_from_env(|k| std::env::var(k).ok())?;
        World::join_as(rank, size, launcher, results_dir, coordinator).await
    }

    /// Joins as an explicit rank of `size` (what `join` does after reading the environment;
    /// tests use it to run several ranks in one process).
    pub async fn join_as(
        rank: usize,
        size: usize,
        launcher: &'static str,
        results_dir: Option<&Path>,
        coordinator: Option<&str>,
    ) -> Result<World> {
        if size == 0 || rank >= size {
            bail!("rank {rank} of {size} is out of range");
        }
        if size == 1 {
            return Ok(World { rank, size, launcher, results_dir: results_dir.map(Path::to_path_buf), links: None });
        }
        let Some(dir) = results_dir else {
            bail!("{size} ranks ({launcher}) need --results-dir, a directory every rank can read and write");
        };
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let addr_file = dir.join(COORDINATOR_FILE);
        let deadline = Instant::now() + Duration::from_secs(JOIN_TIMEOUT_S);
        let links = if rank == 0 {
            let listener =
                TcpListener::bind(coordinator.unwrap_or("0.0.0.0:0")).await.context("coordinator cannot listen")?;
            let port = listener.local_addr()?.port();
            let host = match coordinator {
                Some(c) => c.rsplit_once(':').map(|(h, _)| h.to_string()).unwrap_or_else(|| c.to_string()),
                None => std::env::var("TROVE_BENCH_HOST").ok().unwrap_or_else(hostname),
            };
            let tmp = dir.join(format!("{COORDINATOR_FILE}.tmp"));
            std::fs::write(&tmp, format!("{host}:{port}"))
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            std::fs::rename(&tmp, &addr_file).with_context(|| format!("cannot write {}", addr_file.display()))?;
            let mut peers: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
            let mut joined = 1;
            while joined < size {
                let left = deadline.saturating_duration_since(Instant::now());
                let (mut s, _) = tokio::time::timeout(left, listener.accept())
                    .await
                    .map_err(|_| anyhow!("only {joined} of {size} ranks joined within {JOIN_TIMEOUT_S} s"))??;
                let r = s.read_u32_le().await? as usize;
                if r == 0 || r >= size || peers[r].is_some() {
                    bail!("a peer announced rank {r}, which is out of range or taken");
                }
                s.set_nodelay(true)?;
                peers[r] = Some(s);
                joined += 1;
            }
            Links::Root(peers)
        } else {
            // The address file may be missing or stale (a crashed earlier run): retry until a
            // connection to the current rank 0 succeeds.
            loop {
                if Instant::now() > deadline {
                    bail!(
                        "rank {rank} could not reach rank 0 through {} within {JOIN_TIMEOUT_S} s",
                        addr_file.display()
                    );
                }
                if let Ok(addr) = std::fs::read_to_string(&addr_file) {
                    if let Ok(mut s) = TcpStream::connect(addr.trim()).await {
                        s.set_nodelay(true)?;
                        s.write_u32_le(rank as u32).await?;
                        break Links::Leaf(s);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        Ok(World { rank, size, launcher, results_dir: Some(dir.to_path_buf()), links: Some(Mutex::new(links)) })
    }

    /// Every rank's `value`, in rank order, on every rank. Also a barrier.
    pub async fn all_gather(&self, value: &serde_json::Value) -> Result<Vec<serde_json::Value>> {
        let Some(links) = &self.links else {
            return Ok(vec![value.clone()]);
        };
        let mut links = links.lock().await;
        match &mut *links {
            Links::Root(peers) => {
                let mut all = vec![value.clone()];
                for (r, p) in peers.iter_mut().enumerate().skip(1) {
                    let s = p.as_mut().ok_or_else(|| anyhow!("rank {r} is not connected"))?;
                    all.push(read_msg(s).await.with_context(|| format!("from rank {r}"))?);
                }
                let reply = serde_json::Value::Array(all.clone());
                for (r, p) in peers.iter_mut().enumerate().skip(1) {
                    let s = p.as_mut().ok_or_else(|| anyhow!("rank {r} is not connected"))?;
                    write_msg(s, &reply).await.with_context(|| format!("to rank {r}"))?;
                }
                Ok(all)
            }
            Links::Leaf(s) => {
                write_msg(s, value).await.context("to rank 0")?;
                match read_msg(s).await.context("from rank 0")? {
                    serde_json::Value::Array(all) if all.len() == self.size => Ok(all),
                    other => bail!("rank 0 sent a malformed all-gather: {}", short(&other)),
                }
            }
        }
    }

    /// Waits until every rank arrives.
    pub async fn barrier(&self) -> Result<()> {
        self.all_gather(&serde_json::Value::Null).await.map(|_| ())
    }

    /// Writes this rank's results to the results directory (if any), waits for every rank, and
    /// on rank 0 returns all ranks' results read back from the directory (rank order); other
    /// ranks get `None`. A single process without a results directory gets its own value back.
    pub async fn gather_results(
        &self,
        name: &str,
        value: &serde_json::Value,
    ) -> Result<Option<Vec<serde_json::Value>>> {
        if let Some(dir) = &self.results_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let path = dir.join(format!("{name}-rank-{}.json", self.rank));
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
        }
        self.barrier().await?;
        if self.rank != 0 {
            return Ok(None);
        }
        let Some(dir) = &self.results_dir else {
            return Ok(Some(vec![value.clone()]));
        };
        let mut all = Vec::with_capacity(self.size);
        for r in 0..self.size {
            let path = dir.join(format!("{name}-rank-{r}.json"));
            let deadline = Instant::now() + Duration::from_secs(JOIN_TIMEOUT_S);
            // A shared file system may show the file a little after the barrier.
            let text = loop {
                match std::fs::read(&path) {
                    Ok(t) => break t,
                    Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(e) => bail!("rank {r}'s results {} never appeared: {e}", path.display()),
                }
            };
            all.push(
                serde_json::from_slice(&text)
                    .with_context(|| format!("rank {r}'s results {} are damaged", path.display()))?,
            );
        }
        if self.size > 1 {
            let _ = std::fs::remove_file(dir.join(COORDINATOR_FILE));
        }
        Ok(Some(all))
    }
}

fn short(v: &serde_json::Value) -> String {
    let s = v.to_string();
    s.chars().take(80).collect()
}

async fn write_msg(s: &mut TcpStream, v: &serde_json::Value) -> Result<()> {
    let body = serde_json::to_vec(v)?;
    if body.len() > MESSAGE_BYTES_MAX {
        bail!("coordinator message of {} bytes exceeds {MESSAGE_BYTES_MAX}", body.len());
    }
    s.write_u32_le(body.len() as u32).await?;
    s.write_all(&body).await?;
    Ok(())
}

async fn read_msg(s: &mut TcpStream) -> Result<serde_json::Value> {
    let len = s.read_u32_le().await? as usize;
    if len > MESSAGE_BYTES_MAX {
        bail!("coordinator message of {len} bytes exceeds {MESSAGE_BYTES_MAX}");
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// Facts about the machine a run was measured on, recorded with every result.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub nproc: usize,
    pub kernel: String,
    pub mem_total_bytes: u64,
    pub mem_available_bytes: u64,
    /// 1, 5 and 15 minute load averages when the run started (others share these machines).
    pub loadavg: String,
}

impl HostInfo {
    /// Reads the facts from /proc (missing ones stay empty).
    pub fn collect() -> HostInfo {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |name: &str| -> u64 {
            meminfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .map(|kib| kib * 1024)
                .unwrap_or(0)
        };
        HostInfo {
            hostname: hostname(),
            nproc: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            mem_total_bytes: field("MemTotal:"),
            mem_available_bytes: field("MemAvailable:"),
            loadavg: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn ranks_from_each_launcher() {
        assert_eq!(rank_from_env(env(&[])).expect("none"), (0, 1, "none"));
        assert_eq!(
            rank_from_env(env(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "8")])).expect("ompi"),
            (3, 8, "openmpi")
        );
        assert_eq!(rank_from_env(env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")])).expect("pmi"), (1, 2, "pmi"));
        assert_eq!(
            rank_from_env(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")])).expect("slurm"),
            (0, 4, "slurm")
        );
        // Open MPI wins when several are set (srun inside an mpirun allocation).
        assert_eq!(
            rank_from_env(env(&[
                ("SLURM_PROCID", "5"),
                ("SLURM_NTASKS", "6"),
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "2")
            ]))
            .expect("both"),
            (1, 2, "openmpi")
        );
        assert!(rank_from_env(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "2")])).is_err());
        assert!(rank_from_env(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])).is_err());
    }

    #[test]
    fn host_info_reads_proc() {
        let h = HostInfo::collect();
        assert!(h.nproc >= 1);
        assert!(h.mem_total_bytes > 0);
    }
}
