//! Embedded, ordered migrations recorded in `tether.migrations`. sqlx's own
//! migrator keeps one fixed table name per database, which would collide with
//! an embedding application's migrations; this runner keeps ours apart.
//!
//! Each row records the SHA-256 of the migration's SQL. Before applying
//! anything the runner checks the database against this build
//! ([`tether_core::migrations`]): a version it does not know (a newer tether
//! migrated the database) or a recorded checksum that is not the build's (a
//! released migration was edited) stops it with
//! [`SchemaError`](tether_core::migrations::SchemaError).

use chrono::{DateTime, Utc};
use tether_core::migrations::{ChecksumState, Recorded, SchemaStatus};
use tether_core::Result;

use crate::exec::Pool;
use crate::rows::Db;
use crate::{PgOptions, PgStore};

/// (version, name, SQL), in order. Never edit a released entry: add one.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "core", include_str!("../migrations/0001_core.sql")),
    (
        2,
        "tenants_keys",
        include_str!("../migrations/0002_tenants_keys.sql"),
    ),
    (
        3,
        "schedules",
        include_str!("../migrations/0003_schedules.sql"),
    ),
    (
        4,
        "key_hardening",
        include_str!("../migrations/0004_key_hardening.sql"),
    ),
    (
        5,
        "state_indexes",
        include_str!("../migrations/0005_state_indexes.sql"),
    ),
    (
        6,
        "flow_control",
        include_str!("../migrations/0006_flow_control.sql"),
    ),
    (
        7,
        "rate_and_keys",
        include_str!("../migrations/0007_rate_and_keys.sql"),
    ),
    (
        8,
        "claim_reservations",
        include_str!("../migrations/0008_claim_reservations.sql"),
    ),
    (
        9,
        "history_time",
        include_str!("../migrations/0009_history_time.sql"),
    ),
    (
        10,
        "report_digest",
        include_str!("../migrations/0010_report_digest.sql"),
    ),
    (
        11,
        "tenant_suspension",
        include_str!("../migrations/0011_tenant_suspension.sql"),
    ),
    (
        12,
        "outcome_history_time",
        include_str!("../migrations/0012_outcome_history_time.sql"),
    ),
    (
        13,
        "dependencies",
        include_str!("../migrations/0013_dependencies.sql"),
    ),
    (
        14,
        "workflows",
        include_str!("../migrations/0014_workflows.sql"),
    ),
    (
        15,
        "dependency_plans",
        include_str!("../migrations/0015_dependency_plans.sql"),
    ),
    (
        16,
        "statement_release",
        include_str!("../migrations/0016_statement_release.sql"),
    ),
    (
        17,
        "edge_addresses",
        include_str!("../migrations/0017_edge_addresses.sql"),
    ),
    (
        18,
        "event_feed",
        include_str!("../migrations/0018_event_feed.sql"),
    ),
    (
        19,
        "workflow_events",
        include_str!("../migrations/0019_workflow_events.sql"),
    ),
    (
        20,
        "job_headers",
        include_str!("../migrations/0020_job_headers.sql"),
    ),
    (
        21,
        "worker_presence",
        include_str!("../migrations/0021_worker_presence.sql"),
    ),
    (
        22,
        "sql_enqueue",
        include_str!("../migrations/0022_sql_enqueue.sql"),
    ),
];

/// The newest schema version this build knows.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |(version, _, _)| *version)
}

/// The migrations this build knows, as [`SchemaStatus::new`] takes them.
fn known() -> impl Iterator<Item = (i64, &'static str, &'static str)> {
    MIGRATIONS.iter().copied()
}

/// Applies every migration not yet recorded, in one transaction, holding an
/// advisory lock so that replicas starting together apply each one once.
pub(crate) async fn run(pool: &Pool) -> Result<()> {
    run_up_to(pool, i64::MAX).await
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
pub(crate) async fn run_up_to(pool: &Pool, last: i64) -> Result<()> {
    let mut tx = pool.begin().await.db()?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('tether.migrate'))")
        .execute(&mut tx.conn())
        .await
        .db()?;
    sqlx::raw_sql(
        "CREATE SCHEMA IF NOT EXISTS tether;
         CREATE TABLE IF NOT EXISTS tether.migrations (
             version    bigint      PRIMARY KEY,
             name       text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now(),
             checksum   text
         );",
    )
    .execute(&mut tx.conn())
    .await
    .db()?;
    // Only when missing: ALTER TABLE locks the table even when it changes
    // nothing, and every start passes here.
    if !has_checksum_column(&mut tx.conn()).await? {
        sqlx::query("ALTER TABLE tether.migrations ADD COLUMN checksum text")
            .execute(&mut tx.conn())
            .await
            .db()?;
    }
    let schema = SchemaStatus::new("postgres", known(), recorded(&mut tx.conn(), true).await?);
    schema.verify()?;
    for m in &schema.migrations {
        if m.checksum == Some(ChecksumState::NotRecorded) {
            sqlx::query("UPDATE tether.migrations SET checksum = $2 WHERE version = $1")
                .bind(m.version)
                .bind(&m.expected_checksum)
                .execute(&mut tx.conn())
                .await
                .db()?;
        }
    }
    let pending = schema.pending();
    for (version, name, sql) in MIGRATIONS
        .iter()
        .filter(|(v, _, _)| *v <= last && pending.contains(v))
    {
        sqlx::raw_sql(sql).execute(&mut tx.conn()).await.db()?;
        sqlx::query("INSERT INTO tether.migrations (version, name, checksum) VALUES ($1, $2, $3)")
            .bind(version)
            .bind(name)
            .bind(tether_core::migrations::checksum(sql))
            .execute(&mut tx.conn())
            .await
            .db()?;
    }
    tx.commit().await.db()
}

/// Testing aid: the migrations up to `last` as a tether from before
/// checksums applied them (its runner, its migrations table), so upgrade
/// tests start from what such a tether really left.
#[cfg(feature = "testing")]
pub(crate) async fn run_up_to_without_checksums(pool: &Pool, last: i64) -> Result<()> {
    let mut tx = pool.begin().await.db()?;
    sqlx::raw_sql(
        "CREATE SCHEMA IF NOT EXISTS tether;
         CREATE TABLE IF NOT EXISTS tether.migrations (
             version    bigint      PRIMARY KEY,
             name       text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
    )
    .execute(&mut tx.conn())
    .await
    .db()?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM tether.migrations")
        .fetch_all(&mut tx.conn())
        .await
        .db()?;
    for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v <= last) {
        if applied.contains(version) {
            continue;
        }
        sqlx::raw_sql(sql).execute(&mut tx.conn()).await.db()?;
        sqlx::query("INSERT INTO tether.migrations (version, name) VALUES ($1, $2)")
            .bind(version)
            .bind(name)
            .execute(&mut tx.conn())
            .await
            .db()?;
    }
    tx.commit().await.db()
}

/// Refuses to go on unless the schema is exactly this build's: every
/// migration applied with its checksum, none edited, none unknown. For
/// stores opened without migrating; changes nothing.
pub(crate) async fn check(pool: &Pool) -> Result<()> {
    status(pool).await?.require_current()?;
    Ok(())
}

/// The database's schema against this build's migrations; changes nothing
/// (a database never migrated has every migration pending).
pub(crate) async fn status(pool: &Pool) -> Result<SchemaStatus> {
    // One transaction, so the table cannot appear between the two reads.
    let mut tx = pool.begin().await.db()?;
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('tether.migrations') IS NOT NULL")
        .fetch_one(&mut tx.conn())
        .await
        .db()?;
    let rows = if exists {
        let with_checksums = has_checksum_column(&mut tx.conn()).await?;
        recorded(&mut tx.conn(), with_checksums).await?
    } else {
        Vec::new()
    };
    tx.commit().await.db()?;
    Ok(SchemaStatus::new("postgres", known(), rows))
}

/// Whether `tether.migrations` has the `checksum` column (a tether from
/// before checksums made it without).
async fn has_checksum_column(conn: &mut crate::exec::Conn<'_>) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                        WHERE table_schema = 'tether' AND table_name = 'migrations'
                          AND column_name = 'checksum')",
    )
    .fetch_one(conn)
    .await
    .db()
}

/// The rows of `tether.migrations`; `with_checksums` says whether the table
/// has the column.
async fn recorded(conn: &mut crate::exec::Conn<'_>, with_checksums: bool) -> Result<Vec<Recorded>> {
    let sql = if with_checksums {
        "SELECT version, name, applied_at, checksum FROM tether.migrations ORDER BY version"
    } else {
        "SELECT version, name, applied_at, NULL::text FROM tether.migrations ORDER BY version"
    };
    let rows: Vec<(i64, String, DateTime<Utc>, Option<String>)> =
        sqlx::query_as(sql).fetch_all(conn).await.db()?;
    Ok(rows
        .into_iter()
        .map(|(version, name, applied_at, checksum)| Recorded {
            version,
            name,
            applied_at,
            checksum,
        })
        .collect())
}

impl PgStore {
    /// The newest schema version this build applies.
    pub fn schema_version() -> i64 {
        latest_version()
    }

    /// The schema of the database `url` names against the migrations this
    /// build knows — which are applied or pending, their checksums, and any
    /// newer version — without changing anything (what `tether migrate
    /// status` shows). Of `options`, only `transaction_pooler` matters; one
    /// connection is opened and closed.
    pub async fn schema_status(url: &str, options: &PgOptions) -> Result<SchemaStatus> {
        let alive = tokio::sync::watch::channel(()).0;
        let (raw, _moves) = crate::open_pool(url, 1, options, &alive).await?;
        let status = status(&Pool::new(raw.clone(), options.transaction_pooler)).await;
        raw.close().await;
        status
    }
}
