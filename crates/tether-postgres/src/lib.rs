//! The PostgreSQL backend of tether: the production store, where many server
//! replicas and workers share one database.
//!
//! Every operation is one SQL statement (a chain of CTEs where a transition
//! also writes history), so it is atomic without an explicit transaction and
//! costs one round trip; only a schedule's fire and trigger take a short
//! transaction, to enqueue and record the run together with the
//! timetable's compare-and-set or row lock. All times come from the
//! database's `now()`. The schema lives in its own `tether` schema with its
//! own migrations table, so an application that shares the database keeps
//! its own names.

mod enqueue;
mod migrate;
mod notify;
mod rows;
mod schedules;
mod store;
mod url;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tether_core::{Error, Result};

pub use url::url_with_database;

/// A [`tether_core::Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    notifications: std::sync::Arc<notify::Notifications>,
}

impl PgStore {
    /// Connects with a pool of up to 16 connections and applies migrations.
    pub async fn connect(url: &str) -> Result<PgStore> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e: sqlx::Error| Error::invalid("database_url", e.to_string()))?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(db_error)?;
        PgStore::from_pool(pool).await
    }

    /// Uses an existing pool (e.g. the application's own) and applies
    /// migrations.
    pub async fn from_pool(pool: PgPool) -> Result<PgStore> {
        migrate::run(&pool).await?;
        Ok(PgStore {
            pool,
            notifications: Default::default(),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Testing aid: applies tether's migrations up to `version` only, leaving
/// the database as an older tether would have, so that upgrade tests can
/// seed it with old rows before [`PgStore::connect`] applies the rest.
#[cfg(feature = "testing")]
pub async fn migrate_up_to(pool: &PgPool, version: i64) -> Result<()> {
    migrate::run_up_to(pool, version).await
}

/// Maps a driver error to tether's: anything that means "the database is not
/// there right now" is `Unavailable` (safe to retry); the rest is `Storage`.
pub(crate) fn db_error(err: sqlx::Error) -> Error {
    let unavailable = match &err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // Class 08: connection exception; 57P0x: the server is shutting
            // down or starting up.
            code.starts_with("08") || code.starts_with("57P")
        }),
        _ => false,
    };
    if unavailable {
        Error::Unavailable(Box::new(err))
    } else {
        Error::Storage(Box::new(err))
    }
}

/// Whether a driver error is a unique-constraint violation.
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// The claim and batch-complete statements exactly as the store runs them.
/// The benchmark executes them bare, as its raw-SQL reference, to measure
/// what tether's own code costs on top of what PostgreSQL needs anyway.
pub mod reference_sql {
    pub use crate::store::{CLAIM, COMPLETE_MANY};
}

/// Enqueues jobs on the caller's own connection or transaction, so that on
/// a transaction the jobs exist if and only if it commits (the business write
/// and its jobs stand or fall together).
///
/// Validates exactly as [`tether_core::Engine::enqueue_many`] does. The
/// wake-up hint is a `pg_notify` inside the same transaction, which
/// PostgreSQL delivers only at commit; workers also poll, so a rolled-back or
/// missed hint costs at most one poll interval.
pub async fn enqueue_in(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    jobs: &[tether_core::NewJob],
    limits: &tether_core::Limits,
) -> Result<Vec<tether_core::Enqueued>> {
    tether_core::validate::name("tenant", tenant)?;
    tether_core::validate::new_jobs(jobs, limits)?;
    let answers = enqueue::enqueue_on(
        conn,
        tenant,
        &tether_core::NewJobRef::mint(jobs),
        Some(limits.max_queues_per_tenant),
    )
    .await?;
    notify::notify_in(conn, tenant, &answers).await?;
    Ok(answers)
}
