//! The [`Store`] implementation: one SQL statement per operation.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{QueryBuilder, Row};
use tether_core::keys::OPERATOR_KEY_NAME;
use tether_core::lifecycle::Report;
use tether_core::schedule::{Fire, FireOutcome};
use tether_core::{
    ApiKeyInfo, OperatorKeySetup, Schedule, ScheduleRun, ScheduleSpec, Tenant, DEFAULT_TENANT,
};
use tether_core::{
    BulkReplayed, ClaimRequest, ClaimedJob, Completion, Enqueued, Error, EventCursor, EventKind,
    EventPage, Failure, Heartbeat, HeartbeatAck, Job, JobEvent, JobFilter, JobPage, JobState,
    Lease, LeaseToken, NewJobRef, QueueConfig, QueueConfigPatch, QueueStats, ReapReport,
    ReplayFilter, Result, StateCounts, Store, Wakeup,
};
use uuid::Uuid;

use crate::rows::{self, job_columns};
use crate::{db_error, is_unique_violation, PgStore};

/// Claims a batch: `$1` tenant, `$2` queue, `$3` limit, `$4` lease TTL ms (NULL: queue default), `$5` worker id.
pub const CLAIM: &str = concat!(
    "WITH config AS (
        SELECT COALESCE(q.paused, false) AS paused,
               COALESCE($4::bigint, q.default_lease_ttl_ms, 30000) AS ttl
        FROM (SELECT 1) one
        LEFT JOIN tether.queues q ON q.tenant = $1 AND q.name = $2
    ),
    picked AS (
        SELECT j.id FROM tether.jobs j
        WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued' AND j.run_at <= now()
          AND (j.expires_at IS NULL OR j.expires_at > now())
          AND NOT (SELECT paused FROM config)
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE tether.jobs j
        SET state = 'running', attempt = j.attempt + 1, lease_token = gen_random_uuid(),
            lease_ttl_ms = config.ttl,
            lease_expires_at = now() + config.ttl * interval '1 millisecond',
            heartbeat_at = now(), started_at = now(), updated_at = now(),
            worker_id = $5, progress = NULL
        FROM picked, config
        WHERE j.id = picked.id
        RETURNING ",
    job_columns!(),
    ", j.lease_token
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at, 'claimed', attempt, worker_id FROM claimed
    )
    SELECT * FROM claimed j ORDER BY j.priority DESC, j.run_at, j.id"
);

/// A report (`complete`, `fail`, `snooze`) whose fence matched nothing:
/// `repeated` is the job as it stands when `$3` is the token that ended its
/// last attempt and its state is one the report leads to (`$states`, a text
/// array; see `tether_core::lifecycle::Report`), so a report repeated after
/// its answer was lost is answered like the first; otherwise `lost` records
/// `lease_lost` in the same statement, if the job exists in the tenant at
/// all. `$1` id, `$2` tenant; `done` is the CTE of the fenced update; `$op`
/// names the operation.
macro_rules! settle_ctes {
    ($op:literal, $states:literal) => {
        concat!(
            "repeated AS (
                SELECT ",
            job_columns!(),
            " FROM tether.jobs j
                WHERE j.id = $1 AND j.tenant = $2 AND j.lease_token = $3
                  AND j.state = ANY(",
            $states,
            "::text[]) AND NOT EXISTS (SELECT 1 FROM done)
            ),
            lost AS (
                INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
                SELECT x.id, x.tenant, now(), 'lease_lost', x.attempt, '",
            $op,
            "' FROM tether.jobs x
                WHERE x.id = $1 AND x.tenant = $2 AND NOT EXISTS (SELECT 1 FROM done)
                  AND NOT EXISTS (SELECT 1 FROM repeated)
                RETURNING job_id
            )
            SELECT j.*, (SELECT count(*) FROM lost) AS lost FROM (SELECT 1) one
            LEFT JOIN (SELECT * FROM done UNION ALL SELECT * FROM repeated) j ON true"
        )
    };
}

/// Rows of a batch are locked in id order, so two batches that share jobs
/// (a heartbeat cycle and a completion batch of one worker) wait for each
/// other instead of deadlocking. A job named by several refused items gets
/// one `lease_lost` event per batch (DISTINCT), so a stale token repeated in
/// a batch cannot grow the job's history by the batch size.
const HEARTBEAT_MANY: &str = "WITH input AS (
        SELECT * FROM UNNEST($2::uuid[], $3::uuid[], $4::bigint[], $5::jsonb[])
            AS t(id, token, ttl, progress)
    ),
    locked AS (
        SELECT j.id FROM UNNEST($2::uuid[]) AS u(id) JOIN tether.jobs j ON j.id = u.id
        WHERE j.tenant = $1 AND j.state = 'running'
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    done AS (
        UPDATE tether.jobs j
        SET lease_expires_at = now() + COALESCE(i.ttl, j.lease_ttl_ms) * interval '1 millisecond',
            heartbeat_at = now(), updated_at = now(), progress = COALESCE(i.progress, j.progress)
        FROM input i
        WHERE j.id = i.id AND j.lease_token = i.token AND j.id IN (SELECT id FROM locked)
        RETURNING j.id, i.token, j.lease_expires_at, j.cancel_requested
    ),
    lost AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT x.id, x.tenant, now(), 'lease_lost', x.attempt, 'heartbeat'
        FROM (SELECT DISTINCT id FROM UNNEST($2::uuid[]) AS u(id)) u JOIN tether.jobs x ON x.id = u.id
        WHERE x.tenant = $1 AND x.id NOT IN (SELECT id FROM done)
        RETURNING job_id
    )
    SELECT id, token, lease_expires_at, cancel_requested FROM done
    UNION ALL
    SELECT DISTINCT job_id, NULL::uuid, NULL::timestamptz, NULL::boolean FROM lost";

const COMPLETE: &str = concat!(
    "WITH done AS (
        UPDATE tether.jobs j
        SET state = 'succeeded', result = $4, finished_at = now(), updated_at = now(),
            lease_expires_at = NULL
        WHERE j.id = $1 AND j.tenant = $2 AND j.lease_token = $3 AND j.state = 'running'
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at, 'succeeded', attempt, worker_id FROM done
    ), ",
    settle_ctes!("complete", "$5")
);

/// Completes a batch: `$1` tenant, `$2` ids, `$3` lease tokens, `$4` results.
/// Rows are locked in id order, and a refused job gets one `lease_lost`
/// event per batch (see [`HEARTBEAT_MANY`]).
pub const COMPLETE_MANY: &str = "WITH input AS (
        SELECT * FROM UNNEST($2::uuid[], $3::uuid[], $4::jsonb[]) AS t(id, token, result)
    ),
    locked AS (
        SELECT j.id FROM UNNEST($2::uuid[]) AS u(id) JOIN tether.jobs j ON j.id = u.id
        WHERE j.tenant = $1 AND j.state = 'running'
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = 'succeeded', result = i.result, finished_at = now(), updated_at = now(),
            lease_expires_at = NULL
        FROM input i
        WHERE j.id = i.id AND j.lease_token = i.token AND j.id IN (SELECT id FROM locked)
        RETURNING j.id, i.token, j.tenant, j.attempt, j.worker_id, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at, 'succeeded', attempt, worker_id FROM done
    ),
    repeated AS (
        SELECT x.id, i.token FROM input i JOIN tether.jobs x ON x.id = i.id
        WHERE x.tenant = $1 AND x.state = 'succeeded' AND x.lease_token = i.token
          AND x.id NOT IN (SELECT id FROM done)
    ),
    lost AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT x.id, x.tenant, now(), 'lease_lost', x.attempt, 'complete'
        FROM (SELECT DISTINCT id FROM UNNEST($2::uuid[]) AS u(id)) u JOIN tether.jobs x ON x.id = u.id
        WHERE x.tenant = $1 AND x.id NOT IN (SELECT id FROM done)
          AND x.id NOT IN (SELECT id FROM repeated)
        RETURNING job_id
    )
    SELECT id, token FROM done
    UNION ALL
    SELECT DISTINCT id, token FROM repeated
    UNION ALL
    SELECT DISTINCT job_id, NULL::uuid FROM lost";

/// Fail routing mirrors `lifecycle::fail_outcome`; the retry delay mirrors
/// `lifecycle::backoff_delay_ms` (`$5` retry_after_ms, `$6` fatal,
/// `$7` cancelled, `$8` jitter).
const FAIL: &str = concat!(
    "WITH cur AS (
        SELECT id,
               CASE WHEN $7 OR (cancel_requested AND NOT $6) THEN 'cancelled'
                    WHEN $6 OR attempt >= max_attempts THEN 'failed'
                    ELSE 'queued' END AS next_state,
               COALESCE($5::bigint,
                        floor(LEAST(backoff_base_ms * power(2::float8, attempt - 1), backoff_cap_ms)
                              * $8::float8)::bigint) AS delay_ms
        FROM tether.jobs
        WHERE id = $1 AND tenant = $2 AND lease_token = $3 AND state = 'running'
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = cur.next_state,
            run_at = CASE WHEN cur.next_state = 'queued'
                          THEN now() + cur.delay_ms * interval '1 millisecond' ELSE j.run_at END,
            finished_at = CASE WHEN cur.next_state = 'queued' THEN NULL ELSE now() END,
            last_error = $4, lease_expires_at = NULL, updated_at = now()
        FROM cur
        WHERE j.id = cur.id
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id, detail)
        SELECT id, tenant, updated_at,
               CASE state WHEN 'queued' THEN 'retry_scheduled' ELSE state END,
               attempt, worker_id, $4
        FROM done
    ), ",
    settle_ctes!("fail", "$9")
);

const SNOOZE: &str = concat!(
    "WITH cur AS (
        SELECT id, CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END AS next_state
        FROM tether.jobs
        WHERE id = $1 AND tenant = $2 AND lease_token = $3 AND state = 'running'
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = cur.next_state,
            attempt = CASE WHEN cur.next_state = 'queued' THEN j.attempt - 1 ELSE j.attempt END,
            run_at = CASE WHEN cur.next_state = 'queued'
                          THEN now() + $4 * interval '1 millisecond' ELSE j.run_at END,
            finished_at = CASE WHEN cur.next_state = 'queued' THEN NULL ELSE now() END,
            lease_expires_at = NULL, updated_at = now()
        FROM cur
        WHERE j.id = cur.id
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id, detail)
        SELECT id, tenant, updated_at,
               CASE state WHEN 'queued' THEN 'snoozed' ELSE 'cancelled' END,
               attempt, worker_id, 'delay ' || $4 || ' ms'
        FROM done
    ), ",
    settle_ctes!("snooze", "$5")
);

const CANCEL: &str = concat!(
    "WITH cur AS (
        SELECT id, state, cancel_requested FROM tether.jobs
        WHERE id = $1 AND tenant = $2
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN cur.state = 'queued' THEN 'cancelled' ELSE j.state END,
            cancel_requested = (cur.state = 'running'),
            finished_at = CASE WHEN cur.state = 'queued' THEN now() ELSE j.finished_at END,
            updated_at = now()
        FROM cur
        WHERE j.id = cur.id
          AND (cur.state = 'queued' OR (cur.state = 'running' AND NOT cur.cancel_requested))
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at,
               CASE state WHEN 'cancelled' THEN 'cancelled' ELSE 'cancel_requested' END,
               attempt, worker_id
        FROM done
    )
    SELECT cur.state AS prior_state, j.* FROM cur LEFT JOIN done j ON true"
);

/// Replays one job: `$3` its new `expires_at` (NULL clears it, or an
/// expired job would expire again at once).
const REPLAY: &str = concat!(
    "WITH cur AS (
        SELECT id, state FROM tether.jobs WHERE id = $1 AND tenant = $2 FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = 'queued', attempt = 0, run_at = now(), cancel_requested = false,
            finished_at = NULL, result = NULL, lease_token = NULL, lease_expires_at = NULL,
            progress = NULL, expires_at = $3, updated_at = now()
        FROM cur
        WHERE j.id = cur.id AND cur.state IN ('failed', 'cancelled')
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'replayed', 0 FROM done
    )
    SELECT cur.state AS prior_state, j.* FROM cur LEFT JOIN done j ON true"
);

/// Bulk replay skips jobs whose unique key is held by an active job, and
/// replays only the oldest of several dead jobs sharing a unique key. The
/// candidates are the first `$5` matching jobs with an id above `$6` (the
/// cursor; NULL: from the start); `$7` is the new `expires_at`. Answers how
/// many were replayed, how many were candidates and the last candidate's id
/// (the next round's cursor).
const REPLAY_MANY: &str = "WITH candidates AS (
        SELECT id, unique_key FROM tether.jobs
        WHERE tenant = $1 AND queue = $2 AND state = $3 AND ($4::text IS NULL OR kind = $4)
          AND ($6::uuid IS NULL OR id > $6)
        ORDER BY id
        LIMIT $5
        FOR UPDATE SKIP LOCKED
    ),
    chosen AS (
        SELECT id FROM candidates WHERE unique_key IS NULL
        UNION ALL
        (SELECT DISTINCT ON (c.unique_key) c.id FROM candidates c
         WHERE c.unique_key IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM tether.jobs a
                           WHERE a.tenant = $1 AND a.unique_key = c.unique_key
                             AND a.state IN ('queued', 'running'))
         ORDER BY c.unique_key, c.id)
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = 'queued', attempt = 0, run_at = now(), cancel_requested = false,
            finished_at = NULL, result = NULL, lease_token = NULL, lease_expires_at = NULL,
            progress = NULL, expires_at = $7, updated_at = now()
        FROM chosen
        WHERE j.id = chosen.id
        RETURNING j.id, j.tenant, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'replayed', 0 FROM done
    )
    SELECT (SELECT count(*) FROM done) AS replayed,
           (SELECT count(*) FROM candidates) AS scanned,
           (SELECT id FROM candidates ORDER BY id DESC LIMIT 1) AS last";

const GET: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether.jobs j WHERE j.id = $1 AND j.tenant = $2"
);

/// One page of a job's history: `$3` the cursor (the `seq` of the previous
/// page's last event, NULL from the start), `$4` the page size.
const EVENTS: &str = "SELECT seq, at, event, attempt, worker_id, detail FROM tether.job_events
    WHERE job_id = $1 AND tenant = $2 AND ($3::bigint IS NULL OR seq > $3)
    ORDER BY seq LIMIT $4";

/// Per-queue statistics as a LATERAL subquery over a row `q` that carries
/// `tenant` and `name`.
macro_rules! queue_stats_sql {
    ($from:literal) => {
        concat!(
            "SELECT q.name, COALESCE(c.paused, false) AS paused,
                    COALESCE(c.max_attempts, 5) AS max_attempts,
                    COALESCE(c.backoff_base_ms, 1000) AS backoff_base_ms,
                    COALESCE(c.backoff_cap_ms, 3600000) AS backoff_cap_ms,
                    COALESCE(c.default_lease_ttl_ms, 30000) AS default_lease_ttl_ms,
                    s.counts, r.ready, r.scheduled, r.oldest_ready_age_ms, e.expired_leases
             FROM ",
            $from,
            "
             LEFT JOIN tether.queues c ON c.tenant = q.tenant AND c.name = q.name
             CROSS JOIN LATERAL (
                 SELECT COALESCE(jsonb_object_agg(state, n), '{}') AS counts FROM (
                     SELECT state, count(*) AS n FROM tether.jobs
                     WHERE tenant = q.tenant AND queue = q.name GROUP BY state) g
             ) s
             CROSS JOIN LATERAL (
                 SELECT count(*) FILTER (WHERE run_at <= now()) AS ready,
                        count(*) FILTER (WHERE run_at > now()) AS scheduled,
                        COALESCE(floor(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())) * 1000), 0)::bigint
                            AS oldest_ready_age_ms
                 FROM tether.jobs
                 WHERE tenant = q.tenant AND queue = q.name AND state = 'queued'
             ) r
             CROSS JOIN LATERAL (
                 SELECT count(*) AS expired_leases FROM tether.jobs
                 WHERE tenant = q.tenant AND queue = q.name AND state = 'running'
                   AND lease_expires_at < now()
             ) e"
        )
    };
}

const QUEUE_STATS: &str = queue_stats_sql!("(SELECT $1::text AS tenant, $2::text AS name) q");
const LIST_QUEUES: &str = concat!(
    queue_stats_sql!("tether.queues q"),
    " WHERE q.tenant = $1 ORDER BY q.name COLLATE \"C\""
);

const SET_PAUSED: &str = "INSERT INTO tether.queues (tenant, name, paused) VALUES ($1, $2, $3)
    ON CONFLICT (tenant, name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()";

/// Resumes a queue that has a row; a queue without one is not paused.
const RESUME: &str = "UPDATE tether.queues SET paused = false, updated_at = now()
    WHERE tenant = $1 AND name = $2 AND paused";

/// Queue rows that hold nothing (no job in any state, not paused, every
/// setting at its default `$2`–`$5`), at most `$1`, all tenants: the
/// candidates of a removal pass.
const EMPTY_QUEUES: &str = "SELECT c.tenant, c.name FROM tether.queues c
    WHERE NOT c.paused AND c.max_attempts = $2 AND c.backoff_base_ms = $3
      AND c.backoff_cap_ms = $4 AND c.default_lease_ttl_ms = $5
      AND NOT EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = c.tenant AND j.queue = c.name)
    LIMIT $1";

/// Deletes the candidates `$2` of tenant `$1` that still hold nothing
/// (same settings `$3`–`$6`), run under the tenant's exclusive
/// `QUEUE_ROWS_LOCK`, in a statement that starts after the lock was taken,
/// so it sees every job of every enqueue that held the lock before.
const DELETE_EMPTY_QUEUES: &str = "DELETE FROM tether.queues c
    WHERE c.tenant = $1 AND c.name = ANY($2)
      AND NOT c.paused AND c.max_attempts = $3 AND c.backoff_base_ms = $4
      AND c.backoff_cap_ms = $5 AND c.default_lease_ttl_ms = $6
      AND NOT EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = c.tenant AND j.queue = c.name)";

const CONFIGURE_QUEUE: &str = "INSERT INTO tether.queues AS q
        (tenant, name, max_attempts, backoff_base_ms, backoff_cap_ms, default_lease_ttl_ms)
    VALUES ($1, $2, COALESCE($3, 5), COALESCE($4, 1000), COALESCE($5, 3600000), COALESCE($6, 30000))
    ON CONFLICT (tenant, name) DO UPDATE SET
        max_attempts = COALESCE($3, q.max_attempts),
        backoff_base_ms = COALESCE($4, q.backoff_base_ms),
        backoff_cap_ms = COALESCE($5, q.backoff_cap_ms),
        default_lease_ttl_ms = COALESCE($6, q.default_lease_ttl_ms),
        updated_at = now()";

/// One statement decides all three fates (mirrors `lifecycle::lapse_outcome`),
/// so an exhausted job can never slip back to `queued`.
const REAP: &str = "WITH lapsed AS (
        SELECT id FROM tether.jobs
        WHERE state = 'running' AND lease_expires_at < now()
        ORDER BY lease_expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                         WHEN j.attempt >= j.max_attempts THEN 'failed'
                         ELSE 'queued' END,
            run_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts
                          THEN j.run_at ELSE now() END,
            finished_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts
                               THEN now() ELSE NULL END,
            last_error = 'lease expired: worker ' || COALESCE(j.worker_id, '?')
                         || ' stopped heartbeating during attempt ' || j.attempt
                         || ' of ' || j.max_attempts,
            lease_token = NULL, lease_expires_at = NULL, updated_at = now()
        FROM lapsed
        WHERE j.id = lapsed.id
        RETURNING j.id, j.tenant, j.state, j.attempt, j.worker_id, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id, detail)
        SELECT id, tenant, updated_at, 'lease_expired', attempt, worker_id, state FROM done
    )
    SELECT state, count(*) AS n FROM done GROUP BY state";

const EXPIRE: &str = "WITH gone AS (
        SELECT id FROM tether.jobs
        WHERE state = 'queued' AND expires_at IS NOT NULL AND expires_at < now()
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = 'failed', finished_at = now(), updated_at = now(), last_error = 'expired'
        FROM gone
        WHERE j.id = gone.id
        RETURNING j.id, j.tenant, j.attempt, j.updated_at, j.expires_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT id, tenant, updated_at, 'expired', attempt,
               'not claimed before ' || to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
        FROM done
    )
    SELECT count(*) FROM done";

const PRUNE: &str = "WITH old AS (
        SELECT id FROM tether.jobs
        WHERE state IN ('succeeded', 'failed', 'cancelled')
          AND finished_at <= now() - $1 * interval '1 millisecond'
        ORDER BY finished_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    history AS (
        DELETE FROM tether.job_events e USING old WHERE e.job_id = old.id
    ),
    done AS (
        DELETE FROM tether.jobs j USING old WHERE j.id = old.id RETURNING 1
    )
    SELECT count(*) FROM done";

const ACQUIRE_LEASE: &str =
    "INSERT INTO tether.leases AS l (name, holder, token, acquired_at, expires_at)
    VALUES ($1, $2, gen_random_uuid(), now(), now() + $3 * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder, token = EXCLUDED.token,
        acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
    WHERE l.expires_at < now()
    RETURNING name, holder, token, expires_at";

const RENEW_LEASE: &str =
    "UPDATE tether.leases SET expires_at = now() + $3 * interval '1 millisecond'
    WHERE name = $1 AND token = $2
    RETURNING name, holder, token, expires_at";

const RELEASE_LEASE: &str = "DELETE FROM tether.leases WHERE name = $1 AND token = $2";

impl PgStore {
    /// Interprets the answer of a fenced statement that returns the job's
    /// columns (NULL when the fence failed) and a `lost` count.
    fn fenced_job(row: PgRow, id: Uuid) -> Result<Job> {
        let found: Option<Uuid> = row.try_get("id").map_err(db_error)?;
        if found.is_some() {
            return rows::job(&row).map_err(db_error);
        }
        let lost: i64 = row.try_get("lost").map_err(db_error)?;
        Err(if lost > 0 {
            Error::LeaseLost(id)
        } else {
            Error::JobNotFound(id)
        })
    }
}

/// Interprets the answer of cancel/replay: the job's state before the
/// statement and the updated job (`None` when the operation did not apply).
fn prior_state_and_job(row: Option<PgRow>, id: Uuid) -> Result<(Option<Job>, JobState)> {
    let row = row.ok_or(Error::JobNotFound(id))?;
    let prior: String = row.try_get("prior_state").map_err(db_error)?;
    let prior = prior
        .parse::<JobState>()
        .map_err(|e| Error::Storage(Box::new(e)))?;
    let updated: Option<Uuid> = row.try_get("id").map_err(db_error)?;
    let job = match updated {
        Some(_) => Some(rows::job(&row).map_err(db_error)?),
        None => None,
    };
    Ok((job, prior))
}

fn queue_stats_row(row: &PgRow) -> Result<QueueStats, sqlx::Error> {
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
            backoff: tether_core::Backoff {
                base_ms: row.try_get("backoff_base_ms")?,
                cap_ms: row.try_get("backoff_cap_ms")?,
            },
            default_lease_ttl_ms: row.try_get("default_lease_ttl_ms")?,
        },
    })
}

/// Creates a tenant unless the name is taken: `$1` name. No row: taken.
const CREATE_TENANT: &str = "INSERT INTO tether.tenants (id, name, created_at)
    VALUES (gen_random_uuid(), $1, now())
    ON CONFLICT (name) DO NOTHING
    RETURNING id, name, created_at";

/// The tenant named `$1`, created if missing. The no-op update on conflict
/// makes the row come back even when a concurrent caller inserted it.
const ENSURE_TENANT: &str = "INSERT INTO tether.tenants AS t (id, name, created_at)
    VALUES (gen_random_uuid(), $1, now())
    ON CONFLICT (name) DO UPDATE SET name = t.name
    RETURNING id, name, created_at";

const LIST_TENANTS: &str = "SELECT id, name, created_at FROM tether.tenants ORDER BY name";

const GET_TENANT: &str = "SELECT id, name, created_at FROM tether.tenants WHERE id = $1";

/// Inserts a key if its tenant exists and the admin rule allows it: `$1` key
/// id, `$2` tenant id, `$3` name, `$4` hash, `$5` admin, `$6` the default
/// tenant's name. No row: no such tenant; a row with a NULL id: an admin key
/// outside the default tenant (nothing inserted).
const CREATE_API_KEY: &str = "WITH t AS (
        SELECT id, name FROM tether.tenants WHERE id = $2
    ),
    k AS (
        INSERT INTO tether.api_keys (id, tenant_id, name, hash, admin, created_at)
        SELECT $1, t.id, $3, $4, $5, now() FROM t
        WHERE NOT $5 OR t.name = $6
        RETURNING id, tenant_id, name, admin, created_at, last_used_at, revoked_at
    )
    SELECT k.id, t.id AS tenant_id, t.name AS tenant, k.name, k.admin, k.created_at,
           k.last_used_at, k.revoked_at
    FROM t LEFT JOIN k ON true";

const FIND_API_KEY: &str = "SELECT k.id, k.tenant_id, t.name AS tenant, k.name, k.admin,
        k.created_at, k.last_used_at, k.revoked_at, k.hash
    FROM tether.api_keys k JOIN tether.tenants t ON t.id = k.tenant_id
    WHERE k.id = $1";

/// Revokes `$1`; a second revocation keeps the first instant.
const REVOKE_API_KEY: &str =
    "UPDATE tether.api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1";

/// A tenant's keys; one row with a NULL key id for a tenant with none, no
/// row for no tenant.
const LIST_API_KEYS: &str = "SELECT k.id, t.id AS tenant_id, t.name AS tenant, k.name, k.admin,
        k.created_at, k.last_used_at, k.revoked_at
    FROM tether.tenants t LEFT JOIN tether.api_keys k ON k.tenant_id = t.id
    WHERE t.id = $1
    ORDER BY k.created_at, k.id";

/// Records a use of key `$1` unless it is revoked or was used less than
/// `$2` ms ago (database clock): at most one write per key and interval,
/// whichever replica or request gets here first.
const TOUCH_API_KEY: &str = "UPDATE tether.api_keys SET last_used_at = now()
    WHERE id = $1 AND revoked_at IS NULL
      AND (last_used_at IS NULL OR last_used_at <= now() - $2 * interval '1 millisecond')";

/// Serialises [`Store::store_operator_key`] across replicas: without it, two
/// replicas storing two different keys at once would each miss the other's
/// uncommitted row and both keys would stay valid.
const LOCK_OPERATOR_KEYS: &str = "SELECT pg_advisory_xact_lock(hashtext('tether.operator_key'))";

/// Stores operator key `$1` in tenant `$2` with name `$3`, hash `$4`, unless
/// the id exists.
const INSERT_OPERATOR_KEY: &str = "INSERT INTO tether.api_keys
        (id, tenant_id, name, hash, admin, operator, created_at)
    VALUES ($1, $2, $3, $4, true, true, now())
    ON CONFLICT (id) DO NOTHING";

/// Revokes every unrevoked operator key but `$1`.
const REVOKE_OTHER_OPERATOR_KEYS: &str = "UPDATE tether.api_keys SET revoked_at = now()
    WHERE operator AND revoked_at IS NULL AND id <> $1
    RETURNING id";

/// Stores the server-secret check value `$1` unless one is stored; the
/// stored one comes back either way (the no-op update on conflict returns
/// the existing row, also when a concurrent caller inserted it).
const SERVER_SECRET_CHECK: &str =
    "INSERT INTO tether.server_secret AS s (id, check_hmac, created_at)
    VALUES (1, $1, now())
    ON CONFLICT (id) DO UPDATE SET check_hmac = s.check_hmac
    RETURNING check_hmac";

const READ_SERVER_SECRET_CHECK: &str = "SELECT check_hmac FROM tether.server_secret WHERE id = 1";

fn tenant_row(row: &PgRow) -> Result<Tenant, sqlx::Error> {
    Ok(Tenant {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        created_at: row.try_get("created_at")?,
    })
}

/// A key's info from a row; `None` when the key columns are NULL (outer join).
fn api_key_row(row: &PgRow) -> Result<Option<ApiKeyInfo>, sqlx::Error> {
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

fn lease_row(row: &PgRow) -> Result<Lease, sqlx::Error> {
    Ok(Lease {
        name: row.try_get("name")?,
        holder: row.try_get("holder")?,
        token: LeaseToken(row.try_get("token")?),
        expires_at: row.try_get("expires_at")?,
    })
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn enqueue(
        &self,
        tenant: &str,
        jobs: &[NewJobRef<'_>],
        max_queues: u32,
    ) -> Result<Vec<Enqueued>> {
        let answers = if jobs.len() == 1 {
            // One job is written by exactly one statement (later rounds only
            // run if the first wrote nothing; creating its queue's row is a
            // transaction of its own before), so it needs no transaction.
            let mut conn = self.pool.acquire().await.map_err(db_error)?;
            crate::enqueue::enqueue_on(&mut conn, tenant, jobs, Some(max_queues)).await?
        } else {
            // A batch may take several rounds when it races with other
            // enqueues; the transaction keeps it all-or-nothing across them.
            let mut tx = self.pool.begin().await.map_err(db_error)?;
            let answers =
                crate::enqueue::enqueue_on(&mut tx, tenant, jobs, Some(max_queues)).await?;
            tx.commit().await.map_err(db_error)?;
            answers
        };
        for (queue, jobs) in tether_core::created_by_queue(&answers) {
            self.notifications.poke(&self.pool, tenant, queue, jobs);
        }
        Ok(answers)
    }

    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        sqlx::query(CLAIM)
            .bind(tenant)
            .bind(&req.queue)
            .bind(i64::from(req.limit))
            .bind(req.lease_ttl_ms)
            .bind(&req.worker_id)
            .try_map(|row: PgRow| {
                Ok(ClaimedJob {
                    job: rows::job(&row)?,
                    lease_token: LeaseToken(row.try_get("lease_token")?),
                })
            })
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        let ids: Vec<Uuid> = items.iter().map(|h| h.id).collect();
        let tokens: Vec<Uuid> = items.iter().map(|h| h.lease_token.0).collect();
        let ttls: Vec<Option<i64>> = items.iter().map(|h| h.lease_ttl_ms).collect();
        let progress: Vec<Option<&Value>> = items.iter().map(|h| h.progress.as_ref()).collect();
        let rows = sqlx::query(HEARTBEAT_MANY)
            .bind(tenant)
            .bind(&ids)
            .bind(&tokens)
            .bind(&ttls)
            .bind(&progress)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        // Extended leases carry the token that extended them and the new
        // expiry; lost ones carry neither; any other id is not a job of this
        // tenant. An item is answered by its own token (see `complete_many`).
        let mut extended: HashMap<(Uuid, Uuid), HeartbeatAck> = HashMap::with_capacity(rows.len());
        let mut known: HashSet<Uuid> = HashSet::with_capacity(rows.len());
        for row in &rows {
            let id: Uuid = row.try_get("id").map_err(db_error)?;
            let token: Option<Uuid> = row.try_get("token").map_err(db_error)?;
            let expires: Option<chrono::DateTime<chrono::Utc>> =
                row.try_get("lease_expires_at").map_err(db_error)?;
            if let (Some(token), Some(lease_expires_at)) = (token, expires) {
                let ack = HeartbeatAck {
                    lease_expires_at,
                    cancel_requested: row.try_get("cancel_requested").map_err(db_error)?,
                };
                extended.insert((id, token), ack);
            }
            known.insert(id);
        }
        Ok(items
            .iter()
            .map(|h| match extended.get(&(h.id, h.lease_token.0)) {
                Some(ack) => Ok(*ack),
                None if known.contains(&h.id) => Err(Error::LeaseLost(h.id)),
                None => Err(Error::JobNotFound(h.id)),
            })
            .collect())
    }

    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        self.notifications.subscribe(&self.pool, tenant, queue)
    }

    async fn complete(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        result: Option<&Value>,
    ) -> Result<Job> {
        let row = sqlx::query(COMPLETE)
            .bind(id)
            .bind(tenant)
            .bind(token.0)
            .bind(result)
            .bind(Report::Complete.outcome_names())
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Self::fenced_job(row, id)
    }

    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        let ids: Vec<Uuid> = items.iter().map(|c| c.id).collect();
        let tokens: Vec<Uuid> = items.iter().map(|c| c.lease_token.0).collect();
        let results: Vec<Option<&Value>> = items.iter().map(|c| c.result.as_ref()).collect();
        let rows = sqlx::query(COMPLETE_MANY)
            .bind(tenant)
            .bind(&ids)
            .bind(&tokens)
            .bind(&results)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        // The statement names the completed jobs with the token that did it
        // and the ones whose lease was lost (no token); any other id is not
        // a job of this tenant. An item is answered by its own token, so a
        // wrong token beside the right one for the same job is refused.
        let mut done: HashSet<(Uuid, Uuid)> = HashSet::with_capacity(rows.len());
        let mut known: HashSet<Uuid> = HashSet::with_capacity(rows.len());
        for row in &rows {
            let id: Uuid = row.try_get("id").map_err(db_error)?;
            if let Some(token) = row.try_get::<Option<Uuid>, _>("token").map_err(db_error)? {
                done.insert((id, token));
            }
            known.insert(id);
        }
        Ok(items
            .iter()
            .map(|c| {
                if done.contains(&(c.id, c.lease_token.0)) {
                    Ok(())
                } else if known.contains(&c.id) {
                    Err(Error::LeaseLost(c.id))
                } else {
                    Err(Error::JobNotFound(c.id))
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
        let row = sqlx::query(FAIL)
            .bind(id)
            .bind(tenant)
            .bind(token.0)
            .bind(&failure.error)
            .bind(failure.retry_after_ms)
            .bind(failure.fatal)
            .bind(failure.cancelled)
            .bind(jitter)
            .bind(Report::Fail.outcome_names())
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Self::fenced_job(row, id)
    }

    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<Job> {
        let row = sqlx::query(SNOOZE)
            .bind(id)
            .bind(tenant)
            .bind(token.0)
            .bind(delay_ms)
            .bind(Report::Snooze.outcome_names())
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        let job = Self::fenced_job(row, id)?;
        if delay_ms == 0 && job.state == JobState::Queued {
            // Handed back (e.g. by a worker shutting down): others may take it now.
            self.notifications.poke(&self.pool, tenant, &job.queue, 1);
        }
        Ok(job)
    }

    async fn cancel(&self, tenant: &str, id: Uuid) -> Result<Job> {
        let row = sqlx::query(CANCEL)
            .bind(id)
            .bind(tenant)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        match prior_state_and_job(row, id)? {
            (Some(job), _) => Ok(job),
            (None, JobState::Running) => self.get(tenant, id).await,
            (None, state) => Err(Error::not_cancellable(id, state)),
        }
    }

    async fn replay(
        &self,
        tenant: &str,
        id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Job> {
        let row = sqlx::query(REPLAY)
            .bind(id)
            .bind(tenant)
            .bind(expires_at)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::replay_unique_key_held(id)
                } else {
                    db_error(e)
                }
            })?;
        match prior_state_and_job(row, id)? {
            (Some(job), _) => {
                self.notifications.poke(&self.pool, tenant, &job.queue, 1);
                Ok(job)
            }
            (None, state) => Err(Error::not_replayable(id, state)),
        }
    }

    async fn replay_many(&self, tenant: &str, filter: &ReplayFilter) -> Result<BulkReplayed> {
        let limit = filter.limit.unwrap_or(1_000);
        let row = sqlx::query(REPLAY_MANY)
            .bind(tenant)
            .bind(&filter.queue)
            .bind(filter.state.as_str())
            .bind(filter.kind.as_deref())
            .bind(i64::from(limit))
            .bind(filter.cursor)
            .bind(filter.expires_at)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::replay_raced()
                } else {
                    db_error(e)
                }
            })?;
        let replayed: i64 = row.try_get("replayed").map_err(db_error)?;
        let scanned: i64 = row.try_get("scanned").map_err(db_error)?;
        let last: Option<Uuid> = row.try_get("last").map_err(db_error)?;
        if replayed > 0 {
            self.notifications
                .poke(&self.pool, tenant, &filter.queue, replayed as usize);
        }
        Ok(BulkReplayed {
            replayed: replayed as u64,
            next_cursor: if scanned == i64::from(limit) {
                last
            } else {
                None
            },
        })
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Job> {
        sqlx::query(GET)
            .bind(id)
            .bind(tenant)
            .try_map(|row| rows::job(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or(Error::JobNotFound(id))
    }

    async fn list(&self, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
        let limit = filter.limit.unwrap_or(50) as usize;
        let mut q = QueryBuilder::new(concat!(
            "SELECT ",
            job_columns!(),
            " FROM tether.jobs j WHERE j.tenant = "
        ));
        q.push_bind(tenant);
        if let Some(queue) = &filter.queue {
            q.push(" AND j.queue = ").push_bind(queue);
        }
        if let Some(state) = filter.state {
            q.push(" AND j.state = ").push_bind(state.as_str());
        }
        if let Some(kind) = &filter.kind {
            q.push(" AND j.kind = ").push_bind(kind);
        }
        if let Some(tag) = &filter.tag {
            q.push(" AND j.tags @> ARRAY[")
                .push_bind(tag)
                .push("]::text[]");
        }
        if let Some(cursor) = filter.cursor {
            q.push(" AND j.id < ").push_bind(cursor);
        }
        q.push(" ORDER BY j.id DESC LIMIT ").push_bind(limit as i64);
        let jobs: Vec<Job> = q
            .build()
            .try_map(|row| rows::job(&row))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        let next_cursor = if jobs.len() == limit {
            jobs.last().map(|j| j.id)
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
        let rows: Vec<(i64, JobEvent)> = sqlx::query(EVENTS)
            .bind(id)
            .bind(tenant)
            .bind(cursor.map(|c| c.0))
            .bind(i64::from(limit))
            .try_map(|row: PgRow| {
                let event: String = row.try_get("event")?;
                let seq: i64 = row.try_get("seq")?;
                Ok((
                    seq,
                    JobEvent {
                        at: row.try_get("at")?,
                        event: event
                            .parse::<EventKind>()
                            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                        attempt: row.try_get("attempt")?,
                        worker_id: row.try_get("worker_id")?,
                        detail: row.try_get("detail")?,
                    },
                ))
            })
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        if rows.is_empty() {
            // Every job has at least its `enqueued` event, but a page past
            // the end has none: tell "no such job" apart.
            self.get(tenant, id).await?;
        }
        let next_cursor = if rows.len() == limit as usize {
            rows.last().map(|(seq, _)| EventCursor(*seq))
        } else {
            None
        };
        Ok(EventPage {
            events: rows.into_iter().map(|(_, e)| e).collect(),
            next_cursor,
        })
    }

    async fn queue_stats(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        sqlx::query(QUEUE_STATS)
            .bind(tenant)
            .bind(queue)
            .try_map(|row| queue_stats_row(&row))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn list_queues(&self, tenant: &str) -> Result<Vec<QueueStats>> {
        sqlx::query(LIST_QUEUES)
            .bind(tenant)
            .try_map(|row| queue_stats_row(&row))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn set_paused(
        &self,
        tenant: &str,
        queue: &str,
        paused: bool,
        max_queues: u32,
    ) -> Result<QueueStats> {
        if !paused {
            // A queue without a row is not paused: resuming creates none.
            sqlx::query(RESUME)
                .bind(tenant)
                .bind(queue)
                .execute(&self.pool)
                .await
                .map_err(db_error)?;
            return self.queue_stats(tenant, queue).await;
        }
        // The row is created (within the limit) and set in one
        // transaction, so a removal pass never sees it unpaused and empty.
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        crate::enqueue::register_queues(&mut tx, tenant, &[queue], Some(max_queues)).await?;
        sqlx::query(SET_PAUSED)
            .bind(tenant)
            .bind(queue)
            .bind(paused)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        self.queue_stats(tenant, queue).await
    }

    async fn configure_queue(
        &self,
        tenant: &str,
        queue: &str,
        patch: &QueueConfigPatch,
        max_queues: u32,
    ) -> Result<QueueStats> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        crate::enqueue::register_queues(&mut tx, tenant, &[queue], Some(max_queues)).await?;
        sqlx::query(CONFIGURE_QUEUE)
            .bind(tenant)
            .bind(queue)
            .bind(patch.max_attempts)
            .bind(patch.backoff.map(|b| b.base_ms))
            .bind(patch.backoff.map(|b| b.cap_ms))
            .bind(patch.default_lease_ttl_ms)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        self.queue_stats(tenant, queue).await
    }

    async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        let d = QueueConfig::default();
        let candidates: Vec<(String, String)> = sqlx::query_as(EMPTY_QUEUES)
            .bind(i64::from(batch))
            .bind(d.max_attempts)
            .bind(d.backoff.base_ms)
            .bind(d.backoff.cap_ms)
            .bind(d.default_lease_ttl_ms)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        let mut by_tenant: HashMap<String, Vec<String>> = HashMap::new();
        for (tenant, name) in candidates {
            by_tenant.entry(tenant).or_default().push(name);
        }
        let mut removed = 0;
        for (tenant, names) in by_tenant {
            let mut tx = self.pool.begin().await.map_err(db_error)?;
            // Only while no enqueue of the tenant is in flight. Trying, not
            // waiting: a waiting exclusive request would queue every new
            // enqueue of the tenant behind an enqueue in a long caller
            // transaction. A busy tenant is tried again next pass.
            let locked: bool =
                sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1, hashtext($2))")
                    .bind(crate::enqueue::QUEUE_ROWS_LOCK)
                    .bind(&tenant)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error)?;
            if !locked {
                continue;
            }
            let done = sqlx::query(DELETE_EMPTY_QUEUES)
                .bind(&tenant)
                .bind(&names)
                .bind(d.max_attempts)
                .bind(d.backoff.base_ms)
                .bind(d.backoff.cap_ms)
                .bind(d.default_lease_ttl_ms)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            removed += done.rows_affected();
        }
        Ok(removed)
    }

    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        let rows = sqlx::query(REAP)
            .bind(i64::from(batch))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        let mut report = ReapReport::default();
        for row in rows {
            let state: String = row.try_get("state").map_err(db_error)?;
            let n: i64 = row.try_get("n").map_err(db_error)?;
            match state.as_str() {
                "failed" => report.failed += n as u64,
                "cancelled" => report.cancelled += n as u64,
                _ => report.requeued += n as u64,
            }
        }
        Ok(report)
    }

    async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(EXPIRE)
            .bind(i64::from(batch))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(n as u64)
    }

    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(PRUNE)
            .bind(retention_ms)
            .bind(i64::from(batch))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(n as u64)
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>> {
        sqlx::query(ACQUIRE_LEASE)
            .bind(name)
            .bind(holder)
            .bind(ttl_ms)
            .try_map(|row| lease_row(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        sqlx::query(RENEW_LEASE)
            .bind(name)
            .bind(token.0)
            .bind(ttl_ms)
            .try_map(|row| lease_row(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::NamedLeaseLost(name.to_owned()))
    }

    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        sqlx::query(RELEASE_LEASE)
            .bind(name)
            .bind(token.0)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        sqlx::query(CREATE_TENANT)
            .bind(name)
            .try_map(|row| tenant_row(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::tenant_name_taken(name))
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        sqlx::query(LIST_TENANTS)
            .try_map(|row| tenant_row(&row))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn get_tenant(&self, id: Uuid) -> Result<Tenant> {
        sqlx::query(GET_TENANT)
            .bind(id)
            .try_map(|row| tenant_row(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::tenant_not_found(id))
    }

    async fn ensure_tenant(&self, name: &str) -> Result<Tenant> {
        sqlx::query(ENSURE_TENANT)
            .bind(name)
            .try_map(|row| tenant_row(&row))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn create_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<ApiKeyInfo> {
        let row = sqlx::query(CREATE_API_KEY)
            .bind(key_id)
            .bind(tenant_id)
            .bind(name)
            .bind(&hash[..])
            .bind(admin)
            .bind(DEFAULT_TENANT)
            .try_map(|row| api_key_row(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        match row {
            None => Err(Error::tenant_not_found(tenant_id)),
            Some(None) => Err(Error::admin_key_outside_default_tenant()),
            Some(Some(info)) => Ok(info),
        }
    }

    async fn find_api_key(&self, key_id: Uuid) -> Result<Option<(ApiKeyInfo, [u8; 32])>> {
        let row = sqlx::query(FIND_API_KEY)
            .bind(key_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let info = api_key_row(&row)
            .map_err(db_error)?
            .ok_or_else(|| Error::Storage("api key row without id".into()))?;
        let hash: Vec<u8> = row.try_get("hash").map_err(db_error)?;
        let hash: [u8; 32] = hash.try_into().map_err(|_| {
            Error::Storage(format!("api key {key_id}: hash is not 32 bytes").into())
        })?;
        Ok(Some((info, hash)))
    }

    async fn revoke_api_key(&self, key_id: Uuid) -> Result<()> {
        let done = sqlx::query(REVOKE_API_KEY)
            .bind(key_id)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::api_key_not_found(key_id));
        }
        Ok(())
    }

    async fn list_api_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
        let rows = sqlx::query(LIST_API_KEYS)
            .bind(tenant_id)
            .try_map(|row| api_key_row(&row))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        if rows.is_empty() {
            return Err(Error::tenant_not_found(tenant_id));
        }
        Ok(rows.into_iter().flatten().collect())
    }

    async fn touch_api_key(&self, key_id: Uuid, min_interval_ms: i64) -> Result<bool> {
        let done = sqlx::query(TOUCH_API_KEY)
            .bind(key_id)
            .bind(min_interval_ms)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected() > 0)
    }

    async fn store_operator_key(
        &self,
        tenant_id: Uuid,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<OperatorKeySetup> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        sqlx::query(LOCK_OPERATOR_KEYS)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        sqlx::query(INSERT_OPERATOR_KEY)
            .bind(key_id)
            .bind(tenant_id)
            .bind(OPERATOR_KEY_NAME)
            .bind(&hash[..])
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let key = sqlx::query(FIND_API_KEY)
            .bind(key_id)
            .try_map(|row| api_key_row(&row))
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::Storage("operator key row without id".into()))?;
        let revoked = if key.is_revoked() {
            Vec::new()
        } else {
            sqlx::query_scalar(REVOKE_OTHER_OPERATOR_KEYS)
                .bind(key_id)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error)?
        };
        tx.commit().await.map_err(db_error)?;
        Ok(OperatorKeySetup { key, revoked })
    }

    async fn server_secret_check(&self, check: [u8; 32], record: bool) -> Result<Option<[u8; 32]>> {
        let stored: Option<Vec<u8>> = if record {
            sqlx::query_scalar(SERVER_SECRET_CHECK)
                .bind(&check[..])
                .fetch_optional(&self.pool)
                .await
        } else {
            sqlx::query_scalar(READ_SERVER_SECRET_CHECK)
                .fetch_optional(&self.pool)
                .await
        }
        .map_err(db_error)?;
        stored
            .map(|s| s.try_into())
            .transpose()
            .map_err(|_| Error::Storage("server secret check is not 32 bytes".into()))
    }

    async fn create_schedule(
        &self,
        tenant: &str,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
        max_schedules: u32,
    ) -> Result<Schedule> {
        self.schedule_create(tenant, spec, next_run_at, max_schedules)
            .await
    }

    async fn get_schedule(&self, tenant: &str, id: Uuid) -> Result<Schedule> {
        self.schedule_get(tenant, id).await
    }

    async fn list_schedules(&self, tenant: &str) -> Result<Vec<Schedule>> {
        self.schedule_list(tenant).await
    }

    async fn update_schedule(
        &self,
        tenant: &str,
        id: Uuid,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<Schedule> {
        self.schedule_update(tenant, id, spec, next_run_at).await
    }

    async fn delete_schedule(&self, tenant: &str, id: Uuid) -> Result<()> {
        self.schedule_delete(tenant, id).await
    }

    async fn schedule_runs(&self, tenant: &str, id: Uuid, limit: u32) -> Result<Vec<ScheduleRun>> {
        self.schedule_runs_of(tenant, id, limit).await
    }

    async fn due_schedules(&self, limit: u32) -> Result<(DateTime<Utc>, Vec<Schedule>)> {
        self.schedules_due(limit).await
    }

    async fn next_schedule_due(&self) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
        self.schedule_next_due().await
    }

    async fn fire_schedule(&self, fire: &Fire, job_id: Uuid) -> Result<FireOutcome> {
        self.schedule_fire(fire, job_id).await
    }

    async fn trigger_schedule(&self, tenant: &str, id: Uuid, job: NewJobRef<'_>) -> Result<Job> {
        self.schedule_trigger(tenant, id, job).await
    }

    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        self.schedule_runs_prune(retention_ms, batch).await
    }
}

#[cfg(feature = "testing")]
impl PgStore {
    /// Testing aid: moves a running job's lease expiry into the past, as if
    /// its TTL had passed without a heartbeat.
    pub async fn lapse_lease(&self, id: Uuid) -> Result<()> {
        sqlx::query(
            "UPDATE tether.jobs SET lease_expires_at = now() - interval '1 millisecond'
             WHERE id = $1 AND state = 'running'",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    /// Testing aid: lets a named lease lapse, as if its holder had died.
    pub async fn lapse_named_lease(&self, name: &str) -> Result<()> {
        sqlx::query(
            "UPDATE tether.leases SET expires_at = now() - interval '1 millisecond' WHERE name = $1",
        )
        .bind(name)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    /// Testing aid: makes a queued job due now, as if its delay had passed.
    pub async fn make_due(&self, id: Uuid) -> Result<()> {
        sqlx::query("UPDATE tether.jobs SET run_at = now() WHERE id = $1 AND state = 'queued'")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }
}
