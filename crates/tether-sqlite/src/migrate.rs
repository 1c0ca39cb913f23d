//! Embedded schema migrations, recorded in tether's own `tether_migrations`
//! table so that an application sharing the file keeps its own migrations.

use sqlx::{Executor, SqlitePool};
use tether_core::{Error, Result};

use crate::rows::Db;

/// One schema step: applied once, in version order.
struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

/// Every migration this build knows, oldest first. Append only: an applied
/// migration is never edited, a change is a new migration.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "core",
        sql: include_str!("../migrations/0001_core.sql"),
    },
    Migration {
        version: 2,
        name: "tenants_keys",
        sql: include_str!("../migrations/0002_tenants_keys.sql"),
    },
    Migration {
        version: 3,
        name: "schedules",
        sql: include_str!("../migrations/0003_schedules.sql"),
    },
    Migration {
        version: 4,
        name: "key_hardening",
        sql: include_str!("../migrations/0004_key_hardening.sql"),
    },
    Migration {
        version: 5,
        name: "flow_control",
        sql: include_str!("../migrations/0005_flow_control.sql"),
    },
    Migration {
        version: 6,
        name: "rate_and_keys",
        sql: include_str!("../migrations/0006_rate_and_keys.sql"),
    },
];

/// The newest schema version this build knows.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Brings the schema up to date.
///
/// Everything happens in one `BEGIN IMMEDIATE` transaction: the write lock is
/// taken before the applied versions are read, so two processes opening the
/// same new file at once serialise here (the second waits on the busy
/// timeout, then sees the first one's work and applies nothing), and a crash
/// halfway leaves no half-built schema (SQLite DDL is transactional).
pub(crate) async fn run(pool: &SqlitePool) -> Result<()> {
    run_up_to(pool, latest_version()).await
}

/// [`run`], but only the migrations up to `last` (as an older tether would
/// have left the file, for upgrade tests).
pub(crate) async fn run_up_to(pool: &SqlitePool, last: i64) -> Result<()> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.db()?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS tether_migrations (
             version    INTEGER NOT NULL PRIMARY KEY,
             name       TEXT    NOT NULL,
             applied_at INTEGER NOT NULL
         ) STRICT",
    )
    .execute(&mut *tx)
    .await
    .db()?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM tether_migrations")
        .fetch_all(&mut *tx)
        .await
        .db()?;
    // A file migrated by a newer tether may mean things this build does not
    // know about (new states, new columns with rules): refuse rather than
    // corrupt it.
    if let Some(newest) = applied.iter().copied().max() {
        if newest > latest_version() {
            return Err(Error::Storage(
                format!(
                    "database schema version {newest} is newer than this build of tether \
                     supports ({}); upgrade tether",
                    latest_version()
                )
                .into(),
            ));
        }
    }
    let mut changed = false;
    for migration in MIGRATIONS.iter().filter(|m| m.version <= last) {
        if applied.contains(&migration.version) {
            continue;
        }
        // A script of several statements, run once: not worth a prepared
        // statement. (`Executor::execute` rather than `sqlx::raw_sql`, whose
        // future rustc cannot prove `Send` for every lifetime, which would
        // make `SqliteStore::open` impossible to spawn.)
        tx.execute(migration.sql).await.db()?;
        sqlx::query(concat!(
            "INSERT INTO tether_migrations (version, name, applied_at) VALUES (?1, ?2, ",
            now_ms!(),
            ")"
        ))
        .bind(migration.version)
        .bind(migration.name)
        .execute(&mut *tx)
        .await
        .db()?;
        changed = true;
    }
    if changed {
        tx.commit().await.db()?;
    } else {
        tx.rollback().await.db()?;
    }
    Ok(())
}
