//! The `trove` binary's side of metrics: the `--metrics-listen` option of the front ends, the
//! exporter of each role (the metadata role's with the dashboard on the same port), the
//! bridge from the transport's own counters (`wire::traffic`, `wire::stages`) into the
//! registry. (What the jobs publish is the `jobs` crate's.)

use anyhow::{Context, Result};
use clap::Args;
use metrics::gauges::{self, Sample};
use metrics::names;
use std::sync::{Arc, OnceLock};

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
            out.push(Sample::new(names::NET_BYTES, &[("direction", "in")], received as f64));
            out.push(Sample::new(names::NET_BYTES, &[("direction", "out")], sent as f64));
            for t in wire::stages::snapshot() {
                out.push(Sample::new(names::STAGE_SECONDS, &[("stage", &t.stage)], t.total_ns as f64 / 1e9));
                out.push(Sample::new(names::STAGE_PASSES, &[("stage", &t.stage)], t.count as f64));
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
    let at = metrics::advertised(exporter.addr, if addr.is_empty() { "127.0.0.1:0" } else { addr });
    exporter.detach();
    let info = client::metered::process_info(role, id, addr, &at);
    // The task runs for the life of the process.
    drop(client::metered::spawn_announce(client.clone(), info, cluster.to_string()));
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
    let dashboard =
        config.dashboard.then(|| dashboard::router(addr, dashboard::Options { auth: config.dashboard_auth.clone() }));
    let exporter = metrics::http::serve_on(listener, dashboard).context("cannot serve the metrics exporter")?;
    let at = metrics::advertised(exporter.addr, addr);
    service.processes().set_self(client::metered::process_info("meta", addr, addr, &at));
    if config.dashboard {
        tracing::info!("dashboard at http://{at}/");
    }
    Ok(exporter)
}
