//! The FUSE file system: each kernel request becomes client calls on a tokio task.
//!
//! fuser's threads read requests and hand them over: an operation that may wait is spawned on
//! the runtime with its reply, so a slow metadata call or a chunk fetch never stops the other
//! requests (many reads of a read-ahead window, lookups of a `ls -l`) from being in flight.
//! What never waits is answered on fuser's thread, a hand-off saved: LOOKUPs and GETATTRs from
//! what is kept, an OPEN with a kept answer of an inode not open yet, and the FLUSH and RELEASE
//! of a file only read.
//! Reads of a file with nothing unflushed run side by side on its shared read side; writes,
//! flushes and reads of unflushed data meet at the file's mutex, in the order they acquire it;
//! the kernel never has two overlapping writes of one file in flight, so that order is safe.
//!
//! POSIX details decided here rather than in the metadata service, which deliberately knows
//! nothing about callers: owners of new inodes (the caller's uid/gid, a setgid directory's gid),
//! permission checks (delegated to the kernel through `default_permissions`), unlink of open
//! files, and which extended attribute namespaces exist.

use crate::attr::{self, file_attr, name_str, XattrAnswer};
use crate::dir::{DirListing, Slot, READDIR_PAGE_ENTRIES};
use crate::dircache::DirCache;
use crate::metered;
use crate::open::{CacheVersions, OpenInode, OpenTable};
use crate::opencache::OpenCache;
use crate::statahead::{Statahead, Ticket, LISTING_ENTRIES_MAX};
use crate::{MountOptions, REQUEST_BYTES_MAX};
use client::{Client, FirstChunks, Keep, STAGES_XATTR};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle as Fh, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};
use tokio::runtime::Handle;
use wire::stages::{self, Stage};
use wire::{Attr, ErrorCode, FileKind, Ino, LockKind, LockRange, RenameMode, SetAttr, Timestamp, WireError, ROOT_INO};

/// Inode generation: Trove never reuses inode numbers, so it is always 0.
const GENERATION: Generation = Generation(0);
/// The hidden directory (under the root) holding files unlinked while open in some mount.
pub const ORPHAN_DIR_NAME: &str = ".trove-orphans";
/// Directory modes remembered for setgid inheritance; beyond it the memory is dropped.
const DIR_MODES_MAX: usize = 1 << 16;
/// Inodes reported free by statfs: Trove has no inode table to run out of.
const STATFS_FREE_INODES: u64 = 1 << 32;
/// Extended attributes answered locally as absent: the kernel asks for `security.capability`
/// before every write (to drop file capabilities), which would otherwise cost a metadata round
/// trip per write(2). File capabilities are not supported.
const XATTR_NAMES_ABSENT: &[&str] = &["security.capability"];

/// First and longest pause between attempts of a blocking lock request (F_SETLKW, flock
/// without LOCK_NB): the lock manager never waits, so waiting is polling with backoff.
const LOCK_RETRY_FIRST: Duration = Duration::from_millis(5);
const LOCK_RETRY_MAX: Duration = Duration::from_millis(200);
/// The whole file, as a lock range ("to the end of the file, whatever its size").
const WHOLE_FILE: (u64, u64) = (0, u64::MAX);
/// Inode numbers with this bit set are snapshot views (protocol 10; the metadata service's
/// `snapshot::VIEW_BIT`): read-only.
const SNAPSHOT_VIEW_BIT: u64 = 1 << 63;
/// Files at most this large, opened for reading, start fetching their first chunk at the open
/// (`Shared::prefetch_small`): a training sample or a small record file is read whole right
/// after it is opened.
const OPEN_PREFETCH_BYTES_MAX: u64 = 1 << 20;

/// Converts a client error into the errno of the system call, logging the unexpected ones once
/// here, where they are handled.
fn fail(e: WireError) -> Errno {
    match e.code {
        ErrorCode::NotFound
        | ErrorCode::Exists
        | ErrorCode::NotEmpty
        | ErrorCode::NotDir
        | ErrorCode::IsDir
        | ErrorCode::NoAttr
        | ErrorCode::NameTooLong
        | ErrorCode::Invalid
        | ErrorCode::PermissionDenied => tracing::debug!("{e}"),
        _ => tracing::warn!("{e}"),
    }
    attr::errno(&e)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Replies that can carry an error.
trait Fail {
    fn fail(self, e: Errno);
}

macro_rules! impl_fail {
    ($($t:ty),*) => { $(impl Fail for $t { fn fail(self, e: Errno) { self.error(e) } })* };
}
impl_fail!(ReplyEntry, ReplyAttr, ReplyData, ReplyEmpty, ReplyOpen, ReplyWrite, ReplyStatfs, ReplyCreate, ReplyXattr);

/// An open directory: its inode and its listing so far.
type OpenDir = (Ino, Arc<tokio::sync::Mutex<DirListing>>);

/// The state shared by every request of a mount.
pub(crate) struct Shared {
    client: Client,
    options: MountOptions,
    notifier: Arc<OnceLock<Notifier>>,
    open: OpenTable,
    versions: CacheVersions,
    dirs: Mutex<HashMap<u64, OpenDir>>,
    next_dir_fh: AtomicU64,
    /// Mode and gid of directories seen lately, for setgid inheritance without a round trip.
    dir_modes: Mutex<HashMap<Ino, (u32, u32)>>,
    orphan_dir: tokio::sync::OnceCell<Ino>,
    /// Distinguishes this mount's orphans from other mounts', and is the mount's lock session.
    mount_id: u64,
    /// (inode, lock owner) pairs that may hold cluster locks: close and release must free them,
    /// and only these need the round trip.
    held_locks: Mutex<HashSet<(Ino, u64)>>,
    /// Directory attributes for answering GETATTR without a round trip (see `dircache.rs`).
    dir_attrs: Mutex<DirCache>,
    /// Listings fetched ahead of LOOKUPs (see `statahead.rs`).
    statahead: Mutex<Statahead>,
    /// What opens fetched, for opens soon after (see `opencache.rs`).
    open_cache: Mutex<OpenCache<FirstChunks>>,
}

/// An open that has pinned its inode ([`Shared::open_begin`]) and is yet to make its kernel
/// file handle ([`Shared::open_finish`]).
struct OpenBegun {
    /// The attributes the open found on the metadata service.
    attr: Attr,
    inode: Arc<OpenInode>,
    /// The inode was open in this mount already: its shared handle needs revalidating.
    existed: bool,
    /// The kernel's cached pages hold the version opened.
    keep_cache: bool,
}

/// The file system handed to fuser.
pub(crate) struct TroveFs {
    shared: Arc<Shared>,
    runtime: Handle,
}

impl TroveFs {
    pub(crate) fn new(client: Client, runtime: Handle, options: MountOptions) -> TroveFs {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let mount_id = (u64::from(std::process::id()) << 32) ^ now.as_nanos() as u64;
        let options_attr_timeout = options.attr_timeout;
        let options_open_cache = options.open_cache;
        let options_entry_timeout = options.entry_timeout;
        let fs = TroveFs {
            shared: Arc::new(Shared {
                client,
                options,
                notifier: Arc::new(OnceLock::new()),
                open: OpenTable::default(),
                versions: CacheVersions::default(),
                dirs: Mutex::new(HashMap::new()),
                next_dir_fh: AtomicU64::new(1 << 62),
                dir_modes: Mutex::new(HashMap::new()),
                orphan_dir: tokio::sync::OnceCell::new(),
                mount_id,
                held_locks: Mutex::new(HashSet::new()),
                dir_attrs: Mutex::new(DirCache::new(options_attr_timeout)),
                statahead: Mutex::new(Statahead::new(options_entry_timeout)),
                open_cache: Mutex::new(OpenCache::new(options_open_cache)),
            }),
            runtime,
        };
        // The metadata service answers this mount's changes with the directory's attributes
        // after them: keep those, so the GETATTR the kernel sends next is answered here.
        let weak = Arc::downgrade(&fs.shared);
        fs.shared.client.observe_dir_changes(move |change| {
            if let Some(s) = weak.upgrade() {
                let now = Instant::now();
                let mut cache = lock(&s.dir_attrs);
                cache.put(&change.dir, now);
                if let Some(ino) = change.removed {
                    cache.forget(ino, now);
                    drop(cache);
                    lock(&s.statahead).unlinked(ino);
                    lock(&s.open_cache).changed();
                }
            }
        });
        if fs.shared.options.cluster_locks {
            fs.start_lease_renewal();
        }
        fs
    }

    /// Keeps the lease on this mount's cluster locks alive while it holds any; ends with the
    /// file system.
    fn start_lease_renewal(&self) {
        let shared = Arc::downgrade(&self.shared);
        let every = self.shared.options.lock_lease / 3;
        self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(s) = shared.upgrade() else { return };
                if lock(&s.held_locks).is_empty() {
                    continue;
                }
                let lease_ms = s.options.lock_lease.as_millis() as u64;
                if let Err(e) = s.client.renew_lease(s.mount_id, lease_ms).await {
                    tracing::warn!("renewing the lease on this mount's locks failed (they lapse if this goes on): {e}");
                }
            }
        });
    }

    /// Where the session's notifier goes once the session exists (it is needed to invalidate
    /// the kernel's cached attributes at open).
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.shared.notifier.clone()
    }

    /// Runs `work` and answers the kernel with `done` or the error: polled first on this
    /// thread, on a task only if it has to wait (see [`poll_then_spawn`]).
    fn spawn<R, T, F>(&self, reply: R, work: impl FnOnce(Arc<Shared>) -> F, done: impl FnOnce(R, T) + Send + 'static)
    where
        R: Fail + Send + 'static,
        T: Send + 'static,
        F: Future<Output = Result<T, Errno>> + Send + 'static,
    {
        let op = metered::take();
        let _runtime = self.runtime.enter();
        let fut = work(self.shared.clone());
        poll_then_spawn(&self.runtime, async move {
            match fut.await {
                Ok(v) => {
                    done(reply, v);
                    op.done(true);
                }
                Err(e) => {
                    reply.fail(e);
                    op.done(false);
                }
            }
        });
    }

    /// Whether flushing or closing `fh` can change what the metadata service holds of its
    /// file: writes not yet flushed, or the last close of a file unlinked while open.
    fn handle_changes(&self, fh: u64) -> bool {
        self.shared.open.file(fh).is_none_or(|f| f.inode.local_overlay().is_some() || f.inode.orphan().is_some())
    }

    /// [`Self::spawn`] for a flush, fsync or release of `fh`: a change (see
    /// [`Self::spawn_change`]) when it can commit something.
    fn spawn_closing<F>(&self, fh: u64, reply: ReplyEmpty, work: impl FnOnce(Arc<Shared>) -> F)
    where
        F: Future<Output = Result<(), Errno>> + Send + 'static,
    {
        if self.handle_changes(fh) {
            self.spawn_change(reply, work, |r, ()| r.ok());
        } else {
            self.spawn(reply, work, |r, ()| r.ok());
        }
    }

    /// [`Self::spawn`] for an operation that can move a file's attributes: the listings kept
    /// for LOOKUPs are dropped when it starts and again when it is done (see `statahead.rs`).
    fn spawn_change<R, T, F>(
        &self,
        reply: R,
        work: impl FnOnce(Arc<Shared>) -> F,
        done: impl FnOnce(R, T) + Send + 'static,
    ) where
        R: Fail + Send + 'static,
        T: Send + 'static,
        F: Future<Output = Result<T, Errno>> + Send + 'static,
    {
        lock(&self.shared.statahead).changed();
        lock(&self.shared.open_cache).changed();
        let fut = work(self.shared.clone());
        self.spawn(
            reply,
            |s| async move {
                let out = fut.await;
                lock(&s.statahead).changed();
                lock(&s.open_cache).changed();
                out
            },
            done,
        );
    }
}

/// How [`poll_then_spawn`] left a request's future.
#[derive(Debug, PartialEq, Eq)]
enum Polled {
    /// Done on the calling thread.
    Done,
    /// Waiting, on a task of the runtime.
    Spawned,
    /// It panicked; dropped (a FUSE reply dropped unanswered answers EIO).
    Panicked,
}

/// Polls `task` once on the calling thread (fuser's, which read the request), in `runtime`'s
/// context, and hands it to the runtime only if it has to wait.
///
/// Why: what the request sends first (a metadata or storage call; the transport writes from
/// any thread) leaves at once, and the hand-off to the runtime's threads (waking one, tens of
/// microseconds on these machines when it sleeps) runs alongside that call instead of before
/// it; a request that needs no wait (an answer held in memory) is answered without a task at
/// all. Polling with a waker that does nothing is safe: the task polls the future again when
/// it starts, and whatever became ready meanwhile is ready then. A panic in that first poll
/// fails its request instead of fuser's thread.
fn poll_then_spawn<F: Future<Output = ()> + Send + 'static>(runtime: &Handle, task: F) -> Polled {
    let _runtime = runtime.enter();
    let mut task = Box::pin(task);
    let mut cx = Context::from_waker(Waker::noop());
    match std::panic::catch_unwind(AssertUnwindSafe(|| task.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) => Polled::Done,
        Ok(Poll::Pending) => {
            runtime.spawn(task);
            Polled::Spawned
        }
        Err(_) => {
            tracing::error!("handling a FUSE request panicked; the request fails with EIO");
            Polled::Panicked
        }
    }
}

impl Shared {
    fn attr_ttl(&self) -> Duration {
        self.options.attr_timeout
    }

    /// Keeps a directory's attributes, read from the metadata service by a request that
    /// started at `at`.
    fn remember_dir(&self, a: &Attr, at: Instant) {
        lock(&self.dir_attrs).put(a, at);
    }

    /// Forgets every kept directory attribute (after a change that moves directories).
    fn forget_dirs(&self) {
        lock(&self.dir_attrs).clear(Instant::now());
    }

    /// The kernel's view of `a`: local size and mtime while this mount has unflushed writes,
    /// nlink 0 for a file unlinked while open. Also remembers directory modes.
    fn kernel_attr(&self, mut a: Attr) -> FileAttr {
        if a.kind == FileKind::Dir {
            let mut m = lock(&self.dir_modes);
            if m.len() >= DIR_MODES_MAX && !m.contains_key(&a.ino) {
                m.clear();
            }
            m.insert(a.ino, (a.mode, a.gid));
        } else if let Some(open) = self.open.inode(a.ino) {
            self.versions.set_attrs(a.ino, a.data_version);
            if let Some((size, mtime)) = open.local_overlay() {
                a.size = size;
                a.mtime = mtime;
            }
            if open.orphan().is_some() {
                a.nlink = 0;
            }
        } else if a.kind == FileKind::File {
            self.versions.set_attrs(a.ino, a.data_version);
        }
        file_attr(&a)
    }

    /// Records that this mount's writes up to data version `version` are on the metadata
    /// service: the kernel's pages and size (which it updates itself on writes) match it.
    fn published(&self, ino: Ino, version: u64) {
        self.versions.set_pages(ino, version);
        self.versions.set_attrs(ino, version);
    }

    /// The gid and mode a new inode under `parent` gets: the caller's gid, or the directory's
    /// when it is setgid (new directories then inherit the setgid bit too).
    async fn new_owner(&self, parent: Ino, gid: u32, mode: u32, is_dir: bool) -> Result<(u32, u32), Errno> {
        let known = lock(&self.dir_modes).get(&parent).copied();
        let (parent_mode, parent_gid) = match known {
            Some(m) => m,
            None => {
                let a = self.client.getattr(parent).await.map_err(fail)?;
                (a.mode, a.gid)
            }
        };
        if parent_mode & libc::S_ISGID != 0 {
            Ok((parent_gid, if is_dir { mode | libc::S_ISGID } else { mode }))
        } else {
            Ok((gid, mode))
        }
    }

    /// The hidden directory for files unlinked while open, created on first use.
    async fn orphan_dir(&self) -> Result<Ino, Errno> {
        self.orphan_dir
            .get_or_try_init(|| async {
                match self.client.lookup(ROOT_INO, ORPHAN_DIR_NAME).await {
                    Ok(a) => Ok(a.ino),
                    Err(e) if e.code == ErrorCode::NotFound => {
                        match self.client.mkdir_as(ROOT_INO, ORPHAN_DIR_NAME, 0o700, 0, 0).await {
                            Ok(a) => Ok(a.ino),
                            Err(e) if e.code == ErrorCode::Exists => {
                                self.client.lookup(ROOT_INO, ORPHAN_DIR_NAME).await.map(|a| a.ino).map_err(fail)
                            }
                            Err(e) => Err(fail(e)),
                        }
                    }
                    Err(e) => Err(fail(e)),
                }
            })
            .await
            .copied()
    }

    /// If `parent/name` is the last link of a file open in this mount, moves it to the orphan
    /// directory (so its data stays readable through the open handles) and returns true; the
    /// last close deletes it. Otherwise changes nothing and returns false.
    async fn orphan_if_open(&self, parent: Ino, name: &str) -> Result<bool, Errno> {
        if self.open.no_inodes() {
            return Ok(false);
        }
        let target = match self.client.lookup(parent, name).await {
            Ok(a) => a,
            Err(e) if e.code == ErrorCode::NotFound => return Ok(false),
            Err(e) => return Err(fail(e)),
        };
        if target.kind != FileKind::File || target.nlink > 1 {
            return Ok(false);
        }
        // The pin keeps the last close from finishing the inode while it is being moved.
        let Some(inode) = self.open.pin_existing(target.ino) else { return Ok(false) };
        let result = async {
            let dir = self.orphan_dir().await?;
            let orphan = format!("{:016x}.{:016x}", target.ino, self.mount_id);
            let renamed = self.client.rename_mode(parent, name, dir, &orphan, RenameMode::NoReplace).await;
            self.forget_dirs();
            renamed.map_err(fail)?;
            inode.set_orphan(dir, orphan);
            Ok(true)
        }
        .await;
        self.unpin(&inode).await;
        result
    }

    /// Drops one pin of an open inode; the last one flushes it, and deletes it if it was
    /// unlinked while open.
    async fn unpin(&self, inode: &Arc<OpenInode>) {
        if !self.open.unpin(inode.ino) {
            return;
        }
        {
            let mut h = inode.file.lock().await;
            match h.flush().await {
                Ok(()) => {
                    inode.synced(&h);
                    self.published(inode.ino, h.attr().data_version);
                }
                Err(e) => {
                    tracing::warn!("flushing inode {} at its last close failed: {e}", inode.ino);
                    self.versions.forget(inode.ino);
                }
            }
        }
        if self.open.remove_if_unpinned(inode.ino) {
            if let Some((dir, name)) = inode.orphan() {
                if let Err(e) = self.client.unlink(dir, &name).await {
                    tracing::warn!("deleting {ORPHAN_DIR_NAME}/{name} (unlinked while open) failed: {e}");
                }
                self.versions.forget(inode.ino);
            }
        }
    }

    /// Opens `attr`'s file (fresh from the metadata service, with its first chunk records when
    /// `first` has them) for a kernel file handle; returns the handle number and whether the
    /// kernel may keep its cached pages.
    async fn open_attr(&self, attr: Attr, first: Option<FirstChunks>) -> Result<(u64, bool), Errno> {
        let begun = self.open_begin(attr, first)?;
        if begun.existed {
            self.open_revalidate(&begun).await?;
        }
        Ok(self.open_finish(begun))
    }

    /// The part of an open that never waits: pins the inode, installing a new handle when it
    /// is not open in this mount yet. When it was ([`OpenBegun::existed`]), the shared handle
    /// must be checked against `attr` ([`Self::open_revalidate`]) before [`Self::open_finish`].
    fn open_begin(&self, attr: Attr, first: Option<FirstChunks>) -> Result<OpenBegun, Errno> {
        let ino = attr.ino;
        if attr.kind != FileKind::File {
            return Err(if attr.kind == FileKind::Dir { Errno::EISDIR } else { Errno::EINVAL });
        }
        let keep_cache = !self.options.direct_io && self.versions.pages(ino) == Some(attr.data_version);
        let client = self.client.clone();
        let fresh = attr.clone();
        let (inode, existed) = self
            .open
            .pin_or_insert(ino, move || match first {
                Some(first) => client.open_with_first_chunks(first),
                None => client.open_with_attr(fresh),
            })
            .map_err(fail)?;
        Ok(OpenBegun { attr, inode, existed, keep_cache })
    }

    /// Close-to-open for an inode already open here: the shared handle may hold another
    /// client's older data; a new one is started if the file changed elsewhere (after
    /// publishing this mount's own writes). On failure the open's pin is dropped.
    async fn open_revalidate(&self, begun: &OpenBegun) -> Result<(), Errno> {
        let (ino, inode) = (begun.attr.ino, &begun.inode);
        let mut h = inode.file.lock().await;
        if h.attr().data_version == begun.attr.data_version {
            return Ok(());
        }
        let refreshed = async {
            h.flush().await?;
            let now = self.client.getattr_for_open(ino).await?;
            self.client.open_with_first_chunks(now)
        }
        .await;
        match refreshed {
            Ok(new) => {
                *h = new;
                inode.synced(&h);
                Ok(())
            }
            Err(e) => {
                drop(h);
                self.unpin(inode).await;
                Err(fail(e))
            }
        }
    }

    /// The rest of an open, which never waits either: the kernel's cached attributes and
    /// pages against the version opened, and the new kernel file handle.
    fn open_finish(&self, begun: OpenBegun) -> (u64, bool) {
        let OpenBegun { attr, inode, keep_cache, .. } = begun;
        let ino = attr.ino;
        if self.versions.attrs(ino).is_some_and(|v| v != attr.data_version) {
            // The kernel holds attributes (the size!) from before another client's change;
            // close-to-open means this open must not go on using them.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(INodeNo(ino), -1, 0);
            }
            self.versions.set_attrs(ino, attr.data_version);
        }
        if !keep_cache {
            self.versions.set_pages(ino, attr.data_version);
        }
        (self.open.add_file(inode), keep_cache)
    }

    /// What an open of `ino` by process `pid` may use instead of asking the metadata service:
    /// the answer its own LOOKUP brought (see `opencache.rs`), or one the open-cache time
    /// still allows.
    fn kept_open_answer(&self, ino: Ino, pid: u32, now: Instant) -> Option<FirstChunks> {
        let mut cache = lock(&self.open_cache);
        let handed = cache.take_handoff(ino, pid, now);
        metered::open_handoff().lookup(handed.is_some());
        handed.or_else(|| {
            let kept = cache.get(ino, now);
            metered::open_cache().lookup(kept.is_some());
            kept
        })
    }

    /// The answer to an OPEN that made kernel handle `fh` of a file of `size` bytes; a small
    /// file opened for reading whose pages the kernel does not keep starts its fetch now.
    /// `direct`: opened with `O_DIRECT` (the kernel's page cache keeps nothing it reads).
    fn opened(&self, fh: u64, keep_cache: bool, size: u64, read_only: bool, direct: bool) -> (u64, FopenFlags) {
        if !keep_cache && read_only {
            self.prefetch_small(fh, size, direct || self.options.direct_io);
        }
        (fh, self.open_flags(keep_cache))
    }

    fn open_flags(&self, keep_cache: bool) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if keep_cache {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if self.options.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        }
        f
    }

    /// Changes the size of `ino`: through the shared handle when open here (its buffered writes
    /// must not resurrect truncated bytes), directly otherwise.
    async fn truncate(&self, ino: Ino, size: u64) -> Result<Attr, Errno> {
        match self.open.inode(ino) {
            Some(inode) => {
                let mut h = inode.file.lock().await;
                h.truncate(size).await.map_err(fail)?;
                inode.synced(&h);
                // The kernel truncated its page cache itself; what remains matches the new version.
                self.published(ino, h.attr().data_version);
                Ok(h.attr().clone())
            }
            None => self.client.setattr(ino, SetAttr { size: Some(size), ..Default::default() }).await.map_err(fail),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn setattr(
        &self,
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
    ) -> Result<Attr, Errno> {
        let mut last = None;
        if let Some(size) = size {
            last = Some(self.truncate(ino, size).await?);
        }
        let to_ts = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => attr::timestamp(t),
            TimeOrNow::Now => Timestamp::now(),
        };
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size: None,
            atime: atime.map(to_ts),
            mtime: mtime.map(to_ts),
            ctime: ctime.map(attr::timestamp),
        };
        if set.mtime.is_some() {
            // Publish buffered writes first: their later commit would stamp its own mtime over
            // the one set here (tar and cp -p set times after writing).
            if let Some(inode) = self.open.inode(ino) {
                let mut h = inode.file.lock().await;
                h.flush().await.map_err(fail)?;
                inode.synced(&h);
                self.published(ino, h.attr().data_version);
            }
        }
        if set != SetAttr::default() {
            last = Some(self.client.setattr(ino, set).await.map_err(fail)?);
        }
        match last {
            Some(a) => Ok(a),
            None => self.client.getattr(ino).await.map_err(fail),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        parent: Ino,
        name: String,
        mode: u32,
        umask: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> Result<(Attr, u64, bool), Errno> {
        let (gid, mode) = self.new_owner(parent, gid, attr::creation_mode(mode, umask), false).await?;
        let exclusive = flags & libc::O_EXCL != 0;
        let mut a = self.client.create_as(parent, &name, mode, uid, gid, exclusive).await.map_err(fail)?;
        metrics::top::name_file(a.ino, &name);
        if a.kind != FileKind::File {
            return Err(if a.kind == FileKind::Dir { Errno::EISDIR } else { Errno::EEXIST });
        }
        if flags & libc::O_TRUNC != 0 && a.size != 0 {
            a = self.truncate(a.ino, 0).await?;
        }
        let (fh, keep_cache) = self.open_attr(a.clone(), None).await?;
        Ok((a, fh, keep_cache))
    }

    async fn unlink(&self, parent: Ino, name: &str) -> Result<(), Errno> {
        if self.orphan_if_open(parent, name).await? {
            return Ok(());
        }
        self.client.unlink(parent, name).await.map_err(fail)
    }

    async fn rename(
        &self,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        mode: RenameMode,
    ) -> Result<(), Errno> {
        if mode == RenameMode::Replace && !(parent == new_parent && name == new_name) {
            // A replaced destination that is open here must stay readable until closed.
            let src = if self.open.no_inodes() { None } else { self.client.lookup(parent, name).await.ok() };
            let dst = if src.is_some() { self.client.lookup(new_parent, new_name).await.ok() } else { None };
            if let (Some(src), Some(dst)) = (src, dst) {
                if src.ino != dst.ino && src.kind != FileKind::Dir {
                    self.orphan_if_open(new_parent, new_name).await?;
                }
            }
        }
        let renamed = self.client.rename_mode(parent, name, new_parent, new_name, mode).await;
        // A rename changes two directories and may move one: no post-operation attributes.
        self.forget_dirs();
        renamed.map_err(fail)
    }

    async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<bytes::Bytes, Errno> {
        let file = self.open.file(fh).ok_or(Errno::EBADF)?;
        tracing::trace!(ino = file.inode.ino, offset, size, "read");
        if let Some((reader, file_size)) = file.inode.clean_reader() {
            // Nothing of this mount's is unflushed: read what the cluster holds, alongside any
            // other reads of the file.
            return reader.read_at(offset, size as usize, file_size).await.map_err(fail);
        }
        let waiting = Instant::now();
        let mut h = file.inode.file.lock().await;
        stages::record(Stage::MountLockWait, waiting);
        h.read_at(offset, size as usize).await.map_err(fail)
    }

    async fn write(&self, fh: u64, offset: u64, data: Vec<u8>) -> Result<u32, Errno> {
        let file = self.open.file(fh).ok_or(Errno::EBADF)?;
        let len = u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        let mut h = file.inode.file.lock().await;
        h.write_at(offset, &data).await.map_err(fail)?;
        file.inode.written(&h);
        Ok(len)
    }

    /// After an open of a file of `size` bytes for reading (kernel handle `fh`) that the
    /// kernel's page cache does not hold: a small file's first chunk is fetched in the
    /// background at once, so the read that follows (a loader reads what it opens) finds it in
    /// flight instead of asking only when it arrives. Unless the reads bypass the page cache
    /// (`direct`), the kernel keeps what they read, so the client's memory cache keeps the
    /// chunk only on probation (`Keep::Once`): a pass over many samples is not held in memory
    /// twice.
    fn prefetch_small(&self, fh: u64, size: u64, direct: bool) {
        if size == 0 || size > OPEN_PREFETCH_BYTES_MAX {
            return;
        }
        if let Some((reader, _)) = self.open.file(fh).and_then(|f| f.inode.clean_reader()) {
            reader.prefetch_start(if direct { Keep::Cached } else { Keep::Once });
        }
    }

    /// Publishes an open file's buffered writes (close and fsync).
    async fn flush(&self, fh: u64) -> Result<(), Errno> {
        let file = self.open.file(fh).ok_or(Errno::EBADF)?;
        let mut h = file.inode.file.lock().await;
        h.flush().await.map_err(fail)?;
        file.inode.synced(&h);
        self.published(file.inode.ino, h.attr().data_version);
        Ok(())
    }

    /// A descriptor's close: publish its writes, and drop the POSIX locks of the closing
    /// process (POSIX: any close of the file releases the process's locks on it).
    async fn close(&self, ino: Ino, fh: u64, owner: u64) -> Result<(), Errno> {
        let flushed = self.flush(fh).await;
        self.release_locks(ino, owner).await;
        flushed
    }

    async fn release(&self, fh: u64, flock_owner: Option<u64>) -> Result<(), Errno> {
        let file = self.open.remove_file(fh).ok_or(Errno::EBADF)?;
        if let Some(owner) = flock_owner {
            self.release_locks(file.inode.ino, owner).await;
        }
        self.unpin(&file.inode).await;
        Ok(())
    }

    /// Releases kernel handle `fh` without waiting, when nothing about it can: its inode has no
    /// writes of this mount to publish and was not unlinked while open, `flock_owner` (if any)
    /// holds no cluster lock on it, and, should this be the inode's last pin, its handle is
    /// free and has nothing to flush. Then it does what [`Self::release`] would and returns
    /// true; otherwise it does nothing and returns false (the release goes to a task).
    fn release_now(&self, fh: u64, flock_owner: Option<u64>) -> bool {
        let Some(file) = self.open.file(fh) else { return false };
        let inode = &file.inode;
        if inode.local_overlay().is_some() || inode.orphan().is_some() {
            return false;
        }
        if flock_owner.is_some_and(|owner| lock(&self.held_locks).contains(&(inode.ino, owner))) {
            return false;
        }
        // Held until the inode is finished, as the last unpin's flush would hold it: an open
        // pinning the inode again meanwhile waits for it before revalidating the handle.
        let Ok(h) = inode.file.try_lock() else { return false };
        if h.has_unflushed() {
            return false;
        }
        self.open.remove_file(fh);
        if self.open.unpin(inode.ino) {
            inode.synced(&h);
            self.published(inode.ino, h.attr().data_version);
            drop(h);
            // Nothing to delete: an unlink while open pins the inode before it marks it, so
            // this cannot have been the last pin of an inode marked since the check above.
            self.open.remove_if_unpinned(inode.ino);
        }
        true
    }

    /// Makes sure position `offset` of an open directory is fetched (pages on demand).
    async fn fill_listing(&self, ino: Ino, listing: &mut DirListing, offset: u64) -> Result<(), Errno> {
        while let Some(after) = listing.next_page_cursor(offset) {
            let (page, more) = self.client.readdir_page(ino, &after, READDIR_PAGE_ENTRIES).await.map_err(fail)?;
            listing.push_page(page, more);
        }
        Ok(())
    }

    fn dir_handle(&self, fh: u64) -> Result<OpenDir, Errno> {
        lock(&self.dirs).get(&fh).cloned().ok_or(Errno::EBADF)
    }

    async fn fallocate(&self, ino: Ino, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        if mode != 0 {
            // Punching holes or zeroing ranges would need chunk rewrites; not supported.
            return Err(Errno::EOPNOTSUPP);
        }
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        let inode = self.open.inode(ino).ok_or(Errno::EBADF)?;
        let size = {
            let h = inode.file.lock().await;
            h.size()
        };
        if end > size {
            self.truncate(ino, end).await?;
        }
        Ok(())
    }

    fn lock_lease_ms(&self) -> u64 {
        self.options.lock_lease.as_millis() as u64
    }

    /// Takes, changes or releases a cluster lock; with `wait`, retries until granted (or the
    /// asking process is gone, so a killed waiter never ends up holding a lock).
    async fn set_lock(&self, ino: Ino, owner: u64, range: LockRange, wait: bool) -> Result<(), Errno> {
        if range.kind == LockKind::Unlock && !lock(&self.held_locks).contains(&(ino, owner)) {
            return Ok(());
        }
        let mut pause = LOCK_RETRY_FIRST;
        loop {
            let conflict =
                self.client.lock(ino, self.mount_id, owner, range, self.lock_lease_ms()).await.map_err(fail)?;
            if conflict.is_none() {
                if range.kind != LockKind::Unlock {
                    lock(&self.held_locks).insert((ino, owner));
                    if wait && !process_alive(range.pid) {
                        self.release_locks(ino, owner).await;
                    }
                }
                return Ok(());
            }
            if !wait {
                return Err(Errno::EAGAIN);
            }
            if waiter_interrupted(range.pid) {
                return Err(Errno::EINTR);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LOCK_RETRY_MAX);
        }
    }

    /// Releases every cluster lock `owner` holds on `ino` (close of a descriptor, release of a
    /// flock'ed file), if it may hold any.
    async fn release_locks(&self, ino: Ino, owner: u64) {
        if !lock(&self.held_locks).contains(&(ino, owner)) {
            return;
        }
        let all = LockRange { start: WHOLE_FILE.0, end: WHOLE_FILE.1, kind: LockKind::Unlock, pid: 0 };
        match self.client.lock(ino, self.mount_id, owner, all, self.lock_lease_ms()).await {
            Ok(_) => {
                lock(&self.held_locks).remove(&(ino, owner));
            }
            Err(e) => tracing::warn!("releasing the locks of owner {owner:x} on inode {ino} failed: {e}"),
        }
    }

    /// Fetches a directory's listing for the LOOKUPs that follow (see `statahead.rs`).
    async fn fetch_listing(&self, ticket: Ticket) {
        let dir = ticket.dir();
        let mut entries = Vec::new();
        let mut after = String::new();
        let fetched = loop {
            match self.client.readdir_page(dir, &after, READDIR_PAGE_ENTRIES).await {
                Ok((page, more)) => {
                    if let Some(last) = page.last() {
                        after = last.name.clone();
                    }
                    let empty = page.is_empty();
                    entries.extend(page);
                    if !more || empty || entries.len() >= LISTING_ENTRIES_MAX {
                        break Ok(());
                    }
                }
                Err(e) => break Err(e),
            }
        };
        let mut statahead = lock(&self.statahead);
        match fetched {
            Ok(()) => statahead.fetched(ticket, entries),
            Err(e) => {
                tracing::debug!("listing directory {dir} ahead of lookups failed: {e}");
                statahead.fetch_failed(ticket);
            }
        }
    }

    /// Flushes every open file (at unmount: the kernel releases files before, this is a guard).
    async fn flush_all(&self) {
        for inode in self.open.all_inodes() {
            let mut h = inode.file.lock().await;
            if let Err(e) = h.flush().await {
                tracing::warn!("flushing inode {} at unmount failed: {e}", inode.ino);
            }
        }
    }
}

impl Filesystem for TroveFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(REQUEST_BYTES_MAX);
        if let Err(nearest) = config.set_max_readahead(REQUEST_BYTES_MAX) {
            let _ = config.set_max_readahead(nearest);
        }
        let _ = config.set_max_background(self.shared.options.background_requests_max.max(1));
        let _ = config.set_congestion_threshold((self.shared.options.background_requests_max / 4 * 3).max(1));
        // Each capability on its own: an older kernel lacking one must not cost the others.
        for cap in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_DIO,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_BIG_WRITES,
        ]
        .into_iter()
        .chain(
            self.shared
                .options
                .cluster_locks
                .then_some([InitFlags::FUSE_POSIX_LOCKS, InitFlags::FUSE_FLOCK_LOCKS])
                .into_iter()
                .flatten(),
        ) {
            if config.add_capabilities(cap).is_err() {
                tracing::debug!("kernel lacks FUSE capability {cap:?}");
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        let shared = self.shared.clone();
        // Called on fuser's own thread, never inside the runtime, so blocking on it is allowed.
        self.runtime.block_on(async move {
            shared.flush_all().await;
            // The last second's reads still move their files' atimes.
            shared.client.send_atimes().await;
            if !lock(&shared.held_locks).is_empty() {
                // Ending the session releases every lock this mount still holds, at once.
                if let Err(e) = shared.client.renew_lease(shared.mount_id, 0).await {
                    tracing::warn!("releasing this mount's locks at unmount failed (they lapse with the lease): {e}");
                }
            }
        });
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _op = metered::begin(const { metered::slot("lookup") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        let kept = lock(&self.shared.statahead).lookup(parent.0, &name, Instant::now());
        metered::statahead().lookup(kept.is_some());
        if let Some((a, left)) = kept {
            // Answered on this thread from a listing younger than the entry timeout.
            let attr_ttl = self.shared.attr_ttl().min(left);
            return reply.entry_with_ttls(&attr_ttl, &left, &self.shared.kernel_attr(a), GENERATION);
        }
        let pid = req.pid();
        self.spawn(
            reply,
            move |s| async move {
                // A regular file's first chunk records come along, for the OPEN of this path
                // walk (if that is what it is): see opencache.rs.
                let started = Instant::now();
                let epoch = lock(&s.open_cache).epoch();
                let (a, first) = s.client.lookup_for_open(parent.0, &name).await.map_err(fail)?;
                if let Some(first) = first {
                    lock(&s.open_cache).hand_off(a.ino, pid, first, started, epoch);
                }
                metrics::top::name_file(a.ino, &name);
                s.remember_dir(&a, started);
                let ticket = lock(&s.statahead).found(parent.0, started);
                if let Some(ticket) = ticket {
                    let shared = s.clone();
                    tokio::spawn(async move { shared.fetch_listing(ticket).await });
                }
                Ok((s.kernel_attr(a), s.attr_ttl(), s.options.entry_timeout))
            },
            |r, (a, attr_ttl, entry_ttl)| r.entry_with_ttls(&attr_ttl, &entry_ttl, &a, GENERATION),
        );
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<Fh>, reply: ReplyAttr) {
        let _op = metered::begin(const { metered::slot("getattr") });
        let now = Instant::now();
        let cached = lock(&self.shared.dir_attrs).get(ino.0, now);
        metered::dir_attrs().lookup(cached.is_some());
        if let Some((a, left)) = cached {
            // Answered on this thread: no round trip, no hand-over to the runtime.
            return reply.attr(&left, &self.shared.kernel_attr(a));
        }
        let opened = lock(&self.shared.open_cache).get_with_left(ino.0, now);
        if let Some((first, left)) = opened {
            // A file an open fetched lately: the same answer, for the time it has left.
            return reply.attr(&left, &self.shared.kernel_attr(first.attr().clone()));
        }
        self.spawn(
            reply,
            move |s| async move {
                let started = Instant::now();
                let a = s.client.getattr(ino.0).await.map_err(fail)?;
                s.remember_dir(&a, started);
                Ok((s.kernel_attr(a), s.attr_ttl()))
            },
            |r, (a, ttl)| r.attr(&ttl, &a),
        );
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<Fh>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _op = metered::begin(const { metered::slot("setattr") });
        self.spawn_change(
            reply,
            move |s| async move {
                let a = s.setattr(ino.0, mode, uid, gid, size, atime, mtime, ctime).await?;
                s.remember_dir(&a, Instant::now());
                Ok((s.kernel_attr(a), s.attr_ttl()))
            },
            |r, (a, ttl)| r.attr(&ttl, &a),
        );
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _op = metered::begin(const { metered::slot("readlink") });
        self.spawn(
            reply,
            move |s| async move { s.client.readlink(ino.0).await.map_err(fail) },
            |r, t| r.data(t.as_bytes()),
        );
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let _op = metered::begin(const { metered::slot("mknod") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        let kind = match attr::mknod_kind(mode) {
            Ok(k) => k,
            Err(e) => return reply.error(e),
        };
        let (uid, gid) = (req.uid(), req.gid());
        self.spawn(
            reply,
            move |s| async move {
                let (gid, mode) = s.new_owner(parent.0, gid, attr::creation_mode(mode, umask), false).await?;
                let a = match kind {
                    Some(kind) => s.client.mknod_as(parent.0, &name, kind, mode, rdev, uid, gid).await,
                    None => s.client.create_as(parent.0, &name, mode, uid, gid, true).await,
                }
                .map_err(fail)?;
                Ok((s.kernel_attr(a), s.attr_ttl(), s.options.entry_timeout))
            },
            |r, (a, attr_ttl, entry_ttl)| r.entry_with_ttls(&attr_ttl, &entry_ttl, &a, GENERATION),
        );
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _op = metered::begin(const { metered::slot("mkdir") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        let (uid, gid) = (req.uid(), req.gid());
        self.spawn(
            reply,
            move |s| async move {
                let (gid, mode) = s.new_owner(parent.0, gid, attr::creation_mode(mode, umask), true).await?;
                let a = s.client.mkdir_as(parent.0, &name, mode, uid, gid).await.map_err(fail)?;
                s.remember_dir(&a, Instant::now());
                Ok((s.kernel_attr(a), s.attr_ttl(), s.options.entry_timeout))
            },
            |r, (a, attr_ttl, entry_ttl)| r.entry_with_ttls(&attr_ttl, &entry_ttl, &a, GENERATION),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("unlink") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        self.spawn(
            reply,
            move |s| async move {
                let done = s.unlink(parent.0, &name).await;
                lock(&s.statahead).removed(parent.0, &name);
                done
            },
            |r, ()| r.ok(),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("rmdir") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        self.spawn(reply, move |s| async move { s.client.rmdir(parent.0, &name).await.map_err(fail) }, |r, ()| r.ok());
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _op = metered::begin(const { metered::slot("symlink") });
        let (name, target) = match (name_str(link_name), target.to_str()) {
            (Ok(n), Some(t)) => (n.to_string(), t.to_string()),
            _ => return reply.error(Errno::EILSEQ),
        };
        let (uid, gid) = (req.uid(), req.gid());
        self.spawn(
            reply,
            move |s| async move {
                let (gid, _) = s.new_owner(parent.0, gid, 0o777, false).await?;
                let a = s.client.symlink_as(parent.0, &name, &target, uid, gid).await.map_err(fail)?;
                Ok((s.kernel_attr(a), s.attr_ttl(), s.options.entry_timeout))
            },
            |r, (a, attr_ttl, entry_ttl)| r.entry_with_ttls(&attr_ttl, &entry_ttl, &a, GENERATION),
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _op = metered::begin(const { metered::slot("rename") });
        let (name, newname) = match (name_str(name), name_str(newname)) {
            (Ok(a), Ok(b)) => (a.to_string(), b.to_string()),
            _ => return reply.error(Errno::EILSEQ),
        };
        let mode = match attr::rename_mode(flags) {
            Ok(m) => m,
            Err(e) => return reply.error(e),
        };
        self.spawn_change(
            reply,
            move |s| async move { s.rename(parent.0, &name, newparent.0, &newname, mode).await },
            |r, ()| r.ok(),
        );
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _op = metered::begin(const { metered::slot("link") });
        let newname = match name_str(newname) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        self.spawn_change(
            reply,
            move |s| async move {
                let a = s.client.link(ino.0, newparent.0, &newname).await.map_err(fail)?;
                Ok((s.kernel_attr(a), s.attr_ttl(), s.options.entry_timeout))
            },
            |r, (a, attr_ttl, entry_ttl)| r.entry_with_ttls(&attr_ttl, &entry_ttl, &a, GENERATION),
        );
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _op = metered::begin(const { metered::slot("open") });
        // A snapshot view (an inode number with bit 63 set, browsed under `.snapshots`) is
        // read-only: refused at open for writing, as a buffered write would only fail at close.
        if ino.0 & SNAPSHOT_VIEW_BIT != 0
            && flags.0 & (libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND) != libc::O_RDONLY
        {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        // Close-to-open: an open asks the metadata service for the current version, and takes
        // the records of the first chunks with it (a small file's first read then needs no
        // metadata round trip of its own), unless the LOOKUP of its own path walk brought them;
        // an answer younger than the open-cache time, with no change of this mount since, is
        // used again.
        let started = Instant::now();
        let read_only = flags.0 & (libc::O_ACCMODE | libc::O_TRUNC) == libc::O_RDONLY;
        let direct = flags.0 & libc::O_DIRECT != 0;
        let Some(first) = self.shared.kept_open_answer(ino.0, req.pid(), started) else {
            return self.spawn(
                reply,
                move |s| async move {
                    let epoch = lock(&s.open_cache).epoch();
                    let first = s.client.getattr_for_open(ino.0).await.map_err(fail)?;
                    lock(&s.open_cache).put(ino.0, first.clone(), started, epoch);
                    let size = first.attr().size;
                    let (fh, keep) = s.open_attr(first.attr().clone(), Some(first)).await?;
                    Ok(s.opened(fh, keep, size, read_only, direct))
                },
                |r, (fh, f)| r.opened(Fh(fh), f),
            );
        };
        // Kept: a file not open in this mount yet (a loader's every sample) is opened on this
        // thread, without a hand-off to a task; one already open may have to wait for its
        // handle, on a task.
        let _runtime = self.runtime.enter();
        let size = first.attr().size;
        match self.shared.open_begin(first.attr().clone(), Some(first)) {
            Err(e) => {
                metered::take().done(false);
                reply.error(e)
            }
            Ok(begun) if !begun.existed => {
                let (fh, keep) = self.shared.open_finish(begun);
                let (fh, f) = self.shared.opened(fh, keep, size, read_only, direct);
                reply.opened(Fh(fh), f)
            }
            Ok(begun) => self.spawn(
                reply,
                move |s| async move {
                    s.open_revalidate(&begun).await?;
                    let (fh, keep) = s.open_finish(begun);
                    Ok(s.opened(fh, keep, size, read_only, direct))
                },
                |r, (fh, f)| r.opened(Fh(fh), f),
            ),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Fh,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _op = metered::begin(const { metered::slot("read") });
        let received = Instant::now();
        let pid = req.pid();
        self.spawn(
            reply,
            move |s| async move {
                stages::record(Stage::FuseHandoff, received);
                let reading = Instant::now();
                let data = s.read(fh.0, offset, size).await;
                stages::record(Stage::MountRead, reading);
                if let Ok(bytes) = &data {
                    metered::read(ino.0, pid, bytes.len());
                }
                data
            },
            |r, data| {
                let replying = Instant::now();
                r.data(data.as_ref());
                stages::record(Stage::FuseReply, replying);
            },
        );
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Fh,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _op = metered::begin(const { metered::slot("write") });
        // The request buffer is fuser's, reused for the next request: the task needs a copy.
        let data = data.to_vec();
        let pid = req.pid();
        self.spawn_change(
            reply,
            move |s| async move {
                let n = s.write(fh.0, offset, data).await?;
                metered::write(ino.0, pid, n as usize);
                Ok(n)
            },
            |r, n| r.written(n),
        );
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: Fh, lock_owner: LockOwner, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("flush") });
        if !self.handle_changes(fh.0) && !lock(&self.shared.held_locks).contains(&(ino.0, lock_owner.0)) {
            // Nothing of this mount's to publish and no cluster lock of the closing owner to
            // let go: a close of a file only read (a loader's every sample) is answered here,
            // without a hand-off to a task.
            return reply.ok();
        }
        self.spawn_closing(fh.0, reply, move |s| async move { s.close(ino.0, fh.0, lock_owner.0).await });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: Fh,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _op = metered::begin(const { metered::slot("release") });
        // The kernel names a lock owner here only for files locked with flock.
        if self.shared.release_now(fh.0, lock_owner.map(|o| o.0)) {
            // A file only read (a loader's every sample): answered on this thread.
            return reply.ok();
        }
        self.spawn_closing(fh.0, reply, move |s| async move { s.release(fh.0, lock_owner.map(|o| o.0)).await });
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: Fh, _datasync: bool, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("fsync") });
        // Shards are written durably (fdatasync on every node) before a commit publishes them,
        // so fsync and fdatasync are the same flush.
        self.spawn_closing(fh.0, reply, move |s| async move { s.flush(fh.0).await });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _op = metered::begin(const { metered::slot("opendir") });
        let fh = self.shared.next_dir_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.dirs).insert(fh, (ino.0, Arc::new(tokio::sync::Mutex::new(DirListing::default()))));
        reply.opened(Fh(fh), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: Fh, offset: u64, mut reply: ReplyDirectory) {
        let _op = metered::begin(const { metered::slot("readdir") });
        let shared = self.shared.clone();
        let op = metered::take();
        self.runtime.spawn(async move {
            let _answered = op.on_drop();
            let (dir, listing) = match shared.dir_handle(fh.0) {
                Ok(d) => d,
                Err(e) => return reply.error(e),
            };
            let mut l = listing.lock().await;
            if offset == 0 {
                l.rewind();
            }
            let mut pos = offset;
            loop {
                if let Err(e) = shared.fill_listing(dir, &mut l, pos).await {
                    return reply.error(e);
                }
                let full = match l.slot(pos) {
                    Slot::Dot => reply.add(ino, pos + 1, fuser::FileType::Directory, "."),
                    Slot::DotDot => reply.add(ino, pos + 1, fuser::FileType::Directory, ".."),
                    Slot::Entry(e) if dir == ROOT_INO && e.name == ORPHAN_DIR_NAME => false,
                    Slot::Entry(e) => reply.add(INodeNo(e.attr.ino), pos + 1, attr::file_type(e.attr.kind), &e.name),
                    Slot::End => break,
                };
                if full {
                    break;
                }
                pos += 1;
            }
            reply.ok();
        });
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: Fh, offset: u64, mut reply: ReplyDirectoryPlus) {
        let _op = metered::begin(const { metered::slot("readdirplus") });
        let shared = self.shared.clone();
        let op = metered::take();
        self.runtime.spawn(async move {
            let _answered = op.on_drop();
            let (dir, listing) = match shared.dir_handle(fh.0) {
                Ok(d) => d,
                Err(e) => return reply.error(e),
            };
            let mut l = listing.lock().await;
            if offset == 0 {
                l.rewind();
            }
            let (attr_ttl, entry_ttl) = (shared.attr_ttl(), shared.options.entry_timeout);
            // The kernel ignores the attributes of "." and ".." in READDIRPLUS replies (it never
            // links them), but the format needs some.
            let dots = FileAttr {
                ino,
                size: 0,
                blocks: 0,
                atime: SystemTime::UNIX_EPOCH,
                mtime: SystemTime::UNIX_EPOCH,
                ctime: SystemTime::UNIX_EPOCH,
                crtime: SystemTime::UNIX_EPOCH,
                kind: fuser::FileType::Directory,
                perm: 0o755,
                nlink: 2,
                uid: 0,
                gid: 0,
                rdev: 0,
                blksize: attr::OTHER_BLKSIZE_BYTES,
                flags: 0,
            };
            let mut pos = offset;
            loop {
                if let Err(e) = shared.fill_listing(dir, &mut l, pos).await {
                    return reply.error(e);
                }
                let full = match l.slot(pos) {
                    Slot::Dot => reply.add(ino, pos + 1, ".", &Duration::ZERO, &dots, GENERATION),
                    Slot::DotDot => reply.add(ino, pos + 1, "..", &Duration::ZERO, &dots, GENERATION),
                    Slot::Entry(e) if dir == ROOT_INO && e.name == ORPHAN_DIR_NAME => false,
                    Slot::Entry(e) => {
                        let a = shared.kernel_attr(e.attr.clone());
                        // One TTL for both in a READDIRPLUS entry: the shorter is the safe one.
                        reply.add(INodeNo(e.attr.ino), pos + 1, &e.name, &attr_ttl.min(entry_ttl), &a, GENERATION)
                    }
                    Slot::End => break,
                };
                if full {
                    break;
                }
                pos += 1;
            }
            reply.ok();
        });
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: Fh, _flags: OpenFlags, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("releasedir") });
        lock(&self.shared.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: Fh, _datasync: bool, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("fsyncdir") });
        // Every namespace change is committed durably by the metadata service before it answers.
        reply.ok();
    }

    /// The cluster's capacity, or below a directory with a quota the quota's (as CephFS and
    /// JuiceFS show it): `df` in a quota'd tree shows its limit as the size and what is left of
    /// it (never more than the cluster has free) as free.
    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let _op = metered::begin(const { metered::slot("statfs") });
        let ino = ino.0;
        self.spawn(
            reply,
            move |s| async move {
                let st = s.client.statfs().await.map_err(fail)?;
                let quota = s.client.quota(ino, true).await.map_err(fail)?;
                Ok((st, quota))
            },
            |r, (st, quota)| {
                let bsize = if st.block_bytes == 0 { 4096 } else { st.block_bytes };
                let mut blocks = st.bytes_total / u64::from(bsize);
                let mut free = st.bytes_free / u64::from(bsize);
                let mut files = st.inodes_used + STATFS_FREE_INODES;
                let mut files_free = STATFS_FREE_INODES;
                if let Some(q) = quota {
                    let l = q.limits;
                    let bytes_limit = if l.bytes_hard != 0 { l.bytes_hard } else { l.bytes_soft };
                    if bytes_limit != 0 {
                        blocks = bytes_limit.div_ceil(u64::from(bsize));
                        free = free.min(bytes_limit.saturating_sub(q.bytes_used) / u64::from(bsize));
                    }
                    let inodes_limit = if l.inodes_hard != 0 { l.inodes_hard } else { l.inodes_soft };
                    if inodes_limit != 0 {
                        files = inodes_limit;
                        files_free = inodes_limit.saturating_sub(q.inodes_used);
                    }
                }
                let name_max = if st.name_bytes_max == 0 { wire::NAME_BYTES_MAX as u32 } else { st.name_bytes_max };
                r.statfs(blocks, free, free, files, files_free, bsize, name_max, bsize)
            },
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _op = metered::begin(const { metered::slot("setxattr") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        if !attr::xattr_name_supported(&name) || XATTR_NAMES_ABSENT.contains(&name.as_str()) {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let mode = match attr::xattr_mode(flags) {
            Ok(m) => m,
            Err(e) => return reply.error(e),
        };
        let value = value.to_vec();
        self.spawn_change(
            reply,
            move |s| async move {
                let done = s.client.setxattr(ino.0, &name, &value, mode).await;
                lock(&s.dir_attrs).forget(ino.0, Instant::now());
                done.map_err(fail)
            },
            |r, ()| r.ok(),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _op = metered::begin(const { metered::slot("getxattr") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        if name == STAGES_XATTR {
            // The latency breakdown of this mount's reads (see `client::StageReport`).
            return self.spawn(
                reply,
                move |s| async move {
                    let text = s.client.stage_report().await.map_err(fail)?.to_text().into_bytes();
                    attr::xattr_answer(&text, size).map(|a| match a {
                        XattrAnswer::Size(n) => Err(n),
                        XattrAnswer::Data(d) => Ok(d.to_vec()),
                    })
                },
                |r, answer| match answer {
                    Err(n) => r.size(n),
                    Ok(d) => r.data(&d),
                },
            );
        }
        if !attr::xattr_name_supported(&name) || XATTR_NAMES_ABSENT.contains(&name.as_str()) {
            return reply.error(Errno::ENODATA);
        }
        self.spawn(
            reply,
            move |s| async move {
                let v = s.client.getxattr(ino.0, &name).await.map_err(fail)?;
                attr::xattr_answer(&v, size).map(|a| match a {
                    XattrAnswer::Size(n) => Err(n),
                    XattrAnswer::Data(d) => Ok(d.to_vec()),
                })
            },
            |r, answer| match answer {
                Err(n) => r.size(n),
                Ok(d) => r.data(&d),
            },
        );
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _op = metered::begin(const { metered::slot("listxattr") });
        self.spawn(
            reply,
            move |s| async move {
                let names = s.client.listxattr(ino.0).await.map_err(fail)?;
                let list = attr::xattr_list(&names);
                attr::xattr_answer(&list, size).map(|a| match a {
                    XattrAnswer::Size(n) => Err(n),
                    XattrAnswer::Data(d) => Ok(d.to_vec()),
                })
            },
            |r, answer| match answer {
                Err(n) => r.size(n),
                Ok(d) => r.data(&d),
            },
        );
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("removexattr") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        if !attr::xattr_name_supported(&name) || XATTR_NAMES_ABSENT.contains(&name.as_str()) {
            return reply.error(Errno::ENODATA);
        }
        self.spawn_change(
            reply,
            move |s| async move {
                let done = s.client.removexattr(ino.0, &name).await;
                lock(&s.dir_attrs).forget(ino.0, Instant::now());
                done.map_err(fail)
            },
            |r, ()| r.ok(),
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("access") });
        // With default_permissions the kernel checks access itself and never asks.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _op = metered::begin(const { metered::slot("create") });
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) => return reply.error(e),
        };
        let (uid, gid) = (req.uid(), req.gid());
        self.spawn_change(
            reply,
            move |s| async move {
                let (a, fh, keep) = s.create(parent.0, name, mode, umask, flags, uid, gid).await?;
                Ok((s.kernel_attr(a), s.attr_ttl(), fh, s.open_flags(keep)))
            },
            |r, (a, ttl, fh, f)| r.created(&ttl, &a, GENERATION, Fh(fh), f),
        );
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Fh,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: fuser::ReplyLock,
    ) {
        let _op = metered::begin(const { metered::slot("getlk") });
        let Some(kind) = lock_kind(typ) else { return reply.error(Errno::EINVAL) };
        let range = LockRange { start, end, kind, pid };
        let shared = self.shared.clone();
        let op = metered::take();
        self.runtime.spawn(async move {
            let _answered = op.on_drop();
            match shared.client.test_lock(ino.0, shared.mount_id, lock_owner.0, range).await {
                Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
                Ok(Some(c)) => {
                    let typ = if c.kind == LockKind::Write { libc::F_WRLCK } else { libc::F_RDLCK };
                    reply.locked(c.start, c.end, typ, c.pid)
                }
                Err(e) => reply.error(fail(e)),
            }
        });
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Fh,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let _op = metered::begin(const { metered::slot("setlk") });
        let Some(kind) = lock_kind(typ) else { return reply.error(Errno::EINVAL) };
        let range = LockRange { start, end, kind, pid };
        self.spawn(reply, move |s| async move { s.set_lock(ino.0, lock_owner.0, range, sleep).await }, |r, ()| r.ok());
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: Fh,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        let _op = metered::begin(const { metered::slot("ioctl") });
        // Programs probe files with ioctls (isatty's TCGETS on every Python open): none apply.
        reply.error(Errno::ENOTTY);
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: Fh, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        let _op = metered::begin(const { metered::slot("fallocate") });
        self.spawn_change(
            reply,
            move |s| async move { s.fallocate(ino.0, offset, length, mode).await },
            |r, ()| r.ok(),
        );
    }
}

/// The lock kind of fcntl's lock type.
fn lock_kind(typ: i32) -> Option<LockKind> {
    match typ {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        libc::F_UNLCK => Some(LockKind::Unlock),
        _ => None,
    }
}

/// Whether process `pid` (of this mount's pid namespace) still exists; 0 (unknown) counts as
/// alive.
fn process_alive(pid: u32) -> bool {
    pid == 0 || Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether a process waiting for a blocking lock must stop waiting: it is gone, or one of its
/// threads has a signal pending that it neither blocks nor ignores (F_SETLKW and flock then fail
/// with EINTR), SIGKILL included. This matters beyond politeness: once the daemon has read a
/// request, the kernel waits for its answer even through SIGKILL, so a waiter we never answer
/// could not even be killed.
fn waiter_interrupted(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        if signal_deliverable(&status) {
            return true;
        }
    }
    false
}

/// Whether a `/proc/<pid>/task/<tid>/status` text shows a signal pending that will be delivered.
fn signal_deliverable(status: &str) -> bool {
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    pending & !mask("SigBlk:") & !mask("SigIgn:") != 0 || pending & sigkill != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_polled_on_the_calling_thread_and_only_its_wait_goes_to_a_task() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let here = std::thread::current().id();
        // An answer that needs no wait: done here, no task.
        let (tx, rx) = std::sync::mpsc::channel();
        let ready = tx.clone();
        assert_eq!(
            poll_then_spawn(
                runtime.handle(),
                async move { ready.send(("answered", std::thread::current().id())).unwrap() }
            ),
            Polled::Done
        );
        assert_eq!(rx.try_recv(), Ok(("answered", here)));
        // One that sends, then waits: what comes before the wait has run when the call returns
        // (the request left), the rest runs on the runtime once the answer comes.
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel::<u32>();
        let waiting = tx.clone();
        let polled = poll_then_spawn(runtime.handle(), async move {
            waiting.send(("sent", std::thread::current().id())).unwrap();
            let answer = answer_rx.await.unwrap();
            assert_eq!(answer, 7);
            waiting.send(("answered", std::thread::current().id())).unwrap();
        });
        assert_eq!(polled, Polled::Spawned);
        assert_eq!(rx.try_recv(), Ok(("sent", here)));
        answer_tx.send(7).unwrap();
        let (what, on) = rx.recv_timeout(Duration::from_secs(10)).expect("answered on the runtime");
        assert_eq!(what, "answered");
        assert_ne!(on, here, "the wait went to a runtime thread");
        // A timer the first poll set (under the waker that does nothing) still wakes the task.
        let timer = tx.clone();
        let polled = poll_then_spawn(runtime.handle(), async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            timer.send(("timer", std::thread::current().id())).unwrap();
        });
        assert_eq!(polled, Polled::Spawned);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).expect("the timer's wake-up reached the task").0, "timer");
        // A panic in the first poll fails only that request: what it held is dropped.
        struct Reply(std::sync::mpsc::Sender<(&'static str, std::thread::ThreadId)>);
        impl Drop for Reply {
            fn drop(&mut self) {
                let _ = self.0.send(("dropped", std::thread::current().id()));
            }
        }
        let reply = Reply(tx);
        let polled = poll_then_spawn(runtime.handle(), async move {
            let _reply = reply;
            panic!("a handler's bug");
        });
        assert_eq!(polled, Polled::Panicked);
        assert_eq!(rx.try_recv(), Ok(("dropped", here)));
    }

    #[test]
    fn pending_signals_interrupt_only_when_deliverable() {
        let status = |pnd: &str, shd: &str, blk: &str, ign: &str| {
            format!("Name:\tpython3\nSigQ:\t0/1000\nSigPnd:\t{pnd}\nShdPnd:\t{shd}\nSigBlk:\t{blk}\nSigIgn:\t{ign}\nSigCgt:\t0\n")
        };
        let none = "0000000000000000";
        assert!(!signal_deliverable(&status(none, none, none, none)));
        // SIGINT (2) pending for the process: delivered.
        assert!(signal_deliverable(&status(none, "0000000000000002", none, none)));
        // Blocked or ignored: the wait goes on.
        assert!(!signal_deliverable(&status(none, "0000000000000002", "0000000000000002", none)));
        assert!(!signal_deliverable(&status("0000000000000002", none, none, "0000000000000002")));
        // SIGKILL cannot be blocked.
        assert!(signal_deliverable(&status("0000000000000100", none, "ffffffffffffffff", none)));
        assert_eq!(lock_kind(libc::F_WRLCK), Some(LockKind::Write));
        assert_eq!(lock_kind(99), None);
        // This test's own process is alive and not interrupted.
        assert!(process_alive(std::process::id()));
        assert!(!waiter_interrupted(std::process::id()));
    }
}
