//! The engine's tables and their migrations, applied when an engine connects.
//!
//! `trove_schema` holds one row, the version of the tables' layout. Opening runs, in one
//! transaction holding a database-wide advisory lock (so that metadata servers starting together
//! do not race on `CREATE`): create the schema and `trove_schema` if missing, read the version,
//! refuse a version newer than [`SCHEMA_VERSION`], apply each missing migration in order, record
//! the new version, commit. Every step is idempotent, and a failure leaves the database as it
//! was (PostgreSQL's DDL is transactional).
//!
//! A migration is only ever appended; a released one never changes. History:
//! - 1: `trove_kv (k BYTEA PRIMARY KEY, v BYTEA NOT NULL)`.

use crate::pool::{error_text, Pool, Sql};
use kv::KvError;
use tokio_postgres::Client;

/// The layout version this build creates and understands.
pub const SCHEMA_VERSION: i32 = 1;

/// Key of the advisory lock held while migrating ("TROVEKV" and 1).
const MIGRATION_LOCK_KEY: i64 = 0x5452_4f56_454b_5601;

/// One step of the layout's history.
struct Migration {
    /// The version the database is at after this step.
    version: i32,
    statements: fn(&Sql) -> Vec<String>,
}

const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    statements: |sql| {
        vec![format!("CREATE TABLE IF NOT EXISTS {} (k BYTEA PRIMARY KEY, v BYTEA NOT NULL)", sql.kv_table)]
    },
}];

/// Brings the database's tables to [`SCHEMA_VERSION`], or fails without changing anything.
pub(crate) async fn migrate(pool: &Pool) -> Result<(), KvError> {
    assert_eq!(
        MIGRATIONS.last().map(|m| m.version),
        Some(SCHEMA_VERSION),
        "the last migration must produce SCHEMA_VERSION"
    );
    let client = pool.connect_bare().await?;
    // Several round trips, some of them waiting for another server's migration.
    let allowed = pool.round_trip_timeout() * 4;
    match tokio::time::timeout(allowed, migrate_on(&client, pool)).await {
        Ok(result) => result,
        Err(_) => {
            Err(pool.unavailable(format_args!("schema migration did not finish within {} ms", allowed.as_millis())))
        }
    }
    // Dropping the client closes the connection; an unfinished transaction rolls back.
}

async fn migrate_on(client: &Client, pool: &Pool) -> Result<(), KvError> {
    let sql = pool.sql();
    let failed = |what: &str, err: tokio_postgres::Error| {
        pool.unavailable(format_args!("schema migration: {what}: {}", error_text(&err)))
    };
    client
        .batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
        .await
        .map_err(|err| failed("cannot lock", err))?;
    if let Some(schema) = &pool.options().schema {
        client
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .await
            .map_err(|err| failed("cannot create the schema", err))?;
    }
    client
        .batch_execute(&format!("CREATE TABLE IF NOT EXISTS {} (version INT NOT NULL)", sql.schema_table))
        .await
        .map_err(|err| failed("cannot create the version table", err))?;
    let rows = client
        .query(&format!("SELECT version FROM {}", sql.schema_table), &[])
        .await
        .map_err(|err| failed("cannot read the schema version", err))?;
    let current: i32 = match rows.as_slice() {
        [] => 0,
        [row] => row.try_get(0).map_err(|err| failed("cannot decode the schema version", err))?,
        more => {
            return Err(KvError::Corrupt(format!(
                "{}: {} holds {} rows, expected one",
                pool.described(),
                sql.schema_table,
                more.len()
            )))
        }
    };
    if current > SCHEMA_VERSION {
        return Err(pool.unavailable(format_args!(
            "the database holds Trove's metadata tables at schema version {current}, newer than \
             this build understands ({SCHEMA_VERSION}); upgrade Trove, or use another database or schema"
        )));
    }
    if current < 0 {
        return Err(KvError::Corrupt(format!(
            "{}: {} says schema version {current}",
            pool.described(),
            sql.schema_table
        )));
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        for statement in (migration.statements)(sql) {
            client
                .batch_execute(&statement)
                .await
                .map_err(|err| failed(&format!("migration to version {}", migration.version), err))?;
        }
        tracing::info!("{}: Trove metadata schema migrated to version {}", pool.described(), migration.version);
    }
    let record = if current == SCHEMA_VERSION {
        String::new()
    } else if current == 0 {
        format!("INSERT INTO {} (version) VALUES ({SCHEMA_VERSION});", sql.schema_table)
    } else {
        format!("UPDATE {} SET version = {SCHEMA_VERSION};", sql.schema_table)
    };
    client
        .batch_execute(&format!("{record} COMMIT"))
        .await
        .map_err(|err| failed("cannot record the schema version", err))
}
