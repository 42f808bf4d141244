//! Sizing guidance (`trove bench size`): how many storage nodes a GPU cluster needs. Demand is
//! GPUs × the per-GPU read rate of the workload (the Isilon/DGX-1 paper's table for V100s,
//! MLPerf Storage's workloads at their AU threshold); supply is a measured or given per-node
//! throughput; the part of the demand that a cache absorbs is cache size / dataset size (the
//! Isilon paper's model: readers pick shards at random, so the chance a read hits the cache is
//! the fraction of the dataset the cache holds).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// A row of the demand table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Demand {
    pub name: String,
    pub bytes_per_s_per_gpu: f64,
    pub source: String,
}

/// Per-GPU read demand of known workloads.
pub fn demand_table() -> Vec<Demand> {
    let mut rows = vec![
        // Dell EMC Isilon and NVIDIA DGX-1 servers for deep learning (2019), Table 3.
        Demand {
            name: "v100-resnet50-train".into(),
            bytes_per_s_per_gpu: 90e6,
            source: "Isilon/DGX-1 paper, Table 3".into(),
        },
        Demand {
            name: "v100-resnet50-infer".into(),
            bytes_per_s_per_gpu: 160e6,
            source: "Isilon/DGX-1 paper, Table 3".into(),
        },
        Demand {
            name: "v100-inception4-large-train".into(),
            bytes_per_s_per_gpu: 300e6,
            source: "Isilon/DGX-1 paper, Table 3".into(),
        },
    ];
    for w in ["resnet50", "unet3d", "cosmoflow"] {
        for a in ["h100", "a100", "v100"] {
            if let Ok(spec) = crate::train::workload(w, a) {
                rows.push(Demand {
                    name: format!("{a}-{w}"),
                    bytes_per_s_per_gpu: spec.demand_bytes_per_s(),
                    source: format!(
                        "MLPerf Storage: {:.0}% × batch {} × {} B / {} s",
                        spec.au_min * 100.0,
                        spec.batch_size,
                        spec.record_bytes,
                        spec.compute_s
                    ),
                });
            }
        }
    }
    rows
}

/// Looks a workload up in the demand table.
pub fn demand(name: &str) -> Result<Demand> {
    let table = demand_table();
    match table.iter().find(|d| d.name == name) {
        Some(d) => Ok(d.clone()),
        None => bail!(
            "unknown workload {name:?}; known: {}",
            table.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The inputs and the answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sizing {
    pub workload: String,
    pub gpus: usize,
    pub bytes_per_s_per_gpu: f64,
    pub node_bytes_per_s: f64,
    /// Where the per-node figure came from ("given", or the measurement).
    pub node_source: String,
    pub dataset_bytes: Option<u64>,
    pub cache_bytes: Option<u64>,
    /// Fraction of reads served from cache: cache / dataset, at most 1.
    pub cache_hit: f64,
    pub total_bytes_per_s: f64,
    /// What the storage must serve after the cache.
    pub storage_bytes_per_s: f64,
    /// Exact ratio, and rounded up.
    pub nodes_exact: f64,
    pub nodes: u64,
    pub gpus_per_node: f64,
}

/// Cache hit estimate: cache size / dataset size, capped at 1 (0 without a cache).
pub fn cache_hit(cache_bytes: Option<u64>, dataset_bytes: Option<u64>) -> f64 {
    match (cache_bytes, dataset_bytes) {
        (Some(c), Some(d)) if d > 0 => (c as f64 / d as f64).min(1.0),
        _ => 0.0,
    }
}

/// Nodes needed for `gpus` GPUs of `demand` bytes/s each, given `node_bytes_per_s` per node.
pub fn size(
    demand: &Demand,
    gpus: usize,
    node_bytes_per_s: f64,
    node_source: &str,
    dataset_bytes: Option<u64>,
    cache_bytes: Option<u64>,
) -> Result<Sizing> {
    if node_bytes_per_s <= 0.0 {
        bail!("per-node throughput must be positive");
    }
    let hit = cache_hit(cache_bytes, dataset_bytes);
    let total = gpus as f64 * demand.bytes_per_s_per_gpu;
    let storage = total * (1.0 - hit);
    let exact = storage / node_bytes_per_s;
    Ok(Sizing {
        workload: demand.name.clone(),
        gpus,
        bytes_per_s_per_gpu: demand.bytes_per_s_per_gpu,
        node_bytes_per_s,
        node_source: node_source.to_string(),
        dataset_bytes,
        cache_bytes,
        cache_hit: hit,
        total_bytes_per_s: total,
        storage_bytes_per_s: storage,
        nodes_exact: exact,
        // Round up, with a little slack for float noise (2.4000000001 nodes is 3, 3.0 is 3).
        nodes: (exact - 1e-9).ceil().max(if storage > 0.0 { 1.0 } else { 0.0 }) as u64,
        gpus_per_node: node_bytes_per_s / demand.bytes_per_s_per_gpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_isilon_papers_example() {
        // "training of ResNet-50 with small images and 72 GPUs would need ... 72 * 80 = 5760
        // MB/sec which can be handled by 2.4 Isilon nodes" (2,400 MB/s per F800 node).
        let d = Demand { name: "x".into(), bytes_per_s_per_gpu: 80e6, source: String::new() };
        let s = size(&d, 72, 2400e6, "given", None, None).expect("size");
        assert!((s.total_bytes_per_s - 5760e6).abs() < 1.0);
        assert!((s.nodes_exact - 2.4).abs() < 1e-9);
        assert_eq!(s.nodes, 3);
        assert!((s.gpus_per_node - 30.0).abs() < 1e-9);
        // Exactly three nodes' worth needs three nodes, not four.
        assert_eq!(size(&d, 90, 2400e6, "given", None, None).expect("size").nodes, 3);
        assert_eq!(size(&d, 0, 2400e6, "given", None, None).expect("size").nodes, 0);
        assert!(size(&d, 1, 0.0, "given", None, None).is_err());
    }

    #[test]
    fn cache_absorbs_its_share() {
        // The paper: 22.2 TB dataset, 2 TB of cluster cache -> 9% hit rate.
        assert!((cache_hit(Some(2_000), Some(22_200)) - 0.09).abs() < 0.001);
        assert_eq!(cache_hit(Some(5), Some(1)), 1.0);
        assert_eq!(cache_hit(None, Some(1)), 0.0);
        let d = demand("v100-resnet50-train").expect("row");
        let s = size(&d, 100, 1e9, "given", Some(1000), Some(250)).expect("size");
        assert!((s.storage_bytes_per_s - 100.0 * 90e6 * 0.75).abs() < 1.0);
    }

    #[test]
    fn table_has_the_papers_and_mlperfs_rows() {
        assert_eq!(demand("v100-resnet50-infer").expect("row").bytes_per_s_per_gpu, 160e6);
        let h = demand("h100-resnet50").expect("row");
        assert!((h.bytes_per_s_per_gpu / 1e9 - 0.18).abs() < 0.01);
        assert!(demand("tpu-bert").is_err());
    }
}
