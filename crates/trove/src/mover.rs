//! The data mover loop of a metadata server: while this server holds the cluster manager's
//! lease, it runs `client::mover` passes that rebuild, drain, rebalance and scrub, and marks
//! drained nodes out once nothing is left on them.
//!
//! A pass runs when the placement map changed since the last clean pass, when the last pass
//! left work, when a node came (back) up, when a chunk was written degraded through this
//! server, when scrub is due, and at least every
//! [`PASS_INTERVAL_MAX`] (to repair chunks written degraded while a node was briefly down).

use client::mover::{Mover, Throttle};
use client::Client;
use meta::MetaService;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use wire::{MetaOp, NodeState};

/// Pause between checks of whether a pass is needed.
pub const TICK: Duration = Duration::from_millis(500);
/// Pause before another pass when the last one left work and nothing changed since (nodes
/// still down).
pub const RETRY_AFTER: Duration = Duration::from_secs(3);
/// Longest time between two passes while this server leads.
pub const PASS_INTERVAL_MAX: Duration = Duration::from_secs(10);
/// How often the same kinds of failure are logged again while they last (a cause that keeps
/// every chunk from moving would otherwise fill the log, pass after pass).
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What the mover takes from the metadata server's configuration.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub bytes_per_s: u64,
    /// `None`: scrub disabled.
    pub scrub_interval: Option<Duration>,
    /// How long shards stay at their old place after a move.
    pub grace: Duration,
}

impl Settings {
    pub fn of(config: &meta::MetaConfig) -> Settings {
        Settings {
            bytes_per_s: config.move_bytes_per_s,
            scrub_interval: (config.scrub_interval_ms > 0).then(|| Duration::from_millis(config.scrub_interval_ms)),
            grace: Duration::from_millis(config.gc_grace_ms),
        }
    }
}

/// Stops the loop when dropped.
pub struct Guard(JoinHandle<()>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the loop for the metadata server `service`, reached at `addr`.
pub fn spawn(service: Arc<MetaService>, addr: String, settings: Settings) -> Guard {
    Guard(tokio::spawn(run(service, addr, settings)))
}

async fn run(service: Arc<MetaService>, addr: String, settings: Settings) {
    let mut mover: Option<Mover> = None;
    // Map version of the last pass that left nothing to do.
    let mut clean_version: Option<u32> = None;
    let mut last_pass: Option<Instant> = None;
    let mut last_scrub = Instant::now();
    let mut last_up: Vec<wire::NodeId> = Vec::new();
    // Map version of the last pass, clean or not.
    let mut pass_version: Option<u32> = None;
    // Draining nodes with nothing referenced left on them, to mark out once their old copies
    // are deleted.
    let mut drained: Vec<wire::NodeId> = Vec::new();
    // The kinds of failure logged last, and when: logged again when they change or after
    // FAILURE_LOG_INTERVAL.
    let mut failures_logged: Option<(Vec<wire::ErrorCode>, Instant)> = None;
    let mut jobs = crate::telemetry::JobTracker::default();
    loop {
        tokio::time::sleep(TICK).await;
        if !service.is_leader() {
            if mover.take().is_some() {
                tracing::info!("mover: stopped (this metadata server no longer leads)");
            }
            clean_version = None;
            pass_version = None;
            continue;
        }
        if mover.is_none() {
            match Client::connect(&addr).await {
                Ok(client) => {
                    tracing::info!("mover: started (this metadata server leads)");
                    mover = Some(Mover::new(client, settings.grace));
                }
                Err(e) => {
                    tracing::warn!("mover: cannot connect to {addr}: {e}");
                    continue;
                }
            }
        }
        let Some(mover) = mover.as_mut() else { continue };
        let (version, up, nodes) = match service.call(wire::MetaCall { request_id: 0, op: MetaOp::Status { scan_chunks: false } }).await {
            Ok(wire::MetaReply::Status(s)) => {
                let up: Vec<wire::NodeId> = s.nodes.iter().filter(|n| n.state == NodeState::Up).map(|n| n.id).collect();
                let nodes: Vec<(wire::NodeId, NodeState)> = s.nodes.iter().map(|n| (n.id, n.state)).collect();
                (s.map_version, up, nodes)
            }
            Ok(_) | Err(_) => continue,
        };
        let scrub = settings.scrub_interval.is_some_and(|every| last_scrub.elapsed() >= every);
        // A node coming back up is the moment to repair what was written while it was away.
        let came_up = up.iter().any(|n| !last_up.contains(n));
        last_up = up;
        let degraded = service.take_degraded_written();
        let since_pass = last_pass.map_or(Duration::MAX, |t| t.elapsed());
        let due = pass_version != Some(version)
            || scrub
            || came_up
            || degraded
            || (clean_version != Some(version) && since_pass >= RETRY_AFTER)
            || since_pass >= PASS_INTERVAL_MAX;
        if !due {
            mover.delete_stale(false, &nodes).await;
            // A drained node goes out once its old copies are deleted too (while it still
            // serves), and only if it was not undrained meanwhile.
            let mut still = Vec::new();
            for node in drained.drain(..) {
                if !nodes.contains(&(node, NodeState::Draining)) {
                    continue;
                }
                if mover.stale_on(node) > 0 {
                    still.push(node);
                    continue;
                }
                let op = MetaOp::SetNodeState { node, state: NodeState::Out, force: true };
                match service.call(wire::MetaCall { request_id: 0, op }).await {
                    Ok(_) => tracing::info!("mover: node {node} is drained; marked out"),
                    Err(e) => {
                        tracing::warn!("mover: cannot mark drained node {node} out: {e}");
                        still.push(node);
                    }
                }
            }
            drained = still;
            continue;
        }
        let started = Instant::now();
        let mut throttle = Throttle::new(settings.bytes_per_s);
        jobs.pass_starting();
        let report = match mover.pass(&mut throttle, scrub).await {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!("mover: pass failed: {e}");
                jobs.pass_failed();
                continue;
            }
        };
        jobs.pass_done(&service, &report, started.elapsed(), scrub).await;
        last_pass = Some(Instant::now());
        pass_version = Some(report.map_version);
        if scrub {
            last_scrub = Instant::now();
        }
        let progress = report.chunks_moved + report.chunks_relabelled + report.chunks_recoded + report.shards_bad > 0;
        if progress || scrub {
            tracing::info!(
                "mover: pass to map {} in {:.1}s{}: {} chunks seen, {} moved ({} shards, {} bytes), {} relabelled, {} re-encoded, {} bad shards, {} failed, {} left",
                report.map_version,
                started.elapsed().as_secs_f64(),
                if scrub { " with scrub" } else { "" },
                report.chunks_seen,
                report.chunks_moved,
                report.shards_written,
                report.bytes_written,
                report.chunks_relabelled,
                report.chunks_recoded,
                report.shards_bad,
                report.chunks_failed,
                report.chunks_left
            );
        }
        let kinds: Vec<wire::ErrorCode> = report.failures.iter().map(|(code, _, _)| *code).collect();
        let repeat = failures_logged
            .as_ref()
            .is_some_and(|(logged, at)| *logged == kinds && at.elapsed() < FAILURE_LOG_INTERVAL);
        if !report.failures.is_empty() && !repeat {
            let summary: Vec<String> = report
                .failures
                .iter()
                .map(|(code, count, example)| format!("{count} chunk(s) {code:?}, e.g. {example}"))
                .collect();
            tracing::warn!(
                "mover: {} chunk(s) could not be moved in the pass to map {} (retried; this is logged again in {} s if it lasts): {}",
                report.chunks_failed,
                report.map_version,
                FAILURE_LOG_INTERVAL.as_secs(),
                summary.join("; ")
            );
            failures_logged = Some((kinds, Instant::now()));
        } else if report.failures.is_empty() {
            failures_logged = None;
        }
        if report.chunks_left == 0 && report.chunks_failed == 0 {
            clean_version = Some(report.map_version);
            // Every chunk is on a map that leaves the draining nodes out: nothing the
            // namespace references is left on them (their old copies go after the grace).
            for node in report.draining {
                if !drained.contains(&node) {
                    drained.push(node);
                }
            }
        } else {
            clean_version = None;
        }
    }
}
