//! [`Store`] for [`SqliteStore`]: every operation is one `BEGIN IMMEDIATE`
//! transaction on the writer connection (or one statement on a read
//! connection), with few statements each; lists of ids travel as one JSON
//! array through `json_each` instead of one statement per row.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::OnceLock;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};
use tether_core::keys::OPERATOR_KEY_NAME;
use tether_core::lifecycle::{self, FailOutcome, Report};
use tether_core::schedule::{
    Fire, FireOutcome, Overlap, RunOutcome, Schedule, ScheduleRun, ScheduleSpec,
};
use tether_core::{ApiKeyInfo, OperatorKeySetup, Tenant, DEFAULT_TENANT};
use tether_core::{
    BulkReplayed, ClaimRequest, ClaimedJob, Completion, Enqueued, Error, EventCursor, EventKind,
    EventPage, Failure, Heartbeat, HeartbeatAck, Job, JobFilter, JobPage, JobState, Lease,
    LeaseToken, NewJobRef, QueueConfig, QueueConfigPatch, QueueStats, ReapReport, ReplayFilter,
    Result, RunAt, Store,
};
use uuid::Uuid;

use crate::rows::{self, Db};
use crate::SqliteStore;

/// A write transaction on the writer connection. Dropping it without commit
/// (an error, or the caller's future being dropped) makes sqlx queue a
/// ROLLBACK on the connection before it can be used again, so the writer is
/// never handed out inside a stale transaction.
type Tx = Transaction<'static, Sqlite>;

/// Rows per multi-row enqueue INSERT. A batch is cut into chunks of these
/// sizes, largest first (1 000 jobs: 31 × 32 + 1 × 8), all in the same
/// transaction, so it stays all-or-nothing. Each size is one prepared
/// statement, cached.
const INSERT_CHUNKS: [usize; 3] = [32, 8, 1];
/// Values bound per enqueued row (see `insert_jobs_sql`).
const ROW_PARAMS: usize = 16;
/// Page size of a listing that does not set one.
const DEFAULT_PAGE: u32 = 50;
/// Size of a bulk replay that does not set one.
const DEFAULT_REPLAY: u32 = 1_000;
/// `last_error` of a queued job that passed its `expires_at`.
const EXPIRED_ERROR: &str = "expired";

// ---------------------------------------------------------------------------
// Statements. Parameters are numbered (?1, ?2, ...) so that one value can be
// used several times.
// ---------------------------------------------------------------------------

/// Registers the queues of an enqueue batch (?2: JSON array of names).
const REGISTER_QUEUES: &str = concat!(
    "INSERT INTO tether_queues (tenant, name, paused, max_attempts, backoff_base_ms, ",
    "backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at) ",
    "SELECT ?1, q.value, 0, ?3, ?4, ?5, ?6, ",
    now_ms!(),
    ", ",
    now_ms!(),
    " FROM json_each(?2) AS q WHERE true ON CONFLICT (tenant, name) DO NOTHING"
);

/// How many queue rows tenant ?1 has.
const COUNT_QUEUES: &str = "SELECT count(*) FROM tether_queues WHERE tenant = ?1";

/// Whether queue ?2 of tenant ?1 has a row.
const QUEUE_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM tether_queues WHERE tenant = ?1 AND name = ?2)";

/// Queue rows that hold nothing, at most ?1 (all tenants): no job in any
/// state, not paused, every setting at its default (?2–?5). The write lock
/// of the transaction keeps an enqueue from slipping a job in between.
const PRUNE_EMPTY_QUEUES: &str = "DELETE FROM tether_queues WHERE (tenant, name) IN (\
     SELECT c.tenant, c.name FROM tether_queues AS c \
     WHERE c.paused = 0 AND c.max_attempts = ?2 AND c.backoff_base_ms = ?3 \
     AND c.backoff_cap_ms = ?4 AND c.default_lease_ttl_ms = ?5 \
     AND NOT EXISTS (SELECT 1 FROM tether_jobs AS j WHERE j.tenant = c.tenant AND j.queue = c.name) \
     LIMIT ?1)";

/// How many schedules tenant ?1 has.
const COUNT_SCHEDULES: &str = "SELECT count(*) FROM tether_schedules WHERE tenant = ?1";

/// Resumes a queue that has a row; a queue without one is not paused.
const RESUME: &str = concat!(
    "UPDATE tether_queues SET paused = 0, updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND name = ?2 AND paused = 1"
);

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

/// The multi-row INSERT of `rows` enqueued jobs. Its parameters, in order:
/// the tenant, the default attempts/backoff (for a queue without a row),
/// [`ROW_PARAMS`] values per row bound by `bind_entry` (ordinal, id, queue,
/// kind, payload, priority, run_at, delay, max_attempts, backoff base, cap,
/// timeout, idempotency key, unique key, tags, expires_at), and the tenant
/// again. They are anonymous `?` on purpose: for numbered or named ones,
/// sqlx looks each name up with `sqlite3_bind_parameter_name`, a linear scan,
/// which makes binding 500 values quadratic.
///
/// Rows are inserted in batch order, so that of two entries with the same
/// key the first wins. Entries that hit the idempotency or active-unique
/// index are skipped by `ON CONFLICT DO NOTHING` and resolved afterwards.
/// Unset attempts/backoff come from the queue row. (`WHERE true` is SQLite's
/// required disambiguation of INSERT … SELECT … ON CONFLICT.) Values are
/// bound, not packed into JSON: a payload is stored exactly as serde_json
/// wrote it, without SQLite escaping and unescaping it.
fn insert_jobs_sql(rows: usize) -> &'static str {
    static SQL: [OnceLock<String>; INSERT_CHUNKS.len()] =
        [const { OnceLock::new() }; INSERT_CHUNKS.len()];
    let slot = INSERT_CHUNKS
        .iter()
        .position(|&n| n == rows)
        .expect("enqueue chunks come from INSERT_CHUNKS");
    SQL[slot].get_or_init(|| {
        let mut sql = String::from(concat!(
            "INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, priority, ",
            "attempt, max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, ",
            "updated_at, idempotency_key, unique_key, tags, expires_at, timeout_ms, ",
            "cancel_requested) ",
            "SELECT v.column2, ?, v.column3, v.column4, v.column5, 'queued', v.column6, 0, ",
            "COALESCE(v.column9, q.max_attempts, ?), ",
            "COALESCE(v.column10, q.backoff_base_ms, ?), ",
            "COALESCE(v.column11, q.backoff_cap_ms, ?), ",
            "COALESCE(v.column7, ",
            now_ms!(),
            " + COALESCE(v.column8, 0)), ",
            now_ms!(),
            ", ",
            now_ms!(),
            ", v.column13, v.column14, v.column15, v.column16, v.column12, 0 FROM (VALUES "
        ));
        let row = format!("({})", vec!["?"; ROW_PARAMS].join(", "));
        sql.push_str(&vec![row; rows].join(", "));
        sql.push_str(concat!(
            ") AS v LEFT JOIN tether_queues AS q ON q.tenant = ? AND q.name = v.column3 ",
            "WHERE true ORDER BY v.column1 ON CONFLICT DO NOTHING RETURNING ",
            job_cols!()
        ));
        sql
    })
}

/// `enqueued` events of the jobs just created (?1: JSON array of ids).
const ENQUEUED_EVENTS: &str = events_of_ids!("created_at", "enqueued", "NULL", "NULL");

/// The candidates for each entry that was not inserted (?2: JSON array of
/// `{idx, ik, uk}`): the job holding its idempotency key (any state) and the
/// active job holding its unique key. Which one applies is decided in Rust
/// (see `enqueue`), because it depends on where the entry sits in the batch.
const DUPLICATE_CANDIDATES: &str = "SELECT e.value ->> 'idx' AS idx, \
     (SELECT k.id FROM tether_jobs AS k \
      WHERE k.tenant = ?1 AND k.idempotency_key = e.value ->> 'ik') AS ik_id, \
     (SELECT u.id FROM tether_jobs AS u WHERE u.tenant = ?1 AND u.unique_key = e.value ->> 'uk' \
      AND u.state IN ('queued', 'running')) AS uk_id \
     FROM json_each(?2) AS e";

/// Jobs by id (?1: JSON array of ids).
const SELECT_JOBS: &str = concat!(
    "SELECT ",
    job_cols!(),
    " FROM tether_jobs WHERE id IN (SELECT value FROM json_each(?1))"
);

/// The claim, in one statement: pick up to ?5 ready jobs in claim order from
/// an unpaused queue and lease each with its own fresh token. The lease TTL
/// is the request's (?3), else the queue's, else ?6.
const CLAIM: &str = concat!(
    "UPDATE tether_jobs SET state = 'running', attempt = attempt + 1, lease_token = ",
    new_token!(),
    ", lease_ttl_ms = COALESCE(?3, (SELECT default_lease_ttl_ms FROM tether_queues ",
    "WHERE tenant = ?1 AND name = ?2), ?6), ",
    "lease_expires_at = ",
    now_ms!(),
    " + COALESCE(?3, (SELECT default_lease_ttl_ms FROM tether_queues ",
    "WHERE tenant = ?1 AND name = ?2), ?6), ",
    "heartbeat_at = ",
    now_ms!(),
    ", started_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    ", worker_id = ?4, progress = NULL ",
    "WHERE id IN (SELECT id FROM tether_jobs ",
    "WHERE tenant = ?1 AND queue = ?2 AND state = 'queued' AND run_at <= ",
    now_ms!(),
    " AND (expires_at IS NULL OR expires_at > ",
    now_ms!(),
    ") AND NOT EXISTS (SELECT 1 FROM tether_queues WHERE tenant = ?1 AND name = ?2 AND paused = 1) ",
    "ORDER BY priority DESC, run_at, id LIMIT ?5) ",
    "RETURNING ",
    job_cols!()
);

/// The succeeded jobs among ?2 (a JSON array of ids) of tenant ?1, with the
/// token that completed each.
const SUCCEEDED_TOKENS: &str = "SELECT id, lease_token FROM tether_jobs \
     WHERE tenant = ?1 AND state = 'succeeded' AND id IN (SELECT value FROM json_each(?2))";

/// Whether a claim could find anything: a ready job in the queue (?1 tenant,
/// ?2 queue). Read on a reader connection, without the write lock.
const ANY_READY: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM tether_jobs ",
    "WHERE tenant = ?1 AND queue = ?2 AND state = 'queued' AND run_at <= ",
    now_ms!(),
    " AND (expires_at IS NULL OR expires_at > ",
    now_ms!(),
    "))"
);

/// `claimed` events of the jobs just claimed (?1: JSON array of ids).
const CLAIMED_EVENTS: &str = events_of_ids!("started_at", "claimed", "worker_id", "NULL");

/// The fence every worker operation matches on.
macro_rules! fenced {
    () => {
        " WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3 AND state = 'running' "
    };
}

/// Extends a lease by the given TTL (?4), else the claim's.
const HEARTBEAT: &str = concat!(
    "UPDATE tether_jobs SET lease_expires_at = ",
    now_ms!(),
    " + COALESCE(?4, lease_ttl_ms, ?6), heartbeat_at = ",
    now_ms!(),
    ", progress = COALESCE(?5, progress), updated_at = ",
    now_ms!(),
    fenced!(),
    "RETURNING lease_expires_at, cancel_requested"
);

const COMPLETE: &str = concat!(
    "UPDATE tether_jobs SET state = 'succeeded', result = ?4, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    // The token stays until the next claim: a repeated report is told by it.
    ", lease_expires_at = NULL",
    fenced!(),
    "RETURNING ",
    job_cols!()
);

/// Completes a batch (?2: flat JSON array `[id, token, result, ...]`) in one
/// statement. The unary `+` keeps SQLite from driving the join from the
/// (tenant, state) index, which would scan every running job of the tenant
/// once per item: the plan walks the batch and looks each job up by primary
/// key.
const COMPLETE_MANY: &str = concat!(
    "UPDATE tether_jobs SET state = 'succeeded', result = c.r, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    ", lease_expires_at = NULL FROM (",
    unpack!("?2", "3", ["0" => "id", "1" => "t", "2" => "r"]),
    ") AS c WHERE tether_jobs.id = c.id AND +tether_jobs.tenant = ?1 ",
    "AND tether_jobs.lease_token = c.t AND +tether_jobs.state = 'running' ",
    "RETURNING id"
);

/// `succeeded` events of the jobs just completed (?1: JSON array of ids).
const SUCCEEDED_EVENTS: &str = events_of_ids!("finished_at", "succeeded", "worker_id", "NULL");

/// What `fail` needs to route the failure, read under the write lock.
const FAIL_READ: &str = concat!(
    "SELECT attempt, max_attempts, cancel_requested, backoff_base_ms, backoff_cap_ms ",
    "FROM tether_jobs",
    fenced!()
);

/// Applies a routed failure: ?2 the new state, ?4 the retry delay (NULL for
/// a terminal outcome).
const FAIL_WRITE: &str = concat!(
    "UPDATE tether_jobs SET state = ?2, last_error = ?3, ",
    "run_at = CASE WHEN ?4 IS NULL THEN run_at ELSE ",
    now_ms!(),
    " + ?4 END, ",
    "finished_at = CASE WHEN ?2 = 'queued' THEN NULL ELSE ",
    now_ms!(),
    " END, ",
    "lease_expires_at = NULL, updated_at = ",
    now_ms!(),
    " WHERE id = ?1 RETURNING ",
    job_cols!()
);

/// "Not now": back to `queued` after ?4 ms with the attempt given back, or
/// `cancelled` if cancellation was requested meanwhile (the attempt is then
/// kept: it was spent, and the job will not run again).
const SNOOZE: &str = concat!(
    "UPDATE tether_jobs SET ",
    "state = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END, ",
    "attempt = CASE WHEN cancel_requested = 1 THEN attempt ELSE attempt - 1 END, ",
    "run_at = CASE WHEN cancel_requested = 1 THEN run_at ELSE ",
    now_ms!(),
    " + ?4 END, ",
    "finished_at = CASE WHEN cancel_requested = 1 THEN ",
    now_ms!(),
    " ELSE NULL END, ",
    "lease_expires_at = NULL, updated_at = ",
    now_ms!(),
    fenced!(),
    "RETURNING ",
    job_cols!()
);

/// The job (?2 of tenant ?1) if the token ?3 ended its last attempt and it
/// stands in one of the states ?4 (a JSON array): a repeated report.
const REPEATED_REPORT: &str = concat!(
    "SELECT ",
    job_cols!(),
    " FROM tether_jobs WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3 ",
    "AND state IN (SELECT value FROM json_each(?4))"
);

const SELECT_JOB: &str = concat!(
    "SELECT ",
    job_cols!(),
    " FROM tether_jobs WHERE tenant = ?1 AND id = ?2"
);

const CANCEL_QUEUED: &str = concat!(
    "UPDATE tether_jobs SET state = 'cancelled', finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE id = ?1 RETURNING ",
    job_cols!()
);

const REQUEST_CANCEL: &str = concat!(
    "UPDATE tether_jobs SET cancel_requested = 1, updated_at = ",
    now_ms!(),
    " WHERE id = ?1 RETURNING ",
    job_cols!()
);

/// The active job holding a unique key, other than ?3.
const ACTIVE_HOLDER: &str = "SELECT id FROM tether_jobs WHERE tenant = ?1 AND unique_key = ?2 \
     AND state IN ('queued', 'running') AND id <> ?3 LIMIT 1";

/// The SET clause of a replay: a fresh attempt budget, due now, and the
/// `expires_at` bound as `$expires` (NULL clears it, or an expired job would
/// expire again at once).
macro_rules! replay_set {
    ($expires:literal) => {
        concat!(
            "UPDATE tether_jobs SET state = 'queued', attempt = 0, run_at = ",
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

/// Replays job ?1 with ?2 as its new `expires_at`.
const REPLAY: &str = concat!(replay_set!("?2"), "WHERE id = ?1 RETURNING ", job_cols!());

/// The candidates of a bulk replay (the statement it starts with, also run
/// alone to answer how far the round got): the first ?5 jobs matching the
/// filter with an id above the cursor ?6 (NULL: from the start).
macro_rules! replay_candidates {
    () => {
        concat!(
            "SELECT id, unique_key FROM tether_jobs ",
            "WHERE tenant = ?1 AND queue = ?2 AND state = ?3 AND (?4 IS NULL OR kind = ?4) ",
            "AND (?6 IS NULL OR id > ?6) ORDER BY id LIMIT ?5"
        )
    };
}

/// How many candidates a bulk replay has and the greatest id among them
/// (?1–?6 as in [`REPLAY_MANY`]), read under the same write lock first.
const REPLAY_SCAN: &str = concat!(
    "SELECT count(*) AS scanned, max(id) AS last FROM (",
    replay_candidates!(),
    ")"
);

/// Bulk replay: the oldest ?5 jobs matching the filter after the cursor ?6
/// are the candidates (as on PostgreSQL, the limit bounds the candidates,
/// not the jobs replayed); ?7 is their new `expires_at`. A candidate is skipped when its unique key is held by an
/// active job, or by an older candidate (replaying both would break the
/// active-unique index and abort the whole statement).
const REPLAY_MANY: &str = concat!(
    "WITH c AS MATERIALIZED (",
    replay_candidates!(),
    ") ",
    replay_set!("?7"),
    "WHERE id IN (SELECT c.id FROM c WHERE c.unique_key IS NULL OR (",
    "NOT EXISTS (SELECT 1 FROM tether_jobs AS a WHERE a.tenant = ?1 ",
    "AND a.unique_key = c.unique_key AND a.state IN ('queued', 'running')) ",
    "AND c.id = (SELECT min(o.id) FROM c AS o WHERE o.unique_key = c.unique_key))) ",
    "RETURNING id"
);

/// `replayed` events (?1: JSON array of ids).
const REPLAYED_EVENTS: &str = events_of_ids!("updated_at", "replayed", "NULL", "NULL");

/// Records that a stale token tried operation ?3 on a job of the tenant;
/// inserts nothing when the job does not exist there.
const LEASE_LOST: &str = concat!(
    "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
    "SELECT id, tenant, ",
    now_ms!(),
    ", 'lease_lost', attempt, NULL, ?3 FROM tether_jobs WHERE tenant = ?1 AND id = ?2"
);

/// `lease_lost` events for the items of a batch that did not complete
/// (?2: JSON array of ids); returns the ids that exist in the tenant.
const LEASE_LOST_MANY: &str = concat!(
    "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
    "SELECT t.id, t.tenant, ",
    now_ms!(),
    ", 'lease_lost', t.attempt, NULL, ?3 ",
    "FROM json_each(?2) AS c JOIN tether_jobs AS t ON t.id = c.value AND t.tenant = ?1 ",
    "RETURNING job_id"
);

const INSERT_EVENT: &str = "INSERT INTO tether_job_events \
     (job_id, tenant, at, event, attempt, worker_id, detail) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// One page of a job's history: ?3 the cursor (the `seq` of the previous
/// page's last event, NULL from the start), ?4 the page size. A job without
/// events past the cursor still gives one row, with NULL event columns, so
/// that "no such job" is told apart in the same snapshot.
const EVENTS: &str = "SELECT e.at AS at, e.event AS event, e.attempt AS attempt, \
     e.worker_id AS worker_id, e.detail AS detail, e.seq AS seq \
     FROM tether_jobs AS j LEFT JOIN tether_job_events AS e ON e.job_id = j.id \
     AND (?3 IS NULL OR e.seq > ?3) \
     WHERE j.tenant = ?1 AND j.id = ?2 ORDER BY e.seq LIMIT ?4";

/// Stats of one queue, whether or not it has a row.
const QUEUE_STATS: &str = concat!(
    "SELECT ?2 AS name, ",
    stats_cols!("?1", "?2"),
    " FROM (SELECT ",
    now_ms!(),
    " AS now) AS s LEFT JOIN tether_queues AS c ON c.tenant = ?1 AND c.name = ?2"
);

/// Stats of every queue of the tenant that has a row, by name.
const LIST_QUEUES: &str = concat!(
    "SELECT c.name AS name, ",
    stats_cols!("c.tenant", "c.name"),
    " FROM (SELECT ",
    now_ms!(),
    " AS now) AS s JOIN tether_queues AS c ON c.tenant = ?1 ORDER BY c.name"
);

const SET_PAUSED: &str = concat!(
    "INSERT INTO tether_queues (tenant, name, paused, max_attempts, backoff_base_ms, ",
    "backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at) ",
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ",
    now_ms!(),
    ", ",
    now_ms!(),
    ") ON CONFLICT (tenant, name) DO UPDATE SET paused = excluded.paused, ",
    "updated_at = excluded.updated_at"
);

/// Upserts queue settings: patch fields ?3–?6 where set, else the current
/// value (or the default ?7–?10 for a new row).
const CONFIGURE_QUEUE: &str = concat!(
    "INSERT INTO tether_queues (tenant, name, paused, max_attempts, backoff_base_ms, ",
    "backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at) ",
    "VALUES (?1, ?2, 0, COALESCE(?3, ?7), COALESCE(?4, ?8), COALESCE(?5, ?9), ",
    "COALESCE(?6, ?10), ",
    now_ms!(),
    ", ",
    now_ms!(),
    ") ON CONFLICT (tenant, name) DO UPDATE SET ",
    "max_attempts = COALESCE(?3, max_attempts), ",
    "backoff_base_ms = COALESCE(?4, backoff_base_ms), ",
    "backoff_cap_ms = COALESCE(?5, backoff_cap_ms), ",
    "default_lease_ttl_ms = COALESCE(?6, default_lease_ttl_ms), ",
    "updated_at = excluded.updated_at"
);

/// The reaper, one statement for up to ?1 lapsed leases (all tenants). The
/// new state is decided per row in one CASE, cancel first, then an exhausted
/// budget, so an exhausted job can never slip back to `queued` (invariants
/// 4 and 5). SQLite evaluates every SET expression against the old row.
const REAP: &str = concat!(
    "UPDATE tether_jobs SET ",
    "state = CASE WHEN cancel_requested = 1 THEN 'cancelled' ",
    "WHEN attempt >= max_attempts THEN 'failed' ELSE 'queued' END, ",
    "run_at = CASE WHEN cancel_requested = 0 AND attempt < max_attempts THEN ",
    now_ms!(),
    " ELSE run_at END, ",
    "finished_at = CASE WHEN cancel_requested = 1 OR attempt >= max_attempts THEN ",
    now_ms!(),
    " ELSE NULL END, ",
    "last_error = 'lease expired: worker ' || COALESCE(worker_id, '?') ",
    "|| ' stopped heartbeating during attempt ' || attempt || ' of ' || max_attempts, ",
    "lease_token = NULL, lease_expires_at = NULL, updated_at = ",
    now_ms!(),
    " WHERE id IN (SELECT id FROM tether_jobs WHERE state = 'running' AND lease_expires_at < ",
    now_ms!(),
    " ORDER BY lease_expires_at LIMIT ?1) ",
    "RETURNING id, state"
);

/// `lease_expired` events, detail = the new state (?1: JSON array of ids).
const LEASE_EXPIRED_EVENTS: &str =
    events_of_ids!("updated_at", "lease_expired", "worker_id", "state");

const EXPIRE: &str = concat!(
    "UPDATE tether_jobs SET state = 'failed', last_error = ?2, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE id IN (SELECT id FROM tether_jobs WHERE state = 'queued' ",
    "AND expires_at IS NOT NULL AND expires_at < ",
    now_ms!(),
    " ORDER BY expires_at LIMIT ?1) RETURNING id"
);

/// `expired` events, detail = the instant missed, as ISO 8601 UTC with
/// milliseconds (?1: JSON array of ids).
const EXPIRED_EVENTS: &str = events_of_ids!(
    "updated_at",
    "expired",
    "NULL",
    "'not claimed before ' || strftime('%Y-%m-%dT%H:%M:%fZ', expires_at / 1000.0, 'unixepoch')"
);

/// Up to ?2 jobs that finished at least ?1 ms ago, oldest first.
const PRUNE: &str = concat!(
    "DELETE FROM tether_jobs WHERE id IN (SELECT id FROM tether_jobs ",
    "WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at <= ",
    now_ms!(),
    " - ?1 ORDER BY finished_at LIMIT ?2) RETURNING id"
);

const PRUNE_EVENTS: &str =
    "DELETE FROM tether_job_events WHERE job_id IN (SELECT value FROM json_each(?1))";

/// Takes a named lease if it is free or lapsed, in one statement: the
/// upsert's WHERE leaves a live holder's row alone (and returns nothing).
/// Creates a tenant unless the name is taken: `?1` name. No row: taken.
const CREATE_TENANT: &str = concat!(
    "INSERT INTO tether_tenants (id, name, created_at) VALUES (",
    new_token!(),
    ", ?1, ",
    now_ms!(),
    ") ON CONFLICT (name) DO NOTHING RETURNING id, name, created_at"
);

const TENANT_BY_NAME: &str = "SELECT id, name, created_at FROM tether_tenants WHERE name = ?1";

const LIST_TENANTS: &str = "SELECT id, name, created_at FROM tether_tenants ORDER BY name";

const GET_TENANT: &str = "SELECT id, name, created_at FROM tether_tenants WHERE id = ?1";

/// `?1` key id, `?2` tenant id, `?3` name, `?4` hash, `?5` admin, `?6` the
/// tenant's name (read in the same transaction), echoed back.
const INSERT_API_KEY: &str = concat!(
    "INSERT INTO tether_api_keys (id, tenant_id, name, hash, admin, created_at) ",
    "VALUES (?1, ?2, ?3, ?4, ?5, ",
    now_ms!(),
    ") RETURNING id, tenant_id, name, admin, created_at, last_used_at, revoked_at, ",
    "?6 AS tenant"
);

const FIND_API_KEY: &str = "SELECT k.id, k.tenant_id, t.name AS tenant, k.name, k.admin, \
     k.created_at, k.last_used_at, k.revoked_at, k.hash \
     FROM tether_api_keys k JOIN tether_tenants t ON t.id = k.tenant_id WHERE k.id = ?1";

/// Revokes `?1`; a second revocation keeps the first instant.
const REVOKE_API_KEY: &str = concat!(
    "UPDATE tether_api_keys SET revoked_at = COALESCE(revoked_at, ",
    now_ms!(),
    ") WHERE id = ?1"
);

/// A tenant's keys; one row with a NULL key id for a tenant with none, no
/// row for no tenant.
const LIST_API_KEYS: &str = "SELECT k.id, t.id AS tenant_id, t.name AS tenant, k.name, k.admin, \
     k.created_at, k.last_used_at, k.revoked_at \
     FROM tether_tenants t LEFT JOIN tether_api_keys k ON k.tenant_id = t.id \
     WHERE t.id = ?1 ORDER BY k.created_at, k.id";

/// Records a use of key `?1` unless it is revoked or was used less than
/// `?2` ms ago (database clock): at most one write per key and interval.
const TOUCH_API_KEY: &str = concat!(
    "UPDATE tether_api_keys SET last_used_at = ",
    now_ms!(),
    " WHERE id = ?1 AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at <= ",
    now_ms!(),
    " - ?2)"
);

/// Stores operator key `?1` in tenant `?2` with name `?3`, hash `?4`, unless
/// the id exists.
const INSERT_OPERATOR_KEY: &str = concat!(
    "INSERT INTO tether_api_keys (id, tenant_id, name, hash, admin, operator, created_at) ",
    "VALUES (?1, ?2, ?3, ?4, 1, 1, ",
    now_ms!(),
    ") ON CONFLICT (id) DO NOTHING"
);

/// Revokes every unrevoked operator key but `?1`.
const REVOKE_OTHER_OPERATOR_KEYS: &str = concat!(
    "UPDATE tether_api_keys SET revoked_at = ",
    now_ms!(),
    " WHERE operator = 1 AND revoked_at IS NULL AND id <> ?1 RETURNING id"
);

/// Stores the server-secret check value `?1` unless one is stored.
const INSERT_SERVER_SECRET_CHECK: &str = concat!(
    "INSERT INTO tether_server_secret (id, check_hmac, created_at) VALUES (1, ?1, ",
    now_ms!(),
    ") ON CONFLICT (id) DO NOTHING"
);

const SERVER_SECRET_CHECK: &str = "SELECT check_hmac FROM tether_server_secret WHERE id = 1";

const ACQUIRE_LEASE: &str = concat!(
    "INSERT INTO tether_leases (name, holder, token, acquired_at, expires_at) VALUES (?1, ?2, ",
    new_token!(),
    ", ",
    now_ms!(),
    ", ",
    now_ms!(),
    " + ?3) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = excluded.token, ",
    "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at ",
    "WHERE tether_leases.expires_at < excluded.acquired_at ",
    "RETURNING name, holder, token, expires_at"
);

/// Renews with the token, lapsed or not: only a new holder fences the old.
const RENEW_LEASE: &str = concat!(
    "UPDATE tether_leases SET expires_at = ",
    now_ms!(),
    " + ?3 WHERE name = ?1 AND token = ?2 RETURNING name, holder, token, expires_at"
);

const RELEASE_LEASE: &str = "DELETE FROM tether_leases WHERE name = ?1 AND token = ?2";

/// Creates a schedule unless the tenant already uses its name (the UNIQUE
/// (tenant, name) constraint decides; no row comes back then). ?1 tenant,
/// ?2 id, ?3–?11 the definition (see `bind_spec`).
const CREATE_SCHEDULE: &str = concat!(
    "INSERT INTO tether_schedules (tenant, id, name, cron, timezone, queue, kind, payload, ",
    "enabled, overlap, next_run_at, created_at, updated_at) ",
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ",
    now_ms!(),
    ", ",
    now_ms!(),
    ") ON CONFLICT (tenant, name) DO NOTHING RETURNING ",
    schedule_cols!()
);

/// Replaces a schedule's definition and `next_run_at` (same parameters as
/// [`CREATE_SCHEDULE`]); `last_*` and the runs stay.
const UPDATE_SCHEDULE: &str = concat!(
    "UPDATE tether_schedules SET name = ?3, cron = ?4, timezone = ?5, queue = ?6, kind = ?7, ",
    "payload = ?8, enabled = ?9, overlap = ?10, next_run_at = ?11, updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND id = ?2 RETURNING ",
    schedule_cols!()
);

const SELECT_SCHEDULE: &str = concat!(
    "SELECT ",
    schedule_cols!(),
    " FROM tether_schedules WHERE tenant = ?1 AND id = ?2"
);

const LIST_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_cols!(),
    " FROM tether_schedules WHERE tenant = ?1 ORDER BY name"
);

const DELETE_SCHEDULE: &str = "DELETE FROM tether_schedules WHERE tenant = ?1 AND id = ?2";

/// The runs go with their schedule by `ON DELETE CASCADE` (every connection
/// enables foreign keys); deleting them by hand as well keeps that true on a
/// connection that does not.
const DELETE_SCHEDULE_RUNS: &str = "DELETE FROM tether_schedule_runs WHERE schedule_id = ?1";

/// A schedule's newest ?3 runs, in one statement so that "does the tenant
/// have it" and its runs come from the same snapshot: one row with NULL run
/// columns for a schedule without runs, no row for no schedule.
pub(crate) const SCHEDULE_RUNS: &str =
    "SELECT r.id AS run_id, r.fire_at AS fire_at, r.job_id AS job_id, \
     r.outcome AS outcome \
     FROM tether_schedules AS s LEFT JOIN tether_schedule_runs AS r ON r.schedule_id = s.id \
     WHERE s.tenant = ?1 AND s.id = ?2 ORDER BY r.fire_at DESC, r.id DESC LIMIT ?3";

/// The database's clock.
const DB_NOW: &str = concat!("SELECT ", now_ms!());

/// Up to ?2 schedules of every tenant due by ?1 (the database's clock, read
/// just before), earliest first: a walk of the partial index that stops at
/// the batch. (`enabled = 1 AND next_run_at IS NOT NULL` spelled as in the
/// index, which SQLite requires to use it. The clock is bound rather than
/// computed in the statement because SQLite's `'now'` is fixed for one
/// `sqlite3_step`, i.e. one row of a SELECT, not for the whole statement.)
pub(crate) const DUE_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_cols!(),
    " FROM tether_schedules WHERE enabled = 1 AND next_run_at IS NOT NULL ",
    "AND next_run_at <= ?1 ORDER BY next_run_at, id LIMIT ?2"
);

pub(crate) const NEXT_SCHEDULE_DUE: &str = concat!(
    "SELECT ",
    now_ms!(),
    " AS now, (SELECT min(next_run_at) FROM tether_schedules ",
    "WHERE enabled = 1 AND next_run_at IS NOT NULL) AS next"
);

/// The compare-and-set of a fire: moves the timetable from the `next_run_at`
/// the scheduler read (?3) to ?5 and stamps the run (?4), only if it is still
/// the stored one on an enabled schedule. Returns the previous run's job
/// (`last_job_id` is not changed here); no row: another node, or a patch,
/// moved it first.
const FIRE_SCHEDULE: &str = concat!(
    "UPDATE tether_schedules SET next_run_at = ?5, last_run_at = ?4, updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND id = ?2 AND enabled = 1 AND next_run_at = ?3 ",
    "RETURNING last_job_id"
);

/// A triggered run: stamps `last_run_at` with now and returns the stamp, so
/// that the run recorded with it carries the very same instant.
const TRIGGER_SCHEDULE: &str = concat!(
    "UPDATE tether_schedules SET last_run_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND id = ?2 RETURNING last_run_at"
);

const SET_LAST_JOB: &str = "UPDATE tether_schedules SET last_job_id = ?2 WHERE id = ?1";

/// Whether job ?2 of tenant ?1 is unfinished (overlap `skip`).
const JOB_ACTIVE: &str = "SELECT EXISTS (SELECT 1 FROM tether_jobs WHERE tenant = ?1 AND id = ?2 \
     AND state IN ('queued', 'running'))";

/// ?1 schedule, ?2 tenant, ?3 fire_at, ?4 job (NULL when skipped), ?5 outcome.
const INSERT_SCHEDULE_RUN: &str = concat!(
    "INSERT INTO tether_schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, ",
    "recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ",
    now_ms!(),
    ")"
);

/// Up to ?2 runs recorded at least ?1 ms ago, oldest first (`<=` like the
/// pruning of jobs, so a retention of 0 takes every run).
pub(crate) const PRUNE_SCHEDULE_RUNS: &str = concat!(
    "DELETE FROM tether_schedule_runs WHERE id IN (SELECT id FROM tether_schedule_runs ",
    "WHERE recorded_at <= ",
    now_ms!(),
    " - ?1 ORDER BY recorded_at LIMIT ?2)"
);

// ---------------------------------------------------------------------------

/// A JSON array of strings (ids, queue names) for `json_each`. Written by
/// hand because it is on the hot path of every claim and completion, and
/// these strings almost never need escaping.
fn id_array<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
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

fn to_json_text(value: &Value) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Storage(Box::new(e)))
}

/// Binds one enqueued row's [`ROW_PARAMS`] values (see `insert_jobs_sql`).
fn bind_entry<'q>(
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    ordinal: usize,
    entry: &'q NewJobRef<'q>,
) -> Result<sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>> {
    let job = entry.job;
    let (run_at, delay) = match job.run_at {
        RunAt::Now => (None, None),
        RunAt::At(at) => (Some(at.timestamp_millis()), None),
        RunAt::Delay(ms) => (None, Some(ms)),
    };
    let tags = serde_json::to_string(&job.tags).map_err(|e| Error::Storage(Box::new(e)))?;
    Ok(query
        .bind(ordinal as i64)
        .bind(entry.id.to_string())
        .bind(job.queue.as_str())
        .bind(job.kind.as_str())
        .bind(to_json_text(&job.payload)?)
        .bind(job.priority)
        .bind(run_at)
        .bind(delay)
        .bind(job.max_attempts)
        .bind(job.backoff.map(|b| b.base_ms))
        .bind(job.backoff.map(|b| b.cap_ms))
        .bind(job.timeout_ms)
        .bind(job.idempotency_key.as_deref())
        .bind(job.unique_key.as_deref())
        .bind(tags)
        .bind(job.expires_at.map(|at| at.timestamp_millis())))
}

/// Inserts one history event for `job` at its `updated_at` (the instant of
/// the transition that was just written).
async fn record(
    conn: &mut SqliteConnection,
    job: &Job,
    event: EventKind,
    worker_id: Option<&str>,
    detail: Option<&str>,
) -> Result<()> {
    sqlx::query(INSERT_EVENT)
        .bind(job.id.to_string())
        .bind(&job.tenant)
        .bind(job.updated_at.timestamp_millis())
        .bind(event.as_str())
        .bind(job.attempt)
        .bind(worker_id)
        .bind(detail)
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

/// The fence did not match: records `lease_lost` (detail = the operation) if
/// the job exists in the tenant and returns the error to report. The caller
/// commits (so the event is kept) and returns the error.
async fn lease_lost(
    conn: &mut SqliteConnection,
    tenant: &str,
    id: Uuid,
    op: &str,
) -> Result<Error> {
    let done = sqlx::query(LEASE_LOST)
        .bind(tenant)
        .bind(id.to_string())
        .bind(op)
        .execute(conn)
        .await
        .db()?;
    Ok(if done.rows_affected() > 0 {
        Error::LeaseLost(id)
    } else {
        Error::JobNotFound(id)
    })
}

/// Ends a report whose fence matched nothing: a repeat of the report that
/// ended the attempt (same token, the job in a state it leads to; see
/// [`Report`]) is answered with the job as it stands and changes nothing;
/// anything else commits the `lease_lost` record and is refused.
async fn settle_unfenced(
    mut tx: Tx,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    report: Report,
) -> Result<Job> {
    let repeated = sqlx::query(REPEATED_REPORT)
        .bind(tenant)
        .bind(id.to_string())
        .bind(token.0.to_string())
        .bind(serde_json::to_string(&report.outcome_names()).expect("names serialise"))
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    if let Some(row) = repeated {
        SqliteStore::finish_unchanged(tx).await?;
        return rows::job(&row);
    }
    let err = lease_lost(&mut tx, tenant, id, report.as_str()).await?;
    tx.commit().await.db()?;
    Err(err)
}

/// Runs a "select the job, then decide" operation's first step.
async fn fetch_job(conn: &mut SqliteConnection, tenant: &str, id: Uuid) -> Result<Job> {
    let row = sqlx::query(SELECT_JOB)
        .bind(tenant)
        .bind(id.to_string())
        .fetch_optional(conn)
        .await
        .db()?;
    match row {
        Some(row) => rows::job(&row),
        None => Err(Error::JobNotFound(id)),
    }
}

/// Enqueues on an open write transaction: the whole of [`Store::enqueue`]
/// except the commit and the wake-up hints, so that a schedule can record a
/// run and enqueue its job atomically. The caller commits, then sends the
/// hints (see [`SqliteStore::notify_created`]).
///
/// New queue rows are refused (with the whole enqueue) when they would give
/// the tenant more than `max_queues`; `None` (a schedule's run, bounded by
/// the schedule limit instead) registers without limit.
async fn enqueue_in(
    tx: &mut Tx,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    max_queues: Option<u32>,
) -> Result<Vec<Enqueued>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let conn: &mut SqliteConnection = tx;
    let defaults = QueueConfig::default();
    let queues: BTreeSet<&str> = jobs.iter().map(|r| r.job.queue.as_str()).collect();
    let queues = id_array(queues);

    // Register the queues first so the INSERT can read their defaults.
    let registered = sqlx::query(REGISTER_QUEUES)
        .bind(tenant)
        .bind(queues)
        .bind(defaults.max_attempts)
        .bind(defaults.backoff.base_ms)
        .bind(defaults.backoff.cap_ms)
        .bind(defaults.default_lease_ttl_ms)
        .execute(&mut *conn)
        .await
        .db()?;
    // Counted only when a queue is new (never on the hot path), under the
    // write lock, so concurrent enqueues cannot pass the limit together;
    // the caller's transaction rolls the rows back with the error.
    if let Some(max) = max_queues {
        if registered.rows_affected() > 0 {
            check_queue_count(conn, tenant, max).await?;
        }
    }
    let mut created: HashMap<Uuid, Job> = HashMap::with_capacity(jobs.len());
    let mut next = 0;
    while next < jobs.len() {
        let rows = INSERT_CHUNKS
            .into_iter()
            .find(|&n| n <= jobs.len() - next)
            .unwrap_or(1);
        let mut query = sqlx::query(insert_jobs_sql(rows))
            .bind(tenant)
            .bind(defaults.max_attempts)
            .bind(defaults.backoff.base_ms)
            .bind(defaults.backoff.cap_ms);
        for (ordinal, entry) in jobs.iter().enumerate().skip(next).take(rows) {
            query = bind_entry(query, ordinal, entry)?;
        }
        let inserted = query.bind(tenant).fetch_all(&mut *conn).await.db()?;
        for row in &inserted {
            let job = rows::job(row)?;
            created.insert(job.id, job);
        }
        next += rows;
    }
    if !created.is_empty() {
        let ids: Vec<String> = created.keys().map(Uuid::to_string).collect();
        sqlx::query(ENQUEUED_EVENTS)
            .bind(id_array(ids.iter().map(String::as_str)))
            .execute(&mut *conn)
            .await
            .db()?;
    }

    // The entry that created each new job, to judge duplicates in batch
    // order.
    let created_by: HashMap<Uuid, usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, entry)| created.contains_key(&entry.id))
        .map(|(idx, entry)| (entry.id, idx))
        .collect();
    let mut out: Vec<Option<Enqueued>> = Vec::with_capacity(jobs.len());
    let mut duplicates = Vec::new();
    for (idx, entry) in jobs.iter().enumerate() {
        match created.remove(&entry.id) {
            Some(job) => out.push(Some(Enqueued { job, created: true })),
            None => {
                out.push(None);
                duplicates.push(json!({
                    "idx": idx,
                    "ik": entry.job.idempotency_key,
                    "uk": entry.job.unique_key,
                }));
            }
        }
    }
    if !duplicates.is_empty() {
        let candidates = sqlx::query(DUPLICATE_CANDIDATES)
            .bind(tenant)
            .bind(Value::Array(duplicates).to_string())
            .fetch_all(&mut *conn)
            .await
            .db()?;
        // Each entry resolves against the jobs that existed when its turn
        // came (the batch is inserted in order): a job this batch created
        // from a *later* entry does not count. The idempotency key wins
        // over the unique key.
        let mut resolved: Vec<(usize, Uuid)> = Vec::with_capacity(candidates.len());
        for row in &candidates {
            let idx: i64 = row.try_get("idx").db()?;
            let idx = usize::try_from(idx)
                .map_err(|_| rows::corrupt(format!("duplicate resolution index {idx}")))?;
            let existed_then = |id: Option<&str>| -> Result<Option<Uuid>> {
                let Some(id) = id else { return Ok(None) };
                let id = rows::uuid(id)?;
                Ok(match created_by.get(&id) {
                    Some(&creator) if creator > idx => None,
                    _ => Some(id),
                })
            };
            let by_idempotency = existed_then(row.try_get("ik_id").db()?)?;
            let found = match by_idempotency {
                Some(id) => Some(id),
                None => existed_then(row.try_get("uk_id").db()?)?,
            };
            if let Some(id) = found {
                resolved.push((idx, id));
            }
        }
        let ids: Vec<String> = resolved.iter().map(|(_, id)| id.to_string()).collect();
        let existing = sqlx::query(SELECT_JOBS)
            .bind(id_array(ids.iter().map(String::as_str)))
            .fetch_all(&mut *conn)
            .await
            .db()?;
        let existing: HashMap<Uuid, Job> = existing
            .iter()
            .map(|row| rows::job(row).map(|job| (job.id, job)))
            .collect::<Result<_>>()?;
        for (idx, id) in resolved {
            if let (Some(slot), Some(job)) = (out.get_mut(idx), existing.get(&id)) {
                *slot = Some(Enqueued {
                    job: job.clone(),
                    created: false,
                });
            }
        }
    }
    // Every entry must have an answer before anything is committed.
    let out = out
        .into_iter()
        .zip(jobs)
        .map(|(answer, entry)| {
            answer.ok_or_else(|| {
                rows::corrupt(format!(
                    "job {} was neither inserted nor matched an existing job",
                    entry.id
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(out)
}

/// Binds a schedule definition and its `next_run_at` as ?3–?11 (after the
/// tenant and the id).
fn bind_spec<'q>(
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    spec: &'q ScheduleSpec,
    next_run_at: Option<DateTime<Utc>>,
) -> Result<sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>> {
    Ok(query
        .bind(spec.name.as_str())
        .bind(spec.cron.as_str())
        .bind(spec.timezone.as_str())
        .bind(spec.queue.as_str())
        .bind(spec.kind.as_str())
        .bind(to_json_text(&spec.payload)?)
        .bind(spec.enabled)
        .bind(spec.overlap.as_str())
        .bind(next_run_at.map(|at| at.timestamp_millis())))
}

/// Records a run of a schedule (on the open transaction of the fire or
/// trigger), stamped `fire_at`.
async fn record_run(
    conn: &mut SqliteConnection,
    schedule_id: Uuid,
    tenant: &str,
    fire_at: i64,
    job_id: Option<Uuid>,
    outcome: RunOutcome,
) -> Result<()> {
    sqlx::query(INSERT_SCHEDULE_RUN)
        .bind(schedule_id.to_string())
        .bind(tenant)
        .bind(fire_at)
        .bind(job_id.map(|id| id.to_string()))
        .bind(outcome.as_str())
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

/// Enqueues a schedule's job on the open transaction and makes it the
/// schedule's `last_job_id`; an existing job with the same idempotency key
/// is the run's job. Returns the answer (the caller commits, then hints).
async fn enqueue_run(
    tx: &mut Tx,
    tenant: &str,
    schedule_id: Uuid,
    job: NewJobRef<'_>,
) -> Result<Enqueued> {
    let answer = enqueue_in(tx, tenant, std::slice::from_ref(&job), None)
        .await?
        .pop()
        .ok_or_else(|| rows::corrupt("an enqueue of one job gave no answer"))?;
    sqlx::query(SET_LAST_JOB)
        .bind(schedule_id.to_string())
        .bind(answer.job.id.to_string())
        .execute(&mut **tx)
        .await
        .db()?;
    Ok(answer)
}

/// Queue stats on any connection (the writer inside a transaction, or a
/// reader).
async fn queue_stats_on(
    conn: &mut SqliteConnection,
    tenant: &str,
    queue: &str,
) -> Result<QueueStats> {
    let row = sqlx::query(QUEUE_STATS)
        .bind(tenant)
        .bind(queue)
        .fetch_one(conn)
        .await
        .db()?;
    rows::stats(&row)
}

/// `LimitReached` if tenant has more than `max` queue rows (counted on the
/// open write transaction, after its inserts).
async fn check_queue_count(conn: &mut SqliteConnection, tenant: &str, max: u32) -> Result<()> {
    let n: i64 = sqlx::query_scalar(COUNT_QUEUES)
        .bind(tenant)
        .fetch_one(conn)
        .await
        .db()?;
    if n > i64::from(max) {
        return Err(Error::too_many_queues(max));
    }
    Ok(())
}

/// Before an operation that creates queue `queue`'s row if missing (on the
/// open write transaction): `LimitReached` if it is missing and the tenant
/// has `max` queue rows already.
async fn check_new_queue(
    conn: &mut SqliteConnection,
    tenant: &str,
    queue: &str,
    max: u32,
) -> Result<()> {
    let exists: bool = sqlx::query_scalar(QUEUE_EXISTS)
        .bind(tenant)
        .bind(queue)
        .fetch_one(&mut *conn)
        .await
        .db()?;
    if exists {
        return Ok(());
    }
    let n: i64 = sqlx::query_scalar(COUNT_QUEUES)
        .bind(tenant)
        .fetch_one(conn)
        .await
        .db()?;
    if n >= i64::from(max) {
        return Err(Error::too_many_queues(max));
    }
    Ok(())
}

impl SqliteStore {
    /// Starts a write transaction on the writer connection. `BEGIN IMMEDIATE`
    /// takes SQLite's write lock now, so the transaction cannot fail with
    /// SQLITE_BUSY later when it moves from reading to writing.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        self.writer.begin_with("BEGIN IMMEDIATE").await.db()
    }

    /// Sends the wake-up hints of an enqueue that was just committed: one per
    /// job it created (an existing job that was returned wakes nobody).
    fn notify_created(&self, tenant: &str, answers: &[Enqueued]) {
        self.wakeups.notify_created(tenant, answers);
    }

    /// Ends a transaction that changed nothing without the cost of a commit.
    async fn finish_unchanged(tx: Tx) -> Result<()> {
        tx.rollback().await.db()
    }
    /// Ends a bulk transition: records the history rows of the jobs it
    /// touched (`events_sql` takes their ids as a JSON array) and commits,
    /// or rolls back cheaply when it touched none. Returns how many.
    async fn finish_bulk(
        mut tx: Tx,
        touched: &[sqlx::sqlite::SqliteRow],
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

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn enqueue(
        &self,
        tenant: &str,
        jobs: &[NewJobRef<'_>],
        max_queues: u32,
    ) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
        let out = enqueue_in(&mut tx, tenant, jobs, Some(max_queues)).await?;
        tx.commit().await.db()?;
        self.notify_created(tenant, &out);
        Ok(out)
    }

    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        // Look before taking the single writer: an empty queue answers from
        // a reader, so many idle claimers (long-polls woken by a hint another
        // claimer already took) do not queue up every writer of the file.
        // A job that becomes ready just after the look is found by the next
        // claim: its enqueue sends a hint after its commit.
        let any_ready: bool = sqlx::query_scalar(ANY_READY)
            .bind(tenant)
            .bind(&req.queue)
            .fetch_one(&self.reader)
            .await
            .db()?;
        if !any_ready {
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
        let claimed_rows = sqlx::query(CLAIM)
            .bind(tenant)
            .bind(&req.queue)
            .bind(req.lease_ttl_ms)
            .bind(&req.worker_id)
            .bind(i64::from(req.limit))
            .bind(lifecycle::DEFAULT_LEASE_TTL_MS)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        if claimed_rows.is_empty() {
            Self::finish_unchanged(tx).await?;
            return Ok(Vec::new());
        }
        let ids = claimed_rows
            .iter()
            .map(|row| row.try_get::<&str, _>("id"))
            .collect::<std::result::Result<Vec<_>, _>>()
            .db()?;
        sqlx::query(CLAIMED_EVENTS)
            .bind(id_array(ids))
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        // Decoding (JSON payloads included) happens after the commit, so the
        // writer is not held for it. A row that cannot be decoded is then an
        // error although the claim stands; its lease lapses and the reaper
        // hands the job out again.
        let mut claimed = claimed_rows
            .iter()
            .map(|row| {
                Ok(ClaimedJob {
                    job: rows::job(row)?,
                    lease_token: rows::lease_token(row)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // RETURNING has no defined order; hand the jobs out in claim order.
        claimed.sort_by(|a, b| {
            b.job
                .priority
                .cmp(&a.job.priority)
                .then(a.job.run_at.cmp(&b.job.run_at))
                .then(a.job.id.cmp(&b.job.id))
        });
        Ok(claimed)
    }

    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        let progress = items
            .iter()
            .map(|hb| hb.progress.as_ref().map(to_json_text).transpose())
            .collect::<Result<Vec<_>>>()?;
        let mut tx = self.begin().await?;
        let mut answers = Vec::with_capacity(items.len());
        // Jobs whose `lease_lost` this batch recorded already, with the
        // answer: one event per job and batch, however often it is named.
        let mut lost: HashMap<Uuid, bool> = HashMap::new();
        for (hb, progress) in items.iter().zip(progress) {
            let row = sqlx::query(HEARTBEAT)
                .bind(tenant)
                .bind(hb.id.to_string())
                .bind(hb.lease_token.0.to_string())
                .bind(hb.lease_ttl_ms)
                .bind(progress)
                .bind(lifecycle::DEFAULT_LEASE_TTL_MS)
                .fetch_optional(&mut *tx)
                .await
                .db()?;
            answers.push(match row {
                Some(row) => Ok(HeartbeatAck {
                    lease_expires_at: rows::ts(row.try_get("lease_expires_at").db()?)?,
                    cancel_requested: row.try_get("cancel_requested").db()?,
                }),
                None => {
                    let exists = match lost.get(&hb.id) {
                        Some(&exists) => exists,
                        None => {
                            let err = lease_lost(&mut tx, tenant, hb.id, "heartbeat").await?;
                            let exists = matches!(err, Error::LeaseLost(_));
                            lost.insert(hb.id, exists);
                            exists
                        }
                    };
                    Err(if exists {
                        Error::LeaseLost(hb.id)
                    } else {
                        Error::JobNotFound(hb.id)
                    })
                }
            });
        }
        tx.commit().await.db()?;
        Ok(answers)
    }

    fn subscribe(&self, tenant: &str, queue: &str) -> tether_core::Wakeup {
        self.wakeups.subscribe(tenant, queue)
    }

    async fn complete(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        result: Option<&Value>,
    ) -> Result<Job> {
        let result = result.map(to_json_text).transpose()?;
        let mut tx = self.begin().await?;
        let row = sqlx::query(COMPLETE)
            .bind(tenant)
            .bind(id.to_string())
            .bind(token.0.to_string())
            .bind(result)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(row) = row else {
            return settle_unfenced(tx, tenant, id, token, Report::Complete).await;
        };
        let job = rows::job(&row)?;
        record(
            &mut tx,
            &job,
            EventKind::Succeeded,
            job.worker_id.as_deref(),
            None,
        )
        .await?;
        tx.commit().await.db()?;
        Ok(job)
    }

    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch = Vec::with_capacity(items.len() * 3);
        for item in items {
            batch.push(Value::from(item.id.to_string()));
            batch.push(Value::from(item.lease_token.0.to_string()));
            batch.push(Value::from(
                item.result.as_ref().map(to_json_text).transpose()?,
            ));
        }

        let mut tx = self.begin().await?;
        let done = sqlx::query(COMPLETE_MANY)
            .bind(tenant)
            .bind(Value::Array(batch).to_string())
            .fetch_all(&mut *tx)
            .await
            .db()?;
        let done: HashSet<String> = done
            .iter()
            .map(|row| row.try_get::<String, _>("id"))
            .collect::<std::result::Result<_, _>>()
            .db()?;
        if !done.is_empty() {
            sqlx::query(SUCCEEDED_EVENTS)
                .bind(id_array(done.iter().map(String::as_str)))
                .execute(&mut *tx)
                .await
                .db()?;
        }
        // Jobs the update alone cannot answer for: ones it did not complete
        // (a repeat of an earlier complete, or a stale token) and ones the
        // batch names with several tokens. The token that completed a job
        // stays on it, so one read answers each item by its own token. The
        // usual batch (fresh tokens, each job once) needs no read.
        let mut tokens_of: HashMap<String, HashSet<Uuid>> = HashMap::new();
        for item in items {
            tokens_of
                .entry(item.id.to_string())
                .or_default()
                .insert(item.lease_token.0);
        }
        let uncertain: HashSet<&str> = tokens_of
            .iter()
            .filter(|(id, tokens)| tokens.len() > 1 || !done.contains(*id))
            .map(|(id, _)| id.as_str())
            .collect();
        let mut completed_by: HashMap<String, String> = HashMap::new();
        if !uncertain.is_empty() {
            let rows = sqlx::query(SUCCEEDED_TOKENS)
                .bind(tenant)
                .bind(id_array(uncertain.iter().copied()))
                .fetch_all(&mut *tx)
                .await
                .db()?;
            for row in &rows {
                completed_by.insert(row.try_get("id").db()?, row.try_get("lease_token").db()?);
            }
        }
        let ok: Vec<bool> = items
            .iter()
            .map(|item| {
                let id = item.id.to_string();
                !uncertain.contains(id.as_str())
                    || completed_by.get(&id) == Some(&item.lease_token.0.to_string())
            })
            .collect();
        // One `lease_lost` per job and batch, however often the batch names
        // it: a stale token repeated cannot grow the job's history. A job
        // this batch completed (or repeated) gets none, as on PostgreSQL.
        let answered: HashSet<Uuid> = items
            .iter()
            .zip(&ok)
            .filter(|(_, ok)| **ok)
            .map(|(item, _)| item.id)
            .collect();
        let lost_ids: BTreeSet<String> = items
            .iter()
            .zip(&ok)
            .filter(|(item, ok)| !**ok && !answered.contains(&item.id))
            .map(|(item, _)| item.id.to_string())
            .collect();
        let mut existing: HashSet<String> = HashSet::new();
        if !lost_ids.is_empty() {
            let rows = sqlx::query(LEASE_LOST_MANY)
                .bind(tenant)
                .bind(id_array(lost_ids.iter().map(String::as_str)))
                .bind("complete")
                .fetch_all(&mut *tx)
                .await
                .db()?;
            for row in &rows {
                existing.insert(row.try_get("job_id").db()?);
            }
        }
        tx.commit().await.db()?;
        Ok(items
            .iter()
            .zip(ok)
            .map(|(item, succeeded)| {
                if succeeded {
                    Ok(())
                } else if answered.contains(&item.id) || existing.contains(&item.id.to_string()) {
                    Err(Error::LeaseLost(item.id))
                } else {
                    Err(Error::JobNotFound(item.id))
                }
            })
            .collect())
    }

    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: &Failure,
        jitter: f64,
    ) -> Result<Job> {
        let error = lifecycle::error_tail(&failure.error);
        let mut tx = self.begin().await?;
        // Reading then writing is atomic here: BEGIN IMMEDIATE holds the
        // write lock for the whole transaction.
        let row = sqlx::query(FAIL_READ)
            .bind(tenant)
            .bind(id.to_string())
            .bind(token.0.to_string())
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(row) = row else {
            return settle_unfenced(tx, tenant, id, token, Report::Fail).await;
        };
        let attempt: i32 = row.try_get("attempt").db()?;
        let max_attempts: i32 = row.try_get("max_attempts").db()?;
        let cancel_requested: bool = row.try_get("cancel_requested").db()?;
        let backoff = tether_core::Backoff {
            base_ms: row.try_get("backoff_base_ms").db()?,
            cap_ms: row.try_get("backoff_cap_ms").db()?,
        };
        let outcome = lifecycle::fail_outcome(attempt, max_attempts, cancel_requested, failure);
        let (delay, event) = match outcome {
            FailOutcome::Retry => (
                Some(
                    failure
                        .retry_after_ms
                        .unwrap_or_else(|| lifecycle::backoff_delay_ms(backoff, attempt, jitter)),
                ),
                EventKind::RetryScheduled,
            ),
            FailOutcome::Failed => (None, EventKind::Failed),
            FailOutcome::Cancelled => (None, EventKind::Cancelled),
        };
        let row = sqlx::query(FAIL_WRITE)
            .bind(id.to_string())
            .bind(outcome.state().as_str())
            .bind(&error)
            .bind(delay)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let job = rows::job(&row)?;
        record(&mut tx, &job, event, job.worker_id.as_deref(), Some(&error)).await?;
        tx.commit().await.db()?;
        Ok(job)
    }

    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<Job> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(SNOOZE)
            .bind(tenant)
            .bind(id.to_string())
            .bind(token.0.to_string())
            .bind(delay_ms)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(row) = row else {
            return settle_unfenced(tx, tenant, id, token, Report::Snooze).await;
        };
        let job = rows::job(&row)?;
        let event = if job.state == JobState::Cancelled {
            EventKind::Cancelled
        } else {
            EventKind::Snoozed
        };
        let detail = format!("delay {delay_ms} ms");
        record(
            &mut tx,
            &job,
            event,
            job.worker_id.as_deref(),
            Some(&detail),
        )
        .await?;
        tx.commit().await.db()?;
        if delay_ms == 0 && job.state == JobState::Queued {
            // Handed back (e.g. by a worker shutting down): others may take it now.
            self.wakeups.notify(tenant, &job.queue, 1);
        }
        Ok(job)
    }

    async fn cancel(&self, tenant: &str, id: Uuid) -> Result<Job> {
        let mut tx = self.begin().await?;
        let job = fetch_job(&mut tx, tenant, id).await?;
        let (sql, event) = match job.state {
            JobState::Queued => (CANCEL_QUEUED, EventKind::Cancelled),
            JobState::Running if !job.cancel_requested => {
                (REQUEST_CANCEL, EventKind::CancelRequested)
            }
            // Already asked: the request is recorded once.
            JobState::Running => {
                Self::finish_unchanged(tx).await?;
                return Ok(job);
            }
            state => return Err(Error::not_cancellable(id, state)),
        };
        let row = sqlx::query(sql)
            .bind(id.to_string())
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let job = rows::job(&row)?;
        record(&mut tx, &job, event, job.worker_id.as_deref(), None).await?;
        tx.commit().await.db()?;
        Ok(job)
    }

    async fn replay(
        &self,
        tenant: &str,
        id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Job> {
        let mut tx = self.begin().await?;
        let job = fetch_job(&mut tx, tenant, id).await?;
        if !matches!(job.state, JobState::Failed | JobState::Cancelled) {
            return Err(Error::not_replayable(id, job.state));
        }
        if let Some(key) = &job.unique_key {
            let holder: Option<String> = sqlx::query_scalar(ACTIVE_HOLDER)
                .bind(tenant)
                .bind(key)
                .bind(id.to_string())
                .fetch_optional(&mut *tx)
                .await
                .db()?;
            if holder.is_some() {
                return Err(Error::replay_unique_key_held(id));
            }
        }
        let row = sqlx::query(REPLAY)
            .bind(id.to_string())
            .bind(expires_at.map(|at| at.timestamp_millis()))
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| match &e {
                // Belt and braces: the index, not the check above, is the rule.
                sqlx::Error::Database(db) if db.is_unique_violation() => {
                    Error::replay_unique_key_held(id)
                }
                _ => rows::db_err(e),
            })?;
        let job = rows::job(&row)?;
        record(&mut tx, &job, EventKind::Replayed, None, None).await?;
        tx.commit().await.db()?;
        self.wakeups.notify(tenant, &job.queue, 1);
        Ok(job)
    }

    async fn replay_many(&self, tenant: &str, filter: &ReplayFilter) -> Result<BulkReplayed> {
        let limit = filter.limit.unwrap_or(DEFAULT_REPLAY);
        let cursor = filter.cursor.map(|id| id.to_string());
        let mut tx = self.begin().await?;
        let scan = sqlx::query(REPLAY_SCAN)
            .bind(tenant)
            .bind(&filter.queue)
            .bind(filter.state.as_str())
            .bind(filter.kind.as_deref())
            .bind(i64::from(limit))
            .bind(cursor.as_deref())
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let scanned: i64 = scan.try_get("scanned").db()?;
        let last: Option<String> = scan.try_get("last").db()?;
        let replayed = sqlx::query(REPLAY_MANY)
            .bind(tenant)
            .bind(&filter.queue)
            .bind(filter.state.as_str())
            .bind(filter.kind.as_deref())
            .bind(i64::from(limit))
            .bind(cursor.as_deref())
            .bind(filter.expires_at.map(|at| at.timestamp_millis()))
            .fetch_all(&mut *tx)
            .await
            .db()?;
        let n = Self::finish_bulk(tx, &replayed, REPLAYED_EVENTS).await?;
        if n > 0 {
            self.wakeups.notify(tenant, &filter.queue, n as usize);
        }
        let next_cursor = match last {
            Some(last) if scanned == i64::from(limit) => Some(rows::uuid(&last)?),
            _ => None,
        };
        Ok(BulkReplayed {
            replayed: n,
            next_cursor,
        })
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Job> {
        let mut conn = self.reader.acquire().await.db()?;
        fetch_job(&mut conn, tenant, id).await
    }

    async fn list(&self, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
        let limit = filter.limit.unwrap_or(DEFAULT_PAGE);
        // The filters present pick the statement (each shape is prepared and
        // cached once), so every shape can use its index; `(? IS NULL OR …)`
        // would defeat SQLite's index selection.
        let mut sql = String::from(concat!(
            "SELECT ",
            job_cols!(),
            " FROM tether_jobs WHERE tenant = ?"
        ));
        let mut binds: Vec<String> = vec![tenant.to_owned()];
        if let Some(queue) = &filter.queue {
            sql.push_str(" AND queue = ?");
            binds.push(queue.clone());
        }
        if let Some(state) = filter.state {
            sql.push_str(" AND state = ?");
            binds.push(state.as_str().to_owned());
        }
        if let Some(kind) = &filter.kind {
            sql.push_str(" AND kind = ?");
            binds.push(kind.clone());
        }
        if let Some(tag) = &filter.tag {
            sql.push_str(" AND EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?)");
            binds.push(tag.clone());
        }
        if let Some(cursor) = filter.cursor {
            sql.push_str(" AND id < ?");
            binds.push(cursor.to_string());
        }
        sql.push_str(" ORDER BY id DESC LIMIT ?");
        let mut query = sqlx::query(&sql);
        for value in binds {
            query = query.bind(value);
        }
        let mut conn = self.reader.acquire().await.db()?;
        let found = query
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await
            .db()?;
        let jobs = found.iter().map(rows::job).collect::<Result<Vec<_>>>()?;
        let next_cursor = if jobs.len() == limit as usize {
            jobs.last().map(|job| job.id)
        } else {
            None
        };
        Ok(JobPage { jobs, next_cursor })
    }

    async fn events(
        &self,
        tenant: &str,
        id: Uuid,
        cursor: Option<EventCursor>,
        limit: u32,
    ) -> Result<EventPage> {
        let mut conn = self.reader.acquire().await.db()?;
        // One statement: the job's existence in the tenant and its history
        // come from the same snapshot.
        let found = sqlx::query(EVENTS)
            .bind(tenant)
            .bind(id.to_string())
            .bind(cursor.map(|c| c.0))
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await
            .db()?;
        if found.is_empty() {
            return Err(Error::JobNotFound(id));
        }
        let mut events = Vec::with_capacity(found.len());
        let mut last = None;
        for row in &found {
            let seq: Option<i64> = row.try_get("seq").db()?;
            if let Some(seq) = seq {
                events.push(rows::event(row)?);
                last = Some(EventCursor(seq));
            }
        }
        let next_cursor = if events.len() == limit as usize {
            last
        } else {
            None
        };
        Ok(EventPage {
            events,
            next_cursor,
        })
    }

    async fn queue_stats(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        let mut conn = self.reader.acquire().await.db()?;
        queue_stats_on(&mut conn, tenant, queue).await
    }

    async fn list_queues(&self, tenant: &str) -> Result<Vec<QueueStats>> {
        let mut conn = self.reader.acquire().await.db()?;
        let found = sqlx::query(LIST_QUEUES)
            .bind(tenant)
            .fetch_all(&mut *conn)
            .await
            .db()?;
        found.iter().map(rows::stats).collect()
    }

    async fn set_paused(
        &self,
        tenant: &str,
        queue: &str,
        paused: bool,
        max_queues: u32,
    ) -> Result<QueueStats> {
        let defaults = QueueConfig::default();
        let mut tx = self.begin().await?;
        if !paused {
            // A queue without a row is not paused: resuming creates none.
            sqlx::query(RESUME)
                .bind(tenant)
                .bind(queue)
                .execute(&mut *tx)
                .await
                .db()?;
            let stats = queue_stats_on(&mut tx, tenant, queue).await?;
            tx.commit().await.db()?;
            return Ok(stats);
        }
        check_new_queue(&mut tx, tenant, queue, max_queues).await?;
        sqlx::query(SET_PAUSED)
            .bind(tenant)
            .bind(queue)
            .bind(paused)
            .bind(defaults.max_attempts)
            .bind(defaults.backoff.base_ms)
            .bind(defaults.backoff.cap_ms)
            .bind(defaults.default_lease_ttl_ms)
            .execute(&mut *tx)
            .await
            .db()?;
        // Read back inside the transaction: the answer is what was written.
        let stats = queue_stats_on(&mut tx, tenant, queue).await?;
        tx.commit().await.db()?;
        Ok(stats)
    }

    async fn configure_queue(
        &self,
        tenant: &str,
        queue: &str,
        patch: &QueueConfigPatch,
        max_queues: u32,
    ) -> Result<QueueStats> {
        let defaults = QueueConfig::default();
        let mut tx = self.begin().await?;
        check_new_queue(&mut tx, tenant, queue, max_queues).await?;
        sqlx::query(CONFIGURE_QUEUE)
            .bind(tenant)
            .bind(queue)
            .bind(patch.max_attempts)
            .bind(patch.backoff.map(|b| b.base_ms))
            .bind(patch.backoff.map(|b| b.cap_ms))
            .bind(patch.default_lease_ttl_ms)
            .bind(defaults.max_attempts)
            .bind(defaults.backoff.base_ms)
            .bind(defaults.backoff.cap_ms)
            .bind(defaults.default_lease_ttl_ms)
            .execute(&mut *tx)
            .await
            .db()?;
        let stats = queue_stats_on(&mut tx, tenant, queue).await?;
        tx.commit().await.db()?;
        Ok(stats)
    }

    async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        let defaults = QueueConfig::default();
        let mut tx = self.begin().await?;
        let done = sqlx::query(PRUNE_EMPTY_QUEUES)
            .bind(i64::from(batch))
            .bind(defaults.max_attempts)
            .bind(defaults.backoff.base_ms)
            .bind(defaults.backoff.cap_ms)
            .bind(defaults.default_lease_ttl_ms)
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            Self::finish_unchanged(tx).await?;
            return Ok(0);
        }
        tx.commit().await.db()?;
        Ok(done.rows_affected())
    }

    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        let mut tx = self.begin().await?;
        let reaped = sqlx::query(REAP)
            .bind(i64::from(batch))
            .fetch_all(&mut *tx)
            .await
            .db()?;
        if reaped.is_empty() {
            Self::finish_unchanged(tx).await?;
            return Ok(ReapReport::default());
        }
        let mut report = ReapReport::default();
        for row in &reaped {
            let state: &str = row.try_get("state").db()?;
            match state.parse::<JobState>().map_err(rows::corrupt)? {
                JobState::Queued => report.requeued += 1,
                JobState::Failed => report.failed += 1,
                JobState::Cancelled => report.cancelled += 1,
                other => return Err(rows::corrupt(format!("reaper produced state {other}"))),
            }
        }
        Self::finish_bulk(tx, &reaped, LEASE_EXPIRED_EVENTS).await?;
        Ok(report)
    }

    async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        let mut tx = self.begin().await?;
        let expired = sqlx::query(EXPIRE)
            .bind(i64::from(batch))
            .bind(EXPIRED_ERROR)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        Self::finish_bulk(tx, &expired, EXPIRED_EVENTS).await
    }

    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        let mut tx = self.begin().await?;
        let pruned = sqlx::query(PRUNE)
            .bind(retention_ms)
            .bind(i64::from(batch))
            .fetch_all(&mut *tx)
            .await
            .db()?;
        Self::finish_bulk(tx, &pruned, PRUNE_EVENTS).await
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(ACQUIRE_LEASE)
            .bind(name)
            .bind(holder)
            .bind(ttl_ms)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let lease = row.as_ref().map(rows::lease).transpose()?;
        tx.commit().await.db()?;
        Ok(lease)
    }

    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(RENEW_LEASE)
            .bind(name)
            .bind(token.0.to_string())
            .bind(ttl_ms)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(row) = row else {
            // Taken over, released, or never held with this token.
            Self::finish_unchanged(tx).await?;
            return Err(Error::NamedLeaseLost(name.to_owned()));
        };
        let lease = rows::lease(&row)?;
        tx.commit().await.db()?;
        Ok(lease)
    }

    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query(RELEASE_LEASE)
            .bind(name)
            .bind(token.0.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(())
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(CREATE_TENANT)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(row) = row else {
            Self::finish_unchanged(tx).await?;
            return Err(Error::tenant_name_taken(name));
        };
        let tenant = rows::tenant(&row)?;
        tx.commit().await.db()?;
        Ok(tenant)
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        let mut conn = self.reader.acquire().await.db()?;
        let found = sqlx::query(LIST_TENANTS).fetch_all(&mut *conn).await.db()?;
        found.iter().map(rows::tenant).collect()
    }

    async fn get_tenant(&self, id: Uuid) -> Result<Tenant> {
        let mut conn = self.reader.acquire().await.db()?;
        let row = sqlx::query(GET_TENANT)
            .bind(id.to_string())
            .fetch_optional(&mut *conn)
            .await
            .db()?;
        row.as_ref()
            .map(rows::tenant)
            .transpose()?
            .ok_or_else(|| Error::tenant_not_found(id))
    }

    async fn ensure_tenant(&self, name: &str) -> Result<Tenant> {
        let mut tx = self.begin().await?;
        let created = sqlx::query(CREATE_TENANT)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let row = match created {
            Some(row) => row,
            None => sqlx::query(TENANT_BY_NAME)
                .bind(name)
                .fetch_one(&mut *tx)
                .await
                .db()?,
        };
        let tenant = rows::tenant(&row)?;
        tx.commit().await.db()?;
        Ok(tenant)
    }

    async fn create_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<ApiKeyInfo> {
        let mut tx = self.begin().await?;
        let tenant = sqlx::query(GET_TENANT)
            .bind(tenant_id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(tenant) = tenant.as_ref().map(rows::tenant).transpose()? else {
            Self::finish_unchanged(tx).await?;
            return Err(Error::tenant_not_found(tenant_id));
        };
        if admin && tenant.name != DEFAULT_TENANT {
            Self::finish_unchanged(tx).await?;
            return Err(Error::admin_key_outside_default_tenant());
        }
        let row = sqlx::query(INSERT_API_KEY)
            .bind(key_id.to_string())
            .bind(tenant_id.to_string())
            .bind(name)
            .bind(&hash[..])
            .bind(admin)
            .bind(&tenant.name)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let info =
            rows::api_key(&row)?.ok_or_else(|| rows::corrupt("inserted api key without id"))?;
        tx.commit().await.db()?;
        Ok(info)
    }

    async fn find_api_key(&self, key_id: Uuid) -> Result<Option<(ApiKeyInfo, [u8; 32])>> {
        let mut conn = self.reader.acquire().await.db()?;
        let row = sqlx::query(FIND_API_KEY)
            .bind(key_id.to_string())
            .fetch_optional(&mut *conn)
            .await
            .db()?;
        let Some(row) = row else {
            return Ok(None);
        };
        let info = rows::api_key(&row)?.ok_or_else(|| rows::corrupt("api key row without id"))?;
        Ok(Some((info, rows::key_hash(&row)?)))
    }

    async fn revoke_api_key(&self, key_id: Uuid) -> Result<()> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(REVOKE_API_KEY)
            .bind(key_id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            Self::finish_unchanged(tx).await?;
            return Err(Error::api_key_not_found(key_id));
        }
        tx.commit().await.db()?;
        Ok(())
    }

    async fn list_api_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
        let mut conn = self.reader.acquire().await.db()?;
        let found = sqlx::query(LIST_API_KEYS)
            .bind(tenant_id.to_string())
            .fetch_all(&mut *conn)
            .await
            .db()?;
        if found.is_empty() {
            return Err(Error::tenant_not_found(tenant_id));
        }
        let mut keys = Vec::with_capacity(found.len());
        for row in &found {
            if let Some(info) = rows::api_key(row)? {
                keys.push(info);
            }
        }
        Ok(keys)
    }

    async fn touch_api_key(&self, key_id: Uuid, min_interval_ms: i64) -> Result<bool> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(TOUCH_API_KEY)
            .bind(key_id.to_string())
            .bind(min_interval_ms)
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            Self::finish_unchanged(tx).await?;
            return Ok(false);
        }
        tx.commit().await.db()?;
        Ok(true)
    }

    async fn store_operator_key(
        &self,
        tenant_id: Uuid,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<OperatorKeySetup> {
        // BEGIN IMMEDIATE: one such transaction at a time, across processes.
        let mut tx = self.begin().await?;
        sqlx::query(INSERT_OPERATOR_KEY)
            .bind(key_id.to_string())
            .bind(tenant_id.to_string())
            .bind(OPERATOR_KEY_NAME)
            .bind(&hash[..])
            .execute(&mut *tx)
            .await
            .db()?;
        let row = sqlx::query(FIND_API_KEY)
            .bind(key_id.to_string())
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let key = rows::api_key(&row)?.ok_or_else(|| rows::corrupt("api key row without id"))?;
        let mut revoked = Vec::new();
        if !key.is_revoked() {
            let ids: Vec<String> = sqlx::query_scalar(REVOKE_OTHER_OPERATOR_KEYS)
                .bind(key_id.to_string())
                .fetch_all(&mut *tx)
                .await
                .db()?;
            for id in &ids {
                revoked.push(rows::uuid(id)?);
            }
        }
        tx.commit().await.db()?;
        Ok(OperatorKeySetup { key, revoked })
    }

    async fn server_secret_check(&self, check: [u8; 32], record: bool) -> Result<Option<[u8; 32]>> {
        let stored: Option<Vec<u8>> = if record {
            let mut tx = self.begin().await?;
            sqlx::query(INSERT_SERVER_SECRET_CHECK)
                .bind(&check[..])
                .execute(&mut *tx)
                .await
                .db()?;
            let stored = sqlx::query_scalar(SERVER_SECRET_CHECK)
                .fetch_optional(&mut *tx)
                .await
                .db()?;
            tx.commit().await.db()?;
            stored
        } else {
            sqlx::query_scalar(SERVER_SECRET_CHECK)
                .fetch_optional(&self.reader)
                .await
                .db()?
        };
        stored
            .map(|s| s.try_into())
            .transpose()
            .map_err(|_| rows::corrupt("server secret check is not 32 bytes"))
    }

    async fn create_schedule(
        &self,
        tenant: &str,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
        max_schedules: u32,
    ) -> Result<Schedule> {
        let query = sqlx::query(CREATE_SCHEDULE)
            .bind(tenant)
            .bind(Uuid::now_v7().to_string());
        let query = bind_spec(query, spec, next_run_at)?;
        let mut tx = self.begin().await?;
        // Counted under the write lock: concurrent creations cannot pass
        // the limit together.
        let n: i64 = sqlx::query_scalar(COUNT_SCHEDULES)
            .bind(tenant)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        if n >= i64::from(max_schedules) {
            Self::finish_unchanged(tx).await?;
            return Err(Error::too_many_schedules(max_schedules));
        }
        let row = query.fetch_optional(&mut *tx).await.db()?;
        let Some(row) = row else {
            Self::finish_unchanged(tx).await?;
            return Err(Error::schedule_name_taken(&spec.name));
        };
        let schedule = rows::schedule(&row)?;
        tx.commit().await.db()?;
        Ok(schedule)
    }

    async fn get_schedule(&self, tenant: &str, id: Uuid) -> Result<Schedule> {
        let mut conn = self.reader.acquire().await.db()?;
        let row = sqlx::query(SELECT_SCHEDULE)
            .bind(tenant)
            .bind(id.to_string())
            .fetch_optional(&mut *conn)
            .await
            .db()?;
        row.as_ref()
            .map(rows::schedule)
            .transpose()?
            .ok_or_else(|| Error::schedule_not_found(id))
    }

    async fn list_schedules(&self, tenant: &str) -> Result<Vec<Schedule>> {
        let mut conn = self.reader.acquire().await.db()?;
        let found = sqlx::query(LIST_SCHEDULES)
            .bind(tenant)
            .fetch_all(&mut *conn)
            .await
            .db()?;
        found.iter().map(rows::schedule).collect()
    }

    async fn update_schedule(
        &self,
        tenant: &str,
        id: Uuid,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<Schedule> {
        let query = sqlx::query(UPDATE_SCHEDULE)
            .bind(tenant)
            .bind(id.to_string());
        let query = bind_spec(query, spec, next_run_at)?;
        let mut tx = self.begin().await?;
        let row = query.fetch_optional(&mut *tx).await.map_err(|e| match &e {
            // The id does not change, so the only UNIQUE rule an update
            // can break is the (tenant, name) one.
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Error::schedule_name_taken(&spec.name)
            }
            _ => rows::db_err(e),
        })?;
        let Some(row) = row else {
            Self::finish_unchanged(tx).await?;
            return Err(Error::schedule_not_found(id));
        };
        let schedule = rows::schedule(&row)?;
        tx.commit().await.db()?;
        Ok(schedule)
    }

    async fn delete_schedule(&self, tenant: &str, id: Uuid) -> Result<()> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(DELETE_SCHEDULE)
            .bind(tenant)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            Self::finish_unchanged(tx).await?;
            return Err(Error::schedule_not_found(id));
        }
        sqlx::query(DELETE_SCHEDULE_RUNS)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(())
    }

    async fn schedule_runs(&self, tenant: &str, id: Uuid, limit: u32) -> Result<Vec<ScheduleRun>> {
        let mut conn = self.reader.acquire().await.db()?;
        // At least one row, so that a schedule is told from no schedule even
        // when no runs are asked for.
        let found = sqlx::query(SCHEDULE_RUNS)
            .bind(tenant)
            .bind(id.to_string())
            .bind(i64::from(limit.max(1)))
            .fetch_all(&mut *conn)
            .await
            .db()?;
        if found.is_empty() {
            return Err(Error::schedule_not_found(id));
        }
        let mut runs = Vec::with_capacity(found.len());
        for row in found.iter().take(limit as usize) {
            let run_id: Option<i64> = row.try_get("run_id").db()?;
            if run_id.is_some() {
                runs.push(rows::schedule_run(row)?);
            }
        }
        Ok(runs)
    }

    async fn due_schedules(&self, limit: u32) -> Result<(DateTime<Utc>, Vec<Schedule>)> {
        let mut conn = self.reader.acquire().await.db()?;
        let now: i64 = sqlx::query_scalar(DB_NOW)
            .fetch_one(&mut *conn)
            .await
            .db()?;
        let found = sqlx::query(DUE_SCHEDULES)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await
            .db()?;
        let due = found.iter().map(rows::schedule).collect::<Result<_>>()?;
        Ok((rows::ts(now)?, due))
    }

    async fn next_schedule_due(&self) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
        let mut conn = self.reader.acquire().await.db()?;
        let row = sqlx::query(NEXT_SCHEDULE_DUE)
            .fetch_one(&mut *conn)
            .await
            .db()?;
        Ok((
            rows::ts(row.try_get("now").db()?)?,
            rows::opt_ts(row.try_get("next").db()?)?,
        ))
    }

    async fn fire_schedule(&self, fire: &Fire, job_id: Uuid) -> Result<FireOutcome> {
        let tenant = fire.tenant.as_str();
        let fire_at = fire.fire_at.timestamp_millis();
        let mut tx = self.begin().await?;
        // 1. The compare-and-set: under the write lock, so of two nodes (or
        // two processes on the file) that read the same `next_run_at`, the
        // second finds it moved.
        let moved = sqlx::query(FIRE_SCHEDULE)
            .bind(tenant)
            .bind(fire.schedule_id.to_string())
            .bind(fire.expected_next_run_at.timestamp_millis())
            .bind(fire_at)
            .bind(fire.next_run_at.map(|at| at.timestamp_millis()))
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(moved) = moved else {
            Self::finish_unchanged(tx).await?;
            return Ok(FireOutcome::Raced);
        };
        let last_job: Option<&str> = moved.try_get("last_job_id").db()?;
        let last_job = last_job.map(rows::uuid).transpose()?;

        // 2. Overlap `skip`: nothing to enqueue while the last run's job is
        // unfinished (a job pruned since counts as finished).
        if fire.overlap == Overlap::Skip {
            if let Some(last_job) = last_job {
                let active: bool = sqlx::query_scalar(JOB_ACTIVE)
                    .bind(tenant)
                    .bind(last_job.to_string())
                    .fetch_one(&mut *tx)
                    .await
                    .db()?;
                if active {
                    record_run(
                        &mut tx,
                        fire.schedule_id,
                        tenant,
                        fire_at,
                        None,
                        RunOutcome::Skipped,
                    )
                    .await?;
                    tx.commit().await.db()?;
                    return Ok(FireOutcome::Ran(RunOutcome::Skipped, None));
                }
            }
        }

        // 3. The job, by its fire key: if it exists already, it is this
        // run's job and nothing new is made.
        let job = NewJobRef {
            id: job_id,
            job: &fire.job,
        };
        let answer = enqueue_run(&mut tx, tenant, fire.schedule_id, job).await?;
        record_run(
            &mut tx,
            fire.schedule_id,
            tenant,
            fire_at,
            Some(answer.job.id),
            RunOutcome::Enqueued,
        )
        .await?;
        tx.commit().await.db()?;
        let job_id = answer.job.id;
        self.notify_created(tenant, std::slice::from_ref(&answer));
        Ok(FireOutcome::Ran(RunOutcome::Enqueued, Some(job_id)))
    }

    async fn trigger_schedule(&self, tenant: &str, id: Uuid, job: NewJobRef<'_>) -> Result<Job> {
        let mut tx = self.begin().await?;
        let stamped: Option<i64> = sqlx::query_scalar(TRIGGER_SCHEDULE)
            .bind(tenant)
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        let Some(fire_at) = stamped else {
            Self::finish_unchanged(tx).await?;
            return Err(Error::schedule_not_found(id));
        };
        let answer = enqueue_run(&mut tx, tenant, id, job).await?;
        record_run(
            &mut tx,
            id,
            tenant,
            fire_at,
            Some(answer.job.id),
            RunOutcome::Enqueued,
        )
        .await?;
        tx.commit().await.db()?;
        self.notify_created(tenant, std::slice::from_ref(&answer));
        Ok(answer.job)
    }

    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(PRUNE_SCHEDULE_RUNS)
            .bind(retention_ms)
            .bind(i64::from(batch))
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            Self::finish_unchanged(tx).await?;
            return Ok(0);
        }
        tx.commit().await.db()?;
        Ok(done.rows_affected())
    }
}
