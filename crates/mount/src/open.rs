//! Open files of one mount: every kernel file handle (`fh`) of an inode shares ONE client
//! [`FileHandle`], so that within a mount a write through one descriptor is seen at once by a
//! read through another (the client's handle buffers writes until flush, and two handles would
//! each see only their own).
//!
//! An inode stays in the table while it is pinned: by each open file handle, and briefly by
//! operations (unlink, rename) that must not race with the last close. The last unpin flushes
//! the handle and, if the file was unlinked while open, deletes it for good.
//!
//! Reads do not queue behind that handle: an inode with nothing unflushed is read through the
//! handle's shared read side (`client::ReadSide`), by any number of requests at once; only
//! while writes of this mount are unflushed do reads take the handle, to see them.
//!
//! Also here: which data version the kernel's page cache holds for each inode (close-to-open
//! revalidation decides `keep_cache` from it).

use client::{FileHandle, ReadSide};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use wire::{Ino, Timestamp};

/// Most inodes whose page-cache version is remembered; beyond it the memory is dropped (the
/// cost is one re-read of each file's data, not a wrong answer).
pub const CACHE_VERSIONS_MAX: usize = 1 << 20;

/// Locks a std mutex; a panic while holding it cannot leave these maps half-updated in a way
/// that matters more than stopping the whole mount, so poisoning is ignored.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One open inode, shared by all its open file handles in this mount.
pub struct OpenInode {
    pub ino: Ino,
    /// The client's handle: reads, buffered writes, flushes. Held across awaits, hence tokio's.
    pub file: tokio::sync::Mutex<FileHandle>,
    /// The size including writes not yet flushed: what `stat` must show meanwhile.
    size: AtomicU64,
    /// Set by a write, cleared by a flush: the local mtime while the metadata service lags.
    dirty_since: Mutex<Option<Timestamp>>,
    /// The current handle's read side, for reads while nothing is unflushed.
    reader: Mutex<ReadSide>,
    /// Where the file was moved when unlinked while open: (directory, name). Deleted at the
    /// last close.
    orphan: Mutex<Option<(Ino, String)>>,
}

impl OpenInode {
    pub fn new(handle: FileHandle) -> OpenInode {
        OpenInode {
            ino: handle.ino(),
            size: AtomicU64::new(handle.size()),
            reader: Mutex::new(handle.read_side()),
            file: tokio::sync::Mutex::new(handle),
            dirty_since: Mutex::new(None),
            orphan: Mutex::new(None),
        }
    }

    /// Records a write: the handle's new size, and that the metadata service lags behind.
    pub fn written(&self, handle: &FileHandle) {
        let mut dirty = lock(&self.dirty_since);
        self.size.store(handle.size(), Ordering::Release);
        *dirty = Some(Timestamp::now());
    }

    /// Records that the handle's state is now all on the metadata service (after a flush, a
    /// truncation, or a new handle replacing the old one).
    pub fn synced(&self, handle: &FileHandle) {
        let mut dirty = lock(&self.dirty_since);
        *lock(&self.reader) = handle.read_side();
        self.size.store(handle.size(), Ordering::Release);
        *dirty = None;
    }

    /// The read side and the size to read with, when this mount has nothing unflushed of the
    /// file (so what the cluster holds is what a read must return); `None` otherwise.
    pub fn clean_reader(&self) -> Option<(ReadSide, u64)> {
        let dirty = lock(&self.dirty_since);
        if dirty.is_some() {
            return None;
        }
        Some((lock(&self.reader).clone(), self.size.load(Ordering::Acquire)))
    }

    /// Size and mtime to show instead of the metadata service's, while writes are unflushed.
    pub fn local_overlay(&self) -> Option<(u64, Timestamp)> {
        let dirty = *lock(&self.dirty_since);
        dirty.map(|t| (self.size.load(Ordering::Acquire), t))
    }

    pub fn set_orphan(&self, dir: Ino, name: String) {
        *lock(&self.orphan) = Some((dir, name));
    }

    pub fn orphan(&self) -> Option<(Ino, String)> {
        lock(&self.orphan).clone()
    }
}

/// One open file handle of the kernel.
pub struct OpenFile {
    pub inode: Arc<OpenInode>,
}

#[derive(Default)]
struct Tables {
    files: HashMap<u64, Arc<OpenFile>>,
    /// Each open inode and how many pins it has.
    inodes: HashMap<Ino, (Arc<OpenInode>, usize)>,
}

/// The open files and inodes of a mount.
#[derive(Default)]
pub struct OpenTable {
    tables: Mutex<Tables>,
    next_fh: AtomicU64,
}

impl OpenTable {
    /// Pins `ino`, installing `make()`'s handle if it is not open yet. Returns the shared inode
    /// and whether it was already open.
    pub fn pin_or_insert<E>(
        &self,
        ino: Ino,
        make: impl FnOnce() -> Result<FileHandle, E>,
    ) -> Result<(Arc<OpenInode>, bool), E> {
        let mut t = lock(&self.tables);
        if let Some((inode, pins)) = t.inodes.get_mut(&ino) {
            *pins += 1;
            return Ok((inode.clone(), true));
        }
        let inode = Arc::new(OpenInode::new(make()?));
        t.inodes.insert(ino, (inode.clone(), 1));
        Ok((inode, false))
    }

    /// Pins `ino` if it is open.
    pub fn pin_existing(&self, ino: Ino) -> Option<Arc<OpenInode>> {
        let mut t = lock(&self.tables);
        let (inode, pins) = t.inodes.get_mut(&ino)?;
        *pins += 1;
        Some(inode.clone())
    }

    /// Drops one pin; true when it was the last one (the caller then finishes the inode and
    /// calls [`OpenTable::remove_if_unpinned`]).
    pub fn unpin(&self, ino: Ino) -> bool {
        let mut t = lock(&self.tables);
        match t.inodes.get_mut(&ino) {
            Some((_, pins)) => {
                *pins = pins.saturating_sub(1);
                *pins == 0
            }
            None => false,
        }
    }

    /// Removes `ino` unless someone pinned it again meanwhile; true if removed.
    pub fn remove_if_unpinned(&self, ino: Ino) -> bool {
        let mut t = lock(&self.tables);
        if matches!(t.inodes.get(&ino), Some((_, 0))) {
            t.inodes.remove(&ino);
            return true;
        }
        false
    }

    /// The open inode `ino`, without pinning it.
    pub fn inode(&self, ino: Ino) -> Option<Arc<OpenInode>> {
        lock(&self.tables).inodes.get(&ino).map(|(i, _)| i.clone())
    }

    /// Whether no inode is open (then unlink and rename need no open-file checks).
    pub fn no_inodes(&self) -> bool {
        lock(&self.tables).inodes.is_empty()
    }

    /// Every open inode (for the final flush at unmount).
    pub fn all_inodes(&self) -> Vec<Arc<OpenInode>> {
        lock(&self.tables).inodes.values().map(|(i, _)| i.clone()).collect()
    }

    /// Registers a kernel file handle on a pinned inode; returns its number.
    pub fn add_file(&self, inode: Arc<OpenInode>) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.tables).files.insert(fh, Arc::new(OpenFile { inode }));
        fh
    }

    pub fn file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        lock(&self.tables).files.get(&fh).cloned()
    }

    pub fn remove_file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        lock(&self.tables).files.remove(&fh)
    }
}

/// What the kernel holds for each inode, as data versions: the version its page cache was
/// filled from (or written at), and the version of the attributes it was last sent. An open that
/// finds the same version on the metadata service keeps the cached pages (close-to-open) and
/// needs no attribute invalidation.
#[derive(Default)]
pub struct CacheVersions {
    map: Mutex<HashMap<Ino, KernelView>>,
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct KernelView {
    pages: Option<u64>,
    attrs: Option<u64>,
}

impl CacheVersions {
    fn update(&self, ino: Ino, f: impl FnOnce(&mut KernelView)) {
        let mut m = lock(&self.map);
        if m.len() >= CACHE_VERSIONS_MAX && !m.contains_key(&ino) {
            m.clear();
        }
        f(m.entry(ino).or_default());
    }

    /// The version the kernel's cached pages of `ino` hold.
    pub fn pages(&self, ino: Ino) -> Option<u64> {
        lock(&self.map).get(&ino).and_then(|v| v.pages)
    }

    pub fn set_pages(&self, ino: Ino, version: u64) {
        self.update(ino, |v| v.pages = Some(version));
    }

    /// The version of the attributes last sent to the kernel for `ino`.
    pub fn attrs(&self, ino: Ino) -> Option<u64> {
        lock(&self.map).get(&ino).and_then(|v| v.attrs)
    }

    pub fn set_attrs(&self, ino: Ino, version: u64) {
        self.update(ino, |v| v.attrs = Some(version));
    }

    pub fn forget(&self, ino: Ino) {
        lock(&self.map).remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_versions_are_bounded() {
        let v = CacheVersions::default();
        v.set_pages(1, 5);
        v.set_attrs(1, 6);
        assert_eq!((v.pages(1), v.attrs(1)), (Some(5), Some(6)));
        for i in 0..CACHE_VERSIONS_MAX as u64 + 1 {
            v.set_pages(i + 10, 1);
        }
        assert!(lock(&v.map).len() <= CACHE_VERSIONS_MAX);
        v.forget(CACHE_VERSIONS_MAX as u64 + 10);
        assert_eq!(v.pages(CACHE_VERSIONS_MAX as u64 + 10), None);
    }
}
