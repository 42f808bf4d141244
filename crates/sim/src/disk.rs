//! The simulated disks of the storage nodes: the shard store asks before each file operation
//! (`wire::world::disk`), and this decides, per node, whether it goes ahead.
//!
//! A node's disk is healthy, **failing** (every operation fails with `EIO`, as a dying drive's
//! do), or **full** (new files fail with `ENOSPC`; reads go on). Files are real (on tmpfs), so
//! bit rot is a byte flipped in a real shard file ([`SimDisk::rot`]).
//!
//! Power loss follows what a journaling file system promises: a file's data survives once
//! synced, and a rename survives once the directory it was renamed in is synced. The disk
//! remembers each rename until its directory is synced; [`SimDisk::power_loss`] undoes the
//! renames still pending on a node, removing the files they put in place. (A shard is written
//! to a temporary file, synced, then renamed: undoing the rename loses the whole shard, which is
//! what the store's directory sync before answering a put is there to prevent.)

use crate::trace::Trace;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wire::world::DiskOp;

/// The size every simulated disk reports (what the real file system under it has is not the
/// seed's to say).
const DISK_BYTES: u64 = 1 << 30;

/// `EIO` and `ENOSPC` on Linux.
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// The state of one node's disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Every operation fails with `EIO`.
    Failing,
    /// New files fail with `ENOSPC`.
    Full,
}

#[derive(Default)]
struct State {
    /// Each node's drive directory, and its disk's health.
    drives: BTreeMap<PathBuf, Health>,
    /// Renamed files whose directory has not been synced since, by drive.
    pending: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

pub struct SimDisk {
    state: Mutex<State>,
    trace: Arc<Trace>,
}

impl SimDisk {
    pub fn new(trace: Arc<Trace>) -> Arc<SimDisk> {
        Arc::new(SimDisk { state: Mutex::new(State::default()), trace })
    }

    /// Puts the drive at `root` (a node's) under this disk, healthy.
    pub fn add_drive(&self, root: &Path) {
        self.state.lock().drives.entry(root.to_path_buf()).or_insert(Health::Healthy);
    }

    pub fn health(&self, root: &Path) -> Health {
        self.state.lock().drives.get(root).copied().unwrap_or(Health::Healthy)
    }

    pub fn set_health(&self, root: &Path, health: Health) {
        self.state.lock().drives.insert(root.to_path_buf(), health);
        self.trace.note(format_args!("disk {}: {health:?}", name(root)));
    }

    /// The power fails on the node whose drive is `root`: renames not yet made durable by a
    /// directory sync are undone. Call once the node has stopped.
    pub fn power_loss(&self, root: &Path) {
        let lost = self.state.lock().pending.remove(root).unwrap_or_default();
        for path in &lost {
            // The rename never happened: the file it put in place is gone.
            let removed = std::fs::remove_file(path).is_ok();
            self.trace.note(format_args!(
                "disk {}: power loss undoes the rename of {}{}",
                name(root),
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
                if removed { "" } else { " (already gone)" }
            ));
        }
        self.trace.note(format_args!("disk {}: power lost, {} unsynced rename(s) undone", name(root), lost.len()));
    }

    /// Flips one byte of the file at `path` at `offset` (bit rot); returns the byte it held.
    pub fn rot(&self, path: &Path, offset: u64) -> io::Result<u8> {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, offset)?;
        file.write_all_at(&[byte[0] ^ 0x5a], offset)?;
        Ok(byte[0])
    }

    fn drive_of(state: &State, path: &Path) -> Option<PathBuf> {
        state.drives.keys().find(|root| path.starts_with(root)).cloned()
    }
}

impl wire::world::Disk for SimDisk {
    fn check(&self, op: DiskOp<'_>, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        let Some(root) = SimDisk::drive_of(&state, path) else { return Ok(()) };
        let health = state.drives.get(&root).copied().unwrap_or(Health::Healthy);
        match (health, op) {
            (Health::Failing, _) => return Err(io::Error::from_raw_os_error(EIO)),
            (Health::Full, DiskOp::Write) => return Err(io::Error::from_raw_os_error(ENOSPC)),
            _ => {}
        }
        match op {
            DiskOp::Rename { to } => {
                state.pending.entry(root).or_default().insert(to.to_path_buf());
            }
            DiskOp::SyncDir => {
                if let Some(pending) = state.pending.get_mut(&root) {
                    pending.retain(|file| file.parent() != Some(path));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn space(&self, path: &Path) -> Option<(u64, u64)> {
        let state = self.state.lock();
        let root = SimDisk::drive_of(&state, path)?;
        match state.drives.get(&root) {
            Some(Health::Full) => Some((0, DISK_BYTES)),
            _ => Some((DISK_BYTES, DISK_BYTES)),
        }
    }
}

/// A drive's name in the trace: its last component (`node2`), the same in every run.
fn name(root: &Path) -> String {
    root.file_name().map_or_else(|| root.display().to_string(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::world::Disk;

    #[test]
    fn a_power_loss_undoes_only_the_renames_no_directory_sync_covered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("node0");
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).expect("mkdir");
        std::fs::create_dir_all(&b).expect("mkdir");
        let disk = SimDisk::new(Trace::new(false));
        disk.add_drive(&root);
        let (synced, unsynced) = (a.join("shard1"), b.join("shard2"));
        for file in [&synced, &unsynced] {
            std::fs::write(file, b"data").expect("write");
            disk.check(DiskOp::Rename { to: file }, &root.join("tmp")).expect("healthy");
        }
        disk.check(DiskOp::SyncDir, &a).expect("healthy");
        disk.power_loss(&root);
        assert!(synced.exists(), "a rename its directory sync covered survives");
        assert!(!unsynced.exists(), "an unsynced rename is undone");
    }

    #[test]
    fn a_failing_disk_fails_everything_and_a_full_one_only_new_files() {
        let root = Path::new("/sim/node1");
        let disk = SimDisk::new(Trace::new(false));
        disk.add_drive(root);
        let file = root.join("x");
        disk.set_health(root, Health::Full);
        assert_eq!(disk.check(DiskOp::Write, &file).map_err(|e| e.raw_os_error()), Err(Some(ENOSPC)));
        assert!(disk.check(DiskOp::Read, &file).is_ok());
        disk.set_health(root, Health::Failing);
        assert_eq!(disk.check(DiskOp::Read, &file).map_err(|e| e.raw_os_error()), Err(Some(EIO)));
        assert!(disk.check(DiskOp::Read, Path::new("/elsewhere/x")).is_ok(), "only the node's own drive");
    }
}
