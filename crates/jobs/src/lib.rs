//! The job engine: one home for everything that moves or checks data in a Trove cluster.
//!
//! - **repair** (`repair.rs`): brings chunks to the newest placement map and to full
//!   redundancy (rebuild, drain, rebalance, widening chunks written narrow, writing shards
//!   written missing). It walks every chunk record only when the map changes; otherwise it
//!   reads the work queue that the metadata service fills in the transactions that leave a
//!   chunk needing it, so an idle cluster does no scans.
//! - **scrub**: the repair walk that also reads and verifies every shard, on its schedule
//!   (`scrub_interval_ms`) or by hand.
//! - **tier** (`tier.rs`): moves files to the pool and scheme the file pool policies give
//!   them, daily at 22:00 by default (`schedule.rs`), or by hand over a tree.
//! - **ingest** (`ingest.rs`): derives the variants the ingest rules ask for (images resized
//!   as they land in a source tree, into a tree beside it), every `ingest_interval_ms` while
//!   rules exist, or by hand.
//!
//! The runner (`runner.rs`) runs them in the metadata server holding the cluster manager's
//! lease. Every job has a record in the metadata engine (`meta::jobs`: state, run, progress
//! with a cursor, schedule), so `trove job start|pause|resume|cancel|status` act on it from
//! any process, and a run taken over by another metadata server after a failover resumes
//! where the record says it was. The GC of replaced chunks stays in the metadata service
//! (`meta::gc`): it deletes shards the metadata no longer references, in the same
//! transactions that account for them, and moves no data.

pub mod ingest;
pub mod repair;
pub mod runner;
pub mod schedule;
pub mod tier;
mod tracker;

pub use runner::{spawn, spawn_with, Guard, Settings};

use client::{Client, Result};
use std::time::Duration;
use tokio::time::Instant;
use wire::{ChunkRecord, EcScheme, ErrorCode, Ino, MetaOp, MetaReply, WireError};

/// Rewrites chunk `rec` of file `ino` under a new chunk id: read (verified end to end),
/// written in `target`'s pool and scheme (`None`: the file's, as the nodes allow now), and
/// swapped in with `ReplaceChunk`, which refuses if the file changed meanwhile (the new chunk is
/// then given up). Returns the new record and the shard bytes written.
pub async fn rewrite_chunk(
    client: &Client,
    ino: Ino,
    rec: &ChunkRecord,
    target: Option<(String, Option<EcScheme>)>,
) -> Result<(ChunkRecord, u64)> {
    let data = client.read_chunk(rec, &format!("file {ino}")).await?.to_bytes();
    let Some(alloc) = client.alloc_chunks_for(ino, 1, Vec::new(), target).await?.pop() else {
        return Err(WireError::new(ErrorCode::Internal, "the metadata service allocated nothing"));
    };
    let new = client.upload_chunk(ino, rec.index, alloc, data).await?;
    let written = u64::from(new.shard_len) * (new.ec.width() - new.missing.count_ones() as usize) as u64;
    let op = MetaOp::ReplaceChunk { ino, expected: rec.clone(), new: new.clone() };
    match client.meta(op).await {
        Ok(MetaReply::Ok) => Ok((new, written)),
        Ok(other) => {
            client.abandon_chunks(ino, vec![new]).await;
            Err(client::unexpected(&other))
        }
        Err(e) => {
            client.abandon_chunks(ino, vec![new]).await;
            Err(e)
        }
    }
}

/// A byte-rate limit for a job's writes.
pub struct Throttle {
    bytes_per_s: u64,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    pub fn new(bytes_per_s: u64) -> Throttle {
        Throttle { bytes_per_s: bytes_per_s.max(1), started: Instant::now(), bytes: 0 }
    }

    /// Changes the rate from now on (an impact window opening or closing).
    pub fn set_rate(&mut self, bytes_per_s: u64) {
        let bytes_per_s = bytes_per_s.max(1);
        if bytes_per_s != self.bytes_per_s {
            *self = Throttle::new(bytes_per_s);
        }
    }

    /// Accounts `bytes` written and sleeps until the average rate is back under the limit.
    pub async fn take(&mut self, bytes: u64) {
        self.bytes += bytes;
        let due = Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_s as f64);
        if let Some(wait) = due.checked_sub(self.started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
}
