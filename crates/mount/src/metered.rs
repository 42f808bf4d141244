//! What the mount records into its process's metrics (protocol `fuse`): every FUSE request by
//! operation, from the callback to the reply, with errors; the bytes read and written; the
//! busiest files and the processes reading and writing through the mount (`/top`); and the
//! hit rates of its caches.
//!
//! A request is timed from its callback to its answer, which for most requests is given on a
//! task after the callback returned: the callback marks the operation on its thread
//! ([`begin`]), and [`take`], called by the code that hands the request to a task, carries it
//! along to be finished with the answer. A request answered inside the callback (from a cache)
//! is finished when the callback's mark is dropped. So the callbacks gain one line each and
//! the request paths none.

use metrics::gauges::CacheStats;
use metrics::ops::OpTable;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The FUSE operations, in slot order.
pub const NAMES: [&str; 33] = [
    "lookup",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "access",
    "create",
    "getlk",
    "setlk",
    "ioctl",
    "fallocate",
];

/// The slot of FUSE operation `name`, a name of [`NAMES`]: evaluated at compile time by the
/// callers (`const { slot("read") }`), so a misspelt name does not build.
pub const fn slot(name: &str) -> usize {
    let mut i = 0;
    while i < NAMES.len() {
        if const_eq(NAMES[i].as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("not a FUSE operation of metered::NAMES");
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The `fuse` protocol's operations.
pub fn table() -> &'static OpTable {
    static TABLE: OnceLock<&'static OpTable> = OnceLock::new();
    TABLE.get_or_init(|| metrics::ops::table("fuse", &NAMES))
}

thread_local! {
    /// The operation whose callback runs on this thread, not yet handed to a task.
    static CURRENT: Cell<Option<(usize, Instant)>> = const { Cell::new(None) };
}

/// Marks the start of callback `op` on this thread; answered in the callback unless [`take`]
/// carries it to a task.
#[must_use]
pub fn begin(op: usize) -> Mark {
    if let Some(started) = table().start() {
        CURRENT.with(|c| c.set(Some((op, started))));
    }
    Mark
}

/// The mark of a callback: finishes its operation when dropped, unless it was taken.
pub struct Mark;

impl Drop for Mark {
    fn drop(&mut self) {
        if let Some((op, started)) = CURRENT.with(|c| c.take()) {
            table().done(op, Some(started), true);
        }
    }
}

/// The operation of the running callback, to be finished by whoever answers it.
#[must_use]
pub fn take() -> Pending {
    Pending(CURRENT.with(|c| c.take()))
}

/// An operation handed to a task.
pub struct Pending(Option<(usize, Instant)>);

impl Pending {
    /// Finishes it, answered with success or an error.
    pub fn done(self, ok: bool) {
        if let Some((op, started)) = self.0 {
            table().done(op, Some(started), ok);
        }
    }

    /// Finishes it when the returned value is dropped (the end of a task with several ways
    /// to answer).
    pub fn on_drop(self) -> PendingGuard {
        PendingGuard(self.0)
    }
}

/// See [`Pending::on_drop`].
pub struct PendingGuard(Option<(usize, Instant)>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if let Some((op, started)) = self.0.take() {
            table().done(op, Some(started), true);
        }
    }
}

/// Counts a read of `bytes` of file `ino` by process `pid`.
pub fn read(ino: u64, pid: u32, bytes: usize) {
    if !metrics::enabled() {
        return;
    }
    table().read_bytes(bytes as u64);
    metrics::top::file(ino, bytes as u64, 0);
    metrics::top::client(&process_name(pid), bytes as u64, 0);
}

/// Counts a write of `bytes` to file `ino` by process `pid`.
pub fn write(ino: u64, pid: u32, bytes: usize) {
    if !metrics::enabled() {
        return;
    }
    table().write_bytes(bytes as u64);
    metrics::top::file(ino, 0, bytes as u64);
    metrics::top::client(&process_name(pid), 0, bytes as u64);
}

/// Names processes seen (bounded; cleared when full).
const PROCESS_NAMES_MAX: usize = 4096;

/// "pid 1234 (fio)": a process reading or writing through the mount, as `/top` names it.
fn process_name(pid: u32) -> Arc<str> {
    static NAMES: OnceLock<Mutex<HashMap<u32, Arc<str>>>> = OnceLock::new();
    let names = NAMES.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(n) = names.lock().get(&pid) {
        return n.clone();
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let name: Arc<str> = Arc::from(format!("pid {pid} ({})", comm.trim()).as_str());
    let mut names = names.lock();
    if names.len() >= PROCESS_NAMES_MAX {
        names.clear();
    }
    names.insert(pid, name.clone());
    name
}

/// The mount's caches.
pub fn dir_attrs() -> &'static CacheStats {
    static C: OnceLock<&'static CacheStats> = OnceLock::new();
    C.get_or_init(|| metrics::gauges::cache("mount.dir_attrs"))
}

pub fn statahead() -> &'static CacheStats {
    static C: OnceLock<&'static CacheStats> = OnceLock::new();
    C.get_or_init(|| metrics::gauges::cache("mount.statahead"))
}

pub fn open_cache() -> &'static CacheStats {
    static C: OnceLock<&'static CacheStats> = OnceLock::new();
    C.get_or_init(|| metrics::gauges::cache("mount.open"))
}

/// Opens answered by their own path walk's lookup (hit) or not (miss); the open cache counts
/// only the opens this leaves it.
pub fn open_handoff() -> &'static CacheStats {
    static C: OnceLock<&'static CacheStats> = OnceLock::new();
    C.get_or_init(|| metrics::gauges::cache("mount.open_handoff"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_answered_at_once_or_on_a_task_is_counted_once() {
        metrics::enable();
        let (lookup, read) = (slot("lookup"), slot("read"));
        let before = (table().counts(lookup).0, table().counts(read).0);
        {
            let _m = begin(lookup);
        }
        {
            let _m = begin(read);
            let pending = take();
            pending.done(false);
        }
        assert_eq!(table().counts(lookup).0, before.0 + 1);
        assert_eq!(table().counts(read), (before.1 + 1, table().counts(read).1));
        assert!(table().counts(read).1 >= 1, "the read failed");
        let mut sorted = NAMES.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), NAMES.len());
    }
}
