//! Trove's validation suite: the benchmarks that storage vendors' reference architectures use
//! to prove a system can feed GPUs, shipped so any user can run them against a Trove cluster or
//! against any mounted directory (their NFS, Lustre, local NVMe) and compare.
//!
//! - [`io`]: fio-like bandwidth, IOPS and latency, and the `tf-like` preset (per GPU: 30 files,
//!   1 MiB sequential reads at 83 IOPS) that reports how many GPUs the storage serves;
//! - [`meta`]: mdtest-like create/stat/read/remove of files and directories;
//! - [`train`]: MLPerf-Storage-style accelerator emulation (ResNet-50, UNet3D, CosmoFlow) over
//!   data generated in the real formats ([`tfrecord`], [`npz`]), the accelerator sweep, and the
//!   checkpoint workload;
//! - [`scan`]: storage-only TFRecord reads scaled over readers until throughput tops out;
//! - [`size`]: sizing guidance from per-GPU demand and per-node throughput;
//! - [`space`]: what a run's data needs on each target and file system, checked before it is
//!   generated, and which targets share storage (and so one dataset).
//!
//! Every benchmark runs over a [`target::Target`]: a Trove cluster through the native client or
//! a plain directory. Multi-client runs are launched by `mpirun`/`srun` ([`world`]).
//!
//! Errors are `anyhow` errors: this crate is the body of a command-line tool and its errors are
//! only ever shown to a person, never matched on by a caller.
//!
//! Architecture invariant: the suite depends on the client library only, never on a service
//! crate, so it measures what every front end sees.

pub mod io;
pub mod meta;
pub mod npz;
pub mod report;
pub mod scan;
pub mod size;
pub mod space;
pub mod stats;
pub mod sweep;
pub mod target;
pub mod tfrecord;
pub mod train;
pub mod world;

pub use target::{DirTarget, Target, TroveTarget};

/// Parses a byte count with an optional binary suffix: `4096`, `4k`, `1M`, `1MiB`, `2G`, `1.5G`.
pub fn parse_bytes(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        Some('t') => (&body[..body.len() - 1], 1 << 40),
        _ => (body, 1),
    };
    let v: f64 = num.trim().parse().map_err(|_| anyhow::anyhow!("{s:?} is not a size (e.g. 4k, 1M, 2G)"))?;
    if !(v >= 0.0 && v.is_finite()) {
        anyhow::bail!("{s:?} is not a size");
    }
    Ok((v * mult as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse() {
        assert_eq!(super::parse_bytes("4096").expect("n"), 4096);
        assert_eq!(super::parse_bytes("4k").expect("n"), 4096);
        assert_eq!(super::parse_bytes("1MiB").expect("n"), 1 << 20);
        assert_eq!(super::parse_bytes("1.5G").expect("n"), 3 << 29);
        assert!(super::parse_bytes("lots").is_err());
        assert!(super::parse_bytes("-1k").is_err());
    }
}
