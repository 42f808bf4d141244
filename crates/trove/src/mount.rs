//! `trove mount` and `trove umount`: the POSIX mount's command line.
//!
//! `trove mount --cluster CLUSTER MOUNTPOINT` (or with `TROVE_CLUSTER` set, like every command
//! that talks to a cluster) stays in the foreground serving the file system until it is
//! unmounted (`trove umount`, `umount`) or gets SIGINT/SIGTERM, on which it unmounts cleanly
//! (lazily if files are still open) and exits. The file system itself is the `mount` crate.
//! The first form, `trove mount CLUSTER MOUNTPOINT`, still works (scripts and systemd units
//! use it).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct MountArgs {
    #[command(flatten)]
    pub cluster: crate::cmds::ClusterOpt,
    /// An empty directory to mount on.
    #[arg(value_name = "MOUNTPOINT")]
    pub first: PathBuf,
    /// The mount point when the cluster is given first (`trove mount CLUSTER MOUNTPOINT`, the
    /// form before --cluster).
    #[arg(value_name = "MOUNTPOINT", hide = true)]
    pub second: Option<PathBuf>,
    /// How long the kernel caches attributes (size, mode, times), in milliseconds. Longer is
    /// faster for metadata-heavy work; changes made by other hosts show up after at most this.
    #[arg(long, default_value_t = 1000)]
    pub attr_timeout_ms: u64,
    /// How long the kernel caches name lookups, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub entry_timeout_ms: u64,
    /// Threads reading FUSE requests (the work itself runs on the async runtime).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The kernel's read-ahead window in KiB (0 keeps the kernel default of 128).
    #[arg(long, default_value_t = 8192)]
    pub read_ahead_kb: u32,
    /// Most chunks the client reads ahead of a sequential reader.
    #[arg(long, default_value_t = 8)]
    pub readahead_chunks: usize,
    /// MiB of whole chunks the mount keeps in memory for every file, open or closed (read,
    /// read ahead, fetched for random reads that come back, or just written); past it the
    /// least recently used are let go. 0: none.
    #[arg(long, default_value_t = client::CACHE_BYTES_MAX_DEFAULT >> 20)]
    pub chunk_cache_mib: u64,
    /// Where whole chunks are also kept on local disk, below the memory cache: chunks read
    /// whole or fetched for random reads that came back, so the next epoch, another process
    /// or this mount started again reads them locally (verified against their records every
    /// time). Each cluster gets a directory of its own in it, used by one mount at a time.
    /// Default: /var/cache/trove as root, else $XDG_CACHE_HOME/trove or ~/.cache/trove.
    #[arg(long, env = "TROVE_DISK_CACHE_DIR", value_name = "DIR")]
    pub disk_cache_dir: Option<PathBuf>,
    /// MiB of chunks kept in the disk cache at most; it also leaves 10% of its file system
    /// free. 0: no disk cache.
    #[arg(long, default_value_t = client::DISK_CACHE_BYTES_MAX_DEFAULT >> 20)]
    pub disk_cache_mib: u64,
    /// Bypass the kernel page cache for file data.
    #[arg(long)]
    pub direct_io: bool,
    /// Mount read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Reads leave access times alone (by default a read records the file's access, relatime
    /// style and batched, which file pool policies by last access use).
    #[arg(long)]
    pub noatime: bool,
    /// Only the mounting user may use the mount (default: everyone, with permissions checked).
    #[arg(long)]
    pub owner_only: bool,
    /// Keep fcntl/flock locks in this host's kernel (coherent within this mount only) instead
    /// of the cluster's lock manager.
    #[arg(long)]
    pub local_locks: bool,
    /// How long the cluster keeps this mount's locks after losing contact with it, in
    /// milliseconds (a crashed client's locks are released after this).
    #[arg(long, default_value_t = 10_000)]
    pub lock_lease_ms: u64,
    /// How long what an open fetched (attributes, first chunk records) answers later opens of
    /// the same file, in milliseconds. 0 asks the cluster at every open, so a file changed on
    /// another host is seen whole at the next open (close-to-open); more saves a round trip per
    /// open of a file opened again soon, and other hosts' changes show after at most this.
    #[arg(long, default_value_t = 0)]
    pub open_cache_ms: u64,
    #[command(flatten)]
    pub metrics: crate::telemetry::MetricsOpt,
}

#[derive(Args)]
pub struct UmountArgs {
    /// Where a Trove file system is mounted.
    pub mount_point: PathBuf,
    /// Detach now even if files are open; the file system goes away at the last close.
    #[arg(long, short = 'l')]
    pub lazy: bool,
}

/// `cluster` is the one given before the command name or by TROVE_CLUSTER; `--cluster` after it
/// (in `args`) was already preferred by the caller.
pub async fn mount(args: MountArgs, cluster: Option<String>) -> Result<()> {
    let (cluster, mount_point) = match args.second {
        // The first form: `trove mount CLUSTER MOUNTPOINT`.
        Some(mount_point) => {
            let positional = args.first.to_string_lossy().into_owned();
            if let Some(option) = &args.cluster.cluster {
                if *option != positional {
                    bail!("two clusters given: --cluster {option} and {positional}; give it once (`trove mount --cluster CLUSTER MOUNTPOINT`)");
                }
            }
            (Some(positional), mount_point)
        }
        None => (cluster, args.first),
    };
    let Some(cluster) = cluster else {
        bail!("no cluster given: pass --cluster HOST:PORT (or a local cluster directory), or set TROVE_CLUSTER");
    };
    // A cluster directory given in the first form brings its admin credential, as `--cluster`
    // does (an explicit `--credentials` was installed already).
    crate::credentials::install_if_none(&cluster)?;
    let addr = crate::cluster::meta_addr_of(&cluster)?;
    // Check the mount point before connecting, so its problems are reported first and fast.
    mount::check_mount_point(&mount_point)?;
    let disk_cache = match (args.disk_cache_mib, args.disk_cache_dir) {
        (0, _) => None,
        (mib, Some(dir)) => {
            Some(client::DiskCacheOptions { dir, bytes_max: mib.saturating_mul(1 << 20), required: true })
        }
        (mib, None) => default_disk_cache_dir().map(|dir| client::DiskCacheOptions {
            dir,
            bytes_max: mib.saturating_mul(1 << 20),
            required: false,
        }),
    };
    let client_options = client::ClientOptions {
        readahead_chunks_max: args.readahead_chunks.max(1),
        cache_bytes_max: args.chunk_cache_mib.saturating_mul(1 << 20),
        disk_cache,
        atime: !args.noatime,
        ..Default::default()
    };
    let exporter = crate::telemetry::bind(&args.metrics)?;
    let client = crate::cmds::connect_with(Some(cluster), client_options).await?;
    let disk_cache_note = match client.disk_cache_dir() {
        Some(dir) => format!("disk cache {}", dir.display()),
        None => "no disk cache".to_string(),
    };
    let announcer = client.clone();
    let options = mount::MountOptions {
        attr_timeout: Duration::from_millis(args.attr_timeout_ms),
        entry_timeout: Duration::from_millis(args.entry_timeout_ms),
        threads: args.threads.max(1),
        read_ahead_kb: args.read_ahead_kb,
        allow_other: !args.owner_only,
        read_only: args.read_only,
        direct_io: args.direct_io,
        fs_name: format!("trove:{addr}"),
        cluster_locks: !args.local_locks,
        lock_lease: Duration::from_millis(args.lock_lease_ms.max(300)),
        open_cache: Duration::from_millis(args.open_cache_ms),
        ..Default::default()
    };
    let runtime = tokio::runtime::Handle::current();
    // Mounting blocks until the kernel's INIT handshake is done: keep it off the async threads.
    let mounted = tokio::task::spawn_blocking(move || mount::mount(client, runtime, &mount_point, &options))
        .await
        .context("the mount task failed")??;
    eprintln!(
        "trove: mounted {addr} on {} ({disk_cache_note}; unmount with Ctrl-C or `trove umount`)",
        mounted.mount_point().display()
    );
    let point = mounted.mount_point().display().to_string();
    crate::telemetry::serve_front(exporter, &announcer, "mount", &point, "", "")?;
    let (mut unmounter, session) = mounted.split();
    let mut session_done = tokio::task::spawn_blocking(move || session.join());
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        ended = &mut session_done => {
            // Unmounted from outside: the session is over.
            ended.context("the FUSE session task failed")?.context("the FUSE session failed")?;
            return Ok(());
        }
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("trove: unmounting");
    tokio::task::spawn_blocking(move || unmounter.unmount()).await.context("the unmount task failed")??;
    session_done.await.context("the FUSE session task failed")?.context("the FUSE session failed")?;
    Ok(())
}

/// The disk cache's directory when none is given: the system's cache directory as root, the
/// user's otherwise (XDG), as JuiceFS picks `/var/jfsCache` or `~/.juicefs/cache`.
fn default_disk_cache_dir() -> Option<PathBuf> {
    if rustix::process::geteuid().is_root() {
        return Some(PathBuf::from("/var/cache/trove"));
    }
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()).map(PathBuf::from);
    xdg.or_else(|| std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("trove"))
}

pub fn umount(args: UmountArgs) -> Result<()> {
    mount::unmount(&args.mount_point, args.lazy)?;
    Ok(())
}
