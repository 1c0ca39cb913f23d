//! Row mapping (sqlx is used without its macros, so rows are read by hand),
//! the values SQLite binds (JSON text, JSON arrays of ids), and the
//! translation of sqlx errors into tether's.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use tether_core::schedule::{Overlap, RunOutcome, Schedule, ScheduleRun, ScheduleSpec};
use tether_core::{ApiKeyInfo, Tenant};
use tether_core::{
    Backoff, Error, Job, JobEvent, Lease, LeaseToken, QueueConfig, QueueLimits, QueueStats,
    RateLimit, Result, StateCounts,
};
use uuid::Uuid;

/// `?` for sqlx results: maps the error with [`db_err`].
pub(crate) trait Db<T> {
    fn db(self) -> Result<T>;
}

impl<T> Db<T> for std::result::Result<T, sqlx::Error> {
    fn db(self) -> Result<T> {
        self.map_err(db_err)
    }
}

/// SQLite primary result codes that mean "the database cannot serve now,
/// try again later", not "broken" (<https://sqlite.org/rescode.html>).
/// Another connection holds the lock this one needs (after the busy
/// timeout):
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
/// Out of memory.
const SQLITE_NOMEM: i64 = 7;
/// A write refused because the file cannot be written now: write-protected
/// or on a read-only mount, its directory unwritable (no journal can be
/// made), or moved or deleted since it was opened (`SQLITE_READONLY_DBMOVED`).
/// Every write goes through the writer connection, opened read-write; the
/// reader connections are read-only, and no write is sent to them.
const SQLITE_READONLY: i64 = 8;
const SQLITE_IOERR: i64 = 10;
/// The disk (or the file's size limit) is full.
const SQLITE_FULL: i64 = 13;
/// The file (or its directory) is missing or cannot be opened.
const SQLITE_CANTOPEN: i64 = 14;
/// The file-locking protocol failed to get a lock (a WAL race that
/// outlasted SQLite's own retries).
const SQLITE_PROTOCOL: i64 = 15;

/// The primary SQLite result code of a database error.
fn primary_code(e: &sqlx::Error) -> Option<i64> {
    match e {
        // Extended result codes carry the primary code in the low byte.
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i64>().ok())
            .map(|code| code & 0xff),
        _ => None,
    }
}

/// SQLITE_BUSY: another connection holds the lock this one needs.
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    primary_code(e) == Some(SQLITE_BUSY)
}

/// Whether a driver error is a unique-constraint violation.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Pool timeouts, I/O and connection failures are `Unavailable` (503, the
/// caller may retry, logged as a warning); so are the result codes above:
/// a database still locked by another process after the busy timeout, a
/// full disk, a file that cannot be written or opened now, no memory.
/// Everything else (a constraint, corruption, a bug) is `Storage` (500).
pub(crate) fn db_err(e: sqlx::Error) -> Error {
    let transient = match &e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(_) => matches!(
            primary_code(&e),
            Some(
                SQLITE_BUSY
                    | SQLITE_LOCKED
                    | SQLITE_NOMEM
                    | SQLITE_READONLY
                    | SQLITE_IOERR
                    | SQLITE_FULL
                    | SQLITE_CANTOPEN
                    | SQLITE_PROTOCOL
            )
        ),
        _ => false,
    };
    if transient {
        Error::Unavailable(Box::new(e))
    } else {
        Error::Storage(Box::new(e))
    }
}

/// A storage error for data that cannot be read back (corrupt or foreign rows).
pub(crate) fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::Storage(what.to_string().into())
}

/// Milliseconds since the epoch to an instant.
pub(crate) fn ts(ms: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| corrupt(format!("timestamp {ms} ms out of range")))
}

pub(crate) fn opt_ts(ms: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    ms.map(ts).transpose()
}

pub(crate) fn uuid(text: &str) -> Result<Uuid> {
    Uuid::parse_str(text).map_err(|e| corrupt(format!("bad uuid {text:?}: {e}")))
}

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| corrupt(format!("bad JSON in database: {e}")))
}

fn opt_json(text: Option<&str>) -> Result<Option<Value>> {
    text.map(json).transpose()
}

/// A job from a row holding `job_columns!`.
pub(crate) fn job(row: &SqliteRow) -> Result<Job> {
    let state: &str = row.try_get("state").db()?;
    let tags: &str = row.try_get("tags").db()?;
    Ok(Job {
        id: uuid(row.try_get("id").db()?)?,
        tenant: row.try_get("tenant").db()?,
        queue: row.try_get("queue").db()?,
        kind: row.try_get("kind").db()?,
        payload: json(row.try_get("payload").db()?)?,
        result: opt_json(row.try_get("result").db()?)?,
        state: state.parse().map_err(corrupt)?,
        priority: row.try_get("priority").db()?,
        attempt: row.try_get("attempt").db()?,
        max_attempts: row.try_get("max_attempts").db()?,
        backoff: Backoff {
            base_ms: row.try_get("backoff_base_ms").db()?,
            cap_ms: row.try_get("backoff_cap_ms").db()?,
        },
        run_at: ts(row.try_get("run_at").db()?)?,
        created_at: ts(row.try_get("created_at").db()?)?,
        started_at: opt_ts(row.try_get("started_at").db()?)?,
        finished_at: opt_ts(row.try_get("finished_at").db()?)?,
        updated_at: ts(row.try_get("updated_at").db()?)?,
        last_error: row.try_get("last_error").db()?,
        unique_key: row.try_get("unique_key").db()?,
        idempotency_key: row.try_get("idempotency_key").db()?,
        tags: serde_json::from_str(tags).map_err(|e| corrupt(format!("bad tags: {e}")))?,
        expires_at: opt_ts(row.try_get("expires_at").db()?)?,
        concurrency_key: row.try_get("concurrency_key").db()?,
        timeout_ms: row.try_get("timeout_ms").db()?,
        cancel_requested: row.try_get("cancel_requested").db()?,
        worker_id: row.try_get("worker_id").db()?,
        lease_expires_at: opt_ts(row.try_get("lease_expires_at").db()?)?,
        heartbeat_at: opt_ts(row.try_get("heartbeat_at").db()?)?,
        progress: opt_json(row.try_get("progress").db()?)?,
        depends_on: id_list(row.try_get("depends_on").db()?)?,
        dependency_failure: row
            .try_get::<&str, _>("dependency_failure")
            .db()?
            .parse()
            .map_err(corrupt)?,
        workflow_id: row
            .try_get::<Option<&str>, _>("workflow_id")
            .db()?
            .map(uuid)
            .transpose()?,
        headers: match row.try_get::<Option<&str>, _>("headers").db()? {
            Some(text) => {
                serde_json::from_str(text).map_err(|e| corrupt(format!("bad headers: {e}")))?
            }
            None => BTreeMap::new(),
        },
    })
}

/// A JSON array of ids (`depends_on`), NULL for none.
pub(crate) fn id_list(text: Option<&str>) -> Result<Vec<Uuid>> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    let ids: Vec<&str> =
        serde_json::from_str(text).map_err(|e| corrupt(format!("bad id list: {e}")))?;
    ids.into_iter().map(uuid).collect()
}

/// Whether a row holding `job_columns!` is of a job that others wait for:
/// then its end may have released some (see `workflows::take_released`).
pub(crate) fn has_dependents(row: &SqliteRow) -> Result<bool> {
    row.try_get("has_dependents").db()
}

/// The lease token of a row holding `job_columns!` (claims only).
pub(crate) fn lease_token(row: &SqliteRow) -> Result<LeaseToken> {
    let token: Option<&str> = row.try_get("lease_token").db()?;
    let token = token.ok_or_else(|| corrupt("claimed job without a lease token"))?;
    Ok(LeaseToken(uuid(token)?))
}

/// A history event from `at, event, attempt, worker_id, detail`.
pub(crate) fn event(row: &SqliteRow) -> Result<JobEvent> {
    let event: &str = row.try_get("event").db()?;
    Ok(JobEvent {
        at: ts(row.try_get("at").db()?)?,
        event: event.parse().map_err(corrupt)?,
        attempt: row.try_get("attempt").db()?,
        worker_id: row.try_get("worker_id").db()?,
        detail: row.try_get("detail").db()?,
    })
}

/// A named lease from `name, holder, token, expires_at`.
pub(crate) fn lease(row: &SqliteRow) -> Result<Lease> {
    Ok(Lease {
        name: row.try_get("name").db()?,
        holder: row.try_get("holder").db()?,
        token: LeaseToken(uuid(row.try_get("token").db()?)?),
        expires_at: ts(row.try_get("expires_at").db()?)?,
    })
}

/// A tenant from `id, name, created_at`.
pub(crate) fn tenant(row: &SqliteRow) -> Result<Tenant> {
    Ok(Tenant {
        id: uuid(row.try_get("id").db()?)?,
        name: row.try_get("name").db()?,
        created_at: ts(row.try_get("created_at").db()?)?,
    })
}

/// A key's info from `id, tenant_id, tenant, name, admin, created_at,
/// last_used_at, revoked_at`; `None` when the key columns are NULL (an outer join).
pub(crate) fn api_key(row: &SqliteRow) -> Result<Option<ApiKeyInfo>> {
    let Some(id) = row.try_get::<Option<&str>, _>("id").db()? else {
        return Ok(None);
    };
    Ok(Some(ApiKeyInfo {
        id: uuid(id)?,
        tenant_id: uuid(row.try_get("tenant_id").db()?)?,
        tenant: row.try_get("tenant").db()?,
        name: row.try_get("name").db()?,
        admin: row.try_get("admin").db()?,
        created_at: ts(row.try_get("created_at").db()?)?,
        last_used_at: opt_ts(row.try_get("last_used_at").db()?)?,
        revoked_at: opt_ts(row.try_get("revoked_at").db()?)?,
    }))
}

/// A stored key hash (`hash`), which must be 32 bytes.
pub(crate) fn key_hash(row: &SqliteRow) -> Result<[u8; 32]> {
    let hash: &[u8] = row.try_get("hash").db()?;
    hash.try_into()
        .map_err(|_| corrupt(format!("api key hash of {} bytes", hash.len())))
}

/// A schedule from a row holding `schedule_columns!`.
pub(crate) fn schedule(row: &SqliteRow) -> Result<Schedule> {
    let overlap: &str = row.try_get("overlap").db()?;
    let last_job_id: Option<&str> = row.try_get("last_job_id").db()?;
    Ok(Schedule {
        id: uuid(row.try_get("id").db()?)?,
        tenant: row.try_get("tenant").db()?,
        spec: ScheduleSpec {
            name: row.try_get("name").db()?,
            cron: row.try_get("cron").db()?,
            timezone: row.try_get("timezone").db()?,
            queue: row.try_get("queue").db()?,
            kind: row.try_get("kind").db()?,
            payload: json(row.try_get("payload").db()?)?,
            enabled: row.try_get("enabled").db()?,
            overlap: Overlap::parse(overlap)
                .ok_or_else(|| corrupt(format!("unknown overlap policy {overlap:?}")))?,
        },
        next_run_at: opt_ts(row.try_get("next_run_at").db()?)?,
        last_run_at: opt_ts(row.try_get("last_run_at").db()?)?,
        last_job_id: last_job_id.map(uuid).transpose()?,
        created_at: ts(row.try_get("created_at").db()?)?,
        updated_at: ts(row.try_get("updated_at").db()?)?,
    })
}

/// A schedule run from `fire_at, job_id, outcome`.
pub(crate) fn schedule_run(row: &SqliteRow) -> Result<ScheduleRun> {
    let outcome: &str = row.try_get("outcome").db()?;
    let job_id: Option<&str> = row.try_get("job_id").db()?;
    Ok(ScheduleRun {
        fire_at: ts(row.try_get("fire_at").db()?)?,
        job_id: job_id.map(uuid).transpose()?,
        outcome: RunOutcome::parse(outcome)
            .ok_or_else(|| corrupt(format!("unknown schedule run outcome {outcome:?}")))?,
    })
}

/// Queue stats from a row holding `name` and `stats_columns!` (`sql::queues`). The config
/// columns are NULL for a queue without a row: it has the defaults.
pub(crate) fn queue_stats(row: &SqliteRow) -> Result<QueueStats> {
    let defaults = QueueConfig::default();
    let now: i64 = row.try_get("now").db()?;
    let queued: i64 = row.try_get("n_queued").db()?;
    let ready: i64 = row.try_get("n_ready").db()?;
    let oldest_ready: Option<i64> = row.try_get("oldest_ready").db()?;
    let counts = StateCounts {
        waiting: row.try_get("n_waiting").db()?,
        queued,
        running: row.try_get("n_running").db()?,
        succeeded: row.try_get("n_succeeded").db()?,
        failed: row.try_get("n_failed").db()?,
        cancelled: row.try_get("n_cancelled").db()?,
    };
    let paused: Option<bool> = row.try_get("paused").db()?;
    let max_attempts: Option<i32> = row.try_get("max_attempts").db()?;
    let base_ms: Option<i64> = row.try_get("backoff_base_ms").db()?;
    let cap_ms: Option<i64> = row.try_get("backoff_cap_ms").db()?;
    let ttl_ms: Option<i64> = row.try_get("default_lease_ttl_ms").db()?;
    Ok(QueueStats {
        name: row.try_get("name").db()?,
        paused: paused.unwrap_or(false),
        counts,
        ready,
        scheduled: queued - ready,
        oldest_ready_age_ms: oldest_ready.map_or(0, |run_at| (now - run_at).max(0)),
        expired_leases: row.try_get("n_lapsed").db()?,
        config: QueueConfig {
            max_attempts: max_attempts.unwrap_or(defaults.max_attempts),
            backoff: Backoff {
                base_ms: base_ms.unwrap_or(defaults.backoff.base_ms),
                cap_ms: cap_ms.unwrap_or(defaults.backoff.cap_ms),
            },
            default_lease_ttl_ms: ttl_ms.unwrap_or(defaults.default_lease_ttl_ms),
        },
        limits: QueueLimits {
            max_running: row.try_get("max_running").db()?,
            rate_limit: rate_limit(
                row.try_get("rate_limit_count").db()?,
                row.try_get("rate_limit_period_ms").db()?,
            ),
            key_max_running: row.try_get("key_max_running").db()?,
            fair: row
                .try_get::<Option<bool>, _>("fair")
                .db()?
                .unwrap_or(false),
        },
    })
}

/// A rate limit from its two columns (both set, or none).
fn rate_limit(count: Option<i32>, period_ms: Option<i64>) -> Option<RateLimit> {
    Some(RateLimit {
        count: count?,
        period_ms: period_ms?,
    })
}

/// A JSON array of strings (ids, queue names) for `json_each`. Written by
/// hand because it is on the hot path of every claim and completion, and
/// these strings almost never need escaping.
pub(crate) fn id_array<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for id in ids {
        if out.len() > 1 {
            out.push(',');
        }
        if id.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
            out.push_str(&Value::from(id).to_string());
        } else {
            out.push('"');
            out.push_str(id);
            out.push('"');
        }
    }
    out.push(']');
    out
}

pub(crate) fn to_json_text(value: &Value) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Storage(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::{Connection, SqliteConnection};
    use tether_core::ErrorCode;

    use super::*;

    /// A file path under the temp dir; the file and its journals are
    /// removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new() -> TempFile {
            TempFile(std::env::temp_dir().join(format!(
                "tether-sqlite-rows-{}-{}.db",
                std::process::id(),
                Uuid::new_v4()
            )))
        }

        fn options(&self) -> SqliteConnectOptions {
            SqliteConnectOptions::new()
                .filename(&self.0)
                .create_if_missing(true)
        }

        async fn connect(&self, options: SqliteConnectOptions) -> SqliteConnection {
            SqliteConnection::connect_with(&options).await.unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                let mut path = self.0.clone().into_os_string();
                path.push(suffix);
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// What `sql` fails with on `conn`, mapped; with the SQLite code, for
    /// the messages.
    async fn refusal(conn: &mut SqliteConnection, sql: &str) -> (ErrorCode, String) {
        let e = sqlx::raw_sql(sql).execute(&mut *conn).await.expect_err(sql);
        let shown = format!("{e} (code {:?})", primary_code(&e));
        (db_err(e).code(), shown)
    }

    #[tokio::test]
    async fn a_full_database_is_unavailable() {
        let file = TempFile::new();
        let mut conn = file.connect(file.options()).await;
        sqlx::raw_sql("CREATE TABLE t (b BLOB)")
            .execute(&mut conn)
            .await
            .unwrap();
        // No page beyond those the file has: as a full disk.
        let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        sqlx::raw_sql(&format!("PRAGMA max_page_count = {pages}"))
            .execute(&mut conn)
            .await
            .unwrap();
        let (code, shown) = refusal(&mut conn, "INSERT INTO t VALUES (zeroblob(1000000))").await;
        assert!(shown.contains("Some(13)"), "{shown}");
        assert_eq!(code, ErrorCode::Unavailable, "{shown}");
    }

    #[tokio::test]
    async fn a_database_that_cannot_be_written_is_unavailable() {
        let file = TempFile::new();
        let mut rw = file.connect(file.options()).await;
        sqlx::raw_sql("CREATE TABLE t (x INTEGER)")
            .execute(&mut rw)
            .await
            .unwrap();
        // A connection to a file it may only read (as a write-protected
        // file or a read-only mount opens).
        let mut ro = file.connect(file.options().read_only(true)).await;
        let (code, shown) = refusal(&mut ro, "INSERT INTO t VALUES (1)").await;
        assert!(shown.contains("Some(8)"), "{shown}");
        assert_eq!(code, ErrorCode::Unavailable, "{shown}");
        drop(ro);
        // The file deleted under an open connection: SQLITE_READONLY_DBMOVED.
        drop(file);
        let (code, shown) = refusal(&mut rw, "INSERT INTO t VALUES (1)").await;
        assert!(shown.contains("Some(8)"), "{shown}");
        assert_eq!(code, ErrorCode::Unavailable, "{shown}");
    }

    #[tokio::test]
    async fn a_lock_held_past_the_busy_timeout_is_unavailable() {
        let file = TempFile::new();
        let mut holder = file.connect(file.options()).await;
        sqlx::raw_sql("CREATE TABLE t (x INTEGER); BEGIN IMMEDIATE")
            .execute(&mut holder)
            .await
            .unwrap();
        let mut other = file
            .connect(file.options().busy_timeout(std::time::Duration::ZERO))
            .await;
        let (code, shown) = refusal(&mut other, "BEGIN IMMEDIATE").await;
        assert!(shown.contains("Some(5)"), "{shown}");
        assert_eq!(code, ErrorCode::Unavailable, "{shown}");
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_opened_is_unavailable() {
        let missing = std::env::temp_dir()
            .join(format!("tether-no-such-dir-{}", Uuid::new_v4()))
            .join("db.sqlite");
        let options = SqliteConnectOptions::new()
            .filename(&missing)
            .create_if_missing(true);
        let e = SqliteConnection::connect_with(&options)
            .await
            .expect_err("no such directory");
        assert_eq!(primary_code(&e), Some(SQLITE_CANTOPEN), "{e}");
        assert_eq!(db_err(e).code(), ErrorCode::Unavailable);
    }

    #[tokio::test]
    async fn a_statement_s_own_errors_are_internal() {
        let file = TempFile::new();
        let mut conn = file.connect(file.options()).await;
        sqlx::raw_sql("CREATE TABLE t (x INTEGER PRIMARY KEY); INSERT INTO t VALUES (1)")
            .execute(&mut conn)
            .await
            .unwrap();
        for sql in [
            "INSERT INTO t VALUES (1)",
            "SELECT * FROM nowhere",
            "NOT SQL",
        ] {
            let (code, shown) = refusal(&mut conn, sql).await;
            assert_eq!(code, ErrorCode::Internal, "{sql}: {shown}");
        }
    }
}
