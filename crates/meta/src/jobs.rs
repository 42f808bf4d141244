//! The records of the job engine as the metadata service keeps them: one record per job under
//! `J` (state, run number, progress, schedule; changed by operators with `ControlJob` and by the
//! runner with `ReportJob`, each in a transaction, so neither undoes the other), and the work
//! queue under `B` (chunks that need the repair job: written with shards missing or narrower
//! than their file's scheme, or left by a repair pass), written in the transactions that make
//! chunks so. The queue is what lets an idle cluster do no scans: the repair job walks every
//! chunk record only when the placement map changes; otherwise it reads the queue.
//!
//! What the jobs do is the `jobs` crate's; this module keeps only what must survive a
//! failover.

use crate::keys;
use crate::store::{self, abort, fail, get, TxResult};
use kv::KvTxn;
use wire::jobs::{check_job_name, JOB_NAMES};
use wire::{ChunkId, ChunkRecord, EcScheme, Ino, JobAction, JobInfo, JobState, MetaReply};

/// Most queue entries one call adds, reads or removes.
pub const QUEUE_BATCH_MAX: usize = 4096;

async fn read_job(txn: &mut dyn KvTxn, name: &str) -> TxResult<JobInfo> {
    check_job_name(name).map_err(|e| abort(wire::werr!(NotFound, "{e}")))?;
    Ok(get::<JobInfo>(txn, &keys::job(name))
        .await?
        .unwrap_or_else(|| JobInfo { name: name.to_string(), ..JobInfo::default() }))
}

/// Every job's record (jobs never run have a default one).
pub async fn list(txn: &mut dyn KvTxn) -> TxResult<MetaReply> {
    let mut jobs = Vec::with_capacity(JOB_NAMES.len());
    for name in JOB_NAMES {
        jobs.push(read_job(txn, name).await?);
    }
    Ok(MetaReply::Jobs(jobs))
}

/// An operator's action on job `name`.
pub async fn control(txn: &mut dyn KvTxn, now_ms: u64, name: &str, action: &JobAction) -> TxResult<MetaReply> {
    let mut job = read_job(txn, name).await?;
    let state = job.state;
    match action {
        JobAction::Start { path } => {
            // The repair job's automatic runs (a work-queue pass that left chunks it could not
            // settle yet, a placement map change) stay running until their work is done; an
            // operator's start takes such a run over as a full walk instead of being refused.
            let automatic_repair = name == "repair" && state == JobState::Running && job.trigger != "operator";
            if state.active() && !automatic_repair {
                fail!(
                    Exists,
                    "job {name} is {} (run {}, started by {}); cancel it first to start it again",
                    state.as_str(),
                    job.run,
                    job.trigger
                );
            }
            if let Some(path) = path {
                if !path.starts_with('/') {
                    fail!(Invalid, "a job's path must be absolute, not {path:?}");
                }
            }
            job.run += 1;
            job.state = JobState::Running;
            job.trigger = "operator".into();
            job.path = path.clone();
            job.started_ms = now_ms;
            job.finished_ms = 0;
            job.progress = Default::default();
            job.message = String::new();
        }
        JobAction::Pause => {
            if state != JobState::Running {
                fail!(Invalid, "job {name} is {}; only a running job can be paused", state.as_str());
            }
            job.state = JobState::Paused;
        }
        JobAction::Resume => {
            if state != JobState::Paused {
                fail!(Invalid, "job {name} is {}; only a paused job can be resumed", state.as_str());
            }
            job.state = JobState::Running;
        }
        JobAction::Cancel => {
            if !state.active() {
                fail!(Invalid, "job {name} is {}; only a running or paused job can be cancelled", state.as_str());
            }
            job.state = JobState::Cancelled;
            job.finished_ms = now_ms;
            job.message = "cancelled by the operator".into();
        }
    }
    store::put(txn, &keys::job(name), &job).await?;
    Ok(MetaReply::Jobs(vec![job]))
}

/// The runner's report on a run (see `MetaOp::ReportJob`).
pub async fn report(txn: &mut dyn KvTxn, info: &JobInfo) -> TxResult<MetaReply> {
    let mut job = read_job(txn, &info.name).await?;
    let same_run = job.run == info.run;
    if !same_run {
        // A run the runner starts by itself (a schedule, a map change) is recorded by its
        // first report (which may already be its end); a report of an older run, or of a new
        // run while another is under way, changes nothing.
        if info.run <= job.run || job.state.active() {
            return Ok(MetaReply::Jobs(vec![job]));
        }
        job = info.clone();
    } else if job.state.active() {
        // The operator's pause or resume stands: the report carries progress, and an end.
        let state = job.state;
        job = JobInfo { state: if info.state.active() { state } else { info.state }, ..info.clone() };
    } else {
        // Ended (cancelled, or done): only the schedule's fields move on.
        job.schedule = info.schedule.clone();
        job.next_run_ms = info.next_run_ms;
        job.last_scheduled_ms = job.last_scheduled_ms.max(info.last_scheduled_ms);
    }
    store::put(txn, &keys::job(&info.name), &job).await?;
    Ok(MetaReply::Jobs(vec![job]))
}

/// Queues chunk `index` of `ino` (chunk `id`) for the repair job.
pub async fn queue(txn: &mut dyn KvTxn, ino: Ino, index: u64, id: ChunkId) -> TxResult<()> {
    txn.put(&keys::work(ino, index), &keys::encode_u64(id)).await?;
    Ok(())
}

/// Whether a chunk committed with this record needs the repair job: shards missing, or coded
/// narrower than its file's scheme.
pub fn needs_repair(chunk: &ChunkRecord, file_ec: EcScheme) -> bool {
    chunk.missing != 0 || chunk.ec.narrower_than(file_ec.for_chunk(chunk.len))
}

fn check_batch(n: usize) -> TxResult<()> {
    if n > QUEUE_BATCH_MAX {
        fail!(TooLarge, "{n} queue entries in one call exceed the limit of {QUEUE_BATCH_MAX}");
    }
    Ok(())
}

pub async fn queue_chunks(txn: &mut dyn KvTxn, chunks: &[(Ino, u64, ChunkId)]) -> TxResult<MetaReply> {
    check_batch(chunks.len())?;
    for &(ino, index, id) in chunks {
        queue(txn, ino, index, id).await?;
    }
    Ok(MetaReply::Ok)
}

pub async fn dequeue(txn: &mut dyn KvTxn, chunks: &[(Ino, u64, ChunkId)]) -> TxResult<MetaReply> {
    check_batch(chunks.len())?;
    for &(ino, index, id) in chunks {
        let key = keys::work(ino, index);
        if let Some(value) = txn.get(&key).await? {
            if keys::decode_u64(&key, &value).ok() == Some(id) {
                txn.delete(&key).await?;
            }
        }
    }
    Ok(MetaReply::Ok)
}

/// Queued chunks after `after` with their current records; entries whose chunk is gone or was
/// replaced by a chunk that does not need repair are removed.
pub async fn scan_queue(txn: &mut dyn KvTxn, after: Option<(Ino, u64)>, limit: u32) -> TxResult<MetaReply> {
    let limit = (limit as usize).clamp(1, QUEUE_BATCH_MAX);
    let from = match after {
        Some((ino, index)) => store::after(&keys::work(ino, index)),
        None => vec![keys::prefix::WORK],
    };
    let end = kv::prefix_end(&[keys::prefix::WORK]);
    let page = txn.scan(&from, &end, limit).await?;
    let more = page.len() == limit;
    let mut chunks = Vec::with_capacity(page.len());
    for (key, value) in page {
        let Some((ino, index)) = keys::parse_work(&key) else {
            fail!(Internal, "malformed work queue key {}", keys::describe(&key));
        };
        let queued = keys::decode_u64(&key, &value).map_err(abort)?;
        let rec = get::<ChunkRecord>(txn, &keys::chunk(ino, index)).await?;
        let inode = get::<keys::InodeRec>(txn, &keys::inode(ino)).await?;
        match (rec, inode) {
            (Some(rec), Some(inode)) if rec.id == queued || needs_repair(&rec, inode.attr.ec) => {
                chunks.push(wire::ScannedChunk { ino, rec, file_ec: inode.attr.ec, file_pool: inode.attr.pool });
            }
            _ => txn.delete(&key).await?,
        }
    }
    Ok(MetaReply::ChunkPage { chunks, more })
}
