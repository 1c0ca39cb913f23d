//! Statements of `maintenance.rs`: bounded passes over every tenant, and
//! the named leases.

/// Queue rows that hold nothing (no job in any state, not paused, every
/// setting at its default `$2`–`$5`, no flow control), at most `$1`, all tenants: the
/// candidates of a removal pass.
pub(crate) const EMPTY_QUEUES: &str = concat!(
    "SELECT q.tenant, q.name FROM tether.queues q
    WHERE NOT q.paused AND q.max_attempts = $2 AND q.backoff_base_ms = $3
      AND q.backoff_cap_ms = $4 AND q.default_lease_ttl_ms = $5
      AND q.max_running IS NULL AND q.rate_limit_count IS NULL AND q.key_max_running IS NULL
      AND NOT q.fair
      AND NOT ",
    queue_holds_jobs!(),
    " LIMIT $1"
);

/// Deletes the candidates `$2` of tenant `$1` that still hold nothing
/// (same settings `$3`–`$6`), run under the tenant's exclusive
/// `QUEUE_ROWS_LOCK`, in a statement that starts after the lock was taken,
/// so it sees every job of every enqueue that held the lock before.
pub(crate) const DELETE_EMPTY_QUEUES: &str = concat!(
    "DELETE FROM tether.queues q
    WHERE ",
    maintenance_fence!("$7", "$8"),
    " AND q.tenant = $1 AND q.name = ANY($2)
      AND NOT q.paused AND q.max_attempts = $3 AND q.backoff_base_ms = $4
      AND q.backoff_cap_ms = $5 AND q.default_lease_ttl_ms = $6
      AND q.max_running IS NULL AND q.rate_limit_count IS NULL AND q.key_max_running IS NULL
      AND NOT q.fair
      AND NOT ",
    queue_holds_jobs!()
);

/// One statement decides all three fates (mirrors `lifecycle::lapse_outcome`),
/// so an exhausted job can never slip back to `queued`. Fenced by `$2`, `$3`.
pub(crate) const REAP: &str = concat!(
    "WITH lapsed AS (
        SELECT id FROM tether.jobs
        WHERE ",
    maintenance_fence!("$2", "$3"),
    " AND state = 'running' AND lease_expires_at < now()
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
        RETURNING j.id, j.tenant, j.queue, j.state, j.attempt, j.worker_id, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id, detail)
        SELECT id, tenant, updated_at, 'lease_expired', attempt, worker_id, state FROM done
    )
    SELECT tenant, queue, state, count(*) AS n FROM done GROUP BY tenant, queue, state"
);

/// Fenced by `$2`, `$3`.
pub(crate) const EXPIRE: &str = concat!(
    "WITH gone AS (
        SELECT id FROM tether.jobs
        WHERE ",
    maintenance_fence!("$2", "$3"),
    " AND state = 'queued' AND expires_at IS NOT NULL AND expires_at < now()
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
    SELECT count(*) FROM done"
);

/// Up to $2 jobs that finished at least $1 ms ago, oldest first, with their
/// history; the transactions whose events went are kept for the feed's
/// readers (`tether.feed_pruned_xids`, see `feed.rs`). The oldest are found on
/// the `jobs_finished` index and deleted by `ctid` (a TID scan: the row is
/// already locked, so no second walk of the primary key per row); their history by `job_id` on its primary key. Both
/// deletes take an array, not a join with `old`: joined, the planner chose a
/// hash join over a sequential scan of all of `job_events` once it held
/// millions of rows (600 ms for 500 jobs, against 40 ms for 5 000).
/// Fenced by `$3`, `$4`.
pub(crate) const PRUNE: &str = concat!(
    "WITH old AS (
        SELECT ctid, id FROM tether.jobs
        WHERE ",
    maintenance_fence!("$3", "$4"),
    " AND state IN ('succeeded', 'failed', 'cancelled')
          AND finished_at <= now() - $1 * interval '1 millisecond'
        ORDER BY finished_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    history AS (
        DELETE FROM tether.job_events WHERE job_id = ANY (ARRAY(SELECT id FROM old))
        RETURNING xid
    ),
    announced AS (
        INSERT INTO tether.feed_pruned_xids (xid)
        SELECT DISTINCT xid FROM history WHERE xid IS NOT NULL
        ON CONFLICT DO NOTHING
    ),
    edges AS (
        DELETE FROM tether.job_dependencies WHERE job_id = ANY (ARRAY(SELECT id FROM old))
    ),
    done AS (
        DELETE FROM tether.jobs WHERE ctid = ANY (ARRAY(SELECT ctid FROM old)) RETURNING 1
    )
    SELECT count(*) FROM done"
);

/// Folds all but the newest $1 transactions of `feed_pruned_xids` into
/// `feed_pruned.floor` (migration 18).
pub(crate) const FOLD_PRUNED: &str = "
    WITH gone AS (
        DELETE FROM tether.feed_pruned_xids
        WHERE xid <= (SELECT xid FROM tether.feed_pruned_xids ORDER BY xid DESC OFFSET $1 LIMIT 1)
        RETURNING xid
    )
    UPDATE tether.feed_pruned SET floor = greatest(floor, (SELECT max(xid) FROM gone))
    WHERE EXISTS (SELECT 1 FROM gone)";

pub(crate) const ACQUIRE_LEASE: &str =
    "INSERT INTO tether.leases AS l (name, holder, token, acquired_at, expires_at)
    VALUES ($1, $2, gen_random_uuid(), now(), now() + $3 * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder, token = EXCLUDED.token,
        acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
    WHERE l.expires_at < now()
    RETURNING name, holder, token, expires_at";

pub(crate) const RENEW_LEASE: &str =
    "UPDATE tether.leases SET expires_at = now() + $3 * interval '1 millisecond'
    WHERE name = $1 AND token = $2
    RETURNING name, holder, token, expires_at";

pub(crate) const RELEASE_LEASE: &str = "DELETE FROM tether.leases WHERE name = $1 AND token = $2";
