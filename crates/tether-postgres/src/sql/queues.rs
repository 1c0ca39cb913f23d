//! Statements of `queues.rs`.

/// How many jobs of queue `q` are in `$state` (a literal, so that the
/// state's partial index answers).
macro_rules! count_in_state {
    ($state:literal) => {
        concat!(
            "SELECT '",
            $state,
            "' AS state, count(*) AS n FROM tether.jobs
             WHERE tenant = q.tenant AND queue = q.name AND state = '",
            $state,
            "'"
        )
    };
}

/// Per-queue statistics as a LATERAL subquery over a row `q` that carries
/// `tenant` and `name`. A queue without a row has the defaults of
/// `tether_core::lifecycle` (from its `default_*!` macros).
macro_rules! queue_stats_sql {
    ($from:literal) => {
        concat!(
            "SELECT q.name, COALESCE(c.paused, false) AS paused,
                    COALESCE(c.max_attempts, ",
            tether_core::default_max_attempts!(),
            ") AS max_attempts,
                    COALESCE(c.backoff_base_ms, ",
            tether_core::default_backoff_base_ms!(),
            ") AS backoff_base_ms,
                    COALESCE(c.backoff_cap_ms, ",
            tether_core::default_backoff_cap_ms!(),
            ") AS backoff_cap_ms,
                    COALESCE(c.default_lease_ttl_ms, ",
            tether_core::default_lease_ttl_ms!(),
            ") AS default_lease_ttl_ms,
                    c.max_running, c.rate_limit_count, c.rate_limit_period_ms, c.key_max_running,
                    COALESCE(c.fair, false) AS fair, s.counts, r.ready, r.scheduled, r.oldest_ready_age_ms, e.expired_leases
             FROM ",
            $from,
            "
             LEFT JOIN tether.queues c ON c.tenant = q.tenant AND c.name = q.name
             CROSS JOIN LATERAL (
                 SELECT COALESCE(jsonb_object_agg(state, n) FILTER (WHERE n > 0), '{}') AS counts
                 FROM (",
            count_in_state!("waiting"), " UNION ALL ",
            count_in_state!("queued"), " UNION ALL ",
            count_in_state!("running"), " UNION ALL ",
            count_in_state!("succeeded"), " UNION ALL ",
            count_in_state!("failed"), " UNION ALL ",
            count_in_state!("cancelled"),
            ") g
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

pub(crate) const QUEUE_STATS: &str =
    queue_stats_sql!("(SELECT $1::text AS tenant, $2::text AS name) q");

pub(crate) const LIST_QUEUES: &str = concat!(
    queue_stats_sql!("tether.queues q"),
    " WHERE q.tenant = $1 ORDER BY q.name COLLATE \"C\""
);

pub(crate) const SET_PAUSED: &str =
    "INSERT INTO tether.queues (tenant, name, paused) VALUES ($1, $2, $3)
    ON CONFLICT (tenant, name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()";

/// Resumes a queue that has a row; a queue without one is not paused.
pub(crate) const RESUME: &str = "UPDATE tether.queues SET paused = false, updated_at = now()
    WHERE tenant = $1 AND name = $2 AND paused";

/// Upserts queue settings: patch fields `$3`–`$6` where set, else the
/// current value (or, for a new row, the defaults of `tether_core::lifecycle`,
/// from its macros); each flow-control setting becomes its new value (NULL: no
/// limit) when its flag is set: `max_running` `$8` when `$7`, the rate limit
/// `$10`/`$11` when `$9`, `key_max_running` `$13` when `$12`; `fair` becomes
/// `$14` unless NULL.
pub(crate) const CONFIGURE_QUEUE: &str = concat!(
    "INSERT INTO tether.queues AS q
        (tenant, name, max_attempts, backoff_base_ms, backoff_cap_ms, default_lease_ttl_ms,
         max_running, rate_limit_count, rate_limit_period_ms, key_max_running, fair)
    VALUES ($1, $2, COALESCE($3, ",
    tether_core::default_max_attempts!(),
    "), COALESCE($4, ",
    tether_core::default_backoff_base_ms!(),
    "), COALESCE($5, ",
    tether_core::default_backoff_cap_ms!(),
    "), COALESCE($6, ",
    tether_core::default_lease_ttl_ms!(),
    "),
            CASE WHEN $7 THEN $8::integer END, CASE WHEN $9 THEN $10::integer END,
            CASE WHEN $9 THEN $11::bigint END, CASE WHEN $12 THEN $13::integer END,
            COALESCE($14::boolean, false))
    ON CONFLICT (tenant, name) DO UPDATE SET
        max_attempts = COALESCE($3, q.max_attempts),
        backoff_base_ms = COALESCE($4, q.backoff_base_ms),
        backoff_cap_ms = COALESCE($5, q.backoff_cap_ms),
        default_lease_ttl_ms = COALESCE($6, q.default_lease_ttl_ms),
        max_running = CASE WHEN $7 THEN $8::integer ELSE q.max_running END,
        rate_limit_count = CASE WHEN $9 THEN $10::integer ELSE q.rate_limit_count END,
        rate_limit_period_ms = CASE WHEN $9 THEN $11::bigint ELSE q.rate_limit_period_ms END,
        key_max_running = CASE WHEN $12 THEN $13::integer ELSE q.key_max_running END,
        fair = COALESCE($14::boolean, q.fair),
        updated_at = now()"
);

/// Removes an empty queue's row (`$1` tenant, `$2` queue), run under the
/// tenant's queue-rows lock held exclusively; answers one row when it did.
pub(crate) const DELETE_EMPTY_QUEUE: &str = "DELETE FROM tether.queues q
    WHERE q.tenant = $1 AND q.name = $2
      AND NOT EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = $1 AND j.queue = $2)
    RETURNING 1";

/// How many jobs a queue holds, and whether it has a row.
pub(crate) const QUEUE_HOLDS: &str = "SELECT
    (SELECT count(*) FROM tether.jobs j WHERE j.tenant = $1 AND j.queue = $2) AS jobs,
    EXISTS (SELECT 1 FROM tether.queues q WHERE q.tenant = $1 AND q.name = $2) AS has_row";

/// The database's clock.
pub(crate) const DB_NOW: &str = "SELECT statement_timestamp()";

/// Outcome events of a queue's jobs per minute since `$3` (history is
/// filed by tenant and job; the job names the queue).
pub(crate) const THROUGHPUT_EVENTS: &str = "SELECT date_trunc('minute', e.at) AS minute,
        e.event, count(*) AS n
    FROM tether.job_events e
    JOIN tether.jobs j ON j.id = e.job_id
    WHERE e.at >= $3 AND e.tenant = $1 AND j.tenant = $1 AND j.queue = $2
      AND e.event IN ('succeeded', 'failed', 'retry_scheduled', 'cancelled')
    GROUP BY 1, 2";

/// Wait and run percentiles (ms) of the last attempt of the queue's jobs
/// that finished since `$3`.
pub(crate) const THROUGHPUT_TIMES: &str = "SELECT count(*) AS n,
        percentile_disc(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY
            greatest(0, round(extract(epoch FROM started_at - run_at) * 1000)))::bigint[] AS wait,
        percentile_disc(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY
            greatest(0, round(extract(epoch FROM finished_at - started_at) * 1000)))::bigint[] AS run
    FROM tether.jobs
    WHERE tenant = $1 AND queue = $2 AND state IN ('succeeded', 'failed')
      AND finished_at >= $3 AND started_at IS NOT NULL";
