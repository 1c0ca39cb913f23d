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
pub(crate) const WORKERS: &str = "SELECT worker_id,
        array_agg(DISTINCT queue ORDER BY queue) AS queues,
        count(*) AS running,
        max(coalesce(heartbeat_at, started_at)) AS last_heartbeat_at
    FROM tether.jobs
    WHERE tenant = $1 AND state = 'running' AND worker_id IS NOT NULL
    GROUP BY worker_id
    ORDER BY worker_id";
