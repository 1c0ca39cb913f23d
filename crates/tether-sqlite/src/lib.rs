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

#[macro_use]
mod sql;
mod migrate;
mod rows;
mod store;
#[cfg(feature = "testing")]
mod testing;
#[cfg(feature = "testing")]
pub use testing::migrate_up_to;

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tether_core::Result;

/// How long a statement waits for a lock held by another process (another
/// tether, a backup, the `sqlite3` shell) before giving up as `Unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operation waits for a pooled connection (the writer is one
/// connection shared by every writing task of the process).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections for reads; WAL lets them run alongside the writer.
const READ_CONNECTIONS: u32 = 4;

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
}

impl SqliteStore {
    /// Opens the store at `path`, creating the file if it is missing (mode
    /// 0600 on Unix, so its `-wal` and `-shm` files are 0600 too) and
    /// bringing its schema up to date.
    ///
    /// Safe to call from several processes at once on the same file: the
    /// migrations run under SQLite's write lock and are applied once.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        create_private(path.as_ref());
        // Pragmas go in the connect options, so every connection either pool
        // ever opens has them (a one-off PRAGMA query would reach just one).
        let options = SqliteConnectOptions::new()
            .filename(path.as_ref())
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
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
        migrate::run(&writer).await?;
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

#[cfg(test)]
mod tests;
