//! `trove`: one binary for every role of a Trove cluster and every tool around it.
//!
//! - roles: `trove meta` and `trove storage` run one service from a TOML config;
//! - `trove cluster ...` starts and stops a local cluster of separate processes on loopback;
//! - `trove put/get/cat/ls/stat/mkdir/mv/rm/status` talk to a cluster through the client
//!   library;
//! - `trove demo` shows the whole system at work: write, verify, lose nodes, verify again.

mod bench;
mod clone;
mod cmds;
mod data;
mod dataset;
mod demo;
mod encryption;
mod identity;
mod ingest;
mod job;
mod mount;
mod nfs;
mod policy;
mod pools;
mod quota;
mod s3;
mod snapshot;
mod snapshot_object;
mod stats;
mod telemetry;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cmds::ClusterOpt;
use launcher::{cluster, credentials};
use std::path::PathBuf;

/// `--cluster` is an option of the commands that talk to a cluster, so the help of the others
/// (the roles, `cluster`, `demo`, `umount`) does not offer it. It is also accepted before the
/// command name (`trove --cluster DIR status`), which is where `TROVE_CLUSTER` is read.
#[derive(Parser)]
#[command(name = "trove", version, about = "Trove: a scale-out, erasure-coded file system for GPU training data")]
struct Cli {
    /// The cluster the command talks to: the metadata service's HOST:PORT (several,
    /// comma-separated, to fail over between them), or the directory of a local cluster
    /// started with `trove cluster start`. Commands that talk to a cluster also take it after
    /// their name.
    #[arg(long, short = 'c', env = "TROVE_CLUSTER", value_name = "CLUSTER")]
    cluster: Option<String>,
    /// The TLS credential (a directory of ca.pem, cert.pem and key.pem, as `trove cluster
    /// issue` writes) to reach the cluster with. Default: the admin credential of a local
    /// cluster directory given as the cluster, else none (plaintext).
    #[arg(long, env = "TROVE_CREDENTIALS", value_name = "DIR")]
    credentials: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum NodeCmd {
    /// Moves all data off a node while it keeps serving (SmartFail); it is marked out when
    /// nothing is left on it. Refused when the nodes left could not hold a scheme in use.
    Drain {
        /// The node's id (see `trove status`).
        id: wire::NodeId,
        /// Drain even if the nodes left cannot hold a scheme in use: such chunks are then
        /// re-encoded narrower (fewer data shards, same parity) until nodes are added.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Cancels a drain: the node takes new data again.
    Undrain {
        /// The node's id, as `trove status` lists it.
        id: wire::NodeId,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Removes a node at once: its shards are rebuilt from the others (use drain to move them
    /// first while it still serves). Refused when the nodes left could not hold a scheme in use.
    Remove {
        /// The node's id (see `trove status`).
        id: wire::NodeId,
        /// Remove even if the nodes left cannot hold a scheme in use: such chunks are then
        /// re-encoded narrower until nodes are added.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Joins a new storage node: runs its storage service from a TOML config (as `trove
    /// storage`). It registers, a placement map including it is published, and the lease
    /// holder's mover rebalances shards onto it.
    Add {
        /// The storage node's TOML config (listen, meta, cluster, drives).
        #[arg(long)]
        config: PathBuf,
    },
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Runs the metadata service (namespace, cluster manager) from a TOML config.
    Meta {
        /// The metadata service's TOML config (listen, cluster, engine, ...).
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs a storage service (one node's drives) from a TOML config.
    Storage {
        /// The storage node's TOML config (listen, meta, cluster, drives).
        #[arg(long)]
        config: PathBuf,
    },
    /// Starts, stops and injects faults into a local cluster of separate processes.
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// Encryption at rest: make a key file, re-key a stopped storage node's drives.
    #[command(subcommand)]
    Encryption(encryption::EncryptionCmd),
    /// Storage node lifecycle: drain (move data off while serving), undrain, remove, add.
    #[command(subcommand)]
    Node(NodeCmd),
    /// Shows nodes, drives, capacity, health, erasure schemes and degraded chunks.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Live statistics of every process of the cluster (like `isi statistics`): CPU,
    /// operations per protocol, network and disk bytes, latency; refreshed until interrupted.
    Stats(stats::StatsArgs),
    /// The cluster's event log: nodes down, up and out, drive errors, repairs, capacity
    /// thresholds, jobs starting and finishing.
    Events(stats::EventsArgs),
    /// Copies a local file into the cluster.
    Put {
        /// The local file to copy.
        local: PathBuf,
        /// Where to put it in the cluster: a path, or an existing directory to put it into.
        remote: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Copies a file from the cluster to a local path.
    Get {
        /// The file in the cluster.
        remote: String,
        /// The local path to write.
        local: PathBuf,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Writes a file's contents to standard output.
    Cat {
        /// The file in the cluster.
        remote: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists a directory.
    Ls {
        /// The directory (or file) in the cluster.
        #[arg(default_value = "/")]
        remote: String,
        /// Long listing with modes, links, owners, sizes and modification times (UTC).
        #[arg(long, short = 'l')]
        long: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Shows a file's attributes and layout.
    Stat {
        /// The file or directory in the cluster.
        remote: String,
        /// Also list each chunk: its pool, erasure scheme, placement group and the node of each
        /// shard (like PowerScale's `isi get -DD`).
        #[arg(long)]
        layout: bool,
        /// With --layout: print JSON.
        #[arg(long, requires = "layout")]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Sums the data below a path: with --by-pool, per storage pool (files, chunks, bytes of
    /// data, raw bytes stored).
    Du {
        /// The directory (or file) in the cluster.
        #[arg(default_value = "/")]
        remote: String,
        /// Sum per storage pool (the only view for now; required).
        #[arg(long, required = true)]
        by_pool: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Storage pools: list, create, set (nodes join one by `pool = "NAME"` in their config).
    #[command(subcommand)]
    Pool(pools::PoolCmd),
    /// File pool policies: add, list, rm, test (which policy decides a file, and why).
    #[command(subcommand)]
    Policy(policy::PolicyCmd),
    /// Ingest rules (images resized as they land, into a tree beside): add, list, rm.
    #[command(subcommand)]
    Ingest(ingest::IngestCmd),
    /// Jobs that move or check data (tier, repair, scrub, ingest): start, pause, resume, cancel, status.
    #[command(subcommand)]
    Job(job::JobCmd),
    /// Directory tree quotas (bytes and inodes, hard and soft): set, get, list, rm.
    #[command(subcommand)]
    Quota(quota::QuotaCmd),
    /// Deleted files kept for `trash_days`: list, restore, purge.
    #[command(subcommand)]
    Trash(quota::TrashCmd),
    /// Tenants: namespaces of their own for their users' S3 keys, with a quota.
    #[command(subcommand)]
    Tenant(identity::TenantCmd),
    /// Users known to the cluster (uid, groups, tenant), whom S3 keys act as.
    #[command(subcommand)]
    User(identity::UserCmd),
    /// S3 access keys bound to users: create (shows the secret once), list, remove.
    #[command(subcommand, name = "s3-key")]
    S3Key(identity::S3KeyCmd),
    /// Snapshots of directory trees: create, list, delete, diff, restore.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
    /// Makes a writable copy of a file or directory tree that shares all its data with the
    /// source (no byte copied); later writes to either side do not show through the other.
    Clone(clone::CloneArgs),
    /// Locks a directory tree (or a file) for a while (WORM): until then nothing in it can be
    /// changed, renamed or deleted, through any front end, by anyone. The date can be moved
    /// later (run it again), never earlier.
    Retain(snapshot::RetainArgs),
    /// Creates directories (with parents).
    Mkdir {
        /// The directory to create in the cluster (its missing parents too).
        remote: String,
        /// Erasure scheme new files below inherit, e.g. 8+2 or 1+2 (replication); refused when
        /// wider than the cluster's storage nodes.
        #[arg(long)]
        ec: Option<wire::EcScheme>,
        /// Allow a scheme without parity (K+0): losing any one node then loses data.
        #[arg(long)]
        no_redundancy: bool,
        /// Storage pool new files below go to (with the pool's default scheme unless --ec is
        /// given); also changes an existing directory's pool.
        #[arg(long)]
        pool: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Renames or moves a file or directory.
    Mv {
        /// The file or directory to move.
        from: String,
        /// Its new path, or an existing directory to move it into.
        to: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Removes a file, or a directory with -r.
    Rm {
        /// The file or directory to remove.
        remote: String,
        /// Remove a directory and everything below it.
        #[arg(long, short = 'r')]
        recursive: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Mounts a cluster as a POSIX file system (FUSE); stays in the foreground until unmounted.
    Mount(mount::MountArgs),
    /// Unmounts a Trove mount.
    Umount(mount::UmountArgs),
    /// Validation suite: fio-, mdtest- and MLPerf-Storage-style benchmarks on a cluster or a directory.
    Bench(bench::BenchArgs),
    /// Serves the cluster over S3 (buckets are top-level directories, keys are paths).
    S3 {
        #[command(flatten)]
        cluster: ClusterOpt,
        #[command(flatten)]
        args: s3::S3Args,
    },
    /// Serves the cluster over NFSv3 (exports configurable, read-only or read-write).
    Nfs {
        #[command(flatten)]
        cluster: ClusterOpt,
        #[command(flatten)]
        args: nfs::NfsArgs,
    },
    /// Dataset tools: synth, pack (WebDataset tar / TFRecord), expand, resize.
    Dataset {
        #[command(flatten)]
        cluster: ClusterOpt,
        #[command(subcommand)]
        cmd: dataset::DatasetCmd,
    },
    /// Runs the demo: a 6-node 4+2 cluster, a dataset of mixed file sizes, node loss, verification.
    Demo(demo::DemoArgs),
}

impl Command {
    /// The `--cluster` given after the command name, and whether the command takes one at all.
    fn cluster_opt(&self) -> Option<Option<&String>> {
        let opt = match self {
            Command::Status { cluster, .. }
            | Command::Put { cluster, .. }
            | Command::Get { cluster, .. }
            | Command::Cat { cluster, .. }
            | Command::Ls { cluster, .. }
            | Command::Stat { cluster, .. }
            | Command::Du { cluster, .. }
            | Command::Mkdir { cluster, .. }
            | Command::Mv { cluster, .. }
            | Command::Rm { cluster, .. }
            | Command::S3 { cluster, .. }
            | Command::Nfs { cluster, .. }
            | Command::Dataset { cluster, .. }
            | Command::Node(
                NodeCmd::Drain { cluster, .. } | NodeCmd::Undrain { cluster, .. } | NodeCmd::Remove { cluster, .. },
            ) => cluster,
            Command::Pool(cmd) => cmd.cluster(),
            Command::Policy(cmd) => cmd.cluster(),
            Command::Ingest(cmd) => cmd.cluster(),
            Command::Job(cmd) => cmd.cluster(),
            Command::Quota(cmd) => cmd.cluster(),
            Command::Trash(cmd) => cmd.cluster(),
            Command::Tenant(cmd) => cmd.cluster(),
            Command::User(cmd) => cmd.cluster(),
            Command::S3Key(cmd) => cmd.cluster(),
            Command::Snapshot(cmd) => cmd.cluster(),
            Command::Clone(args) => &args.cluster,
            Command::Retain(args) => &args.cluster,
            Command::Mount(args) => &args.cluster,
            Command::Stats(args) => &args.cluster,
            Command::Events(args) => &args.cluster,
            Command::Bench(args) => args.cluster(),
            Command::Meta { .. }
            | Command::Storage { .. }
            | Command::Cluster(_)
            | Command::Encryption(_)
            | Command::Node(NodeCmd::Add { .. })
            | Command::Umount(_)
            | Command::Demo(_) => return None,
        };
        Some(opt.cluster.as_ref())
    }

    /// The command's name, for messages.
    fn name(&self) -> &'static str {
        match self {
            Command::Meta { .. } => "meta",
            Command::Storage { .. } => "storage",
            Command::Cluster(_) => "cluster",
            Command::Encryption(_) => "encryption",
            Command::Node(NodeCmd::Add { .. }) => "node add",
            Command::Umount(_) => "umount",
            Command::Demo(_) => "demo",
            _ => "this command",
        }
    }
}

fn main() {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // `--cluster` before the name of a command that talks to no cluster would be ignored: say
    // so. (From TROVE_CLUSTER it is fine: the variable serves every command that needs it.)
    let given = matches.value_source("cluster") == Some(clap::parser::ValueSource::CommandLine);
    if given && cli.command.cluster_opt().is_none() {
        eprintln!("trove: `trove {}` talks to no cluster; --cluster is not one of its options", cli.command.name());
        std::process::exit(2);
    }
    // After the command name beats before it, and both beat TROVE_CLUSTER.
    if let Some(Some(after)) = cli.command.cluster_opt() {
        cli.cluster = Some(after.clone());
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROVE_LOG").unwrap_or_else(|_| "warn".into());
    // The line a service logs once it listens (target `trove::ready`) is always kept: `trove
    // cluster start` waits for it, whatever level TROVE_LOG asks for.
    let filter = match "trove::ready=info".parse() {
        Ok(ready) => filter.add_directive(ready),
        Err(_) => filter,
    };
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("trove: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(run(cli));
    if let Err(e) = result {
        eprintln!("trove: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> Result<()> {
    // The cluster of the commands that take one (see `main`).
    let cluster = cli.cluster;
    if cli.command.cluster_opt().is_some() {
        credentials::install_for_command(cluster.as_deref(), cli.credentials.as_deref())?;
    }
    match cli.command {
        Command::Meta { config: path } => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let config: meta::MetaConfig =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad metadata config {}: {e}", path.display()))?;
            credentials::install_for_service(config.tls.as_deref(), config.plaintext, &path)?;
            let settings = jobs::Settings::of(&config).map_err(|e| anyhow::anyhow!("bad metadata config: {e}"))?;
            // Bound before the service starts, so that a taken port fails the start.
            let exporter = match &config.metrics_listen {
                Some(listen) => Some(metrics::http::bind(listen)?),
                None => None,
            };
            let exported = config.clone();
            meta::server::run_with(config, move |service, addr| {
                let http = exporter.map(|l| telemetry::serve_meta(l, &service, &addr, &exported));
                if let Some(Err(e)) = &http {
                    tracing::warn!("{e:#}");
                }
                (jobs::spawn(service, addr, settings), http)
            })
            .await
        }
        Command::Node(NodeCmd::Add { config: path }) | Command::Storage { config: path } => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let config: storage::StorageConfig =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad storage config {}: {e}", path.display()))?;
            credentials::install_for_service(config.tls.as_deref(), config.plaintext, &path)?;
            if config.metrics_listen.is_some() {
                telemetry::bridge_wire();
            }
            storage::run(config).await
        }
        Command::Cluster(cmd) => cluster::run(cmd).await,
        Command::Encryption(cmd) => encryption::run(cmd),
        Command::Demo(args) => demo::run(args).await,
        Command::Dataset { cmd, .. } => dataset::run(cmd, cluster).await,
        Command::S3 { args, .. } => s3::run(args, cluster).await,
        Command::Nfs { args, .. } => nfs::run(args, cluster).await,
        Command::Bench(args) => bench::run(args, cluster).await,
        Command::Mount(args) => mount::mount(args, cluster).await,
        Command::Umount(args) => mount::umount(args),
        Command::Status { json, .. } => cmds::status(&cmds::connect(cluster).await?, json).await,
        Command::Stats(args) => stats::stats(args, cluster).await,
        Command::Events(args) => stats::events(args, cluster).await,
        Command::Node(NodeCmd::Drain { id, force, .. }) => {
            cmds::node_state(&cmds::connect(cluster).await?, id, wire::NodeState::Draining, force).await
        }
        Command::Node(NodeCmd::Undrain { id, .. }) => {
            cmds::node_state(&cmds::connect(cluster).await?, id, wire::NodeState::Up, false).await
        }
        Command::Node(NodeCmd::Remove { id, force, .. }) => {
            cmds::node_state(&cmds::connect(cluster).await?, id, wire::NodeState::Out, force).await
        }
        Command::Put { local, remote, .. } => cmds::put(&cmds::connect(cluster).await?, &local, &remote).await,
        Command::Get { remote, local, .. } => {
            let client = cmds::connect(cluster).await?;
            let got = cmds::get(&client, &remote, &local).await;
            // The read moves the file's atime before the process ends.
            client.send_atimes().await;
            got
        }
        Command::Cat { remote, .. } => cmds::cat(&cmds::connect(cluster).await?, &remote).await,
        Command::Ls { remote, long, .. } => cmds::ls(&cmds::connect(cluster).await?, &remote, long).await,
        Command::Stat { remote, layout: false, .. } => cmds::stat(&cmds::connect(cluster).await?, &remote).await,
        Command::Stat { remote, layout: true, json, .. } => {
            pools::stat_layout(&cmds::connect(cluster).await?, &remote, json).await
        }
        Command::Du { remote, json, .. } => pools::du_by_pool(&cmds::connect(cluster).await?, &remote, json).await,
        Command::Pool(cmd) => pools::run(cmd, &cmds::connect(cluster).await?).await,
        Command::Policy(cmd) => policy::run(cmd, &cmds::connect(cluster).await?).await,
        Command::Ingest(cmd) => ingest::run(cmd, &cmds::connect(cluster).await?).await,
        Command::Job(cmd) => job::run(cmd, &cmds::connect(cluster).await?).await,
        Command::Quota(cmd) => quota::run(cmd, &cmds::connect(cluster).await?).await,
        Command::Trash(cmd) => quota::run_trash(cmd, &cmds::connect(cluster).await?).await,
        Command::Tenant(cmd) => identity::run_tenant(cmd, &cmds::connect(cluster).await?).await,
        Command::User(cmd) => identity::run_user(cmd, &cmds::connect(cluster).await?).await,
        Command::S3Key(cmd) => identity::run_key(cmd, &cmds::connect(cluster).await?).await,
        Command::Snapshot(cmd) => snapshot::run(cmd, &cmds::connect(cluster).await?).await,
        Command::Clone(args) => clone::run(args, &cmds::connect(cluster).await?).await,
        Command::Retain(args) => snapshot::retain(args, &cmds::connect(cluster).await?).await,
        Command::Mkdir { remote, ec, no_redundancy, pool, .. } => {
            cmds::mkdir(&cmds::connect(cluster).await?, &remote, ec, no_redundancy, pool.as_deref()).await
        }
        Command::Mv { from, to, .. } => cmds::mv(&cmds::connect(cluster).await?, &from, &to).await,
        Command::Rm { remote, recursive, .. } => cmds::rm(&cmds::connect(cluster).await?, &remote, recursive).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every subcommand, with the path of subcommands leading to it.
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for arg in cmd.get_arguments() {
            out.push((path.to_string(), arg.clone()));
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    /// `--cluster` is offered exactly by the commands that talk to a cluster.
    #[test]
    fn only_commands_that_talk_to_a_cluster_offer_cluster() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut args = Vec::new();
        walk(&cmd, "trove", &mut args);
        let with: std::collections::BTreeSet<&str> =
            args.iter().filter(|(_, a)| a.get_id() == "cluster").map(|(path, _)| path.as_str()).collect();
        for uses in [
            "trove",
            "trove status",
            "trove stats",
            "trove events",
            "trove ls",
            "trove put",
            "trove mount",
            "trove s3",
            "trove nfs",
            "trove bench train",
            "trove node drain",
            "trove pool list",
            "trove policy test",
            "trove du",
        ] {
            assert!(with.contains(uses), "`{uses}` does not offer --cluster");
        }
        for ignores in [
            "trove meta",
            "trove storage",
            "trove cluster start",
            "trove cluster stop",
            "trove node add",
            "trove umount",
            "trove demo",
        ] {
            assert!(!with.contains(ignores), "`{ignores}` offers --cluster, which it would ignore");
        }
    }

    #[test]
    fn every_argument_has_help_text() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut args = Vec::new();
        walk(&cmd, "trove", &mut args);
        let missing: Vec<String> = args
            .iter()
            .filter(|(_, a)| !matches!(a.get_id().as_str(), "help" | "version"))
            .filter(|(_, a)| a.get_help().is_none() && a.get_long_help().is_none())
            .map(|(path, a)| format!("{path}: {}", a.get_id()))
            .collect();
        assert!(missing.is_empty(), "arguments without help text:\n{}", missing.join("\n"));
    }
}
