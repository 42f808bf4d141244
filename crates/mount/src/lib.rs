//! Trove's POSIX mount: a FUSE file system over the client library, so that unmodified
//! programs (PyTorch loaders, fio, SQLite, git, tar) read and write a Trove cluster.
//!
//! What it owns:
//! - the translation of every FUSE request into client calls (`fs.rs`), dispatched on tokio
//!   tasks so that many requests are in flight while a few kernel-reading threads stay free;
//! - the open-file table (`open.rs`): one client file handle per open inode, shared by every
//!   descriptor of the mount, and unlink-while-open (the file is moved to a hidden directory and
//!   deleted at the last close, like NFS's "silly rename");
//! - page-cache policy: close-to-open. An open keeps the kernel's cached pages only when the
//!   file's `data_version` on the metadata service is the one the cache was filled from;
//! - directory attributes for the attribute timeout (`dircache.rs`), so that the GETATTR the
//!   kernel sends after every change in a directory is answered without a round trip;
//! - what opens fetched (attributes and first chunk records) for the attribute timeout
//!   (`opencache.rs`), so that opening a file again soon costs no round trip;
//! - the mount lifecycle (`mountinfo.rs`): checks with clear errors, the kernel read-ahead
//!   window, unmounting.
//!
//! Permissions are enforced by the kernel (`default_permissions`) against the owner, group and
//! mode kept by the metadata service; new inodes take the caller's uid and gid (and a setgid
//! directory's group).
//!
//! Architecture invariant: this crate talks to the cluster only through `client`; it never
//! speaks a service protocol itself. File data reaches the kernel only from the client's
//! verified reads.

mod attr;
mod dir;
mod dircache;
mod fs;
pub mod metered;
pub mod mountinfo;
mod open;
mod opencache;
mod statahead;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use mountinfo::{check_mount_point, unmount};

/// Largest read or write request the kernel sends (FUSE `max_write`, and `max_pages` for reads).
pub const REQUEST_BYTES_MAX: u32 = 1 << 20;

/// Tunables of a mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// How long the kernel may cache an inode's attributes without asking again.
    pub attr_timeout: Duration,
    /// How long the kernel may cache a name-to-inode lookup without asking again.
    pub entry_timeout: Duration,
    /// Threads reading requests from the kernel (each hands requests to tokio tasks).
    pub threads: usize,
    /// The kernel's read-ahead window for sequential reads, in KiB (0 leaves the kernel's
    /// default of 128 KiB). Setting it needs root.
    pub read_ahead_kb: u32,
    /// Most asynchronous requests (read-ahead, direct I/O) the kernel keeps in flight.
    pub background_requests_max: u16,
    /// Let users other than the one who mounted use the mount (`allow_other`).
    pub allow_other: bool,
    /// Mount read-only.
    pub read_only: bool,
    /// Bypass the kernel page cache for file data (every read and write goes to the cluster).
    pub direct_io: bool,
    /// The source shown by `mount` and `df`.
    pub fs_name: String,
    /// fcntl and flock locks through the cluster's lock manager, coherent between mounts
    /// (otherwise the kernel keeps them, coherent within this mount only).
    pub cluster_locks: bool,
    /// How long the cluster keeps this mount's locks after losing contact with it (they are
    /// renewed every third of it while held).
    pub lock_lease: Duration,
    /// How long what an open fetched (attributes, first chunk records) answers later opens of
    /// the same file and their GETATTRs (see `opencache.rs`); zero asks at every open, which
    /// keeps close-to-open consistency between mounts.
    pub open_cache: Duration,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            threads: 2,
            read_ahead_kb: 8192,
            background_requests_max: 64,
            allow_other: true,
            read_only: false,
            direct_io: false,
            fs_name: "trove".to_string(),
            cluster_locks: true,
            lock_lease: Duration::from_secs(10),
            open_cache: Duration::ZERO,
        }
    }
}

/// Why a mount could not be set up or torn down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    #[error("FUSE is unavailable: {reason}")]
    FuseUnavailable { reason: String },
    #[error("mount point {}: {reason}", path.display())]
    MountPoint { path: PathBuf, reason: String },
    #[error("mount point {} is busy: {reason}", path.display())]
    Busy { path: PathBuf, reason: String },
    #[error("cannot mount on {}: {source}", path.display())]
    Mount { path: PathBuf, source: io::Error },
}

/// A live mount. Dropping it does not unmount: use [`Mounted::split`] to get what unmounts it
/// (for a signal handler) and what waits for the session's end; unmounting from outside
/// (`trove umount`) ends the session as well.
pub struct Mounted {
    mount_point: PathBuf,
    unmounter: Unmounter,
    session: Session,
}

/// Unmounts a live mount from another thread (a signal handler task).
pub struct Unmounter {
    mount_point: PathBuf,
    inner: fuser::SessionUnmounter,
}

impl Unmounter {
    /// Unmounts; when files are still open, detaches lazily instead, so the mount disappears
    /// now and the session ends when they are closed, rather than failing.
    pub fn unmount(&mut self) -> Result<(), MountError> {
        match self.inner.unmount() {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                tracing::warn!("{} is busy; detaching it lazily", self.mount_point.display());
                mountinfo::unmount(&self.mount_point, true)
            }
            Err(source) => Err(MountError::Mount { path: self.mount_point.clone(), source }),
        }
    }
}

/// The thread serving a mount's FUSE session.
pub struct Session {
    thread: std::thread::JoinHandle<io::Result<()>>,
    mount_point: PathBuf,
}

impl Session {
    /// Waits until the file system is unmounted and the session has ended.
    pub fn join(self) -> io::Result<()> {
        let ended = self.thread.join().map_err(|_| io::Error::other("the FUSE session thread panicked"))?;
        session_end(ended, || mountinfo::mount_at(&self.mount_point).is_some())
    }
}

/// What a session's end means. An unmount can catch a reader thread holding a request at the
/// moment the kernel tears the connection down: Linux's `fuse_dev_do_read` answers it
/// ECONNABORTED, where an idle reader gets ENODEV (which ends the session quietly). With several
/// reader threads one of them can be caught so on any unmount, so ECONNABORTED is the session's
/// normal end once the mount is gone; while the mount is still there it is an error.
fn session_end(ended: io::Result<()>, still_mounted: impl FnOnce() -> bool) -> io::Result<()> {
    match ended {
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) && !still_mounted() => Ok(()),
        ended => ended,
    }
}

impl Mounted {
    /// The mount point (canonical).
    pub fn mount_point(&self) -> &Path {
        &self.mount_point
    }

    /// What unmounts the file system, and what waits for the session's end.
    pub fn split(self) -> (Unmounter, Session) {
        (self.unmounter, self.session)
    }
}

/// Mounts the cluster `client` talks to at `mount_point` and starts serving it. Blocks until
/// the kernel has accepted the mount (call it from a blocking thread); FUSE requests are then
/// served by the session thread, their work done on `runtime`.
pub fn mount(
    client: client::Client,
    runtime: tokio::runtime::Handle,
    mount_point: &Path,
    options: &MountOptions,
) -> Result<Mounted, MountError> {
    let mount_point = check_mount_point(mount_point)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(options.fs_name.clone()),
        fuser::MountOption::Subtype("trove".to_string()),
        fuser::MountOption::DefaultPermissions,
        if options.read_only { fuser::MountOption::RO } else { fuser::MountOption::RW },
    ];
    config.acl = if options.allow_other { fuser::SessionACL::All } else { fuser::SessionACL::Owner };
    config.n_threads = Some(options.threads.max(1));
    config.clone_fd = true;
    let fs = fs::TroveFs::new(client, runtime, options.clone());
    let notifier_slot = fs.notifier_slot();
    let mut session = fuser::Session::new(fs, &mount_point, &config).map_err(|source| {
        let source = if source.kind() == io::ErrorKind::PermissionDenied {
            io::Error::new(
                source.kind(),
                format!("{source} (mounting needs root, or fusermount3 from the fuse3 package)"),
            )
        } else {
            source
        };
        MountError::Mount { path: mount_point.clone(), source }
    })?;
    let _ = notifier_slot.set(session.notifier());
    let unmounter = Unmounter { mount_point: mount_point.clone(), inner: session.unmount_callable() };
    if options.read_ahead_kb > 0 {
        if let Err(e) = mountinfo::set_read_ahead(&mount_point, options.read_ahead_kb) {
            tracing::warn!(
                "cannot set the read-ahead window of {} to {} KiB: {e}",
                mount_point.display(),
                options.read_ahead_kb
            );
        }
    }
    let thread = std::thread::Builder::new()
        .name("trove-fuse".into())
        .spawn(move || session.run())
        .map_err(|source| MountError::Mount { path: mount_point.clone(), source })?;
    Ok(Mounted { mount_point: mount_point.clone(), unmounter, session: Session { thread, mount_point } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aborted() -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ECONNABORTED))
    }

    #[test]
    fn a_connection_aborted_by_the_unmount_ends_the_session_cleanly() {
        assert!(session_end(aborted(), || false).is_ok());
        assert!(session_end(Ok(()), || false).is_ok());
    }

    #[test]
    fn an_abort_while_still_mounted_and_other_errors_are_reported() {
        let e = session_end(aborted(), || true).expect_err("aborted while mounted");
        assert_eq!(e.raw_os_error(), Some(libc::ECONNABORTED));
        let e = session_end(Err(io::Error::from_raw_os_error(libc::EIO)), || false).expect_err("EIO");
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
}
