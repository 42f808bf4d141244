//! `trove s3`: the S3 gateway's command line. The gateway itself is the `s3gw` crate.
//!
//! Settings come from `--config s3.toml` (access keys, TLS, anonymous access, timeouts and
//! connection limits; see `s3gw::Config`), and flags override them, so a quick start needs no
//! file:
//! `trove s3 --cluster DIR --listen 127.0.0.1:9000 --access-key K --secret-key S`.
//! Once listening it prints `trove s3: listening on http(s)://ADDR` on standard output.

use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum AnonymousArg {
    Off,
    Read,
    ReadWrite,
}

#[derive(Args)]
pub struct S3Args {
    /// TOML configuration: cluster, listen, region, anonymous, [[keys]], [tls].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on, HOST:PORT (port 0 picks a free one).
    #[arg(long)]
    pub listen: Option<String>,
    /// An access key clients sign requests with (with --secret-key).
    #[arg(long, env = "TROVE_S3_ACCESS_KEY")]
    pub access_key: Option<String>,
    /// The secret of --access-key.
    #[arg(long, env = "TROVE_S3_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    /// What unsigned requests may do.
    #[arg(long, value_enum)]
    pub anonymous: Option<AnonymousArg>,
    /// The region the gateway reports (default us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// How long a client may take to send a request's head (ms); idle keep-alive connections
    /// are closed after this long too [default: 30000].
    #[arg(long)]
    pub header_timeout_ms: Option<u64>,
    /// How long a request body (or a response) may stall before the request is cut with
    /// 400 RequestTimeout and nothing stored (ms) [default: 30000].
    #[arg(long)]
    pub body_idle_timeout_ms: Option<u64>,
    /// Connections served at once; more are answered 503 SlowDown [default: 4096].
    #[arg(long)]
    pub connections_max: Option<usize>,
    /// Connections one client address may hold; more are answered 503 SlowDown [default: 512].
    #[arg(long)]
    pub connections_per_client_max: Option<usize>,
    #[command(flatten)]
    pub metrics: crate::telemetry::MetricsOpt,
}

pub async fn run(args: S3Args, cluster: Option<String>) -> Result<()> {
    let mut config: s3gw::Config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| anyhow!("cannot read {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| anyhow!("bad S3 gateway config {}: {e}", path.display()))?
        }
        None => toml::from_str("").map_err(|e| anyhow!("default S3 gateway config: {e}"))?,
    };
    if let Some(l) = args.listen {
        config.listen = l;
    }
    match (args.access_key, args.secret_key) {
        (Some(access_key), Some(secret_key)) => config.keys.push(s3gw::KeyPair { access_key, secret_key }),
        (None, None) => {}
        _ => bail!("--access-key and --secret-key go together"),
    }
    if let Some(a) = args.anonymous {
        config.anonymous = match a {
            AnonymousArg::Off => s3gw::Anonymous::Off,
            AnonymousArg::Read => s3gw::Anonymous::Read,
            AnonymousArg::ReadWrite => s3gw::Anonymous::ReadWrite,
        };
    }
    if args.region.is_some() {
        config.region = args.region;
    }
    if let Some(ms) = args.header_timeout_ms {
        config.header_timeout_ms = ms;
    }
    if let Some(ms) = args.body_idle_timeout_ms {
        config.body_idle_timeout_ms = ms;
    }
    if let Some(n) = args.connections_max {
        config.connections_max = n;
    }
    if let Some(n) = args.connections_per_client_max {
        config.connections_per_client_max = n;
    }
    match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => config.tls = Some(s3gw::TlsConfig { cert, key }),
        (None, None) => {}
        _ => bail!("--tls-cert and --tls-key go together"),
    }
    let Some(cluster) = cluster.or(config.cluster.clone()) else {
        bail!("no cluster given: pass --cluster HOST:PORT (or a local cluster directory), set TROVE_CLUSTER, or set `cluster` in the config");
    };
    crate::credentials::install_gateway_if_none(&cluster)?;
    let addr = crate::cluster::meta_addr_of(&cluster)?;
    let exporter = crate::telemetry::bind(&args.metrics)?;
    let client =
        client::Client::connect(&addr).await.map_err(|e| anyhow!("cannot reach the Trove cluster at {addr}: {e}"))?;
    let gateway = s3gw::Gateway::new(client.clone(), config.region.clone());
    let listening = s3gw::serve(gateway, &config).await.map_err(|e| anyhow!("{e}"))?;
    let scheme = if listening.is_tls() { "https" } else { "http" };
    let local = listening.local_addr()?;
    crate::telemetry::serve_front(exporter, &client, "s3", &local.to_string(), &local.to_string(), "")?;
    let mut out = std::io::stdout();
    writeln!(out, "trove s3: listening on {scheme}://{local}")?;
    out.flush()?;
    tokio::select! {
        r = listening.run() => r.map_err(|e| anyhow!("S3 gateway stopped: {e}")),
        _ = shutdown_signal() => Ok(()),
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
