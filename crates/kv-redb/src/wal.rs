//! The write-ahead log of the embedded engine: a commit is made durable by one sequential write
//! and one `fdatasync` of this log, instead of by a durable redb commit (which writes the copied
//! B-tree path of every changed key, scattered over the database file, before its fsync; about
//! five times slower on the disks Trove was measured on).
//!
//! Protocol (driven by the committer in `txn.rs`):
//! 1. A batch is validated and applied inside a redb write transaction (not yet visible).
//! 2. Its writes are appended to the log as one record and the log is synced.
//! 3. Only then is the redb transaction committed with `Durability::None`: visible to new
//!    snapshots, not yet durable in the redb file.
//!
//! Every so often (the log is half full, or a while has passed) a batch is committed with
//! `Durability::Immediate` instead, writing the number of the last logged record in the same
//! commit: a *checkpoint*. redb makes every earlier non-durable commit durable with it, so the log
//! can start over from its beginning. Opening the engine replays the records numbered after the
//! checkpoint (see [`scan`]) and checkpoints.
//!
//! Replay is idempotent: a record is the blind puts and deletes its batch made, so replaying
//! records `a+1..=n` onto any state that already holds records `a+1..=j` (redb may have made
//! some non-durable commits durable on its own, at a clean close) gives the state after `n`.
//!
//! # Format (version 1)
//!
//! The log is `<database file>.wal`, created at its full capacity filled with zeros (so a sync
//! after an overwrite in place need not update the file's size or block map).
//!
//! ```text
//! offset  size  field
//!      0     8  magic b"TROVEWAL"
//!      8     4  format version, u32 little-endian (1)
//!     12     8  id of the database the log belongs to, u64 LE (random, kept in the database)
//!     20  4076  zeros
//!   4096        records, back to back:
//!               +0   4  payload length, u32 LE
//!               +4   4  CRC-32C of (lsn bytes ‖ payload), u32 LE
//!               +8   8  lsn: the record's number, u64 LE, from 1
//!              +16   …  payload: entries back to back:
//!                         4  key length, u32 LE
//!                         …  key
//!                         4  value length, u32 LE; u32::MAX for a delete (no value bytes)
//!                         …  value
//! ```
//!
//! Invariants: the records from offset 4096 have consecutive numbers starting right after the
//! checkpoint's; a record is complete and synced before its batch is visible; after a
//! checkpoint the next record is written at 4096 again, over older records, which recovery
//! tells apart by their smaller numbers. Recovery stops at the first record that is not the next
//! number with a valid checksum (a torn last write, zeros, or an older record); a damaged record
//! followed by the next number's valid record is damage to acknowledged commits and is reported
//! as [`WalDamage`], not skipped.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The log file's magic number.
pub(crate) const MAGIC: &[u8; 8] = b"TROVEWAL";
/// The format version written in the header.
pub(crate) const VERSION: u32 = 1;
/// Bytes before the first record.
pub(crate) const HEADER_BYTES: u64 = 4096;
/// Bytes of a record before its payload.
pub(crate) const RECORD_HEADER_BYTES: usize = 16;
/// The value length that marks a delete.
const DELETE: u32 = u32::MAX;

/// One write of a record: a put (`Some`) or a delete (`None`).
pub(crate) type Entry = (Vec<u8>, Option<Vec<u8>>);

/// A record read back by [`scan`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub lsn: u64,
    pub entries: Vec<Entry>,
}

/// Damage found in the log: acknowledged commits that cannot be read back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WalDamage(pub String);

/// Appends record `lsn` holding `entries` to `out`.
pub(crate) fn encode<'a>(lsn: u64, entries: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
    for (key, value) in entries {
        out.extend_from_slice(&len_u32(key.len()).to_le_bytes());
        out.extend_from_slice(key);
        match value {
            Some(value) => {
                out.extend_from_slice(&len_u32(value.len()).to_le_bytes());
                out.extend_from_slice(value);
            }
            None => out.extend_from_slice(&DELETE.to_le_bytes()),
        }
    }
    let payload_len = len_u32(out.len() - start - RECORD_HEADER_BYTES);
    out[start + 8..start + 16].copy_from_slice(&lsn.to_le_bytes());
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&payload_len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Keys and values are limited far below 4 GiB by `kv::check_key` and `kv::check_value`.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("key and value sizes are checked far below 4 GiB")
}

/// What [`scan`] found: the records to replay and where the next record goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    pub records: Vec<Record>,
    /// Offset in `log` just past the last record returned.
    pub end: usize,
}

/// Reads the records numbered `applied + 1`, `applied + 2`, … from `log` (the file's bytes after
/// its header). Never panics, whatever `log` holds: this is the fuzzing entry point.
pub(crate) fn scan(log: &[u8], applied: u64) -> Result<Scan, WalDamage> {
    let mut records = Vec::new();
    let mut pos = 0;
    let mut expected = applied.wrapping_add(1);
    loop {
        match read_record(log, pos) {
            Some(Ok((lsn, entries, next))) if lsn == expected => {
                records.push(Record { lsn, entries });
                pos = next;
                expected = expected.wrapping_add(1);
            }
            Some(Ok((lsn, _, _))) if lsn > expected => {
                return Err(WalDamage(format!(
                    "record {lsn} at log offset {} where record {expected} was expected: records are missing",
                    HEADER_BYTES + pos as u64
                )));
            }
            Some(Err(Damaged { lsn, next })) if lsn == expected => {
                // A torn last write looks like this too; a valid next record after it does not.
                if let Some(Ok((after, _, _))) = read_record(log, next) {
                    if after == expected.wrapping_add(1) {
                        return Err(WalDamage(format!(
                            "record {lsn} at log offset {} is damaged (checksum mismatch) and later records follow it",
                            HEADER_BYTES + pos as u64
                        )));
                    }
                }
                return Ok(Scan { records, end: pos });
            }
            // Zeros, an older record, a torn write, or the end of the file.
            _ => return Ok(Scan { records, end: pos }),
        }
    }
}

/// A record whose checksum does not match; where the next one would start.
struct Damaged {
    lsn: u64,
    next: usize,
}

type Decoded = (u64, Vec<Entry>, usize);

/// The record at `pos`: `None` when not even its header and payload fit in `log`.
fn read_record(log: &[u8], pos: usize) -> Option<Result<Decoded, Damaged>> {
    let header = log.get(pos..pos.checked_add(RECORD_HEADER_BYTES)?)?;
    let payload_len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let lsn = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let next = pos.checked_add(RECORD_HEADER_BYTES)?.checked_add(payload_len)?;
    let Some(body) = log.get(pos + 8..next) else {
        return Some(Err(Damaged { lsn, next }));
    };
    if crc32c::crc32c(body) != crc {
        return Some(Err(Damaged { lsn, next }));
    }
    match decode_entries(&body[8..]) {
        Some(entries) => Some(Ok((lsn, entries, next))),
        // A valid checksum over an undecodable payload: not something a torn write makes.
        None => Some(Err(Damaged { lsn, next })),
    }
}

fn decode_entries(mut payload: &[u8]) -> Option<Vec<Entry>> {
    let mut entries = Vec::new();
    while !payload.is_empty() {
        let key = take_sized(&mut payload)?;
        let value_len = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
        let value = if value_len == DELETE {
            payload = &payload[4..];
            None
        } else {
            Some(take_sized(&mut payload)?)
        };
        entries.push((key, value));
    }
    Some(entries)
}

fn take_sized(input: &mut &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(input.get(..4)?.try_into().ok()?) as usize;
    let bytes = input.get(4..4usize.checked_add(len)?)?.to_vec();
    *input = &input[4 + len..];
    Some(bytes)
}

/// The open log: where the next record goes.
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    capacity: u64,
    /// File offset of the next record.
    pos: u64,
}

impl Wal {
    /// The log beside the database at `db_path`.
    pub(crate) fn path_for(db_path: &Path) -> PathBuf {
        let mut name = db_path.as_os_str().to_owned();
        name.push(".wal");
        PathBuf::from(name)
    }

    /// Opens the log of database `db_id` at `path`, creating it (with `capacity` bytes of
    /// zeros, synced) when missing; returns it with the bytes after the header, for [`scan`].
    /// A log of another database is refused (`InvalidData`): its records would be replayed
    /// into the wrong one. The write position is the first record: the caller checkpoints
    /// whatever [`scan`] finds before appending.
    pub(crate) fn open(path: &Path, capacity: u64, db_id: u64) -> io::Result<(Wal, Vec<u8>)> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let mut header = [0u8; 20];
        if file.metadata()?.len() < HEADER_BYTES || {
            file.read_exact_at(&mut header, 0)?;
            header[..12] == [0; 12]
        } {
            // New, or cut short before its header was written (so never used): lay it out.
            create_layout(&file, path, capacity, db_id)?;
            file.read_exact_at(&mut header, 0)?;
        }
        let len = file.metadata()?.len();
        if &header[0..8] != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a Trove write-ahead log (bad magic number)", path.display()),
            ));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: write-ahead log format version {version}, this build reads {VERSION}", path.display()),
            ));
        }
        let owner = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
        if owner != db_id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is the write-ahead log of another database (id {owner:016x}, this one is {db_id:016x}); \
                     move it away if the database file was replaced on purpose",
                    path.display()
                ),
            ));
        }
        let mut log = vec![0u8; (len - HEADER_BYTES) as usize];
        file.read_exact_at(&mut log, HEADER_BYTES)?;
        // A log made with another capacity keeps its size; records never pass its end.
        let wal = Wal { file, path: path.to_path_buf(), capacity: len.max(HEADER_BYTES + 1), pos: HEADER_BYTES };
        Ok((wal, log))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file (header included).
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of records written since the last checkpoint.
    pub(crate) fn used(&self) -> u64 {
        self.pos - HEADER_BYTES
    }

    /// Whether a record of `len` bytes fits after the last one.
    pub(crate) fn fits(&self, len: usize) -> bool {
        self.pos.saturating_add(len as u64) <= self.capacity
    }

    /// Writes `record` (encoded by [`encode`]) after the last one and syncs it.
    pub(crate) fn append(&mut self, record: &[u8]) -> Result<(), AppendError> {
        debug_assert!(self.fits(record.len()));
        self.file.write_all_at(record, self.pos).map_err(AppendError::Write)?;
        self.file.sync_data().map_err(AppendError::Sync)?;
        self.pos += record.len() as u64;
        Ok(())
    }

    /// Starts over from the beginning (after a checkpoint made every record durable in redb).
    pub(crate) fn restart(&mut self) {
        self.pos = HEADER_BYTES;
    }
}

/// Why [`Wal::append`] failed: before anything was surely written, or at the sync (the record
/// may then be on disk or not).
#[derive(Debug)]
pub(crate) enum AppendError {
    Write(io::Error),
    Sync(io::Error),
}

/// Writes the header and `capacity` bytes of zeros, synced, and syncs the directory.
fn create_layout(file: &File, path: &Path, capacity: u64, db_id: u64) -> io::Result<()> {
    let capacity = capacity.max(HEADER_BYTES * 2);
    let zeros = vec![0u8; 1 << 20];
    let mut at = HEADER_BYTES;
    while at < capacity {
        let n = zeros.len().min((capacity - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    let mut header = vec![0u8; HEADER_BYTES as usize];
    header[0..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&db_id.to_le_bytes());
    // The header last: a log cut short before it is laid out again at the next open.
    file.sync_data()?;
    file.write_all_at(&header, 0)?;
    file.sync_all()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn record(lsn: u64, entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(lsn, entries.iter().map(|(k, v)| (k.as_slice(), v.as_deref())), &mut out);
        out
    }

    fn entries(n: u64) -> Vec<Entry> {
        (0..n % 4 + 1)
            .map(|j| {
                let key = format!("k{n}/{j}").into_bytes();
                let value = (j != 2).then(|| vec![n as u8; (n * 7 + j) as usize % 300]);
                (key, value)
            })
            .collect()
    }

    /// A log of records `first..=last` followed by `tail`.
    fn log_of(first: u64, last: u64, tail: &[u8]) -> (Vec<u8>, Vec<usize>) {
        let mut log = Vec::new();
        let mut ends = Vec::new();
        for lsn in first..=last {
            log.extend(record(lsn, &entries(lsn)));
            ends.push(log.len());
        }
        log.extend_from_slice(tail);
        (log, ends)
    }

    #[test]
    fn records_round_trip_and_stop_at_zeros() {
        let (log, ends) = log_of(5, 12, &[0; 100]);
        let scan = scan(&log, 4).unwrap();
        assert_eq!(scan.records.len(), 8);
        assert_eq!(scan.end, *ends.last().unwrap());
        for (i, r) in scan.records.iter().enumerate() {
            assert_eq!(r.lsn, 5 + i as u64);
            assert_eq!(r.entries, entries(r.lsn));
        }
    }

    #[test]
    fn records_up_to_the_checkpoint_are_skipped_as_old() {
        // After a checkpoint at 12 and a restart, the log still holds records 5..=12.
        let (log, _) = log_of(5, 12, &[]);
        assert_eq!(scan(&log, 12).unwrap(), Scan { records: vec![], end: 0 });
    }

    #[test]
    fn newer_records_over_older_ones_are_read_up_to_the_older() {
        let (old, _) = log_of(1, 30, &[]);
        let (new, ends) = log_of(31, 33, &[]);
        let mut log = old.clone();
        log[..new.len()].copy_from_slice(&new);
        let scan = scan(&log, 30).unwrap();
        assert_eq!(scan.records.iter().map(|r| r.lsn).collect::<Vec<_>>(), vec![31, 32, 33]);
        assert_eq!(scan.end, ends[2]);
    }

    #[test]
    fn a_torn_last_record_at_any_length_is_not_replayed() {
        let (full, ends) = log_of(1, 4, &[]);
        for cut in ends[2]..full.len() {
            let mut log = full[..cut].to_vec();
            log.resize(full.len() + 64, 0);
            let scan = scan(&log, 0).unwrap();
            assert_eq!(scan.records.len(), 3, "cut at {cut}");
            assert_eq!(scan.end, ends[2]);
        }
    }

    #[test]
    fn a_torn_record_over_older_records_is_not_replayed() {
        let (old, _) = log_of(1, 40, &[]);
        let (new, ends) = log_of(41, 42, &[]);
        for cut in ends[0]..new.len() {
            let mut log = old.clone();
            log[..cut].copy_from_slice(&new[..cut]);
            let scan = scan(&log, 40).unwrap();
            assert_eq!(scan.records.len(), 1, "cut at {cut}");
        }
    }

    #[test]
    fn a_damaged_record_followed_by_later_ones_is_reported() {
        let (mut log, ends) = log_of(1, 5, &[0; 16]);
        log[ends[1] + 20] ^= 0x40; // inside record 3
        let err = scan(&log, 0).unwrap_err();
        assert!(err.0.contains("record 3") && err.0.contains("damaged"), "{err:?}");
    }

    #[test]
    fn a_gap_in_the_numbers_is_reported() {
        let mut log = record(1, &entries(1));
        log.extend(record(3, &entries(3)));
        let err = scan(&log, 0).unwrap_err();
        assert!(err.0.contains("record 3") && err.0.contains("record 2 was expected"), "{err:?}");
    }

    #[test]
    fn random_and_mutated_logs_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (valid, _) = log_of(1, 20, &[0; 64]);
        for round in 0..3000 {
            let log: Vec<u8> = if round % 2 == 0 {
                (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()
            } else {
                let mut log = valid.clone();
                for _ in 0..rng.gen_range(1..6) {
                    let at = rng.gen_range(0..log.len());
                    log[at] = rng.gen();
                }
                log
            };
            let applied = rng.gen_range(0..4);
            if let Ok(scan) = scan(&log, applied) {
                assert!(scan.end <= log.len());
                for (i, r) in scan.records.iter().enumerate() {
                    assert_eq!(r.lsn, applied + 1 + i as u64);
                }
            }
        }
    }

    #[test]
    fn file_is_laid_out_once_and_appends_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = Wal::path_for(&dir.path().join("db"));
        let (mut wal, log) = Wal::open(&path, 64 * 1024, 9).unwrap();
        assert_eq!(log.len(), 60 * 1024);
        assert!(log.iter().all(|&b| b == 0));
        assert_eq!(scan(&log, 0).unwrap().records, vec![]);
        for lsn in 1..=3 {
            wal.append(&record(lsn, &entries(lsn))).unwrap();
        }
        drop(wal);
        let (_, log) = Wal::open(&path, 64 * 1024, 9).unwrap();
        assert_eq!(scan(&log, 0).unwrap().records.len(), 3);
        assert_eq!(scan(&log, 3).unwrap().records.len(), 0);
    }

    #[test]
    fn a_foreign_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wal");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let err = Wal::open(&path, 64 * 1024, 9).err().unwrap();
        assert!(err.to_string().contains("x.wal") && err.to_string().contains("magic"), "{err}");
    }
}
