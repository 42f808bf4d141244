//! What the repair job's passes publish: progress as metrics (`trove_job_*`, label
//! `job="mover"` as dashboards know it), and a job's start and end as events in the cluster's
//! event log.

use metrics::gauges;
use metrics::names;
use std::time::Duration;
use tokio::time::Instant;
use wire::events::kind;
use wire::Severity;

/// What the data mover's passes publish: progress as metrics, and a job's start and end as
/// events. A job is the work toward one placement map (rebuild, drain, rebalance, repair) or
/// one scrub: it starts with the first pass that has work and finishes with the first pass
/// that leaves nothing to move.
#[derive(Default)]
pub struct JobTracker {
    /// The job under way: its description, when it started, and its totals so far.
    current: Option<(String, Instant, Totals)>,
}

#[derive(Default)]
struct Totals {
    moved: u64,
    bytes: u64,
    repaired: u64,
    passes: u64,
}

const JOB: &str = "mover";

impl JobTracker {
    /// Before a pass.
    pub fn pass_starting(&mut self) {
        gauges::set(names::JOB_RUNNING, &[("job", JOB)], 1.0);
    }

    /// After a pass that failed as a whole (it is tried again).
    pub fn pass_failed(&mut self) {
        gauges::set(names::JOB_RUNNING, &[("job", JOB)], 0.0);
    }

    /// After a pass: publishes its figures, and records the job's start and end.
    pub async fn pass_done(
        &mut self,
        service: &meta::MetaService,
        report: &crate::repair::MoveReport,
        took: Duration,
        scrub: bool,
    ) {
        let j = [("job", JOB)];
        gauges::set(names::JOB_RUNNING, &j, 0.0);
        gauges::add(names::JOB_PASSES, &j, 1.0);
        for (result, n) in [
            ("moved", report.chunks_moved),
            ("relabelled", report.chunks_relabelled),
            ("recoded", report.chunks_recoded),
            ("failed", report.chunks_failed),
        ] {
            gauges::add(names::JOB_CHUNKS, &[("job", JOB), ("result", result)], n as f64);
        }
        gauges::add(names::JOB_BYTES, &j, report.bytes_written as f64);
        gauges::add(names::JOB_SHARDS_REPAIRED, &j, report.shards_bad as f64);
        gauges::set(names::JOB_CHUNKS_SEEN, &j, report.chunks_seen as f64);
        gauges::set(names::JOB_CHUNKS_LEFT, &j, report.chunks_left as f64);
        gauges::set(names::JOB_PASS_SECONDS, &j, took.as_secs_f64());

        let mut events = Vec::new();
        if report.shards_bad > 0 {
            events.push(meta::events::NewEvent {
                severity: Severity::Warning,
                kind: kind::CHECKSUM_REPAIRED,
                node: None,
                subject: "data".into(),
                message: format!(
                    "{} damaged or missing shard(s) found{} and rewritten from the other shards of their chunks",
                    report.shards_bad,
                    if scrub { " by scrub" } else { "" }
                ),
            });
        }
        let worked = report.chunks_moved + report.chunks_relabelled + report.chunks_recoded + report.shards_bad > 0;
        let left = report.chunks_left + report.chunks_failed > 0;
        if self.current.is_none() && (worked || left) {
            let what = if scrub {
                "scrub".to_string()
            } else {
                format!("moving chunks to placement map {}", report.map_version)
            };
            events.push(meta::events::NewEvent {
                severity: Severity::Info,
                kind: kind::JOB_STARTED,
                node: None,
                subject: format!("job {JOB}"),
                message: format!(
                    "job started: {what} (rebuild, drain, rebalance or repair); {} chunks to look at",
                    report.chunks_seen
                ),
            });
            self.current = Some((what, Instant::now() - took, Totals::default()));
        }
        if let Some((_, _, totals)) = self.current.as_mut() {
            totals.moved += report.chunks_moved + report.chunks_recoded;
            totals.bytes += report.bytes_written;
            totals.repaired += report.shards_bad;
            totals.passes += 1;
        }
        if !left {
            if let Some((what, started, t)) = self.current.take() {
                events.push(meta::events::NewEvent {
                    severity: Severity::Info,
                    kind: kind::JOB_FINISHED,
                    node: None,
                    subject: format!("job {JOB}"),
                    message: format!(
                        "job finished: {what} in {:.1} s over {} pass(es): {} chunks moved or re-encoded, {} bytes written, {} shards repaired",
                        started.elapsed().as_secs_f64(),
                        t.passes,
                        t.moved,
                        t.bytes,
                        t.repaired
                    ),
                });
            }
        }
        if !events.is_empty() {
            if let Err(e) = service.record_events(events).await {
                tracing::warn!("mover: cannot record its events: {e}");
            }
        }
    }
}
