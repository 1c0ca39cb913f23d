//! The SQL statements, one file per module of the store (`sql::attempts`
//! holds what `attempts.rs` runs), and the fragments they share. The
//! fragments are macros (not consts) so that whole statements can be
//! assembled with `concat!` at compile time and stay `&'static str`, which
//! sqlx caches as prepared statements.
//!
//! Parameters are numbered (`?1`, `?2`, ...) so that one value can be used
//! several times; lists of ids travel as one JSON array through `json_each`.

/// SQLite's clock as integer milliseconds since the Unix epoch.
///
/// Invariant 3 (server clock): "now" is never computed in Rust. SQLite keeps
/// `'now'` fixed for the whole of one `sqlite3_step`, so every row an UPDATE
/// touches (and its RETURNING values) sees the same instant. `ROUND` guards
/// against `x.9999` from the floating-point seconds.
macro_rules! now_ms {
    () => {
        "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)"
    };
}

/// A random version-4 UUID in lowercase hyphenated form, made by SQLite.
///
/// Every call of `randomblob`/`random` is evaluated per row, so a claim of N
/// jobs mints N independent tokens in one statement. `random() & 3` picks the
/// RFC 4122 variant digit (8, 9, a or b) without the overflow `abs()` can hit.
macro_rules! new_token {
    () => {
        "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' \
         || substr(lower(hex(randomblob(2))), 2) || '-' \
         || substr('89ab', 1 + (random() & 3), 1) || substr(lower(hex(randomblob(2))), 2) \
         || '-' || lower(hex(randomblob(6))))"
    };
}

/// The columns [`crate::rows::job`] reads, plus the lease token for claims
/// and `has_dependents` for the statements that end jobs (whether the end
/// may have released others: see `workflows::take_released`).
macro_rules! job_columns {
    () => {
        "id, tenant, queue, kind, payload, result, state, priority, attempt, max_attempts, \
         backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at, finished_at, \
         updated_at, last_error, unique_key, idempotency_key, tags, expires_at, timeout_ms, \
         cancel_requested, worker_id, lease_token, lease_expires_at, heartbeat_at, progress, \
         concurrency_key, depends_on, dependency_failure, has_dependents, workflow_id, headers"
    };
}

/// The columns [`crate::rows::schedule`] reads.
macro_rules! schedule_columns {
    () => {
        "id, tenant, name, cron, timezone, queue, kind, payload, enabled, overlap, next_run_at, \
         last_run_at, last_job_id, created_at, updated_at"
    };
}

/// One history row per job whose id is in the JSON array `?1`, read from the
/// job row just written: `$at` the timestamp column, `$event` the event
/// name, `$worker` and `$detail` SQL expressions.
macro_rules! events_of_ids {
    ($at:literal, $event:literal, $worker:literal, $detail:literal) => {
        concat!(
            "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
            "SELECT id, tenant, ",
            $at,
            ", '",
            $event,
            "', attempt, ",
            $worker,
            ", ",
            $detail,
            " FROM tether_jobs WHERE id IN (SELECT value FROM json_each(?1))"
        )
    };
}

/// Unpacks a flat JSON array holding `$n` scalars per record (`json_each`
/// over scalars is cheap; over objects, SQLite re-renders and re-parses the
/// object text on every field access) into rows numbered `idx`, with the
/// listed columns in order. Rows come out grouped by `key / $n`.
macro_rules! unpack {
    ($param:literal, $n:literal, [$($i:literal => $col:literal),+ $(,)?]) => {
        concat!(
            "SELECT key / ", $n, " AS idx",
            $(", max(CASE key % ", $n, " WHEN ", $i, " THEN value END) AS ", $col,)+
            " FROM json_each(", $param, ") GROUP BY key / ", $n
        )
    };
}

/// The SET clause of a replay (`jobs::REPLAY`, `REPLAY_MANY`, and
/// `workflows::RETRY_WORKFLOW`): a fresh attempt budget, due now, and the
/// `expires_at` bound as `$expires` (NULL clears it, or an expired job would
/// expire again at once). A job with dependencies goes back to `waiting`,
/// to be settled against them (`workflows::settle`).
macro_rules! replay_set {
    ($expires:literal) => {
        concat!(
            "UPDATE tether_jobs SET state = CASE WHEN depends_on IS NULL THEN 'queued' ",
            "ELSE 'waiting' END, attempt = 0, run_at = ",
            now_ms!(),
            ", cancel_requested = 0, finished_at = NULL, result = NULL, lease_token = NULL, ",
            "lease_expires_at = NULL, progress = NULL, expires_at = ",
            $expires,
            ", updated_at = ",
            now_ms!(),
            " "
        )
    };
}

pub(crate) mod attempts;
pub(crate) mod enqueue;
pub(crate) mod feed;
pub(crate) mod jobs;
pub(crate) mod maintenance;
pub(crate) mod queues;
pub(crate) mod schedules;
pub(crate) mod tenants;
pub(crate) mod workflows;
