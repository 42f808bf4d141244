//! Running the metadata service as a server: its configuration file, opening the engine,
//! serving the network protocol, and the background tasks (GC passes and the sweep of expired
//! idempotency records).
//!
//! The configuration names the engine as a tagged table: `engine = { redb = "/path" }` for the
//! embedded engine, `engine = { postgres = "postgres://user@host:5432/db" }` for PostgreSQL (or
//! a PostgreSQL-wire database; see the `kv_postgres` crate).

use crate::{MetaOptions, MetaService};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use wire::{EcScheme, Service};

/// Pause between sweeps of expired idempotency records.
pub const REQUEST_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Which key-value engine holds the metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum EngineConfig {
    /// The embedded engine: one redb file on this machine, with its write-ahead log beside it
    /// (`<file>.wal`, 16 MiB). Both belong to the metadata: copy or move them together, with
    /// the service stopped.
    Redb(PathBuf),
    /// PostgreSQL, by connection URL (`postgres://user:password@host:port/database`, or libpq's
    /// `key=value` form). Several metadata servers may share one database.
    Postgres(String),
}

/// The metadata server's configuration file (TOML):
///
/// ```toml
/// listen = "0.0.0.0:7100"
/// cluster = "trove"
/// engine = { redb = "/var/lib/trove/meta.redb" }  # or { postgres = "postgres://..." }
/// default_ec = "4+2"
/// chunk_bytes = 4194304
/// pg_count = 256
/// down_after_ms = 4000
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetaConfig {
    /// Address to listen on.
    pub listen: String,
    pub engine: EngineConfig,
    /// The cluster's name, checked in every connection's hello.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Erasure scheme of the root directory when created, as "K+M".
    #[serde(default = "default_ec", with = "ec_text")]
    pub default_ec: EcScheme,
    #[serde(default = "default_chunk_bytes")]
    pub chunk_bytes: u32,
    #[serde(default = "default_pg_count")]
    pub pg_count: u32,
    #[serde(default = "default_down_after_ms")]
    pub down_after_ms: u64,
    #[serde(default = "default_gc_grace_ms")]
    pub gc_grace_ms: u64,
    /// A storage node down for longer than this is marked out and its shards are rebuilt on
    /// the other nodes.
    #[serde(default = "default_rebuild_after_ms")]
    pub rebuild_after_ms: u64,
    /// Length of the cluster manager's lease held by one metadata server.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Most milliseconds the metadata hosts' wall clocks may differ; must be less than
    /// `lease_ms`. Another server's lease counts as expired only this long after its end.
    #[serde(default = "default_clock_skew_max_ms")]
    pub clock_skew_max_ms: u64,
    /// The address other processes reach this server at (defaults to `listen` as bound).
    #[serde(default)]
    pub advertise: Option<String>,
    /// Most bytes per second the lease holder's rebuild, drain and rebalance write (throttle).
    #[serde(default = "default_move_bytes_per_s")]
    pub move_bytes_per_s: u64,
    /// Pause between scrub passes (checksum verification of every shard); 0 disables scrub.
    #[serde(default = "default_scrub_interval_ms")]
    pub scrub_interval_ms: u64,
    /// When the tiering job (files to the pools their file pool policies name) runs by
    /// itself: "daily HH:MM" (UTC), "every N" with N in s, m or h (e.g. "every 30s"), or "off"
    /// (only `trove job start tier`).
    #[serde(default = "default_tier_schedule")]
    pub tier_schedule: String,
    /// Most bytes per second the tiering job writes.
    #[serde(default = "default_move_bytes_per_s")]
    pub tier_bytes_per_s: u64,
    /// Chunks the tiering job moves at once.
    #[serde(default = "default_tier_chunks_max")]
    pub tier_chunks_max: u32,
    /// Hours (UTC, "HH:MM-HH:MM") when the jobs run gentler: the tiering job at
    /// `window_bytes_per_s` instead of `tier_bytes_per_s` (e.g. the working day, when training
    /// reads the cluster); none: no such window.
    #[serde(default)]
    pub impact_window: Option<String>,
    #[serde(default = "default_window_bytes_per_s")]
    pub window_bytes_per_s: u64,
    /// The credential directory (`ca.pem`, `cert.pem`, `key.pem`: see `wire::tls`) this
    /// service serves and calls other services with, in mutual TLS. The `trove` binary
    /// refuses a config with neither this nor `plaintext = true`.
    #[serde(default)]
    pub tls: Option<PathBuf>,
    /// Serve and call other services in plaintext, unauthenticated: on trusted networks only.
    #[serde(default)]
    pub plaintext: bool,
    /// Where to serve metrics (`/metrics`) and the dashboard (`/`), "HOST:PORT"; none: no
    /// metrics are recorded. Served by the `trove` binary.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Whether the dashboard is served on `metrics_listen` (default: yes).
    #[serde(default = "default_dashboard")]
    pub dashboard: bool,
    /// A user and password the dashboard asks for (HTTP basic authentication), "USER:PASSWORD";
    /// none: it is open to whoever reaches the port (it only shows, never changes anything).
    #[serde(default)]
    pub dashboard_auth: Option<String>,
    /// Days a deleted regular file is kept in the trash (`/.trash`, `trove trash`) before it
    /// is purged; 0 (the default) turns the trash off: deletes are immediate. Every metadata
    /// server of a cluster should say the same.
    #[serde(default)]
    pub trash_days: u32,
    /// Pause between passes of the ingest job (variants of images that landed under an ingest
    /// rule's source, `trove ingest`); 0: only `trove job start ingest` runs it.
    #[serde(default = "default_ingest_interval_ms")]
    pub ingest_interval_ms: u64,
}

fn default_dashboard() -> bool {
    true
}

fn default_rebuild_after_ms() -> u64 {
    MetaOptions::default().rebuild_after_ms
}
fn default_lease_ms() -> u64 {
    MetaOptions::default().lease_ms
}
fn default_clock_skew_max_ms() -> u64 {
    MetaOptions::default().clock_skew_max_ms
}
/// Default throttle of data movement: 256 MiB/s.
pub const MOVE_BYTES_PER_S_DEFAULT: u64 = 256 << 20;
fn default_move_bytes_per_s() -> u64 {
    MOVE_BYTES_PER_S_DEFAULT
}
/// Default pause between scrub passes: one day.
pub const SCRUB_INTERVAL_MS_DEFAULT: u64 = 24 * 3600 * 1000;
fn default_scrub_interval_ms() -> u64 {
    SCRUB_INTERVAL_MS_DEFAULT
}

/// Default pause between passes of the ingest job: ten seconds (a pass with no rules costs
/// one key read; one with rules, two listings per source directory).
pub const INGEST_INTERVAL_MS_DEFAULT: u64 = 10_000;
fn default_ingest_interval_ms() -> u64 {
    INGEST_INTERVAL_MS_DEFAULT
}

/// The tiering job's default schedule, PowerScale's SmartPools default.
pub const TIER_SCHEDULE_DEFAULT: &str = "daily 22:00";
fn default_tier_schedule() -> String {
    TIER_SCHEDULE_DEFAULT.into()
}
/// Default of chunks the tiering job moves at once.
pub const TIER_CHUNKS_MAX_DEFAULT: u32 = 4;
fn default_tier_chunks_max() -> u32 {
    TIER_CHUNKS_MAX_DEFAULT
}
/// Default rate of the jobs during the impact window: 32 MiB/s.
pub const WINDOW_BYTES_PER_S_DEFAULT: u64 = 32 << 20;
fn default_window_bytes_per_s() -> u64 {
    WINDOW_BYTES_PER_S_DEFAULT
}

fn default_cluster() -> String {
    "trove".into()
}
fn default_ec() -> EcScheme {
    MetaOptions::default().default_ec
}
fn default_chunk_bytes() -> u32 {
    MetaOptions::default().chunk_bytes
}
fn default_pg_count() -> u32 {
    MetaOptions::default().pg_count
}
fn default_down_after_ms() -> u64 {
    MetaOptions::default().down_after_ms
}
fn default_gc_grace_ms() -> u64 {
    MetaOptions::default().gc_grace_ms
}

/// Erasure schemes in configuration files are written as "4+2".
mod ec_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use wire::EcScheme;

    pub fn serialize<S: Serializer>(ec: &EcScheme, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(ec)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EcScheme, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl MetaConfig {
    /// Parses a configuration file's text.
    pub fn from_toml(text: &str) -> anyhow::Result<MetaConfig> {
        toml::from_str(text).context("invalid metadata service configuration")
    }

    /// The service options this configuration asks for.
    pub fn options(&self) -> MetaOptions {
        MetaOptions {
            default_ec: self.default_ec,
            chunk_bytes: self.chunk_bytes,
            pg_count: self.pg_count,
            down_after_ms: self.down_after_ms,
            gc_grace_ms: self.gc_grace_ms,
            rebuild_after_ms: self.rebuild_after_ms,
            lease_ms: self.lease_ms,
            clock_skew_max_ms: self.clock_skew_max_ms,
            trash_days: self.trash_days,
            ..MetaOptions::default()
        }
    }
}

/// Opens the engine, then serves the metadata service until the process ends.
pub async fn run(config: MetaConfig) -> anyhow::Result<()> {
    run_with(config, |_, _| ()).await
}

/// Like [`run`], calling `on_ready` with the service and the address it is reached at once it
/// listens; whatever `on_ready` returns is kept alive while the service runs (the `trove`
/// binary starts the data mover this way).
pub async fn run_with<G>(
    config: MetaConfig,
    on_ready: impl FnOnce(Arc<MetaService>, String) -> G,
) -> anyhow::Result<()> {
    let options = config.options();
    options.validate()?;
    let opening = std::time::Instant::now();
    let engine: Arc<dyn kv::KvEngine> = match &config.engine {
        EngineConfig::Redb(path) => {
            let path = path.clone();
            // Opening may repair the file after a crash, which walks all of it: keep it off
            // the async workers.
            let engine = tokio::task::spawn_blocking(move || kv_redb::RedbEngine::open(path)).await??;
            Arc::new(engine)
        }
        EngineConfig::Postgres(url) => {
            let options = kv_postgres::PostgresOptions::default();
            Arc::new(kv_postgres::PostgresEngine::connect(url, options).await?)
        }
    };
    tracing::info!("metadata engine: {} (opened in {} ms)", engine.describe(), opening.elapsed().as_millis());
    let engine: Arc<dyn kv::KvEngine> = Arc::new(crate::metered::MeteredEngine::new(engine));
    let service = MetaService::new(engine, options).await?;
    let listener =
        TcpListener::bind(&config.listen).await.with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr()?.to_string();
    let advertise = config.advertise.clone().unwrap_or_else(|| {
        // An unspecified listen address is reached over loopback on this host.
        bound.replace("0.0.0.0:", "127.0.0.1:")
    });
    service.set_advertise(&advertise);
    tracing::info!(
        target: "trove::ready",
        "metadata service of cluster {:?} listening on {bound} (advertised as {advertise})",
        config.cluster
    );
    let _reporting = AbortOnDrop(tokio::spawn(report_refusals(service.clone(), advertise.clone())));
    let _guard = on_ready(service.clone(), advertise);
    let serving = serve(listener, service.clone(), config.cluster);
    tokio::select! {
        () = serving => {}
        () = shutdown_signal() => {
            tracing::info!("metadata service stopping: releasing the cluster manager's lease");
            if let Err(err) = service.release_lease().await {
                tracing::warn!("could not release the lease: {err}");
            }
        }
    }
    Ok(())
}

/// Records the connections this server refused at the TLS handshake in the event log
/// (`auth_failure`), every [`wire::rpc::REFUSAL_REPORT_INTERVAL`] at most.
async fn report_refusals(service: Arc<MetaService>, addr: String) {
    loop {
        tokio::time::sleep(wire::rpc::REFUSAL_REPORT_INTERVAL).await;
        let Some((refused, latest)) = wire::rpc::take_refusals() else { continue };
        let op = wire::MetaOp::ReportAuthFailures { front: format!("metadata service {addr}"), refused, latest };
        if let Err(e) = service.call(wire::MetaCall { request_id: 0, op }).await {
            tracing::warn!("{refused} refused connection(s) could not be recorded in the event log: {e}");
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Serves `service` on `listener` forever, with its background tasks running alongside (they
/// stop when this future is dropped).
pub async fn serve(listener: TcpListener, service: Arc<MetaService>, cluster: String) {
    let _background = service.spawn_background();
    let metered = Arc::new(crate::metered::MeteredService(service));
    wire::rpc::serve(listener, metered, Service::Meta, cluster).await;
}

/// The background tasks of a service; dropping this stops them.
pub struct Background {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl MetaService {
    /// Starts the GC and idempotency-sweep loops. They hold the service weakly, so they also
    /// end once the service is dropped.
    pub fn spawn_background(self: &Arc<Self>) -> Background {
        let gc_interval = Duration::from_millis(self.options.gc_interval_ms.max(1));
        let lease_interval = Duration::from_millis((self.options.lease_ms / 4).max(25));
        let lease = wire::world::spawn(every(Arc::downgrade(self), lease_interval, |service| async move {
            match service.renew_lease_once().await {
                Ok(true) => {
                    if let Err(err) = service.mark_dead_out_once().await {
                        tracing::warn!("checking for dead storage nodes failed: {err}");
                    }
                }
                Ok(false) => {}
                Err(err) => tracing::warn!("renewing the cluster manager's lease failed: {err}"),
            }
        }));
        let gc = wire::world::spawn(every(Arc::downgrade(self), gc_interval, |service| async move {
            if !service.is_leader() {
                return;
            }
            match service.gc_once().await {
                Ok(report) if report.chunks_deleted > 0 || report.chunks_referenced > 0 => {
                    tracing::debug!("gc: {report:?}")
                }
                Ok(_) => {}
                Err(err) => tracing::warn!("gc pass failed: {err}"),
            }
            match service.purge_trash_once().await {
                Ok(0) => {}
                Ok(n) => tracing::info!("trash: purged {n} files older than the trash's days"),
                Err(err) => tracing::warn!("trash purge failed: {err}"),
            }
        }));
        let sweep = wire::world::spawn(every(Arc::downgrade(self), REQUEST_SWEEP_INTERVAL, |service| async move {
            if let Err(err) = service.sweep_requests_once().await {
                tracing::warn!("sweep of idempotency records failed: {err}");
            }
        }));
        let watch = wire::world::spawn(crate::watch::run(Arc::downgrade(self)));
        Background { tasks: vec![lease, gc, sweep, watch] }
    }
}

/// Runs `work` every `interval` while the service exists.
async fn every<F, Fut>(service: Weak<MetaService>, interval: Duration, work: F)
where
    F: Fn(Arc<MetaService>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        tokio::time::sleep(interval).await;
        let Some(service) = service.upgrade() else {
            return;
        };
        work(service).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parses_with_defaults() {
        let config = MetaConfig::from_toml("listen = \"127.0.0.1:7100\"\nengine = { redb = \"/tmp/m.redb\" }\n");
        let config = config.unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(config.engine, EngineConfig::Redb("/tmp/m.redb".into()));
        assert_eq!(config.options(), MetaOptions::default());
        assert_eq!(config.cluster, "trove");
    }

    #[test]
    fn config_round_trips_and_rejects_unknowns() {
        let text = "listen = \"0.0.0.0:7100\"\ncluster = \"lab\"\ndefault_ec = \"8+3\"\npg_count = 512\n[engine]\nredb = \"/x\"\n";
        let config = MetaConfig::from_toml(text).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(config.default_ec, EcScheme { k: 8, m: 3 });
        assert_eq!(config.pg_count, 512);
        let again = toml::to_string(&config).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(MetaConfig::from_toml(&again).ok(), Some(config));
        let postgres = "listen = \"x\"\nengine = { postgres = \"postgres://h/d\" }\n";
        let config = MetaConfig::from_toml(postgres).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(config.engine, EngineConfig::Postgres("postgres://h/d".into()));
        assert!(MetaConfig::from_toml("listen = \"x\"\nengine = { sqlite = \"u\" }\n").is_err());
        assert!(MetaConfig::from_toml("listen = \"x\"\nengine = { redb = \"/x\" }\nbogus = 1\n").is_err());
        assert!(MetaConfig::from_toml("listen = \"x\"\nengine = { redb = \"/x\" }\ndefault_ec = \"4-2\"\n").is_err());
    }
}
