//! One transaction of the PostgreSQL engine: the reading transaction with buffered writes, the
//! read set its reads leave behind, and the commit that re-runs those reads and writes in one
//! serializable PostgreSQL transaction (see the crate documentation for why).
//!
//! What the read set holds (as in the redb engine):
//! - point reads: the key and what was seen (a [`Digest`] of the value, or absence);
//! - scans: the committed pairs the result showed, and the part of the range the result depended
//!   on: all of `[start, end)` when the scan returned fewer pairs than its limit,
//!   `[start, last returned key]` when it stopped at the limit. Keys the transaction had written
//!   before scanning are left out (`masked`): the result showed the buffered write whatever was
//!   committed under it.
//!
//! Reads of keys the transaction wrote before come from its buffer and depend on nothing.

use crate::pool::{error_text, join_in_order, BoxFuture, Conn, ConnState, Lease, Pool};
use crate::{Shared, INDEX_KEY_BYTES_MAX};
use async_trait::async_trait;
use kv::readset::{Digest, ScanRead};
use kv::{check_key, check_value, KeyValue, KvError, KvTxn};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Starts the reading transaction. `READ ONLY` lets PostgreSQL's serializable mode protect a
/// read-only Trove transaction cheaply; a writing one never writes in it anyway.
const BEGIN_READING: &str = "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY";
/// Starts the commit transaction on a connection outside any transaction.
const BEGIN_COMMIT: &str = "BEGIN ISOLATION LEVEL SERIALIZABLE";
/// Ends the reading transaction and starts the commit transaction, in one message.
const END_READING_BEGIN_COMMIT: &str = "ROLLBACK; BEGIN ISOLATION LEVEL SERIALIZABLE";

type Param<'a> = &'a (dyn ToSql + Sync);
type PgResult<T> = Result<T, tokio_postgres::Error>;

/// The error a failed read left: later calls return it again (the PostgreSQL transaction is
/// aborted or gone, so nothing more can be read in it).
#[derive(Clone, Debug)]
enum Failure {
    Conflict,
    TooOld,
    Unavailable(String),
    Corrupt(String),
}

impl Failure {
    fn of(err: &KvError) -> Failure {
        match err {
            KvError::Conflict => Failure::Conflict,
            KvError::TooOld => Failure::TooOld,
            KvError::Corrupt(message) => Failure::Corrupt(message.clone()),
            other => Failure::Unavailable(other.to_string()),
        }
    }

    fn error(&self) -> KvError {
        match self {
            Failure::Conflict => KvError::Conflict,
            Failure::TooOld => KvError::TooOld,
            Failure::Unavailable(message) => KvError::Unavailable(message.clone()),
            Failure::Corrupt(message) => KvError::Corrupt(message.clone()),
        }
    }
}

/// A read sent to the reading transaction.
#[derive(Clone, Copy)]
enum ReadQuery<'a> {
    Get(&'a [u8]),
    Scan { start: &'a [u8], end: &'a [u8], limit: i64 },
}

/// How the first round trip of a commit ended.
enum Prepared {
    /// Every read still holds and every write is done: send `COMMIT`.
    Ready,
    /// A read returns something else now.
    Changed,
    /// The server refused a statement; the transaction is aborted.
    Refused(KvError),
    /// The connection failed: nothing was committed.
    Lost(tokio_postgres::Error),
}

pub(crate) struct PgTxn {
    shared: Arc<Shared>,
    /// The connection of the reading transaction, from the first read on.
    reading: Option<Lease>,
    failed: Option<Failure>,
    /// Buffered writes: `None` deletes.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Point reads served by the database, with what they saw.
    point_reads: BTreeMap<Vec<u8>, Option<Digest>>,
    scans: Vec<ScanRead>,
}

impl PgTxn {
    pub(crate) fn new(shared: Arc<Shared>) -> PgTxn {
        PgTxn {
            shared,
            reading: None,
            failed: None,
            writes: BTreeMap::new(),
            point_reads: BTreeMap::new(),
            scans: Vec::new(),
        }
    }

    fn pool(&self) -> Arc<Pool> {
        Arc::clone(&self.shared.pool)
    }

    fn check_failed(&self) -> Result<(), KvError> {
        match &self.failed {
            Some(failure) => Err(failure.error()),
            None => Ok(()),
        }
    }

    /// Runs one read in the reading transaction, starting it on the first read.
    async fn read(&mut self, query: ReadQuery<'_>) -> Result<Vec<Row>, KvError> {
        self.check_failed()?;
        let result = self.read_once_or_twice(query).await;
        if let Err(err) = &result {
            self.failed = Some(Failure::of(err));
        }
        result
    }

    async fn read_once_or_twice(&mut self, query: ReadQuery<'_>) -> Result<Vec<Row>, KvError> {
        let pool = self.pool();
        let starting = self.reading.is_none();
        let mut attempt = 0u32;
        loop {
            let mut lease = match self.reading.take() {
                Some(lease) => lease,
                None => pool.acquire().await?,
            };
            lease.state = ConnState::Unknown;
            let outcome =
                tokio::time::timeout(pool.round_trip_timeout(), run_read(lease.conn(), query, starting)).await;
            match outcome {
                Ok(Ok(rows)) => {
                    lease.state = ConnState::InTxn;
                    self.reading = Some(lease);
                    return Ok(rows);
                }
                Ok(Err(err)) if err.code().is_some() && !is_connection_code(err.code()) => {
                    // The server refused the statement: the transaction is aborted, the
                    // connection fine (rolled back when the lease ends).
                    lease.state = ConnState::InTxn;
                    self.reading = Some(lease);
                    return Err(map_db_error(&pool, "read", &err));
                }
                Ok(Err(err)) => {
                    // A pooled connection may have died while idle: when it was the first
                    // statement of the transaction, nothing is lost by trying a new one.
                    let retry = starting && lease.reused && attempt == 0;
                    drop(lease);
                    if retry {
                        attempt += 1;
                        continue;
                    }
                    return Err(pool.unavailable(format_args!("read failed: {}", error_text(&err))));
                }
                Err(_elapsed) => {
                    return Err(pool.unavailable(format_args!(
                        "no answer to a read within {} ms",
                        pool.options().round_trip_timeout_ms
                    )))
                }
            }
        }
    }

    /// The commit of a transaction with writes: re-run the reads, write, commit.
    async fn commit_writes(&mut self) -> Result<(), KvError> {
        let pool = self.pool();
        let mut lease = match self.reading.take() {
            Some(lease) if !lease.is_closed() => lease,
            _ => pool.acquire().await?,
        };
        let mut attempt = 0u32;
        loop {
            let ending_reading = lease.state == ConnState::InTxn;
            lease.state = ConnState::Unknown;
            let outcome =
                tokio::time::timeout(pool.round_trip_timeout(), self.check_and_write(lease.conn(), ending_reading))
                    .await;
            match outcome {
                Ok(Prepared::Ready) => break,
                Ok(Prepared::Changed) => {
                    lease.state = ConnState::InTxn;
                    return Err(KvError::Conflict);
                }
                Ok(Prepared::Refused(err)) => {
                    lease.state = ConnState::InTxn;
                    return Err(err);
                }
                Ok(Prepared::Lost(err)) => {
                    // COMMIT was not sent: nothing was committed, and the reads are checked
                    // again anyway, so a new connection can do the whole commit.
                    drop(lease);
                    if attempt > 0 {
                        return Err(pool.unavailable(format_args!(
                            "commit failed before COMMIT was sent (nothing was committed): {}",
                            error_text(&err)
                        )));
                    }
                    attempt += 1;
                    lease = pool.acquire().await?;
                }
                Err(_elapsed) => {
                    return Err(pool.unavailable(format_args!(
                        "no answer within {} ms while preparing the commit (nothing was committed)",
                        pool.options().round_trip_timeout_ms
                    )))
                }
            }
        }
        let committed =
            tokio::time::timeout(pool.round_trip_timeout(), lease.conn().client.batch_execute("COMMIT")).await;
        match committed {
            Ok(Ok(())) => {
                lease.state = ConnState::Idle;
                Ok(())
            }
            Ok(Err(err)) => match err.code() {
                Some(code)
                    if !is_connection_code(Some(code)) && *code != SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN =>
                {
                    // The server answered and refused: the transaction is over, nothing written.
                    lease.state = ConnState::Idle;
                    Err(map_db_error(&pool, "commit", &err))
                }
                _ => Err(KvError::MaybeCommitted(format!(
                    "{}: connection lost during COMMIT: {}",
                    pool.described(),
                    error_text(&err)
                ))),
            },
            Err(_elapsed) => Err(KvError::MaybeCommitted(format!(
                "{}: no answer to COMMIT within {} ms",
                pool.described(),
                pool.options().round_trip_timeout_ms
            ))),
        }
    }

    /// The first round trip of a commit, pipelined: (end the reading transaction,) begin the
    /// commit transaction, re-run every read, write every buffered key in key order.
    async fn check_and_write(&self, conn: &Conn, ending_reading: bool) -> Prepared {
        let statements = &conn.statements;
        let client = &conn.client;
        // Parameters live here, borrowed by the futures below.
        let point_keys: Vec<&[u8]> = self.point_reads.keys().map(Vec::as_slice).collect();
        let point_params: [Param<'_>; 1] = [&point_keys];
        let scan_checks: Vec<(&[u8], &[u8], bool, i64)> = self
            .scans
            .iter()
            .map(|scan| {
                // Enough rows to see one more than the transaction saw (masked keys may or may
                // not be committed).
                let rows = scan.seen.len().saturating_add(scan.masked.len()).saturating_add(1);
                let limit = i64::try_from(rows).unwrap_or(i64::MAX);
                match &scan.end {
                    Bound::Included(last) => (scan.start.as_slice(), last.as_slice(), true, limit),
                    Bound::Excluded(end) => (scan.start.as_slice(), end.as_slice(), false, limit),
                    Bound::Unbounded => (scan.start.as_slice(), kv::END_OF_KEYSPACE, false, limit),
                }
            })
            .collect();
        let scan_params: Vec<[Param<'_>; 3]> = scan_checks
            .iter()
            .map(|(start, end, _, limit)| [start as Param<'_>, end as Param<'_>, limit as Param<'_>])
            .collect();
        let write_params: Vec<(&[u8], Vec<Param<'_>>)> = self
            .writes
            .iter()
            .map(|(key, value)| {
                let params: Vec<Param<'_>> = match value {
                    Some(value) => vec![key as Param<'_>, value as Param<'_>],
                    None => vec![key as Param<'_>],
                };
                (key.as_slice(), params)
            })
            .collect();

        let begin = if ending_reading { END_READING_BEGIN_COMMIT } else { BEGIN_COMMIT };
        let mut requests: Vec<BoxFuture<'_, PgResult<Vec<Row>>>> = Vec::new();
        requests.push(Box::pin(async move { client.batch_execute(begin).await.map(|()| Vec::new()) }));
        if !point_keys.is_empty() {
            requests.push(Box::pin(client.query(&statements.get_many, &point_params)));
        }
        for ((_, _, through, _), params) in scan_checks.iter().zip(&scan_params) {
            let statement = if *through { &statements.scan_through } else { &statements.scan };
            requests.push(Box::pin(client.query(statement, params)));
        }
        for (_, params) in &write_params {
            let statement = if params.len() == 2 { &statements.put } else { &statements.delete };
            requests.push(Box::pin(async move { client.execute(statement, params).await.map(|_| Vec::new()) }));
        }
        let mut replies = join_in_order(requests).await.into_iter();

        // Replies in the order sent: the first error explains the rest.
        let pool = &self.shared.pool;
        let first_write = 1 + usize::from(!point_keys.is_empty()) + scan_checks.len();
        let mut all = Vec::new();
        for (index, reply) in replies.by_ref().enumerate() {
            match reply {
                Ok(rows) => all.push(rows),
                Err(err) if err.code().is_some() && !is_connection_code(err.code()) => {
                    let written_key =
                        index.checked_sub(first_write).and_then(|i| write_params.get(i)).map(|(key, _)| *key);
                    return Prepared::Refused(match written_key {
                        Some(key) if err.code() == Some(&SqlState::PROGRAM_LIMIT_EXCEEDED) => KvError::TooLarge {
                            what: "key (its PostgreSQL index entry, after compression)",
                            len: key.len(),
                            max: INDEX_KEY_BYTES_MAX,
                        },
                        _ => map_db_error(pool, "commit", &err),
                    });
                }
                Err(err) => return Prepared::Lost(err),
            }
        }
        let mut all = all.into_iter().skip(1);
        if !point_keys.is_empty() {
            let rows = all.next().unwrap_or_default();
            match self.point_reads_hold(&rows) {
                Ok(true) => {}
                Ok(false) => return Prepared::Changed,
                Err(err) => return Prepared::Refused(err),
            }
        }
        for scan in &self.scans {
            let rows = all.next().unwrap_or_default();
            match self.scan_holds(scan, &rows) {
                Ok(true) => {}
                Ok(false) => return Prepared::Changed,
                Err(err) => return Prepared::Refused(err),
            }
        }
        Prepared::Ready
    }

    /// Whether every point read returns the same in `rows` (the current `k, v` of the keys).
    fn point_reads_hold(&self, rows: &[Row]) -> Result<bool, KvError> {
        let mut now: BTreeMap<Vec<u8>, Digest> = BTreeMap::new();
        for row in rows {
            let (key, value) = self.decode_pair(row)?;
            now.insert(key, self.shared.digester.digest(&value));
        }
        Ok(self.point_reads.iter().all(|(key, seen)| now.get(key) == seen.as_ref()))
    }

    /// Whether a scan's committed part is what it saw, given the rows of its range now.
    fn scan_holds(&self, scan: &ScanRead, rows: &[Row]) -> Result<bool, KvError> {
        let mut seen = scan.seen.iter();
        for row in rows {
            let (key, value) = self.decode_pair(row)?;
            if scan.masked.binary_search(&key).is_ok() {
                continue;
            }
            match seen.next() {
                Some((seen_key, seen_digest))
                    if *seen_key == key && *seen_digest == self.shared.digester.digest(&value) => {}
                _ => return Ok(false),
            }
        }
        Ok(seen.next().is_none())
    }

    fn decode_pair(&self, row: &Row) -> Result<KeyValue, KvError> {
        let key: Vec<u8> = row.try_get(0).map_err(|err| self.undecodable(&err))?;
        let value: Vec<u8> = row.try_get(1).map_err(|err| self.undecodable(&err))?;
        Ok((key, value))
    }

    fn undecodable(&self, err: &tokio_postgres::Error) -> KvError {
        KvError::Corrupt(format!(
            "{}: a row of {} cannot be decoded: {}",
            self.shared.pool.described(),
            self.shared.pool.sql().kv_table,
            error_text(err)
        ))
    }
}

/// One read, preceded by the `BEGIN` of the reading transaction when `starting` (pipelined).
async fn run_read(conn: &Conn, query: ReadQuery<'_>, starting: bool) -> PgResult<Vec<Row>> {
    let statements = &conn.statements;
    let client = &conn.client;
    let select: BoxFuture<'_, PgResult<Vec<Row>>> = match query {
        ReadQuery::Get(key) => Box::pin(async move { client.query(&statements.get, &[&key]).await }),
        ReadQuery::Scan { start, end, limit } => {
            Box::pin(async move { client.query(&statements.scan, &[&start, &end, &limit]).await })
        }
    };
    if !starting {
        return select.await;
    }
    let begin: BoxFuture<'_, PgResult<Vec<Row>>> =
        Box::pin(async move { client.batch_execute(BEGIN_READING).await.map(|()| Vec::new()) });
    let mut replies = join_in_order(vec![begin, select]).await.into_iter();
    match (replies.next(), replies.next()) {
        (Some(Err(err)), _) => Err(err),
        (Some(Ok(_)), Some(rows)) => rows,
        _ => unreachable!("join_in_order returns one reply per request"),
    }
}

/// SQLSTATEs (or their absence) that mean the session is gone rather than a statement refused.
fn is_connection_code(code: Option<&SqlState>) -> bool {
    match code {
        None => true,
        Some(code) => {
            code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
        }
    }
}

/// Maps an error the server returned for a statement.
fn map_db_error(pool: &Pool, action: &str, err: &tokio_postgres::Error) -> KvError {
    match err.code() {
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED => {
            KvError::Conflict
        }
        Some(code) if *code == SqlState::SNAPSHOT_TOO_OLD => KvError::TooOld,
        Some(code) if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED => {
            KvError::Corrupt(format!("{}: {action}: {}", pool.described(), error_text(err)))
        }
        _ => pool.unavailable(format_args!("{action}: {}", error_text(err))),
    }
}

#[async_trait]
impl KvTxn for PgTxn {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.check_failed()?;
        if let Some(buffered) = self.writes.get(key) {
            return Ok(buffered.clone());
        }
        let rows = self.read(ReadQuery::Get(key)).await?;
        let value = match rows.as_slice() {
            [] => None,
            [row] => Some(row.try_get::<_, Vec<u8>>(0).map_err(|err| self.undecodable(&err))?),
            more => {
                return Err(KvError::Corrupt(format!(
                    "{}: {} rows for one key of {}",
                    self.shared.pool.described(),
                    more.len(),
                    self.shared.pool.sql().kv_table
                )))
            }
        };
        if !self.point_reads.contains_key(key) {
            let digest = value.as_deref().map(|value| self.shared.digester.digest(value));
            self.point_reads.insert(key.to_vec(), digest);
        }
        Ok(value)
    }

    async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.check_failed()?;
        check_key(key)?;
        check_value(value)?;
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    async fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.check_failed()?;
        check_key(key)?;
        self.writes.insert(key.to_vec(), None);
        Ok(())
    }

    async fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        self.check_failed()?;
        if limit == 0 || start >= end {
            return Ok(Vec::new());
        }
        let bounds = (Bound::Included(start), Bound::Excluded(end));
        // Buffered keys may hide committed ones: fetch enough to fill `limit` anyway.
        let buffered_count = self.writes.range::<[u8], _>(bounds).count();
        let fetch = limit.saturating_add(buffered_count);
        let fetch_limit = i64::try_from(fetch).unwrap_or(i64::MAX);
        let rows = self.read(ReadQuery::Scan { start, end, limit: fetch_limit }).await?;
        let fetched_all = rows.len() < fetch;
        let mut committed_rows = Vec::with_capacity(rows.len());
        for row in &rows {
            let (key, value) = self.decode_pair(row)?;
            let in_order = committed_rows.last().is_none_or(|(previous, _): &KeyValue| *previous < key);
            if !in_order || key.as_slice() < start || key.as_slice() >= end {
                return Err(KvError::Corrupt(format!(
                    "{}: a scan of {} returned keys out of order or out of range",
                    self.shared.pool.described(),
                    self.shared.pool.sql().kv_table
                )));
            }
            committed_rows.push((key, value));
        }

        let mut committed = committed_rows.into_iter().peekable();
        let mut buffered = self.writes.range::<[u8], _>(bounds).peekable();
        let mut result: Vec<KeyValue> = Vec::new();
        let mut seen = Vec::new();
        let mut masked = Vec::new();
        let complete = loop {
            if result.len() >= limit {
                break false;
            }
            let buffered_first = match (committed.peek(), buffered.peek()) {
                (None, None) => break true,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((committed_key, _)), Some((buffered_key, _))) => {
                    buffered_key.as_slice() <= committed_key.as_slice()
                }
            };
            if buffered_first {
                let Some((key, value)) = buffered.next() else {
                    break true;
                };
                if committed.peek().is_some_and(|(committed_key, _)| committed_key == key) {
                    committed.next();
                }
                masked.push(key.clone());
                if let Some(value) = value {
                    result.push((key.clone(), value.clone()));
                }
            } else {
                let Some((key, value)) = committed.next() else {
                    break true;
                };
                seen.push((key.clone(), self.shared.digester.digest(&value)));
                result.push((key, value));
            }
        };
        // Fetching `limit` plus the buffered keys in the range always fills the result before
        // the fetched rows run out, unless they were all there were.
        assert!(!complete || fetched_all, "a scan ran out of fetched rows before its limit");
        let end = match (complete, result.last()) {
            (false, Some((last, _))) => Bound::Included(last.clone()),
            _ => Bound::Excluded(end.to_vec()),
        };
        self.scans.push(ScanRead { start: start.to_vec(), end, seen, masked });
        Ok(result)
    }

    async fn commit(mut self: Box<Self>) -> Result<(), KvError> {
        self.check_failed()?;
        if !self.writes.is_empty() {
            return self.commit_writes().await;
        }
        // Read-only: end the reading transaction (if any read started one). PostgreSQL checks
        // here that what it read fits a serial order.
        let Some(mut lease) = self.reading.take() else {
            return Ok(());
        };
        let pool = self.pool();
        lease.state = ConnState::Unknown;
        let committed =
            tokio::time::timeout(pool.round_trip_timeout(), lease.conn().client.batch_execute("COMMIT")).await;
        match committed {
            Ok(Ok(())) => {
                lease.state = ConnState::Idle;
                Ok(())
            }
            Ok(Err(err)) if !is_connection_code(err.code()) => {
                lease.state = ConnState::Idle;
                Err(map_db_error(&pool, "commit of a read-only transaction", &err))
            }
            Ok(Err(err)) => Err(pool.unavailable(format_args!(
                "connection lost while ending a read-only transaction: {}",
                error_text(&err)
            ))),
            Err(_elapsed) => Err(pool.unavailable(format_args!(
                "no answer within {} ms while ending a read-only transaction",
                pool.options().round_trip_timeout_ms
            ))),
        }
    }
}
