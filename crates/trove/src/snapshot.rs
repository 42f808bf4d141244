//! Snapshots of directory trees from the command line: `trove snapshot create|list|delete|diff|
//! restore`. The metadata service does the work (a snapshot is two records, see the meta
//! crate's `snapshot` module); this file resolves paths and prints what it answers. `push` and
//! `pull`, to and from S3 buckets, are `snapshot_object`'s. `trove retain` locks a live tree
//! (WORM) as `snapshot retain` locks a snapshot.

use crate::cmds::{human_bytes, ClusterOpt};
use anyhow::{anyhow, Context, Result};
use client::Client;
use wire::{ChangeKind, SnapshotInfo};

/// `trove retain PATH --for DURATION`.
#[derive(clap::Args)]
pub struct RetainArgs {
    /// The directory tree (or file) to lock.
    pub remote: String,
    /// For how long from now (e.g. 30d, 24h, 90s).
    #[arg(long = "for", value_name = "DURATION", value_parser = crate::quota::parse_duration_ms)]
    pub duration: u64,
    #[command(flatten)]
    pub cluster: ClusterOpt,
}

/// Locks a tree until now + the duration.
pub async fn retain(args: RetainArgs, client: &Client) -> Result<()> {
    let attr = client.resolve(&args.remote).await.map_err(|e| anyhow!("{}: {e}", args.remote))?;
    let until = now_ms().saturating_add(args.duration);
    match client.meta(wire::MetaOp::RetainTree { ino: attr.ino, until_ms: until }).await {
        Ok(wire::MetaReply::Retained { inodes, until_ms }) => {
            println!(
                "{} locked until {} UTC ({inodes} files and directories): nothing in it can be changed, renamed or deleted before then",
                args.remote,
                when(until_ms)
            );
            Ok(())
        }
        Ok(other) => Err(anyhow!("{}", client::unexpected(&other))),
        Err(e) => Err(anyhow!("cannot lock {}: {e}", args.remote)),
    }
}

#[derive(clap::Subcommand)]
pub enum SnapshotCmd {
    /// Takes a snapshot of a directory tree: instant, whatever its size, and read-only; it is
    /// browsed at PATH/.snapshots/NAME.
    Create {
        /// The directory, e.g. /datasets/v1.
        remote: String,
        /// The snapshot's name (unique among the directory's snapshots).
        name: String,
        /// Lock it (WORM) from the start for this long (e.g. 30d, 24h): nothing can delete it
        /// before then, not even `trove snapshot delete`.
        #[arg(long, value_name = "DURATION", value_parser = crate::quota::parse_duration_ms)]
        retain: Option<u64>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Locks a snapshot (WORM) until a date: it cannot be deleted before then by anyone. The
    /// date can be moved later, never earlier.
    Retain {
        /// The snapshotted directory.
        remote: String,
        /// The snapshot's name.
        name: String,
        /// For how long from now (e.g. 30d, 24h).
        #[arg(long = "for", value_name = "DURATION", value_parser = crate::quota::parse_duration_ms)]
        duration: u64,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists snapshots (of one directory, or of all) with when they were taken and the bytes
    /// only each holds (what deleting it frees).
    List {
        /// The directory whose snapshots to list; all snapshots when absent.
        remote: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Deletes a snapshot; the data only it held is freed by the garbage collector.
    Delete {
        /// The snapshotted directory.
        remote: String,
        /// The snapshot's name.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists the paths added (+), removed (-) or changed (M) from snapshot A to snapshot B, or
    /// to the live tree when B is absent.
    Diff {
        /// The snapshotted directory.
        remote: String,
        /// The older snapshot.
        a: String,
        /// The newer snapshot; the live tree when absent.
        b: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Brings a file or the whole tree back from a snapshot, into the same place in the live
    /// tree (files as they were, sharing their data with the snapshot; missing directories
    /// made again; files created since are left alone).
    Restore {
        /// The snapshotted directory.
        remote: String,
        /// The snapshot's name.
        name: String,
        /// The file or directory to restore, relative to the snapshotted directory; the whole
        /// tree when absent.
        file: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Uploads a snapshot (its tree and data) to an S3 bucket: only the chunks the bucket does
    /// not hold yet travel; every byte is checksummed. The S3 store is named by --endpoint (or
    /// $AWS_ENDPOINT_URL), its key by --access-key-id and $AWS_SECRET_ACCESS_KEY (or
    /// --secret-access-key-file).
    Push(crate::snapshot_object::PushArgs),
    /// Rebuilds a snapshot pushed to an S3 bucket as a new directory of this cluster,
    /// bit-exact, every chunk checked against its SHA-256.
    Pull(crate::snapshot_object::PullArgs),
}

impl SnapshotCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            SnapshotCmd::Create { cluster, .. }
            | SnapshotCmd::List { cluster, .. }
            | SnapshotCmd::Delete { cluster, .. }
            | SnapshotCmd::Diff { cluster, .. }
            | SnapshotCmd::Restore { cluster, .. }
            | SnapshotCmd::Retain { cluster, .. } => cluster,
            SnapshotCmd::Push(args) => &args.cluster,
            SnapshotCmd::Pull(args) => &args.cluster,
        }
    }
}

async fn dir_ino(client: &Client, remote: &str) -> Result<wire::Ino> {
    let attr = client.resolve(remote).await.map_err(|e| anyhow!("{remote}: {e}"))?;
    if attr.kind != wire::FileKind::Dir {
        return Err(anyhow!("{remote} is not a directory"));
    }
    Ok(attr.ino)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

fn when(ms: u64) -> String {
    crate::quota::chrono_like(ms)
}

fn json(s: &SnapshotInfo) -> serde_json::Value {
    serde_json::json!({
        "id": s.id, "name": s.name, "root": s.root,
        "created_ms": s.created_ms, "bytes_exclusive": s.bytes_exclusive,
        "retain_until_ms": s.retain_until_ms,
    })
}

pub async fn run(cmd: SnapshotCmd, client: &Client) -> Result<()> {
    match cmd {
        SnapshotCmd::Push(args) => crate::snapshot_object::run_push(args, client).await?,
        SnapshotCmd::Pull(args) => crate::snapshot_object::run_pull(args, client).await?,
        SnapshotCmd::Create { remote, name, retain, .. } => {
            let root = dir_ino(client, &remote).await?;
            let until = retain.map_or(0, |ms| now_ms().saturating_add(ms));
            let s = client
                .snapshot_create(root, &name, until)
                .await
                .with_context(|| format!("cannot snapshot {remote}"))?;
            println!(
                "snapshot {} of {remote} taken at {} (browse it at {}/.snapshots/{})",
                s.name,
                when(s.created_ms),
                remote.trim_end_matches('/'),
                s.name
            );
            if s.retain_until_ms != 0 {
                println!("locked until {} UTC: nothing can delete it before then", when(s.retain_until_ms));
            }
        }
        SnapshotCmd::Retain { remote, name, duration, .. } => {
            let root = dir_ino(client, &remote).await?;
            let s = client
                .snapshot_retain(root, &name, now_ms().saturating_add(duration))
                .await
                .with_context(|| format!("cannot lock snapshot {name} of {remote}"))?;
            println!(
                "snapshot {name} of {remote} locked until {} UTC: nothing can delete it before then",
                when(s.retain_until_ms)
            );
        }
        SnapshotCmd::List { remote, json: as_json, .. } => {
            let root = match &remote {
                Some(r) => Some(dir_ino(client, r).await?),
                None => None,
            };
            let all = client.snapshots(root).await?;
            if as_json {
                let list: Vec<_> = all.iter().map(json).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if all.is_empty() {
                println!("no snapshots");
            } else {
                println!("{:<24} {:<24} {:>12} {:>10}  RETAINED UNTIL", "NAME", "CREATED", "EXCLUSIVE", "DIR INODE");
                let now = now_ms();
                for s in &all {
                    let retained = if s.retain_until_ms > now { when(s.retain_until_ms) } else { "-".to_string() };
                    println!(
                        "{:<24} {:<24} {:>12} {:>10}  {retained}",
                        s.name,
                        when(s.created_ms),
                        human_bytes(s.bytes_exclusive),
                        s.root
                    );
                }
            }
        }
        SnapshotCmd::Delete { remote, name, .. } => {
            let root = dir_ino(client, &remote).await?;
            client
                .snapshot_delete(root, &name)
                .await
                .with_context(|| format!("cannot delete snapshot {name} of {remote}"))?;
            println!("snapshot {name} of {remote} deleted");
        }
        SnapshotCmd::Diff { remote, a, b, .. } => {
            let root = dir_ino(client, &remote).await?;
            let (changes, cut) = client.snapshot_diff(root, &a, b.as_deref()).await?;
            for c in &changes {
                let mark = match c.change {
                    ChangeKind::Added => '+',
                    ChangeKind::Removed => '-',
                    ChangeKind::Changed => 'M',
                };
                println!("{mark} {}", c.path);
            }
            if cut {
                println!("(the list stops here: more paths differ)");
            }
        }
        SnapshotCmd::Restore { remote, name, file, .. } => {
            let root = dir_ino(client, &remote).await?;
            let path = file.unwrap_or_default();
            let (files, dirs, skipped) = client
                .snapshot_restore(root, &name, &path)
                .await
                .with_context(|| format!("cannot restore {path:?} from snapshot {name} of {remote}"))?;
            println!("restored {files} files and {dirs} directories from snapshot {name}");
            if skipped > 0 {
                println!("{skipped} entries were left out (another kind of file holds the name, or not a file or directory); the metadata server's log names them");
            }
        }
    }
    Ok(())
}
