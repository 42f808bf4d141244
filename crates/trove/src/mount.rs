//! `trove mount` and `trove umount`: the POSIX mount's command line.
//!
//! `trove mount CLUSTER MOUNTPOINT` stays in the foreground serving the file system until it is
//! unmounted (`trove umount`, `umount`) or gets SIGINT/SIGTERM, on which it unmounts cleanly
//! (lazily if files are still open) and exits. The file system itself is the `mount` crate.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct MountArgs {
    /// The cluster: the metadata service's HOST:PORT, or a local cluster directory.
    #[arg(value_name = "CLUSTER")]
    pub target: String,
    /// An empty directory to mount on.
    pub mount_point: PathBuf,
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
    /// Bypass the kernel page cache for file data.
    #[arg(long)]
    pub direct_io: bool,
    /// Mount read-only.
    #[arg(long)]
    pub read_only: bool,
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
}

#[derive(Args)]
pub struct UmountArgs {
    /// Where a Trove file system is mounted.
    pub mount_point: PathBuf,
    /// Detach now even if files are open; the file system goes away at the last close.
    #[arg(long, short = 'l')]
    pub lazy: bool,
}

pub async fn mount(args: MountArgs) -> Result<()> {
    let addr = crate::cluster::meta_addr_of(&args.target)?;
    // Check the mount point before connecting, so its problems are reported first and fast.
    mount::check_mount_point(&args.mount_point)?;
    let client_options =
        client::ClientOptions { readahead_chunks_max: args.readahead_chunks.max(1), ..Default::default() };
    let client = client::Client::connect_with(&addr, client_options)
        .await
        .map_err(|e| anyhow!("cannot reach the Trove cluster at {addr}: {e}"))?;
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
        ..Default::default()
    };
    let runtime = tokio::runtime::Handle::current();
    let mount_point = args.mount_point.clone();
    // Mounting blocks until the kernel's INIT handshake is done: keep it off the async threads.
    let mounted = tokio::task::spawn_blocking(move || mount::mount(client, runtime, &mount_point, &options))
        .await
        .context("the mount task failed")??;
    eprintln!("trove: mounted {addr} on {} (unmount with Ctrl-C or `trove umount`)", mounted.mount_point().display());
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

pub fn umount(args: UmountArgs) -> Result<()> {
    mount::unmount(&args.mount_point, args.lazy)?;
    Ok(())
}
