//! Row mapping (sqlx is used without its macros, so rows are read by hand)
//! and the translation of sqlx errors into tether's.

use std::collections::BTreeMap;

use serde_json::Value;
use sqlx::postgres::{PgDatabaseError, PgRow, PgSeverity};
use sqlx::Row;
use tether_core::schedule::RunOutcome;
use tether_core::{
    ApiKeyInfo, Backoff, Error, EventKind, Job, JobEvent, JobState, Lease, LeaseToken, Overlap,
    QueueConfig, QueueLimits, QueueStats, RateLimit, Result, Schedule, ScheduleRun, ScheduleSpec,
    StateCounts, Tenant,
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

/// Maps a driver error to tether's: anything that means "the database
/// cannot serve now", or "try again", is `Unavailable` (503, safe to
/// retry, logged as a warning); the rest is `Storage` (500, an error).
pub(crate) fn db_err(err: sqlx::Error) -> Error {
    if is_unavailable(&err) {
        Error::Unavailable(Box::new(err))
    } else {
        Error::Storage(Box::new(err))
    }
}

/// Whether `err` means the database cannot serve now (rather than that
/// the statement is wrong):
///
/// - no connection: I/O and TLS failures, the pool timing out (sqlx
///   retries a connect refused with 53300 too_many_connections or 57P03
///   cannot_connect_now until its acquire timeout, then says
///   `PoolTimedOut`), a closed pool;
/// - an error the server sent at severity FATAL (or PANIC): the server
///   ended the session, so the statement never ran or its connection is
///   gone. Every refusal at connect is FATAL, whatever its SQLSTATE: 55000
///   "database is not currently accepting connections" (`ALLOW_CONNECTIONS
///   false`), 53300, 3D000 (the database is gone), 28xxx (the login is
///   refused); so is a backend terminated under a session (57P01). The
///   same SQLSTATE raised by a statement comes at severity ERROR and is
///   judged by its code below: a 55000 of a statement (a lock not
///   available, say) is not unavailability;
/// - by SQLSTATE: class 08 (connection exception), class 53 (insufficient
///   resources: too many connections, disk full, out of memory), 57P
///   (shutdown, crash, cannot connect now, database dropped), class 40 (a
///   deadlock or serialization failure rolled the statement back, and
///   running it again is the remedy), and 25006 read_only_sql_transaction
///   (a write reached a read-only server: a standby, after a failover).
pub(crate) fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let session_ended = db
                .try_downcast_ref::<PgDatabaseError>()
                .is_some_and(|e| matches!(e.severity(), PgSeverity::Fatal | PgSeverity::Panic));
            session_ended || db.code().is_some_and(|code| unavailable_sqlstate(&code))
        }
        _ => false,
    }
}

/// The SQLSTATEs that mean "not now" whatever the severity they come with.
fn unavailable_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57P")
        || code.starts_with("40")
        || code == "25006"
}

/// Whether a driver error is a unique-constraint violation.
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// A storage error for data that cannot be read back (corrupt or foreign rows).
pub(crate) fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::Storage(what.to_string().into())
}

/// A row's `state` column.
pub(crate) fn state(row: &PgRow) -> Result<JobState> {
    let state: String = row.try_get("state").db()?;
    state
        .parse::<JobState>()
        .map_err(|e| corrupt(format!("job state: {e}")))
}

/// Decodes a row that carries `job_columns!`.
pub(crate) fn job(row: &PgRow) -> Result<Job, sqlx::Error> {
    let state: String = row.try_get("state")?;
    Ok(Job {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        queue: row.try_get("queue")?,
        kind: row.try_get("kind")?,
        payload: row.try_get("payload")?,
        result: row.try_get("result")?,
        state: state
            .parse::<JobState>()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        priority: row.try_get("priority")?,
        attempt: row.try_get("attempt")?,
        max_attempts: row.try_get("max_attempts")?,
        backoff: Backoff {
            base_ms: row.try_get("backoff_base_ms")?,
            cap_ms: row.try_get("backoff_cap_ms")?,
        },
        run_at: row.try_get("run_at")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        updated_at: row.try_get("updated_at")?,
        last_error: row.try_get("last_error")?,
        unique_key: row.try_get("unique_key")?,
        idempotency_key: row.try_get("idempotency_key")?,
        tags: row.try_get("tags")?,
        expires_at: row.try_get("expires_at")?,
        concurrency_key: row.try_get("concurrency_key")?,
        timeout_ms: row.try_get("timeout_ms")?,
        cancel_requested: row.try_get("cancel_requested")?,
        worker_id: row.try_get("worker_id")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        heartbeat_at: row.try_get("heartbeat_at")?,
        progress: row.try_get("progress")?,
        depends_on: row
            .try_get::<Option<Vec<uuid::Uuid>>, _>("depends_on")?
            .unwrap_or_default(),
        dependency_failure: row
            .try_get::<String, _>("dependency_failure")?
            .parse()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        workflow_id: row.try_get("workflow_id")?,
        headers: row
            .try_get::<Option<sqlx::types::Json<BTreeMap<String, String>>>, _>("headers")?
            .map(|h| h.0)
            .unwrap_or_default(),
    })
}

/// The lease token of a claimed job's row (`lease_token`).
pub(crate) fn lease_token(row: &PgRow) -> Result<LeaseToken, sqlx::Error> {
    Ok(LeaseToken(row.try_get("lease_token")?))
}

/// A history event from `at, event, attempt, worker_id, detail`.
pub(crate) fn event(row: &PgRow) -> Result<JobEvent, sqlx::Error> {
    let event: String = row.try_get("event")?;
    Ok(JobEvent {
        at: row.try_get("at")?,
        event: event
            .parse::<EventKind>()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        attempt: row.try_get("attempt")?,
        worker_id: row.try_get("worker_id")?,
        detail: row.try_get("detail")?,
    })
}

/// A named lease from `name, holder, token, expires_at`.
pub(crate) fn lease(row: &PgRow) -> Result<Lease, sqlx::Error> {
    Ok(Lease {
        name: row.try_get("name")?,
        holder: row.try_get("holder")?,
        token: LeaseToken(row.try_get("token")?),
        expires_at: row.try_get("expires_at")?,
    })
}

/// A tenant from `id, name, created_at`.
pub(crate) fn tenant(row: &PgRow) -> Result<Tenant, sqlx::Error> {
    Ok(Tenant {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        created_at: row.try_get("created_at")?,
    })
}

/// A key's info from `id, tenant_id, tenant, name, admin, created_at,
/// last_used_at, revoked_at`; `None` when the key columns are NULL (outer join).
pub(crate) fn api_key(row: &PgRow) -> Result<Option<ApiKeyInfo>, sqlx::Error> {
    let Some(id) = row.try_get::<Option<Uuid>, _>("id")? else {
        return Ok(None);
    };
    Ok(Some(ApiKeyInfo {
        id,
        tenant_id: row.try_get("tenant_id")?,
        tenant: row.try_get("tenant")?,
        name: row.try_get("name")?,
        admin: row.try_get("admin")?,
        created_at: row.try_get("created_at")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked_at: row.try_get("revoked_at")?,
    }))
}

/// A stored key hash (`hash`), which must be 32 bytes.
pub(crate) fn key_hash(row: &PgRow) -> Result<[u8; 32]> {
    let hash: Vec<u8> = row.try_get("hash").db()?;
    let len = hash.len();
    hash.try_into()
        .map_err(|_| corrupt(format!("api key hash of {len} bytes")))
}

/// Decodes a row that carries `schedule_columns!`.
pub(crate) fn schedule(row: &PgRow) -> Result<Schedule, sqlx::Error> {
    let overlap: String = row.try_get("overlap")?;
    Ok(Schedule {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        spec: ScheduleSpec {
            name: row.try_get("name")?,
            cron: row.try_get("cron")?,
            timezone: row.try_get("timezone")?,
            queue: row.try_get("queue")?,
            kind: row.try_get("kind")?,
            payload: row.try_get("payload")?,
            enabled: row.try_get("enabled")?,
            overlap: Overlap::parse(&overlap).ok_or_else(|| {
                sqlx::Error::Decode(format!("unknown schedule overlap {overlap:?}").into())
            })?,
        },
        next_run_at: row.try_get("next_run_at")?,
        last_run_at: row.try_get("last_run_at")?,
        last_job_id: row.try_get("last_job_id")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The schedule of a row whose schedule columns may all be NULL (outer join).
pub(crate) fn optional_schedule(row: &PgRow) -> Result<Option<Schedule>, sqlx::Error> {
    match row.try_get::<Option<Uuid>, _>("id")? {
        Some(_) => schedule(row).map(Some),
        None => Ok(None),
    }
}

/// A schedule run from `fire_at, job_id, outcome`; `None` for the row of
/// NULLs that stands for a schedule without runs.
pub(crate) fn schedule_run(row: &PgRow) -> Result<Option<ScheduleRun>, sqlx::Error> {
    let Some(outcome) = row.try_get::<Option<String>, _>("outcome")? else {
        return Ok(None);
    };
    Ok(Some(ScheduleRun {
        fire_at: row.try_get("fire_at")?,
        job_id: row.try_get("job_id")?,
        outcome: RunOutcome::parse(&outcome).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown schedule run outcome {outcome:?}").into())
        })?,
    }))
}

/// Queue stats from a row of `sql::queues::QUEUE_STATS` or `LIST_QUEUES`.
pub(crate) fn queue_stats(row: &PgRow) -> Result<QueueStats, sqlx::Error> {
    let counts_json: Value = row.try_get("counts")?;
    let mut counts = StateCounts::default();
    if let Value::Object(map) = counts_json {
        for (state, n) in map {
            if let (Ok(state), Some(n)) = (state.parse::<JobState>(), n.as_i64()) {
                counts.add(state, n);
            }
        }
    }
    Ok(QueueStats {
        name: row.try_get("name")?,
        paused: row.try_get("paused")?,
        counts,
        ready: row.try_get("ready")?,
        scheduled: row.try_get("scheduled")?,
        oldest_ready_age_ms: row.try_get("oldest_ready_age_ms")?,
        expired_leases: row.try_get("expired_leases")?,
        config: QueueConfig {
            max_attempts: row.try_get("max_attempts")?,
            backoff: Backoff {
                base_ms: row.try_get("backoff_base_ms")?,
                cap_ms: row.try_get("backoff_cap_ms")?,
            },
            default_lease_ttl_ms: row.try_get("default_lease_ttl_ms")?,
        },
        limits: QueueLimits {
            max_running: row.try_get("max_running")?,
            rate_limit: rate_limit(
                row.try_get("rate_limit_count")?,
                row.try_get("rate_limit_period_ms")?,
            ),
            key_max_running: row.try_get("key_max_running")?,
            fair: row.try_get("fair")?,
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sqlx::error::{DatabaseError, ErrorKind};

    use super::*;

    /// A database error with only a SQLSTATE (as a driver other than
    /// PostgreSQL's, or a test, makes one): judged by its code alone.
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Coded {}

    impl DatabaseError for Coded {
        fn message(&self) -> &str {
            "coded"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> ErrorKind {
            ErrorKind::Other
        }
    }

    fn code_of(sqlstate: &'static str) -> tether_core::ErrorCode {
        db_err(sqlx::Error::Database(Box::new(Coded(sqlstate)))).code()
    }

    #[test]
    fn database_errors_that_mean_not_now_are_unavailable() {
        use tether_core::ErrorCode::{Internal, Unavailable};
        for (sqlstate, code) in [
            ("53300", Unavailable), // too_many_connections
            ("53000", Unavailable), // insufficient_resources
            ("53100", Unavailable), // disk_full
            ("53200", Unavailable), // out_of_memory
            ("25006", Unavailable), // read_only_sql_transaction
            ("57P01", Unavailable), // admin_shutdown
            ("57P03", Unavailable), // cannot_connect_now
            ("57P04", Unavailable), // database_dropped
            ("08006", Unavailable), // connection_failure
            ("40001", Unavailable), // serialization_failure
            ("40P01", Unavailable), // deadlock_detected
            // A statement's own errors (severity ERROR): not unavailability.
            ("55000", Internal), // object_not_in_prerequisite_state
            ("55P03", Internal), // lock_not_available
            ("57014", Internal), // query_canceled
            ("25001", Internal), // active_sql_transaction
            ("42P01", Internal), // undefined_table
            ("23505", Internal), // unique_violation
        ] {
            assert_eq!(code_of(sqlstate), code, "SQLSTATE {sqlstate}");
        }
        for e in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        ] {
            assert_eq!(db_err(e).code(), Unavailable);
        }
        assert_eq!(db_err(sqlx::Error::RowNotFound).code(), Internal);
    }
}
