//! The tiering job: moves every file to the pool and scheme its file pool policy gives it
//! (PowerScale's SmartPools job). It walks the tree (all of it, or the path it was started on)
//! in name order, judges each regular file by the policies (`wire::policy`, first match
//! wins), and moves each chunk that is not yet in the policy's pool and scheme: read it
//! (verified end to end), write it anew in the target pool (`AllocChunksIn`), and swap it in
//! with `ReplaceChunk`, which refuses when the file changed meanwhile. So paths never change,
//! readers see the old chunk or the new one (never a mix), and a writer during a move wins: the
//! move of that chunk is given up and redone by the next run. Once every chunk of a file is
//! in the target pool, the file itself is put there (`SetFilePool`), so data written to it
//! later goes there too.
//!
//! Progress, with the last file finished as the cursor, is reported to the job's record after
//! every file (at most every [`REPORT_INTERVAL`]): a run paused, resumed, or taken over by
//! another metadata server after a failover goes on after the cursor. Pausing and cancelling
//! are seen at the next file.

use crate::Throttle;
use client::Client;
use meta::store::now_ms;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wire::policy::{first_match, FileFacts};
use wire::{
    ChunkRecord, EcScheme, ErrorCode, FileKind, Ino, JobInfo, JobState, MetaOp, MetaReply, PoolId, Timestamp, WireError,
};

/// Most time between two progress reports of a run.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Directory entries read per call.
pub const READDIR_PAGE_ENTRIES: u32 = 1024;
/// Chunk records read per call.
const CHUNK_PAGE: u64 = 1024;

/// How a run of the tiering job may spend the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Impact {
    pub bytes_per_s: u64,
    /// Bytes per second while the impact window is open.
    pub window_bytes_per_s: u64,
    pub window: Option<crate::schedule::Window>,
    /// Chunks moved at once.
    pub chunks_max: usize,
}

impl Impact {
    fn rate(&self, now_ms: u64) -> u64 {
        match self.window {
            Some(w) if w.contains(now_ms) => self.window_bytes_per_s,
            _ => self.bytes_per_s,
        }
    }
}

/// Asks the job's record what to do next, and records progress (`MetaOp::ReportJob`).
pub trait Records: Send + Sync {
    fn report(
        &self,
        info: JobInfo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<JobInfo, WireError>> + Send + '_>>;
}

/// Where a file is to go.
#[derive(Clone, Debug)]
struct Target {
    pool: String,
    pool_id: PoolId,
    ec: EcScheme,
}

/// One run of the tiering job, from `info` (its record: run number, path, cursor, progress).
pub struct Run {
    client: Client,
    records: Arc<dyn Records>,
    info: JobInfo,
    impact: Impact,
    throttle: Throttle,
    policies: Vec<wire::FilePolicy>,
    pools: HashMap<String, (PoolId, EcScheme)>,
    started: Instant,
    busy_before_ms: u64,
    last_report: Instant,
    /// The first chunk this run could not move, and why (logged and kept in the record's
    /// message: the rest usually fail alike).
    first_failure: Option<String>,
}

/// Why a run stopped before the end.
enum Stop {
    Cancelled,
    /// The record moved on to another run (or this server no longer leads).
    Superseded,
}

/// Whether path `a` comes before `b` in the walk's order (name order, a directory before what
/// it holds), both as component lists.
fn before(a: &[String], b: &[String]) -> bool {
    a < b
}

fn components(path: &str) -> Vec<String> {
    path.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect()
}

impl Run {
    pub fn new(client: Client, records: Arc<dyn Records>, info: JobInfo, impact: Impact) -> Run {
        let busy_before_ms = info.progress.busy_ms;
        Run {
            throttle: Throttle::new(impact.rate(now_ms())),
            client,
            records,
            info,
            impact,
            policies: Vec::new(),
            pools: HashMap::new(),
            started: Instant::now(),
            busy_before_ms,
            first_failure: None,
            // The first checkpoint (before any file) asks the record at once: a run taken up
            // while paused waits before moving anything.
            last_report: Instant::now().checked_sub(REPORT_INTERVAL).unwrap_or_else(Instant::now),
        }
    }

    /// Runs to the end (or a pause that is cancelled, or a newer run); reports the end.
    pub async fn run(mut self) {
        let outcome = self.walk().await;
        let (state, message) = match outcome {
            Ok(()) => (
                JobState::Done,
                format!(
                    "{} files looked at, {} moved ({} chunks, {} bytes), {} chunks could not be moved (retried by the next run)",
                    self.info.progress.items_seen,
                    self.info.progress.files_moved,
                    self.info.progress.chunks_moved,
                    self.info.progress.bytes_moved,
                    self.info.progress.chunks_failed
                ) + &self.first_failure.as_ref().map_or(String::new(), |f| format!("; the first: {f}")),
            ),
            Err(Ok(Stop::Cancelled)) | Err(Ok(Stop::Superseded)) => return,
            Err(Err(e)) => (JobState::Failed, e.to_string()),
        };
        tracing::info!("job tier: run {} {}: {message}", self.info.run, state.as_str());
        self.info.state = state;
        self.info.message = message;
        self.info.finished_ms = now_ms();
        self.touch_busy();
        if let Err(e) = self.records.report(self.info.clone()).await {
            tracing::warn!("job tier: cannot record the end of run {}: {e}", self.info.run);
        }
    }

    fn touch_busy(&mut self) {
        self.info.progress.busy_ms = self.busy_before_ms + self.started.elapsed().as_millis() as u64;
    }

    async fn load(&mut self) -> Result<(), WireError> {
        self.policies = match self.client.meta(MetaOp::ListPolicies).await? {
            MetaReply::Policies(p) => p,
            other => return Err(client::unexpected(&other)),
        };
        self.pools = match self.client.meta(MetaOp::ListPools).await? {
            MetaReply::Pools(p) => p.into_iter().map(|p| (p.name, (p.id, p.default_ec))).collect(),
            other => return Err(client::unexpected(&other)),
        };
        if self.info.progress.items_total == 0 {
            if let Ok(fs) = self.client.statfs().await {
                self.info.progress.items_total = fs.inodes_used;
            }
        }
        Ok(())
    }

    async fn walk(&mut self) -> Result<(), Result<Stop, WireError>> {
        self.checkpoint().await?;
        self.load().await.map_err(Err)?;
        let root = self.info.path.clone().unwrap_or_else(|| "/".to_string());
        let attr = self.client.resolve(&root).await.map_err(Err)?;
        let cursor = components(&self.info.progress.cursor);
        if attr.kind == FileKind::File {
            return self.file(&root, &attr).await;
        }
        // Depth first, in name order; each directory's entries paged.
        let mut stack: Vec<(Ino, String)> = vec![(attr.ino, root.trim_end_matches('/').to_string())];
        while let Some((dir, path)) = stack.pop() {
            let mut after = String::new();
            let mut subdirs = Vec::new();
            loop {
                let (entries, more) = self.client.readdir_page(dir, &after, READDIR_PAGE_ENTRIES).await.map_err(Err)?;
                for entry in &entries {
                    let child = format!("{path}/{}", entry.name);
                    let parts = components(&child);
                    match entry.attr.kind {
                        FileKind::Dir => {
                            // A directory wholly before the cursor was finished earlier.
                            if cursor.is_empty() || !before(&parts, &cursor) || cursor.starts_with(&parts) {
                                subdirs.push((entry.attr.ino, child));
                            }
                        }
                        FileKind::File => {
                            if cursor.is_empty() || before(&cursor, &parts) {
                                self.file(&child, &entry.attr).await?;
                            }
                        }
                        _ => {}
                    }
                }
                match entries.last() {
                    Some(last) if more => after = last.name.clone(),
                    _ => break,
                }
            }
            // Children are visited in name order: push them reversed.
            stack.extend(subdirs.into_iter().rev());
        }
        Ok(())
    }

    /// Judges one file and moves its chunks where its policy says; then checks the record.
    async fn file(&mut self, path: &str, attr: &wire::Attr) -> Result<(), Result<Stop, WireError>> {
        self.info.progress.items_seen += 1;
        let facts =
            FileFacts { path, size: attr.size, uid: attr.uid, atime: attr.atime, mtime: attr.mtime, ctime: attr.ctime };
        let target = first_match(&self.policies, &facts, Timestamp::now()).and_then(|(_, p)| {
            let (pool_id, default_ec) = *self.pools.get(&p.action.pool)?;
            Some(Target { pool: p.action.pool.clone(), pool_id, ec: p.action.ec.unwrap_or(default_ec) })
        });
        if let Some(target) = target {
            match self.move_file(attr.ino, &target).await {
                Ok(true) => self.info.progress.files_moved += 1,
                Ok(false) => {}
                // A file removed or replaced while the job ran is no longer its business.
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => {
                    tracing::debug!("job tier: {path}: {e}");
                    self.info.message = format!("{path}: {e}");
                }
            }
        }
        self.info.progress.cursor = path.to_string();
        self.checkpoint().await
    }

    /// Reports progress (at most every [`REPORT_INTERVAL`]) and waits out a pause.
    async fn checkpoint(&mut self) -> Result<(), Result<Stop, WireError>> {
        if self.last_report.elapsed() < REPORT_INTERVAL {
            return Ok(());
        }
        loop {
            self.touch_busy();
            self.last_report = Instant::now();
            let record = self.records.report(self.info.clone()).await.map_err(Err)?;
            if record.run != self.info.run {
                return Err(Ok(Stop::Superseded));
            }
            match record.state {
                JobState::Running => {
                    self.throttle.set_rate(self.impact.rate(now_ms()));
                    return Ok(());
                }
                JobState::Paused => {
                    // Paused time is not busy time.
                    self.busy_before_ms = self.info.progress.busy_ms;
                    tokio::time::sleep(REPORT_INTERVAL).await;
                    self.started = Instant::now();
                }
                JobState::Cancelled => return Err(Ok(Stop::Cancelled)),
                _ => return Err(Ok(Stop::Superseded)),
            }
        }
    }

    /// Moves the chunks of file `ino` that are not in `target`; `Ok(true)` when any moved.
    async fn move_file(&mut self, ino: Ino, target: &Target) -> Result<bool, WireError> {
        let mut first = 0u64;
        let mut to_move: Vec<ChunkRecord> = Vec::new();
        let file_attr = loop {
            let (attr, chunks) = match self.client.meta(MetaOp::GetChunks { ino, first, count: CHUNK_PAGE }).await? {
                MetaReply::Chunks { attr, chunks } => (attr, chunks),
                other => return Err(client::unexpected(&other)),
            };
            let done = chunks.len() < CHUNK_PAGE as usize;
            if let Some(last) = chunks.last() {
                first = last.index + 1;
            }
            to_move.extend(
                chunks
                    .into_iter()
                    .filter(|c| wire::pg_pool(c.placement.pg) != target.pool_id || c.ec != target.ec.for_chunk(c.len)),
            );
            if done {
                break attr;
            }
        };
        let moved = !to_move.is_empty();
        // Re-coding in place to a scheme with more data or parity shards: the file's scheme
        // widens first (to cover both: a chunk is never wider than its file's scheme), then
        // the chunks follow, then the scheme settles on the target below.
        let (old_ec, new_ec) = (file_attr.ec, target.ec);
        if moved && file_attr.pool == target.pool_id && (new_ec.k > old_ec.k || new_ec.m > old_ec.m) {
            let cover = EcScheme { k: old_ec.k.max(new_ec.k), m: old_ec.m.max(new_ec.m) };
            let op = MetaOp::SetFilePool { ino, pool: target.pool.clone(), ec: Some(cover) };
            match self.client.meta(op).await {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::Changed => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        let mut failed = 0u64;
        for batch in to_move.chunks(self.impact.chunks_max.max(1)) {
            let moves = batch.iter().map(|rec| self.move_chunk(ino, rec, target));
            let results = futures::future::join_all(moves).await;
            for (rec, result) in batch.iter().zip(results) {
                match result {
                    Ok(bytes) => {
                        self.info.progress.chunks_moved += 1;
                        self.info.progress.bytes_moved += bytes;
                        self.throttle.take(bytes).await;
                    }
                    Err(e) => {
                        failed += 1;
                        self.info.progress.chunks_failed += 1;
                        let what = format!("file {ino} chunk {} to pool {}: {e}", rec.index, target.pool);
                        if self.first_failure.is_none() {
                            tracing::warn!("job tier: run {}: cannot move {what} (further failures of this run are counted, not logged)", self.info.run);
                            self.first_failure = Some(what);
                        } else {
                            tracing::debug!("job tier: cannot move {what}");
                        }
                    }
                }
            }
        }
        let in_place = file_attr.pool == target.pool_id && file_attr.ec == target.ec;
        if failed == 0 && !in_place {
            let op = MetaOp::SetFilePool { ino, pool: target.pool.clone(), ec: Some(target.ec) };
            match self.client.meta(op).await {
                Ok(_) => {}
                // Written meanwhile (a chunk in the old pool again): the next run moves it.
                Err(e) if e.code == ErrorCode::Changed => {}
                Err(e) => return Err(e),
            }
        }
        // A file counts as moved once all of it is where its policy wants it.
        Ok(failed == 0 && (moved || !in_place))
    }

    /// Copies one chunk into the target pool and swaps it in; the bytes written.
    async fn move_chunk(&self, ino: Ino, rec: &ChunkRecord, target: &Target) -> Result<u64, WireError> {
        let to = Some((target.pool.clone(), Some(target.ec)));
        Ok(crate::rewrite_chunk(&self.client, ino, rec, to).await?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_order_puts_a_directory_before_its_entries_and_after_earlier_names() {
        let c = |p: &str| components(p);
        assert!(before(&c("/a"), &c("/a/b")));
        assert!(before(&c("/a/z"), &c("/b")));
        assert!(before(&c("/a/b"), &c("/a/c")));
        assert!(!before(&c("/b"), &c("/a/z")));
        assert!(!before(&c("/a/b"), &c("/a/b")));
    }

    #[test]
    fn the_impact_window_sets_the_rate_while_it_is_open() {
        let hour_ms = 3_600_000;
        let day_ms = 24 * hour_ms;
        let impact = Impact {
            bytes_per_s: 100 << 20,
            window_bytes_per_s: 10 << 20,
            window: Some(crate::schedule::Window::parse("08:00-18:00").expect("window")),
            chunks_max: 4,
        };
        // Some day, at 07:59, 08:00, 17:59 and 18:00 UTC.
        let day = 20_000 * day_ms;
        assert_eq!(impact.rate(day + 8 * hour_ms - 60_000), 100 << 20);
        assert_eq!(impact.rate(day + 8 * hour_ms), 10 << 20);
        assert_eq!(impact.rate(day + 18 * hour_ms - 60_000), 10 << 20);
        assert_eq!(impact.rate(day + 18 * hour_ms), 100 << 20);
        let always = Impact { window: None, ..impact };
        assert_eq!(always.rate(day + 12 * hour_ms), 100 << 20);
    }
}
