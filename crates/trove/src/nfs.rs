//! `trove nfs`: the NFSv3 gateway's command line. The gateway itself is the `nfsgw` crate.
//!
//! `trove nfs --cluster C --listen HOST:PORT [--export /dir] [--read-only]` serves one export;
//! `--config nfs.toml` serves several, each on its own address (see `nfsgw::Config`). Once
//! listening it prints `trove nfs: listening on ADDR export PATH (read-write|read-only)` per
//! export on standard output. Clients without a portmapper give the port explicitly, e.g.
//! `nfs-ls 'nfs://127.0.0.1/?nfsport=PORT&mountport=PORT'`.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub struct NfsArgs {
    /// TOML configuration: cluster, write_back_ms, timeouts and connection limits, [[exports]]
    /// (path, listen, read_only, clients).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to serve one export on, HOST:PORT (port 0 picks a free one).
    #[arg(long)]
    pub listen: Option<String>,
    /// The directory of the cluster to export with --listen.
    #[arg(long, default_value = "/")]
    pub export: String,
    /// Export --export read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Client addresses or networks allowed to connect to --listen, comma-separated
    /// (10.0.0.0/8,192.168.1.5); others are closed at once [default: every client].
    #[arg(long, value_delimiter = ',')]
    pub clients: Vec<String>,
    /// Buffer writes and flush a file once idle this long (ms). 0 (the default) makes every
    /// WRITE durable before its reply, as the FILE_SYNC answer promises; see `nfsgw`.
    #[arg(long)]
    pub write_back_ms: Option<u64>,
    /// Close a connection that carries nothing for this long (ms) [default: 360000].
    #[arg(long)]
    pub idle_timeout_ms: Option<u64>,
    /// Close a connection whose call (or reply) stalls for this long (ms) [default: 30000].
    #[arg(long)]
    pub call_idle_timeout_ms: Option<u64>,
    /// Connections served at once per export; more are closed [default: 1024].
    #[arg(long)]
    pub connections_max: Option<usize>,
    /// Connections one client address may hold per export; more are closed [default: 64].
    #[arg(long)]
    pub connections_per_client_max: Option<usize>,
    #[command(flatten)]
    pub metrics: crate::telemetry::MetricsOpt,
}

pub async fn run(args: NfsArgs, cluster: Option<String>) -> Result<()> {
    let mut config: nfsgw::Config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| anyhow!("cannot read {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| anyhow!("bad NFS gateway config {}: {e}", path.display()))?
        }
        None => nfsgw::Config::default(),
    };
    if let Some(listen) = args.listen {
        config.exports.push(nfsgw::ExportConfig {
            path: args.export,
            listen,
            read_only: args.read_only,
            clients: args.clients,
        });
    }
    if let Some(ms) = args.write_back_ms {
        config.write_back_ms = ms;
    }
    if let Some(ms) = args.idle_timeout_ms {
        config.idle_timeout_ms = ms;
    }
    if let Some(ms) = args.call_idle_timeout_ms {
        config.call_idle_timeout_ms = ms;
    }
    if let Some(n) = args.connections_max {
        config.connections_max = n;
    }
    if let Some(n) = args.connections_per_client_max {
        config.connections_per_client_max = n;
    }
    if config.exports.is_empty() {
        bail!("nothing to export: pass --listen HOST:PORT (and --export DIR), or list [[exports]] in --config");
    }
    let Some(cluster) = cluster.or(config.cluster.clone()) else {
        bail!("no cluster given: pass --cluster HOST:PORT (or a local cluster directory), set TROVE_CLUSTER, or set `cluster` in the config");
    };
    crate::credentials::install_if_none(&cluster)?;
    let addr = crate::cluster::meta_addr_of(&cluster)?;
    let exporter = crate::telemetry::bind(&args.metrics)?;
    let client =
        client::Client::connect(&addr).await.map_err(|e| anyhow!("cannot reach the Trove cluster at {addr}: {e}"))?;
    let mut servers = Vec::new();
    let mut listens = Vec::new();
    let mut out = std::io::stdout();
    for export in &config.exports {
        let listening = nfsgw::bind(client.clone(), export, &config).await.map_err(|e| anyhow!("{e}"))?;
        let mode = if listening.read_only { "read-only" } else { "read-write" };
        if listening.admits_every_host() {
            eprintln!(
                "trove nfs: warning: export {} admits every host that reaches {}, and NFS callers are not \
                 authenticated (whoever asks is served as root): list the hosts that may mount it with \
                 --clients, or `clients` in the config",
                listening.path,
                listening.local_addr()
            );
        }
        writeln!(out, "trove nfs: listening on {} export {} ({mode})", listening.local_addr(), listening.path)?;
        listens.push(listening.local_addr());
        servers.push(tokio::spawn(listening.run()));
    }
    let first = listens.first().cloned().unwrap_or_default();
    crate::telemetry::serve_front(exporter, &client, "nfs", &listens.join(","), &first, "")?;
    out.flush()?;
    tokio::select! {
        (r, _, _) = futures::future::select_all(servers) => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(anyhow!("NFS gateway stopped: {e}")),
            Err(e) => Err(anyhow!("NFS gateway task failed: {e}")),
        },
        _ = crate::s3::shutdown_signal() => Ok(()),
    }
}
