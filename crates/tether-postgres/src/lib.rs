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
//! holding the same operations of [`Store`](tether_core::Store) under the same names.
//!
//! | file | what |
//! | --- | --- |
//! | `lib.rs` | [`PgStore`], connecting, the [`Store`](tether_core::Store) impl that hands each operation to its module |
//! | `enqueue.rs` | enqueue, and [`enqueue_in`] on the caller's transaction |
//! | `attempts.rs` | claim, heartbeat, complete, fail, snooze: what a worker does, fenced by the lease token |
//! | `jobs.rs` | get, list, history, cancel, replay |
//! | `queues.rs` | queue stats, pause, settings |
//! | `maintenance.rs` | the reaper, expiry, pruning, named leases |
//! | `tenants.rs` | tenants, API keys, the server-secret check |
//! | `schedules.rs` | schedules and their runs |
//! | `workflows.rs` | jobs that wait for other jobs (the release and cascade are the trigger of migration 13), and workflows: named graphs of them |
//! | `sql/` | the statements, one file per module above |
//! | `rows.rs` | rows to the model, driver errors to tether's |
//! | `migrate.rs` | the schema's migrations |
//! | `testing.rs` | clock controls for the behaviour suite (feature `testing`) |
//! | `notify.rs` | wake-up hints across processes by LISTEN/NOTIFY (PostgreSQL only) |

#[macro_use]
mod sql;
mod attempts;
mod enqueue;
mod exec;
mod failover;
mod feed;
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
mod workflows;

pub use enqueue::enqueue_in;
#[cfg(feature = "testing")]
pub use testing::{migrate_up_to, migrate_up_to_without_checksums};

use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tether_core::{Enqueued, Result};

use crate::failover::Moves;
use crate::rows::Db;

pub use url::url_with_database;

/// How tether reaches PostgreSQL, beyond the database URL.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Most connections in the store's pool.
    pub max_connections: u32,
    /// The URL goes through a transaction-pooling proxy (PgBouncer with
    /// `pool_mode = transaction`, or the like): statements are unnamed and
    /// each runs in a transaction, and no LISTEN is sent through it.
    pub transaction_pooler: bool,
    /// A URL straight to PostgreSQL for the LISTEN connection that carries
    /// wake-up hints from other processes, when the main URL cannot (a
    /// transaction pooler). Without one behind a pooler, workers learn of
    /// other processes' jobs by polling.
    pub listen_url: Option<String>,
    /// Apply pending migrations when connecting (the default). Without,
    /// connecting fails unless the schema is exactly this build's (someone
    /// runs `tether migrate` before the servers start).
    pub migrate: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 16,
            transaction_pooler: false,
            listen_url: None,
            migrate: true,
        }
    }
}

/// A [`tether_core::Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    db: exec::Pool,
    notifications: Arc<notify::Notifications>,
    /// Queues this store's claims found limited (see `notify_freed`).
    limited: Arc<tether_core::LimitedQueues>,
    /// Per-key claims waiting for this process's turn at their queue.
    key_groups: Arc<attempts::KeyGroups>,
    /// The lease the maintenance passes run under (see `maintenance.rs`).
    fence: Arc<tether_core::MaintenanceFence>,
}

/// A transaction on the pool.
pub(crate) type Tx = exec::Tx<'static>;

impl PgStore {
    /// Connects with the default [`PgOptions`] (a pool of up to 16
    /// connections) and applies migrations.
    ///
    /// `url` may name several servers, libpq style
    /// (`postgres://a:5432,b:5432/db?target_session_attrs=read-write`):
    /// tether then uses the writable one and follows it after a failover.
    pub async fn connect(url: &str) -> Result<PgStore> {
        PgStore::connect_with(url, &PgOptions::default()).await
    }

    /// Connects as `options` say.
    pub async fn connect_with(url: &str, options: &PgOptions) -> Result<PgStore> {
        let alive = tokio::sync::watch::channel(()).0;
        let (pool, moves) = open_pool(url, options.max_connections, options, &alive).await?;
        let listen = match (&options.listen_url, options.transaction_pooler) {
            (Some(listen_url), _) => {
                let direct = PgOptions {
                    transaction_pooler: false,
                    ..options.clone()
                };
                let (pool, moves) = open_pool(listen_url, 1, &direct, &alive).await?;
                Some(notify::Listen {
                    pool,
                    moves: moves.subscribe(),
                })
            }
            (None, false) => Some(notify::Listen {
                pool: pool.clone(),
                moves: moves.subscribe(),
            }),
            (None, true) => None,
        };
        let db = exec::Pool::new(pool, options.transaction_pooler);
        if options.migrate {
            migrate::run(&db).await?;
        } else {
            migrate::check(&db).await?;
        }
        Ok(PgStore {
            db,
            notifications: Arc::new(notify::Notifications::new(listen, alive)),
            limited: Default::default(),
            key_groups: Default::default(),
            fence: Default::default(),
        })
    }

    /// Uses an existing pool (e.g. the application's own, straight to
    /// PostgreSQL) and applies migrations.
    pub async fn from_pool(pool: PgPool) -> Result<PgStore> {
        let db = exec::Pool::new(pool.clone(), false);
        migrate::run(&db).await?;
        let listen = notify::Listen {
            pool,
            moves: Moves::new().subscribe(),
        };
        Ok(PgStore {
            db,
            notifications: Arc::new(notify::Notifications::new(
                Some(listen),
                tokio::sync::watch::channel(()).0,
            )),
            limited: Default::default(),
            key_groups: Default::default(),
            fence: Default::default(),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        self.db.raw()
    }

    /// Starts a transaction on the pool.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        self.db.begin().await.db()
    }

    /// Hints that `jobs` jobs of `queue` became ready: wakes this process's
    /// subscribers now, other processes by NOTIFY shortly (see `notify`).
    pub(crate) fn notify(&self, tenant: &str, queue: &str, jobs: usize) {
        self.notifications.poke(&self.db, tenant, queue, jobs);
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

    /// After a report that left `job` queued, maybe for later: hints its
    /// queue (here and, by NOTIFY, in other processes) when it becomes
    /// claimable (see `tether_core::when_due`).
    pub(crate) fn notify_when_due(&self, tenant: &str, job: &tether_core::Job) {
        let (store, tenant, queue) = (self.clone(), tenant.to_owned(), job.queue.clone());
        tether_core::when_due(job, move || store.notify(&tenant, &queue, 1));
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
    subscribe = |store, tenant, queue| store.notifications.subscribe(tenant, queue),
);

/// A pool on the server `url` names (the writable one of several, with a
/// watcher that follows it), without migrating.
async fn open_pool(
    url: &str,
    max_connections: u32,
    options: &PgOptions,
    alive: &tokio::sync::watch::Sender<()>,
) -> Result<(PgPool, Arc<Moves>)> {
    let hosts = url::parse_hosts(url)?;
    let moves = Moves::new();
    let first: PgConnectOptions = if hosts.candidates.len() > 1 {
        failover::find(&hosts)
            .await
            .map_err(|why| tether_core::Error::Unavailable(why.into()))?
    } else {
        hosts.candidates[0].clone()
    };
    // A transaction pooler refuses startup parameters it does not know.
    let first = if options.transaction_pooler {
        first.extra_float_digits(None)
    } else {
        first
    };
    let pool_options: PgPoolOptions = failover::pool_options(max_connections, &moves);
    let pool = pool_options.connect_with(first).await.db()?;
    if hosts.candidates.len() > 1 {
        let hosts = url::Hosts {
            candidates: hosts
                .candidates
                .into_iter()
                .map(|c| {
                    if options.transaction_pooler {
                        c.extra_float_digits(None)
                    } else {
                        c
                    }
                })
                .collect(),
            ..hosts
        };
        tokio::spawn(failover::watch(
            hosts,
            pool.clone(),
            moves.clone(),
            alive.subscribe(),
        ));
    }
    Ok((pool, moves))
}
