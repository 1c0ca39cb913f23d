//! The SQLite storage backend of tether: the embedded default, where the
//! whole queue (jobs, their history, queue settings, schedules and their
//! runs, tenants, keys and leader leases) lives in one local file. `tether serve` with no database flag runs on it, and an
//! application can embed it to get a durable queue without running a server.
//!
//! [`SqliteStore`] implements [`tether_core::Store`] with exactly the
//! semantics of the PostgreSQL backend (see `docs/semantics.md`); both pass
//! the same behaviour suite. How it keeps the contract on SQLite:
//!
//! - **Durability**: WAL journal with `synchronous=FULL`, so a write that was
//!   acknowledged survives `kill -9` and power loss.
//! - **Atomicity without lock fights**: every write runs in one
//!   `BEGIN IMMEDIATE` transaction on a single writer connection. Writes in
//!   this process queue for that connection instead of racing for SQLite's
//!   lock, and taking the write lock up front means a transaction that reads
//!   then writes can never fail with `SQLITE_BUSY` halfway (a deferred
//!   transaction can, whatever the busy timeout). Reads use a separate pool
//!   and never wait for writers (WAL readers see the last commit).
//! - **Server clock**: every "now" comes from SQLite, never from Rust.
//!
//! Timestamps are stored as integer milliseconds since the Unix epoch, UUIDs
//! as lowercase hyphenated text, JSON as text.
//!
//! ```no_run
//! # async fn demo() -> tether_core::Result<()> {
//! use std::sync::Arc;
//! use tether_core::{Engine, NewJob};
//! use tether_sqlite::SqliteStore;
//!
//! let store = SqliteStore::open("tether-data/tether.db").await?;
//! let engine = Engine::new(Arc::new(store));
//! let job = NewJob::new("emails", "send", serde_json::json!({ "to": "a@example.com" }));
//! engine.enqueue("my-tenant", job).await?;
//! # Ok(())
//! # }
//! ```
//!
//! With the `testing` feature, [`SqliteStore`] also has clock controls
//! (`lapse_lease`, `lapse_named_lease`, `make_due`) that the behaviour suite
//! uses to simulate the passage of time.
//!
//! The crate reads side by side with `tether-postgres`: the same files, each
//! holding the same operations of [`Store`](tether_core::Store) under the same names.
//!
//! | file | what |
//! | --- | --- |
//! | `lib.rs` | [`SqliteStore`], opening the file, the [`Store`](tether_core::Store) impl that hands each operation to its module |
//! | `enqueue.rs` | enqueue |
//! | `attempts.rs` | claim, heartbeat, complete, fail, snooze: what a worker does, fenced by the lease token |
//! | `jobs.rs` | get, list, history, cancel, replay |
//! | `queues.rs` | queue stats, pause, settings |
//! | `maintenance.rs` | the reaper, expiry, pruning, named leases |
//! | `tenants.rs` | tenants, API keys, the server-secret check |
//! | `schedules.rs` | schedules and their runs |
//! | `workflows.rs` | jobs that wait for other jobs (the release and cascade are triggers of migration 11), and workflows: named graphs of them |
//! | `sql/` | the statements, one file per module above |
//! | `rows.rs` | rows to the model, driver errors to tether's |
//! | `migrate.rs` | the schema's migrations |
//! | `testing.rs` | clock controls for the behaviour suite (feature `testing`) |
//! | `tests/` | SQLite-only tests (the behaviour both backends share is `tether-conformance`) |

#[macro_use]
mod sql;
mod attempts;
mod enqueue;
mod feed;
mod jobs;
mod maintenance;
mod migrate;
mod queues;
mod rows;
mod schedules;
mod tenants;
#[cfg(feature = "testing")]
mod testing;
#[cfg(test)]
mod tests;
mod workflows;

#[cfg(feature = "testing")]
pub use testing::{migrate_up_to, migrate_up_to_without_checksums};

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use tether_core::migrations::SchemaStatus;
use tether_core::{Enqueued, JobState, Result};

use crate::rows::{id_array, Db};

/// How long a statement waits for a lock held by another process (another
/// tether, a backup, the `sqlite3` shell) before giving up as `Unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operation waits for a pooled connection (the writer is one
/// connection shared by every writing task of the process).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Reader connections: enough that one tenant's aggregate reads (at most
/// `tether_core::AGGREGATE_READS` at a time) leave others room.
const READ_CONNECTIONS: u32 = 6;

/// A tether store in one SQLite file.
///
/// Cheap to clone: clones share the same connections. Open each file once per
/// process (opening it twice works, but the two stores then contend for the
/// file lock instead of queueing for one writer connection).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Exactly one connection: every write of this process goes through it.
    writer: SqlitePool,
    /// Pure reads (get, list, events, stats).
    reader: SqlitePool,
    /// Wake-up hints for this process's workers. Another process writing to
    /// the same file is not heard: its jobs are found by polling.
    wakeups: tether_core::WakeupHub,
    /// Queues this store's claims found limited (see `notify_freed`).
    limited: std::sync::Arc<tether_core::LimitedQueues>,
    /// The lease the maintenance passes run under (see `maintenance.rs`).
    fence: std::sync::Arc<tether_core::MaintenanceFence>,
}

impl SqliteStore {
    /// Opens the store at `path`, creating the file if it is missing (mode
    /// 0600 on Unix, so its `-wal` and `-shm` files are 0600 too) and
    /// bringing its schema up to date.
    ///
    /// Safe to call from several processes at once on the same file: the
    /// migrations run under SQLite's write lock and are applied once.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(path, &SqliteOptions::default()).await
    }

    /// Opens the store at `path` as `options` say. Without migrations, a
    /// missing file is not created: it fails like any schema that is not
    /// exactly this build's ([`SchemaError`](tether_core::migrations::SchemaError)).
    pub async fn open_with(path: impl AsRef<Path>, open: &SqliteOptions) -> Result<SqliteStore> {
        if !open.migrate {
            // Before anything touches the file: a missing one stays missing.
            migrate::status(path.as_ref()).await?.require_current()?;
        }
        create_private(path.as_ref());
        // Pragmas go in the connect options, so every connection either pool
        // ever opens has them (a one-off PRAGMA query would reach just one).
        let options = SqliteConnectOptions::new()
            .filename(path.as_ref())
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            // The trigger that releases or cancels what waits for a job
            // that ended (migration 11) fires itself for the jobs it
            // cancels (one level down: they release their `run`
            // dependents); SQLite allows that only with this pragma. The
            // other triggers are migration 11's too, and no statement uses
            // REPLACE (whose deletes it would make fire delete triggers).
            .pragma("recursive_triggers", "ON");
        let writer = connect(
            || {
                SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    // A local file does not go stale; a ping per acquire would
                    // cost a round trip to the connection thread every time.
                    .test_before_acquire(false)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .after_release(|conn, _| Box::pin(roll_back_leftovers(conn)))
            },
            // Statement journals (a multi-row UPDATE inside a transaction
            // keeps one) and sorts live in memory instead of temp files.
            &options.clone().pragma("temp_store", "MEMORY"),
        )
        .await?;
        if open.migrate {
            migrate::run(&writer).await?;
        } else {
            // Again under the writer: the file may have changed since.
            migrate::check(&writer).await?;
        }
        let reader = connect(
            || {
                SqlitePoolOptions::new()
                    .max_connections(READ_CONNECTIONS)
                    .min_connections(0)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .test_before_acquire(false)
            },
            // Reads must never write: refuse it at the connection.
            &options.pragma("query_only", "ON"),
        )
        .await?;
        Ok(SqliteStore {
            writer,
            reader,
            wakeups: tether_core::WakeupHub::new(),
            limited: Default::default(),
            fence: Default::default(),
        })
    }

    /// Closes every connection, waiting for operations in flight. The store
    /// (and its clones) cannot be used afterwards.
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// The newest schema version this build applies.
    pub fn schema_version() -> i64 {
        migrate::latest_version()
    }

    /// The schema of the file at `path` against the migrations this build
    /// knows — which are applied or pending, their checksums, and any newer
    /// version — read without changing anything (what `tether migrate
    /// status` shows). A missing file has every migration pending.
    pub async fn schema_status(path: impl AsRef<Path>) -> Result<SchemaStatus> {
        migrate::status(path.as_ref()).await
    }
}

/// How tether opens a SQLite file, beyond its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Apply pending migrations when opening (the default). Without,
    /// opening fails unless the schema is exactly this build's (someone
    /// runs `tether migrate` first), and the file is left as it was.
    pub migrate: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions { migrate: true }
    }
}

/// A write transaction on the writer connection. Dropping it without commit
/// (an error, or the caller's future being dropped) makes sqlx queue a
/// ROLLBACK on the connection before it can be used again, so the writer is
/// never handed out inside a stale transaction.
pub(crate) type Tx = Transaction<'static, Sqlite>;

impl SqliteStore {
    /// Starts a write transaction on the writer connection. `BEGIN IMMEDIATE`
    /// takes SQLite's write lock now, so the transaction cannot fail with
    /// SQLITE_BUSY later when it moves from reading to writing.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        self.writer.begin_with("BEGIN IMMEDIATE").await.db()
    }

    /// Hints that `jobs` jobs of `queue` became ready (this process only:
    /// another process on the file finds them by polling).
    pub(crate) fn notify(&self, tenant: &str, queue: &str, jobs: usize) {
        self.wakeups.notify(tenant, queue, jobs);
    }

    /// After commit: `jobs` jobs of `queue` ended, so when its claims were
    /// limited, as many slots freed: hints them.
    pub(crate) fn notify_freed(&self, tenant: &str, queue: &str, jobs: usize) {
        if self.limited.contains(tenant, queue) {
            self.notify(tenant, queue, jobs);
        }
    }

    /// After a report that left `job` queued, maybe for later: hints its
    /// queue when it becomes claimable (see `tether_core::when_due`).
    pub(crate) fn notify_when_due(&self, tenant: &str, job: &tether_core::Job) {
        let (hub, tenant, queue) = (self.wakeups.clone(), tenant.to_owned(), job.queue.clone());
        tether_core::when_due(job, move || hub.notify(&tenant, &queue, 1));
    }

    /// Sends the wake-up hints of an enqueue that was just committed: one per
    /// job it created (an existing job that was returned wakes nobody), but
    /// none for a job created `waiting` for its dependencies (or cancelled
    /// at once for one that failed): its release hints its queue.
    pub(crate) fn notify_created(&self, tenant: &str, answers: &[Enqueued]) {
        if answers.iter().all(|a| a.job.state == JobState::Queued) {
            self.wakeups.notify_created(tenant, answers);
            return;
        }
        let mut queues: std::collections::BTreeMap<&str, usize> = Default::default();
        for answer in answers
            .iter()
            .filter(|a| a.created && a.job.state == JobState::Queued)
        {
            *queues.entry(answer.job.queue.as_str()).or_default() += 1;
        }
        for (queue, jobs) in queues {
            self.notify(tenant, queue, jobs);
        }
    }

    /// Ends a transaction that changed nothing without the cost of a commit.
    pub(crate) async fn finish_unchanged(tx: Tx) -> Result<()> {
        tx.rollback().await.db()
    }

    /// Ends a bulk transition: records the history rows of the jobs it
    /// touched (`events_sql` takes their ids as a JSON array) and commits,
    /// or rolls back cheaply when it touched none. Returns how many.
    pub(crate) async fn finish_bulk(
        mut tx: Tx,
        touched: &[SqliteRow],
        events_sql: &'static str,
    ) -> Result<u64> {
        if touched.is_empty() {
            Self::finish_unchanged(tx).await?;
            return Ok(0);
        }
        let ids = touched
            .iter()
            .map(|row| row.try_get::<String, _>("id"))
            .collect::<std::result::Result<Vec<_>, _>>()
            .db()?;
        sqlx::query(events_sql)
            .bind(id_array(ids.iter().map(String::as_str)))
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(ids.len() as u64)
    }
}

/// Creates a missing database file readable by its owner only. SQLite would
/// make it 0644 (less the umask), readable by every user of the machine, and
/// it gives the `-wal` and `-shm` files it makes later the database file's
/// mode: so this one file decides all three. An existing file is left as it
/// is (`tether serve` tightens its own); a failure is left for SQLite to
/// report when it opens the file.
fn create_private(path: &Path) {
    if path.as_os_str() == ":memory:" {
        return;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let _ = options.open(path);
}

/// Opens a pool, retrying while the file is busy.
///
/// Turning a brand-new file into a WAL database needs an exclusive lock, and
/// SQLite does not wait for that one (it answers SQLITE_BUSY at once instead
/// of risking a deadlock, whatever the busy timeout), so processes creating
/// the same file at the same moment can collide here. They retry for as long
/// as the busy timeout would have let them wait.
async fn connect(
    pool: impl Fn() -> SqlitePoolOptions,
    options: &SqliteConnectOptions,
) -> Result<SqlitePool> {
    let started = Instant::now();
    loop {
        match pool().connect_with(options.clone()).await {
            Ok(pool) => return Ok(pool),
            Err(e) if rows::is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(rows::db_err(e)),
        }
    }
}

/// Makes sure the writer goes back to the pool outside any transaction.
///
/// A write transaction dropped before commit (an error, or the caller's
/// future cancelled) queues a ROLLBACK by itself. But sqlx 0.8 has a narrow
/// race: if the caller's future is dropped after the connection thread ran
/// `BEGIN IMMEDIATE` and acknowledged it, yet before the acknowledgement was
/// read, no `Transaction` exists to roll back, and the connection would come
/// back still inside the transaction (every later BEGIN then fails, and the
/// write lock stays held). So on every release: while sqlx still counts an
/// open transaction, roll it back. (Commands run in order on the connection
/// thread, so a ROLLBACK already queued by a dropped `Transaction` runs first
/// and this one is then a no-op.)
async fn roll_back_leftovers(conn: &mut sqlx::SqliteConnection) -> sqlx::Result<bool> {
    use sqlx::{Connection, Database, TransactionManager};
    for _ in 0..4 {
        if !conn.is_in_transaction() {
            return Ok(true);
        }
        <sqlx::Sqlite as Database>::TransactionManager::rollback(conn).await?;
    }
    // Still inside a transaction after several rollbacks: discard the
    // connection; the pool opens a fresh one.
    Ok(false)
}

// Every method forwards to the function of the same name in its module;
// the map lives in `tether_core::forward_store!`, the same for both backends.
tether_core::forward_store!(
    SqliteStore,
    backend = "sqlite",
    subscribe = |store, tenant, queue| store.wakeups.subscribe(tenant, queue),
);
