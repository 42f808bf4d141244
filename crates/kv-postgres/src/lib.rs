//! The distributed [`KvEngine`]: Trove's metadata in one table of a PostgreSQL database, so that
//! several metadata servers on several machines can serve one namespace.
//!
//! This file owns the engine handle: parsing the connection string, the options, describing the
//! server (never with its password), and opening (connect, schema migrations). The connection
//! pool is in `pool.rs`, the schema and its migrations in `schema.rs`, one transaction in
//! `txn.rs`.
//!
//! # Schema
//!
//! ```sql
//! CREATE TABLE trove_kv (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
//! CREATE TABLE trove_schema (version INT NOT NULL);  -- one row: the schema version
//! ```
//!
//! `BYTEA` compares as unsigned bytes, then by length, exactly like Rust's `[u8]`, so a primary
//! key range is a key range. Both tables live in the schema named by
//! [`PostgresOptions::schema`] (created if missing), or else wherever the connection's
//! `search_path` puts them. Migrations run at [`PostgresEngine::connect`]; see `schema.rs`.
//!
//! # Transactions
//!
//! A Trove transaction has two phases:
//! - **Reading.** The first read opens `BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY` on a pooled
//!   connection (sent together with the read, no extra round trip), so the snapshot is taken at
//!   the first read, as PostgreSQL does. Gets and scans are `SELECT`s; writes are buffered in the
//!   transaction and merged into what it reads (read your own writes). Every read is remembered
//!   (keys with a digest of the value seen; scans with the part of the range the result depended
//!   on), like the redb engine's read set.
//! - **Commit** (only when there are writes). In one pipelined round trip: end the reading
//!   transaction, `BEGIN ISOLATION LEVEL SERIALIZABLE`, re-run every read, and write every
//!   buffered key (upsert or delete, one statement each, in key order). If a re-run read returns
//!   something else than the transaction saw, it rolls back with [`KvError::Conflict`];
//!   otherwise `COMMIT` (a second round trip).
//!
//! Why not simply one `SERIALIZABLE` transaction from the first read to `COMMIT`, writing through:
//! - writes through a connection take row locks, and a second transaction writing the same key
//!   waits for the first to end; the conformance suite interleaves transactions on one task, so
//!   that wait never ends. Buffering avoids holding locks while the caller thinks.
//! - PostgreSQL's serializable snapshot isolation guarantees that committed transactions are
//!   serializable, but in *some* order, not necessarily their commit order: a transaction that
//!   read a range may still commit after another one inserted into that range and committed,
//!   serialized before it. The `kv` contract is stricter: a commit fails when a concurrent commit
//!   changed anything it read. Re-running the reads at commit, on a snapshot that includes every
//!   commit acknowledged so far, gives that.
//!
//! The commit transaction is itself `SERIALIZABLE`, so its re-run reads and its writes are
//! atomic even against a commit racing between them: PostgreSQL then aborts one of the two with
//! SQLSTATE 40001. A transaction whose reads all still hold at its commit behaves as if it had run
//! entirely at that point (the redb engine's argument). Read-only transactions just `COMMIT`
//! their reading transaction; PostgreSQL may, rarely, refuse one whose snapshot could show a
//! state no serial order produces (reported as `Conflict`).
//!
//! Errors: SQLSTATE 40001 (serialization failure) and 40P01 (deadlock) are [`KvError::Conflict`];
//! 72000 (snapshot too old) is [`KvError::TooOld`]; a lost connection (or no answer within
//! [`PostgresOptions::round_trip_timeout_ms`]) while `COMMIT` is in flight is
//! [`KvError::MaybeCommitted`]; any other failure is [`KvError::Unavailable`] naming the server
//! (`host:port/database`). A connection found broken at a transaction's first read (a pooled
//! one that died while idle), or before `COMMIT` was sent, is replaced once, transparently:
//! nothing had been read from its snapshot or committed on it.
//!
//! Costs: a read-only transaction takes one round trip per read plus the `COMMIT`; a writing one
//! two more (the re-run reads travel with the writes). Values read are fetched again at commit.
//!
//! Limits: keys are indexed by a B-tree whose entries must fit in 2,704 bytes after PostgreSQL's
//! own compression, so keys longer than that are refused at commit with [`KvError::TooLarge`]
//! unless they compress (the `kv` limit is 4,096; Trove's metadata keys are under 300 bytes).
//! Prepared statements are used per connection, so a transaction-mode pgbouncer in front of the
//! server is not supported (session mode is). TLS is not supported yet (`sslmode=disable` or
//! `prefer` only).
//!
//! # CockroachDB and YugabyteDB (not tested)
//!
//! The same schema and statements are meant to run unchanged on the PostgreSQL-wire distributed
//! databases, **but this engine has only been tested on PostgreSQL 15**:
//! - both accept `BYTEA` (CockroachDB's `BYTES`, with the same byte-wise order), `INSERT ... ON
//!   CONFLICT (k) DO UPDATE`, `= ANY($1)` over a `BYTEA[]` parameter, and
//!   `BEGIN ISOLATION LEVEL SERIALIZABLE [READ ONLY]`;
//! - `SERIALIZABLE` is CockroachDB's default isolation (YugabyteDB's is snapshot; the `BEGIN`
//!   asks for serializable explicitly), and both report a transaction that must be retried with
//!   SQLSTATE 40001 (CockroachDB's `TransactionRetryWithProtoRefreshError`, `RETRY_*`), which maps
//!   to [`KvError::Conflict`] here, so `kv::run_txn` retries it;
//! - migrations use `CREATE SCHEMA/TABLE IF NOT EXISTS` inside a transaction and
//!   `pg_advisory_xact_lock` to keep concurrent first starts apart. CockroachDB is reported not
//!   to support advisory locks: there the migration needs another lock (a row locked with
//!   `SELECT ... FOR UPDATE` would do) before it can run at all — the first known change;
//! - a commit whose outcome CockroachDB cannot tell reports SQLSTATE 40003 ("result is
//!   ambiguous"), which this engine maps to [`KvError::MaybeCommitted`];
//! - CockroachDB keys have no 2,704-byte index limit; YugabyteDB's DocDB neither.

mod pool;
mod schema;
#[cfg(feature = "test-server")]
pub mod test_server;
mod txn;

use async_trait::async_trait;
use kv::{KvEngine, KvError, KvTxn};
use std::fmt;
use std::sync::Arc;
use tokio_postgres::config::Host;

pub use schema::SCHEMA_VERSION;

/// Default for [`PostgresOptions::connections_max`].
pub const CONNECTIONS_MAX_DEFAULT: usize = 16;
/// The largest key PostgreSQL can index without compressing it (a third of an 8 KiB page).
pub const INDEX_KEY_BYTES_MAX: usize = 2704;
/// Longest schema name accepted (PostgreSQL's identifier limit).
pub const SCHEMA_NAME_BYTES_MAX: usize = 63;

/// How the engine connects and how much it may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The PostgreSQL schema (namespace) holding Trove's tables, created if missing: lower-case
    /// ASCII letters, digits and `_`, not starting with a digit. `None`: the connection's
    /// `search_path` decides (normally `public`).
    pub schema: Option<String>,
    /// Most connections open at once; a transaction holds one from its first read to its end.
    pub connections_max: usize,
    /// How long establishing one connection may take.
    pub connect_timeout_ms: u64,
    /// How long a transaction waits for a free connection before failing with `Unavailable`.
    pub acquire_timeout_ms: u64,
    /// How long one round trip (a read, or the commit's statements) may take before the
    /// connection is given up (its server-side transaction then rolls back).
    pub round_trip_timeout_ms: u64,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: None,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            connect_timeout_ms: 10_000,
            acquire_timeout_ms: 30_000,
            round_trip_timeout_ms: 30_000,
        }
    }
}

/// The PostgreSQL engine. Cheap to clone (clones share one pool).
#[derive(Clone)]
pub struct PostgresEngine {
    shared: Arc<Shared>,
}

/// What the engine and its transactions share.
struct Shared {
    pool: Arc<pool::Pool>,
    /// Digests of the values in read sets, under keys random per engine.
    digester: kv::readset::Digester,
}

impl PostgresEngine {
    /// Connects to the server named by `url` (a `postgres://user:password@host:port/db` URL or
    /// `key=value` parameters, as libpq accepts), creates or migrates the schema, and returns
    /// the engine.
    ///
    /// Fails with [`KvError::Unavailable`] naming the server when it cannot be reached, when the
    /// options are invalid, or when the database holds a newer schema version than this build
    /// knows ([`SCHEMA_VERSION`]): upgrade Trove rather than let an old server write to it.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, KvError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|err| {
            // The message of the parser never repeats the string, which may hold a password.
            KvError::Unavailable(format!("invalid PostgreSQL connection string: {err}"))
        })?;
        if let Some(schema) = &options.schema {
            check_schema_name(schema)?;
        }
        if options.connections_max == 0 {
            return Err(KvError::Unavailable("PostgreSQL engine: connections_max must be at least 1".into()));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_millis(options.connect_timeout_ms));
        }
        if config.get_application_name().is_none() {
            config.application_name("trove");
        }
        let described = describe_config(&config, options.schema.as_deref());
        let pool = Arc::new(pool::Pool::new(config, options, described));
        schema::migrate(&pool).await?;
        Ok(PostgresEngine { shared: Arc::new(Shared { pool, digester: kv::readset::Digester::default() }) })
    }

    /// The schema holding the tables, if one was chosen.
    pub fn schema(&self) -> Option<&str> {
        self.shared.pool.options().schema.as_deref()
    }
}

impl fmt::Debug for PostgresEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresEngine").field("server", &self.shared.pool.described()).finish_non_exhaustive()
    }
}

#[async_trait]
impl KvEngine for PostgresEngine {
    async fn begin(&self) -> Result<Box<dyn KvTxn>, KvError> {
        // No round trip: the reading transaction starts with the first read.
        Ok(Box::new(txn::PgTxn::new(Arc::clone(&self.shared))))
    }

    fn describe(&self) -> String {
        self.shared.pool.described().to_string()
    }
}

/// Accepts the schema names that need no quoting in SQL.
fn check_schema_name(name: &str) -> Result<(), KvError> {
    let valid = !name.is_empty()
        && name.len() <= SCHEMA_NAME_BYTES_MAX
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
        && !name.starts_with("pg_");
    if valid {
        Ok(())
    } else {
        Err(KvError::Unavailable(format!(
            "invalid PostgreSQL schema name {name:?}: use 1 to {SCHEMA_NAME_BYTES_MAX} lower-case letters, digits and '_', not starting with a digit or 'pg_'"
        )))
    }
}

/// "postgres host:port/db", with every host when there are several, and the schema if one was
/// chosen. Never the user or the password.
fn describe_config(config: &tokio_postgres::Config, schema: Option<&str>) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or_else(|| ports.first().filter(|_| ports.len() == 1)).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) if name.contains(':') => format!("[{name}]:{port}"),
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() { "localhost:5432".to_string() } else { hosts.join(",") };
    // PostgreSQL's default database is the user's name.
    let db = config.get_dbname().or(config.get_user()).unwrap_or("postgres");
    match schema {
        Some(schema) => format!("postgres {hosts}/{db} (schema {schema})"),
        None => format!("postgres {hosts}/{db}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(url: &str, schema: Option<&str>) -> String {
        let config: tokio_postgres::Config = url.parse().expect("valid connection string");
        describe_config(&config, schema)
    }

    #[test]
    fn describe_names_host_port_and_database_without_password() {
        assert_eq!(described("postgres://trove:secret@db1.lab:5433/meta", None), "postgres db1.lab:5433/meta");
        assert_eq!(
            described("postgres://trove@127.0.0.1/meta", Some("t1")),
            "postgres 127.0.0.1:5432/meta (schema t1)"
        );
        assert_eq!(described("host=a,b port=1,2 user=u password=p", None), "postgres a:1,b:2/u");
        assert_eq!(described("postgres://u@[::1]:7/d", None), "postgres [::1]:7/d");
        assert!(!described("postgres://trove:secret@h/d", None).contains("secret"));
    }

    #[test]
    fn schema_names_are_checked() {
        for good in ["trove", "t_1", "a"] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(SCHEMA_NAME_BYTES_MAX + 1);
        for bad in ["", "1a", "Trove", "a-b", "a\"b", "pg_x", long.as_str()] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }
}
