//! Where a benchmark runs: the [`Target`] trait and its two implementations, a Trove cluster
//! through the native client ([`TroveTarget`]) and a plain directory ([`DirTarget`], for local
//! disks and other file systems' mounts, so the same suite compares them).
//!
//! Paths given to a target are relative to its root and `/`-separated. Readers and writers are
//! per-file handles; a benchmark that wants several requests in flight on one file opens several
//! handles (the client's `FileHandle` serves one request at a time, like a file descriptor used
//! by one thread).

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use bytes::Bytes;
use client::{Client, ErrorCode, FileKind, Ino, StageReport, STAGES_XATTR};
use std::collections::HashMap;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::space::{self, DeviceShare, Storage};

/// Alignment of buffers, offsets and lengths for O_DIRECT I/O (the logical block size of every
/// device we expect is at most this).
pub const DIRECT_ALIGN_BYTES: usize = 4096;

/// A place benchmarks read and write: a Trove cluster or a directory.
#[async_trait]
pub trait Target: Send + Sync + 'static {
    /// A short description for reports, e.g. `trove 127.0.0.1:7000:/bench`.
    fn describe(&self) -> String;
    /// `"trove"` or `"dir"`.
    fn kind(&self) -> &'static str;
    /// The local directory behind the target, if any (for dropping caches and external readers).
    fn local_root(&self) -> Option<PathBuf>;
    /// The number of storage nodes serving the target (1 for a directory).
    async fn node_count(&self) -> Result<usize>;
    /// Creates a directory and its missing parents.
    async fn mkdir_all(&self, path: &str) -> Result<()>;
    /// Creates one directory; fails if it exists.
    async fn mkdir(&self, path: &str) -> Result<()>;
    /// Creates (or truncates) a file for writing.
    async fn create(&self, path: &str) -> Result<Box<dyn Writer>>;
    /// Opens an existing file for writing in place (no truncation).
    async fn open_write(&self, path: &str) -> Result<Box<dyn Writer>>;
    /// Opens an existing file for reading.
    async fn open(&self, path: &str) -> Result<Box<dyn Reader>>;
    /// The size of a file, or `None` if it does not exist (a `stat`).
    async fn size_of(&self, path: &str) -> Result<Option<u64>>;
    /// Removes a file.
    async fn remove_file(&self, path: &str) -> Result<()>;
    /// Removes an empty directory.
    async fn remove_dir(&self, path: &str) -> Result<()>;
    /// Removes a directory tree; a missing path is fine.
    async fn remove_all(&self, path: &str) -> Result<()>;
    /// The names in a directory.
    async fn list(&self, path: &str) -> Result<Vec<String>>;
    /// The storage behind the target and its free space ([`crate::space`]).
    async fn storage(&self) -> Result<Storage>;
    /// A target of the same kind rooted at `root` as [`Storage::root`] names it on this target's
    /// store: another target's root on the same storage, to read a dataset written there.
    fn at_root(&self, root: &str) -> Result<Arc<dyn Target>>;
    /// Per-stage latency totals of the Trove client serving this target and of the storage
    /// nodes behind it (a directory on a Trove mount answers through the mount), or `None`
    /// where there is no such thing (a local disk).
    async fn stages(&self) -> Result<Option<StageReport>> {
        Ok(None)
    }
}

/// Time spent inside the read system calls of directory targets, and how many there were: the
/// latency an application sees from the kernel, without this harness's own thread hand-off.
static SYSCALL_READS: AtomicU64 = AtomicU64::new(0);
static SYSCALL_READ_NS: AtomicU64 = AtomicU64::new(0);

/// (reads, total nanoseconds) of the read system calls directory targets made so far.
pub fn syscall_read_totals() -> (u64, u64) {
    (SYSCALL_READS.load(Ordering::Relaxed), SYSCALL_READ_NS.load(Ordering::Relaxed))
}

/// A file opened for reading.
#[async_trait]
pub trait Reader: Send {
    /// The file size when opened.
    fn size(&self) -> u64;
    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    async fn read_at(&mut self, offset: u64, len: usize) -> Result<Bytes>;
}

/// A file opened for writing.
#[async_trait]
pub trait Writer: Send {
    /// Writes `data` at `offset`.
    async fn write_at(&mut self, offset: u64, data: Bytes) -> Result<()>;
    /// Makes everything written so far durable (fsync).
    async fn sync(&mut self) -> Result<()>;
    /// Flushes and closes the file.
    async fn close(self: Box<Self>) -> Result<()>;
}

/// The file that marks a directory as made by `trove bench`: what is in such a directory is the
/// benchmark's own to remove.
pub const BENCH_MARK_FILE: &str = ".trove-bench";

/// Makes `dir` the benchmark's own before it clears or fills it: accepted when absent, empty,
/// marked ([`BENCH_MARK_FILE`]) or holding one of `also_ours` (a generated dataset's manifest),
/// and marked then; refused, naming what is there, when it holds anything else, so that a
/// mistyped directory never loses a person's files to a benchmark's cleanup.
pub async fn claim_dir(target: &dyn Target, dir: &str, also_ours: &[&str]) -> Result<()> {
    let names = target.list(dir).await.unwrap_or_default();
    let ours = names.is_empty() || names.iter().any(|n| n == BENCH_MARK_FILE || also_ours.contains(&n.as_str()));
    if !ours {
        let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
        bail!(
            "{dir} holds files that trove bench did not make ({}{}); give an empty or new directory, \
             or remove them yourself: a benchmark clears its directory",
            shown.join(", "),
            if names.len() > shown.len() { ", ..." } else { "" }
        );
    }
    target.mkdir_all(dir).await?;
    let mark = join(dir, BENCH_MARK_FILE);
    if target.size_of(&mark).await?.is_none() {
        let mut w = target.create(&mark).await?;
        w.write_at(0, Bytes::from_static(b"made by trove bench: its contents may be removed by the next run\n"))
            .await?;
        w.close().await?;
    }
    Ok(())
}

fn join(root: &str, path: &str) -> String {
    let path = path.trim_matches('/');
    if path.is_empty() {
        root.to_string()
    } else {
        format!("{}/{path}", root.trim_end_matches('/'))
    }
}

fn split_parent(path: &str) -> (&str, &str) {
    let p = path.trim_end_matches('/');
    match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    }
}

/// A Trove cluster, reached through the native client, under a root directory of its namespace.
pub struct TroveTarget {
    client: Client,
    addr: String,
    root: String,
    /// Directory inodes by path: a metadata client (the kernel's dcache for FUSE/NFS) resolves
    /// a directory once, not on every create; without this every file operation of the metadata
    /// benchmark would also pay a path walk.
    /// A std mutex suffices: it is never held across an await.
    dirs: std::sync::Mutex<HashMap<String, Ino>>,
}

impl TroveTarget {
    /// Connects to the metadata service at `addr` and uses `root` (created if missing).
    pub async fn connect(addr: &str, root: &str) -> Result<TroveTarget> {
        let client =
            Client::connect(addr).await.map_err(|e| anyhow!("cannot reach the Trove cluster at {addr}: {e}"))?;
        Self::new(client, addr, root).await
    }

    /// Uses `root` (created if missing) of the cluster `client` is connected to (at `addr`).
    pub async fn new(client: Client, addr: &str, root: &str) -> Result<TroveTarget> {
        let root = format!("/{}", root.trim_matches('/'));
        client.mkdir_p(&root).await.map_err(|e| anyhow!("cannot create {root} on the cluster: {e}"))?;
        Ok(TroveTarget { client, addr: addr.to_string(), root, dirs: Default::default() })
    }

    fn full(&self, path: &str) -> String {
        join(&self.root, path)
    }

    fn cached_dir(&self, path: &str) -> Option<Ino> {
        self.dirs.lock().ok().and_then(|d| d.get(path).copied())
    }

    fn forget_dirs(&self, prefix: &str) {
        if let Ok(mut d) = self.dirs.lock() {
            d.retain(|k, _| !(k == prefix || k.starts_with(&format!("{prefix}/"))));
        }
    }

    /// The inode of directory `dir` (a full path), from the cache or the metadata service.
    async fn dir_ino(&self, dir: &str) -> Result<Ino> {
        if let Some(ino) = self.cached_dir(dir) {
            return Ok(ino);
        }
        let attr = self.client.resolve(dir).await.map_err(|e| anyhow!("{dir}: {e}"))?;
        if attr.kind != FileKind::Dir {
            bail!("{dir} is not a directory");
        }
        if let Ok(mut d) = self.dirs.lock() {
            d.insert(dir.to_string(), attr.ino);
        }
        Ok(attr.ino)
    }

    async fn parent(&self, path: &str) -> Result<(Ino, String)> {
        let full = self.full(path);
        let (dir, name) = split_parent(&full);
        if name.is_empty() {
            bail!("{full:?} names no file");
        }
        Ok((self.dir_ino(dir).await?, name.to_string()))
    }
}

struct TroveReader(client::FileHandle);
struct TroveWriter(client::FileHandle);

#[async_trait]
impl Reader for TroveReader {
    fn size(&self) -> u64 {
        self.0.size()
    }
    async fn read_at(&mut self, offset: u64, len: usize) -> Result<Bytes> {
        self.0.read_at(offset, len).await.map_err(|e| anyhow!("read of inode {} at {offset}: {e}", self.0.ino()))
    }
}

#[async_trait]
impl Writer for TroveWriter {
    async fn write_at(&mut self, offset: u64, data: Bytes) -> Result<()> {
        self.0.write_at(offset, &data).await.map_err(|e| anyhow!("write of inode {} at {offset}: {e}", self.0.ino()))
    }
    async fn sync(&mut self) -> Result<()> {
        self.0.fsync().await.map_err(|e| anyhow!("fsync of inode {}: {e}", self.0.ino()))
    }
    async fn close(self: Box<Self>) -> Result<()> {
        let ino = self.0.ino();
        self.0.close().await.map_err(|e| anyhow!("close of inode {ino}: {e}"))
    }
}

#[async_trait]
impl Target for TroveTarget {
    fn describe(&self) -> String {
        format!("trove {}:{}", self.addr, self.root)
    }
    fn kind(&self) -> &'static str {
        "trove"
    }
    async fn stages(&self) -> Result<Option<StageReport>> {
        Ok(Some(self.client.stage_report().await.map_err(|e| anyhow!("stage totals: {e}"))?))
    }
    fn local_root(&self) -> Option<PathBuf> {
        None
    }
    async fn node_count(&self) -> Result<usize> {
        let status = self.client.status(false).await.map_err(|e| anyhow!("cluster status: {e}"))?;
        Ok(status.nodes.len().max(1))
    }
    async fn mkdir_all(&self, path: &str) -> Result<()> {
        let full = self.full(path);
        let attr = self.client.mkdir_p(&full).await.map_err(|e| anyhow!("mkdir -p {full}: {e}"))?;
        if let Ok(mut d) = self.dirs.lock() {
            d.insert(full, attr.ino);
        }
        Ok(())
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        let (parent, name) = self.parent(path).await?;
        let attr =
            self.client.mkdir(parent, &name, 0o755).await.map_err(|e| anyhow!("mkdir {}: {e}", self.full(path)))?;
        if let Ok(mut d) = self.dirs.lock() {
            d.insert(self.full(path), attr.ino);
        }
        Ok(())
    }
    async fn create(&self, path: &str) -> Result<Box<dyn Writer>> {
        let (parent, name) = self.parent(path).await?;
        let full = self.full(path);
        let attr = self.client.create(parent, &name, 0o644, false).await.map_err(|e| anyhow!("create {full}: {e}"))?;
        if attr.kind != FileKind::File {
            bail!("{full} is not a regular file");
        }
        let mut handle = self.client.open(attr.ino).await.map_err(|e| anyhow!("open {full}: {e}"))?;
        if attr.size != 0 {
            handle.truncate(0).await.map_err(|e| anyhow!("truncate {full}: {e}"))?;
        }
        Ok(Box::new(TroveWriter(handle)))
    }
    async fn open_write(&self, path: &str) -> Result<Box<dyn Writer>> {
        let full = self.full(path);
        let handle = self.client.open_path(&full).await.map_err(|e| anyhow!("open {full}: {e}"))?;
        Ok(Box::new(TroveWriter(handle)))
    }
    async fn open(&self, path: &str) -> Result<Box<dyn Reader>> {
        let full = self.full(path);
        let handle = self.client.open_path(&full).await.map_err(|e| anyhow!("open {full}: {e}"))?;
        Ok(Box::new(TroveReader(handle)))
    }
    async fn size_of(&self, path: &str) -> Result<Option<u64>> {
        let (parent, name) = self.parent(path).await?;
        match self.client.lookup(parent, &name).await {
            Ok(a) => Ok(Some(a.size)),
            Err(e) if e.code == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(anyhow!("stat {}: {e}", self.full(path))),
        }
    }
    async fn remove_file(&self, path: &str) -> Result<()> {
        let (parent, name) = self.parent(path).await?;
        self.client.unlink(parent, &name).await.map_err(|e| anyhow!("unlink {}: {e}", self.full(path)))
    }
    async fn remove_dir(&self, path: &str) -> Result<()> {
        let (parent, name) = self.parent(path).await?;
        let full = self.full(path);
        self.forget_dirs(&full);
        self.client.rmdir(parent, &name).await.map_err(|e| anyhow!("rmdir {full}: {e}"))
    }
    async fn remove_all(&self, path: &str) -> Result<()> {
        let top = self.full(path);
        let attr = match self.client.resolve(&top).await {
            Ok(a) => a,
            Err(e) if e.code == ErrorCode::NotFound => return Ok(()),
            Err(e) => bail!("stat {top}: {e}"),
        };
        // Depth-first with an explicit stack: (inode, path, entries already removed).
        let mut stack: Vec<(Ino, String, bool)> = vec![(attr.ino, top.clone(), false)];
        if attr.kind != FileKind::Dir {
            return self.remove_file(path).await;
        }
        while let Some((ino, dir, expanded)) = stack.pop() {
            if expanded {
                let (parent, name) = split_parent(&dir);
                let pino = self.client.resolve(parent).await.map_err(|e| anyhow!("{parent}: {e}"))?.ino;
                self.forget_dirs(&dir);
                self.client.rmdir(pino, name).await.map_err(|e| anyhow!("rmdir {dir}: {e}"))?;
                continue;
            }
            stack.push((ino, dir.clone(), true));
            for entry in self.client.readdir(ino).await.map_err(|e| anyhow!("readdir {dir}: {e}"))? {
                if entry.attr.kind == FileKind::Dir {
                    stack.push((entry.attr.ino, format!("{dir}/{}", entry.name), false));
                } else {
                    self.client
                        .unlink(ino, &entry.name)
                        .await
                        .map_err(|e| anyhow!("unlink {dir}/{}: {e}", entry.name))?;
                }
            }
        }
        Ok(())
    }
    async fn list(&self, path: &str) -> Result<Vec<String>> {
        let full = self.full(path);
        let ino = self.dir_ino(&full).await?;
        let entries = self.client.readdir(ino).await.map_err(|e| anyhow!("readdir {full}: {e}"))?;
        Ok(entries.into_iter().map(|e| e.name).collect())
    }
    async fn storage(&self) -> Result<Storage> {
        let devices = trove_devices(&self.client, &self.root).await?;
        Ok(Storage {
            store: format!("trove:{}", self.addr),
            root: self.root.clone(),
            bytes_free: writable(&devices),
            devices,
        })
    }
    fn at_root(&self, root: &str) -> Result<Arc<dyn Target>> {
        let root = format!("/{}", root.trim_matches('/'));
        Ok(Arc::new(TroveTarget {
            client: self.client.clone(),
            addr: self.addr.clone(),
            root,
            dirs: Default::default(),
        }))
    }
}

/// The file systems a cluster writes files under `root` to (with `root`'s erasure scheme).
async fn trove_devices(client: &Client, root: &str) -> Result<Vec<DeviceShare>> {
    let status = client.status(false).await.map_err(|e| anyhow!("cluster status: {e}"))?;
    let ec = client.resolve(root).await.map(|a| a.ec).unwrap_or(status.default_ec);
    let nodes = status
        .nodes
        .iter()
        .map(|n| space::client_status::Node {
            id: n.id,
            // Nodes in placement maps take new data; draining and removed ones do not.
            member: matches!(n.state.to_string().as_str(), "up" | "down"),
            drives: n
                .drives
                .iter()
                .map(|d| space::client_status::Drive {
                    device: d.device,
                    bytes_free: d.bytes_free,
                    bytes_total: d.bytes_total,
                })
                .collect(),
        })
        .collect();
    Ok(space::trove_devices(&space::client_status::Status { nodes }, ec.k, ec.m))
}

/// The most that can be written where bytes land on `devices` before one of them is full.
fn writable(devices: &[DeviceShare]) -> u64 {
    devices.iter().filter(|d| d.per_byte > 0.0).map(|d| (d.bytes_free as f64 / d.per_byte) as u64).min().unwrap_or(0)
}

/// A plain directory: a local disk or any mounted file system.
pub struct DirTarget {
    root: PathBuf,
    /// Open data files with O_DIRECT (bypassing the page cache) where the file system allows.
    direct: bool,
}

impl DirTarget {
    /// Uses `root` (created if missing); `direct` asks for O_DIRECT on data files.
    pub fn new(root: &Path, direct: bool) -> Result<DirTarget> {
        std::fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
        Ok(DirTarget { root: root.to_path_buf(), direct })
    }

    fn full(&self, path: &str) -> PathBuf {
        let p = path.trim_matches('/');
        if p.is_empty() {
            self.root.clone()
        } else {
            self.root.join(p)
        }
    }

    /// Whether O_DIRECT works in this directory (tmpfs, for one, refuses it).
    pub fn direct_supported(&self) -> bool {
        let probe = self.root.join(".trove-bench-direct-probe");
        let ok = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| anyhow!("I/O task failed: {e}"))?
}

/// A buffer of `len` bytes whose data starts on a [`DIRECT_ALIGN_BYTES`] boundary, made safely
/// by over-allocating and slicing: returns the vector and the aligned start.
fn aligned_buffer(len: usize) -> (Vec<u8>, usize) {
    let buf = vec![0u8; len + DIRECT_ALIGN_BYTES];
    let misalign = buf.as_ptr() as usize % DIRECT_ALIGN_BYTES;
    let start = if misalign == 0 { 0 } else { DIRECT_ALIGN_BYTES - misalign };
    (buf, start)
}

struct DirReader {
    file: Arc<std::fs::File>,
    size: u64,
    direct: bool,
    path: PathBuf,
}

struct DirWriter {
    file: Arc<std::fs::File>,
    direct: bool,
    path: PathBuf,
}

#[async_trait]
impl Reader for DirReader {
    fn size(&self) -> u64 {
        self.size
    }
    async fn read_at(&mut self, offset: u64, len: usize) -> Result<Bytes> {
        let file = self.file.clone();
        let direct = self.direct;
        let path = self.path.clone();
        blocking(move || {
            let (mut buf, start) = if direct { aligned_buffer(len) } else { (vec![0u8; len], 0) };
            let mut done = 0usize;
            while done < len {
                let calling = std::time::Instant::now();
                let n = file
                    .read_at(&mut buf[start + done..start + len], offset + done as u64)
                    .with_context(|| format!("read {} at {}", path.display(), offset + done as u64))?;
                SYSCALL_READS.fetch_add(1, Ordering::Relaxed);
                SYSCALL_READ_NS.fetch_add(calling.elapsed().as_nanos() as u64, Ordering::Relaxed);
                if n == 0 {
                    break;
                }
                done += n;
                // O_DIRECT reads must stay aligned; a short read means the end of the file.
                if direct && !done.is_multiple_of(DIRECT_ALIGN_BYTES) {
                    break;
                }
            }
            Ok(Bytes::from(buf).slice(start..start + done))
        })
        .await
    }
}

#[async_trait]
impl Writer for DirWriter {
    async fn write_at(&mut self, offset: u64, data: Bytes) -> Result<()> {
        let file = self.file.clone();
        let direct = self.direct;
        let path = self.path.clone();
        blocking(move || {
            if direct
                && data.len().is_multiple_of(DIRECT_ALIGN_BYTES)
                && offset.is_multiple_of(DIRECT_ALIGN_BYTES as u64)
            {
                let (mut buf, start) = aligned_buffer(data.len());
                buf[start..start + data.len()].copy_from_slice(&data);
                file.write_all_at(&buf[start..start + data.len()], offset)
            } else {
                file.write_all_at(&data, offset)
            }
            .with_context(|| format!("write {} at {offset}", path.display()))
        })
        .await
    }
    async fn sync(&mut self) -> Result<()> {
        let file = self.file.clone();
        let path = self.path.clone();
        blocking(move || file.sync_all().with_context(|| format!("fsync {}", path.display()))).await
    }
    async fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl Target for DirTarget {
    fn describe(&self) -> String {
        format!("dir {}{}", self.root.display(), if self.direct { " (O_DIRECT)" } else { "" })
    }
    fn kind(&self) -> &'static str {
        "dir"
    }
    async fn stages(&self) -> Result<Option<StageReport>> {
        let root = self.root.clone();
        blocking(move || {
            // A Trove mount answers this virtual attribute on any inode; other file systems
            // have no such attribute (or no attributes at all).
            let mut buf = vec![0u8; 64 << 10];
            match rustix::fs::getxattr(&root, STAGES_XATTR, &mut buf[..]) {
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    StageReport::parse(&text).map(Some).map_err(|e| anyhow!("{}: {e}", root.display()))
                }
                Err(rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP) => Ok(None),
                Err(e) => Err(anyhow!("getxattr {} {STAGES_XATTR}: {e}", root.display())),
            }
        })
        .await
    }
    fn local_root(&self) -> Option<PathBuf> {
        Some(self.root.clone())
    }
    async fn node_count(&self) -> Result<usize> {
        Ok(1)
    }
    async fn mkdir_all(&self, path: &str) -> Result<()> {
        let p = self.full(path);
        blocking(move || std::fs::create_dir_all(&p).with_context(|| format!("mkdir -p {}", p.display()))).await
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        let p = self.full(path);
        blocking(move || std::fs::create_dir(&p).with_context(|| format!("mkdir {}", p.display()))).await
    }
    async fn create(&self, path: &str) -> Result<Box<dyn Writer>> {
        let p = self.full(path);
        let direct = self.direct;
        blocking(move || {
            let mut opts = std::fs::OpenOptions::new();
            opts.create(true).truncate(true).write(true);
            if direct {
                opts.custom_flags(libc::O_DIRECT);
            }
            let file = opts.open(&p).with_context(|| format!("create {}", p.display()))?;
            Ok(Box::new(DirWriter { file: Arc::new(file), direct, path: p }) as Box<dyn Writer>)
        })
        .await
    }
    async fn open_write(&self, path: &str) -> Result<Box<dyn Writer>> {
        let p = self.full(path);
        let direct = self.direct;
        blocking(move || {
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true);
            if direct {
                opts.custom_flags(libc::O_DIRECT);
            }
            let file = opts.open(&p).with_context(|| format!("open {}", p.display()))?;
            Ok(Box::new(DirWriter { file: Arc::new(file), direct, path: p }) as Box<dyn Writer>)
        })
        .await
    }
    async fn open(&self, path: &str) -> Result<Box<dyn Reader>> {
        let p = self.full(path);
        let direct = self.direct;
        blocking(move || {
            let mut opts = std::fs::OpenOptions::new();
            opts.read(true);
            if direct {
                opts.custom_flags(libc::O_DIRECT);
            }
            let file = opts.open(&p).with_context(|| format!("open {}", p.display()))?;
            let size = file.metadata().with_context(|| format!("stat {}", p.display()))?.len();
            Ok(Box::new(DirReader { file: Arc::new(file), size, direct, path: p }) as Box<dyn Reader>)
        })
        .await
    }
    async fn size_of(&self, path: &str) -> Result<Option<u64>> {
        let p = self.full(path);
        blocking(move || match std::fs::metadata(&p) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow!("stat {}: {e}", p.display())),
        })
        .await
    }
    async fn remove_file(&self, path: &str) -> Result<()> {
        let p = self.full(path);
        blocking(move || std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))).await
    }
    async fn remove_dir(&self, path: &str) -> Result<()> {
        let p = self.full(path);
        blocking(move || std::fs::remove_dir(&p).with_context(|| format!("rmdir {}", p.display()))).await
    }
    async fn remove_all(&self, path: &str) -> Result<()> {
        let p = self.full(path);
        blocking(move || match std::fs::remove_dir_all(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))
            }
            Err(e) => Err(anyhow!("rm -r {}: {e}", p.display())),
        })
        .await
    }
    async fn list(&self, path: &str) -> Result<Vec<String>> {
        let p = self.full(path);
        blocking(move || {
            let mut names = Vec::new();
            for e in std::fs::read_dir(&p).with_context(|| format!("readdir {}", p.display()))? {
                let e = e.with_context(|| format!("readdir {}", p.display()))?;
                names.push(e.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names)
        })
        .await
    }
    async fn storage(&self) -> Result<Storage> {
        let root = self.root.clone();
        let canonical =
            blocking(move || root.canonicalize().with_context(|| format!("cannot resolve {}", root.display()))).await?;
        let (device, free, total) = {
            let p = canonical.clone();
            blocking(move || space::local_fs(&p)).await?
        };
        let local = DeviceShare {
            device: format!("{device:016x}"),
            what: canonical.display().to_string(),
            bytes_free: free,
            bytes_total: total,
            per_byte: 1.0,
        };
        // A directory on a mount of a Trove cluster stores into the cluster.
        if let Some((point, mount_root, fstype, source)) = space::mount_of(&canonical) {
            if let (Some(addr), true) = (source.strip_prefix("trove:"), fstype.starts_with("fuse")) {
                let rel = canonical.strip_prefix(&point).unwrap_or(Path::new(""));
                let root = format!("/{}", Path::new(&mount_root).join(rel).display().to_string().trim_matches('/'));
                // Where its bytes land is the cluster's nodes' drives, if the cluster answers.
                let devices = match Client::connect(addr).await {
                    Ok(client) => trove_devices(&client, &root).await.unwrap_or_else(|_| vec![local.clone()]),
                    Err(_) => vec![local.clone()],
                };
                return Ok(Storage { store: format!("trove:{addr}"), root, bytes_free: free, devices });
            }
        }
        Ok(Storage {
            store: format!("fs:{device:016x}"),
            root: canonical.display().to_string(),
            bytes_free: free,
            devices: vec![local],
        })
    }
    fn at_root(&self, root: &str) -> Result<Arc<dyn Target>> {
        let local = match std::fs::canonicalize(&self.root).ok().and_then(|p| space::mount_of(&p)) {
            // On a Trove mount: `root` is a cluster path, found under the mount point.
            Some((point, mount_root, fstype, source)) if source.starts_with("trove:") && fstype.starts_with("fuse") => {
                let within = Path::new(root)
                    .strip_prefix(&mount_root)
                    .map_err(|_| anyhow!("{root} is not under the mount's root {mount_root}"))?;
                point.join(within)
            }
            _ => PathBuf::from(root),
        };
        Ok(Arc::new(DirTarget::new(&local, self.direct)?))
    }
}

/// Drops the kernel's page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`) so that a read
/// phase measures the storage, not RAM. Returns why it could not, when it could not (not root,
/// a container without the knob): reports must say so.
pub fn drop_caches() -> std::result::Result<(), String> {
    // `unsafe` is forbidden in this crate, so flush dirty pages with the `sync` command rather
    // than libc::sync.
    let synced = std::process::Command::new("sync").status().map(|s| s.success()).unwrap_or(false);
    if !synced {
        return Err("`sync` failed".to_string());
    }
    std::fs::write("/proc/sys/vm/drop_caches", b"3\n")
        .map_err(|e| format!("cannot write /proc/sys/vm/drop_caches: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_and_split() {
        assert_eq!(join("/bench", "a/b"), "/bench/a/b");
        assert_eq!(join("/bench/", "/a/"), "/bench/a");
        assert_eq!(join("/bench", ""), "/bench");
        assert_eq!(split_parent("/bench/a/b"), ("/bench/a", "b"));
        assert_eq!(split_parent("b"), ("", "b"));
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for len in [0usize, 1, 4096, 1 << 20] {
            let (buf, start) = aligned_buffer(len);
            assert_eq!((buf.as_ptr() as usize + start) % DIRECT_ALIGN_BYTES, 0);
            assert!(buf.len() >= start + len);
        }
    }

    #[tokio::test]
    async fn dir_target_round_trip() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t = DirTarget::new(dir.path(), false).expect("target");
        t.mkdir_all("a/b").await.expect("mkdir");
        let mut w = t.create("a/b/f").await.expect("create");
        w.write_at(0, Bytes::from_static(b"hello world")).await.expect("write");
        w.sync().await.expect("sync");
        w.close().await.expect("close");
        assert_eq!(t.size_of("a/b/f").await.expect("stat"), Some(11));
        assert_eq!(t.size_of("a/b/nope").await.expect("stat"), None);
        let mut r = t.open("a/b/f").await.expect("open");
        assert_eq!(&r.read_at(6, 100).await.expect("read")[..], b"world");
        assert_eq!(t.list("a/b").await.expect("list"), vec!["f".to_string()]);
        t.remove_all("a").await.expect("rm");
        assert_eq!(t.size_of("a").await.expect("stat"), None);
    }

    #[tokio::test]
    async fn a_directory_of_other_files_is_never_claimed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t = DirTarget::new(dir.path(), false).expect("target");
        claim_dir(&t, "new", &[]).await.expect("an absent directory is claimed");
        claim_dir(&t, "new", &[]).await.expect("a marked one again");
        t.mkdir_all("empty").await.expect("mkdir");
        claim_dir(&t, "empty", &[]).await.expect("an empty one");
        t.mkdir_all("data").await.expect("mkdir");
        let w = t.create("data/thesis.tex").await.expect("create");
        w.close().await.expect("close");
        let e = claim_dir(&t, "data", &[]).await.expect_err("someone's files").to_string();
        assert!(e.contains("data holds files that trove bench did not make (thesis.tex)"), "{e}");
        assert_eq!(t.list("data").await.expect("list"), vec!["thesis.tex".to_string()]);
        claim_dir(&t, "data", &["thesis.tex"]).await.expect("named as ours");
    }
}
