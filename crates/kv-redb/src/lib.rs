//! The embedded [`KvEngine`]: Trove's metadata in one redb file on one machine.
//!
//! This file owns the engine handle: opening (and creating) the database file, the single table
//! every pair lives in, the commit sequence number and the commit queue that the transactions of
//! `txn.rs` use for optimistic concurrency and group commit, and the mapping of redb's errors to
//! [`KvError`].
//!
//! Why optimistic concurrency on top of redb: redb gives snapshot reads (any number of read
//! transactions, each a consistent snapshot) and one write transaction at a time. Holding a redb
//! write transaction for the life of a Trove transaction would serialize all of them, including
//! their network round trips. Instead a Trove transaction reads a redb snapshot and buffers its
//! writes; only `commit` hands it to the single committer, which checks that nothing it read has
//! changed since its snapshot (a re-read against the latest state) and applies its writes.
//! See `txn.rs` for the read set and the validation.
//!
//! Group commit: transactions that ask to commit while a redb commit is being made wait in a
//! queue; the committer then validates and applies all of them, in queue order, inside *one*
//! redb write transaction and makes them durable with one fsync. Each is validated against the
//! state including the ones applied before it in the batch, so the batch order is a serial
//! order; a transaction that fails validation is left out and gets `Conflict`, the others still
//! commit. No transaction waits for company: a commit arriving at an idle queue starts at once,
//! so batching costs a lone writer nothing and gives N concurrent writers one fsync instead of N.
//! Every caller is answered only after its batch is durable.
//!
//! Durability comes from a write-ahead log (`wal.rs`): a batch's writes are appended to
//! `<file>.wal` and synced (one sequential write and one `fdatasync`) before the batch is
//! committed to redb without an fsync of its own; every so often a batch is committed to redb
//! durably instead, as a checkpoint, and the log starts over. Opening replays what the log holds
//! past the last checkpoint. A failed write or sync of the log (or a failed redb commit after
//! one) stops the engine taking commits, with the cause, until it is reopened: after a failed
//! sync the state of the file is unknown, and retrying it could acknowledge lost writes.
//!
//! Blocking: commits (validation, writes and the fsync) run under `spawn_blocking`. Snapshot
//! reads run inline on the caller's task: they are served from redb's page cache or a `pread`
//! and do not wait for other transactions.
//!
//! Operational notes: an open transaction pins its redb snapshot, so pages freed by later
//! commits are reused only once it ends (keep transactions short). After a crash, opening the
//! file runs redb's repair, which walks the whole database before the engine is available.

mod txn;
mod wal;

/// The write-ahead log's encoder and decoder for the fuzz targets in `fuzz/`; built only with
/// `--cfg fuzzing`, which cargo-fuzz sets.
#[cfg(fuzzing)]
pub mod fuzzing {
    /// A record's writes: puts (`Some`) and deletes (`None`).
    pub type Entries = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    /// Appends record `lsn` holding `entries` to `out`, as the engine writes it.
    pub fn wal_encode(lsn: u64, entries: &[(Vec<u8>, Option<Vec<u8>>)], out: &mut Vec<u8>) {
        crate::wal::encode(lsn, entries.iter().map(|(k, v)| (&k[..], v.as_deref())), out)
    }

    /// The records after checkpoint `applied` that replay takes from `log` (the bytes after the
    /// file's header) and the offset just past them, or the damage replay reports.
    pub fn wal_scan(log: &[u8], applied: u64) -> Result<(Vec<(u64, Entries)>, usize), String> {
        let scan = crate::wal::scan(log, applied).map_err(|damage| damage.0)?;
        Ok((scan.records.into_iter().map(|r| (r.lsn, r.entries)).collect(), scan.end))
    }
}

use async_trait::async_trait;
use kv::{KvEngine, KvError, KvTxn};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The one table holding every key-value pair. The version suffix leaves room for a future
/// layout change; a redb file without this table is initialized with an empty one.
const TABLE: TableDefinition<&'static [u8], &'static [u8]> = TableDefinition::new("trove.kv.v1");

/// The engine's own state, apart from the pairs: `"log_applied"` is the number of the last
/// write-ahead log record the database file holds (written by every checkpoint), `"id"` a random
/// number naming this database, also written in its log's header.
const STATE: TableDefinition<&'static str, u64> = TableDefinition::new("trove.kv.state.v1");
const LOG_APPLIED: &str = "log_applied";
const DB_ID: &str = "id";

/// Tunables of the embedded engine.
#[derive(Clone, Debug)]
pub struct Options {
    /// Size of the write-ahead log file; a checkpoint is made when half of it is used. Larger
    /// means fewer checkpoints (each a durable redb commit) and a longer replay after a crash.
    pub log_bytes: u64,
    /// A checkpoint is also made once this long has passed since the last one (and something
    /// was logged), bounding the replay at the next open.
    pub checkpoint_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options { log_bytes: 16 << 20, checkpoint_interval: Duration::from_secs(30) }
    }
}

/// The embedded engine. Cheap to clone (clones share one open database).
#[derive(Clone)]
pub struct RedbEngine {
    shared: Arc<Shared>,
}

/// What the engine and its transactions share.
struct Shared {
    db: Database,
    path: PathBuf,
    /// Number of commits with writes since the database was opened. Only changed by the
    /// committer, and only after the redb commit is visible to new snapshots, so a transaction
    /// that reads it *before* taking its snapshot knows that its snapshot includes at least that
    /// many commits. When it is unchanged at commit time, validation is skipped.
    commit_seq: AtomicU64,
    /// Transactions waiting to be committed, and whether a committer is running.
    queue: parking_lot::Mutex<txn::CommitQueue>,
    /// Digests of the values in read sets, under keys random per engine.
    digester: kv::readset::Digester,
    /// The write-ahead log; only the committer (one at a time) and `Drop` use it.
    log: parking_lot::Mutex<LogState>,
}

/// The write-ahead log and what the committer keeps about it.
pub(crate) struct LogState {
    wal: wal::Wal,
    /// Number of the last record logged (or checkpointed).
    last_lsn: u64,
    checkpointed_at: Instant,
    checkpoint_interval: Duration,
    /// Why the engine stopped taking commits, if it did.
    failed: Option<String>,
}

impl LogState {
    /// Stops the engine taking commits, for the reason `err` gives; returns `err`.
    fn fail(&mut self, err: KvError) -> KvError {
        let reason = match &err {
            KvError::Unavailable(m) | KvError::MaybeCommitted(m) | KvError::Corrupt(m) => m.clone(),
            other => other.to_string(),
        };
        self.failed = Some(format!(
            "commits stopped after a failure of the write-ahead log or database ({reason}); reopen the engine"
        ));
        err
    }

    /// Whether the batch about to be committed should be a checkpoint rather than logged.
    fn checkpoint_due(&self, record_bytes: usize) -> bool {
        !self.wal.fits(record_bytes)
            || self.wal.used() >= self.wal.capacity() / 2
            || (self.wal.used() > 0 && self.checkpointed_at.elapsed() >= self.checkpoint_interval)
    }
}

impl RedbEngine {
    /// Opens the database at `path`, creating the file (not its directory) when missing.
    ///
    /// Errors name the path: a missing directory or an unreadable file is
    /// [`KvError::Unavailable`], so is a database already open elsewhere (redb locks the file,
    /// against other processes and other engines in this process alike); a damaged file, or a
    /// redb file of another layout, is [`KvError::Corrupt`]. Opening after a crash repairs the
    /// file first, which walks the whole database. This call blocks; from async code, run it
    /// in `spawn_blocking` if the file may be large.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, KvError> {
        Self::open_with(path, &Options::default())
    }

    /// [`RedbEngine::open`] with tunables. Opening also replays the write-ahead log
    /// (`<path>.wal`, created when missing) into the database and checkpoints; damage to logged
    /// commits is [`KvError::Corrupt`] naming the log.
    pub fn open_with(path: impl AsRef<Path>, options: &Options) -> Result<Self, KvError> {
        let path = path.as_ref().to_path_buf();
        // redb returns errors for damaged files in release builds, but stops on some with a
        // debug assertion in debug builds: report those as damage too rather than unwinding
        // through the caller.
        let opened = std::panic::catch_unwind(|| {
            let db = Database::builder().create(&path).map_err(|err| map_open_error(&path, err))?;
            ensure_table(&db, &path)?;
            Ok(db)
        });
        let db = match opened {
            Ok(result) => result?,
            Err(panic) => {
                let reason = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown failure");
                return Err(KvError::Corrupt(format!(
                    "cannot open redb database {}: redb failed reading it: {reason}",
                    path.display()
                )));
            }
        };
        let log = recover(&db, &path, options)?;
        Ok(RedbEngine {
            shared: Arc::new(Shared {
                db,
                path,
                commit_seq: AtomicU64::new(0),
                queue: parking_lot::Mutex::new(txn::CommitQueue::default()),
                digester: kv::readset::Digester::default(),
                log: parking_lot::Mutex::new(log),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }
}

impl fmt::Debug for RedbEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbEngine").field("path", &self.shared.path).finish_non_exhaustive()
    }
}

#[async_trait]
impl KvEngine for RedbEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        Ok(Box::new(txn::RedbTxn::begin(Arc::clone(&self.shared))?))
    }

    fn describe(&self) -> String {
        format!("redb {}", self.shared.path.display())
    }
}

impl Shared {
    /// The commit sequence number, read before taking a snapshot (see `commit_seq`).
    fn commit_seq(&self) -> u64 {
        self.commit_seq.load(Ordering::Acquire)
    }

    /// Publishes one more commit. Called by the committer, after the redb commit returned.
    fn publish_commit(&self) {
        self.commit_seq.fetch_add(1, Ordering::Release);
    }

    /// Maps a redb error met while doing `action` to a [`KvError`] naming the file.
    fn error(&self, action: &str, err: impl Into<redb::Error>) -> KvError {
        map_error(&self.path, action, err.into())
    }
}

impl Drop for Shared {
    /// A clean close checkpoints, so that the next open has nothing to replay.
    fn drop(&mut self) {
        let log = self.log.get_mut();
        if log.failed.is_some() || log.wal.used() == 0 {
            return;
        }
        let checkpoint = || -> Result<(), redb::Error> {
            let mut write = self.db.begin_write()?;
            write.set_durability(Durability::Immediate)?;
            write.open_table(STATE)?.insert(LOG_APPLIED, log.last_lsn)?;
            write.commit()?;
            Ok(())
        };
        // On failure the next open replays the log instead.
        let _ = checkpoint();
    }
}

/// Creates the tables in a new (or foreign but empty-of-them) database, and checks their types
/// otherwise.
fn ensure_table(db: &Database, path: &Path) -> Result<(), KvError> {
    let read = db.begin_read().map_err(|err| map_error(path, "begin a read transaction", err.into()))?;
    let missing_kv = match read.open_table(TABLE) {
        Ok(_) => false,
        Err(redb::TableError::TableDoesNotExist(_)) => true,
        Err(err) => return Err(map_error(path, "open the key-value table", err.into())),
    };
    let missing_state = match read.open_table(STATE) {
        Ok(_) => false,
        Err(redb::TableError::TableDoesNotExist(_)) => true,
        Err(err) => return Err(map_error(path, "open the engine state table", err.into())),
    };
    if !missing_kv && !missing_state {
        return Ok(());
    }
    drop(read);
    let write = db.begin_write().map_err(|err| map_error(path, "begin a write transaction", err.into()))?;
    write.open_table(TABLE).map_err(|err| map_error(path, "create the key-value table", err.into()))?;
    write.open_table(STATE).map_err(|err| map_error(path, "create the engine state table", err.into()))?;
    write.commit().map_err(|err| map_error(path, "commit the new tables", err.into()))
}

/// The database's id (made, durably, at its first open) and the last checkpoint's record number.
fn engine_state(db: &Database, path: &Path) -> Result<(u64, u64), KvError> {
    let read_state = || -> Result<(Option<u64>, u64), redb::Error> {
        let read = db.begin_read()?;
        let state = read.open_table(STATE)?;
        let id = state.get(DB_ID)?.map(|v| v.value());
        let applied = state.get(LOG_APPLIED)?.map_or(0, |v| v.value());
        Ok((id, applied))
    };
    let (id, applied) = read_state().map_err(|err| map_error(path, "read the engine state", err))?;
    if let Some(id) = id {
        return Ok((id, applied));
    }
    let id = RandomState::new().hash_one(path).max(1);
    let write_id = || -> Result<(), redb::Error> {
        let mut write = db.begin_write()?;
        write.set_durability(Durability::Immediate)?;
        write.open_table(STATE)?.insert(DB_ID, id)?;
        write.commit()?;
        Ok(())
    };
    write_id().map_err(|err| map_error(path, "record the database id", err))?;
    Ok((id, applied))
}

/// Opens the write-ahead log of the database at `path`, replays the records past the last
/// checkpoint into `db` and checkpoints (one durable commit), so the log starts over empty.
fn recover(db: &Database, path: &Path, options: &Options) -> Result<LogState, KvError> {
    let log_path = wal::Wal::path_for(path);
    let shown = log_path.display();
    let (db_id, applied) = engine_state(db, path)?;
    let (mut wal, bytes) = wal::Wal::open(&log_path, options.log_bytes, db_id).map_err(|err| {
        if err.kind() == std::io::ErrorKind::InvalidData {
            KvError::Corrupt(format!("cannot open write-ahead log {shown}: {err}"))
        } else {
            KvError::Unavailable(format!("cannot open write-ahead log {shown}: {err}"))
        }
    })?;
    let scan = wal::scan(&bytes, applied)
        .map_err(|damage| KvError::Corrupt(format!("write-ahead log {shown}: {}", damage.0)))?;
    let last_lsn = scan.records.last().map_or(applied, |r| r.lsn);
    if !scan.records.is_empty() {
        let replay = || -> Result<(), redb::Error> {
            let mut write = db.begin_write()?;
            write.set_durability(Durability::Immediate)?;
            {
                let mut table = write.open_table(TABLE)?;
                for record in &scan.records {
                    for (key, value) in &record.entries {
                        match value {
                            Some(value) => {
                                table.insert(key.as_slice(), value.as_slice())?;
                            }
                            None => {
                                table.remove(key.as_slice())?;
                            }
                        }
                    }
                }
                write.open_table(STATE)?.insert(LOG_APPLIED, last_lsn)?;
            }
            write.commit()?;
            Ok(())
        };
        replay().map_err(|err| map_error(path, &format!("replay write-ahead log {shown}"), err))?;
    }
    wal.restart();
    Ok(LogState {
        wal,
        last_lsn,
        checkpointed_at: Instant::now(),
        checkpoint_interval: options.checkpoint_interval,
        failed: None,
    })
}

fn map_open_error(path: &Path, err: redb::DatabaseError) -> KvError {
    let shown = path.display();
    match err {
        redb::DatabaseError::DatabaseAlreadyOpen => KvError::Unavailable(format!(
            "cannot open redb database {shown}: it is already open (locked by another process, or by another engine in this process)"
        )),
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => {
            if io.kind() == std::io::ErrorKind::InvalidData {
                // redb reports a file that is not a redb database (bad magic number) this way.
                return KvError::Corrupt(format!("cannot open redb database {shown}: {io}"));
            }
            let hint = match io.kind() {
                std::io::ErrorKind::NotFound => " (does its directory exist?)",
                std::io::ErrorKind::PermissionDenied => " (check the permissions of the file and its directory)",
                _ => "",
            };
            KvError::Unavailable(format!("cannot open redb database {shown}: {io}{hint}"))
        }
        other => map_error(path, "open the database", other.into()),
    }
}

/// Maps any redb error to a [`KvError`]: damage to `Corrupt`, everything else to
/// `Unavailable`, with the path and what was being done.
fn map_error(path: &Path, action: &str, err: redb::Error) -> KvError {
    let shown = path.display();
    match err {
        redb::Error::Corrupted(_)
        | redb::Error::TableTypeMismatch { .. }
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableDoesNotExist(_) => {
            KvError::Corrupt(format!("redb database {shown}: cannot {action}: {err}"))
        }
        redb::Error::DatabaseAlreadyOpen => KvError::Unavailable(format!(
            "redb database {shown}: cannot {action}: it is already open (locked by another process, or by another engine in this process)"
        )),
        other => KvError::Unavailable(format!("redb database {shown}: cannot {action}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    /// Writes records `applied+1..=applied+3` (record `applied+i` puts `k{i}` = `v{i}` and
    /// deletes `gone`) into the log of the closed database at `path`; returns where each record
    /// starts in the file.
    fn write_records(path: &Path, applied: u64) -> Vec<u64> {
        let file = std::fs::OpenOptions::new().write(true).open(wal::Wal::path_for(path)).unwrap();
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        for i in 1..=3u64 {
            starts.push(wal::HEADER_BYTES + bytes.len() as u64);
            let key = format!("k{i}").into_bytes();
            let value = format!("v{i}").into_bytes();
            let entries = [(key.as_slice(), Some(value.as_slice())), (&b"gone"[..], None)];
            wal::encode(applied + i, entries, &mut bytes);
        }
        file.write_all_at(&bytes, wal::HEADER_BYTES).unwrap();
        starts
    }

    async fn get(engine: &RedbEngine, key: &[u8]) -> Option<Vec<u8>> {
        engine.begin().await.unwrap().get(key).await.unwrap()
    }

    async fn put(engine: &RedbEngine, key: &[u8], value: &[u8]) {
        let mut txn = engine.begin().await.unwrap();
        txn.put(key, value).await.unwrap();
        txn.commit().await.unwrap();
    }

    #[tokio::test]
    async fn logged_records_are_replayed_at_open_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let engine = RedbEngine::open(&path).unwrap();
        put(&engine, b"gone", b"x").await;
        let applied = engine.shared.log.lock().last_lsn;
        assert_eq!(applied, 1);
        drop(engine);
        write_records(&path, applied);
        let engine = RedbEngine::open(&path).unwrap();
        for i in 1..=3 {
            assert_eq!(get(&engine, format!("k{i}").as_bytes()).await, Some(format!("v{i}").into_bytes()));
        }
        assert_eq!(get(&engine, b"gone").await, None);
        // The replay was checkpointed: the same records are now older than the checkpoint, and
        // a write made after it is not undone by them at the next open.
        put(&engine, b"k2", b"later").await;
        drop(engine);
        let engine = RedbEngine::open(&path).unwrap();
        assert_eq!(get(&engine, b"k2").await, Some(b"later".to_vec()));
        assert_eq!(get(&engine, b"k3").await, Some(b"v3".to_vec()));
    }

    #[test]
    fn a_damaged_logged_record_is_reported_naming_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        drop(RedbEngine::open(&path).unwrap());
        let starts = write_records(&path, 0);
        let file = std::fs::OpenOptions::new().write(true).open(wal::Wal::path_for(&path)).unwrap();
        file.write_all_at(b"X", starts[1] + 20).unwrap();
        let err = RedbEngine::open(&path).expect_err("a damaged log is refused");
        let KvError::Corrupt(message) = &err else { panic!("expected Corrupt, got {err:?}") };
        assert!(message.contains("db.wal") && message.contains("record 2") && message.contains("damaged"), "{message}");
    }

    #[tokio::test]
    async fn the_log_of_another_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let engine = RedbEngine::open(&a).unwrap();
        put(&engine, b"k", b"v").await;
        engine.shared.log.lock().failed = Some("test: no checkpoint at close".into());
        drop(engine);
        drop(RedbEngine::open(&b).unwrap());
        // b's file replaced by a new one, a's log left beside it: its records must not be
        // replayed into b.
        std::fs::remove_file(&b).unwrap();
        std::fs::copy(wal::Wal::path_for(&a), wal::Wal::path_for(&b)).unwrap();
        let err = RedbEngine::open(&b).expect_err("another database's log is refused");
        let KvError::Corrupt(message) = &err else { panic!("expected Corrupt, got {err:?}") };
        assert!(message.contains("b.wal") && message.contains("another database"), "{message}");
        // a itself still replays its log.
        assert_eq!(get(&RedbEngine::open(&a).unwrap(), b"k").await, Some(b"v".to_vec()));
    }

    #[tokio::test]
    async fn an_idle_log_is_checkpointed_after_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { checkpoint_interval: Duration::from_millis(200), ..Options::default() };
        let engine = RedbEngine::open_with(dir.path().join("db"), &options).unwrap();
        put(&engine, b"a", b"1").await;
        put(&engine, b"b", b"2").await;
        assert!(engine.shared.log.lock().wal.used() > 0, "logged, not checkpointed");
        tokio::time::sleep(Duration::from_millis(250)).await;
        put(&engine, b"c", b"3").await;
        assert_eq!(engine.shared.log.lock().wal.used(), 0, "the commit after the interval is a checkpoint");
    }

    #[tokio::test]
    async fn a_log_cut_short_before_its_header_is_laid_out_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        drop(RedbEngine::open(&path).unwrap());
        std::fs::write(wal::Wal::path_for(&path), vec![0u8; 9000]).unwrap();
        let engine = RedbEngine::open(&path).unwrap();
        put(&engine, b"k", b"v").await;
        drop(engine);
        assert_eq!(get(&RedbEngine::open(&path).unwrap(), b"k").await, Some(b"v".to_vec()));
    }

    #[tokio::test]
    async fn a_full_log_checkpoints_and_a_record_larger_than_the_log_is_committed_directly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let options = Options { log_bytes: 64 << 10, ..Options::default() };
        let engine = RedbEngine::open_with(&path, &options).unwrap();
        let value = |i: u32| vec![(i % 251) as u8; if i.is_multiple_of(50) { 100_000 } else { 1000 }];
        let mut checkpoints = 0;
        for i in 0..400u32 {
            let before = engine.shared.log.lock().wal.used();
            put(&engine, format!("k{i}").as_bytes(), &value(i)).await;
            if engine.shared.log.lock().wal.used() <= before {
                checkpoints += 1;
            }
        }
        // 64 KiB log, checkpoint at half: about 30 records of 1 KB between checkpoints.
        assert!((8..=40).contains(&checkpoints), "{checkpoints} checkpoints");
        let last_lsn = engine.shared.log.lock().last_lsn;
        assert_eq!(last_lsn, 400);
        // Skip the clean-close checkpoint, as a crash would: the log alone must hold the rest.
        engine.shared.log.lock().failed = Some("test: no checkpoint at close".into());
        drop(engine);
        let engine = RedbEngine::open(&path).unwrap();
        for i in 0..400u32 {
            assert_eq!(get(&engine, format!("k{i}").as_bytes()).await, Some(value(i)), "k{i}");
        }
        assert_eq!(engine.shared.log.lock().last_lsn, 400);
    }
}
