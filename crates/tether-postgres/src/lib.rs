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
//!
//! The crate reads side by side with `tether-sqlite`: the same files, each
//! holding the same operations of [`Store`] under the same names.
//!
//! | file | what |
//! | --- | --- |
//! | `lib.rs` | [`PgStore`], connecting, the [`Store`] impl that hands each operation to its module |
//! | `enqueue.rs` | enqueue, and [`enqueue_in`] on the caller's transaction |
//! | `attempts.rs` | claim, heartbeat, complete, fail, snooze: what a worker does, fenced by the lease token |
//! | `jobs.rs` | get, list, history, cancel, replay |
//! | `queues.rs` | queue stats, pause, settings |
//! | `maintenance.rs` | the reaper, expiry, pruning, named leases |
//! | `tenants.rs` | tenants, API keys, the server-secret check |
//! | `schedules.rs` | schedules and their runs |
//! | `sql/` | the statements, one file per module above |
//! | `rows.rs` | rows to the model, driver errors to tether's |
//! | `migrate.rs` | the schema's migrations |
//! | `testing.rs` | clock controls for the behaviour suite (feature `testing`) |
//! | `notify.rs` | wake-up hints across processes by LISTEN/NOTIFY (PostgreSQL only) |

#[macro_use]
mod sql;
mod attempts;
mod enqueue;
mod jobs;
mod maintenance;
mod migrate;
mod notify;
mod queues;
mod rows;
mod schedules;
mod tenants;
#[cfg(feature = "testing")]
mod testing;
mod url;

pub use enqueue::enqueue_in;
#[cfg(feature = "testing")]
pub use testing::migrate_up_to;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};
use tether_core::{Enqueued, Error, Result};

use crate::rows::Db;

pub use url::url_with_database;

/// A [`tether_core::Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    notifications: std::sync::Arc<notify::Notifications>,
    /// Queues this store's claims found limited (see `notify_freed`).
    limited: std::sync::Arc<tether_core::LimitedQueues>,
}

/// A transaction on the pool.
pub(crate) type Tx = Transaction<'static, Postgres>;

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
            .db()?;
        PgStore::from_pool(pool).await
    }

    /// Uses an existing pool (e.g. the application's own) and applies
    /// migrations.
    pub async fn from_pool(pool: PgPool) -> Result<PgStore> {
        migrate::run(&pool).await?;
        Ok(PgStore {
            pool,
            notifications: Default::default(),
            limited: Default::default(),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Starts a transaction on the pool.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        self.pool.begin().await.db()
    }

    /// Hints that `jobs` jobs of `queue` became ready: wakes this process's
    /// subscribers now, other processes by NOTIFY shortly (see `notify`).
    pub(crate) fn notify(&self, tenant: &str, queue: &str, jobs: usize) {
        self.notifications.poke(&self.pool, tenant, queue, jobs);
    }

    /// After commit: `jobs` jobs of `queue` ended (or were taken back), so
    /// when its claims were limited, as many slots freed: hints them.
    pub(crate) fn notify_freed(&self, tenant: &str, queue: &str, jobs: usize) {
        if self.limited.contains(tenant, queue) {
            self.notify(tenant, queue, jobs);
        }
    }

    /// After a claim used up `queue`'s rate limit: hints this process's
    /// claims of it when the window frees `jobs` slots, `after` from now.
    /// (Other processes' claims, throttled too, each schedule their own.)
    pub(crate) fn wake_after(
        &self,
        tenant: &str,
        queue: &str,
        after: std::time::Duration,
        jobs: usize,
    ) {
        self.notifications
            .hub()
            .notify_after(tenant, queue, after, jobs);
    }

    /// After commit: the hints for the jobs an enqueue created (an existing
    /// job that was returned wakes nobody).
    pub(crate) fn notify_created(&self, tenant: &str, answers: &[Enqueued]) {
        for (queue, jobs) in tether_core::created_by_queue(answers) {
            self.notify(tenant, queue, jobs);
        }
    }
}

/// The claim and batch-complete statements exactly as the store runs them.
/// The benchmark executes them bare, as its raw-SQL reference, to measure
/// what tether's own code costs on top of what PostgreSQL needs anyway.
pub mod reference_sql {
    pub use crate::sql::attempts::{CLAIM, COMPLETE_MANY};
}

// Every method forwards to the function of the same name in its module;
// the map lives in `tether_core::forward_store!`, the same for both backends.
tether_core::forward_store!(
    PgStore,
    backend = "postgres",
    subscribe = |store, tenant, queue| store.notifications.subscribe(&store.pool, tenant, queue),
);
