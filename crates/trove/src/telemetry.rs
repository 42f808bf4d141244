//! The `trove` binary's side of metrics: the `--metrics-listen` option of the front ends, the
//! exporter of each role (the metadata role's with the dashboard on the same port), the
//! bridge from the transport's own counters (`wire::traffic`, `wire::stages`) into the
//! registry, and what the data mover's passes publish (job progress, job events).

use anyhow::{Context, Result};
use clap::Args;
use metrics::gauges::{self, Sample};
use metrics::names;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wire::events::kind;
use wire::Severity;

/// `--metrics-listen`, for the processes started by hand (mount, gateways, benchmarks).
#[derive(Args, Clone, Debug, Default)]
pub struct MetricsOpt {
    /// Serve this process's metrics on HOST:PORT (Prometheus text format at /metrics, the
    /// busiest files and clients at /top) and announce them to the metadata service, where
    /// `trove stats` and the dashboard find them. Without it nothing is recorded.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
}

/// Publishes the transport's byte counters and per-stage latency totals (once per process).
pub fn bridge_wire() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        gauges::register_source(|out| {
            let (received, sent) = wire::traffic::totals();
            out.push(Sample::new(
                names::NET_BYTES,
                &[("direction", "in")],
                received as f64,
            ));
            out.push(Sample::new(
                names::NET_BYTES,
                &[("direction", "out")],
                sent as f64,
            ));
            for t in wire::stages::snapshot() {
                out.push(Sample::new(
                    names::STAGE_SECONDS,
                    &[("stage", &t.stage)],
                    t.total_ns as f64 / 1e9,
                ));
                out.push(Sample::new(
                    names::STAGE_PASSES,
                    &[("stage", &t.stage)],
                    t.count as f64,
                ));
            }
        });
    });
}

/// Binds a front end's exporter (before it starts serving, so that a taken port is reported
/// first).
pub fn bind(opt: &MetricsOpt) -> Result<Option<std::net::TcpListener>> {
    match &opt.metrics_listen {
        Some(listen) => Ok(Some(metrics::http::bind(listen)?)),
        None => Ok(None),
    }
}

/// Serves a front end's exporter bound by [`bind`] and announces it through `client` as
/// `role`/`id` (its service address `addr`, if it has one). Runs until the process ends.
pub fn serve_front(
    listener: Option<std::net::TcpListener>,
    client: &client::Client,
    role: &str,
    id: &str,
    addr: &str,
    cluster: &str,
) -> Result<()> {
    let Some(listener) = listener else {
        return Ok(());
    };
    bridge_wire();
    let exporter = metrics::http::serve_on(listener, None)?;
    let at = metrics::advertised(
        exporter.addr,
        if addr.is_empty() { "127.0.0.1:0" } else { addr },
    );
    exporter.detach();
    let info = client::metered::process_info(role, id, addr, &at);
    // The task runs for the life of the process.
    drop(client::metered::spawn_announce(
        client.clone(),
        info,
        cluster.to_string(),
    ));
    Ok(())
}

/// The metadata role's exporter with the dashboard, on a port bound before the role started.
pub fn serve_meta(
    listener: std::net::TcpListener,
    service: &Arc<meta::MetaService>,
    addr: &str,
    config: &meta::MetaConfig,
) -> Result<metrics::http::Exporter> {
    bridge_wire();
    metrics::set_identity(metrics::Identity {
        role: "meta".into(),
        id: addr.to_string(),
        cluster: config.cluster.clone(),
    });
    let dashboard = config.dashboard.then(|| {
        dashboard::router(
            addr,
            dashboard::Options {
                auth: config.dashboard_auth.clone(),
            },
        )
    });
    let exporter = metrics::http::serve_on(listener, dashboard)
        .context("cannot serve the metrics exporter")?;
    let at = metrics::advertised(exporter.addr, addr);
    service
        .processes()
        .set_self(client::metered::process_info("meta", addr, addr, &at));
    if config.dashboard {
        tracing::info!("dashboard at http://{at}/");
    }
    Ok(exporter)
}

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
        report: &client::mover::MoveReport,
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
            gauges::add(
                names::JOB_CHUNKS,
                &[("job", JOB), ("result", result)],
                n as f64,
            );
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
        let worked = report.chunks_moved
            + report.chunks_relabelled
            + report.chunks_recoded
            + report.shards_bad
            > 0;
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
                message: format!("job started: {what} (rebuild, drain, rebalance or repair); {} chunks to look at", report.chunks_seen),
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
