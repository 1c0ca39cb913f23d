//! Statements of `jobs.rs`: reading jobs and their history, cancel and
//! replay.

pub(crate) const SELECT_JOB: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether.jobs j WHERE j.id = $1 AND j.tenant = $2"
);

/// One page of a job's history: `$3` the cursor (the `seq` of the previous
/// page's last event, NULL from the start), `$4` the page size.
pub(crate) const EVENTS: &str =
    "SELECT seq, at, event, attempt, worker_id, detail FROM tether.job_events
    WHERE job_id = $1 AND tenant = $2 AND ($3::bigint IS NULL OR seq > $3)
    ORDER BY seq LIMIT $4";

pub(crate) const CANCEL: &str = concat!(
    "WITH cur AS (
        SELECT id, state, cancel_requested FROM tether.jobs
        WHERE id = $1 AND tenant = $2
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN cur.state IN ('queued', 'waiting') THEN 'cancelled' ELSE j.state END,
            cancel_requested = (cur.state = 'running'),
            finished_at = CASE WHEN cur.state IN ('queued', 'waiting') THEN now() ELSE j.finished_at END,
            waiting_on = 0, updated_at = now()
        FROM cur
        WHERE j.id = cur.id
          AND (cur.state IN ('queued', 'waiting')
               OR (cur.state = 'running' AND NOT cur.cancel_requested))
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

/// Replays one finished job (any final state: a succeeded one runs
/// again): `$3` its new `expires_at` (NULL clears it, or an
/// expired job would expire again at once). A job with dependencies goes
/// back to `waiting`, to be settled against them (`workflows::enter_waiting`).
pub(crate) const REPLAY: &str = concat!(
    "WITH cur AS (
        SELECT id, state FROM tether.jobs WHERE id = $1 AND tenant = $2 FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN j.depends_on IS NULL THEN 'queued' ELSE 'waiting' END,
            attempt = 0, run_at = now(), cancel_requested = false,
            finished_at = NULL, result = NULL, lease_token = NULL, lease_expires_at = NULL,
            progress = NULL, expires_at = $3, updated_at = now()
        FROM cur
        WHERE j.id = cur.id AND cur.state IN ('succeeded', 'failed', 'cancelled')
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
/// (the next round's cursor), and the replayed jobs that went back to
/// `waiting` (see [`REPLAY`]).
pub(crate) const REPLAY_MANY: &str = "WITH candidates AS (
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
                             AND a.state IN ('waiting', 'queued', 'running'))
         ORDER BY c.unique_key, c.id)
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN j.depends_on IS NULL THEN 'queued' ELSE 'waiting' END,
            attempt = 0, run_at = now(), cancel_requested = false,
            finished_at = NULL, result = NULL, lease_token = NULL, lease_expires_at = NULL,
            progress = NULL, expires_at = $7, updated_at = now()
        FROM chosen
        WHERE j.id = chosen.id
        RETURNING j.id, j.tenant, j.updated_at, j.state
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'replayed', 0 FROM done
    )
    SELECT (SELECT count(*) FROM done) AS replayed,
           (SELECT count(*) FROM candidates) AS scanned,
           (SELECT id FROM candidates ORDER BY id DESC LIMIT 1) AS last,
           ARRAY(SELECT id FROM done WHERE state = 'waiting') AS waiting";

/// The workers holding running jobs of tenant `$1`.
/// Records worker `$2`'s announcement (`$3` queues, `$4` concurrency, `$5`
/// sdk, `$6` version, `$7` host, `$8` pid), seen now, and forgets the
/// tenant's others not seen for `$9` ms. A worker new to the tenant is
/// written only while fewer than `$10` others are remembered: no row
/// answered means the limit.
pub(crate) const ANNOUNCE_WORKER: &str = "WITH forgotten AS (
        DELETE FROM tether.workers
        WHERE tenant = $1 AND worker_id <> $2
          AND last_seen_at < now() - $9 * interval '1 millisecond'
    ),
    live AS (
        SELECT count(*) AS n FROM tether.workers
        WHERE tenant = $1 AND worker_id <> $2
          AND last_seen_at >= now() - $9 * interval '1 millisecond'
    )
    INSERT INTO tether.workers AS w (tenant, worker_id, queues, concurrency, sdk, version, host,
                                    pid, last_seen_at)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, now() FROM live
    WHERE live.n < $10
       OR EXISTS (SELECT 1 FROM tether.workers WHERE tenant = $1 AND worker_id = $2)
    ON CONFLICT (tenant, worker_id) DO UPDATE SET
        queues = excluded.queues, concurrency = excluded.concurrency, sdk = excluded.sdk,
        version = excluded.version, host = excluded.host, pid = excluded.pid,
        last_seen_at = excluded.last_seen_at
    RETURNING w.last_seen_at";

/// Marks announced worker `$2` seen now.
pub(crate) const TOUCH_WORKER: &str =
    "UPDATE tether.workers SET last_seen_at = now() WHERE tenant = $1 AND worker_id = $2";

/// The tenant's announced workers seen within `$2` ms, by id.
pub(crate) const ANNOUNCED_WORKERS: &str = "SELECT worker_id, queues, concurrency, sdk, version,
        host, pid, last_seen_at
    FROM tether.workers
    WHERE tenant = $1 AND last_seen_at >= now() - $2 * interval '1 millisecond'
    ORDER BY worker_id COLLATE \"C\"";

pub(crate) const WORKERS: &str = "SELECT worker_id,
        array_agg(DISTINCT queue ORDER BY queue) AS queues,
        count(*) AS running,
        max(coalesce(heartbeat_at, started_at)) AS last_heartbeat_at
    FROM tether.jobs
    WHERE tenant = $1 AND state = 'running' AND worker_id IS NOT NULL
    GROUP BY worker_id
    ORDER BY worker_id";
