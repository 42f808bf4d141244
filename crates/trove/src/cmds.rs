//! The file commands (`put`, `get`, `ls`, ...) and `status`: thin wrappers over the client
//! library with progress bars and plain-spoken errors.

use anyhow::{anyhow, bail, Context, Result};
use client::{Client, ErrorCode, FileKind};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Read, Write};
use std::path::Path;

/// Bytes moved per read or write call of the copy commands.
const COPY_BLOCK_BYTES: usize = 4 << 20;

/// `--cluster` of every command that talks to a cluster. Only those commands have it, so the
/// help of the others does not offer an option they would ignore.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ClusterOpt {
    /// The cluster to talk to: the metadata service's HOST:PORT (several, comma-separated, to
    /// fail over between them), or the directory of a local cluster started with `trove
    /// cluster start`. Default: $TROVE_CLUSTER.
    #[arg(long, short = 'c', value_name = "CLUSTER")]
    pub cluster: Option<String>,
}

/// Connects to the cluster named by `--cluster` (an address or a local cluster directory).
pub async fn connect(cluster: Option<String>) -> Result<Client> {
    connect_with(cluster, client::ClientOptions::default()).await
}

/// [`connect`] with client options.
pub async fn connect_with(cluster: Option<String>, options: client::ClientOptions) -> Result<Client> {
    let Some(cluster) = cluster else {
        bail!("no cluster given: pass --cluster HOST:PORT (or a local cluster directory), or set TROVE_CLUSTER");
    };
    let addr = crate::cluster::meta_addr_of(&cluster)?;
    match Client::connect_with(&addr, options).await {
        Ok(client) => Ok(client),
        Err(e) => Err(unreachable(&cluster, &addr, &e)),
    }
}

/// How long the probe of an unreachable address waits for a TCP connection.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The error for a cluster that could not be reached, saying whether anything listens at its
/// address and, when nothing does, how to start it. Runs only after connecting failed.
pub fn unreachable(cluster: &str, addr: &str, e: &client::WireError) -> anyhow::Error {
    use std::net::ToSocketAddrs;
    // The client reports the last address it tried; a plain TCP connection to each tells a
    // stopped service (refused) from one that answered wrongly (the client's error says how).
    let refused: Vec<&str> = addr
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .filter(|a| {
            a.to_socket_addrs().ok().and_then(|mut it| it.next()).is_some_and(|sa| {
                matches!(std::net::TcpStream::connect_timeout(&sa, PROBE_TIMEOUT), Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused)
            })
        })
        .collect();
    if refused.is_empty() {
        return anyhow!("cannot reach the Trove cluster at {addr}: {e}");
    }
    let at = refused.join(", ");
    let local = Path::new(cluster).join(crate::cluster::STATE_FILE).exists();
    if local {
        let dir = Path::new(cluster).display();
        anyhow!("no Trove metadata service at {at}: connection refused; the local cluster in {dir} is not running: start it again with `trove cluster start --dir {dir}`")
    } else {
        anyhow!("no Trove metadata service at {at}: connection refused; is the cluster running? start a local one with `trove cluster start --dir DIR`")
    }
}

pub fn progress(bytes: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(bytes);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// `trove put`: copies a local file into the cluster atomically, like an S3 PUT: the bytes go to
/// a hidden temporary file in the destination directory, renamed onto the final name only once
/// all of them are stored. A failed or interrupted put leaves the old file (or nothing), never a
/// partial one; its temporary file is removed.
pub async fn put(client: &Client, local: &Path, remote: &str) -> Result<()> {
    let meta = std::fs::metadata(local).with_context(|| format!("cannot read {}", local.display()))?;
    if meta.is_dir() {
        bail!(
            "{} is a directory; trove put copies one file (mount the cluster with `trove mount` to copy trees)",
            local.display()
        );
    }
    let mut file = std::fs::File::open(local).with_context(|| format!("cannot open {}", local.display()))?;
    let len = meta.len();
    let remote = match client.resolve(remote).await {
        Ok(a) if a.kind == FileKind::Dir => {
            let name = local
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| anyhow!("{} has no file name", local.display()))?;
            format!("{}/{name}", remote.trim_end_matches('/'))
        }
        _ => remote.to_string(),
    };
    let (parent, name) = client.parent_of(&remote).await.map_err(|e| anyhow!("cannot create {remote}: {e}"))?;
    let name = name.to_string();
    if client::is_tmp_name(&name) {
        bail!(
            "cannot create {remote}: names beginning with {:?} are reserved for writes in progress",
            client::TMP_PREFIX
        );
    }
    if let Ok(existing) = client.lookup(parent, &name).await {
        if existing.kind == FileKind::Dir {
            bail!("cannot create {remote}: it is a directory");
        }
    }
    let tmp = client::tmp_name();
    let created = client.create(parent, &tmp, 0o644, true).await.map_err(|e| anyhow!("cannot create {remote}: {e}"))?;
    let copy = async {
        let mut handle = client.open(created.ino).await.map_err(|e| anyhow!("cannot create {remote}: {e}"))?;
        let bar = progress(len, "put");
        let mut buf = vec![0u8; COPY_BLOCK_BYTES];
        let mut offset = 0u64;
        loop {
            let n = read_full(&mut file, &mut buf).with_context(|| format!("cannot read {}", local.display()))?;
            if n == 0 {
                break;
            }
            handle.write_at(offset, &buf[..n]).await.map_err(|e| anyhow!("writing {remote}: {e}"))?;
            offset += n as u64;
            bar.set_position(offset);
        }
        handle.close().await.map_err(|e| anyhow!("writing {remote}: {e}"))?;
        bar.finish_and_clear();
        client
            .rename(parent, &tmp, parent, &name)
            .await
            .map_err(|e| anyhow!("cannot move the new {remote} into place: {e}"))
    };
    // Interrupted (Ctrl-C, SIGTERM) or failed: the temporary file goes, the old file stays.
    let outcome = tokio::select! {
        outcome = copy => outcome,
        _ = interrupted() => Err(anyhow!("interrupted; {remote} is unchanged")),
    };
    if outcome.is_err() {
        if let Err(e) = client.unlink(parent, &tmp).await {
            eprintln!("trove: cannot remove the temporary file {tmp:?} of {remote}: {e}");
        }
    }
    outcome
}

/// Resolves when the process is asked to stop (SIGINT or SIGTERM).
async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        // Without signal handlers the default action (exit) applies.
        _ => std::future::pending::<()>().await,
    }
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = file.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// `trove get`: copies a file from the cluster to a local path atomically: into a temporary
/// file beside the target, synced, then renamed onto it; a failed get leaves the old local file
/// (or nothing). Targets that are not regular files (`/dev/null`, a pipe) are written directly.
pub async fn get(client: &Client, remote: &str, local: &Path) -> Result<()> {
    let mut handle = client.open_path(remote).await.map_err(|e| anyhow!("cannot open {remote}: {e}"))?;
    let size = handle.size();
    let direct = std::fs::metadata(local).map(|m| !m.is_file()).unwrap_or(false);
    let target = if direct {
        local.to_path_buf()
    } else {
        let name = local.file_name().ok_or_else(|| anyhow!("{} names no file", local.display()))?;
        let mut tmp = std::ffi::OsString::from(".");
        tmp.push(name);
        tmp.push(client::tmp_name());
        local.with_file_name(tmp)
    };
    let copy = async {
        let mut out =
            if direct { std::fs::OpenOptions::new().write(true).open(&target) } else { std::fs::File::create(&target) }
                .with_context(|| format!("cannot create {}", local.display()))?;
        let bar = progress(size, "get");
        let mut offset = 0u64;
        while offset < size {
            let data = handle.read_at(offset, COPY_BLOCK_BYTES).await.map_err(|e| anyhow!("reading {remote}: {e}"))?;
            if data.is_empty() {
                break;
            }
            out.write_all(&data).with_context(|| format!("cannot write {}", local.display()))?;
            offset += data.len() as u64;
            bar.set_position(offset);
        }
        if !direct {
            out.sync_all().with_context(|| format!("cannot sync {}", local.display()))?;
            std::fs::rename(&target, local)
                .with_context(|| format!("cannot move the copy into place as {}", local.display()))?;
        }
        bar.finish_and_clear();
        Ok(())
    };
    let outcome = tokio::select! {
        outcome = copy => outcome,
        _ = interrupted() => Err(anyhow!("interrupted; {} is unchanged", local.display())),
    };
    if outcome.is_err() && !direct {
        let _ = std::fs::remove_file(&target);
    }
    outcome
}

pub async fn cat(client: &Client, remote: &str) -> Result<()> {
    let mut handle = client.open_path(remote).await.map_err(|e| anyhow!("cannot open {}: {e}", shown(remote)))?;
    let size = handle.size();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut offset = 0u64;
    while offset < size {
        let data = handle.read_at(offset, COPY_BLOCK_BYTES).await.map_err(|e| anyhow!("reading {remote}: {e}"))?;
        if data.is_empty() {
            break;
        }
        if let Err(e) = out.write_all(&data) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
        offset += data.len() as u64;
    }
    Ok(())
}

/// A name or path as listings show it: as it is when it holds only printable characters, else
/// quoted with Rust's escapes (`"new\nline"`), so that a name can never break a listing into
/// lines or send control sequences to the terminal. Names holding `"` or `\` are quoted too, so
/// that a quoted name is never mistaken for a plain one.
pub fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        std::borrow::Cow::Owned(format!("{name:?}"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// A time as a date in UTC: `2026-11-25 04:37` (`with_nanos`: `2026-11-25 04:37:55.235091208`),
/// followed by " UTC". Times are shown in UTC, the same on every host of a cluster.
pub fn date(t: wire::Timestamp, with_nanos: bool) -> String {
    let (days, secs) = (t.secs.div_euclid(86_400), t.secs.rem_euclid(86_400));
    let (year, month, day) = wire::civil_from_days(days);
    let (h, m, sec) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if with_nanos {
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{sec:02}.{:09} UTC", t.nanos)
    } else {
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02} UTC")
    }
}

fn kind_char(kind: FileKind) -> char {
    match kind {
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::File => '-',
    }
}

fn mode_string(kind: FileKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(kind_char(kind));
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub async fn ls(client: &Client, remote: &str, long: bool) -> Result<()> {
    let attr = client.resolve(remote).await.map_err(|e| anyhow!("cannot list {}: {e}", shown(remote)))?;
    let entries = if attr.kind == FileKind::Dir {
        client.readdir(attr.ino).await.map_err(|e| anyhow!("cannot list {}: {e}", shown(remote)))?
    } else {
        vec![client::DirEntry { name: remote.rsplit('/').next().unwrap_or(remote).to_string(), attr }]
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for e in entries {
        let name =
            if e.attr.kind == FileKind::Dir { format!("{}/", shown(&e.name)) } else { shown(&e.name).into_owned() };
        if long {
            writeln!(
                out,
                "{} {:>3} {:>5} {:>5} {:>14} {} {name}",
                mode_string(e.attr.kind, e.attr.mode),
                e.attr.nlink,
                e.attr.uid,
                e.attr.gid,
                e.attr.size,
                date(e.attr.mtime, false)
            )?;
        } else {
            writeln!(out, "{name}")?;
        }
    }
    Ok(())
}

pub async fn stat(client: &Client, remote: &str) -> Result<()> {
    let a = client.resolve(remote).await.map_err(|e| anyhow!("cannot stat {}: {e}", shown(remote)))?;
    println!("  path: {}", shown(remote));
    println!("  inode: {}  kind: {}  mode: {:04o} ({})", a.ino, a.kind.name(), a.mode, mode_string(a.kind, a.mode));
    println!("  size: {}  links: {}  uid: {}  gid: {}", a.size, a.nlink, a.uid, a.gid);
    println!("  access: {}", date(a.atime, true));
    println!("  modify: {}", date(a.mtime, true));
    println!("  change: {}", date(a.ctime, true));
    println!("  birth:  {}", date(a.crtime, true));
    let pool = match client.pools().await {
        Ok(pools) => pools.into_iter().find(|p| p.id == a.pool).map_or_else(|| format!("{}", a.pool), |p| p.name),
        Err(e) => bail!("cannot read the pools: {e}"),
    };
    println!("  layout: erasure {}  chunk {} bytes  pool {}", a.ec, a.chunk_bytes, shown(&pool));
    Ok(())
}

/// `trove mkdir [--pool P] [--ec K+M]`: creates a directory (and its parents), or changes an
/// existing one's pool and scheme for the files made in it from then on. A pool brings its
/// default scheme unless `--ec` is given. When the pool or scheme is refused (no such pool, a
/// scheme wider than the pool's nodes, or without parity unasked), the directories this
/// command created are removed again: a refused mkdir leaves nothing behind.
pub async fn mkdir(
    client: &Client,
    remote: &str,
    ec: Option<wire::EcScheme>,
    no_redundancy: bool,
    pool: Option<&str>,
) -> Result<()> {
    if ec.is_none() && no_redundancy {
        bail!("--no-redundancy goes with --ec K+0");
    }
    // The paths this command is about to create, outermost first.
    let parts: Vec<&str> = remote.split('/').filter(|p| !p.is_empty()).collect();
    let mut created = Vec::new();
    for i in 1..=parts.len() {
        let path = format!("/{}", parts[..i].join("/"));
        if created.is_empty() && client.resolve(&path).await.is_ok() {
            continue;
        }
        created.push(path);
    }
    let attr = client.mkdir_p(remote).await.map_err(|e| anyhow!("cannot create directory {remote}: {e}"))?;
    let undo = || async {
        for path in created.iter().rev() {
            if let Ok((parent, name)) = client.parent_of(path).await {
                let _ = client.rmdir(parent, name).await;
            }
        }
    };
    if let Some(pool) = pool {
        if let Err(e) = client.set_pool(attr.ino, pool).await {
            undo().await;
            bail!("cannot put {remote} in pool {pool}: {e}");
        }
    }
    let Some(ec) = ec else { return Ok(()) };
    let check = if no_redundancy { wire::LayoutCheck::ChosenWithoutRedundancy } else { wire::LayoutCheck::Chosen };
    if let Err(e) = client.set_layout(attr.ino, ec, attr.chunk_bytes, check).await {
        undo().await;
        bail!("cannot use {ec} for {remote}: {e}");
    }
    Ok(())
}

pub async fn mv(client: &Client, from: &str, to: &str) -> Result<()> {
    // The metadata service's errors say what went wrong in full ("cannot move directory "/a"
    // under itself (into "/a/b")"); they are prefixed with the command, not a paraphrase of it.
    let (src_parent, src_name) = client.parent_of(from).await.map_err(|e| anyhow!("mv {}: {e}", shown(from)))?;
    // Moving into an existing directory keeps the name, like mv(1).
    let target = match client.resolve(to).await {
        Ok(a) if a.kind == FileKind::Dir => format!("{}/{src_name}", to.trim_end_matches('/')),
        _ => to.to_string(),
    };
    let (dst_parent, dst_name) =
        client.parent_of(&target).await.map_err(|e| anyhow!("mv {} {}: {e}", shown(from), shown(&target)))?;
    client
        .rename(src_parent, src_name, dst_parent, dst_name)
        .await
        .map_err(|e| anyhow!("mv {} {}: {e}", shown(from), shown(&target)))
}

pub async fn rm(client: &Client, remote: &str, recursive: bool) -> Result<()> {
    let failed = |e: client::WireError| anyhow!("cannot remove {}: {e}", shown(remote));
    let (parent, name) = client.parent_of(remote).await.map_err(failed)?;
    let attr = client.lookup(parent, name).await.map_err(failed)?;
    if attr.kind == FileKind::Dir {
        if !recursive {
            bail!("cannot remove {}: it is a directory (use -r)", shown(remote));
        }
        remove_tree(client, attr.ino).await.map_err(failed)?;
        return client.rmdir(parent, name).await.map_err(failed);
    }
    client.unlink(parent, name).await.map_err(failed)
}

fn remove_tree(client: &Client, dir: u64) -> futures::future::BoxFuture<'_, client::Result<()>> {
    Box::pin(async move {
        for e in client.readdir(dir).await? {
            if e.attr.kind == FileKind::Dir {
                remove_tree(client, e.attr.ino).await?;
                client.rmdir(dir, &e.name).await?;
            } else {
                match client.unlink(dir, &e.name).await {
                    Err(err) if err.code == ErrorCode::NotFound => {}
                    other => other?,
                }
            }
        }
        Ok(())
    })
}

pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Raw capacity of the nodes in service, each file system counted once.
struct Capacity {
    total: u64,
    free: u64,
    /// File systems the drives are on (drives of unknown device count one each).
    devices: usize,
    drives: usize,
}

fn capacity(s: &wire::ClusterStatus) -> Capacity {
    let drives: Vec<wire::DriveInfo> =
        s.nodes.iter().filter(|n| n.state != wire::NodeState::Out).flat_map(|n| n.drives.iter().cloned()).collect();
    let (total, free) = wire::capacity_once_per_device(&drives);
    let known: std::collections::HashSet<u64> = drives.iter().map(|d| d.device).filter(|&d| d != 0).collect();
    let devices = known.len() + drives.iter().filter(|d| d.device == 0).count();
    Capacity { total, free, devices, drives: drives.len() }
}

pub async fn status(client: &Client, json: bool) -> Result<()> {
    let s = client.status(true).await.map_err(|e| anyhow!("cannot get cluster status: {e}"))?;
    let capacity = capacity(&s);
    let pool_name = |id: wire::PoolId| {
        s.pools.iter().find(|p| p.pool.id == id).map_or_else(|| id.to_string(), |p| p.pool.name.clone())
    };
    if json {
        let nodes: Vec<serde_json::Value> = s
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "id": n.id, "addr": n.addr, "state": n.state.to_string(), "pool": pool_name(n.pool),
                    "heartbeat_age_ms": n.heartbeat_age_ms,
                    "bytes_total": n.drives.iter().map(|d| d.bytes_total).sum::<u64>(),
                    "bytes_free": n.drives.iter().map(|d| d.bytes_free).sum::<u64>(),
                    "shards": n.drives.iter().map(|d| d.shards).sum::<u64>(),
                    "drives": n.drives.iter().map(|d| serde_json::json!({"path": d.path, "bytes_total": d.bytes_total, "bytes_free": d.bytes_free, "shards": d.shards, "error": d.error, "device": format!("{:016x}", d.device)})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let v = serde_json::json!({
            "bytes_total": capacity.total, "bytes_free": capacity.free, "devices": capacity.devices,
            "bytes_pending_delete": s.bytes_pending_delete, "pending_delete_within_ms": s.pending_delete_within_ms,
            "engine": s.engine, "map_version": s.map_version, "default_ec": s.default_ec.to_string(),
            "chunk_bytes": s.chunk_bytes, "files": s.files, "chunks": s.chunks,
            "chunks_degraded": s.chunks_degraded, "chunks_unavailable": s.chunks_unavailable,
            "chunks_misplaced": s.chunks_misplaced, "chunks_narrow": s.chunks_narrow, "leader": s.leader,
            "dirs_too_wide": s.dirs_too_wide.iter().map(|(path, ec)| serde_json::json!({"path": path, "ec": ec.to_string()})).collect::<Vec<_>>(),
            "dirs_too_wide_count": s.dirs_too_wide_count,
            "ec_schemes": s.ec_schemes.iter().map(|(ec, n)| serde_json::json!({"ec": ec.to_string(), "chunks": n})).collect::<Vec<_>>(),
            "nodes": nodes,
            "pools": s.pools.iter().map(crate::pools::pool_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let up = s.nodes.iter().filter(|n| n.state == wire::NodeState::Up).count();
    println!("metadata engine: {}", s.engine);
    println!(
        "placement map: version {}   default erasure: {}   chunk size: {}",
        s.map_version,
        s.default_ec,
        human_bytes(u64::from(s.chunk_bytes))
    );
    println!("cluster manager lease: {}", s.leader.as_deref().unwrap_or("(no leader)"));
    println!(
        "nodes: {} ({} up)   files: {}   chunks: {}   degraded: {}   unavailable: {}   to move: {}",
        s.nodes.len(),
        up,
        s.files,
        s.chunks,
        s.chunks_degraded,
        s.chunks_unavailable,
        s.chunks_misplaced
    );
    // Nodes sharing a disk report it each; the disk is counted once.
    let shared = if capacity.devices < capacity.drives {
        format!(" ({} drives on {} file systems)", capacity.drives, capacity.devices)
    } else {
        String::new()
    };
    println!("capacity: {} raw, {} free{shared}", human_bytes(capacity.total), human_bytes(capacity.free));
    if s.bytes_pending_delete > 0 {
        println!(
            "pending deletion: {} of deleted and overwritten files' shards, freed within {} s (the GC's grace period); `df` counts it as free already",
            human_bytes(s.bytes_pending_delete),
            s.pending_delete_within_ms.div_ceil(1000)
        );
    }
    let schemes: Vec<String> = s.ec_schemes.iter().map(|(ec, n)| format!("{ec}: {n} chunks")).collect();
    if !schemes.is_empty() {
        println!("schemes in use: {}", schemes.join(", "));
    }
    if s.chunks_narrow > 0 {
        println!("narrower than their file's scheme: {} chunks (written while too few nodes were up; widened when the nodes allow)", s.chunks_narrow);
    }
    if s.dirs_too_wide_count > 0 {
        let listed: Vec<String> = s.dirs_too_wide.iter().map(|(path, ec)| format!("{path} ({ec})")).collect();
        let more = s.dirs_too_wide_count.saturating_sub(s.dirs_too_wide.len() as u64);
        println!(
            "directories whose scheme needs more storage nodes than the cluster has ({}): {}{}; new files there are written narrower",
            s.dirs_too_wide_count,
            listed.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        );
    }
    // Pools: one line each (a cluster of the default pool only shows it too, with its chunks).
    println!();
    println!(
        "{:<16} {:<6} {:<7} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "pool", "kind", "scheme", "nodes (up)", "capacity", "free", "chunks", "stored"
    );
    for p in &s.pools {
        println!(
            "{:<16} {:<6} {:<7} {:>11} {:>10} {:>10} {:>10} {:>10}",
            shown(&p.pool.name),
            p.pool.kind.name(),
            p.pool.default_ec.to_string(),
            format!("{} ({})", p.nodes, p.nodes_up),
            human_bytes(p.bytes_total),
            human_bytes(p.bytes_free),
            p.chunks,
            human_bytes(p.bytes_stored)
        );
    }
    println!();
    println!(
        "{:>4}  {:<22} {:<12} {:<9} {:>10} {:>10} {:>10} {:>8}  drives",
        "node", "address", "pool", "state", "capacity", "free", "shards ", "hb age"
    );
    // A node that is down or out sends no heartbeats: its figures are the last it reported.
    let stale = |n: &wire::NodeInfo| matches!(n.state, wire::NodeState::Down | wire::NodeState::Out);
    for n in &s.nodes {
        let total: u64 = n.drives.iter().map(|d| d.bytes_total).sum();
        let free: u64 = n.drives.iter().map(|d| d.bytes_free).sum();
        let shards: u64 = n.drives.iter().map(|d| d.shards).sum();
        let shards = if stale(n) { format!("{shards}*") } else { format!("{shards} ") };
        let errors: Vec<String> =
            n.drives.iter().filter(|d| !d.error.is_empty()).map(|d| format!("{}: {}", d.path, d.error)).collect();
        let health = if errors.is_empty() { format!("{} ok", n.drives.len()) } else { errors.join("; ") };
        println!(
            "{:>4}  {:<22} {:<12} {:<9} {:>10} {:>10} {:>10} {:>7}s  {}",
            n.id,
            n.addr,
            shown(&pool_name(n.pool)),
            n.state.to_string(),
            human_bytes(total),
            human_bytes(free),
            shards,
            n.heartbeat_age_ms / 1000,
            health
        );
    }
    if s.nodes.iter().any(stale) {
        println!("* as last reported: the node has sent no heartbeat for its hb age");
    }
    Ok(())
}

/// `trove node drain|undrain|remove ID [--force]`: operator changes of a storage node's state.
pub async fn node_state(client: &Client, node: wire::NodeId, state: wire::NodeState, force: bool) -> Result<()> {
    match client.meta(wire::MetaOp::SetNodeState { node, state, force }).await {
        Ok(_) => {
            let what = match state {
                wire::NodeState::Draining => "draining: its data moves to the other nodes while it serves; it is marked out when none is left (see `trove status`)",
                wire::NodeState::Up => "up: it takes new data again",
                wire::NodeState::Out => "out: its shards are rebuilt on the other nodes",
                wire::NodeState::Down => "down",
            };
            println!("node {node} is {what}");
            Ok(())
        }
        Err(e) => bail!("cannot change the state of node {node}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        let at = |secs, nanos| wire::Timestamp { secs, nanos };
        assert_eq!(date(at(0, 0), false), "1970-01-01 00:00 UTC");
        assert_eq!(date(at(951_782_400, 0), false), "2000-02-29 00:00 UTC");
        assert_eq!(date(at(1_795_581_511, 235_091_208), true), "2026-11-25 04:38:31.235091208 UTC");
        assert_eq!(date(at(-1, 0), true), "1969-12-31 23:59:59.000000000 UTC");
        assert_eq!(date(at(4_102_444_800, 0), false), "2100-01-01 00:00 UTC");
    }

    #[test]
    fn names_with_control_bytes_are_quoted() {
        assert_eq!(shown("plain name.txt"), "plain name.txt");
        assert_eq!(shown("naïve"), "naïve");
        assert_eq!(shown("new\nline"), r#""new\nline""#);
        assert_eq!(shown("bell\u{7}\u{1b}[31m"), r#""bell\u{7}\u{1b}[31m""#);
        assert_eq!(shown("\"quoted\""), r#""\"quoted\"""#);
        assert_eq!(shown("back\\slash"), r#""back\\slash""#);
    }
}
