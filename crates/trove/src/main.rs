//! `trove`: one binary for every role of a Trove cluster and every tool around it.
//!
//! - roles: `trove meta` and `trove storage` run one service from a TOML config;
//! - `trove cluster ...` starts and stops a local cluster of separate processes on loopback;
//! - `trove put/get/cat/ls/stat/mkdir/mv/rm/status` talk to a cluster through the client
//!   library;
//! - `trove demo` shows the whole system at work: write, verify, lose nodes, verify again.

mod bench;
mod cluster;
mod cmds;
mod data;
mod dataset;
mod demo;
mod mover;
mod mount;
mod nfs;
mod s3;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "trove", version, about = "Trove: a scale-out, erasure-coded file system for GPU training data")]
struct Cli {
    /// The cluster to talk to: the metadata service's HOST:PORT, or the directory of a local
    /// cluster started with `trove cluster start`.
    #[arg(long, short = 'c', global = true, env = "TROVE_CLUSTER")]
    cluster: Option<String>,
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
    },
    /// Cancels a drain: the node takes new data again.
    Undrain { id: wire::NodeId },
    /// Removes a node at once: its shards are rebuilt from the others (use drain to move them
    /// first while it still serves). Refused when the nodes left could not hold a scheme in use.
    Remove {
        /// The node's id (see `trove status`).
        id: wire::NodeId,
        /// Remove even if the nodes left cannot hold a scheme in use: such chunks are then
        /// re-encoded narrower until nodes are added.
        #[arg(long)]
        force: bool,
    },
    /// Joins a new storage node: runs its storage service from a TOML config (as `trove
    /// storage`). It registers, a placement map including it is published, and the lease
    /// holder's mover rebalances shards onto it.
    Add {
        #[arg(long)]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Runs the metadata service (namespace, cluster manager) from a TOML config.
    Meta {
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs a storage service (one node's drives) from a TOML config.
    Storage {
        #[arg(long)]
        config: PathBuf,
    },
    /// Starts, stops and injects faults into a local cluster of separate processes.
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// Storage node lifecycle: drain (move data off while serving), undrain, remove, add.
    #[command(subcommand)]
    Node(NodeCmd),
    /// Shows nodes, drives, capacity, health, erasure schemes and degraded chunks.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Copies a local file into the cluster.
    Put {
        local: PathBuf,
        remote: String,
    },
    /// Copies a file from the cluster to a local path.
    Get {
        remote: String,
        local: PathBuf,
    },
    /// Writes a file's contents to standard output.
    Cat { remote: String },
    /// Lists a directory.
    Ls {
        #[arg(default_value = "/")]
        remote: String,
        /// Long listing with sizes, modes and times.
        #[arg(long, short = 'l')]
        long: bool,
    },
    /// Shows a file's attributes and layout.
    Stat { remote: String },
    /// Creates directories (with parents).
    Mkdir {
        remote: String,
        /// Erasure scheme new files below inherit, e.g. 8+2 or 1+2 (replication); refused when
        /// wider than the cluster's storage nodes.
        #[arg(long)]
        ec: Option<wire::EcScheme>,
        /// Allow a scheme without parity (K+0): losing any one node then loses data.
        #[arg(long)]
        no_redundancy: bool,
    },
    /// Renames or moves a file or directory.
    Mv { from: String, to: String },
    /// Removes a file, or a directory with -r.
    Rm {
        remote: String,
        #[arg(long, short = 'r')]
        recursive: bool,
    },
    /// Mounts a cluster as a POSIX file system (FUSE); stays in the foreground until unmounted.
    Mount(mount::MountArgs),
    /// Unmounts a Trove mount.
    Umount(mount::UmountArgs),
    /// Validation suite: fio-, mdtest- and MLPerf-Storage-style benchmarks on a cluster or a directory.
    Bench(bench::BenchArgs),
    /// Serves the cluster over S3 (buckets are top-level directories, keys are paths).
    S3(s3::S3Args),
    /// Serves the cluster over NFSv3 (exports configurable, read-only or read-write).
    Nfs(nfs::NfsArgs),
    /// Dataset tools: synth, pack (WebDataset tar / TFRecord), expand, resize.
    #[command(subcommand)]
    Dataset(dataset::DatasetCmd),
    /// Runs the demo: a 6-node 4+2 cluster, a dataset of mixed file sizes, node loss, verification.
    Demo(demo::DemoArgs),
}

fn main() {
    let cli = Cli::parse();
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
    let cluster = cli.cluster;
    match cli.command {
        Command::Meta { config } => {
            let text = std::fs::read_to_string(&config).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", config.display()))?;
            let config: meta::MetaConfig =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad metadata config {}: {e}", config.display()))?;
            let settings = mover::Settings::of(&config);
            meta::server::run_with(config, move |service, addr| mover::spawn(service, addr, settings)).await
        }
        Command::Node(NodeCmd::Add { config }) | Command::Storage { config } => {
            let text = std::fs::read_to_string(&config).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", config.display()))?;
            let config: storage::StorageConfig =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad storage config {}: {e}", config.display()))?;
            storage::run(config).await
        }
        Command::Cluster(cmd) => cluster::run(cmd).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Dataset(cmd) => dataset::run(cmd, cluster).await,
        Command::S3(args) => s3::run(args, cluster).await,
        Command::Nfs(args) => nfs::run(args, cluster).await,
        Command::Bench(args) => bench::run(args, cluster).await,
        Command::Mount(args) => mount::mount(args).await,
        Command::Umount(args) => mount::umount(args),
        Command::Status { json } => cmds::status(&cmds::connect(cluster).await?, json).await,
        Command::Node(NodeCmd::Drain { id, force }) => {
            cmds::node_state(&cmds::connect(cluster).await?, id, wire::NodeState::Draining, force).await
        }
        Command::Node(NodeCmd::Undrain { id }) => cmds::node_state(&cmds::connect(cluster).await?, id, wire::NodeState::Up, false).await,
        Command::Node(NodeCmd::Remove { id, force }) => {
            cmds::node_state(&cmds::connect(cluster).await?, id, wire::NodeState::Out, force).await
        }
        Command::Put { local, remote } => cmds::put(&cmds::connect(cluster).await?, &local, &remote).await,
        Command::Get { remote, local } => cmds::get(&cmds::connect(cluster).await?, &remote, &local).await,
        Command::Cat { remote } => cmds::cat(&cmds::connect(cluster).await?, &remote).await,
        Command::Ls { remote, long } => cmds::ls(&cmds::connect(cluster).await?, &remote, long).await,
        Command::Stat { remote } => cmds::stat(&cmds::connect(cluster).await?, &remote).await,
        Command::Mkdir { remote, ec, no_redundancy } => cmds::mkdir(&cmds::connect(cluster).await?, &remote, ec, no_redundancy).await,
        Command::Mv { from, to } => cmds::mv(&cmds::connect(cluster).await?, &from, &to).await,
        Command::Rm { remote, recursive } => cmds::rm(&cmds::connect(cluster).await?, &remote, recursive).await,
    }
}
