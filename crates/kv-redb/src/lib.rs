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
//! Every caller is answered only after the fsync of its batch returned.
//!
//! Blocking: commits (validation, writes and the fsync) run under `spawn_blocking`. Snapshot
//! reads run inline on the caller's task: they are served from redb's page cache or a `pread`
//! and do not wait for other transactions.
//!
//! Operational notes: an open transaction pins its redb snapshot, so pages freed by later
//! commits are reused only once it ends (keep transactions short). After a crash, opening the
//! file runs redb's repair, which walks the whole database before the engine is available.

mod txn;

use async_trait::async_trait;
use kv::{KvEngine, KvError, KvTxn};
use redb::{Database, ReadableDatabase, TableDefinition};
use std::fmt;
use std::hash::RandomState;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The one table holding every key-value pair. The version suffix leaves room for a future
/// layout change; a redb file without this table is initialized with an empty one.
const TABLE: TableDefinition<&'static [u8], &'static [u8]> = TableDefinition::new("trove.kv.v1");

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
    /// Keys of the value digests of the read sets (per engine and random, so that nobody can
    /// craft two values with equal digests).
    digest_keys: [RandomState; 2],
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
        let path = path.as_ref().to_path_buf();
        // redb returns errors for damaged files in release builds, but stops on some with a
        // debug assertion in debug builds: report those as damage too rather than unwinding
        // through the caller.
        let opened = std::panic::catch_unwind(|| {
            let db = Database::builder()
                .create(&path)
                .map_err(|err| map_open_error(&path, err))?;
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
        Ok(RedbEngine {
            shared: Arc::new(Shared {
                db,
                path,
                commit_seq: AtomicU64::new(0),
                queue: parking_lot::Mutex::new(txn::CommitQueue::default()),
                digest_keys: [RandomState::new(), RandomState::new()],
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
        f.debug_struct("RedbEngine")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
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

/// Creates the table in a new (or foreign but empty-of-it) database, and checks its type
/// otherwise.
fn ensure_table(db: &Database, path: &Path) -> Result<(), KvError> {
    let read = db
        .begin_read()
        .map_err(|err| map_error(path, "begin a read transaction", err.into()))?;
    match read.open_table(TABLE) {
        Ok(_) => return Ok(()),
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(err) => return Err(map_error(path, "open the key-value table", err.into())),
    }
    drop(read);
    let write = db
        .begin_write()
        .map_err(|err| map_error(path, "begin a write transaction", err.into()))?;
    write
        .open_table(TABLE)
        .map_err(|err| map_error(path, "create the key-value table", err.into()))?;
    write
        .commit()
        .map_err(|err| map_error(path, "commit the new key-value table", err.into()))
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
