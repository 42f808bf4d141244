//! The shard store: owns the drive directories of one storage node and the shard files on them.
//!
//! It is the only code that touches shard files, so crash safety, checksums and space
//! accounting are decided here and nowhere else. The file format is defined in
//! [`crate::format`] (byte table there and in ARCHITECTURE.md).
//!
//! Layout: `<drive>/shards/<2 hex digits of a hash of the key>/<chunk id, 16 hex>.<index>`.
//! The hash spreads sequential chunk ids over 256 directories so no directory grows huge.
//! A new shard goes to a drive chosen by the same hash over the healthy drives.
//!
//! Durability: a put writes a temp file (`.tmp.*`) in the final directory (with `O_DIRECT`
//! where the drive's file system takes it, see [`crate::direct`]), fdatasyncs it,
//! renames it into place and fsyncs the directory before answering, so a crash leaves either
//! the complete shard or nothing under the final name. Leftover temp files are removed when the
//! store opens. Reads check every header field and block checksum, so a torn, truncated or
//! bit-rotted file is reported as corrupt, never served.
//!
//! In memory the store keeps an ordered index of every shard and the drive holding it (built by
//! scanning every drive at open). It serves `ListShards` in key order without walking
//! directories, gives the per-drive shard counts for `Stat`, and finds a shard wherever it
//! lives: after a drive is added, the hash points some existing keys at the new drive, but the
//! index still knows they are on the old one. Cost: about 30 bytes of memory per shard.
//!
//! Encryption at rest: with a key file (`StoreConfig::key_file`), each drive's data keys
//! ([`crate::crypt::Keyring`], created at the first open) seal every new shard (format version
//! 2); shards written before stay plaintext (version 1) until rewritten, and both are read.
//!
//! Every method here does blocking file I/O; async callers run them in `spawn_blocking`
//! (see [`crate::service`]).

use crate::crypt::{Kek, Keyring};
use crate::format::{self, FormatError, ShardHeader, HEADER_BYTES_MAX};
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use rustix::io::Errno;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use wire::pool::PooledBuf;
use wire::stages::{self, Stage};
use wire::world::DiskOp;
use wire::{werr, DriveInfo, ShardInfo, ShardKey, WireError};

/// Prefix of temp files; anything starting with it is garbage from an interrupted put.
pub const TMP_PREFIX: &str = ".tmp.";
/// Most keys one `list` call returns, whatever the caller asks (bounds the reply size).
pub const LIST_KEYS_MAX: u32 = 10_000;
/// Most shards one `Scrub` request verifies (a page: a few seconds of one drive at most).
pub const SCRUB_KEYS_MAX: u32 = 256;
/// Number of hash directories under `<drive>/shards` (named `00` .. `ff`).
const HASH_DIRS: usize = 256;
/// Number of per-key lock stripes serialising puts and deletes of the same key.
const STRIPES: usize = 256;

/// What one page of a scrub found, whichever backend the shards live on: a shard that reads
/// back is counted with its bytes, one that fails its checks (or cannot be read) is named with
/// the cause, and one deleted meanwhile is passed over.
#[derive(Default)]
pub struct ScrubTally {
    checked: u32,
    bytes: u64,
    bad: Vec<(ShardKey, String)>,
}

impl ScrubTally {
    /// Notes the outcome of reading shard `key` whole (its length on success).
    pub fn note(&mut self, key: ShardKey, read: Result<usize, wire::WireError>) {
        match read {
            Ok(len) => {
                self.checked += 1;
                self.bytes += len as u64;
            }
            Err(e) if matches!(e.code, wire::ErrorCode::Corrupt | wire::ErrorCode::Io) => {
                self.checked += 1;
                self.bad.push((key, e.message));
            }
            Err(_) => {}
        }
    }

    /// The reply for a page of `keys`, listed with `limit` (more follow if the page is full).
    pub fn reply(self, keys: &[ShardKey], limit: u32) -> wire::StorageReply {
        wire::StorageReply::Scrubbed {
            checked: self.checked,
            bytes: self.bytes,
            bad: self.bad,
            last: keys.last().copied(),
            more: keys.len() == limit.min(SCRUB_KEYS_MAX) as usize,
        }
    }
}

/// What the store needs to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Drive directories (created if missing). Order matters only for placement hashing.
    pub drives: Vec<PathBuf>,
    /// Puts that would leave less than this many bytes free on a drive are refused with
    /// `NoSpace`. 0 leaves the limit to the file system (a full disk still answers `NoSpace`).
    pub reserve_bytes: u64,
    /// The key-encryption key (a key file, or a KMS plug-in): new shards are sealed (encryption
    /// at rest) with each drive's data keys, which it wraps. `None`: shards are written in
    /// plaintext.
    pub keys: Option<crate::crypt::KeySource>,
}

/// Why the store could not open: always names the drive.
#[derive(Debug, thiserror::Error)]
#[error("drive {}: {reason}", drive.display())]
pub struct OpenError {
    pub drive: PathBuf,
    pub reason: String,
}

struct Drive {
    root: PathBuf,
    shards_dir: PathBuf,
    /// Shard files on this drive (kept in memory; rebuilt by the scan at open).
    shards: AtomicU64,
    /// Empty while healthy; otherwise why the drive is considered failing. Sticky until the
    /// process restarts: a drive that returned EIO or went read-only is not trusted with new
    /// shards again without an operator looking at it.
    error: Mutex<String>,
    /// The drive's data keys, with encryption at rest.
    keys: Option<Keyring>,
    /// Shard files are written with `O_DIRECT` (the file system takes it; see `direct.rs`).
    direct_writes: bool,
    /// Holds an exclusive `flock` on `<drive>/lock` for as long as the store is open, so two
    /// storage processes never share a drive.
    _lock: File,
}

/// The shards of one storage node, spread over its drives.
pub struct ShardStore {
    drives: Vec<Drive>,
    reserve_bytes: u64,
    /// Every shard and the index of the drive holding it.
    index: RwLock<BTreeMap<ShardKey, u16>>,
    /// Puts and deletes of one key hold its stripe, so "check what exists, then write" is atomic
    /// per key (two racing puts with different content cannot both succeed).
    stripes: Vec<Mutex<()>>,
    /// Shard files kept open for reads.
    open_files: OpenFiles,
}

/// A stable 64-bit mix of a key (splitmix64 finaliser). Chunk ids are sequential, so the bits
/// must be mixed before they choose a drive or a directory. Changing this only moves where new
/// shards go; existing ones are found through the index.
fn key_hash(key: ShardKey) -> u64 {
    let mut z = key.chunk ^ (u64::from(key.index) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn file_name(key: ShardKey) -> String {
    format!("{:016x}.{}", key.chunk, key.index)
}

/// Parses `<16 hex>.<index>`; anything else is not a shard file.
fn parse_file_name(name: &str) -> Option<ShardKey> {
    let (chunk, index) = name.split_once('.')?;
    if chunk.len() != 16 || !chunk.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if index.is_empty() || index.len() > 3 || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(ShardKey { chunk: u64::from_str_radix(chunk, 16).ok()?, index: index.parse().ok()? })
}

fn is_no_space(e: &io::Error) -> bool {
    matches!(Errno::from_io_error(e), Some(Errno::NOSPC) | Some(Errno::DQUOT))
}

/// Errors that mean the drive itself is failing (as opposed to a missing file or a full disk).
fn is_drive_failure(e: &io::Error) -> bool {
    matches!(Errno::from_io_error(e), Some(Errno::IO) | Some(Errno::ROFS))
}

/// fsync a directory so a rename or unlink in it survives a power loss.
fn fsync_dir(dir: &Path) -> io::Result<()> {
    wire::world::disk(DiskOp::SyncDir, dir)?;
    File::open(dir)?.sync_all()
}

fn corrupt(key: ShardKey, path: &Path, e: &FormatError) -> WireError {
    werr!(Corrupt, "{key}: shard file {} is corrupt: {e}", path.display())
}

/// Outcome of looking at a shard that already exists when a put for its key arrives.
enum Existing {
    /// Same header and intact data: the put is a retry.
    Same,
    /// Different content: chunks are copy-on-write, refuse.
    Different(String),
    /// Unreadable or corrupt: the put repairs it.
    Damaged(String),
    /// The index pointed at a file that is gone.
    Missing,
}

enum WriteFail {
    NoSpace(String),
    Io(String),
}

/// This host's identity for drive device ids: its machine id (systemd's `/etc/machine-id`, or
/// D-Bus's), else its host name. Read once.
pub fn host_id() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        ["/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/hostname"]
            .iter()
            .filter_map(|p| fs::read_to_string(p).ok())
            .map(|s| s.trim().to_string())
            .find(|s| !s.is_empty())
            .unwrap_or_default()
    })
}

impl Drive {
    fn dir_of(&self, key: ShardKey) -> PathBuf {
        self.shards_dir.join(format!("{:02x}", key_hash(key) >> 56))
    }

    fn path_of(&self, key: ShardKey) -> PathBuf {
        self.dir_of(key).join(file_name(key))
    }

    fn is_healthy(&self) -> bool {
        self.error.lock().is_empty()
    }

    /// The data key that opens the sealed file with `header` (`None` for a plaintext one, or
    /// when this drive does not hold the key).
    fn key_of(&self, header: &ShardHeader) -> Option<&ring::aead::LessSafeKey> {
        let sealing = header.sealing.as_ref()?;
        self.keys.as_ref()?.key(sealing.key_id)
    }

    /// Records that the drive is failing if `e` says so; returns the error for chaining.
    fn note_error(&self, e: &io::Error, what: &str) {
        if is_drive_failure(e) {
            let mut err = self.error.lock();
            if err.is_empty() {
                tracing::error!(
                    "drive {} is failing ({what}: {e}); no new shards will be placed on it",
                    self.root.display()
                );
                *err = format!("{what}: {e}");
            }
        }
    }

    /// The identity of the file system the drive is on (`wire::device_id`), 0 if it cannot be
    /// told: drives of several nodes on one disk report the same, so capacity counts it once.
    fn device(&self) -> u64 {
        match (rustix::fs::stat(&self.root), rustix::fs::statvfs(&self.root)) {
            (Ok(st), Ok(vfs)) => wire::device_id(host_id(), st.st_dev, vfs.f_fsid),
            _ => 0,
        }
    }

    /// Free bytes as an unprivileged writer sees them, and the file system's size.
    fn space(&self) -> io::Result<(u64, u64)> {
        if let Some(space) = wire::world::disk_space(&self.root) {
            return Ok(space);
        }
        let st = rustix::fs::statvfs(&self.root)?;
        Ok((st.f_bavail.saturating_mul(st.f_frsize), st.f_blocks.saturating_mul(st.f_frsize)))
    }

    /// Creates, locks, probes and scans one drive. Returns the drive and the shards found on it.
    fn open(root: &Path, kek: Option<&Kek>) -> Result<(Drive, Vec<ShardKey>), OpenError> {
        let fail = |what: &str, e: io::Error| OpenError { drive: root.to_path_buf(), reason: format!("{what}: {e}") };
        fs::create_dir_all(root).map_err(|e| fail("cannot create the drive directory", e))?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.join("lock"))
            .map_err(|e| fail("cannot create the lock file", e))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            if e == Errno::WOULDBLOCK {
                OpenError {
                    drive: root.to_path_buf(),
                    reason: "in use by another storage process (lock file is held)".into(),
                }
            } else {
                fail("cannot lock", e.into())
            }
        })?;
        // Prove the drive takes writes now rather than failing the first client put.
        let probe = root.join(".probe");
        (|| -> io::Result<()> {
            let mut f = File::create(&probe)?;
            f.write_all(b"trove write probe\n")?;
            f.sync_data()?;
            fs::remove_file(&probe)
        })()
        .map_err(|e| fail("cannot write", e))?;
        let direct_writes = crate::direct::probe(root).map_err(|e| fail("cannot write (direct)", e))?;
        if !direct_writes {
            tracing::info!("drive {}: its file system takes no O_DIRECT; shards are written buffered", root.display());
        }
        let keyring = match kek {
            Some(kek) => Some(
                Keyring::open_or_create(root, kek)
                    .map_err(|e| OpenError { drive: root.to_path_buf(), reason: e.to_string() })?,
            ),
            None => {
                if root.join(crate::crypt::KEYRING_FILE).exists() {
                    tracing::warn!(
                        "drive {} has a keyring, and this node no [encryption] key file: its sealed shards cannot be read",
                        root.display()
                    );
                }
                None
            }
        };

        let shards_dir = root.join("shards");
        let mut created = false;
        if !shards_dir.is_dir() {
            fs::create_dir(&shards_dir).map_err(|e| fail("cannot create shards/", e))?;
            fsync_dir(root).map_err(|e| fail("cannot sync", e))?;
        }
        for h in 0..HASH_DIRS {
            let dir = shards_dir.join(format!("{h:02x}"));
            if !dir.is_dir() {
                fs::create_dir(&dir).map_err(|e| fail(&format!("cannot create {}", dir.display()), e))?;
                created = true;
            }
        }
        if created {
            fsync_dir(&shards_dir).map_err(|e| fail("cannot sync shards/", e))?;
        }

        let mut keys = Vec::new();
        let mut removed = 0u64;
        for h in 0..HASH_DIRS {
            let dir = shards_dir.join(format!("{h:02x}"));
            let mut removed_here = false;
            let entries = fs::read_dir(&dir).map_err(|e| fail(&format!("cannot list {}", dir.display()), e))?;
            for entry in entries {
                let entry = entry.map_err(|e| fail(&format!("cannot list {}", dir.display()), e))?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    tracing::warn!("ignoring unexpected file {} (not a shard)", entry.path().display());
                    continue;
                };
                if name.starts_with(TMP_PREFIX) {
                    fs::remove_file(entry.path()).map_err(|e| fail(&format!("cannot remove temp file {name}"), e))?;
                    removed_here = true;
                    removed += 1;
                } else if let Some(key) = parse_file_name(name) {
                    keys.push(key);
                } else {
                    tracing::warn!("ignoring unexpected file {} (not a shard)", entry.path().display());
                }
            }
            if removed_here {
                fsync_dir(&dir).map_err(|e| fail("cannot sync", e))?;
            }
        }
        if removed > 0 {
            tracing::info!("drive {}: removed {removed} temp files left by interrupted writes", root.display());
        }
        let drive = Drive {
            root: root.to_path_buf(),
            shards_dir,
            shards: AtomicU64::new(keys.len() as u64),
            error: Mutex::new(String::new()),
            keys: keyring,
            direct_writes,
            _lock: lock,
        };
        Ok((drive, keys))
    }
}

impl ShardStore {
    /// Opens (creating if needed) every drive: takes its lock, checks it is writable, removes
    /// temp files of interrupted puts and indexes the shards on it. Blocking.
    pub fn open(config: &StoreConfig) -> Result<ShardStore, OpenError> {
        let Some(first) = config.drives.first() else {
            return Err(OpenError { drive: PathBuf::new(), reason: "no drives configured".into() });
        };
        if config.drives.len() > usize::from(u16::MAX) {
            return Err(OpenError { drive: first.clone(), reason: "too many drives".into() });
        }
        let kek = match &config.keys {
            Some(source) => {
                Some(Kek::from_source(source).map_err(|e| OpenError { drive: first.clone(), reason: e.to_string() })?)
            }
            None => None,
        };
        let mut drives: Vec<Drive> = Vec::with_capacity(config.drives.len());
        let mut index = BTreeMap::new();
        for path in &config.drives {
            let (drive, keys) = Drive::open(path, kek.as_ref())?;
            let d = drives.len() as u16;
            for key in keys {
                if let Some(&other) = index.get(&key) {
                    // Only possible if files were copied between drives by hand; the first
                    // copy is served and the other left alone for an operator to inspect.
                    tracing::warn!(
                        "{key} is on both {} and {}; using the first",
                        drives[usize::from(other)].root.display(),
                        drive.root.display()
                    );
                    drive.shards.fetch_sub(1, Ordering::Relaxed);
                    continue;
                }
                index.insert(key, d);
            }
            drives.push(drive);
        }
        tracing::info!("shard store open: {} shards on {} drives", index.len(), drives.len());
        Ok(ShardStore {
            drives,
            reserve_bytes: config.reserve_bytes,
            index: RwLock::new(index),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            open_files: OpenFiles::new(),
        })
    }

    /// The drive directories, in configuration order.
    pub fn drive_paths(&self) -> Vec<PathBuf> {
        self.drives.iter().map(|d| d.root.clone()).collect()
    }

    /// Number of shards stored.
    pub fn shard_count(&self) -> usize {
        self.index.read().len()
    }

    /// Where the file of `key` is, if the store holds it (for diagnostics and tests).
    pub fn shard_path(&self, key: ShardKey) -> Option<PathBuf> {
        let d = *self.index.read().get(&key)?;
        Some(self.drives[usize::from(d)].path_of(key))
    }

    fn stripe(&self, key: ShardKey) -> &Mutex<()> {
        &self.stripes[(key_hash(key) % STRIPES as u64) as usize]
    }

    /// Drives to try for a new shard: the hashed choice among healthy drives first, then the
    /// other healthy drives (used when the first is full).
    fn placement(&self, key: ShardKey) -> Vec<usize> {
        let healthy: Vec<usize> = (0..self.drives.len()).filter(|&d| self.drives[d].is_healthy()).collect();
        if healthy.is_empty() {
            return healthy;
        }
        let start = (key_hash(key) % healthy.len() as u64) as usize;
        healthy[start..].iter().chain(&healthy[..start]).copied().collect()
    }

    /// Stores a shard durably. `data` must match `info` (length and every block crc); a shard
    /// that already exists with the same header is accepted again (a retry), with a different
    /// one refused with `Exists`. Blocking.
    pub fn put(&self, info: &ShardInfo, data: &[u8]) -> Result<(), WireError> {
        let key = info.key;
        format::check_info(info).map_err(|e| werr!(Invalid, "put {key}: {e}"))?;
        if data.len() != info.len as usize {
            return Err(werr!(Invalid, "put {key}: {} data bytes sent, the header says {}", data.len(), info.len));
        }
        // The network and the client's memory are not trusted: a damaged shard stored now
        // would only be found when it is needed to reconstruct.
        format::verify_blocks(data, 0, &info.block_crcs)
            .map_err(|e| werr!(Corrupt, "put {key}: received data is damaged: {e}"))?;

        let _stripe = self.stripe(key).lock();
        let existing = self.index.read().get(&key).copied();
        let mut replacing = false;
        let candidates = match existing {
            Some(d) => match self.check_existing(usize::from(d), info)? {
                Existing::Same => return Ok(()),
                Existing::Different(why) => {
                    return Err(werr!(
                        Exists,
                        "{key} already exists with different content ({why}); shards are never overwritten"
                    ));
                }
                Existing::Damaged(why) => {
                    // Replace it where it is, so the rename swaps the bad file out atomically.
                    tracing::warn!("{key}: replacing damaged shard file: {why}");
                    replacing = true;
                    vec![usize::from(d)]
                }
                Existing::Missing => {
                    tracing::warn!("{key}: shard file vanished; writing it again");
                    self.forget(key, usize::from(d));
                    self.placement(key)
                }
            },
            None => self.placement(key),
        };
        if candidates.is_empty() {
            return Err(werr!(Io, "put {key}: no healthy drive ({})", self.drive_errors()));
        }

        let plain_header = format::encode_header(info);
        let file_bytes = plain_header.len() as u64 + data.len() as u64;
        let mut no_space = Vec::new();
        let mut io_errors = Vec::new();
        for d in candidates {
            let drive = &self.drives[d];
            if self.reserve_bytes > 0 {
                match drive.space() {
                    Ok((free, total)) if free < file_bytes.saturating_add(self.reserve_bytes) => {
                        no_space.push(format!(
                            "drive {} has {free} of {total} bytes free; {file_bytes} more would leave less than the reserve of {} bytes",
                            drive.root.display(),
                            self.reserve_bytes
                        ));
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        drive.note_error(&e, "statvfs");
                        io_errors.push(format!("cannot statvfs {}: {e}", drive.root.display()));
                        continue;
                    }
                }
            }
            let written = match &drive.keys {
                None => self.write_file(drive, key, &plain_header, data),
                Some(keys) => {
                    let (id, data_key) = keys.active();
                    let (head, stored) = format::encode_sealed(info, data, id, data_key, wire::world::random());
                    self.write_file(drive, key, &head, &stored)
                }
            };
            match written {
                Ok(()) => {
                    // A file kept open may be the one the rename just replaced.
                    self.open_files.forget(key);
                    self.index.write().insert(key, d as u16);
                    if !replacing {
                        drive.shards.fetch_add(1, Ordering::Relaxed);
                    }
                    // The directory sync happens after the index update: the file is in place
                    // either way, and a failed sync is reported so the client writes elsewhere.
                    let dir = drive.dir_of(key);
                    if wire::world::flawed(wire::world::Flaw::SkipDirSync) {
                        return Ok(());
                    }
                    return fsync_dir(&dir).map_err(|e| {
                        drive.note_error(&e, "fsync");
                        werr!(Io, "put {key}: cannot sync directory {}: {e}", dir.display())
                    });
                }
                Err(WriteFail::NoSpace(msg)) => no_space.push(msg),
                Err(WriteFail::Io(msg)) => io_errors.push(msg),
            }
        }
        if io_errors.is_empty() {
            Err(werr!(NoSpace, "put {key} ({file_bytes} bytes): {}", no_space.join("; ")))
        } else {
            io_errors.extend(no_space);
            Err(werr!(Io, "put {key}: {}", io_errors.join("; ")))
        }
    }

    /// Writes `header` + `data` to a temp file next to the final path, syncs it and renames it
    /// into place. On failure the temp file is removed and nothing else is touched.
    fn write_file(&self, drive: &Drive, key: ShardKey, header: &[u8], data: &[u8]) -> Result<(), WriteFail> {
        let dir = drive.dir_of(key);
        let path = dir.join(file_name(key));
        let tmp = dir.join(format!("{TMP_PREFIX}{}.{:016x}", file_name(key), wire::world::random::<u64>()));
        let result = (|| -> io::Result<()> {
            wire::world::disk(DiskOp::Write, &tmp)?;
            let f = if drive.direct_writes {
                let f = crate::direct::create_new_options().open(&tmp)?;
                crate::direct::write_padded(&f, &[header, data])?;
                f
            } else {
                let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
                f.write_all(header)?;
                f.write_all(data)?;
                f
            };
            wire::world::disk(DiskOp::SyncData, &tmp)?;
            f.sync_data()?;
            drop(f);
            wire::world::disk(DiskOp::Rename { to: &path }, &tmp)?;
            fs::rename(&tmp, &path)
        })();
        let Err(e) = result else { return Ok(()) };
        if let Err(rm) = fs::remove_file(&tmp) {
            if rm.kind() != io::ErrorKind::NotFound {
                tracing::warn!("cannot remove temp file {}: {rm}", tmp.display());
            }
        }
        if is_no_space(&e) {
            let (free, total) = drive.space().unwrap_or((0, 0));
            return Err(WriteFail::NoSpace(format!(
                "drive {} is full ({e}; {free} of {total} bytes free, {} needed)",
                drive.root.display(),
                header.len() + data.len()
            )));
        }
        drive.note_error(&e, "write");
        Err(WriteFail::Io(format!("cannot write {}: {e}", path.display())))
    }

    /// Compares the stored shard of `info.key` on drive `d` with `info`.
    fn check_existing(&self, d: usize, info: &ShardInfo) -> Result<Existing, WireError> {
        let drive = &self.drives[d];
        let path = drive.path_of(info.key);
        let (file, header, table) = match self.open_shard(drive, info.key, &path) {
            Ok(x) => x,
            Err(Opened::NotFound) => return Ok(Existing::Missing),
            Err(Opened::Corrupt(e)) => return Ok(Existing::Damaged(e.to_string())),
            Err(Opened::Misplaced(other)) => return Ok(Existing::Damaged(format!("the file holds {other}"))),
            Err(Opened::Io(e)) => return Err(e),
        };
        if header.ec != info.ec || header.len != info.len || table != info.block_crcs {
            return Ok(Existing::Different(format!(
                "stored: {} bytes {} table crc {:08x}; sent: {} bytes {} table crc {:08x}",
                header.len,
                header.ec,
                header.table_crc,
                info.len,
                info.ec,
                format::table_crc(&info.block_crcs)
            )));
        }
        // Same header: make sure the stored data is intact too, so a retried put also repairs
        // a shard that rotted (rare, and the read is what a scrub would do anyway).
        match read_range(&file, &header, 0, header.len) {
            Ok(mut data) => {
                let opened = header.open_blocks(drive.key_of(&header), 0, &mut data).map(|n| data.truncate(n));
                match opened.and_then(|()| format::verify_blocks(&data, 0, &table)) {
                    Ok(()) => Ok(Existing::Same),
                    Err(e) => Ok(Existing::Damaged(e.to_string())),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(Existing::Damaged("truncated".into())),
            Err(e) => {
                drive.note_error(&e, "read");
                Err(werr!(Io, "cannot read {}: {e}", path.display()))
            }
        }
    }

    /// Opens a shard file and validates its header and block table.
    fn open_shard(&self, drive: &Drive, key: ShardKey, path: &Path) -> Result<(File, ShardHeader, Vec<u32>), Opened> {
        let io_err = |e: io::Error| {
            drive.note_error(&e, "read");
            Opened::Io(werr!(Io, "{key}: cannot read {}: {e}", path.display()))
        };
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Opened::NotFound),
            Err(e) => return Err(io_err(e)),
        };
        let file_len = file.metadata().map_err(io_err)?.len();
        let mut fixed = [0u8; HEADER_BYTES_MAX];
        let got = read_up_to(&file, &mut fixed, 0).map_err(io_err)?;
        let header = ShardHeader::decode(&fixed[..got]).map_err(Opened::Corrupt)?;
        if header.key != key {
            return Err(Opened::Misplaced(header.key));
        }
        if file_len != header.file_bytes() {
            return Err(Opened::Corrupt(FormatError::Length { expected: header.file_bytes(), have: file_len }));
        }
        // Bounded by the validated header: at most 4 KiB for the largest shard.
        let mut table_buf = vec![0u8; header.table_bytes()];
        let got = read_up_to(&file, &mut table_buf, header.fixed_bytes() as u64).map_err(io_err)?;
        let table = match header.decode_table(&table_buf[..got], drive.key_of(&header)) {
            Ok(table) => table,
            Err(e @ FormatError::NoKey { .. }) => {
                return Err(Opened::Io(werr!(Unavailable, "{key}: cannot read {}: {e}", path.display())))
            }
            Err(e) => return Err(Opened::Corrupt(e)),
        };
        Ok((file, header, table))
    }

    /// Reads the blocks of `key` covering `len` bytes at `offset` (`len` 0 or past the end: to
    /// the end of the shard), verifying each. Returns the shard's info with its full block crc
    /// table, the offset of the first returned byte (block-aligned) and the bytes. Blocking.
    pub fn get(&self, key: ShardKey, offset: u32, len: u32) -> Result<(ShardInfo, u32, Bytes), WireError> {
        match self.get_with(key, offset, len, Wait::Block) {
            Ok(r) => Ok(r),
            Err(ReadFail::Error(e)) => Err(e),
            Err(ReadFail::WouldBlock) => Err(werr!(Internal, "{key}: a blocking read would block")),
        }
    }

    /// [`ShardStore::get`] if it can be answered without waiting for the drive (the file is
    /// open and its bytes are in the page cache): `None` means the caller should run `get` on
    /// a thread that may block. Never blocks.
    pub fn get_now(&self, key: ShardKey, offset: u32, len: u32) -> Option<Result<(ShardInfo, u32, Bytes), WireError>> {
        match self.get_with(key, offset, len, Wait::NoWait) {
            Ok(r) => Some(Ok(r)),
            Err(ReadFail::Error(e)) => Some(Err(e)),
            Err(ReadFail::WouldBlock) => None,
        }
    }

    fn get_with(&self, key: ShardKey, offset: u32, len: u32, wait: Wait) -> Result<(ShardInfo, u32, Bytes), ReadFail> {
        let blocks = self.read_blocks(key, offset, len, wait)?;
        let verifying = Instant::now();
        if let Err(e) = format::verify_blocks(&blocks.data, blocks.first, &blocks.table) {
            return Err(ReadFail::Error(self.corrupt_blocks(&blocks, &e)));
        }
        stages::record(Stage::StorageVerify, verifying);
        Ok((blocks.header.info(blocks.table), blocks.start, blocks.data))
    }

    /// Reads exactly bytes `offset .. offset + len` of `key` (`len` 0 or past the end: to the
    /// end of the shard). The whole blocks holding them are read and verified; only the bytes
    /// asked for are returned, with the crc32c of the first block's bytes before them and of
    /// the last block's bytes after them (see `StorageReply::Range`). Blocking.
    pub fn get_range(&self, key: ShardKey, offset: u32, len: u32) -> Result<(ShardInfo, u32, u32, Bytes), WireError> {
        match self.get_range_with(key, offset, len, Wait::Block) {
            Ok(r) => Ok(r),
            Err(ReadFail::Error(e)) => Err(e),
            Err(ReadFail::WouldBlock) => Err(werr!(Internal, "{key}: a blocking read would block")),
        }
    }

    /// [`ShardStore::get_range`] if it can be answered without waiting for the drive; `None`
    /// otherwise (see [`ShardStore::get_now`]). Never blocks.
    pub fn get_range_now(
        &self,
        key: ShardKey,
        offset: u32,
        len: u32,
    ) -> Option<Result<(ShardInfo, u32, u32, Bytes), WireError>> {
        match self.get_range_with(key, offset, len, Wait::NoWait) {
            Ok(r) => Some(Ok(r)),
            Err(ReadFail::Error(e)) => Some(Err(e)),
            Err(ReadFail::WouldBlock) => None,
        }
    }

    fn get_range_with(
        &self,
        key: ShardKey,
        offset: u32,
        len: u32,
        wait: Wait,
    ) -> Result<(ShardInfo, u32, u32, Bytes), ReadFail> {
        let blocks = self.read_blocks(key, offset, len, wait)?;
        let verifying = Instant::now();
        let (cut_start, cut_end) = ((offset - blocks.start) as usize, (blocks.end - blocks.start) as usize);
        let (head, tail) = format::verify_blocks_cut(&blocks.data, blocks.first, &blocks.table, cut_start, cut_end)
            .map_err(|e| ReadFail::Error(self.corrupt_blocks(&blocks, &e)))?;
        stages::record(Stage::StorageVerify, verifying);
        let data = blocks.data.slice(cut_start..cut_end);
        Ok((blocks.header.info(blocks.table), head, tail, data))
    }

    /// The drive holding `key`, if the store has it: which drive's queue a read of it waits in.
    pub fn drive_of(&self, key: ShardKey) -> Option<usize> {
        self.index.read().get(&key).map(|&d| usize::from(d))
    }

    /// The drive a put of `key` goes to first (its current one, or the hashed choice).
    pub fn drive_for_put(&self, key: ShardKey) -> usize {
        self.drive_of(key).or_else(|| self.placement(key).first().copied()).unwrap_or(0)
    }

    /// The error for blocks that failed verification, logged here, where it is found; the
    /// file is not kept open (a repair replaces it).
    fn corrupt_blocks(&self, blocks: &Blocks, e: &FormatError) -> WireError {
        self.open_files.forget(blocks.key);
        let err = corrupt(blocks.key, &self.drives[blocks.drive].path_of(blocks.key), e);
        tracing::warn!("{err}");
        err
    }

    /// The open shard of `key` on drive `d`: kept open from an earlier read (with the header
    /// and block table that read verified), or opened and verified now, unless `wait` forbids
    /// (opening walks directories and reads the header, which may wait for the drive). On a
    /// fresh open, when `first_blocks_end` is given, the bytes of the shard's first blocks up
    /// to that data offset come back too: one read brings the header, the table and them.
    fn open_for_read(
        &self,
        key: ShardKey,
        d: usize,
        wait: Wait,
        first_blocks_end: Option<u64>,
    ) -> Result<(Arc<OpenShard>, Option<Bytes>), ReadFail> {
        if let Some(f) = self.open_files.get(key) {
            return Ok((f, None));
        }
        if wait == Wait::NoWait {
            return Err(ReadFail::WouldBlock);
        }
        let drive = &self.drives[d];
        let path = drive.path_of(key);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ReadFail::Error(werr!(NotFound, "{key} is not stored on this node")))
            }
            Err(e) => {
                drive.note_error(&e, "read");
                return Err(ReadFail::Error(werr!(Io, "{key}: cannot read {}: {e}", path.display())));
            }
        };
        let io_err = |e: io::Error| {
            drive.note_error(&e, "read");
            ReadFail::Error(werr!(Io, "{key}: cannot read {}: {e}", path.display()))
        };
        let corrupt_file = |e: FormatError| {
            let err = corrupt(key, &path, &e);
            tracing::warn!("{err}");
            ReadFail::Error(err)
        };
        let file_len = file.metadata().map_err(io_err)?.len();
        // The header and table, whose size the file's length gives (checked against the header
        // below), and the first blocks' data if the caller wants them.
        // A table entry per 64 KiB of the file is at least one per block, in either version.
        let table_guess = 4 * file_len.div_ceil(u64::from(format::BLOCK_BYTES)) + crate::crypt::TAG_BYTES as u64;
        let head_guess = (HEADER_BYTES_MAX as u64 + table_guess).min(HEAD_BYTES_MAX);
        // The first blocks as stored: with their tags when sealed.
        let first_stored = first_blocks_end.map(|end| {
            end.saturating_add(end.div_ceil(u64::from(format::BLOCK_BYTES)) * crate::crypt::TAG_BYTES as u64)
        });
        let head_len = head_guess.saturating_add(first_stored.unwrap_or(0)).min(file_len);
        let head = read_exact(&file, 0, head_len as usize, file_len, Wait::Block)?.freeze();
        let header = ShardHeader::decode(&head).map_err(corrupt_file)?;
        if header.key != key {
            return Err(ReadFail::Error(werr!(
                Corrupt,
                "{key}: shard file {} is corrupt: it holds {}",
                path.display(),
                header.key
            )));
        }
        if file_len != header.file_bytes() {
            return Err(corrupt_file(FormatError::Length { expected: header.file_bytes(), have: file_len }));
        }
        let table_end = header.fixed_bytes() + header.table_bytes();
        let table_bytes = head.get(header.fixed_bytes()..table_end.min(head.len())).unwrap_or(&[]);
        let table = match header.decode_table(table_bytes, drive.key_of(&header)) {
            Ok(table) => table,
            Err(e @ FormatError::NoKey { .. }) => {
                return Err(ReadFail::Error(werr!(Unavailable, "{key}: cannot read {}: {e}", path.display())))
            }
            Err(e) => return Err(corrupt_file(e)),
        };
        let data_offset = header.data_offset() as usize;
        let first_blocks = (first_blocks_end.is_some() && head.len() > data_offset).then(|| head.slice(data_offset..));
        let open = self.open_files.insert(key, OpenShard { file, header, table, cold_reads: AtomicU32::new(0) });
        Ok((open, first_blocks))
    }

    /// Closes every shard file kept open for reads, so that the next read of each checks its
    /// header and block table on the drive again, not as verified when it was opened. Reads
    /// never need it (they verify every data block, and shard files do not change in place);
    /// a check for damage anywhere in the files does.
    pub fn close_open_files(&self) {
        self.open_files.files.lock().clear();
    }

    /// Reads the whole blocks covering `len` bytes at `offset` of `key` (not yet verified).
    /// The file stays open for later reads with the header and block table verified when it
    /// was opened: shard files never change once they have their final name (a damaged one is
    /// replaced by a rename, which closes the open one), so only the data is read again.
    ///
    /// A shard read from the drive for the second time since it was opened is read whole into
    /// the page cache in the background (`POSIX_FADV_WILLNEED`): data read more than once is
    /// likely read again (an epoch over a dataset, random samples of shared files), and one
    /// large read costs the drive far less than many small ones. Shards read once stay as
    /// they were, so a scan that never returns does not fill the cache.
    fn read_blocks(&self, key: ShardKey, offset: u32, len: u32, wait: Wait) -> Result<Blocks, ReadFail> {
        let opening = Instant::now();
        let d =
            self.drive_of(key).ok_or_else(|| ReadFail::Error(werr!(NotFound, "{key} is not stored on this node")))?;
        if wire::world::disk_simulated() {
            let drive = &self.drives[d];
            let path = drive.path_of(key);
            wire::world::disk(DiskOp::Read, &path).map_err(|e| {
                drive.note_error(&e, "read");
                ReadFail::Error(werr!(Io, "{key}: cannot read {}: {e}", path.display()))
            })?;
        }
        let block = format::BLOCK_BYTES;
        let first = offset / block;
        let start = first * block;
        let want_end = if len == 0 { u64::MAX } else { u64::from(offset.saturating_add(len)) };
        // A range in the first blocks comes with the header when the file is opened now.
        let first_blocks_end =
            (first == 0).then(|| want_end.div_ceil(u64::from(block)).saturating_mul(u64::from(block)));
        let (open, first_blocks) = self.open_for_read(key, d, wait, first_blocks_end)?;
        let header = open.header;
        if offset > header.len {
            return Err(ReadFail::Error(werr!(
                Invalid,
                "{key}: offset {offset} is past the end of the shard ({} bytes)",
                header.len
            )));
        }
        let end = if len == 0 { header.len } else { offset.saturating_add(len).min(header.len) };
        let stop = (end.div_ceil(block) * block).min(header.len).max(start);
        stages::record(Stage::StorageOpen, opening);
        let reading = Instant::now();
        let (at, stored_len) = header.stored_span(start, stop);
        let stored = match first_blocks {
            Some(head) if head.len() as u64 >= at + stored_len as u64 => {
                Stored::Shared(head.slice(at as usize..at as usize + stored_len))
            }
            _ => {
                let from = header.data_offset() + at;
                Stored::Own(read_exact(&open.file, from, stored_len, header.file_bytes(), wait).map_err(|e| {
                    if let ReadFail::Error(_) = e {
                        // Not kept open after a failure: the next read looks at the file afresh.
                        self.open_files.forget(key);
                    }
                    e
                })?)
            }
        };
        let data = match (header.sealing.is_none(), stored) {
            (true, Stored::Shared(bytes)) => bytes,
            (true, Stored::Own(buf)) => buf.freeze(),
            (false, stored) => {
                // Opened in place: a buffer read just now is this read's alone; only bytes that
                // came with the header (shared with the open file's first read) are copied.
                let mut buf = match stored {
                    Stored::Own(buf) => buf,
                    Stored::Shared(shared) => {
                        let mut buf = wire::pool::take(shared.len());
                        buf.vec().extend_from_slice(&shared);
                        buf
                    }
                };
                match header.open_blocks(self.drives[d].key_of(&header), first, &mut buf) {
                    Ok(n) => {
                        buf.vec().truncate(n);
                        buf.freeze()
                    }
                    Err(e) => {
                        self.open_files.forget(key);
                        let err = corrupt(key, &self.drives[d].path_of(key), &e);
                        tracing::warn!("{err}");
                        return Err(ReadFail::Error(err));
                    }
                }
            }
        };
        // Reads that may wait are the ones the page cache could not answer (see `Wait`).
        if wait == Wait::Block && open.cold_reads.fetch_add(1, Ordering::Relaxed) == 1 && (stop - start) < header.len {
            // The second read from the drive: bring the rest of the shard in while the reader
            // checks this part. Advice only; a failure changes nothing.
            let _ = rustix::fs::fadvise(
                &open.file,
                header.data_offset(),
                std::num::NonZeroU64::new(header.stored_len()),
                rustix::fs::Advice::WillNeed,
            );
        }
        stages::record(Stage::StorageDisk, reading);
        Ok(Blocks { key, drive: d, header, table: open.table.clone(), first, start, end, data })
    }

    fn forget(&self, key: ShardKey, d: usize) {
        self.open_files.forget(key);
        if self.index.write().remove(&key).is_some() {
            self.drives[d].shards.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Deletes shards; keys that are not stored are ignored (deletes are retried and replayed).
    /// Returns how many were removed. Blocking.
    pub fn delete(&self, keys: &[ShardKey]) -> Result<u32, WireError> {
        let mut removed = 0u32;
        let mut dirs: BTreeSet<(usize, PathBuf)> = BTreeSet::new();
        let mut result = Ok(());
        for &key in keys {
            let _stripe = self.stripe(key).lock();
            let Some(d) = self.index.read().get(&key).copied() else {
                continue;
            };
            let d = usize::from(d);
            let drive = &self.drives[d];
            let path = drive.path_of(key);
            match wire::world::disk(DiskOp::Remove, &path).and_then(|()| fs::remove_file(&path)) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    drive.note_error(&e, "unlink");
                    result = Err(werr!(Io, "delete {key}: cannot remove {}: {e}", path.display()));
                    break;
                }
            }
            self.forget(key, d);
            dirs.insert((d, drive.dir_of(key)));
        }
        // A delete that a power loss undoes only leaks space until the next garbage sweep, but
        // syncing once per directory is cheap enough to make it durable anyway.
        for (d, dir) in dirs {
            if let Err(e) = fsync_dir(&dir) {
                self.drives[d].note_error(&e, "fsync");
                result = result.and(Err(werr!(Io, "delete: cannot sync {}: {e}", dir.display())));
            }
        }
        result.map(|()| removed)
    }

    /// Verifies the shards with keys after `after` (at most `limit`, capped at
    /// [`SCRUB_KEYS_MAX`]) where they lie: each file is opened afresh (so its header and block
    /// table are checked again, not taken from an open file) and every block read and checked.
    /// A shard deleted meanwhile is passed over. Blocking.
    pub fn scrub(&self, after: Option<ShardKey>, limit: u32) -> wire::StorageReply {
        let keys = self.list(after, limit.min(SCRUB_KEYS_MAX));
        let mut tally = ScrubTally::default();
        for &key in &keys {
            self.open_files.forget(key);
            tally.note(key, self.get(key, 0, 0).map(|(_, _, data)| data.len()));
            // What scrub read once is not worth a descriptor.
            self.open_files.forget(key);
        }
        tally.reply(&keys, limit)
    }

    /// Keys strictly after `after`, in order, at most `limit` (capped at [`LIST_KEYS_MAX`]).
    pub fn list(&self, after: Option<ShardKey>, limit: u32) -> Vec<ShardKey> {
        let limit = limit.min(LIST_KEYS_MAX) as usize;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.index.read().range((lower, Bound::Unbounded)).take(limit).map(|(k, _)| *k).collect()
    }

    /// Capacity, shard count and health of every drive. Blocking (statvfs).
    pub fn stat(&self) -> Vec<DriveInfo> {
        self.drives
            .iter()
            .map(|drive| {
                let mut error = drive.error.lock().clone();
                let (bytes_free, bytes_total) = match drive.space() {
                    Ok(s) => s,
                    Err(e) => {
                        if error.is_empty() {
                            error = format!("statvfs: {e}");
                        }
                        (0, 0)
                    }
                };
                DriveInfo {
                    path: drive.root.display().to_string(),
                    bytes_total,
                    bytes_free,
                    shards: drive.shards.load(Ordering::Relaxed),
                    error,
                    device: drive.device(),
                }
            })
            .collect()
    }

    /// Whether each drive, in configuration order, writes shard files with `O_DIRECT`.
    pub fn direct_writes(&self) -> Vec<bool> {
        self.drives.iter().map(|d| d.direct_writes).collect()
    }

    fn drive_errors(&self) -> String {
        self.drives.iter().map(|d| format!("{}: {}", d.root.display(), d.error.lock())).collect::<Vec<_>>().join("; ")
    }
}

/// Whole blocks of a shard read from its file, not yet verified.
struct Blocks {
    key: ShardKey,
    drive: usize,
    header: ShardHeader,
    table: Vec<u32>,
    /// The first block read.
    first: u32,
    /// The shard offset of `data[0]` (block-aligned) and where the bytes asked for end.
    start: u32,
    end: u32,
    data: Bytes,
}

/// Whether a read may wait for the drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// On a thread that may block.
    Block,
    /// On an async worker: only what the page cache holds, and only files already open.
    NoWait,
}

/// Why a read did not return blocks.
enum ReadFail {
    Error(WireError),
    /// It would have had to wait for the drive (only with [`Wait::NoWait`]).
    WouldBlock,
}

/// Largest header plus block table a shard file can have (a 64 MiB shard has 1024 blocks).
const HEAD_BYTES_MAX: u64 = HEADER_BYTES_MAX as u64
    + 4 * (format::SHARD_BYTES_MAX as u64).div_ceil(format::BLOCK_BYTES as u64)
    + crate::crypt::TAG_BYTES as u64;

/// Reads `len` bytes at `pos` of a file `file_len` bytes long. Short only where the file ends
/// (the caller's checks then find it too short). With [`Wait::NoWait`] it reads only what the
/// page cache holds (`RWF_NOWAIT`) and fails with `WouldBlock` otherwise.
fn read_exact(file: &File, pos: u64, len: usize, file_len: u64, wait: Wait) -> Result<PooledBuf, ReadFail> {
    let expect = (file_len.saturating_sub(pos)).min(len as u64) as usize;
    let err = |e: io::Error| ReadFail::Error(werr!(Io, "read at {pos}: {e}"));
    match wait {
        Wait::Block => {
            // Read into the first `len` bytes only: a reused buffer may hold more than that,
            // and a read into all of its room would take bytes past the range.
            let mut buf = wire::pool::take_filled(len);
            let mut have = 0;
            while have < len {
                match rustix::io::pread(file, &mut buf[have..], pos + have as u64) {
                    Ok(0) => break,
                    Ok(n) => have += n,
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(err(e.into())),
                }
            }
            buf.vec().truncate(have);
            Ok(buf)
        }
        Wait::NoWait => {
            if !NOWAIT_READS.load(Ordering::Relaxed) {
                return Err(ReadFail::WouldBlock);
            }
            // `preadv2` takes initialized memory; only the bytes it reads are kept.
            let mut buf = wire::pool::take_filled(len);
            let flags = rustix::io::ReadWriteFlags::NOWAIT;
            match rustix::io::preadv2(file, &mut [io::IoSliceMut::new(&mut buf)], pos, flags) {
                // A short read means part of it is not in the page cache (or the file ended,
                // which the blocking read will find as well).
                Ok(n) if n == expect => {
                    buf.vec().truncate(n);
                    Ok(buf)
                }
                Ok(_) | Err(Errno::AGAIN) | Err(Errno::INTR) => Err(ReadFail::WouldBlock),
                Err(Errno::OPNOTSUPP) | Err(Errno::INVAL) | Err(Errno::NOSYS) => {
                    // Reads that must not wait are not supported here: always use threads.
                    NOWAIT_READS.store(false, Ordering::Relaxed);
                    Err(ReadFail::WouldBlock)
                }
                Err(e) => Err(err(e.into())),
            }
        }
    }
}

/// A read's bytes as stored: a slice of what came with the file's header when it was opened
/// (shared with other reads), or a buffer read for this read alone.
enum Stored {
    Shared(Bytes),
    Own(PooledBuf),
}

/// Whether reads that must not wait (`RWF_NOWAIT`) work on this system.
static NOWAIT_READS: AtomicBool = AtomicBool::new(true);

/// Shard files kept open for reads, so a read of a shard read lately costs no `open` (a path
/// walk) and `close`. Bounded by [`OpenFiles::max`]; when full, an eighth is closed (which,
/// does not matter: any of them opens again at its next read).
struct OpenFiles {
    files: Mutex<HashMap<ShardKey, Arc<OpenShard>>>,
    max: usize,
}

/// A shard file kept open for reads, with the header and block table verified when it was
/// opened, and how many of its reads went to the drive (not answered from the page cache).
struct OpenShard {
    file: File,
    header: ShardHeader,
    table: Vec<u32>,
    cold_reads: AtomicU32,
}

/// Most shard files a store keeps open, and the share of the process's file descriptor limit
/// it may take.
const OPEN_FILES_MAX: usize = 1024;
const OPEN_FILES_SHARE_OF_LIMIT: u64 = 4;

impl OpenFiles {
    fn new() -> OpenFiles {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
        let max = (limit / OPEN_FILES_SHARE_OF_LIMIT).min(OPEN_FILES_MAX as u64) as usize;
        OpenFiles { files: Mutex::new(HashMap::new()), max }
    }

    fn get(&self, key: ShardKey) -> Option<Arc<OpenShard>> {
        self.files.lock().get(&key).cloned()
    }

    fn insert(&self, key: ShardKey, file: OpenShard) -> Arc<OpenShard> {
        let file = Arc::new(file);
        if self.max == 0 {
            return file;
        }
        let mut files = self.files.lock();
        if files.len() >= self.max {
            let close: Vec<ShardKey> = files.keys().take(self.max / 8 + 1).copied().collect();
            for k in close {
                files.remove(&k);
            }
        }
        files.insert(key, file.clone());
        file
    }

    fn forget(&self, key: ShardKey) {
        self.files.lock().remove(&key);
    }
}

/// Why a shard file could not be opened and validated.
enum Opened {
    NotFound,
    Corrupt(FormatError),
    Io(WireError),
    /// A valid header for another key: a file was renamed or copied by hand.
    Misplaced(ShardKey),
}

/// Reads into `buf` at `pos` until it is full or the file ends; returns the bytes read.
fn read_up_to(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads `len` data bytes starting at data offset `start` into a fresh buffer. Reading through
/// `read_to_end` into reserved capacity avoids zero-filling a buffer that is overwritten anyway.
fn read_range(file: &File, header: &ShardHeader, start: u32, len: u32) -> io::Result<Vec<u8>> {
    // As stored: a sealed file's blocks with their tags (`start` is a block boundary).
    let (at, len) = header.stored_span(start, start.saturating_add(len).min(header.len));
    let mut f = file;
    f.seek(SeekFrom::Start(header.data_offset() + at))?;
    let mut data = Vec::with_capacity(len);
    f.take(len as u64).read_to_end(&mut data)?;
    if data.len() != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "shard file is shorter than its header says"));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drive whose file system refuses `O_DIRECT` (older tmpfs, some FUSE file systems) is
    /// written buffered: the same files, read back the same.
    #[test]
    fn a_drive_without_direct_writes_stores_the_same_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = StoreConfig { drives: vec![dir.path().join("d")], reserve_bytes: 0, keys: None };
        let mut store = ShardStore::open(&config).expect("store opens");
        store.drives[0].direct_writes = false;
        for (chunk, len) in [(1u64, 0usize), (2, 1), (3, 4095), (4, (1 << 20) + 3)] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
            let info = ShardInfo {
                key: ShardKey { chunk, index: 0 },
                ec: wire::EcScheme::DEFAULT,
                len: len as u32,
                block_crcs: format::block_crcs(&data),
            };
            store.put(&info, &data).expect("put");
            let on_disk = fs::metadata(store.shard_path(info.key).expect("placed")).expect("stat").len();
            assert_eq!(on_disk as usize, format::encode_header(&info).len() + len);
            let (_, _, back) = store.get(info.key, 0, 0).expect("get");
            assert!(back[..] == data[..], "length {len}");
        }
    }

    /// Drives on one file system report the same device (so the cluster counts the disk once);
    /// a different file system (the machine's /dev/shm or /proc) reports another.
    #[test]
    fn drives_on_one_file_system_report_one_device() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config =
            StoreConfig { drives: vec![dir.path().join("a"), dir.path().join("b")], reserve_bytes: 0, keys: None };
        let store = ShardStore::open(&config).expect("store opens");
        let drives = store.stat();
        assert_eq!(drives.len(), 2);
        assert!(drives[0].device != 0 && drives[0].device == drives[1].device, "{drives:?}");
        let other = |p: &str| match (rustix::fs::stat(p), rustix::fs::statvfs(p)) {
            (Ok(st), Ok(vfs)) => wire::device_id(host_id(), st.st_dev, vfs.f_fsid),
            _ => 0,
        };
        assert_ne!(other("/proc"), drives[0].device);
        assert!(!host_id().is_empty());
    }

    #[test]
    fn file_names_roundtrip() {
        for key in [
            ShardKey { chunk: 0, index: 0 },
            ShardKey { chunk: u64::MAX, index: 255 },
            ShardKey { chunk: 0xabc, index: 17 },
        ] {
            assert_eq!(parse_file_name(&file_name(key)), Some(key));
        }
        for bad in [
            "",
            ".",
            "0000000000000000",
            "0000000000000000.",
            "000000000000000.1",
            "000000000000000g.1",
            "0000000000000000.256",
            "0000000000000000.1x",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sequential_chunks_spread_over_directories_and_drives() {
        let mut dirs = std::collections::HashSet::new();
        let mut per_drive = [0u32; 3];
        for chunk in 0..3000u64 {
            let h = key_hash(ShardKey { chunk, index: 0 });
            dirs.insert(h >> 56);
            per_drive[(h % 3) as usize] += 1;
        }
        assert_eq!(dirs.len(), 256);
        assert!(per_drive.iter().all(|&n| n > 800), "{per_drive:?}");
    }
}
