//! Embedded, ordered migrations recorded in `tether.migrations`. sqlx's own
//! migrator keeps one fixed table name per database, which would collide with
//! an embedding application's migrations; this runner keeps ours apart.

use tether_core::Result;

use crate::exec::Pool;
use crate::rows::Db;

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
];

/// Applies every migration not yet recorded, in one transaction, holding an
/// advisory lock so that replicas starting together apply each one once.
pub(crate) async fn run(pool: &Pool) -> Result<()> {
    run_up_to(pool, i64::MAX).await
}

/// [`run`], but only the migrations up to `last` (as an older tether would
/// have left the database, for upgrade tests).
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

/// Refuses to go on unless every migration this build knows is applied and
/// no unknown (newer) one is: for stores opened without migrating.
pub(crate) async fn check(pool: &Pool) -> Result<()> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('tether.migrations') IS NOT NULL")
        .fetch_one(pool)
        .await
        .db()?;
    let applied: Vec<i64> = if exists {
        sqlx::query_scalar("SELECT version FROM tether.migrations")
            .fetch_all(pool)
            .await
            .db()?
    } else {
        Vec::new()
    };
    let pending: Vec<i64> = MIGRATIONS
        .iter()
        .map(|(v, _, _)| *v)
        .filter(|v| !applied.contains(v))
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    Err(tether_core::Error::Storage(
        format!("migrations {pending:?} are not applied: run `tether migrate`").into(),
    ))
}
