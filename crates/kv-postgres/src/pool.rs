//! The connection pool: a bounded set of connections, each with Trove's statements prepared,
//! lent to one transaction at a time.
//!
//! Why our own pool rather than deadpool-postgres: what the engine needs is small (a count
//! limit, reuse of idle connections, dropping closed ones) plus two things a generic pool does
//! not do for us: preparing the engine's statements once per connection, and knowing in which
//! state a connection comes back. A transaction dropped in the middle leaves its connection
//! inside a PostgreSQL transaction; [`Lease`]'s drop rolls it back on a task before the
//! connection is reused, and closes it instead when its state is unknown (an interrupted round
//! trip), which makes the server roll back. That is fewer lines than adapting deadpool's
//! recycling hooks, and one dependency less.
//!
//! Idle connections are kept (up to the limit) and reused last-in first-out; one found closed
//! (the server restarted, the network broke) is dropped and replaced by a new one.

use crate::PostgresOptions;
use kv::KvError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, Statement};

/// How long the rollback of a transaction dropped mid-way may take before its connection is
/// closed instead of reused.
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The SQL text of every statement, with the (possibly schema-qualified) table names filled in.
pub(crate) struct Sql {
    /// `trove_kv`, qualified with the schema when one was chosen.
    pub kv_table: String,
    /// `trove_schema`, likewise.
    pub schema_table: String,
    get: String,
    scan: String,
    scan_through: String,
    get_many: String,
    put: String,
    delete: String,
}

impl Sql {
    fn new(schema: Option<&str>) -> Sql {
        // Schema names are checked to need no quoting (see `check_schema_name`).
        let qualify = |table: &str| match schema {
            Some(schema) => format!("{schema}.{table}"),
            None => table.to_string(),
        };
        let t = qualify("trove_kv");
        Sql {
            get: format!("SELECT v FROM {t} WHERE k = $1"),
            scan: format!("SELECT k, v FROM {t} WHERE k >= $1 AND k < $2 ORDER BY k LIMIT $3"),
            scan_through: format!("SELECT k, v FROM {t} WHERE k >= $1 AND k <= $2 ORDER BY k LIMIT $3"),
            get_many: format!("SELECT k, v FROM {t} WHERE k = ANY($1)"),
            put: format!("INSERT INTO {t} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"),
            delete: format!("DELETE FROM {t} WHERE k = $1"),
            schema_table: qualify("trove_schema"),
            kv_table: t,
        }
    }
}

/// The engine's statements, prepared on one connection.
pub(crate) struct Statements {
    /// `$1` key → `v`.
    pub get: Statement,
    /// `$1 <= k < $2`, `LIMIT $3` → `k, v` in key order.
    pub scan: Statement,
    /// `$1 <= k <= $2`, `LIMIT $3` → `k, v` in key order.
    pub scan_through: Statement,
    /// `k = ANY($1)` → `k, v`.
    pub get_many: Statement,
    /// Upsert of `$1` = `$2`.
    pub put: Statement,
    /// Delete of `$1`.
    pub delete: Statement,
}

/// One connection with its statements.
pub(crate) struct Conn {
    pub client: Client,
    pub statements: Statements,
}

/// What a connection is known to be doing, which decides what happens to it when its lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Outside any transaction: reusable as is.
    Idle,
    /// Inside a transaction (possibly an aborted one): roll back, then reuse.
    InTxn,
    /// A round trip did not complete: close it.
    Unknown,
}

pub(crate) struct Pool {
    config: tokio_postgres::Config,
    options: PostgresOptions,
    described: String,
    sql: Sql,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    pub fn new(config: tokio_postgres::Config, options: PostgresOptions, described: String) -> Pool {
        let permits = Arc::new(Semaphore::new(options.connections_max));
        Pool {
            sql: Sql::new(options.schema.as_deref()),
            config,
            options,
            described,
            idle: Mutex::new(Vec::new()),
            permits,
        }
    }

    pub fn options(&self) -> &PostgresOptions {
        &self.options
    }

    /// "postgres host:port/db", for messages.
    pub fn described(&self) -> &str {
        &self.described
    }

    pub fn sql(&self) -> &Sql {
        &self.sql
    }

    pub fn round_trip_timeout(&self) -> Duration {
        Duration::from_millis(self.options.round_trip_timeout_ms)
    }

    /// An error naming the server.
    pub fn unavailable(&self, what: impl fmt::Display) -> KvError {
        KvError::Unavailable(format!("{}: {what}", self.described))
    }

    /// Lends a connection: an idle one if any is open, else a new one. Waits at most
    /// `acquire_timeout_ms` for the pool to have room.
    pub async fn acquire(self: &Arc<Self>) -> Result<Lease, KvError> {
        let wait = Duration::from_millis(self.options.acquire_timeout_ms);
        let permit = match tokio::time::timeout(wait, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => return Err(self.unavailable("connection pool closed")),
            Err(_elapsed) => {
                return Err(self.unavailable(format_args!(
                    "all {} connections stayed busy for {} ms",
                    self.options.connections_max, self.options.acquire_timeout_ms
                )))
            }
        };
        loop {
            let idle = self.lock_idle().pop();
            match idle {
                Some(conn) if conn.client.is_closed() => continue,
                Some(conn) => return Ok(Lease::new(Arc::clone(self), conn, permit, true)),
                None => break,
            }
        }
        let conn = self.connect().await?;
        Ok(Lease::new(Arc::clone(self), conn, permit, false))
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // The list stays consistent even if a holder panicked: pushing and popping cannot
        // half-happen.
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a connection (the config carries the connect timeout) and prepares the statements.
    async fn connect(&self) -> Result<Conn, KvError> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|err| self.unavailable(format_args!("cannot connect: {}", error_text(&err))))?;
        let described = self.described.clone();
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!("connection to {described} ended: {err}");
            }
        });
        let sql = &self.sql;
        let bytea = [Type::BYTEA];
        let range = [Type::BYTEA, Type::BYTEA, Type::INT8];
        let pair = [Type::BYTEA, Type::BYTEA];
        let many = [Type::BYTEA_ARRAY];
        let prepares: Vec<BoxFuture<'_, Result<Statement, tokio_postgres::Error>>> = vec![
            Box::pin(client.prepare_typed(&sql.get, &bytea)),
            Box::pin(client.prepare_typed(&sql.scan, &range)),
            Box::pin(client.prepare_typed(&sql.scan_through, &range)),
            Box::pin(client.prepare_typed(&sql.get_many, &many)),
            Box::pin(client.prepare_typed(&sql.put, &pair)),
            Box::pin(client.prepare_typed(&sql.delete, &bytea)),
        ];
        let prepared = join_in_order(prepares);
        let prepared = tokio::time::timeout(self.round_trip_timeout(), prepared)
            .await
            .map_err(|_| self.unavailable("no answer while preparing statements"))?;
        let mut statements = Vec::with_capacity(prepared.len());
        for statement in prepared {
            statements.push(statement.map_err(|err| {
                self.unavailable(format_args!(
                    "cannot prepare statements on {}: {}",
                    self.sql.kv_table,
                    error_text(&err)
                ))
            })?);
        }
        let mut statements = statements.into_iter();
        let mut next =
            || statements.next().ok_or_else(|| self.unavailable("internal error: a prepared statement is missing"));
        let statements = Statements {
            get: next()?,
            scan: next()?,
            scan_through: next()?,
            get_many: next()?,
            put: next()?,
            delete: next()?,
        };
        Ok(Conn { client, statements })
    }

    /// Opens a connection without preparing statements (for migrations, before the table
    /// exists).
    pub async fn connect_bare(&self) -> Result<Client, KvError> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|err| self.unavailable(format_args!("cannot connect: {}", error_text(&err))))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    fn put_back(&self, conn: Conn) {
        if !conn.client.is_closed() {
            self.lock_idle().push(conn);
        }
    }
}

/// A connection lent to one transaction. What happens when it is dropped depends on its
/// [`ConnState`].
pub(crate) struct Lease {
    pool: Arc<Pool>,
    conn: Option<Conn>,
    permit: Option<OwnedSemaphorePermit>,
    pub state: ConnState,
    /// Whether the connection had been used before (it may have died while idle).
    pub reused: bool,
}

impl Lease {
    fn new(pool: Arc<Pool>, conn: Conn, permit: OwnedSemaphorePermit, reused: bool) -> Lease {
        Lease { pool, conn: Some(conn), permit: Some(permit), state: ConnState::Idle, reused }
    }

    /// The connection. Present for the whole life of the lease (only `drop` takes it).
    pub fn conn(&self) -> &Conn {
        match &self.conn {
            Some(conn) => conn,
            None => unreachable!("a lease's connection is taken only when it is dropped"),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.conn().client.is_closed()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (Some(conn), Some(permit)) = (self.conn.take(), self.permit.take()) else {
            return;
        };
        match self.state {
            ConnState::Idle => self.pool.put_back(conn),
            ConnState::Unknown => drop(conn),
            ConnState::InTxn => {
                // Roll back on a task (drop cannot wait), keeping the permit until then so the
                // pool never has more connections than its limit. Without a runtime, close the
                // connection: the server rolls back.
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let pool = Arc::clone(&self.pool);
                runtime.spawn(async move {
                    let rollback = tokio::time::timeout(ROLLBACK_TIMEOUT, conn.client.batch_execute("ROLLBACK")).await;
                    if matches!(rollback, Ok(Ok(()))) {
                        pool.put_back(conn);
                    }
                    drop(permit);
                });
            }
        }
    }
}

/// A boxed future, as [`join_in_order`] takes them.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `futures` concurrently and returns their outputs in order. Every future is first polled
/// in the order given, which matters: a tokio-postgres request is sent on its first poll, and
/// requests sent back to back are pipelined (one round trip) and executed by the server in the
/// order sent. (`futures::join_all` does not promise that order for long lists.)
pub(crate) async fn join_in_order<'a, T>(mut futures: Vec<BoxFuture<'a, T>>) -> Vec<T> {
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// An error's text with the server's own message (tokio-postgres's `Display` shows only "db
/// error" for server errors).
pub(crate) fn error_text(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}
