//! Embedded schema migrations, recorded in tether's own `tether_migrations`
//! table so that an application sharing the file keeps its own migrations.
//!
//! Each row records the SHA-256 of the migration's SQL. Before applying
//! anything the runner checks the file against this build
//! ([`tether_core::migrations`]): a version it does not know (a newer tether
//! migrated the file) or a recorded checksum that is not the build's (a
//! released migration was edited) stops it with
//! [`SchemaError`](tether_core::migrations::SchemaError).

use std::path::Path;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, Executor, SqlitePool};
use tether_core::migrations::{checksum, ChecksumState, Recorded, SchemaStatus};
use tether_core::Result;

use crate::rows::{self, Db};

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
    Migration {
        version: 7,
        name: "history_time",
        sql: include_str!("../migrations/0007_history_time.sql"),
    },
    Migration {
        version: 8,
        name: "report_digest",
        sql: include_str!("../migrations/0008_report_digest.sql"),
    },
    Migration {
        version: 9,
        name: "tenant_suspension",
        sql: include_str!("../migrations/0009_tenant_suspension.sql"),
    },
    Migration {
        version: 10,
        name: "outcome_history_time",
        sql: include_str!("../migrations/0010_outcome_history_time.sql"),
    },
    Migration {
        version: 11,
        name: "dependencies",
        sql: include_str!("../migrations/0011_dependencies.sql"),
    },
    Migration {
        version: 12,
        name: "workflows",
        sql: include_str!("../migrations/0012_workflows.sql"),
    },
    Migration {
        version: 13,
        name: "dependency_plans",
        sql: include_str!("../migrations/0013_dependency_plans.sql"),
    },
    Migration {
        version: 14,
        name: "release_unmet",
        sql: include_str!("../migrations/0014_release_unmet.sql"),
    },
    Migration {
        version: 15,
        name: "event_feed",
        sql: include_str!("../migrations/0015_event_feed.sql"),
    },
    Migration {
        version: 16,
        name: "workflow_events",
        sql: include_str!("../migrations/0016_workflow_events.sql"),
    },
    Migration {
        version: 17,
        name: "job_headers",
        sql: include_str!("../migrations/0017_job_headers.sql"),
    },
    Migration {
        version: 18,
        name: "worker_presence",
        sql: include_str!("../migrations/0018_worker_presence.sql"),
    },
];

/// The newest schema version this build knows.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The migrations this build knows, as [`SchemaStatus::new`] takes them.
fn known() -> impl Iterator<Item = (i64, &'static str, &'static str)> {
    MIGRATIONS.iter().map(|m| (m.version, m.name, m.sql))
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

/// [`run`], but only the migrations up to `last`.
///
/// First, in place, the migrations table itself: a tether from before
/// checksums made it without the `checksum` column, which is added, and
/// the checksums of the versions it applied are filled in with this
/// build's (trusted, as the rows carry nothing to compare with). Then the
/// schema is verified (nothing newer, no edited migration) and the pending
/// migrations are applied, each recorded with its checksum. An error rolls
/// back all of it.
pub(crate) async fn run_up_to(pool: &SqlitePool, last: i64) -> Result<()> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.db()?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS tether_migrations (
             version    INTEGER NOT NULL PRIMARY KEY,
             name       TEXT    NOT NULL,
             applied_at INTEGER NOT NULL,
             checksum   TEXT
         ) STRICT",
    )
    .execute(&mut *tx)
    .await
    .db()?;
    let mut changed = false;
    if !has_checksum_column(&mut tx).await? {
        sqlx::query("ALTER TABLE tether_migrations ADD COLUMN checksum TEXT")
            .execute(&mut *tx)
            .await
            .db()?;
        changed = true;
    }
    let schema = SchemaStatus::new("sqlite", known(), recorded(&mut tx, true).await?);
    // A file migrated by a newer tether may mean things this build does not
    // know about (new states, new columns with rules): refuse rather than
    // corrupt it.
    schema.verify()?;
    for m in &schema.migrations {
        if m.checksum == Some(ChecksumState::NotRecorded) {
            sqlx::query("UPDATE tether_migrations SET checksum = ?2 WHERE version = ?1")
                .bind(m.version)
                .bind(&m.expected_checksum)
                .execute(&mut *tx)
                .await
                .db()?;
            changed = true;
        }
    }
    let pending = schema.pending();
    for migration in MIGRATIONS
        .iter()
        .filter(|m| m.version <= last && pending.contains(&m.version))
    {
        // A script of several statements, run once: not worth a prepared
        // statement. (`Executor::execute` rather than `sqlx::raw_sql`, whose
        // future rustc cannot prove `Send` for every lifetime, which would
        // make `SqliteStore::open` impossible to spawn.)
        tx.execute(migration.sql).await.db()?;
        sqlx::query(concat!(
            "INSERT INTO tether_migrations (version, name, applied_at, checksum) VALUES (?1, ?2, ",
            now_ms!(),
            ", ?3)"
        ))
        .bind(migration.version)
        .bind(migration.name)
        .bind(checksum(migration.sql))
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

/// Testing aid: the migrations up to `last` as a tether from before
/// checksums applied them (its runner, its migrations table), so upgrade
/// tests start from what such a tether really left.
#[cfg(feature = "testing")]
pub(crate) async fn run_up_to_without_checksums(pool: &SqlitePool, last: i64) -> Result<()> {
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
    for migration in MIGRATIONS
        .iter()
        .filter(|m| m.version <= last && !applied.contains(&m.version))
    {
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
    }
    tx.commit().await.db()
}

/// Refuses to go on unless the schema is exactly this build's: every
/// migration applied with its checksum, none edited, none unknown. For
/// stores opened without migrating; changes nothing.
pub(crate) async fn check(pool: &SqlitePool) -> Result<()> {
    let mut conn = pool.acquire().await.db()?;
    status_on(&mut conn).await?.require_current()?;
    Ok(())
}

/// The schema of the file at `path` against this build's migrations,
/// read on a read-only connection: changes nothing, and a missing file
/// (never migrated) has every migration pending.
pub(crate) async fn status(path: &Path) -> Result<SchemaStatus> {
    if !path.exists() {
        return Ok(SchemaStatus::new("sqlite", known(), Vec::new()));
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .busy_timeout(crate::BUSY_TIMEOUT);
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .map_err(rows::db_err)?;
    let status = status_on(&mut conn).await;
    conn.close().await.db()?;
    status
}

/// [`status`] on a connection of the file.
async fn status_on(conn: &mut SqliteConnection) -> Result<SchemaStatus> {
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'tether_migrations')",
    )
    .fetch_one(&mut *conn)
    .await
    .db()?;
    let rows = if exists {
        let with_checksums = has_checksum_column(conn).await?;
        recorded(conn, with_checksums).await?
    } else {
        Vec::new()
    };
    Ok(SchemaStatus::new("sqlite", known(), rows))
}

/// Whether `tether_migrations` has the `checksum` column (a tether from
/// before checksums made it without).
async fn has_checksum_column(conn: &mut SqliteConnection) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('tether_migrations') WHERE name = 'checksum')",
    )
    .fetch_one(conn)
    .await
    .db()
}

/// The rows of `tether_migrations`; `with_checksums` says whether the table
/// has the column.
async fn recorded(conn: &mut SqliteConnection, with_checksums: bool) -> Result<Vec<Recorded>> {
    let sql = if with_checksums {
        "SELECT version, name, applied_at, checksum FROM tether_migrations ORDER BY version"
    } else {
        "SELECT version, name, applied_at, NULL FROM tether_migrations ORDER BY version"
    };
    let rows: Vec<(i64, String, i64, Option<String>)> =
        sqlx::query_as(sql).fetch_all(conn).await.db()?;
    Ok(rows
        .into_iter()
        .map(|(version, name, applied_ms, checksum)| Recorded {
            version,
            name,
            applied_at: DateTime::<Utc>::from_timestamp_millis(applied_ms).unwrap_or_default(),
            checksum,
        })
        .collect())
}
