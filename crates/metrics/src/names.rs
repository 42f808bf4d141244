//! The names Trove's metrics are published under, with their help texts and labels: the one
//! place they are spelled. They are a stable interface (dashboards, alert rules and `trove
//! stats` depend on them): a name or label once published is not renamed or given another
//! meaning; new ones are added. `docs/metrics.md` lists them for people, and a test checks it
//! names every one.
//!
//! Counters are spelled without `_total` here: the text format adds it.

/// Operations served, per protocol and operation (`protocol`, `op`).
pub const OPS: &str = "trove_ops";
/// Operations that failed (answered with an error), per protocol and operation.
pub const OP_ERRORS: &str = "trove_op_errors";
/// How long operations took (`protocol`, `op`): from receipt to answer (S3: to the response
/// head).
pub const OP_DURATION: &str = "trove_op_duration_seconds";
/// Data bytes clients read and wrote through a protocol (`protocol`, `direction` = read|write).
pub const BYTES: &str = "trove_bytes";
/// Bytes this process received and sent on the network (`direction` = in|out): Trove's RPC
/// transport, the S3 gateway's request and response bodies, the NFS gateway's connections.
pub const NET_BYTES: &str = "trove_net_bytes";
/// Total time spent in a stage of the read path (`stage`), and how often it was passed.
pub const STAGE_SECONDS: &str = "trove_stage_seconds";
pub const STAGE_PASSES: &str = "trove_stage_passes";
/// Who the process is (`role`, `id`, `cluster`, `version`); always 1.
pub const PROCESS_INFO: &str = "trove_process_info";
/// The process's CPU time (user and system), resident memory, open descriptors, threads,
/// and start time: the names every Prometheus client library uses.
pub const PROCESS_CPU: &str = "process_cpu_seconds";
pub const PROCESS_RSS: &str = "process_resident_memory_bytes";
pub const PROCESS_VSZ: &str = "process_virtual_memory_bytes";
pub const PROCESS_FDS: &str = "process_open_fds";
pub const PROCESS_THREADS: &str = "process_threads";
pub const PROCESS_START: &str = "process_start_time_seconds";
/// Bytes the process made the block layer read and write (`direction` = read|write; from
/// `/proc/self/io`: what reached the disks, not what the page cache answered).
pub const PROCESS_DISK_BYTES: &str = "trove_process_disk_bytes";
/// The host's CPU time by mode (`mode` = user|nice|system|idle|iowait|irq|softirq|steal), its
/// CPU count, memory (`kind` = total|available), 1-minute load, network bytes per device
/// (`device`, `direction` = in|out) and disk bytes per block device (`device`, `direction` =
/// read|write).
pub const HOST_CPU: &str = "trove_host_cpu_seconds";
pub const HOST_CPUS: &str = "trove_host_cpus";
pub const HOST_MEMORY: &str = "trove_host_memory_bytes";
pub const HOST_LOAD1: &str = "trove_host_load1";
pub const HOST_NET_BYTES: &str = "trove_host_network_bytes";
pub const HOST_DISK_BYTES: &str = "trove_host_disk_bytes";
/// A storage node's drives: bytes (`drive`, `kind` = total|free), shards held (`drive`),
/// and whether the drive reports an error (`drive`; 1 when it does).
pub const DRIVE_BYTES: &str = "trove_drive_bytes";
pub const DRIVE_SHARDS: &str = "trove_drive_shards";
pub const DRIVE_ERROR: &str = "trove_drive_error";
/// Transactions the metadata engine committed, by outcome (`result` = ok|conflict|too_old|
/// maybe_committed|unavailable|error), and how long commits took.
pub const KV_COMMITS: &str = "trove_kv_commits";
pub const KV_COMMIT_DURATION: &str = "trove_kv_commit_duration_seconds";
/// Whether this metadata server holds the cluster manager's lease (1) or not (0).
pub const META_LEADER: &str = "trove_meta_leader";
/// Processes that announced their exporters to this metadata server lately.
pub const META_PROCESSES: &str = "trove_meta_processes";
/// Cluster figures, published by the lease holder only: storage nodes by state (`state` =
/// up|down|draining|out), capacity (`kind` = total|free|pending_delete, in bytes after erasure
/// coding's raw space), files, chunks by state (`state` = all|degraded|unavailable|misplaced|
/// narrow; all but `all` from a walk over every chunk every minute), the placement map version.
pub const CLUSTER_NODES: &str = "trove_cluster_nodes";
pub const CLUSTER_CAPACITY: &str = "trove_cluster_capacity_bytes";
pub const CLUSTER_FILES: &str = "trove_cluster_files";
pub const CLUSTER_CHUNKS: &str = "trove_cluster_chunks";
pub const CLUSTER_MAP_VERSION: &str = "trove_cluster_map_version";
/// Events recorded, by kind and severity (`kind`, `severity` = info|warning|critical).
pub const EVENTS: &str = "trove_events";
/// Background jobs (`job` = mover: rebuild, drain, rebalance, repair and scrub passes):
/// whether one runs now, passes finished, chunks handled by result (`result` = moved|
/// relabelled|recoded|failed), bytes written, damaged or missing shards rewritten, and what
/// the last pass saw and left.
pub const JOB_RUNNING: &str = "trove_job_running";
pub const JOB_PASSES: &str = "trove_job_passes";
pub const JOB_CHUNKS: &str = "trove_job_chunks";
pub const JOB_BYTES: &str = "trove_job_bytes";
pub const JOB_SHARDS_REPAIRED: &str = "trove_job_shards_repaired";
pub const JOB_CHUNKS_SEEN: &str = "trove_job_chunks_seen";
pub const JOB_CHUNKS_LEFT: &str = "trove_job_chunks_left";
pub const JOB_PASS_SECONDS: &str = "trove_job_last_pass_seconds";
/// Chunk records read by walks over all of them (`walk` = chunks: the repair job's full passes
/// and the chunk health counts of status and the watch; held: the chunks only snapshots hold),
/// so that a walk on an idle cluster shows.
pub const META_CHUNK_RECORDS_WALKED: &str = "trove_meta_chunk_records_walked";
/// Cache lookups by cache and outcome (`cache`, `result` = hit|miss): the client's chunk cache
/// (`client.chunks`), the mount's directory attributes (`mount.dir_attrs`), listings fetched
/// ahead of lookups (`mount.statahead`), opens answered by their path walk's lookup
/// (`mount.open_handoff`) and the open cache (`mount.open`, the opens the hand-off left).
pub const CACHE: &str = "trove_cache_requests";

/// Every name with its type and labels, for the documentation test and `trove stats --help`.
pub const ALL: &[(&str, &str, &str)] = &[
    (OPS, "counter", "protocol, op"),
    (OP_ERRORS, "counter", "protocol, op"),
    (OP_DURATION, "histogram", "protocol, op"),
    (BYTES, "counter", "protocol, direction"),
    (NET_BYTES, "counter", "direction"),
    (STAGE_SECONDS, "counter", "stage"),
    (STAGE_PASSES, "counter", "stage"),
    (PROCESS_INFO, "gauge", "role, id, cluster, version"),
    (PROCESS_CPU, "counter", ""),
    (PROCESS_RSS, "gauge", ""),
    (PROCESS_VSZ, "gauge", ""),
    (PROCESS_FDS, "gauge", ""),
    (PROCESS_THREADS, "gauge", ""),
    (PROCESS_START, "gauge", ""),
    (PROCESS_DISK_BYTES, "counter", "direction"),
    (HOST_CPU, "counter", "mode"),
    (HOST_CPUS, "gauge", ""),
    (HOST_MEMORY, "gauge", "kind"),
    (HOST_LOAD1, "gauge", ""),
    (HOST_NET_BYTES, "counter", "device, direction"),
    (HOST_DISK_BYTES, "counter", "device, direction"),
    (DRIVE_BYTES, "gauge", "drive, kind"),
    (DRIVE_SHARDS, "gauge", "drive"),
    (DRIVE_ERROR, "gauge", "drive"),
    (KV_COMMITS, "counter", "result"),
    (KV_COMMIT_DURATION, "histogram", ""),
    (META_LEADER, "gauge", ""),
    (META_PROCESSES, "gauge", ""),
    (CLUSTER_NODES, "gauge", "state"),
    (CLUSTER_CAPACITY, "gauge", "kind"),
    (CLUSTER_FILES, "gauge", ""),
    (CLUSTER_CHUNKS, "gauge", "state"),
    (CLUSTER_MAP_VERSION, "gauge", ""),
    (EVENTS, "counter", "kind, severity"),
    (JOB_RUNNING, "gauge", "job"),
    (JOB_PASSES, "counter", "job"),
    (JOB_CHUNKS, "counter", "job, result"),
    (JOB_BYTES, "counter", "job"),
    (JOB_SHARDS_REPAIRED, "counter", "job"),
    (JOB_CHUNKS_SEEN, "gauge", "job"),
    (JOB_CHUNKS_LEFT, "gauge", "job"),
    (JOB_PASS_SECONDS, "gauge", "job"),
    (META_CHUNK_RECORDS_WALKED, "counter", "walk"),
    (CACHE, "counter", "cache, result"),
];

/// The help text published with a name.
pub fn help(name: &str) -> &'static str {
    match name {
        OPS => "Operations served, per protocol and operation.",
        OP_ERRORS => "Operations answered with an error, per protocol and operation.",
        OP_DURATION => "How long operations took, from receipt to answer.",
        BYTES => "Data bytes clients read (direction=read) and wrote (direction=write) through a protocol.",
        NET_BYTES => "Bytes this process received (in) and sent (out) on the network.",
        STAGE_SECONDS => "Time spent in a stage of the read path.",
        STAGE_PASSES => "How often a stage of the read path was passed.",
        PROCESS_INFO => "Who this process is: its role, instance, cluster and Trove version.",
        PROCESS_CPU => "Total user and system CPU time spent in seconds.",
        PROCESS_RSS => "Resident memory size in bytes.",
        PROCESS_VSZ => "Virtual memory size in bytes.",
        PROCESS_FDS => "Number of open file descriptors.",
        PROCESS_THREADS => "Number of threads.",
        PROCESS_START => "Start time of the process since the Unix epoch in seconds.",
        PROCESS_DISK_BYTES => "Bytes this process made the block layer read and write.",
        HOST_CPU => "The host's CPU time by mode.",
        HOST_CPUS => "The host's CPUs.",
        HOST_MEMORY => "The host's memory: total and available.",
        HOST_LOAD1 => "The host's load average over one minute.",
        HOST_NET_BYTES => "Bytes the host's network devices received (in) and sent (out).",
        HOST_DISK_BYTES => "Bytes the host's block devices read and wrote.",
        DRIVE_BYTES => "A storage drive's total and free bytes.",
        DRIVE_SHARDS => "Shards held by a storage drive.",
        DRIVE_ERROR => "Whether a storage drive reports an error (1) or not (0).",
        KV_COMMITS => "Metadata engine transactions by outcome of their commit.",
        KV_COMMIT_DURATION => "How long metadata engine commits took.",
        META_LEADER => "Whether this metadata server holds the cluster manager's lease.",
        META_PROCESSES => "Processes that announced their metrics exporters to this metadata server.",
        CLUSTER_NODES => "Storage nodes by state (lease holder only).",
        CLUSTER_CAPACITY => {
            "The cluster's raw capacity: total, free, and held by deleted data until GC (lease holder only)."
        }
        CLUSTER_FILES => "Regular files in the namespace (lease holder only).",
        CLUSTER_CHUNKS => "Chunks by state (lease holder only).",
        CLUSTER_MAP_VERSION => "The newest placement map version (lease holder only).",
        EVENTS => "Events recorded in the cluster's event log, by kind and severity.",
        JOB_RUNNING => "Whether a background job's pass runs now.",
        JOB_PASSES => "Background job passes finished.",
        JOB_CHUNKS => "Chunks a background job handled, by result.",
        JOB_BYTES => "Bytes a background job wrote.",
        JOB_SHARDS_REPAIRED => "Damaged or missing shards a background job rewrote.",
        JOB_CHUNKS_SEEN => "Chunks the last pass of a background job looked at.",
        JOB_CHUNKS_LEFT => "Chunks the last pass of a background job left to move or repair.",
        JOB_PASS_SECONDS => "How long the last pass of a background job took.",
        META_CHUNK_RECORDS_WALKED => "Chunk records read by walks over every chunk record.",
        CACHE => "Cache lookups by cache and outcome.",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_documented_and_has_help() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md"))
            .expect("docs/metrics.md");
        let mut seen = std::collections::BTreeSet::new();
        for (name, kind, _) in ALL {
            assert!(seen.insert(*name), "{name} listed twice");
            assert!(!help(name).is_empty(), "{name} has no help text");
            let published = if *kind == "counter" { format!("{name}_total") } else { name.to_string() };
            assert!(doc.contains(&format!("`{published}`")), "docs/metrics.md does not list `{published}`");
            assert!(name.starts_with("trove_") || name.starts_with("process_"), "{name}");
        }
    }
}
