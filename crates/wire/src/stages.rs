//! Where the time of a read goes: per-stage latency totals of one process, for the latency
//! breakdown of `trove bench io --latency-breakdown`.
//!
//! Every stage a read passes through (the mount's FUSE hand-off, the client's record lookup and
//! storage call, the RPC transport's hand-offs, the storage node's queueing, disk read and
//! verification) adds its duration to a process-wide counter here. The counters are plain
//! atomics, always on: two clock reads and two relaxed additions per stage cost well under a
//! microsecond per read, and a benchmark needs no special build or restart to see them.
//! A front end exposes its process's totals (the mount through a virtual extended attribute),
//! a storage node answers `StorageOp::Stages` with its own; a benchmark takes a snapshot of each
//! before and after a run and divides the difference by the reads it made.
//!
//! This lives in `wire` because the transport itself records stages and both sides of a call
//! need the same names; it does no I/O.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A stage of a read. Names (see [`Stage::name`]) are what crosses process boundaries, so
/// builds with different stage sets still understand each other's reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Mount: from the FUSE READ request reaching the mount's callback to its handling starting
    /// (about zero since the mount polls a request first on the callback's own thread).
    FuseHandoff,
    /// Mount: waiting for the open file's shared state before reading.
    MountLockWait,
    /// Mount: the READ request's task, from running to the data being ready for the kernel.
    MountRead,
    /// Mount: handing the reply to the kernel (the write to `/dev/fuse`).
    FuseReply,
    /// Client: one `read_at` of a file handle.
    ClientRead,
    /// Client: a chunk record fetched from the metadata service for a read (a round trip).
    ClientRecord,
    /// Client: one storage read call, from sending the request to having the reply.
    ClientStorageCall,
    /// Client: end-to-end checksum verification of the bytes a storage call returned.
    ClientVerify,
    /// RPC server: from a request frame read off the socket to its handler running.
    RpcServerHandoff,
    /// RPC server: from the handler's answer to the reply frame written to the socket.
    RpcServerReply,
    /// Storage: a read request's whole handling on the node (the next four and the rest).
    StorageHandle,
    /// Storage: waiting for a drive slot and a thread to run the read on.
    StorageQueue,
    /// Storage: opening the shard file and reading and checking its header and block table
    /// (or finding them cached).
    StorageOpen,
    /// Storage: reading the requested blocks from the drive (or the page cache).
    StorageDisk,
    /// Storage: verifying the blocks read against the shard's block checksums.
    StorageVerify,
}

impl Stage {
    /// Every stage, in the order a read passes through them.
    pub const ALL: [Stage; 15] = [
        Stage::FuseHandoff,
        Stage::MountLockWait,
        Stage::MountRead,
        Stage::FuseReply,
        Stage::ClientRead,
        Stage::ClientRecord,
        Stage::ClientStorageCall,
        Stage::ClientVerify,
        Stage::RpcServerHandoff,
        Stage::RpcServerReply,
        Stage::StorageHandle,
        Stage::StorageQueue,
        Stage::StorageOpen,
        Stage::StorageDisk,
        Stage::StorageVerify,
    ];

    /// The stage's stable name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::FuseHandoff => "fuse.handoff",
            Stage::MountLockWait => "mount.lock_wait",
            Stage::MountRead => "mount.read",
            Stage::FuseReply => "fuse.reply",
            Stage::ClientRead => "client.read",
            Stage::ClientRecord => "client.record",
            Stage::ClientStorageCall => "client.storage_call",
            Stage::ClientVerify => "client.verify",
            Stage::RpcServerHandoff => "rpc.server.handoff",
            Stage::RpcServerReply => "rpc.server.reply",
            Stage::StorageHandle => "storage.handle",
            Stage::StorageQueue => "storage.queue",
            Stage::StorageOpen => "storage.open",
            Stage::StorageDisk => "storage.disk",
            Stage::StorageVerify => "storage.verify",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

const STAGES: usize = Stage::ALL.len();

struct Counter {
    count: AtomicU64,
    total_ns: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialise the array below
const ZERO: Counter = Counter { count: AtomicU64::new(0), total_ns: AtomicU64::new(0) };
static COUNTERS: [Counter; STAGES] = [ZERO; STAGES];

/// Adds the time since `start` to `stage`.
pub fn record(stage: Stage, start: Instant) {
    record_ns(stage, start.elapsed().as_nanos() as u64);
}

/// Adds `ns` nanoseconds to `stage`.
pub fn record_ns(stage: Stage, ns: u64) {
    let c = &COUNTERS[stage.slot()];
    c.count.fetch_add(1, Ordering::Relaxed);
    c.total_ns.fetch_add(ns, Ordering::Relaxed);
}

/// One stage's totals: how often it was passed and how long it took altogether.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageTotal {
    pub stage: String,
    pub count: u64,
    pub total_ns: u64,
}

/// This process's totals of every stage passed at least once.
pub fn snapshot() -> Vec<StageTotal> {
    Stage::ALL
        .iter()
        .filter_map(|&s| {
            let c = &COUNTERS[s.slot()];
            let count = c.count.load(Ordering::Relaxed);
            (count > 0).then(|| StageTotal {
                stage: s.name().to_string(),
                count,
                total_ns: c.total_ns.load(Ordering::Relaxed),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_add_up_and_have_distinct_names() {
        let before = snapshot().into_iter().find(|t| t.stage == "storage.verify").unwrap_or_default();
        record_ns(Stage::StorageVerify, 1500);
        record_ns(Stage::StorageVerify, 500);
        let after = snapshot().into_iter().find(|t| t.stage == "storage.verify").expect("recorded");
        assert_eq!(after.count - before.count, 2);
        assert_eq!(after.total_ns - before.total_ns, 2000);
        let mut names: Vec<&str> = Stage::ALL.iter().map(|s| s.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STAGES);
        for (i, s) in Stage::ALL.iter().enumerate() {
            assert_eq!(s.slot(), i, "ALL must list the stages in declaration order");
        }
    }
}
